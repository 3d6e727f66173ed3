"""What torch and tinygrad users type, checked against torch: constructor casts, to(dtype), DLPack, the keyword forms of
the movements, grad modes, Context(TRAINING=...), dtype limits, and the errors and values tinygrad's op tests expect."""
from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, torch

from lazytensor import (
  Context,
  Tensor,
  dtypes,
  enable_grad,
  inference_mode,
  is_grad_enabled,
  no_grad,
  set_grad_enabled,
)
from lazytensor.dtype import DTypeOverflowError, to_dtype
from lazytensor.nn.optim import SGD

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="compares against torch")

@pytest.fixture
def int32_default() -> Iterator[None]:
  """dtypes.default_int as tinygrad's (int32) for one test."""
  old, dtypes.default_int = dtypes.default_int, dtypes.int32
  try: yield
  finally: dtypes.default_int = old

# ---- constructor casts: one rule for Python numbers (torch's: raise when out of range), .cast's for numpy data ----

PYTHON_DATA = [([300], "int8"), (300, "int8"), ([float("nan")], "int32"), ([math.inf], "int32"), ([3e9], "int32"),
               ([2 ** 40], "int32"), ([-1], "uint8"), ([255], "uint8"), ([-255], "uint8"), ([-256], "uint8"),
               ([2.7, -2.7], "int32"), ([True, 2], "bool"), ([1e40], "float32"), ([70000.0], "float16"),
               (-2.9, "int8"), (127.9, "int8"), (127.0, "int8"), (-128.5, "int8"), ([-1.0], "uint8"),
               ([-0.0], "uint8"), (2147483647.5, "int32"), (-9.223372036854775807e18, "int64")]

@pytest.mark.parametrize("data,dtype", PYTHON_DATA, ids=[f"{d}-{t}" for d, t in PYTHON_DATA])
def test_python_numbers_fit_the_dtype_as_in_torch(data: Any, dtype: str) -> None:
  try: want = torch.tensor(data, dtype=getattr(torch, dtype))
  except RuntimeError:
    with pytest.raises(RuntimeError, match="cannot be converted"): Tensor(data, dtype=dtype)
    return
  got = Tensor(data, dtype=dtype)
  assert got.dtype == to_dtype(dtype)
  np.testing.assert_array_equal(got.numpy(), want.numpy())

def test_python_floats_beyond_int64_raise() -> None:
  # 2^63 as a float is one past int64's largest: torch's check lets it through and stores INT64_MIN
  with pytest.raises(DTypeOverflowError, match="cannot be converted"): Tensor([2.0 ** 63], dtype="int64")
  assert Tensor([2.0 ** 63 - 1024], dtype="int64").tolist() == [2 ** 63 - 1024]

def test_numpy_data_with_a_dtype_converts_as_cast() -> None:
  # an existing array given a dtype is a cast of it: the same rule, on the host, as .cast on the device
  x = np.array([math.nan, math.inf, -math.inf, 3e9, -3e9, 300.7, -1.5, 70000.0], np.float64)
  for dt in ("int8", "uint8", "int16", "int32", "uint32", "int64", "uint64", "bool", "float16", "bfloat16"):
    np.testing.assert_array_equal(Tensor(x, dtype=dt).numpy(), Tensor(x).cast(dt).numpy(), err_msg=dt)
  ints = np.array([300, -1, 2 ** 40], np.int64)
  for dt in ("int8", "uint8", "int32", "float16"):
    np.testing.assert_array_equal(Tensor(ints, dtype=dt).numpy(), Tensor(ints).cast(dt).numpy(), err_msg=dt)
  assert Tensor(np.array([math.nan, math.inf, -math.inf, 3e9]), dtype="int32").tolist() == \
    [0, 2147483647, -2147483648, 2147483647]

