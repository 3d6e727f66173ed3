"""Algebraic simplification: constant folding, identities, and the integer algebra that keeps index math small.

Two rule tables:
  * `symbolic_simple`: constant folding and identities;
  * `symbolic`: all of it, adding the rules that read bounds (`UOp.vmin`/`UOp.vmax`) and the integer algebra:
    canonical sums, div/mod folding, range checks.

What every rule here must respect:
  * IDIV and MOD are C's: the quotient truncates toward zero and the remainder takes the dividend's sign. Floor
    division identities are only used where the operands are proven non-negative (there both agree).
  * float rules are exact in IEEE arithmetic, nan, inf and -0.0 included. Rules that are only almost right for floats
    (x*0 -> 0, x+0.0 -> x, x-x -> 0, reassociation) are restricted to ints.
  * the integer algebra (reassociation, div/mod folding) runs on signed ints, index math, and assumes it does not
    overflow, as every index simplifier must: the bounds say where a rule depends on the values.
"""
from __future__ import annotations

import functools
import math
import operator
from typing import Any

from lazytensor.dtype import DType, dtypes
from lazytensor.uop.opcodes import GroupOp, Ops, exec_alu, exec_cast
from lazytensor.uop.ops import PatternMatcher, UOp, UPat, graph_rewrite

INTS: tuple[DType, ...] = (*(dt for dt in dtypes.all() if dt.is_int), dtypes.index)
SINTS: tuple[DType, ...] = tuple(dt for dt in INTS if not dt.is_unsigned)
INTS_BOOL: tuple[DType, ...] = (*INTS, dtypes.bool)

def _ivar(name: str) -> UPat: return UPat.var(name, SINTS)
def _icvar(name: str) -> UPat: return UPat.cvar(name, SINTS)
def _bvar(name: str) -> UPat: return UPat.var(name, dtypes.bool)
def _bconst(value: bool) -> UPat: return UPat.const(dtypes.bool, value)
def _fits(dt: DType, *vals: int) -> bool: return all(dt.min() <= v <= dt.max() for v in vals)

# ---- constant folding and identities ----

def fold_consts(a: UOp) -> UOp | None:
  """c1 op c2 -> c3, with the dtype's wrap-around and rounding."""
  # x/0, shifts by the width and the like have the meaning codegen/alu.py gives them on every device
  return a.const_like(exec_alu(a.op, a.dtype, [s.arg for s in a.src]))

def fold_cast(a: UOp, c: UOp) -> UOp: return a.const_like(exec_cast(c.dtype, a.dtype, c.arg))

def _adds_nothing(c: UOp) -> bool:
  # why: for floats only -0.0 is neutral, since -0.0 + 0.0 is +0.0
  return c.arg == 0 and (not c.dtype.is_float or math.copysign(1.0, c.arg) < 0)

def _subtracts_nothing(c: UOp) -> bool:
  # why: for floats only +0.0 is neutral, since -0.0 - (-0.0) is +0.0
  return c.arg == 0 and (not c.dtype.is_float or math.copysign(1.0, c.arg) > 0)

