"""In-place writes not run yet: an assign stays lazy, but runs before anything reads the memory it writes, in the order
the assigns were made, as torch's in-place op writes when it is called."""
from __future__ import annotations

import operator
import weakref
from typing import TYPE_CHECKING

from lazytensor.schedule.scheduler import realized_map
from lazytensor.uop.ops import UOp

if TYPE_CHECKING:
  from lazytensor.frontend.tensor import Tensor

# the assigns not run yet, by the live serial of when each was made: the tensor holding it (weakly) and its ASSIGN node.
# Realizing anything that reads the memory one writes runs it first, as torch's in-place op ran when it was called;
# one whose tensor is gone (`x.T.add_(1)`: a view made for the write) runs at the next realize or assign
writes: dict[int, tuple[weakref.ref[Tensor], UOp]] = {}

def run_before(tensors: tuple[Tensor, ...], reads: int = 0) -> None:
  """Before realizing `tensors`: the assigns of other tensors not run yet into memory they read (or into `reads`, a
  mask of memory) run first, as in torch, where an in-place op writes when it is called (`v = x.T; v.add_(1);
  x.numpy()`). Not those their graphs hold (x.add_(1) * 2 runs the add in its own schedule). Each is taken from the
  pending ones before it runs, so two that read each other's memory run once each."""
  if not reads:
    for t in tensors: reads |= t.lazydata.reads
  chosen = {id(t) for t in tensors}
  def in_graphs(node: UOp) -> bool: return any(node in t.lazydata.toposort for t in tensors)
  due: list[tuple[int, Tensor]] = []
  for key, (ref, node) in list(writes.items()):
    holder = ref()
    # realized (or held by a later assign of the same tensor), or run in another graph
    if (holder.lazydata is not node) if holder is not None else node in realized_map: del writes[key]
    elif holder is None or (id(holder) not in chosen and node.writes & reads and not in_graphs(node)):
      del writes[key]
      if holder is None: (holder := type(tensors[0])._of(node))._assigned_at = key
      due.append((key, holder))
  # one at a time, in the order they were made: a value computed between two of them reads the first one's write
  for _, writer in sorted(due, key=operator.itemgetter(0)): writer.realize()
