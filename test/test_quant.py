"""nn/quant.py against torch.ao.quantization (fake quantization, observers, per-channel weights) and against a numpy
reference of its int8 layers; prepare/convert, QAT and safetensors round trips."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from lazytensor import Device, Tensor, dtypes, nn
from lazytensor.nn import quant
from lazytensor.nn.state import get_state_dict, load_state_dict, safe_load, safe_save
from lazytensor.opt.heuristic import TILE_VECTORS
from lazytensor.schedule.cache import ScheduleItem
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops

torch = pytest.importorskip("torch")
# torch's notices that its quantization moves elsewhere
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
tq = pytest.importorskip("torch.ao.quantization")
rng = np.random.default_rng(0)

def _np(*shape: int, scale: float = 1.0) -> np.ndarray: return (rng.standard_normal(shape) * scale).astype(np.float32)

# ---- fake quantization ----

@pytest.mark.parametrize("qmin, qmax, scale, zp", [(0, 255, 0.05, 128), (-128, 127, 0.1, 0), (0, 15, 0.3, 3)])
def test_fake_quantize_per_tensor_matches_torch(qmin: int, qmax: int, scale: float, zp: int) -> None:
  x = _np(64, 33, scale=4)
  x[0, :9] = np.array([-0.5, 0.5, 1.5, 2.5, -2.5, 1e9, -1e9, 0.0, 3.5], np.float32) * np.float32(scale)  # ties, clamps
  tx = torch.tensor(x, requires_grad=True)
  want = torch.fake_quantize_per_tensor_affine(tx, scale, zp, qmin, qmax)
  g = _np(*x.shape)
  want.backward(torch.tensor(g))
  lx = Tensor(x, requires_grad=True)
  got = quant.fake_quantize(lx, scale, zp, qmin, qmax)
  got.backward(Tensor(g))
  np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
  np.testing.assert_array_equal(lx.grad.numpy(), tx.grad.numpy())  # straight through inside the range, 0 outside

@pytest.mark.parametrize("axis", [0, 1])
def test_fake_quantize_per_channel_matches_torch(axis: int) -> None:
  x = _np(6, 10, 5, scale=3)
  n = x.shape[axis]
  scale, zp = (rng.random(n) * 0.2 + 0.01).astype(np.float32), rng.integers(-20, 20, n).astype(np.int32)
  tx = torch.tensor(x, requires_grad=True)
  want = torch.fake_quantize_per_channel_affine(tx, torch.tensor(scale), torch.tensor(zp), axis, -128, 127)
  want.sum().backward()
  lx = Tensor(x, requires_grad=True)
  got = quant.fake_quantize(lx, Tensor(scale), Tensor(zp), -128, 127, axis)
  got.sum().backward()
  np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
  np.testing.assert_array_equal(lx.grad.numpy(), tx.grad.numpy())

def test_fake_quantize_rejects_an_empty_range() -> None:
  with pytest.raises(ValueError, match="quant_min 5 must be below quant_max 5"):
    quant.fake_quantize(Tensor([1.0]), 1.0, 0, 5, 5)

# ---- observers ----

def _batches() -> list[np.ndarray]: return [_np(16, 8, scale=s) + o for s, o in ((1, 0.5), (3, -1), (0.5, 2))]

@pytest.mark.parametrize("dtype, symmetric", [("quint8", False), ("qint8", True), ("qint8", False), ("quint8", True)])
def test_minmax_observer_matches_torch(dtype: str, symmetric: bool) -> None:
  scheme = torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine
  want = tq.MinMaxObserver(dtype=getattr(torch, dtype), qscheme=scheme)
  got = quant.MinMaxObserver(dtype, symmetric)
  for b in _batches(): want(torch.tensor(b)), got(Tensor(b))
  (ws, wz), (gs, gz) = want.calculate_qparams(), got.calculate_qparams()
  np.testing.assert_array_equal(gs.numpy(), ws.numpy().reshape(()))
  np.testing.assert_array_equal(gz.numpy(), wz.numpy().reshape(()))

def test_moving_average_and_per_channel_observers_match_torch() -> None:
  want = tq.MovingAverageMinMaxObserver(averaging_constant=0.1)
  got = quant.MovingAverageMinMaxObserver(averaging_constant=0.1)
  want_c = tq.PerChannelMinMaxObserver(ch_axis=1, dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
  got_c = quant.PerChannelMinMaxObserver(8, ch_axis=1)
  for b in _batches():
    want(torch.tensor(b)), got(Tensor(b)), want_c(torch.tensor(b)), got_c(Tensor(b))
  for w, g in ((want, got), (want_c, got_c)):
    (ws, wz), (gs, gz) = w.calculate_qparams(), g.calculate_qparams()
    np.testing.assert_allclose(gs.numpy().reshape(-1), ws.numpy().reshape(-1), rtol=1e-6)
    np.testing.assert_array_equal(gz.numpy().reshape(-1), wz.numpy().reshape(-1))

def test_weights_quantize_per_channel_as_torch() -> None:
  w = _np(12, 20)
  q, scale = quant._quantize_weight(Tensor(w))
  obs = tq.PerChannelMinMaxObserver(dtype=torch.qint8, qscheme=torch.per_channel_symmetric)
  obs(torch.tensor(w))
  ws, wz = obs.calculate_qparams()
  want = torch.quantize_per_channel(torch.tensor(w), ws, wz, 0, torch.qint8).int_repr().numpy()
  assert q.dtype == dtypes.int8
  np.testing.assert_array_equal(q.numpy(), want)
  np.testing.assert_array_equal(scale.numpy(), ws.numpy())

# ---- int8 layers against a numpy reference of the same arithmetic ----

def _dynamic_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """int8 values and scales of each row (the last axis reduced), symmetric as torch's qint8 observers."""
  amax = np.maximum(np.abs(x).max(-1, keepdims=True), 0)
  scale = np.maximum(amax / np.float32(127.5), np.finfo(np.float32).eps).astype(np.float32)
  return np.clip(np.round(x * (np.float32(1) / scale)), -128, 127), scale

