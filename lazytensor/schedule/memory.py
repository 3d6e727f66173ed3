"""Reuse of intermediate buffers within one schedule: a buffer nobody reads any more serves a later kernel."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lazytensor.runtime.device import Buffer

if TYPE_CHECKING:
  from lazytensor.schedule.cache import ScheduleItem

def _outputs_of(item: ScheduleItem) -> int:
  """How many of an item's buffers it writes: one per STORE of a kernel, the destination of a copy."""
  return 1 if item.ast.src == () else len(item.ast.src)

def plan_memory(items: list[ScheduleItem], keep: set[int]) -> tuple[list[ScheduleItem], set[int]]:
  """Give each intermediate output a buffer freed earlier in the schedule when one of the same kind is free.

  `keep` holds ids of buffers that outlive the schedule (outputs, assign targets, values live tensors read again):
  they are never shared.
  Returns the rewritten items and the ids of the buffers that do not hold their own kernel's result once the schedule
  has run: those replaced by reused ones, and those reused (a later kernel overwrote them).
  """
  last_use: dict[int, int] = {}
  for i, item in enumerate(items):
    for b in item.bufs: last_use[id(b)] = i
  intermediates = {id(b) for item in items for b in item.bufs[:_outputs_of(item)]} - keep
  free: dict[tuple[str, int, object], list[Buffer]] = {}
  replace: dict[int, Buffer] = {}
  out: list[ScheduleItem] = []
  for i, item in enumerate(items):
    for b in item.bufs[:_outputs_of(item)]:
      if id(b) in intermediates and id(b) not in replace and (pool := free.get((b.device, b.size, b.dtype))):
        replace[id(b)] = pool.pop()
    out.append(item._replace(bufs=tuple(replace.get(id(b), b) for b in item.bufs)))
    for b in item.bufs:
      if id(b) in intermediates and last_use[id(b)] == i:
        free.setdefault((b.device, b.size, b.dtype), []).append(replace.get(id(b), b))
  return out, set(replace) | {id(b) for b in replace.values()}
