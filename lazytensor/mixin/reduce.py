"""Reductions (sum, max, mean, var, argmax, softmax, ...), scans (cumsum, cummax, ...), sorting, and matmul."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from lazytensor.dtype import DType, dtypes, promote_types, to_dtype
from lazytensor.graph import const_uop
from lazytensor.helpers import dim_alias, prod
from lazytensor.mixin.math_ops import cum_extreme, matmul, scan, sort_ranks, take_ranked
from lazytensor.mixin.stub import TensorStub
from lazytensor.uop.ops import DeviceLike, Ops, UOp

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

# the dims a reduction runs over: one, several or (None) all; methods take it as numpy's axis= or torch's dim=
Axis = int | Sequence[int] | None

class ReduceMixin(TensorStub):
  """Tensor's reductions, scans, sorting and matmul. Its only subclass is Tensor (tensor.py), so every
  ReduceMixin is a Tensor."""
  __slots__ = ()
  if TYPE_CHECKING:  # what the methods below use from Tensor and its other mixins, beyond TensorStub, for mypy
    def _resolve_axis(self, axis: int, ndim: int | None = None) -> int: ...
    def _to_float(self) -> Tensor: ...
    def cast(self, dtype: DType | str) -> Tensor: ...
    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor: ...
    def logical_not(self) -> Tensor: ...
    def ne(self, x: Tensor | Any) -> Tensor: ...
    @classmethod
    def zeros(cls, *shape: Any, **kwargs: Any) -> Tensor: ...
    @classmethod
    def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DType | str | None = None, device: DeviceLike | None = None,
               requires_grad: bool | None = None) -> Tensor: ...
    def __neg__(self) -> Tensor: ...
    def __invert__(self) -> Tensor: ...
    def __eq__(self, x: Tensor | Any) -> Tensor: ...  # type: ignore[override]

  def _axes(self, axis: Axis) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    if not isinstance(axis, (int, np.integer, tuple, list)):
      raise TypeError(f"axis must be an int, a sequence of ints or None, got {axis!r}")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    resolved = tuple(self._resolve_axis(a) for a in axes)
    if len(set(resolved)) != len(resolved): raise ValueError(f"axis {axis} repeats a dimension")
    return tuple(sorted(resolved)) if self.ndim else ()  # a 0-d tensor takes axis 0 or -1, and has nothing to reduce

  def _reduce(self, op: Ops, axis: Axis, keepdim: bool) -> Tensor:
    all_axes = self._axes(axis)
    axes = tuple(a for a in all_axes if self.shape[a] != 1)
    ret = self._apply_uop(lambda x: UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (op, axes))) if axes else cast("Tensor", self)
    if keepdim: return ret
    return ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in all_axes))

  def _sum_dtype(self) -> DType:
    # ints and bools widen to the default int (int64, as torch; int32 where a program sets it, as tinygrad)
    if self.dtype == dtypes.uint64 or self.dtype.is_float: return self.dtype
    return promote_types(self.dtype, dtypes.default_int)

  def _acc_dtype(self, out: DType) -> DType: return dtypes.float32 if out.is_half else out

  def _accumulate(self, op: Ops, axis: Axis, keepdim: bool, dtype: DType | str | None) -> Tensor:
    """sum and prod: torch's result dtype, a float32 accumulator for 16-bit floats, the identity for empty inputs."""
    out = to_dtype(dtype) if dtype is not None else self._sum_dtype()
    if self.numel() == 0 and self.ndim: return self._empty_reduce(0 if op is Ops.ADD else 1, axis, keepdim, out)
    return self.cast(self._acc_dtype(out))._reduce(op, axis, keepdim).cast(out)

  def sum(self, axis: Axis = None, keepdim: bool = False,
          dtype: DType | str | None = None, *, dim: Axis = None) -> Tensor:
    """Sum over `axis` (all by default); ints and bools sum as dtypes.default_int (int64) or wider, float16 and
    bfloat16 accumulate in float32.

    >>> Tensor([[1, 2], [3, 4]]).sum(0).tolist()
    [4, 6]
    """
    axis = dim_alias("sum", axis, dim, None)
    return self._accumulate(Ops.ADD, axis, keepdim, dtype)

  def prod(self, axis: Axis = None, keepdim: bool = False,
           dtype: DType | str | None = None, *, dim: Axis = None) -> Tensor:
    """The product over `axis` (all by default); ints and bools multiply as sum adds them.

    >>> Tensor([[1, 2], [3, 4]]).prod(1).tolist()
    [2, 12]
    """
    axis = dim_alias("prod", axis, dim, None)
    return self._accumulate(Ops.MUL, axis, keepdim, dtype)

  def _empty_reduce(self, value: Any, axis: Axis, keepdim: bool, dtype: DType) -> Tensor:
    axes = self._axes(axis)
    shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape)) if keepdim else \
      tuple(s for i, s in enumerate(self.shape) if i not in axes)
    # through _apply_uop, so that the result needs gradients (all zero) when self does, as in torch
    return self._apply_uop(lambda x: const_uop(value, dtype, x.device, shape))

  def _check_nonempty(self, name: str, axis: Axis) -> None:
    if any(self.shape[a] == 0 for a in self._axes(axis)):
      raise ValueError(f"{name}: cannot reduce over a zero-size dimension of {self.shape}")

  def max(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
    """The largest value over `axis` (NaN propagates).

    >>> Tensor([[1, 5], [3, 4]]).max(1).tolist()
    [5, 4]
    """
    axis = dim_alias("max", axis, dim, None)
    self._check_nonempty("max", axis)
    return self._reduce(Ops.MAX, axis, keepdim)

  def min(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
    """The smallest value over `axis` (NaN propagates).

    >>> Tensor([[1, 5], [3, 4]]).min(0).tolist()
    [1, 4]
    """
    axis = dim_alias("min", axis, dim, None)
    self._check_nonempty("min", axis)
    if self.dtype.is_bool: return self.logical_not().max(axis, keepdim).logical_not()
    if self.dtype.is_float: return -((-self).max(axis, keepdim))
    return ~((~self).max(axis, keepdim))

  def mean(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
    """The average over `axis`; ints become float.

    >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).mean().item()
    2.5
    """
    axis = dim_alias("mean", axis, dim, None)
    x = self._to_float()
    acc = self._acc_dtype(x.dtype)  # float16 sums overflow long before their mean does
    total = x.sum(axis, keepdim, dtype=acc)
    count = prod(self.shape[a] for a in self._axes(axis))
    return (total * (1 / count) if count else total / 0).cast(x.dtype)

  def var(self, axis: Axis = None, keepdim: bool = False, correction: int = 1, *, dim: Axis = None) -> Tensor:
    """The variance over `axis`, dividing by (count - correction); ints become float.

    >>> Tensor([1.0, 2.0, 3.0, 4.0]).var().item()
    1.6666666269302368
    """
    axis = dim_alias("var", axis, dim, None)
    x = self._to_float()
    xa = x.cast(self._acc_dtype(x.dtype))
    count = prod(self.shape[a] for a in self._axes(axis))
    sq = (xa - xa.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return (sq / max(0, count - correction)).cast(x.dtype)

  def std(self, axis: Axis = None, keepdim: bool = False, correction: int = 1, *, dim: Axis = None) -> Tensor:
    """The standard deviation over `axis`: the square root of var.

    >>> Tensor([1.0, 3.0]).std().item()
    1.4142135381698608
    """
    axis = dim_alias("std", axis, dim, None)
    return self.var(axis, keepdim, correction).sqrt()

  def any(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
    """Whether any element over `axis` is non-zero (bool).

    >>> Tensor([[0, 1], [0, 0]]).any(1).tolist()
    [True, False]
    """
    axis = dim_alias("any", axis, dim, None)
    if self.numel() == 0: return self._empty_reduce(False, axis, keepdim, dtypes.bool)
    return self.cast(dtypes.bool).max(axis, keepdim)

  def all(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
    """Whether every element over `axis` is non-zero (bool).

    >>> Tensor([[1, 1], [0, 1]]).all(1).tolist()
    [True, False]
    """
    axis = dim_alias("all", axis, dim, None)
    if self.numel() == 0: return self._empty_reduce(True, axis, keepdim, dtypes.bool)
    return self.logical_not().any(axis, keepdim).logical_not()

  def argmax(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Tensor:
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

  def argmin(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None) -> Tensor:
    """The index of the first smallest value (dtypes.default_int); with axis None, into the flattened tensor.

    >>> Tensor([3, 1, 1]).argmin().item()
    1
    """
    axis = dim_alias("argmin", axis, dim, None)
    if self.dtype.is_bool: return self.logical_not().argmax(axis, keepdim)
    return (-self if self.dtype.is_float else ~self).argmax(axis, keepdim)

  def softmax(self, axis: int = -1, *, dim: int | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, computed stably.

    >>> round(Tensor([0.0, 0.0]).softmax().tolist()[0], 3)
    0.5
    """
    axis = dim_alias("softmax", axis, dim, -1)
    x = self._to_float()
    if x.numel() == 0: return x._check_axis(axis)
    # the shift by the max cancels out of the result, so it is detached: its gradient would be zero, at the cost of
    # two more backward kernels (the tie mask and its count)
    e = (x - x.max(axis, keepdim=True).detach()).exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1, *, dim: int | None = None) -> Tensor:
    """log(softmax(x)) along `axis`, computed without taking the log of a rounded-off zero.

    >>> [round(v, 4) for v in Tensor([0.0, 0.0]).log_softmax().tolist()]
    [-0.6931, -0.6931]
    """
    axis = dim_alias("log_softmax", axis, dim, -1)
    x = self._to_float()
    if x.numel() == 0: return x._check_axis(axis)
    # the shift cancels out (see softmax): no gradient through it
    shifted = x - x.max(axis, keepdim=True).detach()
    return shifted - shifted.exp().sum(axis, keepdim=True).log()

  def logsumexp(self, axis: Axis = None, keepdim: bool = False, *, dim: Axis = None) -> Tensor:
    """log(sum(exp(x))) over `axis`, stable for large values; a row of -inf (or an empty one) gives -inf.

    >>> round(Tensor([1000.0, 1000.0]).logsumexp().item(), 2)
    1000.69
    """
    axis = dim_alias("logsumexp", axis, dim, None)
    x = self._to_float()
    if x.numel() == 0: return x._empty_reduce(-math.inf, axis, keepdim, x.dtype)
    # the shift cancels out (see softmax): no gradient through it
    m = x.max(axis, keepdim=True).detach()
    m = (m.abs() == float("inf")).where(0, m)  # all -inf rows give -inf, not nan
    ret = (x - m).exp().sum(axis, keepdim=True).log() + m
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in self._axes(axis)))

  def _check_axis(self, axis: Axis) -> Tensor:
    self._axes(axis)  # raises for a bad axis
    return cast("Tensor", self)

  def var_mean(self, axis: Axis = None, keepdim: bool = False,
               correction: int = 1, *, dim: Axis = None) -> tuple[Tensor, Tensor]:
    """The variance and the mean over `axis`, as torch.var_mean.

    >>> [t.item() for t in Tensor([1.0, 2.0, 3.0]).var_mean()]
    [1.0, 2.0]
    """
    axis = dim_alias("var_mean", axis, dim, None)
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  def std_mean(self, axis: Axis = None, keepdim: bool = False,
               correction: int = 1, *, dim: Axis = None) -> tuple[Tensor, Tensor]:
    """The standard deviation and the mean over `axis`, as torch.std_mean.

    >>> [t.item() for t in Tensor([1.0, 3.0]).std_mean(correction=0)]
    [1.0, 2.0]
    """
    axis = dim_alias("std_mean", axis, dim, None)
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  # ---- scans and sorting: along one axis, moved last (and 0-d tensors as 1-element vectors) ----

  def _along(self, axis: int, fn: Callable[[Tensor], Any]) -> Any:
    """fn applied to self with `axis` moved last; every tensor it returns gets the axis moved back."""
    d = self._resolve_axis(axis)
    x = cast("Tensor", self).reshape(1) if self.ndim == 0 else cast("Tensor", self).transpose(d, -1)
    out = fn(x)
    back = (lambda t: t.reshape(())) if self.ndim == 0 else (lambda t: t.transpose(d, -1))
    return tuple(back(t) for t in out) if isinstance(out, tuple) else back(out)

  def _scan(self, axis: int, reduce: Callable[[Tensor, int], Tensor], identity: Any) -> Tensor:
    self._resolve_axis(axis)
    if self.numel() == 0: return cast("Tensor", self)
    return self._along(axis, lambda x: scan(x, reduce, identity))

  def cumsum(self, axis: int = 0, dtype: DType | str | None = None, *, dim: int | None = None) -> Tensor:
    """Cumulative sum along `axis` (ints and bools sum as in sum). One reduce over each element's prefix up to
    512 elements; longer axes scan in blocks of up to 256 (see tensor_math.scan), so the work stays near linear.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).cumsum(1).tolist()
    [[1, 3, 6], [4, 9, 15]]
    """
    axis = dim_alias("cumsum", axis, dim, 0)
    out = to_dtype(dtype) if dtype is not None else self._sum_dtype()
    return self.cast(self._acc_dtype(out))._scan(axis, lambda t, ax: t.sum(ax), 0).cast(out)

  def cumprod(self, axis: int = 0, dtype: DType | str | None = None, *, dim: int | None = None) -> Tensor:
    """Cumulative product along `axis` (ints and bools multiply as in prod).

    >>> Tensor([1, 2, 3, 4]).cumprod().tolist()
    [1, 2, 6, 24]
    """
    axis = dim_alias("cumprod", axis, dim, 0)
    out = to_dtype(dtype) if dtype is not None else self._sum_dtype()
    return self.cast(self._acc_dtype(out))._scan(axis, lambda t, ax: t.prod(ax), 1).cast(out)

  def logcumsumexp(self, axis: int = 0, *, dim: int | None = None) -> Tensor:
    """log(cumsum(exp(x))) along `axis`, stable for large and small values; ints become float.

    >>> [round(v, 4) for v in Tensor([0.0, 0.0, 1000.0]).logcumsumexp().tolist()]
    [0.0, 0.6931, 1000.0]
    """
    axis = dim_alias("logcumsumexp", axis, dim, 0)
    return self._to_float()._scan(axis, lambda t, ax: t.logsumexp(ax), -math.inf)

  def _cum_extreme(self, axis: int, largest: bool) -> tuple[Tensor, Tensor]:
    self._resolve_axis(axis)
    if self.numel() == 0: return cast("Tensor", self), type(self).zeros(self.shape, dtype=dtypes.default_int)
    return self._along(axis, lambda x: cum_extreme(x, largest))

  def cummax(self, axis: int = 0, *, dim: int | None = None) -> tuple[Tensor, Tensor]:
    """The running maximum along `axis` and, as torch, the index of the last element equal to it (NaN propagates).
    Scans as cumsum; the gradient goes to that index, except on axes longer than 512, where equal elements share it.

    >>> [t.tolist() for t in Tensor([1, 3, 2, 3]).cummax()]
    [[1, 3, 3, 3], [0, 1, 1, 3]]
    """
    axis = dim_alias("cummax", axis, dim, 0)
    return self._cum_extreme(axis, largest=True)

  def cummin(self, axis: int = 0, *, dim: int | None = None) -> tuple[Tensor, Tensor]:
    """The running minimum along `axis` and the index of the last element equal to it, as torch.

    >>> [t.tolist() for t in Tensor([3, 1, 2, 1]).cummin()]
    [[3, 1, 1, 1], [0, 1, 1, 3]]
    """
    axis = dim_alias("cummin", axis, dim, 0)
    return self._cum_extreme(axis, largest=False)

  def sort(self, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """The values along `dim` in order, and their indices (dtypes.default_int). The sort is stable and NaN
    sorts as the largest, as torch's stable sort. It compares every pair of elements (O(n^2) per row, two or three
    kernels): meant for rows of moderate length (up to a few thousand).

    >>> [t.tolist() for t in Tensor([3, 1, 2, 1]).sort()]
    [[1, 1, 2, 3], [1, 3, 2, 0]]
    """
    self._resolve_axis(dim)
    if self.numel() == 0: return cast("Tensor", self), type(self).zeros(self.shape, dtype=dtypes.default_int)
    return self._along(dim, lambda x: take_ranked(x, sort_ranks(x, descending), x.shape[-1]))

  def argsort(self, dim: int = -1, descending: bool = False) -> Tensor:
    """The indices that sort the tensor along `dim` (stable; see sort).

    >>> Tensor([3.0, 1.0, 2.0]).argsort(descending=True).tolist()
    [0, 2, 1]
    """
    return self.sort(dim, descending)[1]

  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
    """The k largest (or smallest) values along `dim`, in order, and their indices (dtypes.default_int). Ties keep
    their original order; the result is always sorted (`sorted_` is accepted for torch's signature). O(n^2)
    comparisons per row.

    >>> [t.tolist() for t in Tensor([1, 5, 3, 4]).topk(2)]
    [[5, 4], [1, 3]]
    """
    d = self._resolve_axis(dim)
    n = self.shape[d] if self.ndim else 1
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 0 <= k <= n:
      raise ValueError(f"topk: k={k!r} must be an int in [0, {n}] for dimension {d} of {self.shape}")
    if k == 0 or self.numel() == 0:
      shape = tuple(k if i == d else s for i, s in enumerate(self.shape))
      return type(self).zeros(shape, dtype=self.dtype), type(self).zeros(shape, dtype=dtypes.default_int)
    return self._along(dim, lambda x: take_ranked(x, sort_ranks(x, descending=largest), int(k)))

  # ---- matmul ----

  def dot(self, w: Tensor) -> Tensor:
    """Matrix product with numpy's rules for 1-D operands and broadcast batch dimensions.

    >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([[1], [1]])).tolist()
    [[3], [7]]
    """
    return matmul(cast("Tensor", self), w)

  def matmul(self, w: Tensor) -> Tensor:
    """The matrix product (`@`): the same as dot.

    >>> (Tensor([[1, 2]]) @ Tensor([[3], [4]])).tolist()
    [[11]]
    """
    return self.dot(w)

  def __matmul__(self, x: Tensor) -> Tensor: return self.matmul(x)
  def __rmatmul__(self, x: Tensor) -> Tensor:
    return (x if isinstance(x, ReduceMixin) else type(self)(x)).matmul(cast("Tensor", self))