symbolic_simple: PatternMatcher[UOp] = PatternMatcher([
  # constant folding
  (UPat(GroupOp.ALU, name="a", src=UPat(Ops.CONST)), fold_consts),                       # c1 op c2 -> c3
  (UPat(Ops.CAST, name="a", src=(UPat.cvar("c"),)), fold_cast),                          # cast(c) -> c'
  # arithmetic identities
  (UPat.var("x") + UPat.cvar("c"), lambda x, c: x if _adds_nothing(c) else None),        # x+0 -> x (floats: x+(-0.0))
  (UPat.var("x") - UPat.cvar("c"), lambda x, c: x if _subtracts_nothing(c) else None),   # x-0 -> x (floats: x-0.0)
  (UPat.var("x") * 1, lambda x: x),                                                      # x*1 -> x
  (UPat.var("x") / 1, lambda x: x),                                                      # x/1 -> x
  (UPat.var("x", INTS) // 1, lambda x: x),                                               # x//1 -> x
  (UPat.var("x", INTS) % 1, lambda x: x.const_like(0)),                                  # x%1 -> 0
  # why ints: inf*0, nan*0 and inf-inf are nan
  (UPat.var("x", INTS) * 0, lambda x: x.const_like(0)),                                  # x*0 -> 0
  (UPat.var("x", INTS) - UPat.var("x"), lambda x: x.const_like(0)),                      # x-x -> 0
  (UPat(Ops.NEG, src=(-UPat.var("x"),)), lambda x: x),                                   # -(-x) -> x
  (UPat.var("x").maximum(UPat.var("x")), lambda x: x),                                   # max(x,x) -> x
  (UPat(Ops.CAST, name="a", src=(UPat.var("x"),)), lambda a, x: x if a.dtype == x.dtype else None),  # cast(x:T, T) -> x
  # bitwise and logical identities (a 0 pattern also matches False)
  (UPat.var("x", INTS_BOOL) & 0, lambda x: x.const_like(0)),                             # x&0 -> 0, x&False -> False
  (UPat.var("x", INTS_BOOL) | 0, lambda x: x),                                           # x|0 -> x, x|False -> x
  (UPat(Ops.XOR, src=[UPat.var("x", INTS_BOOL), UPat.const(None, 0)]), lambda x: x),     # x^0 -> x
  (_bvar("x") & True, lambda x: x),                                                      # x&True -> x
  (_bvar("x") | True, lambda x: x.const_like(True)),                                     # x|True -> True
  (UPat.var("x", INTS_BOOL) & UPat.var("x"), lambda x: x),                               # x&x -> x
  (UPat.var("x", INTS_BOOL) | UPat.var("x"), lambda x: x),                               # x|x -> x
  (_bvar("x").ne(False), lambda x: x),                                                   # x!=False -> x
  (_bvar("x").ne(True).ne(True), lambda x: x),                                           # !!x -> x
  # comparisons of a value with itself
  (UPat(Ops.CMPLT, name="a", src=(UPat.var("x"), UPat.var("x"))), lambda a, x: a.const_like(False)),  # x<x -> False
  # why not floats: nan != nan
  (UPat(Ops.CMPNE, name="a", src=(UPat.var("x", INTS_BOOL), UPat.var("x"))),
   lambda a, x: a.const_like(False)),                                                    # x!=x -> False
  # where
  (_bconst(True).where(UPat.var("a"), UPat.var("b")), lambda a, b: a),                  # where(True,a,b) -> a
  (_bconst(False).where(UPat.var("a"), UPat.var("b")), lambda a, b: b),                 # where(False,a,b) -> b
  (UPat.var("c").where(UPat.var("a"), UPat.var("a")), lambda c, a: a),                   # where(c,a,a) -> a
])

# ---- rules that read bounds ----

def fold_by_bounds(x: UOp) -> UOp | None:
  """x -> c when vmin == vmax: decides x<c, x//c -> 0 for 0<=x<c, x*0, and every other node with one value."""
  return x.const_like(x.vmin) if x.vmin == x.vmax else None

def const_to_right(a: UOp, c: UOp, x: UOp) -> UOp | None:
  """c op x -> x op c for commutative ops, so that every rule can look for the constant on the right."""
  # why floats: a max lowered to compare-and-select is not symmetric in nan
  if x.op is Ops.CONST or (a.op is Ops.MAX and a.dtype.is_float): return None
  return a.replace(src=(x, c))

# ---- sums: index math as terms (base, coefficient) plus a constant ----

def _flatten(u: UOp, op: Ops) -> list[UOp]:
  """The operands of a chain of one associative op: ((a+b)+(c+d)) -> [a, b, c, d]."""
  if u.op is not op: return [u]
  return [t for s in u.src for t in _flatten(s, op)]

def _sum_terms(u: UOp) -> tuple[list[tuple[UOp, int]], int]:
  """x*3 + y + 5 -> [(x, 3), (y, 1)], 5."""
  terms: list[tuple[UOp, int]] = []
  const = 0
  for t in _flatten(u, Ops.ADD):
    if t.op is Ops.CONST: const += t.arg
    elif t.op is Ops.MUL and t.src[1].op is Ops.CONST: terms.append((t.src[0], t.src[1].arg))
    else: terms.append((t, 1))
  return terms, const

def _build_sum(dt: DType, terms: list[tuple[UOp, int]], const: int) -> UOp:
  """The canonical sum: a left-leaning chain of terms in the given order, the constant last."""
  parts = [b if k == 1 else b * k for b, k in terms if k != 0]
  if const != 0 or not parts: parts.append(UOp.const(dt, const))
  return functools.reduce(operator.add, parts)

def _coefficients(terms: list[tuple[UOp, int]]) -> dict[UOp, int]:
  coeffs: dict[UOp, int] = {}
  for b, k in terms: coeffs[b] = coeffs.get(b, 0) + k
  return coeffs

def collect_like_terms(a: UOp) -> UOp | None:
  """x*c1 + ... + x*c2 -> x*(c1+c2) + ..., x+x -> x*2."""
  terms, const = _sum_terms(a)
  coeffs = _coefficients(terms)
  return None if len(coeffs) == len(terms) else _build_sum(a.dtype, list(coeffs.items()), const)

def recombine_divmod(a: UOp) -> UOp | None:
  """(x//c)*c*k + (x%c)*k -> x*k: C's quotient and remainder always recombine (a == a/b*b + a%b)."""
  terms, const = _sum_terms(a)
  coeffs = _coefficients(terms)
  for b, k in list(coeffs.items()):
    if b.op is not Ops.MOD or b.src[1].op is not Ops.CONST or b.src[1].arg == 0: continue
    div = UOp(Ops.IDIV, b.dtype, b.src)
    if coeffs.get(div) == k * b.src[1].arg:
      del coeffs[b], coeffs[div]
      coeffs[b.src[0]] = coeffs.get(b.src[0], 0) + k
      return _build_sum(a.dtype, list(coeffs.items()), const)
  return None

# ---- division and remainder by a constant ----

def mod_in_one_block(x: UOp, c: UOp) -> UOp | None:
  """x%c -> x when |x| < c; x%c -> x-k*c when k*c <= x < (k+1)*c."""
  if c.arg <= 0: return None
  # why |x|: the C remainder keeps the dividend's sign, so x%c == x for -c < x < c
  if -c.arg < x.vmin and x.vmax < c.arg: return x
  if x.vmin >= 0 and x.vmin // c.arg == x.vmax // c.arg: return x - x.vmin // c.arg * c.arg
  return None

def divide_common_factor(d: UOp, x: UOp, c: UOp) -> UOp | None:
  """(x*g)//(c*g) -> x//c and (x*g)%(c*g) -> (x%c)*g, g dividing every coefficient, the constant and c.

  Both sides divide the same real numbers, so this holds under C truncation for either sign of x."""
  if c.arg <= 0: return None
  terms, const = _sum_terms(x)
  g = math.gcd(c.arg, const, *(k for _, k in terms))
  if g == 1: return None
  xg = _build_sum(x.dtype, [(b, k // g) for b, k in terms], const // g)
  return xg // (c.arg // g) if d.op is Ops.IDIV else (xg % (c.arg // g)) * g

def fold_divmod(d: UOp, x: UOp, c: UOp) -> UOp | None:
  """(q*c + r)//c -> q + r//c and (q*c + r)%c -> r%c: each coefficient's multiple of c leaves the remainder.

  (a*c + b)//c -> a and (a*c + b)%c -> b follow when 0 <= b < c, since then b//c -> 0 and b%c -> b."""
  # why non-negative: floor((q*c + r)/c) == q + floor(r/c) always, but C truncates toward zero, which is the floor
  # only for non-negative operands: x >= 0 and r >= 0
  if c.arg <= 0 or x.vmin < 0: return None
  terms, const = _sum_terms(x)
  # every coefficient splits as k == (k//c)*c + k%c, e.g. (a + 59*b) % 58 -> (a + b) % 58; that is only simpler when
  # the remainder then stays below c, otherwise move out just the terms that c divides
  quot = [(b, k // c.arg) for b, k in terms if k // c.arg != 0]
  rem = _build_sum(x.dtype, [(b, k % c.arg) for b, k in terms if k % c.arg != 0], const % c.arg)
  if rem.vmin < 0 or rem.vmax >= c.arg:
    quot = [(b, k // c.arg) for b, k in terms if k % c.arg == 0]
    rem = _build_sum(x.dtype, [(b, k) for b, k in terms if k % c.arg != 0], const % c.arg)
  if not quot and const // c.arg == 0: return None
  if rem.vmin < 0: return None
  if d.op is Ops.MOD: return rem % c
  # moving only a constant out of the quotient makes it no simpler unless the division vanishes
  if not quot and rem.vmax >= c.arg: return None
  return _build_sum(x.dtype, quot, const // c.arg) + rem // c

def nested_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x//c1)//c2 -> x//(c1*c2): trunc(x/a) is sign(x/a)*floor(|x|/|a|), and floors of magnitudes nest."""
  return x // (c1.arg * c2.arg) if c1.arg != 0 and c2.arg != 0 and _fits(x.dtype, c1.arg * c2.arg) else None

def nested_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x%(c*k))%c -> x%c for c, k > 0: both remainders keep x's sign, so the inner one only drops multiples of c."""
  return x % c2 if c1.arg > 0 and c2.arg > 0 and c1.arg % c2.arg == 0 else None

# ---- comparisons and range checks ----

def shift_cmp(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """x+c1 < c2 -> x < c2-c1, when x+c1 does not overflow."""
  lim = c2.arg - c1.arg
  return x.lt(lim) if _fits(x.dtype, x.vmin + c1.arg, x.vmax + c1.arg, lim) else None

def scale_cmp(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """x*c1 < c2 -> x < ceil(c2/c1) for c1 > 0, when x*c1 does not overflow."""
  if c1.arg <= 0 or not _fits(x.dtype, x.vmin * c1.arg, x.vmax * c1.arg): return None
  return x.lt(-(-c2.arg // c1.arg))

def _range_check(t: UOp) -> tuple[UOp, Any, Any] | None:
  """A bool term as (x, lo, hi) when it says lo <= x <= hi for an int x and a constant: x<c, c<x, !(x<c), !(c<x)."""
  negated = t.op is Ops.CMPNE and t.src[1].op is Ops.CONST and t.src[1].arg is True
  lt = t.src[0] if negated else t
  if lt.op is not Ops.CMPLT or not lt.src[0].dtype.is_int: return None
  a, b = lt.src
  if b.op is Ops.CONST and a.op is not Ops.CONST:  # a < c
    return (a, b.arg, math.inf) if negated else (a, -math.inf, b.arg - 1)
  if a.op is Ops.CONST and b.op is not Ops.CONST:  # c < b
    return (b, -math.inf, a.arg) if negated else (b, a.arg + 1, math.inf)
  return None

def merge_range_checks(a: UOp) -> UOp | None:
  """Intersect the range checks on each value in a chain of &: (x<c)&(x<d) -> x<min(c,d); (x<c)&(x>=d) -> False
  when d >= c; a check that the bounds of x already prove is dropped."""
  others: list[UOp] = []
  ranges: dict[UOp, tuple[Any, Any]] = {}
  for t in dict.fromkeys(_flatten(a, Ops.AND)):
    if (rc := _range_check(t)) is None: others.append(t)
    else:
      x, lo, hi = rc
      old_lo, old_hi = ranges.get(x, (x.vmin, x.vmax))
      ranges[x] = (max(old_lo, lo), min(old_hi, hi))
  if any(lo > hi for lo, hi in ranges.values()): return a.const_like(False)
  for x, (lo, hi) in ranges.items():
    if lo > x.vmin: others.append(x.lt(lo).logical_not())
    if hi < x.vmax: others.append(x.lt(hi + 1))
  return functools.reduce(operator.and_, others) if others else a.const_like(True)

# ---- the full table ----

divmod_pat = UPat((Ops.IDIV, Ops.MOD), name="d", src=(_ivar("x"), _icvar("c")))

symbolic: PatternMatcher[UOp] = symbolic_simple + PatternMatcher[UOp]([
  # bounds: any int or bool value with one possible value is that constant (also decides x<c by bounds)
  (UPat(GroupOp.ALU | {Ops.CAST}, INTS_BOOL, name="x"), fold_by_bounds),                  # x -> c when vmin == vmax
  (UPat(GroupOp.Commutative, name="a", src=(UPat.cvar("c"), UPat.var("x"))), const_to_right),  # c op x -> x op c
  # integer canonical form: a sum of terms times constants
  (-_ivar("x"), lambda x: x * -1),                                                        # -x -> x*-1
  (_ivar("a") - UPat.var("b"), lambda a, b: a + b * -1),                                  # a-b -> a+b*-1
  # why ints: float addition and multiplication do not associate
  ((_ivar("x") + _icvar("c1")) + _icvar("c2"), lambda x, c1, c2: x + (c1.arg + c2.arg)),  # (x+c1)+c2 -> x+(c1+c2)
  (UPat(Ops.ADD, src=(_ivar("x"), UPat(Ops.ADD, src=(UPat.var("y"), UPat.var("z"))))),
   lambda x, y, z: (x + y) + z),                                                          # x+(y+z) -> (x+y)+z
  ((_ivar("x") + _icvar("c")) + _ivar("y"),
   lambda x, c, y: (x + y) + c if y.op is not Ops.CONST else None),                      # (x+c)+y -> (x+y)+c
  ((_ivar("x") * _icvar("c1")) * _icvar("c2"), lambda x, c1, c2: x * (c1.arg * c2.arg)),  # (x*c1)*c2 -> x*(c1*c2)
  ((_ivar("x") * _icvar("c")) * _ivar("y"),
   lambda x, c, y: (x * y) * c if y.op is not Ops.CONST else None),                      # (x*c)*y -> (x*y)*c
  ((_ivar("x") + _ivar("y")) * _icvar("c"), lambda x, y, c: x * c + y * c),               # (x+y)*c -> x*c+y*c
  (UPat(Ops.ADD, SINTS, name="a"), collect_like_terms),                                   # x*c1 + x*c2 -> x*(c1+c2)
  (UPat(Ops.ADD, SINTS, name="a"), recombine_divmod),                                     # (x//c)*c + x%c -> x
  # division and remainder by a constant
  (_ivar("x") % _icvar("c"), mod_in_one_block),                                           # x%c -> x when |x| < c
  (divmod_pat, divide_common_factor),                                                     # (x*g)//(c*g) -> x//c
  (divmod_pat, fold_divmod),                                                              # (q*c+r)//c -> q+r//c
  ((_ivar("x") // _icvar("c1")) // _icvar("c2"), nested_div),                             # (x//c1)//c2 -> x//(c1*c2)
  ((_ivar("x") % _icvar("c1")) % _icvar("c2"), nested_mod),                               # (x%(c*k))%c -> x%c
  # comparisons and validity conditions
  ((_ivar("x") + _icvar("c1")).lt(_icvar("c2")), shift_cmp),                              # x+c1 < c2 -> x < c2-c1
  ((_ivar("x") * _icvar("c1")).lt(_icvar("c2")), scale_cmp),                              # x*c1 < c2 -> x < ceil(c2/c1)
  (UPat(Ops.AND, dtypes.bool, name="a"), merge_range_checks),                             # (x<c)&(x<d) -> x<min(c,d)
  (_bvar("c").ne(True).where(UPat.var("a"), UPat.var("b")), lambda c, a, b: c.where(b, a)),  # where(!c,a,b)->(c,b,a)
  (_bvar("c").where(_bconst(True), _bconst(False)), lambda c: c),                         # where(c,True,False) -> c
])

# UOps are interned and immutable, so the answer for a node never changes; lowering asks again and again for the same
# index expressions (per lane, and per candidate in BEAM search, where this made lowering a conv ~8x faster)
@functools.lru_cache(maxsize=1 << 15)
def simplify(u: UOp) -> UOp:
  """Rewrite `u` with every rule in `symbolic` until none applies."""
  return graph_rewrite(u, symbolic, name="symbolic")
