"""float16 results as torch's: ops that torch computes in float32 and rounds once (GroupNorm, LayerNorm, sigmoid,
rsqrt) are within half an ulp (and float32's own error) of the float64 value of the same float16 inputs, and sums,
matmuls and convolutions accumulate in float32 and round once. Rounded to half at each step, GroupNorm and LayerNorm
were many times that bound off where x - mean is small, sigmoid 2 ulps and rsqrt 1.3."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Tensor, dtypes, nn


def _half(shape: tuple[int, ...], scale: float = 2.0, shift: float = 0.5, seed: int = 0) -> np.ndarray:
  return (np.random.default_rng(seed).standard_normal(shape) * scale + shift).astype(np.float16)

def _check(got: Tensor, ref: np.ndarray, magnitude: np.ndarray, float32_ulps: float) -> None:
  """got is float16 and within one rounding of the float64 value `ref` plus `float32_ulps` float32 ulps of `magnitude`
  (the size of the terms it is computed from: float32's own error, which shows where terms cancel to near 0)."""
  assert got.dtype == dtypes.float16
  spacing = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
  # one rounding is at most half an ulp
  bound = 0.5 * spacing + float32_ulps * 2.0 ** -24 * magnitude
  err = np.abs(got.numpy().astype(np.float64) - ref)
  assert np.all(err <= bound), f"{np.max(err / bound):.2f} times the bound of one rounding"

def _layernorm64(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
  """x normalized over axes in float64, and the size of the terms of x - mean (scaled alike), where they cancel."""
  x = x.astype(np.float64)
  mean = x.mean(axes, keepdims=True)
  rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axes, keepdims=True) + 1e-5)
  return (x - mean) * rstd, (np.abs(x) + np.abs(mean)) * rstd

def test_group_norm() -> None:
  x, w, b = _half((2, 64, 12, 12)), _half((64,), 0.1, 1.0, 1), _half((64,), 0.05, 0.0, 2)
  gn = nn.GroupNorm(32, 64)
  gn.weight, gn.bias = Tensor(w), Tensor(b)
  y, size = (v.reshape(x.shape) for v in _layernorm64(x.reshape(2, 32, -1), (2,)))
  w4, b4 = w.reshape(1, -1, 1, 1), b.reshape(1, -1, 1, 1)
  _check(gn(Tensor(x)), y * w4 + b4, size * np.abs(w4) + np.abs(b4), 16)

def test_layer_norm() -> None:
  x, w, b = _half((4, 77, 320)), _half((320,), 0.1, 1.0, 1), _half((320,), 0.05, 0.0, 2)
  ln = nn.LayerNorm(320)
  ln.weight, ln.bias = Tensor(w), Tensor(b)
  y, size = _layernorm64(x, (2,))
  _check(ln(Tensor(x)), y * w + b, size * np.abs(w) + np.abs(b), 16)
  _check(Tensor(x).layernorm(), y, size, 16)

@pytest.mark.parametrize("name, fn, ref_fn", [
  ("sigmoid", Tensor.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
  ("silu", Tensor.silu, lambda v: v / (1 + np.exp(-v))),
  ("rsqrt", Tensor.rsqrt, lambda v: 1 / np.sqrt(v)),
])
def test_unary(name: str, fn: Callable[[Tensor], Tensor], ref_fn: Callable[[np.ndarray], np.ndarray]) -> None:
  x = _half((4096,), 4.0, 0.0)
  if name == "rsqrt": x = np.abs(x) + np.float16(0.01)
  ref = ref_fn(x.astype(np.float64))
  _check(fn(Tensor(x)), ref, np.abs(ref), 16)

def test_matmul_accumulates_in_float32() -> None:
  a, b = _half((64, 1024), 1.0, 0.0, 1), _half((1024, 48), 1.0, 0.0, 2)
  a64, b64 = a.astype(np.float64), b.astype(np.float64)
  # a float32 accumulator of n terms is within n float32 ulps of their absolute sum; a float16 one, 8192 times that
  _check(Tensor(a) @ Tensor(b), a64 @ b64, np.abs(a64) @ np.abs(b64), 1024)

def test_conv_accumulates_in_float32() -> None:
  x, w = _half((1, 128, 10, 10), 1.0, 0.0, 1), _half((16, 128, 3, 3), 0.1, 0.0, 2)
  x64, w64 = x.astype(np.float64), w.astype(np.float64)
  windows = np.lib.stride_tricks.sliding_window_view(x64, (3, 3), axis=(2, 3))  # (1, 128, 8, 8, 3, 3)
  ref, magnitude = np.einsum("ncyxij,ocij->noyx", windows, w64), np.einsum("ncyxij,ocij->noyx", abs(windows), abs(w64))
  _check(Tensor(x).conv2d(Tensor(w)), ref, magnitude, 128 * 9)

def test_mean_and_softmax_accumulate_in_float32() -> None:
  x = _half((8, 4096), 1.0, 1.0)
  x64 = x.astype(np.float64)
  _check(Tensor(x).mean(1), x64.mean(1), np.abs(x64).mean(1), 4096)
  e = np.exp(x64 - x64.max(1, keepdims=True))
  ref = e / e.sum(1, keepdims=True)
  _check(Tensor(x).softmax(1), ref, ref, 4096)

@pytest.mark.parametrize("scale", [1000.0, 1e-4])
def test_std_takes_the_root_before_rounding_to_half(scale: float) -> None:
  # as torch: the root of the float32 variance, rounded once; rounded to half first, a variance past 65504 (a std of 256
  # or more) was inf, and one under half's smallest subnormal, 6e-8 (a std under 2.4e-4), 0
  x = _half((4, 64), scale, 0.0)
  ref = x.astype(np.float64).std(1, ddof=1)
  _check(Tensor(x).std(1), ref, ref, 64)