@pytest.mark.parametrize("shape, k, n", [((5, 64), 64, 48), ((2, 3, 30), 30, 7), ((1, 1), 1, 3), ((33, 40), 40, 96)])
def test_dynamic_linear_against_reference(shape: tuple[int, ...], k: int, n: int) -> None:
  layer = nn.Linear(k, n)
  w, b = layer.weight.numpy(), layer.bias.numpy()  # type: ignore[union-attr]
  x = _np(*shape)
  want_float = x @ w.T + b
  q = quant.quantize_dynamic(layer)
  assert isinstance(q, quant.QuantizedLinear) and q.weight.dtype == dtypes.int8
  qw, ws = q.weight.numpy().astype(np.int64), q.scale.numpy()
  qx, xs = _dynamic_rows(x.reshape(-1, k))
  want = ((qx.astype(np.int64) @ qw.T).astype(np.float32) * (xs * ws) + b).reshape(*shape[:-1], n)
  got = q(Tensor(x)).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got, want_float, atol=0.05 * np.abs(want_float).max())

def _conv_reference(x: np.ndarray, qw: np.ndarray, ws: np.ndarray, b: np.ndarray, xs: np.ndarray, zp: np.ndarray,
                    qx: np.ndarray, padding: int, stride: int) -> np.ndarray:
  """The int32 sums of (qx - zp) * qw over each window (torch's conv in float64 is exact for these), then scaled."""
  acc = torch.nn.functional.conv2d(torch.tensor(qx - zp, dtype=torch.float64), torch.tensor(qw, dtype=torch.float64),
                                   padding=padding, stride=stride).numpy()
  return acc.astype(np.float32) * (xs * ws.reshape(1, -1, 1, 1)) + b.reshape(1, -1, 1, 1)

