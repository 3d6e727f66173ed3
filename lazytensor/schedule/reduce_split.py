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

def _leaf_strides(u: UOp, axis: int) -> list[tuple[int, int]] | None:
  """(stride along `axis`, stride along the last axis) of each buffer that `u` reads through elementwise ops, in
  elements; None where it reads something else (a computed value, a view of more than one layer)."""
  out, stack, seen = [], [u], set()
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    if n.op in _NUMBERS or (n.op is Ops.VIEW and n.src[0].op in _NUMBERS): continue
    if n.op is Ops.VIEW and n.src[0].op is Ops.BUFFER:
      if len(n.arg.views) != 1: return None
      strides = n.arg.views[0].strides
      out.append((strides[axis], strides[-1]))
      continue
    if n.op not in GroupOp.Elementwise: return None
    stack.extend(n.src)
  return out

def split_block(target: CPUTarget, r: UOp) -> int | None:
  """Rows per partial reduce for the reduce `r` on a device with this CPU target, or None to leave it whole: one
  reduce axis, not the last, of at least SPLIT_MIN_ROWS rows that SPLIT_BLOCK divides, rows of at least a page, an
  operand at least 1/SPLIT_L3_FRACTION of L3 read at a stride along the reduce and contiguously along the rows."""
  src, (_, axes) = r.src[0], r.arg
  shape = src.shape
  if len(axes) != 1 or (axis := axes[0]) == len(shape) - 1: return None
  rows, itemsize = shape[axis], src.dtype.itemsize
  if rows < SPLIT_MIN_ROWS or rows % SPLIT_BLOCK or prod(shape[axis + 1:]) * itemsize < SPLIT_MIN_ROW_BYTES: return None
  if prod(shape) * itemsize < target.l3_bytes // SPLIT_L3_FRACTION: return None
  # every buffer read along the rows (or broadcast), one at least at a stride along the reduce (a bias broadcast
  # along it is read from cache)
  strides = _leaf_strides(src, axis)
  if strides is None or not all(last in (0, 1) and along != 1 for along, last in strides): return None
  return SPLIT_BLOCK if any(last == 1 and along != 0 for along, last in strides) else None

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
