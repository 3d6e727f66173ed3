"""Order statistics along the last axis without sorting (OrderMixin's kthvalue, median and topk move the axis there).

A radix select: the element of rank r (0-based) in a stable sort is found digit by digit on an order-preserving
unsigned code of the keys (keys.order_code: floats by their bits, NaN the largest, -0.0 as 0.0). Each pass
fixes RADIX_BITS more bits of the answer's code from counts of the keys below 2**RADIX_BITS - 1 thresholds (one reduce
over the row, then one over the thresholds): 8 passes for a 32-bit code. Equal codes rank by position, so a second
select over the positions of the elements equal to the answer, at the rank that remains, gives which one it is: the
same element a stable sort puts there. O(n) work per pass, no sort: kthvalue of 256 rows of 4096 took 79 kernels
through the bitonic network.

A topk of k is then a mask (the elements that sort before the k-th one, and it), each masked element's slot among
them (an exclusive cumsum of the mask), the k slots filled by one reduce each over the row, and those k sorted by
comparing their pairs: O(k n) work in about 30 kernels, not the network's 78 steps.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from lazytensor.dtype import dtypes
from lazytensor.frontend.mixin.keys import order_code
from lazytensor.frontend.mixin.scans import cumsum_last, read_at, select_one
from lazytensor.frontend.mixin.sort_network import SELECT_UP_TO, _packs

if TYPE_CHECKING:
  from lazytensor.frontend.mixin.reduce import ReduceMixin
  TensorT = TypeVar("TensorT", bound=ReduceMixin)
else:
  TensorT = TypeVar("TensorT")

# bits of the answer fixed per pass: 2**RADIX_BITS - 1 comparisons per element and pass. 4 bits: 8 passes over a
# 32-bit code, 15 comparisons each (2 bits: 16 passes of 3, each reading the row again; 8 bits: 255 comparisons)
RADIX_BITS = 4

# rows longer than this select by radix passes (about 27 kernels); up to it a sort compares every pair in one kernel.
# One AVX2 thread, the median of 1M float32 in rows of 64: 19 ms selected, 65 ms sorted; 256 rows of 64: both 0.6 ms
SELECT_FROM = 32
# at most this many ranks are selected one by one (quantile's neighbours); more read a sort
SELECT_RANKS = 4
# a topk of k in this range selects: fewer take k passes of a min each (sort_network.selection_positions, up to
# SELECT_UP_TO for keys that do not pack), more sort. Of 256 rows of 4096 on one AVX2 thread, selected and by passes
# or the network: k=16 19 and 9 ms, 48 18 and 27, 128 24 and 196, 512 67 and 174, 1024 209 and 159 (sorting the k
# kept ones compares their k**2 pairs)
TOPK_FROM, TOPK_UP_TO = 40, 512

def _count(mask: TensorT) -> TensorT:
  return mask.sum(-1, keepdim=True, dtype=dtypes.int32)

def radix_select(key: TensorT, rank: TensorT | int, bits: int) -> TensorT:
  """The value of rank `rank` (0-based, per row: (..., 1)) among the unsigned `key`s along the last axis, whose values
  are below 2**bits: (..., 1) in key's dtype."""
  lead = key.shape[:-1]
  prefix = type(key).zeros(*lead, 1, dtype=key.dtype, device=key.device)
  shift = bits
  while shift > 0:
    d = min(RADIX_BITS, shift)
    shift -= d
    steps = type(key).arange(1, 1 << d, dtype=key.dtype, device=key.device) << shift
    below = key.unsqueeze(-2) < (prefix + steps).unsqueeze(-1)  # (..., 2**d - 1, n)
    # the answer is at or past a threshold when at most `rank` keys are below it
    digit = (below.sum(-1, dtype=dtypes.int32) <= rank).sum(-1, keepdim=True, dtype=dtypes.int32)
    prefix = prefix + (digit.cast(key.dtype) << shift)
  return prefix

def select_position(x: TensorT, descending: bool, rank: int) -> tuple[TensorT, TensorT]:
  """The element of rank `rank` in a stable sort of x's last axis: its code (_code) and its position (int32),
  each (..., 1)."""
  n = x.shape[-1]
  code = order_code(x.detach(), descending).contiguous()
  target = radix_select(code, rank, code.dtype.itemsize * 8)
  # equal codes sort by position: the one of rank (rank - the count below them) among their positions
  # (the others at 2**bits - 1, past every position: never of that rank; a mask in each pass's count was 3x slower)
  bits = n.bit_length()
  pos = type(x).arange(n, dtype=dtypes.uint32, device=x.device)
  at = radix_select((code == target).where(pos, (1 << bits) - 1).contiguous(), rank - _count(code < target), bits)
  return target, at.cast(dtypes.int32)

def kth_last(x: TensorT, rank: int) -> tuple[TensorT, TensorT]:
  """The value of rank `rank` (0-based) in a stable ascending sort of x's last axis and its position
  (dtypes.default_int), each (..., 1): the value read at the position, so that the gradient goes there."""
  _, at = select_position(x, False, rank)
  return read_at(x, at), at.cast(dtypes.default_int)

def topk_last(x: TensorT, descending: bool, k: int) -> tuple[TensorT, TensorT]:
  """The first k elements of a stable sort of x's last axis and their positions (dtypes.default_int)."""
  n = x.shape[-1]
  target, at = select_position(x, descending, k - 1)
  code = order_code(x.detach(), descending)
  pos = type(x).arange(n, dtype=dtypes.int32, device=x.device)
  kept = (code < target) | ((code == target) & (pos <= at))  # exactly k per row
  # each kept element's slot among them, in position order (-1 for the others): a scatter of their positions into
  # the k slots (schedule/scatter.py runs `where(slot == arange(k), pos, min).max()` as stores, O(n), not k reads of
  # the row)
  slot = kept.where(cumsum_last(kept.cast(dtypes.int32)) - 1, -1)
  # (..., k, n), against a default_int arange: the scatter is found by its `e == arange` (an int32 arange is a narrowing
  # cast of one, which schedule/gather.py does not read as an arange)
  fills = slot.unsqueeze(-2) == type(x).arange(k, device=x.device).unsqueeze(-1)
  positions = select_one(pos, fills, -1)
  # then sorted by (code, position), all different pairs: a kept element's rank is the count of kept ones before it
  codes = order_code(read_at(x.detach(), positions), descending)
  before = (codes.unsqueeze(-2) < codes.unsqueeze(-1)) | \
    ((codes.unsqueeze(-2) == codes.unsqueeze(-1)) & (positions.unsqueeze(-2) < positions.unsqueeze(-1)))
  ranked = before.sum(-1, dtype=dtypes.int32).unsqueeze(-2) == \
    type(x).arange(k, device=x.device).unsqueeze(-1)  # (..., slot, kept element)
  order = select_one(positions.unsqueeze(-2), ranked, -1)
  return read_at(x, order), order.cast(dtypes.default_int)

def selects(n: int, ranks: int) -> bool:
  """Whether `ranks` radix selections in rows of n cost less than a sort."""
  return n > SELECT_FROM and ranks <= SELECT_RANKS

def topk_selects(x: TensorT, k: int) -> bool:
  """Whether a topk of k along x's last axis costs less by a radix select than by the sort's selection passes or
  network (sort_network.sorted_last)."""
  return x.shape[-1] > SELECT_FROM and (TOPK_FROM if _packs(x, x.shape[-1]) else SELECT_UP_TO) < k <= TOPK_UP_TO
