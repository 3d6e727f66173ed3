"""A reduce along a strided axis of an operand larger than the cache runs as two reduces: blocks of a few rows first.

`x.sum(0)` of a 4096x4096 float32 matrix, one kernel: vectors of outputs along the contiguous rows, each summing all
4096 rows. Every load of one vector's loop is on another row, 16 KB from the last: thousands of streams at once, which
the hardware prefetchers do not follow and whose pages miss the TLB, 8 GB/s on one Zen 4 thread (numpy 17). Summing
blocks of SPLIT_BLOCK rows first (a kernel that sweeps 8 rows at a time, writing an eighth of the input) and then the
partial sums (a kernel over data that stays in cache) reads memory at 18-22 GB/s; two threads 15 -> 24-27 GB/s. An
operand that fits in the cache gains nothing (the strided reads hit it): half of L3 and up, measured on one Zen 4
thread (32 MB L3): 8 MB 41 -> 38 GB/s, 16 MB 26 -> 41, 32 MB 15 -> 30, 64 MB 8.4 -> 22, 128 MB 8.0 -> 18; max alike.
Rows narrower than a page gain nothing either (65536x256: 8.6 -> 8.4).

On a GPU the reason is another: a block of threads reduces each output (GROUP), so a reduce to fewer outputs than the
GPU has multiprocessors leaves most of them idle; `x.sum()` of 16M floats would be one block of 256 threads. Such a
reduce, over enough data that a second launch is worth it, first sums chunks in partial reduces (enough of them for
GPU_BLOCKS_PER_SM blocks on every SM), then the partials.

A matmul with a long reduce is the third case (matmul_k_block): its B, packed in column panels as wide as the
register tile, is read once per tile of rows, one panel at a time (the panels loop outside the rows, so that a panel
stays in L2 while every row tile uses it). Where a panel over the whole of K does not fit in L2, each row tile streams
it from L3 again: partial products over blocks of K whose panels fit, the blocks outermost, then their sum.

A matrix-vector product x @ W with W stored (in, out) is the fourth (matvec_block): a decode step's. Its kernel keeps
vectors of outputs in registers and walks every input row for each, so each load is a row (3-12 KB) after the last,
a new page every time, which the prefetchers do not follow: GPT-2's c_fc (768 x 3072) read at 11.3 GB/s where the
thread streams 15-16. Partial products over blocks of MATVEC_BLOCK rows, the blocks outermost (each block's rows read
through once, as a few sequential streams), then their sum. Measured on one AVX-512 thread (2 MB L2), W coming from
memory: 768 x 3072 and 3072 x 768 ~960 -> ~730 us, 768 x 2304 ~600 -> ~550, 768 x 768 ~230 -> ~210; W still in the
cache from its last use: 768 x 3072 ~490 -> ~395 (and 3072 x 768 alike), 768 x 2304 ~300 -> ~310, 768 x 768 62-80 ->
69-109. So it is split where W is at least MATVEC_MIN_L2 times L2, where it wins whether the weight is cached or not:
a rule by size, not by the program's history (which weights are still cached), which a schedule does not see.

A convolution's weight gradient is the fifth (batch_block): a reduce over the batch and the pixels, whose tile of
16 output by 16 input channels reads both operands' blocks of channels over the whole of it, and its 9 taps (and the
other blocks of channels) read them again. Where that is more than L2 holds (ResNet18's first stage at batch 8: 16
channels of 8 images of 56x56, 1.6 MB of each operand), every tile streams them from L3: 91 GFLOP/s on one AVX-512
thread, where one image alone runs at 160. Partial gradients per block of images, the blocks outermost, then their sum.

The split is the device's choice, made where the scheduler packs operands (schedule.pack_operands): the tensor graph
is the same on every device. On the CPU only reduces whose operand reads buffers directly through elementwise ops are
split, so that the memory strides are known.
"""
from __future__ import annotations

from collections.abc import Callable

from lazytensor.helpers import argsort, prod
from lazytensor.opt.packing import pack_choice
from lazytensor.renderer import Renderer
from lazytensor.renderer.cpu_target import CPUTarget
from lazytensor.shape.view import ShapeTracker
from lazytensor.uop.ops import GroupOp, Ops, UOp

SPLIT_BLOCK = 8  # rows per partial sum: 4 gained less (11-16 GB/s at 64 MB), 32 lost it (10-11)
SPLIT_MIN_ROWS = 64  # at least this many rows to reduce: 8 partial sums each
SPLIT_MIN_ROW_BYTES = 4096  # a page: the contiguous run of outputs that one row holds
SPLIT_L3_FRACTION = 2  # the operand at least this fraction of L3

_NUMBERS = (Ops.CONST, Ops.DEFINE_VAR)  # read no buffer

