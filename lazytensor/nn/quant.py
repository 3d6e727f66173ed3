"""int8 quantization of Linear, Conv2d and Embedding layers, with torch.ao.quantization's semantics where it has them:
fake quantization (round half to even, clamp, a straight-through gradient inside the range), observers and their
qparams, per-channel symmetric int8 weights.

Three ways to a quantized model, each changing the model in place (its layers replaced wherever they sit in attributes,
lists and dicts) and returning it:

* `quantize_dynamic(model)`: weights int8 per output channel; each row of a Linear's input (each image of a Conv2d's)
  quantized to int8 at run time from its own range; Embedding rows int8, each with its scale.
* static post-training quantization: `prepare(model)` puts an observer before each Linear and Conv2d; run
  representative batches through the model; `convert(model)` quantizes the inputs with the scale and zero point the
  observers chose.
* quantization-aware training: `prepare_qat(model)` fake-quantizes each layer's input and weight while it trains (the
  gradient passes straight through), `convert(model)` then as above.

A quantized layer computes int8 x int8 products summed in int32 and returns float32: the input's bytes are read
unsigned (its int8 value + 128, or its quint8 value), the weight's signed, in groups of 4 of the reduce (`dot4`, one
lane of x86's vpdpbusd or CUDA's dp4a; `pack_words` groups both sides alike), and the input's zero point times the
weight's column sums is subtracted from the int32 sum. Its state (`get_state_dict`) is the int8 weight, the scales, the
bias and the input's qparams, so it saves and loads with `safe_save` / `safe_load`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lazytensor.dtype import dtypes
from lazytensor.frontend.mixin.conv import conv_padding, conv_params, windows_times_weights
from lazytensor.frontend.tensor import Tensor
from lazytensor.nn import Conv2d, Embedding, Linear
from lazytensor.nn.observers import (
  QINT8,
  QUINT8,
  HistogramObserver,
  MinMaxObserver,
  MovingAverageMinMaxObserver,
  Observer,
  PerChannelMinMaxObserver,
  calculate_qparams,
)
from lazytensor.opt.heuristic import TILE_VECTORS
from lazytensor.runtime.device import Device, DeviceLike
from lazytensor.uop.ops import Ops, UOp

__all__ = ["dot4", "pack_words", "quantize", "fake_quantize", "calculate_qparams", "MinMaxObserver",
           "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver", "HistogramObserver", "FakeQuantize",
           "QuantizedLinear", "QuantizedConv2d", "QuantizedEmbedding", "quantize_dynamic", "prepare", "prepare_qat",
           "convert"]


# ---- the int8 kernels' operands ----

def dot4(a: Tensor, b: Tensor) -> Tensor:
  """Int8 dot products in groups of 4: a and b hold int32 words of 4 bytes each (broadcast together); each result is
  the sum of the 4 products of a's bytes, read unsigned, and b's, read signed (x86's vpdpbusd, CUDA's dp4a).

  >>> dot4(Tensor([0x01FF], dtype='int32'), Tensor([0x02FF], dtype='int32')).item()  # 255 * -1 + 1 * 2
  -253
  """
  if a.dtype != dtypes.int32 or b.dtype != dtypes.int32:
    raise TypeError(f"dot4: operands must be int32 words of 4 bytes, got {a.dtype} and {b.dtype}")
  x, y = a._broadcasted(b)
  return x._apply_uop(lambda p, q: UOp(Ops.DOT4, dtypes.int32, (p, q)), y)

def pack_words(u: Tensor, axis: int) -> Tensor:
  """Bytes along `axis` as int32 words of 4 of them: `u` holds uint8 values, or int32 ones whose lowest byte is the
  value (the other bits are ignored). The axis, padded with zero bytes to a length n that 4 divides, becomes n/4 long:
  word w holds bytes w, w + n/4, w + 2n/4 and w + 3n/4, from the lowest byte up (dot4 pairs them with another's
  packed alike; a sum over the reduce is the same in any grouping). Each word ORs its 4 bytes, shifted: elementwise,
  so the words fuse into the kernel that makes the bytes, and each of the 4 reads is contiguous along the words. (As a
  sum of bytes times their weights it was a reduce, which the heuristics took for a matmul; neighbouring bytes in a
  word made every read a gather of every 4th value: 256x1024 floats quantized into words on one AVX-512 thread,
  72-82 -> 17-27 us.)

  >>> hex(pack_words(Tensor([1, 2, 3, 4, 5, 6, 7, 8], dtype='uint8'), 0)[0].item())
  '0x7050301'
  """
  if u.dtype not in (dtypes.uint8, dtypes.int32):
    raise TypeError(f"pack_words: expected uint8 bytes or int32 values holding them, got {u.dtype}")
  axis = axis % u.ndim
  n = u.shape[axis]
  if n % 4: u = u.pad([(0, 0)] * axis + [(0, -n % 4)] + [(0, 0)] * (u.ndim - axis - 1))
  grouped = u.reshape(*u.shape[:axis], 4, u.shape[axis] // 4, *u.shape[axis + 1:])
  grouped = grouped.cast(dtypes.uint32) if u.dtype == dtypes.uint8 else grouped.bitcast(dtypes.uint32) & 0xFF
  b = [grouped.shrink(tuple((i, i + 1) if d == axis else None for d in range(grouped.ndim))).squeeze(axis)
       for i in range(4)]
  return (b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24).bitcast(dtypes.int32)

# ---- quantization ----

def quantize(x: Tensor, scale: Tensor | float, zero_point: Tensor | float, quant_min: int, quant_max: int) -> Tensor:
  """The quantized values of x (float32, integral): zero_point + x / scale rounded half to even, clamped to
  [quant_min, quant_max] (torch's quantize_per_tensor: x times the reciprocal of the scale)."""
  return ((x * (1 / scale if isinstance(scale, float) else scale.reciprocal())).round() + zero_point) \
    .clamp(quant_min, quant_max)

# 1.5 * 2**23: a float32 below 2**22 in magnitude added to it is rounded to an integer (half to even, as every float
# add rounds) that the sum's low mantissa bits hold
ROUNDING_BIAS = 12582912.0

def _offset_bytes(x: Tensor, scale: Tensor) -> Tensor:
  """quantize(x, scale, 0, -128, 127) + 128 (x's int8 values read unsigned) in the lowest byte of int32 values (for
  pack_words). One float add both rounds and offsets, and the sum's bits hold the byte: no conversion of floats to
  integers, whose checks for values out of range (codegen/alu.py) cost more than the rest of the quantizing together."""
  lo, hi = QINT8
  return ((x * scale.reciprocal()).clamp(lo, hi) + (ROUNDING_BIAS - lo)).bitcast(dtypes.int32)

def _per_axis(t: Tensor | float, x: Tensor, axis: int | None) -> Tensor | float:
  if axis is None or isinstance(t, float): return t
  return t.reshape(*[-1 if d == axis % x.ndim else 1 for d in range(x.ndim)])

def fake_quantize(x: Tensor, scale: Tensor | float, zero_point: Tensor | float, quant_min: int, quant_max: int,
                  axis: int | None = None) -> Tensor:
  """x quantized and dequantized, as torch's fake_quantize_per_tensor_affine (axis None) and
  fake_quantize_per_channel_affine (scale and zero_point one per index of `axis`): (clamp(round(x / scale) +
  zero_point, quant_min, quant_max) - zero_point) * scale. Its gradient is the straight-through estimator: the
  incoming gradient where x rounds into [quant_min, quant_max], 0 where it was clamped.

  >>> fake_quantize(Tensor([0.26, 1.0, -5.0]), 0.5, 0, -4, 3).tolist()
  [0.5, 1.0, -2.0]
  """
  if quant_min >= quant_max:
    raise ValueError(f"fake_quantize: quant_min {quant_min} must be below quant_max {quant_max}")
  s = _per_axis(scale, x, axis)
  z = _per_axis(zero_point if isinstance(zero_point, (int, float)) else zero_point.cast(dtypes.float32), x, axis)
  unclamped = (x.detach() * (1 / s if isinstance(s, float) else s.reciprocal())).round() + z
  inside = ((unclamped >= quant_min) & (unclamped <= quant_max)).cast(x.dtype)
  value = (unclamped.clamp(quant_min, quant_max) - z) * s
  return value._apply_uop(lambda v, u, d: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, u, d)), x, inside)

