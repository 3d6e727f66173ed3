"""Packing: which operands of a large reduce over products (a matmul, a convolution) the scheduler reads from a copy
kernel that re-lays them in blocks first, on a CPU target. `pack_choice` is the heuristics' choice, `pack_candidates`
the variants BEAM times (schedule/pack_search.py); the scheduler builds the copies (scheduler._blocked) and keeps the
graph a Tensor builds the same on every device. The blocks are sized for the register tile of the kernel heuristics
(heuristic.py) that then optimize the reduce.
"""
from __future__ import annotations

from dataclasses import dataclass

from lazytensor.helpers import prod
from lazytensor.opt.heuristic import TILE_VECTORS, pads_little, tile_rows
from lazytensor.renderer.cpu_target import CPUTarget
from lazytensor.shape.view import ShapeTracker, View

# matmul: B (k, m) as column panels (m/p, k, p), p the register tile's width. A tile reads p columns of B for every k;
# in B's own layout each read is a new row, often a new page, so large matmuls become TLB- and cache-bound (AVX-512
# at 2048: 50 -> 96 GFLOP/s packed) for a copy of about 1% of the matmul. Worth it from this many multiply-adds, with
# at least PANEL_MIN_REDUCE rows of B and PANEL_MIN_ROWS rows of A (the copies hold only what the matmul reads: on one
# AVX2 thread, 64x1024 @ 1024x1024 0.45x -> ~0.9x torch, 256x1024 @ 1024x256 0.5x -> ~0.85x, packed from 2**24).
# An A read across its rows (x.T @ dy: a weight gradient) packs whatever K: in place its 8 neighbouring values per
# step became the tile's vectors (8-wide, 32 accumulators), its rows 1 KB apart sharing few L1 sets. Both copies
# included, on one thread, AVX-512 / AVX2, us: 256x128 @ 128x784 (an MLP's first weight gradient at batch 128) 636
# -> 267 / 566 -> 446, 768x128 @ 128x768 1095 -> 752 / 2309 -> 1259, 256x32 @ 32x784 169 -> 166 / 125 -> 125. Not
# a batch of small matmuls, nor a row-major A with a short K: packed, 64 matmuls of 128^3 went 1618 -> 2288 on
# AVX-512 (two 4 MB copies, the matmul no faster), with A transposed 1815 -> 2866 (the matmul 1815 -> 1498); 256x128
# @ 128x784 with a row-major A on AVX2 gained though (1061 -> 455: unexplored)
PANEL_MIN_WORK = 1 << 24
PANEL_MIN_REDUCE = 256
PANEL_MIN_ROWS = 64
# B read across its rows (x @ w.T, attention's q @ k.T) has no vectors along the columns in place: the tile falls back
# to dot products along K (heuristic._dot_tile), whose sums across lanes cost as much as a short K's FMAs. Packed,
# from this many multiply-adds whatever K: on one AVX-512 thread (both copies and the matmul) 12 heads of 128x64 @
# 64x128 (BERT's scores) 775 -> 177 us, 128x64 @ 64x128 63 -> 23, 128x128 @ 128x256 142 -> 57, 64x64 @ 64x64 17 -> 9
# (two more kernels, which eager calls pay more for)
PANEL_MIN_WORK_TRANSPOSED = 1 << 20
# conv: weight (cout, cin, *k) as (cout/16, cin, *k, 16). In its own layout neighbouring output channels' weights are
# cin*k apart, so the tile vectorizes along the output width instead, every input load masked by the padding; in
# blocks, one vector load gives 16 output channels and each input is a broadcast scalar (32x64x56x56 by 64x3x3 on one
# AVX-512 thread: 44 -> ~100 GFLOP/s). 16 channels are one AVX-512 vector or two AVX2 ones, both measured best.
# A conv's weight gradient (cout, cin, *k) reads the output's gradient in blocks of output channels the same way: 32 x
# 128x14x14 by 128x3x3 on one AVX2 thread, 16 channels x 4 input channels: 44-56 ms (dot products along 14-wide rows
# padded to 16, masked) -> 23-30 ms, torch 34; the copy ~0.2-2 ms.
CHANNEL_BLOCK = 16
CHANNEL_MIN_WORK = 1 << 24

@dataclass(frozen=True)
class Packing:
  """Read operand `operand` from a copy of the elements it reads (its broadcast axes taken once), laid out with axis
  `axis` of the reduce's input split in blocks of `block`: the blocks outermost, then the operand's other axes in
  order, then the block's elements innermost (a matmul's B (k, n) becomes (n/block, k, block): column panels). The
  axis is padded with zeros to a multiple of `multiple` (0: of `block`). With `source_order`, the other axes are in the
  order the operand's source lays them out (the largest stride first) instead of the reduce's: with a block of 1
  along the outermost, a dense copy of what a strided view reads (_gathers)."""
  operand: int
  axis: int
  block: int
  multiple: int = 0
  source_order: bool = False

