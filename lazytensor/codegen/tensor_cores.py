"""Tensor-core kernels lowered (the kernel's TC opt, opt/kernel.py's TensorCoreUse): the block's threads stage each
K-block's tiles of A and B through shared memory, then each warp reads its fragments from there (ldmatrix where the
layout allows) and multiplies-accumulates them into the C registers of its tiles. Called by codegen/lowerer.py, whose
lowerer (`Lowering`, below, says what of it this reads) gives the indices, loops and loads."""
from __future__ import annotations

from typing import Protocol

from lazytensor.codegen.nodes import LOOP_KINDS, bits_sum, gated_load, gated_store, index_const, specials
from lazytensor.dtype import dtypes
from lazytensor.helpers import prod
from lazytensor.opt.kernel import AxisKind, Kernel, StagedTile, TensorCoreUse
from lazytensor.renderer import ASYNC_COPY, Fragment
from lazytensor.uop.ops import Ops, UOp
from lazytensor.uop.symbolic import simplify


class Lanes(Protocol):
  """The lowerer's lanes: a key per register of the kernel's upcast and unrolled axes, the vector lane's index."""
  @property
  def keys(self) -> list[tuple[int, ...]]: ...
  @property
  def vlane(self) -> UOp: ...

class Lowering(Protocol):
  """What the tensor-core lowering reads of the kernel's lowerer."""
  k: Kernel
  loops: list[UOp]
  axis_idx: dict[int, UOp]
  key_axes: list[int]
  tc_lane: UOp
  tc_thread: UOp
  tc_steps: list[UOp]
  @property
  def lanes(self) -> Lanes: ...
  def indexed(self, node: UOp, idxs: list[UOp]) -> tuple[UOp, UOp]: ...

def tc_indices(lw: Lowering, use: TensorCoreUse) -> dict[int, UOp]:
  """A block per tile of the global axes; a warp's lanes lidx0 and its warps the LOCAL axes (the other thread ids);
  its tiles (UPCAST) lanes keys; loops over the K-blocks (and any other reduce axes, a convolution's window) and,
  inside them, over the K steps of a block (UNROLL). A thread's results (the vlane) sit where the C fragment of the
  tensor core puts them."""
  k, tc, r = lw.k, use.tc, lw.k.renderer
  m_in, n_in, k_in = use.inner
  idx = specials("gidx", [a for a in k.axes_of(AxisKind.GLOBAL) if a not in use.inner], k.full_shape, r.global_max)
  warps, lane = k.axes_of(AxisKind.LOCAL), k.shape_len  # the lane: an axis past the kernel's, so that it is lidx0
  threads = specials("lidx", warps + [lane], k.full_shape + (tc.threads,), r.local_max)
  lw.tc_lane = threads.pop(lane)
  idx.update(threads)
  warp = index_const(0)
  for a in warps: warp = warp * k.full_shape[a] + idx[a]
  lw.tc_thread = simplify(warp * tc.threads + lw.tc_lane)  # lanes of a warp neighbours: coalesced copies
  idx[m_in], idx[n_in] = fragment_coords(tc.c, lw.tc_lane, lw.lanes.vlane)
  for a in k.axes_of(AxisKind.REDUCE):
    if a != k_in: idx[a] = UOp(Ops.RANGE, dtypes.index, (index_const(0), index_const(k.full_shape[a])), (a, "reduce"))
  lw.loops = [idx[a] for a in k.axes_of(AxisKind.REDUCE) if a != k_in]
  for n, a in enumerate(k.axes_of(AxisKind.UNROLL)):  # numbered past the loops above: inside them
    idx[a] = UOp(Ops.RANGE, dtypes.index, (index_const(0), index_const(k.full_shape[a])), (k.shape_len + n, "reduce"))
  lw.tc_steps = [idx[a] for a in k.axes_of(AxisKind.UNROLL)]
  return idx


