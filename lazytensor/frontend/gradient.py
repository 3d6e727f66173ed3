"""Reverse-mode derivatives as a table of rules over tensor-graph UOps.

Each rule, looked up by a forward node's op, takes the gradient of its output (`ctx`) and returns the gradient of
each source (None where a source gets none). The gradients are UOps themselves, so the backward pass is as lazy as the
forward one and fuses the same way: a relu's backward is a WHERE inside whatever kernel consumes it.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Container, Mapping
from typing import Any

from lazytensor.dtype import dtypes
from lazytensor.helpers import argsort
from lazytensor.uop.graph import const_like, copy_to, movement, reduce_uop, shard_piece
from lazytensor.uop.ops import Ops, UOp

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

def _mul_grad(ctx: UOp, m: UOp, on_path: Container[UOp]) -> Grads:
  a, b = m.src
  return (ctx * b if a in on_path else None, ctx * a if b in on_path else None)        # d(ab) = (gb, ga)

def _div_grad(ctx: UOp, d: UOp, on_path: Container[UOp]) -> Grads:
  a, b = d.src
  return (ctx / b if a in on_path else None,
          -(ctx * a) / (b * b) if b in on_path else None)                               # d(a/b) = (g/b, -ga/b^2)

def _where_grad(ctx: UOp, w: UOp, on_path: Container[UOp]) -> Grads:
  c, a, b = w.src
  zero = _c(ctx, 0)
  return (None, c.where(ctx, zero) if a in on_path else None, c.where(zero, ctx) if b in on_path else None)

def _unpad(ctx: UOp, p: UOp) -> UOp:
  return movement(ctx, Ops.SHRINK, tuple((b, b + s) for (b, _), s in zip(p.arg, p.src[0].shape)))

def _unshrink(ctx: UOp, s: UOp) -> UOp:
  return movement(ctx, Ops.PAD, tuple((b, n - e) for (b, e), n in zip(s.arg, s.src[0].shape)))

def _not_differentiable(ctx: UOp, x: UOp, on_path: Container[UOp]) -> Grads: return (None,) * len(x.src)

# A rule takes the gradient of a node's output (ctx), the node, and the nodes on the path to the targets, and returns
# the gradient of each source: None where it has none, or where the source is off that path (a rule whose sources
# differ builds only what the path needs: a loss's divide by its count, a multiply by a constant or an input). The
# table is keyed by op: a backward pass looks up each node's rule once, with no patterns to try in turn.
GradRule = Callable[[UOp, UOp, Container[UOp]], Grads]
gradient_rules: dict[Ops, GradRule] = {
  Ops.ADD: lambda ctx, x, _: (ctx, ctx),                                                   # d(a+b) = (g, g)
  Ops.SUB: lambda ctx, x, on: (ctx, -ctx if x.src[1] in on else None),                    # d(a-b) = (g, -g)
  Ops.MUL: _mul_grad,
  Ops.FDIV: _div_grad,
  Ops.NEG: lambda ctx, x, _: (-ctx,),                                                      # d(-x) = -g
  Ops.MAX: lambda ctx, x, _: _max_grad(ctx, *x.src),                                       # d max(a,b): to the larger
  Ops.WHERE: _where_grad,                                                                  # d where(c,a,b)
  Ops.EXP2: lambda ctx, y, _: (ctx * y * _c(y, LN2),),                                     # d 2^x = 2^x ln2
  Ops.LOG2: lambda ctx, y, _: (ctx / (y.src[0] * _c(y, LN2)),),                            # d log2 x = 1/(x ln2)
  Ops.SIN: lambda ctx, y, _: _sin_grad(ctx, y.src[0]),                                     # d sin x = cos x
  Ops.COS: lambda ctx, y, _: _cos_grad(ctx, y.src[0]),                                     # d cos x = -sin x
  Ops.SQRT: lambda ctx, y, _: (ctx / (y * _c(y, 2)),),                                     # d sqrt x = 1/(2 sqrt x)
  Ops.RECIP: lambda ctx, y, _: (-ctx * y * y,),                                            # d 1/x = -1/x^2
  Ops.TRUNC: lambda ctx, x, _: (_c(ctx, 0),),                                              # d trunc x = 0
  Ops.CAST: lambda ctx, c, _: _cast_grad(ctx, c),                                          # d cast = cast back
  Ops.REDUCE_AXIS: lambda ctx, r, _: _reduce_grad(ctx, r),
  Ops.RESHAPE: lambda ctx, r, _: (movement(ctx, Ops.RESHAPE, r.src[0].shape),),
  Ops.PERMUTE: lambda ctx, p, _: (_unpermute(ctx, p.arg),),
  Ops.EXPAND: lambda ctx, e, _: _expand_grad(ctx, e),                                      # d expand = sum back
  Ops.PAD: lambda ctx, p, _: (_unpad(ctx, p),),                                            # d pad = the inside
  Ops.SHRINK: lambda ctx, s, _: (_unshrink(ctx, s),),                                      # d shrink = pad with 0
  Ops.FLIP: lambda ctx, f, _: (movement(ctx, Ops.FLIP, f.arg),),
  Ops.CONTIGUOUS: lambda ctx, x, _: (ctx,),
  Ops.ASSIGN: lambda ctx, x, _: (None, ctx),                                               # d assign = d value
  Ops.CUSTOM_GRAD: lambda ctx, c, _: _custom_grad(ctx, c),                                 # a stated derivative
  Ops.COPY: lambda ctx, c, _: _copy_grad(ctx, c),                                          # d gather = scatter
  Ops.MULTI: lambda ctx, m, _: _multi_grad(ctx, m),
  # not differentiable (comparisons and detached values are off every gradient's path: gradient_path)
  **{op: _not_differentiable for op in (Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.BITCAST)},
}

def _unpermute(ctx: UOp, order: tuple[int, ...]) -> UOp:
  """ctx permuted back by the inverse of `order`. A ctx that is itself that inverse's undoing (the gradient of a
  transpose of a transpose, as a Linear's weight.T inside matmul) is its source: no pair of nodes that cancel."""
  inverse = tuple(argsort(order))
  if ctx.op is Ops.PERMUTE and tuple(ctx.arg[i] for i in inverse) == tuple(range(len(order))): return ctx.src[0]
  return movement(ctx, Ops.PERMUTE, inverse)