FULL_CASES = [(300, "int8"), (-129, "int8"), (math.nan, "int32"), (math.inf, "int64"), (2.5, "int32"), (-1, "uint8"),
              (127, "int8"), (7, None), (2.5, None), (True, None)]

@pytest.mark.parametrize("value,dtype", FULL_CASES, ids=[f"{v}-{t}" for v, t in FULL_CASES])
def test_full_takes_python_numbers_as_the_constructor(value: Any, dtype: str | None) -> None:
  tdt = None if dtype is None else getattr(torch, dtype)
  try: want = torch.full((2,), value, dtype=tdt)
  except RuntimeError:
    with pytest.raises(RuntimeError, match="cannot be converted"): Tensor.full((2,), value, dtype=dtype)
    with pytest.raises(RuntimeError, match="cannot be converted"): Tensor(value, dtype=dtype)
    return
  got = Tensor.full((2,), value, dtype=dtype)
  assert got.dtype.name == str(want.dtype).removeprefix("torch.")
  np.testing.assert_array_equal(got.numpy(), want.numpy())

def test_the_default_int_widens_instead_of_wrapping(int32_default: None) -> None:
  # tinygrad's int32 default int: a Python int it cannot hold makes an int64 tensor, not a wrapped int32 one
  assert Tensor([1, 2]).dtype == dtypes.int32 and Tensor(5).dtype == dtypes.int32
  for t in (Tensor([2 ** 40, 1]), Tensor(2 ** 40), Tensor.full((1,), -(2 ** 40))):
    assert t.dtype == dtypes.int64 and abs(t.numpy().reshape(-1)[0]) == 2 ** 40
  with pytest.raises(OverflowError): Tensor([2 ** 64])

def test_arange_picks_int64_or_raises_where_the_dtype_cannot_hold_it(int32_default: None) -> None:
  assert Tensor.arange(5).dtype == dtypes.int32
  big = Tensor.arange(2 ** 31 - 1, 2 ** 31 + 2)
  assert big.dtype == dtypes.int64 and big.tolist() == [2 ** 31 - 1, 2 ** 31, 2 ** 31 + 1]
  assert Tensor.arange(10, -2 ** 31 - 3, -2 ** 30).tolist() == list(range(10, -2 ** 31 - 3, -2 ** 30))
  assert Tensor.arange(128, dtype=dtypes.int8).tolist() == list(range(128))  # 127 is the last: it fits
  with pytest.raises(OverflowError, match="do not fit int8"): Tensor.arange(129, dtype=dtypes.int8)
  with pytest.raises(OverflowError): Tensor.arange(0, -2, -1, dtype=dtypes.uint8)

# ---- to(dtype), DLPack and numpy ----

def test_to_takes_torchs_forms() -> None:
  t, tt = Tensor([1.7, -2.5]), torch.tensor([1.7, -2.5])
  for args, kwargs in [((dtypes.float16,), {}), (("int32",), {}), ((), {"dtype": dtypes.half}),
                       (("CPU:1", dtypes.float64), {}), ((), {"device": "CPU:1", "dtype": "int16"})]:
    targs = tuple(getattr(torch, to_dtype(a).name) if not str(a).startswith("CPU") else "cpu" for a in args)
    tkw = {k: (getattr(torch, to_dtype(v).name) if k == "dtype" else "cpu") for k, v in kwargs.items()}
    got, want = t.to(*args, **kwargs), tt.to(*targs, **tkw)
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.numpy(), want.numpy())
  assert t.to("CPU:1", dtypes.half).device == "CPU:1"
  other = Tensor([1], dtype=dtypes.int8, device="CPU:2")
  assert (t.to(other).device, t.to(other).dtype) == ("CPU:2", dtypes.int8)
  assert t.to(t.device) is t and t.to(dtypes.float32) is t

