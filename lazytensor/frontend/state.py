"""The front end's state: what the tensors of a process share beyond their own fields, in one object (`state`) rather
than in the globals of the modules that use it. The live tensors (live.py), the leaves of autograd and the tensors that
keep or hook their gradients (Tensor.backward, gradient, register_hook), the in-place writes not run yet (pending.py),
and the hidden bases of leaves moved in place (the writes mixin).

Tensors are held weakly, as Holders (what the engine needs of a tensor: its graph): an entry leaves with its tensor.
Registries of tensors are keyed by id: a WeakSet would compare tensors with ==, which builds a Tensor instead of
answering.
"""
from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from lazytensor.uop.ops import UOp


class Holder(Protocol):
  """What the engine needs of a tensor: the graph of its value, which realizing replaces with a view of a buffer."""
  lazydata: UOp

class LiveRef(weakref.ref):
  """A weak reference that hashes and compares as itself, never through its holder (a Tensor's == builds a Tensor, and
  its __hash__ is a Python call)."""
  __slots__ = ()
  __hash__ = object.__hash__
  __eq__ = object.__eq__

class FrontendState:
  """The registries the front end's modules share. One instance, `state`."""
  def __init__(self) -> None:
    # ---- live tensors (live.py) ----
    self.serials = itertools.count()  # the order tensors are made in, and the moments between (live.serial)
    # every holder, weakly, with its serial number. Each entry goes when its holder dies, by a callback that is dict.pop
    # itself (no Python frame), so the entries live exactly as long as the tensors: none pile up for the collector
    self.live: dict[LiveRef, int] = {}
    # holders that count as made before every assign (gradients), by id
    self.old: weakref.WeakValueDictionary[int, Holder] = weakref.WeakValueDictionary()
    # the bits of memory that holds no values (vmap's placeholders, while f is traced over them): a holder that reads
    # it cannot be computed, so it is never one of the readers to keep
    self.no_values = 0
    # while a TinyJit captures: the serial number of the first holder its function made
    self.program_start: list[int] = []
    # ---- autograd (Tensor.backward, gradient, register_hook) ----
    # tensors whose .grad backward() fills: the ones a user marked requires_grad=True (results of ops are not leaves)
    self.grad_leaves: weakref.WeakValueDictionary[int, Holder] = weakref.WeakValueDictionary()
    # non-leaf tensors whose .grad backward() fills too
    self.retained: weakref.WeakValueDictionary[int, Holder] = weakref.WeakValueDictionary()
    # each tensor's gradient hooks (each called with the gradient, returning None or a replacement); an entry leaves
    # with its tensor
    self.hooks: dict[int, tuple[weakref.ref[Holder], list[Callable[[Any], Any]]]] = {}
    # ---- writes ----
    # the assigns not run yet, by the live serial of when each was made: the tensor holding it (weakly) and its ASSIGN
    # node (pending.py)
    self.pending: dict[int, tuple[weakref.ref[Holder], UOp]] = {}
    # the hidden bases of leaves that require gradients, moved in place under no_grad: their memory is a leaf's, which
    # writes with gradients must not reach through any view of it, as in torch
    self.leaf_bases: weakref.WeakValueDictionary[int, Holder] = weakref.WeakValueDictionary()

state = FrontendState()
