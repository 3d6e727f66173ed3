"""Order statistics selected without sorting (mixin/select.py): kthvalue, median, quantile and topk along rows long
enough to take the radix select, against torch's stable sort (the element it puts at each rank: ties by position, NaN
the largest, -0.0 equal to 0.0 and read back with its sign), for every key dtype; their gradients; what they cost."""
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, torch

from lazytensor import Tensor, dtypes
from lazytensor.engine.schedule import create_schedule
from lazytensor.mixin.select import SELECT_FROM, TOPK_FROM, TOPK_UP_TO
from lazytensor.uop.ops import Ops

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="compares with torch")

DTYPES = ["float32", "float16", "bfloat16", "float64", "int32", "int16", "int8", "uint8", "int64", "bool"]

def _rows(dtype: str, shape: tuple[int, int], seed: int = 0) -> Any:
  """torch rows drawn from a few values, so that every row has many ties: NaN, both zeros, infinities and the extremes
  of ints among them."""
  tdt = getattr(torch, dtype)
  if dtype == "bool": base = torch.tensor([True, False, False])
  elif tdt.is_floating_point:
    base = torch.tensor([1.5, -0.0, 0.0, float("nan"), -2.0, float("inf"), -float("inf"), 1.5, 0.25, -7.0], dtype=tdt)
  else:
    info = torch.iinfo(tdt)
    base = torch.tensor([3, info.min, info.max, 0, 3, -1 if info.min < 0 else 1, 9], dtype=tdt)
  return base[torch.from_numpy(np.random.default_rng(seed).integers(0, len(base), shape))]

def _lazy(t: Any, dtype: str) -> Tensor:
  return Tensor(t.float().numpy() if dtype == "bfloat16" else t.numpy(), dtype=dtype)

def _same(out: Tensor, ref: Any) -> None:
  """Equal values, NaN where NaN, and the same sign of each zero."""
  got = (out.cast(dtypes.float32) if out.dtype == dtypes.bfloat16 else out).numpy()
  want = (ref.float() if ref.dtype == torch.bfloat16 else ref).numpy()
  np.testing.assert_array_equal(got, want)
  if got.dtype.kind == "f": np.testing.assert_array_equal(np.signbit(got), np.signbit(want))

@pytest.mark.parametrize("dtype", DTYPES)
def test_kthvalue_of_long_rows_is_the_stable_sorts_element(dtype: str) -> None:
  x = _rows(dtype, (3, 301))
  tv, ti = torch.sort(x, dim=1, stable=True)
  lx = _lazy(x, dtype)
  for k in ((1, 2, 151, 301) if dtype == "float32" else (151,)):
    v, i = lx.kthvalue(k, 1)
    np.testing.assert_array_equal(i.numpy(), ti[:, k - 1].numpy())
    _same(v, tv[:, k - 1])
    assert i.dtype == dtypes.int64 and v.dtype == lx.dtype

@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_kthvalue_along_dim0_keepdim(dtype: str) -> None:
  x = _rows(dtype, (200, 3), seed=1)
  tv, ti = torch.sort(x, dim=0, stable=True)
  v, i = _lazy(x, dtype).kthvalue(77, 0, keepdim=True)
  assert v.shape == i.shape == (1, 3)
  np.testing.assert_array_equal(i.numpy(), ti[76:77].numpy())
  _same(v, tv[76:77])

@pytest.mark.parametrize("dtype", ["float32", "int32", "int16"])
def test_median_of_long_rows_against_torch(dtype: str) -> None:
  # torch.median: a row with a NaN gives NaN at the first NaN's index; the others the lower median, which for rows
  # with ties is the stable sort's element
  x = _rows(dtype, (4, 257), seed=2)
  if x.dtype.is_floating_point: x[1] = torch.where(x[1].isnan(), torch.tensor(1.0, dtype=x.dtype), x[1])
  v, i = _lazy(x, dtype).median(1, return_indices=True)
  tv, ti = torch.sort(x, dim=1, stable=True)
  want_v, want_i = tv[:, 128].clone(), ti[:, 128].clone()
  if x.dtype.is_floating_point:
    nan = x.isnan()
    has = nan.any(1)
    want_v[has], want_i[has] = float("nan"), nan.int().argmax(1)[has]
  np.testing.assert_array_equal(i.numpy(), want_i.numpy())
  _same(v, want_v)
  np.testing.assert_array_equal(_lazy(x, dtype).median(1).numpy(), torch.median(x, 1).values.numpy())