def _clean_view(st: ShapeTracker) -> View | None:
  return st.views[0] if len(st.views) == 1 and st.views[0].mask is None else None

def _broadcast_size(v: View, out_axes: list[int]) -> int:
  return max((v.shape[a] for a in out_axes if v.strides[a] == 0), default=1)

def _matmul_packings(target: CPUTarget, shape: tuple[int, ...], out_axes: list[int], reduce_size: int,
                     views: list[View | None], force: bool) -> tuple[Packing, ...] | None:
  """B as column panels as wide as the register tile, and A as row panels as tall as it (so that a tile's rows of A
  are neighbours too: AVX2 at 2048, one thread, kernel alone: 0.65-0.69x -> 0.82-0.87x numpy); () for a matmul too
  small to pay (unless `force`: what BEAM may time); None for no matmul."""
  # B varies along the output's last axis, where the register tile puts its vectors, and is broadcast along another
  col = next((a for a in reversed(out_axes) if shape[a] > 1), None)
  if col is None: return None
  bs = [(i, v) for i, v in enumerate(views)
        if v is not None and v.strides[col] != 0 and _broadcast_size(v, out_axes) > 1]
  if not bs: return None
  # one contiguous along it is B as it is; one read across its rows (x @ w.T: a Linear's forward) is B transposed, its
  # panels gathered from rows (an operand contiguous along another output axis is an A read transposed, x.T @ y)
  i, v = min(bs, key=lambda b: b[1].strides[col] != 1)
  if _broadcast_size(v, out_axes) < PANEL_MIN_ROWS: return None
  panel = TILE_VECTORS * target.vector_floats
  # A's rows: the last output axis along which B is broadcast, as heuristic._register_tile picks it
  rows_axis = next(a for a in reversed(out_axes) if v.strides[a] == 0 and shape[a] > 1)
  batched = any(all(va is None or va.strides[a] != 0 for va in views) for a in out_axes if shape[a] > 1)
  a_across_rows = not batched and any(va is not None and va.strides[rows_axis] == 1 for j, va in enumerate(views)
                                      if j != i)
  small = not force and (prod(shape) < PANEL_MIN_WORK_TRANSPOSED if v.strides[col] != 1 else
                         (reduce_size < PANEL_MIN_REDUCE and not a_across_rows) or prod(shape) < PANEL_MIN_WORK)
  # panels past the last column are zeros: at most 1/MAX_PAD_FRACTION more work, as heuristic._pad_for_vectors pads
  if small or shape[col] < 2 * panel or not pads_little(shape[col], panel): return ()
  packs = [Packing(i, col, panel)]
  rows, multiple = tile_rows(target, shape[rows_axis])
  packs += [Packing(j, rows_axis, rows, multiple) for j, va in enumerate(views)
            if j != i and va is not None and rows is not None and va.strides[rows_axis] != 0]
  return tuple(packs)

def _reads_once(v: View) -> bool:
  """Whether the view reads no element twice: its axes, by stride, each step past the span of all the smaller ones (a
  convolution's windows overlap: a copy of what they read would hold the input kernel-size times). A span, not the
  axis's size times its stride: the taps of a stride-2 conv's input gradient that one parity of the input's pixels
  takes are every other tap of a 3x3 kernel, (2, 2) at strides (6, 2), which span 9 of each input channel's 9, not 12
  (their weights were not packed in blocks of channels, and the kernel ran unvectorized: see CHANNEL_BLOCK)."""
  span = 0
  for st, n in sorted((abs(st), n) for st, n in zip(v.strides, v.shape) if st != 0 and n > 1):
    if st <= span: return False
    span += st * (n - 1)
  return True

def _channel_packing(shape: tuple[int, ...], out_axes: list[int], views: list[View | None],
                     force: bool) -> tuple[Packing, ...]:
  """An operand in blocks of CHANNEL_BLOCK along an output axis it is not contiguous along and every other readable
  operand is broadcast along, if large enough (or `force`): a convolution's weight along the output channels; its
  weight gradient's output gradient along them too (the tile then runs vectors of output channels by rows of input
  channels and taps instead of dot products along the image rows). The operand must be read at least CHANNEL_BLOCK
  times (its broadcast axes) and read once by the view (no overlapping windows to copy many times)."""
  if not force and prod(shape) < CHANNEL_MIN_WORK: return ()
  for i, v in enumerate(views):
    if v is None or prod(v.shape[a] for a in out_axes if v.strides[a] == 0) < CHANNEL_BLOCK or not _reads_once(v):
      continue
    for a in reversed(out_axes):
      if v.strides[a] in (0, 1) or shape[a] % CHANNEL_BLOCK: continue
      if any(o is not None and o.strides[a] != 0 for j, o in enumerate(views) if j != i): continue
      return (Packing(i, a, CHANNEL_BLOCK),)
  return ()

