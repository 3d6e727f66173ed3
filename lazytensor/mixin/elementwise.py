"""Elementwise ops: arithmetic, comparisons, where, logic and bits on two (or three) tensors, with their operators;
negation, rounding, sign and tests of values; dtype casts. Padding and joining tensors are in mixin/join.py.

Operands broadcast against each other and promote to a common dtype as in torch (_broadcasted).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from lazytensor.dtype import (
  DType,
  dtypes,
  least_upper_float,
  promote_types,
  promote_with_0d,
  result_type_scalar,
  to_dtype,
)
from lazytensor.graph import const_uop
from lazytensor.helpers import ArgumentError, DTypeError
from lazytensor.mixin.shapes import ShapesMixin
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="ElementwiseMixin")

def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  nd = max(len(s) for s in shapes)
  padded = [(1,) * (nd - len(s)) + s for s in shapes]
  out = []
  for dims in zip(*padded):
    non1 = {d for d in dims if d != 1}
    if len(non1) > 1: raise ValueError(f"shapes {' and '.join(str(s) for s in shapes)} cannot be broadcast together")
    out.append(non1.pop() if non1 else 1)
  return tuple(out)

def _float_remainder(a: TensorT, b: TensorT, floor: bool) -> TensorT:
  """C's fmod (floor: Python's %) of two float tensors, exactly: MOD is C's fmod (on the CPU float64 arithmetic where
  that is exact, codegen/transcendental.py; libm's elsewhere). MOD has no derivative rule, so its gradient,
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

def _float_ge(a: UOp, b: UOp) -> UOp:
  """a >= b of floats, false where either is NaN: (b < a) | a.eq(b), as the nodes of one op."""
  eq = a.alu(Ops.CMPNE, b).alu(Ops.CMPNE, const_uop(True, dtypes.bool, a.device, a.shape))
  return b.alu(Ops.CMPLT, a).alu(Ops.OR, eq)

def _tensor_result_type(a: Any, b: Any) -> DType:
  """The dtype of an op between two tensors, as torch's: a 0-d one is weak against one with dims (promote_with_0d)."""
  if (a.ndim == 0) == (b.ndim == 0): return promote_types(a.dtype, b.dtype)
  return promote_with_0d(a.dtype, b.dtype) if b.ndim == 0 else promote_with_0d(b.dtype, a.dtype)

def _check_operand(op: str, name: str, v: Any) -> None:
  if not isinstance(v, (ElementwiseMixin, bool, int, float, np.generic, list, np.ndarray)):
    raise TypeError(f"{op}: {name} must be a Tensor or a number, got {type(v).__name__}")

