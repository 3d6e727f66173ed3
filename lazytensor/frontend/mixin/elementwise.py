"""Elementwise arithmetic: the arithmetic of two (or three) tensors with its operators (add, sub, mul, div, floordiv,
mod, maximum, clamp, lerp, isclose), and negation, rounding, sign and tests of values of one. Operands broadcast
and promote as operands.py does it; comparisons, where, logic and bits are in compare.py, padding and joining tensors
in join.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from lazytensor.dtype import DType, dtypes
from lazytensor.frontend.mixin.compare import CompareMixin
from lazytensor.frontend.mixin.operands import check_operand
from lazytensor.helpers import ArgumentError
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="ElementwiseMixin")

@dataclass(frozen=True)
class ClampGrad:
  """clamp's derivative as torch states it (a CUSTOM_GRAD's arg, called by frontend/gradient.py with the output's
  gradient and the broadcast x and given bounds): x gets it where min <= x <= max, min where x < min < max, max where
  x > max or max < min. It is not the chain rule through clamp's wheres: where x < min == max none of the three gets
  any, and neither does a NaN x. `tensor` is the class that wraps the graph nodes."""
  tensor: type
  has_min: bool
  has_max: bool

  def __call__(self, ctx: UOp, xu: UOp, *bounds: UOp) -> tuple[UOp, ...]:
    g, x = self.tensor(ctx), self.tensor(xu)
    lo, hi = self.tensor(bounds[0]), self.tensor(bounds[-1])
    if not self.has_min: picks = [x <= hi, x > hi]
    elif not self.has_max: picks = [x >= lo, x < lo]
    else: picks = [(x >= lo) & (x <= hi), (x < lo) & (lo < hi), (x > hi) | (hi < lo)]
    return tuple(p.where(g, 0.0).lazydata for p in picks)

def _float_remainder(a: TensorT, b: TensorT, floor: bool) -> TensorT:
  """C's fmod (floor: Python's %) of two float tensors, exactly: MOD is C's fmod (on the CPU float64 arithmetic where
  that is exact, renderer/transcendental.py; libm's elsewhere). MOD has no derivative rule, so its gradient,
  (1, -trunc(a / b)), rides on t - stop(t) for t = trunc(a / b) * b - a: that is exactly +0.0 in value (subtracting
  it keeps the sign of a zero remainder), and has the gradient of t."""
  dt = a.dtype
  if dt.is_half: a, b = a.cast(dtypes.float32), b.cast(dtypes.float32)
  r = a._apply_uop(lambda p, q: p.alu(Ops.MOD, q), b)
  q = (a / b).trunc().detach()
  t = q.isfinite().where(q, 0.0) * b - a
  t = t.isfinite().where(t, 0.0)  # where a or b is infinite, fmod is a or NaN, and its gradient is left at 0
  r = r - (t - t.detach())
  # the remainder with the sign of b: one more b where the signs differ, as numpy and torch do
  if floor: r = (r.ne(0) & (r < 0).ne(b < 0)).where(r + b, r)
  return r.cast(dt)

def _float_floordiv(a: TensorT, b: TensorT) -> TensorT:
  """Floor division of two float tensors as torch's (and Python's //): from the exact remainder, not floor(a / b),
  whose rounded quotient can cross an integer (1.0 // 0.1 is 9.0, floor(1.0 / 0.1) 10.0); an infinite or NaN
  dividend gives NaN, a zero divisor a / b. Its gradient is 0, as torch's."""
  dt = a.dtype
  if dt.is_half: a, b = a.cast(dtypes.float32), b.cast(dtypes.float32)
  mod = _float_remainder(a, b, floor=False)
  # a - mod is a multiple of b: the quotient is an integer up to the rounding of the division, one less where the
  # remainder's sign is not the divisor's
  div = (a - mod) / b
  div = (mod.ne(0) & (b < 0).ne(mod < 0)).where(div - 1, div)
  whole = div.floor()
  whole = (div - whole > 0.5).where(whole + 1, whole)
  zero = type(a).full(div.shape, 0.0, dtype=div.dtype, device=div.device).copysign((a / b).detach())
  return b.ne(0).where(div.ne(0).where(whole, zero), (a / b).detach()).cast(dt)

class ElementwiseMixin(CompareMixin):
  """Tensor's elementwise arithmetic and its tests of values: on the compare and operands mixins."""
  __slots__ = ()

  def add(self, x: Self | Any, reverse: bool = False) -> Self:
    """Elementwise sum (`+`), with broadcasting and torch's type promotion.

    >>> (Tensor([1, 2]) + Tensor([[10], [20]])).tolist()
    [[11, 12], [21, 22]]
    """
    return self._binop(Ops.ADD, x, reverse)

  def sub(self, x: Self | Any, reverse: bool = False) -> Self:
    """Elementwise difference (`-`); bool operands are an error, as in torch.

    >>> (Tensor([5, 7]) - 2).tolist()
    [3, 5]
    """
    a, b = self._broadcasted(x, reverse)
    x_is_bool = isinstance(x, bool) or (isinstance(x, ElementwiseMixin) and x.dtype.is_bool)
    if self.dtype.is_bool or a.dtype.is_bool or x_is_bool:
      raise TypeError("subtraction with a bool operand is not supported (as in torch); use logical_xor, ^ or ~")
    return a._apply_uop(lambda p, q: p.alu(Ops.SUB, q), b)

  def mul(self, x: Self | Any, reverse: bool = False) -> Self:
    """Elementwise product (`*`).

    >>> (Tensor([1, 2]) * 1.5).tolist()
    [1.5, 3.0]
    """
    return self._binop(Ops.MUL, x, reverse)

  def div(self, x: Self | Any, reverse: bool = False, rounding_mode: str | None = None) -> Self:
    """True division (ints become float); rounding_mode "trunc" or "floor" rounds like torch.

    >>> (Tensor([7, -7]) / 2).tolist()
    [3.5, -3.5]
    """
    if rounding_mode == "floor": return self.floordiv(x, reverse)
    if rounding_mode == "trunc":
      a, b = self._broadcasted(x, reverse)
      return a._idiv_trunc(b) if a.dtype.is_int else a.div(b).trunc()
    if rounding_mode is not None:
      raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = self._broadcasted_float(x, reverse)
    return a._apply_uop(lambda p, q: p.alu(Ops.FDIV, q), b)

  def idiv(self, x: Self | Any, reverse: bool = False) -> Self:
    """Division rounding toward zero, as C and tinygrad's idiv: the same as div(x, rounding_mode="trunc").

    >>> Tensor([7, -7]).idiv(2).tolist()
    [3, -3]
    """
    return self.div(x, reverse, rounding_mode="trunc")

  def _idiv_trunc(self, b: Self) -> Self:
    # C division traps on x/0 and INT_MIN/-1: divide by a safe divisor and patch those lanes as numpy does (0, -x)
    safe = (b == 0) | (b == -1) if not self.dtype.is_unsigned else (b == 0)
    q = self._apply_uop(lambda p, q: p.alu(Ops.IDIV, q), safe.where(1, b))
    if self.dtype.is_unsigned: return (b == 0).where(0, q)
    return (b == 0).where(0, (b == -1).where(-self, q))

  def floordiv(self, x: Self | Any, reverse: bool = False) -> Self:
    """Division rounding toward negative infinity, as Python's //; an int divided by zero gives 0, as numpy.

    >>> (Tensor([7, -7, 7]) // Tensor([2, 2, 0])).tolist()
    [3, -4, 0]
    """
    a, b = self._broadcasted(x, reverse)
    if a.dtype.is_bool: raise TypeError("floor division of bool tensors is not supported")
    if a.dtype.is_float: return _float_floordiv(a, b)
    return a._int_floordiv_mod(b)[0]

  def mod(self, x: Self | Any, reverse: bool = False) -> Self:
    """Remainder with the sign of the divisor, as Python's % and torch.remainder; an int modulo zero gives 0, as
    numpy.

    >>> (Tensor([7, -7, 7]) % Tensor([3, 3, 0])).tolist()
    [1, 2, 0]
    """
    a, b = self._broadcasted(x, reverse)
    if a.dtype.is_bool: raise TypeError("modulo of bool tensors is not supported")
    if not a.dtype.is_float: return a._int_floordiv_mod(b)[1]
    return _float_remainder(a, b, floor=True)

  def fmod(self, x: Self | Any) -> Self:
    """Remainder with the sign of the dividend, as C's fmod (torch.fmod), exact for floats; an int modulo zero gives
    0, as numpy (torch raises).

    >>> Tensor([7.5, -7.5]).fmod(2).tolist()
    [1.5, -1.5]
    """
    a, b = self._broadcasted(x)
    if a.dtype.is_bool: raise TypeError("fmod of bool tensors is not supported")
    if a.dtype.is_float: return _float_remainder(a, b, floor=False)
    return b.eq(0).where(0, a - a._idiv_trunc(b) * b)

  def _int_floordiv_mod(self, b: Self) -> tuple[Self, Self]:
    # truncating division, then one step down where the signs differ and it was inexact; x//0 and x%0 are 0
    q = self._idiv_trunc(b)
    r = self - q * b
    if not self.dtype.is_unsigned:
      step = r.ne(0) & ((r < 0) ^ (b < 0)) & b.ne(0)
      q, r = step.where(q - 1, q), step.where(r + b, r)
    return q, b.eq(0).where(0, r)

  def maximum(self, x: Self | Any) -> Self:
    """The elementwise larger of two tensors (NaN propagates).

    >>> Tensor([1, 5]).maximum(Tensor([3, 2])).tolist()
    [3, 5]
    """
    return self._binop(Ops.MAX, x)

  def minimum(self, x: Self | Any) -> Self:
    """The elementwise smaller of two tensors (NaN propagates).

    >>> Tensor([1, 5]).minimum(3).tolist()
    [1, 3]
    """
    a, b = self._broadcasted(x)
    return -((-a).maximum(-b)) if a.dtype.is_float else ~((~a).maximum(~b))

  def clamp(self, min: Self | Any = None, max: Self | Any = None) -> Self:
    """Limit the values to [min, max]; either bound may be None, a number or a tensor that broadcasts. A NaN in x or
    in a bound gives NaN; where min > max the result is max; the gradient follows torch's rule (ClampGrad): x gets it
    inside [min, max], bounds included, a tensor bound where it is chosen, except where x < min == max.

    >>> Tensor([-2.0, 0.5, 3.0]).clamp(-1, 1).tolist()
    [-1.0, 0.5, 1.0]
    >>> Tensor([1, 5, 9]).clamp(max=Tensor([4, 4, 10])).tolist()
    [1, 4, 9]
    """
    if min is None and max is None: raise ArgumentError("clamp: at least one of min and max must be given")
    given = [(name, bound) for name, bound in (("min", min), ("max", max)) if bound is not None]
    for name, bound in given: check_operand("clamp", name, bound)
    x, *bounds = self._broadcast_all(*(bound for _, bound in given))
    out = x
    for (name, _), b in zip(given, bounds):
      beyond = (out < b) if name == "min" else (b < out)
      out = (beyond | b.ne(b) if x.dtype.is_float else beyond).where(b, out)
    if not x.dtype.is_float: return out
    grad = ClampGrad(type(self), min is not None, max is not None)
    return out._apply_uop(lambda v, *u: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, *u), grad), x, *bounds)

  def clip(self, min: Self | Any = None, max: Self | Any = None) -> Self:
    """The same as clamp.

    >>> Tensor([-2, 0, 3]).clip(-1, 1).tolist()
    [-1, 0, 1]
    """
    return self.clamp(min, max)

  def copysign(self, x: Self | Any) -> Self:
    """|self| with the sign of x (its sign bit: -0.0 and -NaN count as negative); ints become float, as in torch.

    >>> Tensor([1.0, -2.0, 3.0]).copysign(Tensor([-1.0, 1.0, -0.0])).tolist()
    [-1.0, 2.0, -3.0]
    """
    check_operand("copysign", "the sign source", x)
    a, b = self._broadcasted_float(x)
    mag = a.abs()
    return b.signbit().where(-mag, mag)

  def lerp(self, end: Self | Any, weight: Self | Any) -> Self:
    """self + weight * (end - self), as torch computes it: from end's side for |weight| >= 1/2, so that weight 1
    gives exactly end. Ints become float; float16 and bfloat16 are computed in float32.

    >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.25).tolist()
    [2.5, 12.5]
    """
    check_operand("lerp", "end", end)
    check_operand("lerp", "weight", weight)
    x, e, w = (t._to_float() for t in self._broadcast_all(end, weight))
    dt = x.dtype
    # float16 from float32 operands, so that a Python weight is not rounded to float16 first
    if dt.is_half: x, e, w = self.cast(dtypes.float32)._broadcast_all(end, weight)
    d = e - x
    return ((w < 0.5) & (w > -0.5)).where(x + w * d, e - d * (1 - w)).cast(dt)

  def isclose(self, x: Self | Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Self:
    """|self - x| <= atol + rtol * |x| elementwise, as torch: equal values (infinities included) are close, an
    infinity is close to nothing else, and NaN to nothing unless equal_nan. Ints compare in float64.

    >>> Tensor([1.0, 1.0, float('nan')]).isclose(Tensor([1.0 + 1e-6, 1.1, float('nan')]), equal_nan=True).tolist()
    [True, False, True]
    """
    check_operand("isclose", "x", x)
    if rtol < 0 or atol < 0: raise ValueError(f"isclose: rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    a, b = self._broadcasted(x)
    if not a.dtype.is_float: a, b = a.cast(dtypes.float64), b.cast(dtypes.float64)
    close = a.eq(b) | (b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs()))
    return close | (a.isnan() & b.isnan()) if equal_nan else close

  def __add__(self, x: Any) -> Self: return self.add(x)
  def __radd__(self, x: Any) -> Self: return self.add(x, True)
  def __sub__(self, x: Any) -> Self: return self.sub(x)
  def __rsub__(self, x: Any) -> Self: return self.sub(x, True)
  def __mul__(self, x: Any) -> Self: return self.mul(x)
  def __rmul__(self, x: Any) -> Self: return self.mul(x, True)
  def __truediv__(self, x: Any) -> Self: return self.div(x)
  def __rtruediv__(self, x: Any) -> Self: return self.div(x, True)
  def __floordiv__(self, x: Any) -> Self: return self.floordiv(x)
  def __rfloordiv__(self, x: Any) -> Self: return self.floordiv(x, True)
  def __mod__(self, x: Any) -> Self: return self.mod(x)
  def __rmod__(self, x: Any) -> Self: return self.mod(x, True)

  # ---- one tensor: negation, rounding, sign and tests of values ----

  def neg(self) -> Self:
    """Elementwise negation (`-x`).

    >>> (-Tensor([1, -2])).tolist()
    [-1, 2]
    """
    if self.dtype.is_bool: raise TypeError("negation of a bool tensor is not supported; use logical_not or ~")
    return self._unary(Ops.NEG)

  __neg__ = neg

  def trunc(self) -> Self:
    """Round toward zero.

    >>> Tensor([-1.5, 1.5]).trunc().tolist()
    [-1.0, 1.0]
    """
    return self if not self.dtype.is_float else self._unary(Ops.TRUNC)

  def floor(self) -> Self:
    """Round toward negative infinity.

    >>> Tensor([-1.5, 1.5]).floor().tolist()
    [-2.0, 1.0]
    """
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)

  def ceil(self) -> Self:
    """Round toward positive infinity.

    >>> Tensor([-1.5, 1.5]).ceil().tolist()
    [-1.0, 2.0]
    """
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)

  def round(self) -> Self:
    """Round to the nearest integer, halves to even (as torch and numpy).

    >>> Tensor([0.5, 1.5, 2.5, -0.5]).round().tolist()
    [0.0, 2.0, 2.0, -0.0]
    """
    if not self.dtype.is_float: return self
    # from trunc and the exact fraction x - trunc(x): x + 0.5 would round before the floor for large or near-half x
    t = self.trunc()
    frac = (self - t).abs()
    t_odd = ((t * 0.5).trunc() * 2).ne(t)
    away = (frac > 0.5) | ((frac == 0.5) & t_odd)
    return away.where(t + (self > 0).where(1.0, -1.0).cast(self.dtype), t)

  def abs(self) -> Self:
    """The absolute value.

    >>> Tensor([-2, 3]).abs().tolist()
    [2, 3]
    """
    return self if self.dtype.is_bool or self.dtype.is_unsigned else self.maximum(-self)

  def signbit(self) -> Self:
    """True where the sign bit is set: for floats that includes -0.0 and -NaN, which x < 0 misses.

    >>> Tensor([-1.0, -0.0, 0.0, 2.0]).signbit().tolist()
    [True, True, False, False]
    """
    if self.dtype.is_float:
      ints = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
      return self.bitcast(ints[self.dtype.itemsize]) < 0
    return self.ne(self) if self.dtype.is_unsigned or self.dtype.is_bool else self < 0  # all False, or x < 0

  def sign(self) -> Self:
    """-1, 0 or 1 by the sign of each element; NaN stays NaN (as numpy; torch gives 0).

    >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist()
    [-1.0, 0.0, 1.0]
    """
    if self.dtype.is_bool: return self
    s = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
    return self.ne(self).where(self, s) if self.dtype.is_float else s

  def isnan(self) -> Self:
    """True where the value is NaN (never, for ints and bools).

    >>> Tensor([1.0, math.nan]).isnan().tolist()
    [False, True]
    """
    return self.ne(self)

  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Self:
    """True where the value is +inf (if detect_positive) or -inf (if detect_negative).

    >>> Tensor([1.0, math.inf, -math.inf]).isinf().tolist()
    [False, True, True]
    """
    if not self.dtype.is_float: return self.ne(self)
    return (self.eq(math.inf) & detect_positive) | (self.eq(-math.inf) & detect_negative)

  def isfinite(self) -> Self:
    """True where the value is neither infinite nor NaN (always, for ints and bools).

    >>> Tensor([1.0, math.inf, math.nan]).isfinite().tolist()
    [True, False, False]
    """
    if not self.dtype.is_float: return self.eq(self)
    return (self < math.inf) & (self > -math.inf)

# (mantissa bits, exponent bits) of each float dtype (numpy has no bfloat16, so its finfo cannot serve)
_FLOAT_BITS = {"float16": (10, 5), "bfloat16": (7, 8), "float32": (23, 8), "float64": (52, 11)}

def _largest_finite(dt: DType) -> float:
  mantissa, exponent = _FLOAT_BITS[dt.name]
  return (2 - 2.0 ** -mantissa) * 2.0 ** (2 ** (exponent - 1) - 1)  # all mantissa bits set, the largest exponent
