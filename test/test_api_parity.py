"""What a tinygrad, torch or numpy user reaches for (issue 13): call forms, dim=/axis=, in-place ops, Python
conversions, static-size selections, tinygrad's settable default dtypes, and the error kinds torch raises."""
from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, check_op, torch

from lazytensor import Tensor, dtypes
from lazytensor.dtype import DType

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="compares against torch")

@pytest.fixture
def int32_default() -> Iterator[None]:
  old = dtypes.default_int
  dtypes.default_int = dtypes.int32
  try: yield
  finally: dtypes.default_int = old

def test_default_int_is_settable(int32_default: None) -> None:
  x = Tensor([[3.0, 1.0], [2.0, 5.0]])
  made = [Tensor([1, 2]), Tensor.arange(3), x.argmax(), x.argmax(1), (x > 1).sum(), Tensor([1, 2], dtype="int8").sum(),
          x.sort()[1], x.topk(1)[1], x.argsort(), x.cummax(0)[1],
          Tensor([0, 1]).one_hot(2), x.nonzero(size=2),
          x.reshape(1, 2, 2).max_pool2d((1, 1), return_indices=True)[1]]
  assert [t.dtype for t in made] == [dtypes.int32] * len(made)
  assert Tensor([1, 2], dtype="int64").sum().dtype == dtypes.int64  # wider ints keep their width

def test_default_float_is_settable() -> None:
  old = dtypes.default_float
  dtypes.default_float = dtypes.float16
  try: assert [t.dtype for t in (Tensor([1.5]), Tensor.rand(2), Tensor([1, 2]) / 2)] == [dtypes.float16] * 3
  finally: dtypes.default_float = old
  assert Tensor([1.5]).dtype == dtypes.float32

def test_nn_submodules_are_attributes() -> None:
  # a fresh interpreter: nothing else has imported lazytensor.nn.optim by name
  code = "from lazytensor import nn; print(nn.optim.SGD.__name__, nn.state.get_parameters.__name__)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
  assert out.split() == ["SGD", "get_parameters"]

# ---- dim= and axis= ----

@needs_torch
@pytest.mark.parametrize("name,kw", [("sum", {"dim": 1}), ("sum", {"dim": (0, 2), "keepdim": True}),
                                     ("mean", {"dim": -1}), ("prod", {"dim": 0}), ("std", {"dim": 1}),
                                     ("var", {"dim": 2, "keepdim": True}), ("logsumexp", {"dim": 1}),
                                     ("softmax", {"dim": 0}), ("log_softmax", {"dim": 1}), ("cumsum", {"dim": 2}),
                                     ("argmax", {"dim": 1}), ("argmin", {"dim": 2, "keepdim": True})])
def test_reductions_take_dim(name: str, kw: dict[str, Any]) -> None:
  check_op([(2, 3, 4)], lambda x: getattr(x, name)(**kw), grad=name not in ("argmax", "argmin"))

@needs_torch
def test_max_min_cummax_take_dim() -> None:
  # torch gives (values, indices) for max(dim=); here max is values only, as in tinygrad
  check_op([(3, 4)], lambda x: x.max(dim=1, keepdim=True), torch_fn=lambda x: x.max(dim=1, keepdim=True).values)
  check_op([(3, 4)], lambda x: x.min(dim=0), torch_fn=lambda x: x.min(dim=0).values)
  check_op([(3, 4)], lambda x: x.cummax(dim=1)[0], torch_fn=lambda x: x.cummax(dim=1).values)
  check_op([(3, 4)], lambda x: x.cummin(dim=1), torch_fn=lambda x: tuple(x.cummin(dim=1)))
  check_op([(3, 4)], lambda x: x.softmin(dim=0), torch_fn=lambda x: torch.nn.functional.softmin(x, dim=0))
  check_op([np.array([[True, False], [True, True]])], lambda x: x.all(dim=1), np_fn=lambda x: x.all(axis=1))

