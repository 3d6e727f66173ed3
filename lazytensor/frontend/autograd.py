"""What Tensor's backward() and gradient() keep about tensors, on top of the graph rules of frontend/gradient.py: which
tensors are leaves (their .grad is filled), which non-leaves keep their gradient too (retain_grad), the hooks on tensors
(register_hook), the nodes of a graph that stand for a tensor, and the gradients computed without create_graph, which
are constants to autograd (as torch's): differentiating through one is an error, never zeros.

Every registry is keyed by id: a WeakSet would compare tensors with ==, which builds a Tensor instead of answering.
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lazytensor.frontend.gradient import compute_gradient
from lazytensor.frontend.views import assign_values
from lazytensor.helpers import ArgumentError
from lazytensor.schedule.scheduler import realized_map
from lazytensor.uop.graph import const_uop, shard_like
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from lazytensor.frontend.tensor import Tensor

# tensors whose .grad backward() fills: the ones a user marked requires_grad=True (results of ops are not leaves)
grad_leaves: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
# non-leaf tensors whose .grad backward() fills too
retained: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
# each tensor's gradient hooks; an entry leaves with its tensor
GradHook = Callable[["Tensor"], "Tensor | None"]
_hooks: dict[int, tuple[weakref.ref[Tensor], list[GradHook]]] = {}

# the arg of the DETACH over a gradient computed without create_graph (Tensor._of_gradient): gradients do not look
# through it, as torch's do not through such a gradient
PLAIN_GRADIENT = "a gradient computed without create_graph"
NO_GRAPH_HINT = ("a gradient computed without create_graph=True, a constant to autograd (as in torch); compute it with "
                 "backward(create_graph=True) or gradient(..., create_graph=True) to differentiate it again")

def holds_plain_gradient(root: UOp, nodes: Sequence[UOp] | None = None) -> bool:
  """Whether root's graph holds a gradient computed without create_graph (whose graph reaches one of `nodes`, if
  given): what differentiating root would need to look through."""
  return any(n.op is Ops.DETACH and n.arg == PLAIN_GRADIENT and (nodes is None or any(m in n.toposort for m in nodes))
             for n in root.toposort)

class RemovableHandle:
  """What register_hook returns: remove() unregisters the hook."""
  def __init__(self, hooks: list[GradHook], hook: GradHook) -> None: self._hooks, self._hook = hooks, hook
  def remove(self) -> None:
    if self._hook in self._hooks: self._hooks.remove(self._hook)

def add_hook(t: Tensor, hook: GradHook) -> RemovableHandle:
  key = id(t)
  if key not in _hooks: _hooks[key] = (weakref.ref(t, lambda _: _hooks.pop(key, None)), [])
  _hooks[key][1].append(hook)
  return RemovableHandle(_hooks[key][1], hook)

def _hooked(t: Tensor, g: UOp) -> UOp:
  """g, the gradient with respect to t, after t's hooks: each may return a replacement of t's shape."""
  for hook in list(_hooks[id(t)][1]) if id(t) in _hooks else []:
    out = hook(type(t)(g))
    if out is None: continue
    if not isinstance(out, type(t)) or out.shape != t.shape:
      raise ValueError(f"register_hook: a hook returned {getattr(out, 'shape', type(out).__name__)}; expected None "
                       f"or a Tensor of the gradient's shape {t.shape}")
    g = out.cast(t.dtype).lazydata
  return g

def nodes_standing_for(root: UOp, tensors: Sequence[Tensor]) -> list[list[UOp]]:
  """For each tensor, the nodes of root's graph that hold its value: its own node, and the nodes that were realized
  into its buffer after the graph was built. A node whose graph contains another such node is left out: the gradient
  of that other node already includes it."""
  nodes = root.toposort
  realized_into: dict[UOp, list[UOp]] = {}
  for n in nodes:
    if (buf := realized_map.get(n)) is not None: realized_into.setdefault(buf, []).append(n)
  out = []
  for t in tensors:
    found = ([t.lazydata] if t.lazydata in nodes else []) + realized_into.get(t.lazydata, [])
    out.append([n for n in found if not any(m is not n and m in n.toposort for m in found)])
  return out

def _sum_uops(xs: list[UOp]) -> UOp | None:
  return functools.reduce(lambda a, b: a + b, xs) if xs else None

def gradients_of(root: UOp, seed: UOp, targets: Sequence[Tensor], asked: bool) -> list[UOp | None]:
  """The gradient of root's graph, seeded with `seed`, with respect to each target (None where root does not depend
  on it), after the hooks: a non-leaf's act inside the backward pass, on what flows on; a leaf's on its gradient.
  asked: the targets were named (gradient(), not backward()): one that root reaches only through a gradient computed
  without create_graph is an error (as torch's, whose autograd.grad raises where a target is not used)."""
  nodes = nodes_standing_for(root, targets)
  inner = [t for ref, _ in list(_hooks.values()) if (t := ref()) is not None and not t.is_leaf]
  hooks = {n: functools.partial(_hooked, t) for t, ns in zip(inner, nodes_standing_for(root, inner)) for n in ns}
  grads = compute_gradient(root, seed, {n for ns in nodes for n in ns}, hooks)
  out = [_sum_uops([assign_values(grads[n]) for n in ns if n in grads]) for ns in nodes]
  for t, ns, g in zip(targets, nodes, out):
    if asked and g is None and ns and holds_plain_gradient(root, ns):
      raise ArgumentError(f"gradient: the output reaches a target of shape {t.shape} only through {NO_GRAPH_HINT}")
  return [_hooked(t, g) if g is not None and t.is_leaf else g for t, g in zip(targets, out)]

def gradients(out: Tensor, targets: Sequence[Tensor], gradient: Tensor | None, asked: bool) -> list[UOp | None]:
  """d(out)/d(target) for each target (None where out does not depend on it), seeded with `gradient`; asked as in
  gradients_of."""
  if not out.dtype.is_float: raise TypeError(f"gradient of a {out.dtype} tensor; only float outputs have gradients")
  if gradient is None:
    if out.numel() != 1:
      raise ValueError(f"gradient of a tensor of shape {out.shape} needs an explicit gradient= of that shape; "
                       "only a one-element output has an implicit gradient of 1")
    seed = const_uop(1.0, out.dtype, out.device, out.shape)
  else:
    if gradient.shape != out.shape:
      raise ValueError(f"gradient shape {gradient.shape} does not match the output shape {out.shape}")
    seed = gradient.cast(out.dtype).lazydata
  grads = gradients_of(out._graph_root(), seed, targets, asked)
  # a tensor spread over devices gets its gradient laid out as it is (a sharded weight, a sharded gradient)
  return [shard_like(g, t.lazydata) if g is not None and t.lazydata.op is Ops.MULTI else g
          for t, g in zip(targets, grads)]
