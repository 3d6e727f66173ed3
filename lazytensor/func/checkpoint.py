"""Checkpointing (rematerialization): the backward of a checkpointed region recomputes its forward from its inputs, so
the region's intermediates are not kept from the forward to the backward.

In a lazy framework what keeps memory is the schedule: a value that the backward reads is materialized in the forward
and its buffer lives until its last reader runs; values no later kernel reads give their buffers to the next ones
(engine/memory.py). `checkpoint(fn)(*args)` returns fn's value as a CUSTOM_GRAD whose arg, `Remat`, is its
vector-Jacobian product: the region's graph rebuilt over copies of its inputs and differentiated there. The backward
thus reads nodes of its own, computed again from the inputs (a duplicate of the forward, not the forward's buffers), and
the forward's intermediates have their last reader in the forward.

Where each kernel lands in the one schedule of a training step is the scheduler's dependency order, so two dependencies
put the recomputation where torch's checkpoint runs it, inside the backward of the region: the inputs' copies are read
only once the gradient of the region's output exists (the recomputation runs after the backward of everything above the
region), and the gradient that flows on to the inputs only once the region's weights' gradients exist (the weights'
gradients, which read the recomputed values, run before the backward moves below the region, so the recomputed values
die there). Both are `after`, a select between a value and itself on whether an element of the dependency is NaN: the
same bits, read once the dependency is computed.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lazytensor.func.marks import mark, needs_gradient
from lazytensor.func.tree import flatten
from lazytensor.gradient import compute_gradient
from lazytensor.graph import movement
from lazytensor.tensor import Tensor
from lazytensor.uop.ops import Ops, UOp


def after(x: UOp, deps: Sequence[UOp]) -> UOp:
  """x's value, read only once every dep is computed: where(any dep's first element is NaN, x, x)."""
  flag: UOp | None = None
  for d in deps:
    if d.size == 0 or d.device != x.device: continue
    first = movement(d, Ops.SHRINK, tuple((0, 1) for _ in d.shape))
    first = movement(movement(first, Ops.RESHAPE, (1,) * x.ndim), Ops.EXPAND, x.shape)
    nan = first.ne(first)
    flag = nan if flag is None else flag | nan
  return x if flag is None else flag.where(x, x)

def _rebuild(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """root's graph over the nodes `mapping` puts in place of some of its own: every node above them a new one. An
  assign is kept: a write runs once, and the recomputation reads what it wrote."""
  done: dict[UOp, UOp] = {}
  for node in root.toposort:
    if node in mapping: done[node] = mapping[node]
    elif node.op is Ops.ASSIGN: done[node] = node
    else:
      src = tuple(done[s] for s in node.src)
      done[node] = node if src == node.src else node.replace(src=src)
  return done[root]

@dataclass(frozen=True, eq=False)
class Remat:
  """The vector-Jacobian product of a checkpointed region (a CUSTOM_GRAD's arg): `out` computed from `inputs`, of
  which the first `n_args` are the region's arguments and the rest what it reads from outside (weights), `trainable`
  telling which of those need gradients."""
  out: UOp
  inputs: tuple[UOp, ...]
  n_args: int
  trainable: tuple[bool, ...]

  def __call__(self, ctx: UOp, *inputs: UOp) -> tuple[UOp | None, ...]:
    args = [after(x, [ctx]) for x in inputs[:self.n_args]]
    # the outside values marked: a weight inside another one's graph (w and w.T) gets its own gradient, not twice
    outside = [mark(u) for u in inputs[self.n_args:]]
    again = _rebuild(self.out, dict(zip(self.inputs, args + outside)))
    grads = compute_gradient(again, ctx, set(args + outside))
    outside_grads = [grads.get(o) for o in outside]
    deps = [g for g, t in zip(outside_grads, self.trainable) if t and g is not None]
    return tuple(after(grads[a], deps) if a in grads else None for a in args) + tuple(outside_grads)

def _outside(root: UOp, args: Sequence[UOp]) -> list[UOp]:
  """The nodes that root's graph reads from outside the region that computes it from `args`: sources of the region's
  nodes that do not depend on the args, except constants (they read no memory)."""
  region: set[UOp] = set()
  for node in root.toposort:
    if node in args or any(s in region for s in node.src): region.add(node)
  found = {s: None for n in root.toposort if n in region and n not in args for s in n.src if s not in region}
  return [s for s in found if s.reads]

def checkpoint(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
  """fn, whose backward recomputes its forward from its arguments instead of keeping its intermediates (as
  torch.utils.checkpoint): memory for time. fn returns one Tensor; its tensor arguments (in any nesting of tuples,
  lists and dicts) are the region's inputs, and the tensors it reads otherwise (a layer's weights) get their gradients
  as without it.

  >>> from lazytensor import Tensor, func
  >>> w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  >>> x = Tensor([[1.0, 1.0]], requires_grad=True)
  >>> y = func.checkpoint(lambda a: (a @ w).relu())(x)
  >>> _ = y.sum().backward()
  >>> x.grad.tolist(), w.grad.tolist()
  ([[3.0, 7.0]], [[1.0, 1.0], [1.0, 1.0]])
  """
  def checkpointed(*args: Any, **kwargs: Any) -> Tensor:
    out = fn(*args, **kwargs)
    if not isinstance(out, Tensor):
      raise TypeError(f"checkpoint: fn must return one Tensor, got {type(out).__name__}")
    tensors = [x for x in flatten((args, kwargs))[0] if isinstance(x, Tensor)]
    arg_nodes = list(dict.fromkeys(t._graph_root() for t in tensors))
    root = out._graph_root()
    if not out.requires_grad or not any(a in root.toposort for a in arg_nodes): return out  # no backward to spare
    outside = _outside(root, arg_nodes)
    remat = Remat(root, tuple(arg_nodes + outside), len(arg_nodes), needs_gradient(outside))
    return out._apply_uop(lambda v, *xs: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, *xs), remat),
                          *(Tensor(n) for n in arg_nodes + outside))
  return checkpointed
