"""What Tensor's backward() and gradient() run on top of the graph rules of frontend/gradient.py, over graph nodes: the
nodes of a graph that stand for a tensor, the gradients with respect to them with the hooks of the tensors inside the
graph applied, and the gradients computed without create_graph, which are constants to autograd (as torch's):
differentiating through one is an error, never zeros. Which tensors are leaves, which non-leaves keep their gradient
too (retain_grad) and the hooks on tensors (register_hook) are in the front end's state (state.py); Tensor reads them.
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lazytensor.dtype import dtypes
from lazytensor.frontend.gradient import compute_gradient
from lazytensor.frontend.views import assign_values
from lazytensor.helpers import ArgumentError
from lazytensor.schedule.scheduler import commit_realized, realized_map
from lazytensor.uop.graph import multi_leaves
from lazytensor.uop.ops import Ops, UOp

# the arg of the DETACH over a gradient computed without create_graph (Tensor._of_gradient): gradients do not look
# through it, as torch's do not through such a gradient
PLAIN_GRADIENT = "a gradient computed without create_graph"
NO_GRAPH_HINT = ("a gradient computed without create_graph=True, a constant to autograd (as in torch); compute it with "
                 "backward(create_graph=True) or gradient(..., create_graph=True) to differentiate it again")

class ForgottenGraph:
  """The arg of the DETACH that a realized gradient computed without create_graph keeps in place of its graph: that
  graph's realized nodes held the forward's activations (581-841 KB of them for 65 KB of gradients of a 4 x
  Linear(64, 64) MLP at batch 1024) until the gradient went. What is kept is what telling whether the graph reached a
  target needs: the memory it read (UOp.reads) with the last BUFFER node made when it was realized (its own, so that
  a bit handed on to a buffer made since is not mistaken for one it read), and weakly the other nodes it reached that
  a live tensor held (a node nobody holds can never be a target)."""
  __slots__ = ("reads", "last_buffer", "held")
  def __init__(self, reads: int, last_buffer: int, held: list[UOp]) -> None:
    self.reads, self.last_buffer, self.held = reads, last_buffer, [weakref.ref(n) for n in held]

  def __repr__(self) -> str: return PLAIN_GRADIENT  # as the DETACH of a lazy gradient reads in a graph's key

  def reaches(self, target: UOp) -> bool:
    """Whether the graph reached target (a tensor's node): as a node a tensor held, the node realized into target's
    memory, or the buffers target views."""
    for ref in self.held:
      if (n := ref()) is not None and (n is target or realized_map.get(n) is target): return True
    return any(b.reads & self.reads and isinstance(uid := b.arg[2], int) and uid <= self.last_buffer
               for b in _buffers_viewed(target))

def _buffers_viewed(u: UOp) -> list[UOp]:
  """The BUFFER nodes of u, a view of realized memory on each device it lies on; none where u is anything else."""
  if u.op is Ops.VIEW: return [u.src[0]] if u.src[0].op is Ops.BUFFER else []  # nearly every value: no generator
  if u.op is not Ops.MULTI: return []
  pieces = multi_leaves(u)
  return [p.src[0] for p in pieces] if all(p.op is Ops.VIEW and p.src[0].op is Ops.BUFFER for p in pieces) else []

def is_plain_gradient(n: UOp) -> bool:
  return n.op is Ops.DETACH and (n.arg == PLAIN_GRADIENT or type(n.arg) is ForgottenGraph)

def holds_plain_gradient(root: UOp) -> bool:
  """Whether root's graph holds a gradient computed without create_graph: what differentiating root would need to look
  through."""
  return any(is_plain_gradient(n) for n in root.toposort)

def _reached_through(plain: list[UOp], target: UOp, nodes: list[UOp]) -> bool:
  """Whether one of the gradients computed without create_graph in `plain` reaches target: while lazy, its graph
  holds one of `nodes` (those standing for target); once realized, what it kept of its graph says so."""
  return any(any(p.reaches(m) for m in nodes) if p.arg == PLAIN_GRADIENT else p.arg.reaches(target) for p in plain)

def _found_in(graphs: Sequence[UOp], wanted: dict[UOp, None]) -> list[UOp]:
  """The nodes of `wanted` in the graphs: a walk that passes over what reads less memory than every one of them (a
  training step's loss reads the labels, which the gradients' forward part does not)."""
  found, seen, stack = [], set(), list(graphs)
  while stack:
    if (n := stack.pop()) in seen: continue
    seen.add(n)
    if n in wanted: found.append(n)
    for s in n.src:
      if s not in seen and any(not w.reads & ~s.reads for w in wanted): stack.append(s)
  return found

def forget_graphs(graphs: Sequence[UOp], values: Sequence[UOp], live_nodes: Iterable[UOp]) -> list[UOp]:
  """For gradients computed without create_graph just realized (their graphs, each a DETACH, and the memory each lies
  in), what each keeps in place of its graph: a DETACH of its memory that says what the graph reached (ForgottenGraph),
  realized into that memory. live_nodes: the nodes live tensors other than these hold, the only possible targets."""
  union = UOp(Ops.SINK, dtypes.void, tuple(graphs))
  # a node reading memory the graphs do not is not in them: one AND each; a view of memory is told by the masks
  wanted = {n: None for n in live_nodes if not n.reads & ~union.reads and not _buffers_viewed(n)}
  held: list[list[UOp]] = [[] for _ in graphs]
  if wanted and (found := _found_in(graphs, wanted)):
    # which graph reaches each: one walk of them all, a bit per graph (a step's gradients share most of their graph)
    masks = {g: 0 for g in graphs}
    for i, g in enumerate(graphs): masks[g] |= 1 << i
    for n in reversed(union.toposort):
      if m := masks.get(n):
        for s in n.src: masks[s] = masks.get(s, 0) | m
    for n in found:
      for i in range(len(graphs)):
        if masks[n] >> i & 1: held[i].append(n)
  out = []
  for g, value, nodes in zip(graphs, values, held):
    last = max((uid for b in _buffers_viewed(value) if isinstance(uid := b.arg[2], int)), default=-1)
    out.append(marker := UOp(Ops.DETACH, value.dtype, (value,), ForgottenGraph(g.reads, last, nodes)))
    commit_realized({marker: value})
  return out

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
  if not asked or all(g is not None for g in out): return out
  if plain := [n for n in root.toposort if is_plain_gradient(n)]:
    for t, ns, g in zip(targets, nodes, out):
      if g is None and _reached_through(plain, t, ns):
        raise ArgumentError(f"gradient: the output reaches a target of shape {t.shape} only through {NO_GRAPH_HINT}")
  return out
