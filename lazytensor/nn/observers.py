"""Observers: what calibration (nn/quant.py's `prepare`) and quantization-aware training record of a layer's inputs
or weights, and the qparams (scale, zero point) they choose, with torch.ao.quantization's semantics.

* MinMaxObserver (and its moving-average and per-channel forms): the range of the values seen, all of it kept.
* HistogramObserver: a histogram of the values seen, and the range that quantizes them with the least squared
  error, clipping rare outliers when rounding the bulk of the values finer is worth more than representing them.
"""
from __future__ import annotations

import math

import numpy as np

from lazytensor.dtype import dtypes
from lazytensor.frontend.tensor import Tensor

QINT8, QUINT8 = (-128, 127), (0, 255)
EPS = float(np.finfo(np.float32).eps)  # the smallest scale, as torch's observers

def _qrange(observer: str, dtype: str) -> tuple[int, int]:
  if dtype not in ("quint8", "qint8"): raise ValueError(f"{observer}: dtype {dtype!r} must be 'quint8' or 'qint8'")
  return QUINT8 if dtype == "quint8" else QINT8

def calculate_qparams(min_val: Tensor, max_val: Tensor, quant_min: int, quant_max: int,
                      symmetric: bool) -> tuple[Tensor, Tensor]:
  """(scale, zero_point) for values in [min_val, max_val] (widened to hold 0), as torch's observers compute them:
  symmetric, the larger magnitude over half the range and a zero point in its middle (0 for qint8, 128 for quint8);
  affine, the range over the range of values, and the zero point that maps min_val to quant_min."""
  lo, hi = min_val.minimum(0.0), max_val.maximum(0.0)
  if symmetric:
    scale = (hi.maximum(-lo) / ((quant_max - quant_min) / 2)).maximum(EPS)
    return scale, Tensor.full(scale.shape, (quant_min + quant_max + 1) // 2, dtype=dtypes.int32)
  scale = ((hi - lo) / float(quant_max - quant_min)).maximum(EPS)
  zero_point = (quant_min - (lo / scale).round()).clamp(quant_min, quant_max)
  return scale, zero_point.cast(dtypes.int32)

class MinMaxObserver:
  """Records the running minimum and maximum of the values it sees (per tensor, or per index of `ch_axis`) and turns
  them into qparams, as torch's MinMaxObserver and PerChannelMinMaxObserver; with `averaging_constant`, a moving average
  of each batch's minimum and maximum instead (MovingAverage(PerChannel)MinMaxObserver), the first batch taken whole.
  Calling it returns its input. Its statistics are tensors updated in place: realized at once in eval mode
  (calibration), with the optimizer's step in training mode (as BatchNorm's)."""
  def __init__(self, dtype: str = "quint8", symmetric: bool = False, ch_axis: int | None = None,
               averaging_constant: float | None = None, channels: int = 1) -> None:
    self.quant_min, self.quant_max = _qrange("MinMaxObserver", dtype)
    self.symmetric, self.ch_axis, self.averaging_constant = symmetric, ch_axis, averaging_constant
    shape = (channels,) if ch_axis is not None else ()
    self.min_val = Tensor.full(shape, math.inf).contiguous().realize()
    self.max_val = Tensor.full(shape, -math.inf).contiguous().realize()
    for t in (self.min_val, self.max_val): t.requires_grad = False

  def __call__(self, x: Tensor) -> Tensor:
    v = x.detach().cast(dtypes.float32)
    axes = tuple(d for d in range(v.ndim) if self.ch_axis is None or d != self.ch_axis % v.ndim)
    lo, hi = v.min(axes), v.max(axes)
    if self.ch_axis is not None and lo.shape != self.min_val.shape:
      raise ValueError(f"MinMaxObserver: {lo.shape[0]} channels along axis {self.ch_axis}, expected "
                       f"{self.min_val.shape[0]}")
    if self.averaging_constant is None: lo, hi = self.min_val.minimum(lo), self.max_val.maximum(hi)
    else:
      c, first = self.averaging_constant, self.min_val.isinf()
      lo = first.where(lo, self.min_val + c * (lo - self.min_val))
      hi = first.where(hi, self.max_val + c * (hi - self.max_val))
    self.min_val.assign(lo)
    self.max_val.assign(hi)
    if not Tensor.training: self.min_val.realize(self.max_val)
    return x

  def calculate_qparams(self) -> tuple[Tensor, Tensor]:
    """(scale, zero_point) of the values seen so far."""
    return calculate_qparams(self.min_val, self.max_val, self.quant_min, self.quant_max, self.symmetric)

def MovingAverageMinMaxObserver(dtype: str = "quint8", averaging_constant: float = 0.01) -> MinMaxObserver:
  """torch's MovingAverageMinMaxObserver: affine, per tensor, each batch's range averaged in."""
  return MinMaxObserver(dtype, averaging_constant=averaging_constant)

def PerChannelMinMaxObserver(channels: int, ch_axis: int = 0, dtype: str = "qint8",
                             symmetric: bool = True) -> MinMaxObserver:
  """torch's PerChannelMinMaxObserver with its defaults for weights: qint8, symmetric, one range per output channel."""
  return MinMaxObserver(dtype, symmetric, ch_axis, channels=channels)

class HistogramObserver:
  """Records a histogram of the values it sees (per tensor; `bins` equal bins over the running range, re-binned when
  the range grows, each old bin's count spread evenly over its width) and chooses the range [lo, hi] (holding 0) that
  quantizes them with the least expected squared error, as torch's HistogramObserver aims to: values inside round to
  one of the 2^8 levels (an error of step^2 / 12 on average), values outside clamp to the nearest end. Every pair of
  bin edges is tried (each error from prefix sums over the bins), not a greedy shrink, so the range found is the best
  on the histogram. Calling it returns its input; calibration reads each batch's range and histogram back (a
  statistic of the data, as torch's observers keep on the host)."""
  def __init__(self, bins: int = 2048, dtype: str = "quint8", symmetric: bool = False) -> None:
    if not isinstance(bins, int) or bins < 2: raise ValueError(f"HistogramObserver: bins={bins!r} must be an int >= 2")
    self.quant_min, self.quant_max = _qrange("HistogramObserver", dtype)
    self.bins, self.symmetric, self.ch_axis = bins, symmetric, None
    self.min_val, self.max_val = Tensor(math.inf).realize(), Tensor(-math.inf).realize()
    self.histogram = Tensor.zeros(bins).contiguous().realize()
    for t in (self.min_val, self.max_val, self.histogram): t.requires_grad = False

  def __call__(self, x: Tensor) -> Tensor:
    v = x.detach().cast(dtypes.float32).flatten()
    if v.numel() == 0: return x
    lo_t, hi_t = v.min(), v.max()
    lo_t.realize(hi_t)
    old_lo, old_hi = self.min_val.item(), self.max_val.item()
    lo, hi = min(old_lo, lo_t.item()), max(old_hi, hi_t.item())
    if not (math.isfinite(lo) and math.isfinite(hi)):
      raise ValueError(f"HistogramObserver: the values must be finite, their range is [{lo}, {hi}]")
    counts = v.histc(self.bins, lo, hi if hi > lo else lo + 1.0).numpy().astype(np.float64)
    if old_lo <= old_hi: counts += _rebin(self.histogram.numpy().astype(np.float64), old_lo, old_hi, lo, hi)
    self.histogram.assign(Tensor(counts.astype(np.float32))).realize()
    self.min_val.assign(Tensor(lo)).realize()
    self.max_val.assign(Tensor(hi)).realize()
    return x

  def calculate_qparams(self) -> tuple[Tensor, Tensor]:
    """(scale, zero_point) of the best range for the values seen so far."""
    lo, hi = self.min_val.item(), self.max_val.item()
    if lo <= hi and hi > lo:
      edges = np.linspace(lo, hi, self.bins + 1)
      lo, hi = best_range(self.histogram.numpy().astype(np.float64), edges, self.quant_max - self.quant_min,
                          self.symmetric)
    return calculate_qparams(Tensor(lo), Tensor(hi), self.quant_min, self.quant_max, self.symmetric)

def _rebin(counts: np.ndarray, old_lo: float, old_hi: float, lo: float, hi: float) -> np.ndarray:
  """`counts` over [old_lo, old_hi] in as many bins over [lo, hi] (which holds it), each count spread evenly over its
  bin: the cumulative count read at the new edges."""
  n = len(counts)
  if old_hi <= old_lo:  # every value seen so far was one number: it lies in one new bin
    out = np.zeros(n)
    out[min(int((old_lo - lo) / (hi - lo) * n), n - 1) if hi > lo else 0] = counts.sum()
    return out
  cdf = np.concatenate([[0.0], np.cumsum(counts)])
  return np.diff(np.interp(np.linspace(lo, hi, n + 1), np.linspace(old_lo, old_hi, n + 1), cdf))

def best_range(counts: np.ndarray, edges: np.ndarray, steps: int, symmetric: bool) -> tuple[float, float]:
  """The range [a, b] (a <= 0 <= b, ends at bin edges or 0) whose quantization to `steps` + 1 levels has the least
  expected squared error over the histogram (counts at the bins' centers): inside, step^2 / 12 per value with step =
  (b - a) / steps; outside, the squared distance to the nearer end. Symmetric: a = -b."""
  centers = (edges[:-1] + edges[1:]) / 2
  prefix = [np.concatenate([[0.0], np.cumsum(counts * centers ** p)]) for p in range(3)]
  def below(at: np.ndarray) -> list[np.ndarray]:  # count, sum and sum of squares of the values below each point
    k = np.searchsorted(centers, at, side="left")
    return [p[k] for p in prefix]
  def clipped(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sum of n (a - c)^2 over c < a plus sum of n (c - b)^2 over c >= b, and the count in [a, b)"""
    (la, l1, l2), (rb, r1, r2) = below(a), below(b)
    right = (prefix[2][-1] - r2) - 2 * b * (prefix[1][-1] - r1) + b ** 2 * (prefix[0][-1] - rb)
    return a ** 2 * la - 2 * a * l1 + l2 + right, rb - la
  if symmetric:
    b = np.unique(np.abs(np.concatenate([edges, [0.0]])))
    out, inside = clipped(-b, b)
    best = float(b[int(np.argmin(out + inside * (2 * b / steps) ** 2 / 12))])
    return -best, best
  lows = np.unique(np.minimum(edges, 0.0))[:, None]
  highs = np.unique(np.maximum(edges, 0.0))[None, :]
  out, inside = clipped(*np.broadcast_arrays(lows, highs))
  i, j = np.unravel_index(int(np.argmin(out + inside * ((highs - lows) / steps) ** 2 / 12)), out.shape)
  return float(lows[i, 0]), float(highs[0, j])

Observer = MinMaxObserver | HistogramObserver