class ElementwiseMixin(ShapesMixin):
  """Tensor's elementwise methods, its casts, pad, cat and stack: on the movement mixin and the primitives."""
  __slots__ = ()

  # ---- operands: promoted to a common dtype and broadcast to a common shape ----

  def _broadcasted(self, y: Self | Any, reverse: bool = False) -> tuple[Self, Self]:
    """self and y (a Tensor, number, list or array) in their common dtype and broadcast shape; reverse swaps them."""
    if self._is_tensor(y):
      mine, its = self.lazydata, y.lazydata
      # the common case of an eager op, two tensors alike, answered without promotion and broadcasting
      if mine.dtype is its.dtype and mine.shape == its.shape and mine.device == its.device:
        return (y, self) if reverse else (self, y)
      dt = _tensor_result_type(self, y)
    elif isinstance(y, (bool, int, float, np.generic)):
      y = y.item() if isinstance(y, np.generic) else y
      dt = result_type_scalar(self.dtype, y)
      # made in self's shape at once: the broadcast below has nothing left to do (no reshape and expand nodes)
      y = type(self)(const_uop(y, dt, self.device, self.shape))
      if dt is self.dtype: return (y, self) if reverse else (self, y)  # nothing to cast either
    elif isinstance(y, (list, np.ndarray)):
      y = type(self)(y, device=self.device)
      dt = promote_types(self.dtype, y.dtype)
    else: raise TypeError(f"unsupported operand type {type(y).__name__} for a Tensor op")
    if y.device != self.device: raise ValueError(f"tensors are on different devices: {self.device} and {y.device}")
    x = self
    if reverse: x, y = y, x
    out_shape = broadcast_shape(x.shape, y.shape)
    return x._broadcast_to(out_shape, dt), y._broadcast_to(out_shape, dt)

  def _broadcasted_float(self, y: Self | Any, reverse: bool = False) -> tuple[Self, Self]:
    """self and y as _broadcasted gives them, in the float dtype that ints and bools become (an op computed in
    floats): each operand converted from its own value, as torch does, not from their common int dtype, where a
    value could wrap (uint8 / -300 is -0.02, not 6 / 212)."""
    a, b = self._broadcasted(y, reverse)
    if a.dtype.is_float: return a, b
    ft = least_upper_float(a.dtype)
    return self.cast(ft)._broadcasted(y.cast(ft) if self._is_tensor(y) else y, reverse)

  def _const_operand(self, y: Any) -> UOp | None:
    """y as a constant node in self's shape when y is a Python number that keeps self's dtype (`x * 2`, `x <= 0`):
    the node _broadcasted would wrap, built without the Tensor; None for anything else."""
    if type(y) in (float, int, bool) and result_type_scalar(self.dtype, y) is self.dtype:
      return const_uop(y, self.dtype, self.device, self.shape)
    return None

  def _as_value_for(self, x: Any, shape: tuple[int, ...]) -> Self:
    """x as a tensor of this dtype and device, broadcast to `shape` (what assign and setitem write)."""
    t = x if self._is_tensor(x) else type(self)(x, device=self.device, dtype=self.dtype)
    if t.device != self.device: raise ValueError(f"cannot write a tensor on {t.device} into one on {self.device}")
    # leading dims of size 1 beyond the target's are dropped, as torch does (t[0] = ones(1, 1, 3) for a (2, 3) t)
    extra = t.ndim - len(shape)
    if extra > 0 and all(s == 1 for s in t.shape[:extra]): t = t.reshape(t.shape[extra:])
    try: full = broadcast_shape(t.shape, shape)
    except ValueError: full = None
    if full != shape: raise ValueError(f"cannot write a value of shape {t.shape} into a target of shape {shape}")
    return t._broadcast_to(shape, self.dtype)

  def cast(self, dtype: DType | str) -> Self:
    """Convert to another dtype (floats to ints truncate toward zero).

    >>> Tensor([-1.7, 2.7]).cast('int32').tolist()
    [-1, 2]
    """
    dt = to_dtype(dtype)
    return self if dt == self.dtype else self._apply_uop(lambda x: UOp(Ops.CAST, dt, (x,)))

  def bitcast(self, dtype: DType | str) -> Self:
    """Reinterpret the bits as another dtype of the same size.

    >>> Tensor([1.0]).bitcast('int32').item()
    1065353216
    """
    dt = to_dtype(dtype)
    if dt.itemsize != self.dtype.itemsize: raise TypeError(f"bitcast: {self.dtype} and {dt} differ in size")
    # a bool is one bit in registers and a 0/1 byte in memory: its byte reinterpretation is a value cast
    if self.dtype.is_bool or dt.is_bool: return self.cast(dt)
    return self if dt == self.dtype else self._apply_uop(lambda x: UOp(Ops.BITCAST, dt, (x,)))

  def _to_float(self) -> Self: return self.cast(least_upper_float(self.dtype))

  def _binop(self, op: Ops, y: Self | Any, reverse: bool = False) -> Self:
    if (c := self._const_operand(y)) is not None:
      return self._apply_uop(lambda p: c.alu(op, p) if reverse else p.alu(op, c))
    a, b = self._broadcasted(y, reverse)
    return a._apply_uop(lambda p, q: p.alu(op, q), b)

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

  def _broadcast_all(self, *xs: Self | Any) -> list[Self]:
    """self and xs in their common dtype and broadcast shape."""
    t = self
    for x in xs: t, _ = t._broadcasted(x)
    return [t] + [t._broadcasted(x)[1] for x in xs]

  def clamp(self, min: Self | Any = None, max: Self | Any = None) -> Self:
    """Limit the values to [min, max]; either bound may be None, a number or a tensor that broadcasts. A NaN in x or
    in a bound gives NaN; where min > max the result is max; the gradient reaches x inside [min, max], bounds
    included, and a tensor bound where it is chosen, as in torch.

    >>> Tensor([-2.0, 0.5, 3.0]).clamp(-1, 1).tolist()
    [-1.0, 0.5, 1.0]
    >>> Tensor([1, 5, 9]).clamp(max=Tensor([4, 4, 10])).tolist()
    [1, 4, 9]
    """
    if min is None and max is None: raise ArgumentError("clamp: at least one of min and max must be given")
    x = self
    for name, bound in (("min", min), ("max", max)):
      if bound is None: continue
      _check_operand("clamp", name, bound)
      a, b = x._broadcasted(bound)
      out = (a < b) if name == "min" else (b < a)
      x = (out | b.ne(b) if a.dtype.is_float else out).where(b, a)
    return x

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
    _check_operand("copysign", "the sign source", x)
    a, b = self._broadcasted_float(x)
    mag = a.abs()
    return b.signbit().where(-mag, mag)

  def lerp(self, end: Self | Any, weight: Self | Any) -> Self:
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

  def isclose(self, x: Self | Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Self:
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

  def where(self, x: Self | Any, y: Self | Any) -> Self:
    """Choose x where self is true, y elsewhere.

    >>> Tensor([True, False]).where(1, 2).tolist()
    [1, 2]
    """
    cond = self._truth()
    # a number and a tensor of cond's shape that it keeps the dtype of (relu's `(x <= 0).where(0, x)`): one op
    def alike(t: Any) -> bool: return self._is_tensor(t) and t.shape == cond.shape and t.device == cond.device
    if alike(y) and (k := y._const_operand(x)) is not None:
      return cond._apply_uop(lambda p, r: UOp(Ops.WHERE, r.dtype, (p, k, r)), y)
    if alike(x) and (k2 := x._const_operand(y)) is not None:
      return cond._apply_uop(lambda p, q: UOp(Ops.WHERE, q.dtype, (p, q, k2)), x)
    if self._is_tensor(x): a, b = x._broadcasted(y)
    elif self._is_tensor(y): b, a = y._broadcasted(x)
    else: a, b = type(self).full((), x, device=self.device)._broadcasted(y)
    shape = broadcast_shape(cond.shape, a.shape)
    c, a, b = cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)
    return c._apply_uop(lambda p, q, r: UOp(Ops.WHERE, q.dtype, (p, q, r)), a, b)

  def _cmp(self, op: Ops, y: Self | Any, reverse: bool = False) -> Self:
    return self._binop(op, y, reverse)

  def lt(self, x: Self | Any) -> Self:
    """Elementwise `<` (bool); also `less`.

    >>> Tensor([1, 2, 3]).lt(2).tolist()
    [True, False, False]
    """
    return self._cmp(Ops.CMPLT, x)

  def gt(self, x: Self | Any) -> Self:
    """Elementwise `>` (bool); also `greater`.

    >>> Tensor([1, 2, 3]).gt(2).tolist()
    [False, False, True]
    """
    return self._cmp(Ops.CMPLT, x, reverse=True)

  def ge(self, x: Self | Any) -> Self:
    """Elementwise `>=` (bool; False at NaN); also `greater_equal`.

    >>> Tensor([1, 2, 3]).ge(2).tolist()
    [False, True, True]
    """
    return self._cmp_or_equal(x, reverse=False)

  def le(self, x: Self | Any) -> Self:
    """Elementwise `<=` (bool; False at NaN); also `less_equal`.

    >>> Tensor([1, 2, 3]).le(2).tolist()
    [True, True, False]
    """
    return self._cmp_or_equal(x, reverse=True)

  __lt__, __gt__, __ge__, __le__ = lt, gt, ge, le

  def ne(self, x: Self | Any) -> Self:
    """Elementwise `!=` (bool).

    >>> Tensor([1, 2]).ne(2).tolist()
    [True, False]
    """
    return self._cmp(Ops.CMPNE, x)

  def eq(self, x: Self | Any) -> Self:
    """Elementwise `==` (bool).

    >>> Tensor([1, 2]).eq(2).tolist()
    [False, True]
    """
    return self.ne(x).logical_not()

  def __eq__(self, x: Self | Any) -> Self: return self.eq(x)  # type: ignore[override]
  def __ne__(self, x: Self | Any) -> Self: return self.ne(x)  # type: ignore[override]

  def _cmp_or_equal(self, x: Self | Any, reverse: bool) -> Self:
    # not(a < b) would call NaN >= 1 true; floats need "greater or equal" spelled out
    if self.dtype.is_float and (k := self._const_operand(x)) is not None:
      return self._apply_uop(lambda p: _float_ge(k, p) if reverse else _float_ge(p, k))
    a, b = self._broadcasted(x, reverse)
    if not a.dtype.is_float: return (a < b).logical_not()
    return a._apply_uop(_float_ge, b)

  def _truth(self) -> Self: return self if self.dtype.is_bool else self.ne(0)

  def _logical_operand(self, x: Self | Any) -> Self:
    return (x if self._is_tensor(x) else type(self)(x, device=self.device))._truth()

  def logical_not(self) -> Self:
    """True where the tensor is zero (or False).

    >>> Tensor([0, 2]).logical_not().tolist()
    [True, False]
    """
    return self._truth().ne(True)

  def logical_and(self, x: Self | Any) -> Self:
    """Elementwise `and` of the truth values (non-zero is true); the result is bool.

    >>> Tensor([1, 0, 3]).logical_and(Tensor([True, True, False])).tolist()
    [True, False, False]
    """
    return self._truth()._binop(Ops.AND, self._logical_operand(x))

  def logical_or(self, x: Self | Any) -> Self:
    """Elementwise `or` of the truth values (non-zero is true); the result is bool.

    >>> Tensor([1, 0, 0]).logical_or(0.5).tolist()
    [True, True, True]
    """
    return self._truth()._binop(Ops.OR, self._logical_operand(x))

  def logical_xor(self, x: Self | Any) -> Self:
    """Elementwise `xor` of the truth values (non-zero is true); the result is bool.

    >>> Tensor([1, 0]).logical_xor(Tensor([1, 1])).tolist()
    [False, True]
    """
    return self._truth().ne(self._logical_operand(x))

  def _bitwise(self, op: Ops, x: Self | Any, reverse: bool = False) -> Self:
    a, b = self._broadcasted(x, reverse)
    if a.dtype.is_float: raise DTypeError(f"bitwise {op.name.lower()} needs int or bool tensors, got {a.dtype}")
    return a._apply_uop(lambda p, q: p.alu(op, q), b)

  def bitwise_and(self, x: Self | Any) -> Self:
    """Elementwise `&` of int or bool tensors.

    >>> Tensor([12, 10]).bitwise_and(6).tolist()
    [4, 2]
    """
    return self._bitwise(Ops.AND, x)

  def bitwise_or(self, x: Self | Any) -> Self:
    """Elementwise `|` of int or bool tensors.

    >>> Tensor([12, 10]).bitwise_or(1).tolist()
    [13, 11]
    """
    return self._bitwise(Ops.OR, x)

  def bitwise_xor(self, x: Self | Any) -> Self:
    """Elementwise `^` of int or bool tensors.

    >>> Tensor([12, 10]).bitwise_xor(6).tolist()
    [10, 12]
    """
    return self._bitwise(Ops.XOR, x)

  def bitwise_not(self) -> Self:
    """Elementwise `~`: flips every bit of an int, negates a bool.

    >>> Tensor([0, 5]).bitwise_not().tolist()
    [-1, -6]
    """
    if self.dtype.is_float: raise DTypeError(f"bitwise_not needs an int or bool tensor, got {self.dtype}")
    if self.dtype.is_bool: return self.logical_not()
    return self._bitwise(Ops.XOR, self.dtype.max() if self.dtype.is_unsigned else -1)

  def _shift(self, op: Ops, x: Self | Any, reverse: bool = False) -> Self:
    a, b = self._broadcasted(x, reverse)
    if not a.dtype.is_int: raise TypeError(f"bit shifts need int tensors, got {a.dtype}")
    # C leaves shifts by the width or more, or by a negative amount, undefined; torch shifts every bit out
    in_range = (b < 8 * a.dtype.itemsize) & (b >= 0)
    shifted = a._apply_uop(lambda p, q: p.alu(op, q), in_range.where(b, 0))
    if op is Ops.SHL or a.dtype.is_unsigned: return in_range.where(shifted, 0)
    return in_range.where(shifted, -(a < 0).cast(a.dtype))  # all sign bits: -1 or 0

  def lshift(self, x: Self | int) -> Self:
    """Shift the bits of an int tensor left (`<<`); shifting by the width of the type or more, or by a negative
    amount, gives 0, as torch.

    >>> Tensor([1, 3]).lshift(2).tolist()
    [4, 12]
    """
    return self._shift(Ops.SHL, x)

  def rshift(self, x: Self | int) -> Self:
    """Shift the bits of an int tensor right (`>>`), keeping the sign of signed ints; shifting by the width of the
    type or more, or by a negative amount, leaves only the sign (0 or -1), as torch.

    >>> Tensor([-8, 8]).rshift(2).tolist()
    [-2, 2]
    """
    return self._shift(Ops.SHR, x)

  def __invert__(self) -> Self: return self.bitwise_not()
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
  def __and__(self, x: Any) -> Self: return self._bitwise(Ops.AND, x)
  def __rand__(self, x: Any) -> Self: return self._bitwise(Ops.AND, x, True)
  def __or__(self, x: Any) -> Self: return self._bitwise(Ops.OR, x)
  def __ror__(self, x: Any) -> Self: return self._bitwise(Ops.OR, x, True)
  def __xor__(self, x: Any) -> Self: return self._bitwise(Ops.XOR, x)
  def __rxor__(self, x: Any) -> Self: return self._bitwise(Ops.XOR, x, True)
  def __lshift__(self, x: Any) -> Self: return self._shift(Ops.SHL, x)
  def __rlshift__(self, x: Any) -> Self: return self._shift(Ops.SHL, x, True)
  def __rshift__(self, x: Any) -> Self: return self._shift(Ops.SHR, x)
  def __rrshift__(self, x: Any) -> Self: return self._shift(Ops.SHR, x, True)

  # ---- one tensor: negation, rounding, sign and tests of values ----

  def _unary(self, op: Ops) -> Self: return self._apply_uop(lambda x: UOp(op, x.dtype, (x,)))

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

  # ---- torch's conveniences on top of cast ----

  def type_as(self, other: Self) -> Self:
    """Cast to other's dtype, as torch's type_as.

    >>> Tensor([1.5, 2.5]).type_as(Tensor([1, 2])).tolist()
    [1, 2]
    """
    if not self._is_tensor(other): raise TypeError(f"type_as: expected a Tensor, got {type(other).__name__}")
    return self.cast(other.dtype)

  # ---- dtype shortcuts, defined last: in the class body `int`, `bool` and `float` would shadow the builtins in
  # every annotation that follows them ----

  def is_floating_point(self) -> bool:
    """Whether the dtype is a float type.

    >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
    (True, False)
    """
    return self.dtype.is_float

  def float(self) -> Self:
    """Cast to float32.

    >>> Tensor([1, 2]).float().tolist()
    [1.0, 2.0]
    """
    return self.cast(dtypes.float32)

  def half(self) -> Self:
    """Cast to float16.

    >>> Tensor([1, 2]).half().dtype
    dtypes.float16
    """
    return self.cast(dtypes.float16)

  def double(self) -> Self:
    """Cast to float64.

    >>> Tensor([1, 2]).double().dtype
    dtypes.float64
    """
    return self.cast(dtypes.float64)

  def int(self) -> Self:
    """Cast to int32 (floats truncate toward zero).

    >>> Tensor([1.7, -1.7]).int().tolist()
    [1, -1]
    """
    return self.cast(dtypes.int32)

  def long(self) -> Self:
    """Cast to int64 (floats truncate toward zero).

    >>> Tensor([2.5]).long().dtype
    dtypes.int64
    """
    return self.cast(dtypes.int64)

  def bfloat16(self) -> Self:
    """Cast to bfloat16.

    >>> Tensor([1.0, 3.14159]).bfloat16().tolist()
    [1.0, 3.140625]
    """
    return self.cast(dtypes.bfloat16)

  def short(self) -> Self:
    """Cast to int16 (floats truncate toward zero).

    >>> Tensor([2.5, -1.5]).short().tolist()
    [2, -1]
    """
    return self.cast(dtypes.int16)

  def bool(self) -> Self:
    """Cast to bool (non-zero is True).

    >>> Tensor([0, 2]).bool().tolist()
    [False, True]
    """
    return self.cast(dtypes.bool)

# (mantissa bits, exponent bits) of each float dtype (numpy has no bfloat16, so its finfo cannot serve)
_FLOAT_BITS = {"float16": (10, 5), "bfloat16": (7, 8), "float32": (23, 8), "float64": (52, 11)}

def _largest_finite(dt: DType) -> float:
  mantissa, exponent = _FLOAT_BITS[dt.name]
  return (2 - 2.0 ** -mantissa) * 2.0 ** (2 ** (exponent - 1) - 1)  # all mantissa bits set, the largest exponent
