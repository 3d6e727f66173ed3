"""Index checks: an integer tensor index out of range raises IndexError at the realize that runs the kernel reading it.

An index is a value like any other (frontend/mixin/index.py compares it with an arange), so nothing knows it is out of
range until a kernel reads it. One mechanism covers every op that takes one (x[idx], x[idx] = v, gather, the scatters,
the index_* family, take, put, one_hot, nn.Embedding, the class targets of the losses):

* the front end wraps the index in a CHECK node, `(index, ok)` with an `IndexSite` as arg: `ok` is an ordinary bool
  expression of the op's own rule (0 <= i < n; -n <= i < n where the op counts negatives from the end; or a target
  that names no class), the site what the message needs (the op, the dim, its size). CHECK_INDICES=0 builds none.
* the scheduler gives each CHECK of a kernel a buffer of its own, `IndexFlags`, holding [hit, largest bad value]
  (initially [0, INT64_MIN]); the kernel AST's CHECK names only that buffer, so equal kernels of different ops
  (x[idx] and index_select) are one program, and the site rides on the buffer, which a schedule template and a TinyJit
  capture keep from run to run.
* the lowerer turns a CHECK into its index and, gated off where ok holds (a branch not taken), two atomic maxes into
  the flags: 1, and the index. A maximum, not "the first": the threads of a kernel have no order, and the largest bad
  value is the same on every device (CPU, EMU, CUDA), in any order and however many entries are bad.
* after a schedule (engine/realize.run_schedule) or a TinyJit replay the runtime reads the flags of the kernels that
  ran, once for all of them (one wait for the device), resets those that were hit, and raises for the first. So, as
  with torch's device-side asserts on CUDA, the error comes at the realize that runs the kernel, but it says what was
  wrong. (A kernel run outside those, its runner called directly, leaves its flags for the next reader.)
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from lazytensor.dtype import DType, dtypes
from lazytensor.runtime.device import Buffer
from lazytensor.uop.ops import node_cached

# the flags before any bad index: not hit, and the smallest value for the maximum of the bad ones to start from
_CLEAR = np.array([0, np.iinfo(np.int64).min], dtype=np.int64)

@dataclass(frozen=True)
class IndexSite:
  """Where an index comes from, for the message: the op as the user called it, what the index counts (`noun`: "index",
  "target"), what it indexes (`where`: "dimension 0 with size 3"), the range it must be in, [low, size), one further
  value that is not an error (cross_entropy's ignore_index), and the index's dtype (how the recorded bits read)."""
  op: str
  where: str
  low: int
  size: int
  dtype: DType
  allowed: int | None = None
  noun: str = "index"

  def error(self, value: int) -> BadIndexError:
    expected = f"{self.low} <= {self.noun} < {self.size}"
    if self.allowed is not None: expected += f" or {self.noun} == {self.allowed}"
    return BadIndexError(f"{self.op}: {self.noun} {value} is out of bounds for {self.where}; expected {expected}")

class BadIndexError(IndexError):
  """An index out of range, found after every kernel of a schedule ran (what they wrote, with the bad entries left out,
  is committed before it is raised: a later read of the tensors does not raise it again)."""

def dim_site(op: str, dim: int, size: int, dtype: DType, wraps: bool) -> IndexSite:
  """The site of an index into dimension `dim` of `size` elements: [-size, size) where the op counts negative indices
  from the end (`wraps`), else [0, size)."""
  return IndexSite(op, f"dimension {dim} with size {size}", -size if wraps else 0, size, dtype)

class IndexFlags(Buffer):
  """The two int64 flags of one CHECK in one kernel: whether an index out of range was seen, and the largest one."""
  def __init__(self, device: str, site: IndexSite) -> None:
    super().__init__(device, len(_CLEAR), dtypes.int64)
    self.site = site

  @node_cached
  def handle(self) -> Any:
    """Memory that starts clear (freed memory from the allocator's cache holds anything)."""
    handle = self.allocator.alloc_cached(self.nbytes)
    self.allocator.copyin(handle, _CLEAR.data.cast("B"))
    return handle

  def take(self) -> int | None:
    """The largest bad index seen since the last take (clearing the flags), or None when there was none."""
    view = self.host_view()
    now = view if view is not None else self.numpy()
    if not now[0]: return None
    value = int(now[1])
    self.copyin(_CLEAR.data.cast("B"))
    # the kernel recorded the index as an int64: a uint64 above INT64_MAX reads back negative
    return value % (1 << 64) if self.site.dtype == dtypes.uint64 else value

def bad_index(flags: Iterable[IndexFlags]) -> BadIndexError | None:
  """Read (and clear) every flag; the error for the first that saw an index out of range. All are read: a flag left
  set would blame the next run of its kernel for this one's index."""
  first: BadIndexError | None = None
  for f in flags:
    if (bad := f.take()) is not None and first is None: first = f.site.error(bad)
  return first