class FakeQuantize:
  """An observer, then fake_quantize with the qparams it has chosen (torch's FakeQuantize)."""
  def __init__(self, observer: MinMaxObserver) -> None: self.observer = observer

  def __call__(self, x: Tensor) -> Tensor:
    o = self.observer
    o(x)
    return fake_quantize(x, *o.calculate_qparams(), o.quant_min, o.quant_max, o.ch_axis)

# ---- quantized layers ----

class _Packed:
  """A weight's bytes as the int8 kernels read them (int32 words of 4 along the reduce) and its column sums, with the
  weight node they were made from: derived from a layer's state, never part of it (get_state_dict does not walk into an
  object without __dict__), and made again when the weight changes (load_state_dict assigns it a new node)."""
  __slots__ = ("source", "words", "colsum")

  def __init__(self, source: UOp, words: Tensor, colsum: Tensor) -> None:
    self.source, self.words, self.colsum = source, words, colsum

def _quantize_weight(w: Tensor, observer: MinMaxObserver | None = None) -> tuple[Tensor, Tensor]:
  """int8 weights, symmetric per output channel (axis 0), and their scales: torch's PerChannelMinMaxObserver (qint8,
  symmetric) and quantize_per_channel; with `observer`, the ranges it has recorded (quantization-aware training)."""
  if observer is None:
    observer = PerChannelMinMaxObserver(w.shape[0])
    observer(w)
  scale, zero_point = observer.calculate_qparams()
  channel = (-1,) + (1,) * (w.ndim - 1)
  q = quantize(w.detach(), scale.reshape(channel), zero_point.reshape(channel).cast(dtypes.float32), *QINT8)
  return q.cast(dtypes.int8).contiguous().realize(), scale.contiguous().realize()