@pytest.mark.parametrize("cin, padding, stride", [(3, 1, 1), (8, 0, 2), (5, 2, 1)])
def test_dynamic_conv_against_reference(cin: int, padding: int, stride: int) -> None:
  layer = nn.Conv2d(cin, 6, 3, stride=stride, padding=padding)
  x = _np(2, cin, 9, 8)
  want_float = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(layer.weight.numpy()),
                                          torch.tensor(layer.bias.numpy()), stride, padding).numpy()  # type: ignore[union-attr]
  q = quant.quantize_dynamic(layer)
  assert isinstance(q, quant.QuantizedConv2d)
  amax = np.abs(x).max((1, 2, 3), keepdims=True)
  xs = np.maximum(amax / np.float32(127.5), np.finfo(np.float32).eps).astype(np.float32)
  qx = np.clip(np.round(x * (np.float32(1) / xs)), -128, 127)
  want = _conv_reference(x, q.weight.numpy(), q.scale.numpy(), layer.bias.numpy(), xs, np.zeros(1), qx, padding,  # type: ignore[union-attr]
                         stride)
  got = q(Tensor(x)).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got, want_float, atol=0.05 * np.abs(want_float).max())

def test_input_bytes_round_half_to_even_and_clamp_as_quantize() -> None:
  # the bytes a dynamic layer packs (a float add rounds them) are the int8 values of quantize, + 128: ties, clamps
  scale = Tensor([[0.5], [0.25], [0.03125]])
  x = _np(3, 61, scale=4)
  x[:, :12] = [0.25, 0.75, -0.25, -0.75, 1.25, -1.25, 63.75, 64.0, -64.25, 1e9, -1e9, -0.0]
  want = (quant.quantize(Tensor(x), scale, 0, *quant.QINT8) - quant.QINT8[0]).cast(dtypes.uint8)
  got = quant._offset_bytes(Tensor(x), scale)
  np.testing.assert_array_equal(got.numpy() & 0xFF, want.numpy())
  # word w of a row of n bytes (61 padded to 64) holds bytes w, w + n/4, w + 2n/4, w + 3n/4, the first lowest
  quarters = np.pad(want.numpy(), ((0, 0), (0, 3))).astype(np.uint32).reshape(3, 4, 16)
  words = sum(quarters[:, i] << (8 * i) for i in range(4)).astype(np.uint32).view(np.int32)
  np.testing.assert_array_equal(quant.pack_words(got, 1).numpy(), words)
  np.testing.assert_array_equal(quant.pack_words(want, 1).numpy(), words)

def _kernels(out: Tensor) -> list[ScheduleItem]:
  items, _ = create_schedule([out.lazydata])
  return [it for it in items if it.ast.op is not Ops.COPY]

