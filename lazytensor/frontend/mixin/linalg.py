"""torch's matrix products with an added term (addmm, baddbmm, ...), vector distances and dense linear algebra (det,
slogdet, inverse, solve, cholesky, matrix_power) composed of tensor ops: Gauss-Jordan elimination with partial pivoting
and the Cholesky column recurrence, n steps each over the whole batch of matrices, so gradients flow through the steps.
Meant for small matrices (a graph of O(n) steps, each a few kernels): no blocked LAPACK-style kernels here."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazytensor.dtype import dtypes
from lazytensor.frontend.mixin.aliases import AliasMixin
from lazytensor.frontend.mixin.operands import broadcast_shape

if TYPE_CHECKING:
  from typing import Self

class LinalgMixin(AliasMixin):
  """Tensor's matrix products with an added term and its dense linear algebra: on the alias mixin and those below."""
  __slots__ = ()

  # products with an added term: beta * self + alpha * product, as torch's addmm family (addmm is reduce.py's)
  def _plus_scaled(self, prod: Self, beta: Any, alpha: Any, name: str) -> Self:
    """beta * self + alpha * prod; self must broadcast to prod's shape, and is not read when beta is 0 (as torch: its
    NaNs and infs do not reach the result)."""
    try: full = broadcast_shape(self.shape, prod.shape)
    except ValueError: full = None
    if full != prod.shape:
      raise ValueError(f"{name}: input of shape {self.shape} does not broadcast to the product's shape {prod.shape}")
    scaled = prod if alpha == 1 else prod * alpha
    if beta == 0: return self.zeros_like() + scaled
    return (self if beta == 1 else self * beta) + scaled

  def addmv(self, mat: Self, vec: Self, *, beta: Any = 1, alpha: Any = 1) -> Self:
    """beta * self + alpha * (mat @ vec), as torch.addmv.

    >>> Tensor([1.0, 1.0]).addmv(Tensor([[1.0, 2.0], [3.0, 4.0]]), Tensor([1.0, 1.0]), alpha=2).tolist()
    [7.0, 15.0]
    """
    self._check_ndims("addmv", mat, (self.ndim, 2))
    mat._check_ndims("addmv", vec, (2, 1))
    return self._plus_scaled(mat @ vec, beta, alpha, "addmv")

  def addr(self, vec1: Self, vec2: Self, *, beta: Any = 1, alpha: Any = 1) -> Self:
    """beta * self + alpha * outer(vec1, vec2), as torch.addr.

    >>> Tensor.zeros(2, 2).addr(Tensor([1.0, 2.0]), Tensor([3.0, 4.0])).tolist()
    [[3.0, 4.0], [6.0, 8.0]]
    """
    self._check_ndims("addr", vec1, (self.ndim, 1))
    vec1._check_ndims("addr", vec2, (1, 1))
    return self._plus_scaled(vec1.outer(vec2), beta, alpha, "addr")

  def baddbmm(self, batch1: Self, batch2: Self, *, beta: Any = 1, alpha: Any = 1) -> Self:
    """beta * self + alpha * bmm(batch1, batch2), as torch.baddbmm (attention's scores plus a mask in one call).

    >>> Tensor([[[1.0]], [[2.0]]]).baddbmm(Tensor([[[1.0, 2.0]], [[3.0, 4.0]]]), Tensor.ones(2, 2, 1)).tolist()
    [[[4.0]], [[9.0]]]
    """
    self._check_ndims("baddbmm", batch1, (self.ndim, 3))
    batch1._check_ndims("baddbmm", batch2, (3, 3))
    return self._plus_scaled(batch1.bmm(batch2), beta, alpha, "baddbmm")

  def addbmm(self, batch1: Self, batch2: Self, *, beta: Any = 1, alpha: Any = 1) -> Self:
    """beta * self + alpha * (the sum over the batch of bmm(batch1, batch2)), as torch.addbmm.

    >>> Tensor([[1.0]]).addbmm(Tensor([[[1.0, 2.0]], [[3.0, 4.0]]]), Tensor.ones(2, 2, 1)).tolist()
    [[11.0]]
    """
    self._check_ndims("addbmm", batch1, (self.ndim, 3))
    batch1._check_ndims("addbmm", batch2, (3, 3))
    return self._plus_scaled(batch1.bmm(batch2).sum(0), beta, alpha, "addbmm")

  # vectors
  def vdot(self, other: Self) -> Self:
    """The dot product of two 1-d tensors of one dtype, as torch.vdot (no conjugate to take for real dtypes).

    >>> Tensor([1.0, 2.0, 3.0]).vdot(Tensor([4.0, 5.0, 6.0])).item()
    32.0
    """
    if self.ndim != 1 or other.ndim != 1:
      raise ValueError(f"vdot: expects two 1-d tensors, got shapes {self.shape} and {other.shape}")
    if self.shape != other.shape:
      raise ValueError(f"vdot: the vectors must have one length, got {self.shape[0]} and {other.shape[0]}")
    if self.dtype != other.dtype:
      raise TypeError(f"vdot: expects both vectors to have one dtype, got {self.dtype.name} and {other.dtype.name}")
    return (self * other).sum()

  def dist(self, other: Self | Any, p: float = 2.0) -> Self:
    """The p-norm of self - other (broadcast), over all elements, as torch.dist.

    >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).dist(Tensor([1.0, 0.0]), 1).item()
    8.0
    """
    return (self - other).norm(p)

  def renorm(self, p: float, dim: int, maxnorm: float) -> Self:
    """Each slice along dim (self.select(dim, i)) whose p-norm exceeds maxnorm scaled to norm maxnorm, as
    torch.renorm (the others unchanged).

    >>> Tensor([[3.0, 4.0], [0.3, 0.4]]).renorm(2, 0, 1.0).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
    """
    if not self.dtype.is_float: raise TypeError(f"renorm: expects a float tensor, got {self.dtype.name}")
    if not p > 0: raise ValueError(f"renorm: p must be positive, got {p}")
    if maxnorm < 0: raise ValueError(f"renorm: maxnorm must be non-negative, got {maxnorm}")
    if not -self.ndim <= dim < self.ndim: raise IndexError(f"renorm: dim {dim} out of range for shape {self.shape}")
    others = tuple(d for d in range(self.ndim) if d != dim % self.ndim)
    norms = self.norm(p, others, keepdim=True)
    # torch's factor: maxnorm / (norm + 1e-7), where the norm exceeds maxnorm
    return self * (norms > maxnorm).where(maxnorm / (norms + 1e-7), 1.0).cast(self.dtype)

  # square matrices
  def _square(self, name: str) -> int:
    """The size n of the (batch of) n x n float matrices in self; a clear error for others."""
    if self.ndim < 2 or self.shape[-1] != self.shape[-2]:
      raise ValueError(f"{name}: expects (a batch of) square matrices, got shape {self.shape}")
    if self.dtype not in (dtypes.float32, dtypes.float64):
      raise TypeError(f"{name}: expects float32 or float64 matrices, got {self.dtype.name}")
    return self.shape[-1]

  def _eliminate(self, n: int) -> tuple[Self, Self]:
    """Gauss-Jordan elimination with partial pivoting of the (..., n, m) augmented matrices self (m >= n), whose first
    n columns are the matrices: rows swapped and combined until those columns are diagonal (the pivots, 0 where a
    matrix is singular). Returns the reduced matrices and the sign of each one's row permutation."""
    rows = self.arange(n, device=self.device)
    aug, sign = self, self.full(self.shape[:-2], 1.0, dtype=self.dtype, device=self.device)
    for k in range(n):
      # the pivot: the largest |value| in column k at or below row k, swapped into row k
      p = (rows >= k).where(aug[..., :, k].abs(), -1.0).argmax(-1)
      at_p, at_k = p.one_hot(n).cast(aug.dtype).unsqueeze(-1), (rows == k).cast(aug.dtype).unsqueeze(-1)
      row_k, row_p = aug[..., k, :], (at_p * aug).sum(-2)
      swap = (row_p - row_k).unsqueeze(-2)
      aug = aug + at_k * swap - at_p * swap
      sign = (p == k).where(sign, -sign)
      # every other row minus the multiple of the pivot row that zeroes its column k (none for a zero pivot)
      pivot = row_p[..., k:k + 1]
      zero = pivot == 0
      factors = (zero | (rows == k)).where(0.0, aug[..., :, k] / zero.where(1.0, pivot))
      aug = (aug - factors.unsqueeze(-1) * row_p.unsqueeze(-2)).contiguous()
    return aug, sign

  def _first_bad(self, bad: Self, n: int) -> int:
    """The first of the n pivot positions where `bad` (..., n) is True for any matrix of the batch; n where none is
    (reads one number: the errors torch raises for singular and indefinite matrices depend on the values)."""
    return int(bad.reshape(-1, n).any(0).where(self.arange(n, device=self.device), n).min().item())

  def det(self) -> Self:
    """The determinant of each matrix in a batch of square float matrices (the last two dims), as torch.det: 0 for a
    singular one, with gradients through the elimination that computes it.

    >>> Tensor([[1.0, 2.0], [3.0, 4.0]], dtype="float64").det().item()
    -2.0
    """
    aug, sign = self._eliminate(self._square("det"))
    return sign * aug.diagonal(0, -2, -1).prod(-1)

  def slogdet(self) -> tuple[Self, Self]:
    """The sign and the log of the absolute value of each determinant, as torch.slogdet: (0, -inf) for a singular
    matrix; log|det| without the overflow of the determinant itself.

    >>> sign, logabsdet = (Tensor.eye(3, dtype="float64") * 100).slogdet()
    >>> sign.item(), round(logabsdet.item(), 4)
    (1.0, 13.8155)
    """
    aug, sign = self._eliminate(self._square("slogdet"))
    diag = aug.diagonal(0, -2, -1)
    return sign * diag.sign().prod(-1), diag.abs().log().sum(-1)

  def logdet(self) -> Self:
    """The log of each determinant, as torch.logdet: nan for a negative determinant, -inf for a singular matrix.

    >>> round(Tensor([[2.0, 0.0], [0.0, 3.0]]).logdet().item(), 4)
    1.7918
    """
    sign, logabsdet = self.slogdet()
    return (sign < 0).where(float("nan"), logabsdet)

  def solve(self, b: Self) -> Self:
    """x with self @ x = b, for a batch of square float matrices self, as torch.linalg.solve(self, b) (torch's own
    Tensor.solve, removed in torch 1.9, took the arguments the other way round). b is one vector per matrix when it
    has one dim fewer than self (or is 1-d), else matrices of columns; the batch dims broadcast. A singular matrix is
    a ValueError, as torch's error.

    >>> Tensor([[2.0, 1.0], [1.0, 3.0]], dtype="float64").solve(Tensor([4.0, 7.0], dtype="float64")).tolist()
    [1.0, 2.0]
    """
    n = self._square("solve")
    vector = b.ndim == 1 or (b.ndim == self.ndim - 1 and b.shape == self.shape[:-1])
    cols = b.unsqueeze(-1) if vector else b
    if cols.ndim < 2 or cols.shape[-2] != n:
      raise ValueError(f"solve: b of shape {b.shape} does not fit matrices of shape {self.shape}")
    if cols.dtype != self.dtype:
      raise TypeError(f"solve: expects b of the matrices' dtype {self.dtype.name}, got {b.dtype.name}")
    batch = broadcast_shape(self.shape[:-2], cols.shape[:-2])
    a, cols = self.expand(*batch, n, n), cols.expand(*batch, n, cols.shape[-1])
    aug = a.cat(cols, dim=-1)._eliminate(n)[0].realize()
    diag = aug.diagonal(0, -2, -1)
    if (first := self._first_bad(diag == 0, n)) < n:
      raise ValueError(f"solve: the matrix is singular (pivot {first + 1} is zero after partial pivoting), as torch's "
                       "linalg error")
    x = aug[..., n:] / diag.unsqueeze(-1)
    return x.squeeze(-1) if vector else x

  def inverse(self) -> Self:
    """The inverse of each matrix in a batch of square float matrices, as torch.inverse; a singular one is a
    ValueError.

    >>> Tensor([[4.0, 7.0], [2.0, 6.0]], dtype="float64").inverse().tolist()
    [[0.6, -0.7], [-0.2, 0.4]]
    """
    n = self._square("inverse")
    return self.solve(self.eye(n, dtype=self.dtype, device=self.device).expand(*self.shape))

  def matrix_power(self, n: int) -> Self:
    """The matrix product of n copies of each square matrix (by repeated squaring), as torch.matrix_power: the
    identity for n = 0, powers of the inverse for n < 0.

    >>> Tensor([[1, 1], [1, 0]]).matrix_power(10).tolist()
    [[89, 55], [55, 34]]
    """
    if self.ndim < 2 or self.shape[-1] != self.shape[-2]:
      raise ValueError(f"matrix_power: expects (a batch of) square matrices, got shape {self.shape}")
    if n < 0: return self.inverse().matrix_power(-n)
    result, base = self.eye(self.shape[-1], dtype=self.dtype, device=self.device).expand(*self.shape), self
    while n:
      if n & 1: result = result @ base
      n >>= 1
      if n: base = base @ base
    return result

  def cholesky(self, upper: bool = False) -> Self:
    """The lower-triangular L with L @ L.T = self, for a batch of symmetric positive-definite float matrices, as
    torch.cholesky (U = L.T with upper=True). Reads the lower triangle only; a matrix that is not positive-definite is
    a ValueError naming the leading minor, as torch's error.

    >>> Tensor([[4.0, 2.0], [2.0, 10.0]], dtype="float64").cholesky().tolist()
    [[2.0, 0.0], [1.0, 3.0]]
    """
    n = self._square("cholesky")
    rows = self.arange(n, device=self.device)
    cols: list[Self] = []
    diags: list[Self] = []
    for k in range(n):
      # column k of A less what the columns before it put there: L[i, k] * L[k, k] for i >= k
      s = self[..., :, k]
      if cols:
        done = cols[0].stack(*cols[1:], dim=-1)
        s = s - (done * done[..., k:k + 1, :]).sum(-1)
      d = s[..., k:k + 1]
      diags.append(d)
      root = (d > 0).where(d, 1.0).sqrt()  # a non-positive pivot is the error below, not NaNs in the gradient
      cols.append((rows > k).where(s / root, (rows == k).where(root, 0.0)))
    low = cols[0].stack(*cols[1:], dim=-1)
    pivots = diags[0].cat(*diags[1:], dim=-1)
    low.realize(pivots)
    if (first := self._first_bad((pivots > 0).logical_not(), n)) < n:
      raise ValueError(f"cholesky: the matrix is not positive-definite (the leading minor of order {first + 1} is not "
                       "positive-definite), as torch's error")
    return low.transpose(-2, -1) if upper else low
