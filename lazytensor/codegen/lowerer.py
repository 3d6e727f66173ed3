"""Kernel (AST + axes) -> loop-level UOps: every axis becomes an index, every view becomes index math.

Axis kinds lower as:
  GLOBAL  a RANGE loop on devices without GPU threads, else a grid index (SPECIAL gidx)
  THREAD  the CPU core id (SPECIAL core), the rest of the axis stays a loop
  LOCAL   a thread index within a block (SPECIAL lidx)
  GROUP   a thread index too; the reduce then finishes in two stages through shared memory
  REDUCE  a RANGE loop inside the globals
  UPCAST / UNROLL  registers: the kernel body is replicated per lane; the last such axis becomes SIMD vectors when
          the renderer has vectors of its size, so values are scalars or vectors ("lanes").
  MID     (UPCASTMID, in a GROUP kernel) a thread index while the reduce runs; where its partials meet and after, a
          lane (registers, never the vector axis): one thread finishes the reduce for all of its outputs.
A scatter's store (schedule/scatter.py) is a load, the op and a store, its entries REDUCE loops; on a renderer with the
atomic op, its entries are GLOBAL/LOCAL axes and each lane's update one STORE whose arg is the op (atomic).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from lazytensor.codegen.nodes import gated_load, gated_store, index_const, specials
from lazytensor.codegen.passes import CodegenCtx, Pass, run_passes
from lazytensor.codegen.tensor_cores import TensorCoreReduce, tc_indices
from lazytensor.dtype import DType, PtrDType, dtypes
from lazytensor.helpers import prod
from lazytensor.opt.kernel import AxisKind, Kernel, grown_load
from lazytensor.shape.view import ast_variables
from lazytensor.uop.ops import GroupOp, Ops, UOp, graph_rewrite, identity_element
from lazytensor.uop.sint import sint, sint_prod, ssimplify
from lazytensor.uop.symbolic import simplify, symbolic

LANE_KINDS = (AxisKind.UPCAST, AxisKind.UNROLL)

@dataclass
class _Lanes:
  """The registers of one thread: every combination of the unrolled/upcast axes except the vector axis ("keys"),
  times the SIMD lanes of the vector axis (VLANE stands for the lane number inside index math)."""
  axes: list[int]
  vec_axis: int | None
  width: int
  keys: list[tuple[int, ...]]
  vlane: UOp

def _vector_axis(k: Kernel) -> int | None:
  """The lane axis to turn into SIMD vectors: the one with the fewest buffers walked along it with a stride other than
  0 or 1 (those need a gather or a scatter per vector), then one the output is contiguous along (vector stores), then
  the last, among the axes that vectors divide first (an axis of 3 taps, as cheap as the 16 output channels beside it,
  gave scalar code). In a reduce kernel loads come first: they run every iteration, the stores once per tile. (A
  matmul of A by a transposed B: the unrolled reduce axis, along which both operands are contiguous; a convolution
  with packed weights: the output channels, scattered only when stored.)"""
  axes = k.axes_of(*LANE_KINDS)
  if not axes: return None
  views = [(n.op in GroupOp.Store, k.sts[i].real_strides()) for i, n in enumerate(k.view_nodes)
           if n.op in GroupOp.Load | GroupOp.Store]
  has_reduce, widths = bool(k.axes_of(AxisKind.REDUCE, AxisKind.UNROLL)), k.renderer.vector_widths
  def cost(a: int) -> tuple[bool, int, int, bool, int]:
    loads = sum(1 for is_store, st in views if not is_store and st[a] not in (0, 1))
    stores = sum(1 for is_store, st in views if is_store and st[a] not in (0, 1))
    store_contiguous = any(is_store and st[a] == 1 for is_store, st in views)
    return (not any(k.full_shape[a] % w == 0 for w in widths), loads if has_reduce else loads + stores, stores,
            not store_contiguous, -a)
  return min((a for a in axes if k.full_shape[a] > 1), key=cost, default=axes[-1])

def _lanes(k: Kernel) -> _Lanes:
  if k.tensor_core is not None:  # the registers of the C fragment are the vector lanes, a warp's tiles the keys
    regs, axes = k.tensor_core.tc.c.size, k.axes_of(AxisKind.UPCAST)
    keys = list(itertools.product(*[range(k.full_shape[a]) for a in axes]))
    return _Lanes(axes, None, regs, keys, UOp(Ops.SPECIAL, dtypes.index, (), ("vlane", regs)))
  axes = k.axes_of(*LANE_KINDS, AxisKind.MID)
  best = _vector_axis(k)
  vec_axis = best if best is not None and k.full_shape[best] in k.renderer.vector_widths else None
  width = k.full_shape[vec_axis] if vec_axis is not None else 1
  key_axes = [a for a in axes if a != vec_axis]
  keys = list(itertools.product(*[range(k.full_shape[a]) for a in key_axes]))
  return _Lanes(axes, vec_axis, width, keys, UOp(Ops.SPECIAL, dtypes.index, (), ("vlane", max(width, 1))))

class _Lowerer:
  tc_lane: UOp  # a tensor-core kernel's lane within its warp, the thread's place in the block, the K steps' loops
  tc_thread: UOp
  tc_steps: list[UOp]

  def __init__(self, k: Kernel) -> None:
    self.k = k
    self.lanes = _lanes(k)
    self.key_axes = [a for a in self.lanes.axes if a != self.lanes.vec_axis]
    self.loops: list[UOp] = []  # the reduce loops, outermost first
    self.levels: tuple[int, ...] = ()  # the loops of each accumulator of a float sum, innermost first (_reduce_blocks)
    self.axis_idx = self._axis_indices()
    self.memo: dict[tuple[UOp, bool], list[UOp]] = {}
    self.in_reduce = False  # lowering a reduce's source, where MID axes are threads, not lanes
    self.group_gate: UOp | None = None  # set when a GROUP reduce means only group index 0 may store
    self.flag_stores: dict[UOp, None] = {}  # the index checks' records of a bad index (_check)

  def _axis_indices(self) -> dict[int, UOp]:
    k, r = self.k, self.k.renderer
    if k.tensor_core is not None: return tc_indices(self, k.tensor_core)
    idx: dict[int, UOp] = {}
    globals_ = k.axes_of(AxisKind.GLOBAL)
    # a launch's size is fixed when the program is: a symbolic axis is a loop in each thread, whose end the kernel
    # reads from its arguments
    launched = [a for a in globals_ if r.has_local and not isinstance(k.full_shape[a], UOp)]
    idx.update(specials("gidx", launched, k.full_shape, r.global_max))
    for a in globals_:
      if a not in launched:
        idx[a] = UOp(Ops.RANGE, dtypes.index, (index_const(0), index_const(k.full_shape[a])), (a, "global"))
    reduce_axes = k.axes_of(AxisKind.REDUCE)
    blocks, self.levels = _reduce_blocks(k)
    # loops run in the order of their numbers (linearize.py): a scatter's entries before its other axes
    numbers = itertools.count(-len(reduce_axes) if _entries_outside(k) else reduce_axes[0] if reduce_axes else 0)
    for a, b in zip(reduce_axes, blocks):
      idx[a], loops = _blocked_index(k.full_shape[a], b, numbers, "reduce")
      self.loops += loops
    for a in k.axes_of(AxisKind.THREAD): idx[a] = UOp(Ops.SPECIAL, dtypes.index, (), ("core", k.full_shape[a]))
    idx.update(specials("lidx", k.axes_of(AxisKind.LOCAL, AxisKind.GROUP, AxisKind.MID), k.full_shape, r.local_max))
    if self.lanes.vec_axis is not None: idx[self.lanes.vec_axis] = self.lanes.vlane
    return idx

  def idxs_for(self, key: tuple[int, ...], shape: tuple[sint, ...]) -> list[UOp]:
    """Index of every axis for one lane key; axes of size 1 in this view (reduced or broadcast) index 0."""
    lane = {a: c for a, c in zip(self.key_axes, key) if not (self.in_reduce and self.k.kinds[a] is AxisKind.MID)}
    return [index_const(0) if s == 1 else index_const(lane[a]) if a in lane else self.axis_idx[a]
            for a, s in enumerate(shape)]

  # ---- lanes ----

  def per_lane(self, expr: UOp) -> list[UOp]:
    return [simplify(expr.substitute({self.lanes.vlane: index_const(i)})) for i in range(self.lanes.width)]

  def depends_on_lane(self, *exprs: UOp) -> bool:
    return self.lanes.width > 1 and any(self.lanes.vlane in e.toposort for e in exprs)

  def contiguous_lanes(self, idx: UOp) -> bool:
    # base + vlane, vlane nowhere in base: contiguous without the per-lane rewrites below, which made lowering a
    # register tile cost ~1 s (beam search lowers every candidate)
    vlane = self.lanes.vlane
    terms = _add_terms(idx)
    if terms.count(vlane) == 1 and not any(vlane in t.toposort for t in terms if t is not vlane): return True
    base = simplify(idx.substitute({vlane: index_const(0)}))
    return all(simplify(e - base) is index_const(i) for i, e in enumerate(self.per_lane(idx)))

  def splat(self, x: UOp, width: int) -> UOp:
    return x if width == 1 or x.dtype.count == width else UOp(Ops.VECTORIZE, x.dtype.vec(width), (x,) * width)

  # ---- nodes ----

  def lower(self, node: UOp) -> list[UOp]:
    if (hit := self.memo.get((node, self.in_reduce))) is not None: return hit
    ret = self._lower(node)
    self.memo[(node, self.in_reduce)] = ret
    return ret

  def _lower(self, node: UOp) -> list[UOp]:
    op = node.op
    if op is Ops.SINK: return [UOp(Ops.SINK, dtypes.void, tuple(u for s in node.src for u in self.lower(s)))]
    if op in GroupOp.Store: return self._store(node)
    if op is Ops.CONST and not node.src: return [node] * len(self.lanes.keys)
    if op is Ops.GATHER:
      return [self._gather(node, key, at) for key, at in zip(self.lanes.keys, self.lower(node.src[2]))]
    if op in (Ops.LOAD, Ops.CONST, Ops.DEFINE_VAR, Ops.IOTA, Ops.VALID):
      return [self._view_value(node, key) for key in self.lanes.keys]
    if op is Ops.REDUCE_AXIS: return _ReduceLowerer(self, node).lower()
    if op is Ops.CHECK: return self._check(node)
    assert op in GroupOp.Elementwise, f"cannot lower {op}"
    srcs = [self.lower(s) for s in node.src]
    return [self._alu(node, [s[i] for s in srcs]) for i in range(len(self.lanes.keys))]

  def _alu(self, node: UOp, srcs: list[UOp]) -> UOp:
    width = max(s.dtype.count for s in srcs)
    vsrcs = tuple(self.splat(s, width) for s in srcs)
    dtype = dtypes.bool.vec(width) if node.op in GroupOp.Comparison else node.dtype.vec(width)
    return UOp(node.op, dtype, vsrcs, node.arg)

  def index_of(self, node: UOp, key: tuple[int, ...]) -> tuple[UOp, UOp]:
    return self.indexed(node, self.idxs_for(key, self.k.st_of(node).shape))

  def indexed(self, node: UOp, idxs: list[UOp]) -> tuple[UOp, UOp]:
    """(address, validity) of `node`'s view at `idxs`. A load that PADTO grew along an output axis (grown_load)
    reads on past its view at the padded positions, unmasked (a plain vector load where the edge of a row needed a
    masked one each step), unless the address could then leave the buffer and the bytes the device keeps readable
    past it (Renderer.readable_past): then those positions are masked."""
    idx, valid = self.k.st_of(node).to_indexed_uops(idxs)
    idx, valid = simplify(idx), simplify(valid)
    if self.k.out_pad is None or not grown_load(node): return idx, valid
    buf = node.src[0].dtype
    if isinstance(buf, PtrDType) and buf.size >= 0:
      readable = buf.size + self.k.renderer.readable_past(buf.size * buf.itemsize) // buf.itemsize
      if 0 <= idx.vmin and idx.vmax < readable: return idx, valid
    return idx, simplify(valid & self.k.out_pad.to_indexed_uops(idxs)[1])

  def _view_value(self, node: UOp, key: tuple[int, ...]) -> UOp:
    idx, valid = self.index_of(node, key)
    if node.op is Ops.LOAD: return self._load(node.src[0], node.dtype, idx, valid)
    if self.depends_on_lane(idx, valid):
      return UOp(Ops.VECTORIZE, (dtypes.bool if node.op is Ops.VALID else node.dtype).vec(self.lanes.width),
                 tuple(_scalar_view_value(node, i, v) for i, v in zip(self.per_lane(idx), self.per_lane(valid))))
    return _scalar_view_value(node, idx, valid)

  def _gather(self, node: UOp, key: tuple[int, ...], at: UOp) -> UOp:
    """A load whose address moves by `stride` times an index computed in the kernel (schedule/gather.py), clamped into
    [0, n) so that it stays in bounds: the kernel's value where the index is outside comes from a where around it. An
    index that differs from lane to lane makes one load per lane."""
    stride, n = node.arg
    idx, valid = self.index_of(node, key)
    if at.dtype.count == 1: return self._load(node.src[0], node.dtype, simplify(idx + _offset(at, n, stride)), valid)
    lanes = zip(self.per_lane(idx), self.per_lane(valid), range(self.lanes.width))
    return UOp(Ops.VECTORIZE, node.dtype.vec(self.lanes.width),
               tuple(gated_load(node.src[0], node.dtype, simplify(i + _offset(at.gep(j), n, stride)), v)
                     for i, v, j in lanes))

  def _scatter(self, node: UOp, idx: UOp, valid: UOp, value: UOp, at: UOp) -> list[UOp]:
    """A store that combines `value` into the element `stride` times an index further on (schedule/scatter.py): a load,
    the op, a store, skipped where the index is outside [0, n) (no target matches it) and clamped for the address
    all the same. The lanes of one thread are different targets (they split the output's axes, never the entries),
    so they may load and store at once; an index that differs from lane to lane makes one access per lane."""
    buf, (op, _, stride, n) = node.src[0], node.arg
    if self.k.atomic: return self._atomic_scatter(buf, op, stride, n, idx, valid, value, at)
    def combined(addr: UOp, ok: UOp, v: UOp) -> UOp:
      old = self._load(buf, value.dtype.scalar(), addr, ok)
      lanes = max(old.dtype.count, v.dtype.count)
      return self.splat(old, lanes).alu(op, self.splat(v, lanes))
    if at.dtype.count == 1:
      addr, ok = simplify(idx + _offset(at, n, stride)), simplify(valid & _inside(at, n))
      return self._store_lane(buf, addr, ok, combined(addr, ok, value))
    stores = []
    for j, (i, v) in enumerate(zip(self.per_lane(idx), self.per_lane(valid))):
      addr, ok = simplify(i + _offset(at.gep(j), n, stride)), simplify(v & _inside(at.gep(j), n))
      stores.append(gated_store(buf, addr, combined(addr, ok, value.gep(j)), ok))
    return stores

  def _atomic_scatter(self, buf: UOp, op: Ops, stride: int, n: int, idx: UOp, valid: UOp, value: UOp,
                      at: UOp) -> list[UOp]:
    """The scatter as atomic updates (STOREs whose arg is the op), one a lane: entries run in parallel, so threads or
    blocks may name one target at once. The lanes split the output's other axes (apply_opt keeps them off the
    entries), so each updates a target of its own, but no vector store exists that is atomic."""
    return [gated_store(buf, simplify(i + _offset(_lane(at, j), n, stride)), _lane(value, j),
                         simplify(v & _inside(_lane(at, j), n)), op)
            for j, (i, v) in enumerate(zip(self.per_lane(idx), self.per_lane(valid)))]

  def _check(self, node: UOp) -> list[UOp]:
    """An index checked where it is computed (schedule/index_check.py): its value, and where one of its lanes is out of
    range, atomic maxes of 1 and of the largest such lane into the check's flags. Both stores are gated off unless a
    lane is out of range, so a kernel pays the compares and one branch not taken per vector of indices (a branch per
    lane made a 16-wide scatter 10-25% slower; the lanes' maximum is only needed on the branch taken, where LLVM sinks
    it); atomic, because threads and blocks may find one at once. Positions PADTO added compute from masked loads and
    constants, values never stored: no index there."""
    flags, values, oks = node.src[0], self.lower(node.src[1]), self.lower(node.src[2])
    for key, v, ok in zip(self.lanes.keys, values, oks):
      inside, lanes = self._unpadded(key), max(v.dtype.count, ok.dtype.count)
      bad = [(b, _lane(v, j).cast(dtypes.int64)) for j in range(lanes)
             if (b := simplify(_lane(ok, j).logical_not() & inside[j if lanes > 1 else 0])).op is not Ops.CONST]
      if not bad: continue  # in range whatever the buffers hold
      worst = bad[0][1] if len(bad) == 1 else _tree(Ops.MAX, [b.where(x, dtypes.int64.min()) for b, x in bad])
      gate = _tree(Ops.OR, [b for b, _ in bad])
      for slot, record in enumerate((UOp.const(dtypes.int64, 1), worst)):
        self.flag_stores[gated_store(flags, index_const(slot), record, gate, Ops.MAX)] = None
    return values

  def _unpadded(self, key: tuple[int, ...]) -> list[UOp]:
    """Per vector lane of `key`, whether it is a position of the kernel's own shape rather than one PADTO added."""
    idxs, inside = self.idxs_for(key, self.k.full_shape), UOp.const(dtypes.bool, True)
    for pad in (self.k.out_pad, self.k.reduce_pad):
      if pad is not None: inside = inside & pad.to_indexed_uops(idxs)[1]
    return self.per_lane(inside)

  def _load(self, buf: UOp, dtype: DType, idx: UOp, valid: UOp) -> UOp:
    if valid.op is Ops.CONST and valid.arg is False:  # nothing to read (e.g. all padding): zeros, as wide as the lanes
      return UOp.const(dtype.vec(self.lanes.width) if self.depends_on_lane(idx) else dtype, 0)
    if not self.depends_on_lane(idx, valid): return gated_load(buf, dtype, idx, valid)
    width = self.lanes.width
    if self.contiguous_lanes(idx):
      base = simplify(idx.substitute({self.lanes.vlane: index_const(0)}))
      if not self.depends_on_lane(valid): return gated_load(buf, dtype.vec(width), base, valid)
      if self.k.renderer.masked_vector_loads:  # one load, a gate per lane (e.g. the edge of a padded row)
        gates = UOp(Ops.VECTORIZE, dtypes.bool.vec(width), tuple(self.per_lane(valid)))
        return UOp(Ops.LOAD, dtype.vec(width), (buf, base, gates, UOp.const(dtype.vec(width), 0)))
    return UOp(Ops.VECTORIZE, dtype.vec(width), tuple(gated_load(buf, dtype, i, v)
                                                      for i, v in zip(self.per_lane(idx), self.per_lane(valid))))

  def _store(self, node: UOp) -> list[UOp]:
    buf, values = node.src[0], self.lower(node.src[2])
    ats = self.lower(node.src[3]) if node.op is Ops.SCATTER else None
    stores: dict[UOp, None] = {}
    for n, (key, value) in enumerate(zip(self.lanes.keys, values)):
      idx, valid = self.index_of(node, key)
      if valid.op is Ops.CONST and valid.arg is False: continue
      lanes = self._store_lane(buf, idx, valid, value) if ats is None else \
        self._scatter(node, idx, valid, value, ats[n])
      for s in lanes: stores[s] = None
    return list(stores)

  def _store_lane(self, buf: UOp, idx: UOp, valid: UOp, value: UOp) -> list[UOp]:
    if not self.depends_on_lane(idx, valid):  # e.g. the vector axis was reduced away: every lane holds the result
      return [gated_store(buf, idx, value.gep(0) if value.dtype.count > 1 else value, valid)]
    width = self.lanes.width
    if not self.depends_on_lane(valid) and self.contiguous_lanes(idx):
      base = simplify(idx.substitute({self.lanes.vlane: index_const(0)}))
      return [gated_store(buf, base, self.splat(value, width), valid)]
    return [gated_store(buf, i, value.gep(n) if value.dtype.count > 1 else value, v)
            for n, (i, v) in enumerate(zip(self.per_lane(idx), self.per_lane(valid)))]

