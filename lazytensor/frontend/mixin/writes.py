"""Writes into a tensor's memory (assign, setitem, the in-place ops) and the views that share it.

The top of the chain of mixins, on every op below. A view (movement ops of a tensor, or a detach) is recorded on the
tensor it views (_add_view); a write gives that tensor a buffer of its own if it is lazy (_give_buffer) and moves its
live views onto what now stands for its contents (_rebase_views). Writes recorded for autograd make the written
tensor's graph `where(written, value, old)` (_setitem_with_grad); writes autograd does not see keep the old graph's
gradient (_written_unseen). An in-place movement (t_, unsqueeze_, ...) makes the tensor a view of the memory it held,
with a new shape (_move_in_place). Realizing gives each tensor memory of its own unless it is a view of another, also
two computed alike (one interned node: _own_memory), so that a write reaches only the tensor written and its views. The
writes not run yet are in the front end's state (frontend/pending.py picks those that must run before a realize)."""
from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from lazytensor.frontend import live, pending
from lazytensor.frontend.gradient import compute_gradient
from lazytensor.frontend.mixin.inplace import InPlaceMixin
from lazytensor.frontend.state import state
from lazytensor.frontend.views import (
  VIEW_OPS,
  Moves,
  assign_uop,
  moved_buffer,
  moved_onto,
  moved_st,
  moves_between,
  moves_over,
  replayed,
  unmoved,
  writable_view,
)
from lazytensor.helpers import ArgumentError, NotSupportedError, argsort
from lazytensor.runtime.device import buffer_map, new_buffer_uop
from lazytensor.schedule.materialize import is_plain_buffer_view
from lazytensor.schedule.scheduler import MOVES, commit_realized, realized_map
from lazytensor.shape.view import ShapeTracker
from lazytensor.uop.graph import const_uop, multi_leaves, own_value
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from typing import Self

