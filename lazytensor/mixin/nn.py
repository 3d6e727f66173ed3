"""Neural-network functions: convolutions, pooling, resampling, normalization, dropout, attention and losses.

Each is composed from other tensor ops, so it fuses and has gradients: a convolution or a pool is views of its input
plus one reduce (see tensor_math), never an im2col buffer.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from lazytensor.dtype import dtypes
from lazytensor.helpers import ArgumentError, make_tuple
from lazytensor.mixin.math_ops import (
  Padding,
  avg_pool,
  conv,
  conv_padding,
  conv_params,
  conv_transpose,
  interpolate,
  max_pool,
  max_unpool,
)
from lazytensor.mixin.stub import TensorStub

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

REDUCTIONS = ("none", "mean", "sum")
INTERPOLATION_MODES = {"nearest": None, "nearest-exact": None, "linear": None, "bilinear": 2, "trilinear": 3}

def _check_reduction(reduction: str, name: str) -> None:
  if reduction not in REDUCTIONS: raise ValueError(f"{name}: reduction {reduction!r} must be one of {REDUCTIONS}")

def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
  return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()

def _clamped_log(x: Tensor) -> Tensor:
  # log clamped at -100, as torch's binary_cross_entropy; the log of 0 is never taken, so the gradient there is 0
  # (the slope of the clamp), not NaN
  positive = x > 0
  return positive.where(positive.where(x, 1).log().maximum(-100), -100)

def _class_loss(logp: Tensor, target: Tensor, axis: int, weight: Tensor | None, ignore_index: int | None,
                label_smoothing: float, reduction: str, name: str) -> Tensor:
  """The negative log-likelihood of log-probabilities `logp` (classes along `axis`) against class indices or class
  probabilities, with torch's weights, smoothing, ignored targets and reductions."""
  _check_reduction(reduction, name)
  if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"{name}: label_smoothing {label_smoothing} is not in [0, 1]")
  n_classes = logp.shape[axis]
  class_shape = tuple(n_classes if i == axis else 1 for i in range(logp.ndim))
  if weight is not None and weight.shape != (n_classes,):
    raise ValueError(f"{name}: weight of shape {weight.shape} does not match the {n_classes} classes of {logp.shape}")
  weighted = logp * weight.reshape(class_shape) if weight is not None else logp
  def smoothed(nll: Tensor) -> Tensor:  # no smoothing term at all without smoothing: it would turn a -inf into NaN
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
  # a where, not a product: the log-probability of a class that is not the target may be -inf
  hit = target.unsqueeze(axis) == type(logp).arange(n_classes, device=logp.device).reshape(class_shape)
  loss = smoothed(-hit.where(weighted, 0).sum(axis))
  valid = target.ne(ignore_index) if ignore_index is not None else None
  if valid is not None: loss = valid.where(loss, 0)
  if reduction != "mean": return _reduce_loss(loss, reduction)
  # the mean is over the targets that count, each counted with its class weight (0/0 = nan when none does)
  counts = hit.where(weight.reshape(class_shape), 0).sum(axis) if weight is not None else \
    target.ones_like(dtype=dtypes.float32)
  return loss.sum() / (valid.where(counts, 0) if valid is not None else counts).sum()