def test_median_of_all_and_quantiles_of_long_rows() -> None:
  x = torch.from_numpy(np.random.default_rng(4).standard_normal((5, 400)).astype(np.float32))
  lx = Tensor(x.numpy())
  np.testing.assert_array_equal(lx.median().numpy(), torch.median(x).numpy())
  for interpolation in ("linear", "lower", "higher", "nearest", "midpoint"):
    np.testing.assert_allclose(lx.quantile([0.1, 0.75], 1, interpolation=interpolation).numpy(),
                               torch.quantile(x, torch.tensor([0.1, 0.75], dtype=x.dtype), 1,
                                              interpolation=interpolation).numpy(), rtol=1e-6)
  # the gradient of a selected quantile goes to its two neighbours, by lerp
  lx = Tensor(x.numpy(), requires_grad=True)
  lx.quantile(0.3, 1).sum().backward()
  tx = x.clone().requires_grad_()
  torch.quantile(tx, 0.3, 1).sum().backward()
  np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-4)  # torch rounds the weight in float32

@pytest.mark.parametrize("dtype,largest", [(d, True) for d in DTYPES] + [("float32", False), ("int64", False)])
def test_selected_topk_is_the_stable_sorts_prefix(dtype: str, largest: bool) -> None:
  x = _rows(dtype, (3, 700), seed=5)
  tv, ti = torch.sort(x, dim=1, stable=True, descending=largest)
  for k in ((TOPK_FROM + 1, TOPK_UP_TO) if dtype in ("float32", "int64") else (100,)):
    v, i = _lazy(x, dtype).topk(k, 1, largest=largest)
    np.testing.assert_array_equal(i.numpy(), ti[:, :k].numpy())
    _same(v, tv[:, :k])

def test_selected_topk_of_distinct_values_against_torch_topk() -> None:
  x = torch.from_numpy(np.random.default_rng(6).standard_normal((4, 1000)).astype(np.float32))
  for dim, k in ((1, 64), (0, 2)):
    v, i = Tensor(x.numpy()).topk(k, dim)
    tv, ti = torch.topk(x, k, dim)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())

@pytest.mark.parametrize("name,fn", [
  ("kthvalue", lambda x: x.kthvalue(50, 1)[0]),
  ("median", lambda x: x.median(1)[0] if isinstance(x, torch.Tensor) else x.median(1)),
  ("topk", lambda x: x.topk(45)[0] * torch.arange(45) if isinstance(x, torch.Tensor) else
   x.topk(45)[0] * Tensor.arange(45))])
def test_selected_gradients(name: str, fn: Callable[[Any], Any]) -> None:
  # the value is read at the selected position: the gradient goes there alone, as torch's
  x = np.random.default_rng(7).uniform(-2, 2, (2, 130)).astype(np.float32)
  lx, tx = Tensor(x, requires_grad=True), torch.from_numpy(x).requires_grad_()
  fn(lx).sum().backward()
  fn(tx).sum().backward()
  np.testing.assert_array_equal(lx.grad.numpy(), tx.grad.numpy())

@pytest.mark.parametrize("n", [65, 1000, 4096])
def test_fused_network_steps_sort_as_torch(n: int) -> None:
  # the network's close steps run three to a kernel (sort_network.FUSED_STEPS): rows padded to a power of two, ties,
  # NaN, both zeros and infinities, both directions
  x = _rows("float32", (2, n), seed=n)
  for descending in (False, True):
    v, i = _lazy(x, "float32").sort(1, descending=descending)
    tv, ti = torch.sort(x, dim=1, descending=descending, stable=True)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    _same(v, tv)

def _kernels(*ts: Tensor) -> list[Any]:
  return create_schedule([t.lazydata for t in ts])[0]

def test_selection_is_linear_passes_not_a_sort() -> None:
  # 8 passes of 4 bits over the float32 codes, 4 over the positions (13 bits): a count and a digit each, and no kernel
  # that sorts (the network's 78 elementwise steps) or reads the row once per element (an O(n^2) comparison)
  x = Tensor(np.random.default_rng(8).standard_normal((4, 4096)).astype(np.float32)).realize()
  items = _kernels(*x.kthvalue(100))
  assert len(items) <= 30
  for it in items:
    for u in it.ast.toposort:
      if u.op is Ops.REDUCE_AXIS: assert np.prod(u.src[0].shape) <= 4 * 15 * 4096, u.src[0].shape
  # a topk of 64: the select, a cumsum of the kept mask, their scatter into k slots and a sort of the k
  assert len(_kernels(*x.topk(64))) <= 50
  assert len(_kernels(*x.topk(5))) <= 8  # k passes of a min over packed keys stay cheaper for a few

