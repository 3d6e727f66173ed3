"""Elementwise functions of one tensor: roots, exponentials, trigonometry, rounding, sign and activations."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from lazytensor.dtype import DType
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

class UnaryMixin:
  """Tensor's unary math methods. Its only subclass is Tensor (tensor.py), so every UnaryMixin is a Tensor."""
  __slots__ = ()
  if TYPE_CHECKING:  # what the methods below use from Tensor and its other mixins, declared for mypy
    @property
    def dtype(self) -> DType: ...
    def _apply_uop(self, fn: Callable[..., UOp], *others: Tensor) -> Tensor: ...
    def _to_float(self) -> Tensor: ...
    def maximum(self, x: Tensor | Any) -> Tensor: ...
    def ne(self, x: Tensor | Any) -> Tensor: ...
    def __mul__(self, x: Any) -> Tensor: ...
    def __sub__(self, x: Any) -> Tensor: ...
    def __lt__(self, x: Tensor | Any) -> Tensor: ...
    def __gt__(self, x: Tensor | Any) -> Tensor: ...
    def __le__(self, x: Tensor | Any) -> Tensor: ...
    def __ge__(self, x: Tensor | Any) -> Tensor: ...

  def _unary(self, op: Ops) -> Tensor: return self._apply_uop(lambda x: UOp(op, x.dtype, (x,)))

  def neg(self) -> Tensor:
    """Elementwise negation (`-x`).

    >>> (-Tensor([1, -2])).tolist()
    [-1, 2]
    """
    if self.dtype.is_bool: raise TypeError("negation of a bool tensor is not supported; use logical_not or ~")
    return self._unary(Ops.NEG)

  __neg__ = neg

  def reciprocal(self) -> Tensor:
    """1 / x (ints become float).

    >>> Tensor([2, 4]).reciprocal().tolist()
    [0.5, 0.25]
    """
    return self._to_float()._unary(Ops.RECIP)

  def sqrt(self) -> Tensor:
    """The square root (ints become float; negative values give NaN).

    >>> Tensor([4.0, 9.0]).sqrt().tolist()
    [2.0, 3.0]
    """
    return self._to_float()._unary(Ops.SQRT)

  def rsqrt(self) -> Tensor:
    """1 / sqrt(x).

    >>> Tensor([4.0]).rsqrt().tolist()
    [0.5]
    """
    return self.sqrt().reciprocal()

  def exp2(self) -> Tensor:
    """2 ** x, elementwise.

    >>> Tensor([3.0, -1.0]).exp2().tolist()
    [8.0, 0.5]
    """
    return self._to_float()._unary(Ops.EXP2)

  def log2(self) -> Tensor:
    """The base-2 logarithm.

    >>> Tensor([8.0, 0.5]).log2().tolist()
    [3.0, -1.0]
    """
    return self._to_float()._unary(Ops.LOG2)

  def exp(self) -> Tensor:
    """e ** x, elementwise.

    >>> round(Tensor([1.0]).exp().item(), 5)
    2.71828
    """
    return (self._to_float() * (1 / math.log(2))).exp2()

  def log(self) -> Tensor:
    """The natural logarithm.

    >>> round(Tensor([2.718281828]).log().item(), 5)
    1.0
    """
    return self.log2() * math.log(2)

  def sin(self) -> Tensor:
    """The sine (radians).

    >>> Tensor([0.0]).sin().tolist()
    [0.0]
    """
    return self._to_float()._unary(Ops.SIN)

  def cos(self) -> Tensor:
    """Cosine, from the half angle (cos x = 1 - 2 sin(x/2)^2): x/2 is exact, pi/2 - x loses all digits for large x.

    >>> Tensor([0.0]).cos().tolist()
    [1.0]
    """
    s = (self._to_float() * 0.5).sin()
    return 1 - 2 * s * s

  def trunc(self) -> Tensor:
    """Round toward zero.

    >>> Tensor([-1.5, 1.5]).trunc().tolist()
    [-1.0, 1.0]
    """
    return cast("Tensor", self) if not self.dtype.is_float else self._unary(Ops.TRUNC)

  def floor(self) -> Tensor:
    """Round toward negative infinity.

    >>> Tensor([-1.5, 1.5]).floor().tolist()
    [-2.0, 1.0]
    """
    if not self.dtype.is_float: return cast("Tensor", self)
    t = self.trunc()
    return (self < t).where(t - 1, t)

  def ceil(self) -> Tensor:
    """Round toward positive infinity.

    >>> Tensor([-1.5, 1.5]).ceil().tolist()
    [-1.0, 2.0]
    """
    if not self.dtype.is_float: return cast("Tensor", self)
    t = self.trunc()
    return (self > t).where(t + 1, t)

  def round(self) -> Tensor:
    """Round to the nearest integer, halves to even (as torch and numpy).

    >>> Tensor([0.5, 1.5, 2.5, -0.5]).round().tolist()
    [0.0, 2.0, 2.0, -0.0]
    """
    if not self.dtype.is_float: return cast("Tensor", self)
    # from trunc and the exact fraction x - trunc(x): x + 0.5 would round before the floor for large or near-half x
    t = self.trunc()
    frac = (self - t).abs()
    t_odd = ((t * 0.5).trunc() * 2).ne(t)
    away = (frac > 0.5) | ((frac == 0.5) & t_odd)
    return away.where(t + (self > 0).where(1.0, -1.0).cast(self.dtype), t)

  def relu(self) -> Tensor:
    """max(x, 0); NaN stays NaN and, as torch, the gradient at 0 is 0 (maximum would split it, giving 0.5).

    >>> Tensor([-1.0, 2.0]).relu().tolist()
    [0.0, 2.0]
    """
    return (self <= 0).where(0, self)

  def sigmoid(self) -> Tensor:
    """1 / (1 + exp(-x)), computed from e = exp(-|x|) <= 1: exp(-x) overflows to inf for x < -88 (float32), and
    the chain rule through that inf turns the gradient (zero there) into NaN.

    >>> Tensor([0.0]).sigmoid().tolist()
    [0.5]
    """
    x = self._to_float()
    pos = x >= 0
    # -|x| spelled as a where: abs would give the gradient 0 at x = 0, a where gives -1 there
    e = pos.where(-x, x).exp()
    r = (1 + e).reciprocal()
    return pos.where(r, e * r)

  def tanh(self) -> Tensor:
    """The hyperbolic tangent.

    >>> Tensor([0.0]).tanh().tolist()
    [0.0]
    """
    return 2.0 * (2.0 * self._to_float()).sigmoid() - 1.0

  def abs(self) -> Tensor:
    """The absolute value.

    >>> Tensor([-2, 3]).abs().tolist()
    [2, 3]
    """
    return cast("Tensor", self) if self.dtype.is_bool or self.dtype.is_unsigned else self.maximum(-self)

  def sign(self) -> Tensor:
    """-1, 0 or 1 by the sign of each element; NaN stays NaN (as numpy; torch gives 0).

    >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist()
    [-1.0, 0.0, 1.0]
    """
    if self.dtype.is_bool: return cast("Tensor", self)
    s = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
    return self.ne(self).where(self, s) if self.dtype.is_float else s

  def square(self) -> Tensor:
    """x * x.

    >>> Tensor([-3, 2]).square().tolist()
    [9, 4]
    """
    return self * self
