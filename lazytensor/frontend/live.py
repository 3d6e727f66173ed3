"""The live tensors, as the engine sees them: objects that hold a graph (`lazydata`), made in order. Realizing an assign
first computes the live values that read the memory it overwrites, so they keep the values they had when they were
built (as in an eager framework); while TinyJit captures a program, the ones made before the capture are computed
outside it.

What a graph reads and writes is in its root's UOp.reads/writes masks (a bit per buffer, ORed together as the graph is
built): finding the readers is one AND per live tensor, never a walk of its graph.
"""
from __future__ import annotations

import contextlib
import functools
import operator
from collections.abc import Iterator, Sequence

from lazytensor.frontend.state import Holder, LiveRef, state
from lazytensor.schedule.cache import realized_map
from lazytensor.uop.ops import GroupOp, Ops, UOp


def track(holder: Holder) -> None:
  """Record a new holder (every Tensor made)."""
  live = state.live
  live[LiveRef(holder, live.pop)] = next(state.serials)

def alive() -> Iterator[Holder]:
  """Every live holder."""
  for ref in list(state.live):
    if (h := ref()) is not None: yield h

def serial() -> int:
  """A serial number from the sequence the holders get theirs from: holders made after this moment have larger ones."""
  return next(state.serials)

def as_old(holder: Holder) -> None:
  """Count `holder` as made before every assign there is: old_value_readers keeps it with the values of before."""
  state.old[id(holder)] = holder

def old_value_readers(holders: Sequence[Holder], made_before: int | None = None) -> list[tuple[int, Holder]]:
  """The live holders, other than `holders`, whose values are computed from memory that realizing `holders` will
  overwrite (a loss built before opt.step(), the gradients), with their serial numbers, and in turn the readers of what
  those write. Realized in the same schedule, before the assigns, they keep the values they had when they were built.
  Views (movement ops of a buffer, no arithmetic) are not values of their own: they go on reading the buffer and see
  the new contents. `made_before`: the serial of the assigns' moment; holders made after it see their writes, unless
  their graphs hold the assigns themselves (random bits drawn through the count's assign) or they count as old."""
  targets = 0
  for holder in holders: targets |= holder.lazydata.writes
  if not targets: return []
  chosen = {id(h) for h in holders}
  last = made_before if made_before is not None else next(state.serials)
  alive = [(n, h) for ref, n in list(state.live.items()) if (h := ref()) is not None and id(h) not in chosen and
           not h.lazydata.reads & state.no_values and (n < last or h.lazydata.writes & targets or id(h) in state.old)]
  out: list[tuple[int, Holder]] = []
  seen = targets
  while targets:
    found = [(n, h) for n, h in alive if h.lazydata.reads & targets and id(h) not in chosen and
             _viewed_base(h.lazydata).op not in (Ops.BUFFER, Ops.CONST)]
    chosen |= {id(h) for _, h in found}
    out += found
    written = 0
    for _, reader in found: written |= reader.lazydata.writes
    targets = written & ~seen
    seen |= targets
  return out

def read_elsewhere(realized: Sequence[Holder], nodes: Sequence[UOp]) -> set[UOp]:
  """The nodes among `nodes` (values a schedule computes) that the graph of a live holder other than `realized` reads:
  a later realize of that holder reads them again, so they must stay in their buffers. A graph that holds a node reads
  all the memory the node reads: one AND per live holder passes over the others (3000 realized tensors: 0.4 ms), and
  the walk of the rest skips such subgraphs too, and stops at values that lie in buffers already."""
  wanted, masks, skip = set(nodes), {n.reads for n in nodes}, {id(h) for h in realized}
  common = functools.reduce(operator.and_, masks)
  stack = []
  for ref in list(state.live):
    if (h := ref()) is not None and h.lazydata.reads & common == common and id(h) not in skip: stack.append(h.lazydata)
  found: set[UOp] = set()
  seen: set[UOp] = set()
  while stack:
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    # under a wanted node, what it reads matters only through it
    if u in wanted: found.add(u)
    elif u.op is not Ops.BUFFER and u not in realized_map and any(u.reads & m == m for m in masks): stack.extend(u.src)
  return found

def holders(memory: int) -> list[Holder]:
  """The live holders whose value is memory among `memory` (a mask of buffers): realized tensors and views of them, and
  those with a write into it pending. Not values computed from it (old_value_readers finds those)."""
  return [h for ref in list(state.live) if (h := ref()) is not None and
          (h.lazydata.reads | h.lazydata.writes) & memory and _holds_memory(h.lazydata)]

def _holds_memory(u: UOp) -> bool:
  """Whether u is a view of memory (or of a write into it pending), on each device it lies on."""
  base = _viewed_base(u)
  return base.op is Ops.BUFFER or base.op is Ops.ASSIGN or (base.op is Ops.MULTI and all(map(_holds_memory, base.src)))

def _viewed_base(u: UOp) -> UOp:
  """u under its views: movement ops, VIEWs and detaches (a detached view shares its input's memory)."""
  while u.op is Ops.DETACH or u.op is Ops.VIEW or u.op in GroupOp.Movement: u = u.src[0]
  return u

@contextlib.contextmanager
def capturing_program() -> Iterator[None]:
  """The block of a TinyJit capture: the tensors made before it are not the program's. When one of them must be
  computed before an assign in the program, it is computed outside the program (once, not at every replay, which
  would overwrite its buffer)."""
  state.program_start.append(next(state.serials))
  try: yield
  finally: state.program_start.pop()

def split_by_program(readers: list[tuple[int, Holder]]) -> tuple[list[Holder], list[Holder]]:
  """Readers made before the program that is being captured (to compute outside it), and the others."""
  start = state.program_start[-1] if state.program_start else -1
  return [h for n, h in readers if n < start], [h for n, h in readers if n >= start]
