"""Reverse-mode derivatives as a table of rules over tensor-graph UOps.

Each rule matches a forward node and, given the gradient of its output (`ctx`), returns the gradient of each source
(None where a source gets none). The gradients are UOps themselves, so the backward pass is as lazy as the forward
one and fuses the same way: a relu's backward is a WHERE inside whatever kernel consumes it.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from lazytensor.dtype import dtypes
from lazytensor.helpers import argsort
from lazytensor.uop.graph import const_like, copy_to, movement, reduce_uop, shard_piece
from lazytensor.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat

Grads = tuple[UOp | None, ...]

# every constant in the tensor graph is shaped like the values it meets: never a bare Python number
def _c(like: UOp, value: Any) -> UOp: return const_like(like, value)
def _eq(a: UOp, b: UOp) -> UOp: return a.ne(b).alu(Ops.CMPNE, const_like(a, True, dtypes.bool))

def _max_grad(ctx: UOp, a: UOp, b: UOp) -> Grads:
  # selected, not multiplied by a 0/1 mask: an infinite ctx times 0 was NaN. As torch.maximum: ties split the gradient
  # evenly, and where a or b is NaN (no side is less) both get all of it
  half, zero, tie = ctx * _c(ctx, 0.5), _c(ctx, 0), _eq(a, b)
  return (tie.where(half, a.lt(b).where(zero, ctx)), tie.where(half, b.lt(a).where(zero, ctx)))

def _reduce_grad(ctx: UOp, r: UOp) -> Grads:
  x = r.src[0]
  op, axes = r.arg
  spread = movement(ctx, Ops.EXPAND, x.shape)
  if op is Ops.ADD: return (spread,)
  if op is Ops.MUL: return (spread * prod_others(x, axes),)
  # MAX: every position equal to the maximum shares the gradient evenly (torch's amax)
  is_max = _eq(x, movement(r, Ops.EXPAND, x.shape)).cast(ctx.dtype)
  count = movement(reduce_uop(is_max, Ops.ADD, axes), Ops.EXPAND, x.shape)
  return (spread * is_max / count,)

def prod_others(x: UOp, axes: tuple[int, ...]) -> UOp:
  """For each element, the product of the others in its reduce window: prod/x, except that x may be zero.

  No zero in the window: prod/x. One zero: its position gets the product of the rest, the others 0. More: all 0."""
  def spread(v: UOp, op: Ops) -> UOp: return movement(reduce_uop(v, op, axes), Ops.EXPAND, x.shape)
  is_zero = _eq(x, _c(x, 0))
  nonzero = is_zero.where(_c(x, 1), x)
  prod_nonzero = spread(nonzero, Ops.MUL)
  zeros = spread(is_zero.cast(x.dtype), Ops.ADD)
  lone_zero = _eq(zeros, _c(x, 1)).alu(Ops.AND, is_zero)
  return _eq(zeros, _c(x, 0)).where(prod_nonzero / nonzero, lone_zero.where(prod_nonzero, _c(x, 0)))

def _expand_grad(ctx: UOp, e: UOp) -> Grads:
  x = e.src[0]
  axes = tuple(i for i, (s, n) in enumerate(zip(x.shape, e.arg)) if s != n)
  # float16 gradients are summed in float32, as the forward sum does
  acc = ctx.cast(dtypes.float32) if ctx.dtype == dtypes.float16 else ctx
  return (reduce_uop(acc, Ops.ADD, axes).cast(ctx.dtype),)

def _cast_grad(ctx: UOp, c: UOp) -> Grads:
  x = c.src[0]
  return (ctx.cast(x.dtype) if x.dtype.is_float and c.dtype.is_float else None,)

def _sin_grad(ctx: UOp, x: UOp) -> Grads: return (ctx * x.alu(Ops.COS),)
def _cos_grad(ctx: UOp, x: UOp) -> Grads: return (-(ctx * x.alu(Ops.SIN)),)

def _custom_grad(ctx: UOp, c: UOp) -> Grads:
  # with an arg, src = (value, *inputs) and the arg maps ctx to the inputs' gradients (frontend/mixin/conv.py's
  # ConvGrad); without, src = (value, x1, d1, x2, d2, ...): each xi gets ctx * di. The value and the derivatives get
  # none
  if c.arg is not None: return (None, *c.arg(ctx, *c.src[1:]))
  return (None,) + tuple(ctx * c.src[p + 1] if p % 2 else None for p in range(1, len(c.src)))

def _copy_grad(ctx: UOp, c: UOp) -> Grads:
  return (UOp(Ops.COPY, ctx.dtype, (ctx,), c.src[0].device),)

def _multi_grad(ctx: UOp, m: UOp) -> Grads:
  """Each piece of a value spread over devices gets its slice of the gradient, on its device. A replicated value is its
  first piece: the others are copies of it."""
  axis, bounds = m.arg
  if axis is None: return (copy_to(ctx, m.src[0].device),) + (None,) * (len(m.src) - 1)
  return tuple(shard_piece(ctx, p.device, axis, b) for p, b in zip(m.src, bounds))

LN2 = math.log(2)

pm_gradient: PatternMatcher[Grads] = PatternMatcher([
  (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),                                                 # d(a+b) = (g, g)
  (UPat(Ops.SUB), lambda ctx: (ctx, -ctx)),                                                # d(a-b) = (g, -g)
  (UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("b"))), lambda ctx, a, b: (ctx * b, ctx * a)),  # d(ab) = (gb, ga)
  (UPat(Ops.FDIV, src=(UPat.var("a"), UPat.var("b"))),
   lambda ctx, a, b: (ctx / b, -(ctx * a) / (b * b))),                                     # d(a/b) = (g/b, -ga/b^2)
  (UPat(Ops.NEG), lambda ctx: (-ctx,)),                                                    # d(-x) = -g
  (UPat(Ops.MAX, src=(UPat.var("a"), UPat.var("b"))), _max_grad),                          # d max(a,b): to the larger
  (UPat(Ops.WHERE, src=(UPat.var("c"), UPat(), UPat())),
   lambda ctx, c: (None, c.where(ctx, _c(ctx, 0)), c.where(_c(ctx, 0), ctx))),            # d where(c,a,b)
  (UPat(Ops.EXP2, name="y"), lambda ctx, y: (ctx * y * _c(y, LN2),)),                      # d 2^x = 2^x ln2
  (UPat(Ops.LOG2, src=(UPat.var("x"),)), lambda ctx, x: (ctx / (x * _c(x, LN2)),)),        # d log2 x = 1/(x ln2)
  (UPat(Ops.SIN, src=(UPat.var("x"),)), _sin_grad),                                        # d sin x = cos x
  (UPat(Ops.COS, src=(UPat.var("x"),)), _cos_grad),                                        # d cos x = -sin x
  (UPat(Ops.SQRT, name="y"), lambda ctx, y: (ctx / (y * _c(y, 2)),)),                      # d sqrt x = 1/(2 sqrt x)
  (UPat(Ops.RECIP, name="y"), lambda ctx, y: (-ctx * y * y,)),                             # d 1/x = -1/x^2
  (UPat(Ops.TRUNC), lambda ctx: (_c(ctx, 0),)),                                            # d trunc x = 0
  (UPat(Ops.CAST, name="c"), _cast_grad),                                                  # d cast = cast back
  (UPat(Ops.REDUCE_AXIS, name="r"), _reduce_grad),
  (UPat(Ops.RESHAPE, src=(UPat.var("x"),)), lambda ctx, x: (movement(ctx, Ops.RESHAPE, x.shape),)),
  (UPat(Ops.PERMUTE, name="p"), lambda ctx, p: (movement(ctx, Ops.PERMUTE, tuple(argsort(p.arg))),)),
  (UPat(Ops.EXPAND, name="e"), _expand_grad),                                              # d expand = sum back
  (UPat(Ops.PAD, src=(UPat.var("x"),), name="p"),
   lambda ctx, x, p: (movement(ctx, Ops.SHRINK, tuple((b, b + s) for (b, _), s in zip(p.arg, x.shape))),)),
  (UPat(Ops.SHRINK, src=(UPat.var("x"),), name="s"),
   lambda ctx, x, s: (movement(ctx, Ops.PAD, tuple((b, n - e) for (b, e), n in zip(s.arg, x.shape))),)),
  (UPat(Ops.FLIP, name="f"), lambda ctx, f: (movement(ctx, Ops.FLIP, f.arg),)),
  (UPat(Ops.CONTIGUOUS), lambda ctx: (ctx,)),
  (UPat(Ops.ASSIGN), lambda ctx: (None, ctx)),                                             # d assign = d value
  (UPat(Ops.CUSTOM_GRAD, name="c"), _custom_grad),                                         # a stated derivative
  (UPat(Ops.COPY, name="c"), _copy_grad),                                                  # d gather = scatter
  (UPat(Ops.MULTI, name="m"), _multi_grad),
  (UPat((Ops.DETACH, *GroupOp.Comparison, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.BITCAST),
        name="x"), lambda ctx, x: (None,) * len(x.src)),                                   # not differentiable
])

def _on_path(root: UOp, targets: set[UOp]) -> list[UOp]:
  """The nodes between root and any target, in topological order (sources first)."""
  reaches: dict[UOp, bool] = {}
  for node in root.toposort:
    # a loop, not any() of a generator: a call per node, at every backward
    found = node in targets
    if not found:
      for s in node.src:
        if reaches[s]:
          found = True
          break
    reaches[node] = found
  return [n for n in root.toposort if reaches[n]]

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp],
                     hooks: Mapping[UOp, Callable[[UOp], UOp]] | None = None) -> dict[UOp, UOp]:
  """The gradient of `root` (seeded with `root_grad`) with respect to each target it depends on. A node's hook
  replaces its gradient once that is complete (all its uses seen), before it flows on (Tensor.register_hook)."""
  grads: dict[UOp, UOp] = {root: root_grad}
  for node in reversed(_on_path(root, targets)):
    if (g := grads.get(node)) is None: continue
    if hooks and node in hooks: g = grads[node] = hooks[node](g)
    # a VIEW of the tensor graph reads a buffer or a constant: nothing below it has a gradient
    if node.op in (Ops.VIEW, Ops.BUFFER, Ops.CONST, Ops.IOTA, Ops.DEVICE): continue
    # a value with no elements has no gradient to pass on: its sources get zeros (the rules would reduce over its empty
    # axes, a kernel over no elements)
    src_grads = tuple(_c(s, 0) for s in node.src) if 0 in node.shape else pm_gradient.rewrite(node, ctx=g)
    if src_grads is None: raise NotImplementedError(f"no derivative rule for {node.op}")
    for s, sg in zip(node.src, src_grads):
      if sg is None or not s.dtype.is_float: continue
      grads[s] = grads[s] + sg if s in grads else sg
  return {t: grads[t] for t in targets if t in grads}