def test_axis_and_dim_together_is_an_error() -> None:
  with pytest.raises(TypeError, match=r"sum: got both axis=0 and dim=1"): Tensor.ones(2, 2).sum(0, dim=1)
  with pytest.raises(TypeError, match="softmax"): Tensor.ones(2, 2).softmax(0, dim=1)

# ---- Python conversions and in-place ops ----

@needs_torch
def test_python_conversions_match_torch() -> None:
  for val in (2.75, -3.5, 0.0):
    assert float(Tensor([[val]])) == float(torch.tensor([[val]])) and int(Tensor(val)) == int(torch.tensor(val))
    assert bool(Tensor([val])) == bool(torch.tensor([val]))
  assert [10, 20, 30][Tensor(2)] == 30 and list(range(10))[Tensor([1]):Tensor(4)] == [1, 2, 3]
  with pytest.raises(TypeError, match="only an integer tensor"): [1, 2][Tensor(1.0)]
  with pytest.raises(ValueError, match=r"shape \(2,\)"): float(Tensor([1.0, 2.0]))

@needs_torch
def test_inplace_ops_match_torch() -> None:
  a, t = Tensor([1.0, -2.0, 3.0]).realize(), torch.tensor([1.0, -2.0, 3.0])
  view = a[1:]  # an in-place op writes the buffer: views see it
  for op, arg in (("add_", 2.0), ("mul_", 3.0), ("sub_", 0.5), ("div_", 4.0)):
    assert getattr(a, op)(arg) is a
    getattr(t, op)(arg)
  np.testing.assert_allclose(a.numpy(), t.numpy(), rtol=1e-6)
  np.testing.assert_allclose(a.clamp_(0.5, 1.5).numpy(), t.clamp_(0.5, 1.5).numpy())
  np.testing.assert_allclose(view.numpy(), t[1:].numpy())
  assert a.fill_(4.0).tolist() == t.fill_(4.0).tolist() and a.zero_().tolist() == t.zero_().tolist()
  assert a.copy_(Tensor([7, 8, 9])).tolist() == t.copy_(torch.tensor([7, 8, 9])).tolist()
  assert a.dtype == dtypes.float32 and view.tolist() == [8.0, 9.0]
  m = Tensor.zeros(2, 3).contiguous().realize()
  assert m.copy_(Tensor([1.0, 2.0, 3.0])).tolist() == [[1.0, 2.0, 3.0]] * 2  # src broadcasts, as torch

# ---- call forms ----

def test_stack_and_cat_call_forms() -> None:
  a, b = Tensor([[1, 2]]), Tensor([[3, 4]])
  want = np.stack([a.numpy(), b.numpy()])
  for got in (Tensor.stack(a, b), Tensor.stack([a, b]), a.stack(b), Tensor.stack((a, b))):
    np.testing.assert_array_equal(got.numpy(), want)
  np.testing.assert_array_equal(a.stack(b, a, dim=-1).numpy(), np.stack([a.numpy(), b.numpy(), a.numpy()], -1))
  want_cat = np.concatenate([a.numpy(), b.numpy()], 1)
  for got in (Tensor.cat(a, b, dim=1), Tensor.cat([a, b], dim=1), a.cat(b, dim=1)):
    np.testing.assert_array_equal(got.numpy(), want_cat)
  with pytest.raises(ValueError, match="not both"): Tensor.stack([a], b)

def test_tensor_of_tensors_stacks() -> None:
  t = Tensor([Tensor(1.0), Tensor(2.5)])
  assert t.shape == (2,) and t.dtype == dtypes.float32 and t.tolist() == [1.0, 2.5]
  assert Tensor((Tensor([1, 2]), Tensor([3, 4])), dtype="float64").numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]]
  assert Tensor([Tensor([1, 2]), Tensor([3, 4])], dtype="float64").dtype == dtypes.float64
  with pytest.raises(ValueError, match=r"shapes \(1,\) and \(2,\) differ"): Tensor([Tensor([1]), Tensor([2, 3])])