def test_tensor_from_torch_tensors() -> None:
  base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
  for src in (base, base.T, base[:, 1::2], base.requires_grad_(), torch.tensor([True, False]),
              torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.tensor(3.5, dtype=torch.float64)):
    got = Tensor(src)
    want = src.detach().numpy()
    assert got.shape == tuple(src.shape) and got.dtype.np == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)
  assert Tensor(base, dtype="int32").dtype == dtypes.int32  # a cast of existing data, as numpy's
  np.testing.assert_array_equal(Tensor.from_dlpack(base.T).numpy(), base.T.detach().numpy())
  with pytest.raises(TypeError, match="bfloat16"): Tensor(torch.ones(2, dtype=torch.bfloat16))

def test_dlpack_export_shares_a_realized_tensors_memory() -> None:
  t = Tensor([1.0, 2.0, 3.0]).realize()
  shared = torch.from_dlpack(t)
  shared[0] = 7.0
  assert t.tolist() == [7.0, 2.0, 3.0]
  t.assign(Tensor([4.0, 5.0, 6.0])).realize()
  assert shared.tolist() == [4.0, 5.0, 6.0]
  # a view or a lazy value is first computed into a buffer of its own: the reader gets its values
  m = Tensor([[1, 2], [3, 4]])
  np.testing.assert_array_equal(torch.from_dlpack(m.T).numpy(), [[1, 3], [2, 4]])
  np.testing.assert_array_equal(np.from_dlpack(m + 1), [[2, 3], [4, 5]])
  np.testing.assert_array_equal(np.asarray(m.T), [[1, 3], [2, 4]])
  with pytest.raises(TypeError, match="bfloat16"): np.from_dlpack(Tensor([1.0], dtype="bfloat16"))

def test_dlpack_export_keeps_its_memory_from_other_buffers() -> None:
  # the reader holds the buffer: its memory does not go back to the allocator's cache for a new buffer to overwrite
  exported = torch.from_dlpack(Tensor.arange(1024, dtype="float32") + 0)
  gc.collect()
  for _ in range(3): (Tensor.full((1024,), 9.0) + 0).realize()
  np.testing.assert_array_equal(exported.numpy(), np.arange(1024, dtype=np.float32))

# ---- the movements' keyword forms, Tensor.linear, replace, contiguous_backward ----

def test_movements_take_keywords_as_torch_and_tinygrad() -> None:
  x, tx = Tensor.arange(24).reshape(2, 3, 4), torch.arange(24).reshape(2, 3, 4)
  cases = [(x.reshape(shape=(4, 6)), tx.reshape(shape=(4, 6))), (x.view(size=(6, 4)), tx.view(size=(6, 4))),
           (x.view(shape=(-1,)), tx.view(-1)), (x.permute(dims=(2, 0, 1)), tx.permute(dims=(2, 0, 1))),
           (x.permute(order=(1, 2, 0)), tx.permute(1, 2, 0)),
           (x[:, :1].expand(size=(2, 5, 4)), tx[:, :1].expand(size=(2, 5, 4))),
           (x[:, :1].expand(shape=(2, 2, 4)), tx[:, :1].expand(2, 2, 4))]
  for got, want in cases: np.testing.assert_array_equal(got.numpy(), want.numpy())
  with pytest.raises(TypeError, match="not several"): x.reshape(4, 6, shape=(4, 6))

def test_linear_with_a_1d_weight_scales_each_feature() -> None:
  x, w, b = np.random.default_rng(0).standard_normal((3, 2, 5)).astype(np.float32)
  got = Tensor(x).linear(Tensor(w[0]), Tensor(b[0]))
  np.testing.assert_allclose(got.numpy(), x * w[0] + b[0], rtol=1e-6)
  np.testing.assert_allclose(Tensor(x).linear(Tensor(w.T)).numpy(), x @ w.T, rtol=1e-5)

