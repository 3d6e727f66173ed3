"""Reductions (sum, max, mean, var, argmax, softmax, ...), norms, matmul, einsum and torch's products (outer, mm)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from lazytensor.dtype import DType, dtypes, promote_types, to_dtype
from lazytensor.frontend.autocast import widened
from lazytensor.frontend.mixin.products import Axis, _einsum, _matmul
from lazytensor.frontend.mixin.special import SpecialMixin
from lazytensor.helpers import dim_alias, prod
from lazytensor.uop.graph import const_uop
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="ReduceMixin")

def _no_elements_grad(ctx: UOp, x: UOp) -> tuple[UOp]:
  """The gradient of a reduce over no elements (a CUSTOM_GRAD's arg): zeros for its input, whose value it ignores."""
  return (const_uop(0.0, x.dtype, x.device, x.shape),)

class ReduceMixin(SpecialMixin):
  """Tensor's reductions, matmul and einsum: on the special mixin and those below it."""
  __slots__ = ()

  def _axes(self, axis: Axis) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    if not isinstance(axis, (int, np.integer, tuple, list)):
      raise TypeError(f"axis must be an int, a sequence of ints or None, got {axis!r}")
    # one axis, the common case: no generator and no set (a call each on Python 3.11)
    if isinstance(axis, (int, np.integer)): return (self._resolve_axis(axis),) if self.ndim else ()
    resolved = tuple(self._resolve_axis(a) for a in axis)
    if len(set(resolved)) != len(resolved): raise ValueError(f"axis {axis} repeats a dimension")
    return tuple(sorted(resolved)) if self.ndim else ()  # a 0-d tensor takes axis 0 or -1, and has nothing to reduce

  def _reduce(self, op: Ops, axis: Axis, keepdim: bool) -> Self:
    all_axes, shape = self._axes(axis), self.shape
    # loops, not comprehensions (a function call each on Python 3.11): every sum, max and mean comes here
    axes, kept = [], []
    for i, s in enumerate(shape):
      if i not in all_axes: kept.append(s)
      elif s != 1: axes.append(i)
    arg = (op, tuple(axes))
    ret = self._apply_uop(lambda x: UOp(Ops.REDUCE_AXIS, x.dtype, (x,), arg)) if axes else self
    # the reduced dims are 1 now: dropping them keeps the elements, with none of reshape's checks
    return ret if keepdim else ret._reshaped(tuple(kept))

  def _sum_dtype(self) -> DType:
    # ints and bools widen to the default int (int64, as torch; int32 where a program sets it, as tinygrad)
    dt = self.dtype
    if dt.is_float or (dt.kind == "u" and dt.itemsize == 8): return dt  # uint64, told without a dataclass ==
    return promote_types(self.dtype, dtypes.default_int)

  def _acc_dtype(self, out: DType) -> DType: return dtypes.float32 if out.is_half else out

  def _sum_of_products(self, other: Self, axis: Axis, dtype: DType | None = None) -> Self:
    """(self * other).sum(axis) in `dtype` (their promoted dtype by default), the products made and summed in the
    accumulator's dtype and rounded once: float32 for 16-bit floats (a product of two of them is exact in it), as
    torch's matmul and conv on the CPU; rounding each product to half before summing was off by an ulp or more in about
    half the results."""
    out = dtype if dtype is not None else promote_types(self.dtype, other.dtype)
    acc = self._acc_dtype(out)
    return (self.cast(acc) * other.cast(acc)).sum(axis, dtype=acc).cast(out)

  def _accumulate(self, op: Ops, axis: Axis, keepdim: bool, dtype: DType | str | None) -> Self:
    """sum and prod: torch's result dtype, a float32 accumulator for 16-bit floats, the identity for empty inputs."""
    out = to_dtype(dtype) if dtype is not None else widened(self._sum_dtype())  # autocast: half sums give float32
    if self.numel() == 0 and self.ndim: return self._empty_reduce(0 if op is Ops.ADD else 1, axis, keepdim, out)
    return self.cast(self._acc_dtype(out))._reduce(op, axis, keepdim).cast(out)

  def sum(self, axis: Axis = None, keepdim: bool = False,
          dtype: DType | str | None = None, *, dim: Axis = None) -> Self:
    """Sum over `axis` (all by default); ints and bools sum as dtypes.default_int (int64) or wider, float16 and
    bfloat16 accumulate in float32.

    >>> Tensor([[1, 2], [3, 4]]).sum(0).tolist()
    [4, 6]
    """
    axis = dim_alias("sum", axis, dim, None)
    return self._accumulate(Ops.ADD, axis, keepdim, dtype)

  def prod(self, axis: Axis = None, keepdim: bool = False,
           dtype: DType | str | None = None, *, dim: Axis = None) -> Self:
    """The product over `axis` (all by default); ints and bools multiply as sum adds them.

    >>> Tensor([[1, 2], [3, 4]]).prod(1).tolist()
    [2, 12]
    """
    axis = dim_alias("prod", axis, dim, None)
    return self._accumulate(Ops.MUL, axis, keepdim, dtype)

  def _empty_reduce(self, value: Any, axis: Axis, keepdim: bool, dtype: DType) -> Self:
    axes = self._axes(axis)
    shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape)) if keepdim else \
      tuple(s for i, s in enumerate(self.shape) if i not in axes)
    def identity(x: UOp) -> UOp: return const_uop(value, dtype, x.device, shape)
    if not self.requires_grad: return self._apply_uop(identity)
    # a constant that keeps self in its graph (a CUSTOM_GRAD), so that the gradient reaches what self was computed from
    # (zeros), as in torch: a bare constant depended on nothing, and backward left .grad None
    return self._apply_uop(lambda x: UOp(Ops.CUSTOM_GRAD, dtype, (identity(x), x), _no_elements_grad))

  def _check_nonempty(self, name: str, axis: Axis) -> None:
    if any(self.shape[a] == 0 for a in self._axes(axis)):
      raise ValueError(f"{name}: cannot reduce over a zero-size dimension of {self.shape}")

  def max(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """The largest value over `axis` (NaN propagates).

    >>> Tensor([[1, 5], [3, 4]]).max(1).tolist()
    [5, 4]
    """
    axis = dim_alias("max", axis, dim, None)
    self._check_nonempty("max", axis)
    return self._reduce(Ops.MAX, axis, keepdim)

  def min(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """The smallest value over `axis` (NaN propagates).

    >>> Tensor([[1, 5], [3, 4]]).min(0).tolist()
    [1, 4]
    """
    axis = dim_alias("min", axis, dim, None)
    self._check_nonempty("min", axis)
    if self.dtype.is_bool: return self.logical_not().max(axis, keepdim).logical_not()
    if self.dtype.is_float: return -((-self).max(axis, keepdim))
    return ~((~self).max(axis, keepdim))

  def mean(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """The average over `axis`; ints become float.

    >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).mean().item()
    2.5
    """
    axis = dim_alias("mean", axis, dim, None)
    x = self._to_float()
    acc = self._acc_dtype(x.dtype)  # float16 sums overflow long before their mean does
    total = x.sum(axis, keepdim, dtype=acc)
    count = prod(self.shape[a] for a in self._axes(axis))
    return (total * (1 / count) if count else total / 0).cast(widened(x.dtype))

  def _variance(self, axis: Axis, keepdim: bool, correction: int) -> tuple[Self, DType]:
    """The variance over `axis` in the accumulator's dtype (float32 for 16-bit floats), and the dtype of the result."""
    x = self._to_float()
    xa = x.cast(self._acc_dtype(x.dtype))
    count = prod(self.shape[a] for a in self._axes(axis))
    dev = xa - xa.mean(axis, keepdim=True)
    if (k := count - correction) <= 0: return dev.square().sum(axis, keepdim) / 0, x.dtype  # NaN, as torch
    # the deviations scaled by 2**-e (exact), with 4**e >= k: each square, and every partial sum, is at most the
    # variance, so it overflows only where the variance does (squares of deviations past 1.8e19 overflowed float32);
    # one multiply more in the same kernel. The range where squares underflow moves up by the same factor
    e = ((k - 1).bit_length() + 1) // 2
    sq = (dev * 2.0 ** -e).square().sum(axis, keepdim)
    return sq / (k / 4.0 ** e), x.dtype  # k / 4**e is exact: one rounding, as sq / k was

  def var(self, axis: Axis = None, keepdim: bool = False, correction: int = 1, *, dim: Axis = None) -> Self:
    """The variance over `axis`, dividing by (count - correction); ints become float.

    >>> Tensor([1.0, 2.0, 3.0, 4.0]).var().item()
    1.6666666269302368
    """
    v, out = self._variance(dim_alias("var", axis, dim, None), keepdim, correction)
    return v.cast(out)

  def std(self, axis: Axis = None, keepdim: bool = False, correction: int = 1, *, dim: Axis = None) -> Self:
    """The standard deviation over `axis`: the square root of var, taken before rounding to a 16-bit float (as
    torch's), so a float16 std of 256 or more is not inf for its variance being past float16's largest, 65504.

    >>> Tensor([1.0, 3.0]).std().item()
    1.4142135381698608
    >>> Tensor([0.0, 400.0], dtype="float16").std().item()
    282.75
    """
    v, out = self._variance(dim_alias("std", axis, dim, None), keepdim, correction)
    # a zero variance (equal values) has the gradient 0, as torch gives it: sqrt's derivative there is inf, and the
    # chain rule through it NaN, so the sqrt never sees the 0
    zero = v == 0
    return zero.where(0.0, zero.where(1.0, v).sqrt()).cast(out)

  def any(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """Whether any element over `axis` is non-zero (bool).

    >>> Tensor([[0, 1], [0, 0]]).any(1).tolist()
    [True, False]
    """
    axis = dim_alias("any", axis, dim, None)
    if self.numel() == 0: return self._empty_reduce(False, axis, keepdim, dtypes.bool)
    return self.cast(dtypes.bool).max(axis, keepdim)

  def all(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """Whether every element over `axis` is non-zero (bool).

    >>> Tensor([[1, 1], [0, 1]]).all(1).tolist()
    [True, False]
    """
    axis = dim_alias("all", axis, dim, None)
    if self.numel() == 0: return self._empty_reduce(True, axis, keepdim, dtypes.bool)
    return self.logical_not().any(axis, keepdim).logical_not()

  def allclose(self, x: Self | Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """Whether every element is close to x (see isclose); runs now.

    >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7]))
    True
    """
    return bool(self.isclose(x, rtol, atol, equal_nan).all().item())

  def equal(self, x: Self) -> bool:
    """Whether x has the same shape and the same values (NaN equals nothing; dtypes may differ), as torch.equal;
    runs now.

    >>> Tensor([1, 2]).equal(Tensor([1.0, 2.0])), Tensor([1, 2]).equal(Tensor([[1, 2]]))
    (True, False)
    """
    if not self._is_tensor(x): raise TypeError(f"equal: expected a Tensor, got {type(x).__name__}")
    return self.shape == x.shape and bool(self.eq(x).all().item())

  def argmax(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Self:
    """The index of the first largest value (dtypes.default_int); with axis None, into the flattened tensor.

    >>> Tensor([1, 3, 2]).argmax().item()
    1
    """
    axis = dim_alias("argmax", axis, dim, None)
    if axis is None:
      flat = self.flatten()
      ret = flat.argmax(0)
      return ret.reshape((1,) * self.ndim) if keepdim else ret
    d = self._resolve_axis(axis)
    if self.ndim == 0: return type(self).zeros((), dtype=dtypes.default_int, device=self.device)
    self._check_nonempty("argmax", d)
    n = self.shape[d]
    is_max = (self == self.max(d, keepdim=True))
    if self.dtype.is_float: is_max = is_max | self.ne(self)  # NaN counts as the maximum, as in torch
    count_down = type(self).arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - d - 1))
    return (n - (is_max * count_down).max(d, keepdim)).cast(dtypes.default_int)

  def argmin(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Self:
    """The index of the first smallest value (dtypes.default_int); with axis None, into the flattened tensor.

    >>> Tensor([3, 1, 1]).argmin().item()
    1
    """
    axis = dim_alias("argmin", axis, dim, None)
    if self.dtype.is_bool: return self.logical_not().argmax(axis, keepdim)
    return (-self if self.dtype.is_float else ~self).argmax(axis, keepdim)

  def softmax(self, axis: int = -1, *, dim: int | None = None) -> Self:
    """exp(x) / sum(exp(x)) along `axis`, computed stably.

    >>> round(Tensor([0.0, 0.0]).softmax().tolist()[0], 3)
    0.5
    """
    axis = dim_alias("softmax", axis, dim, -1)
    x = self._to_float()
    if x.numel() == 0: return x._check_axis(axis)
    if x.dtype.is_half: return x.float().softmax(axis).cast(widened(x.dtype))  # see log_softmax; autocast: float32
    # the shift by the max cancels out of the result, so it is detached: its gradient would be zero, at the cost of
    # two more backward kernels (the tie mask and its count)
    e = (x - x.max(axis, keepdim=True).detach()).exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1, *, dim: int | None = None) -> Self:
    """log(softmax(x)) along `axis`, computed without taking the log of a rounded-off zero.

    >>> [round(v, 4) for v in Tensor([0.0, 0.0]).log_softmax().tolist()]
    [-0.6931, -0.6931]
    """
    axis = dim_alias("log_softmax", axis, dim, -1)
    x = self._to_float()
    if x.numel() == 0: return x._check_axis(axis)
    # 16-bit floats in float32, rounded once, as torch: the log of a sum near 1 rounded to half first was 0 or an ulp
    # of 1 (float16 log_softmax of [[0, -7], [-7, 0]] gave -0.000977 where it is -0.000912)
    if x.dtype.is_half: return x.float().log_softmax(axis).cast(widened(x.dtype))
    # the shift cancels out (see softmax): no gradient through it
    shifted = x - x.max(axis, keepdim=True).detach()
    return shifted - shifted.exp().sum(axis, keepdim=True).log()

  def softmin(self, axis: int = -1, *, dim: int | None = None) -> Self:
    """softmax(-x) along `axis`.

    >>> [round(v, 4) for v in Tensor([1.0, 2.0]).softmin().tolist()]
    [0.7311, 0.2689]
    """
    axis = dim_alias("softmin", axis, dim, -1)
    return (-self._to_float()).softmax(axis)

  def logsumexp(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """log(sum(exp(x))) over `axis`, stable for large values; a row of -inf (or an empty one) gives -inf.

    >>> round(Tensor([1000.0, 1000.0]).logsumexp().item(), 2)
    1000.69
    """
    axis = dim_alias("logsumexp", axis, dim, None)
    x = self._to_float()
    if x.numel() == 0: return x._empty_reduce(-math.inf, axis, keepdim, x.dtype)
    if x.dtype.is_half: return x.float().logsumexp(axis, keepdim).cast(x.dtype)  # see log_softmax
    # the shift cancels out (see softmax): no gradient through it
    m = x.max(axis, keepdim=True).detach()
    m = (m.abs() == float("inf")).where(0, m)  # all -inf rows give -inf, not nan
    ret = (x - m).exp().sum(axis, keepdim=True).log() + m
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in self._axes(axis)))

  def _check_axis(self, axis: Axis) -> Self:
    self._axes(axis)  # raises for a bad axis
    return self

  def var_mean(self, axis: Axis = None, keepdim: bool = False,
               correction: int = 1, *, dim: Axis = None) -> tuple[Self, Self]:
    """The variance and the mean over `axis`, as torch.var_mean.

    >>> [t.item() for t in Tensor([1.0, 2.0, 3.0]).var_mean()]
    [1.0, 2.0]
    """
    axis = dim_alias("var_mean", axis, dim, None)
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  def std_mean(self, axis: Axis = None, keepdim: bool = False,
               correction: int = 1, *, dim: Axis = None) -> tuple[Self, Self]:
    """The standard deviation and the mean over `axis`, as torch.std_mean.

    >>> [t.item() for t in Tensor([1.0, 3.0]).std_mean(correction=0)]
    [1.0, 2.0]
    """
    axis = dim_alias("std_mean", axis, dim, None)
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  # ---- matmul and einsum ----

  def dot(self, w: Self, dtype: DType | str | None = None) -> Self:
    """Matrix product with numpy's rules for 1-D operands and broadcast batch dimensions; `dtype` (tinygrad's) is the
    result's, the products summed in it or in float32 if it is a 16-bit float.

    >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([[1], [1]])).tolist()
    [[3], [7]]
    >>> Tensor([[1.0, 2.0]]).half().dot(Tensor([[3.0], [4.0]]).half(), dtype="float32").dtype
    dtypes.float32
    """
    return _matmul(self, w, None if dtype is None else to_dtype(dtype))

  def matmul(self, w: Self, dtype: DType | str | None = None) -> Self:
    """The matrix product (`@`): the same as dot.

    >>> (Tensor([[1, 2]]) @ Tensor([[3], [4]])).tolist()
    [[11]]
    """
    return self.dot(w, dtype)

  def __matmul__(self, x: Self) -> Self: return self.matmul(x)
  def __rmatmul__(self, x: Self) -> Self:
    return (x if isinstance(x, ReduceMixin) else type(self)(x)).matmul(self)

  @classmethod
  def einsum(cls, formula: str, *operands: Self | Sequence[Self]) -> Self:
    """Sum of products over the subscripts of `formula`, as torch.einsum: "ij,jk->ik" is a matmul, a repeated
    subscript in one operand takes its diagonal ("ii->i"), without "->" the output is the subscripts that appear
    once, in alphabetical order; "..." broadcasts, as do dims of size 1. Operands are contracted two at a time,
    each pair in one kernel.

    >>> Tensor.einsum("ij,j->i", Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
    [3, 7]
    """
    one_list = len(operands) == 1 and isinstance(operands[0], (list, tuple))
    ops: list[Any] = list(cast(Sequence[Any], operands[0])) if one_list else list(operands)
    for t in ops:
      if not isinstance(t, cls): raise TypeError(f"einsum: expected Tensors, got {type(t).__name__}")
    return _einsum(formula, ops)

  # ---- torch's names for reductions and products ----

  def amax(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """The largest value over `axis`, as torch.amax: the same as max here, whose gradient already splits evenly
    among equal largest values, as amax's does.

    >>> Tensor([[1, 5], [3, 4]]).amax(dim=0).tolist()
    [3, 5]
    """
    return self.max(dim_alias("amax", axis, dim, None), keepdim)

  def amin(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """The smallest value over `axis`, as torch.amin (the same as min).

    >>> Tensor([[1, 5], [3, 4]]).amin(dim=1).tolist()
    [1, 3]
    """
    return self.min(dim_alias("amin", axis, dim, None), keepdim)

  def norm(self, p: float | str = "fro", axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """The p-norm of the vectors along `axis` (of all the elements when None), as torch's Tensor.norm and
    torch.linalg.vector_norm: (sum |x|^p)^(1/p); "fro" is p = 2, inf the largest |x|, -inf the smallest, 0 the count
    of non-zeros. Ints become float. The gradient at a zero vector is 0, as torch's.

    >>> Tensor([3.0, -4.0]).norm().item(), Tensor([3.0, -4.0]).norm(1).item(), Tensor([3.0, -4.0]).norm(math.inf).item()
    (5.0, 7.0, 4.0)
    """
    axis = dim_alias("norm", axis, dim, None)
    if p == "fro": p = 2.0
    if not isinstance(p, (int, float, np.integer, np.floating)) or isinstance(p, bool):
      raise ValueError(f"norm: p must be a number, inf, -inf or 'fro', got {p!r}")
    x = self._to_float()
    if p == math.inf: return x.abs().max(axis, keepdim)
    if p == -math.inf: return x.abs().min(axis, keepdim)
    if p == 0: return x.ne(0).sum(axis, keepdim).cast(x.dtype)
    if p == 1: return x.abs().sum(axis, keepdim)
    total = (x.square() if p == 2 else x.abs() ** float(p)).sum(axis, keepdim)
    # the root's derivative is infinite at 0, and times the zero gradient of the sum it would be NaN
    zero = total == 0
    return zero.where(0, zero.where(1, total) ** (1 / float(p)))

  def count_nonzero(self, axis: Axis = None, *, dim: Axis = None) -> Self:
    """The number of non-zero elements over `axis` (all when None), as torch.count_nonzero (dtypes.default_int).

    >>> Tensor([[0, 1, 2], [0, 0, 3]]).count_nonzero(dim=1).tolist()
    [2, 1]
    """
    return self.ne(0).sum(dim_alias("count_nonzero", axis, dim, None))

  def nansum(self, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None, *,
             dim: Axis = None) -> Self:
    """sum treating NaN as 0, as torch.nansum.

    >>> Tensor([1.0, float("nan"), 2.0]).nansum().item()
    3.0
    """
    x = self.isnan().where(0, self) if self.dtype.is_float else self
    return x.sum(dim_alias("nansum", axis, dim, None), keepdim, dtype)

  def nanmean(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Self:
    """The mean of the values that are not NaN, as torch.nanmean (NaN where all are); ints become float.

    >>> Tensor([1.0, float("nan"), 2.0]).nanmean().item()
    1.5
    """
    axis = dim_alias("nanmean", axis, dim, None)
    x = self._to_float()
    count = x.isnan().logical_not().sum(axis, keepdim)
    return (x.nansum(axis, keepdim, dtype=self._acc_dtype(x.dtype)) / count).cast(x.dtype)

  def diff(self, n: int = 1, dim: int = -1, prepend: Self | None = None, append: Self | None = None) -> Self:
    """The n-th forward difference along `dim`, as torch.diff: out[i] = x[i + 1] - x[i], applied n times, after
    joining `prepend` and `append` to the ends; bools give x[i + 1] != x[i].

    >>> Tensor([1, 4, 9, 16]).diff().tolist(), Tensor([1, 4, 9, 16]).diff(2).tolist()
    ([3, 5, 7], [2, 2])
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
      raise ValueError(f"diff: n must be a non-negative int, got {n!r}")
    if self.ndim == 0: raise ValueError("diff: needs at least a 1-d tensor")
    d = self._resolve_axis(dim)
    parts = [t for t in (prepend, self, append) if t is not None]
    for t in parts:
      if not self._is_tensor(t): raise TypeError(f"diff: prepend and append must be Tensors, got {type(t).__name__}")
    x = parts[0].cat(*parts[1:], dim=d) if len(parts) > 1 else self
    for _ in range(int(n)):
      m = x.shape[d]
      if m == 0: break
      hi, lo = x.narrow(d, 1, m - 1), x.narrow(d, 0, m - 1)
      x = hi.ne(lo) if x.dtype.is_bool else hi - lo
    return x

  def _check_ndims(self, name: str, other: Any, ndims: tuple[int, int]) -> None:
    if not self._is_tensor(other): raise TypeError(f"{name}: expected a Tensor, got {type(other).__name__}")
    if (self.ndim, other.ndim) != ndims:
      raise ValueError(f"{name}: expected {ndims[0]}-d and {ndims[1]}-d tensors, got shapes {self.shape} and "
                       f"{other.shape}")

  def outer(self, vec2: Self) -> Self:
    """The outer product of two 1-d tensors, as torch.outer: out[i, j] = self[i] * vec2[j] (a broadcast multiply).

    >>> Tensor([1, 2]).outer(Tensor([1, 10, 100])).tolist()
    [[1, 10, 100], [2, 20, 200]]
    """
    self._check_ndims("outer", vec2, (1, 1))
    return self.unsqueeze(1) * vec2.unsqueeze(0)

  def inner(self, other: Self) -> Self:
    """The sums of products over the last dims, as torch.inner: shape self.shape[:-1] + other.shape[:-1] (a matmul);
    a 0-d operand multiplies.

    >>> Tensor([[1, 2], [3, 4]]).inner(Tensor([1, 10])).tolist()
    [21, 43]
    """
    if not self._is_tensor(other): raise TypeError(f"inner: expected a Tensor, got {type(other).__name__}")
    if self.ndim == 0 or other.ndim == 0: return self * other
    if self.shape[-1] != other.shape[-1]:
      raise ValueError(f"inner: the last dims of {self.shape} and {other.shape} differ: {self.shape[-1]} != "
                       f"{other.shape[-1]}")
    n = self.shape[-1]
    return (self.reshape(-1, n) @ other.reshape(-1, n).transpose(0, 1)).reshape(self.shape[:-1] + other.shape[:-1])

  def kron(self, other: Self) -> Self:
    """The Kronecker product, as torch.kron: each element of self times all of other, in blocks of other's shape
    (the operand with fewer dims gets leading 1s); a broadcast multiply.

    >>> Tensor([[1, 2], [3, 4]]).kron(Tensor([[1, 10]])).tolist()
    [[1, 10, 2, 20], [3, 30, 4, 40]]
    """
    if not self._is_tensor(other): raise TypeError(f"kron: expected a Tensor, got {type(other).__name__}")
    nd = max(self.ndim, other.ndim)
    a, b = self.reshape((1,) * (nd - self.ndim) + self.shape), other.reshape((1,) * (nd - other.ndim) + other.shape)
    # (a0, 1, a1, 1, ...) * (1, b0, 1, b1, ...): element (i0, j0, i1, j1, ...) is a[i] * b[j]
    spread = a.reshape([s for n in a.shape for s in (n, 1)]) * b.reshape([s for n in b.shape for s in (1, n)])
    return spread.reshape([m * n for m, n in zip(a.shape, b.shape)])

  def mm(self, mat2: Self) -> Self:
    """The product of two matrices, as torch.mm: the same as matmul, for 2-d tensors only.

    >>> Tensor([[1, 2]]).mm(Tensor([[3], [4]])).tolist()
    [[11]]
    """
    self._check_ndims("mm", mat2, (2, 2))
    return self.matmul(mat2)

  def bmm(self, mat2: Self) -> Self:
    """Batched matrix products, as torch.bmm: (b, n, m) @ (b, m, p) -> (b, n, p), with equal batch sizes (matmul
    broadcasts them; bmm does not).

    >>> Tensor.ones(2, 3, 4).bmm(Tensor.ones(2, 4, 5)).shape
    (2, 3, 5)
    """
    self._check_ndims("bmm", mat2, (3, 3))
    if self.shape[0] != mat2.shape[0]:
      raise ValueError(f"bmm: batch sizes differ: {self.shape} and {mat2.shape}")
    return self.matmul(mat2)

  def mv(self, vec: Self) -> Self:
    """The product of a matrix and a vector, as torch.mv: (n, m) @ (m,) -> (n,).

    >>> Tensor([[1, 2], [3, 4]]).mv(Tensor([1, 1])).tolist()
    [3, 7]
    """
    self._check_ndims("mv", vec, (2, 1))
    return self.matmul(vec)

  def addmm(self, mat1: Self, mat2: Self, *, beta: float = 1.0, alpha: float = 1.0) -> Self:
    """beta * self + alpha * (mat1 @ mat2), as torch.addmm (self broadcasts to the product's shape).

    >>> Tensor([1.0, 2.0]).addmm(Tensor([[1.0, 1.0]]), Tensor([[1.0, 2.0], [3.0, 4.0]]), alpha=0.5).tolist()
    [[3.0, 5.0]]
    """
    if not self._is_tensor(mat1): raise TypeError(f"addmm: expected Tensors, got {type(mat1).__name__}")
    mat1._check_ndims("addmm", mat2, (2, 2))
    product = mat1.matmul(mat2)
    # beta 0 ignores self's values, NaN included, as torch
    base = self.zeros_like() if beta == 0 else self * beta if beta != 1 else self
    return base + (product * alpha if alpha != 1 else product)

  def trace(self) -> Self:
    """The sum of the main diagonal of a matrix, as torch.trace.

    >>> Tensor([[1, 2], [3, 4]]).trace().item()
    5
    """
    if self.ndim != 2: raise ValueError(f"trace: expected a matrix, got shape {self.shape}")
    return self.diagonal().sum()

  def cross(self, other: Self, dim: int = -1) -> Self:
    """The cross product of 3-vectors along `dim`, as torch.linalg.cross; the operands broadcast.

    >>> Tensor([1.0, 0.0, 0.0]).cross(Tensor([0.0, 1.0, 0.0])).tolist()
    [0.0, 0.0, 1.0]
    """
    if not self._is_tensor(other): raise TypeError(f"cross: expected a Tensor, got {type(other).__name__}")
    a, b = self._broadcasted(other)
    d = a._resolve_axis(dim)
    if a.ndim == 0 or a.shape[d] != 3:
      raise ValueError(f"cross: dim {dim} must have size 3 in both operands, got shapes {self.shape} and "
                       f"{other.shape}")
    # component i is a[i+1] * b[i+2] - a[i+2] * b[i+1], indices mod 3: two rolled copies of each operand
    return a.roll(-1, d) * b.roll(-2, d) - a.roll(-2, d) * b.roll(-1, d)