@needs_torch
@pytest.mark.parametrize("shape,dim", [((1, 3, 1), None), ((1, 3, 1), -1), ((1, 3, 1), 1), ((1, 3, 1), (0, 2)),
                                       ((0, 1), 1), ((0, 1), 0), ((), 0), ((), -1), ((2, 1, 1), (-1, -2))])
def test_squeeze_matches_torch(shape: tuple[int, ...], dim: Any) -> None:
  x = np.zeros(shape, np.float32)
  want = torch.tensor(x).squeeze() if dim is None else torch.tensor(x).squeeze(dim)
  assert Tensor(x).squeeze(dim).shape == tuple(want.shape)

def test_reshape_none_keeps_a_dimension() -> None:
  assert Tensor.zeros(2, 3, 4).reshape(None, -1).shape == (2, 12)
  assert Tensor.zeros(2, 3).reshape(None, None, 1).shape == (2, 3, 1)
  with pytest.raises(ValueError, match="None beyond"): Tensor.zeros(2).reshape(None, None)

@needs_torch
def test_clip_with_one_bound_and_roll_without_dims() -> None:
  check_op([(3, 4)], lambda x: x.clip(None, 0.5), torch_fn=lambda x: x.clip(None, 0.5))
  check_op([(3, 4)], lambda x: x.clamp(min=-0.5), torch_fn=lambda x: x.clamp(min=-0.5))
  check_op([(3, 4)], lambda x: x.clamp(max=Tensor([0.1, 0.2, 0.3, 0.4])),
           torch_fn=lambda x: x.clamp(max=torch.tensor([0.1, 0.2, 0.3, 0.4])), grad=False)
  check_op([(3, 4)], lambda x: x.roll(5), torch_fn=lambda x: x.roll(5))
  check_op([(3, 4)], lambda x: x.roll((-2,)), torch_fn=lambda x: x.roll((-2,)))

@needs_torch
def test_bit_shifts_match_torch() -> None:
  a = np.array([1, 5, -8, 127], np.int32)
  assert (Tensor(a) << 3).tolist() == (torch.tensor(a) << 3).tolist()
  assert (Tensor(a) >> 1).tolist() == (torch.tensor(a) >> 1).tolist()
  assert (Tensor(a.astype(np.uint8)) >> 2).tolist() == (torch.tensor(a.astype(np.uint8)) >> 2).tolist()
  assert Tensor(a).lshift(2).tolist() == (torch.tensor(a) << 2).tolist()
  by = np.array([0, 1, 2, 3], np.int32)
  assert (Tensor(a) << Tensor(by)).tolist() == (torch.tensor(a) << torch.tensor(by)).tolist()

# ---- shapes that depend on values: a static size ----

@needs_torch
def test_nonzero_with_size() -> None:
  rng = np.random.default_rng(0)
  for shape in ((7,), (3, 4, 5), (2, 0, 3)):
    a = rng.standard_normal(shape) > 0.3
    want = torch.nonzero(torch.tensor(a)).numpy()
    n = len(want)
    got = Tensor(a).nonzero(size=n + 2, fill_value=-1)
    assert got.dtype == dtypes.int64 and got.shape == (n + 2, len(shape))
    np.testing.assert_array_equal(got.numpy()[:n], want)
    assert (got.numpy()[n:] == -1).all()
    np.testing.assert_array_equal(Tensor(a).nonzero(size=max(n - 1, 0)).numpy(), want[:max(n - 1, 0)])
    # without size the count is read from the tensor, as torch does
    np.testing.assert_array_equal(Tensor(a).nonzero().numpy(), want.reshape(n, len(shape)))
  assert Tensor(3.0).nonzero(size=1).shape == (1, 0)
  with pytest.raises(ValueError, match="non-negative int"): Tensor([1, 0]).nonzero(size=-1)