def test_replace_swaps_the_value_in_place() -> None:
  w = Tensor.zeros(2, 2).contiguous().realize()
  view = w[0]
  assert w.replace(Tensor([[1.0, 2.0], [3.0, 4.0]])) is w and w.tolist() == [[1.0, 2.0], [3.0, 4.0]]
  assert view.tolist() == [0.0, 0.0]  # a view taken before views the old value
  w[1, 1] = 9.0  # writes reach the new value, not the old memory
  assert w.tolist() == [[1.0, 2.0], [3.0, 9.0]] and view.tolist() == [0.0, 0.0]
  with pytest.raises(ValueError, match="does not match"): w.replace(Tensor.zeros(3))
  assert w.replace(Tensor.zeros(3), allow_shape_mismatch=True).shape == (3,)
  t = Tensor([1, 2])
  assert t.to_("CPU:1") is t and t.device == "CPU:1" and t.tolist() == [1, 2]

def test_contiguous_backward_computes_the_gradient_into_its_own_buffer() -> None:
  x = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
  grads, kernels = [], []
  for cut in (False, True):
    w = Tensor(x, requires_grad=True)
    h = w * 2
    ((h.contiguous_backward() if cut else h).exp() * 3).sum().backward()
    kernels.append(len(w.grad.schedule()))
    grads.append(w.grad.numpy())
  tw = torch.tensor(x, requires_grad=True)
  ((tw * 2).exp() * 3).sum().backward()
  for g in grads: np.testing.assert_allclose(g, tw.grad.numpy(), rtol=1e-6)
  assert kernels[1] == kernels[0] + 1
  assert Tensor([1.0]).contiguous_backward().tolist() == [1.0]

# ---- grad modes and training mode ----

def test_grad_modes_as_torchs() -> None:
  w, tw = Tensor([2.0], requires_grad=True), torch.tensor([2.0], requires_grad=True)
  pairs: list[tuple[Callable[[], Any], Callable[[], Any]]] = [
    (no_grad, torch.no_grad), (inference_mode, torch.inference_mode), (enable_grad, torch.enable_grad),
    (lambda: set_grad_enabled(False), lambda: torch.set_grad_enabled(False)),
    (lambda: set_grad_enabled(True), lambda: torch.set_grad_enabled(True)),
    (lambda: inference_mode(False), lambda: torch.inference_mode(False)), (Tensor.inference_mode, torch.inference_mode)]
  for ours, theirs in pairs:
    with no_grad(), ours(): got, grad_on = bool((w * 3).requires_grad), is_grad_enabled()
    with torch.no_grad(), theirs(): want, torch_on = (tw * 3).requires_grad, torch.is_grad_enabled()
    assert (got, grad_on) == (want, torch_on), ours
    with ours(): got = bool((w * 3).requires_grad)
    with theirs(): want = (tw * 3).requires_grad
    assert got == want, ours
  @inference_mode()
  def f(x: Tensor) -> Tensor: return x * 2
  assert not f(w).requires_grad and is_grad_enabled()

def test_training_is_the_TRAINING_knob() -> None:
  x = Tensor.ones(64)
  assert not Tensor.training and x.dropout(0.5).tolist() == [1.0] * 64
  with Context(TRAINING=1):
    assert Tensor.training
    assert x.dropout(0.5).tolist() != [1.0] * 64
    with Tensor.test(): assert not Tensor.training
    assert Tensor.training
  Tensor.training = True  # tinygrad's spelling
  try:
    with Context(TRAINING=0): assert not Tensor.training
    assert Tensor.training
  finally: Tensor.training = False

def test_data_tensors_get_no_grad_as_in_torch() -> None:
  # requires_grad None means not asked for, as torch's False: backward fills no .grad for a model's inputs (their
  # gradient would be work thrown away at every step); an optimizer makes its None parameters train, as tinygrad's
  x, w = Tensor([[1.0, 2.0]]), Tensor([[3.0], [4.0]])
  opt = SGD([w], lr=0.1)
  assert x.requires_grad is None and w.requires_grad is True
  (x @ w).sum().backward()
  tx, tw = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0], [4.0]], requires_grad=True)
  (tx @ tw).sum().backward()
  assert x.grad is None and tx.grad is None
  np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
  opt.step()
  np.testing.assert_allclose(w.numpy(), [[2.9], [3.8]], rtol=1e-6)

