"""Forward-mode derivatives (tangents) as a table of rules over tensor-graph UOps: frontend/gradient.py's mirror.

Each rule matches a node and, given the tangents of its sources (`ctx`, one per source, None where a source has none:
zero), returns the node's tangent in a 1-tuple (None inside for zero). Tangents are UOps built beside the primal graph,
from its nodes, so a jvp is one graph: realized together, a tangent's elementwise ops fuse into kernels like any others
and its reduces run next to the primal's, about one more forward (no finite differences, no reverse-over-reverse).
Where an op states its derivative for gradients (a CUSTOM_GRAD without an arg: pow at a zero base), the tangent uses
the same one; a CUSTOM_GRAD with an arg states a vector-Jacobian product, which has no forward form: its tangent is
its value's, through the graph that computes it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lazytensor.dtype import dtypes
from lazytensor.frontend.gradient import prod_others
from lazytensor.uop.graph import const_like, copy_to, movement, reduce_uop
from lazytensor.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat

Tangent = tuple[UOp | None]
Maybe = UOp | None

def _add(*ts: Maybe) -> Maybe:
  present = [t for t in ts if t is not None]
  if not present: return None
  out = present[0]
  for t in present[1:]: out = out + t
  return out

def _mul(t: Maybe, by: UOp) -> Maybe: return None if t is None else t * by
def _neg(t: Maybe) -> Maybe: return None if t is None else -t
def _eq(a: UOp, b: UOp) -> UOp: return a.ne(b).alu(Ops.CMPNE, const_like(a, True, dtypes.bool))
def _zero_or(t: Maybe, like: UOp) -> UOp: return const_like(like, 0) if t is None else t

def _div_tangent(ctx: Sequence[Maybe], a: UOp, b: UOp) -> Tangent:
  return (_add(_div(ctx[0], b), _neg(_div(_mul(ctx[1], a), b * b))),)  # d(a/b) = da/b - a db/b^2

def _div(t: Maybe, by: UOp) -> Maybe: return None if t is None else t / by

def _max_tangent(ctx: Sequence[Maybe], a: UOp, b: UOp) -> Tangent:
  # ties take the mean of both tangents, as the gradient splits evenly between both sides (torch.maximum)
  tie = _eq(a, b).cast(a.dtype) * const_like(a, 0.5)
  return (_add(_mul(ctx[0], b.lt(a).cast(a.dtype) + tie), _mul(ctx[1], a.lt(b).cast(a.dtype) + tie)),)

def _where_tangent(ctx: Sequence[Maybe], x: UOp) -> Tangent:
  if ctx[1] is None and ctx[2] is None: return (None,)
  return (x.src[0].where(_zero_or(ctx[1], x), _zero_or(ctx[2], x)),)

def _reduce_tangent(ctx: Sequence[Maybe], r: UOp) -> Tangent:
  t, x = ctx[0], r.src[0]
  op, axes = r.arg
  if t is None: return (None,)
  if op is Ops.ADD: return (reduce_uop(t, Ops.ADD, axes),)
  if op is Ops.MUL: return (reduce_uop(t * prod_others(x, axes), Ops.ADD, axes),)
  # MAX: the tangents of every position equal to the maximum, averaged (the gradient's even split)
  is_max = _eq(x, movement(r, Ops.EXPAND, x.shape)).cast(x.dtype)
  return (reduce_uop(t * is_max, Ops.ADD, axes) / reduce_uop(is_max, Ops.ADD, axes),)

def _cast_tangent(ctx: Sequence[Maybe], c: UOp) -> Tangent:
  return (ctx[0].cast(c.dtype) if ctx[0] is not None and c.dtype.is_float and c.src[0].dtype.is_float else None,)

def _custom_tangent(ctx: Sequence[Maybe], c: UOp) -> Tangent:
  # with an arg: the value's own tangent. Without, src = (value, x1, d1, x2, d2, ...): the sum of each xi's times di
  if c.arg is not None: return (ctx[0],)
  return (_add(*(_mul(ctx[p], c.src[p + 1]) for p in range(1, len(c.src), 2))),)

def _multi_tangent(ctx: Sequence[Maybe], m: UOp) -> Tangent:
  return (m.replace(src=tuple(_zero_or(t, p) for t, p in zip(ctx, m.src))),)

def _contiguous_tangent(ctx: Sequence[Maybe], c: UOp) -> Tangent:
  # the tangent is stored where the value is: the consumers of a materialized value read the tangent as they read it
  return (None if ctx[0] is None else c.replace(src=(ctx[0],)),)

LN2 = math.log(2)

pm_tangent: PatternMatcher[Tangent] = PatternMatcher([
  (UPat(Ops.ADD), lambda ctx: (_add(ctx[0], ctx[1]),)),                                    # d(a+b) = da + db
  (UPat(Ops.SUB), lambda ctx: (_add(ctx[0], _neg(ctx[1])),)),                              # d(a-b) = da - db
  (UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("b"))),
   lambda ctx, a, b: (_add(_mul(ctx[0], b), _mul(ctx[1], a)),)),                           # d(ab) = da b + a db
  (UPat(Ops.FDIV, src=(UPat.var("a"), UPat.var("b"))), _div_tangent),                      # d(a/b) = da/b - a db/b^2
  (UPat(Ops.NEG), lambda ctx: (_neg(ctx[0]),)),                                            # d(-x) = -dx
  (UPat(Ops.MAX, src=(UPat.var("a"), UPat.var("b"))), _max_tangent),                       # d max(a,b): the larger's
  (UPat(Ops.WHERE, name="x"), _where_tangent),                                             # d where(c,a,b)
  (UPat(Ops.EXP2, name="y"), lambda ctx, y: (_mul(ctx[0], y * const_like(y, LN2)),)),      # d 2^x = 2^x ln2 dx
  (UPat(Ops.LOG2, src=(UPat.var("x"),)), lambda ctx, x: (_div(ctx[0], x * const_like(x, LN2)),)),  # dx/(x ln2)
  (UPat(Ops.SIN, src=(UPat.var("x"),)), lambda ctx, x: (_mul(ctx[0], x.alu(Ops.COS)),)),   # d sin x = cos x dx
  (UPat(Ops.COS, src=(UPat.var("x"),)), lambda ctx, x: (_neg(_mul(ctx[0], x.alu(Ops.SIN))),)),  # -sin x dx
  (UPat(Ops.SQRT, name="y"), lambda ctx, y: (_div(ctx[0], y * const_like(y, 2)),)),        # dx / (2 sqrt x)
  (UPat(Ops.RECIP, name="y"), lambda ctx, y: (_neg(_mul(ctx[0], y * y)),)),                # d 1/x = -dx/x^2
  (UPat(Ops.CAST, name="c"), _cast_tangent),                                               # d cast = cast d
  (UPat(Ops.REDUCE_AXIS, name="r"), _reduce_tangent),
  (UPat(GroupOp.Movement, name="m"), lambda ctx, m: (None if ctx[0] is None else movement(ctx[0], m.op, m.arg),)),
  (UPat(Ops.CONTIGUOUS, name="c"), _contiguous_tangent),
  (UPat(Ops.ASSIGN), lambda ctx: (ctx[1],)),                                               # d assign = d value
  (UPat(Ops.CUSTOM_GRAD, name="c"), _custom_tangent),
  (UPat(Ops.COPY, name="c"), lambda ctx, c: (None if ctx[0] is None else copy_to(ctx[0], c.arg),)),
  (UPat(Ops.MULTI, name="m"), _multi_tangent),
  (UPat((Ops.DETACH, Ops.TRUNC, *GroupOp.Comparison, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR,
         Ops.BITCAST, Ops.CHECK)), lambda ctx: (None,)),                                  # constant pieces
])

def compute_tangents(roots: Sequence[UOp], seeds: Mapping[UOp, UOp]) -> list[UOp | None]:
  """The tangent of each root (None where it depends on no seeded node), given the tangents of some of its nodes
  (`seeds`, each of its node's shape and dtype)."""
  tangents: dict[UOp, UOp] = dict(seeds)
  for node in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort:
    if node in seeds or node.op is Ops.SINK or not any(s in tangents for s in node.src): continue
    # a value with no elements has none to carry (the rules would reduce over its empty axes)
    if 0 in node.shape: continue
    ret = pm_tangent.rewrite(node, ctx=tuple(tangents.get(s) for s in node.src))
    if ret is None: raise NotImplementedError(f"no tangent rule for {node.op}")
    if ret[0] is not None: tangents[node] = ret[0]
  return [tangents.get(r) for r in roots]
