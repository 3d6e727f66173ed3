"""Marks: the node a transformation differentiates with respect to, distinct from every other use of the same value.

grad(f)(x) differentiates f at a mark of x, CUSTOM_GRAD(x, x) with an arg of its own, through which gradients and
tangents pass unchanged and which the scheduler drops (it keeps a CUSTOM_GRAD's value): a use of x that f closes over,
or a gradient taken at x by an enclosing transformation, is another node, a constant to this one, as in torch.func.
What a transformation returns has its marks taken out again (`unmark`), so the graphs it returns are the ones the
same computation builds without it.
"""
from __future__ import annotations

from collections.abc import Sequence

from lazytensor.frontend import live
from lazytensor.frontend.tensor import Tensor
from lazytensor.uop.ops import Ops, UOp


class Identity:
  """The vector-Jacobian product of a mark (a CUSTOM_GRAD's arg): the gradient passes through. Each mark has an
  instance of its own, so that two marks of one value are two nodes."""
  __slots__ = ()
  any_shape = True  # the rule holds for values of any shape: vmap batches its sources, not the rule
  def __call__(self, ctx: UOp, x: UOp) -> tuple[UOp]: return (ctx,)

def mark(u: UOp) -> UOp: return UOp(Ops.CUSTOM_GRAD, u.dtype, (u, u), Identity())

def unmark(roots: Sequence[UOp], marks: Sequence[UOp]) -> list[UOp]:
  """Each root with the marks replaced by the values they mark."""
  mapping = {m: m.src[0] for m in marks}
  return [r.substitute(mapping) for r in roots]

def needs_gradient(nodes: Sequence[UOp]) -> tuple[bool, ...]:
  """For each node, whether its graph holds the value of a live tensor that requires gradients (a weight, a mark of
  an enclosing transformation): whether a tensor of it would, had its ops been applied to those tensors."""
  wanted = {t._graph_root() for t in live.alive() if isinstance(t, Tensor) and t.requires_grad}
  return tuple(any(n in wanted for n in node.toposort) for node in nodes)
