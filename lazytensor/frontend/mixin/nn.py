"""Neural-network functions: convolutions, pooling, resampling, normalization, dropout, attention and losses.

Each is composed from other tensor ops, so it fuses and has gradients: a convolution or a pool is views of its input
plus one reduce (RearrangeMixin._pool_windows), never an im2col buffer.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from lazytensor.dtype import dtypes, promote_types
from lazytensor.frontend.autocast import low_precision, widened
from lazytensor.frontend.mixin.conv import Padding, conv, conv_padding, conv_params, conv_transpose, pool_windows
from lazytensor.frontend.mixin.random import RandomMixin
from lazytensor.helpers import ArgumentError, flatten, make_tuple, prod
from lazytensor.schedule.index_check import IndexSite

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="NNMixin")

REDUCTIONS = ("none", "mean", "sum")
INTERPOLATION_MODES = {"nearest": None, "nearest-exact": None, "linear": None, "bilinear": 2, "trilinear": 3}

def _check_reduction(reduction: str, name: str) -> None:
  if reduction not in REDUCTIONS: raise ValueError(f"{name}: reduction {reduction!r} must be one of {REDUCTIONS}")

def _reduce_loss(loss: TensorT, reduction: str) -> TensorT:
  return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()

def _clamped_log(x: TensorT) -> TensorT:
  # log clamped at -100, as torch's binary_cross_entropy; the log of 0 is never taken, so the gradient there is 0
  # (the slope of the clamp), not NaN
  positive = x > 0
  return positive.where(positive.where(x, 1).log().maximum(-100), -100)

def _class_loss(logp: TensorT, target: TensorT, axis: int, weight: TensorT | None, ignore_index: int | None,
                label_smoothing: float, reduction: str, name: str, no_class: int | None) -> TensorT:
  """The negative log-likelihood of log-probabilities `logp` (classes along `axis`) against class indices or class
  probabilities, with torch's weights, smoothing, ignored targets and reductions. A class index outside [0, classes)
  other than `no_class` (a target that picks no class) raises IndexError when the kernel runs."""
  _check_reduction(reduction, name)
  if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"{name}: label_smoothing {label_smoothing} is not in [0, 1]")
  n_classes = logp.shape[axis]
  class_shape = tuple(n_classes if i == axis else 1 for i in range(logp.ndim))
  if weight is not None and weight.shape != (n_classes,):
    raise ValueError(f"{name}: weight of shape {weight.shape} does not match the {n_classes} classes of {logp.shape}")
  weighted = logp * weight.reshape(class_shape) if weight is not None else logp
  def smoothed(nll: TensorT) -> TensorT:  # no smoothing term at all without smoothing: it would turn a -inf into NaN
    return nll * (1 - label_smoothing) - weighted.sum(axis) * (label_smoothing / n_classes) if label_smoothing else nll
  if target.dtype.is_float:  # class probabilities
    if target.shape != logp.shape:
      raise ArgumentError(f"{name}: a probability target of shape {target.shape} must have the input's shape "
                          f"{logp.shape}")
    return _reduce_loss(smoothed(-(weighted * target).sum(axis)), reduction)
  expected = logp.shape[:axis] + logp.shape[axis + 1:]
  if target.dtype.is_bool: raise TypeError(f"{name}: the target must hold class indices (ints) or probabilities")
  if target.shape != expected:
    raise ArgumentError(f"{name}: target of shape {target.shape} does not match input {logp.shape}: class indices need "
                        f"shape {expected}, probabilities shape {logp.shape}")
  site = IndexSite(name, f"the {n_classes} classes of dimension {axis}", 0, n_classes, target.dtype, no_class, "target")
  classes = type(logp).arange(n_classes, device=logp.device).reshape(class_shape)
  # a where, not a product: the log-probability of a class that is not the target may be -inf
  hit = target._check_index(site).unsqueeze(axis) == classes
  loss = smoothed(-hit.where(weighted, 0).sum(axis))
  valid = target.ne(ignore_index) if ignore_index is not None else None
  if valid is not None: loss = valid.where(loss, 0)
  if reduction != "mean": return _reduce_loss(loss, reduction)
  # the mean is over the targets that count, each counted with its class weight (0/0 = nan when none does)
  counts = hit.where(weight.reshape(class_shape), 0).sum(axis) if weight is not None else \
    target.ones_like(dtype=dtypes.float32)
  return loss.sum() / (valid.where(counts, 0) if valid is not None else counts).sum()

# ---- pooling ----

def _pool_setup(x: TensorT, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
               dilation: int | Sequence[int], padding: int | Sequence[int], ceil_mode: bool,
               name: str) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], list[tuple[int, int]], list[int]]:
  """kernel, strides, dilations, the (before, after) padding of each pooled dim, and the extra padding after each
  that ceil_mode adds so that a last partial window counts (as torch: only if it starts inside input or padding)."""
  # an int pools the last 2 dims; a sequence pools as many trailing dims as it has entries (1-d, 2-d or 3-d pooling)
  kernel = conv_params(kernel_size, 2 if isinstance(kernel_size, int) else len(kernel_size), "kernel_size", name)
  nk = len(kernel)
  if x.ndim < nk + 1:
    raise ValueError(f"{name}: input {x.shape} needs at least {nk + 1} dims (channels, *spatial) for a {nk}-d kernel")
  strides = conv_params(kernel if stride is None else stride, nk, "stride", name)
  dilations = conv_params(dilation, nk, "dilation", name)
  if isinstance(padding, str): raise ValueError(f"{name}: padding {padding!r} must be an int or ints")
  pads = conv_padding(padding, kernel, dilations, strides, name)
  extras = []
  for (b, a), i, k, s, d in zip(pads, x.shape[-nk:], kernel, strides, dilations):
    eff = d * (k - 1) + 1
    if 2 * max(b, a) > eff:
      raise ValueError(f"{name}: padding {padding} is more than half the window {eff} (kernel {k}, dilation {d})")
    total = i + b + a
    if total < eff: raise ArgumentError(f"{name}: window {kernel} (dilation {dilations}) is larger than input "
                                        f"{x.shape[-nk:]} with padding {padding}")
    outs = -(-(total - eff) // s) + 1 if ceil_mode else (total - eff) // s + 1
    if ceil_mode and (outs - 1) * s >= i + b: outs -= 1
    extras.append(max(0, (outs - 1) * s + eff - total))
  return kernel, strides, dilations, pads, extras

def _pool_pad(x: TensorT, pads: Sequence[tuple[int, int]], extras: Sequence[int], value: float) -> TensorT:
  lead = [(0, 0)] * (x.ndim - len(pads))
  return x.pad(lead + [(b, a + e) for (b, a), e in zip(pads, extras)], value=value)

def _max_pool(x: TensorT, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
             dilation: int | Sequence[int], padding: int | Sequence[int], ceil_mode: bool,
             return_indices: bool) -> TensorT | tuple[TensorT, TensorT]:
  """The largest value of each window (padding never wins) and, with return_indices, the flat index of the first
  such value in its (unpadded) input plane, as torch."""
  kernel, strides, dilations, pads, extras = _pool_setup(x, kernel_size, stride, dilation, padding, ceil_mode,
                                                        "max_pool2d")
  nk, spatial = len(kernel), x.shape[-len(kernel):]
  lowest = -math.inf if x.dtype.is_float else x.dtype.min()
  win = pool_windows(_pool_pad(x, pads, extras, lowest), kernel, strides, dilations)
  kaxes = tuple(range(-nk, 0))
  out = win.max(kaxes)
  if not return_indices: return out
  plane = prod(spatial)
  positions = _pool_pad(type(x).arange(plane, device=x.device).reshape(spatial), pads, extras, plane) \
    ._pool_windows(kernel, strides, dilations)
  peak = out.reshape(*out.shape, *[1] * nk).detach()
  hit = (win == peak) | ((win != win) & (peak != peak)) if x.dtype.is_float else win == peak
  return out, hit.where(positions, plane).min(kaxes).cast(dtypes.default_int)

def _avg_pool(x: TensorT, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
             dilation: int | Sequence[int], padding: int | Sequence[int], ceil_mode: bool,
             count_include_pad: bool) -> TensorT:
  """The mean of each window; the divisor counts the padding with count_include_pad (never ceil_mode's extra)."""
  kernel, strides, dilations, pads, extras = _pool_setup(x, kernel_size, stride, dilation, padding, ceil_mode,
                                                        "avg_pool2d")
  x = x._to_float()
  kaxes = tuple(range(-len(kernel), 0))
  total = pool_windows(_pool_pad(x, pads, extras, 0.0), kernel, strides, dilations).sum(kaxes)
  if not any(extras) and (count_include_pad or all(p == (0, 0) for p in pads)): return total / prod(kernel)
  # the divisor counts the window's positions inside the input (and the padding): the same windows over ones, so
  # that it is computed in the same loop as the sum
  inside = x.ones_like().pad([(0, 0)] * (x.ndim - len(kernel)) + list(pads), value=1.0 if count_include_pad else 0.0)
  count = _pool_pad(inside, [(0, 0)] * len(pads), extras, 0.0)._pool_windows(kernel, strides, dilations).sum(kaxes)
  return total / count

def _max_unpool(x: TensorT, indices: TensorT, out_spatial: Sequence[int]) -> TensorT:
  """Each value of x put at its flat index into a zero plane of `out_spatial`: a comparison of every input with every
  output position (O(in * out)). Indices that repeat (overlapping windows that picked the same input) hold the
  same value; it is placed once, as torch."""
  nk = len(out_spatial)
  lead, plane = x.shape[:-nk], prod(out_spatial)
  xs, idx = x.flatten(-nk).unsqueeze(-2), indices.flatten(-nk).unsqueeze(-2)  # (..., 1, in)
  hit = idx == type(x).arange(plane, device=x.device).reshape(plane, 1)       # (..., out, in)
  hits = hit.sum(-1)
  out = hit.where(xs, 0).sum(-1) / hits.maximum(1).cast(x.dtype)
  return out.reshape(*lead, *out_spatial)

# ---- interpolation ----

def _source_positions(n_in: int, n_out: int, mode: str, align_corners: bool) -> np.ndarray:
  """Where each output position samples the input, computed in float32 as torch does (so that nearest rounds alike)."""
  f32 = np.float32
  o = np.arange(n_out, dtype=f32)
  if mode == "nearest": return o * (f32(n_in) / f32(n_out))
  if mode == "nearest-exact": return (o + f32(0.5)) * (f32(n_in) / f32(n_out))
  if align_corners: return o * (f32(n_in - 1) / f32(n_out - 1) if n_out > 1 else f32(0))
  return np.maximum((o + f32(0.5)) * (f32(n_in) / f32(n_out)) - f32(0.5), f32(0))

def _interp_weights(n_in: int, n_out: int, mode: str, align_corners: bool) -> np.ndarray:
  """The (n_out, n_in) matrix that resamples one dim: one 1 per row (nearest) or two weights (linear)."""
  src = _source_positions(n_in, n_out, mode, align_corners)
  lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
  w = np.zeros((n_out, n_in), dtype=np.float32)
  rows = np.arange(n_out)
  if mode.startswith("nearest"):
    w[rows, lo] = 1
    return w
  frac = src - lo.astype(np.float32)
  np.add.at(w, (rows, lo), np.float32(1) - frac)
  np.add.at(w, (rows, np.minimum(lo + 1, n_in - 1)), frac)
  return w

def _fixed_point_weights(n_in: int, n_out: int, align_corners: bool) -> tuple[np.ndarray, int]:
  """torch's uint8 linear weights: the (n_out, n_in) blend computed in float64 around each output's center, scaled
  by 2**precision (the most that keeps the largest weight within int16) and rounded to ints."""
  o = np.arange(n_out, dtype=np.float64)
  if align_corners: center = o * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0) + 0.5
  else: center = (o + 0.5) * (n_in / n_out)
  w = np.maximum(0.0, 1 - np.abs(np.arange(n_in) + 0.5 - center[:, None]))
  w = w / np.maximum(w.sum(1, keepdims=True), np.finfo(np.float64).tiny)
  precision = next((p for p in range(22) if int(0.5 + w.max() * (1 << (p + 1))) >= 1 << 15), 22)
  return np.trunc(w * (1 << precision) + 0.5).astype(np.int32), precision

