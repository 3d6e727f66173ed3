"""More elementwise math, on top of unary.py: the special functions (erfc, erfinv, lgamma, digamma, sinc), numpy's and
torch's functions of one or two numbers (atan2, logaddexp2, heaviside, fmax/fmin, frac, angle conversion, ldexp and
frexp, gcd/lcm, infinity tests), torch's conveniences on clamp and arithmetic (clamp_min, nan_to_num, addcmul, ...) and
the activations hardshrink and prelu.

As in unary.py, everything is composed from the primitive ops, so it fuses and gets its gradient from their rules. The
special functions of float32 and the half types are computed in float64 and rounded once: their series and
reflections cancel near the zeros of lgamma and digamma, where float64 keeps the float32 result within a few ulp.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from lazytensor.dtype import dtypes
from lazytensor.frontend.mixin.elementwise import _FLOAT_BITS, _largest_finite
from lazytensor.frontend.mixin.operands import check_operand
from lazytensor.frontend.mixin.unary import UnaryMixin
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="SpecialMixin")

# (x + 2) * exp(x^2) * erfc(x) for x >= 0 as a Chebyshev series in t = (x - 2) / (x + 2) in [-1, 1): a least-squares
# fit on 800 Chebyshev nodes to 40-digit values (mpmath) made for this file; relative error 3e-15, about the rounding
# of its float64 evaluation. It tends to 1/sqrt(pi) as x grows, so erfc keeps its relative accuracy far into the tail.
ERFCX_CHEB = (1.1540674772329393, -0.7108738425409971, 0.1301903176575729, -0.007342284791673426,
              -0.002225689486705304, 0.000321516598307289, 6.556063148328419e-05, -1.088488329096527e-05,
              -3.0309331106580515e-06, 2.8595216366953243e-07, 1.6469217637865386e-07, 2.5925695641240913e-09,
              -8.309443287466843e-09, -1.269411456174915e-09, 2.864163577657711e-10, 1.2320785918972348e-10,
              4.122151097822568e-12, -7.142986202524071e-12, -1.7174262012531478e-12, 1.2282397321428111e-13,
              1.481703648664734e-13, 2.5668356329333624e-14, -4.81836792687318e-15, -3.0198066269804265e-15,
              -2.664535259100376e-16)
# past this erfc(x) is below the smallest float64 (erfc(27.3) = 5e-326): x is clamped to it, keeping t below 1
ERFC_ZERO_FROM = 27.5
# erfc of float32 and the half types: (x + 2) * exp(x^2) * erfc(x) as a polynomial in t = (x - 2) / (x + 2), for
# x in [0, ERFC_F32_ZERO_FROM] (t in [-1, 0.68]), fit by Lawson's reweighted least squares on 600 Chebyshev nodes to
# 40-digit values (mpmath) for this file: relative error 4e-9, a 15th of float32's half ulp. Past 10.5 erfc(x) is
# below half the smallest float32 subnormal (erfc(10.06) = 7e-46) and exp(-x^2) rounds to 0: x is clamped there.
ERFCX_F32 = (1.021582708835326, -0.6871606962906793, 0.27947175735983876, -0.03644181930397086, -0.02150555923379857,
             0.006476270275762003, 0.0030620767917092645, -0.0008335547613382704, -0.0005924284314535178,
             4.875084109693534e-05, 7.040259369159307e-05)
ERFC_F32_ZERO_FROM = 10.5
# ln 2 in two parts for exp(-x^2) = 2^-n exp(-(x^2 - n ln 2)) (Cody and Waite): the head has 16 bits, so n * LN2_HI
# (n < 2^8) is exact and so is x_hi^2 - n * LN2_HI (both multiples of 2^-16 below 2^8)
LN2_HI = 45426 / 65536
LN2_LO = math.log(2) - LN2_HI
# the Stirling series of lgamma and the asymptotic series of digamma, in 1/z^2: B_2k / (2k (2k - 1)) and B_2k / 2k.
# For z >= 8 the first left out is below 4e-16 of the result; smaller arguments are moved up by the recurrences
STIRLING = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156, -3617 / 122400)
DIGAMMA = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)
SERIES_FROM = 8
# Winitzki's approximation of erfinv (relative error 2e-3), which two Halley steps take to 2e-15 (measured on [0, 1))
WINITZKI_A = 0.147
# erfinv(x) / x for float32 as polynomials in w = -log((1 - x)(1 + x)) (M. Giles, "Approximating the erfinv function",
# GPU Computing Gems Jade, 2011): in w - 2.5 below w = 5 (|x| < 0.99663), in sqrt(w) - 3 above; within a few float32
# ulp, the product (1 - x)(1 + x) keeping its accuracy near +-1, and log(1 - x^2)'s rounding near 0 damped by the
# polynomial's small slope there. Vectorizable float32 arithmetic: the float64 Halley steps took 23x torch's time
GILES_CENTRAL = (1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087, -4.39150654e-06,
                 -3.5233877e-06, 3.43273939e-07, 2.81022636e-08)
GILES_TAIL = (2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773, -0.00367342844, 0.00134934322,
              0.000100950558, -0.000200214257)
GILES_TAIL_FROM = 5.0

def _poly(x: TensorT, coeffs: tuple[float, ...]) -> TensorT:
  """coeffs[0] + coeffs[1]*x + ... by Horner's rule."""
  acc = x * coeffs[-1] + coeffs[-2]
  for c in reversed(coeffs[:-2]): acc = acc * x + c
  return acc