@needs_torch
def test_masked_select_and_unique_with_size() -> None:
  rng = np.random.default_rng(1)
  x = rng.standard_normal((3, 4)).astype(np.float32)
  mask = np.array([True, False, True, True])  # broadcasts against x, as torch
  want = torch.masked_select(torch.tensor(x), torch.tensor(mask)).numpy()
  got = Tensor(x).masked_select(Tensor(mask), size=len(want) + 1, fill_value=9.0)
  np.testing.assert_array_equal(got.numpy(), np.append(want, 9.0).astype(np.float32))
  # without size the count is read from the mask, as tinygrad and torch do; a 0-d mask broadcasts too
  np.testing.assert_array_equal(Tensor(x).masked_select(Tensor(mask)).numpy(), want)
  np.testing.assert_array_equal(Tensor(x).masked_select(Tensor(True)).numpy(), x.reshape(-1))
  assert Tensor(x).masked_select(Tensor(False)).shape == (0,)
  with pytest.raises(TypeError, match="bool Tensor"): Tensor(x).masked_select(Tensor([1, 0, 1, 1]), size=2)
  v = rng.integers(0, 6, (4, 5))
  uniq = torch.unique(torch.tensor(v)).numpy()
  np.testing.assert_array_equal(Tensor(v).unique(size=len(uniq)).numpy(), uniq)
  assert Tensor(v).unique(size=len(uniq) + 2, fill_value=-1).tolist()[-2:] == [-1, -1]
  assert Tensor([]).unique(size=1, fill_value=7.0).tolist() == [7.0]
  np.testing.assert_array_equal(Tensor(v).unique().numpy(), uniq)
  assert Tensor([]).unique().shape == (0,)

# ---- nn functions ----

@needs_torch
@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, -1), (3.0, (0, 2))])
def test_normalize_matches_torch(p: float, dim: Any) -> None:
  check_op([(2, 3, 4)], lambda x: x.normalize(p, dim),
           torch_fn=lambda x: torch.nn.functional.normalize(x, p, dim))

@needs_torch
def test_normalize_of_zeros_is_zero() -> None:
  assert Tensor.zeros(2, 3).normalize().tolist() == [[0.0] * 3] * 2

@needs_torch
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear"])
def test_interpolate_keeps_int_dtypes(mode: str) -> None:
  x = np.random.default_rng(2).integers(0, 255, (1, 2, 6, 7)).astype(np.uint8)
  got = Tensor(x).interpolate((9, 4), mode=mode)
  want = torch.nn.functional.interpolate(torch.tensor(x), size=(9, 4), mode="bilinear" if mode == "linear" else mode)
  assert got.dtype == dtypes.uint8
  # nearest copies values exactly; linear blends in torch's fixed point, bit for bit
  np.testing.assert_array_equal(got.numpy(), want.numpy())

@needs_torch
@pytest.mark.parametrize("shape,size,align", [((2, 3, 64, 64), (10, 10), False), ((1, 2, 7, 5), (13, 3), True),
                                              ((1, 1, 9, 9), (4, 17), False), ((1, 1, 1, 6), (5, 2), True),
                                              ((1, 1, 3, 8), (7, 8), False)])
def test_interpolate_uint8_bilinear_is_torchs(shape: tuple[int, ...], size: tuple[int, int], align: bool) -> None:
  # downscales, upscales, one dim unchanged, a single row: torch's fixed-point uint8 blend exactly
  x = np.random.default_rng(3).integers(0, 256, shape).astype(np.uint8)
  got = Tensor(x).interpolate(size, mode="bilinear", align_corners=align)
  want = torch.nn.functional.interpolate(torch.tensor(x), size=size, mode="bilinear", align_corners=align)
  assert got.dtype == dtypes.uint8
  np.testing.assert_array_equal(got.numpy(), want.numpy())

