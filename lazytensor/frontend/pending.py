"""In-place writes not run yet: an assign stays lazy, but runs before anything reads the memory it writes, in the order
the assigns were made, as torch's in-place op writes when it is called. They are in the front end's state
(state.pending: by the live serial of when each was made, the tensor holding it, weakly, and its ASSIGN node); this
module picks the ones a realize must run first, which the writes mixin runs."""
from __future__ import annotations

import operator
from collections.abc import Sequence

from lazytensor.frontend.state import Holder, state
from lazytensor.schedule.scheduler import realized_map
from lazytensor.uop.ops import UOp


def due_writes(tensors: Sequence[Holder], reads: int = 0) -> list[tuple[int, Holder | None, UOp]]:
  """Before realizing `tensors`: the assigns of other tensors not run yet into memory they read (or into `reads`, a
  mask of memory), which must run first, as in torch, where an in-place op writes when it is called (`v = x.T;
  v.add_(1); x.numpy()`): each with its serial, its tensor (None where it is gone: `x.T.add_(1)`, a view made for the
  write) and its node, in the order they were made (a value computed between two of them reads the first one's write).
  Not those their graphs hold (x.add_(1) * 2 runs the add in its own schedule). Each is taken from the pending ones, so
  two that read each other's memory run once each."""
  if not reads:
    for t in tensors: reads |= t.lazydata.reads
  chosen = {id(t) for t in tensors}
  def in_graphs(node: UOp) -> bool: return any(t.lazydata.reaches(node) for t in tensors)
  due: list[tuple[int, Holder | None, UOp]] = []
  for key, (ref, node) in list(state.pending.items()):
    holder = ref()
    # realized (or held by a later assign of the same tensor), or run in another graph
    if (holder.lazydata is not node) if holder is not None else node in realized_map: del state.pending[key]
    elif holder is None or (id(holder) not in chosen and node.writes & reads and not in_graphs(node)):
      del state.pending[key]
      due.append((key, holder, node))
  return sorted(due, key=operator.itemgetter(0))