def _chebyshev(t: TensorT, coeffs: tuple[float, ...]) -> TensorT:
  """sum c_k T_k(t) by Clenshaw's recurrence (a power basis of this degree would cancel)."""
  b2: TensorT | float
  b1, b2 = t * (2 * coeffs[-1]) + coeffs[-2], coeffs[-1]
  for c in reversed(coeffs[1:-2]): b1, b2 = t * 2 * b1 - b2 + c, b1
  return t * b1 - b2 + coeffs[0]

def _erfc_nonneg(a: TensorT) -> TensorT:
  """erfc(a) for a >= 0 (float64), to its relative accuracy however small it is."""
  ac = a.minimum(ERFC_ZERO_FROM)
  return (-(ac * ac)).exp() * _chebyshev((ac - 2) / (ac + 2), ERFCX_CHEB) / (ac + 2)

def _erfc(x: TensorT) -> TensorT:
  neg = x < 0
  r = _erfc_nonneg(neg.where(-x, x))
  return neg.where(2 - r, r)

def _exp_neg_square(a: TensorT) -> tuple[TensorT, TensorT]:
  """exp(-a^2) = m * 2^-n for float32 a in [0, ERFC_F32_ZERO_FROM], to a few ulp: exp(-(a * a)) would carry the
  rounding of a * a, up to 100 times 2^-24 relative at a = 10 (60 ulp), and exp's own reduction of the product by
  ln 2 as much again. a = hi + lo with hi on a grid of 2^-8, so hi^2 is exact (12 bits squared) and a^2 = hi^2 +
  (a - hi)(a + hi), the second term small; n is hi^2 / ln 2 rounded, and the rest, under 0.45, is what exp2 takes."""
  hi = (a * 256).trunc() * (1 / 256)
  s_hi, s_lo = hi * hi, (a - hi) * (a + hi)
  n = (s_hi * (1 / math.log(2)) + 0.5).trunc()
  rest = (s_hi - n * LN2_HI) - n * LN2_LO + s_lo
  return (rest * (-1 / math.log(2))).exp2(), n

