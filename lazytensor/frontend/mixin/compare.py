"""Comparisons, where, logic and bits: the elementwise ops of two tensors that compare or select values, or work on
their truth values and bits (lt, eq, where, logical_and, bitwise_and, the shifts), with their operators.
Arithmetic is in elementwise.py, above it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazytensor.dtype import dtypes
from lazytensor.frontend.mixin.operands import OperandsMixin, broadcast_shape
from lazytensor.helpers import DTypeError
from lazytensor.uop.graph import const_uop
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from typing import Self

def _float_ge(a: UOp, b: UOp) -> UOp:
  """a >= b of floats, false where either is NaN: (b < a) | a.eq(b), as the nodes of one op."""
  eq = a.alu(Ops.CMPNE, b).alu(Ops.CMPNE, const_uop(True, dtypes.bool, a.device, a.shape))
  return b.alu(Ops.CMPLT, a).alu(Ops.OR, eq)

class CompareMixin(OperandsMixin):
  """Tensor's comparisons, where, logic and bit ops, with their operators: on the operands mixin."""
  __slots__ = ()

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
    if not a.dtype.is_int: raise DTypeError(f"bit shifts need int tensors, got {a.dtype}")
    # C leaves shifts by the width or more, or by a negative amount, undefined; torch shifts every bit out
    in_range = (b < 8 * a.dtype.itemsize) & (b >= 0)
    shifted = a._apply_uop(lambda p, q: p.alu(op, q), in_range.where(b, 0))
    if op is Ops.SHL or a.dtype.is_unsigned: return in_range.where(shifted, 0)
    return in_range.where(shifted, (a < 0).cast(a.dtype)._unary(Ops.NEG))  # all sign bits: -1 or 0

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
