"""Autograd on a tensor: which tensors need gradients (requires_grad, leaves, retain_grad), hooks on gradients, and
gradient()/backward(), which run frontend/autograd.py's walk over the graph a tensor was computed from. The top of
the chain of mixins: hooks and gradients are tensors, and backward runs the pending writes first (writes, below)."""
from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from lazytensor.frontend import live
from lazytensor.frontend.autograd import (
  NO_GRAPH_HINT,
  PLAIN_GRADIENT,
  RemovableHandle,
  forget_graphs,
  gradients_of,
  holds_plain_gradient,
)
from lazytensor.frontend.mixin.writes import WritesMixin
from lazytensor.frontend.state import state
from lazytensor.helpers import ArgumentError
from lazytensor.schedule.scheduler import realized_map
from lazytensor.uop.graph import const_uop, shard_like
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from typing import Self

class GradMixin(WritesMixin):
  """requires_grad and leaves, retain_grad, register_hook, gradient and backward."""
  __slots__ = ("grad",)
  grad: Self | None  # what backward accumulated into this tensor

  @property
  def requires_grad(self) -> bool | None:
    """Whether backward() fills this tensor's .grad; results of ops on such tensors need gradients too.
    None (the default) means not asked for; only float tensors can require gradients.

    >>> w = Tensor([1.0], requires_grad=True)
    >>> w.requires_grad, (w * 2).requires_grad, (w > 0).requires_grad
    (True, True, None)
    """
    return self._requires_grad

  @requires_grad.setter
  def requires_grad(self, value: bool | None) -> None:
    if value and not self.dtype.is_float:
      raise TypeError(f"only float tensors can require gradients, got a {self.dtype} tensor")
    # constants are interned: two zeros(3) are one node, and a leaf must be a node of its own
    if value and self.lazydata.op is Ops.VIEW and self.lazydata.src[0].op is Ops.CONST:
      self.lazydata = type(self)(np.full(self.shape, self.lazydata.src[0].arg), self.device, self.dtype).lazydata
    self._requires_grad = value
    if value: state.grad_leaves[id(self)] = self
    else: state.grad_leaves.pop(id(self), None)

  def requires_grad_(self, requires_grad: bool = True) -> Self:
    """Set requires_grad in place; returns self.

    >>> Tensor([1.0]).requires_grad_().requires_grad
    True
    """
    self.requires_grad = requires_grad
    return self

  @property
  def is_leaf(self) -> bool:
    """Whether this tensor is a leaf of the autograd graph, as torch's: one that needs no gradient, or one that
    requires_grad was set on (whose .grad backward fills); results of ops on tensors that need gradients are not.

    >>> w = Tensor([1.0], requires_grad=True)
    >>> w.is_leaf, (w * 2).is_leaf, Tensor([1.0]).is_leaf
    (True, False, True)
    """
    return not self._requires_grad or id(self) in state.grad_leaves

  def retain_grad(self) -> None:
    """Have backward() fill .grad of this non-leaf tensor too (a leaf's is filled anyway), as torch's.

    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> h = w * 3
    >>> h.retain_grad()
    >>> _ = (h * h).sum().backward()
    >>> h.grad.tolist(), h.retains_grad
    ([6.0, 12.0], True)
    """
    if not self._requires_grad:
      raise ArgumentError("retain_grad: this tensor needs no gradient (requires_grad is not set on it or on what it "
                          "was computed from)")
    if not self.is_leaf: state.retained[id(self)] = self

  @property
  def retains_grad(self) -> bool:
    """Whether retain_grad() was called on this non-leaf tensor.

    >>> Tensor([1.0], requires_grad=True).retains_grad
    False
    """
    return id(self) in state.retained

  def register_hook(self, hook: Callable[[Self], Self | None]) -> RemovableHandle:
    """Call hook(grad) each time a gradient with respect to this tensor is computed (backward, gradient). A tensor it
    returns replaces the gradient: in .grad for a leaf, and in what flows on to the tensors this one was computed
    from otherwise, as torch's register_hook. Returns a handle whose remove() unregisters the hook.

    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> handle = w.register_hook(lambda g: g * 10)
    >>> _ = (w * w).sum().backward()
    >>> w.grad.tolist()
    [20.0, 40.0]
    >>> handle.remove()
    """
    if not self._requires_grad:
      raise ArgumentError("register_hook: this tensor needs no gradient (requires_grad is not set on it or on what it "
                          "was computed from)")
    if not callable(hook): raise TypeError(f"register_hook: hook must be callable, got {type(hook).__name__}")
    key, hooks = id(self), state.hooks
    if key not in hooks: hooks[key] = (weakref.ref(self, lambda _: hooks.pop(key, None)), [])
    hooks[key][1].append(hook)
    return RemovableHandle(hooks[key][1], hook)

  def _hooked(self, g: UOp) -> UOp:
    """g, the gradient with respect to this tensor, after its hooks: each may return a replacement of its shape."""
    for hook in list(state.hooks[id(self)][1]) if id(self) in state.hooks else []:
      out = hook(type(self)(g))
      if out is None: continue
      if not isinstance(out, type(self)) or out.shape != self.shape:
        raise ValueError(f"register_hook: a hook returned {getattr(out, 'shape', type(out).__name__)}; expected None "
                         f"or a Tensor of the gradient's shape {self.shape}")
      g = out.cast(self.dtype).lazydata
    return g

  def _graph_root(self) -> UOp:
    """The graph that computes this tensor: after realize() swapped in its buffer, the one it was computed from."""
    if self._graph is not None and realized_map.get(self._graph) is self.lazydata: return self._graph
    return self.lazydata

  def gradient(self, *targets: Self, gradient: Self | None = None, create_graph: bool = False) -> list[Self]:
    """The gradients of this tensor with respect to each target (lazy tensors; nothing runs yet), as
    torch.autograd.grad. Any float tensor can be a target, whether it requires gradients or not; but once realized,
    only a tensor that requires gradients keeps the graph it was computed from. A target this tensor does not depend
    on (or only through comparisons, or one with no elements) gets zeros, as in tinygrad and torch's
    materialize_grads. A non-scalar tensor needs `gradient`, the gradient of its output.

    >>> x, y = Tensor([1.0, 2.0, 3.0]), Tensor([5.0])
    >>> [g.tolist() for g in (x * x).sum().gradient(x, y)]
    [[2.0, 4.0, 6.0], [0.0]]
    >>> (x * x).gradient(x, gradient=Tensor([1.0, 0.0, 2.0]))[0].tolist()
    [2.0, 0.0, 12.0]

    create_graph=True: the gradients require grad and keep the graph that computes them, also once realized, so that
    they can be differentiated again (second derivatives, Hessian-vector products, gradient penalties), as torch's.
    Without it a gradient is a constant to autograd, and differentiating through it is an error:

    >>> g, = (x ** 3).sum().gradient(x, create_graph=True)
    >>> g.tolist(), g.sum().gradient(x)[0].tolist()
    ([3.0, 12.0, 27.0], [6.0, 12.0, 18.0])
    >>> g, = (x ** 3).sum().gradient(x)
    >>> g.sum().gradient(x)
    Traceback (most recent call last):
    lazytensor.helpers.ArgumentError: gradient: the output reaches a target of shape (3,) only through a gradient ...
    """
    for t in targets:
      if not t.dtype.is_float: raise TypeError(f"gradient with respect to a {t.dtype} tensor; only floats have them")
    grads = self._gradients(targets, gradient, asked=True)
    out = [t.zeros_like() if g is None else self._of_gradient(g, create_graph) for t, g in zip(targets, grads)]
    for g in out: live.as_old(g)  # as backward's: read the memory as the graph they differentiate read it
    return out

  def backward(self, gradient: Self | None = None, create_graph: bool = False) -> Self:
    """Accumulate d(self)/d(t) into t.grad for every tensor t with requires_grad=True that self depends on (lazily:
    the gradients are computed when used). A non-scalar tensor needs `gradient`, the gradient of its output.

    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> _ = (w * 3).sum().backward()
    >>> _ = (w * w).sum().backward()
    >>> w.grad.tolist()
    [5.0, 7.0]

    A tensor that needs no gradient (computed from no such tensor, under no_grad, or through a comparison) leaves
    every .grad as it is, as in tinygrad; one computed from a gradient made without create_graph is an error (as in
    torch). create_graph=True: the gradients keep their graph, as gradient()'s (a Hessian-vector product):

    >>> x = Tensor([1.0, 2.0], requires_grad=True)
    >>> _ = (x ** 3).sum().backward(create_graph=True)
    >>> hv, = (x.grad * Tensor([1.0, 0.0])).sum().gradient(x)
    >>> x.grad.tolist(), hv.tolist()
    ([3.0, 12.0], [6.0, 0.0])
    """
    if not self._requires_grad:
      if holds_plain_gradient(self._graph_root()):
        raise ArgumentError(f"backward: this tensor needs no gradient: it was made from {NO_GRAPH_HINT}")
      return self
    # in-place writes pending into memory the graph reads run first: the gradients are of the values it reads now
    if state.pending: self._run_pending_writes()
    leaves = [t for t in (*state.grad_leaves.values(), *state.retained.values()) if isinstance(t, type(self))]
    for t, g in zip(leaves, self._gradients(leaves, gradient, asked=False)):
      if g is None: continue
      grad = self._of_gradient(g, create_graph)
      t.grad = grad if t.grad is None else t.grad + grad
      # a gradient reads the memory as the graph it differentiates read it (in-place values a later write overwrote
      # are recomputed from it): for a write made after, it is a value made before
      live.as_old(t.grad)
    return self

  def _gradients(self, targets: Sequence[Self], gradient: Self | None, asked: bool) -> list[UOp | None]:
    """d(self)/d(target) for each target (None where self does not depend on it), seeded with `gradient`, after the
    hooks: a non-leaf's act inside the backward pass, on what flows on; a leaf's on its gradient. asked: the targets
    were named (autograd.gradients_of)."""
    if not self.dtype.is_float: raise TypeError(f"gradient of a {self.dtype} tensor; only float outputs have gradients")
    if gradient is None:
      if self.numel() != 1:
        raise ValueError(f"gradient of a tensor of shape {self.shape} needs an explicit gradient= of that shape; "
                         "only a one-element output has an implicit gradient of 1")
      seed = const_uop(1.0, self.dtype, self.device, self.shape)
    else:
      if gradient.shape != self.shape:
        raise ValueError(f"gradient shape {gradient.shape} does not match the output shape {self.shape}")
      seed = gradient.cast(self.dtype).lazydata
    inner = [t for ref, _ in list(state.hooks.values()) if isinstance(t := ref(), type(self)) and not t.is_leaf]
    grads = gradients_of(self._graph_root(), seed, [t.lazydata for t in targets],
                         [(t.lazydata, t._hooked) for t in inner], asked)
    grads = [t._hooked(g) if g is not None and t.is_leaf else g for t, g in zip(targets, grads)]
    # a tensor spread over devices gets its gradient laid out as it is (a sharded weight, a sharded gradient)
    return [shard_like(g, t.lazydata) if g is not None and t.lazydata.op is Ops.MULTI else g
            for t, g in zip(targets, grads)]

  @classmethod
  def _of_gradient(cls, g: UOp, create_graph: bool) -> Self:
    """A gradient as a tensor. With create_graph it requires grad (a float one), so that it keeps the graph that
    computes it once realized, as torch's. Without, it is a constant to autograd, a DETACH that says so: once realized,
    one over its memory that keeps what its graph reached (_forget_graphs), so that differentiating through it is an
    error, never zeros."""
    if create_graph:
      t = cls(g)
      if g.dtype.is_float: t._requires_grad = True
      return t
    t = cls(UOp(Ops.DETACH, g.dtype, (g,), PLAIN_GRADIENT))
    t._graph = t.lazydata  # realize swaps it for what _forget_graphs keeps
    return t

  @staticmethod
  def _forget_graphs(plain: Sequence[GradMixin]) -> None:
    """After realize: gradients computed without create_graph, just realized, keep in place of the graph that computed
    them only what tells whether it reached a target (autograd.forget_graphs), not its realized nodes, which hold the
    forward's activations: a .grad frees them as torch's backward does, not at zero_grad()."""
    mine = {id(t) for t in plain}
    live_nodes: dict[UOp, None] = {}
    for h in live.alive():
      if id(h) in mine or not isinstance(h, GradMixin): continue
      live_nodes[h.lazydata] = None
      if h._graph is not None: live_nodes[h._graph] = None
    graphs = [g for t in plain if (g := t._graph) is not None]
    for t, marker in zip(plain, forget_graphs(graphs, [t.lazydata for t in plain], live_nodes)): t._graph = marker
