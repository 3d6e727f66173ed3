"""Layers: plain Python classes holding Tensors, with torch's default initializations and tinygrad's names.

No Module base class is needed: `nn.state.get_parameters(model)` finds every Tensor in attributes, lists and dicts.
Optimizers live in lazytensor.nn.optim, model state and weights on disk in lazytensor.nn.state, gradient clipping in
lazytensor.nn.utils.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lazytensor.dtype import dtypes, least_upper_float, promote_types
from lazytensor.frontend.autocast import widened
from lazytensor.frontend.tensor import Tensor
from lazytensor.helpers import make_tuple, prod
from lazytensor.nn import amp as amp
from lazytensor.nn import lr_scheduler as lr_scheduler
from lazytensor.nn import optim as optim  # nn.optim, nn.state work after `from lazytensor import nn` (tinygrad)
from lazytensor.nn import state as state
from lazytensor.nn import utils as utils
from lazytensor.nn.moe import MoE as MoE
from lazytensor.schedule.index_check import dim_site
from lazytensor.uop.ops import Ops, UOp


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
  return Tensor.uniform(*shape, low=-bound, high=bound)

class Linear:
  """y = x @ W.T + b, with W of shape (out, in) and torch's init (uniform in +-1/sqrt(in))."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
    bound = 1 / math.sqrt(in_features)
    self.weight = _uniform((out_features, in_features), bound)
    self.bias = _uniform((out_features,), bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.T, self.bias)

class _ConvNd:
  def __init__(self, nd: int, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int = 1,
               padding: int | Sequence[int] | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> None:
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"channels {in_channels} -> {out_channels} are not divisible by groups={groups}")
    self.kernel_size = make_tuple(kernel_size, nd)
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    bound = 1 / math.sqrt(in_channels // groups * prod(self.kernel_size))
    self.weight = _uniform((out_channels, in_channels // groups, *self.kernel_size), bound)
    self.bias = _uniform((out_channels,), bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)

class Conv1d(_ConvNd):
  """1-D convolution over (batch, channels, length)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
               padding: int | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> None:
    super().__init__(1, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)

class Conv2d(_ConvNd):
  """2-D convolution over (batch, channels, height, width)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int = 1,
               padding: int | Sequence[int] | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> None:
    super().__init__(2, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)

class Conv3d(_ConvNd):
  """3-D convolution over (batch, channels, depth, height, width)."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int = 1,
               padding: int | Sequence[int] | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> None:
    super().__init__(3, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)

class ConvTranspose2d:
  """Transposed 2-D convolution; the weight is (in, out/groups, kh, kw) as torch's."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int = 1,
               padding: int = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1,
               bias: bool = True) -> None:
    self.kernel_size = make_tuple(kernel_size, 2)
    self.stride, self.padding, self.output_padding = stride, padding, output_padding
    self.dilation, self.groups = dilation, groups
    bound = 1 / math.sqrt(out_channels // groups * prod(self.kernel_size))
    self.weight = _uniform((in_channels, out_channels // groups, *self.kernel_size), bound)
    self.bias = _uniform((out_channels,), bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding,
                              self.output_padding)

class ConvTranspose1d(ConvTranspose2d):
  """Transposed 1-D convolution over (batch, channels, length); the weight is (in, out/groups, k) as torch's."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
               output_padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> None:
    super().__init__(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias)

class BatchNorm:
  """Batch normalization over the channel axis 1 (any rank), with running statistics for eval mode."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
               momentum: float = 0.1) -> None:
    self.eps, self.momentum, self.track_running_stats = eps, momentum, track_running_stats
    self.weight = Tensor.ones(num_features) if affine else None
    self.bias = Tensor.zeros(num_features) if affine else None
    if track_running_stats:
      self.running_mean = Tensor.zeros(num_features).contiguous().realize()
      self.running_var = Tensor.ones(num_features).contiguous().realize()
      self.num_batches_tracked = Tensor.zeros(1, dtype=dtypes.int64).contiguous().realize()
      # statistics, not parameters: optimizers keep them out of the gradient update and realize their new values
      for t in (self.running_mean, self.running_var, self.num_batches_tracked): t.requires_grad = False

  def __call__(self, x: Tensor) -> Tensor:
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if Tensor.training or not self.track_running_stats:
      mean = x.mean(axes)
      var = ((x - mean.reshape(shape)) ** 2).mean(axes)
      if Tensor.training and self.track_running_stats:
        n = prod(x.shape[i] for i in axes)
        unbiased = var.detach() * (n / max(n - 1, 1))
        self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * mean.detach())
        self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * unbiased)
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    else: mean, var = self.running_mean, self.running_var
    invstd = (var + self.eps).rsqrt()
    y = (x - mean.reshape(shape)) * invstd.reshape(shape)
    affine = [] if self.weight is None or self.bias is None else [self.weight, self.bias]
    if affine: y = y * affine[0].reshape(shape) + affine[1].reshape(shape)
    if mean is self.running_mean or not y.requires_grad: return y
    grad = BatchNormGrad(axes)
    return y._apply_uop(lambda v, *u: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, *u), grad), x, mean, invstd, *affine)