class TensorCoreReduce:
  """One REDUCE_AXIS of a tensor-core kernel."""
  def __init__(self, lw: Lowering, node: UOp) -> None:
    self.lw, self.node, self.k = lw, node, lw.k

  def lower(self, use: TensorCoreUse) -> list[UOp]:
    """Each K-block, the block's threads copy the tiles of A and B into shared memory (_stage), a barrier, then for
    each K step of the block each warp reads the fragments of its tiles from there (a fragment of A serves every tile
    of its rows: one node, loaded once) and multiplies-accumulates them into the C registers of each tile (a key)."""
    lw, k, tc = self.lw, self.k, use.tc
    m_in, n_in, k_in = use.inner
    tiles = k.staged_tiles()
    smems = [UOp(Ops.DEFINE_LOCAL, t.operand.dtype.ptr(local=True), (), (f"tc_{name}{self.node.key.hex()[:6]}",
                                                                          t.stages * t.size))
             for t, name in zip(tiles, "ab")]
    count = index_const(0)
    for loop in lw.loops: count = count * loop.src[1].arg + loop  # the K-blocks counted over every loop
    copies = [self._stage(use, t, smem, count) for t, smem in zip(tiles, smems)]
    barrier, after = self._synchronize(tiles, copies, count)
    starts = [_stage_start(t, count) for t in tiles]
    ranges = tuple(lw.loops + lw.tc_steps)
    out = []
    for key in lw.lanes.keys:
      lane = dict(zip(lw.key_axes, key))
      a = self._fragment(tiles[0], smems[0], starts[0], tc.a, (m_in, k_in), lane, (barrier, *after))
      b = self._fragment(tiles[1], smems[1], starts[1], tc.b, (k_in, n_in), lane, (barrier, *after))
      out.append(UOp(Ops.REDUCE, self.node.dtype.vec(tc.c.size), (a, b, *ranges), (Ops.WMMA, (tc.name, tc.dims))))
    return out

  def _synchronize(self, tiles: tuple[StagedTile, StagedTile], copies: list[list[UOp]],
                   count: UOp) -> tuple[UOp, tuple[UOp, ...]]:
    """The barrier between the copies of K-block `count` (its stores, per operand) and the warps' reads, and the stores
    issued after it, before the reads. Where the renderer copies asynchronously (cp.async, sm_80 on) and an operand's
    copy is 16-byte vectors with no cast, that operand's first K-block is copied before the loops, and each K-block
    the barrier first waits for the thread's copies, then the copy of the next K-block into the other stage is issued
    before this one's math: the loads of K-block i + 1 fly while the warps multiply K-block i, one barrier a K-block
    still (the next copy overwrites the stage that K-block i - 1 read, which every warp finished before this
    barrier)."""
    lw = self.lw
    asynced = [self._asynchronous(t, stores) for t, stores in zip(tiles, copies)]
    if not any(asynced): return UOp(Ops.BARRIER, dtypes.void, tuple(s for st in copies for s in st)), ()
    first = {loop: index_const(0) for loop in lw.loops}
    before = [s.substitute(first).replace(arg=ASYNC_COPY) if a else s for st, a in zip(copies, asynced) for s in st]
    # in the loops (named among its sources), as the copies it waits for are issued there, the K-block before
    barrier = UOp(Ops.BARRIER, dtypes.void, (*before, *lw.loops), ASYNC_COPY)
    if not lw.loops: return barrier, ()
    nxt, sizes = simplify(count + 1), [loop.src[1].arg for loop in lw.loops]
    ahead = _mixed_radix(nxt, sizes, tuple(range(len(sizes))))
    mapping = {loop: ahead[i] for i, loop in enumerate(lw.loops)}
    return barrier, tuple(_issued_after(s, mapping, nxt.lt(prod(sizes)), barrier)
                          for st, a in zip(copies, asynced) if a for s in st)

  def _asynchronous(self, t: StagedTile, stores: list[UOp]) -> bool:
    """Whether the renderer copies this operand's tile asynchronously: 16-byte vectors loaded as they are stored."""
    return self.k.renderer.async_copy and t.operand is t.load and t.width * t.operand.dtype.itemsize == 16 and \
      all(s.src[2].op is Ops.LOAD for s in stores)

  def _stage(self, use: TensorCoreUse, t: StagedTile, smem: UOp, count: UOp) -> list[UOp]:
    """The copy of one operand's tile of this K-block (number `count`, which picks the stage) into shared memory: the
    block's threads take `width` neighbouring elements of a row each in turn (one vector load where the operand is
    contiguous there, e.g. 8 halves), cast them to the instruction's input type on the way, and store them."""
    lw, k = self.lw, self.k
    size = {a: k.full_shape[a] for a in t.axes}
    ncols, total = prod(size[a] for a in t.cols), prod(size[a] for a in t.axes)
    start, width, threads = _stage_start(t, count), t.width, k.local_size()
    lane = UOp(Ops.SPECIAL, dtypes.index, (), ("copy_lane", width))  # stands for the element within a vector
    stores = []
    for turn in range(-(-total // (threads * width))):
      flat = simplify((lw.tc_thread + turn * threads) * width)
      at = {**_mixed_radix(flat // ncols, [size[a] for a in t.rows], t.rows),
            **_mixed_radix(flat % ncols, [size[a] for a in t.cols], t.cols)}
      at[t.cols[-1]] = at[t.cols[-1]] + lane
      # the block's and the loops' indices; 0 along the axes the operand is broadcast along
      idxs = [at.get(a, lw.axis_idx[a] if k.kinds[a] in LOOP_KINDS and a not in use.inner else index_const(0))
              for a in range(k.shape_len)]
      inside = flat.lt(total) if total % (threads * width) else UOp.const(dtypes.bool, True)
      value = _cast_as(t.operand, t.load, self._copy_load(t.load, idxs, inside, lane, width))
      stores.append(gated_store(smem, simplify(start + flat // ncols * t.pitch + flat % ncols), value, inside))
    return stores

  def _copy_load(self, load: UOp, idxs: list[UOp], inside: UOp, lane: UOp, width: int) -> UOp:
    """`width` elements of `load` at `idxs` where `inside` holds, `lane` counting them: one vector load where they are
    neighbours and valid alike, else one load each."""
    idx, valid = self.lw.indexed(load, idxs)
    valid = valid & inside
    per = [(simplify(idx.substitute({lane: index_const(j)})), simplify(valid.substitute({lane: index_const(j)})))
           for j in range(width)]
    if width == 1: return gated_load(load.src[0], load.dtype, *per[0])
    if all(simplify(i - per[0][0]) is index_const(j) and v is per[0][1] for j, (i, v) in enumerate(per)):
      return gated_load(load.src[0], load.dtype.vec(width), *per[0])
    return UOp(Ops.VECTORIZE, load.dtype.vec(width), tuple(gated_load(load.src[0], load.dtype, i, v) for i, v in per))

  def _fragment(self, t: StagedTile, smem: UOp, start: UOp, f: Fragment, axes: tuple[int, int], lane: dict[int, int],
                after: tuple[UOp, ...]) -> UOp:
    """A warp's fragment of one tile, read from the operand's shared tile after the barrier (and the stores issued
    after it: the next K-block's copies, `after` past the barrier): elements `axes` (the instruction's own rows and
    columns) where the layout puts them, the other axes of the tile at this warp's, this tile's and this K step's
    index; two neighbouring elements as one load."""
    lw = self.lw
    stride = dict(zip(t.axes, t.strides))
    base = start
    for a in t.axes:
      if a not in axes: base = base + (index_const(lane[a]) if a in lane else lw.axis_idx[a]) * stride[a]
    if (rows := _matrix_rows(t, f, axes)) is not None:  # ldmatrix: each lane names one row of 8 elements
      weights, trans = rows
      row = simplify(base + bits_sum(lw.tc_lane, weights))
      return UOp(Ops.LOAD, t.operand.dtype.vec(f.size), (smem, row, *after), (MATRIX_LOAD, f.size // 2, trans))
    at = []
    for j in range(f.size):
      row, col = fragment_coords(f, lw.tc_lane, index_const(j))
      at.append(simplify(base + row * stride[axes[0]] + col * stride[axes[1]]))
    dt, elems = t.operand.dtype, []
    for j in range(0, f.size, 2):
      if j + 1 < f.size and simplify(at[j + 1] - at[j]) is index_const(1):
        pair = UOp(Ops.LOAD, dt.vec(2), (smem, at[j], *after))
        elems += [pair.gep(0), pair.gep(1)]
      else: elems += [UOp(Ops.LOAD, dt, (smem, i, *after)) for i in at[j:j + 2]]
    return UOp(Ops.VECTORIZE, dt.vec(f.size), tuple(elems))


def _issued_after(store: UOp, mapping: dict[UOp, UOp], gate: UOp, barrier: UOp) -> UOp:
  """The asynchronous copy that `store` (a vector load stored as it is) makes of another K-block: the loops at
  `mapping`, copied where `gate` holds too (elsewhere nothing is copied, nor loaded), issued after `barrier`."""
  smem, idx, load, *stored = store.substitute(mapping).src
  buf, at, *gated = load.src
  valid, alt = (gated[0] & gate, gated[1]) if gated else (gate, UOp.const(load.dtype, 0))
  load = UOp(Ops.LOAD, load.dtype, (buf, at, simplify(valid), alt, barrier))
  return UOp(Ops.STORE, dtypes.void, (smem, idx, load, simplify(stored[0] & gate) if stored else gate), ASYNC_COPY)

def _stage_start(t: StagedTile, count: UOp) -> UOp:
  """Where the stage of K-block number `count` starts in the operand's shared buffer: the stages alternate."""
  return simplify(count % t.stages * t.size) if t.stages > 1 else index_const(0)

def _mixed_radix(x: UOp, sizes: list[int], axes: tuple[int, ...]) -> dict[int, UOp]:
  """The index along each of `axes` (the last fastest, of `sizes`) of a flat index x over them."""
  out = {}
  for i, a in enumerate(axes):
    inner = prod(sizes[i + 1:])
    at = x // inner if inner > 1 else x
    out[a] = simplify(at % sizes[i] if i else at)  # the first takes what is left
  return out

# the arg of a LOAD from shared memory that a warp does together (PTX's ldmatrix.sync.aligned.m8n8.x{n}[.trans].b16):
# (MATRIX_LOAD, n, trans). Its index is this lane's row: lane 8i + r names where row r of 8x8 matrix i starts (8
# neighbouring 16-bit elements; lanes past the n matrices' rows name one of them again). Lane l receives elements
# (l // 4, 2 (l % 4) + e) of matrix i as its registers 2i + e; with trans, elements (2 (l % 4) + e, l // 4)
MATRIX_LOAD = "ldmatrix"

def _matrix_rows(t: StagedTile, f: Fragment, axes: tuple[int, int]) -> tuple[list[int], bool] | None:
  """Where a fragment of 16-bit elements is n 8x8 matrices of rows of 8 neighbouring elements of the shared tile (A of
  m16n8k16 read along K, B read along N with trans): each lane's row offset as weights of its bits (as fragment_coords
  weighs them) and whether the matrices are transposed; None where the layout does not allow it (tf32's 32-bit
  elements, rows not 16-byte aligned)."""
  if t.operand.dtype.itemsize != 2 or f.size % 2 or t.size % 8: return None
  stride = dict(zip(t.axes, t.strides))
  if any(stride[a] % 8 for a in t.axes if a not in axes): return None
  def at(lane: int, reg: int) -> int:
    r, c = f.coords(lane, reg)
    return r * stride[axes[0]] + c * stride[axes[1]]
  n = f.size // 2
  for trans in (False, True):
    # row q of matrix i: the element that lane 4q (trans: lane q // 2, register 2i + q % 2) holds first
    rows = [at((q % 8) // 2, 2 * i + q % 2) if trans else at(4 * (q % 8), 2 * i) for q, i in
            ((lane, lane // 8 % n) for lane in range(f.threads))]
    weights = [rows[1 << b] - rows[0] for b in range(len(f.lane))]
    if rows[0] == 0 and all(r % 8 == 0 and r == sum(w for b, w in enumerate(weights) if lane >> b & 1)
                            for lane, r in enumerate(rows)) and \
       all(rows[src] + col == at(lane, reg) for lane in range(f.threads) for reg in range(f.size)
           for src, col in (_matrix_source(lane, reg, trans),)):
      return weights, trans
  return None

def _matrix_source(lane: int, reg: int, trans: bool) -> tuple[int, int]:
  """Which lane's row register `reg` of `lane` comes from in a matrix load, and where in that row."""
  i, e = divmod(reg, 2)
  return (8 * i + 2 * (lane % 4) + e, lane // 4) if trans else (8 * i + lane // 4, 2 * (lane % 4) + e)

def _cast_as(operand: UOp, load: UOp, value: UOp) -> UOp:
  """`value` (loaded as `load`, maybe a vector) through the casts that make `operand` of `load`."""
  if operand is load: return value
  return UOp(Ops.CAST, operand.dtype.vec(value.dtype.count), (_cast_as(operand.src[0], load, value),))

def fragment_coords(f: Fragment, lane: UOp, elem: UOp) -> tuple[UOp, UOp]:
  """(row, col) of register `elem` of lane `lane` in a tensor-core fragment, as index math."""
  row = bits_sum(lane, [r for r, _ in f.lane]) + bits_sum(elem, [r for r, _ in f.elem])
  col = bits_sum(lane, [c for _, c in f.lane]) + bits_sum(elem, [c for _, c in f.elem])
  return simplify(row), simplify(col)

