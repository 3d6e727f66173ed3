"""Scans along the last axis (OrderMixin's cumsum, cumprod, logcumsumexp, cummax, cummin move the axis there): a
reduce over each position's prefix for short axes, blocks and carries for long ones, and cumsum as blocks times
a triangle of ones (a matmul)."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from lazytensor.dtype import dtypes
from lazytensor.frontend.mixin.keys import order_code
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from lazytensor.frontend.mixin.reduce import ReduceMixin
  TensorT = TypeVar("TensorT", bound=ReduceMixin)
else:
  TensorT = TypeVar("TensorT")

# a scan axis longer than SCAN_SPLIT runs in blocks of about sqrt(n), at most `block` (SCAN_BLOCK unless the scan
# says otherwise), instead of one O(n^2) reduce: the work is n * block per level. One AVX2 thread, 1024x1024 along
# rows (torch 1.2 ms each): cumprod 3.8 ms in blocks of 32 (the old 512 and 256), 2.6 in blocks of 16, 1.2 in blocks
# of 8 (8 kernels); cummax and its indices 5.2, 5.3, 4.0 (17 kernels). logcumsumexp, whose reduce is itself a max, an
# exp, a sum and a log, takes blocks of 16: 95 ms in 32, 55 in 16, 92 in 8 (torch 50)
SCAN_SPLIT = 64
SCAN_BLOCK = 8
LOGSUMEXP_SCAN_BLOCK = 16

def _prefix_columns(x: TensorT, identity: Any) -> TensorT:
  """(..., n) -> (..., n, n) whose column i holds x[..., :i+1], then identity: reduced over axis -2, the scan. A where
  on a triangle computed in the kernel, so that every load is dense and the output axis vectorizes; the windows of a
  padded view (a pool over x padded by n - 1) gate each load by its mask (the block scans of cummax of 1024x1024 on
  one AVX2 thread: 42 ms as windows, 13 ms as columns)."""
  n = x.shape[-1]
  pos = type(x)._iota(n, x.device)
  return (pos.reshape(n, 1) <= pos.reshape(1, n)).where(x.unsqueeze(-1), identity)

def scan_last(x: TensorT, reduce: Callable[[TensorT, int], TensorT], identity: Any,
              block: int = SCAN_BLOCK) -> TensorT:
  """Inclusive scan of an associative `reduce` along the last axis.

  Up to SCAN_SPLIT elements it is one reduce over each output's prefix (O(n^2) work, one kernel). Longer axes
  split into blocks of b = min(sqrt(n), block): a scan inside each block, an exclusive scan of the block totals
  (recursively), and each block's carry combined into it: O(n b) work in a few kernels per level."""
  n = x.shape[-1]
  if n <= SCAN_SPLIT: return reduce(_prefix_columns(x, identity), -2)
  b = min(math.isqrt(n - 1) + 1, block)
  a = -(-n // b)
  lead = [(0, 0)] * (x.ndim - 1)
  blocks = x.pad(lead + [(0, a * b - n)], value=identity).reshape(*x.shape[:-1], a, b)
  inner = reduce(_prefix_columns(blocks, identity), -2)
  # shifting the totals by one makes the scan exclusive: block j gets the combination of blocks 0..j-1
  carry = scan_last(reduce(blocks, -1).pad(lead + [(1, -1)], value=identity), reduce, identity, block)
  both = type(x).stack(carry.unsqueeze(-1).expand(inner.shape), inner, dim=-1)
  return reduce(both, -1).reshape(*x.shape[:-1], a * b).shrink([None] * (x.ndim - 1) + [(0, n)])

# a cumsum is products with a triangle of ones: a block of b elements times the (b, b) upper triangle is the block's
# scan, a matmul the heuristics tile into registers (scan_last's prefix reduce, then over pooled windows, was a masked
# reduce per output: cumsum of 64 x 50257 on one AVX2 thread 1.3 s -> 12-17 ms, numpy 12, torch 3.7)
SCAN_TRIANGLE = 32
# longer axes go in blocks of this many by the triangle: the work is n * block per level, the levels log_block(n).
# One AVX2 thread, 1024x1024 along rows (torch 1.2 ms): blocks of 32 2.1 ms in 5 kernels, 16 1.8 in 7, 8 1.6 in 9
CUMSUM_BLOCK = 8

def _triangle(like: TensorT, n: int) -> TensorT:
  """(n, n) ones on and above the diagonal, in like's dtype: row j adds x[j] to the scans of positions j and after."""
  pos = type(like)._iota(n, like.device)
  return (pos.reshape(n, 1) <= pos.reshape(1, n)).cast(like.dtype)

def cumsum_last(x: TensorT) -> TensorT:
  """Inclusive sum scan along the last axis: blocks of CUMSUM_BLOCK by the triangle (stored once, so that the blocks'
  matmul loads it), then each block's carry, the exclusive scan of the block totals, added to it."""
  n = x.shape[-1]
  if n <= SCAN_TRIANGLE: return x @ _triangle(x, n)  # one kernel, the triangle computed in it
  b, a, lead = CUMSUM_BLOCK, -(-n // CUMSUM_BLOCK), [(0, 0)] * (x.ndim - 1)
  inner = x.pad(lead + [(0, a * b - n)]).reshape(*x.shape[:-1], a, b) @ _triangle(x, b).contiguous()
  # the totals shifted by one: block j gets the sum of blocks 0..j-1, exactly (no subtraction)
  totals = inner.shrink([None] * x.ndim + [(b - 1, b)]).squeeze(-1)
  carry = cumsum_last(totals.pad(lead + [(1, -1)]))
  # the first n positions of both, so that the kernel that adds them writes the result and nothing else
  def first_n(t: TensorT) -> TensorT: return t.reshape(*x.shape[:-1], a * b).shrink([None] * (x.ndim - 1) + [(0, n)])
  return first_n(inner) + first_n(carry.unsqueeze(-1).expand(inner.shape))

def cumsum_float_last(x: TensorT) -> TensorT:
  """cumsum_last of floats with infinities and NaN, as a sequential sum gives them. The triangle's zeros times an inf
  or NaN are NaN, which reached the positions before it (cumsum([1, nan]) was [nan, nan]): the triangle scans the
  finite values, and the others come after it from the first of each kind: from the first +inf the sum is +inf, from
  the first -inf -inf, NaN from both and from the first NaN: one reduce over the axis on top of the scan's matmul.
  A short axis is one reduce of each position's prefix, which only adds."""
  n = x.shape[-1]
  if n <= SCAN_TRIANGLE: return scan_last(x, lambda t, ax: t.sum(ax, dtype=t.dtype), 0.0)  # adds only: one kernel
  finite = x.isfinite()
  # the finite values, with the whole gradient of x (which does not depend on the values)
  kept = finite.where(x, 0)._apply_uop(lambda v, u, d: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, u, d)), x, x.ones_like())
  pos = type(x).arange(n, dtype=dtypes.int32, device=x.device)  # an int32 min vectorizes twice as wide as int64
  nan = x != x
  # where the first +inf (or NaN) and the first -inf (or NaN) are: one reduce of the two
  hits = type(x).stack((x == math.inf) | nan, (x == -math.inf) | nan)
  reached = hits.where(pos, n).min(-1, keepdim=True) <= pos
  up, down = (t.squeeze(0) for t in reached.split(1, 0))
  return cumsum_last(kept) + up.where(down.where(math.nan, math.inf), down.where(-math.inf, 0.0)).cast(x.dtype)

