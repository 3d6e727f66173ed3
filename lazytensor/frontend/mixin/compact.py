"""Compaction: the elements of a 1-d tensor where a mask is True, in order, packed at the front (nonzero,
masked_select, unique and unique_consecutive are built on it). The mask's running count is a scan of its 32-bit words
and a population count within each, and the elements go to their slots by one scatter: O(numel) passes. Where the
result's size depends on the values (no `size=` given), the count is read now: one sync.
"""
from __future__ import annotations

from typing import Any, TypeVar

from lazytensor.dtype import dtypes
from lazytensor.engine.realize import capturing
from lazytensor.frontend.mixin.order import OrderMixin
from lazytensor.helpers import prod

# the order mixin (its cumsum) is all compaction needs: index.py and stats.py, above it, build on this module
TensorT = TypeVar("TensorT", bound=OrderMixin)

# a mask is packed into words of this many bits for its running count (uint32: the widest that vectorizes well)
WORD_BITS = 32

def first_selected(name: str, m: TensorT, size: int | None, keep: tuple[TensorT, ...] = ()) -> tuple[TensorT, TensorT]:
  """Where the first `size` True values of the 1-d bool `m` are (flat indices; past the last, the positions of False
  values or 0) and which slots found one. A stable partition: the element whose count of True values up to and
  including it is j + 1 goes to slot j, and a False element after them all, in order. Written as a scatter
  (`e == arange(numel)` summed over the entries), which the scheduler runs as one store per entry: O(numel), where
  comparing every slot with every entry was O(size * numel) (masked_select of a 1024x1024 half-true mask: minutes).
  Every entry stores: the scatter kernel skips an entry whose index is out of range, and leaving out the False
  ones, at random, made that branch mispredict half the time (nonzero of a half-true 1024x1024 mask: 8 ms for its
  scatter, 0.8 ms for an all-true one).

  With size None the count of True values is read now (the last of the running counts: one sync), and the running
  counts are computed once with `keep`, the tensors the caller reads afterwards: a sort before them (unique) would
  otherwise run twice, once for the count and again for the values (1M ints: 0.96 s, twice the sort's time)."""
  if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
    raise ValueError(f"{name}: size must be a non-negative int, got {size!r}")
  n = m.numel()
  words, upto = packed_counts(m)
  if size is None:
    check_not_capturing(name)
    size = int(upto.realize(words, *keep).select(0, -1).item()) if n else 0
  # iotas: an arange of another dtype narrowed to int32 is not seen as the scatter's targets (schedule/gather.py)
  slots = type(m)._iota(size, m.device)
  if n == 0: return slots * 0, slots < 0
  # positions and counts in the iota's int32 (int64 past 2^31 elements): half the memory of the default int
  pos = type(m)._iota(n, m.device)
  rank = running_count(words, upto, n).cast(pos.dtype)
  total = upto.select(0, -1).cast(pos.dtype)
  slot = m.where(rank - 1, total + pos - rank)
  flat = (slot == pos.unsqueeze(-1)).where(pos, 0).sum(-1, dtype=pos.dtype)
  return flat.narrow(0, 0, size) if size <= n else flat.pad(((0, size - n),)), slots < total

def unravel(flat: TensorT, shape: tuple[int, ...]) -> list[TensorT]:
  """The index along each dim of the flat (row-major) indices, all below prod(shape): the first dim's needs no % and
  the last dim's no //."""
  cols = []
  for i, n in enumerate(shape):
    stride = prod(shape[i + 1:])
    c = flat if stride == 1 else flat // stride
    cols.append(c if i == 0 else c % n)
  return cols

def packed_counts(m: TensorT) -> tuple[TensorT, TensorT]:
  """The 1-d bool m as words of WORD_BITS bits (uint32, element 32g + j at bit j of word g, the last word padded with
  False) and the count of True values in the words up to and including each: the running count of a mask
  is a scan of numel / 32 counts, not of numel values (nonzero of a 1024x1024 mask: the scan of 1M values took most
  of its time, 3.6x torch's)."""
  n = m.numel()
  groups = -(-n // WORD_BITS)
  padded = m.pad(((0, groups * WORD_BITS - n),)).reshape(groups, WORD_BITS)
  bit = type(m)._iota(WORD_BITS, m.device).cast(dtypes.uint32)
  words = padded.where(1 << bit, 0).cast(dtypes.uint32).sum(-1, dtype=dtypes.uint32)
  counts = padded.cast(dtypes.int32).sum(-1, dtype=dtypes.int32)
  return words, counts.cumsum(0) if groups else counts

def running_count(words: TensorT, upto: TensorT, n: int) -> TensorT:
  """The count of True values up to and including each of the n elements packed in `words` (int32): the count of the
  words before its own, and the set bits of its own word at and below its bit (a population count)."""
  if n == 0: return upto
  groups = words.shape[0]
  bit = type(words)._iota(WORD_BITS, words.device).cast(dtypes.uint32)
  below = words.unsqueeze(-1) & (0xFFFFFFFF >> (WORD_BITS - 1 - bit))  # the bits at and below each element's
  before = (upto - popcount(words)).unsqueeze(-1)
  return (before + popcount(below).cast(dtypes.int32)).reshape(groups * WORD_BITS).narrow(0, 0, n)

def popcount(x: TensorT) -> TensorT:
  """The set bits of each uint32, by adding them in pairs, nibbles and bytes (Hacker's Delight 5-1): ALU ops that
  vectorize; the sum of the four byte counts lands in the top byte of the product."""
  x = x - ((x >> 1) & 0x55555555)
  x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
  x = (x + (x >> 4)) & 0x0F0F0F0F
  return (x * 0x01010101) >> 24

def compacted(name: str, x: TensorT, m: TensorT, size: int | None, fill_value: Any,
               keep: tuple[TensorT, ...] = ()) -> TensorT:
  """The elements of the 1-d x where the 1-d bool m is True, in order: the first `size` of them, then fill_value (all
  of them, read now, with size None)."""
  flat, found = first_selected(name, m, size, keep)
  # x at the flat indices: a gather, which the scheduler folds into one load per slot
  picked = flat.unsqueeze(-1) == type(x).arange(x.numel(), device=x.device)
  return found.where(picked.where(x, x.zeros_like()).sum(-1).cast(x.dtype), fill_value).cast(x.dtype)

def check_not_capturing(name: str) -> None:
  """A size read from values: a TinyJit's replays would keep the one read while capturing, whatever the new values."""
  if capturing():
    raise ValueError(f"{name} without size inside a TinyJit function: the result's shape would be the count read "
                     "while capturing, kept by every replay whatever the values; give size=")

def count_now(name: str, m: TensorT) -> int:
  """How many True values the bool tensor m holds, read now: the size of a result whose shape depends on values."""
  check_not_capturing(name)
  return int(m.sum().item())