def _dot4_sum(a: Tensor, b: Tensor, axes: list[int]) -> Tensor: return dot4(a, b).sum(axes, dtype=dtypes.int32)

class _QuantizedLayer:
  """An int8 layer's state: the int8 weight (output channels first), its scales, the float bias, and its input's
  qparams (quint8, per tensor), or none: each row (image) of the input then quantized to int8 from its own range."""
  def __init__(self, weight: Tensor, scale: Tensor, bias: Tensor | None, input_qparams: tuple[Tensor, Tensor] | None):
    self.weight, self.scale, self.bias = weight, scale, bias
    self.dynamic = input_qparams is None
    if input_qparams is not None: self.input_scale, self.input_zero_point = input_qparams
    self._packed: _Packed | None = None

  def _words(self, packed: Callable[[Tensor], Tensor]) -> _Packed:
    """The weight's words (`packed` of its bytes) and column sums, made again when the weight is another node."""
    if self._packed is None or self._packed.source is not self.weight.lazydata:
      axes = tuple(range(1, self.weight.ndim))
      colsum = self.weight.cast(dtypes.int32).sum(axes, dtype=dtypes.int32).contiguous()
      self._packed = _Packed(self.weight.lazydata, packed(self.weight.bitcast(dtypes.uint8)).contiguous(), colsum)
      self._packed.words.realize(self._packed.colsum)
    return self._packed

  def _float_input(self, x: Tensor) -> Tensor:
    """x as float32, in a buffer of its own when the layer is dynamic: it is read twice, for its range and for its
    bytes, and computed there (the previous layer's int32 sums dequantized) each kernel would compute it again,
    gathering its per-column scale, bias and sums for every byte. The previous matmul stores floats instead of its
    int32 sums, in no more kernels (Linear 1024, batch 256, one AVX-512 thread: the rows' range from the sums took
    72 us, from stored floats 18)."""
    x = x.cast(dtypes.float32)
    return x.contiguous() if self.dynamic else x

  def _input_bytes(self, x: Tensor, axes: tuple[int, ...]) -> tuple[Tensor, Tensor | int, Tensor]:
    """x as bytes for pack_words (its quint8 values, or its int8 values + 128), their zero point and their scale."""
    if self.dynamic:
      # symmetric: the range is +-the largest magnitude, one reduce where min and max would be two
      amax = x.abs().max(axes, keepdim=True)
      scale, _ = calculate_qparams(-amax, amax, *QINT8, symmetric=True)
      return _offset_bytes(x, scale), -QINT8[0], scale
    zero_point = self.input_zero_point.cast(dtypes.float32)
    return quantize(x, self.input_scale, zero_point, *QUINT8).cast(dtypes.uint8), self.input_zero_point, \
      self.input_scale

  def _dequantize(self, acc: Tensor, zero_point: Tensor | int, scale: Tensor, colsum: Tensor,
                  channel: tuple[int, ...]) -> Tensor:
    """The float output of the int32 sums: the input's zero point times each column's sum taken away, then scaled."""
    out = (acc - zero_point * colsum.reshape(channel)).cast(dtypes.float32) * (scale * self.scale.reshape(channel))
    return out if self.bias is None else out + self.bias.reshape(channel)

