"""Statistics on top of the reductions, sorting and scatter: covariance and correlation, histograms, the mode, the
NaN-ignoring median and quantiles, and torch's small conveniences around them (msort, aminmax, unique_consecutive).

The NaN-ignoring order statistics differ from median and quantile (order.py) in one way: where each row's answer
sits in sorted order depends on how many NaNs the row holds, so it is picked by a gather at a computed position
rather than by a fixed slice.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from lazytensor.dtype import dtypes
from lazytensor.helpers import ArgumentError, NotSupportedError, dim_alias
from lazytensor.mixin.compact import count_now, first_selected
from lazytensor.mixin.index import _is_tensor
from lazytensor.mixin.take_put import TakePutMixin

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="StatsMixin")

INTERPOLATIONS = ("linear", "lower", "higher", "nearest", "midpoint")

def _at(x: TensorT, d: int, pos: TensorT) -> TensorT:
  """x's entries along dim d at the per-row positions pos (size 1 along d)."""
  return x.gather(d, pos.cast(dtypes.default_int))

class StatsMixin(TakePutMixin):
  """Tensor's statistics: on the take/put mixin and those below it."""
  __slots__ = ()

  # ---- covariance and correlation ----

  def cov(self, correction: int = 1, fweights: Self | None = None, aweights: Self | None = None) -> Self:
    """The covariance matrix of the variables in the rows (observations in the columns; a 1-d tensor is one
    variable, giving a 0-d result), as torch.cov: `correction` 1 is Bessel's, fweights are int repeat counts and
    aweights float importance weights of the observations. Ints become float.

    >>> Tensor([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]]).cov().tolist()
    [[1.0, -1.0], [-1.0, 1.0]]
    """
    if self.ndim > 2: raise ValueError(f"cov: needs a 1-d or 2-d tensor (variables, observations), got {self.shape}")
    x = self._to_float().reshape(-1, self.shape[-1] if self.ndim else 1)
    n = x.shape[1]
    w = None
    for name, wt, want_int in (("fweights", fweights, True), ("aweights", aweights, False)):
      if wt is None: continue
      if not _is_tensor(wt) or wt.shape != (n,) or wt.dtype.is_int != want_int or wt.dtype.is_bool:
        kind = "int" if want_int else "float"
        raise ArgumentError(f"cov: {name} must be a 1-d {kind} Tensor of the {n} observations, got "
                            f"{getattr(wt, 'dtype', type(wt).__name__)} of shape {getattr(wt, 'shape', None)}")
      w = wt.cast(x.dtype) if w is None else w * wt.cast(x.dtype)
    if w is None:
      avg, norm = x.mean(1, keepdim=True), x.full((), n - correction, device=x.device)
      xw = x - avg
    else:
      w_sum = w.sum()
      avg = (x * w).sum(1, keepdim=True) / w_sum
      norm = w_sum - (correction * (w * aweights).sum() / w_sum if aweights is not None else correction)
      xw = (x - avg) * w
    # as torch: no degrees of freedom left (norm <= 0) divides by 0
    c = xw @ (x - avg).transpose(0, 1) / norm.maximum(0)
    return c.reshape(()) if self.ndim < 2 else c

  def corrcoef(self) -> Self:
    """Pearson's correlation coefficients of the variables in the rows, as torch.corrcoef: cov scaled by the standard
    deviations, clipped to [-1, 1].

    >>> Tensor([[1.0, 2.0, 3.0], [3.0, 1.0, 2.0]]).corrcoef().tolist()
    [[1.0, -0.5], [-0.5, 1.0]]
    """
    c = self.cov()
    if c.ndim == 0: return c / c
    std = c.diagonal().sqrt()
    return (c / std.reshape(-1, 1) / std.reshape(1, -1)).clamp(-1, 1)

  # ---- histograms and the mode ----

  def _bins_and_range(self, name: str, bins: Any, lo: float, hi: float, widen: float) -> tuple[Self, Self, Self]:
    """For histc and histogram: self flattened, and the range's ends as 0-d tensors: [lo, hi], or self's smallest
    and largest values when lo == hi (widened by `widen` each way when they are equal too)."""
    if not self.dtype.is_float: raise TypeError(f"{name}: needs a float tensor, got {self.dtype}")
    if not isinstance(bins, int) or isinstance(bins, bool) or bins <= 0:
      raise ValueError(f"{name}: bins must be a positive int, got {bins!r}")
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (lo, hi)) or lo > hi:
      raise ValueError(f"{name}: the range ({lo!r}, {hi!r}) must be two finite numbers, the first no larger")
    x = self.reshape(-1)
    if lo != hi: return x, x.full((), lo, device=x.device), x.full((), hi, device=x.device)
    if not x.numel(): return x, x.full((), lo - widen, device=x.device), x.full((), hi + widen, device=x.device)
    smallest, largest = x.min(), x.max()
    same = smallest.eq(largest)
    return x, same.where(smallest - widen, smallest), same.where(largest + widen, largest)

  def _bin_counts(self, bins: int, lo: Self, hi: Self, weight: Self | None = None) -> Self:
    """How many of self's elements (or how much of their weights) fall in each of `bins` equal bins over [lo, hi]:
    the last bin includes hi, values outside count nowhere. One scatter-add."""
    inside = (self >= lo) & (self <= hi)
    b = ((self - lo) * bins / (hi - lo)).floor().cast(dtypes.default_int).minimum(bins - 1)
    amount = inside.cast(self.dtype) if weight is None else inside.where(weight.cast(self.dtype), 0)
    # a value outside adds its amount, 0, to bin 0: an index out of range would raise (engine/index_check.py)
    return self.zeros(bins, dtype=self.dtype, device=self.device).scatter_add(0, inside.where(b, 0), amount)

  def histc(self, bins: int = 100, min: float = 0, max: float = 0) -> Self:
    """The counts of the elements in `bins` equal bins over [min, max] (self's own smallest and largest values when
    min == max, widened by 1 each way if those are equal too), as torch.histc: the last bin includes max, values
    outside are left out. Float tensors only; the counts have self's dtype. One scatter-add.

    >>> Tensor([1.0, 2.0, 1.0, 7.0]).histc(bins=4, min=0, max=4).tolist()
    [0.0, 2.0, 1.0, 0.0]
    """
    x, lo, hi = self._bins_and_range("histc", bins, min, max, 1.0)
    return x._bin_counts(bins, lo, hi)

  def histogram(self, bins: int = 100, range: tuple[float, float] | None = None, weight: Self | None = None,
                density: bool = False) -> tuple[Self, Self]:
    """(counts, bin edges) of `bins` equal bins over `range` (self's smallest and largest values when None, widened
    by 0.5 each way if they are equal), as torch.histogram: with `weight` (self's shape) each element counts its
    weight; with density the counts are scaled to integrate to 1. Float tensors only.

    >>> [t.tolist() for t in Tensor([1.0, 2.0, 1.0, 7.0]).histogram(bins=3, range=(0.0, 3.0))]
    [[0.0, 2.0, 1.0], [0.0, 1.0, 2.0, 3.0]]
    """
    lo_hi = (0.0, 0.0) if range is None else range
    if not isinstance(lo_hi, (tuple, list)) or len(lo_hi) != 2:
      raise ValueError(f"histogram: range must be a pair (min, max) or None, got {range!r}")
    x, lo, hi = self._bins_and_range("histogram", bins, lo_hi[0], lo_hi[1], 0.5)
    if weight is not None and (not _is_tensor(weight) or weight.shape != self.shape):
      raise ArgumentError(f"histogram: weight must be a Tensor of the input's shape {self.shape}, got "
                          f"{getattr(weight, 'shape', type(weight).__name__)}")
    counts = x._bin_counts(bins, lo, hi, None if weight is None else weight.reshape(-1))
    edges = lo + (hi - lo) * (x._iota(bins + 1, x.device).cast(x.dtype) / bins)
    if density: counts = counts / (counts.sum() * (hi - lo) / bins)
    return counts, edges

  def mode(self, dim: int = -1, keepdim: bool = False) -> tuple[Self, Self]:
    """The most frequent value along `dim` (the smallest of those tied) and the index of its last occurrence, as
    torch.mode. Compares every pair of elements of a row: O(n^2).

    >>> [t.tolist() for t in Tensor([[1, 2, 2, 3, 3], [5, 5, 4, 4, 1]]).mode()]
    [[2, 4], [2, 3]]
    """
    d = self._resolve_axis(dim)
    self._check_nonempty("mode", d if self.ndim else None)
    def last(x: Self) -> tuple[Self, Self]:
      counts = (x.unsqueeze(-1) == x.unsqueeze(-2)).sum(-1)
      top = counts.eq(counts.max(-1, keepdim=True))
      largest = x.full((), math.inf if x.dtype.is_float else x.dtype.max(), dtype=x.dtype, device=x.device)
      value = top.where(x, largest).min(-1, True)
      pos = x._iota(x.shape[-1], x.device)
      index = x.eq(value).where(pos, -1).max(-1, keepdim=True).cast(dtypes.default_int)
      # the value read at its index: the gradient goes to that one element, as torch's
      return x.gather(-1, index), index
    value, index = self._along(d, last)
    return (value, index) if keepdim or not self.ndim else (value.squeeze(d), index.squeeze(d))

  # ---- order statistics that ignore NaN ----

  def _sorted_counted(self, name: str, axis: int | None) -> tuple[Self, Self, Self, int]:
    """For the NaN-ignoring order statistics: the sorted values and their indices along d (the flattened tensor's
    dim 0 when axis is None), each row's count of values that are not NaN (size 1 along d), and d."""
    if axis is not None and (not isinstance(axis, int) or isinstance(axis, bool)):
      raise TypeError(f"{name}: dim must be an int or None, got {axis!r}")
    flat = self.reshape(-1) if axis is None or self.ndim == 0 else self
    d = 0 if axis is None or self.ndim == 0 else self._resolve_axis(axis)
    if flat.shape[d] == 0: raise ValueError(f"{name}: cannot reduce over a zero-size dimension of {self.shape}")
    values, indices = flat.sort(d)  # NaN sorts as the largest
    return values, indices, flat.isnan().logical_not().sum(d, keepdim=True), d

  def _kept(self, out: Self, axis: int | None, keepdim: bool, d: int) -> Self:
    if axis is None: return out.reshape((1,) * self.ndim if keepdim else ())
    return out if keepdim or not self.ndim else out.squeeze(d)

  def nanmedian(self, axis: int | None = None, keepdim: bool = False, *, dim: int | None = None,
                return_indices: bool = False) -> Self | tuple[Self, Self]:
    """The lower median of the values that are not NaN along `axis` (of the flattened tensor when None), as
    torch.nanmedian: NaN only where all are. With return_indices=True also its index, as median. Sorts: O(n^2)
    comparisons per row.

    >>> Tensor([3.0, float("nan"), 1.0, 2.0]).nanmedian().item()
    2.0
    """
    axis = dim_alias("nanmedian", axis, dim, None)
    values, indices, count, d = self._sorted_counted("nanmedian", axis)
    # a row of NaNs takes position 0, a NaN
    pos = ((count - 1) // 2).maximum(0)
    value, index = self._kept(_at(values, d, pos), axis, keepdim, d), self._kept(_at(indices, d, pos), axis, keepdim, d)
    return (value, index) if return_indices else value

  def nanquantile(self, q: float | Sequence[float], axis: int | None = None, keepdim: bool = False,
                  interpolation: str = "linear", *, dim: int | None = None) -> Self:
    """quantile over the values that are not NaN along `axis` (of the flattened tensor when None), as
    torch.nanquantile: NaN only where all are. A sequence of q gives a first dim of one quantile each. Ints become
    float. Sorts: O(n^2) comparisons per row.

    >>> Tensor([1.0, float("nan"), 2.0, 3.0, 4.0]).nanquantile([0.5, 1.0]).tolist()
    [2.5, 4.0]
    """
    axis = dim_alias("nanquantile", axis, dim, None)
    one_q = isinstance(q, (int, float)) and not isinstance(q, bool)
    qs: Any = [q] if one_q else q
    if not isinstance(qs, (list, tuple)) or not all(isinstance(v, (int, float)) and 0 <= v <= 1 for v in qs):
      raise TypeError(f"nanquantile: q must be a number in [0, 1] or a sequence of them, got {q!r}")
    if interpolation not in INTERPOLATIONS:
      raise ValueError(f"nanquantile: interpolation {interpolation!r} must be one of {', '.join(INTERPOLATIONS)}")
    values, _, count, d = self._to_float()._sorted_counted("nanquantile", axis)
    last = (count - 1).maximum(0).cast(values.dtype)
    outs = []
    for v in qs:
      pos = last * float(v)
      lo, hi = pos.floor(), pos.ceil()
      below, above = _at(values, d, lo), _at(values, d, hi)
      picked = {"lower": below, "higher": above, "nearest": _at(values, d, pos.round()),
                "midpoint": (below + above) * 0.5}.get(interpolation)
      outs.append(self._kept(below.lerp(above, pos - lo) if picked is None else picked, axis, keepdim, d))
    return outs[0] if one_q else outs[0].stack(*outs[1:])

  # ---- conveniences ----

  def msort(self) -> Self:
    """The values sorted along dim 0, as torch.msort.

    >>> Tensor([[3, 1], [1, 2]]).msort().tolist()
    [[1, 1], [3, 2]]
    """
    return self.sort(0)[0]

  def aminmax(self, dim: int | None = None, keepdim: bool = False) -> tuple[Self, Self]:
    """(amin, amax) over `dim` (all of the tensor when None), as torch.aminmax.

    >>> [t.tolist() for t in Tensor([[1, 5], [3, 0]]).aminmax(dim=1)]
    [[1, 0], [5, 3]]
    """
    return self.amin(dim, keepdim), self.amax(dim, keepdim)

  def unique_consecutive(self, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None,
                         size: int | None = None, fill_value: Any = 0) -> Self | tuple[Self, ...]:
    """The flattened tensor with each run of equal neighbours kept once, as torch.unique_consecutive, with the run
    each element is in (return_inverse, self's shape) and the runs' lengths (return_counts). As unique, the number
    of runs is read now (a sync) unless `size` fixes it: then the first `size` runs, then fill_value (count 0).
    dim must be None: the runs of whole slices are not implemented.

    >>> Tensor([1, 1, 2, 2, 3, 1]).unique_consecutive().tolist()
    [1, 2, 3, 1]
    >>> [t.tolist() for t in Tensor([1, 1, 2]).unique_consecutive(return_inverse=True, return_counts=True)]
    [[1, 2], [0, 0, 1], [2, 1]]
    """
    if dim is not None: raise NotSupportedError(f"unique_consecutive: dim={dim!r} is not implemented; only dim=None")
    v = self.reshape(-1)
    n = v.numel()
    first = v.ones(1, dtype=dtypes.bool, device=v.device).cat(v[1:] != v[:-1]) if n else v != v
    k = count_now("unique_consecutive", first) if size is None else size
    out: list[Self] = [v.masked_select(first, size=k, fill_value=fill_value)]
    if return_inverse: out.append((first.cast(dtypes.default_int).cumsum(0) - 1).reshape(self.shape))
    if return_counts:
      starts, found = first_selected("unique_consecutive", first, k)
      ends = found[1:].where(starts[1:], n).cat(v.full((1,), n, dtype=starts.dtype, device=v.device)) if k else starts
      out.append(found.where(ends - starts, 0).cast(dtypes.default_int))
    return out[0] if len(out) == 1 else tuple(out)