def _own_axes(v: View) -> list[int]:
  """The axes a view reads along (not broadcast), the outermost in its source (the largest stride) first."""
  return sorted((a for a, (st, n) in enumerate(zip(v.strides, v.shape)) if st != 0 and n > 1),
                key=lambda a: -abs(v.strides[a]))

def _gathers(shape: tuple[int, ...], out_axes: list[int], views: list[View | None],
             force: bool) -> dict[int, Packing]:
  """A dense copy, in its source's order, of each operand that reads along no axis with stride 1 and no element twice
  (a stride-2 1x1 convolution's input: every other pixel of every other row), from CHANNEL_MIN_WORK multiply-adds (or
  `force`). Read in place, no axis gives vectors of it, and a tile of its pixels by vectors of output channels streams
  the whole input once per block of channels: 8x512x28x28 by 1024x512x1x1, stride 2, on one AVX-512 thread, 47 ->
  ~100 GFLOP/s gathered (torch 130); 8x256x56x56 by 512x256x1x1: 25 -> ~110 (torch 100)."""
  if not force and prod(shape) < CHANNEL_MIN_WORK: return {}
  gathers = {}
  for i, v in enumerate(views):
    if v is None or not (own := _own_axes(v)) or not _reads_once(v) or not any(a in out_axes for a in own): continue
    if min(abs(v.strides[a]) for a in own) > 1: gathers[i] = Packing(i, own[0], 1, source_order=True)
  return gathers

def _gathered(v: View) -> View:
  """The view of a dense copy of what `v` reads, in its source's order (_gathers)."""
  strides, step = [0] * len(v.shape), 1
  for a in reversed(_own_axes(v)): strides[a], step = step, step * v.shape[a]
  return View.create(v.shape, tuple(strides))

def _packings(target: CPUTarget, reduce_axes: tuple[int, ...], operands: list[ShapeTracker],
              force: bool) -> tuple[Packing, ...]:
  views = [_clean_view(op) for op in operands]
  if (v0 := next((v for v in views if v is not None), None)) is None: return ()
  shape = v0.shape
  out_axes = [a for a in range(len(shape)) if a not in reduce_axes]
  # the panels and blocks are chosen for the operands as gathered; a panel or block copy of one gathers it too
  gathers = _gathers(shape, out_axes, views, force)
  views = [_gathered(v) if i in gathers and v is not None else v for i, v in enumerate(views)]
  matmul = _matmul_packings(target, shape, out_axes, prod(shape[a] for a in reduce_axes), views, force)
  # a matmul whose last output axis is narrower than a vector (a conv's weight gradient ends in the kernel's 3 taps)
  # has no room for vectors there: blocks of another axis give them
  last = next((shape[a] for a in reversed(out_axes) if shape[a] > 1), 1)
  packs = matmul if matmul is not None and (matmul or last >= target.vector_floats) else \
    _channel_packing(shape, out_axes, views, force)
  packed = {p.operand for p in packs}
  return packs + tuple(p for i, p in gathers.items() if i not in packed)

def pack_choice(target: CPUTarget, reduce_axes: tuple[int, ...], operands: list[ShapeTracker]) -> tuple[Packing, ...]:
  """Which operands of a reduce over the products of `operands` (each viewed at the reduce's input shape) to read from
  a copy that has the blocks of one of their output axes innermost; () to read them as they are. An operand with a
  contiguous output axis along which the other is broadcast is a matmul's B (_matmul_packings). Without one (a
  convolution, whose input windows are masked by the padding), or where that axis is narrower than a vector (a conv
  weight gradient's taps), the operand broadcast along the others gets blocks of channels (_channel_packing)."""
  return _packings(target, reduce_axes, operands, force=False)

# BEAM times the packings of a reduce over products from this many multiply-adds (~0.5 ms on one thread); below, a
# copy kernel costs about what it could save
PACK_SEARCH_MIN_WORK = 1 << 24

def pack_candidates(target: CPUTarget, reduce_axes: tuple[int, ...],
                    operands: list[ShapeTracker]) -> list[tuple[Packing, ...]]:
  """The packings BEAM times for a reduce over products, the heuristics' choice (pack_choice) first: then none, every
  operand packed that the shape allows whatever its size, and a matmul's B alone. Only the heuristics' choice for a
  reduce too small to search."""
  choice = pack_choice(target, reduce_axes, operands)
  if max((st.size for st in operands), default=0) < PACK_SEARCH_MIN_WORK: return [choice]
  full = _packings(target, reduce_axes, operands, force=True)
  return list(dict.fromkeys([choice, (), full, full[:1]]))