class WritesMixin(InPlaceMixin):
  """How writes reach a tensor's memory and the views that share it: assign and __setitem__, the writes of the in-place
  ops below, and what Tensor.realize and detach ask of them (the views recorded, memory of its own, the pending writes
  run first)."""
  # the fields of a tensor that writes read and change (Tensor._start sets them)
  __slots__ = ("_requires_grad", "_graph", "_viewed", "_views", "_own_moves", "_detached", "_lazy_before",
               "_assigned_at")
  _requires_grad: bool | None  # whether it needs gradients (Tensor.requires_grad)
  # what a realized tensor that needs gradients was computed from, kept when realize() swaps in its buffer
  _graph: UOp | None
  _viewed: Self | None  # the tensor this one is a view of (made from it by movement ops, or a detach)
  _views: list[weakref.ref[WritesMixin]] | None  # the live views of this tensor, made by _add_view
  _own_moves: Moves | None  # a view realized on its own while its tensor was lazy: its view ops
  _detached: bool  # made by detach() (or a view of such): writes through it record no gradient
  _lazy_before: weakref.ref[UOp] | None  # the lazy value a realized tensor had, which its views were made over
  _assigned_at: int | None  # when its pending assign was made (a live serial number)

  # ---- what Tensor does that writes use (declared here, implemented by Tensor: frontend/tensor.py) ----

  no_grad: ClassVar[bool]  # whether ops record no gradients (Tensor.no_grad)

  def clone(self) -> Self: raise NotImplementedError("Tensor.clone")
  def _graph_root(self) -> UOp: raise NotImplementedError("Tensor._graph_root")
  @staticmethod
  def inference_mode(mode: bool = True) -> contextlib.AbstractContextManager[Any]:
    raise NotImplementedError("Tensor.inference_mode")

  def _is_buffer_view(self) -> bool:
    """Whether this tensor is a view of a realized buffer, on each device it lies on."""
    ld = self.lazydata
    if ld.op is not Ops.MULTI: return ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER
    # an empty piece (a slice of the sharded axis that holds nothing) is a constant: it has nothing to compute either
    return all((p.op is Ops.VIEW and p.src[0].op is Ops.BUFFER) or p.size == 0 for p in multi_leaves(ld))

  # ---- writes ----

  def assign(self, x: Any) -> Self:
    """Write x into this tensor's memory when it is next realized, or before anything that reads that memory is
    (in place; views of it see the new values, values computed from it before keep the old ones, as in torch).

    >>> t = Tensor([1.0, 2.0]).realize()
    >>> t.assign(t * 10).tolist()
    [10.0, 20.0]
    """
    value = self._as_value_for(x, self.shape)
    if self.numel() == 0: return self  # nothing to write
    # a value that needs gradients, written into a tensor that needed none, makes it need them (a result of ops now),
    # as torch's in-place ops do (`total = Tensor(0.0); total += loss` and `buf.add_(x * w)` kept no gradient)
    grad_into_plain = bool(value._requires_grad) and not self._requires_grad and self.dtype.is_float
    in_memory = self._is_buffer_view() or self.lazydata.op is Ops.ASSIGN
    if (self._viewed is not None and self._write_has_grad(value)) or \
       (grad_into_plain and self._viewed is None and in_memory):
      # a view of a tensor that needs gradients (`x[::2].mul_(10)`), or memory that gets them: written now, as a
      # setitem, which records the write in the gradients of the tensor written into and of its views
      self[...] = value
      return self
    if self.lazydata.op is Ops.ASSIGN and self._read_since_assigned((x, value)): self.realize()
    old = self.lazydata
    new = value.lazydata if self._viewed is not None else self._unseen_write(value.lazydata)
    if self._viewed is None and not in_memory:
      # nothing to write into yet: the tensor simply becomes the new value, and so do the views taken of it: a value
      # of its own (graph.own_value), not x's buffer or node, which a later write into either tensor would reach the
      # other by
      self.lazydata = own_value(new)
      if grad_into_plain: self._requires_grad = True
      self._rebase_views(old, self.lazydata, requires_grad=grad_into_plain)
      return self
    self._assign_into_memory(new)
    # views taken of a pending assign read the values the next one writes (views of the buffer read it as it is)
    if self._viewed is None and old.op is Ops.ASSIGN: self._rebase_views(old, self.lazydata)
    return self

  def _assign_into_memory(self, new: UOp) -> None:
    """assign's write of `new` into memory: recorded as a pending ASSIGN, after the writes pending into that memory."""
    # a view of a lazy tensor writes that tensor: it gets a buffer first, and the views taken of it before view it
    if self._viewed is not None or self.lazydata.op is not Ops.ASSIGN: self._give_buffer()
    if self._viewed is not None and (moved_buffer(self.lazydata) or unmoved(self.lazydata).op is Ops.MULTI) and \
       _shares_elements(moved_st(self.lazydata)):
      raise ArgumentError(f"assign (or an in-place op) into an expanded view of shape {self.shape}: several of its "
                          "elements are one element of memory, as in torch this is not supported; clone() the view "
                          "first")
    # a second assign before realizing writes the same buffer (its value may read the first one's result)
    target = self.lazydata.src[0] if self.lazydata.op is Ops.ASSIGN else self.lazydata
    # the writes other tensors have pending into this memory come first (those into memory the value reads run before
    # this assign does, when it is realized: a value built before them, as the gradients an optimizer reads, keeps the
    # old contents in the same schedule)
    if state.pending: self._run_pending_writes(reads=target.reads)
    if (write := assign_uop(target, new)).src[0] is not target:
      # a view on several devices that merges the pieces, written through a box of its memory (assign_uop): now, as
      # setitem writes (a pending write of another shape than this tensor's)
      assert self._viewed is not None
      self._viewed._renamed(type(self)(write).realize().lazydata)
      self._viewed._written_unseen()
      return
    self.lazydata = write
    self._assigned_at = live.serial()  # values computed from now on read what it writes
    state.pending[self._assigned_at] = (weakref.ref(self), self.lazydata)
    if self._viewed is not None:
      self._viewed._named_anew()
      self._viewed._written_unseen(self)

  def __setitem__(self, indices: Any, value: Any) -> None:
    """Write into part of the tensor, now (as torch does), with any index that __getitem__ takes. Integer tensor and
    list indices scatter (where an index repeats, the last value wins; an out-of-range tensor index writes nothing);
    a boolean Tensor mask writes a value that broadcasts to the selected elements of one entry. A write through a
    view (`t.T[0] = 1`, `t[:, ::2][1] = 2`) reaches the tensor it views, as in torch, unless the view is expanded or
    padded (its elements are not each one element of the buffer): that view is written as a copy of its own. A lazy
    tensor is first computed into a buffer of its own, which the views taken from it before go on to view.

    Gradients flow through the write, as through torch's in-place writes: into a tensor computed from ones that
    require gradients, or of a value that requires them, the tensor's graph becomes the old one where it was not
    written and the value where it was. A tensor that requires gradients and is not the result of an op (a leaf), or a
    view of one, cannot be written into (as in torch) except under no_grad().

    >>> t = Tensor.zeros(2, 3).contiguous().realize()
    >>> t[0, 1:] = 5.0
    >>> t[1, Tensor([2, 0])] = Tensor([7.0, 8.0])
    >>> t[t > 7] = -1.0
    >>> t.tolist()
    [[0.0, 5.0, 5.0], [-1.0, 0.0, 7.0]]
    """
    if self._write_has_grad(value): return self._setitem_with_grad(indices, value)
    if isinstance(self.device, tuple):
      # on several devices: an assign into the view written, which the multi pass runs on each piece where it lies
      # (what follows names one device's buffer)
      target, new = self._setitem_parts(indices, value)
      if target.numel():
        root = self._viewed if self._viewed is not None else self
        root._renamed(target.assign(new).realize().lazydata)
        root._written_unseen()
      return
    self._give_buffer()
    if not moved_buffer(self.lazydata): self.lazydata = self.contiguous().realize().lazydata
    if not self._is_buffer_view(): self.realize()  # a view of a buffer: realizing it computes nothing
    if not writable_view(self.lazydata.arg):
      self.lazydata = self.contiguous().realize().lazydata  # a dense buffer of its own to write into
    # in-place writes pending into this memory (through a view) run first: the value written reads what they wrote
    if state.pending: self._run_pending_writes()
    target, new = self._setitem_parts(indices, value)
    if target.numel() == 0: return  # nothing to write; an empty assign realizes into a new empty buffer, not self's
    written = type(self)(UOp(Ops.ASSIGN, target.dtype, (target.lazydata, new.lazydata))).realize().lazydata
    # the buffer now has a new node (the old one names the old contents): the whole tensor reads it from now on
    self.lazydata = UOp(Ops.VIEW, self.dtype, written.src, self.lazydata.arg)
    (self._viewed if self._viewed is not None else self)._written_unseen()

  def _run_pending_writes(self, *others: Self, reads: int = 0) -> None:
    """Before realizing self and `others`: the assigns of other tensors not run yet into memory they read (or into
    `reads`, a mask of memory) run first, one at a time, in the order they were made (pending.due_writes)."""
    writers = []
    for key, holder, node in pending.due_writes((self, *others), reads):
      if holder is None: (holder := type(self)(node))._assigned_at = key  # its tensor is gone: one made to run it
      assert self._is_tensor(holder), f"a pending write held by {type(holder).__name__}"
      writers.append(holder)
    # a value computed between two of them reads the first one's write
    for writer in writers: writer.realize()

  def _read_since_assigned(self, exempt: tuple[Any, ...]) -> bool:
    """Whether a value made since this tensor's pending assign (other than `exempt`) reads the memory it writes, other
    than through the assign (the random bits a draw makes read the count's assign): that value must see this write and
    not the next one, which therefore cannot join it in one schedule."""
    if self._assigned_at is None: return False
    write = self.lazydata
    return any(n > self._assigned_at and not any(r is e for e in exempt) and not r.lazydata.reaches(write)
               for n, r in live.old_value_readers((self,)))

  def _written_unseen(self, writer: WritesMixin | None = None) -> None:
    """After a write that autograd does not see (through a detached view, or under no_grad) into this tensor, which
    keeps the graph that computed it: that graph stands for the new contents from now on (values computed from it read
    them), with the old graph's gradient, as torch's autograd does not see such a write either. A write still pending
    (writer's assign) runs first: running it drops what stood for the memory before, this graph too if it came
    first."""
    if self._graph is None or not self._requires_grad or not self._is_buffer_view(): return
    if writer is not None: writer.realize()
    self._graph = with_gradient_of(self.lazydata, self._graph)
    commit_realized({self._graph: self.lazydata})

  def _unseen_write(self, value: UOp) -> UOp:
    """What a write of `value` into the whole of this tensor leaves in it: under no_grad, into a result of ops that
    needs gradients, the value with the gradient of the graph it had, as torch's autograd does not see such a write
    (the value alone, a constant to autograd, cut its gradient off)."""
    if not self.no_grad or not self._requires_grad or self._is_leaf_memory(): return value
    return with_gradient_of(value, self._graph_root())

  def _write_has_grad(self, value: Any) -> bool:
    """Whether a write into this tensor is recorded for autograd: outside no_grad, into a float tensor that needs
    gradients or of a value that does. Into a leaf that requires gradients (or a view of one) it is an error, as in
    torch: the leaf's gradient would be that of a value it no longer holds."""
    # a write through a detached view (w.detach()[0] = 1) reaches the memory and nothing else, as in torch
    if self.no_grad or not self.dtype.is_float or self._detached: return False
    self._refuse_leaf("x[...] = value")
    root = self._viewed if self._viewed is not None else self
    return bool(root._requires_grad or self._requires_grad or (self._is_tensor(value) and value._requires_grad))

  def _refuse_leaf(self, name: str) -> None:
    """The in-place op `name` into a leaf that requires gradients (or a view of one, or of its memory) is an error
    outside no_grad, as in torch: the leaf's gradient would be that of a value it no longer holds. A write through a
    detached view reaches the memory and nothing else, as in torch."""
    if self.no_grad or self._detached: return
    root = self._viewed if self._viewed is not None else self
    if root._is_leaf_memory() or (self._requires_grad and id(self) in state.grad_leaves):
      what = "a tensor" if root is self or id(self) in state.grad_leaves else "a view of a tensor"
      raise ArgumentError(f"{name}: {what} that requires grad and is a leaf (not the result of an op) cannot be "
                          "changed in place, as in torch; do it under no_grad(), or on a clone")

  def _write_in_place(self, value: Any, name: str) -> Self:
    """What the in-place ops write with (add_, fill_, `t += x`, ...): an assign, refused on a leaf that requires
    grad."""
    self._refuse_leaf(name)
    return self.assign(value)

  def _is_leaf_memory(self) -> bool:
    """Whether this tensor (one that views no other) holds the memory of a leaf that requires gradients: the leaf
    itself, or the hidden base of one that was moved in place (_move_in_place)."""
    return bool(self._requires_grad) and (id(self) in state.grad_leaves or id(self) in state.leaf_bases)

  # ---- in-place movement ----

  def _move_in_place(self, move: Callable[[Self], Self], name: str) -> Self:
    """torch's in-place movement ops (t_, unsqueeze_, ...): this tensor becomes `move(self)`, a view of the memory it
    held with a new shape, and stays the same object. A tensor that views no other hands its memory, its graph and the
    views taken of it to a hidden base tensor first (_split_base), which it then views: its views, old and new, and
    writes through any of them meet in that base's memory (or its lazy value) as they do for any view. A view just
    moves further."""
    self._refuse_leaf(name)
    # its own pending write is done first, as torch's was: the views taken before read the memory it writes, and an
    # assign under a move would not be the node that the pending writes wait for
    if self.lazydata.op is Ops.ASSIGN: self.realize()
    src = self._graph_root()
    moved = move(type(self)(src)).lazydata  # the move alone, made over a plain tensor: no view recorded, no detach
    if moved is src: return self  # a move that changes nothing (squeeze_ of a dim that is not 1, transpose_(0, 0))
    if self._viewed is None: self._split_base()
    # a view realized into a buffer of its own goes on following the tensor it views (_rebase_views), with this move
    if self._own_moves is not None: self._own_moves += moves_between(moved, src)
    self.lazydata, self._graph = moved, None
    return self

  def _split_base(self) -> None:
    """A tensor that views no other becomes a view of a new hidden base: the base takes its value, its graph, its
    pending-write state and the views taken of it, as the tensor whose memory they all share."""
    base = type(self)(self.lazydata)
    base._requires_grad, base._graph, base._lazy_before, base._assigned_at = \
      self._requires_grad, self._graph, self._lazy_before, self._assigned_at
    if id(self) in state.grad_leaves: state.leaf_bases[id(base)] = base
    base._views, self._views = self._views, None
    for ref in base._views or []:
      if (v := ref()) is not None and v._viewed is self: v._viewed = base
    self._graph, self._lazy_before, self._assigned_at = None, None, None
    base._add_view(self)

  # ---- memory of its own, and the views that follow it ----

  def _give_buffer(self) -> None:
    """Before a write: the tensor this one views (itself, or the one its movement ops were taken from) gets a buffer
    of its own if it is lazy, and every live view of it taken while it was lazy views the buffer, as torch's views do:
    after a write, the lazy node no longer stands for the buffer's contents. Memory of its own: where another tensor
    computed alike (the same interned node) holds that value's buffer, realize computes a copy (_own_memory)."""
    root = self._viewed if self._viewed is not None else self
    if moved_buffer(root.lazydata) or root._is_buffer_view():  # realized since its views were taken
      old = root._lazy_before() if root._lazy_before is not None else None
    else:
      old = root.lazydata
      copy = root._stand_in()
      copy._assigned_at = root._assigned_at  # values computed after its pending assign read what it writes
      root.lazydata = copy.realize().lazydata
      if root._requires_grad and id(root) not in state.grad_leaves: root._graph = copy._graph  # gradients flow on
    root._lazy_before = None  # its views follow it from now on: the next write need not look for them
    root._rebase_views(old, root.lazydata)
    # a view of a tensor that needs gradients reads it through its graph: a write that records none goes to the buffer
    if self is not root and (graph := root._graph_root()) is not root.lazydata and moves_over(self.lazydata, graph):
      self.lazydata = moved_onto(self.lazydata, graph, root.lazydata)
    # a view taken of an assign (`d.mul_(2); d[0].add_(1)`) writes where that assign wrote, once it ran
    if (write := unmoved(self.lazydata)).op is Ops.ASSIGN and moved_buffer(write.src[0]):
      if write not in realized_map: type(self)(write).realize()  # (which may realize this view too)
      if moves_over(self.lazydata, write): self.lazydata = moved_onto(self.lazydata, write, write.src[0])

  @staticmethod
  def _own_memory(tensors: Sequence[WritesMixin]) -> None:
    """Before Tensor.realize schedules `tensors`: a tensor whose graph would hand it memory that a tensor other than
    its views holds as its value is given a copy of its graph to compute instead (clone), which the views taken of it
    follow. Graphs are interned, so two tensors computed alike (`a = x * 2; b = x * 2`) hold one node: realized
    together they would share its buffer, and realized one after the other the second would find the first one's
    buffer (realized_map), and a write into either would reach the other, where torch's results never share memory.
    The copy is one kernel, and only then: realizing a tensor again, or a view of it with it, is no copy; nor is a
    value found in memory that no live tensor holds (what a schedule materialized on the way)."""
    seen: dict[UOp, WritesMixin] = {}
    for t in tensors:
      node, memory = handed_value(t.lazydata)
      if not _computed(node): continue  # memory it holds already, or writes (a pending assign)
      root = t._viewed if t._viewed is not None else t
      if seen.setdefault(node, root) is not root or (memory and root._held_by_other(memory)):
        old = t.lazydata
        t.lazydata = type(t)(old).clone().lazydata
        t._rebase_views(old, t.lazydata)

  def _held_by_other(self, memory: int) -> bool:
    """Whether a live tensor holds `memory` (a mask of buffers) that is neither this one (which views no other) nor
    one of its views."""
    for h in live.holders(memory):
      if self._is_tensor(h) and (h._viewed if h._viewed is not None else h) is not self: return True
    return False

  def _stand_in(self) -> Self:
    """What is realized in the place of this tensor (a lazy one that views no other) to give it a dense buffer (a
    constant has none), while it and its views keep the graphs they hold (realize moves the views realized with it by
    those). It counts as a view of this one: memory that one of its views holds (computed its value on its own) is its
    too, no reason for a copy (_own_memory)."""
    # computed as outside no_grad: its graph is the one this tensor keeps for its gradient (_give_buffer), a write under
    # no_grad notwithstanding
    with self.inference_mode(False): copy = self.contiguous()
    copy._viewed = self
    return copy

  def _add_view(self, view: WritesMixin) -> None:
    """Record `view` (movement ops of this tensor, or a detach) as a view of the tensor this one views, or of this one:
    writes into either reach the other (_give_buffer, _rebase_views)."""
    root = self._viewed if self._viewed is not None else self
    view._viewed, view._detached = root, self._detached
    if root._views is None: root._views = []
    elif (n := len(root._views)) >= 64 and n & (n - 1) == 0:
      # the dead ones go at each power of two: a tensor broadcast at every step (a learning rate) gained one a use
      root._views = [ref for ref in root._views if ref() is not None]
    root._views.append(weakref.ref(view))

  def _setitem_with_grad(self, indices: Any, value: Any) -> None:
    """__setitem__ recorded for autograd. The buffer is written as without gradients; the graph of the tensor written
    into (self, or the tensor it views) becomes `where(written, value placed there, old graph)`, standing for the
    buffer's new contents, and its live views (self among them) read it through that graph."""
    root = self._viewed if self._viewed is not None else self
    old = root._grad_buffer()
    node = old if self is root else self.lazydata  # self's value in graphs
    if not moves_over(node, old):
      raise NotSupportedError("x[...] = value with gradients: x is a view that was realized on its own, which no "
                              "longer knows the graph of the tensor it views; write into that tensor, or take the "
                              "view again")
    if self is not root and not writable_view(moved_st(moved_onto(node, old, root.lazydata))):
      self._viewed = None  # an expanded or padded view: written as a copy of its own, as without gradients
      return self._setitem_with_grad(indices, value)
    view = type(self)(node)
    view._requires_grad = True
    target, new = view._setitem_parts(indices, value)
    if target.numel() == 0: return
    # the write's adjoint places the value (and ones, for where it goes) in the written tensor's shape
    ones = const_uop(1.0, target.dtype, target.device, target.shape)
    # (through the value's graph: one realized meanwhile, with _grad_buffer's copy, as a reader of memory that a pending
    # write run there wrote, is a buffer in its lazydata, a constant to autograd)
    placed, hit = (compute_gradient(target.lazydata, g, {old})[old] for g in (new._graph_root(), ones))
    # (tensors only for the moment: one holding `placed`, the value's node, while the write runs would be a second
    # tensor of that value, given memory of its own there)
    graph = (type(self)(hit) != 0).where(type(self)(placed), type(self)(old)).lazydata
    write = assign_uop(moved_onto(target.lazydata, old, root.lazydata), new.lazydata)
    written = type(self)(write).realize().lazydata
    # the buffer's new node (the old one names the old contents), as without gradients
    if root.lazydata.op is not Ops.MULTI: root.lazydata = UOp(Ops.VIEW, root.dtype, written.src, root.lazydata.arg)
    else: root._renamed(written)
    commit_realized({graph: root.lazydata})
    root._graph, root._requires_grad = graph, True
    root._rebase_views(old, graph, requires_grad=True)

  def _grad_buffer(self) -> UOp:
    """For a write with gradients into this tensor (one that views no other): it is given a buffer of its own if it
    has none, keeping the graph that computed it; returns the node that stands for the buffer's contents in graphs
    (that graph, or the buffer's view), which the views taken from it read it through from now on."""
    if self._is_buffer_view(): return self._graph_root()
    lazy = self.lazydata
    copy = self._stand_in().realize()
    self.lazydata = copy.lazydata
    graph = copy._graph_root()
    self._graph = graph if graph is not copy.lazydata else None
    self._rebase_views(lazy, graph)
    return graph

  def _renamed(self, written: UOp) -> None:
    """After a write into this tensor's memory on several devices, run (`written`, what it realized to): its pieces
    read the buffer nodes the write named, as on one device after setitem (the old nodes name the old contents, which
    a copy realized from them before holds: realized_map would find it by them), and so do its views."""
    old = self.lazydata
    names = {o.src[0]: w.src[0] for o, w in zip(multi_leaves(old), multi_leaves(written))
             if o.op is Ops.VIEW and w.op is Ops.VIEW and o.src[0].op is Ops.BUFFER and w.src[0].op is Ops.BUFFER and
             o.src[0].reads == w.src[0].reads}
    self.lazydata = old.substitute(names)
    self._rebase_views(old, self.lazydata)

  def _hand_memory_to_viewed(self) -> None:
    """After this view of a lazy tensor was realized on its own: where its moves keep each element of that tensor once
    (reshapes, permutes, flips), that tensor takes the memory as its own, seen through the moves undone, as torch's
    `x.sum(1)` is one tensor where here it is a reduce and a reshape view of it. Left lazy, it stood for a value of the
    memory its graph read: a write there computed it again first, as an old value (live.old_value_readers), each step
    of a decode loop recomputing the last step's output (with the last step's bound position, which the new one's
    contradicts)."""
    root, moves = self._viewed, self._own_moves
    # (on one device: a value on several is the pieces' layout, not one view of memory)
    if root is None or moves is None or self.lazydata.op is not Ops.VIEW or self.lazydata.src[0].op is not Ops.BUFFER \
       or root._is_buffer_view() or any(op not in _BIJECTIVE_MOVES for op, _ in moves): return
    shapes = [root.shape]
    for op, arg in moves[:-1]: shapes.append(MOVES[op](ShapeTracker.from_shape(shapes[-1]), arg).shape)
    st = self.lazydata.arg
    for (op, arg), shape in zip(reversed(moves), reversed(shapes)):
      st = st.reshape(shape) if op is Ops.RESHAPE else st.permute(tuple(argsort(arg))) if op is Ops.PERMUTE else \
        st.flip(arg)
    if root._requires_grad and id(root) not in state.grad_leaves: root._graph = root.lazydata
    root._lazy_before = weakref.ref(root.lazydata)  # what its other views were made over (_give_buffer)
    root.lazydata = UOp(Ops.VIEW, root.dtype, self.lazydata.src, st.simplify())
    self._own_moves = None

  def _named_anew(self) -> None:
    """When a write through a view of this tensor (a buffer that views no other) is made: it and its views read new
    BUFFER nodes of the same memory from now on. Values computed from them are then new nodes, which read the write
    (it runs first: pending.due_writes), where the old nodes stand for the old contents: a value realized from them
    before (`cache[:5].sum(0)` in a loop that writes `cache[3:4]`) was found again in realized_map, stale."""
    if not self._is_buffer_view(): return
    old = self.lazydata
    self.lazydata = old.substitute({b: new_buffer_uop(b.arg[0], b.arg[1], b.dtype, buffer_map[b])
                                    for b in old.toposort if b.op is Ops.BUFFER})
    self._rebase_views(old, self.lazydata)

  def _rebase_views(self, old: UOp | None, new: UOp, requires_grad: bool = False) -> None:
    """Every live view taken from this tensor while it was `old` (movement ops over it), or realized into a buffer of
    its own while this one was lazy, now makes the same moves over `new`: the buffer a write gave it, the value a lazy
    tensor was assigned, or the graph that stands for the buffer's contents."""
    if self._views is None: return
    views = [v for ref in self._views if (v := ref()) is not None and v._viewed is self]
    self._views = [weakref.ref(v) for v in views]
    # (what views were made over, what they are made over now): the views taken of one realized on its own follow it
    moved = [] if old is None else [(old, new)]
    for v in views:
      if v._own_moves is not None:
        moved.append((v.lazydata, replayed(v._own_moves, new)))
        v.lazydata, v._own_moves = moved[-1][1], None
        if requires_grad and not v._detached: v._requires_grad = True
    for v in views:
      if (pair := next(((o, n) for o, n in moved if moves_over(v.lazydata, o)), None)) is not None:
        v.lazydata = moved_onto(v.lazydata, *pair)
        # a detached view reads the new graph without its gradients
        if requires_grad and not v._detached: v._requires_grad = True