# ---- dtype limits and the errors and values of tinygrad's op tests ----

def test_dtype_limits_are_values_that_can_be_called() -> None:
  for name in ("int8", "uint8", "int16", "int32", "int64", "uint64"):
    dt, info = getattr(dtypes, name), torch.iinfo(getattr(torch, name))
    assert (dt.min, dt.max) == (info.min, info.max) and (dt.min(), dt.max()) == (info.min, info.max)
    assert type(dt.max()) is int
  assert dtypes.int.max == 2 ** 31 - 1 and dtypes.max(dtypes.int) == dtypes.int.max
  assert (dtypes.float32.min, dtypes.float16.max()) == (-math.inf, math.inf)
  assert (dtypes.bool.min, dtypes.bool.max) == (0, 1)
  assert Tensor([dtypes.int32.max, dtypes.int32.min], dtype="int32").tolist() == [2 ** 31 - 1, -2 ** 31]

def test_errors_are_the_kinds_torch_raises() -> None:
  f, tf = Tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
  for fn in (lambda x: x << 1, lambda x: x >> 1, lambda x: x.diagonal(dim1=0, dim2=-1) if x.ndim == 2 else
             x.reshape(1, 2).diagonal(dim1=1, dim2=-1)):
    with pytest.raises(RuntimeError): fn(tf)
    with pytest.raises(RuntimeError): fn(f)
  with pytest.raises(RuntimeError): torch.nn.functional.one_hot(tf.long()[:0])
  with pytest.raises(RuntimeError, match="empty"): Tensor([], dtype="int32").one_hot()
  with pytest.raises(RuntimeError): torch.nn.functional.one_hot(tf)
  with pytest.raises(RuntimeError, match="integer"): f.one_hot(3)
  assert Tensor([], dtype="int32").one_hot(3).shape == (0, 3)

@pytest.mark.parametrize("shape,kwargs", [((3, 4), {}), ((4, 3), {"offset": -1}), ((3, 3, 3), {"dim1": -2, "dim2": -1}),
                                          ((2, 3, 4, 5), {"dim1": -1, "dim2": 1, "offset": 1}),
                                          ((3, 5), {"offset": 2})])
def test_diagonal_as_torch(shape: tuple[int, ...], kwargs: dict[str, int]) -> None:
  x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
  np.testing.assert_array_equal(Tensor(x).diagonal(**kwargs).numpy(), torch.tensor(x).diagonal(**kwargs).numpy())

@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, math.inf])
def test_normalize_of_a_zero_row_has_torchs_gradient(p: float) -> None:
  x = np.array([[3.0, -4.0], [0.0, 0.0]], np.float32)
  weights = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
  lx, tx = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  out, want = lx.normalize(p=p), torch.nn.functional.normalize(tx, p=p)
  (out * Tensor(weights)).sum().backward()
  (want * torch.tensor(weights)).sum().backward()
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-6)
  np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-5)

@pytest.mark.parametrize("shape,dim", [((7,), 0), ((3, 5), 1), ((4, 3), 0), ((2, 0, 4), 1), ((0, 3), 0), (() , 0)])
def test_cummax_and_cummin_return_torchs_pair(shape: tuple[int, ...], dim: int) -> None:
  x = np.random.default_rng(3).integers(-3, 3, shape).astype(np.float32)
  for name in ("cummax", "cummin"):
    values, indices = getattr(Tensor(x), name)(dim)
    want = getattr(torch, name)(torch.tensor(x), dim)
    np.testing.assert_array_equal(values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())
    assert indices.dtype == dtypes.default_int