def _times_pow2_neg(m: TensorT, n: TensorT) -> TensorT:
  """m * 2^-n for float32 m and integral n in [0, 160]: two halves, each a power of two built from its exponent bits,
  that stay normal, so that a result below the normal range rounds once."""
  half = (n * 0.5).trunc().cast(dtypes.int32)
  rest = n.cast(dtypes.int32) - half
  return m * ((127 - half) << 23).bitcast(dtypes.float32) * ((127 - rest) << 23).bitcast(dtypes.float32)

def _erfc_f32(x: TensorT) -> TensorT:
  """erfc of float32 from exp(-a^2) (_exp_neg_square) and the polynomial ERFCX_F32 for a = |x|, 2 - erfc(a) for
  negative x: within 4.3 ulp of the exact value (0.4 on average) over the whole range, subnormal results included
  (measured against mpmath on 150,000 points; torch's: 0.84 ulp), in float32 arithmetic that vectorizes: the float64
  series took 8.7x torch's time, this 1.3-1.5x (one AVX2 core). The derivative -2/sqrt(pi) exp(-x^2) is stated, from
  the same exp(-x^2): the polynomial's own would be less accurate."""
  xd = x.detach()
  a = xd.abs().minimum(ERFC_F32_ZERO_FROM)
  m, n = _exp_neg_square(a)
  r = _times_pow2_neg(m * _poly((a - 2) / (a + 2), ERFCX_F32) / (a + 2), n)
  y = (xd < 0).where(2 - r, r)
  d = _times_pow2_neg(*_exp_neg_square(x.abs().minimum(ERFC_F32_ZERO_FROM))) * (-2 / math.sqrt(math.pi))
  return y._apply_uop(lambda v, u, du: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, u, du)), x, d)

def _erfinv(x: TensorT) -> TensorT:
  a = x.abs()
  inside = a < 1
  ai = inside.where(a, 0.5)
  far = ai > 0.5
  log_1ma2 = ((1 - ai) * (1 + ai)).log()
  b = 2 / (math.pi * WINITZKI_A) + log_1ma2 / 2
  y = ((b * b - log_1ma2 / WINITZKI_A).sqrt() - b).sqrt()
  def halley(y: TensorT) -> TensorT:
    # erf(y) - a, taken from erfc where a is near 1: 1 - a is exact there, and erf(y) - a would cancel
    residual = far.where((1 - ai) - _erfc_nonneg(y), y.erf() - ai)
    u = residual / ((-(y * y)).exp() * (2 / math.sqrt(math.pi)))
    return y - u / (1 + y * u)
  # only the last step carries the gradient: at the root its derivative is 1 / erf'(y), that of erfinv
  y = halley(halley(y.detach()).detach())
  y = inside.where(y, a.eq(1).where(math.inf, math.nan))
  return x.signbit().where(-y, y)

def _erfinv_f32(x: TensorT) -> TensorT:
  """erfinv of float32 by Giles' polynomials, with the derivative stated: sqrt(pi)/2 exp(erfinv(x)^2) (the chain rule
  through the polynomials would give theirs)."""
  xd = x.detach()
  w = -((1 - xd) * (1 + xd)).log()
  tail = w >= GILES_TAIL_FROM
  central = _poly(tail.where(0.0, w) - 2.5, GILES_CENTRAL)
  far = _poly(tail.where(w, 9.0).sqrt() - 3, GILES_TAIL)  # outside [-1, 1] w is NaN, at +-1 inf: patched below
  a = xd.abs()
  y = (a < 1).where(tail.where(far, central) * xd, (a == 1).where(xd * math.inf, math.nan))
  dy = (-y.abs()).maximum(-1e19)  # keeps y * y finite where y is inf: the derivative is inf there, not NaN
  d = (dy * dy).exp() * (math.sqrt(math.pi) / 2)
  return y._apply_uop(lambda v, u, du: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, u, du)), x, d)

