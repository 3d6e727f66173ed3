"""Sorting long rows with a bitonic network: O(n log^2 n) compare-exchanges in log2(n)(log2(n)+1)/2 steps.

Comparing every pair of elements (mixin/reduce.py `_sort_ranks`) is one kernel and O(n^2) per row: fine for short
rows, 17G comparisons for 1024 rows of 4096. A bitonic network does the same sort in elementwise steps, each one
kernel over the row per output (keys and positions): 78 steps for 4096. It is written with views and `where`, no
new ops.

The network is the variant that sorts every block ascending: merging two sorted halves of a block compares element
i with element size-1-i (the second half read reversed), then half-cleaners at distances size/4, ..., 1. Each element
carries its original position: equal keys order by it (a stable sort), and positions past the row (the padding up
to a power of two) sort after everything, so no sentinel value is needed.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

from lazytensor.dtype import dtypes

if TYPE_CHECKING:
  from lazytensor.mixin.reduce import ReduceMixin
  TensorT = TypeVar("TensorT", bound=ReduceMixin)
else:
  TensorT = TypeVar("TensorT")

# rows longer than this sort through the network; up to it one O(n^2) comparison kernel costs less than the network's
# 2 kernels per step (256: 36 steps)
NETWORK_FROM = 256

def _before(a: tuple[TensorT, TensorT], b: tuple[TensorT, TensorT], n: int, descending: bool) -> TensorT:
  """Whether element a = (key, position) sorts before b: real elements before padding, then by key (NaN the largest,
  as torch), then by position."""
  (ka, pa), (kb, pb) = a, b
  key_first = ka > kb if descending else ka < kb
  same = ka == kb
  if ka.dtype.is_float:
    nan_a, nan_b = ka != ka, kb != kb
    key_first = key_first | ((nan_a & nan_b.logical_not()) if descending else (nan_a.logical_not() & nan_b))
    same = same | (nan_a & nan_b)
  return (pa < n) & ((pb >= n) | key_first | (same & (pa < pb)))

def _exchange(lo: tuple[TensorT, TensorT], hi: tuple[TensorT, TensorT], n: int,
              descending: bool) -> tuple[tuple[TensorT, TensorT], tuple[TensorT, TensorT]]:
  swap = _before(hi, lo, n, descending).detach()
  return ((swap.where(hi[0], lo[0]), swap.where(hi[1], lo[1])), (swap.where(lo[0], hi[0]), swap.where(lo[1], hi[1])))

def _halves(t: TensorT, lead: tuple[int, ...], d: int) -> tuple[TensorT, TensorT]:
  """The first and second half of every block of 2*d along the last axis, as (..., blocks, d)."""
  blocks = t.reshape(*lead, t.shape[-1] // (2 * d), 2, d)
  keep = [None] * (len(lead) + 1)
  return (blocks.shrink(keep + [(0, 1), None]).reshape(*lead, -1, d),
          blocks.shrink(keep + [(1, 2), None]).reshape(*lead, -1, d))

def network_positions(x: TensorT, descending: bool) -> TensorT:
  """Where each element of a stable sort of x's last axis (NaN the largest) was, as dtypes.default_int. The network
  runs on x detached: the caller picks the values at these positions (one read each, engine/gather.py), so that the
  gradient is one scatter back to x. Through the network it would be a where per step over two inputs each, which
  the scheduler would fuse into one expression of 2**steps terms."""
  n, lead = x.shape[-1], x.shape[:-1]
  m = 1 << (n - 1).bit_length()
  key = x.detach().pad([(0, 0)] * len(lead) + [(0, m - n)])
  # positions in int32 where they fit: every step reads and writes them, half the bytes of int64
  pos_dtype = dtypes.int32 if m <= dtypes.int32.max() else dtypes.int64
  pos = type(x).arange(m, dtype=pos_dtype, device=x.device).reshape(*([1] * len(lead)), m).expand(*lead, m)
  size = 2
  while size <= m:
    # merge: element i of each block against element size-1-i
    (k0, k1), (p0, p1) = _halves(key, lead, size // 2), _halves(pos, lead, size // 2)
    lo, hi = _exchange((k0, p0), (k1.flip(-1), p1.flip(-1)), n, descending)
    key, pos = (type(x).stack(a, b.flip(-1), dim=-2).reshape(*lead, m).contiguous() for a, b in zip(lo, hi))
    d = size // 4
    while d >= 1:
      (k0, k1), (p0, p1) = _halves(key, lead, d), _halves(pos, lead, d)
      lo, hi = _exchange((k0, p0), (k1, p1), n, descending)
      key, pos = (type(x).stack(a, b, dim=-2).reshape(*lead, m).contiguous() for a, b in zip(lo, hi))
      d //= 2
    size *= 2
  return pos.shrink([None] * len(lead) + [(0, n)]).cast(dtypes.default_int)

# a topk of at most this many of a long row takes k passes over it (about 4 reduces each) instead of the network
SELECT_UP_TO = 16

def selection_positions(x: TensorT, descending: bool, k: int) -> TensorT:
  """Where the first k elements of a stable sort of x's last axis (NaN the largest) were, as dtypes.default_int: k
  passes, each picking the element that sorts first among those that sort after the previous pick."""
  n, lead = x.shape[-1], x.shape[:-1]
  key = x.detach()
  pos = type(x).arange(n, dtype=dtypes.int32 if n <= dtypes.int32.max() else dtypes.int64, device=x.device)
  nan = key != key if key.dtype.is_float else None
  prev: tuple[TensorT, TensorT] | None = None
  picks = []
  for _ in range(k):
    after = _before(prev, (key, pos), n, descending) if prev is not None else key.ones_like(dtype=dtypes.bool)
    if nan is not None:  # NaN sorts largest: first when descending, last otherwise
      nan_after, real_after = after & nan, after & nan.logical_not()
      best = real_after.where(key, -math.inf if descending else math.inf)
      best = best.max(-1, keepdim=True) if descending else best.min(-1, keepdim=True)
      take_nan = nan_after.any(-1, keepdim=True) if descending else real_after.any(-1, keepdim=True).logical_not()
      hit = take_nan.where(nan_after, real_after & (key == best))
      picked = take_nan.where(math.nan, best)
    else:
      best = after.where(key, key.dtype.min() if descending else key.dtype.max())
      picked = best = best.max(-1, keepdim=True) if descending else best.min(-1, keepdim=True)
      hit = after & (key == best)
    p = hit.where(pos, n).min(-1, keepdim=True)
    prev = (picked, p)
    picks.append(p)
  return type(x).cat(*picks, dim=-1).reshape(*lead, k).cast(dtypes.default_int)
