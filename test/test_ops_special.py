"""The special functions and numpy's and torch's further elementwise functions (frontend/mixin/special.py) against
torch: values over wide ranges and at the edges (poles, signed zeros, infinities, NaN, subnormals), dtypes, gradients,
and the bad inputs users make."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, check_op, named, torch
from test_errors import lazy, raises_at_build

from lazytensor import Tensor, dtypes

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="compares against torch")
F16, F64 = dtypes.float16, dtypes.float64

EDGES = np.array([0.0, -0.0, 1.0, 2.0, -1.0, -2.0, -2.5, 0.5, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 30.0, 1e10,
                  -1e10 + 0.5, 171.5, 1e30], np.float32)
SIGNED = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.inf, np.nan, 3.0, -2.0], np.float32)
SIGNED_X = np.array([0.0, 0.0, -0.0, -0.0, np.inf, -np.inf, np.inf, -np.inf, 1.0, 1.0, 0.0, -0.0], np.float32)
ERFINV_EDGES = np.array([1.0, -1.0, 0.0, -0.0, 1.5, -2.0, np.nan, 1 - 2 ** -24, -(1 - 2 ** -24), 1e-30, 0.5],
                        np.float32)
ERFINV_TAIL64 = 1 - np.logspace(-16, -1, 40)
# consecutive Fibonacci numbers: the slowest pairs for Euclid's algorithm at each width
FIB = [0, 1]
while len(FIB) < 93: FIB.append(FIB[-1] + FIB[-2])

def _fib_pair(dt: Any) -> list[np.ndarray]:
  top = max(i for i, f in enumerate(FIB) if f <= np.iinfo(dt).max)
  return [np.array([FIB[top], -FIB[top], 12, 0, 0, 7], dt), np.array([FIB[top - 1], FIB[top - 1], -18, 5, 0, 0], dt)]

def _between(lo: float, hi: float, dt: Any = np.float32, n: int = 64) -> np.ndarray:
  return np.random.default_rng(abs(int(lo * 7 + hi))).uniform(lo, hi, n).astype(dt)

def _avoiding_poles(dt: Any = np.float32) -> np.ndarray:
  x = _between(-6.0, 0.5, dt)
  return np.where(np.abs(x - np.round(x)) < 0.05, x + 0.25, x).astype(dt)

SPECIAL: list[tuple[str, list[Any], Callable[..., Any], Any, dict[str, Any]]] = [
  ("erfc", [_between(-6, 10)], lambda x: x.erfc(), None, {}),
  ("erfc_tail", [_between(4, 9.5)], lambda x: x.erfc(), None, {"rtol": 1e-5, "atol": 0.0, "grad_atol": 1e-30}),
  ("erfc_edges", [EDGES], lambda x: x.erfc(), None, {"grad": False}),
  ("erfc_float64", [_between(-8, 26, np.float64)], lambda x: x.erfc(), None, {"rtol": 1e-12, "atol": 0.0}),
  ("erfc_float16", [(16,)], lambda x: x.erfc(), None, {"dtype": F16}),
  ("erfc_int", [np.array([-1, 0, 3], np.int64)], lambda x: x.erfc(), None, {}),
  ("erfinv", [_between(-0.999, 0.999)], lambda x: x.erfinv(), None, {"rtol": 1e-5}),
  ("erfinv_edges", [ERFINV_EDGES], lambda x: x.erfinv(), None, {"grad": False}),
  ("erfinv_near_one", [(1 - np.logspace(-7, -2, 64)).astype(np.float32)], lambda x: x.erfinv(), None, {"rtol": 1e-5}),
  ("erfinv_float16", [_between(-0.99, 0.99, np.float16)], lambda x: x.erfinv(), None, {"dtype": F16}),
  ("erfinv_int", [np.array([-1, 0, 1, 2], np.int64)], lambda x: x.erfinv(), None, {"grad": False}),
  ("erfinv_float64", [_between(-1, 1, np.float64)], lambda x: x.erfinv(), None, {"rtol": 1e-13, "atol": 1e-15}),
  ("erfinv_float64_tail", [ERFINV_TAIL64], lambda x: x.erfinv(), None, {"rtol": 1e-13, "grad": False}),
  ("lgamma", [_between(0.05, 40)], lambda x: x.lgamma(), None, {}),
  ("lgamma_negative", [_avoiding_poles()], lambda x: x.lgamma(), None, {}),
  ("lgamma_edges", [EDGES], lambda x: x.lgamma(), None, {"grad": False}),
  ("lgamma_float64", [_between(-30, 300, np.float64)], lambda x: x.lgamma(), None, {"rtol": 1e-10, "atol": 1e-10}),
  ("lgamma_float16", [(16,)], lambda x: x.lgamma(), None, {"dtype": F16, "low": 0.1, "high": 8.0}),
  ("digamma", [_between(0.05, 40)], lambda x: x.digamma(), None, {}),
  ("digamma_negative", [_avoiding_poles()], lambda x: x.digamma(), None, {"rtol": 1e-3}),
  ("digamma_edges", [EDGES], lambda x: x.digamma(), None, {"grad": False}),
  # the gradient, trigamma, is the derivative of the truncated series: good to 1e-9, not to the last digit
  ("digamma_float64", [_between(-0.9, 50, np.float64)], lambda x: x.digamma(), None,
   {"rtol": 1e-10, "atol": 1e-10, "grad_rtol": 1e-8}),
  ("sinc", [(5, 7)], lambda x: x.sinc(), None, {}),
  ("sinc_edges", [EDGES], lambda x: x.sinc(), None, {"grad": False}),
  ("sinc_zero_grad", [np.array([0.0, 0.25], np.float32)], lambda x: x.sinc(), None, {}),
  ("sinc_float64", [(9,)], lambda x: x.sinc(), None, {"dtype": F64}),
  ("atan2", [(4, 5), (4, 5)], lambda y, x: y.atan2(x), None, {}),
  ("atan2_broadcast", [(4, 1), (5,)], lambda y, x: y.atan2(x), None, {}),
  ("atan2_signed_zeros_infs", [SIGNED, SIGNED_X], lambda y, x: y.atan2(x), None, {"grad": False}),
  ("atan2_float64", [(7,), (7,)], lambda y, x: y.atan2(x), None, {"dtype": F64}),
  ("atan2_ints", [np.array([1, -1, 0], np.int32), np.array([0, -1, -3], np.int32)], lambda y, x: y.atan2(x), None,
   {}),
  ("arctan2", [(6,), (6,)], lambda y, x: y.arctan2(x), None, {}),
  ("logaddexp2", [(3, 4), (4,)], lambda a, b: a.logaddexp2(b), None, {"low": -50, "high": 50}),
  ("logaddexp2_infs", [SIGNED, SIGNED_X], lambda a, b: a.logaddexp2(b), None, {"grad": False}),
]

NUMERIC: list[tuple[str, list[Any], Callable[..., Any], Any, dict[str, Any]]] = [
  ("heaviside", [np.array([-1.5, 0.0, -0.0, 2.0, np.nan, np.inf], np.float32), np.array([0.5], np.float32)],
   lambda x, v: x.heaviside(v), None, {"grad": False}),
  ("heaviside_int", [np.array([-3, 0, 4], np.int64), np.array([7, 8, 9], np.int64)], lambda x, v: x.heaviside(v),
   None, {}),
  ("fmax", [np.array([1.0, np.nan, np.nan, -np.inf, 2.0], np.float32),
            np.array([2.0, 3.0, np.nan, np.nan, -1.0], np.float32)], lambda a, b: a.fmax(b), None, {"grad": False}),
  ("fmin", [np.array([1.0, np.nan, np.nan, -np.inf, 2.0], np.float32),
            np.array([2.0, 3.0, np.nan, np.nan, -1.0], np.float32)], lambda a, b: a.fmin(b), None, {"grad": False}),
  ("fmax_grad", [(3, 4), (4,)], lambda a, b: a.fmax(b), None, {}),
  ("fmin_grad", [(3, 4), (3, 4)], lambda a, b: a.fmin(b), None, {}),
  ("fmax_int", [np.array([1, -5, 3], np.int32), np.array([0, 2, 3], np.int32)], lambda a, b: a.fmax(b), None, {}),
  ("frac", [(3, 5)], lambda x: x.frac(), None, {"low": -9, "high": 9}),
  ("frac_edges", [EDGES], lambda x: x.frac(), None, {"grad": False}),
  ("frac_float16", [(8,)], lambda x: x.frac(), None, {"dtype": F16, "low": -9, "high": 9}),
  ("fix", [(3, 5)], lambda x: x.fix(), None, {"low": -9, "high": 9}),
  ("angle", [EDGES], lambda x: x.angle(), None, {"grad": False}),
  ("angle_grad", [(3, 4)], lambda x: x.angle(), None, {}),
  ("angle_int", [np.array([-3, 0, 4], np.int64)], lambda x: x.angle(), None, {}),
  ("deg2rad", [(4,)], lambda x: x.deg2rad(), None, {"low": -400, "high": 400}),
  ("rad2deg", [(4,)], lambda x: x.rad2deg(), None, {"rtol": 1e-5}),
  ("deg2rad_int", [np.array([180, -90], np.int64)], lambda x: x.deg2rad(), None, {}),
  ("rad2deg_float64", [(4,)], lambda x: x.rad2deg(), None, {"dtype": F64}),
  ("isposinf", [EDGES], lambda x: x.isposinf(), None, {}),
  ("isneginf", [EDGES], lambda x: x.isneginf(), None, {}),
  ("isneginf_int", [np.array([1, -2], np.int32)], lambda x: x.isneginf(), None, {}),
  ("isreal", [EDGES], lambda x: x.isreal(), None, {}),
  # torch's gradient takes 2^e in the exponent's dtype, 0 for a negative int e: only values with int exponents
  ("ldexp", [(3, 4), np.arange(-6, 6, dtype=np.int64).reshape(3, 4)], lambda x, e: x.ldexp(e), None, {"grad": False}),
  ("ldexp_grad", [(3, 4), np.arange(-6, 6, dtype=np.float32).reshape(3, 4)], lambda x, e: x.ldexp(e), None, {}),
  ("ldexp_ints", [np.array([1, 3], np.int32), np.array([2, -1], np.int32)], lambda x, e: x.ldexp(e), None, {}),
  ("ldexp_float64", [(4,), (4,)], lambda x, e: x.ldexp(e), None, {"dtype": F64}),
  ("float_power", [(3, 4), (4,)], lambda x, e: x.float_power(e), None, {"low": 0.5, "high": 3.0}),
  ("float_power_int_scalar", [np.array([2, 3, -4], np.int32)], lambda x: x.float_power(3), None, {}),
  ("gcd_int32", _fib_pair(np.int32), lambda a, b: a.gcd(b), None, {}),
  ("gcd_int64", _fib_pair(np.int64), lambda a, b: a.gcd(b), None, {}),
  ("gcd_int8", _fib_pair(np.int8), lambda a, b: a.gcd(b), None, {}),
  ("gcd_uint8", [np.array([255, 0, 12, 144], np.uint8), np.array([85, 9, 18, 233], np.uint8)],
   lambda a, b: a.gcd(b), None, {}),
  ("gcd_random_broadcast", [(5, 1), (6,)], lambda a, b: a.gcd(b), None,
   {"dtype": dtypes.int64, "low": -1000, "high": 1000}),
  ("lcm", [np.array([4, -6, 0, 0, 7, 12], np.int64), np.array([6, 4, 5, 0, -3, 18], np.int64)],
   lambda a, b: a.lcm(b), None, {}),
  ("lcm_int16", [(4, 5), (5,)], lambda a, b: a.lcm(b), None, {"dtype": dtypes.int16, "low": -100, "high": 100}),
  ("hardshrink", [(4, 5)], lambda x: x.hardshrink(), None, {}),
  ("hardshrink_lambd", [(4, 5)], lambda x: x.hardshrink(1.25), lambda x: torch.nn.functional.hardshrink(x, 1.25), {}),
  ("prelu_channels", [(2, 3, 4), (3,)], lambda x, w: x.prelu(w), None, {}),
  ("prelu_shared", [(2, 3, 4), (1,)], lambda x, w: x.prelu(w), None, {}),
  ("prelu_1d", [(5,), (1,)], lambda x, w: x.prelu(w), None, {}),
]

@needs_torch
@pytest.mark.parametrize("name,shapes,fn,torch_fn,kw", named(SPECIAL + NUMERIC))
def test_matches_torch(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any, kw: dict[str, Any]) -> None:
  check_op(shapes, fn, torch_fn=torch_fn, **kw)

FREXP = np.array([8.0, -0.75, 0.0, -0.0, 1.0, 3.0e-39, -1.0e-45, 3.4e38, np.inf, -np.inf, np.nan, 1e-20, 0.1],
                 np.float32)

@needs_torch
@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64])
def test_frexp_matches_torch(dt: Any) -> None:
  # subnormals of each width included: 3e-39 and 1e-45 in float32, 6e-8 in float16, 5e-324 in float64
  with np.errstate(over="ignore"): x = np.concatenate([FREXP, [6e-8, 5e-324, 1e300]]).astype(dt)
  check_op([x], lambda t: t.frexp(), torch_fn=lambda t: tuple(torch.frexp(t)), grad=False)

ERFC_GRID = np.concatenate([np.linspace(-10, 10.6, 40001), np.linspace(8.5, 10.1, 20001),  # the subnormal tail
                            np.logspace(-30, 0, 300), -np.logspace(-30, 1, 300)]).astype(np.float32)

def test_erfc_float32_within_5_ulp() -> None:
  """float32 polynomials and an exp(-x^2) without the rounding of x*x: within a few ulp of math.erfc (float64, within
  1e-15 of the exact value) everywhere, where it shrinks towards the smallest subnormal (x near 10) too."""
  got = Tensor(ERFC_GRID).erfc().numpy().astype(np.float64)
  want = np.array([math.erfc(float(v)) for v in ERFC_GRID])
  ulps = np.abs(got - want) / np.maximum(np.spacing(want.astype(np.float32)).astype(np.float64), 2.0 ** -149)
  assert ulps.max() < 5, (ERFC_GRID[ulps.argmax()], ulps.max())
  assert (got[ERFC_GRID > 10.07] == 0).all() and got[np.argmin(np.abs(ERFC_GRID - 10.0))] > 0  # 1.4e-45 at 10.0

def test_erfc_float32_gradients() -> None:
  """The stated derivative -2/sqrt(pi) exp(-x^2), within a few ulp where it is tiny, and its own derivative (double
  backward) 4x/sqrt(pi) exp(-x^2)."""
  x = ERFC_GRID[::7]
  t = Tensor(x, requires_grad=True)
  g, = t.erfc().sum().gradient(t, create_graph=True)
  gg, = g.sum().gradient(t)
  want = np.array([-2 / math.sqrt(math.pi) * math.exp(-float(v) ** 2) for v in x])
  ulps = np.abs(g.numpy() - want) / np.maximum(np.spacing(np.abs(want).astype(np.float32)), 2.0 ** -149)
  assert ulps.max() < 5, (x[ulps.argmax()], ulps.max())
  np.testing.assert_allclose(gg.numpy(), -2 * x.astype(np.float64) * want, rtol=1e-5, atol=1e-30)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_erfc_half_types_round_the_float32_result(dt: Any) -> None:
  x = Tensor(ERFC_GRID[::50]).cast(dt)
  want = Tensor(x.float().numpy()).erfc().cast(dt).numpy()
  got = x.erfc()
  assert got.dtype == dt
  np.testing.assert_array_equal(got.numpy(), want)

def test_erfinv_float32_within_4_ulp() -> None:
  """Giles' float32 polynomials: within 4 ulp of the exact value everywhere in (-1, 1), tails and tiny values too."""
  x = np.concatenate([np.linspace(-1, 1, 200001)[1:-1], 1 - np.logspace(-7.2, -1, 3000), np.logspace(-38, -1, 3000),
                      -np.logspace(-30, -1, 300)]).astype(np.float32)
  x = x[np.abs(x) < 1]
  want = Tensor(x.astype(np.float64)).erfinv().numpy()  # float64: within 2e-15, checked against torch above
  got = Tensor(x).erfinv().numpy().astype(np.float64)
  ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32))
  assert ulps.max() < 4, (x[ulps.argmax()], ulps.max())