@needs_torch
@pytest.mark.parametrize("padding,crop", [(-1, (slice(1, -1), slice(1, -1))), ((-1, 0, -1, 0), (slice(1, None),) * 2),
                                          ((0, -2, 1, 0), None)])
def test_conv2d_negative_padding_crops(padding: Any, crop: Any) -> None:
  def ref(x: Any, w: Any) -> Any:
    xp = x[:, :, crop[0], crop[1]] if crop else torch.nn.functional.pad(x, padding)
    return torch.nn.functional.conv2d(xp, w)
  check_op([(1, 2, 8, 8), (3, 2, 3, 3)], lambda x, w: x.conv2d(w, padding=padding), torch_fn=ref)
  with pytest.raises(ValueError, match="non-negative"): Tensor.ones(1, 1, 4, 4).max_pool2d(padding=-1)

@needs_torch
def test_pooling_over_1_2_or_3_dims() -> None:
  F = torch.nn.functional
  check_op([(2, 3, 9)], lambda x: x.max_pool2d((3,), stride=(2,)), torch_fn=lambda x: F.max_pool1d(x, 3, 2))
  check_op([(2, 3, 9)], lambda x: x.avg_pool2d((2,)), torch_fn=lambda x: F.avg_pool1d(x, 2))
  check_op([(1, 2, 4, 6, 5)], lambda x: x.max_pool2d((2, 3, 2)), torch_fn=lambda x: F.max_pool3d(x, (2, 3, 2)))
  check_op([(1, 2, 4, 6, 5)], lambda x: x.avg_pool2d((2, 2, 2), padding=1),
           torch_fn=lambda x: F.avg_pool3d(x, 2, padding=1))

@needs_torch
def test_sdpa_grouped_query_attention() -> None:
  F = torch.nn.functional
  check_op([(2, 6, 5, 8), (2, 2, 7, 8), (2, 2, 7, 4)],
           lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True),
           torch_fn=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
  with pytest.raises(ValueError, match="equal groups"):
    Tensor.ones(1, 5, 2, 4).scaled_dot_product_attention(Tensor.ones(1, 2, 2, 4), Tensor.ones(1, 2, 2, 4),
                                                         enable_gqa=True)

@needs_torch
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pads", [(2, 1), (-1, 2), (2, -2), (-1, -1), (0, 3), (-2, 1), (4, -3)])
def test_pad_modes_with_negative_amounts(mode: str, pads: tuple[int, int]) -> None:
  if mode == "circular" and pads == (4, -3):  # 4 wraps more than the 2 left after cropping (torch: garbage or error)
    with pytest.raises(RuntimeError, match="wraps around"): Tensor.ones(1, 2, 5).pad(pads, mode=mode)
    return
  check_op([(1, 2, 5)], lambda x: x.pad(pads, mode=mode),
           torch_fn=lambda x: torch.nn.functional.pad(x, pads, mode=mode))

@needs_torch
def test_sum_and_prod_with_dtype() -> None:
  check_op([(3, 4)], lambda x: x.sum(dtype=dtypes.float64), torch_fn=lambda x: x.sum(dtype=torch.float64))
  check_op([(3, 4)], lambda x: x.prod(1, dtype="float64"), torch_fn=lambda x: x.prod(1, dtype=torch.float64))
  i = np.arange(1, 7, dtype=np.int8).reshape(2, 3)
  assert Tensor(i).sum(dtype="int8").dtype == dtypes.int8 and Tensor(i).prod().dtype == dtypes.int64
  assert Tensor(i).prod(1).tolist() == torch.tensor(i).prod(1).tolist()

@needs_torch
def test_cross_entropy_with_class_indices() -> None:
  classes = np.array([2, 0, 4, 1], np.int64)
  check_op([(4, 5)], lambda x: x.cross_entropy(Tensor(classes)),
           torch_fn=lambda x: torch.nn.functional.cross_entropy(x, torch.tensor(classes)))
  with pytest.raises(RuntimeError, match="must have the input's shape"):
    Tensor.ones(4, 5).cross_entropy(Tensor.ones(4, 1))

