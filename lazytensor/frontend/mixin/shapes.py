"""torch's shape conveniences on top of the movement ops: splits by sections or indices (tensor_split and the h/v/d
splits), select, the flips and transposes named after matrices (fliplr, flipud, mT, mH, H, adjoint), and the
diagonal embeddings (diag, diag_embed, diagflat). Every result is a view, as the moves it is made of."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from lazytensor.frontend.mixin.movement import _is_int
from lazytensor.frontend.mixin.rearrange import RearrangeMixin

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="ShapesMixin")

def _on_diagonal(x: TensorT, offset: int) -> TensorT:
  """A view with x's last dim (n) on the `offset`-th diagonal of its last two dims, a square of side n + |offset|
  that is zero elsewhere."""
  *lead, n = x.shape
  keep = [(0, 0)] * len(lead)
  # each value followed by n zeros, read in rows of n: value i lands at (i, i)
  spaced = x.reshape(*lead, n, 1)._pad_zeros([*keep, (0, 0), (0, n)]).reshape(*lead, n * (n + 1))
  square = spaced.shrink([None] * len(lead) + [(0, n * n)]).reshape(*lead, n, n)
  k = abs(offset)
  return square._pad_zeros([*keep, (0, k), (k, 0)] if offset >= 0 else [*keep, (k, 0), (0, k)])

def _check_offset(name: str, offset: int) -> None:
  if not _is_int(offset): raise TypeError(f"{name}: offset must be an int, got {offset!r}")

class ShapesMixin(RearrangeMixin):
  """Tensor's splits, selections, matrix transposes and diagonal embeddings: on the rearrange and movement mixins."""
  __slots__ = ()

  # ---- splits ----

  def tensor_split(self, indices_or_sections: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
    """Split along `dim` as torch.tensor_split: an int n gives n pieces whose sizes differ by at most one (the first
    ones larger); a sequence of indices splits before each, as slices x[:i0], x[i0:i1], ..., x[ik:].

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).tensor_split(3)]
    [[1, 2], [3, 4], [5]]
    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).tensor_split([1, 4])]
    [[1], [2, 3, 4], [5]]
    """
    d = self._resolve_axis(dim)
    if self.ndim == 0: raise ValueError("tensor_split: needs a tensor with at least one dimension, got a 0-d one")
    n = self.shape[d]
    if _is_int(indices_or_sections):
      k = int(indices_or_sections)  # type: ignore[arg-type]
      if k <= 0: raise ValueError(f"tensor_split: the number of sections must be positive, got {k}")
      sizes = [n // k + (i < n % k) for i in range(k)]
      bounds = [sum(sizes[:i]) for i in range(k + 1)]
      pieces = list(zip(bounds, bounds[1:]))
    elif isinstance(indices_or_sections, (list, tuple)) and all(_is_int(i) for i in indices_or_sections):
      cuts = [0, *indices_or_sections, n]
      pieces = [slice(a, b).indices(n)[:2] for a, b in zip(cuts, cuts[1:])]
    else:
      raise TypeError(f"tensor_split: expected an int or a list of ints, got {indices_or_sections!r}")
    return tuple(self.shrink([(a, max(a, b)) if j == d else None for j in range(self.ndim)]) for a, b in pieces)

  def _split_named(self, name: str, sections: int | Sequence[int], dim: int, min_ndim: int) -> tuple[Self, ...]:
    if self.ndim < min_ndim:
      raise ValueError(f"{name}: needs a tensor with at least {min_ndim} dimensions, got shape {self.shape}")
    if _is_int(sections) and (int(sections) <= 0 or self.shape[dim] % int(sections)):  # type: ignore[arg-type]
      raise ValueError(f"{name}: cannot split dim {dim} of size {self.shape[dim]} into {sections} equal sections")
    return self.tensor_split(sections, dim)

  def hsplit(self, sections: int | Sequence[int]) -> tuple[Self, ...]:
    """tensor_split along dim 1 (dim 0 of a 1-D tensor), as numpy.hsplit: an int must divide the size evenly.

    >>> [t.tolist() for t in Tensor([[1, 2, 3, 4]]).hsplit(2)]
    [[[1, 2]], [[3, 4]]]
    """
    return self._split_named("hsplit", sections, 1 if self.ndim >= 2 else 0, 1)

  def vsplit(self, sections: int | Sequence[int]) -> tuple[Self, ...]:
    """tensor_split along dim 0 of a tensor of 2 or more dims, as numpy.vsplit: an int must divide the size evenly.

    >>> [t.tolist() for t in Tensor([[1, 2], [3, 4]]).vsplit(2)]
    [[[1, 2]], [[3, 4]]]
    """
    return self._split_named("vsplit", sections, 0, 2)

  def dsplit(self, sections: int | Sequence[int]) -> tuple[Self, ...]:
    """tensor_split along dim 2 of a tensor of 3 or more dims, as numpy.dsplit: an int must divide the size evenly.

    >>> [t.shape for t in Tensor.zeros(1, 2, 4).dsplit([1])]
    [(1, 2, 1), (1, 2, 3)]
    """
    return self._split_named("dsplit", sections, 2, 3)

  def select(self, dim: int, index: int) -> Self:
    """The slice at `index` of `dim`, which goes away (x.select(1, i) is x[:, i]); a negative index counts from the
    end.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).select(1, -1).tolist()
    [3, 6]
    """
    d = self._resolve_axis(dim)
    if self.ndim == 0: raise IndexError("select: cannot select from a 0-d tensor")
    n = self.shape[d]
    if not _is_int(index): raise TypeError(f"select: index must be an int, got {index!r}")
    if not -n <= index < n: raise IndexError(f"select: index {index} is out of range for dim {d} of size {n}")
    i = index % n
    return self.shrink([(i, i + 1) if j == d else None for j in range(self.ndim)]).squeeze(d)

  # ---- flips and transposes named after matrices ----

  def fliplr(self) -> Self:
    """Reverse dim 1 (left to right), of a tensor of 2 or more dims.

    >>> Tensor([[1, 2], [3, 4]]).fliplr().tolist()
    [[2, 1], [4, 3]]
    """
    if self.ndim < 2: raise ValueError(f"fliplr: needs a tensor with at least 2 dimensions, got shape {self.shape}")
    return self.flip(1)

  def flipud(self) -> Self:
    """Reverse dim 0 (up to down), of a tensor of 1 or more dims.

    >>> Tensor([[1, 2], [3, 4]]).flipud().tolist()
    [[3, 4], [1, 2]]
    """
    if self.ndim < 1: raise ValueError("flipud: needs a tensor with at least 1 dimension, got a 0-d one")
    return self.flip(0)

  @property
  def mT(self) -> Self:  # noqa: N802 (torch's name)
    """The last two dims swapped: a batch of matrices transposed (mH, the conjugate transpose, is the same for real
    dtypes).

    >>> Tensor.zeros(5, 2, 3).mT.shape
    (5, 3, 2)
    """
    if self.ndim < 2: raise ValueError(f"mT: needs a tensor with at least 2 dimensions, got shape {self.shape}")
    return self.transpose(-2, -1)

  mH = mT

  @property
  def H(self) -> Self:  # noqa: N802 (torch's name)
    """The (conjugate) transpose of a matrix, as torch's x.H: 2-D tensors only.

    >>> Tensor([[1, 2, 3]]).H.tolist()
    [[1], [2], [3]]
    """
    if self.ndim != 2: raise ValueError(f"H: needs a 2-D tensor, got shape {self.shape}; mT swaps the last two dims")
    return self.transpose(0, 1)

  def adjoint(self) -> Self:
    """The (conjugate) transpose of the last two dims, as torch.adjoint: mH as a method.

    >>> Tensor.zeros(2, 3).adjoint().shape
    (3, 2)
    """
    return self.mH

  # ---- diagonal embeddings ----

  def diag(self, diagonal: int = 0) -> Self:
    """As torch.diag: a 1-D tensor becomes a square matrix with it on the `diagonal`-th diagonal (zeros elsewhere); a
    2-D tensor gives its `diagonal`-th diagonal. Both are views.

    >>> Tensor([1, 2]).diag().tolist(), Tensor([[1, 2], [3, 4]]).diag(-1).tolist()
    ([[1, 0], [0, 2]], [3])
    """
    if self.ndim == 2: return self.diagonal(diagonal)
    if self.ndim != 1: raise ValueError(f"diag: needs a 1-D or 2-D tensor, got shape {self.shape}")
    _check_offset("diag", diagonal)
    return _on_diagonal(self, int(diagonal))

  def diagflat(self, offset: int = 0) -> Self:
    """The flattened tensor on the `offset`-th diagonal of a square matrix of zeros.

    >>> Tensor([[1, 2]]).diagflat().tolist()
    [[1, 0], [0, 2]]
    """
    _check_offset("diagflat", offset)
    return _on_diagonal(self.reshape(-1), int(offset))

  def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Self:
    """The last dim on the `offset`-th diagonal of the new dims dim1 (rows) and dim2 (columns) of the result, which
    has one dim more, as torch.diag_embed: the inverse of diagonal(offset, dim1, dim2).

    >>> Tensor([[1, 2], [3, 4]]).diag_embed().tolist()
    [[[1, 0], [0, 2]], [[3, 0], [0, 4]]]
    """
    _check_offset("diag_embed", offset)
    ndim = self.ndim + 1
    a, b = self._resolve_axis(dim1, ndim), self._resolve_axis(dim2, ndim)
    if a == b: raise ValueError(f"diag_embed: dim1 and dim2 must differ, both are dim {a}")
    if self.ndim == 0: raise ValueError("diag_embed: needs a tensor with at least 1 dimension, got a 0-d one")
    square = _on_diagonal(self, int(offset))
    batch = iter(range(ndim - 2))
    return square.permute([ndim - 2 if i == a else ndim - 1 if i == b else next(batch) for i in range(ndim)])
