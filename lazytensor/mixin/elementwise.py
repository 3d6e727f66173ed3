"""Elementwise ops on two (or three) tensors: arithmetic, comparisons, where, logic and bits, with their operators;
and dtype casts.

Operands broadcast against each other and promote to a common dtype as in torch (Tensor._broadcasted).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from lazytensor.dtype import DType, dtypes, least_upper_float, to_dtype
from lazytensor.helpers import ArgumentError, DTypeError
from lazytensor.mixin.math_ops import tensor_pow
from lazytensor.mixin.stub import TensorStub
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  nd = max(len(s) for s in shapes)
  padded = [(1,) * (nd - len(s)) + s for s in shapes]
  out = []
  for dims in zip(*padded):
    non1 = {d for d in dims if d != 1}
    if len(non1) > 1: raise ValueError(f"shapes {' and '.join(str(s) for s in shapes)} cannot be broadcast together")
    out.append(non1.pop() if non1 else 1)
  return tuple(out)

def _float_remainder(a: Tensor, b: Tensor, floor: bool) -> Tensor:
  """C's fmod (floor: Python's %) of two float tensors, exactly: MOD renders to the libm fmod (LLVM's frem). MOD has
  no derivative rule, so its gradient, (1, -trunc(a / b)), rides on t - stop(t) for t = trunc(a / b) * b - a: that
  is exactly +0.0 in value (subtracting it keeps the sign of a zero remainder), and has the gradient of t."""
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

def _check_operand(op: str, name: str, v: Any) -> None:
  if not isinstance(v, (ElementwiseMixin, bool, int, float, np.generic, list, np.ndarray)):
    raise TypeError(f"{op}: {name} must be a Tensor or a number, got {type(v).__name__}")

class ElementwiseMixin(TensorStub):
  """Tensor's elementwise methods on two or more operands, and its casts. Its only subclass is Tensor
  (tensor.py), so every ElementwiseMixin is a Tensor."""
  __slots__ = ()
  if TYPE_CHECKING:  # what the methods below use from Tensor and its other mixins, beyond TensorStub, for mypy
    def _broadcasted(self, y: Tensor | Any, reverse: bool = False) -> tuple[Tensor, Tensor]: ...
    def __neg__(self) -> Tensor: ...

  def cast(self, dtype: DType | str) -> Tensor:
    """Convert to another dtype (floats to ints truncate toward zero).

    >>> Tensor([-1.7, 2.7]).cast('int32').tolist()
    [-1, 2]
    """
    dt = to_dtype(dtype)
    return cast("Tensor", self) if dt == self.dtype else self._apply_uop(lambda x: UOp(Ops.CAST, dt, (x,)))

  def bitcast(self, dtype: DType | str) -> Tensor:
    """Reinterpret the bits as another dtype of the same size.

    >>> Tensor([1.0]).bitcast('int32').item()
    1065353216
    """
    dt = to_dtype(dtype)
    if dt.itemsize != self.dtype.itemsize: raise TypeError(f"bitcast: {self.dtype} and {dt} differ in size")
    # a bool is one bit in registers and a 0/1 byte in memory: its byte reinterpretation is a value cast
    if self.dtype.is_bool or dt.is_bool: return self.cast(dt)
    return cast("Tensor", self) if dt == self.dtype else self._apply_uop(lambda x: UOp(Ops.BITCAST, dt, (x,)))

  def _to_float(self) -> Tensor: return self.cast(least_upper_float(self.dtype))

  def _binop(self, op: Ops, y: Tensor | Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    return a._apply_uop(lambda p, q: p.alu(op, q), b)

  def add(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Elementwise sum (`+`), with broadcasting and torch's type promotion.

    >>> (Tensor([1, 2]) + Tensor([[10], [20]])).tolist()
    [[11, 12], [21, 22]]
    """
    return self._binop(Ops.ADD, x, reverse)

  def sub(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Elementwise difference (`-`); bool operands are an error, as in torch.

    >>> (Tensor([5, 7]) - 2).tolist()
    [3, 5]
    """
    a, b = self._broadcasted(x, reverse)
    x_is_bool = isinstance(x, bool) or (isinstance(x, ElementwiseMixin) and x.dtype.is_bool)
    if self.dtype.is_bool or a.dtype.is_bool or x_is_bool:
      raise TypeError("subtraction with a bool operand is not supported (as in torch); use logical_xor, ^ or ~")
    return a._apply_uop(lambda p, q: p.alu(Ops.SUB, q), b)

  def mul(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Elementwise product (`*`).

    >>> (Tensor([1, 2]) * 1.5).tolist()
    [1.5, 3.0]
    """
    return self._binop(Ops.MUL, x, reverse)

  def div(self, x: Tensor | Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (ints become float); rounding_mode "trunc" or "floor" rounds like torch.

    >>> (Tensor([7, -7]) / 2).tolist()
    [3.5, -3.5]
    """
    if rounding_mode == "floor": return self.floordiv(x, reverse)
    a, b = self._broadcasted(x, reverse)
    if rounding_mode == "trunc": return a._idiv_trunc(b) if a.dtype.is_int else a.div(b).trunc()
    if rounding_mode is not None:
      raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = a._to_float(), b._to_float()
    return a._apply_uop(lambda p, q: p.alu(Ops.FDIV, q), b)

  def idiv(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Division rounding toward zero, as C and tinygrad's idiv: the same as div(x, rounding_mode="trunc").

    >>> Tensor([7, -7]).idiv(2).tolist()
    [3, -3]
    """
    return self.div(x, reverse, rounding_mode="trunc")

  def _idiv_trunc(self, b: Tensor) -> Tensor:
    # C division traps on x/0 and INT_MIN/-1: divide by a safe divisor and patch those lanes as numpy does (0, -x)
    safe = (b == 0) | (b == -1) if not self.dtype.is_unsigned else (b == 0)
    q = self._apply_uop(lambda p, q: p.alu(Ops.IDIV, q), safe.where(1, b))
    if self.dtype.is_unsigned: return (b == 0).where(0, q)
    return (b == 0).where(0, (b == -1).where(-self, q))

  def floordiv(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Division rounding toward negative infinity, as Python's //; an int divided by zero gives 0, as numpy.

    >>> (Tensor([7, -7, 7]) // Tensor([2, 2, 0])).tolist()
    [3, -4, 0]
    """
    a, b = self._broadcasted(x, reverse)
    if a.dtype.is_bool: raise TypeError("floor division of bool tensors is not supported")
    if a.dtype.is_float: return (a / b).floor()
    return a._int_floordiv_mod(b)[0]

  def mod(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Remainder with the sign of the divisor, as Python's % and torch.remainder; an int modulo zero gives 0, as
    numpy.

    >>> (Tensor([7, -7, 7]) % Tensor([3, 3, 0])).tolist()
    [1, 2, 0]
    """
    a, b = self._broadcasted(x, reverse)
    if a.dtype.is_bool: raise TypeError("modulo of bool tensors is not supported")
    if not a.dtype.is_float: return a._int_floordiv_mod(b)[1]
    return _float_remainder(a, b, floor=True)

  def fmod(self, x: Tensor | Any) -> Tensor:
    """Remainder with the sign of the dividend, as C's fmod (torch.fmod), exact for floats; an int modulo zero gives
    0, as numpy (torch raises).

    >>> Tensor([7.5, -7.5]).fmod(2).tolist()
    [1.5, -1.5]
    """
    a, b = self._broadcasted(x)
    if a.dtype.is_bool: raise TypeError("fmod of bool tensors is not supported")
    if a.dtype.is_float: return _float_remainder(a, b, floor=False)
    return b.eq(0).where(0, a - a._idiv_trunc(b) * b)

  def _int_floordiv_mod(self, b: Tensor) -> tuple[Tensor, Tensor]:
    # truncating division, then one step down where the signs differ and it was inexact; x//0 and x%0 are 0
    q = self._idiv_trunc(b)
    r = self - q * b
    if not self.dtype.is_unsigned:
      step = r.ne(0) & ((r < 0) ^ (b < 0)) & b.ne(0)
      q, r = step.where(q - 1, q), step.where(r + b, r)
    return q, b.eq(0).where(0, r)

  def pow(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Elementwise power; int ** int stays an int, negative bases with integer exponents keep their sign.
    An int tensor to a negative Python int is a ValueError (as numpy); with a tensor exponent it rounds (2 ** -1 -> 0).

    >>> (Tensor([-2, 3]) ** 3).tolist()
    [-8, 27]
    """
    return tensor_pow(cast("Tensor", self), x, reverse)

  def maximum(self, x: Tensor | Any) -> Tensor:
    """The elementwise larger of two tensors (NaN propagates).

    >>> Tensor([1, 5]).maximum(Tensor([3, 2])).tolist()
    [3, 5]
    """
    return self._binop(Ops.MAX, x)

  def minimum(self, x: Tensor | Any) -> Tensor:
    """The elementwise smaller of two tensors (NaN propagates).

    >>> Tensor([1, 5]).minimum(3).tolist()
    [1, 3]
    """
    a, b = self._broadcasted(x)
    return -((-a).maximum(-b)) if a.dtype.is_float else ~((~a).maximum(~b))

  def _broadcast_all(self, *xs: Tensor | Any) -> list[Tensor]:
    """self and xs in their common dtype and broadcast shape."""
    t = cast("Tensor", self)
    for x in xs: t, _ = t._broadcasted(x)
    return [t] + [t._broadcasted(x)[1] for x in xs]

  def clamp(self, min: Tensor | Any = None, max: Tensor | Any = None) -> Tensor:
    """Limit the values to [min, max]; either bound may be None, a number or a tensor that broadcasts. A NaN in x or
    in a bound gives NaN; where min > max the result is max; the gradient reaches x inside [min, max], bounds
    included, and a tensor bound where it is chosen, as in torch.

    >>> Tensor([-2.0, 0.5, 3.0]).clamp(-1, 1).tolist()
    [-1.0, 0.5, 1.0]
    >>> Tensor([1, 5, 9]).clamp(max=Tensor([4, 4, 10])).tolist()
    [1, 4, 9]
    """
    if min is None and max is None: raise ArgumentError("clamp: at least one of min and max must be given")
    x = cast("Tensor", self)
    for name, bound in (("min", min), ("max", max)):
      if bound is None: continue
      _check_operand("clamp", name, bound)
      a, b = x._broadcasted(bound)
      out = (a < b) if name == "min" else (b < a)
      x = (out | b.ne(b) if a.dtype.is_float else out).where(b, a)
    return x

  def clip(self, min: Tensor | Any = None, max: Tensor | Any = None) -> Tensor:
    """The same as clamp.

    >>> Tensor([-2, 0, 3]).clip(-1, 1).tolist()
    [-1, 0, 1]
    """
    return self.clamp(min, max)

  def copysign(self, x: Tensor | Any) -> Tensor:
    """|self| with the sign of x (its sign bit: -0.0 and -NaN count as negative); ints become float, as in torch.

    >>> Tensor([1.0, -2.0, 3.0]).copysign(Tensor([-1.0, 1.0, -0.0])).tolist()
    [-1.0, 2.0, -3.0]
    """
    _check_operand("copysign", "the sign source", x)
    a, b = (t._to_float() for t in self._broadcasted(x))
    mag = a.abs()
    return b.signbit().where(-mag, mag)

  def lerp(self, end: Tensor | Any, weight: Tensor | Any) -> Tensor:
    """self + weight * (end - self), as torch computes it: from end's side for |weight| >= 1/2, so that weight 1
    gives exactly end. Ints become float; float16 and bfloat16 are computed in float32.

    >>> Tensor([0.0, 10.0]).lerp(Tensor([10.0, 20.0]), 0.25).tolist()
    [2.5, 12.5]
    """
    _check_operand("lerp", "end", end)
    _check_operand("lerp", "weight", weight)
    x, e, w = (t._to_float() for t in self._broadcast_all(end, weight))
    dt = x.dtype
    # float16 from float32 operands, so that a Python weight is not rounded to float16 first
    if dt.is_half: x, e, w = self.cast(dtypes.float32)._broadcast_all(end, weight)
    d = e - x
    return ((w < 0.5) & (w > -0.5)).where(x + w * d, e - d * (1 - w)).cast(dt)

  def logaddexp(self, x: Tensor | Any) -> Tensor:
    """log(exp(self) + exp(x)), without overflow: max + log1p(exp(-|difference|)). Ints become float.

    >>> round(Tensor([1000.0]).logaddexp(1000.0).item(), 3)
    1000.693
    """
    _check_operand("logaddexp", "x", x)
    a, b = (t._to_float() for t in self._broadcasted(x))
    dt = a.dtype
    if dt.is_half: a, b = a.cast(dtypes.float32), b.cast(dtypes.float32)
    # equal values (infinities of one sign included, where a - b is NaN) differ by 0
    d = a.eq(b).where(0.0, a - b)
    return (a.maximum(b) + (d > 0).where(-d, d).exp().log1p()).cast(dt)

  def isclose(self, x: Tensor | Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - x| <= atol + rtol * |x| elementwise, as torch: equal values (infinities included) are close, an
    infinity is close to nothing else, and NaN to nothing unless equal_nan. Ints compare in float64.

    >>> Tensor([1.0, 1.0, float('nan')]).isclose(Tensor([1.0 + 1e-6, 1.1, float('nan')]), equal_nan=True).tolist()
    [True, False, True]
    """
    _check_operand("isclose", "x", x)
    if rtol < 0 or atol < 0: raise ValueError(f"isclose: rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    a, b = self._broadcasted(x)
    if not a.dtype.is_float: a, b = a.cast(dtypes.float64), b.cast(dtypes.float64)
    close = a.eq(b) | (b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs()))
    return close | (a.isnan() & b.isnan()) if equal_nan else close

  def allclose(self, x: Tensor | Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element is close to x (see isclose); runs now.

    >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7]))
    True
    """
    return bool(self.isclose(x, rtol, atol, equal_nan).all().item())

  def where(self, x: Tensor | Any, y: Tensor | Any) -> Tensor:
    """Choose x where self is true, y elsewhere.

    >>> Tensor([True, False]).where(1, 2).tolist()
    [1, 2]
    """
    cond = self._truth()
    if isinstance(x, ElementwiseMixin): a, b = x._broadcasted(y)
    elif isinstance(y, ElementwiseMixin): b, a = y._broadcasted(x)
    else: a, b = type(self).full((), x, device=self.device)._broadcasted(y)
    shape = broadcast_shape(cond.shape, a.shape)
    c, a, b = cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)
    return c._apply_uop(lambda p, q, r: UOp(Ops.WHERE, q.dtype, (p, q, r)), a, b)

  def _cmp(self, op: Ops, y: Tensor | Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    return a._apply_uop(lambda p, q: p.alu(op, q), b)

  def __lt__(self, x: Tensor | Any) -> Tensor: return self._cmp(Ops.CMPLT, x)
  def __gt__(self, x: Tensor | Any) -> Tensor: return self._cmp(Ops.CMPLT, x, reverse=True)
  def __ge__(self, x: Tensor | Any) -> Tensor: return self._cmp_or_equal(x, reverse=False)
  def __le__(self, x: Tensor | Any) -> Tensor: return self._cmp_or_equal(x, reverse=True)
  def ne(self, x: Tensor | Any) -> Tensor:
    """Elementwise `!=` (bool).

    >>> Tensor([1, 2]).ne(2).tolist()
    [True, False]
    """
    return self._cmp(Ops.CMPNE, x)

  def eq(self, x: Tensor | Any) -> Tensor:
    """Elementwise `==` (bool).

    >>> Tensor([1, 2]).eq(2).tolist()
    [False, True]
    """
    return self.ne(x).logical_not()

  def __eq__(self, x: Tensor | Any) -> Tensor: return self.eq(x)  # type: ignore[override]
  def __ne__(self, x: Tensor | Any) -> Tensor: return self.ne(x)  # type: ignore[override]

  def _cmp_or_equal(self, x: Tensor | Any, reverse: bool) -> Tensor:
    # not(a < b) would call NaN >= 1 true; floats need "greater or equal" spelled out
    a, b = self._broadcasted(x, reverse)
    if not a.dtype.is_float: return (a < b).logical_not()
    return (b < a) | a.eq(b)

  def _truth(self) -> Tensor: return cast("Tensor", self) if self.dtype.is_bool else self.ne(0)

  def _logical_operand(self, x: Tensor | Any) -> Tensor:
    return (x if isinstance(x, ElementwiseMixin) else type(self)(x, device=self.device))._truth()

  def logical_not(self) -> Tensor:
    """True where the tensor is zero (or False).

    >>> Tensor([0, 2]).logical_not().tolist()
    [True, False]
    """
    return self._truth().ne(True)

  def logical_and(self, x: Tensor | Any) -> Tensor:
    """Elementwise `and` of the truth values (non-zero is true); the result is bool.

    >>> Tensor([1, 0, 3]).logical_and(Tensor([True, True, False])).tolist()
    [True, False, False]
    """
    return self._truth()._binop(Ops.AND, self._logical_operand(x))

  def logical_or(self, x: Tensor | Any) -> Tensor:
    """Elementwise `or` of the truth values (non-zero is true); the result is bool.

    >>> Tensor([1, 0, 0]).logical_or(0.5).tolist()
    [True, True, True]
    """
    return self._truth()._binop(Ops.OR, self._logical_operand(x))

  def logical_xor(self, x: Tensor | Any) -> Tensor:
    """Elementwise `xor` of the truth values (non-zero is true); the result is bool.

    >>> Tensor([1, 0]).logical_xor(Tensor([1, 1])).tolist()
    [False, True]
    """
    return self._truth().ne(self._logical_operand(x))

  def _bitwise(self, op: Ops, x: Tensor | Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if a.dtype.is_float: raise DTypeError(f"bitwise {op.name.lower()} needs int or bool tensors, got {a.dtype}")
    return a._apply_uop(lambda p, q: p.alu(op, q), b)

  def bitwise_and(self, x: Tensor | Any) -> Tensor:
    """Elementwise `&` of int or bool tensors.

    >>> Tensor([12, 10]).bitwise_and(6).tolist()
    [4, 2]
    """
    return self._bitwise(Ops.AND, x)

  def bitwise_or(self, x: Tensor | Any) -> Tensor:
    """Elementwise `|` of int or bool tensors.

    >>> Tensor([12, 10]).bitwise_or(1).tolist()
    [13, 11]
    """
    return self._bitwise(Ops.OR, x)

  def bitwise_xor(self, x: Tensor | Any) -> Tensor:
    """Elementwise `^` of int or bool tensors.

    >>> Tensor([12, 10]).bitwise_xor(6).tolist()
    [10, 12]
    """
    return self._bitwise(Ops.XOR, x)

  def bitwise_not(self) -> Tensor:
    """Elementwise `~`: flips every bit of an int, negates a bool.

    >>> Tensor([0, 5]).bitwise_not().tolist()
    [-1, -6]
    """
    if self.dtype.is_float: raise DTypeError(f"bitwise_not needs an int or bool tensor, got {self.dtype}")
    if self.dtype.is_bool: return self.logical_not()
    return self._bitwise(Ops.XOR, self.dtype.max() if self.dtype.is_unsigned else -1)

  def _shift(self, op: Ops, x: Tensor | Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if not a.dtype.is_int: raise TypeError(f"bit shifts need int tensors, got {a.dtype}")
    # C leaves shifts by the width or more, or by a negative amount, undefined; torch shifts every bit out
    in_range = (b < 8 * a.dtype.itemsize) & (b >= 0)
    shifted = a._apply_uop(lambda p, q: p.alu(op, q), in_range.where(b, 0))
    if op is Ops.SHL or a.dtype.is_unsigned: return in_range.where(shifted, 0)
    return in_range.where(shifted, -(a < 0).cast(a.dtype))  # all sign bits: -1 or 0

  def lshift(self, x: Tensor | int) -> Tensor:
    """Shift the bits of an int tensor left (`<<`); shifting by the width of the type or more, or by a negative
    amount, gives 0, as torch.

    >>> Tensor([1, 3]).lshift(2).tolist()
    [4, 12]
    """
    return self._shift(Ops.SHL, x)

  def rshift(self, x: Tensor | int) -> Tensor:
    """Shift the bits of an int tensor right (`>>`), keeping the sign of signed ints; shifting by the width of the
    type or more, or by a negative amount, leaves only the sign (0 or -1), as torch.

    >>> Tensor([-8, 8]).rshift(2).tolist()
    [-2, 2]
    """
    return self._shift(Ops.SHR, x)

  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __add__(self, x: Any) -> Tensor: return self.add(x)
  def __radd__(self, x: Any) -> Tensor: return self.add(x, True)
  def __sub__(self, x: Any) -> Tensor: return self.sub(x)
  def __rsub__(self, x: Any) -> Tensor: return self.sub(x, True)
  def __mul__(self, x: Any) -> Tensor: return self.mul(x)
  def __rmul__(self, x: Any) -> Tensor: return self.mul(x, True)
  def __truediv__(self, x: Any) -> Tensor: return self.div(x)
  def __rtruediv__(self, x: Any) -> Tensor: return self.div(x, True)
  def __floordiv__(self, x: Any) -> Tensor: return self.floordiv(x)
  def __rfloordiv__(self, x: Any) -> Tensor: return self.floordiv(x, True)
  def __mod__(self, x: Any) -> Tensor: return self.mod(x)
  def __rmod__(self, x: Any) -> Tensor: return self.mod(x, True)
  def __pow__(self, x: Any) -> Tensor: return self.pow(x)
  def __rpow__(self, x: Any) -> Tensor: return self.pow(x, True)
  def __and__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x)
  def __rand__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x, True)
  def __or__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x)
  def __ror__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x, True)
  def __xor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x)
  def __rxor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x, True)
  def __lshift__(self, x: Any) -> Tensor: return self._shift(Ops.SHL, x)
  def __rlshift__(self, x: Any) -> Tensor: return self._shift(Ops.SHL, x, True)
  def __rshift__(self, x: Any) -> Tensor: return self._shift(Ops.SHR, x)
  def __rrshift__(self, x: Any) -> Tensor: return self._shift(Ops.SHR, x, True)

  # ---- dtype shortcuts, defined last: in the class body `int`, `bool` and `float` would shadow the builtins in
  # every annotation that follows them ----

  def is_floating_point(self) -> bool:
    """Whether the dtype is a float type.

    >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
    (True, False)
    """
    return self.dtype.is_float

  def float(self) -> Tensor:
    """Cast to float32.

    >>> Tensor([1, 2]).float().tolist()
    [1.0, 2.0]
    """
    return self.cast(dtypes.float32)

  def half(self) -> Tensor:
    """Cast to float16.

    >>> Tensor([1, 2]).half().dtype
    dtypes.float16
    """
    return self.cast(dtypes.float16)

  def double(self) -> Tensor:
    """Cast to float64.

    >>> Tensor([1, 2]).double().dtype
    dtypes.float64
    """
    return self.cast(dtypes.float64)

  def int(self) -> Tensor:
    """Cast to int32 (floats truncate toward zero).

    >>> Tensor([1.7, -1.7]).int().tolist()
    [1, -1]
    """
    return self.cast(dtypes.int32)

  def long(self) -> Tensor:
    """Cast to int64 (floats truncate toward zero).

    >>> Tensor([2.5]).long().dtype
    dtypes.int64
    """
    return self.cast(dtypes.int64)

  def bool(self) -> Tensor:
    """Cast to bool (non-zero is True).

    >>> Tensor([0, 2]).bool().tolist()
    [False, True]
    """
    return self.cast(dtypes.bool)