# the moves that keep each element of what they move once, and can be undone
_BIJECTIVE_MOVES = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.FLIP})

def _shares_elements(st: ShapeTracker) -> bool:
  """Whether two elements of this view are one element of the memory it views (an expand)."""
  return len(st.views) == 1 and any(stride == 0 for size, stride in zip(st.views[0].shape, st.views[0].strides)
                                    if size > 1)

def with_gradient_of(value: UOp, graph: UOp) -> UOp:
  """value, whose gradient is graph's (d value / d graph = 1): a write autograd does not see."""
  return UOp(Ops.CUSTOM_GRAD, value.dtype, (value, graph, const_uop(1.0, value.dtype, value.device, value.shape)))

# what handed_value looks under (a value found computed may lie there), and where realized_map keeps its entries:
# Tensor.realize calls _own_memory for one tensor only if its graph is one of those ops, or found computed
MAYBE_FOUND = VIEW_OPS | {Ops.CONTIGUOUS}
REALIZED = realized_map.attr

def handed_value(ld: UOp) -> tuple[UOp, int]:
  """The node whose value realizing ld gives it (under its views), and the memory (a mask of buffers) that value is
  already in, or 0 when realizing computes it into new memory. A contiguous() of a value in a dense buffer is that
  buffer (the scheduler folds it), as torch's contiguous() of a contiguous tensor is the tensor itself."""
  while ld.op in VIEW_OPS: ld = ld.src[0]
  if ld.op is Ops.CONTIGUOUS and (hit := realized_map.get(ld.src[0])) is not None and is_plain_buffer_view(hit):
    return ld.src[0], hit.reads
  return ld, hit.reads if (hit := realized_map.get(ld)) is not None else 0

def _computed(node: UOp) -> bool:
  """Whether node is a value that realizing computes (or found computed), not a view of a buffer or a constant, or an
  assign (into the memory its target names), on some device it lies on."""
  if node.op is Ops.MULTI: return any(_computed(unmoved(p)) for p in node.src)
  return node.op is not Ops.VIEW and node.op is not Ops.ASSIGN