class NNMixin(TensorStub):
  """Tensor's neural-network functions. Its only subclass is Tensor (tensor.py), so every NNMixin is a Tensor."""
  __slots__ = ()

  # ---- convolutions ----

  def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: Padding = 0) -> Tensor:
    """Convolution (cross-correlation, as torch) of (batch, channels, *spatial) with weight (out, in/groups, *kernel):
    views plus one reduce, no im2col buffer. As tinygrad's, it convolves as many dims as the weight has spatial ones.
    `padding`: an int, one per dim, two per dim in torch's flat order (last dim first), "valid" or "same" (an odd
    total pads one more after, as torch).

    >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    return conv(cast("Tensor", self), weight, bias, groups, stride, dilation, padding, "conv2d")

  def _conv_nd(self, nk: int, weight: Tensor, bias: Tensor | None, groups: int, stride: int | Sequence[int],
               dilation: int | Sequence[int], padding: Padding) -> Tensor:
    name = f"conv{nk}d"
    if weight.ndim != nk + 2:
      raise ValueError(f"{name}: weight of shape {weight.shape} must have {nk + 2} dims (out, in/groups, *kernel)")
    return conv(cast("Tensor", self), weight, bias, groups, stride, dilation, padding, name)

  def conv1d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: Padding = 0) -> Tensor:
    """1-D convolution of (batch, channels, length) with weight (out, in/groups, k); see conv2d.

    >>> Tensor([[[1.0, 2.0, 3.0]]]).conv1d(Tensor([[[1.0, 1.0]]]), padding="same").tolist()
    [[[3.0, 5.0, 3.0]]]
    """
    return self._conv_nd(1, weight, bias, groups, stride, dilation, padding)

  def conv3d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: Padding = 0) -> Tensor:
    """3-D convolution of (batch, channels, d, h, w) with weight (out, in/groups, kd, kh, kw); see conv2d.

    >>> Tensor.ones(1, 1, 3, 3, 3).conv3d(Tensor.ones(2, 1, 2, 2, 2)).shape
    (1, 2, 2, 2, 2)
    """
    return self._conv_nd(3, weight, bias, groups, stride, dilation, padding)

  def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1,
                       stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1,
                       padding: int | Sequence[int] = 0, output_padding: int | Sequence[int] = 0) -> Tensor:
    """Transposed convolution (the gradient of conv2d with respect to its input), as torch; the weight is
    (in, out/groups, *kernel). Like conv2d, it works over as many dims as the weight has spatial ones.

    >>> Tensor.ones(1, 1, 2, 2).conv_transpose2d(Tensor.ones(1, 1, 2, 2), stride=2).shape
    (1, 1, 4, 4)
    """
    return conv_transpose(cast("Tensor", self), weight, bias, groups, stride, dilation, padding, output_padding)

  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight + bias (weight is (in, out), as tinygrad's).

    >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0], [1.0]]), Tensor([0.5])).tolist()
    [[3.5]]
    """
    x = cast("Tensor", self) @ weight
    return x + bias if bias is not None else x

  # ---- pooling and resampling: over the trailing dims, as many as the kernel has ----

  def max_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 return_indices: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """The maximum of each window over the last 2 dims, or as many as kernel_size has entries (1-d, 3-d pooling
    through the same function, as tinygrad); stride defaults to the kernel. As torch: padding (at most half the
    window) never wins, ceil_mode keeps a last partial window, return_indices also gives each maximum's flat index in
    its input plane (dtypes.default_int, for max_unpool2d). Views plus one reduce.

    >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d(return_indices=True)[1].tolist()
    [[[[3]]]]
    """
    return max_pool(cast("Tensor", self), kernel_size, stride, dilation, padding, ceil_mode, return_indices)

  def avg_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride: int | Sequence[int] | None = None,
                 dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False,
                 count_include_pad: bool = True) -> Tensor:
    """The mean of each window over the last 2 dims, or as many as kernel_size has entries; stride defaults to the
    kernel. As torch: count_include_pad counts the zero padding
    in the divisor; the part of a ceil_mode window past the padding never counts. Views plus one reduce.

    >>> Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).avg_pool2d().tolist()
    [[[[2.5]]]]
    """
    return avg_pool(cast("Tensor", self), kernel_size, stride, dilation, padding, ceil_mode, count_include_pad)

  def max_unpool2d(self, indices: Tensor, kernel_size: int | Sequence[int] = (2, 2),
                   stride: int | Sequence[int] | None = None, dilation: int | Sequence[int] = 1,
                   padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
    """The inverse of max_pool2d: each value placed at its index (from return_indices) in a plane of zeros, whose
    size is what the pooling started from (or `output_size`). It compares every input with every output position
    (O(in * out) work). An index outside the plane places nothing (torch raises).

    >>> x, idx = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]]).max_pool2d(return_indices=True)
    >>> x.max_unpool2d(idx).tolist()
    [[[[0.0, 0.0], [0.0, 4.0]]]]
    """
    x = cast("Tensor", self)
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
    return max_unpool(x, indices, size)

  def interpolate(self, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
    """Resample the trailing len(size) dims to `size`, as torch.nn.functional.interpolate: mode "nearest",
    "nearest-exact", or "linear" over every given dim ("bilinear" and "trilinear" name 2 and 3 of them).

    >>> [round(v, 3) for v in Tensor([[[1.0, 3.0]]]).interpolate((4,), align_corners=True)[0, 0].tolist()]
    [1.0, 1.667, 2.333, 3.0]
    """
    x = cast("Tensor", self)
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
    out = interpolate(x._to_float(), size, mode, align_corners)
    if x.dtype.is_float: return out
    # ints keep their dtype, as torch: nearest picks values exactly, linear rounds its blend to the nearest
    return (out if mode.startswith("nearest") else out.round()).cast(x.dtype)

  # ---- normalization, dropout, attention ----

  def normalize(self, p: float = 2.0, dim: int | Sequence[int] = 1, eps: float = 1e-12) -> Tensor:
    """Each vector along `dim` divided by its p-norm (at least eps), as torch.nn.functional.normalize.

    >>> Tensor([[3.0, 4.0], [0.0, 0.0]], dtype="float64").normalize().tolist()
    [[0.6, 0.8], [0.0, 0.0]]
    """
    x = cast("Tensor", self)._to_float()
    norm = x.abs().pow(p).sum(dim, keepdim=True).pow(1 / p) if p != 2 else x.square().sum(dim, keepdim=True).sqrt()
    return x / norm.maximum(eps)

  def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
    """Normalize over `axis` to mean 0 and variance 1 (the biased variance, plus eps), without scale or shift.

    >>> [round(v, 3) for v in Tensor([1.0, 2.0, 3.0]).layernorm().tolist()]
    [-1.225, 0.0, 1.225]
    """
    x = cast("Tensor", self)._to_float()
    centered = x - x.mean(axis, keepdim=True)
    return centered * (centered.square().mean(axis, keepdim=True) + eps).rsqrt()

  def batchnorm(self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                axis: int | Sequence[int] = 1) -> Tensor:
    """(x - mean) * weight * invstd + bias, where mean, invstd, weight and bias run along `axis` (the channels):
    the functional form of batch normalization (nn.BatchNorm computes the statistics).

    >>> Tensor([[1.0, 2.0]]).batchnorm(None, None, Tensor([1.0]), Tensor([2.0]), axis=0).tolist()
    [[0.0, 2.0]]
    """
    x = cast("Tensor", self)
    axes = tuple(x._resolve_axis(a) for a in make_tuple(axis, 1))
    shape = tuple(s if i in axes else 1 for i, s in enumerate(x.shape))
    def along(t: Tensor, what: str) -> Tensor:
      if t.numel() != math.prod(x.shape[a] for a in axes):
        raise ValueError(f"batchnorm: {what} of shape {t.shape} does not match dims {axes} of the input {x.shape}")
      return t.reshape(shape)
    out = x - along(mean, "mean")
    if weight is not None: out = out * along(weight, "weight")
    out = out * along(invstd, "invstd")
    return out + along(bias, "bias") if bias is not None else out

  def dropout(self, p: float = 0.5) -> Tensor:
    """In training (Tensor.training), zero each element with probability p and scale the rest by 1/(1-p); outside
    training, the tensor itself.

    >>> with Tensor.train():
    ...   kept = Tensor.ones(1000).dropout(0.25)
    >>> sorted(set(kept.tolist())), Tensor.ones(2).dropout().tolist()
    ([0.0, 1.3333333730697632], [1.0, 1.0])
    """
    x = cast("Tensor", self)
    if not isinstance(p, (int, float)) or not 0 <= p <= 1:
      raise ValueError(f"dropout: probability p={p!r} must be in [0, 1]")
    if not type(x).training or p == 0: return x
    if p == 1: return x * 0
    keep = type(x).rand(*x.shape, device=x.device) >= p
    return keep.where(x * (1 / (1 - p)), 0)

  def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                   dropout_p: float = 0.0, is_causal: bool = False,
                                   scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v, as torch: scale defaults to 1/sqrt(head dim); a bool attn_mask keeps
    where True, a float one is added; is_causal lets position i attend to positions <= i. Dropout on the weights
    applies in training only (as tinygrad). With enable_gqa, query heads (dim -3) share key/value heads in groups:
    each of the Hk key heads serves Hq / Hk consecutive query heads.

    >>> q = Tensor.ones(1, 2, 4)
    >>> q.scaled_dot_product_attention(q, Tensor([[[1.0], [3.0]]]), is_causal=True).tolist()
    [[[1.0], [2.0]]]
    """
    q = cast("Tensor", self)
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
    scores = (q @ key.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
      rows, cols = q.shape[-2], key.shape[-2]
      attn_mask = type(q).ones(rows, cols, dtype=dtypes.bool, device=q.device).tril()
    if attn_mask is not None:
      scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype.is_bool else scores + attn_mask
    return scores.softmax(-1).dropout(dropout_p) @ value

  # ---- losses ----

  def cross_entropy(self, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0,
                    weight: Tensor | None = None, ignore_index: int = -100) -> Tensor:
    """Cross-entropy of logits (batch, classes, ...) or (classes,) against class indices (ints, the input's shape
    without the class dim) or class probabilities (floats, the input's shape), as torch.nn.functional.cross_entropy:
    per-class `weight`, `label_smoothing`, targets equal to `ignore_index` left out, reduction "mean", "sum" or
    "none". A class index outside [0, classes) is not checked (that needs the data): it picks no class, so its loss
    is only the smoothing term (torch raises).

    >>> round(Tensor([[0.0, 0.0]]).cross_entropy(Tensor([1])).item(), 4)
    0.6931
    """
    x = cast("Tensor", self)
    if x.ndim == 0: raise ValueError("cross_entropy: the input needs a class dim, got a 0-d tensor")
    axis = 1 if x.ndim > 1 else 0
    return _class_loss(x.log_softmax(axis), Y, axis, weight, ignore_index, label_smoothing, reduction, "cross_entropy")

  def nll_loss(self, Y: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
               reduction: str = "mean") -> Tensor:
    """The negative log-likelihood of log-probabilities (batch, classes, ...) or (classes,) at the class indices Y, as
    torch.nn.functional.nll_loss (weights, ignore_index and reductions as cross_entropy).

    >>> Tensor([[-1.0, -2.0], [-3.0, -4.0]]).nll_loss(Tensor([1, 0])).item()
    2.5
    """
    x = cast("Tensor", self)
    if x.ndim == 0: raise ValueError("nll_loss: the input needs a class dim, got a 0-d tensor")
    if Y.dtype.is_float: raise TypeError(f"nll_loss: the target must hold class indices (ints), got {Y.dtype}")
    return _class_loss(x, Y, 1 if x.ndim > 1 else 0, weight, ignore_index, 0.0, reduction, "nll_loss")

  def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross-entropy of logits with the classes in the last dim against class indices Y (tinygrad's): targets equal to
    ignore_index are left out, except that the default -1 leaves nothing out (a -1 target picks no class).

    >>> round(Tensor([[0.0, 0.0], [0.0, 5.0]]).sparse_categorical_crossentropy(Tensor([0, 1])).item(), 4)
    0.3499
    """
    x = cast("Tensor", self)
    if x.ndim == 0: raise ValueError("sparse_categorical_crossentropy: the input needs a class dim, got a 0-d tensor")
    if Y.dtype.is_float: raise TypeError(f"sparse_categorical_crossentropy: Y must hold class indices, got {Y.dtype}")
    return _class_loss(x.log_softmax(-1), Y, x.ndim - 1, None, None if ignore_index == -1 else ignore_index,
                       label_smoothing, reduction, "sparse_categorical_crossentropy")

  def _check_binary_target(self, Y: Tensor, name: str, reduction: str) -> None:
    _check_reduction(reduction, name)
    if Y.shape != cast("Tensor", self).shape:
      raise ValueError(f"{name}: target of shape {Y.shape} must have the input's shape {cast('Tensor', self).shape}")

  def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor:
    """Binary cross-entropy of probabilities against targets in [0, 1], as torch (each log clamped at -100, where the
    gradient is 0).

    >>> round(Tensor([0.5, 0.9]).binary_crossentropy(Tensor([1.0, 1.0])).item(), 4)
    0.3993
    """
    x = cast("Tensor", self)
    x._check_binary_target(Y, "binary_crossentropy", reduction)
    loss = -(Y * _clamped_log(x) + (1 - Y) * _clamped_log(1 - x))
    return _reduce_loss(loss, reduction)

  def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross-entropy of logits (sigmoid inside, computed stably) against targets in [0, 1], with `pos_weight`
    scaling the positive term, as torch's binary_cross_entropy_with_logits.

    >>> round(Tensor([0.0, 100.0]).binary_crossentropy_logits(Tensor([1.0, 1.0])).item(), 4)
    0.3466
    """
    x = cast("Tensor", self)
    x._check_binary_target(Y, "binary_crossentropy_logits", reduction)
    pos = Y * x.logsigmoid()
    loss = -((pos if pos_weight is None else pos * pos_weight) + (1 - Y) * (-x).logsigmoid())
    return _reduce_loss(loss, reduction)
