"""exp2, log2, sin, cos and fmod as plain UOp arithmetic, so that they vectorize: libm's exp2f/log2f/sinf/fmodf are
scalar calls, and they made softmax exp-bound and sin, cos, tan and fmod 4-9x torch's time on the CPU.

exp2 and log2 are computed in float32 (float16 and bfloat16 inputs are widened, then rounded back) to within 1 ulp of
the exact result over the whole float32 range (measured: 0.93 ulp exp2, 0.87 ulp log2), with IEEE behaviour at the
edges. float64 takes twice the terms (a Taylor series of 2^f, fdlibm's log), within 1 ulp too: float32 functions
that are computed in float64 for their accuracy (pow, erfc, lgamma) were bound by libm's scalar calls (2-6x torch).

The polynomial coefficients are minimax fits (Lawson's iteratively reweighted least squares on Chebyshev nodes, in
float64): 2^f on f in [-1/2, 1/2] to 2e-9 relative error, and log2(1+y)/y - 1.5 on y in [sqrt(1/2)-1, sqrt(2)-1] to 6e-9
absolute, both well under float32's half ulp (6e-8), so float32 rounding dominates the error.

sin and cos of float32 are reduced and evaluated in float64 (x is exact there): x - k pi/2 by fdlibm's three-part
pi/2 (two 33-bit heads, so that k times them is exact for k < 2^20), then sin or cos of the remainder on [-pi/4, pi/4]
by their Taylor series (the first term left out is under 1e-11 of the result), rounded to float32 once: within half an
ulp and a 1e-11 relative error (cos near its zeros too: it is sin of the remainder there). Past 2^20 the three parts
would not be exact: those lanes keep the SIN (COS) op, libm's exact reduction, which the LLVM renderer calls only
when a vector holds one (a WHERE whose true side is a libm call). fmod of float32 (MOD, also behind % and //) is exact
the same way: float64 arithmetic for quotients below 2^29, libm's fmod for the rest (10.9 -> 1.6 ms for 1M on one AVX2
core, torch 1.5).
"""
from __future__ import annotations

import math
from collections.abc import Callable

from lazytensor.dtype import DType, dtypes
from lazytensor.uop.ops import Ops, PatternMatcher, UOp, UPat

# 2^f = 1 + f*(c1 + f*(c2 + ...)), f in [-1/2, 1/2]
_EXP2_POLY = (0.00015353361016891883, 0.0013398875248187112, 0.00961843736800483, 0.05550332468780837,
              0.2402264791346322, 0.6931472028563586)
# log2(1+y) = 1.5*y + y*S(y), S(y) = c0*y^9 + ... + c9, y in [sqrt(1/2)-1, sqrt(2)-1]
_LOG2_POLY = (-0.1129740903221245, 0.18782635923329954, -0.19061280813530343, 0.20429608454548784, -0.23963657124488538,
              0.28858526672201684, -0.3606964247840124, 0.4808979007220127, -0.7213473519955516, -0.05730495815004301)
_ROUNDER = 12582912.0     # 1.5 * 2^23: x + this rounds x to an integer that sits in the low mantissa bits
_ROUNDER_BITS = 0x4B400000
_SQRT_HALF_BITS = 0x3F3504F3  # float32 bits of sqrt(1/2): the mantissa range is shifted to start here

def _like(dt: DType, x: UOp) -> DType: return dt.vec(x.dtype.count)

def _horner(x: UOp, coeffs: tuple[float, ...]) -> UOp:
  """coeffs[0]*x^(n-1) + ... + coeffs[-1], with fused multiply-adds."""
  acc = x.const_like(coeffs[0])
  for c in coeffs[1:]: acc = UOp(Ops.MULACC, x.dtype, (acc, x, x.const_like(c)))
  return acc

def _pow2i(n: UOp) -> UOp:
  """2^n for an int32 n in [-126, 127], built from its exponent bits."""
  return ((n + 127) << 23).bitcast(_like(dtypes.float32, n))