@dataclass(frozen=True)
class BatchNormGrad:
  """The vector-Jacobian product of batch normalization with the batch's statistics (a CUSTOM_GRAD's arg, called by
  frontend/gradient.py with the output's gradient dy and the input x, its mean, 1/std and the weight and bias where
  affine): dx = (dy - mean(dy) - x_hat * mean(dy * x_hat)) * invstd * weight, whose two sums over the batch are the
  bias's and the weight's gradients, made in one reduce. Through the statistics' own chain rule it was four reduces
  over x's size (the mean's and the variance's gradients each a reduce of terms that sum to zero) and an elementwise
  pass: batchnorm and relu of 8x64x112x112, forward and backward, 7 kernels -> 4, 26 -> 19 ms (one AVX-512 thread)."""
  axes: tuple[int, ...]

  def __call__(self, ctx: UOp, xu: UOp, mean: UOp, invstd: UOp, *affine: UOp) -> tuple[UOp | None, ...]:
    dy, x = Tensor(ctx), Tensor(xu)
    shape = tuple(1 if i in self.axes else n for i, n in enumerate(x.shape))
    inv = Tensor(invstd).reshape(shape)
    x_hat = (x - Tensor(mean).reshape(shape)) * inv
    # both sums in one kernel reading dy and x once: dy times (1, x_hat) along a new leading axis of 2
    second = Tensor.arange(2, device=x.device).reshape(2, *[1] * x.ndim) == 1
    sum_dy, sum_dy_x_hat = (dy * second.where(x_hat, 1)).sum(tuple(a + 1 for a in self.axes))
    n = prod(x.shape[i] for i in self.axes)
    scale = inv * Tensor(affine[0]).reshape(shape) if affine else inv
    dx = (dy - sum_dy.reshape(shape) * (1 / n) - x_hat * (sum_dy_x_hat.reshape(shape) * (1 / n))) * scale
    return (dx.lazydata, None, None, *((sum_dy_x_hat.lazydata, sum_dy.lazydata) if affine else ()))

BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm

def _normalize(x: Tensor, axes: tuple[int, ...], eps: float, shape: tuple[int, ...], weight: Tensor | None,
               bias: Tensor | None) -> Tensor:
  """x normalized over `axes`, reshaped to `shape`, then times weight plus bias where both are given. A 16-bit float
  x is normalized and scaled in float32 and rounded once, as torch's layer_norm and group_norm: rounded to half at
  each step, a float16 GroupNorm (64 channels, 16x16) was 1.8x as far from float64 (6.3e-4 relative, 3.6e-4 now)."""
  y = (x.float() if x.dtype.is_half else x).layernorm(axes, eps).reshape(shape)
  out = widened(least_upper_float(x.dtype))
  if weight is None or bias is None: return y.cast(out)
  return (y * weight + bias).cast(promote_types(promote_types(out, weight.dtype), bias.dtype))