def _offset(e: UOp, n: int, stride: int) -> UOp:
  """min(max(e, 0), n - 1) * stride: in int64 (the bounds know MAX, and any index value converts), then an index:
  its bounds are then [0, n), so that a gather or scatter does not make the kernel's index math int64."""
  low = e.cast(dtypes.int64).maximum(0)
  return (-((-low).maximum(1 - n))).cast(dtypes.index) * stride

def _lane(x: UOp, j: int) -> UOp: return x.gep(j) if x.dtype.count > 1 else x

def _tree(op: Ops, xs: list[UOp]) -> UOp:
  """xs combined by op as a balanced tree (short dependency chains)."""
  while len(xs) > 1: xs = [xs[i].alu(op, xs[i + 1]) if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
  return xs[0]

def _inside(e: UOp, n: int) -> UOp:
  """Whether the index e names one of n targets: 0 <= e < n, compared in int64 (n may not fit e's dtype)."""
  wide = e.cast(dtypes.int64)
  return wide.lt(0).logical_not() & wide.lt(n)

def _entries_outside(k: Kernel) -> bool:
  """Whether a scatter's entry loops go outside its other loops: where its store is contiguous along one of its other
  axes (the embedding's D), one entry then updates its run of neighbouring targets at once, instead of one column of
  every entry per pass. Elsewhere (a scatter along the last dim) the entries stay inside, where their values are
  contiguous."""
  if k.scatter is None: return False
  strides = k.st_of(k.scatter).real_strides()
  return any(strides[a] == 1 for a in range(k.shape_len) if not k.kinds[a].is_reduce)


def _add_terms(x: UOp) -> list[UOp]:
  return [t for s in x.src for t in _add_terms(s)] if x.op is Ops.ADD else [x]

def _scalar_view_value(node: UOp, idx: UOp, valid: UOp) -> UOp:
  always = valid.op is Ops.CONST and valid.arg is True
  if node.op is Ops.VALID: return valid
  if node.op is Ops.CONST: value = UOp.const(node.dtype, node.arg)
  elif node.op is Ops.DEFINE_VAR: value = UOp(Ops.DEFINE_VAR, node.dtype, (), node.arg)  # a kernel argument
  else: value = idx.cast(node.dtype)
  return value if always else valid.where(value, UOp.const(node.dtype, 0))

def _lanes_of(x: UOp, n: int) -> tuple[UOp, ...] | None:
  """The `n` lanes of x: a VECTORIZE's sources, or a scalar in each; None for any other vector."""
  if x.op is Ops.VECTORIZE and len(x.src) == n: return x.src
  return (x,) * n if x.dtype.count == 1 else None

def _and_terms(x: UOp) -> list[UOp]: return _and_terms(x.src[0]) + _and_terms(x.src[1]) if x.op is Ops.AND else [x]

def _zero_unless(v: UOp, conds: tuple[UOp, ...]) -> bool:
  """Whether each lane of `v` is exactly 0 where its lane of `conds` is False: a load gated at least by that condition
  (each lane of it True or one of the gate's terms) that reads 0 elsewhere, a cast or a vector of such, or a product
  of two (0 * 0; 0 times an ungated value could be 0 * inf)."""
  if all(c.op is Ops.CONST and c.arg is True for c in conds): return True
  if v.op is Ops.CAST: return _zero_unless(v.src[0], conds)
  if v.op is Ops.MUL: return all(_zero_unless(s, conds) for s in v.src)
  if v.op is Ops.VECTORIZE and len(v.src) == len(conds):
    return all(_zero_unless(s, (c,)) for s, c in zip(v.src, conds))
  if v.op is not Ops.LOAD or len(v.src) != 4: return False
  alts, gates = _lanes_of(v.src[3], v.dtype.count), _lanes_of(v.src[2], len(conds))
  return alts is not None and gates is not None and all(a.op is Ops.CONST and a.arg == 0 for a in alts) and \
    all(c.op is Ops.CONST and c.arg is True or c in _and_terms(g) for g, c in zip(gates, conds))

class _ReduceLowerer:
  """One REDUCE_AXIS: unrolled lanes are combined, looped axes accumulate, a GROUP finishes through shared memory."""
  def __init__(self, lw: _Lowerer, node: UOp) -> None:
    self.lw, self.node, self.k = lw, node, lw.k
    self.op: Ops = node.arg[0]

  def lower(self) -> list[UOp]:
    lw, k = self.lw, self.k
    if k.tensor_core is not None: return TensorCoreReduce(lw, self.node).lower(k.tensor_core)
    outer, lw.in_reduce = lw.in_reduce, True
    values = [self._mask_padding(v, key) for v, key in zip(lw.lower(self.node.src[0]), lw.lanes.keys)]
    lw.in_reduce = outer
    unroll_pos = [i for i, a in enumerate(lw.key_axes) if k.kinds[a] is AxisKind.UNROLL]
    # keys that differ only along MID axes are one value here (each thread computes its own part of them)
    combined = [i for i, a in enumerate(lw.key_axes) if k.kinds[a] in (AxisKind.UNROLL, AxisKind.MID)]
    groups: dict[tuple[int, ...], list[UOp]] = {}
    for key, v in zip(lw.lanes.keys, values):
      if all(c == 0 for i, c in enumerate(key) if lw.k.kinds[lw.key_axes[i]] is AxisKind.MID):
        groups.setdefault(tuple(0 if i in combined else c for i, c in enumerate(key)), []).append(v)
    ranges = tuple(lw.loops)
    vec_unrolled = lw.lanes.vec_axis is not None and k.kinds[lw.lanes.vec_axis] is AxisKind.UNROLL
    results: dict[tuple[int, ...], UOp] = {}
    for gkey, vs in groups.items():
      # a value the same in every lane (a constant) still counts once per lane of a vectorized unrolled axis
      lanes = [lw.splat(v, lw.lanes.width) for v in vs] if vec_unrolled else vs
      acc, loops = self._fold_invariant(self._combine(lanes), ranges)
      if loops: acc = self._accumulate(acc, loops, lw.levels)
      if vec_unrolled: acc = self._combine([acc.gep(i) for i in range(acc.dtype.count)])
      results[gkey] = acc
    if k.axes_of(AxisKind.GROUP): results = self._group(results)
    return [results[tuple(0 if i in unroll_pos else c for i, c in enumerate(key))] for key in lw.lanes.keys]

  def _mid_keys(self, key: tuple[int, ...]) -> list[tuple[tuple[int, ...], dict[int, UOp]]]:
    """The keys a stage-one key (MID coordinates 0) stands for, each with the MID axes' indices for its partials."""
    lw = self.lw
    mid = [i for i, a in enumerate(lw.key_axes) if self.k.kinds[a] is AxisKind.MID]
    out = []
    for coords in itertools.product(*[range(self.k.full_shape[lw.key_axes[i]]) for i in mid]):
      at = dict(zip(mid, coords))
      out.append((tuple(at.get(i, c) for i, c in enumerate(key)),
                  {lw.key_axes[i]: index_const(c) for i, c in at.items()}))
    return out

  def _fold_invariant(self, acc: UOp, ranges: tuple[UOp, ...]) -> tuple[UOp, tuple[UOp, ...]]:
    """Reduce loops that acc depends on none of fold away: a sum over them is acc times their trip count, a max is
    acc. Besides the loops saved, the sum is then rounded once: `Tensor.ones(2**31 + 10).sum()` in float32 is 2**31
    (the nearest float32), where adding 1 in a loop stops growing at 2**24 per accumulator. All or none: a value
    reduced over some of a kernel's reduce loops would need its own loop nest (two reduces share theirs).
    Returns acc and the loops left."""
    if self.op is Ops.MUL or not ranges or any(r in acc.toposort for r in ranges): return acc, ranges
    trips = sint_prod(self.k.full_shape[a] for a in self.k.axes_of(AxisKind.REDUCE))
    if self.op is not Ops.ADD or trips == 1: return acc, ()
    if not isinstance(trips, UOp): return acc * UOp.const(acc.dtype, trips), ()
    # a symbolic trip count is a number the kernel reads from its arguments
    return acc * self.lw.splat(trips.cast(acc.dtype.scalar()), acc.dtype.count), ()

  def _accumulate(self, v: UOp, loops: tuple[UOp, ...], levels: tuple[int, ...]) -> UOp:
    """v reduced over the loops: a float sum level by level (_levels), each level's accumulator started at 0 at every
    step of the loops around it and added into the next level's when its loops end; anything else in one."""
    if self.op is not Ops.ADD or not v.dtype.is_float or not levels:
      return UOp(Ops.REDUCE, v.dtype, (v,) + loops, self.op)
    for n in levels:
      v, loops = UOp(Ops.REDUCE, v.dtype, (v,) + loops[len(loops) - n:], self.op), loops[:len(loops) - n]
    return v

  def _combine(self, vs: list[UOp]) -> UOp:
    """Reduce a list of values with the reduce op as a balanced tree (short dependency chains)."""
    width = max(v.dtype.count for v in vs)
    vs = [self.lw.splat(v, width) for v in vs]
    while len(vs) > 1: vs = [vs[i].alu(self.op, vs[i + 1]) if i + 1 < len(vs) else vs[i] for i in range(0, len(vs), 2)]
    return vs[0]

  def _mask_padding(self, v: UOp, key: tuple[int, ...]) -> UOp:
    """Positions added by PADTO on a reduce axis contribute the reduce's identity."""
    if self.k.reduce_pad is None: return v
    cond = simplify(self.k.reduce_pad.to_indexed_uops(self.lw.idxs_for(key, self.k.full_shape))[1])
    if cond.op is Ops.CONST and cond.arg is True: return v
    if self.lw.depends_on_lane(cond):
      cond = UOp(Ops.VECTORIZE, dtypes.bool.vec(self.lw.lanes.width), tuple(self.lw.per_lane(cond)))
      v = self.lw.splat(v, self.lw.lanes.width)
    ident = UOp.const(v.dtype, identity_element(self.op, v.dtype.scalar()))
    if cond.dtype.count != v.dtype.count: cond = self.lw.splat(cond, v.dtype.count)
    # a product of loads that all read 0 there adds 0 already: the select would stand between the multiply and the
    # add, which then cannot fuse into an FMA (a conv's weight gradient over 14-wide rows padded to 16, AVX2 one
    # thread: 56 -> 41 ms)
    if self.op is Ops.ADD and (conds := _lanes_of(cond, cond.dtype.count)) is not None and _zero_unless(v, conds):
      return v
    return UOp(Ops.WHERE, v.dtype, (cond, v, ident))

  def _group(self, results: dict[tuple[int, ...], UOp]) -> dict[tuple[int, ...], UOp]:
    """Stage two of a GROUP reduce: every thread writes its partial result to shared memory, a barrier, then each
    thread reduces the partials of its group (all threads compute it; only group index 0 stores)."""
    k, lw = self.k, self.lw
    local_axes = k.axes_of(AxisKind.LOCAL, AxisKind.GROUP, AxisKind.MID)
    group_axes = k.axes_of(AxisKind.GROUP)
    nkeys = len(results)
    width = max(v.dtype.count for v in results.values())
    dtype = next(iter(results.values())).dtype.scalar()
    size = prod(k.full_shape[a] for a in local_axes) * nkeys * width
    smem = UOp(Ops.DEFINE_LOCAL, dtype.ptr(local=True), (), (f"temp{self.node.key.hex()[:6]}", size))
    def slot(axis_idx: dict[int, UOp], n: int) -> UOp:
      flat = index_const(0)
      for a in local_axes: flat = flat * k.full_shape[a] + axis_idx[a]
      return simplify((flat * nkeys + n) * width)
    stores = [UOp(Ops.STORE, dtypes.void, (smem, slot(lw.axis_idx, n), v)) for n, v in enumerate(results.values())]
    barrier = UOp(Ops.BARRIER, dtypes.void, tuple(stores))
    # the partials of a float sum in levels too (REDUCE_BLOCK): alike, as the sums of like shares are
    sum_of_floats = self.op is Ops.ADD and dtype.is_float
    blocks, levels = _levels([k.full_shape[a] for a in group_axes], REDUCE_BLOCK, REDUCE_BLOCK) if sum_of_floats else \
      ([()] * len(group_axes), ())
    numbers, granges, gloops = itertools.count(k.shape_len), {}, []
    for a, b in zip(group_axes, blocks):
      granges[a], loops = _blocked_index(k.full_shape[a], b, numbers, "group")
      gloops += loops
    out: dict[tuple[int, ...], UOp] = {}
    for n, key in enumerate(results):
      for full_key, mid_idx in self._mid_keys(key):
        partial = UOp(Ops.LOAD, dtype.vec(width), (smem, slot({**lw.axis_idx, **granges, **mid_idx}, n), barrier))
        out[full_key] = self._accumulate(partial, tuple(gloops), levels)
    # one thread of each group (and of each MID part: it finishes them all) stores
    self.lw.group_gate = simplify(_all([lw.axis_idx[a].eq(0) for a in k.axes_of(AxisKind.GROUP, AxisKind.MID)]))
    return out

def _all(conds: list[UOp]) -> UOp:
  out = conds[0]
  for c in conds[1:]: out = out & c
  return out

def _split_for_vectors(k: Kernel) -> Kernel:
  """A vector axis wider than the widest vector (e.g. 32 floats) becomes (n, width): n vectors per row."""
  if k.tensor_core is not None: return k
  axis, widths = _vector_axis(k), k.renderer.vector_widths
  if axis is None or not widths or k.full_shape[axis] in widths: return k
  fits = [w for w in widths if k.full_shape[axis] % w == 0]
  if not fits: return k
  k = k.copy()
  k.split_axis(axis, max(fits), k.kinds[axis])
  return k

# The most steps one accumulator of a float sum takes in a row. Each add rounds to the running sum's precision, so a
# sum accumulated in one chain of n steps has an error that grows with n: one float32 accumulator per lane over the
# 156,250 steps of a 1e7-element sum (64 lanes, AVX-512) was off by 4.5e-4 for values near 1, whose small parts were
# all rounded away once the running sum was large. Blocks of at most this many steps, each summed into an accumulator
# that starts at 0 and is then added into the next level's, and levels of such blocks around them, bound every
# chain: a few ulp a level, as numpy's pairwise sum (chains of 16, then pairs). Long chains of alike values round
# alike: 1e7 values of 0.1 were off by 2.4e-6 in blocks of 256 steps, 7e-7 in 64, 1.1e-7 in 16 (numpy 1.1e-7), and
# 256 partial sums of like shares (a GPU block's threads) by 1.8e-6. The blocks cost nothing measured: the adds of a
# level run once per block of the level inside it, and a sum's steps are loads (1e7 and 2^16 to 2^18 floats, rows,
# columns; AVX-512 and x86-64-v3, one thread: within noise, 1-3%).
REDUCE_BLOCK = 16
# The first level of a CPU loop of scalar steps (a reduce without lanes: no vector divides an odd length) or of a
# register tile (a matmul's, a convolution's) takes this many steps. LLVM vectorizes a scalar loop itself, as it may
# reassociate an accumulator's adds (renderer/llvm.py), into 64 accumulators on AVX-512: too many for 16 steps (rows
# of 50257: 1.8x as long, with 256 as fast as one chain). A tile's accumulators fill the registers, and a level's
# second set is live across the loop inside it. Matmuls in blocks of 256 (K 512 to 65536, x @ w.T, 1x1 and unpadded
# 3x3 convolutions, AVX-512, one thread): as fast as in one chain, within 3%; near-1 values, K 4096: off by 2.7e-6 in
# one chain, 3e-7 so (numpy 3.7e-7)
REDUCE_FIRST_BLOCK = 256
# A register tile with masked loads (a padded convolution's) keeps one chain up to this many steps: in blocks, padded
# 3x3 convolutions ran 1.4-1.6x as long (64, 512 and 1024 channels, AVX-512, one thread: LLVM then emits other code
# for the masked loads; unpadded ones did not change), and the convolutions of models reduce over fewer steps
REDUCE_TILE_STEPS = 1 << 14

def _is_float_sum(r: UOp) -> bool: return r.op is Ops.REDUCE_AXIS and r.arg[0] is Ops.ADD and r.dtype.is_float

def _tile(k: Kernel, sums: list[UOp]) -> tuple[bool, bool]:
  """Whether the lanes share loaded values, a register tile (a load under a sum broadcast along an upcast axis: the
  rows of a matmul's tile share a vector of B, a convolution's output positions the weights); and whether a load under
  a sum is masked (a padded convolution's input)."""
  upcast = [a for a in k.axes_of(AxisKind.UPCAST) if k.full_shape[a] > 1]
  loads = [k.st_of(u) for u in {u for r in sums for u in r.src[0].toposort if u.op in GroupOp.Load}]
  return any(st.real_strides()[a] == 0 for st in loads for a in upcast), \
    any(v.mask is not None for st in loads for v in st.views)

def _reduce_blocks(k: Kernel) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
  """The blocks of a float sum's reduce loops (_levels) where they take more steps than its first level does
  (REDUCE_TILE_STEPS in a register tile with masked loads); else none.

  Made while lowering, after the opts, so that it holds whatever opts the heuristics or BEAM chose, on every renderer:
  only the loops are cut, never the unrolled or grouped parts of an axis, which have accumulators of their own. One
  kernel that reads its input in the same order: a split into two kernels (schedule/reduce_split.py) would write the
  partial sums to memory and read them back, and launch twice."""
  # a symbolic loop is cut as for its largest length: blocks of fixed sizes, the last one stopping at its end
  sizes = [s.vmax if isinstance(s, UOp) else s for s in (k.full_shape[a] for a in k.axes_of(AxisKind.REDUCE))]
  sums = [u for u in k.ast.toposort if _is_float_sum(u)]
  tile, masked = _tile(k, sums)
  first = REDUCE_FIRST_BLOCK if tile or (k.upcast_size() == 1 and k.renderer.target is not None) else REDUCE_BLOCK
  if k.tensor_core is not None or not sums or prod(sizes) <= (REDUCE_TILE_STEPS if tile and masked else first):
    return [()] * len(sizes), ()
  return _levels(sizes, first, REDUCE_BLOCK)

def _levels(sizes: list[int], first: int, block: int) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
  """Loops of `sizes` steps (outermost first) cut into levels of accumulators: the innermost of at most `first` steps,
  each around it of at most `block`. Returns the blocks each loop is cut into (their sizes, the innermost first) and
  how many of the loops that makes each level runs, the innermost level first. A block divides its loop where a
  divisor of more than half the room left does; else the last block is shorter."""
  plan: list[list[int]] = [[] for _ in sizes]
  levels: list[int] = []
  count, steps = 0, 1
  for j in reversed(range(len(sizes))):
    n = sizes[j]
    while n > (room := (block if levels else first) // steps):
      if room > 1:  # a block of the loop ends this level; the loop over the blocks starts the next
        d = next((d for d in range(room, room // 2, -1) if n % d == 0), room)
        plan[j].append(d)
        n = -(-n // d)
      levels.append(count + 1 if room > 1 else count)
      count, steps = 0, 1
    count, steps = count + 1, steps * n
  return [tuple(p) for p in plan], tuple(levels + [count])

def _blocked_index(n: sint, blocks: tuple[int, ...], numbers: itertools.count, kind: str) -> tuple[UOp, list[UOp]]:
  """The index of an axis of n steps and its loops (outermost first): one loop, or loops over `blocks` (the innermost
  first) and the blocks around them. A block that does not divide n (or may not: a symbolic n) leaves a shorter last
  one: its loop stops at the axis's end. Loops are numbered in order from `numbers` (linearize.py runs them in that
  order)."""
  if not blocks:
    loop = UOp(Ops.RANGE, dtypes.index, (index_const(0), index_const(n)), (next(numbers), kind))
    return loop, [loop]
  # (n >= 0: a floor division of n + block - 1 is the ceiling)
  outer, loops = _blocked_index(ssimplify((n + blocks[0] - 1) // blocks[0]), blocks[1:], numbers, kind)
  divides = not isinstance(n, UOp) and n % blocks[0] == 0
  end = index_const(blocks[0]) if divides else simplify((index_const(n) - outer * blocks[0]).minimum(blocks[0]))
  loop = UOp(Ops.RANGE, dtypes.index, (index_const(0), end), (next(numbers), kind))
  return outer * blocks[0] + loop, loops + [loop]

def lower(ast: UOp, ctx: CodegenCtx) -> UOp:
  """The pass `lower`: the kernel's AST as a loop-level graph, a SINK of STOREs over RANGEs, REDUCEs, LOADs and ALU ops.
  Procedural: what an AST node becomes depends on the kernel's axes and lanes, not on the node alone."""
  k = ctx.k
  assert ast is k.ast, "lower takes the kernel's own AST"
  lw = _Lowerer(_split_for_vectors(k))
  sink = lw.lower(k.ast)[0]
  if lw.group_gate is not None:  # after a GROUP reduce only the first thread of each group writes the result
    sink = sink.replace(src=tuple(_add_gate(s, lw.group_gate) for s in sink.src))
  # every thread records the bad indices it reads, the group's too
  if lw.flag_stores: sink = sink.replace(src=sink.src + tuple(lw.flag_stores))
  return sink

def _renderer_rules(sink: UOp, ctx: CodegenCtx) -> UOp:
  pm = ctx.k.renderer.extra_matcher
  return sink if pm is None else graph_rewrite(sink, pm, name="renderer_rules")

def _symbolic(sink: UOp, ctx: CodegenCtx) -> UOp:
  sink = graph_rewrite(sink, symbolic, name="symbolic")
  # every buffer of the kernel keeps its argument, read or not (x*0 folds its load away): the program is called with
  # all of them, and a missing one would shift the arguments after it (the CPU's core id would receive a pointer)
  # so does every scalar argument (x*v where x is all padding reads no v)
  args = [u if u.op is Ops.DEFINE_GLOBAL else UOp(Ops.DEFINE_VAR, u.dtype, (), u.arg) for u in ctx.k.ast.toposort
          if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR)] + ast_variables(ctx.k.ast)
  unread = tuple(u for u in args if not sink.reaches(u))
  return sink.replace(src=sink.src + unread) if unread else sink

def _index_dtype(sink: UOp, ctx: CodegenCtx) -> UOp:
  dt = dtypes.int64 if ctx.index64 else index_dtype(sink)
  return number_variables(with_index_dtype(sink, dt), ctx.k.ast, dt)

def number_variables(sink: UOp, ast: UOp, dt: DType) -> UOp:
  """Each Variable of the kernel (its bounds read, now that index math has its width) as the scalar argument it is
  passed in: after the kernel's numbered ones, in the order of their names (shape.view.ast_variables)."""
  first = len({u.arg for u in ast.toposort if u.op is Ops.DEFINE_VAR})
  numbered = {UOp(Ops.DEFINE_VAR, dt, (), v.arg): UOp(Ops.DEFINE_VAR, dt, (), first + i)
              for i, v in enumerate(ast_variables(ast))}
  return sink.substitute(numbered) if numbered else sink

# kernel AST -> loop-level graph: the lowering (procedural), the rules the renderer adds (a decomposition the target
# needs), the symbolic simplification of index math (rules), and the width of index math (one walk: index_dtype)
LOWER_PASSES = (
  Pass("lower", lower),
  Pass("renderer_rules", _renderer_rules),
  Pass("symbolic", _symbolic),
  Pass("index_dtype", _index_dtype),
)

def lower_kernel(k: Kernel, index64: bool = False) -> UOp:
  """The loop-level program of a kernel as a graph (LOWER_PASSES): a SINK of STOREs over RANGEs, REDUCEs, LOADs and
  ALU ops, and of the DEFINE_GLOBAL of each buffer that none of them reads any more.

  Index math is in int32 where it fits, else int64 (`index_dtype`); index64 makes it int64 always, to compare the two
  (test/test_large.py, extra/bench/index_dtype.py)."""
  return run_passes(LOWER_PASSES, k.ast, CodegenCtx(k, index64))

# ---- the width of index math ----

def index_dtype(sink: UOp) -> DType:
  """int32 when the bounds of every index value in the kernel (loop variables and their ends, launch ids, addresses,
  validity terms and every step computing them) fit it, else int64.

  Per kernel, not per expression: one width throughout means no casts between widths inside address math, and the
  decision is one walk over bounds the symbolic rules already computed. Only kernels that index more than 2**31
  elements (of a buffer, or of a loop) use int64. The speed of the two is not settled: extra/bench/index_dtype.py
  (one AVX2 EPYC core, thread CPU time, the same opts lowered both ways) measured matmul 1024, an elementwise chain,
  a transpose, arange and a gather within 3%, and a 3x3 conv of 8x64x56x56 0.85x as long with int64 (an earlier
  build of the conv: 1.13-1.49x as long). Re-measure when the renderer's address math changes."""
  lo, hi = dtypes.int32.min(), dtypes.int32.max()
  fits = all(lo <= u.vmin and u.vmax <= hi for u in sink.toposort if u.dtype.scalar() == dtypes.index)
  return dtypes.int32 if fits else dtypes.int64

def with_index_dtype(sink: UOp, dt: DType) -> UOp:
  """Every index node retyped to `dt`, and the casts that then cast to their own type (iota values) dropped.

  A walk rather than a rule table: every node is visited once and nothing needs matching (a conv tile's 568 nodes:
  14 ms through graph_rewrite, 3.4 ms so, of ~90 ms to lower it; BEAM lowers every candidate)."""
  done: dict[UOp, UOp] = {}
  for n in sink.toposort:
    src = tuple(done[s] for s in n.src)
    if n.op is Ops.CAST and src[0].dtype == n.dtype: done[n] = src[0]                    # cast(x:T, T) -> x
    elif n.dtype.scalar() == dtypes.index: done[n] = UOp(n.op, dt.vec(n.dtype.count), src, n.arg)  # index -> dt
    else: done[n] = n if src == n.src else n.replace(src=src)
  return done[sink]

def _add_gate(store: UOp, gate: UOp) -> UOp:
  if store.op is not Ops.STORE or store.src[0].op is Ops.DEFINE_LOCAL: return store
  if len(store.src) == 4: return store.replace(src=store.src[:3] + (store.src[3] & gate,))
  return store.replace(src=store.src + (gate,))