def test_dynamic_linear_stack_kernels() -> None:
  # each layer: its input rows' range, their int8 words (quantized and packed in one elementwise kernel),
  # and the int8 matmul, whose epilogue dequantizes (and applies the next layer's relu). No kernel of its own for the
  # scales, none that stores the int32 sums for the next layer to dequantize twice
  layers = [quant.quantize_dynamic(nn.Linear(512, 512)) for _ in range(3)]
  x = Tensor(_np(256, 512))
  y = x
  for layer in layers[:-1]: y = layer(y).relu()
  y = layers[-1](y)
  kernels = _kernels(y)
  assert len(kernels) == 3 * len(layers), [it.bufs[0].dtype for it in kernels]
  # the weights' words in panels as wide as the register tile (on a CPU target)
  target = Device[Device.DEFAULT].renderer.target
  width = 512 if target is None else TILE_VECTORS * target.vector_floats
  assert layers[0]._packed is not None and layers[0]._packed.words.shape == (512 // width, 128, width)
  words = kernels[1]
  assert words.bufs[0].dtype == dtypes.int32 and not any(u.op is Ops.REDUCE_AXIS for u in words.ast.toposort)
  assert all(it.bufs[0].dtype == dtypes.float32 for it in kernels[2::3])  # each matmul stores the dequantized floats
  # the values: as the layers one at a time, each input realized first
  want = x
  for layer in layers[:-1]: want = layer(want).relu().realize()
  np.testing.assert_array_equal(y.numpy(), layers[-1](want).numpy())

def test_embedding_rows_int8() -> None:
  layer = nn.Embedding(20, 6)
  w = layer.weight.numpy()
  q = quant.quantize_dynamic(layer)
  assert isinstance(q, quant.QuantizedEmbedding) and q.weight.dtype == dtypes.int8
  idx = np.array([[3, 0, 19], [7, 7, 1]])
  want = q.weight.numpy()[idx].astype(np.float32) * q.scale.numpy()[idx][..., None]
  np.testing.assert_array_equal(q(Tensor(idx)).numpy(), want)
  np.testing.assert_allclose(want, w[idx], atol=np.abs(w).max() / 127)

def _quantization_mse(x: np.ndarray, scale: float, zero_point: int, qmin: int, qmax: int) -> float:
  q = np.clip(np.round(x / scale) + zero_point, qmin, qmax)
  return float((((q - zero_point) * scale - x) ** 2).mean())

@pytest.mark.parametrize("dtype, symmetric", [("quint8", False), ("qint8", True)])
def test_histogram_observer_quantizes_with_less_error_than_torchs_and_minmax(dtype: str, symmetric: bool) -> None:
  # a bulk of normal values and a few outliers, seen in 4 batches of growing range (the histogram re-binned each time)
  x = np.random.default_rng(0).standard_normal(40000).astype(np.float32)
  x[::2000] *= 40
  batches = [np.sort(x)[i::4] * f for i, f in enumerate((0.25, 0.5, 1.0, 1.0))]
  qmin, qmax = quant.QUINT8 if dtype == "quint8" else quant.QINT8
  scheme = torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine
  observers = [quant.HistogramObserver(dtype=dtype, symmetric=symmetric), quant.MinMaxObserver(dtype, symmetric),
               tq.HistogramObserver(dtype=getattr(torch, dtype), qscheme=scheme)]
  errors = []
  for o in observers:
    for b in batches: o(torch.tensor(b) if isinstance(o, tq.HistogramObserver) else Tensor(b))
    scale, zero_point = o.calculate_qparams()
    errors.append(_quantization_mse(np.concatenate(batches), scale.item(), int(zero_point.item()), qmin, qmax))
  ours, minmax, torchs = errors
  assert ours <= torchs * 1.001 and ours < 0.95 * minmax, errors
  assert observers[0].histogram.sum().item() == sum(b.size for b in batches)

def test_histogram_observer_keeps_the_whole_range_of_uniform_values() -> None:
  o = quant.HistogramObserver()
  o(Tensor(np.linspace(-1, 3, 10001, dtype=np.float32)))
  scale, zero_point = o.calculate_qparams()
  assert abs(scale.item() - 4 / 255) < 0.02 * 4 / 255 and zero_point.item() in (63, 64)

def test_histogram_observer_of_one_value_and_bad_arguments() -> None:
  o = quant.HistogramObserver(bins=64)
  o(Tensor([2.0, 2.0])), o(Tensor([2.0]))
  scale, zero_point = o.calculate_qparams()
  assert np.isclose(scale.item(), 2 / 255) and zero_point.item() == 0 and o.histogram.sum().item() == 3
  with pytest.raises(ValueError, match="bins=1 must be an int >= 2"): quant.HistogramObserver(bins=1)
  with pytest.raises(ValueError, match="dtype 'int4'"): quant.HistogramObserver(dtype="int4")
  with pytest.raises(ValueError, match="must be finite"): quant.HistogramObserver()(Tensor([1.0, float("inf")]))

# ---- whole models ----

class Net:
  def __init__(self) -> None:
    self.conv = nn.Conv2d(2, 4, 3, padding=1)
    self.layers = [nn.Linear(4 * 36, 32), nn.Linear(32, 10)]
    self.emb = {"table": nn.Embedding(10, 5)}

  def __call__(self, x: Tensor) -> Tensor:
    h = self.conv(x).relu().flatten(1)
    return self.layers[1](self.layers[0](h).relu()) + self.emb["table"](Tensor([1, 2])).sum()

def test_prepare_convert_uses_the_observed_ranges() -> None:
  net = Net()
  batches = [_np(8, 2, 6, 6, scale=s) for s in (1.0, 2.0)]
  want = [net(Tensor(b)).numpy() for b in batches]
  quant.prepare(net)
  assert isinstance(net.conv, quant.Observed) and isinstance(net.layers[1], quant.Observed)
  for b in batches: net(Tensor(b))
  observer = tq.MinMaxObserver()
  for b in batches: observer(torch.tensor(b))
  quant.convert(net)
  assert isinstance(net.conv, quant.QuantizedConv2d) and not net.conv.dynamic
  assert isinstance(net.emb["table"], quant.QuantizedEmbedding)
  ws, wz = observer.calculate_qparams()
  assert net.conv.input_scale.item() == ws.item() and net.conv.input_zero_point.item() == wz.item()
  for b, w in zip(batches, want): np.testing.assert_allclose(net(Tensor(b)).numpy(), w, atol=0.1 * np.abs(w).max())

def test_prepare_with_a_histogram_observer_converts_with_its_range() -> None:
  net = Net()
  batches = [_np(8, 2, 6, 6, scale=s) for s in (1.0, 2.0)]
  want = [net(Tensor(b)).numpy() for b in batches]
  quant.prepare(net, quant.HistogramObserver)
  for b in batches: net(Tensor(b))
  chosen = net.conv.observer.calculate_qparams()[0].item()
  quant.convert(net)
  assert net.conv.input_scale.item() == chosen
  for b, w in zip(batches, want): np.testing.assert_allclose(net(Tensor(b)).numpy(), w, atol=0.1 * np.abs(w).max())

def test_qat_trains_and_converts_to_what_it_simulated() -> None:
  net = Net()
  quant.prepare_qat(net)
  assert isinstance(net.layers[0], quant.QATLayer) and isinstance(net.emb["table"], quant.QATEmbedding)
  opt = nn.optim.SGD(nn.state.get_parameters(net), lr=0.01)  # the observers' ranges: buffers, realized by the step
  x, y = Tensor(_np(8, 2, 6, 6)), Tensor(rng.integers(0, 10, 8))
  with Tensor.train():
    losses = []
    for _ in range(4):
      opt.zero_grad()
      loss = net(x).cross_entropy(y)
      loss.backward()
      opt.step()
      losses.append(loss.item())
  assert losses[-1] < losses[0]
  assert net.layers[0].layer.weight.grad is not None  # type: ignore[union-attr]
  simulated = net(x).numpy()
  quant.convert(net)
  assert isinstance(net.layers[0], quant.QuantizedLinear)
  # the converted layers compute in int8 what fake quantization simulated in float: equal up to float rounding
  np.testing.assert_allclose(net(x).numpy(), simulated, rtol=1e-4, atol=1e-4)

def test_quantized_model_saves_and_loads(tmp_path: pathlib.Path) -> None:
  net = quant.quantize_dynamic(Net())
  state = get_state_dict(net)
  assert state["layers.0.weight"].dtype == dtypes.int8 and state["conv.weight"].dtype == dtypes.int8
  assert "layers.0._packed" not in state and state["emb.table.scale"].dtype == dtypes.float32
  safe_save(state, tmp_path / "q.safetensors")
  x = Tensor(_np(3, 2, 6, 6))
  want = net(x).numpy()
  other = quant.quantize_dynamic(Net())
  before = other(x).numpy()
  load_state_dict(other, safe_load(tmp_path / "q.safetensors"))
  assert not np.allclose(before, want)
  np.testing.assert_array_equal(other(x).numpy(), want)  # the packed weights follow the loaded ones