def _per_channel(ndim: int, weight: Tensor | None, bias: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
  """weight and bias of the channels (dim 1) shaped to broadcast against an input of `ndim` dims."""
  shape = (1, -1) + (1,) * (ndim - 2)
  return None if weight is None else weight.reshape(shape), None if bias is None else bias.reshape(shape)

class LayerNorm:
  """Normalize over the trailing `normalized_shape` dims, then scale and shift elementwise."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True) -> None:
    self.normalized_shape = make_tuple(normalized_shape, 1)
    self.eps = eps
    self.weight = Tensor.ones(*self.normalized_shape) if elementwise_affine else None
    self.bias = Tensor.zeros(*self.normalized_shape) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    n = len(self.normalized_shape)
    if x.shape[-n:] != self.normalized_shape:
      raise ValueError(f"LayerNorm{self.normalized_shape}: input of shape {x.shape} does not end in those dims")
    return _normalize(x, tuple(range(x.ndim - n, x.ndim)), self.eps, x.shape, self.weight, self.bias)

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels of (batch, channels, height, width) at each pixel, as tinygrad's LayerNorm2d (the
  channels-first layer norm of ConvNeXt)."""
  def __init__(self, num_channels: int, eps: float = 1e-5, elementwise_affine: bool = True) -> None:
    super().__init__(num_channels, eps, elementwise_affine)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim != 4: raise ValueError(f"LayerNorm2d: expected (batch, channels, height, width), got shape {x.shape}")
    return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class RMSNorm:
  """x / sqrt(mean(x^2) + eps) over the last dim, times a learned scale."""
  def __init__(self, dim: int, eps: float = 1e-6) -> None:
    self.eps, self.weight = eps, Tensor.ones(dim)

  def __call__(self, x: Tensor) -> Tensor: return x * ((x * x).mean(-1, keepdim=True) + self.eps).rsqrt() * self.weight

class GroupNorm:
  """Normalize groups of channels over (channels in the group, spatial dims)."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
    if num_channels % num_groups: raise ValueError(f"GroupNorm: {num_channels} channels do not split into {num_groups}")
    self.num_groups, self.eps = num_groups, eps
    self.weight = Tensor.ones(num_channels) if affine else None
    self.bias = Tensor.zeros(num_channels) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    grouped = x.reshape(x.shape[0], self.num_groups, -1)
    return _normalize(grouped, (2,), self.eps, x.shape, *_per_channel(x.ndim, self.weight, self.bias))

class InstanceNorm:
  """Normalize each channel of each sample over its spatial dims."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = False) -> None:
    self.eps = eps
    self.weight = Tensor.ones(num_features) if affine else None
    self.bias = Tensor.zeros(num_features) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    return _normalize(x, tuple(range(2, x.ndim)), self.eps, x.shape, *_per_channel(x.ndim, self.weight, self.bias))

class Embedding:
  """A lookup table: integer indices of any shape -> vectors of `embedding_dim` (torch's normal init)."""
  def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
    self.num_embeddings, self.weight = num_embeddings, Tensor.randn(num_embeddings, embedding_dim)

  def __call__(self, idx: Tensor) -> Tensor:
    if idx.dtype.is_float: raise TypeError(f"Embedding: indices must be integers, got {idx.dtype}")
    # the gather pattern (frontend/mixin/index.py): the row whose number equals the index, summed out of a where; the
    # kernel reads that one row (schedule/gather.py). Its gradient sums the other way: each row over the indices naming
    # it. An index outside [0, num_embeddings) raises IndexError when a kernel reading it runs (schedule/index_check.py)
    idx = idx._check_index(dim_site("nn.Embedding", 0, self.num_embeddings, idx.dtype, wraps=False))
    hot = idx.reshape(*idx.shape, 1, 1) == Tensor.arange(self.num_embeddings, device=idx.device).reshape(-1, 1)
    return hot.where(self._table(), 0).sum(-2)

  def _table(self) -> Tensor:
    """The rows looked up (nn/quant.py's int8 embedding computes them from its int8 rows, reading only those named)."""
    return self.weight

def _additive_mask(mask: Tensor, name: str) -> Tensor:
  """An attention mask as torch's MultiheadAttention reads it: a bool mask marks the positions that may NOT be
  attended (-inf added there), a float one is added to the scores."""
  if mask.dtype.is_bool: return mask.where(-math.inf, 0.0)
  if not mask.dtype.is_float: raise TypeError(f"MultiheadAttention: {name} must be bool or float, got {mask.dtype}")
  return mask

class MultiheadAttention:
  """torch.nn.MultiheadAttention, with its signature, parameters (in_proj_weight, or q/k/v_proj_weight when kdim or
  vdim differ from embed_dim, in_proj_bias, out_proj, bias_k, bias_v) and initialization: attention over num_heads
  heads of embed_dim // num_heads. Inputs are (L, N, E), (N, L, E) with batch_first, or unbatched (L, E). Calling it
  returns (output, weights), the weights averaged over heads unless average_attn_weights=False, None when
  need_weights=False. Masks are torch's: attn_mask (L, S) or (N * num_heads, L, S), key_padding_mask (N, S), bool
  (True: not attended) or float (added); is_causal without attn_mask applies the causal mask (torch asks for it)."""
  def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, add_bias_kv: bool = False,
               add_zero_attn: bool = False, kdim: int | None = None, vdim: int | None = None,
               batch_first: bool = False) -> None:
    if num_heads <= 0 or embed_dim % num_heads:
      raise ValueError(f"MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
    self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
    self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
    self.dropout, self.batch_first, self.add_zero_attn = dropout, batch_first, add_zero_attn
    packed = self.kdim == embed_dim and self.vdim == embed_dim
    self.in_proj_weight = Tensor.glorot_uniform(3 * embed_dim, embed_dim) if packed else None
    self.q_proj_weight = None if packed else Tensor.glorot_uniform(embed_dim, embed_dim)
    self.k_proj_weight = None if packed else Tensor.glorot_uniform(embed_dim, self.kdim)
    self.v_proj_weight = None if packed else Tensor.glorot_uniform(embed_dim, self.vdim)
    self.in_proj_bias = Tensor.zeros(3 * embed_dim) if bias else None
    self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
    if bias: self.out_proj.bias = Tensor.zeros(embed_dim)
    std = math.sqrt(2 / (2 * embed_dim))  # xavier_normal of (1, 1, E): fan_in = fan_out = E
    self.bias_k = Tensor.normal(1, 1, embed_dim, std=std) if add_bias_kv else None
    self.bias_v = Tensor.normal(1, 1, embed_dim, std=std) if add_bias_kv else None

  def _projections(self, query: Tensor, key: Tensor, value: Tensor) -> list[Tensor]:
    """q, k, v as (L or S, N, E): the inputs times their weights, plus their biases."""
    ws = list(self.in_proj_weight.chunk(3)) if self.in_proj_weight is not None else \
      [w for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight) if w is not None]
    bs = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None, None, None)
    return [x.linear(w.T, b) for x, w, b in zip((query, key, value), ws, bs)]

  def _mask(self, attn_mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool, shape: tuple[int, ...],
            device: Any) -> Tensor | None:
    """One additive mask of (N, H, L, S) (or broadcast to it) from attn_mask, key_padding_mask and is_causal."""
    N, H, L, S = shape
    if attn_mask is None and is_causal: attn_mask = Tensor.ones(L, S, dtype=dtypes.bool, device=device).triu(1)
    mask = None if attn_mask is None else _additive_mask(attn_mask, "attn_mask")
    if mask is not None and mask.ndim == 3: mask = mask.reshape(N, H, *mask.shape[1:])
    if key_padding_mask is not None:
      pad = _additive_mask(key_padding_mask, "key_padding_mask").reshape(N, 1, 1, -1)
      mask = pad if mask is None else mask + pad
    return mask

  def __call__(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
               need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
               is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
    batched = query.ndim == 3
    if not batched: query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    elif self.batch_first: query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
    if key_padding_mask is not None and not batched: key_padding_mask = key_padding_mask.unsqueeze(0)
    q, k, v = self._projections(query, key, value)
    (L, N, E), H, D = q.shape, self.num_heads, self.head_dim
    if self.bias_k is not None and self.bias_v is not None:
      k, v = k.cat(self.bias_k.expand(1, N, E)), v.cat(self.bias_v.expand(1, N, E))
      attn_mask, key_padding_mask = (None if m is None else m.pad((0, 1)) for m in (attn_mask, key_padding_mask))
    q, k, v = (t.reshape(t.shape[0], N, H, D).permute(1, 2, 0, 3) for t in (q, k, v))  # (N, H, L or S, D)
    if self.add_zero_attn:
      k, v = (t.cat(Tensor.zeros(N, H, 1, D, dtype=t.dtype, device=t.device), dim=2) for t in (k, v))
      attn_mask, key_padding_mask = (None if m is None else m.pad((0, 1)) for m in (attn_mask, key_padding_mask))
    scores = (q * (1 / math.sqrt(D))) @ k.transpose(-1, -2)
    if (mask := self._mask(attn_mask, key_padding_mask, is_causal, (N, H, L, k.shape[2]), q.device)) is not None:
      scores = scores + mask
    weights = scores.softmax(-1).dropout(self.dropout)  # torch returns the weights after dropout
    out = weights @ v  # (N, H, L, D)
    out = self.out_proj(out.permute(2, 0, 1, 3).reshape(L, N, E))
    out = out.squeeze(1) if not batched else out.transpose(0, 1) if self.batch_first else out
    if not need_weights: return out, None
    w = weights.mean(1) if average_attn_weights else weights
    return out, (w.squeeze(0) if not batched else w)

class _RNNCell:
  """The weights of a recurrent cell with GATES gates, torch's names and init (uniform within 1/sqrt(hidden))."""
  GATES = 1

  def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
    bound, rows = 1 / math.sqrt(hidden_size), self.GATES * hidden_size
    self.hidden_size = hidden_size
    self.weight_ih = _uniform((rows, input_size), bound)
    self.weight_hh = _uniform((rows, hidden_size), bound)
    self.bias_ih = _uniform((rows,), bound) if bias else None
    self.bias_hh = _uniform((rows,), bound) if bias else None

class LSTMCell(_RNNCell):
  """One LSTM step: (x, (h, c)) -> (h', c'), gates in torch's order i, f, g, o."""
  GATES = 4

  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    if hc is None:
      zeros = Tensor.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
      hc = (zeros, zeros)
    h, c = hc
    gates = x.linear(self.weight_ih.T, self.bias_ih) + h.linear(self.weight_hh.T, self.bias_hh)
    i, f, g, o = gates.chunk(4, dim=1)
    c_next = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c_next.tanh(), c_next

class GRUCell(_RNNCell):
  """One GRU step: (x, h) -> h', gates in torch's order r, z, n (n = tanh(x_n + r * h_n), h' = (1 - z) n + z h)."""
  GATES = 3

  def __call__(self, x: Tensor, h: Tensor | None = None) -> Tensor:
    if h is None: h = Tensor.zeros(x.shape[0], self.hidden_size, dtype=x.dtype, device=x.device)
    x_r, x_z, x_n = x.linear(self.weight_ih.T, self.bias_ih).chunk(3, dim=1)
    h_r, h_z, h_n = h.linear(self.weight_hh.T, self.bias_hh).chunk(3, dim=1)
    r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return (1 - z) * n + z * h