@needs_torch
def test_einsum_with_ellipsis() -> None:
  check_op([(2, 3, 4), (2, 4, 5)], lambda a, b: Tensor.einsum("...ij,...jk->...ik", a, b),
           torch_fn=lambda a, b: torch.einsum("...ij,...jk->...ik", a, b))
  check_op([(3, 3, 2)], lambda a: Tensor.einsum("ii...->...i", a), torch_fn=lambda a: torch.einsum("ii...->...i", a))

@needs_torch
@pytest.mark.parametrize("offset,d1,d2", [(1, 0, 1), (-1, 1, 0), (2, -1, -3), (0, 2, 0), (-9, 0, 1)])
def test_diagonal_offsets_and_dims(offset: int, d1: int, d2: int) -> None:
  check_op([(3, 4, 5)], lambda x: x.diagonal(offset, d1, d2), torch_fn=lambda x: x.diagonal(offset, d1, d2))

@needs_torch
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid_indexing(indexing: str) -> None:
  check_op([(3,), (4,), (2,)], lambda a, b, c: a.meshgrid(b, c, indexing=indexing),
           torch_fn=lambda a, b, c: torch.meshgrid(a, b, c, indexing=indexing))

# ---- results' dtypes and error kinds ----

@pytest.mark.parametrize("fn,want", [
  (lambda x: x.sort()[1], dtypes.int64), (lambda x: x.argsort(), dtypes.int64), (lambda x: x.topk(2)[1], dtypes.int64),
  (lambda x: x.cummax(0)[1], dtypes.int64), (lambda x: x.cummin(0)[0], dtypes.float16),
  (lambda x: x.sort()[0], dtypes.float16)])
def test_index_results_are_default_ints(fn: Callable[[Tensor], Tensor], want: DType) -> None:
  assert fn(Tensor([3.0, 1.0, 2.0], dtype="float16")).dtype == want

def test_scatter_and_index_errors_are_torchs_kinds() -> None:
  x, idx = Tensor.zeros(3, 4, dtype="float16"), Tensor([[0, 1]])
  with pytest.raises(RuntimeError, match="src of dtype float32 must have the tensor's dtype float16"):
    x.scatter(1, idx, Tensor([[1.0, 2.0]]))
  with pytest.raises(TypeError, match="float32"): x.scatter_reduce(0, idx, Tensor([[1.0, 2.0]]), "sum")
  assert x.scatter(1, idx, 2.0).tolist()[0] == [2.0, 2.0, 0.0, 0.0]  # a number takes the tensor's dtype
  with pytest.raises(IndexError, match="float64"): Tensor.ones(3)[[1.1]]
  with pytest.raises(TypeError, match="float64"): Tensor.ones(3)[[1.1]]

# ---- gradients ----

@needs_torch
def test_gradient_edge_cases_match_torch() -> None:
  def grads(fn: Callable[..., Any], *vals: list[float], rtol: float = 1e-5) -> None:
    ts = [torch.tensor(v, requires_grad=True) for v in vals]
    want = torch.autograd.grad(fn(*ts).sum(), ts)
    lt = [Tensor(v) for v in vals]
    for g, w in zip(fn(*lt).sum().gradient(*lt), want):
      np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=1e-30)
  grads(lambda x: x.sigmoid(), [300.0, -300.0, 0.0, 88.0, -104.0])
  grads(lambda x: x ** 0, [0.0, -2.0, 3.0])
  grads(lambda x: x ** 2, [0.0, -2.0, 3.0])
  grads(lambda x: x ** 3.0, [0.0, -2.0, 3.0])
  grads(lambda x: x ** -2, [-2.0, 3.0, 0.5])
  grads(lambda x: x ** 5.5, [-2.0, 1.5, 0.0])  # a negative base to a fractional power: NaN value and gradient
  grads(lambda x: (-5.5) ** x, [0.5, -1.5])
  # below -1 the value is NaN, the gradient is not (1 + x / sqrt(x^2 - 1) cancels there: 1% at -300)
  grads(lambda x: x.acosh(), [-300.0, -2.0, 1.5, 300.0, 0.5], rtol=1e-2)
  # negative bases with integer exponent tensors
  grads(lambda x: x ** (torch.tensor([3.0, 0.0, 2.0]) if isinstance(x, torch.Tensor) else Tensor([3.0, 0.0, 2.0])),
        [-2.0, 2.0, 0.0])