def test_frexp_of_bfloat16_is_exact() -> None:
  x = Tensor([8.0, -0.75, 1e-39, 3.0]).bfloat16()
  mantissa, exponent = x.frexp()
  assert mantissa.dtype == dtypes.bfloat16 and exponent.dtype == dtypes.int32
  np.testing.assert_array_equal(np.ldexp(mantissa.float().numpy(), exponent.numpy()), x.float().numpy())

def test_special_functions_fuse_into_one_kernel() -> None:
  from lazytensor import GlobalCounters
  x = Tensor(_between(0.1, 5.0)).realize()
  GlobalCounters.reset()
  (x.lgamma() + x.digamma() + x.erfc() + (x / 6).erfinv()).realize()
  assert GlobalCounters.kernel_count == 1

def test_errors() -> None:
  raises_at_build(TypeError, lambda: Tensor([1, 2]).frac(), "frac", "int64")
  raises_at_build(TypeError, lambda: Tensor([1, 2]).frexp(), "frexp", "int64")
  raises_at_build(TypeError, lambda: lazy(3).gcd(lazy(3)), "gcd", "float32")
  raises_at_build(TypeError, lambda: Tensor([1, 2]).lcm(2.5), "gcd", "float32")
  raises_at_build(TypeError, lambda: lazy(3).atan2("a"), "atan2", "str")
  raises_at_build(TypeError, lambda: lazy(3).heaviside(None), "heaviside", "NoneType")
  raises_at_build(TypeError, lambda: lazy(3).fmax({}), "fmax", "dict")
  raises_at_build(TypeError, lambda: lazy(3).float_power("2"), "float_power", "str")
  raises_at_build(ValueError, lambda: lazy(3).hardshrink(-1.0), "hardshrink", "-1.0")
  raises_at_build(ValueError, lambda: lazy(2, 3, 4).prelu(lazy(4)), "prelu", "(4,)", "3")
  raises_at_build(ValueError, lambda: lazy(2, 3).prelu(lazy(3, 1)), "prelu", "(3, 1)")
  raises_at_build(TypeError, lambda: lazy(2, 3).prelu(0.25), "prelu", "float")
