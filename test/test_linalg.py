"""lazytensor/frontend/mixin/linalg.py and the small torch forms of frontend/mixin/aliases.py against torch: the addmm
family, vdot, dist, renorm, sum_to_size, and the dense linear algebra (det, slogdet, logdet, solve, inverse,
matrix_power, cholesky) on well-conditioned and batched float32/float64 inputs, their gradients, and the errors torch
raises."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from lazytensor import Tensor

rng = np.random.default_rng(1)

def _arr(*shape: int, dtype: Any = np.float32) -> np.ndarray: return rng.standard_normal(shape).astype(dtype)

def _well_conditioned(*shape: int, dtype: Any = np.float64) -> np.ndarray:
  """Random matrices plus n on the diagonal (no near-singular ones), with rows in an order that needs pivoting."""
  n = shape[-1]
  a = rng.standard_normal(shape) + n * np.eye(n)
  return a[..., rng.permutation(n), :].astype(dtype)

def _spd(*shape: int, dtype: Any = np.float64) -> np.ndarray:
  a = rng.standard_normal(shape)
  return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)

def _same(out: Any, ref: torch.Tensor, tol: float = 1e-5) -> None:
  assert out.dtype.name == str(ref.dtype).removeprefix("torch."), (out.dtype, ref.dtype)
  assert out.shape == tuple(ref.shape), (out.shape, ref.shape)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=tol, atol=tol)

def _check(fn: Callable[..., Any], *arrays: np.ndarray, tol: float = 1e-5, grad: bool = True, **kw: Any) -> None:
  """fn on lazytensor and on torch, the same arrays: the values and (for float inputs) the gradients of each input."""
  ts = [Tensor(a, requires_grad=grad) for a in arrays]
  rs = [torch.tensor(a, requires_grad=grad) for a in arrays]
  out, ref = fn(*ts, **kw), fn(*rs, **kw)
  _same(out, ref, tol)
  if not grad: return
  cot = rng.standard_normal(ref.shape)
  (ref * torch.tensor(cot, dtype=ref.dtype)).sum().backward()
  (out * Tensor(cot, dtype=out.dtype)).sum().backward()
  for t, r in zip(ts, rs):
    assert r.grad is not None
    # no gradient where the result does not read the input (addmm's with beta=0): torch's is zeros there
    got = t.grad.numpy() if t.grad is not None else np.zeros(t.shape)
    np.testing.assert_allclose(got, r.grad.numpy(), rtol=tol * 10, atol=tol * 10)

# ---- products with an added term ----

@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1.5)])
def test_add_products(beta: float, alpha: float) -> None:
  kw = {"beta": beta, "alpha": alpha}
  _check(lambda c, a, b, **k: c.addmm(a, b, **k), _arr(3, 4), _arr(3, 5), _arr(5, 4), **kw)
  _check(lambda c, a, b, **k: c.addmm(a, b, **k), _arr(4), _arr(3, 5), _arr(5, 4), **kw)  # input broadcasts
  _check(lambda c, a, b, **k: c.addmv(a, b, **k), _arr(3), _arr(3, 5), _arr(5), **kw)
  _check(lambda c, a, b, **k: c.addr(a, b, **k), _arr(3, 4), _arr(3), _arr(4), **kw)
  _check(lambda c, a, b, **k: c.baddbmm(a, b, **k), _arr(2, 3, 4), _arr(2, 3, 5), _arr(2, 5, 4), **kw)
  _check(lambda c, a, b, **k: c.addbmm(a, b, **k), _arr(3, 4), _arr(2, 3, 5), _arr(2, 5, 4), **kw)

def test_beta_zero_does_not_read_the_input() -> None:
  nan = np.full((2, 2), np.nan, np.float32)
  out = Tensor(nan).addmm(Tensor.ones(2, 2), Tensor.ones(2, 2), beta=0)
  _same(out, torch.tensor(nan).addmm(torch.ones(2, 2), torch.ones(2, 2), beta=0))

def test_add_products_bad_shapes() -> None:
  with pytest.raises(ValueError, match=r"addmv: expected 2-d and 1-d tensors, got shapes \(3, 3\) and \(3, 1\)"):
    Tensor.zeros(3).addmv(Tensor.ones(3, 3), Tensor.ones(3, 1))
  with pytest.raises(ValueError, match=r"addr: input of shape \(2, 3\) does not broadcast to the product's shape "
                     r"\(3, 3\)"):
    Tensor.zeros(2, 3).addr(Tensor.ones(3), Tensor.ones(3))
  with pytest.raises(ValueError, match=r"baddbmm: expected 3-d and 3-d tensors, got shapes \(1, 3, 3\) and \(3, 3\)"):
    Tensor.zeros(3, 3).baddbmm(Tensor.ones(1, 3, 3), Tensor.ones(3, 3))
  with pytest.raises(TypeError, match="addbmm: expected a Tensor, got list"):
    Tensor.zeros(3, 3).addbmm([[1.0]], Tensor.ones(3, 3))

def test_products_in_place() -> None:
  c, a, b = _arr(3, 4), _arr(3, 5), _arr(5, 4)
  t = Tensor(c).realize()
  t.T.addmm_(Tensor(b.T.copy()), Tensor(a.T.copy()), beta=2)  # through a view
  ref = torch.tensor(c)
  ref.T.addmm_(torch.tensor(b.T.copy()), torch.tensor(a.T.copy()), beta=2)
  _same(t, ref)

# ---- vectors, norms and sizes ----

def test_vdot_and_dist() -> None:
  _check(lambda a, b: a.vdot(b), _arr(7), _arr(7))
  for p in (2.0, 1.0, 3.0, float("inf"), 0.0):
    _check(lambda a, b, p=p: a.dist(b, p), _arr(3, 4), _arr(4), grad=p not in (0.0, float("inf")))
  with pytest.raises(ValueError, match=r"vdot: expects two 1-d tensors, got shapes \(2, 2\) and \(4,\)"):
    Tensor.ones(2, 2).vdot(Tensor.ones(4))
  with pytest.raises(TypeError, match="vdot: expects both vectors to have one dtype, got float32 and float64"):
    Tensor.ones(2).vdot(Tensor.ones(2, dtype="float64"))

@pytest.mark.parametrize("p,dim,maxnorm", [(2.0, 0, 1.0), (1.0, 1, 2.0), (3.0, -1, 0.5), (2.0, 2, 100.0)])
def test_renorm(p: float, dim: int, maxnorm: float) -> None:
  _check(lambda a: a.renorm(p, dim, maxnorm), _arr(3, 4, 2))
  t = Tensor(_arr(3, 4, 2)).realize()
  ref = torch.tensor(t.numpy()).renorm_(p, dim, maxnorm)
  _same(t.renorm_(p, dim, maxnorm), ref)

def test_renorm_bad_input() -> None:
  with pytest.raises(TypeError, match="renorm: expects a float tensor, got int"):
    Tensor([[1, 2]]).renorm(2, 0, 1.0)
  with pytest.raises(ValueError, match="renorm: p must be positive, got 0"):
    Tensor.ones(2, 2).renorm(0, 0, 1.0)
  with pytest.raises(IndexError, match=r"renorm: dim 2 out of range for shape \(2, 2\)"):
    Tensor.ones(2, 2).renorm(2, 2, 1.0)

def test_sizes_and_sgn() -> None:
  x = _arr(2, 3, 4)
  for size in [(3, 1), (2, 1, 4), (1,), (2, 3, 4), ()]:
    _same(Tensor(x).sum_to_size(size), torch.tensor(x).sum_to_size(size))
  _same(Tensor(x.astype(np.int32)).sum_to_size(3, 1), torch.tensor(x.astype(np.int32)).sum_to_size(3, 1))
  with pytest.raises(ValueError, match=r"sum_to_size: size \(3, 3\) does not expand to this tensor's shape \(2, 3\)"):
    Tensor.ones(2, 3).sum_to_size(3, 3)
  assert Tensor.ones(2, 3).is_same_size(Tensor.zeros(2, 3)) and not Tensor.ones(2, 3).is_same_size(Tensor.ones(3, 2))
  for v in ([0.0], [[2]], [False], [-0.0]):
    assert Tensor(v).is_nonzero() == torch.tensor(v).is_nonzero()
  with pytest.raises(ValueError, match=r"is_nonzero: needs a tensor of one element, got shape \(2,\)"):
    Tensor.ones(2).is_nonzero()
  for dt in ("float64", "int8", "bool", "float16"):
    assert Tensor.ones(2, dtype=dt).itemsize == torch.ones(2, dtype=getattr(torch, dt)).itemsize
  _same(Tensor(x).sgn(), torch.tensor(x).sgn())

# ---- dense linear algebra ----

# (matrix shape, dtype, tolerance): each step of the elimination is a few kernels, so the matrices are small
SQUARE = [((1, 1), np.float64, 1e-9), ((2, 3, 3, 3), np.float64, 1e-9), ((3, 4, 4), np.float32, 2e-4)]
SQUARE_IDS = ["1x1-f64", "2x3x3x3-f64", "3x4x4-f32"]

@pytest.mark.parametrize("shape,dtype,tol", SQUARE, ids=SQUARE_IDS)
def test_det_slogdet_inverse(shape: tuple[int, ...], dtype: Any, tol: float) -> None:
  a = _well_conditioned(*shape, dtype=dtype)
  _check(lambda x: x.det(), a, tol=tol)
  _check(lambda x: x.slogdet()[1], a, tol=tol)
  _check(lambda x: x.slogdet()[0], a, tol=tol, grad=False)
  _check(lambda x: x.inverse(), a, tol=tol)
  _check(lambda x: x.logdet(), _spd(*shape, dtype=dtype), tol=tol, grad=False)

@pytest.mark.parametrize("shape,dtype,tol", SQUARE[1:], ids=SQUARE_IDS[1:])
def test_solve(shape: tuple[int, ...], dtype: Any, tol: float) -> None:
  a, n = _well_conditioned(*shape, dtype=dtype), shape[-1]
  solve = lambda x, b: torch.linalg.solve(x, b) if isinstance(x, torch.Tensor) else x.solve(b)  # noqa: E731
  _check(solve, a, rng.standard_normal(shape[:-1]).astype(dtype), tol=tol)  # one vector per matrix
  _check(solve, a, rng.standard_normal((*shape[:-1], 3)).astype(dtype), tol=tol)  # columns
  _check(solve, a, rng.standard_normal(n).astype(dtype), tol=tol)  # one vector for the whole batch

def test_solve_broadcasts_the_batch() -> None:
  a, b = _well_conditioned(3, 1, 4, 4), rng.standard_normal((2, 4, 2))
  _same(Tensor(a).solve(Tensor(b)), torch.linalg.solve(torch.tensor(a), torch.tensor(b)), 1e-9)

@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")  # the oracle: Tensor.cholesky, as lazytensor's
@pytest.mark.parametrize("shape,dtype,tol", SQUARE, ids=SQUARE_IDS)
def test_cholesky(shape: tuple[int, ...], dtype: Any, tol: float) -> None:
  a = _spd(*shape, dtype=dtype)
  _check(lambda x: x.cholesky(upper=True), a, tol=tol, grad=False)
  t, r = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  _same(low := t.cholesky(), ref := r.cholesky(), tol)
  cot = rng.standard_normal(a.shape)
  (ref * torch.tensor(cot)).sum().backward()
  (low * Tensor(cot, dtype=low.dtype)).sum().backward()
  # the lower triangle is all that is read: the gradient is there, where torch's is the symmetric gradient that
  # spreads each off-diagonal one over both triangles
  assert t.grad is not None and r.grad is not None and not np.triu(t.grad.numpy(), 1).any()
  np.testing.assert_allclose((t.grad + t.grad.transpose(-2, -1)).numpy() / 2, r.grad.numpy(), rtol=tol * 10,
                             atol=tol * 10)

@pytest.mark.parametrize("n", [-2, 0, 1, 5])
def test_matrix_power(n: int) -> None:
  _check(lambda x: x.matrix_power(n), _well_conditioned(2, 3, 3), tol=1e-8, grad=n != 0)
  if n >= 0:
    i = rng.integers(-3, 3, (4, 4)).astype(np.int64)
    _same(Tensor(i).matrix_power(n), torch.tensor(i).matrix_power(n))

def test_singular_and_degenerate() -> None:
  sing = np.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]]])
  _same(Tensor(sing).det(), torch.tensor(sing).det())
  sign, logabs = Tensor(sing).slogdet()
  rsign, rlogabs = torch.tensor(sing).slogdet()
  _same(sign, rsign)
  _same(logabs, rlogabs)
  with pytest.raises(ValueError, match=r"solve: the matrix is singular \(pivot 2 is zero"):
    Tensor(sing).inverse()
  with pytest.raises(ValueError, match="the leading minor of order 2 is not positive-definite"):
    Tensor([[1.0, 2.0], [2.0, 1.0]]).cholesky()
  with pytest.raises(ValueError, match="the leading minor of order 1 is not positive-definite"):
    Tensor([[[4.0, 0.0], [0.0, 1.0]], [[-1.0, 0.0], [0.0, 1.0]]]).cholesky()
  with pytest.raises(ValueError, match=r"det: expects \(a batch of\) square matrices, got shape \(2, 3\)"):
    Tensor.ones(2, 3).det()
  with pytest.raises(TypeError, match="inverse: expects float32 or float64 matrices, got int"):
    Tensor([[1, 2], [3, 4]]).inverse()
  with pytest.raises(ValueError, match=r"solve: b of shape \(3,\) does not fit matrices of shape \(2, 2\)"):
    Tensor.eye(2).solve(Tensor.ones(3))