POW_BASES = [-math.inf, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, math.inf]
POW_EXPONENTS = [-2.0, -1.0, -0.3, 0.0, 0.3, 1.0, 1.1, 2.0, 2.5, 3.0]

@needs_torch
@pytest.mark.parametrize("form", ["tensor ** tensor", "tensor ** number", "number ** tensor"])
def test_pow_values_and_gradients_match_torch(form: str) -> None:
  # every pair of special bases (0, +-inf, negative) and exponents (0, negative, fractional, integer): torch's
  # value and derivatives (+-inf at a zero base, NaN d/dy for a negative base), not the chain rule's limits
  a, b = (np.array(v, dtype=np.float32) for v in zip(*itertools.product(POW_BASES, POW_EXPONENTS)))
  for i in range(len(a)) if form != "tensor ** tensor" else [slice(None)]:
    ta, tb = torch.tensor(a[i], requires_grad=True), torch.tensor(b[i], requires_grad=True)
    la, lb = Tensor(a[i]), Tensor(b[i])
    if form == "tensor ** tensor": pairs = [(ta ** tb, la ** lb, (ta, tb), (la, lb))]
    elif form == "tensor ** number": pairs = [(ta ** float(b[i]), la ** float(b[i]), (ta,), (la,))]
    else: pairs = [(float(a[i]) ** tb, float(a[i]) ** lb, (tb,), (lb,))]
    for t_out, l_out, t_in, l_in in pairs:
      want = [t_out.detach(), *torch.autograd.grad(t_out.sum(), t_in)]
      got = [l_out, *l_out.sum().gradient(*l_in)]
      for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-30, err_msg=f"{form} at {a[i]}, {b[i]}")

def test_pow_second_derivative() -> None:
  # the stated first derivative is itself differentiable: d2/dx2 x**2.5 = 3.75 x**0.5
  x = Tensor([1.0, 4.0])
  g, = (x ** 2.5).sum().gradient(x, create_graph=True)
  gg, = g.sum().gradient(x)
  np.testing.assert_allclose(gg.numpy(), [3.75, 7.5], rtol=1e-6)

def test_tinygrad_shim_presents_lazytensor() -> None:
  # extra/tinygrad_shim: `import tinygrad` gives lazytensor, with tinygrad's int32 default int
  from pathlib import Path
  root = Path(__file__).resolve().parent.parent
  code = ("from tinygrad import Tensor, dtypes, nn; from tinygrad.helpers import getenv, Context; "
          "from tinygrad.tensor import _to_np_dtype; from tinygrad.device import is_dtype_supported; "
          "import lazytensor; assert Tensor is lazytensor.Tensor and nn.optim.Adam; "
          "from tinygrad import Variable; assert Variable is lazytensor.Variable; "
          "print(Tensor([1, 2]).dtype.name, Tensor.arange(3).sum().dtype.name, _to_np_dtype(dtypes.float16).__name__, "
          "is_dtype_supported(dtypes.bfloat16), getenv('LT_SHIM_UNSET', 7))")
  env = {**os.environ, "PYTHONPATH": f"{root}:{root / 'extra' / 'tinygrad_shim'}"}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
  assert out.split() == ["int32", "int32", "float16", "True", "7"]

