"""Kernel: one shared shape over all loads and stores of a kernel AST, with a kind for every axis.

Every optimization splits or reorders axes of that shared shape; splitting reshapes every view of the kernel at
once, so the lowerer sees the same axes everywhere. Axes are kept in kind order:
global/thread, local, group, mid, reduce, unroll, upcast.
"""
from __future__ import annotations

import copy
import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast

from lazytensor.dtype import DType, PtrDType
from lazytensor.helpers import colored, prod, to_function_name
from lazytensor.opt.optops import AxisKind, KernelOptError, Opt, OptOps
from lazytensor.renderer import Fragment, Renderer, TensorCore
from lazytensor.shape.view import ShapeTracker, ast_variables, concrete_ast
from lazytensor.uop.ops import GroupOp, Ops, UOp
from lazytensor.uop.sint import is_sym, max_size, sint, sint_prod, smax

AXIS_ORDER = list(AxisKind)
VIEW_OPS = GroupOp.Load | GroupOp.Store | {Ops.CONST, Ops.DEFINE_VAR, Ops.IOTA, Ops.VALID}

@dataclass(frozen=True)
class TensorCoreUse:
  """A kernel mapped onto a tensor core: which one, which axes count its M, N and K tiles (`axis_m`, `axis_n`,
  `axis_k`: later opts split them into warps, tiles per warp and K-blocks), which axes are the instruction's own
  (`inner`: M, N and K within one tile, spread over the lanes and registers of a warp), which loads feed A and B, and
  the operands as the instruction takes them (`in_a`, `in_b`: the loads themselves, or casts of them to its input
  dtype, applied on the way into shared memory). Axis positions follow the kernel's splits and permutes (`moved`)."""
  tc: TensorCore
  axis_m: int
  axis_n: int
  axis_k: int
  load_a: UOp
  load_b: UOp
  in_a: UOp
  in_b: UOp
  inner: tuple[int, ...] = ()

  def moved(self, where: Callable[[int], int]) -> TensorCoreUse:
    return replace(self, axis_m=where(self.axis_m), axis_n=where(self.axis_n), axis_k=where(self.axis_k),
                   inner=tuple(where(a) for a in self.inner))

@dataclass(frozen=True)
class StagedTile:
  """Where one operand's tile of a K-block sits in shared memory: the kernel axes it spans (those inside a block along
  which the operand is not broadcast), as rows and columns (the columns run along the axis the operand is contiguous
  along in global memory, when it is along one of the tile's, so that the copy into shared memory loads vectors), each
  row `pitch` elements apart: the columns plus padding that keeps the warp's fragment reads off each other's banks.
  With more than one K-block, two stages alternate (one barrier a K-block: a stage is written again only after the
  barrier of the K-block between)."""
  load: UOp
  operand: UOp
  rows: tuple[int, ...]
  cols: tuple[int, ...]
  strides: tuple[int, ...]  # elements from one index to the next along each axis of rows + cols
  pitch: int
  stages: int
  size: int  # elements of one stage
  width: int  # neighbouring elements of a row each thread copies at once (16 bytes where the tile allows)

  @property
  def axes(self) -> tuple[int, ...]: return self.rows + self.cols

# shared memory is 32 banks of 4-byte words; a warp's access takes one pass per distinct word in the busiest bank
SHARED_BANKS = 32

