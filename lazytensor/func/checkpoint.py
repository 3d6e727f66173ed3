"""Checkpointing (rematerialization): the backward of a checkpointed region recomputes its forward from its inputs, so
the region's intermediates are not kept from the forward to the backward.

In a lazy framework what keeps memory is the schedule: a value that the backward reads is materialized in the forward
and its buffer lives until its last reader runs; values no later kernel reads give their buffers to the next ones
(schedule/memory.py). `checkpoint(fn)(*args)` returns fn's value as a CUSTOM_GRAD whose arg, `Remat`, is its
vector-Jacobian product: the value's graph rebuilt over copies of its inputs and differentiated there. The backward
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
from typing import Any, ClassVar

from lazytensor.dtype import dtypes
from lazytensor.frontend.gradient import compute_gradient
from lazytensor.frontend.tensor import Tensor
from lazytensor.func.batching import placeholder
from lazytensor.func.marks import needs_gradient
from lazytensor.func.tree import flatten
from lazytensor.uop.graph import movement
from lazytensor.uop.ops import GroupOp, Ops, UOp


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

def _rebuild(root: UOp, mapping: dict[UOp, UOp]) -> UOp: return rebuild_nodes(root, mapping)[root]

def rebuild_nodes(root: UOp, mapping: dict[UOp, UOp]) -> dict[UOp, UOp]:
  """root's graph over the nodes `mapping` puts in place of some of its own (not walked below them): every node above
  them a new one; each node of the graph (down to them) mapped to its new one. An assign is kept: a write runs once, and
  the recomputation reads what it wrote."""
  done = dict(mapping)
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    node, ready = stack.pop()
    if node in done: continue
    if node.op is Ops.ASSIGN: done[node] = node
    elif not ready:
      stack.append((node, True))
      stack.extend((s, False) for s in node.src if s not in done)
    else:
      src = tuple(done[s] for s in node.src)
      done[node] = node if src == node.src else node.replace(src=src)
  return done

@dataclass(frozen=True)
class Remat:
  """The vector-Jacobian product of a checkpointed region (the arg of CUSTOM_GRAD(value, value, *inputs)): the value
  computed from the inputs, of which the first `n_args` are the region's arguments and the rest what it reads from
  outside (weights), `trainable` telling which of those need gradients. It holds no graph (it gets the value as a
  source): equal regions of two training steps have equal args, so the step's schedule is found in the cache. It is
  written with graph ops over its sources whatever their shapes, so vmap batches its sources, not the rule."""
  n_args: int
  trainable: tuple[bool, ...]
  any_shape: ClassVar[bool] = True

  def __call__(self, ctx: UOp, value: UOp, *inputs: UOp) -> tuple[UOp | None, ...]:
    # the region differentiated on its own, over placeholders of its inputs and of ctx: the walks stay in the region
    # (not the whole graph above and below it), and one input inside another's graph (w and w * 2) gets its own
    # gradient, not both
    local = {u: placeholder(u.shape, u.dtype, u.device) for u in inputs}
    seed = placeholder(ctx.shape, ctx.dtype, ctx.device)
    grads = compute_gradient(_rebuild(value, local), seed, set(local.values()))
    args, outside = inputs[:self.n_args], inputs[self.n_args:]
    real = {seed: ctx, **{local[u]: after(u, [ctx]) for u in args}, **{local[u]: u for u in outside}}
    found = [grads.get(local[u]) for u in inputs]
    placed = iter(UOp(Ops.SINK, dtypes.void, tuple(g for g in found if g is not None)).substitute(real).src)
    arg_grads, outside_grads = [[None if g is None else next(placed) for g in part]
                                for part in (found[:self.n_args], found[self.n_args:])]
    deps = [g for g, t in zip(outside_grads, self.trainable) if t and g is not None]
    return (None, *(None if g is None else after(g, deps) for g in arg_grads), *outside_grads)

def outside_reads(root: UOp, args: Sequence[UOp]) -> list[UOp]:
  """The nodes that root's graph reads from outside the region that computes it from `args`: sources of the region's
  nodes that do not depend on the args, below their views (a weight, not its transpose expanded over the batch: its
  gradient is the weight's own, reduced over the batch), except constants (they read no memory)."""
  region: set[UOp] = set()
  for node in root.toposort:
    if node in args or any(s in region for s in node.src): region.add(node)
  found: dict[UOp, None] = {}
  for n in root.toposort:
    if n not in region or n in args: continue
    for s in n.src:
      while s.op in GroupOp.Movement and s not in region: s = s.src[0]
      if s not in region and s.reads: found[s] = None
  return list(found)

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
    outside = outside_reads(root, arg_nodes)
    remat = Remat(len(arg_nodes), needs_gradient(outside))
    return out._apply_uop(lambda v, *xs: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, v, *xs), remat),
                          *(Tensor(n) for n in arg_nodes + outside))
  return checkpointed
