"""Sorting along the last axis (OrderMixin's sort, argsort and topk move the axis there, `sorted_last` below).

Comparing every pair of elements (`_sort_ranks`) is one kernel and O(n^2) per row: fine for short rows, 17G
comparisons for 1024 rows of 4096. A bitonic network does the same sort in elementwise steps, O(n log^2 n) compare-
exchanges in log2(n)(log2(n)+1)/2 steps: 78 for 4096. A key of up to 32 bits and its position pack into one uint64
whose unsigned order is the stable sort's, so a step is a min and a max of one tensor, and the steps whose partners
are less than FUSE_BELOW apart run three at a time in one kernel (4096: 58 kernels for 78 steps); wider keys carry the
position beside them (two kernels a step). It is written with views and `where`, no new ops. A topk of few elements
takes selection passes instead, of more a radix select (select.py).

The network is the variant that sorts every block ascending: merging two sorted halves of a block compares element
i with element size-1-i (the second half read reversed), then half-cleaners at distances size/4, ..., 1. Each element
carries its original position: equal keys order by it (a stable sort), and positions past the row (the padding up
to a power of two) sort after everything, so no sentinel value is needed.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from lazytensor.dtype import DType, dtypes
from lazytensor.frontend.mixin.keys import order_code
from lazytensor.frontend.mixin.scans import read_at, select_one

if TYPE_CHECKING:
  from lazytensor.frontend.mixin.reduce import ReduceMixin
  TensorT = TypeVar("TensorT", bound=ReduceMixin)
else:
  TensorT = TypeVar("TensorT")

# rows longer than this sort through the network; up to it one O(n^2) comparison kernel costs less than the network's
# steps: 2 kernels each for a key and its position apart (256: 36 steps), one for packed keys (below): on one AVX2
# thread 4096 rows of 64 take 8 ms by pairs and 14 by the network, 2048 rows of 128 25 and 18
NETWORK_FROM = 256
PACKED_NETWORK_FROM = 64

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

Exchange = Callable[[tuple[TensorT, ...], tuple[TensorT, ...]], tuple[tuple[TensorT, ...], tuple[TensorT, ...]]]

# packed keys: steps whose partners are closer than this run FUSED_STEPS at a time in one kernel, each output element
# computed from the 2**steps inputs of its block (the network restricted to it), reading and writing the row once
# instead of once per step. One AVX2 thread, sort of 4096 and of 256 rows of 4096 (torch 0.23 and 160 ms): a kernel
# a step (80 kernels) 0.38 and 88 ms; 8 and 3 (58) 0.30 and 84-98 ms; 16 and 4 (49) 0.46 and 141 ms (each output
# then computes 15 min/max pairs where a step computes one). Keys and positions apart fuse no steps: their exchange
# compares both in each of the 2**steps terms
FUSE_BELOW = 8
FUSED_STEPS = 3

def _network(parts: tuple[TensorT, ...], exchange: Exchange, fuse: bool) -> tuple[TensorT, ...]:
  """The bitonic network over the last axis (a power of two long) of `parts`, the tensors that together make up each
  element, `exchange` ordering two sets of them element by element (first the one that sorts first).

  A step sees the row as blocks of (2, d): element (h, j) of a block meets (1 - h, j), the block flipped along its
  first axis, or in a merge (1 - h, d - 1 - j), flipped along both; the first half keeps what sorts first. A view
  and a `where` on h, so that steps chain into one expression with no concatenation."""
  lead, m = parts[0].shape[:-1], parts[0].shape[-1]
  steps = [(size // 2 >> i, i == 0) for size in (2 << s for s in range(m.bit_length() - 1))
           for i in range(size.bit_length() - 1)]
  pending = 0
  for i, (d, merge) in enumerate(steps):
    blocks = tuple(t.reshape(*lead, m // (2 * d), 2, d) for t in parts)
    first, second = exchange(blocks, tuple(b.flip(-2, -1) if merge else b.flip(-2) for b in blocks))
    upper = type(parts[0])._iota(2, parts[0].device).reshape(2, 1) == 1
    parts = tuple(upper.where(b, a).reshape(*lead, m) for a, b in zip(first, second))
    pending += 1
    # a run of close partners ends at FUSED_STEPS steps, before a far one, and at the end
    if not fuse or pending == FUSED_STEPS or d >= FUSE_BELOW or i + 1 == len(steps) or steps[i + 1][0] >= FUSE_BELOW:
      parts, pending = tuple(t.contiguous() for t in parts), 0
  return parts

# keys of these dtypes fit 32 bits in an order-preserving code, so that key and position pack into one uint64 whose
# unsigned order is the sort's: each step is then a min and a max of one tensor, one kernel (two, and the comparison
# computed twice, for a key and a position apart: sort of 1024x4096 on one AVX2 thread 1.2 s -> 0.39-0.65 s, torch 0.3)
_PACKED_KEYS = (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.int16, dtypes.int8,
                dtypes.uint32, dtypes.uint16, dtypes.uint8, dtypes.bool)

_LOW = (1 << 32) - 1  # the position bits of a packed key

def _packs(x: TensorT, size: int) -> bool: return x.dtype in _PACKED_KEYS and size <= 1 << 32

def _packed_keys(x: TensorT, descending: bool, n: int) -> TensorT:
  """uint64 (code << 32 | position) along the last axis: their unsigned order is the stable sort's; positions from n
  on (padding) take the largest code, so that they sort last."""
  size = x.shape[-1]
  pos = type(x).arange(size, dtype=dtypes.uint64, device=x.device).reshape(*([1] * (x.ndim - 1)), size)
  code = (pos < n).where(order_code(x, descending), _LOW).cast(dtypes.uint64)
  return (code << 32) | pos

def network_pays(x: TensorT) -> bool:
  """Whether x's last axis sorts faster through the network than by comparing every pair."""
  return x.shape[-1] > (PACKED_NETWORK_FROM if _packs(x, x.shape[-1]) else NETWORK_FROM)

