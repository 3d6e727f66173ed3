"""torch's ways of reading and writing by index, on top of index.py's indexing, gather and scatter: take and
take_along_dim; index_add, index_copy, index_reduce and index_fill (whole slices of one dim) and the functional
select_scatter and slice_scatter built on them; index_put and put (elements named by index tensors); masked_scatter.

As in index.py, index values are read when the kernel runs, which checks them: an index out of range raises
IndexError at the realize that runs it (engine/index_check.py). Where torch wraps negative indices, so do these.
"""
from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from lazytensor.dtype import dtypes
from lazytensor.engine.index_check import IndexSite, dim_site
from lazytensor.helpers import ArgumentError, DTypeError, prod
from lazytensor.mixin.index import IndexMixin, _gather, _is_tensor, getitem
from lazytensor.mixin.operands import broadcast_shape

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="TakePutMixin")

def _wrapped(index: TensorT, n: int) -> TensorT:
  """Negative indices counted from the end of a dim of size n."""
  return (index < 0).where(index + n, index)

class TakePutMixin(IndexMixin):
  """Tensor's take, index_* and masked_scatter: on the index mixin."""
  __slots__ = ()

  def _int_index(self, name: str, index: Any, max_ndim: int | None = None) -> Self:
    if not _is_tensor(index) or not index.dtype.is_int:
      raise TypeError(f"{name}: index must be an int Tensor, got {getattr(index, 'dtype', type(index).__name__)}")
    if max_ndim is not None and index.ndim > max_ndim:
      raise ArgumentError(f"{name}: index must have at most {max_ndim} dims, got shape {index.shape}")
    return index

  # ---- reading ----

  def take(self, index: Self) -> Self:
    """The elements of the flattened tensor at `index` (any shape, which the result has; negative counts from the
    end), as torch.take.

    >>> Tensor([[1, 2], [3, 4]]).take(Tensor([[0, -1], [2, 1]])).tolist()
    [[1, 4], [3, 2]]
    """
    return getitem(self.reshape(-1), self._int_index("take", index), "take")

  def take_along_dim(self, indices: Self, dim: int | None = None) -> Self:
    """Pick values along `dim` by index, as torch.take_along_dim: gather with self and indices broadcast together in
    the other dims, and negative indices counting from the end (an index outside [-size, size) raises IndexError
    when the kernel runs). With dim None, take of the flattened indices.

    >>> Tensor([[10, 30, 20], [60, 40, 50]]).take_along_dim(Tensor([[0], [-1]]), 1).tolist()
    [[10], [50]]
    """
    indices = self._int_index("take_along_dim", indices)
    if dim is None: return self.take(indices.reshape(-1))
    d = self._resolve_axis(dim)
    if indices.ndim != self.ndim:
      raise ArgumentError(f"take_along_dim: indices of shape {indices.shape} must have as many dims as the tensor "
                          f"{self.shape}")
    if self.ndim == 0: return self.take(indices)
    # broadcast in every dim but d, where each keeps its own size
    def with_d(shape: tuple[int, ...], n: int) -> tuple[int, ...]: return shape[:d] + (n,) + shape[d + 1:]
    common = broadcast_shape(with_d(self.shape, 1), with_d(indices.shape, 1))
    x, n = self.expand(with_d(common, self.shape[d])), self.shape[d]
    checked = indices._check_index(dim_site("take_along_dim", d, n, indices.dtype, wraps=True))
    return _gather(x, d, _wrapped(checked, n).expand(with_d(common, indices.shape[d])))

  # ---- writing slices of one dim ----

  def _spread_index(self, name: str, dim: int, index: Any, source: Any) -> tuple[int, Self]:
    """For index_add and index_copy: the dim, and the 1-d index spread to source's shape for a scatter along it."""
    d = self._resolve_axis(dim)
    if not _is_tensor(index) or not index.dtype.is_int or index.ndim != 1:
      raise ArgumentError(f"{name}: index must be a 1-d integer Tensor, got {getattr(index, 'dtype', '')} "
                          f"{getattr(index, 'shape', type(index).__name__)}")
    want = self.shape[:d] + (index.shape[0],) + self.shape[d + 1:]
    if not _is_tensor(source) or source.shape != want:
      raise ArgumentError(f"{name}: source must be a Tensor of shape {want} (the tensor's {self.shape} with dim {d} "
                          f"of the index's length), got {getattr(source, 'shape', type(source).__name__)}")
    return d, index.reshape([-1 if i == d else 1 for i in range(self.ndim)]).expand(want)

  def index_add(self, dim: int, index: Self, source: Self, alpha: Any = 1) -> Self:
    """Add alpha * source into a copy of self at the 1-d index's positions along `dim`, as torch.index_add:
    out[index[i]] += alpha * source[i] for dim 0, repeated indices adding up; source is self's shape with `dim` of the
    index's length. An index outside [0, size) raises IndexError when the kernel runs.

    >>> Tensor.zeros(3, 2).index_add(0, Tensor([2, 0, 2]), Tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])).tolist()
    [[2.0, 2.0], [0.0, 0.0], [4.0, 4.0]]
    """
    d, spread = self._spread_index("index_add", dim, index, source)
    return self._scatter_into("index_add", d, spread, source if alpha == 1 else source * alpha, "sum", True)

  def index_copy(self, dim: int, index: Self, source: Self) -> Self:
    """A copy of self with the slices of `dim` at the 1-d index's positions replaced by source's, as
    torch.index_copy: out[index[i]] = source[i] for dim 0 (where an index repeats, the last one wins). source is
    self's shape with `dim` of the index's length, and self's dtype. An index outside [0, size) raises IndexError
    when the kernel runs.

    >>> Tensor.zeros(3, 2).index_copy(0, Tensor([2, 0]), Tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [[3.0, 4.0], [0.0, 0.0], [1.0, 2.0]]
    """
    d, spread = self._spread_index("index_copy", dim, index, source)
    return self._scatter_into("index_copy", d, spread, source, None, False)

  def index_reduce(self, dim: int, index: Self, source: Self, reduce: str, include_self: bool = True) -> Self:
    """Reduce the slices of source into a copy of self at the 1-d index's positions along `dim`, as
    torch.index_reduce: reduce is "prod", "mean", "amax" or "amin", and include_self counts self's old slice as one
    of the reduced values (slices that no index names keep theirs). An index outside [0, size) raises IndexError
    when the kernel runs.

    >>> x = Tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> x.index_reduce(0, Tensor([1, 1]), Tensor([[5.0, 5.0], [6.0, 1.0]]), "amax").tolist()
    [[1.0, 2.0], [6.0, 5.0]]
    """
    if reduce not in ("prod", "mean", "amax", "amin"):
      raise ArgumentError(f"index_reduce: reduce must be one of prod, mean, amax, amin, got {reduce!r}")
    d, spread = self._spread_index("index_reduce", dim, index, source)
    return self._scatter_into("index_reduce", d, spread, source, reduce, include_self)

  def index_fill(self, dim: int, index: Self, value: Any) -> Self:
    """`value` (a number or a 0-d tensor) in the slices of `dim` at the index's positions (0-d or 1-d; negative
    counts from the end; outside [-size, size) an IndexError when the kernel runs), self elsewhere, as
    torch.index_fill.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).index_fill(1, Tensor([0, -1]), 0).tolist()
    [[0, 2, 0], [0, 5, 0]]
    """
    d = self._resolve_axis(dim)
    n = self.shape[d] if self.ndim else 1
    index = self._int_index("index_fill", index, max_ndim=1).reshape(-1, 1)
    index = index._check_index(dim_site("index_fill", d, n, index.dtype, wraps=True))
    hit = (_wrapped(index, n) == type(self)._iota(n, self.device)).any(0)
    return self.masked_fill(hit.reshape([n if i == d else 1 for i in range(self.ndim)]), value)

  def select_scatter(self, src: Self, dim: int, index: int) -> Self:
    """A copy of self with the slice at `index` of `dim` replaced by src (self's shape without that dim), as
    torch.select_scatter: the functional form of `x.select(dim, index)[...] = src`.

    >>> Tensor.zeros(2, 3).select_scatter(Tensor([1.0, 2.0]), 1, -1).tolist()
    [[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]]
    """
    d = self._resolve_axis(dim)
    n = self.shape[d] if self.ndim else 0
    if not isinstance(index, int) or not -n <= index < n:
      raise IndexError(f"select_scatter: index {index!r} is out of range for dim {d} of size {n}")
    if not _is_tensor(src) or src.shape != self.shape[:d] + self.shape[d + 1:]:
      raise ArgumentError(f"select_scatter: src must be a Tensor of shape {self.shape[:d] + self.shape[d + 1:]}, got "
                          f"{getattr(src, 'shape', type(src).__name__)}")
    at = self.full((1,), index % n, dtype=dtypes.default_int, device=self.device)
    return self.index_copy(d, at, src.unsqueeze(d))

  def slice_scatter(self, src: Self, dim: int = 0, start: int | None = None, end: int | None = None,
                    step: int = 1) -> Self:
    """A copy of self with the slice start:end:step of `dim` replaced by src, as torch.slice_scatter: the functional
    form of `x[..., start:end:step, ...] = src`.

    >>> Tensor.zeros(5).slice_scatter(Tensor([1.0, 2.0]), 0, 1, 5, 2).tolist()
    [0.0, 1.0, 0.0, 2.0, 0.0]
    """
    d = self._resolve_axis(dim)
    if not isinstance(step, int) or step <= 0:
      raise ValueError(f"slice_scatter: step must be a positive int, got {step!r}")
    rows = range(*slice(start, end, step).indices(self.shape[d]))
    want = self.shape[:d] + (len(rows),) + self.shape[d + 1:]
    if not _is_tensor(src) or src.shape != want:
      raise ArgumentError(f"slice_scatter: src must be a Tensor of the slice's shape {want}, got "
                          f"{getattr(src, 'shape', type(src).__name__)}")
    return self.index_copy(d, type(self)(list(rows), dtype=dtypes.default_int, device=self.device), src)

  # ---- writing elements ----

  def put(self, index: Self, source: Self, accumulate: bool = False) -> Self:
    """A copy of self with source's elements written at the flat positions in `index` (negative counting from the
    end; one outside [-numel, numel) raises IndexError when the kernel runs; one per source element), as torch.put:
    index_put on the flattened tensor.

    >>> Tensor([[1, 2], [3, 4]]).put(Tensor([0, -1]), Tensor([9, 8])).tolist()
    [[9, 2], [3, 8]]
    """
    index = self._int_index("put", index)
    if not _is_tensor(source) or source.numel() != index.numel():
      raise ArgumentError(f"put: source must be a Tensor of as many elements as the index ({index.numel()}), got "
                          f"{getattr(source, 'shape', type(source).__name__)}")
    return self.reshape(-1)._index_put("put", (index.reshape(-1),), source.reshape(-1), accumulate).reshape(self.shape)

  def index_put(self, indices: Sequence[Self], values: Self | Any, accumulate: bool = False) -> Self:
    """A copy of self with values written at the elements that the int index tensors name in its first dims, as
    torch.index_put (`x[indices] = values`, as a new tensor): the indices broadcast together, negative ones count
    from the end (one outside [-size, size) raises IndexError when the kernel runs), and values broadcast to the
    selection. accumulate=True adds them instead, repeated elements adding up; without it, where an element repeats
    the last value wins.

    >>> Tensor.zeros(2, 3).index_put((Tensor([0, 1, 0]), Tensor([2, 0, 2])), Tensor([1.0, 2.0, 3.0]), True).tolist()
    [[0.0, 0.0, 4.0], [2.0, 0.0, 0.0]]
    """
    return self._index_put("index_put", indices, values, accumulate)

  def _index_put(self, name: str, indices: Sequence[Self], values: Self | Any, accumulate: bool) -> Self:
    if not isinstance(indices, (tuple, list)) or not indices or len(indices) > self.ndim:
      raise TypeError(f"{name}: indices must be a tuple of 1 to {self.ndim} int Tensors, got {indices!r}")
    idx = [self._int_index(name, i) for i in indices]
    k, rest = len(idx), self.shape[len(idx):]
    shape = broadcast_shape(*(i.shape for i in idx))
    if _is_tensor(values) and values.dtype != self.dtype:
      raise DTypeError(f"{name}: values of dtype {values.dtype.name} must have the tensor's dtype {self.dtype.name}")
    vals = values if _is_tensor(values) else type(self).full((), values, dtype=self.dtype, device=self.device)
    try: vals = vals.expand(shape + rest)
    except ValueError:
      raise ArgumentError(f"{name}: values of shape {vals.shape} do not broadcast to the selection's shape "
                          f"{shape + rest}") from None
    rows = self._flat_rows(name, idx, shape)
    flat, src = self.reshape(prod(self.shape[:k]), *rest), vals.reshape(-1, *rest)
    d, spread = flat._spread_index(name, 0, rows, src)
    return flat._scatter_into(name, d, spread, src, "sum" if accumulate else None, accumulate, check=False) \
      .reshape(self.shape)

  def _flat_rows(self, name: str, idx: list[Self], shape: tuple[int, ...]) -> Self:
    """The row of self with its first len(idx) dims flattened that each entry of the indices (broadcast to `shape`)
    names, each index checked against its dim; -1 (matching nothing) where one is out of range, which only a run
    without the checks (CHECK_INDICES=0) reaches."""
    k = len(idx)
    checked = [i._check_index(dim_site(name, j, n, i.dtype, wraps=True))
               for j, (i, n) in enumerate(zip(idx, self.shape))]
    wrapped = [_wrapped(i, n).expand(shape) for i, n in zip(checked, self.shape)]
    row = functools.reduce(operator.add, [w * prod(self.shape[j + 1:k]) for j, w in enumerate(wrapped)])
    inside = functools.reduce(operator.and_, [(w >= 0) & (w < n) for w, n in zip(wrapped, self.shape)])
    return inside.where(row, -1).reshape(-1)

  def masked_scatter(self, mask: Self, source: Self) -> Self:
    """A copy of self with the elements where the bool mask (broadcast to self) is True taken from source, in
    row-major order, as torch.masked_scatter: the k-th True takes source's k-th element. source has self's dtype and
    at least as many elements as the mask has Trues (the count is not read now: a kernel that reads past source's end
    raises IndexError at the realize that runs it).

    >>> Tensor([1, 2, 3, 4]).masked_scatter(Tensor([True, False, True, False]), Tensor([10, 20, 30])).tolist()
    [10, 2, 20, 4]
    """
    if not _is_tensor(mask) or not mask.dtype.is_bool:
      raise TypeError(f"masked_scatter: mask must be a bool Tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
    if not _is_tensor(source) or source.dtype != self.dtype:
      raise DTypeError(f"masked_scatter: source must be a Tensor of the tensor's dtype {self.dtype.name}, got "
                       f"{getattr(source, 'dtype', type(source).__name__)}")
    try: m = mask.expand(self.shape)
    except ValueError:
      raise ArgumentError(f"masked_scatter: mask of shape {mask.shape} does not broadcast to {self.shape}") from None
    # the k-th True reads source[k]: its position among the Trues, a running count
    pos = m.reshape(-1).cast(dtypes.default_int).cumsum(0) - 1
    n = source.numel()
    site = IndexSite("masked_scatter", f"source, which has {n} elements (the mask has more True values)", 0, n,
                     pos.dtype, noun="source index")
    picked = _gather(source.reshape(-1), 0, m.reshape(-1).where(pos, 0)._check_index(site)) if n else \
      self.zeros_like().reshape(-1)
    return m.where(picked.reshape(self.shape), self)