def _exp2_f32(x: UOp) -> UOp:
  # below -150 every result rounds to 0: those lanes compute 2^0 and are zeroed after, as a tiny product takes a
  # microcode assist of ~100 cycles on x86 (a causal softmax's masked half, exp(-inf): 12x128x128 on one AVX-512
  # thread 660 -> 110 us). Above 129 every result is inf. The clamps keep NaN (comparisons with NaN are false)
  zero = x.lt(-150.0)
  x = zero.where(0.0, x)
  x = x.const_like(129.0).lt(x).where(129.0, x)
  n = (x + _ROUNDER).bitcast(_like(dtypes.int32, x)) - _ROUNDER_BITS
  # round(x) back from the integer, not as (x + R) - R: an algebraic simplifier would be right to fold that to x
  f = x - n.cast(x.dtype)
  p = UOp(Ops.MULACC, x.dtype, (_horner(f, _EXP2_POLY), f, x.const_like(1.0)))
  # scale in two steps so that 2^n never leaves the normal range; only the last multiply rounds (denormal results)
  half = n >> 1
  return zero.where(0.0, p * _pow2i(half) * _pow2i(n - half))

def _log2_f32(x: UOp) -> UOp:
  # denormals are scaled into the normal range first (the flag is also set for 0 and negatives, replaced at the end)
  denormal = x.lt(2.0 ** -126)
  bits = denormal.where(x * 2.0 ** 23, x).bitcast(_like(dtypes.int32, x)) - _SQRT_HALF_BITS
  exponent = (bits >> 23).cast(x.dtype) + denormal.where(x.const_like(-23.0), 0.0)
  m = ((bits & 0x7FFFFF) + _SQRT_HALF_BITS).bitcast(x.dtype)  # in [sqrt(1/2), sqrt(2)): log2(m) is small near 1
  # y = m-1 is exact, and so is 1.5*y (3*y needs at most 24 bits for |y| < 0.42): the leading term carries no rounding,
  # and the rest, y*S(y), is under a fifth of the result, so its rounding errors shrink by that much.
  y = m - 1.0
  r = exponent + UOp(Ops.MULACC, x.dtype, (y, _horner(y, _LOG2_POLY), y * 1.5))
  r = x.ne(math.inf).where(r, math.inf)
  # 0 < x is false for zeros (-inf), negatives and NaN (both NaN)
  return x.const_like(0.0).lt(x).where(r, x.ne(0.0).where(x.const_like(math.nan), -math.inf))

# fdlibm's pi/2 = PIO2_1 + PIO2_2 + PIO2_2T: the first two with 33 significant bits, the rest to double precision
PIO2_1, PIO2_2, PIO2_2T = 1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624879595063154e-21
SIN_REDUCED_UP_TO = 2.0 ** 20  # below, k = round(x * 2/pi) < 2^20 and the products k * PIO2_1, k * PIO2_2 are exact
_ROUNDER_F64 = 6755399441055744.0  # 1.5 * 2^52: t + this rounds t to an integer that sits in the low mantissa bits
_ROUNDER_F64_BITS = 0x4338000000000000
# sin r = r (1 + r^2 S(r^2)) and cos r = 1 - r^2/2 + r^4 * C(r^2), Taylor coefficients, highest power first
_SIN_POLY = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(5, 0, -1))
_COS_POLY = tuple((-1) ** k / math.factorial(2 * k) for k in range(7, 1, -1))

def _fabs(x: UOp) -> UOp: return x.lt(0.0).where(-x, x)

