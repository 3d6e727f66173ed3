"""A reduce along a strided axis of an operand larger than the cache runs as partial reduces over blocks of rows, then
a reduce of those (schedule/reduce_split.py): the same values, two kernels where there was one."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Tensor
from lazytensor.helpers import Context
from lazytensor.opt import heuristic
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import Kernel
from lazytensor.opt.optops import AxisKind
from lazytensor.runtime.device import Device
from lazytensor.schedule import reduce_split
from lazytensor.schedule.scheduler import create_schedule

pytestmark = pytest.mark.skipif(Device[Device.DEFAULT].renderer.target is None, reason="a CPU device's choice")

@pytest.fixture
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
  """Split whatever the size of the operand (tests stay small), with schedules made afresh."""
  monkeypatch.setattr(reduce_split, "SPLIT_L3_FRACTION", 1 << 62)

def _kernels(t: Tensor) -> int:
  with Context(SCHEDULE_CACHE=0): return len(create_schedule([t.lazydata])[0])

def _rand(*shape: int) -> tuple[Tensor, np.ndarray]:
  a = np.random.default_rng(len(shape) * 7 + shape[0]).standard_normal(shape).astype(np.float32)
  return Tensor(a).realize(), a

CASES: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
  "sum": (lambda t: t.sum(0), lambda a: a.sum(0)),
  "max": (lambda t: t.max(0), lambda a: a.max(0)),
  "min": (lambda t: t.min(0), lambda a: a.min(0)),
  "prod": (lambda t: (t * 0.01 + 1).prod(0), lambda a: (a * np.float32(0.01) + np.float32(1)).prod(0)),
  "mean keepdim": (lambda t: t.mean(0, keepdim=True), lambda a: a.mean(0, keepdims=True)),
  "of an expression, then scaled": (lambda t: (t * t + 1).sum(0) * 2, lambda a: (a * a + 1).sum(0) * 2),
}

@pytest.mark.parametrize("name", CASES)
def test_split_reduce_matches_numpy(any_size: None, name: str) -> None:
  t, a = _rand(128, 1024)
  f, ref = CASES[name]
  assert _kernels(f(t)) == 2
  with Context(SCHEDULE_CACHE=0): got = f(t).numpy()
  np.testing.assert_allclose(got, ref(a), rtol=1e-4, atol=1e-4)

def test_middle_axis_of_three_and_ints(any_size: None) -> None:
  t, a = _rand(3, 64, 1024)
  with Context(SCHEDULE_CACHE=0): np.testing.assert_allclose(t.sum(1).numpy(), a.sum(1), rtol=1e-4, atol=1e-4)
  i = Tensor(np.arange(64 * 1024, dtype=np.int32).reshape(64, 1024) * 40503).realize()  # summed in int64
  assert _kernels(i.sum(0)) == 2
  with Context(SCHEDULE_CACHE=0):
    np.testing.assert_array_equal(i.sum(0).numpy(), i.numpy().sum(0))

def test_nan_survives_the_split(any_size: None) -> None:
  t, a = _rand(64, 1024)
  a[37, 5] = np.nan
  with Context(SCHEDULE_CACHE=0): got = Tensor(a).max(0).numpy()
  assert np.isnan(got[5]) and not np.isnan(np.delete(got, 5)).any()

def _weight_gradient(x: Tensor, w: Tensor, dy: Tensor) -> Tensor: return (x @ w).gradient(w, gradient=dy)[0]

@pytest.mark.parametrize("what", ["contiguous reduce", "narrow rows", "few rows", "rows 8 does not divide",
                                  "two axes", "computed operand", "matmul weight gradient"])
def test_left_whole(any_size: None, what: str) -> None:
  t, _ = _rand(128, 1024)
  f: dict[str, Callable[[], Tensor]] = {
    "contiguous reduce": lambda: t.sum(1),  # the reduce runs along the rows: no strided streams
    "narrow rows": lambda: _rand(128, 512)[0].sum(0),  # 2 KB rows: under a page
    "few rows": lambda: _rand(32, 1024)[0].sum(0),
    "rows 8 does not divide": lambda: _rand(100, 1024)[0].sum(0),
    "two axes": lambda: _rand(8, 16, 1024)[0].sum((0, 1)),
    "computed operand": lambda: (t - t.max(1, keepdim=True)).sum(0),  # reads a reduce: its strides are unknown
    # x.T @ dy with a 2-D x reduces (128, 1024, 64) over its rows, but each operand is broadcast along an output axis:
    # no stream to split, and the partials would be 16 copies of the output
    "matmul weight gradient": lambda: _weight_gradient(t, _rand(1024, 64)[0], _rand(128, 64)[0]),
  }
  assert _kernels(f[what]()) == (2 if what == "computed operand" else 1)  # max(1), then sum(0) whole

def test_rows_weighted_by_a_vector_are_split(any_size: None) -> None:
  # only the weights (a column of another matrix: strided along the reduce) are broadcast, along the columns: x is
  # streamed down its rows as a column sum streams it
  t, a = _rand(128, 1024)
  y, b = _rand(128, 4)
  f = lambda: (y[:, 1:2] * t).sum(0)  # noqa: E731
  assert _kernels(f()) == 2
  with Context(SCHEDULE_CACHE=0): np.testing.assert_allclose(f().numpy(), b[:, 1] @ a, rtol=1e-4, atol=1e-3)

def test_matmul_weight_gradient_matches_numpy(any_size: None) -> None:
  t, a = _rand(128, 1024)
  (w, _), (dy, d) = _rand(1024, 64), _rand(128, 64)
  with Context(SCHEDULE_CACHE=0):
    np.testing.assert_allclose(_weight_gradient(t, w, dy).numpy(), a.T @ d, rtol=1e-4, atol=1e-3)

def test_small_operands_are_not_split() -> None:
  # 512 KB: the strided reads hit the cache (the split pays from half of L3)
  t, a = _rand(128, 1024)
  assert _kernels(t.sum(0)) == 1
  np.testing.assert_allclose(t.sum(0).numpy(), a.sum(0), rtol=1e-4, atol=1e-4)

def test_gradient_through_a_split_reduce(any_size: None) -> None:
  t, a = _rand(64, 1024)
  x = Tensor(a, requires_grad=True)
  with Context(SCHEDULE_CACHE=0):
    (x.max(0) * 3).sum().backward()
    assert x.grad is not None
    want = (a == a.max(0, keepdims=True)) * 3.0
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)

# ---- a matmul whose B panels are longer than L2 holds: partial products over blocks of K, then their sum ----

K_ROWS, K_SIZE, K_COLS, K_AIM = 128, 2900, 64, 290  # 2900 = 10 x 290: the rule sized down, as GPT-2's 512 x 50257 @ W

@pytest.fixture
def short_l2(monkeypatch: pytest.MonkeyPatch) -> None:
  """The K-block rule at a test's size: any panel splits, in blocks aimed at K_AIM rows of the panel."""
  target = Device[Device.DEFAULT].renderer.target
  assert target is not None
  row_bytes = heuristic.TILE_VECTORS * target.vector_floats * 4  # a float32 B's panel, one row of it
  monkeypatch.setattr(reduce_split, "K_SPLIT_L2_FRACTION", 1 << 62)
  monkeypatch.setattr(reduce_split, "K_BLOCK_L2_FRACTION", target.l2_bytes // (row_bytes * K_AIM))

def _input_gradient(rows: tuple[int, ...]) -> tuple[Tensor, np.ndarray]:
  """dx = dy @ W for y = x @ W.T (a tied output layer's input gradient), x of `rows` + (K_COLS,), and numpy's."""
  (x, _), (w, wa), (dy, da) = _rand(*rows, K_COLS), _rand(K_SIZE, K_COLS), _rand(*rows, K_SIZE)
  return (x @ w.T).gradient(x, gradient=dy)[0], da @ wa

@pytest.mark.parametrize("rows", [(K_ROWS,), (2, K_ROWS // 2)], ids=["2-D", "a batch of rows"])
def test_long_matmul_in_k_blocks(short_l2: None, rows: tuple[int, ...]) -> None:
  g, want = _input_gradient(rows)
  with Context(SCHEDULE_CACHE=0, THREADS=1):
    items = create_schedule([g.lazydata])[0]
    # A and B packed, the partial products, their sum (3 kernels whole)
    assert len(items) == 4
    k = hand_coded_optimizations(Kernel(items[2].ast, Device[Device.DEFAULT].renderer))
    # the blocks of K the outermost loop (inside it, B's block of a panel stays in cache while all the rows use it);
    # the batch of rows merged into one axis, so A is read through one view
    assert k.full_shape[0] == K_SIZE // K_AIM and k.full_shape[k.axes_of(AxisKind.REDUCE)[0]] == K_AIM
    assert all(len(st.views) == 1 for st in k.sts)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-4, atol=1e-3)

def test_short_matmul_left_whole(short_l2: None, monkeypatch: pytest.MonkeyPatch) -> None:
  # panels that fit in L2 stay whole; and partials larger than 1/K_PARTIALS_FRACTION of the operands are not made
  monkeypatch.setattr(reduce_split, "K_SPLIT_L2_FRACTION", 1)
  assert _kernels(_input_gradient((K_ROWS,))[0]) == 3
  monkeypatch.setattr(reduce_split, "K_SPLIT_L2_FRACTION", 1 << 62)
  monkeypatch.setattr(reduce_split, "K_PARTIALS_FRACTION", 16)
  assert _kernels(_input_gradient((K_ROWS,))[0]) == 3

# ---- a matrix-vector product of a large weight: partial products over blocks of rows, then their sum ----

def _matvec_rows() -> int:
  """The input rows of a weight (K, 1024) at least MATVEC_MIN_L2 times L2 (every row 4 KB) that MATVEC_BLOCK
  divides."""
  target = Device[Device.DEFAULT].renderer.target
  assert target is not None
  step = reduce_split.MATVEC_BLOCK
  return step * -(-reduce_split.MATVEC_MIN_L2 * target.l2_bytes // (1024 * 4 * step))

def test_matvec_of_a_large_weight_in_row_blocks() -> None:
  # relu(x @ W + b), W (K, 1024) stored (in, out), x (1, 1, K) as a decode step's
  (x, xa), (w, wa), (b, ba) = _rand(1, 1, _matvec_rows()), _rand(_matvec_rows(), 1024), _rand(1024)
  t = (x @ w + b).relu()
  renderer = Device[Device.DEFAULT].renderer
  partial, total = [hand_coded_optimizations(Kernel(it.ast, renderer)) for it in create_schedule([t.lazydata])[0]]
  # the blocks of rows the partials' outermost loop, their sum a second kernel
  blocks, rows = partial.full_shape[0], partial.full_shape[partial.axes_of(AxisKind.REDUCE)[0]]
  assert rows == reduce_split.MATVEC_BLOCK and blocks * rows == _matvec_rows() and \
     total.full_shape[total.axes_of(AxisKind.REDUCE)[0]] == blocks
  np.testing.assert_allclose(t.numpy(), np.maximum(xa @ wa + ba, 0), rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("what", ["stored (out, in)", "two rows", "under MATVEC_MIN_L2 x L2",
                                  "rows 32 does not divide"])
def test_matvec_left_whole(what: str) -> None:
  k, step = _matvec_rows(), reduce_split.MATVEC_BLOCK
  f: dict[str, Callable[[], Tensor]] = {
    "stored (out, in)": lambda: _rand(1, k)[0] @ _rand(1024, k)[0].T,  # the reduce reads the weight contiguously
    "two rows": lambda: _rand(2, k)[0] @ _rand(k, 1024)[0],  # the weight reused by each row: a matmul's
    "under MATVEC_MIN_L2 x L2": lambda: _rand(1, k - 2 * step)[0] @ _rand(k - 2 * step, 1024)[0],
    "rows 32 does not divide": lambda: _rand(1, k + 8)[0] @ _rand(k + 8, 1024)[0],
  }
  assert _kernels(f[what]()) == 1

# ---- a convolution's weight gradient: partial gradients over blocks of images, then their sum ----

def _conv_weight_gradient(xs: tuple[int, ...], ws: tuple[int, ...], **kw: int) -> tuple[Tensor, np.ndarray, np.ndarray,
                                                                                   np.ndarray]:
  """w's gradient of conv(x, w) for a random output gradient, with the arrays of x, w and the output gradient."""
  (x, xa), (w, wa) = _rand(*xs), _rand(*ws)
  w.requires_grad_()
  out = (x.conv1d if len(xs) == 3 else x.conv2d)(w, **kw)
  g, ga = _rand(*out.shape)
  out.backward(g)
  assert w.grad is not None
  return w.grad, xa, wa, ga

@pytest.mark.parametrize("xs, ws, kw", [((8, 64, 56, 56), (64, 64, 3, 3), {"padding": 1}),
                                        ((8, 3, 224, 224), (64, 3, 7, 7), {"stride": 2, "padding": 3}),
                                        ((8, 128, 28, 28), (128, 128, 3, 3), {"padding": 1})],
                         ids=["56x56: split", "the 7x7 stem: split", "28x28: whole"])
def test_resnet18_weight_gradients_split_where_a_tile_outgrows_l2(monkeypatch: pytest.MonkeyPatch,
                                                                  xs: tuple[int, ...], ws: tuple[int, ...],
                                                                  kw: dict[str, int]) -> None:
  # a tile's 16 channels of both operands over 8 images: 3.2 MB at 56x56 and 12.8 MB for the stem (each image alone
  # then; per image 91 -> ~150 GFLOP/s on one AVX-512 thread), 0.8 MB at 28x28 (as fast whole), at a 2 MB L2
  from lazytensor.schedule import scheduler
  seen: list = []
  monkeypatch.setattr(scheduler, "batch_block", lambda target, r: seen.append(r))  # records, splits nothing
  with Context(SCHEDULE_CACHE=0): create_schedule([_conv_weight_gradient(xs, ws, **kw)[0].lazydata])
  target = Device[Device.DEFAULT].renderer.target
  assert target is not None and len(seen) == 1
  split = reduce_split.batch_block(dataclasses.replace(target, l2_bytes=2 << 20), seen[0])
  assert split == (None if xs[2] == 28 else 1)

@pytest.mark.parametrize("xs, ws, kw", [((4, 16, 20, 20), (16, 16, 3, 3), {"padding": 1}),
                                        ((4, 3, 30, 30), (16, 3, 7, 7), {"stride": 2, "padding": 3}),
                                        ((6, 16, 40), (32, 16, 3), {"padding": 1})], ids=["3x3", "7x7 stride 2", "1d"])
@pytest.mark.parametrize("fewest", [True, False], ids=["one image a block", "the most images a block"])
def test_weight_gradient_in_blocks_of_images_matches_torch(monkeypatch: pytest.MonkeyPatch, xs: tuple[int, ...],
                                                           ws: tuple[int, ...], kw: dict[str, int],
                                                           fewest: bool) -> None:
  torch = pytest.importorskip("torch")
  target = Device[Device.DEFAULT].renderer.target
  assert target is not None
  # any tile splits, each block's share of L2 at most 1 byte (then one image a block) or all of it (a test's images are
  # small: then as many as a block may have, half or a third of them)
  monkeypatch.setattr(reduce_split, "BATCH_SPLIT_L2_FRACTION", 1 << 62)
  monkeypatch.setattr(reduce_split, "BATCH_BLOCK_L2_FRACTION", target.l2_bytes if fewest else 1)
  images = 1 if fewest else max(b for b in range(1, xs[0]) if xs[0] % b == 0)
  grad, xa, wa, ga = _conv_weight_gradient(xs, ws, **kw)
  with Context(SCHEDULE_CACHE=0):
    items = create_schedule([grad.lazydata])[0]
    renderer = Device[Device.DEFAULT].renderer
    partial, total = [Kernel(it.ast, renderer) for it in items[-2:]]
    assert partial.full_shape[0] == xs[0] // images and total.full_shape[-1] == xs[0] // images, \
      (partial.full_shape, total.full_shape)
    got = grad.numpy()
  tw = torch.from_numpy(wa).requires_grad_()
  (torch.nn.functional.conv1d if len(xs) == 3 else torch.nn.functional.conv2d)(torch.from_numpy(xa), tw, **kw).backward(
    torch.from_numpy(ga))
  assert tw.grad is not None
  np.testing.assert_allclose(got, tw.grad.numpy(), rtol=1e-4, atol=1e-3)
