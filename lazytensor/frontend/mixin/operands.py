"""The operands of elementwise ops and the casts: two operands (a Tensor, number, list or array) promoted to a common
dtype and broadcast to a common shape as in torch (_broadcasted), broadcast_shape, and dtype casts (cast, bitcast and
torch's shortcuts float, int, bool, ...). The ops themselves are in compare.py and elementwise.py, above it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from lazytensor.frontend.mixin.shapes import ShapesMixin
from lazytensor.uop.graph import const_uop
from lazytensor.uop.ops import Ops, UOp
from lazytensor.uop.sint import not_a_value

if TYPE_CHECKING:
  from typing import Self

def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  nd = max(map(len, shapes))
  # loops, not comprehensions (a function call each on Python 3.11): every op of two shapes that differ comes here
  padded = []
  for s in shapes: padded.append((1,) * (nd - len(s)) + s)
  out = []
  for dims in zip(*padded):
    non1 = set(dims)  # the sizes other than 1, without a comprehension's call per dimension
    non1.discard(1)
    if len(non1) > 1: raise ValueError(f"shapes {' and '.join(str(s) for s in shapes)} cannot be broadcast together")
    out.append(non1.pop() if non1 else 1)
  return tuple(out)

def _tensor_result_type(a: Any, b: Any) -> DType:
  """The dtype of an op between two tensors, as torch's: a 0-d one is weak against one with dims (promote_with_0d)."""
  if (a.ndim == 0) == (b.ndim == 0): return promote_types(a.dtype, b.dtype)
  return promote_with_0d(a.dtype, b.dtype) if b.ndim == 0 else promote_with_0d(b.dtype, a.dtype)

def check_operand(op: str, name: str, v: Any) -> None:
  if not isinstance(v, (OperandsMixin, bool, int, float, np.generic, list, np.ndarray)):
    raise TypeError(f"{op}: {name} must be a Tensor or a number, got {type(v).__name__}")

class OperandsMixin(ShapesMixin):
  """Tensor's operand broadcasting and promotion, and its casts: on the shapes and movement mixins."""
  __slots__ = ()

  # ---- operands: promoted to a common dtype and broadcast to a common shape ----

  def _broadcasted(self, y: Self | Any, reverse: bool = False) -> tuple[Self, Self]:
    """self and y (a Tensor, number, list or array) in their common dtype and broadcast shape; reverse swaps them."""
    if self._is_tensor(y):
      mine, its = self.lazydata, y.lazydata
      # the common case of an eager op, two tensors alike, answered without promotion and broadcasting
      if mine.dtype is its.dtype:
        if mine.shape == its.shape and mine.device == its.device: return (y, self) if reverse else (self, y)
        dt = mine.dtype  # one dtype: nothing to promote (a bias, a batchnorm's statistics)
      else: dt = _tensor_result_type(self, y)
    elif isinstance(y, (bool, int, float, np.generic)):
      y = y.item() if isinstance(y, np.generic) else y
      dt = result_type_scalar(self.dtype, y)
      # made in self's shape at once: the broadcast below has nothing left to do (no reshape and expand nodes)
      y = type(self)(const_uop(y, dt, self.device, self.shape))
      if dt is self.dtype: return (y, self) if reverse else (self, y)  # nothing to cast either
    elif isinstance(y, (list, np.ndarray)):
      y = type(self)(y, device=self.device)
      dt = promote_types(self.dtype, y.dtype)
    elif isinstance(y, UOp): raise not_a_value(y)
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
    dt = dtype if type(dtype) is DType else to_dtype(dtype)  # a DType as it is: the casts of every matmul and reduce
    return self if dt is self.dtype or dt == self.dtype else self._apply_uop(lambda x: UOp(Ops.CAST, dt, (x,)))

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
    # a tensor operand goes straight to _broadcasted: _const_operand is a call that would answer None
    if type(y) is not type(self) and (c := self._const_operand(y)) is not None:
      return self._apply_uop(lambda p: c.alu(op, p) if reverse else p.alu(op, c))
    a, b = self._broadcasted(y, reverse)
    return a._apply_uop(lambda p, q: p.alu(op, q), b)

  def _broadcast_all(self, *xs: Self | Any) -> list[Self]:
    """self and xs in their common dtype and broadcast shape."""
    t = self
    for x in xs: t, _ = t._broadcasted(x)
    return [t] + [t._broadcasted(x)[1] for x in xs]

  # one tensor's op on its node, of its dtype (neg, trunc and the shifts' sign fill)
  def _unary(self, op: Ops) -> Self: return self._apply_uop(lambda x: UOp(op, x.dtype, (x,)))

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
