"""What Tensor's backward() and gradient() run on top of the graph rules of frontend/gradient.py, over graph nodes: the
nodes of a graph that stand for a tensor, the gradients with respect to them with the hooks of the tensors inside the
graph applied, and the gradients computed without create_graph, which are constants to autograd (as torch's):
differentiating through one is an error, never zeros. Which tensors are leaves, which non-leaves keep their gradient
too (retain_grad) and the hooks on tensors (register_hook) are in the front end's state (state.py); Tensor reads them.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from lazytensor.frontend.gradient import compute_gradient
from lazytensor.frontend.views import assign_values
from lazytensor.helpers import ArgumentError
from lazytensor.schedule.scheduler import realized_map
from lazytensor.uop.ops import Ops, UOp

# the arg of the DETACH over a gradient computed without create_graph (Tensor._of_gradient): gradients do not look
# through it, as torch's do not through such a gradient
PLAIN_GRADIENT = "a gradient computed without create_graph"
NO_GRAPH_HINT = ("a gradient computed without create_graph=True, a constant to autograd (as in torch); compute it with "
                 "backward(create_graph=True) or gradient(..., create_graph=True) to differentiate it again")

def holds_plain_gradient(root: UOp, nodes: Sequence[UOp] | None = None) -> bool:
  """Whether root's graph holds a gradient computed without create_graph (whose graph reaches one of `nodes`, if
  given): what differentiating root would need to look through."""
  return any(n.op is Ops.DETACH and n.arg == PLAIN_GRADIENT and (nodes is None or any(n.reaches(m) for m in nodes))
             for n in root.toposort)

class RemovableHandle:
  """What register_hook returns: remove() unregisters the hook."""
  def __init__(self, hooks: list[Callable[[Any], Any]], hook: Callable[[Any], Any]) -> None:
    self._hooks, self._hook = hooks, hook
  def remove(self) -> None:
    if self._hook in self._hooks: self._hooks.remove(self._hook)

def nodes_standing_for(root: UOp, tensors: Sequence[UOp]) -> list[list[UOp]]:
  """For each tensor (its node), the nodes of root's graph that hold its value: its own node, and the nodes that were
  realized into its buffer after the graph was built. A node whose graph contains another such node is left out: the
  gradient of that other node already includes it."""
  if not tensors: return []  # every backward asks for the tensors with hooks, most often none
  nodes, attr = root.toposort, realized_map.attr
  realized_into: dict[UOp, list[UOp]] = {}
  for n in nodes:  # realized_map.get inlined: a call per node of the graph
    if (buf := n.__dict__.get(attr)) is not None: realized_into.setdefault(buf, []).append(n)
  # most often no node of the graph was realized since: each tensor is its own node, or not in the graph
  if not realized_into: return [[t] if t in nodes else [] for t in tensors]
  out = []
  for t in tensors:
    found = ([t] if t in nodes else []) + realized_into.get(t, [])
    out.append([n for n in found if not any(m is not n and n.reaches(m) for m in found)])
  return out

def _sum_uops(xs: list[UOp]) -> UOp | None:
  return functools.reduce(lambda a, b: a + b, xs) if xs else None

GradFn = Callable[[UOp], UOp]  # a tensor's hooks applied to a gradient with respect to it

def gradients_of(root: UOp, seed: UOp, targets: Sequence[UOp], hooked: Sequence[tuple[UOp, GradFn]],
                 asked: bool) -> list[UOp | None]:
  """The gradient of root's graph, seeded with `seed`, with respect to each target tensor (its node; None where root
  does not depend on it). hooked: the tensors whose hooks act inside the backward pass, on what flows on (non-leaves),
  each its node and its hooks. asked: the targets were named (gradient(), not backward()): one that root reaches only
  through a gradient computed without create_graph is an error (as torch's, whose autograd.grad raises where a target
  is not used)."""
  nodes = nodes_standing_for(root, targets)
  hooks = {n: fn for (_, fn), ns in zip(hooked, nodes_standing_for(root, [u for u, _ in hooked])) for n in ns}
  grads = compute_gradient(root, seed, {n for ns in nodes for n in ns}, hooks)
  out = [_sum_uops([assign_values(grads[n]) for n in ns if n in grads]) for ns in nodes]
  for t, ns, g in zip(targets, nodes, out):
    if asked and g is None and ns and holds_plain_gradient(root, ns):
      raise ArgumentError(f"gradient: the output reaches a target of shape {t.shape} only through {NO_GRAPH_HINT}")
  return out
