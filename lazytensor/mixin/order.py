"""Ordering along one axis: scans (cumsum, cumprod, logcumsumexp, cummax, cummin), sorting (sort, argsort, topk)
and the order statistics (median, quantile, kthvalue). Each moves the axis last (a 0-d tensor as a 1-element vector)
and runs the last-axis algorithms of scans.py and sort_network.py."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from lazytensor.dtype import DType, dtypes, to_dtype
from lazytensor.helpers import dim_alias
from lazytensor.mixin.reduce import ReduceMixin
from lazytensor.mixin.scans import (
  LOGSUMEXP_SCAN_BLOCK,
  SCAN_BLOCK,
  cum_extreme_last,
  cumsum_float_last,
  cumsum_last,
  scan_last,
)
from lazytensor.mixin.select import kth_last, selects, topk_last, topk_selects
from lazytensor.mixin.sort_network import sorted_last

if TYPE_CHECKING:
  from typing import Self

class OrderMixin(ReduceMixin):
  """Tensor's scans, sorting and order statistics: on the reduce mixin and those below it."""
  __slots__ = ()

  # ---- scans and sorting: along one axis, moved last (and 0-d tensors as 1-element vectors) ----

  def _along(self, axis: int, fn: Callable[[Self], Any]) -> Any:
    """fn applied to self with `axis` moved last; every tensor it returns gets the axis moved back."""
    d = self._resolve_axis(axis)
    x = self.reshape(1) if self.ndim == 0 else self.transpose(d, -1)
    out = fn(x)
    back = (lambda t: t.reshape(())) if self.ndim == 0 else (lambda t: t.transpose(d, -1))
    return tuple(back(t) for t in out) if isinstance(out, tuple) else back(out)

  def _scan(self, axis: int, reduce: Callable[[Self, int], Self], identity: Any, block: int = SCAN_BLOCK) -> Self:
    self._resolve_axis(axis)
    if self.numel() == 0: return self
    return self._along(axis, lambda x: scan_last(x, reduce, identity, block))

  def cumsum(self, axis: int = 0, dtype: DType | str | None = None, *, dim: int | None = None) -> Self:
    """Cumulative sum along `axis` (ints and bools sum as in sum): blocks of 32 elements times a triangle of ones (a
    matmul), then each block's carry added, so the work stays linear.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).cumsum(1).tolist()
    [[1, 3, 6], [4, 9, 15]]
    """
    axis = dim_alias("cumsum", axis, dim, 0)
    out = to_dtype(dtype) if dtype is not None else self._sum_dtype()
    x = self.cast(self._acc_dtype(out))
    x._resolve_axis(axis)
    return (x if x.numel() == 0 else x._along(axis, cumsum_float_last if x.dtype.is_float else cumsum_last)).cast(out)

  def cumprod(self, axis: int = 0, dtype: DType | str | None = None, *, dim: int | None = None) -> Self:
    """Cumulative product along `axis` (ints and bools multiply as in prod).

    >>> Tensor([1, 2, 3, 4]).cumprod().tolist()
    [1, 2, 6, 24]
    """
    axis = dim_alias("cumprod", axis, dim, 0)
    out = to_dtype(dtype) if dtype is not None else self._sum_dtype()
    return self.cast(self._acc_dtype(out))._scan(axis, lambda t, ax: t.prod(ax), 1).cast(out)

  def logcumsumexp(self, axis: int = 0, *, dim: int | None = None) -> Self:
    """log(cumsum(exp(x))) along `axis`, stable for large and small values; ints become float.

    >>> [round(v, 4) for v in Tensor([0.0, 0.0, 1000.0]).logcumsumexp().tolist()]
    [0.0, 0.6931, 1000.0]
    """
    axis = dim_alias("logcumsumexp", axis, dim, 0)
    return self._to_float()._scan(axis, lambda t, ax: t.logsumexp(ax), -math.inf, LOGSUMEXP_SCAN_BLOCK)

  def _cum_extreme(self, axis: int, largest: bool) -> tuple[Self, Self]:
    self._resolve_axis(axis)
    if self.numel() == 0: return self, type(self).zeros(self.shape, dtype=dtypes.default_int, device=self.device)
    return self._along(axis, lambda x: cum_extreme_last(x, largest))

  def cummax(self, axis: int = 0, *, dim: int | None = None) -> tuple[Self, Self]:
    """The running maximum along `axis` (NaN propagates) and the index of the last element equal to it (in
    dtypes.default_int), as torch's (values, indices) and tinygrad's pair. Scans of order codes (ints) in blocks; the
    value is read at that index, and the gradient goes there, as torch's.

    >>> [t.tolist() for t in Tensor([1, 3, 2, 3]).cummax()]
    [[1, 3, 3, 3], [0, 1, 1, 3]]
    """
    return self._cum_extreme(dim_alias("cummax", axis, dim, 0), largest=True)

  def cummin(self, axis: int = 0, *, dim: int | None = None) -> tuple[Self, Self]:
    """The running minimum along `axis` and the index of the last element equal to it, as torch's (values, indices).

    >>> [t.tolist() for t in Tensor([3, 1, 2, 1]).cummin()]
    [[3, 1, 1, 1], [0, 1, 1, 3]]
    """
    return self._cum_extreme(dim_alias("cummin", axis, dim, 0), largest=False)

  def sort(self, dim: int = -1, descending: bool = False) -> tuple[Self, Self]:
    """The values along `dim` in order, and their indices (dtypes.default_int). The sort is stable and NaN
    sorts as the largest, as torch's stable sort. Short rows compare every pair of elements (O(n^2), two or three
    kernels); longer rows go through a bitonic network (O(n log^2 n): 55 steps for 1024, in 39 kernels for keys of
    up to 32 bits, 111 for wider ones).

    >>> [t.tolist() for t in Tensor([3, 1, 2, 1]).sort()]
    [[1, 1, 2, 3], [1, 3, 2, 0]]
    """
    self._resolve_axis(dim)
    if self.numel() == 0: return self, type(self).zeros(self.shape, dtype=dtypes.default_int, device=self.device)
    return self._along(dim, lambda x: sorted_last(x, descending, x.shape[-1]))

  def argsort(self, dim: int = -1, descending: bool = False) -> Self:
    """The indices that sort the tensor along `dim` (stable; see sort).

    >>> Tensor([3.0, 1.0, 2.0]).argsort(descending=True).tolist()
    [0, 2, 1]
    """
    return self.sort(dim, descending)[1]

  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Self, Self]:
    """The k largest (or smallest) values along `dim`, in order, and their indices (dtypes.default_int). Ties keep
    their original order; the result is always sorted (`sorted_` is accepted for torch's signature). Short rows
    compare every pair; longer rows take k selection passes for a few, a radix select of the k-th and a sort of the
    k kept ones for k up to 512 (mixin/select.py), else the bitonic network of sort.

    >>> [t.tolist() for t in Tensor([1, 5, 3, 4]).topk(2)]
    [[5, 4], [1, 3]]
    """
    d = self._resolve_axis(dim)
    n = self.shape[d] if self.ndim else 1
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 0 <= k <= n:
      raise ValueError(f"topk: k={k!r} must be an int in [0, {n}] for dimension {d} of {self.shape}")
    if k == 0 or self.numel() == 0:
      shape = tuple(k if i == d else s for i, s in enumerate(self.shape))
      return (type(self).zeros(shape, dtype=self.dtype, device=self.device),
              type(self).zeros(shape, dtype=dtypes.default_int, device=self.device))
    return self._along(dim, lambda x: topk_last(x, largest, int(k)) if topk_selects(x, int(k)) else
                       sorted_last(x, largest, int(k)))

  # ---- order statistics ----

  def _ranked(self, d: int, ranks: Sequence[int]) -> list[tuple[Self, Self]]:
    """The elements of the given ranks (0-based) in a stable sort along dim d and their indices, each of size 1 along
    d: selected by radix passes for a few ranks of long rows, else read from the sort."""
    if self.ndim == 0: return [(self, type(self).zeros((), dtype=dtypes.default_int, device=self.device))] * len(ranks)
    if selects(self.shape[d], len(ranks)):
      def kth(rank: int) -> tuple[Self, Self]: return self._along(d, lambda x: kth_last(x, rank))
      return [kth(r) for r in ranks]
    values, indices = self.sort(d)
    return [(values.narrow(d, r, 1), indices.narrow(d, r, 1)) for r in ranks]

  def median(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None,
             return_indices: bool = False) -> Self | tuple[Self, Self]:
    """The lower median along `axis` (of the flattened tensor when None): the ((n - 1) // 2)-th value in sorted
    order, as torch.median; a NaN anywhere along the axis gives NaN (and its first index). With return_indices=True
    also its index (dtypes.default_int), as torch's (values, indices). Long rows select it by radix passes (O(n) each,
mixin/select.py) instead of sorting.

    >>> Tensor([3.0, 1.0, 4.0, 2.0]).median().item()
    2.0
    >>> [t.tolist() for t in Tensor([[3, 1, 2], [9, 7, 8]]).median(dim=1, return_indices=True)]
    [[2, 8], [2, 2]]
    """
    axis = dim_alias("median", axis, dim, None)
    if axis is None:
      out = self.reshape(-1).median(0, return_indices=return_indices)
      shape = (1,) * self.ndim if keepdim else ()
      return (out[0].reshape(shape), out[1].reshape(shape)) if isinstance(out, tuple) else out.reshape(shape)
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
      raise TypeError(f"median: axis must be an int or None, got {axis!r}")
    d = self._resolve_axis(axis)
    self._check_nonempty("median", d)
    (value, index), = self._ranked(d, [((self.shape[d] if self.ndim else 1) - 1) // 2])
    if self.dtype.is_float:
      nan = self.isnan()
      has_nan = nan.any(d, keepdim=True)
      value, index = has_nan.where(math.nan, value), has_nan.where(nan.argmax(d, keepdim=True), index)
    if not keepdim and self.ndim: value, index = value.squeeze(d), index.squeeze(d)
    return (value, index) if return_indices else value

  def quantile(self, q: float | Sequence[float], axis: int | None = None, keepdim: bool = False,
               interpolation: str = "linear", *, dim: int | None = None) -> Self:
    """The q-th quantiles along `axis` (of the flattened tensor when None), as torch.quantile: position q * (n - 1)
    in sorted order, between neighbours by `interpolation` ("linear", "lower", "higher", "nearest", "midpoint"). A
    sequence of q gives a first dim of one quantile each; a NaN along the axis gives NaN. Ints become float. The
    neighbours of a q or two along long rows are selected (mixin/select.py), those of more from a sort.

    >>> Tensor([1.0, 2.0, 3.0, 4.0]).quantile(0.5).item(), Tensor([1.0, 2.0, 3.0, 4.0]).quantile([0.0, 1.0]).tolist()
    (2.5, [1.0, 4.0])
    """
    axis = dim_alias("quantile", axis, dim, None)
    one_q = isinstance(q, (int, float, np.integer, np.floating)) and not isinstance(q, bool)
    qs = [cast(float, q)] if one_q else cast(Sequence[float], q)
    if self._is_tensor(q) or not isinstance(qs, (list, tuple)) or \
       not all(isinstance(v, (int, float, np.integer, np.floating)) and 0 <= v <= 1 for v in qs):
      raise TypeError(f"quantile: q must be a number in [0, 1] or a sequence of them, got {q!r}")
    if interpolation not in ("linear", "lower", "higher", "nearest", "midpoint"):
      raise ValueError(f"quantile: interpolation {interpolation!r} must be linear, lower, higher, nearest or midpoint")
    if axis is not None and (not isinstance(axis, (int, np.integer)) or isinstance(axis, bool)):
      raise TypeError(f"quantile: axis must be an int or None, got {axis!r}")
    x = self._to_float()
    flat = x.reshape(-1) if axis is None or x.ndim == 0 else x
    d = 0 if axis is None or x.ndim == 0 else x._resolve_axis(axis)
    n = flat.shape[d]
    if n == 0: raise ValueError(f"quantile: cannot take quantiles over a zero-size dimension of {self.shape}")
    has_nan = flat.isnan().any(d, keepdim=True)
    def ranks(v: float) -> list[int]:
      pos = float(v) * (n - 1)
      return [round(pos)] if interpolation == "nearest" else [math.floor(pos), math.ceil(pos)]
    needed = sorted({r for v in qs for r in ranks(v)})
    at = dict(zip(needed, (value for value, _ in flat._ranked(d, needed))))
    outs = []
    for v in qs:
      pos = float(v) * (n - 1)
      lo, hi = math.floor(pos), math.ceil(pos)
      if interpolation == "nearest": below = above = at[round(pos)]
      else: below, above = at[lo], at[hi]
      picked = {"lower": below, "higher": above, "nearest": below, "midpoint": (below + above) * 0.5}.get(interpolation)
      out = has_nan.where(math.nan, below.lerp(above, pos - lo) if picked is None else picked)
      if axis is None: out = out.reshape((1,) * self.ndim if keepdim else ())
      elif not keepdim: out = out.squeeze(d)
      outs.append(out)
    return outs[0] if one_q else outs[0].stack(*outs[1:])

  def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Self, Self]:
    """The k-th smallest value along `dim` (k counts from 1) and its index (dtypes.default_int), as torch.kthvalue:
    the element a stable sort puts there (NaN the largest). Long rows select it by radix passes (O(n) each,
    mixin/select.py) instead of sorting.

    >>> [t.tolist() for t in Tensor([[3.0, 1.0, 2.0], [9.0, 7.0, 8.0]]).kthvalue(2)]
    [[2.0, 8.0], [2, 2]]
    """
    d = self._resolve_axis(dim)
    n = self.shape[d] if self.ndim else 1
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= n:
      raise ValueError(f"kthvalue: k={k!r} must be an int in [1, {n}] for dim {d} of {self.shape}")
    if self.ndim == 0: return self, type(self).zeros((), dtype=dtypes.default_int, device=self.device)
    (value, index), = self._ranked(d, [int(k) - 1])
    return (value, index) if keepdim else (value.squeeze(d), index.squeeze(d))