def _panel_width(n: int, device: DeviceLike) -> int:
  """Output columns per panel of a Linear's weight words: a CPU register tile's width where it divides n, else all n.
  In panels (n/width, k/4, width) the tile's vectors of the weight at successive steps of the reduce are neighbours,
  where along whole rows each step reads a new row, often a new page (int8 256x1024 by 1024x1024 on one AVX-512
  thread, CPU time on a loaded host: 0.84-0.90 -> 0.76-0.84 ms). Made once with the words, unlike the copy the
  scheduler makes of a float matmul's operand at every call (packing.pack_choice)."""
  target = Device[Device.first(device)].renderer.target
  width = n if target is None else TILE_VECTORS * target.vector_floats
  return width if n % width == 0 else n

class QuantizedLinear(_QuantizedLayer):
  """Linear with int8 weights (out_features, in_features) and int8 inputs: int32 sums, float32 output."""
  def __call__(self, x: Tensor) -> Tensor:
    n, k = self.weight.shape
    if x.shape[-1] != k: raise ValueError(f"QuantizedLinear: input of shape {x.shape} does not end in {k} features")
    rows = self._float_input(x.reshape(-1, k))
    u, zero_point, scale = self._input_bytes(rows, (1,))
    p = _panel_width(n, self.weight.device)
    # (n/p, k/4, p): the tile's vectors along the outputs, in panels
    w = self._words(lambda b: pack_words(b, 1).T.reshape(-1, n // p, p).permute(1, 0, 2))
    words = pack_words(u, 1)
    acc = _dot4_sum(words.reshape(rows.shape[0], 1, -1, 1), w.words.reshape(1, n // p, -1, p), [2])
    return self._dequantize(acc.reshape(-1, n), zero_point, scale, w.colsum, (1, n)).reshape(*x.shape[:-1], n)

class QuantizedConv2d(_QuantizedLayer):
  """Conv2d (groups=1) with int8 weights and int8 inputs (dynamic: a range per image): int32 sums, float32 output."""
  def __init__(self, weight: Tensor, scale: Tensor, bias: Tensor | None, input_qparams: tuple[Tensor, Tensor] | None,
               stride: Any = 1, padding: Any = 0, dilation: Any = 1) -> None:
    super().__init__(weight, scale, bias, input_qparams)
    self.stride, self.padding, self.dilation = stride, padding, dilation

  def __call__(self, x: Tensor) -> Tensor:
    cout, cin, *kernel = self.weight.shape
    if x.ndim != 2 + len(kernel) or x.shape[1] != cin:
      raise ValueError(f"QuantizedConv2d: input of shape {x.shape} does not match weight {self.weight.shape}")
    nk = len(kernel)
    strides, dilations = conv_params(self.stride, nk, "stride"), conv_params(self.dilation, nk, "dilation")
    # padded before quantizing: a 0 becomes the zero point, which the column sums account for at every tap
    xp = self._float_input(x).pad([(0, 0), (0, 0), *conv_padding(self.padding, kernel, dilations, strides)])
    u, zero_point, scale = self._input_bytes(xp, tuple(range(1, xp.ndim)))
    w = self._words(lambda b: pack_words(b, 1))
    acc = windows_times_weights(pack_words(u, 1), w.words, 1, strides, dilations, _dot4_sum)
    return self._dequantize(acc, zero_point, scale.reshape(-1, *[1] * (nk + 1)) if self.dynamic else scale, w.colsum,
                            (1, cout) + (1,) * nk)

class QuantizedEmbedding(Embedding):
  """Embedding with int8 rows, each with its scale (symmetric): a lookup reads the int8 rows it names."""
  def __init__(self, weight: Tensor, scale: Tensor) -> None:
    self.num_embeddings, self.weight, self.scale = weight.shape[0], weight, scale

  def _table(self) -> Tensor: return self.weight.cast(dtypes.float32) * self.scale.reshape(-1, 1)

# ---- observed and quantization-aware layers ----

class Observed:
  """A Linear or Conv2d whose input an observer records (prepare)."""
  def __init__(self, layer: Linear | Conv2d, observer: Observer) -> None:
    self.layer, self.observer = layer, observer

  def __call__(self, x: Tensor) -> Tensor: return self.layer(self.observer(x))

def _weight_fake_quant(channels: int) -> FakeQuantize:
  # torch's default QAT weights: a moving average of each output channel's range, symmetric qint8
  return FakeQuantize(MinMaxObserver("qint8", True, 0, averaging_constant=0.01, channels=channels))

class QATLayer:
  """A Linear or Conv2d that trains with its input and weight fake-quantized (prepare_qat): the input per tensor
  (quint8, moving-average range), the weight per output channel (symmetric qint8)."""
  def __init__(self, layer: Linear | Conv2d) -> None:
    self.layer = layer
    self.input_fake_quant = FakeQuantize(MinMaxObserver("quint8", averaging_constant=0.01))
    self.weight_fake_quant = _weight_fake_quant(layer.weight.shape[0])

  def __call__(self, x: Tensor) -> Tensor:
    x, w, layer = self.input_fake_quant(x), self.weight_fake_quant(self.layer.weight), self.layer
    if isinstance(layer, Linear): return x.linear(w.T, layer.bias)
    return x.conv2d(w, layer.bias, layer.groups, layer.stride, layer.dilation, layer.padding)

class QATEmbedding(Embedding):
  """An Embedding that trains with its rows fake-quantized (symmetric qint8, a range per row)."""
  def __init__(self, layer: Embedding) -> None:
    self.num_embeddings, self.weight = layer.num_embeddings, layer.weight
    self.weight_fake_quant = _weight_fake_quant(layer.weight.shape[0])

  def _table(self) -> Tensor: return self.weight_fake_quant(self.weight)

# ---- whole models ----

def _swap(obj: Any, fn: Callable[[Any], Any], seen: set[int]) -> Any:
  """obj, or what fn makes of it (None: nothing), with the same done inside it: attributes, list items and dict values
  replaced in place."""
  if (new := fn(obj)) is not None: return new
  if isinstance(obj, Tensor) or id(obj) in seen: return obj
  seen.add(id(obj))
  if isinstance(obj, list): obj[:] = [_swap(v, fn, seen) for v in obj]
  elif isinstance(obj, dict):
    for k, v in obj.items(): obj[k] = _swap(v, fn, seen)
  elif isinstance(obj, tuple): return tuple(_swap(v, fn, seen) for v in obj)
  elif hasattr(obj, "__dict__") and not isinstance(obj, type):
    for k, v in list(vars(obj).items()):
      if (nv := _swap(v, fn, seen)) is not v: setattr(obj, k, nv)
  return obj

def _linear_or_conv(layer: Linear | Conv2d, weight: tuple[Tensor, Tensor],
                    input_qparams: tuple[Tensor, Tensor] | None) -> QuantizedLinear | QuantizedConv2d:
  bias = None if layer.bias is None else layer.bias.detach()
  if isinstance(layer, Linear): return QuantizedLinear(*weight, bias, input_qparams)
  if layer.groups != 1: raise ValueError(f"quantized Conv2d: groups={layer.groups} is not supported, only 1")
  return QuantizedConv2d(*weight, bias, input_qparams, layer.stride, layer.padding, layer.dilation)

def _qparams(observer: Observer) -> tuple[Tensor, Tensor]:
  scale, zero_point = observer.calculate_qparams()
  return scale.contiguous().realize(), zero_point.contiguous().realize()

def _dynamic(obj: Any, layers: tuple[type, ...]) -> Any:
  if not isinstance(obj, layers): return None
  if isinstance(obj, (Linear, Conv2d)): return _linear_or_conv(obj, _quantize_weight(obj.weight), None)
  if isinstance(obj, Embedding) and not isinstance(obj, QuantizedEmbedding):
    return QuantizedEmbedding(*_quantize_weight(obj.weight))
  return None

def quantize_dynamic(model: Any, layers: tuple[type, ...] = (Linear, Conv2d, Embedding)) -> Any:
  """The model with every layer of the types in `layers` (Linear, Conv2d, Embedding) quantized to int8 (in place;
  returns it): weights per output channel, inputs per row (per image) at run time. (A model that reads an Embedding's
  weight itself, not through the layer, keeps its Embeddings float: layers=(Linear,).)

  >>> model = quantize_dynamic(Linear(8, 2))
  >>> type(model).__name__, model(Tensor.ones(3, 8)).shape
  ('QuantizedLinear', (3, 2))
  """
  return _swap(model, lambda m: _dynamic(m, layers), set())

def prepare(model: Any, observer: Callable[[], Observer] = MinMaxObserver) -> Any:
  """The model with an observer (quint8, per tensor: MinMaxObserver, or another such as HistogramObserver) recording
  the input of every Linear and Conv2d (in place; returns it). Run representative batches through it, then `convert`."""
  return _swap(model, lambda m: Observed(m, observer()) if isinstance(m, (Linear, Conv2d)) else None, set())

def prepare_qat(model: Any) -> Any:
  """The model with every Linear and Conv2d training on fake-quantized inputs and weights, and every Embedding on
  fake-quantized rows (in place; returns it). Train it, then `convert`."""
  def fn(m: Any) -> Any:
    if isinstance(m, (Linear, Conv2d)): return QATLayer(m)
    return QATEmbedding(m) if type(m) is Embedding else None
  return _swap(model, fn, set())

def _convert(obj: Any) -> Any:
  if isinstance(obj, Observed): return _linear_or_conv(obj.layer, _quantize_weight(obj.layer.weight),
                                                       _qparams(obj.observer))
  if isinstance(obj, QATLayer):
    weight = _quantize_weight(obj.layer.weight, obj.weight_fake_quant.observer)
    return _linear_or_conv(obj.layer, weight, _qparams(obj.input_fake_quant.observer))
  if isinstance(obj, QATEmbedding):
    return QuantizedEmbedding(*_quantize_weight(obj.weight, obj.weight_fake_quant.observer))
  if type(obj) is Embedding: return QuantizedEmbedding(*_quantize_weight(obj.weight))
  return None

def convert(model: Any) -> Any:
  """The prepared (or QAT-trained) model with its layers quantized to int8 (in place; returns it): inputs with the
  qparams their observers chose, weights per output channel, Embeddings' rows each with its scale."""
  return _swap(model, _convert, set())