def _sin_f32(x: UOp, quarter_turns: int) -> UOp:
  """sin(x + quarter_turns * pi/2), exactly so: the quarter turns are added to k, not to x (cos is one of them)."""
  d = x.cast(_like(dtypes.float64, x))
  n = (d * (2 / math.pi) + _ROUNDER_F64).bitcast(_like(dtypes.int64, x)) - _ROUNDER_F64_BITS  # round(x * 2/pi)
  k = n.cast(d.dtype)
  r = (d - k * PIO2_1) - k * PIO2_2 - k * PIO2_2T  # x - k pi/2, |r| <= pi/4; the first difference is exact
  r2 = r * r
  sin_r = UOp(Ops.MULACC, d.dtype, (r2, _horner(r2, _SIN_POLY), d.const_like(1.0))) * r  # keeps the sign of -0.0
  cos_r = UOp(Ops.MULACC, d.dtype, (r2 * r2, _horner(r2, _COS_POLY), UOp(Ops.MULACC, d.dtype, (r2, d.const_like(-0.5),
                                                                                              d.const_like(1.0)))))
  # sin(r + q pi/2) is sin r, cos r, -sin r, -cos r as q mod 4 is 0, 1, 2, 3
  q = n + quarter_turns if quarter_turns else n
  v = (q & 1).ne(0).where(cos_r, sin_r)
  v = (q & 2).ne(0).where(-v, v)
  # NaN takes the fast side (and stays NaN); infinities and large values libm's of the exact float64 value
  big = d.const_like(SIN_REDUCED_UP_TO).lt(_fabs(d))
  return big.where(UOp(Ops.COS if quarter_turns else Ops.SIN, d.dtype, (d,)), v).cast(x.dtype)

# below this quotient, trunc(a / b) * b is exact in float64 for float32 a and b (29 + 24 bits), and so is a minus it
MOD_EXACT_BELOW = 2.0 ** 29

def _mod_f32(a: UOp, b: UOp) -> UOp:
  """C's fmod of float32 a and b, exactly: a - trunc(a / b) * b in float64. The rounded quotient can only reach an
  integer it is just below (division rounds correctly), which makes the remainder's sign the opposite of a's: one b
  back fixes it. Infinities, NaN, zero divisors and quotients from 2^29 keep the MOD op (libm's fmod)."""
  ad, bd = a.cast(_like(dtypes.float64, a)), b.cast(_like(dtypes.float64, b))
  abs_a, abs_b = _fabs(ad), _fabs(bd)
  r = ad - UOp(Ops.TRUNC, ad.dtype, (ad / bd,)) * bd
  r = (r.ne(0.0) & r.lt(0.0).ne(ad.lt(0.0))).where(r + ad.lt(0.0).where(-abs_b, abs_b), r)
  r = r.ne(0.0).where(r, ad * 0.0)  # a zero remainder has a's sign
  exact = abs_a.lt(abs_b * MOD_EXACT_BELOW) & abs_b.lt(math.inf)  # false for NaN
  return exact.ne(True).where(UOp(Ops.MOD, ad.dtype, (ad, bd)), r).cast(a.dtype)

# float64: 2^f = sum (f ln 2)^k / k! on f in [-1/2, 1/2], to k = 13 (the next term is under 4e-18 of the result)
_EXP2_F64_POLY = tuple(math.log(2) ** k / math.factorial(k) for k in range(13, -1, -1))
# fdlibm's log: log(1 + f) = f - (f^2/2 - s (f^2/2 + R(s^2))), s = f / (2 + f), R = Lg1 z + ... + Lg7 z^7, z = s^2
_LG = (1.479819860511658591e-01, 1.531383769920937332e-01, 1.818357216161805012e-01, 2.222219843214978396e-01,
       2.857142874366239149e-01, 3.999999999940941908e-01, 6.666666666666735130e-01, 0.0)
_SQRT_HALF_BITS_F64 = 0x3FE6A09E667F3BCD  # float64 bits of sqrt(1/2)

def _pow2i_f64(n: UOp) -> UOp:
  """2^n for an int64 n in [-1022, 1023], built from its exponent bits."""
  return ((n + 1023) << 52).bitcast(_like(dtypes.float64, n))

def _exp2_f64(x: UOp) -> UOp:
  # below -1075 every result rounds to 0 (computed as 2^0, then zeroed: no tiny product, as in _exp2_f32), from 1025
  # to inf; the clamps keep NaN
  zero = x.lt(-1075.0)
  x = zero.where(0.0, x)
  x = x.const_like(1025.0).lt(x).where(1025.0, x)
  n = (x + _ROUNDER_F64).bitcast(_like(dtypes.int64, x)) - _ROUNDER_F64_BITS
  f = x - n.cast(x.dtype)
  half = n >> 1
  return zero.where(0.0, _horner(f, _EXP2_F64_POLY) * _pow2i_f64(half) * _pow2i_f64(n - half))