def test_tinygrad_shim_maps_tinygrads_helpers(tmp_path: Any) -> None:
  # what tinygrad programs import from tinygrad.helpers, tinygrad.nn.*, tinygrad.uop.ops and tinygrad.renderer, in a
  # fresh process (the shim sets the default int); fetch reads a file:// URL into the cache, so no network is needed
  from pathlib import Path
  root = Path(__file__).resolve().parent.parent
  src = tmp_path / "weights.bin"
  src.write_bytes(b"abc")
  code = ("import tinygrad.nn.state, tinygrad.nn.optim; from tinygrad import Device, nn\n"
          "from tinygrad.helpers import ContextVar, DEBUG, Timing, colored, fetch, get_child, trange\n"
          "from tinygrad.renderer.nir import NIRRenderer\n"
          "from tinygrad.helpers import JIT; from tinygrad.uop.ops import UOp; import lazytensor\n"
          "assert JIT is lazytensor.helpers.JIT and UOp is lazytensor.uop.ops.UOp\n"
          "assert tinygrad.nn.state is nn.state and not isinstance(Device[Device.DEFAULT].renderer, NIRRenderer)\n"
          "K = ContextVar('LT_SHIM_KNOB', 3)\n"
          "assert K.value == 3 and ContextVar('LT_SHIM_KNOB', 9) is K and ContextVar('DEBUG', 5) is DEBUG\n"
          "assert get_child({'layers': [{'w': 7}]}, 'layers.0.w') == 7 and list(trange(3)) == [0, 1, 2]\n"
          "assert colored('x', 'red') == 'x'\n"
          f"p = fetch({src.as_uri()!r}, name='w.bin', subdir='t')\n"
          "assert p.read_bytes() == b'abc' and p.name == 'w.bin'\n"
          "with Timing('took ', on_exit=lambda ns: ' !'): pass\n")
  env = {**os.environ, "PYTHONPATH": f"{root}:{root / 'extra' / 'tinygrad_shim'}", "CACHEDIR": str(tmp_path / "c")}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith("took ") and out.stdout.rstrip().endswith("ms !")

def test_tinygrad_shim_runs_a_gpt2_style_decode() -> None:
  # test/tinygrad_decode.py: the decode loop of tinygrad's examples/gpt2.py in tinygrad's API (Variable start_pos and
  # token, TinyJit, tinygrad.uop.ops.UOp, `start_pos.val`, `if start_pos > 0`), through the shim in a fresh process;
  # it checks each step's logits against a full-sequence forward and that nothing is built after the capture
  from pathlib import Path
  root = Path(__file__).resolve().parent.parent
  env = {**os.environ, "PYTHONPATH": f"{root}:{root / 'extra' / 'tinygrad_shim'}"}
  out = subprocess.run([sys.executable, str(root / "test" / "tinygrad_decode.py")], capture_output=True, text=True,
                       env=env)
  assert out.returncode == 0, out.stdout + out.stderr
  assert "10 decode steps, programs built after the capture: 0" in out.stdout

def test_readme_tour_runs_and_prints_what_it_says(capsys: pytest.CaptureFixture[str]) -> None:
  # the README's tour, run as written: the lazy tensor and the realized one print as its comments show
  from pathlib import Path

  from lazytensor import Device
  if Device.DEFAULT != "CPU": pytest.skip(f"the tour's comments name the CPU device, this run's is {Device.DEFAULT}")
  readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
  tour = readme.split("## A short tour", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
  exec(compile(tour, "README.md", "exec"), {})
  out = capsys.readouterr().out
  assert "<Tensor (256,) float32 on CPU, lazy: not computed yet; .realize() " in out
  lines = tour.splitlines()
  at = next(i for i, line in enumerate(lines) if line.startswith("print(x.T)"))
  printed = "\n".join(line.split("# ", 1)[1] for line in lines[at + 1:at + 4])  # the comment under print(x.T)
  assert printed in out and printed.startswith("Tensor([[1, 4],"), (printed, out)
