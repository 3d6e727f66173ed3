"""torch's in-place ops: each an assign of the op's result (Tensor.assign), so it writes the tensor's memory when it is
realized, or before anything reads that memory. The top of the mixin chain: they use any op below.

Most are made by one factory from the op they run (one table, the class attributes below): `t.exp_()` is
`t.assign(t.exp())`, in t's dtype. As in torch, a result that t's dtype cannot hold (a float result in an int tensor,
an int one in a bool tensor) is a TypeError, not a silent cast. torch's in-place movement ops (unsqueeze_, squeeze_,
t_, transpose_, swapaxes_, swapdims_) change the shape of the tensor object itself: the tensor becomes a view, with the
new shape, of the memory it held (frontend/mixin/writes.py, _move_in_place), so it goes on sharing that memory with
every view taken of it, before or after. resize_ and as_strided_ are left out: they make views that movement ops
cannot."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from lazytensor.dtype import DType
from lazytensor.frontend.mixin.linalg import LinalgMixin

if TYPE_CHECKING:
  from typing import Self

P = ParamSpec("P")
T = TypeVar("T", bound="InPlaceMixin")

def can_cast(src: DType, dst: DType) -> bool:
  """Whether an in-place op may write a result of dtype src into a tensor of dtype dst, as torch.can_cast: not into a
  lower kind (float -> int or bool, int -> bool); a narrower dtype of the same kind is fine (float64 -> float32)."""
  return dst.is_float or (not src.is_float and (dst.is_int or src.is_bool))

def _write_result(t: T, result: T, name: str, exact: bool = False) -> T:
  if not (result.dtype == t.dtype if exact else can_cast(result.dtype, t.dtype)):
    raise TypeError(f"{name}: the result has dtype {result.dtype.name}, which cannot be written into this tensor of "
                    f"dtype {t.dtype.name} in place (as in torch); use the out-of-place op, or cast the tensor first")
  return t._write_in_place(result, name)

def _inplace(op: Callable[Concatenate[T, P], T], exact: bool = False) -> Callable[Concatenate[T, P], T]:
  """torch's in-place form of op (named and documented by _name_inplace_ops after the class is made). exact: the
  result must have the tensor's dtype (float_power_ computes in float64 and takes only float64 tensors, as torch)."""
  def method(self: T, /, *args: P.args, **kwargs: P.kwargs) -> T:
    return _write_result(self, op(self, *args, **kwargs), method.__name__, exact)
  # inspect.signature (help, docs/api.md) follows __wrapped__: it shows op's parameters, not *args, **kwargs
  return functools.update_wrapper(method, op, assigned=(), updated=())