def _interpolate_uint8(x: TensorT, size: Sequence[int], align_corners: bool) -> TensorT:
  """Linear resampling of uint8 as torch does it, bit for bit: one dim at a time from the last, each a blend in
  integers with fixed-point weights, rounded back to uint8 before the next dim."""
  for d, n_out in reversed(list(zip(range(x.ndim - len(size), x.ndim), size))):
    if x.shape[d] == n_out: continue
    w, precision = _fixed_point_weights(x.shape[d], n_out, align_corners)
    moved = x.transpose(d, -1).cast(dtypes.int32)
    acc = (moved.unsqueeze(-2) * type(x)(w, device=x.device)).sum(-1, dtype=dtypes.int32)
    x = ((acc + (1 << (precision - 1))) >> precision).clip(0, 255).cast(dtypes.uint8).transpose(d, -1)
  return x

def _interpolate(x: TensorT, size: Sequence[int], mode: str, align_corners: bool) -> TensorT:
  """Resample the trailing len(size) dims, one dim at a time: a repeat of each element (a view) when that is what
  nearest asks for, else a reduce against the dim's interpolation weights."""
  for d, n_out in zip(range(x.ndim - len(size), x.ndim), size):
    n_in = x.shape[d]
    if n_in == n_out: continue
    moved = x.transpose(d, -1)
    w = _interp_weights(n_in, n_out, mode, align_corners)
    k = n_out // n_in
    if mode.startswith("nearest") and n_out % n_in == 0 and (w.argmax(1) == np.arange(n_out) // k).all():
      out = moved.unsqueeze(-1).expand(*moved.shape, k).reshape(*moved.shape[:-1], n_out)
    else: out = (moved.unsqueeze(-2) * type(x)(w, device=x.device).cast(x.dtype)).sum(-1)
    x = out.transpose(d, -1)
  return x

class NNMixin(RandomMixin):
  """Tensor's neural-network functions: on the random mixin and those below it."""
  __slots__ = ()

  # ---- convolutions ----

  def conv2d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: Padding = 0) -> Self:
    """Convolution (cross-correlation, as torch) of (batch, channels, *spatial) with weight (out, in/groups, *kernel):
    views plus one reduce, no im2col buffer. As tinygrad's, it convolves as many dims as the weight has spatial ones.
    `padding`: an int, one per dim, two per dim in torch's flat order (last dim first), "valid" or "same" (an odd
    total pads one more after, as torch). The padding is zeros that the weights multiply like any input, so an
    infinite or NaN weight over it gives NaN there, as torch's own CPU convolution and its float64 one; torch's float32
    oneDNN kernels skip the padded taps for some shapes and not others.

    >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    return conv(self, weight, bias, groups, stride, dilation, padding, "conv2d")

  def _conv_nd(self, nk: int, weight: Self, bias: Self | None, groups: int, stride: int | Sequence[int],
               dilation: int | Sequence[int], padding: Padding) -> Self:
    name = f"conv{nk}d"
    if weight.ndim != nk + 2:
      raise ValueError(f"{name}: weight of shape {weight.shape} must have {nk + 2} dims (out, in/groups, *kernel)")
    return conv(self, weight, bias, groups, stride, dilation, padding, name)

  def conv1d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: Padding = 0) -> Self:
    """1-D convolution of (batch, channels, length) with weight (out, in/groups, k); see conv2d.

    >>> Tensor([[[1.0, 2.0, 3.0]]]).conv1d(Tensor([[[1.0, 1.0]]]), padding="same").tolist()
    [[[3.0, 5.0, 3.0]]]
    """
    return self._conv_nd(1, weight, bias, groups, stride, dilation, padding)

  def conv3d(self, weight: Self, bias: Self | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: Padding = 0) -> Self:
    """3-D convolution of (batch, channels, d, h, w) with weight (out, in/groups, kd, kh, kw); see conv2d.

    >>> Tensor.ones(1, 1, 3, 3, 3).conv3d(Tensor.ones(2, 1, 2, 2, 2)).shape
    (1, 2, 2, 2, 2)
    """
    return self._conv_nd(3, weight, bias, groups, stride, dilation, padding)

  def conv_transpose2d(self, weight: Self, bias: Self | None = None, groups: int = 1,
                       stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                       padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Self:
    """Transposed convolution (the gradient of conv2d with respect to its input), as torch; the weight is
    (in, out/groups, *kernel). Like conv2d, it works over as many dims as the weight has spatial ones.

    >>> Tensor.ones(1, 1, 2, 2).conv_transpose2d(Tensor.ones(1, 1, 2, 2), stride=2).shape
    (1, 1, 4, 4)
    """
    return conv_transpose(self, weight, bias, groups, stride, dilation, padding, output_padding)

  def linear(self, weight: Self, bias: Self | None = None) -> Self:
    """x @ weight + bias (weight is (in, out), as tinygrad's); a 1-d weight scales each feature instead (x * weight +
    bias, as tinygrad's layernorm applies its affine).

    >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0], [1.0]]), Tensor([0.5])).tolist()
    [[3.5]]
    >>> Tensor([[1.0, 2.0]]).linear(Tensor([3.0, 4.0]), Tensor([0.5, 0.5])).tolist()
    [[3.5, 8.5]]
    """
    if weight.ndim == 1: x = self * weight
    else:  # autocast: the bias in half too, as torch's linear (else it promotes the half product back to float32)
      x, bias = self @ weight, None if bias is None else bias.cast(low_precision(bias.dtype))
    return x + bias if bias is not None else x

  # ---- pooling and resampling: over the trailing dims, as many as the kernel has ----

  def max_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 return_indices: bool = False) -> Self | tuple[Self, Self]:
    """The maximum of each window over the last 2 dims, or as many as kernel_size has entries (1-d, 3-d pooling
    through the same function, as tinygrad); stride defaults to the kernel. As torch: padding (at most half the
    window) never wins, ceil_mode keeps a last partial window, return_indices also gives each maximum's flat index in
    its input plane (dtypes.default_int, for max_unpool2d). Views plus one reduce.

    >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d(return_indices=True)[1].tolist()
    [[[[3]]]]
    """
    return _max_pool(self, kernel_size, stride, dilation, padding, ceil_mode, return_indices)

  def avg_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Self:
    """The mean of each window over the last 2 dims, or as many as kernel_size has entries; stride defaults to the
    kernel. As torch: count_include_pad counts the zero padding
    in the divisor; the part of a ceil_mode window past the padding never counts. Views plus one reduce.

    >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).avg_pool2d().tolist()
    [[[[2.5]]]]
    """
    return _avg_pool(self, kernel_size, stride, dilation, padding, ceil_mode, count_include_pad)

  def max_pool1d(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 return_indices: bool = False) -> Self | tuple[Self, Self]:
    """max_pool2d over the last dim only (an int kernel_size means one dim here), as torch's max_pool1d.

    >>> Tensor([[[1.0, 3.0, 2.0, 5.0, 4.0]]]).max_pool1d(2).tolist()
    [[[3.0, 5.0]]]
    """
    return self.max_pool2d(make_tuple(kernel_size, 1), stride, dilation, padding, ceil_mode, return_indices)

  def avg_pool1d(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Self:
    """avg_pool2d over the last dim only (an int kernel_size means one dim here), as torch's avg_pool1d (which has
    no dilation).

    >>> Tensor([[[1.0, 3.0, 2.0, 6.0]]]).avg_pool1d(2).tolist()
    [[[2.0, 4.0]]]
    """
    return self.avg_pool2d(make_tuple(kernel_size, 1), stride, 1, padding, ceil_mode, count_include_pad)

  def max_unpool2d(self, indices: Self, kernel_size: int | Sequence[int] = (2, 2),
                   stride: int | Sequence[int] | None = None, dilation: int | Sequence[int] = 1,
                   padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Self:
    """The inverse of max_pool2d: each value placed at its index (from return_indices) in a plane of zeros, whose
    size is what the pooling started from (or `output_size`). It compares every input with every output position
    (O(in * out) work). An index outside the plane places nothing (torch raises).

    >>> x, idx = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d(return_indices=True)
    >>> x.max_unpool2d(idx).tolist()
    [[[[0.0, 0.0], [0.0, 4.0]]]]
    """
    x = self
    kernel = conv_params(kernel_size, 2 if isinstance(kernel_size, int) else len(kernel_size), "kernel_size",
                         "max_unpool2d")
    nk = len(kernel)
    if indices.shape != x.shape or indices.dtype.is_float or x.ndim < nk + 1:
      raise ValueError(f"max_unpool2d: indices ({indices.shape}, {indices.dtype}) must be ints of the input's shape "
                       f"{x.shape}, which needs at least {nk + 1} dims")
    strides = conv_params(kernel if stride is None else stride, nk, "stride", "max_unpool2d")
    dilations = conv_params(dilation, nk, "dilation", "max_unpool2d")
    pads = conv_padding(padding, kernel, dilations, strides, "max_unpool2d")
    default = [(i - 1) * s - b - a + d * (k - 1) + 1
               for i, s, (b, a), d, k in zip(x.shape[-nk:], strides, pads, dilations, kernel)]
    size = tuple(default if output_size is None else output_size[-nk:])
    if any(not default[j] - strides[j] < size[j] < default[j] + strides[j] for j in range(nk)) or len(size) != nk:
      raise ValueError(f"max_unpool2d: output_size {output_size} must be within a stride {strides} of {default}")
    return _max_unpool(x, indices, size)

  def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Self:
    """Resample the trailing len(size) dims to `size`, as torch.nn.functional.interpolate: mode "nearest",
    "nearest-exact", or "linear" over every given dim ("bilinear" and "trilinear" name 2 and 3 of them).

    >>> [round(v, 3) for v in Tensor([[[1.0, 3.0]]]).interpolate((4,), align_corners=True)[0, 0].tolist()]
    [1.0, 1.667, 2.333, 3.0]
    """
    x = self
    size = make_tuple(size, 1)
    if mode not in INTERPOLATION_MODES:
      raise ValueError(f"interpolate: mode {mode!r} must be one of {list(INTERPOLATION_MODES)}")
    if any(not isinstance(s, int) or s <= 0 for s in size) or len(size) > x.ndim:
      raise ValueError(f"interpolate: size {size} must be positive ints, at most one per dim of {x.shape}")
    if INTERPOLATION_MODES[mode] not in (None, len(size)):
      raise ValueError(f"interpolate: mode {mode!r} resamples {INTERPOLATION_MODES[mode]} dims, size {size} gives "
                       f"{len(size)}")
    if align_corners and mode.startswith("nearest"):
      raise ValueError(f"interpolate: align_corners is only for the linear modes, not {mode!r}")
    # uint8 (images) blends in fixed point, as torch's does
    if x.dtype == dtypes.uint8 and not mode.startswith("nearest"): return _interpolate_uint8(x, size, align_corners)
    out = _interpolate(x._to_float(), size, mode, align_corners)
    if x.dtype.is_float: return out
    # other ints keep their dtype: nearest picks values exactly, linear rounds its blend to the nearest
    return (out if mode.startswith("nearest") else out.round()).cast(x.dtype)

  # ---- normalization, dropout, attention ----

  def normalize(self, p: float = 2.0, dim: int | Sequence[int] = 1, eps: float = 1e-12) -> Self:
    """Each vector along `dim` divided by its p-norm (at least eps), as torch.nn.functional.normalize: a zero vector
    stays zero, and its gradient is the incoming one over eps (the norm's gradient at zero is 0, as torch's).

    >>> Tensor([[3.0, 4.0], [0.0, 0.0]], dtype="float64").normalize().tolist()
    [[0.6, 0.8], [0.0, 0.0]]
    """
    x = self._to_float()
    return x / x.norm(p, dim, keepdim=True).maximum(eps)

  def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Self:
    """Normalize over `axis` to mean 0 and variance 1 (the biased variance, plus eps), without scale or shift.

    >>> [round(v, 3) for v in Tensor([1.0, 2.0, 3.0]).layernorm().tolist()]
    [-1.225, 0.0, 1.225]
    """
    x = self._to_float()
    # 16-bit floats in float32, rounded once, as torch's layer_norm: the mean, x - mean, the variance and rsqrt each
    # rounded to half made a float16 layernorm of 320 features 1.6x as far from float64 (6.1e-4 relative, 3.7e-4 now)
    if x.dtype.is_half: return x.float().layernorm(axis, eps).cast(widened(x.dtype))
    centered = x - x.mean(axis, keepdim=True)
    return centered * (centered.square().mean(axis, keepdim=True) + eps).rsqrt()

  def batchnorm(self, weight: Self | None, bias: Self | None, mean: Self, invstd: Self,
                axis: int | Sequence[int] = 1) -> Self:
    """(x - mean) * weight * invstd + bias, where mean, invstd, weight and bias run along `axis` (the channels):
    the functional form of batch normalization (nn.BatchNorm computes the statistics).

    >>> Tensor([[1.0, 2.0]]).batchnorm(None, None, Tensor([1.0]), Tensor([2.0]), axis=0).tolist()
    [[0.0, 2.0]]
    """
    x = self
    axes = tuple(x._resolve_axis(a) for a in make_tuple(axis, 1))
    shape = tuple(s if i in axes else 1 for i, s in enumerate(x.shape))
    def along(t: Self, what: str) -> Self:
      if t.numel() != math.prod(x.shape[a] for a in axes):
        raise ValueError(f"batchnorm: {what} of shape {t.shape} does not match dims {axes} of the input {x.shape}")
      return t.reshape(shape)
    out = x - along(mean, "mean")
    if weight is not None: out = out * along(weight, "weight")
    out = out * along(invstd, "invstd")
    return out + along(bias, "bias") if bias is not None else out

  def dropout(self, p: float = 0.5) -> Self:
    """In training (Tensor.training), zero each element with probability p and scale the rest by 1/(1-p); outside
    training, the tensor itself.

    >>> with Tensor.train():
    ...   kept = Tensor.ones(1000).dropout(0.25)
    >>> sorted(set(kept.tolist())), Tensor.ones(2).dropout().tolist()
    ([0.0, 1.3333333730697632], [1.0, 1.0])
    """
    x = self
    if not isinstance(p, (int, float)) or not 0 <= p <= 1:
      raise ValueError(f"dropout: probability p={p!r} must be in [0, 1]")
    if not type(x).training or p == 0: return x
    if p == 1: return x * 0
    keep = type(x).rand(*x.shape, device=x.device) >= p
    return keep.where(x * (1 / (1 - p)), 0)

  def scaled_dot_product_attention(self, key: Self, value: Self, attn_mask: Self | None = None,
                                   dropout_p: float = 0.0, is_causal: bool = False,
                                   scale: float | None = None, enable_gqa: bool = False) -> Self:
    """softmax(q @ k^T * scale + mask) @ v, as torch: scale defaults to 1/sqrt(head dim); a bool attn_mask keeps
    where True, a float one is added; is_causal lets position i attend to positions <= i. Dropout on the weights
    applies in training only (as tinygrad). With enable_gqa, query heads (dim -3) share key/value heads in groups:
    each of the Hk key heads serves Hq / Hk consecutive query heads.

    >>> q = Tensor.ones(1, 2, 4)
    >>> q.scaled_dot_product_attention(q, Tensor([[[1.0], [3.0]]]), is_causal=True).tolist()
    [[[1.0], [2.0]]]
    """
    q = self
    if q.ndim < 2 or key.ndim < 2 or value.ndim < 2 or q.shape[-1] != key.shape[-1] or \
       key.shape[-2] != value.shape[-2]:
      raise ValueError(f"scaled_dot_product_attention: query {q.shape}, key {key.shape} and value {value.shape} need "
                       "(..., L, E), (..., S, E) and (..., S, Ev)")
    if is_causal and attn_mask is not None:
      raise ArgumentError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    if enable_gqa and q.ndim >= 3 and key.ndim >= 3 and q.shape[-3] != key.shape[-3]:
      if q.shape[-3] % key.shape[-3] or key.shape[-3] != value.shape[-3]:
        raise ArgumentError(f"scaled_dot_product_attention: {q.shape[-3]} query heads cannot share {key.shape[-3]} "
                            f"key and {value.shape[-3] if value.ndim >= 3 else 0} value heads in equal groups")
      group = q.shape[-3] // key.shape[-3]
      key, value = key.repeat_interleave(group, dim=-3), value.repeat_interleave(group, dim=-3)
    # the scores in the product's accumulator (float32 for 16-bit floats) through the scale, the mask and the softmax,
    # the probabilities rounded once: rounded to half as products and again when scaled, they made a half attention
    # 1.4x to 2.7x further from float32 (8 heads of 256 x 40, values of scale 1 to 3) than one rounding
    dt = promote_types(q.dtype, key.dtype)
    scores = q.matmul(key.transpose(-1, -2), dtype=q._acc_dtype(dt)) * (1 / math.sqrt(q.shape[-1]) if scale is None
                                                                        else scale)
    if is_causal:
      rows, cols = q.shape[-2], key.shape[-2]
      attn_mask = type(q).ones(rows, cols, dtype=dtypes.bool, device=q.device).tril()
    if attn_mask is not None:
      scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype.is_bool else scores + attn_mask
    probs = scores.softmax(-1)
    return (probs.cast(dt) if dt.is_half else probs).dropout(dropout_p) @ value

  # ---- losses ----

  def cross_entropy(self, Y: Self, reduction: str = "mean", label_smoothing: float = 0.0,
                    weight: Self | None = None, ignore_index: int = -100) -> Self:
    """Cross-entropy of logits (batch, classes, ...) or (classes,) against class indices (ints, the input's shape
    without the class dim) or class probabilities (floats, the input's shape), as torch.nn.functional.cross_entropy:
    per-class `weight`, `label_smoothing`, targets equal to `ignore_index` left out, reduction "mean", "sum" or
    "none". A class index outside [0, classes) (other than ignore_index) raises IndexError when the kernel runs.

    >>> round(Tensor([[0.0, 0.0]]).cross_entropy(Tensor([1])).item(), 4)
    0.6931
    """
    x = self
    if x.ndim == 0: raise ValueError("cross_entropy: the input needs a class dim, got a 0-d tensor")
    axis = 1 if x.ndim > 1 else 0
    return _class_loss(x.log_softmax(axis), Y, axis, weight, ignore_index, label_smoothing, reduction, "cross_entropy",
                       ignore_index)

  def nll_loss(self, Y: Self, weight: Self | None = None, ignore_index: int = -100,
               reduction: str = "mean") -> Self:
    """The negative log-likelihood of log-probabilities (batch, classes, ...) or (classes,) at the class indices Y, as
    torch.nn.functional.nll_loss (weights, ignore_index and reductions as cross_entropy).

    >>> Tensor([[-1.0, -2.0], [-3.0, -4.0]]).nll_loss(Tensor([1, 0])).item()
    2.5
    """
    x = self
    if x.ndim == 0: raise ValueError("nll_loss: the input needs a class dim, got a 0-d tensor")
    if Y.dtype.is_float: raise TypeError(f"nll_loss: the target must hold class indices (ints), got {Y.dtype}")
    return _class_loss(x, Y, 1 if x.ndim > 1 else 0, weight, ignore_index, 0.0, reduction, "nll_loss", ignore_index)

  def sparse_categorical_crossentropy(self, Y: Self, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Self:
    """Cross-entropy of logits with the classes in the last dim against class indices Y (tinygrad's): targets equal to
    ignore_index are left out, except that the default -1 leaves nothing out (a -1 target picks no class).

    >>> round(Tensor([[0.0, 0.0], [0.0, 5.0]]).sparse_categorical_crossentropy(Tensor([0, 1])).item(), 4)
    0.3499
    """
    x = self
    if x.ndim == 0: raise ValueError("sparse_categorical_crossentropy: the input needs a class dim, got a 0-d tensor")
    if Y.dtype.is_float: raise TypeError(f"sparse_categorical_crossentropy: Y must hold class indices, got {Y.dtype}")
    return _class_loss(x.log_softmax(-1), Y, x.ndim - 1, None, None if ignore_index == -1 else ignore_index,
                       label_smoothing, reduction, "sparse_categorical_crossentropy", ignore_index)

  def _check_binary_target(self, Y: Self, name: str, reduction: str) -> None:
    _check_reduction(reduction, name)
    if Y.shape != self.shape:
      raise ValueError(f"{name}: target of shape {Y.shape} must have the input's shape {self.shape}")

  def binary_crossentropy(self, Y: Self, reduction: str = "mean") -> Self:
    """Binary cross-entropy of probabilities against targets in [0, 1], as torch (each log clamped at -100, where the
    gradient is 0).

    >>> round(Tensor([0.5, 0.9]).binary_crossentropy(Tensor([1.0, 1.0])).item(), 4)
    0.3993
    """
    x = self
    x._check_binary_target(Y, "binary_crossentropy", reduction)
    loss = -(Y * _clamped_log(x) + (1 - Y) * _clamped_log(1 - x))
    return _reduce_loss(loss, reduction)

  def binary_crossentropy_logits(self, Y: Self, reduction: str = "mean", pos_weight: Self | None = None) -> Self:
    """Binary cross-entropy of logits (sigmoid inside, computed stably) against targets in [0, 1], with `pos_weight`
    scaling the positive term, as torch's binary_cross_entropy_with_logits.

    >>> round(Tensor([0.0, 100.0]).binary_crossentropy_logits(Tensor([1.0, 1.0])).item(), 4)
    0.3466
    """
    x = self
    x._check_binary_target(Y, "binary_crossentropy_logits", reduction)
    pos = Y * x.logsigmoid()
    loss = -((pos if pos_weight is None else pos * pos_weight) + (1 - Y) * (-x).logsigmoid())
    return _reduce_loss(loss, reduction)

  # ---- torch's adaptive pooling, distances and regression losses ----

  def sequential(self, layers: Sequence[Callable[[Self], Self]]) -> Self:
    """The tensor passed through each layer (any callable) in turn, as tinygrad's sequential.

    >>> Tensor([1.0, -2.0]).sequential([lambda x: x * 2, Tensor.relu]).tolist()
    [2.0, 0.0]
    """
    x = self
    for f in layers: x = f(x)
    return x

  def adaptive_avg_pool2d(self, output_size: int | Sequence[int | None]) -> Self:
    """The mean over windows that split the last 2 dims (or as many as output_size has entries; None keeps a dim)
    into `output_size` parts, as torch's adaptive_avg_pool2d: window i of n_in -> n_out spans
    [floor(i n_in / n_out), ceil((i + 1) n_in / n_out)). A pool of even windows is views plus one reduce per dim.

    >>> Tensor.arange(6.0).reshape(1, 2, 3).adaptive_avg_pool2d((1, 2)).tolist()
    [[[2.0, 3.0]]]
    """
    return _adaptive_pool(self, output_size, "adaptive_avg_pool2d")

  def adaptive_max_pool2d(self, output_size: int | Sequence[int | None]) -> Self:
    """The maximum over the windows of adaptive_avg_pool2d, as torch's adaptive_max_pool2d (values only).

    >>> Tensor.arange(6.0).reshape(1, 2, 3).adaptive_max_pool2d(1).tolist()
    [[[5.0]]]
    """
    return _adaptive_pool(self, output_size, "adaptive_max_pool2d")

  def cosine_similarity(self, other: Self, dim: int = 1, eps: float = 1e-8) -> Self:
    """The cosine of the angle between the vectors along `dim`, as torch.nn.functional.cosine_similarity: each
    vector is divided by its 2-norm (at least eps), then the two are dotted; the operands broadcast.

    >>> a, b = Tensor([[1.0, 0.0], [1.0, 1.0]]), Tensor([[2.0, 0.0], [-1.0, -1.0]])
    >>> [round(v, 6) for v in a.cosine_similarity(b).tolist()]
    [1.0, -1.0]
    """
    a, b = (t._to_float() for t in self._broadcasted(other))
    d = a._resolve_axis(dim)
    return ((a / a.norm(dim=d, keepdim=True).clamp_min(eps)) * (b / b.norm(dim=d, keepdim=True).clamp_min(eps))).sum(d)

  def pairwise_distance(self, other: Self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Self:
    """The p-norm of self - other + eps along the last dim, as torch.nn.functional.pairwise_distance.

    >>> round(Tensor([[0.0, 0.0]]).pairwise_distance(Tensor([[3.0, 4.0]])).item(), 4)
    5.0
    """
    a, b = (t._to_float() for t in self._broadcasted(other))
    return (a - b + eps).norm(p, dim=-1, keepdim=keepdim)

  def cdist(self, other: Self, p: float = 2.0) -> Self:
    """The p-norm distance between every row of self (..., P, M) and every row of other (..., R, M): (..., P, R), as
    torch.cdist; the batch dims broadcast. One kernel over P * R * M differences.

    >>> Tensor([[0.0, 0.0], [1.0, 1.0]]).cdist(Tensor([[3.0, 4.0]])).tolist()
    [[5.0], [3.605551242828369]]
    """
    if not self._is_tensor(other): raise TypeError(f"cdist: expected a Tensor, got {type(other).__name__}")
    if self.ndim < 2 or other.ndim < 2 or self.shape[-1] != other.shape[-1]:
      raise ValueError(f"cdist: shapes {self.shape} and {other.shape} must be (..., P, M) and (..., R, M)")
    return (self._to_float().unsqueeze(-2) - other._to_float().unsqueeze(-3)).norm(p, dim=-1)

  def _regression_loss(self, target: Self, reduction: str, name: str, pointwise: Callable[[Self], Self]) -> Self:
    self._check_binary_target(target, name, reduction)
    return _reduce_loss(pointwise(self - target), reduction)

  def mse_loss(self, target: Self, reduction: str = "mean") -> Self:
    """The squared error (self - target)^2, as torch.nn.functional.mse_loss; reduction "mean", "sum" or "none".

    >>> Tensor([1.0, 2.0]).mse_loss(Tensor([0.0, 4.0])).item()
    2.5
    """
    return self._regression_loss(target, reduction, "mse_loss", lambda d: d.square())

  def l1_loss(self, target: Self, reduction: str = "mean") -> Self:
    """The absolute error |self - target|, as torch.nn.functional.l1_loss.

    >>> Tensor([1.0, 2.0]).l1_loss(Tensor([0.0, 4.0])).item()
    1.5
    """
    return self._regression_loss(target, reduction, "l1_loss", lambda d: d.abs())

  def smooth_l1_loss(self, target: Self, reduction: str = "mean", beta: float = 1.0) -> Self:
    """0.5 d^2 / beta where |d| = |self - target| < beta, |d| - 0.5 beta beyond, as torch's smooth_l1_loss
    (beta 0 is l1_loss).

    >>> Tensor([0.5, 3.0]).smooth_l1_loss(Tensor([0.0, 0.0]), reduction="none").tolist()
    [0.125, 2.5]
    """
    if beta < 0: raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    def pointwise(d: Self) -> Self:
      a = d.abs()
      return a if beta == 0 else (a < beta).where(0.5 * a.square() / beta, a - 0.5 * beta)
    return self._regression_loss(target, reduction, "smooth_l1_loss", pointwise)

  def huber_loss(self, target: Self, reduction: str = "mean", delta: float = 1.0) -> Self:
    """0.5 d^2 where |d| = |self - target| < delta, delta (|d| - 0.5 delta) beyond, as torch's huber_loss
    (smooth_l1_loss times beta, with beta = delta).

    >>> Tensor([0.5, 3.0]).huber_loss(Tensor([0.0, 0.0]), reduction="none", delta=2.0).tolist()
    [0.125, 4.0]
    """
    if delta <= 0: raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    def pointwise(d: Self) -> Self:
      a = d.abs()
      return (a < delta).where(0.5 * a.square(), delta * (a - 0.5 * delta))
    return self._regression_loss(target, reduction, "huber_loss", pointwise)

  def kl_div(self, target: Self, reduction: str = "mean", log_target: bool = False) -> Self:
    """The Kullback-Leibler divergence of `target` from the log-probabilities self, pointwise target * (log(target)
    - self) (0 where target is 0), as torch.nn.functional.kl_div; with log_target, target holds log-probabilities.
    reduction "batchmean" (the sum over the batch size: the true KL divergence) as well as "mean", "sum", "none".

    >>> round(Tensor([0.5, 0.5]).log().kl_div(Tensor([0.25, 0.75]), reduction="sum").item(), 4)
    0.1308
    """
    if reduction != "batchmean": _check_reduction(reduction, "kl_div")
    if target.shape != self.shape:
      raise ValueError(f"kl_div: target of shape {target.shape} must have the input's shape {self.shape}")
    loss = target.exp() * (target - self) if log_target else target.xlogy(target) - target * self
    if reduction != "batchmean": return _reduce_loss(loss, reduction)
    return loss.sum() / (self.shape[0] if self.ndim else 1)

def _adaptive_windows(n_in: int, n_out: int) -> np.ndarray:
  """The (n_out, n_in) membership of each input position in each adaptive pooling window."""
  i = np.arange(n_out)
  start, end = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
  pos = np.arange(n_in)
  return (pos >= start[:, None]) & (pos < end[:, None])

def _adaptive_pool(x: TensorT, output_size: int | Sequence[int | None], name: str) -> TensorT:
  """Adaptive pooling of the trailing dims. The dims whose windows are all one size are a reshape and one reduce
  together; the others follow one at a time (a rectangle's mean or max is the mean or max over one dim of those over
  the other), each a reduce against its (n_out, n_in) window membership (or averaging weights)."""
  size = (output_size, output_size) if isinstance(output_size, (int, np.integer)) else tuple(output_size)
  if x.ndim <= len(size) or any(s is not None and (not isinstance(s, (int, np.integer)) or s <= 0) for s in size):
    raise ValueError(f"{name}: output_size {output_size!r} must hold positive ints (or None) for fewer dims than the "
                     f"input's {x.shape}")
  use_max = name == "adaptive_max_pool2d"
  if not use_max: x = x._to_float()
  first = x.ndim - len(size)
  outs = [x.shape[first + j] if s is None else int(s) for j, s in enumerate(size)]
  if 0 in x.shape[first:]: raise ValueError(f"{name}: cannot pool the zero-size dims of {x.shape}")
  even = [n_in % n_out == 0 for n_in, n_out in zip(x.shape[first:], outs)]
  split = flatten(((n_out, n_in // n_out) if e else (n_in, 1))
                  for n_in, n_out, e in zip(x.shape[first:], outs, even))
  windows = x.reshape(*x.shape[:first], *split)
  axes = tuple(range(first + 1, windows.ndim, 2))
  x = windows.max(axes) if use_max else windows.mean(axes)
  for d, n_out, e in zip(range(first, x.ndim), outs, even):
    if e: continue
    member = _adaptive_windows(x.shape[d], n_out)
    wide = x.transpose(d, -1).unsqueeze(-2)
    if use_max: out = type(x)(member, device=x.device).where(wide, x.dtype.min()).max(-1)
    else: out = (wide * type(x)(member / member.sum(1, keepdims=True), device=x.device).cast(x.dtype)).sum(-1)
    x = out.transpose(d, -1)
  return x
