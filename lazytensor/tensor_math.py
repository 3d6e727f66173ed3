"""Tensor operations composed from other tensor ops: matmul, convolution windows, power, random bits.

They take and return Tensors but never import tensor.py at run time (tensor.py imports them), building new
tensors through methods of their arguments.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lazytensor.device import Device
from lazytensor.dtype import dtypes, promote_types
from lazytensor.helpers import flatten, make_tuple

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

def matmul(x: Tensor, w: Tensor) -> Tensor:
  """numpy matmul: 1-D operands gain and then lose a dimension, batch dimensions broadcast."""
  if not isinstance(w, type(x)): raise TypeError(f"matmul: expected a Tensor, got {type(w).__name__}")
  if x.ndim == 0 or w.ndim == 0:
    raise ValueError(f"matmul: both operands need at least 1 dimension, got {x.shape} and {w.shape}")
  a = x.reshape(1, x.shape[0]) if x.ndim == 1 else x
  b = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
  if a.shape[-1] != b.shape[-2]:
    raise ValueError(f"matmul: shapes {x.shape} and {w.shape} do not align: {a.shape[-1]} != {b.shape[-2]}")
  batch_a, batch_b = a.shape[:-2], b.shape[:-2]
  nb = max(len(batch_a), len(batch_b))
  for da, db in zip((1,) * (nb - len(batch_a)) + batch_a, (1,) * (nb - len(batch_b)) + batch_b):
    if da != db and 1 not in (da, db):
      raise ValueError(f"matmul: shapes {x.shape} and {w.shape} have batch dimensions {batch_a} and {batch_b} "
                       "that do not broadcast")
  dt = promote_types(a.dtype, b.dtype)
  n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
  b = _packed_panels(b.cast(dt), n)
  # (..., n, 1, k) * (..., 1, m, k) summed over k: one reduce kernel, no copies of either operand
  prod_ = a.cast(dt).reshape(*a.shape[:-1], 1, k) * b.transpose(-1, -2).reshape(*b.shape[:-2], 1, m, k)
  out = prod_.sum(-1, dtype=dt)
  if x.ndim == 1: out = out.reshape(*out.shape[:-2], m)
  if w.ndim == 1: out = out.reshape(*out.shape[:-1])
  return out

def _packed_panels(b: Tensor, n: int) -> Tensor:
  """B (..., k, m) re-laid as column panels (..., m/p, k, p) in a buffer of their own, viewed back as (..., k, m).

  A register tile reads p columns of B for every k; in B's own layout each of those reads is a new row, a new page,
  so large matmuls become TLB- and cache-bound (2048: 50 GFLOP/s). In panels the reads are sequential (96 GFLOP/s),
  for one extra copy kernel (about 1% of the matmul). Only devices that declare a panel width pack, and only when the
  matrices are large enough for it to pay."""
  p = Device[b.device].renderer.matmul_panel
  k, m = b.shape[-2], b.shape[-1]
  if not p or m % p or m < 2 * p or k < 256 or n < 64 or n * k * m < (1 << 27): return b
  lead = tuple(range(b.ndim - 2))
  panels = b.reshape(*b.shape[:-1], m // p, p).permute(*lead, b.ndim - 1, b.ndim - 2, b.ndim).contiguous()
  return panels.permute(*lead, b.ndim - 1, b.ndim - 2, b.ndim).reshape(*b.shape)

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
    raise ValueError(f"window {tuple(kernel)} (dilation {tuple(dilation)}) is larger than input {spatial}")
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

def _conv_padding(padding: int | Sequence[int], nk: int) -> list[tuple[int, int]]:
  if isinstance(padding, int): return [(padding, padding)] * nk
  if len(padding) == nk: return [(p, p) for p in padding]
  if len(padding) == 2 * nk: return [(padding[2 * j], padding[2 * j + 1]) for j in range(nk)]
  raise ValueError(f"conv: padding {padding} must be an int, {nk} ints, or {2 * nk} ints")

def conv(x: Tensor, weight: Tensor, bias: Tensor | None, groups: int, stride: int | Sequence[int],
         dilation: int | Sequence[int], padding: int | Sequence[int]) -> Tensor:
  """N-d convolution (cross-correlation) of x (bs, cin, *spatial) with weight (cout, cin/groups, *kernel)."""
  nk = weight.ndim - 2
  if nk < 1 or x.ndim != nk + 2: raise ValueError(f"conv: input {x.shape} and weight {weight.shape} do not match")
  bs, cin = x.shape[:2]
  cout, cin_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
  if groups <= 0 or cin != cin_g * groups or cout % groups:
    raise ValueError(f"conv: input channels {cin} != weight channels {cin_g} * groups {groups} (weight {weight.shape})")
  strides, dilations = make_tuple(stride, nk), make_tuple(dilation, nk)
  if len(strides) != nk or len(dilations) != nk or any(not isinstance(v, int) or v <= 0 for v in strides + dilations):
    raise ValueError(f"conv: stride {stride} and dilation {dilation} must be positive ints, one or {nk} of them")
  if bias is not None and bias.shape != (cout,):
    raise ValueError(f"conv: bias of shape {bias.shape} does not match the {cout} output channels "
                     f"of weight {weight.shape}")
  pads = _conv_padding(padding, nk)
  xp = x.pad([(0, 0), (0, 0)] + pads)
  win = pool_windows(xp, kernel, strides, dilations)  # (bs, cin, *o, *k)
  outs = win.shape[2:2 + nk]
  rcout = cout // groups
  # (bs, groups, rcout, *o, cin_g, *k) against weight (1, groups, rcout, *1, cin_g, *k), summed over cin_g and k
  win = win.reshape(bs, groups, cin_g, 1, *outs, *kernel).expand(bs, groups, cin_g, rcout, *outs, *kernel)
  win = win.permute(0, 1, 3, *[4 + j for j in range(nk)], 2, *[4 + nk + j for j in range(nk)])
  w = weight.reshape(1, groups, rcout, *[1] * nk, cin_g, *kernel)
  out = (win * w).sum([-1 - j for j in range(nk + 1)]).reshape(bs, cout, *outs)
  return out if bias is None else out + bias.reshape(1, -1, *[1] * nk)

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
    raise ValueError(f"integer tensor ({x.dtype}) to the negative power {y}: the result is not an integer; "
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
  zero = a == 0
  mag = (b * zero.where(1.0, a.abs()).log2()).exp2()
  mag = zero.where((b < 0).where(float("inf"), 0.0).cast(mag.dtype), mag)
  b_int = b.trunc() == b
  b_odd = b_int & ((b.abs() % 2) == 1)
  neg = a < 0
  signed = (neg & b_odd).where(-mag, mag)
  ret = (neg & b_int.logical_not()).where(float("nan"), signed)
  # x ** 0 is 1 also for x = 0, inf and NaN; elsewhere the formula gives 1 itself, and d/db = log|a| flows through it
  return ((b == 0) & (zero | ret.ne(ret))).where(1.0, ret)

def threefry_bits(counter: Tensor, seed: int, stream: int) -> Tensor:
  """32 random bits per element of `counter` (uint32) from Threefry-2x32 with 20 rounds, keyed by (seed, stream)."""
  mask = 0xFFFFFFFF
  k0, k1 = seed & mask, stream & mask
  ks = (k0, k1, 0x1BD11BDA ^ k0 ^ k1)
  rotations = (13, 15, 26, 6, 17, 29, 16, 24)
  x0, x1 = counter + ks[0], counter.zeros_like() + ks[1]
  for block in range(5):
    for r in rotations[(block % 2) * 4:(block % 2) * 4 + 4]:
      x0 = x0 + x1
      x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0
    x0 = x0 + ks[(block + 1) % 3]
    x1 = x1 + ((ks[(block + 2) % 3] + block + 1) & mask)
  return x0 ^ x1