class InPlaceMixin(LinalgMixin):
  """Tensor's in-place ops (add_, exp_, masked_fill_, scatter_, fill_, uniform_, copy_, ...): on the linear algebra
  mixin and those below it. Each writes the tensor's memory, so views of it and other names for it see the write.
  The augmented assignments are these ops, as in torch: `t += x` is `t.add_(x)`, `t //= x` floor_divide_, `t %= x`
  remainder_, `t &= x` bitwise_and_, `t <<= x` bitwise_left_shift_, and so on (`@=` is numpy's, see __imatmul__).
  Like every in-place op they are refused on a leaf that requires grad, or a view of one, outside no_grad() (as torch
  refuses them: the leaf's gradient would be that of a value it no longer holds).

  >>> t = Tensor([1.0, 2.0]).realize()
  >>> t.add_(1).mul_(3).sub_(1).div_(2).tolist()
  [2.5, 4.0]
  >>> w = Tensor([1, 2, 3]).realize()
  >>> v = w[1:]
  >>> v += 10  # writes w's memory, seen through every view of it
  >>> w.tolist(), v.tolist()
  ([1, 12, 13], [12, 13])
  >>> m = Tensor([[1.0, 4.0], [9.0, 16.0]]).realize()
  >>> _ = m[:, 1].sqrt_().neg_()  # a write through a view reaches m
  >>> m.tolist()
  [[1.0, -2.0], [9.0, -4.0]]
  >>> Tensor([1, 2]).realize().sqrt_()
  Traceback (most recent call last):
  TypeError: sqrt_: the result has dtype float32, which cannot be written into this tensor of dtype int... in place ...
  """
  __slots__ = ()

  # functions of the tensor alone
  abs_, absolute_, neg_, negative_ = _inplace(LinalgMixin.abs), _inplace(LinalgMixin.absolute), \
    _inplace(LinalgMixin.neg), _inplace(LinalgMixin.negative)
  sign_, sgn_, square_ = _inplace(LinalgMixin.sign), _inplace(LinalgMixin.sgn), _inplace(LinalgMixin.square)
  sqrt_, rsqrt_, reciprocal_ = _inplace(LinalgMixin.sqrt), _inplace(LinalgMixin.rsqrt), _inplace(LinalgMixin.reciprocal)
  exp_, exp2_, expm1_ = _inplace(LinalgMixin.exp), _inplace(LinalgMixin.exp2), _inplace(LinalgMixin.expm1)
  log_, log2_, log10_, log1p_ = _inplace(LinalgMixin.log), _inplace(LinalgMixin.log2), _inplace(LinalgMixin.log10), \
    _inplace(LinalgMixin.log1p)
  sin_, cos_, tan_ = _inplace(LinalgMixin.sin), _inplace(LinalgMixin.cos), _inplace(LinalgMixin.tan)
  asin_, acos_, atan_ = _inplace(LinalgMixin.asin), _inplace(LinalgMixin.acos), _inplace(LinalgMixin.atan)
  arcsin_, arccos_, arctan_ = _inplace(LinalgMixin.arcsin), _inplace(LinalgMixin.arccos), _inplace(LinalgMixin.arctan)
  sinh_, cosh_, tanh_ = _inplace(LinalgMixin.sinh), _inplace(LinalgMixin.cosh), _inplace(LinalgMixin.tanh)
  asinh_, acosh_, atanh_ = _inplace(LinalgMixin.asinh), _inplace(LinalgMixin.acosh), _inplace(LinalgMixin.atanh)
  arcsinh_, arccosh_, arctanh_ = _inplace(LinalgMixin.arcsinh), _inplace(LinalgMixin.arccosh), \
    _inplace(LinalgMixin.arctanh)
  deg2rad_, rad2deg_, sinc_ = _inplace(LinalgMixin.deg2rad), _inplace(LinalgMixin.rad2deg), _inplace(LinalgMixin.sinc)
  erf_, erfc_, erfinv_ = _inplace(LinalgMixin.erf), _inplace(LinalgMixin.erfc), _inplace(LinalgMixin.erfinv)
  lgamma_, digamma_ = _inplace(LinalgMixin.lgamma), _inplace(LinalgMixin.digamma)
  sigmoid_, logit_, relu_ = _inplace(LinalgMixin.sigmoid), _inplace(LinalgMixin.logit), _inplace(LinalgMixin.relu)
  floor_, ceil_, round_ = _inplace(LinalgMixin.floor), _inplace(LinalgMixin.ceil), _inplace(LinalgMixin.round)
  trunc_, fix_, frac_ = _inplace(LinalgMixin.trunc), _inplace(LinalgMixin.fix), _inplace(LinalgMixin.frac)
  nan_to_num_ = _inplace(LinalgMixin.nan_to_num)
  logical_not_, bitwise_not_ = _inplace(LinalgMixin.logical_not), _inplace(LinalgMixin.bitwise_not)
  # arithmetic with operands
  add_, sub_, mul_, div_ = _inplace(LinalgMixin.add), _inplace(LinalgMixin.sub), _inplace(LinalgMixin.mul), \
    _inplace(LinalgMixin.div)
  subtract_, multiply_ = _inplace(LinalgMixin.subtract), _inplace(LinalgMixin.multiply)
  divide_, true_divide_ = _inplace(LinalgMixin.divide), _inplace(LinalgMixin.true_divide)
  floor_divide_, remainder_ = _inplace(LinalgMixin.floor_divide), _inplace(LinalgMixin.remainder)
  fmod_, pow_ = _inplace(LinalgMixin.fmod), _inplace(LinalgMixin.pow)
  float_power_ = _inplace(LinalgMixin.float_power, exact=True)
  xlogy_, hypot_, ldexp_ = _inplace(LinalgMixin.xlogy), _inplace(LinalgMixin.hypot), _inplace(LinalgMixin.ldexp)
  atan2_, arctan2_ = _inplace(LinalgMixin.atan2), _inplace(LinalgMixin.arctan2)
  copysign_, heaviside_ = _inplace(LinalgMixin.copysign), _inplace(LinalgMixin.heaviside)
  gcd_, lcm_ = _inplace(LinalgMixin.gcd), _inplace(LinalgMixin.lcm)
  addcmul_, addcdiv_ = _inplace(LinalgMixin.addcmul), _inplace(LinalgMixin.addcdiv)
  lerp_ = _inplace(LinalgMixin.lerp)
  clamp_, clip_ = _inplace(LinalgMixin.clamp), _inplace(LinalgMixin.clip)
  clamp_min_, clamp_max_ = _inplace(LinalgMixin.clamp_min), _inplace(LinalgMixin.clamp_max)
  # comparisons (the bool result written as 0 and 1 into a number tensor)
  eq_, ne_, not_equal_ = _inplace(LinalgMixin.eq), _inplace(LinalgMixin.ne), _inplace(LinalgMixin.not_equal)
  lt_, le_, gt_, ge_ = _inplace(LinalgMixin.lt), _inplace(LinalgMixin.le), _inplace(LinalgMixin.gt), \
    _inplace(LinalgMixin.ge)
  less_, less_equal_ = _inplace(LinalgMixin.less), _inplace(LinalgMixin.less_equal)
  greater_, greater_equal_ = _inplace(LinalgMixin.greater), _inplace(LinalgMixin.greater_equal)
  # logic and bits
  logical_and_, logical_or_ = _inplace(LinalgMixin.logical_and), _inplace(LinalgMixin.logical_or)
  logical_xor_ = _inplace(LinalgMixin.logical_xor)
  bitwise_and_, bitwise_or_ = _inplace(LinalgMixin.bitwise_and), _inplace(LinalgMixin.bitwise_or)
  bitwise_xor_ = _inplace(LinalgMixin.bitwise_xor)
  bitwise_left_shift_ = _inplace(LinalgMixin.bitwise_left_shift)
  bitwise_right_shift_ = _inplace(LinalgMixin.bitwise_right_shift)
  # writes into parts of the tensor
  masked_fill_, masked_scatter_ = _inplace(LinalgMixin.masked_fill), _inplace(LinalgMixin.masked_scatter)
  scatter_, scatter_add_ = _inplace(LinalgMixin.scatter), _inplace(LinalgMixin.scatter_add)
  scatter_reduce_ = _inplace(LinalgMixin.scatter_reduce)
  index_add_, index_copy_ = _inplace(LinalgMixin.index_add), _inplace(LinalgMixin.index_copy)
  index_fill_, index_put_ = _inplace(LinalgMixin.index_fill), _inplace(LinalgMixin.index_put)
  index_reduce_ = _inplace(LinalgMixin.index_reduce)
  tril_, triu_ = _inplace(LinalgMixin.tril), _inplace(LinalgMixin.triu)
  # scans
  cumsum_, cumprod_ = _inplace(LinalgMixin.cumsum), _inplace(LinalgMixin.cumprod)
  # products with an added term, and the norms of slices
  addmm_, addmv_, addr_ = _inplace(LinalgMixin.addmm), _inplace(LinalgMixin.addmv), _inplace(LinalgMixin.addr)
  baddbmm_, addbmm_ = _inplace(LinalgMixin.baddbmm), _inplace(LinalgMixin.addbmm)
  renorm_ = _inplace(LinalgMixin.renorm)
  # Python's augmented assignments, in place as torch's (they return self, which Python binds to the name again)
  __iadd__, __isub__, __imul__, __itruediv__ = add_, sub_, mul_, div_
  __ifloordiv__, __imod__, __ipow__ = floor_divide_, remainder_, pow_
  __iand__, __ior__, __ixor__ = bitwise_and_, bitwise_or_, bitwise_xor_
  __ilshift__, __irshift__ = bitwise_left_shift_, bitwise_right_shift_

  def __imatmul__(self, x: Self) -> Self:
    """`t @= x`: t @ x written into t, in place, as numpy (2 and later) does where the product has t's shape (x
    square); another shape is a ValueError, as in numpy. torch has no in-place matmul: there `t @= x` binds t to a new
    tensor, which the views of t do not see.

    >>> t = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
    >>> row = t[0]
    >>> t @= Tensor([[0.0, 1.0], [1.0, 0.0]])  # swaps the columns of t's own memory
    >>> row.tolist(), t.tolist()
    ([2.0, 1.0], [[2.0, 1.0], [4.0, 3.0]])
    """
    out = self.matmul(x)
    if out.shape != self.shape:
      raise ValueError(f"@=: the product has shape {out.shape}, which cannot be written into this tensor of shape "
                       f"{self.shape} in place (as in numpy); use t = t @ x for a new tensor")
    return _write_result(self, out, "@=")

  def _write_in_place(self, value: Any, name: str) -> Self:
    """value written into this tensor's memory by the in-place op `name` (an assign), refused on a leaf that requires
    grad outside no_grad (the writes mixin above implements it: mixin/writes.py)."""
    raise NotImplementedError("Tensor._write_in_place")

  def _move_in_place(self, move: Callable[[Self], Self], name: str) -> Self:
    """self becomes move(self), a view of the memory it held (the writes mixin above implements it: mixin/writes.py)."""
    raise NotImplementedError("Tensor._move_in_place")

  def unsqueeze_(self, dim: int) -> Self:
    """A dimension of size 1 inserted at `dim` into this tensor itself, in place (as torch's unsqueeze_): it keeps
    sharing its memory with the views taken of it, and returns self. Like every in-place op, not on a leaf that
    requires grad (outside no_grad()).

    >>> x = Tensor([1, 2, 3]).realize()
    >>> row = x[1:]
    >>> x.unsqueeze_(0).shape
    (1, 3)
    >>> _ = x.add_(10)  # the view taken before sees the write
    >>> row.tolist(), x.tolist()
    ([12, 13], [[11, 12, 13]])
    """
    return self._move_in_place(lambda t: t.unsqueeze(dim), "unsqueeze_")

  def squeeze_(self, dim: int | Sequence[int] | None = None) -> Self:
    """The dimensions `dim` (an int or a sequence of them; every one when None) of size 1 removed from this tensor
    itself, in place (as torch's squeeze_; a dim whose size is not 1 stays); returns self.

    >>> x = Tensor.zeros(1, 3, 1).contiguous().realize()
    >>> x.squeeze_(-1).shape, x.squeeze_(1).shape, x.squeeze_().shape
    ((1, 3), (1, 3), (3,))
    """
    return self._move_in_place(lambda t: t.squeeze(dim), "squeeze_")

  def transpose_(self, dim0: int, dim1: int) -> Self:
    """Dimensions dim0 and dim1 of this tensor itself swapped, in place (as torch's transpose_); returns self.
    swapaxes_ and swapdims_ are the same op.

    >>> x = Tensor([[1, 2, 3], [4, 5, 6]]).realize()
    >>> x.transpose_(0, 1).tolist()
    [[1, 4], [2, 5], [3, 6]]
    >>> x[0] = 0  # writes the memory x held, through the new shape
    >>> x.transpose_(0, 1).tolist()
    [[0, 2, 3], [0, 5, 6]]
    """
    return self._move_in_place(lambda t: t.transpose(dim0, dim1), "transpose_")

  def swapaxes_(self, axis0: int, axis1: int) -> Self:
    """transpose_ under numpy's name (as torch's swapaxes_): axes axis0 and axis1 of this tensor itself swapped.

    >>> Tensor.zeros(2, 3, 4).swapaxes_(0, -1).shape
    (4, 3, 2)
    """
    return self._move_in_place(lambda t: t.transpose(axis0, axis1), "swapaxes_")

  def swapdims_(self, dim0: int, dim1: int) -> Self:
    """transpose_ under another of torch's names (swapdims_): dims dim0 and dim1 of this tensor itself swapped.

    >>> Tensor.zeros(2, 3, 4).swapdims_(1, 2).shape
    (2, 4, 3)
    """
    return self._move_in_place(lambda t: t.transpose(dim0, dim1), "swapdims_")

  def t_(self) -> Self:
    """This matrix itself transposed, in place (as torch's t_): a 0-d or 1-d tensor stays as it is; more dims are an
    error. Returns self.

    >>> x = Tensor([[1.0, 2.0]]).realize()
    >>> x.t_().add_(1).tolist()
    [[2.0], [3.0]]
    """
    return self._move_in_place(lambda t: t.t(), "t_")

  def fill_diagonal_(self, fill_value: Any, wrap: bool = False) -> Self:
    """The main diagonal (the elements whose indices are all equal) set to fill_value, in place (an assign), as
    torch's fill_diagonal_: a tensor of 3 or more dims must have all dims equal. wrap: in a matrix taller than it is
    wide, the diagonal starts again in column 0 after a row left out (numpy's fill_diagonal).

    >>> Tensor.zeros(3, 2).contiguous().realize().fill_diagonal_(5).tolist()
    [[5.0, 0.0], [0.0, 5.0], [0.0, 0.0]]
    >>> Tensor.zeros(5, 2).contiguous().realize().fill_diagonal_(5, wrap=True).tolist()
    [[5.0, 0.0], [0.0, 5.0], [0.0, 0.0], [5.0, 0.0], [0.0, 5.0]]
    """
    if self.ndim < 2: raise ValueError(f"fill_diagonal_: needs a tensor of at least 2 dims, got shape {self.shape}")
    if self.ndim > 2 and len(set(self.shape)) > 1:
      raise ValueError(f"fill_diagonal_: a tensor of more than 2 dims must have all dims equal, got shape {self.shape}")
    if wrap and self.ndim == 2:
      # the flat index steps by one row and one column from each diagonal element to the next, past the end of a row
      mask = self.arange(self.numel(), device=self.device).reshape(self.shape) % (self.shape[1] + 1) == 0
    else:
      idx = [self.arange(s, device=self.device).reshape((s,) + (1,) * (self.ndim - 1 - d)) for d, s in
             enumerate(self.shape)]
      mask = functools.reduce(lambda m, i: m & (i == idx[0]), idx[1:], idx[0] == idx[0])
    return _write_result(self, self.masked_fill(mask, fill_value), "fill_diagonal_")

  def fill_(self, value: Any) -> Self:
    """Every element set to value, in place (an assign); zero_() sets them to 0.

    >>> t = Tensor([1, 2, 3]).realize()
    >>> t.fill_(7).tolist(), t.zero_().tolist()
    ([7, 7, 7], [0, 0, 0])
    """
    return self._write_in_place(self.full_like(value), "fill_")

  def zero_(self) -> Self: return self.fill_(0)

  def _random_fill(self, name: str) -> None:
    if not self.dtype.is_float: raise TypeError(f"{name}: fills float tensors, got {self.dtype}")

  def uniform_(self, low: float = 0.0, high: float = 1.0) -> Self:
    """Uniform random numbers in [low, high) written into this float tensor, in place (an assign), as torch's
    uniform_ (the initializers of torch.nn.init).

    >>> v = Tensor.zeros(1000).contiguous().realize().uniform_(-2.0, 2.0).numpy()
    >>> bool(-2 <= v.min() and v.max() < 2 and v.std() > 1)
    True
    """
    self._random_fill("uniform_")
    return self._write_in_place(self.rand_like() * (high - low) + low, "uniform_")

  def normal_(self, mean: float = 0.0, std: float = 1.0) -> Self:
    """Normal random numbers with `mean` and `std` written into this float tensor, in place (an assign), as torch's
    normal_.

    >>> v = Tensor.zeros(1000).contiguous().realize().normal_(5.0, 0.5).numpy()
    >>> bool(4.9 < v.mean() < 5.1 and 0.4 < v.std() < 0.6)
    True
    """
    self._random_fill("normal_")
    return self._write_in_place(self.randn_like() * std + mean, "normal_")

  def copy_(self, src: Any) -> Self:
    """src's values (broadcast to this shape, cast to this dtype) written into this tensor, in place (an assign).

    >>> Tensor.zeros(2, 2).contiguous().realize().copy_(Tensor([1, 2])).tolist()
    [[1.0, 2.0], [1.0, 2.0]]
    """
    return self._write_in_place(src, "copy_")

def _name_inplace_ops(cls: type) -> None:
  """Name and document the in-place ops the table above made, each after the attribute that holds it."""
  for name, fn in vars(cls).items():
    # the operators (__iadd__, ...) are the same functions under a second name: named after the op
    if getattr(fn, "__qualname__", "").startswith("_inplace.") and not name.startswith("__"):
      op = fn.__wrapped__.__name__
      fn.__name__, fn.__qualname__ = name, f"{cls.__name__}.{name}"
      fn.__doc__ = (f"{op} in place (an assign): `t.{name}(...)` writes `t.{op}(...)` into t, in t's dtype (a "
                    f"TypeError where that dtype cannot hold the result, as in torch). help(Tensor.{op}) shows the op "
                    "with an example; help(InPlaceMixin), writes through views.")

_name_inplace_ops(InPlaceMixin)
