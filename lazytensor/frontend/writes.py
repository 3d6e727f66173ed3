"""Writes into a tensor's memory (assign, setitem) and the views that share it: what Tensor.assign, __setitem__ and
detach do. A view (movement ops of a tensor, or a detach) is recorded on the tensor it views (add_view); a write gives
that tensor a buffer of its own if it is lazy (give_buffer) and moves its live views onto what now stands for its
contents (rebase_views). Writes recorded for autograd make the written tensor's graph `where(written, value, old)`
(setitem_with_grad); writes autograd does not see keep the old graph's gradient (written_unseen). An in-place movement
(t_, unsqueeze_, ...) makes the tensor a view of the memory it held, with a new shape (move_in_place). Realizing gives
each tensor memory of its own unless it is a view of another, also two computed alike (one interned node: own_memory),
so that a write reaches only the tensor written and its views."""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lazytensor.frontend import live, pending
from lazytensor.frontend.autograd import grad_leaves
from lazytensor.frontend.gradient import compute_gradient
from lazytensor.frontend.views import (
  VIEW_OPS,
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
from lazytensor.helpers import ArgumentError, NotSupportedError
from lazytensor.schedule.scheduler import commit_realized, is_plain_buffer_view, realized_map
from lazytensor.shape.view import ShapeTracker
from lazytensor.uop.graph import const_uop, multi_leaves, own_value
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from lazytensor.frontend.tensor import Tensor

# the hidden bases of leaves that require gradients, moved in place under no_grad (move_in_place): their memory is a
# leaf's, which writes with gradients must not reach through any view of it (write_has_grad), as in torch
leaf_bases: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()

def assign(t: Tensor, x: Any) -> Tensor:
  """Tensor.assign: the write recorded as a pending ASSIGN of t\'s memory."""
  value = t._as_value_for(x, t.shape)
  if t.numel() == 0: return t  # nothing to write
  # a value that needs gradients, written into a tensor that needed none, makes it need them (a result of ops now), as
  # torch's in-place ops do (`total = Tensor(0.0); total += loss` and `buf.add_(x * w)` kept no gradient)
  grad_into_plain = bool(value._requires_grad) and not t._requires_grad and t.dtype.is_float
  in_memory = t._is_buffer_view() or t.lazydata.op is Ops.ASSIGN
  if (t._viewed is not None and write_has_grad(t, value)) or (grad_into_plain and t._viewed is None and in_memory):
    # a view of a tensor that needs gradients (`x[::2].mul_(10)`), or memory that gets them: written now, as a
    # setitem, which records the write in the gradients of the tensor written into and of its views
    t[...] = value
    return t
  if t.lazydata.op is Ops.ASSIGN and read_since_assigned(t, (x, value)): t.realize()
  old = t.lazydata
  new = value.lazydata if t._viewed is not None else unseen_write(t, value.lazydata)
  if t._viewed is None and not in_memory:
    # nothing to write into yet: the tensor simply becomes the new value, and so do the views taken of it: a value of
    # its own (graph.own_value), not x's buffer or node, which a later write into either tensor would reach the other by
    t.lazydata = own_value(new)
    if grad_into_plain: t._requires_grad = True
    rebase_views(t, old, t.lazydata, requires_grad=grad_into_plain)
    return t
  # a view of a lazy tensor writes that tensor: it gets a buffer first, and the views taken of it before view it
  if t._viewed is not None or old.op is not Ops.ASSIGN: give_buffer(t)
  if t._viewed is not None and (moved_buffer(t.lazydata) or unmoved(t.lazydata).op is Ops.MULTI) and \
     _shares_elements(moved_st(t.lazydata)):
    raise ArgumentError(f"assign (or an in-place op) into an expanded view of shape {t.shape}: several of its elements "
                        "are one element of memory, as in torch this is not supported; clone() the view first")
  # a second assign before realizing writes the same buffer (its value may read the first one's result)
  target = t.lazydata.src[0] if t.lazydata.op is Ops.ASSIGN else t.lazydata
  # the writes other tensors have pending into this memory come first (those into memory the value reads run before
  # this assign does, when it is realized: a value built before them, as the gradients an optimizer reads, keeps the
  # old contents in the same schedule)
  if pending.writes: pending.run_before((t,), target.reads)
  if (write := assign_uop(target, new)).src[0] is not target:
    # a view on several devices that merges the pieces, written through a box of its memory (assign_uop): now, as
    # setitem writes (a pending write of another shape than t's)
    assert t._viewed is not None
    renamed(t._viewed, type(t)(write).realize().lazydata)
    written_unseen(t._viewed)
    return t
  t.lazydata = write
  t._assigned_at = live.serial()  # values computed from now on read what it writes
  pending.writes[t._assigned_at] = (weakref.ref(t), t.lazydata)
  if t._viewed is not None: written_unseen(t._viewed, t)
  # views taken of a pending assign read the values the next one writes (views of the buffer read it as it is)
  if t._viewed is None and old.op is Ops.ASSIGN: rebase_views(t, old, t.lazydata)
  return t

def setitem(t: Tensor, indices: Any, value: Any) -> None:
  """Tensor.__setitem__: the write, run now."""
  if write_has_grad(t, value): return setitem_with_grad(t, indices, value)
  if isinstance(t.device, tuple):
    # on several devices: an assign into the view written, which the multi pass runs on each piece where it lies (what
    # follows names one device's buffer)
    target, new = t._setitem_parts(indices, value)
    if target.numel(): renamed(t._viewed if t._viewed is not None else t, target.assign(new).realize().lazydata)
    return
  give_buffer(t)
  if not moved_buffer(t.lazydata): t.lazydata = t.contiguous().realize().lazydata
  if not t._is_buffer_view(): t.realize()  # a view of a buffer: realizing it computes nothing
  if not writable_view(t.lazydata.arg):
    t.lazydata = t.contiguous().realize().lazydata  # a dense buffer of its own to write into
  # in-place writes pending into this memory (through a view) run first: the value written reads what they wrote
  if pending.writes: pending.run_before((t,))
  target, new = t._setitem_parts(indices, value)
  if target.numel() == 0: return  # nothing to write; an empty assign realizes into a new empty buffer, not t's
  write = UOp(Ops.ASSIGN, target.dtype, (target.lazydata, new.lazydata))
  written = type(t)(write).realize().lazydata
  # the buffer now has a new node (the old one names the old contents): the whole tensor reads it from now on
  t.lazydata = UOp(Ops.VIEW, t.dtype, written.src, t.lazydata.arg)
  written_unseen(t._viewed if t._viewed is not None else t)

def renamed(root: Tensor, written: UOp) -> None:
  """After a write into root's memory on several devices, run (`written`, what it realized to): root's pieces read the
  buffer nodes the write named, as on one device after setitem (the old nodes name the old contents, which a copy
  realized from them before holds: realized_map would find it by them), and so do its views."""
  old = root.lazydata
  names = {o.src[0]: w.src[0] for o, w in zip(multi_leaves(old), multi_leaves(written))
           if o.op is Ops.VIEW and w.op is Ops.VIEW and o.src[0].op is Ops.BUFFER and w.src[0].op is Ops.BUFFER and
           o.src[0].reads == w.src[0].reads}
  root.lazydata = old.substitute(names)
  rebase_views(root, old, root.lazydata)

def _shares_elements(st: ShapeTracker) -> bool:
  """Whether two elements of this view are one element of the memory it views (an expand)."""
  return len(st.views) == 1 and any(stride == 0 for size, stride in zip(st.views[0].shape, st.views[0].strides)
                                    if size > 1)

def read_since_assigned(t: Tensor, exempt: tuple[Any, ...]) -> bool:
  """Whether a value made since this tensor's pending assign (other than `exempt`) reads the memory it writes, other
  than through the assign (the random bits a draw makes read the count's assign): that value must see this write and
  not the next one, which therefore cannot join it in one schedule."""
  if t._assigned_at is None: return False
  write = t.lazydata
  return any(n > t._assigned_at and not any(r is e for e in exempt) and write not in r.lazydata.toposort
             for n, r in live.old_value_readers((t,)))

def written_unseen(t: Tensor, writer: Tensor | None = None) -> None:
  """After a write that autograd does not see (through a detached view, or under no_grad) into this tensor, which
  keeps the graph that computed it: that graph stands for the new contents from now on (values computed from it read
  them), with the old graph's gradient, as torch's autograd does not see such a write either. A write still pending
  (writer's assign) runs first: running it drops what stood for the memory before, this graph too if it came first."""
  if t._graph is None or not t._requires_grad or not t._is_buffer_view(): return
  if writer is not None: writer.realize()
  t._graph = with_gradient_of(t.lazydata, t._graph)
  commit_realized({t._graph: t.lazydata})

def unseen_write(t: Tensor, value: UOp) -> UOp:
  """What a write of `value` into the whole of t leaves in it: under no_grad, into a result of ops that needs
  gradients, the value with the gradient of the graph t had, as torch's autograd does not see such a write (the value
  alone, a constant to autograd, cut t's gradient off)."""
  if not t.no_grad or not t._requires_grad or is_leaf_memory(t): return value
  return with_gradient_of(value, t._graph_root())

def with_gradient_of(value: UOp, graph: UOp) -> UOp:
  """value, whose gradient is graph's (d value / d graph = 1): a write autograd does not see."""
  return UOp(Ops.CUSTOM_GRAD, value.dtype, (value, graph, const_uop(1.0, value.dtype, value.device, value.shape)))

def write_has_grad(t: Tensor, value: Any) -> bool:
  """Whether a write into this tensor is recorded for autograd: outside no_grad, into a float tensor that needs
  gradients or of a value that does. Into a leaf that requires gradients (or a view of one) it is an error, as in
  torch: the leaf's gradient would be that of a value it no longer holds."""
  # a write through a detached view (w.detach()[0] = 1) reaches the memory and nothing else, as in torch
  if t.no_grad or not t.dtype.is_float or t._detached: return False
  refuse_leaf(t, "x[...] = value")
  root = t._viewed if t._viewed is not None else t
  return bool(root._requires_grad or t._requires_grad or (isinstance(value, type(t)) and value._requires_grad))

def refuse_leaf(t: Tensor, name: str) -> None:
  """The in-place op `name` into a leaf that requires gradients (or a view of one, or of its memory) is an error
  outside no_grad, as in torch: the leaf's gradient would be that of a value it no longer holds. A write through a
  detached view reaches the memory and nothing else, as in torch."""
  if t.no_grad or t._detached: return
  root = t._viewed if t._viewed is not None else t
  if is_leaf_memory(root) or (t._requires_grad and id(t) in grad_leaves):
    what = "a tensor" if root is t or id(t) in grad_leaves else "a view of a tensor"
    raise ArgumentError(f"{name}: {what} that requires grad and is a leaf (not the result of an op) cannot be changed "
                        "in place, as in torch; do it under no_grad(), or on a clone")

def write_in_place(t: Tensor, value: Any, name: str) -> Tensor:
  """What the in-place ops write with (add_, fill_, `t += x`, ...): an assign, refused on a leaf that requires grad."""
  refuse_leaf(t, name)
  return assign(t, value)

def is_leaf_memory(root: Tensor) -> bool:
  """Whether this tensor (one that views no other) holds the memory of a leaf that requires gradients: the leaf
  itself, or the hidden base of one that was moved in place (move_in_place)."""
  return bool(root._requires_grad) and (id(root) in grad_leaves or id(root) in leaf_bases)

def move_in_place(t: Tensor, move: Callable[[Tensor], Tensor], name: str) -> Tensor:
  """torch's in-place movement ops (t_, unsqueeze_, ...): t becomes `move(t)`, a view of the memory it held with a
  new shape, and stays the same object. A tensor that views no other hands its memory, its graph and the views taken
  of it to a hidden base tensor first (split_base), which it then views: its views, old and new, and writes through any
  of them meet in that base's memory (or its lazy value) as they do for any view. A view just moves further."""
  refuse_leaf(t, name)
  # its own pending write is done first, as torch's was: the views taken before read the memory it writes, and an
  # assign under a move would not be the node that pending.writes waits for
  if t.lazydata.op is Ops.ASSIGN: t.realize()
  src = t._graph_root()
  moved = move(type(t)._of(src)).lazydata  # the move alone, made over a plain tensor: no view recorded, no detach
  if moved is src: return t  # a move that changes nothing (squeeze_ of a dim that is not 1, transpose_(0, 0))
  if t._viewed is None: split_base(t)
  # a view realized into a buffer of its own goes on following the tensor it views (rebase_views), with this move too
  if t._own_moves is not None: t._own_moves += moves_between(moved, src)
  t.lazydata, t._graph = moved, None
  return t

def split_base(t: Tensor) -> None:
  """A tensor that views no other becomes a view of a new hidden base: the base takes its value, its graph, its
  pending-write state and the views taken of it, as the tensor whose memory they all share."""
  base = type(t)._of(t.lazydata)
  base._requires_grad, base._graph, base._lazy_before, base._assigned_at = \
    t._requires_grad, t._graph, t._lazy_before, t._assigned_at
  if id(t) in grad_leaves: leaf_bases[id(base)] = base
  base._views, t._views = t._views, None
  for ref in base._views or []:
    if (v := ref()) is not None and v._viewed is t: v._viewed = base
  t._graph, t._lazy_before, t._assigned_at = None, None, None
  add_view(base, t)

def give_buffer(t: Tensor) -> None:
  """Before a write: the tensor this one views (itself, or the one its movement ops were taken from) gets a buffer
  of its own if it is lazy, and every live view of it taken while it was lazy views the buffer, as torch's views do:
  after a write, the lazy node no longer stands for the buffer's contents. Memory of its own: where another tensor
  computed alike (the same interned node) holds that value's buffer, realize computes a copy (own_memory)."""
  root = t._viewed if t._viewed is not None else t
  if moved_buffer(root.lazydata) or root._is_buffer_view():  # realized since its views were taken
    old = root._lazy_before() if root._lazy_before is not None else None
  else:
    old = root.lazydata
    copy = stand_in(root)
    copy._assigned_at = root._assigned_at  # values computed after its pending assign read what it writes
    root.lazydata = copy.realize().lazydata
    if root._requires_grad and id(root) not in grad_leaves: root._graph = copy._graph  # gradients flow on
  root._lazy_before = None  # its views follow it from now on: the next write need not look for them
  rebase_views(root, old, root.lazydata)
  # a view of a tensor that needs gradients reads it through its graph: a write that records none goes to the buffer
  if t is not root and (graph := root._graph_root()) is not root.lazydata and moves_over(t.lazydata, graph):
    t.lazydata = moved_onto(t.lazydata, graph, root.lazydata)
  # a view taken of an assign (`d.mul_(2); d[0].add_(1)`) writes where that assign wrote, once it ran
  if (write := unmoved(t.lazydata)).op is Ops.ASSIGN and moved_buffer(write.src[0]):
    if write not in realized_map: type(t)._of(write).realize()  # (which may realize this view too)
    if moves_over(t.lazydata, write): t.lazydata = moved_onto(t.lazydata, write, write.src[0])

# what handed_value looks under (a value found computed may lie there), and where realized_map keeps its entries:
# Tensor.realize calls own_memory for one tensor only if its graph is one of those ops, or found computed
MAYBE_FOUND = VIEW_OPS | {Ops.CONTIGUOUS}
REALIZED = realized_map.attr

def own_memory(tensors: tuple[Tensor, ...]) -> None:
  """Before Tensor.realize schedules `tensors`: a tensor whose graph would hand it memory that a tensor other than its
  views holds as its value is given a copy of its graph to compute instead (clone), which the views taken of it follow.
  Graphs are interned, so two tensors computed alike (`a = x * 2; b = x * 2`) hold one node: realized together they
  would share its buffer, and realized one after the other the second would find the first one's buffer
  (realized_map), and a write into either would reach the other, where torch's results never share memory. The copy
  is one kernel, and only then: realizing a tensor again, or a view of it with it, is no copy; nor is a value found in
  memory that no live tensor holds (what a schedule materialized on the way)."""
  seen: dict[UOp, Tensor] = {}
  for t in tensors:
    node, memory = handed_value(t.lazydata)
    if not _computed(node): continue  # memory it holds already, or writes (a pending assign)
    root = t._viewed if t._viewed is not None else t
    if seen.setdefault(node, root) is not root or (memory and _held_by_other(memory, root)):
      old = t.lazydata
      t.lazydata = type(t)._of(old).clone().lazydata
      rebase_views(t, old, t.lazydata)

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

def _held_by_other(memory: int, root: Tensor) -> bool:
  """Whether a live tensor holds `memory` (a mask of buffers) that is neither `root` nor one of its views."""
  for h in live.holders(memory):
    if isinstance(h, type(root)) and (h._viewed if h._viewed is not None else h) is not root: return True
  return False

def stand_in(root: Tensor) -> Tensor:
  """What is realized in the place of `root` (a lazy tensor that views no other) to give it a dense buffer (a constant
  has none), while root and its views keep the graphs they hold (realize moves the views realized with it by those).
  It counts as a view of root: memory that one of root's views holds (computed root's value on its own) is root's too,
  no reason for a copy (own_memory)."""
  # computed as outside no_grad: its graph is the one root keeps for its gradient (give_buffer), a write under no_grad
  # notwithstanding
  with root.inference_mode(False): copy = root.contiguous()
  copy._viewed = root
  return copy

def add_view(t: Tensor, view: Tensor) -> None:
  """Record `view` (movement ops of t, or a detach) as a view of the tensor t views, or of t: writes into
  either reach the other (give_buffer, rebase_views)."""
  root = t._viewed if t._viewed is not None else t
  view._viewed, view._detached = root, t._detached
  if root._views is None: root._views = []
  elif (n := len(root._views)) >= 64 and n & (n - 1) == 0:
    # the dead ones go at each power of two: a tensor broadcast at every step (a learning rate) gained one a use
    root._views = [ref for ref in root._views if ref() is not None]
  root._views.append(weakref.ref(view))

def setitem_with_grad(t: Tensor, indices: Any, value: Any) -> None:
  """__setitem__ recorded for autograd. The buffer is written as without gradients; the graph of the tensor written
  into (t, or the tensor it views) becomes `where(written, value placed there, old graph)`, standing for the
  buffer's new contents, and its live views (t among them) read it through that graph."""
  root = t._viewed if t._viewed is not None else t
  old = grad_buffer(root)
  node = old if t is root else t.lazydata  # t's value in graphs
  if not moves_over(node, old):
    raise NotSupportedError("x[...] = value with gradients: x is a view that was realized on its own, which no "
                            "longer knows the graph of the tensor it views; write into that tensor, or take the view "
                            "again")
  if t is not root and not writable_view(moved_st(moved_onto(node, old, root.lazydata))):
    t._viewed = None  # an expanded or padded view: written as a copy of its own, as without gradients
    return setitem_with_grad(t, indices, value)
  view = type(t)._of(node)
  view._requires_grad = True
  target, new = view._setitem_parts(indices, value)
  if target.numel() == 0: return
  # the write's adjoint places the value (and ones, for where it goes) in the written tensor's shape
  ones = const_uop(1.0, target.dtype, target.device, target.shape)
  placed, hit = (compute_gradient(target.lazydata, g, {old})[old] for g in (new.lazydata, ones))
  # (tensors only for the moment: one holding `placed`, the value's node, while the write runs would be a second tensor
  # of that value, given memory of its own there)
  graph = (type(t)._of(hit) != 0).where(type(t)._of(placed), type(t)._of(old)).lazydata
  write = assign_uop(moved_onto(target.lazydata, old, root.lazydata), new.lazydata)
  written = type(t)(write).realize().lazydata
  # the buffer's new node (the old one names the old contents), as without gradients
  if root.lazydata.op is not Ops.MULTI: root.lazydata = UOp(Ops.VIEW, root.dtype, written.src, root.lazydata.arg)
  else: renamed(root, written)
  commit_realized({graph: root.lazydata})
  root._graph, root._requires_grad = graph, True
  rebase_views(root, old, graph, requires_grad=True)

def grad_buffer(t: Tensor) -> UOp:
  """For a write with gradients into this tensor (one that views no other): it is given a buffer of its own if it
  has none, keeping the graph that computed it; returns the node that stands for the buffer's contents in graphs
  (that graph, or the buffer's view), which the views taken from it read it through from now on."""
  if t._is_buffer_view(): return t._graph_root()
  lazy = t.lazydata
  copy = stand_in(t).realize()
  t.lazydata = copy.lazydata
  graph = copy._graph_root()
  t._graph = graph if graph is not copy.lazydata else None
  rebase_views(t, lazy, graph)
  return graph

def rebase_views(t: Tensor, old: UOp | None, new: UOp, requires_grad: bool = False) -> None:
  """Every live view taken from this tensor while it was `old` (movement ops over it), or realized into a buffer of
  its own while this one was lazy, now makes the same moves over `new`: the buffer a write gave it, the value a lazy
  tensor was assigned, or the graph that stands for the buffer's contents."""
  if t._views is None: return
  views = [v for ref in t._views if (v := ref()) is not None and v._viewed is t]
  t._views = [weakref.ref(v) for v in views]
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