def bank_replays(words: list[int]) -> int:
  """The passes beyond the fewest that a warp's access of these 4-byte words takes (distinct words in one bank)."""
  distinct = set(words)
  per_bank = [0] * SHARED_BANKS
  for w in distinct: per_bank[w % SHARED_BANKS] += 1
  return max(per_bank) - -(-len(distinct) // SHARED_BANKS)

def _widens(src: DType, dst: DType) -> bool:
  """Whether casting float `src` to float `dst` keeps every value (half or bfloat16 to float32, float32 to float64)."""
  return src.is_float and dst.is_float and dst.itemsize > src.itemsize

def _under_casts(x: UOp) -> UOp:
  while x.op is Ops.CAST: x = x.src[0]
  return x

def _mma_operand(x: UOp, dtype_in: DType) -> UOp | None:
  """The `dtype_in` value that a product's operand holds, if it is read from a load: under exact widenings (a half
  made float32 to be multiplied), a `dtype_in` load or casts of a load ending in `dtype_in` (x.half() of a float32
  x: the tensor core rounds its operand as the cast does)."""
  while x.dtype != dtype_in and x.op is Ops.CAST and _widens(x.src[0].dtype, x.dtype): x = x.src[0]
  return x if x.dtype == dtype_in and _under_casts(x).op is Ops.LOAD else None

def _find_mma(ast: UOp, dtype_in: DType, dtype_out: DType) -> tuple[UOp, UOp] | None:
  """The two `dtype_in` operands (_mma_operand) multiplied under the kernel's one ADD reduce into `dtype_out`."""
  reduces = [u for u in ast.toposort if u.op is Ops.REDUCE_AXIS]
  if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD or reduces[0].dtype != dtype_out: return None
  x = reduces[0].src[0]
  while x.op is Ops.CAST: x = x.src[0]
  if x.op is not Ops.MUL: return None
  a, b = (_mma_operand(s, dtype_in) for s in x.src)
  return None if a is None or b is None else (a, b)

def _check(cond: bool, msg: str) -> None:
  if not cond: raise KernelOptError(msg)

def grown_load(node: UOp) -> bool:
  """Whether PADTO on an output axis lengthens this node's view instead of masking it (ShapeTracker.grow): a plain
  load, whose value at a padded position is never stored, and which the lowerer masks after all where reading on
  could leave its buffer. (A gather's address depends on a loaded index; a store must not write there.)"""
  return node.op is Ops.LOAD

def view_of(node: UOp) -> ShapeTracker:
  return next(s.arg for s in node.src if s.op is Ops.VIEW)

def reach(node: UOp) -> int:
  """How many elements of its buffer a load or store reaches: its view's, and past them the steps of a computed
  index, a gather's LOAD arg (stride, n) (schedule/gather.py) or a scatter's STORE arg (op, axes, stride, n). An index
  check (schedule/index_check.py) reaches all of its flags."""
  if node.op is Ops.CHECK: return cast(PtrDType, node.src[0].dtype).size
  size = view_of(node).real_size()
  if node.op is Ops.GATHER: stride, count = node.arg
  elif node.op is Ops.SCATTER: stride, count = node.arg[2:]
  else: return size
  return size + (count - 1) * stride

# the number of every AST that got a name, per name: a second different kernel with the same shape is called ...n1 (a
# dict: a process that makes thousands of kernels of one shape finds each number at once, not by a search of a list)
_names_seen: defaultdict[tuple, dict[bytes, int]] = defaultdict(dict)

class Kernel:
  def __init__(self, ast: UOp, renderer: Renderer) -> None:
    assert ast.op is Ops.SINK, f"a kernel AST is a SINK, got {ast.op}"
    self.ast, self.renderer = ast, renderer
    # constants without a view (e.g. the zero outside a pushed-down pad) are the same everywhere: not part of the shape
    self.view_nodes = [u for u in ast.toposort if u.op in VIEW_OPS and any(s.op is Ops.VIEW for s in u.src)]
    reduces = [u for u in ast.toposort if u.op is Ops.REDUCE_AXIS]
    # a scatter (schedule/scatter.py) stores each entry at its index. Where the renderer combines its op into memory
    # atomically, its entry axes are parallel (GLOBAL) axes and every entry an atomic update; elsewhere they are its
    # reduce axes, run in order
    self.scatter = next((u for u in ast.src if u.op is Ops.SCATTER), None)
    assert self.scatter is None or (len(ast.src) == 1 and not reduces), "a scatter kernel is its one store alone"
    self.atomic = self.scatter is not None and (self.scatter.arg[0], self.scatter.src[2].dtype) in renderer.atomics
    last: tuple[int, ...] = reduces[0].arg[1] if reduces else self.scatter.arg[1] if self.scatter is not None else ()
    self.reduce_axes: tuple[int, ...] = () if self.atomic else last
    assert all(r.arg[1] == self.reduce_axes for r in reduces), "one kernel reduces one set of axes"
    self.sts = [view_of(u) for u in self.view_nodes]
    ndim = len(self.sts[0].shape)
    full = tuple(functools.reduce(smax, (cast(sint, st.shape[i]) for st in self.sts)) for i in range(ndim))
    kinds = [AxisKind.REDUCE if i in self.reduce_axes else AxisKind.GLOBAL for i in range(ndim)]
    order = [i for i in range(ndim) if i not in last] + list(last)
    # an axis may be symbolic (uop/sint.py: a UOp here), which only the lowerer and `symbolic` meet: the heuristics and
    # BEAM, whose arithmetic is on ints, only ever see a kernel at numbers (at_max), and the opts refuse to split it
    self.full_shape: tuple[int, ...] = cast(tuple[int, ...], tuple(full[i] for i in order))
    self.kinds: list[AxisKind] = [kinds[i] for i in order]
    self.sts = [st.permute(tuple(order)) for st in self.sts]
    self.applied_opts: list[Opt] = []
    # over full_shape, masks False where PADTO added positions to a reduce axis (they must add the reduce's identity)
    # and to an output axis (its loads read past their views there, where that stays in bounds: grown_load); views,
    # so that they follow the splits and permutes of the axes as the buffers' views do
    self.reduce_pad: ShapeTracker | None = None
    self.out_pad: ShapeTracker | None = None
    self.tensor_core: TensorCoreUse | None = None
    self.dont_use_locals = False
    self._drop_ones()
    self._merge_adjacent()

  # ---- the shared shape ----

  @property
  def shape_len(self) -> int: return len(self.full_shape)

  def st_of(self, node: UOp) -> ShapeTracker: return self.sts[self.view_nodes.index(node)]

  def axes_of(self, *kinds: AxisKind) -> list[int]: return [i for i, k in enumerate(self.kinds) if k in kinds]

  def entry_axes(self) -> list[int]:
    """A scatter kernel's entry axes (whatever their kind now): the axes its store's view does not walk."""
    if self.scatter is None: return []
    st = self.st_of(self.scatter)
    return [a for a in range(self.shape_len) if st.shape[a] == 1 and self.full_shape[a] > 1]

  def _reshape_all(self, new_full: tuple[int, ...], per_st: list[tuple[int, ...]]) -> None:
    self.sts = [st.reshape(shape) for st, shape in zip(self.sts, per_st)]
    self._map_pads(lambda st: st.reshape(new_full))
    self.full_shape = new_full

  def _map_pads(self, f: Callable[[ShapeTracker], ShapeTracker]) -> None:
    if self.reduce_pad is not None: self.reduce_pad = f(self.reduce_pad)
    if self.out_pad is not None: self.out_pad = f(self.out_pad)

  def _drop_ones(self) -> None:
    keep = [i for i, s in enumerate(self.full_shape) if s != 1]
    if len(keep) == self.shape_len: return
    self.sts = [st.reshape(tuple(st.shape[i] for i in keep)) for st in self.sts]
    self.full_shape = tuple(self.full_shape[i] for i in keep)
    self.kinds = [self.kinds[i] for i in keep]

  def _mergeable(self, i: int) -> bool:
    """Axes i and i+1 can become one when every view walks them as one linear range."""
    if self.kinds[i] != self.kinds[i + 1]: return False
    for st in self.sts:
      if st.shape[i] == 1 and st.shape[i + 1] == 1: continue
      if st.shape[i:i + 2] != self.full_shape[i:i + 2]: return False
      merged = st.reshape(st.shape[:i] + (sint_prod(st.shape[i:i + 2]),) + st.shape[i + 2:])
      if len(merged.views) > len(st.views): return False
    return True

  def _merge_adjacent(self) -> None:
    i = 0
    while i < self.shape_len - 1:
      if not self._mergeable(i):
        i += 1
        continue
      per_st = [st.shape[:i] + (cast(int, sint_prod(st.shape[i:i + 2])),) + st.shape[i + 2:] for st in self.sts]
      merged_full = self.full_shape[:i] + (cast(int, sint_prod(self.full_shape[i:i + 2])),) + self.full_shape[i + 2:]
      self._reshape_all(merged_full, per_st)
      del self.kinds[i + 1]

  def split_axis(self, axis: int, amt: int, kind: AxisKind, top: bool = False) -> int:
    """Split `axis` into (size/amt, amt) (amt first when `top`), give the amt part `kind`, keep kind order.

    Returns the position of the new axis."""
    size = self.full_shape[axis]
    assert size % amt == 0, f"{amt} does not divide axis {axis} of size {size}"
    parts = (amt, size // amt) if top else (size // amt, amt)
    new_full = self.full_shape[:axis] + parts + self.full_shape[axis + 1:]
    per_st = [st.shape[:axis] + (parts if st.shape[axis] == size else (1, 1)) + st.shape[axis + 1:] for st in self.sts]
    self._reshape_all(new_full, per_st)
    new_pos = axis if top else axis + 1
    self.kinds.insert(axis + 1, self.kinds[axis])
    self.kinds[new_pos] = kind
    self._move_tc_axes(lambda p: p + 1 if p > axis or (p == axis and top) else p)
    return self._move_into_place(new_pos)

  def _move_tc_axes(self, where: Callable[[int], int]) -> None:
    if self.tensor_core is not None: self.tensor_core = self.tensor_core.moved(where)

  def keep_prefix(self, axis: int, size: int) -> None:
    """Keep the first `size` indices of a GLOBAL axis: BEAM times a slice of a large kernel whose inner loops are the
    same as the whole kernel's. The kernel then computes only part of its output."""
    assert self.kinds[axis] is AxisKind.GLOBAL and 0 < size <= self.full_shape[axis], f"keep {size} of axis {axis}"
    full = self.full_shape[axis]
    self.sts = [st.shrink(tuple((0, size) if i == axis and s == full else (0, s) for i, s in enumerate(st.shape)))
                for st in self.sts]
    kept = tuple((0, size) if i == axis else (0, s) for i, s in enumerate(self.full_shape))
    self._map_pads(lambda st: st.shrink(kept))
    self.full_shape = self.full_shape[:axis] + (size,) + self.full_shape[axis + 1:]

  def _move_into_place(self, pos: int) -> int:
    kind = self.kinds[pos]
    rest = [i for i in range(self.shape_len) if i != pos]
    target = sum(1 for i in rest if AXIS_ORDER.index(self.kinds[i]) <= AXIS_ORDER.index(kind))
    order = rest[:target] + [pos] + rest[target:]
    self.permute(order)
    return target

  def permute(self, order: list[int]) -> None:
    self._move_tc_axes(order.index)
    self.sts = [st.permute(tuple(order)) for st in self.sts]
    self._map_pads(lambda st: st.permute(tuple(order)))
    self.full_shape = tuple(self.full_shape[i] for i in order)
    self.kinds = [self.kinds[i] for i in order]

  # ---- symbolic shapes ----

  @property
  def symbolic(self) -> bool:
    """Whether an axis's size, or a view's offset, stride or mask, is an expression of Variables (a KV cache written at
    a bound position has a concrete shape and a symbolic offset): one program serves each value they take."""
    return is_sym(self.full_shape) or bool(ast_variables(self.ast))

  def at_max(self) -> Kernel:
    """This kernel with each Variable at its largest value: what the heuristics and BEAM choose opts for (BEAM times
    candidates there), since their arithmetic on sizes needs numbers."""
    return Kernel(concrete_ast(self.ast, {v: v.vmax for v in ast_variables(self.ast)}), self.renderer)

  # ---- optimizations ----

  def copy(self) -> Kernel:
    ret = copy.copy(self)
    ret.sts, ret.kinds = list(self.sts), list(self.kinds)
    ret.applied_opts = list(self.applied_opts)
    return ret

  # a MID axis is both: threads while the reduce runs, registers where it finishes and after
  def upcast_size(self) -> int:
    return prod(s for s, k in zip(self.full_shape, self.kinds) if k in (AxisKind.UPCAST, AxisKind.UNROLL, AxisKind.MID))
  def local_size(self) -> int:
    """Threads per block: a tensor core's LOCAL axes count warps."""
    warp = 1 if self.tensor_core is None else self.tensor_core.tc.threads
    return warp * prod(s for s, k in zip(self.full_shape, self.kinds)
                       if k in (AxisKind.LOCAL, AxisKind.GROUP, AxisKind.MID))
  def shared_bytes(self) -> int:
    """Shared memory a block needs: with a GROUP axis, each reduce keeps a partial result per thread and upcast lane
    (the lowerer's `_group`); on tensor cores, the stages of the operands' tiles (`staged_tiles`)."""
    if self.tensor_core is not None:
      return sum(t.stages * t.size for t in self.staged_tiles()) * self.tensor_core.tc.dtype_in.itemsize
    if not self.axes_of(AxisKind.GROUP): return 0
    lanes = prod(s for s, k in zip(self.full_shape, self.kinds) if k is AxisKind.UPCAST)
    reduces = [u for u in self.ast.toposort if u.op is Ops.REDUCE_AXIS]
    return sum(self.local_size() * lanes * r.dtype.itemsize for r in reduces)

  def use_tensor_core(self, index: int) -> None:
    """TC (its row in rules.OPTOPS checked): map the multiply-accumulate onto the renderer's tensor core number
    `index`: a warp per (M x N) output tile, K in steps of the instruction's K, any other reduce axes (a convolution's
    window) as loops around it. Either load may be A: a convolution's output channels make M or N, whichever its other
    axes fit."""
    tc = self.renderer.tensor_cores[index]
    opt = Opt(OptOps.TC, index)
    match = _find_mma(self.ast, tc.dtype_in, tc.dtype_acc)
    _check(match is not None, f"{opt}: the kernel is not a {tc.dtype_in.name} multiply-accumulate into "
           f"{tc.dtype_acc.name}")
    assert match is not None
    use = self._tc_axes(tc, *match) or self._tc_axes(tc, match[1], match[0])
    _check(use is not None, f"{opt}: no output axes M, N (one operand broadcast along each) and reduce axis K of "
           f"sizes divisible by {tc.dims} in {self.full_shape}")
    assert use is not None
    # each of M, N and K becomes (tiles, the instruction's own part): later opts split the tiles
    self.tensor_core = use
    for name, size in zip(("axis_m", "axis_n", "axis_k"), tc.dims):
      at = self.split_axis(getattr(self.tensor_core, name), size, self.kinds[getattr(self.tensor_core, name)])
      self.tensor_core = replace(self.tensor_core, inner=self.tensor_core.inner + (at,))

  def staged_tiles(self) -> tuple[StagedTile, StagedTile]:
    """The shared-memory tiles of A and B (StagedTile) that the lowerer copies each K-block into and the warps read
    their fragments from."""
    use = self.tensor_core
    assert use is not None, "only a tensor-core kernel stages its operands"
    m_in, n_in, k_in = use.inner
    block = [a for a, kind in enumerate(self.kinds) if kind in (AxisKind.LOCAL, AxisKind.UPCAST, AxisKind.UNROLL)]
    blocks = prod(s for a, s in enumerate(self.full_shape) if self.kinds[a] is AxisKind.REDUCE and a != k_in)
    tiles = []
    for load, operand, frag, (row_in, col_in), out_in in ((use.load_a, use.in_a, use.tc.a, (m_in, k_in), m_in),
                                                           (use.load_b, use.in_b, use.tc.b, (k_in, n_in), n_in)):
      strides = self.st_of(load).real_strides()
      axes = [a for a in block + list(use.inner) if strides[a] != 0]
      k_side = sorted((a for a in axes if self.kinds[a].is_reduce), key=lambda a: (a == k_in, a))
      out_side = sorted((a for a in axes if not self.kinds[a].is_reduce), key=lambda a: (a == out_in, a))
      rows, cols = (k_side, out_side) if strides[out_in] == 1 and strides[k_in] != 1 else (out_side, k_side)
      tiles.append(self._stage(load, operand, frag, (row_in, col_in), tuple(rows), tuple(cols), 2 if blocks > 1 else 1))
    return tiles[0], tiles[1]

  def _stage(self, load: UOp, operand: UOp, frag: Fragment, frag_axes: tuple[int, int], rows: tuple[int, ...],
             cols: tuple[int, ...], stages: int) -> StagedTile:
    """The tile with the least padding (in 16-byte steps, so that rows stay aligned for vector stores) that leaves
    the copy's stores and the fragment reads without bank conflicts, the least conflicted if none does."""
    itemsize, threads = operand.dtype.itemsize, self.local_size()
    ncols, total = prod(self.full_shape[a] for a in cols), prod(self.full_shape[a] for a in rows + cols)
    step = max(1, 16 // itemsize)
    widths = [w for w in (8, 4, 2) if w <= step and self.full_shape[cols[-1]] % w == 0]
    width = max([w for w in widths if total % (w * threads) == 0] or widths or [1])
    def tile(pad: int) -> StagedTile:
      pitch = ncols + pad
      strides = [prod(self.full_shape[b] for b in rows[i + 1:]) * pitch for i in range(len(rows))] + \
        [prod(self.full_shape[b] for b in cols[i + 1:]) for i in range(len(cols))]
      return StagedTile(load, operand, rows, cols, tuple(strides), pitch, stages,
                        prod(self.full_shape[a] for a in rows) * pitch, width)
    def replays(t: StagedTile) -> int:
      at = dict(zip(t.axes, t.strides))
      reads = [[(r * at[frag_axes[0]] + c * at[frag_axes[1]]) * itemsize // 4
                for r, c in (frag.coords(lane, j) for lane in range(frag.threads))] for j in range(frag.size)]
      # each warp's first turn of the copy: thread i stores `width` elements from flat position i * width
      flats = [[i * width for i in range(w, w + frag.threads) if i * width < total] for w in range(0, threads, 32)]
      writes = [[(f // ncols * t.pitch + f % ncols + e) * itemsize // 4 for f in fs for e in range(width)]
                for fs in flats]
      return sum(bank_replays(words) for words in reads + writes if words)
    options = [tile(pad) for pad in range(0, SHARED_BANKS * 4 // itemsize + 1, step)]
    return min(options, key=lambda t: (replays(t) > 0, replays(t), t.pitch))

  def _tc_axes(self, tc: TensorCore, in_a: UOp, in_b: UOp) -> TensorCoreUse | None:
    """M, N and K with operand in_a as A: the innermost axes of sizes divisible by the instruction's (so that
    neighbouring lanes read neighbouring elements where the layout allows); K one along which both operands move."""
    (tm, tn, tk), full = tc.dims, self.full_shape
    load_a, load_b = _under_casts(in_a), _under_casts(in_b)
    sa, sb = self.st_of(load_a).real_strides(), self.st_of(load_b).real_strides()
    def last(axes: list[int], size: int, fits: Callable[[int], bool]) -> int | None:
      return next((a for a in reversed(axes) if full[a] % size == 0 and fits(a)), None)
    globals_ = self.axes_of(AxisKind.GLOBAL)
    axis_m = last(globals_, tm, lambda a: sb[a] == 0 and sa[a] != 0)
    axis_n = last(globals_, tn, lambda a: sa[a] == 0 and sb[a] != 0)
    axis_k = last(self.axes_of(AxisKind.REDUCE), tk, lambda a: sa[a] != 0 and sb[a] != 0)
    if axis_m is None or axis_n is None or axis_k is None: return None
    return TensorCoreUse(tc, axis_m, axis_n, axis_k, load_a, load_b, in_a, in_b)

  def pad_axis(self, axis: int, multiple: int) -> None:
    """PADTO (its row in rules.OPTOPS checked): pad `axis` up to a multiple of `multiple`, the new positions masked."""
    kind, size = self.kinds[axis], self.full_shape[axis]
    new = -(-size // multiple) * multiple
    pad = tuple((0, new - size) if i == axis else (0, 0) for i in range(self.shape_len))
    self.sts = [st if st.shape[axis] != size else st.grow(axis, new) if kind is AxisKind.GLOBAL and grown_load(node)
                else st.pad(pad) for st, node in zip(self.sts, self.view_nodes)]
    # the tracker of this kind masks the new positions; the other one, of positions on the other kind of axes, has
    # them valid (it grows along: a later reshape of both needs the new size)
    padded = (self.reduce_pad if kind is AxisKind.REDUCE else self.out_pad) or ShapeTracker.from_shape(self.full_shape)
    other = self.out_pad if kind is AxisKind.REDUCE else self.reduce_pad
    other = None if other is None else other.grow(axis, new)
    if kind is AxisKind.REDUCE: self.reduce_pad, self.out_pad = padded.pad(pad), other
    else: self.out_pad, self.reduce_pad = padded.pad(pad), other
    self.full_shape = self.full_shape[:axis] + (new,) + self.full_shape[axis + 1:]

  # ---- naming ----

  def output_shape(self) -> tuple[int, ...]:
    return tuple(1 if k.is_reduce else s for s, k in zip(self.full_shape, self.kinds))

  @property
  def colored_shape(self) -> str:
    return "_".join(colored(str(s), k.value[0], k.value[1]) for s, k in zip(self.full_shape, self.kinds))

  @property
  def _prefix(self) -> str: return "S" if self.scatter is not None else "r" if self.reduce_axes else "E"

  @property
  def name(self) -> str:
    """E_ for elementwise, r_ for reductions, S_ for scatters (schedule/scatter.py), then the shape; colored by axis
    kind, unique within the process. A display label (DEBUG, profiles): its number depends on the order a process meets
    kernels in, so no program is compiled under it (`function_name`)."""
    prefix = self._prefix
    base = f"{prefix}_{self.colored_shape}" if self.full_shape else prefix
    # numbered by shape and axis kinds, so a kernel's number is the same whether its name prints in color or not
    seen = _names_seen[(prefix, tuple(self.full_shape), tuple(self.kinds))]
    n = seen.setdefault(self.ast.key, len(seen))
    return base if n == 0 else f"{base}n{n}"

  @property
  def function_name(self) -> str:
    """The symbol the kernel's program is compiled under: its name without color and without the number, which the
    kernel's AST and opts decide alone, so that a program's code and its cache entries are the same in every process."""
    return to_function_name("_".join([self._prefix, *map(str, self.full_shape)]))

  def flops_and_mem(self) -> tuple[int, int]:
    """ALU operations and bytes moved by one run: an estimate for GFLOPS and GB/s lines."""
    not_alu = (Ops.SINK, Ops.VIEW, Ops.DEFINE_GLOBAL, Ops.CAST, Ops.BITCAST)
    # an op on a reduce's result runs once per output, not once per element reduced (a conv's relu mask counted at
    # the reduce's size showed 3.5x the GFLOPS it ran at)
    after: dict[UOp, bool] = {}
    for u in self.ast.toposort: after[u] = any(s.op is Ops.REDUCE_AXIS or after[s] for s in u.src)
    alu = [u for u in self.ast.toposort if u.op not in VIEW_OPS and u.op not in not_alu]
    # a symbolic kernel is counted at its Variables' largest values
    full, outs = max_size(self.full_shape), max_size(self.output_shape())
    ops = sum(outs if after[u] else full for u in alu)
    mem = 0
    for node in self.view_nodes:
      if node.op in GroupOp.Load | GroupOp.Store:
        touched = min(full, max_size((reach(node),))) * node.src[0].dtype.itemsize
        mem += touched * 2 if node is self.scatter else touched  # a scatter reads what it updates
    return ops, mem