def test_short_rows_still_compare_pairs() -> None:
  x = Tensor(np.random.default_rng(9).standard_normal((4, SELECT_FROM)).astype(np.float32)).realize()
  assert len(_kernels(*x.kthvalue(3))) <= 3

# ---- scans in blocks (mixin/scans.py) ----

@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "uint8", "bool"])
def test_cummax_cummin_of_long_rows_against_torch(dtype: str) -> None:
  # running extremes of order codes in blocks of 8 (two levels for 1000): ties give the last equal index, NaN
  # propagates (in cummin too) from its first index on to the last NaN, -0.0 and 0.0 are equal and read back with
  # their own sign
  x = _rows(dtype, (2, 1000), seed=11)
  for name in ("cummax", "cummin"):
    v, i = getattr(_lazy(x, dtype), name)(1)
    tv, ti = getattr(torch, name)(x, 1)
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    _same(v, tv)

def test_blocked_scans_against_torch_and_their_gradients() -> None:
  x = np.random.default_rng(12).uniform(0.5, 1.5, (3, 700))
  tx = torch.from_numpy(x).requires_grad_()
  for name in ("cumprod", "logcumsumexp", "cummax"):
    lx = Tensor(x, requires_grad=True)
    out, ref = getattr(lx, name)(1), getattr(torch, name)(tx, 1)
    out, ref = (out[0], ref.values) if name == "cummax" else (out, ref)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-10)
    weights = np.random.default_rng(13).standard_normal(x.shape)
    (out * Tensor(weights)).sum().backward()
    tx.grad = None
    (ref * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-10)

def test_cummax_kernels() -> None:
  # two scans of int32 codes, each 3 levels of blocks of 8 for 1024 (a kernel for the blocks' scans, one for their
  # totals, one to combine, down to 16 totals scanned in one), the codes, and the values read at the indices
  x = Tensor(np.random.default_rng(14).standard_normal((4, 1024)).astype(np.float32)).realize()
  assert len(_kernels(*x.cummax(1))) <= 17

def test_cumsum_in_blocks_of_8_over_three_levels() -> None:
  # 3000 = 375 blocks of 8, whose totals are 47 blocks, whose totals are 6: sums against numpy's sequential ones,
  # infinities and NaN from where they first appear, ints exactly
  x = np.random.default_rng(15).standard_normal((2, 3000))
  x[0, 1234], x[1, 100], x[1, 2000] = np.nan, np.inf, -np.inf
  with np.errstate(invalid="ignore"): want = np.cumsum(x, 1)  # inf + -inf
  np.testing.assert_allclose(Tensor(x).cumsum(1).numpy(), want, rtol=1e-9, atol=1e-9)
  ints = np.random.default_rng(16).integers(-1000, 1000, (3, 3000)).astype(np.int32)
  np.testing.assert_array_equal(Tensor(ints).cumsum(1).numpy(), np.cumsum(ints, 1, dtype=np.int64))

@pytest.mark.parametrize("place", [lambda t: t.to("CPU:1"), lambda t: t.shard(("CPU:0", "CPU:1"), None)],
                         ids=["CPU:1", "sharded"])
def test_empty_orders_stay_on_the_inputs_device(place: Callable[[Tensor], Tensor]) -> None:
  """A topk of k=0 or of an empty tensor, and the indices of an empty sort or running extreme, are made on the input's
  device, not the default one (found by extra/fuzz_compose.py in the shard mode: a device mismatch in the next op)."""
  x, empty = place(Tensor([[1.0, 2.0], [3.0, 4.0]])), place(Tensor.ones(3, 0))
  for out in [*x.topk(0, 1), *empty.topk(0, 1), *empty.topk(1, 0), *empty.sort(1), empty.argsort(0),
              *empty.cummax(1), *empty.cummin(0)]:
    assert out.device == x.device
    assert (out + place(Tensor(1))).device == x.device
