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

The split is the device's choice, made where the scheduler packs operands (schedule.pack_operands): the tensor graph
is the same on every device. On the CPU only reduces whose operand reads buffers directly through elementwise ops are
split, so that the memory strides are known.
"""
from __future__ import annotations

from lazytensor.helpers import prod
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

def split_reduce(r: UOp, block: int) -> UOp:
  """`r` (one reduce axis) as a reduce of partial reduces over blocks of `block` rows: the partials are a value of
  their own (a kernel and a buffer), the reduce over them has r's shape."""
  src, (op, (axis,)) = r.src[0], r.arg
  shape = src.shape
  blocked = shape[:axis] + (shape[axis] // block, block) + shape[axis + 1:]
  view = UOp(Ops.VIEW, src.dtype, (src,), ShapeTracker.from_shape(shape).reshape(blocked))
  partial = UOp(Ops.REDUCE_AXIS, r.dtype, (view,), (op, (axis + 1,)))
  parts = UOp(Ops.VIEW, r.dtype, (partial,), ShapeTracker.from_shape(partial.shape).reshape(
    shape[:axis] + (shape[axis] // block,) + shape[axis + 1:]))
  return r.replace(src=(parts,))
