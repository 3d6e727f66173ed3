"""Packed copies of realized buffers kept between schedules: a weight that a matmul reads from a re-laid copy
(scheduler._pack_operand) is packed at most twice, not at every call (a Linear's weight was re-packed at every forward,
a kernel about as long as the matmul at 128 rows).

A copy stands for the contents its weight had under one BUFFER node: a write through a tensor names the memory anew
(an assign's value, frontend/mixin/writes._named_anew), so a graph built after it reads another node and packs again.
A copy is kept from the second time the same contents are packed: a buffer packed once (a batch of inputs, an
activation kept for the backward pass, a weight the optimizer writes at every step) would hold a copy as large as
itself for nothing. Held weakly by the weight's memory: the copies go with it, and are counted in memory_allocated
while they live.
"""
from __future__ import annotations

import weakref

from lazytensor.runtime.device import Buffer
from lazytensor.uop.ops import UOp

# the weight's memory -> the packing kernel's AST -> (the BUFFER node it read, the copy it wrote, or None where it was
# packed once); the node held weakly too, as it holds the memory (buffer_map): a value that held its key would never go
_copies: weakref.WeakKeyDictionary[Buffer, dict[UOp, tuple[weakref.ref[UOp], Buffer | None]]] = \
  weakref.WeakKeyDictionary()
# each copy a packing kernel writes -> the buffer it packs, and how many times each buffer was written where its node
# stays the same (forget): what a TinyJit needs to replay a weight's packing only after a write
_packs: weakref.WeakKeyDictionary[Buffer, weakref.ref[Buffer]] = weakref.WeakKeyDictionary()
_writes: weakref.WeakKeyDictionary[Buffer, int] = weakref.WeakKeyDictionary()
# the packings of the schedule being run, recorded once it has run (keep_pending): one that failed wrote nothing
_pending: list[tuple[Buffer, UOp, UOp, Buffer]] = []

def packed_copy(weight: Buffer, node: UOp, ast: UOp) -> Buffer | None:
  """The copy the packing kernel `ast` made of `weight` while `node` named its contents, if one is kept."""
  hit = _copies.get(weight, {}).get(ast)
  return hit[1] if hit is not None and hit[0]() is node else None

def will_keep(weight: Buffer, node: UOp, ast: UOp, copy: Buffer) -> None:
  """`copy` is to hold what `ast` packs from `weight` (read as `node`) once the schedule being made has run."""
  _pending.append((weight, node, ast, copy))

def made(weight: Buffer, copy: Buffer) -> None:
  """A packing kernel of this schedule writes `copy` from `weight`."""
  _packs[copy] = weakref.ref(weight)

def packs(copy: Buffer, weight: Buffer) -> bool:
  """Whether `copy` is a packing kernel's copy of `weight`."""
  return (ref := _packs.get(copy)) is not None and ref() is weight

def writes(weight: Buffer) -> int:
  """How many times `weight` was written (an assign, a TinyJit replay): a packing of it is stale after another."""
  return _writes.get(weight, 0)

def keep_pending() -> None:
  """The schedule ran: its packings are recorded, and the copies of contents packed before are kept."""
  for weight, node, ast, copy in _pending:
    seen = _copies.setdefault(weight, {}).get(ast)
    _copies[weight][ast] = (weakref.ref(node), copy if seen is not None and seen[0]() is node else None)
  _pending.clear()

def drop_pending() -> None:
  """A new schedule is being made: what an earlier one was to record did not run (it raised, or the caller only asked
  for the items)."""
  _pending.clear()

def forget(weight: Buffer) -> None:
  """`weight` was written (an assign's commit; a TinyJit replay updating a weight, where its BUFFER node stays the
  same): its copies are stale."""
  _copies.pop(weight, None)
  _writes[weight] = _writes.get(weight, 0) + 1
