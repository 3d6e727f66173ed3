"""torch's in-place ops: each an assign of the op's result (Tensor.assign), so it writes the tensor's memory when it is
realized, or before anything reads that memory. The top of the mixin chain: they use any op below.

Most are made by one factory from the op they run (one table, the class attributes below): `t.exp_()` is
`t.assign(t.exp())`, in t's dtype. As in torch, a result that t's dtype cannot hold (a float result in an int tensor,
an int one in a bool tensor) is a TypeError, not a silent cast. torch's squeeze_, unsqueeze_, t_, transpose_,
swapaxes_ and swapdims_ are left out: they change the shape of the tensor object itself, and here a tensor's pending
writes and the views taken of it (lazytensor/writes.py) are tracked against a tensor whose shape never changes."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from lazytensor.dtype import DType
from lazytensor.mixin.aliases import AliasMixin

if TYPE_CHECKING:
  from typing import Self

P = ParamSpec("P")
T = TypeVar("T", bound=AliasMixin)

def can_cast(src: DType, dst: DType) -> bool:
  """Whether an in-place op may write a result of dtype src into a tensor of dtype dst, as torch.can_cast: not into a
  lower kind (float -> int or bool, int -> bool); a narrower dtype of the same kind is fine (float64 -> float32)."""
  return dst.is_float or (not src.is_float and (dst.is_int or src.is_bool))

def _write_result(t: T, result: T, name: str, exact: bool = False) -> T:
  if not (result.dtype == t.dtype if exact else can_cast(result.dtype, t.dtype)):
    raise TypeError(f"{name}: the result has dtype {result.dtype.name}, which cannot be written into this tensor of "
                    f"dtype {t.dtype.name} in place (as in torch); use the out-of-place op, or cast the tensor first")
  return t.assign(result)

def _inplace(op: Callable[Concatenate[T, P], T], exact: bool = False) -> Callable[Concatenate[T, P], T]:
  """torch's in-place form of op (named and documented by _name_inplace_ops after the class is made). exact: the
  result must have the tensor's dtype (float_power_ computes in float64 and takes only float64 tensors, as torch)."""
  def method(self: T, /, *args: P.args, **kwargs: P.kwargs) -> T:
    return _write_result(self, op(self, *args, **kwargs), method.__name__, exact)
  # inspect.signature (help, docs/api.md) follows __wrapped__: it shows op's parameters, not *args, **kwargs
  return functools.update_wrapper(method, op, assigned=(), updated=())

