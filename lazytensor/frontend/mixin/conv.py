"""Convolutions: views of the input plus one reduce (RearrangeMixin._pool_windows), never an im2col buffer, with
their gradients stated as convolutions.

Through the chain rule alone, the gradient of a convolution's input is the gradient times the weights at every
(position, tap) of every window (a buffer kernel-size times the input's), then summed back over the windows that
overlap each position: 16x32x32x32 by 64x3x3, forward and backward on one AVX2 thread, 0.06x torch. `ConvGrad` states
it as what it is, the transposed convolution of the output's gradient with the same weights (one kernel, the
forward's speed); the weights' gradient stays the chain rule's, one reduce of the input windows times the gradient.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from lazytensor.frontend.autocast import low_precision
from lazytensor.frontend.mixin.rearrange import window_counts, window_moves
from lazytensor.frontend.mixin.reduce import ReduceMixin
from lazytensor.helpers import flatten, make_tuple
from lazytensor.uop.ops import Ops, UOp

# a convolution is views and a sum of products (the reduce mixin): nn.py, above it, builds the methods on this module
TensorT = TypeVar("TensorT", bound=ReduceMixin)

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

def check_conv_ranks(x: TensorT, weight: TensorT, name: str) -> int:
  nk = weight.ndim - 2
  if nk < 1 or x.ndim != nk + 2:
    raise ValueError(f"{name}: input {x.shape} and weight {weight.shape} do not match: a weight of {weight.ndim} dims "
                     f"needs an input of {weight.ndim} dims (batch, channels, *spatial)")
  return nk

def conv(x: TensorT, weight: TensorT, bias: TensorT | None, groups: int, stride: int | Sequence[int],
         dilation: int | Sequence[int], padding: Padding, name: str = "conv") -> TensorT:
  """N-d convolution (cross-correlation) of x (bs, cin, *spatial) with weight (cout, cin/groups, *kernel)."""
  nk = check_conv_ranks(x, weight, name)
  bs, cin = x.shape[:2]
  cout, cin_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
  if not isinstance(groups, int) or groups <= 0 or cin != cin_g * groups or cout % groups:
    raise ValueError(f"{name}: input channels {cin} != weight channels {cin_g} * groups {groups} "
                     f"(weight {weight.shape})")
  strides, dilations = conv_params(stride, nk, "stride", name), conv_params(dilation, nk, "dilation", name)
  if bias is not None and bias.shape != (cout,):
    raise ValueError(f"{name}: bias of shape {bias.shape} does not match the {cout} output channels "
                     f"of weight {weight.shape}")
  pads = tuple(conv_padding(padding, kernel, dilations, strides, name, crop=True))
  x, weight = x.cast(low_precision(x.dtype)), weight.cast(low_precision(weight.dtype))  # autocast: in half
  if bias is not None: bias = bias.cast(low_precision(bias.dtype))
  out = windows_times_weights(x.pad([(0, 0), (0, 0), *pads]), weight, groups, strides, dilations)
  if x.requires_grad or weight.requires_grad:
    grad = ConvGrad(type(x), groups, strides, dilations, pads)
    out = out._apply_uop(lambda v, xu, wu: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, xu, wu), grad), x, weight)
  return out if bias is None else out + bias.reshape(1, -1, *[1] * nk)

def _sum_of_products(a: TensorT, b: TensorT, axes: list[int]) -> TensorT: return a._sum_of_products(b, axes)

def windows_times_weights(xp: TensorT, weight: TensorT, groups: int, strides: tuple[int, ...],
                          dilations: tuple[int, ...],
                          reduce: Callable[[TensorT, TensorT, list[int]], TensorT] = _sum_of_products) -> TensorT:
  """The convolution of an input already padded: its windows times the weights, summed over each window (`reduce` of
  the windows, the weights and the axes: nn/quant.py's int8 convolution sums int8 dot products instead)."""
  nk, bs, (cout, cin_g, *kernel) = weight.ndim - 2, xp.shape[0], weight.shape
  outs = window_counts(xp.shape[2:], kernel, strides, dilations)
  rcout = cout // groups
  # the windows (bs, cin, *o, *k) as (bs, groups, rcout, *o, cin_g, *k), one op, against weight
  # (1, groups, rcout, *1, cin_g, *k), summed over cin_g and k
  win = xp._moves(window_moves(xp.shape, kernel, strides, dilations) + [
    (Ops.RESHAPE, (bs, groups, cin_g, 1, *outs, *kernel)), (Ops.EXPAND, (bs, groups, cin_g, rcout, *outs, *kernel)),
    (Ops.PERMUTE, (0, 1, 3, *[4 + j for j in range(nk)], 2, *[4 + nk + j for j in range(nk)]))])
  w = weight.reshape(1, groups, rcout, *[1] * nk, cin_g, *kernel)
  return reduce(win, w, [-1 - j for j in range(nk + 1)]).reshape(bs, cout, *outs)

@dataclass(frozen=True)
class ConvGrad:
  """The vector-Jacobian product of a convolution of `x`, padded by `pads` ((before, after) per spatial dim, negative
  to crop), with `w` (a CUSTOM_GRAD's arg, called by frontend/gradient.py with the output's gradient): the input's
  gradient as one transposed convolution, the weights' as one reduce. `tensor` is the class that wraps the graph nodes,
  so that both are written with tensor ops."""
  tensor: type
  groups: int
  strides: tuple[int, ...]
  dilations: tuple[int, ...]
  pads: tuple[tuple[int, int], ...]

  def __call__(self, ctx: UOp, xu: UOp, wu: UOp) -> tuple[UOp, UOp]:
    # the gradient and the padded input stored once: the gradient feeds two reduces, and a padded input in a buffer of
    # its own is read through plain views (through the padding's mask the weights' gradient ran scalar code)
    g, x, w = self.tensor(ctx).contiguous(), self.tensor(xu), self.tensor(wu)
    xp = x.pad([(0, 0), (0, 0), *self.pads]).contiguous()
    nk, bs, (cout, cin_g, *kernel), outs = w.ndim - 2, xp.shape[0], w.shape, g.shape[2:]
    # the transposed convolution reaches (o-1)*s + d*(k-1) + 1 positions of the padded input (the rest, fewer than a
    # stride, is read by no window: gradient 0); of those, only x's are computed (not the padding's: 58x58 for 56x56,
    # whose rows of 2 made a thin register tile)
    rest = [p - ((o - 1) * s + d * (k - 1) + 1)
            for p, o, s, d, k in zip(xp.shape[2:], outs, self.strides, self.dilations, kernel)]
    edges = [(d * (k - 1) - b, d * (k - 1) - a + r) for (b, a), r, d, k in zip(self.pads, rest, self.dilations, kernel)]
    dx = _transposed(g, w, None, self.groups, self.strides, self.dilations, edges)
    win = xp._pool_windows(kernel, self.strides, self.dilations).reshape(bs, self.groups, 1, cin_g, *outs, *kernel)
    per_window = g.reshape(bs, self.groups, cout // self.groups, 1, *outs, *[1] * nk)
    dw = win._sum_of_products(per_window, [0, *range(4, 4 + nk)]).reshape(cout, cin_g, *kernel)
    return dx.cast(x.dtype).lazydata, dw.cast(w.dtype).lazydata

def conv_transpose(x: TensorT, weight: TensorT, bias: TensorT | None, groups: int, stride: int | Sequence[int],
                   dilation: int | Sequence[int], padding: int | Sequence[int],
                   output_padding: int | Sequence[int]) -> TensorT:
  """The transpose (gradient) of conv: x (bs, cin, *spatial), weight (cin, cout/groups, *kernel). The input is spread
  out by the stride (zeros between its elements, as views), then convolved with the flipped kernel."""
  name = "conv_transpose"
  nk = check_conv_ranks(x, weight, name)
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
  edges = [(d * (k - 1) - p, d * (k - 1) - p + op) for k, d, p, op in zip(kernel, dilations, pads, out_pads)]
  return _transposed(x, weight, bias, groups, strides, dilations, edges)

def _transposed(x: TensorT, weight: TensorT, bias: TensorT | None, groups: int, strides: tuple[int, ...],
               dilations: tuple[int, ...], edges: Sequence[tuple[int, int]]) -> TensorT:
  """conv_transpose's computation: x spread out by the stride (zeros between its elements, as views), widened by
  `edges` (before, after) per spatial dim (negative: cropped), convolved with the flipped kernel."""
  nk, cin, kernel = weight.ndim - 2, x.shape[1], weight.shape[2:]
  cin_g, cout_g = cin // groups, weight.shape[1]
  w = weight.reshape(groups, cin_g, cout_g, *kernel).transpose(1, 2).reshape(groups * cout_g, cin_g, *kernel)
  w = w.flip(tuple(range(2, 2 + nk)))
  if all(s == 1 for s in strides) or any(d != 1 for d in dilations):
    return conv(_spread(x, strides).pad([(0, 0), (0, 0), *edges]), w, bias, groups, 1, dilations, 0, "conv_transpose")
  out = _phases(x, w, groups, strides, edges)
  return out if bias is None else out + bias.reshape(1, -1, *[1] * nk)

def _phases(x: TensorT, w: TensorT, groups: int, strides: tuple[int, ...],
            edges: Sequence[tuple[int, int]]) -> TensorT:
  """A transposed convolution with stride (dilation 1), flipped weights `w`, as one stride-1 convolution of x for each
  residue of the output's positions modulo the stride, with the taps that reach it (w[j0::s]), interleaved: as the
  convolution of x spread by the stride, 1 - 1/prod(s) of its products were with the zeros between (the input
  gradients of ResNet18's stride-2 3x3 convolutions at 3.7 to 5.8 GFLOP/s of that work). Interleaved as (q, residue)
  pairs, not each phase spread and shifted (_spread): the kernel that sums them took 7 ms there against 23 ms."""
  spatial, kernel = x.shape[2:], w.shape[2:]
  # the length of each output dim: the spread input, widened by the edges, less the kernel's reach
  lengths = [(i - 1) * s + 1 + b + a - (k - 1) for i, s, (b, a), k in zip(spatial, strides, edges, kernel)]
  # every residue's convolution gives ceil(n / s) rows (the last one's extra ones dropped), so that they interleave
  # as (q, residue) pairs: the kernel that sums them reads each phase with a mask on the residue alone
  rows, out = [-(-n // s) for n, s in zip(lengths, strides)], None
  for residues in itertools.product(*[range(s) for s in strides]):
    # per dim: the first tap j0 that lands on this residue, its taps' count, the x offset c of output q's first tap
    firsts = [(b - r) % s for r, s, (b, _) in zip(residues, strides, edges)]
    counts = [max(0, -(-(k - j0) // s)) for k, j0, s in zip(kernel, firsts, strides)]
    if 0 in counts: continue
    offsets = [(r + j0 - b) // s for r, j0, s, (b, _) in zip(residues, firsts, strides, edges)]
    taps = w
    for j, (j0, s) in enumerate(zip(firsts, strides)): taps = taps._take_strided(2 + j, j0, kernel[j], s)
    pads = [(-c, q + c + n - 1 - i) for c, q, n, i in zip(offsets, rows, counts, spatial)]
    phase = conv(x, taps, None, groups, 1, 1, flatten(reversed(pads)), "conv_transpose")
    placed = phase.reshape(*phase.shape[:2], *flatten((q, 1) for q in rows))
    placed = placed.pad([(0, 0), (0, 0)] + flatten(((0, 0), (r, s - 1 - r)) for r, s in zip(residues, strides)))
    out = placed if out is None else out + placed
  assert out is not None  # the residue of each dim's first edge gets the tap j0 = 0
  out = out.reshape(*out.shape[:2], *[q * s for q, s in zip(rows, strides)])
  return out.shrink([None, None] + [(0, n) for n in lengths])

def _spread(x: TensorT, strides: Sequence[int]) -> TensorT:
  """x's trailing len(strides) dims spread out by the strides, s - 1 zeros between neighbours (views): element o of a
  dim lands on o * s."""
  if all(s == 1 for s in strides): return x
  nk = len(strides)
  lead, spatial = x.shape[:-nk], x.shape[-nk:]
  x = x.reshape(*lead, *flatten((i, 1) for i in spatial))
  x = x.pad([(0, 0)] * len(lead) + flatten(((0, 0), (0, s - 1)) for s in strides))
  x = x.reshape(*lead, *[i * s for i, s in zip(spatial, strides)])
  return x.shrink([None] * len(lead) + [(0, (i - 1) * s + 1) for i, s in zip(spatial, strides)])

def pool_windows(x: TensorT, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> TensorT:
  """x._pool_windows, whose gradient is WindowsGrad's when x needs one: the pools' windows (frontend/mixin/nn.py)."""
  win = x._pool_windows(kernel, strides, dilations)
  if not x.requires_grad: return win
  grad = WindowsGrad(type(x), tuple(kernel), tuple(strides), tuple(dilations))
  return win._apply_uop(lambda v, xu: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, xu), grad), x)

@dataclass(frozen=True)
class WindowsGrad:
  """The vector-Jacobian product of _pool_windows (a CUSTOM_GRAD's arg): the gradient of each tap k of the windows,
  (..., *o), put at o * s + k * d, summed over the taps (one elementwise kernel of masked reads). Through the view's own
  chain rule (the input repeated, re-read with a longer row) it was a reduce over the repetitions with index
  arithmetic on every read: for max_pool2d(3, 2, padding=1) of 8x64x112x112, r_64_114_114_8_4_4 at 0.3 GFLOP/s, 0.30 s
  of the backward's 0.34 (one AVX-512 thread, loaded host). The taps are summed per residue of k * d mod s, shifted,
  then interleaved as (q, residue) pairs: each tap spread by the stride and shifted took 180-300 ms for the whole
  forward and backward there, against 100.
  The windows' gradient is stored first: max pool's compares each window with its maximum, which the sum would redo
  at each of the prod(kernel) taps of every input element (135 ms there against 15 + 47 ms stored). Avg pool's, a
  division read through the masks in place, gave NaN where the masks of the upcast lanes differ (a codegen bug)."""
  tensor: type
  kernel: tuple[int, ...]
  strides: tuple[int, ...]
  dilations: tuple[int, ...]

  def __call__(self, ctx: UOp, xu: UOp) -> tuple[UOp]:
    g, nk, spatial = self.tensor(ctx).contiguous(), len(self.kernel), xu.shape[-len(self.kernel):]
    lead, outs, nl = g.shape[:-2 * nk], g.shape[-2 * nk:-nk], g.ndim - 2 * nk
    # input position q * s + r gets the taps k with k * d = r (mod s), from window q - (k * d - r) // s: the residues'
    # sums interleave as (q, residue) pairs
    rows = [-(-i // s) for i, s in zip(spatial, self.strides)]
    phases: dict[tuple[int, ...], ReduceMixin] = {}
    for taps in itertools.product(*[range(k) for k in self.kernel]):
      tap = g.shrink([None] * (nl + nk) + [(k, k + 1) for k in taps]).reshape(*lead, *outs)
      starts = [k * d for k, d in zip(taps, self.dilations)]
      residues = tuple(b % s for b, s in zip(starts, self.strides))
      shifts = [b // s for b, s in zip(starts, self.strides)]
      placed = tap.pad([(0, 0)] * nl + [(m, n - m - o) for m, n, o in zip(shifts, rows, outs)])
      phases[residues] = placed + phases[residues] if residues in phases else placed
    dx = None
    for residues, phase in phases.items():
      phase = phase.reshape(*lead, *flatten((n, 1) for n in rows))
      phase = phase.pad([(0, 0)] * nl + flatten(((0, 0), (r, s - 1 - r)) for r, s in zip(residues, self.strides)))
      dx = phase if dx is None else dx + phase
    assert dx is not None
    # stored with the residues as their own axes, where each (q, residue) reads its phase alone: a consumer reading
    # the interleave in place ran every phase under a mask that alternates along its vectors (the relu and batchnorm
    # after ResNet18's stem pool, 8x64x112x112, 26 ms; 9 + 5 stored, the stem's backward 70 -> 53 ms on one AVX-512
    # thread)
    if any(s > 1 for s in self.strides):
      dx = dx.reshape(*lead, *flatten((n, s) for n, s in zip(rows, self.strides))).contiguous()
    dx = dx.reshape(*lead, *[n * s for n, s in zip(rows, self.strides)])
    return (dx.shrink([None] * nl + [(0, i) for i in spatial]).lazydata,)