def _reflected(x: TensorT, series: Callable[[TensorT], TensorT],
               reflect: Callable[[TensorT, TensorT], TensorT]) -> TensorT:
  """f(x) from series(y) = f(y) for y >= 1/2, and reflect(f(1 - x), r) below 1/2, where r = x - round(x) in
  [-1/2, 1/2] gives sin(pi x) and tan(pi x) up to sign without the rounding of pi * x."""
  neg = x < 0.5
  fy = series(neg.where(1 - x, x))
  xn = neg.where(x, 0.25)
  return neg.where(reflect(fy, xn - xn.round()), fy)

def _moved_up(y: TensorT) -> tuple[TensorT, TensorT, TensorT]:
  """For y >= 1/2: whether y is below SERIES_FROM, the argument the series takes (y moved up by SERIES_FROM there),
  and y where it is moved (1 elsewhere, keeping the recurrence's terms finite)."""
  small = y < SERIES_FROM
  return small, small.where(y + SERIES_FROM, y), small.where(y, 1.0)

def _lgamma_series(y: TensorT) -> TensorT:
  small, z, ys = _moved_up(y)
  # lgamma(y) = lgamma(y + 8) - log(y (y + 1) ... (y + 7)); z is clamped so that (z - 1/2) log z - z is not inf - inf
  prod = ys
  for k in range(1, SERIES_FROM): prod = prod * (ys + k)
  zc = z.minimum(1e306)
  w = 1 / zc
  stirling = (zc - 0.5) * zc.log() - zc + 0.5 * math.log(2 * math.pi) + w * _poly(w * w, STIRLING)
  return stirling - small.where(prod.log(), 0.0)

def _lgamma(x: TensorT) -> TensorT:
  # lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x); at the poles (x = 0, -1, ...) sin(pi r) is exactly 0
  out = _reflected(x, _lgamma_series, lambda f, r: math.log(math.pi) - (r * math.pi).sin().abs().log() - f)
  # the zeros at 1 and 2 are exact, as C's lgamma (the series and the recurrence cancel to within 2e-15 there), with
  # out's gradient (digamma): a constant 0 had none
  return x.eq(-math.inf).where(math.inf, (x.eq(1) | x.eq(2)).where(out - out.detach(), out))

def _digamma_series(y: TensorT) -> TensorT:
  small, z, ys = _moved_up(y)
  # digamma(y) = digamma(y + 8) - (1/y + 1/(y + 1) + ... + 1/(y + 7))
  harmonic = ys.reciprocal()
  for k in range(1, SERIES_FROM): harmonic = harmonic + (ys + k).reciprocal()
  w = 1 / z
  return z.log() - 0.5 * w - w * w * _poly(w * w, DIGAMMA) - small.where(harmonic, 0.0)

def _digamma(x: TensorT) -> TensorT:
  # digamma(x) = digamma(1 - x) - pi / tan(pi x)
  out = _reflected(x, _digamma_series, lambda f, r: f - math.pi * (r * math.pi).cos() / (r * math.pi).sin())
  # the poles, as torch: -inf at 0.0, inf at -0.0, NaN at the negative integers
  pole = (x <= 0) & x.eq(x.round())
  return pole.where(x.eq(0).where(x.signbit().where(math.inf, -math.inf), math.nan), out)

def _atan2(y: TensorT, x: TensorT) -> TensorT:
  ay, ax = y.abs(), x.abs()
  big, small = ay.maximum(ax), ay.minimum(ax)
  # the angle from the smaller side over the larger (in [0, 1], where atan is accurate); 0/0 is 0 and inf/inf is 1
  ratio = (ay.isinf() & ax.isinf()).where(1.0, big.eq(0).where(0.0, small / big.eq(0).where(1.0, big)))
  r = ratio.atan()
  r = (ay > ax).where(math.pi / 2 - r, r)
  r = x.signbit().where(math.pi - r, r)
  return y.signbit().where(-r, r)

def _euclid_steps(bits: int) -> int:
  """Steps of Euclid's algorithm that take any two values of `bits` bits to their gcd: the worst case is consecutive
  Fibonacci numbers, about log_phi(2^bits) = 1.44 bits steps (Lame's theorem)."""
  return int(bits * 1.45) + 2