def _leaf_strides(u: UOp) -> list[tuple[int, ...]] | None:
  """The strides of each buffer that `u` reads through elementwise ops, in elements, at u's shape; None where it reads
  something else (a computed value, a view of more than one layer)."""
  out, stack, seen = [], [u], set()
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    if n.op in _NUMBERS or (n.op is Ops.VIEW and n.src[0].op in _NUMBERS): continue
    if n.op is Ops.VIEW and n.src[0].op is Ops.BUFFER:
      if len(n.arg.views) != 1: return None
      out.append(n.arg.views[0].strides)
      continue
    if n.op not in GroupOp.Elementwise: return None
    stack.extend(n.src)
  return out

def split_block(target: CPUTarget, r: UOp) -> int | None:
  """Rows per partial reduce for the reduce `r` on a device with this CPU target, or None to leave it whole: one
  reduce axis, not the last, of at least SPLIT_MIN_ROWS rows that SPLIT_BLOCK divides, rows of at least a page, and a
  buffer read whole (the stream: broadcast along no axis) of at least 1/SPLIT_L3_FRACTION of L3, at a stride along the
  reduce and contiguously along the rows; every other buffer read along the rows or broadcast."""
  src, (_, axes) = r.src[0], r.arg
  shape = src.shape
  if len(axes) != 1 or (axis := axes[0]) == len(shape) - 1: return None
  rows, itemsize = shape[axis], src.dtype.itemsize
  if rows < SPLIT_MIN_ROWS or rows % SPLIT_BLOCK or prod(shape[axis + 1:]) * itemsize < SPLIT_MIN_ROW_BYTES: return None
  if prod(shape) * itemsize < target.l3_bytes // SPLIT_L3_FRACTION: return None
  # every buffer read along the rows (or broadcast), not along the reduce (a bias broadcast along it is read from
  # cache)
  if (strides := _leaf_strides(src)) is None or not all(st[-1] in (0, 1) and st[axis] != 1 for st in strides):
    return None
  # the stream is the whole of the reduce's input, so the partials are 1/SPLIT_BLOCK of it. A buffer broadcast along
  # some axis is reused: where every one is (a matmul's weight gradient x.T @ dy with x (512, 768), 2-D as a large
  # batch's MLP has it: its input (512, 768, 3072) is a broadcast product), the partials would be rows/SPLIT_BLOCK
  # copies of the output, 600 MB for 64 blocks of 8 rows, 24 GFLOP/s where the matmul whole runs at ~170
  stream = any(st[-1] == 1 and st[axis] != 0 and all(s != 0 or n == 1 for s, n in zip(st, shape)) for st in strides)
  return SPLIT_BLOCK if stream else None

GPU_SPLIT_MIN_ELEMENTS = 1 << 18  # below this (1 MiB of floats) one block's time is a launch's: one kernel
GPU_BLOCKS_PER_SM = 2  # partial reduces per multiprocessor, so that one finishing late does not idle the rest
GPU_SPLIT_MIN_CHUNK = 2048  # elements a partial reduce sums at least: a block of 256 threads, 8 each