def select_one(values: TensorT, mask: TensorT, axis: int) -> TensorT:
  """The one value along `axis` where mask is true: a sum for floats (so the gradient reaches only that value), a max
  otherwise (no promotion of ints, and it works for bools)."""
  if values.dtype.is_float: return mask.where(values, 0).sum(axis, dtype=values.dtype)
  return mask.where(values, values.dtype.min() if values.dtype.is_int else False).max(axis)

def read_at(x: TensorT, positions: TensorT) -> TensorT:
  """x's values along the last axis at `positions` (..., m): one load each (schedule/gather.py reads the one-hot reduce
  against a default_int arange as a load at the index; an int32 arange is a narrowing cast of one, which it does not
  read as an arange), so -0.0 stays -0.0 (a sum of it onto 0.0 did not), and the gradient goes to each position
  alone (a scatter)."""
  return select_one(x.unsqueeze(-2), positions.unsqueeze(-1) == type(x).arange(x.shape[-1], device=x.device), -1)

def cum_extreme_last(x: TensorT, largest: bool) -> tuple[TensorT, TensorT]:
  """cummax (cummin) along the last axis: the values and the index of the last element equal to each, NaN counting
  as the largest (the smallest for cummin too: it propagates), as torch. That index is the last position up to here
  whose element equals the running extreme there (any later one would have raised it), so it is a running max of
  positions: both are scans, of signed ints. The extreme is a running max of order codes (keys.order_code, NaN as
  one value, -0.0 as 0.0; cummin's of -x): an int max vectorizes where a float max, which propagates NaN, did not
  (5x slower). The values are read at the indices, so that -0.0 stays itself and the gradient goes there alone."""
  n = x.shape[-1]
  key = x if largest else -x if x.dtype.is_float else x.logical_not() if x.dtype.is_bool else ~x
  code = order_code(key.detach(), False)
  wide = code.dtype == dtypes.uint64
  code = (code ^ (1 << (63 if wide else 31))).bitcast(dtypes.int64 if wide else dtypes.int32)  # the same order, signed
  peak = scan_last(code, lambda t, ax: t.max(ax), code.dtype.min())
  positions = type(x).arange(n, dtype=dtypes.int32, device=x.device)
  idx = scan_last((code == peak).where(positions, -1), lambda t, ax: t.max(ax), -1)
  return read_at(x, idx), idx.cast(dtypes.default_int)