def network_positions(x: TensorT, descending: bool) -> TensorT:
  """Where each element of a stable sort of x's last axis (NaN the largest) was, as dtypes.default_int. The network
  runs on x detached: the caller picks the values at these positions (one read each, schedule/gather.py), so that the
  gradient is one scatter back to x. Through the network it would be a where per step over two inputs each, which
  the scheduler would fuse into one expression of 2**steps terms."""
  n, lead = x.shape[-1], x.shape[:-1]
  m = 1 << (n - 1).bit_length()
  padding = [(0, 0)] * len(lead) + [(0, m - n)]
  def positions(dt: DType) -> TensorT:
    return type(x).arange(m, dtype=dt, device=x.device).reshape(*([1] * len(lead)), m).expand(*lead, m)
  if _packs(x, m):
    # padding takes the largest code and positions past the row: it sorts last
    packed, = _network((_packed_keys(x.detach().pad(padding), descending, n),),
                       lambda a, b: ((a[0].minimum(b[0]),), (a[0].maximum(b[0]),)), fuse=True)
    pos = (packed & _LOW).cast(dtypes.int64)
  else:
    # positions in int32 where they fit: every step reads and writes them, half the bytes of int64
    def exchange(lo: tuple[TensorT, ...], hi: tuple[TensorT, ...]) -> tuple[tuple[TensorT, ...], tuple[TensorT, ...]]:
      return _exchange((lo[0], lo[1]), (hi[0], hi[1]), n, descending)
    _, pos = _network((x.detach().pad(padding), positions(dtypes.int32 if m <= dtypes.int32.max() else dtypes.int64)),
                      exchange, fuse=False)
  return pos.shrink([None] * len(lead) + [(0, n)]).cast(dtypes.default_int)

# a topk of at most this many of a long row takes k passes over it (about 4 reduces each) instead of the network; of
# packed keys, one min each, as many passes as the network has steps (each reads the keys once, a step reads and
# writes them: topk 64 of 1024x4096 on one AVX2 thread 0.39-0.46 s by the network, 0.17 s by 64 passes; torch 0.03)
SELECT_UP_TO = 16

def selection_pays(x: TensorT, k: int) -> bool:
  """Whether k selection passes over x's last axis cost less than the bitonic network."""
  steps = (m := (x.shape[-1] - 1).bit_length()) * (m + 1) // 2
  return k <= (steps if _packs(x, x.shape[-1]) else SELECT_UP_TO)

def selection_positions(x: TensorT, descending: bool, k: int) -> TensorT:
  """Where the first k elements of a stable sort of x's last axis (NaN the largest) were, as dtypes.default_int: k
  passes, each picking the element that sorts first among those that sort after the previous pick."""
  n, lead = x.shape[-1], x.shape[:-1]
  if _packs(x, n):  # one min per pass over the packed keys, stored once (topk 8 of 1024x4096: 52 -> 21 ms, torch 8)
    keys = _packed_keys(x.detach(), descending, n).contiguous()
    picks = [keys.min(-1, keepdim=True)]
    for _ in range(k - 1): picks.append((keys > picks[-1]).where(keys, dtypes.uint64.max()).min(-1, keepdim=True))
    return (type(x).cat(*picks, dim=-1) & _LOW).cast(dtypes.default_int)
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

# ---- the sort a Tensor method asks for ----

def _sort_ranks(x: TensorT, descending: bool) -> TensorT:
  """Where each element along the last axis lands in a stable sort (NaN sorts as the largest, as torch): the number
  of elements that sort before it. One O(n^2) comparison reduce."""
  n = x.shape[-1]
  if x.dtype.is_bool: x = x.cast(dtypes.int8)
  mine, other = x.unsqueeze(-1), x.unsqueeze(-2)  # (..., i, 1) and (..., 1, j)
  before = other > mine if descending else other < mine
  same = mine == other
  if x.dtype.is_float:
    nan_mine, nan_other = mine != mine, other != other
    before = before | ((nan_other & nan_mine.logical_not()) if descending else (nan_mine & nan_other.logical_not()))
    same = same | (nan_mine & nan_other)
  ar = type(x).arange(n, device=x.device)
  earlier = ar.unsqueeze(0) < ar.unsqueeze(1)  # j < i
  return (before | (same & earlier)).sum(-1)

def sorted_last(x: TensorT, descending: bool, k: int) -> tuple[TensorT, TensorT]:
  """The first k elements of a stable sort of the last axis, and their positions: by comparing every pair in one
  kernel for short rows; for long ones by k selection passes when k is small, else through the bitonic network."""
  keys = x.cast(dtypes.int8) if x.dtype.is_bool else x
  if not network_pays(keys): return _take_ranked(x, _sort_ranks(x, descending), k)
  if selection_pays(keys, k): positions = selection_positions(keys, descending, k)
  else: positions = network_positions(keys, descending).shrink([None] * (x.ndim - 1) + [(0, k)])
  return read_at(x, positions), positions

def _take_ranked(x: TensorT, ranks: TensorT, k: int) -> tuple[TensorT, TensorT]:
  """The elements of ranks 0..k-1 along the last axis, and their indices."""
  n = x.shape[-1]
  slot = ranks.unsqueeze(-2) == type(x).arange(k, device=x.device).unsqueeze(-1)  # (..., k, n)
  values = select_one(x.unsqueeze(-2), slot, -1)
  return values, select_one(type(x).arange(n, device=x.device), slot, -1).cast(dtypes.default_int)