# nodes a gradient never flows through: beside those of non-float values, which get none (a comparison, an index)
_STOPS = (Ops.DETACH, Ops.VIEW, Ops.BUFFER, Ops.CONST, Ops.IOTA, Ops.DEVICE)

def gradient_path(root: UOp, targets: set[UOp]) -> list[UOp]:
  """The nodes a gradient flows through from root to a target, in topological order (sources first): no detached
  subgraph, no non-float value (no rule gives one a gradient) and no constant or buffer read."""
  reaches: dict[UOp, bool] = {}
  out = []
  for node in root.toposort:
    # a loop, not any() of a generator: a call per node, at every backward
    found = node in targets
    if not found and node.op not in _STOPS:
      for s in node.src:
        if reaches[s]:
          found = True
          break
    reaches[node] = found = found and node.dtype.is_float
    if found: out.append(node)
  return out

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp],
                     hooks: Mapping[UOp, Callable[[UOp], UOp]] | None = None) -> dict[UOp, UOp]:
  """The gradient of `root` (seeded with `root_grad`) with respect to each target it depends on. A node's hook
  replaces its gradient once that is complete (all its uses seen), before it flows on (Tensor.register_hook)."""
  grads: dict[UOp, UOp] = {root: root_grad}
  path = gradient_path(root, targets)
  on_path = set(path)
  for node in reversed(path):
    if (g := grads.get(node)) is None: continue
    if hooks and node in hooks: g = grads[node] = hooks[node](g)
    # a target among the stops (a VIEW of a buffer or a constant, a DETACH): nothing below it gets a gradient
    if node.op in _STOPS: continue
    if (rule := gradient_rules.get(node.op)) is None: raise NotImplementedError(f"no derivative rule for {node.op}")
    # a value with no elements has no gradient to pass on: its sources get zeros (the rules would reduce over its empty
    # axes, a kernel over no elements)
    src_grads = tuple(_c(s, 0) for s in node.src) if 0 in node.shape else rule(g, node, on_path)
    for s, sg in zip(node.src, src_grads):
      if sg is None or s not in on_path: continue
      grads[s] = grads[s] + sg if s in grads else sg
  return {t: grads[t] for t in targets if t in grads}