class InPlaceMixin(AliasMixin):
  """Tensor's in-place ops (add_, exp_, masked_fill_, scatter_, fill_, uniform_, copy_, ...): on the alias mixin and
  those below it. Each writes the tensor's memory, so views of it and other names for it see the write. The operator
  `t += x` is not in place: Python makes it `t = t + x` (a new tensor, as in tinygrad), which views of t do not see.

  >>> t = Tensor([1.0, 2.0]).realize()
  >>> t.add_(1).mul_(3).sub_(1).div_(2).tolist()
  [2.5, 4.0]
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
  abs_, absolute_, neg_, negative_ = _inplace(AliasMixin.abs), _inplace(AliasMixin.absolute), \
    _inplace(AliasMixin.neg), _inplace(AliasMixin.negative)
  sign_, sgn_, square_ = _inplace(AliasMixin.sign), _inplace(AliasMixin.sgn), _inplace(AliasMixin.square)
  sqrt_, rsqrt_, reciprocal_ = _inplace(AliasMixin.sqrt), _inplace(AliasMixin.rsqrt), _inplace(AliasMixin.reciprocal)
  exp_, exp2_, expm1_ = _inplace(AliasMixin.exp), _inplace(AliasMixin.exp2), _inplace(AliasMixin.expm1)
  log_, log2_, log10_, log1p_ = _inplace(AliasMixin.log), _inplace(AliasMixin.log2), _inplace(AliasMixin.log10), \
    _inplace(AliasMixin.log1p)
  sin_, cos_, tan_ = _inplace(AliasMixin.sin), _inplace(AliasMixin.cos), _inplace(AliasMixin.tan)
  asin_, acos_, atan_ = _inplace(AliasMixin.asin), _inplace(AliasMixin.acos), _inplace(AliasMixin.atan)
  arcsin_, arccos_, arctan_ = _inplace(AliasMixin.arcsin), _inplace(AliasMixin.arccos), _inplace(AliasMixin.arctan)
  sinh_, cosh_, tanh_ = _inplace(AliasMixin.sinh), _inplace(AliasMixin.cosh), _inplace(AliasMixin.tanh)
  asinh_, acosh_, atanh_ = _inplace(AliasMixin.asinh), _inplace(AliasMixin.acosh), _inplace(AliasMixin.atanh)
  arcsinh_, arccosh_, arctanh_ = _inplace(AliasMixin.arcsinh), _inplace(AliasMixin.arccosh), \
    _inplace(AliasMixin.arctanh)
  deg2rad_, rad2deg_, sinc_ = _inplace(AliasMixin.deg2rad), _inplace(AliasMixin.rad2deg), _inplace(AliasMixin.sinc)
  erf_, erfc_, erfinv_ = _inplace(AliasMixin.erf), _inplace(AliasMixin.erfc), _inplace(AliasMixin.erfinv)
  lgamma_, digamma_ = _inplace(AliasMixin.lgamma), _inplace(AliasMixin.digamma)
  sigmoid_, logit_, relu_ = _inplace(AliasMixin.sigmoid), _inplace(AliasMixin.logit), _inplace(AliasMixin.relu)
  floor_, ceil_, round_ = _inplace(AliasMixin.floor), _inplace(AliasMixin.ceil), _inplace(AliasMixin.round)
  trunc_, fix_, frac_ = _inplace(AliasMixin.trunc), _inplace(AliasMixin.fix), _inplace(AliasMixin.frac)
  nan_to_num_ = _inplace(AliasMixin.nan_to_num)
  logical_not_, bitwise_not_ = _inplace(AliasMixin.logical_not), _inplace(AliasMixin.bitwise_not)
  # arithmetic with operands
  add_, sub_, mul_, div_ = _inplace(AliasMixin.add), _inplace(AliasMixin.sub), _inplace(AliasMixin.mul), \
    _inplace(AliasMixin.div)
  subtract_, multiply_ = _inplace(AliasMixin.subtract), _inplace(AliasMixin.multiply)
  divide_, true_divide_ = _inplace(AliasMixin.divide), _inplace(AliasMixin.true_divide)
  floor_divide_, remainder_ = _inplace(AliasMixin.floor_divide), _inplace(AliasMixin.remainder)
  fmod_, pow_ = _inplace(AliasMixin.fmod), _inplace(AliasMixin.pow)
  float_power_ = _inplace(AliasMixin.float_power, exact=True)
  xlogy_, hypot_, ldexp_ = _inplace(AliasMixin.xlogy), _inplace(AliasMixin.hypot), _inplace(AliasMixin.ldexp)
  atan2_, arctan2_ = _inplace(AliasMixin.atan2), _inplace(AliasMixin.arctan2)
  copysign_, heaviside_ = _inplace(AliasMixin.copysign), _inplace(AliasMixin.heaviside)
  gcd_, lcm_ = _inplace(AliasMixin.gcd), _inplace(AliasMixin.lcm)
  addcmul_, addcdiv_ = _inplace(AliasMixin.addcmul), _inplace(AliasMixin.addcdiv)
  lerp_ = _inplace(AliasMixin.lerp)
  clamp_, clip_ = _inplace(AliasMixin.clamp), _inplace(AliasMixin.clip)
  clamp_min_, clamp_max_ = _inplace(AliasMixin.clamp_min), _inplace(AliasMixin.clamp_max)
  # comparisons (the bool result written as 0 and 1 into a number tensor)
  eq_, ne_, not_equal_ = _inplace(AliasMixin.eq), _inplace(AliasMixin.ne), _inplace(AliasMixin.not_equal)
  lt_, le_, gt_, ge_ = _inplace(AliasMixin.lt), _inplace(AliasMixin.le), _inplace(AliasMixin.gt), \
    _inplace(AliasMixin.ge)
  less_, less_equal_ = _inplace(AliasMixin.less), _inplace(AliasMixin.less_equal)
  greater_, greater_equal_ = _inplace(AliasMixin.greater), _inplace(AliasMixin.greater_equal)
  # logic and bits
  logical_and_, logical_or_ = _inplace(AliasMixin.logical_and), _inplace(AliasMixin.logical_or)
  logical_xor_ = _inplace(AliasMixin.logical_xor)
  bitwise_and_, bitwise_or_ = _inplace(AliasMixin.bitwise_and), _inplace(AliasMixin.bitwise_or)
  bitwise_xor_ = _inplace(AliasMixin.bitwise_xor)
  bitwise_left_shift_ = _inplace(AliasMixin.bitwise_left_shift)
  bitwise_right_shift_ = _inplace(AliasMixin.bitwise_right_shift)
  # writes into parts of the tensor
  masked_fill_, masked_scatter_ = _inplace(AliasMixin.masked_fill), _inplace(AliasMixin.masked_scatter)
  scatter_, scatter_add_ = _inplace(AliasMixin.scatter), _inplace(AliasMixin.scatter_add)
  scatter_reduce_ = _inplace(AliasMixin.scatter_reduce)
  index_add_, index_copy_ = _inplace(AliasMixin.index_add), _inplace(AliasMixin.index_copy)
  index_fill_, index_put_ = _inplace(AliasMixin.index_fill), _inplace(AliasMixin.index_put)
  index_reduce_ = _inplace(AliasMixin.index_reduce)
  tril_, triu_ = _inplace(AliasMixin.tril), _inplace(AliasMixin.triu)
  # scans
  cumsum_, cumprod_ = _inplace(AliasMixin.cumsum), _inplace(AliasMixin.cumprod)

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
    return self.assign(self.full_like(value))

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
    return self.assign(self.rand_like() * (high - low) + low)

  def normal_(self, mean: float = 0.0, std: float = 1.0) -> Self:
    """Normal random numbers with `mean` and `std` written into this float tensor, in place (an assign), as torch's
    normal_.

    >>> v = Tensor.zeros(1000).contiguous().realize().normal_(5.0, 0.5).numpy()
    >>> bool(4.9 < v.mean() < 5.1 and 0.4 < v.std() < 0.6)
    True
    """
    self._random_fill("normal_")
    return self.assign(self.randn_like() * std + mean)

  def copy_(self, src: Any) -> Self:
    """src's values (broadcast to this shape, cast to this dtype) written into this tensor, in place (an assign).

    >>> Tensor.zeros(2, 2).contiguous().realize().copy_(Tensor([1, 2])).tolist()
    [[1.0, 2.0], [1.0, 2.0]]
    """
    return self.assign(src)

def _name_inplace_ops(cls: type) -> None:
  """Name and document the in-place ops the table above made, each after the attribute that holds it."""
  for name, fn in vars(cls).items():
    if getattr(fn, "__qualname__", "").startswith("_inplace."):
      op = fn.__wrapped__.__name__
      fn.__name__, fn.__qualname__ = name, f"{cls.__name__}.{name}"
      fn.__doc__ = (f"{op} in place (an assign): `t.{name}(...)` writes `t.{op}(...)` into t, in t's dtype (a "
                    f"TypeError where that dtype cannot hold the result, as in torch). help(Tensor.{op}) shows the op "
                    "with an example; help(InPlaceMixin), writes through views.")

_name_inplace_ops(InPlaceMixin)