class SpecialMixin(UnaryMixin):
  """Tensor's special functions and numpy's and torch's further elementwise functions: on the unary mixin."""
  __slots__ = ()

  def _in_float64(self, fn: Callable[[Self], Self]) -> Self:
    """fn of self as a float, computed in float64 and rounded once to self's float dtype (ints become the default)."""
    x = self._to_float()
    return fn(x.cast(dtypes.float64)).cast(x.dtype)

  # ---- special functions ----

  def erfc(self) -> Self:
    """The complementary error function 1 - erf(x), accurate where it is tiny: within 4.3 ulp in float32 (subnormal
    results included) from a polynomial and an exp(-x^2) without the rounding of x^2, about 1e-14 relative in float64.

    >>> [f"{v:.4e}" for v in Tensor([0.0, 5.0, -1.0]).erfc().tolist()]
    ['1.0000e+00', '1.5375e-12', '1.8427e+00']
    """
    x = self._to_float()
    return _erfc(x) if x.dtype == dtypes.float64 else x._float_op(_erfc_f32)

  def erfinv(self) -> Self:
    """The inverse error function on [-1, 1] (+-inf at +-1, NaN outside): float64 by Winitzki's approximation and two
    Halley steps (near +-1 on erfc), the other floats by Giles' float32 polynomials.

    >>> [round(v, 6) for v in Tensor([0.0, 0.5, -0.9]).erfinv().tolist()]
    [0.0, 0.476936, -1.163087]
    """
    x = self._to_float()
    return _erfinv(x) if x.dtype == dtypes.float64 else x._float_op(_erfinv_f32)

  def lgamma(self) -> Self:
    """log|gamma(x)|: the Stirling series, with the recurrence below 8 and the reflection formula below 1/2 (inf at
    the poles 0, -1, -2, ...).

    >>> [round(v, 4) for v in Tensor([0.5, 3.0, 100.0, -2.5]).lgamma().tolist()]
    [0.5724, 0.6931, 359.1342, -0.0562]
    """
    return self._in_float64(_lgamma)

  def digamma(self) -> Self:
    """The derivative of lgamma: an asymptotic series, with the recurrence below 8 and the reflection formula below
    1/2; at the poles -inf (0.0), inf (-0.0) or NaN (the negative integers), as torch.

    >>> [round(v, 6) for v in Tensor([1.0, 0.5, 10.0]).digamma().tolist()]
    [-0.577216, -1.96351, 2.251753]
    """
    return self._in_float64(_digamma)

  def sinc(self) -> Self:
    """The normalized sinc, sin(pi x) / (pi x), and 1 at 0.

    >>> [round(v, 6) for v in Tensor([0.0, 0.5, 1.0]).sinc().tolist()]
    [1.0, 0.63662, -0.0]
    """
    def fn(x: Self) -> Self:
      zero = x.eq(0)
      px = zero.where(1.0, x) * math.pi
      return zero.where(1.0, px.sin() / px)
    return self._float_op(fn)

  # ---- functions of two numbers ----

  def atan2(self, other: Self | Any) -> Self:
    """The angle of the point (other, self) in (-pi, pi], as torch.atan2(self, other): quadrants, signed zeros and
    infinities as C's atan2. Ints become float.

    >>> [round(v, 6) for v in Tensor([1.0, 1.0, -0.0]).atan2(Tensor([1.0, -1.0, -1.0])).tolist()]
    [0.785398, 2.356194, -3.141593]
    """
    return self._float_pair("atan2", other, _atan2)

  def logaddexp2(self, other: Self | Any) -> Self:
    """log2(2^self + 2^other) without overflow: logaddexp in base 2.

    >>> Tensor([1.0, 100.0]).logaddexp2(Tensor([1.0, 0.0])).tolist()
    [2.0, 100.0]
    """
    check_operand("logaddexp2", "other", other)
    return (self._to_float() * math.log(2)).logaddexp(other * math.log(2)) / math.log(2)

  def heaviside(self, values: Self | Any) -> Self:
    """The step function: 0 where self < 0, `values` where self == 0, 1 where self > 0 (and 0 at NaN, as torch).
    The dtype is self's and values' common one (torch asks for them to be equal).

    >>> Tensor([-2.0, 0.0, 3.0]).heaviside(0.5).tolist()
    [0.0, 0.5, 1.0]
    """
    check_operand("heaviside", "values", values)
    x, v = self._broadcasted(values)
    return x.eq(0).where(v, (x > 0).cast(x.dtype))

  def fmax(self, other: Self | Any) -> Self:
    """The elementwise larger value, ignoring NaN (NaN only where both are), as numpy.fmax; maximum propagates it.

    >>> Tensor([1.0, float("nan"), float("nan")]).fmax(Tensor([2.0, 3.0, float("nan")])).tolist()
    [2.0, 3.0, nan]
    """
    return self._nan_ignoring("fmax", other, lambda a, b: a.maximum(b))

  def fmin(self, other: Self | Any) -> Self:
    """The elementwise smaller value, ignoring NaN (NaN only where both are), as numpy.fmin.

    >>> Tensor([1.0, float("nan")]).fmin(Tensor([2.0, 3.0])).tolist()
    [1.0, 3.0]
    """
    return self._nan_ignoring("fmin", other, lambda a, b: a.minimum(b))

  def _nan_ignoring(self, name: str, other: Self | Any, fn: Callable[[Self, Self], Self]) -> Self:
    check_operand(name, "other", other)
    a, b = self._broadcasted(other)
    if not a.dtype.is_float: return fn(a, b)
    return a.isnan().where(b, b.isnan().where(a, fn(a, b)))

  def ldexp(self, other: Self | Any) -> Self:
    """self * 2^other, as torch.ldexp (a float result; ints become the default float).

    >>> Tensor([1.0, 3.0]).ldexp(Tensor([3, -1])).tolist()
    [8.0, 1.5]
    """
    check_operand("ldexp", "other", other)
    x, e = self._broadcasted_float(other)
    return x * e.exp2()

  def float_power(self, exponent: Self | Any) -> Self:
    """self ** exponent computed in float64, whatever the dtypes, as torch.float_power.

    >>> Tensor([2, 4]).float_power(0.5).tolist()
    [1.4142135623730951, 2.0]
    """
    check_operand("float_power", "exponent", exponent)
    e = exponent.cast(dtypes.float64) if self._is_tensor(exponent) else exponent
    return self.cast(dtypes.float64).pow(e)

  def gcd(self, other: Self | Any) -> Self:
    """The greatest common divisor of ints (never negative; gcd(0, 0) = 0), by Euclid's algorithm unrolled to its
    worst case for the dtype's width.

    >>> Tensor([12, 0, -7]).gcd(Tensor([18, 5, 21])).tolist()
    [6, 5, 7]
    """
    check_operand("gcd", "other", other)
    a, b = self._broadcasted(other)
    if not a.dtype.is_int: raise TypeError(f"gcd: needs int tensors, got {a.dtype}")
    a, b = a.abs(), b.abs()
    for _ in range(_euclid_steps(8 * a.dtype.itemsize)):
      done = b.eq(0)
      a, b = done.where(a, b), done.where(0, a.fmod(done.where(1, b)))
    return a

  def lcm(self, other: Self | Any) -> Self:
    """The least common multiple of ints (never negative; 0 when either is 0).

    >>> Tensor([4, 6, 0]).lcm(Tensor([6, -4, 5])).tolist()
    [12, 12, 0]
    """
    g = self.gcd(other)
    a, b = self._broadcasted(other)
    return g.eq(0).where(0, (a // g.eq(0).where(1, g) * b).abs())

  # ---- functions of one number ----

  def frac(self) -> Self:
    """The fractional part, x - trunc(x), with the sign of x (NaN at +-inf), as torch.frac; floats only.

    >>> Tensor([1.5, -2.25]).frac().tolist()
    [0.5, -0.25]
    """
    if not self.dtype.is_float: raise TypeError(f"frac: needs a float tensor, got {self.dtype}")
    return self - self.trunc()

  def angle(self) -> Self:
    """The argument of each value as a complex number: pi for negative values, 0 otherwise (NaN stays NaN), as
    torch.angle of a real tensor. Ints become float.

    >>> [round(v, 6) for v in Tensor([-2.0, 0.0, 3.0]).angle().tolist()]
    [3.141593, 0.0, 0.0]
    """
    x = self._to_float()
    return x.isnan().where(x, (x < 0).where(math.pi, 0.0))

  def deg2rad(self) -> Self:
    """Degrees to radians (ints become float).

    >>> round(Tensor([180]).deg2rad().item(), 6)
    3.141593
    """
    return self._to_float() * (math.pi / 180)

  def rad2deg(self) -> Self:
    """Radians to degrees (ints become float).

    >>> Tensor([math.pi]).rad2deg().item()
    180.0
    """
    return self._to_float() * (180 / math.pi)

  def isposinf(self) -> Self:
    """True where the value is +inf (never for ints).

    >>> Tensor([1.0, float("inf"), -float("inf")]).isposinf().tolist()
    [False, True, False]
    """
    return self.eq(math.inf) if self.dtype.is_float else self.zeros_like(dtype=dtypes.bool)

  def isneginf(self) -> Self:
    """True where the value is -inf (never for ints).

    >>> Tensor([1.0, float("inf"), -float("inf")]).isneginf().tolist()
    [False, False, True]
    """
    return self.eq(-math.inf) if self.dtype.is_float else self.zeros_like(dtype=dtypes.bool)

  def isreal(self) -> Self:
    """True everywhere: lazytensor has no complex dtypes (torch's isreal is False where the imaginary part is not 0).

    >>> Tensor([1.0, float("nan")]).isreal().tolist()
    [True, True]
    """
    return self.ones_like(dtype=dtypes.bool)

  def frexp(self) -> tuple[Self, Self]:
    """x as mantissa * 2^exponent with |mantissa| in [0.5, 1), as torch.frexp: (mantissa, int32 exponent), read
    from the bits (exact, subnormals included); 0, inf and NaN are their own mantissa with exponent 0.

    >>> [t.tolist() for t in Tensor([8.0, -0.75, 0.0]).frexp()]
    [[0.5, -0.75, 0.0], [4, 0, 0]]
    """
    dt = self.dtype
    if not dt.is_float: raise TypeError(f"frexp: needs a float tensor, got {dt}")
    mbits, ebits = _FLOAT_BITS[dt.name]
    itype = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[dt.itemsize]
    bias, field_mask = 2 ** (ebits - 1) - 1, 2 ** ebits - 1
    # subnormals are first scaled into the normal range by a power of two (exact)
    sub = (self.abs() < 2.0 ** (1 - bias)) & self.ne(0)
    bits = sub.where(self * 2.0 ** (mbits + 1), self).bitcast(itype)
    exponent = ((bits >> mbits) & field_mask) - (bias - 1) - sub.where(mbits + 1, 0)
    # the exponent field set to that of [0.5, 1), sign and mantissa bits kept
    mantissa = ((bits & ~(field_mask << mbits)) | ((bias - 1) << mbits)).bitcast(dt)
    special = self.eq(0) | ~self.isfinite()
    return special.where(self, mantissa), special.where(0, exponent).cast(dtypes.int32)

  # ---- torch's conveniences on top of clamp and arithmetic ----

  def clamp_min(self, min: Self | Any) -> Self:
    """clamp(min=min): the values below `min` raised to it.

    >>> Tensor([-1.0, 2.0]).clamp_min(0).tolist()
    [0.0, 2.0]
    """
    return self.clamp(min=min)

  def clamp_max(self, max: Self | Any) -> Self:
    """clamp(max=max): the values above `max` lowered to it.

    >>> Tensor([-1.0, 2.0]).clamp_max(0).tolist()
    [-1.0, 0.0]
    """
    return self.clamp(max=max)

  def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Self:
    """NaN replaced by `nan`, +inf by `posinf` and -inf by `neginf` (by default the dtype's largest and lowest finite
    values), as torch.nan_to_num; ints and bools have none of them and come back as they are.

    >>> Tensor([float("nan"), float("inf"), -float("inf"), 1.5]).nan_to_num(posinf=9.0).tolist()
    [0.0, 9.0, -3.4028234663852886e+38, 1.5]
    """
    for name, v in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
      if v is not None and (not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool)):
        raise TypeError(f"nan_to_num: {name} must be a number, got {v!r}")
    if not self.dtype.is_float: return self
    big = _largest_finite(self.dtype)
    x = self.isnan().where(nan, self)
    x = (self == math.inf).where(big if posinf is None else posinf, x)
    return (self == -math.inf).where(-big if neginf is None else neginf, x)

  def addcmul(self, tensor1: Self | Any, tensor2: Self | Any, *, value: float = 1.0) -> Self:
    """self + value * tensor1 * tensor2, as torch.addcmul (the operands broadcast).

    >>> Tensor([1.0, 1.0]).addcmul(Tensor([2.0, 3.0]), Tensor([4.0, 5.0]), value=0.5).tolist()
    [5.0, 8.5]
    """
    return self + value * (self._broadcasted(tensor1)[1] * tensor2)

  def addcdiv(self, tensor1: Self | Any, tensor2: Self | Any, *, value: float = 1.0) -> Self:
    """self + value * tensor1 / tensor2, as torch.addcdiv (the operands broadcast; ints divide as floats).

    >>> Tensor([1.0, 1.0]).addcdiv(Tensor([2.0, 3.0]), Tensor([4.0, 6.0]), value=2.0).tolist()
    [2.0, 2.0]
    """
    return self + value * (self._broadcasted(tensor1)[1] / tensor2)

  # ---- activations ----

  def hardshrink(self, lambd: float = 0.5) -> Self:
    """x where |x| > lambd, else 0, as torch.nn.functional.hardshrink.

    >>> Tensor([-1.0, 0.25, 0.75]).hardshrink().tolist()
    [-1.0, 0.0, 0.75]
    """
    if not isinstance(lambd, (int, float)) or isinstance(lambd, bool) or lambd < 0:
      raise ValueError(f"hardshrink: lambd must be a non-negative number, got {lambd!r}")
    return (self.abs() > lambd).where(self, 0)

  def prelu(self, weight: Self) -> Self:
    """x where x > 0, else weight * x, with one weight for all (weight of one element) or one per channel (dim 1),
    as torch.nn.functional.prelu.

    >>> Tensor([[-2.0, 3.0], [-4.0, -1.0]]).prelu(Tensor([0.5, 0.25])).tolist()
    [[-1.0, 3.0], [-2.0, -0.25]]
    """
    if not self._is_tensor(weight): raise TypeError(f"prelu: weight must be a Tensor, got {type(weight).__name__}")
    channels = self.shape[1] if self.ndim >= 2 else 1
    if weight.ndim > 1 or weight.numel() not in (1, channels):
      raise ValueError(f"prelu: weight of shape {weight.shape} must have 1 or {channels} elements (the channels, "
                       f"dim 1 of {self.shape})")
    w = weight.reshape(()) if weight.numel() == 1 else weight.reshape(channels, *[1] * (self.ndim - 2))
    return (self > 0).where(self, w * self)