def _log2_f64(x: UOp) -> UOp:
  denormal = x.lt(2.0 ** -1022)
  bits = denormal.where(x * 2.0 ** 52, x).bitcast(_like(dtypes.int64, x)) - _SQRT_HALF_BITS_F64
  exponent = (bits >> 52).cast(x.dtype) + denormal.where(x.const_like(-52.0), 0.0)
  f = ((bits & ((1 << 52) - 1)) + _SQRT_HALF_BITS_F64).bitcast(x.dtype) - 1.0  # m - 1, m in [sqrt(1/2), sqrt(2))
  s = f / (f + 2.0)
  hfsq = f * f * 0.5
  log_m = f - (hfsq - s * (hfsq + _horner(s * s, _LG)))
  r = UOp(Ops.MULACC, x.dtype, (log_m, x.const_like(1 / math.log(2)), exponent))
  r = x.ne(math.inf).where(r, math.inf)
  return x.const_like(0.0).lt(x).where(r, x.ne(0.0).where(x.const_like(math.nan), -math.inf))

def _in_float32(fn: Callable[..., UOp], x: UOp, *more: UOp) -> UOp:
  """fn of float32 operands: float16 and bfloat16 ones are widened, and the result rounded back once."""
  if x.dtype.scalar() == dtypes.float32: return fn(x, *more)
  return fn(*(v.cast(_like(dtypes.float32, v)) for v in (x, *more))).cast(x.dtype)

def xexp2(x: UOp) -> UOp:
  """2^x (scalar or vector) as vectorizable arithmetic: float64 in float64, the other floats in float32."""
  return _exp2_f64(x) if x.dtype.scalar() == dtypes.float64 else _in_float32(_exp2_f32, x)

def xlog2(x: UOp) -> UOp:
  """log2(x) (scalar or vector) as vectorizable arithmetic: float64 in float64, the other floats in float32."""
  return _log2_f64(x) if x.dtype.scalar() == dtypes.float64 else _in_float32(_log2_f32, x)

def xsin(x: UOp) -> UOp:
  """sin(x) for float16/bfloat16/float32 (scalar or vector): vectorizable float64 arithmetic below 2^20, SIN above."""
  return _in_float32(lambda v: _sin_f32(v, 0), x)

def xcos(x: UOp) -> UOp:
  """cos(x) = sin(x + pi/2), the quarter turn added exactly: as xsin, COS above 2^20."""
  return _in_float32(lambda v: _sin_f32(v, 1), x)

def xmod(a: UOp, b: UOp) -> UOp:
  """fmod(a, b) for float16/bfloat16/float32 (scalar or vector): exact float64 arithmetic, MOD where it would not be."""
  return _in_float32(_mod_f32, a, b)

_FAST = (dtypes.float16, dtypes.bfloat16, dtypes.float32)
pm_fast_math: PatternMatcher[UOp] = PatternMatcher([
  (UPat(Ops.EXP2, dtype=_FAST + (dtypes.float64,), src=(UPat.var("x"),)), xexp2),  # exp2(x) -> polynomial
  (UPat(Ops.LOG2, dtype=_FAST + (dtypes.float64,), src=(UPat.var("x"),)), xlog2),  # log2(x) -> polynomial
  (UPat(Ops.SIN, dtype=_FAST, src=(UPat.var("x"),)), xsin),    # sin(x) -> reduction and polynomials
  (UPat(Ops.COS, dtype=_FAST, src=(UPat.var("x"),)), xcos),    # cos(x) -> reduction and polynomials
  (UPat(Ops.MOD, dtype=_FAST, src=(UPat.var("a"), UPat.var("b"))), xmod),  # fmod(a, b) -> float64 arithmetic
])
