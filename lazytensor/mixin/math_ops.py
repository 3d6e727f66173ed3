"""Tensor operations composed from other tensor ops: matmul, convolution windows, power, random bits.

They take and return Tensors but never import tensor.py at run time (tensor.py imports them), building new
tensors through methods of their arguments.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lazytensor.dtype import dtypes, promote_types
from lazytensor.helpers import ArgumentError, flatten, make_tuple, prod

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

def matmul(x: Tensor, w: Tensor) -> Tensor:
  """numpy matmul: 1-D operands gain and then lose a dimension, batch dimensions broadcast."""
  if not isinstance(w, type(x)): raise TypeError(f"matmul: expected a Tensor, got {type(w).__name__}")
  if x.ndim == 0 or w.ndim == 0:
    raise ArgumentError(f"matmul: both operands need at least 1 dimension, got {x.shape} and {w.shape}")
  a = x.reshape(1, x.shape[0]) if x.ndim == 1 else x
  b = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
  if a.shape[-1] != b.shape[-2]:
    raise ArgumentError(f"matmul: shapes {x.shape} and {w.shape} do not align: {a.shape[-1]} != {b.shape[-2]}")
  batch_a, batch_b = a.shape[:-2], b.shape[:-2]
  nb = max(len(batch_a), len(batch_b))
  for da, db in zip((1,) * (nb - len(batch_a)) + batch_a, (1,) * (nb - len(batch_b)) + batch_b):
    if da != db and 1 not in (da, db):
      raise ArgumentError(f"matmul: shapes {x.shape} and {w.shape} have batch dimensions {batch_a} and {batch_b} "
                          "that do not broadcast")
  dt = promote_types(a.dtype, b.dtype)
  k, m = a.shape[-1], b.shape[-1]
  b = b.cast(dt)
  # (..., n, 1, k) * (..., 1, m, k) summed over k: one reduce kernel; the scheduler may read B from a re-laid copy
  # where the device's heuristics ask for one (engine/schedule.pack_operands)
  prod_ = a.cast(dt).reshape(*a.shape[:-1], 1, k) * b.transpose(-1, -2).reshape(*b.shape[:-2], 1, m, k)
  out = prod_.sum(-1, dtype=dt)
  if x.ndim == 1: out = out.reshape(*out.shape[:-2], m)
  if w.ndim == 1: out = out.reshape(*out.shape[:-1])
  return out

def _window_width(i: int, k: int, s: int, d: int, o: int) -> int:
  # the repeated row must hold every window start: w >= o*s and w = i + d (mod i) so that row a begins at a*d
  w = i + d
  if o * s > w: w += i * math.ceil((o * s - w) / i)
  return w

def pool_windows(x: Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
  """Sliding windows over the trailing dims as a view: (..., *i) -> (..., *o, *k), without copying.

  The input is repeated along each dim and re-read with a row length of i+d, which shifts each repetition by d:
  element (o, k) of a dim lands on x[o*s + k*d].
  """
  nk = len(kernel)
  lead, spatial = x.shape[:-nk], x.shape[-nk:]
  nl = len(lead)
  outs = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(spatial, kernel, stride, dilation)]
  if any(o <= 0 for o in outs):
    raise ArgumentError(f"window {tuple(kernel)} (dilation {tuple(dilation)}) is larger than input {spatial}")
  widths = [_window_width(i, k, s, d, o) for i, k, s, d, o in zip(spatial, kernel, stride, dilation, outs)]
  reps = [math.ceil(k * w / i) for i, k, w in zip(spatial, kernel, widths)]
  x = x.reshape(*lead, *flatten((1, i) for i in spatial)).expand(*lead, *flatten((r, i) for r, i in zip(reps, spatial)))
  x = x.reshape(*lead, *[r * i for r, i in zip(reps, spatial)])
  x = x.shrink([None] * nl + [(0, k * w) for k, w in zip(kernel, widths)]).reshape(*lead, *flatten(zip(kernel, widths)))
  x = x.shrink([None] * nl + flatten(((0, k), (0, o * s)) for k, o, s in zip(kernel, outs, stride)))
  x = x.reshape(*lead, *flatten((k, o, s) for k, o, s in zip(kernel, outs, stride)))
  x = x.shrink([None] * nl + flatten(((0, k), (0, o), (0, 1)) for k, o in zip(kernel, outs)))
  x = x.reshape(*lead, *flatten(zip(kernel, outs)))
  return x.permute(*range(nl), *[nl + 2 * j + 1 for j in range(nk)], *[nl + 2 * j for j in range(nk)])

Padding = int | Sequence[int] | str

def conv_padding(padding: Padding, kernel: Sequence[int], dilation: Sequence[int], stride: Sequence[int],
                 name: str = "conv", crop: bool = False) -> list[tuple[int, int]]:
  """(before, after) for each spatial dim, from torch's forms: an int, one int per dim, 2 ints per dim in torch's
  flat order (last dim first: left, right, top, bottom, ...), or "valid" / "same" (odd totals pad one more after,
  as torch). With crop, negative amounts are allowed and crop the input (as tinygrad's conv2d)."""
  nk = len(kernel)
  if isinstance(padding, str):
    if padding == "valid": return [(0, 0)] * nk
    if padding != "same": raise ValueError(f"{name}: padding {padding!r} must be 'same', 'valid' or ints")
    if any(s != 1 for s in stride): raise ValueError(f"{name}: padding='same' needs stride 1, got stride {stride}")
    totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return [(t // 2, t - t // 2) for t in totals]
  flat = (padding,) * nk if isinstance(padding, int) else tuple(padding)
  if any(not isinstance(p, int) or (p < 0 and not crop) for p in flat) or len(flat) not in (nk, 2 * nk):
    raise ValueError(f"{name}: padding {padding} must be {'an' if crop else 'a non-negative'} int, {nk} of them, or "
                     f"{2 * nk} (torch's flat order, last dim first)")
  if len(flat) == nk: return [(p, p) for p in flat]
  return [(flat[2 * j], flat[2 * j + 1]) for j in reversed(range(nk))]

def conv_params(v: int | Sequence[int], nk: int, what: str, name: str = "conv") -> tuple[int, ...]:
  """stride or dilation: one positive int for every spatial dim, or one each."""
  vals = make_tuple(v, nk)
  if len(vals) != nk or any(not isinstance(x, int) or x <= 0 for x in vals):
    raise ValueError(f"{name}: {what} {v} must be positive ints, one or {nk} of them")
  return vals

def _check_conv_ranks(x: Tensor, weight: Tensor, name: str) -> int:
  nk = weight.ndim - 2
  if nk < 1 or x.ndim != nk + 2:
    raise ValueError(f"{name}: input {x.shape} and weight {weight.shape} do not match: a weight of {weight.ndim} dims "
                     f"needs an input of {weight.ndim} dims (batch, channels, *spatial)")
  return nk

def conv(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, stride: int | Sequence[int],
         dilation: int | Sequence[int], padding: Padding, name: str = "conv") -> Tensor:
  """N-d convolution (cross-correlation) of x (bs, cin, *spatial) with weight (cout, cin/groups, *kernel)."""
  nk = _check_conv_ranks(x, weight, name)
  bs, cin = x.shape[:2]
  cout, cin_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
  if not isinstance(groups, int) or groups <= 0 or cin != cin_g * groups or cout % groups:
    raise ValueError(f"{name}: input channels {cin} != weight channels {cin_g} * groups {groups} "
                     f"(weight {weight.shape})")
  strides, dilations = conv_params(stride, nk, "stride", name), conv_params(dilation, nk, "dilation", name)
  if bias is not None and bias.shape != (cout,):
    raise ValueError(f"{name}: bias of shape {bias.shape} does not match the {cout} output channels "
                     f"of weight {weight.shape}")
  xp = x.pad([(0, 0), (0, 0)] + conv_padding(padding, kernel, dilations, strides, name, crop=True))
  win = pool_windows(xp, kernel, strides, dilations)  # (bs, cin, *o, *k)
  outs = win.shape[2:2 + nk]
  rcout = cout // groups
  # (bs, groups, rcout, *o, cin_g, *k) against weight (1, groups, rcout, *1, cin_g, *k), summed over cin_g and k
  win = win.reshape(bs, groups, cin_g, 1, *outs, *kernel).expand(bs, groups, cin_g, rcout, *outs, *kernel)
  win = win.permute(0, 1, 3, *[4 + j for j in range(nk)], 2, *[4 + nk + j for j in range(nk)])
  w = weight.reshape(1, groups, rcout, *[1] * nk, cin_g, *kernel)
  out = (win * w).sum([-1 - j for j in range(nk + 1)]).reshape(bs, cout, *outs)
  return out if bias is None else out + bias.reshape(1, -1, *[1] * nk)

def conv_transpose(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, stride: int | Sequence[int],
                   dilation: int | Sequence[int], padding: int | Sequence[int],
                   output_padding: int | Sequence[int]) -> Tensor:
  """The transpose (gradient) of conv: x (bs, cin, *spatial), weight (cin, cout/groups, *kernel). The input is spread
  out by the stride (zeros between its elements, as views), then convolved with the flipped kernel."""
  name = "conv_transpose"
  nk = _check_conv_ranks(x, weight, name)
  cin, kernel = weight.shape[0], weight.shape[2:]
  if not isinstance(groups, int) or groups <= 0 or x.shape[1] != cin or cin % groups:
    raise ValueError(f"{name}: input channels {x.shape[1]} do not match weight {weight.shape} with groups {groups}")
  strides, dilations = conv_params(stride, nk, "stride", name), conv_params(dilation, nk, "dilation", name)
  pads = make_tuple(padding, nk) if isinstance(padding, (int, tuple, list)) else ()
  if len(pads) != nk or any(not isinstance(p, int) or p < 0 for p in pads):
    raise ValueError(f"{name}: padding {padding} must be a non-negative int or {nk} of them")
  out_pads = make_tuple(output_padding, nk)
  if len(out_pads) != nk or any(not 0 <= op < max(s, d) for op, s, d in zip(out_pads, strides, dilations)):
    raise ValueError(f"{name}: output_padding {output_padding} must be non-negative and smaller than the stride "
                     f"{strides} or the dilation {dilations}")
  bs, spatial = x.shape[0], x.shape[2:]
  if any(s > 1 for s in strides):
    x = x.reshape(bs, cin, *flatten((i, 1) for i in spatial))
    x = x.pad([(0, 0), (0, 0)] + flatten(((0, 0), (0, s - 1)) for s in strides))
    x = x.reshape(bs, cin, *[i * s for i, s in zip(spatial, strides)])
    x = x.shrink([None, None] + [(0, (i - 1) * s + 1) for i, s in zip(spatial, strides)])
  cin_g, cout_g = cin // groups, weight.shape[1]
  w = weight.reshape(groups, cin_g, cout_g, *kernel).transpose(1, 2).reshape(groups * cout_g, cin_g, *kernel)
  w = w.flip(tuple(range(2, 2 + nk)))
  # the flipped kernel slides over the spread input with d*(k-1) - p more on each side (negative: cropped)
  edges = [d * (k - 1) - p for k, d, p in zip(kernel, dilations, pads)]
  x = x.pad([(0, 0), (0, 0)] + [(e, e + op) for e, op in zip(edges, out_pads)])
  return conv(x, w, bias, groups, 1, dilations, 0, name)

# ---- pooling ----

def pool_setup(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
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

def _pool_pad(x: Tensor, pads: Sequence[tuple[int, int]], extras: Sequence[int], value: float) -> Tensor:
  lead = [(0, 0)] * (x.ndim - len(pads))
  return x.pad(lead + [(b, a + e) for (b, a), e in zip(pads, extras)], value=value)

def max_pool(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
             dilation: int | Sequence[int], padding: int | Sequence[int], ceil_mode: bool,
             return_indices: bool) -> Tensor | tuple[Tensor, Tensor]:
  """The largest value of each window (padding never wins) and, with return_indices, the flat index of the first
  such value in its (unpadded) input plane, as torch."""
  kernel, strides, dilations, pads, extras = pool_setup(x, kernel_size, stride, dilation, padding, ceil_mode,
                                                        "max_pool2d")
  nk, spatial = len(kernel), x.shape[-len(kernel):]
  lowest = -math.inf if x.dtype.is_float else x.dtype.min()
  win = pool_windows(_pool_pad(x, pads, extras, lowest), kernel, strides, dilations)
  kaxes = tuple(range(-nk, 0))
  out = win.max(kaxes)
  if not return_indices: return out
  plane = prod(spatial)
  positions = pool_windows(_pool_pad(type(x).arange(plane, device=x.device).reshape(spatial), pads, extras, plane),
                           kernel, strides, dilations)
  peak = out.reshape(*out.shape, *[1] * nk).detach()
  hit = (win == peak) | ((win != win) & (peak != peak)) if x.dtype.is_float else win == peak
  return out, hit.where(positions, plane).min(kaxes).cast(dtypes.default_int)

def avg_pool(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None,
             dilation: int | Sequence[int], padding: int | Sequence[int], ceil_mode: bool,
             count_include_pad: bool) -> Tensor:
  """The mean of each window; the divisor counts the padding with count_include_pad (never ceil_mode's extra)."""
  kernel, strides, dilations, pads, extras = pool_setup(x, kernel_size, stride, dilation, padding, ceil_mode,
                                                        "avg_pool2d")
  x = x._to_float()
  kaxes = tuple(range(-len(kernel), 0))
  total = pool_windows(_pool_pad(x, pads, extras, 0.0), kernel, strides, dilations).sum(kaxes)
  if not any(extras) and (count_include_pad or all(p == (0, 0) for p in pads)): return total / prod(kernel)
  # the divisor counts the window's positions inside the input (and the padding): the same windows over ones, so
  # that it is computed in the same loop as the sum
  inside = x.ones_like().pad([(0, 0)] * (x.ndim - len(kernel)) + list(pads), value=1.0 if count_include_pad else 0.0)
  count = pool_windows(_pool_pad(inside, [(0, 0)] * len(pads), extras, 0.0), kernel, strides, dilations).sum(kaxes)
  return total / count

def max_unpool(x: Tensor, indices: Tensor, out_spatial: Sequence[int]) -> Tensor:
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

def interp_weights(n_in: int, n_out: int, mode: str, align_corners: bool) -> np.ndarray:
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

def interpolate(x: Tensor, size: Sequence[int], mode: str, align_corners: bool) -> Tensor:
  """Resample the trailing len(size) dims, one dim at a time: a repeat of each element (a view) when that is what
  nearest asks for, else a reduce against the dim's interpolation weights."""
  for d, n_out in zip(range(x.ndim - len(size), x.ndim), size):
    n_in = x.shape[d]
    if n_in == n_out: continue
    moved = x.transpose(d, -1)
    w = interp_weights(n_in, n_out, mode, align_corners)
    k = n_out // n_in
    if mode.startswith("nearest") and n_out % n_in == 0 and (w.argmax(1) == np.arange(n_out) // k).all():
      out = moved.unsqueeze(-1).expand(*moved.shape, k).reshape(*moved.shape[:-1], n_out)
    else: out = (moved.unsqueeze(-2) * type(x)(w, device=x.device).cast(x.dtype)).sum(-1)
    x = out.transpose(d, -1)
  return x

# ---- scans and sorting ----

# a scan axis longer than SCAN_SPLIT runs in blocks of about sqrt(n), at most SCAN_BLOCK, instead of one O(n^2) reduce
SCAN_SPLIT = 512
SCAN_BLOCK = 256

def _prefix_windows(x: Tensor, identity: Any) -> Tensor:
  """(..., n) -> (..., n, n): row i holds x[..., :i+1] after n-1-i copies of identity, as a view."""
  n = x.shape[-1]
  return pool_windows(x.pad([(0, 0)] * (x.ndim - 1) + [(n - 1, 0)], value=identity), (n,), (1,), (1,))

def scan(x: Tensor, reduce: Callable[[Tensor, int], Tensor], identity: Any) -> Tensor:
  """Inclusive scan of an associative `reduce` along the last axis.

  Up to SCAN_SPLIT elements it is one reduce over each output's prefix window (O(n^2) work, one kernel). Longer axes
  split into blocks of b = min(sqrt(n), SCAN_BLOCK): a scan inside each block, an exclusive scan of the block totals
  (recursively), and each block's carry combined into it: O(n b) work in a few kernels per level."""
  n = x.shape[-1]
  if n <= SCAN_SPLIT: return reduce(_prefix_windows(x, identity), -1)
  b = min(math.isqrt(n - 1) + 1, SCAN_BLOCK)
  a = -(-n // b)
  lead = [(0, 0)] * (x.ndim - 1)
  blocks = x.pad(lead + [(0, a * b - n)], value=identity).reshape(*x.shape[:-1], a, b)
  inner = reduce(_prefix_windows(blocks, identity), -1)
  # shifting the totals by one makes the scan exclusive: block j gets the combination of blocks 0..j-1
  carry = scan(reduce(blocks, -1).pad(lead + [(1, -1)], value=identity), reduce, identity)
  both = type(x).stack(carry.unsqueeze(-1).expand(inner.shape), inner, dim=-1)
  return reduce(both, -1).reshape(*x.shape[:-1], a * b).shrink([None] * (x.ndim - 1) + [(0, n)])

def _select(values: Tensor, mask: Tensor, axis: int) -> Tensor:
  """The one value along `axis` where mask is true: a sum for floats (so the gradient reaches only that value), a max
  otherwise (no promotion of ints, and it works for bools)."""
  if values.dtype.is_float: return mask.where(values, 0).sum(axis, dtype=values.dtype)
  return mask.where(values, values.dtype.min() if values.dtype.is_int else False).max(axis)

def cum_extreme(x: Tensor, largest: bool) -> tuple[Tensor, Tensor]:
  """cummax (cummin) along the last axis: the values and the index of the last element equal to each, NaN counting
  as the largest, as torch. That index is the last position up to here whose element equals the running extreme
  there (any later one would have raised it), so it is a running max of positions: both are scans."""
  n = x.shape[-1]
  key = x if largest else -x if x.dtype.is_float else x.logical_not() if x.dtype.is_bool else ~x
  peak = scan(key, lambda t, ax: t.max(ax), -math.inf if key.dtype.is_float else key.dtype.min() if
              key.dtype.is_int else False)
  same = (key == peak) | ((key != key) & (peak != peak)) if key.dtype.is_float else key == peak
  positions = type(x).arange(n, device=x.device)
  idx = scan(same.where(positions, -1), lambda t, ax: t.max(ax), -1)
  if n > SCAN_SPLIT:  # the running extreme itself: its gradient splits between equal elements
    values = peak if largest else -peak if x.dtype.is_float else peak.logical_not() if x.dtype.is_bool else ~peak
  else:  # picked from each prefix at the index, so that the gradient goes there alone, as torch's
    values = _select(_prefix_windows(x, 0), _prefix_windows(positions, -1) == idx.unsqueeze(-1), -1)
  return values, idx.cast(dtypes.default_int)

def sort_ranks(x: Tensor, descending: bool) -> Tensor:
  """Where each element along the last axis lands in a stable sort (NaN sorts as the largest, as torch): the number
  of elements that sort before it. One O(n^2) comparison reduce."""
  n = x.shape[-1]
  if x.dtype.is_bool: x = x.cast(dtypes.int8)
  mine, other = x.unsqueeze(-1), x.unsqueeze(-2)  # (..., i, 1) and (..., 1, j)
  before = other > mine if descending else other < mine
  same = mine == other
  if x.dtype.is_float:
    nan_mine, nan_other = mine != mine, other != other
    before = before | ((nan_other & nan_mine.logical_not()) if descending else (nan_mine & nan_other.logical_not()))
    same = same | (nan_mine & nan_other)
  ar = type(x).arange(n, device=x.device)
  earlier = ar.unsqueeze(0) < ar.unsqueeze(1)  # j < i
  return (before | (same & earlier)).sum(-1)

def take_ranked(x: Tensor, ranks: Tensor, k: int) -> tuple[Tensor, Tensor]:
  """The elements of ranks 0..k-1 along the last axis, and their indices."""
  n = x.shape[-1]
  slot = ranks.unsqueeze(-2) == type(x).arange(k, device=x.device).unsqueeze(-1)  # (..., k, n)
  values = _select(x.unsqueeze(-2), slot, -1)
  return values, _select(type(x).arange(n, device=x.device), slot, -1).cast(dtypes.default_int)

def _int_pow(x: Tensor, e: int) -> Tensor:
  # square-and-multiply, unrolled at trace time: exact for ints, a few fused multiplies for floats
  result, base = None, x
  while e:
    if e & 1: result = base if result is None else result * base
    e >>= 1
    if e: base = base * base
  return result if result is not None else x.ones_like()

def tensor_pow(x: Tensor, y: Any, reverse: bool) -> Tensor:
  """x ** y with numpy/torch semantics for dtypes, signs and integer exponents."""
  if not reverse and isinstance(y, int) and not isinstance(y, bool) and y < 0 and not x.dtype.is_float:
    raise ArgumentError(f"integer tensor ({x.dtype}) to the negative power {y}: the result is not an integer; "
                     "cast to float first")
  if not reverse and isinstance(y, int) and not isinstance(y, bool) and 0 <= y <= 64:
    if x.dtype.is_bool: return _int_pow(x.cast(dtypes.default_int), y)
    return _int_pow(x, y)
  if not reverse and isinstance(y, float) and y == 0.5: return x.sqrt()
  a, b = x._broadcasted(y, reverse)
  if not a.dtype.is_float:
    # int ** int: compute in float64 (exact below 2**53) and round back
    out = _float_pow(a.cast(dtypes.float64), b.cast(dtypes.float64)).round()
    return out.cast(a.dtype)
  return _float_pow(a, b)

def _float_pow(a: Tensor, b: Tensor) -> Tensor:
  """|a| ** b as exp2(b * log2|a|), with the sign and the special cases patched in by wheres. A zero base never
  reaches log2: its -inf would make the chain rule NaN where the gradient is 0 (e.g. of x.abs() ** 1.5 at 0)."""
  zero, neg = a == 0, a < 0
  b_int = b.trunc() == b
  # a negative base to a fractional power is NaN; its log2 makes it so, and its gradients NaN too, as torch's
  mag = (b * zero.where(1.0, (neg & b_int.logical_not()).where(a, a.abs())).log2()).exp2()
  mag = zero.where((b < 0).where(float("inf"), 0.0).cast(mag.dtype), mag)
  b_odd = b_int & ((b.abs() % 2) == 1)
  ret = (neg & b_odd).where(-mag, mag)
  # x ** 0 is 1 also for x = 0, inf and NaN; elsewhere the formula gives 1 itself, and d/db = log|a| flows through it
  return ((b == 0) & (zero | ret.ne(ret))).where(1.0, ret)

def threefry_bits(counter: Tensor, seed: Tensor, stream: Tensor) -> Tensor:
  """32 random bits per element of `counter` (uint32) from Threefry-2x32 with 20 rounds, keyed by (seed, stream)
  (one-element uint32 tensors, read by the kernel: a replayed kernel draws from the stream its buffer holds then)."""
  mask = 0xFFFFFFFF
  k0, k1 = seed, stream
  ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
  rotations = (13, 15, 26, 6, 17, 29, 16, 24)
  x0, x1 = counter + ks[0], counter.zeros_like() + ks[1]
  for block in range(5):
    for r in rotations[(block % 2) * 4:(block % 2) * 4 + 4]:
      x0 = x0 + x1
      x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0
    x0 = x0 + ks[(block + 1) % 3]
    x1 = x1 + ((ks[(block + 2) % 3] + block + 1) & mask)
  return x0 ^ x1
