"""exp2 and log2 as plain UOp arithmetic, so that they vectorize: libm's exp2f/log2f are scalar calls, and they make
softmax exp-bound on the CPU.

Both are computed in float32 (float16 and bfloat16 inputs are widened, then rounded back) to within 1 ulp of the exact
result over the whole float32 range (measured: 0.93 ulp exp2, 0.87 ulp log2), with IEEE behaviour at the edges.
float64 is left to the llvm intrinsics (libm): its polynomials would need twice the terms, and no kernel we know of is
float64-exp-bound.

The polynomial coefficients are minimax fits (Lawson's iteratively reweighted least squares on Chebyshev nodes, in
float64): 2^f on f in [-1/2, 1/2] to 2e-9 relative error, and log2(1+y)/y - 1.5 on y in [sqrt(1/2)-1, sqrt(2)-1] to 6e-9
absolute, both well under float32's half ulp (6e-8), so float32 rounding dominates the error.
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
  # below -151 every result rounds to 0, above 129 to inf; the clamps keep NaN (comparisons with NaN are false)
  x = x.lt(-151.0).where(-151.0, x)
  x = x.const_like(129.0).lt(x).where(129.0, x)
  n = (x + _ROUNDER).bitcast(_like(dtypes.int32, x)) - _ROUNDER_BITS
  # round(x) back from the integer, not as (x + R) - R: an algebraic simplifier would be right to fold that to x
  f = x - n.cast(x.dtype)
  p = UOp(Ops.MULACC, x.dtype, (_horner(f, _EXP2_POLY), f, x.const_like(1.0)))
  # scale in two steps so that 2^n never leaves the normal range; only the last multiply rounds (denormal results)
  half = n >> 1
  return p * _pow2i(half) * _pow2i(n - half)

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

def _in_float32(fn: Callable[[UOp], UOp], x: UOp) -> UOp:
  if x.dtype.scalar() == dtypes.float32: return fn(x)
  return fn(x.cast(_like(dtypes.float32, x))).cast(x.dtype)

def xexp2(x: UOp) -> UOp:
  """2^x for float16/bfloat16/float32 (scalar or vector) as vectorizable arithmetic; float64 keeps the EXP2 op."""
  if x.dtype.scalar() == dtypes.float64: return UOp(Ops.EXP2, x.dtype, (x,))
  return _in_float32(_exp2_f32, x)

def xlog2(x: UOp) -> UOp:
  """log2(x) for float16/bfloat16/float32 (scalar or vector) as vectorizable arithmetic; float64 keeps the LOG2 op."""
  if x.dtype.scalar() == dtypes.float64: return UOp(Ops.LOG2, x.dtype, (x,))
  return _in_float32(_log2_f32, x)

_FAST = (dtypes.float16, dtypes.bfloat16, dtypes.float32)
pm_fast_math: PatternMatcher[UOp] = PatternMatcher([
  (UPat(Ops.EXP2, dtype=_FAST, src=(UPat.var("x"),)), xexp2),  # exp2(x) -> polynomial
  (UPat(Ops.LOG2, dtype=_FAST, src=(UPat.var("x"),)), xlog2),  # log2(x) -> polynomial
])