def gpu_split_block(renderer: Renderer, r: UOp) -> int | None:
  """Elements per partial reduce for the reduce `r` on a GPU, or None to leave it whole: one reduce axis, fewer outputs
  than GPU_BLOCKS_PER_SM blocks for each multiprocessor and at least GPU_SPLIT_MIN_ELEMENTS read. The partials are
  the fewest that make that many blocks (or as many as chunks of GPU_SPLIT_MIN_CHUNK allow), rounded up to a divisor
  of the axis."""
  src, (_, axes) = r.src[0], r.arg
  want = GPU_BLOCKS_PER_SM * renderer.multiprocessors
  if not renderer.has_local or len(axes) != 1 or (outputs := prod(r.shape)) >= want or \
     prod(src.shape) < GPU_SPLIT_MIN_ELEMENTS: return None
  size = src.shape[axes[0]]
  if (parts := min(-(-want // outputs), size // GPU_SPLIT_MIN_CHUNK)) < 2: return None
  return next((size // p for p in range(parts, size // (GPU_SPLIT_MIN_CHUNK // 2) + 1) if size % p == 0), None)

# GPT-2's output layer's input gradient, dlogits (512, 50257) @ W (50257, 768): each column panel of W is 50257 x 32
# floats (6.4 MB) on AVX-512, more than L2 holds, so each of the 64 tiles of 8 rows streamed it from L3: the matmul
# kernel 568 ms on one AVX-512 thread (rocketlake VM, 2 MB L2), 64 GFLOP/s. In 29 blocks of 1733 (a panel's block 222
# KB) 231-254 ms, and 2 ms for the sum of the 29 partial products (45 MB). The size of a block, measured at K = 32768
# (512 x 768 output): whole 294-345 ms; panel blocks of L2/4 181; L2/8 to L2/32 165-171 (the partials grow with them)
K_SPLIT_L2_FRACTION = 2  # a panel over the whole of K longer than this fraction of L2 is split (else it stays there)
K_BLOCK_L2_FRACTION = 8  # the block of a panel aimed at: this fraction of L2
K_BLOCK_RANGE = 4  # the divisor of K nearest that aim, from 1/K_BLOCK_RANGE of it up to twice it (50257 = 29 x 1733)
K_PARTIALS_FRACTION = 4  # the partial products at most this fraction of the bytes the operands read

def matmul_k_block(target: CPUTarget, r: UOp) -> int | None:
  """The size of the blocks of K for the reduce `r` over products (one reduce axis), or None to leave it whole: where
  the heuristics pack an operand in panels (opt.packing.pack_choice) longer than 1/K_SPLIT_L2_FRACTION of L2, the
  divisor of K nearest a block of 1/K_BLOCK_L2_FRACTION of L2 (within K_BLOCK_RANGE), if the partial products are a
  small part of what the operands read."""
  src, (op, axes) = r.src[0], r.arg
  if op is not Ops.ADD or len(axes) != 1 or src.op is not Ops.MUL or any(v.op is not Ops.VIEW for v in src.src):
    return None
  # a panel is at least a vector wide: most products are too short to ask the heuristics
  size, most = src.shape[axes[0]], target.l2_bytes // K_SPLIT_L2_FRACTION
  if size * target.vector_floats * src.dtype.itemsize <= most: return None
  packs = pack_choice(target, axes, [v.arg for v in src.src])
  if not packs or (panel := packs[0]).block < 2: return None
  if size * (row_bytes := panel.block * src.src[panel.operand].dtype.itemsize) <= most: return None
  aim = max(target.l2_bytes // (K_BLOCK_L2_FRACTION * row_bytes), 1)
  fits = [b for b in range(max(aim // K_BLOCK_RANGE, 1), min(2 * aim, size // 2) + 1) if size % b == 0]
  if not fits: return None
  block = min(fits, key=lambda b: max(b / aim, aim / b))
  read = sum(v.arg.real_size() * v.dtype.itemsize for v in src.src)
  return None if size // block * prod(r.shape) * r.dtype.itemsize * K_PARTIALS_FRACTION > read else block

MATVEC_BLOCK = 32  # input rows per partial product (GPT-2's four matvecs, cold: 768 x 3072 861 -> 669 us)
MATVEC_MIN_L2 = 3  # ...of a weight at least this many times L2 (above: 768 x 2304, 3.4 x 2 MB, gains cold, ties warm)

def matvec_block(target: CPUTarget, r: UOp) -> int | None:
  """Input rows per partial product for the reduce `r`, or None to leave it whole: where `r` is a product of a vector
  and a matrix W read from a buffer, every element of W once (one output row), along the outputs contiguously and
  along the reduce at a stride, W at least MATVEC_MIN_L2 times L2."""
  src, (op, axes) = r.src[0], r.arg
  if op is not Ops.ADD or len(axes) != 1 or src.op is not Ops.MUL or any(v.op is not Ops.VIEW for v in src.src):
    return None
  size, shape = src.shape[axes[0]], src.shape
  if size % MATVEC_BLOCK or size < 2 * MATVEC_BLOCK: return None
  for v in src.src:
    if v.src[0].op is not Ops.BUFFER or len(v.arg.views) != 1: continue
    strides = v.arg.views[0].strides
    # each element once (broadcast along no axis), contiguous along an output axis, strided along the reduce
    if all(s != 0 or n == 1 for s, n in zip(strides, shape)) and strides[axes[0]] > 1 and 1 in strides and \
       prod(shape) * v.dtype.itemsize >= MATVEC_MIN_L2 * target.l2_bytes: return MATVEC_BLOCK
  return None

# 16 channels of each operand over the reduce of a conv's weight gradient: past this fraction of L2 the blocks of the
# batch are split off, each as many images as keep the blocks within BATCH_BLOCK_L2_FRACTION of it (at least one).
# ResNet18 b8, one AVX-512 thread (2 MB L2), weight gradients: 64x56x56 3.2 MB -> 1 image, 20.3 -> ~12 ms; the 7x7
# stem's (two blocks of 16 output channels) 12.8 MB -> 1 image, 26 -> ~14 ms; 128x28x28 0.8 MB stays whole (per
# image: 12.7 -> 12.6 ms, no gain)
BATCH_SPLIT_L2_FRACTION = 2
BATCH_BLOCK_L2_FRACTION = 4
BATCH_TILE_CHANNELS = 16  # the channels of each operand that one tile reads (opt.packing.CHANNEL_BLOCK)

def batch_block(target: CPUTarget, r: UOp) -> int | None:
  """Images per partial reduce for the reduce `r` over products, or None to leave it whole: where `r` reduces over
  several axes, the first of them the outermost of its input (a convolution's weight gradient: the batch, then the
  pixels), and a tile's BATCH_TILE_CHANNELS channels of both operands over the whole reduce outgrow
  1/BATCH_SPLIT_L2_FRACTION of L2."""
  src, (op, axes) = r.src[0], r.arg
  if op is not Ops.ADD or len(axes) < 2 or axes[0] != 0 or src.op is not Ops.MUL or \
     any(v.op is not Ops.VIEW or len(v.arg.views) != 1 for v in src.src): return None
  images = src.shape[0]
  per_image = sum(prod(src.shape[a] for a in axes if v.arg.views[0].strides[a] != 0) * v.dtype.itemsize
                  for v in src.src) * BATCH_TILE_CHANNELS // images
  if images < 2 or per_image * images <= target.l2_bytes // BATCH_SPLIT_L2_FRACTION: return None
  return max(b for b in range(1, images) if images % b == 0 and
             (b == 1 or b * per_image <= target.l2_bytes // BATCH_BLOCK_L2_FRACTION))

def _operand_views(src: UOp) -> list[ShapeTracker]:
  """The views of `src` a split moves: each operand's of a product of views (so that each stays one view of its own
  source, as the packing of a matmul's operands reads them), else one of src itself."""
  if src.op is Ops.MUL and all(v.op is Ops.VIEW for v in src.src): return [v.arg for v in src.src]
  return [ShapeTracker.from_shape(src.shape)]

def _moved(src: UOp, sts: list[ShapeTracker]) -> UOp:
  if src.op is Ops.MUL and all(v.op is Ops.VIEW for v in src.src):
    return src.replace(src=tuple(v.replace(arg=st) for v, st in zip(src.src, sts)))
  return UOp(Ops.VIEW, src.dtype, (src,), sts[0])

def _merged(sts: list[ShapeTracker], red: tuple[int, ...]) -> tuple[list[ShapeTracker], tuple[int, ...]]:
  """`sts` with neighbouring axes other than those of `red` merged where every view walks the two as one axis, and
  red's new positions: a batch of row blocks (x (4, 128, K) @ W) is one axis of rows, whose packed copy is in row
  panels as the tile walks them (else the tile reads it through two views, with a division in every load: 254 -> 590
  ms)."""
  i = 0
  while i < len(sts[0].shape) - 1:
    shape = sts[0].shape
    new = shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
    merged = [st.reshape(new) for st in sts] if i not in red and i + 1 not in red else sts
    if merged is sts or any(len(m.views) > len(st.views) for m, st in zip(merged, sts)):
      i += 1
      continue
    sts, red = merged, tuple(a - (i < a) for a in red)
  return sts, red

def split_reduce(r: UOp, block: int, outer: bool = False, partial_of: Callable[[UOp], UOp] = lambda p: p) -> UOp:
  """`r` as a reduce of partial reduces over blocks of `block` rows of its first reduce axis (the partials reduce its
  other axes whole): the partials are a value of their own (a kernel and a buffer), the reduce over them has r's
  shape. With `outer`, the blocks are the partials' first axis (the partial kernel's outermost loop) and the other
  axes merged where they can be; `partial_of` lays out the partial reduce (the scheduler packs a matmul's
  operands)."""
  src, (op, (axis, *others)) = r.src[0], r.arg
  shape, blocks = src.shape, src.shape[axis] // block
  blocked = shape[:axis] + (blocks, block) + shape[axis + 1:]
  order = (axis, *range(axis), *range(axis + 1, len(blocked))) if outer else tuple(range(len(blocked)))
  reduced = (axis + 1, *(a + 1 for a in others))  # in `blocked` (every other axis is after `axis`)
  red = tuple(sorted(order.index(a) for a in reduced))
  sts = [st.reshape(blocked).permute(order) for st in _operand_views(src)]
  if outer: sts, red = _merged(sts, red)
  partial = partial_of(UOp(Ops.REDUCE_AXIS, r.dtype, (_moved(src, sts),), (op, red)))
  moved = tuple(1 if i in reduced else blocked[i] for i in order)
  partials = tuple(blocks if a == axis else 1 if a in others else n for a, n in enumerate(shape))
  parts = UOp(Ops.VIEW, r.dtype, (partial,), ShapeTracker.from_shape(partial.shape).reshape(moved).permute(
    tuple(argsort(order))).reshape(partials))
  return r.replace(src=(parts,))
