"""Elementwise functions of one tensor: roots, exponentials, trigonometry, rounding, sign, tests of values and
activations.

Everything is composed from the primitive ops (EXP2, LOG2, SIN, SQRT, RECIP, TRUNC, arithmetic, comparisons, WHERE),
so it fuses into one kernel and gets its gradient from the rules of those ops. Three habits run through the file:
  * float functions take ints and bools as the default float, and compute float16 in float32, rounding once at the
    end (as torch does on the CPU): intermediates such as x*x overflow float16 at x = 256;
  * a branch chosen by `where` gets an input clamped into its own domain: the unchosen branch still runs, and an inf
    in it would turn its zero gradient into NaN (0 * inf);
  * odd functions are computed on |x| and given the sign bit of x back, so that f(-0.0) is -0.0.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from lazytensor.dtype import DType, dtypes
from lazytensor.helpers import dim_alias
from lazytensor.mixin.stub import TensorStub
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

# ---- polynomial approximations ----
# Minimax fits made for this file: Lawson's iteratively reweighted least squares on Chebyshev nodes, in 50-digit
# arithmetic (mpmath), weighted for relative error (absolute for the erf tail, where 1 - erfc is what is returned).
# The error of each fit, with its coefficients rounded to float64, is far below the rounding of its float type: the
# measured errors of the whole functions are about 2 ulp in float32 and float64.

# atan(x) = x + x^3 * P(x^2) for x in [0, 1]; fit error 2.6e-9 (float32) and 4.4e-17 (float64), relative
ATAN_F32 = (-0.33333299006373, 0.1999854644811177, -0.14264222682942465, 0.10952085304772247, -0.08403157131020658,
            0.05795264643796738, -0.031173025136088658, 0.010912083187047223, -0.0017930724565677109)
ATAN_F64 = (-0.33333333333331866, 0.19999999999755697, -0.14285714271364894, 0.11111110679432193, -0.0909090124486817,
            0.07692213018554489, -0.06665860942425775, 0.058773105725268775, -0.05239243196558108,
            0.04673977968351123, -0.04092699055438709, 0.034068820156803334, -0.025828088038635087,
            0.016979297498454567, -0.009185482836335277, 0.0038564651109924677, -0.0011642497996559285,
            0.00022306197057336212, -2.026261107773926e-05)
# erf(x) = x * P(x^2) for |x| <= 1; fit error 1.2e-9 (float32) and 4.2e-17 (float64), relative
ERF_SMALL_F32 = (1.128379165723012, -0.3761262581621419, 0.11283585173435849, -0.02685381635160897,
                 0.005188340907835039, -0.000801034322469772, 7.854445047751588e-05)
ERF_SMALL_F64 = (1.1283791670955126, -0.37612638903183754, 0.11283791670955119, -0.026866170645129733,
                 0.0052239776254220825, -0.0008548327021853344, 0.00012055332899377441, -1.4925647466021044e-05,
                 1.6462043431678235e-06, -1.6364614819908905e-07, 1.479215002725303e-08, -1.216307059285011e-09,
                 8.703899479814667e-11, -4.223078738524343e-12)
# erfc(x) = exp(-x^2) * P(t) for x in [1, hi], t = (2x - (hi + 1)) / (hi - 1) in [-1, 1]; beyond hi, erf(x) rounds to 1
# (hi = 4 for float32, 6 for float64); fit error 2.4e-9 (float32) and 4.6e-17 (float64), absolute
ERF_TAIL_F32 = (0.21080760151028455, -0.11151323671084219, 0.056058269695763475, -0.027445869429583398,
                0.01165356636887363, -0.005032521025261609, 0.006169506483184241, 0.003831306780120538,
                0.00273430490532819)
ERF_TAIL_F64 = (0.15529365560721986, -0.10330894457940351, 0.0666320833730084, -0.041766778346501034,
                0.025495569585537912, -0.015182879457484567, 0.008831175359862584, -0.005031241366222167,
                0.002821073869639534, -0.0014417634967422621, 0.0009637180545157078, -0.0005563418609507045,
                -0.0006612787693903487, -0.0016178888578677324, -0.0006669637865004834, 0.0015530074349066,
                0.003620513955564871, 0.0036295338880662285, 0.0021285501212157222, 0.000704472181609804,
                0.00010665432454388711)
# Taylor series, which converge fast enough on the small ranges they serve:
# sinh(a) = a + a^3 * P(a^2) for a < 1 (P: 1/3!, 1/5!, ...), next term under 2e-10 (float32) and 2e-20 (float64)
SINH_F32 = tuple(1 / math.factorial(k) for k in range(3, 12, 2))
SINH_F64 = tuple(1 / math.factorial(k) for k in range(3, 20, 2))
# expm1(x) = x * (1 + x * P(x)) for |x| < 1/2 (P: 1/2!, 1/3!, ...), next term under 6e-10 and 2e-18 (relative)
EXPM1_F32 = tuple(1 / math.factorial(k) for k in range(2, 10))
EXPM1_F64 = tuple(1 / math.factorial(k) for k in range(2, 16))

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
# past this, 2^28, asinh(x) = log(2x) and acosh(x) = log(2x) to within float64 rounding (the next term is 1/(4x^2))
LOG_2X_FROM = 2.0 ** 28

def _f64(x: Tensor) -> bool: return x.dtype == dtypes.float64

def _poly(x: Tensor, coeffs: tuple[float, ...]) -> Tensor:
  """coeffs[0] + coeffs[1]*x + ... by Horner's rule."""
  acc = x * coeffs[-1] + coeffs[-2]
  for c in reversed(coeffs[:-2]): acc = acc * x + c
  return acc

def _odd(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
  """f(x) for an odd function f, from fn(a) = f(a) for a = |x| >= 0: the sign bit of x goes onto the result."""
  neg = x.signbit()
  r = fn(neg.where(-x, x))
  return neg.where(-r, r)

def _log1p(z: Tensor) -> Tensor:
  """log(1 + z), accurate for small z: log(u) * z / (u - 1) for u = fl(1 + z) cancels the rounding of 1 + z (Goldberg,
  "What every computer scientist should know about floating-point arithmetic", theorem 4). The correction z / (u - 1)
  is 1 to within rounding, so it is detached: its own derivative would be noise divided by (u - 1)^2."""
  u = z + 1
  exact = u.eq(1)  # z is below half an ulp of 1: log1p(z) = z
  ratio = (exact | u.eq(math.inf)).where(1.0, z / (u - 1))
  return exact.where(z, u.log() * ratio.detach())

def _expm1(x: Tensor) -> Tensor:
  """exp(x) - 1, accurate for small x: a Taylor series for |x| < 1/2, where exp(x) - 1 would cancel."""
  small = (x < 0.5) & (x > -0.5)
  xs = small.where(x, 0.0)
  series = xs * (xs * _poly(xs, EXPM1_F64 if _f64(x) else EXPM1_F32) + 1)
  return small.where(series, x.exp() - 1)

def _atan(x: Tensor) -> Tensor:
  def on_positive(a: Tensor) -> Tensor:
    # atan(a) = pi/2 - atan(1/a) takes a > 1 into [0, 1], where the polynomial holds
    big = a > 1
    r = big.where(big.where(a, 1.0).reciprocal(), a)
    s = r * r
    p = r + r * s * _poly(s, ATAN_F64 if _f64(x) else ATAN_F32)
    return big.where(math.pi / 2 - p, p)
  return _odd(x, on_positive)

def _erf(x: Tensor) -> Tensor:
  hi, small_c, tail_c = (6.0, ERF_SMALL_F64, ERF_TAIL_F64) if _f64(x) else (4.0, ERF_SMALL_F32, ERF_TAIL_F32)
  def on_positive(a: Tensor) -> Tensor:
    small = a <= 1
    xs = small.where(a, 0.0)
    # a clamped to [1, hi]: past hi the tail is 1 in this float type, and its gradient (exp(-a^2)) is 0
    xt = (a > hi).where(hi, small.where(1.0, a))
    tail = 1 - (-(xt * xt)).exp() * _poly(xt * (2 / (hi - 1)) - (hi + 1) / (hi - 1), tail_c)
    return small.where(xs * _poly(xs * xs, small_c), tail)
  return _odd(x, on_positive)

def _cos(x: Tensor) -> Tensor:
  """cos x = 1 - 2 sin(x/2)^2 (x/2 is exact; pi/2 - x would lose every digit for large x). That cancels near the zeros
  of cos, where it is replaced by sin(2x) / (2 sin x): 2x is exact, and sin reduces its argument exactly, so the
  result keeps its relative accuracy (and its sign) there. The sines come from SIN, whose libm calls reduce exactly."""
  s = (x * 0.5).sin()
  c = 1 - 2 * s * s
  near_zero = (c < 0.5) & (c > -0.5) & (x.abs() < (8.9e307 if _f64(x) else 1.7e38))  # 2x is finite
  xs = near_zero.where(x, 1.0)
  return near_zero.where((xs * 2).sin() / (xs.sin() * 2), c)

def _sinh(x: Tensor) -> Tensor:
  def on_positive(a: Tensor) -> Tensor:
    small = a < 1
    xs = small.where(a, 0.0)
    series = xs + xs * xs * xs * _poly(xs * xs, SINH_F64 if _f64(x) else SINH_F32)
    # (e^a - e^-a) / 2 as h - 1/(4h), h = e^(a - ln 2): e^a alone overflows for a few a where sinh does not
    h = (a - math.log(2)).exp()
    return small.where(series, h - 0.25 / h)
  return _odd(x, on_positive)

def _cosh(x: Tensor) -> Tensor:
  a = x.signbit().where(-x, x)
  h = (a - math.log(2)).exp()  # cosh = h + 1/(4h), h = e^a / 2: e^a alone overflows for a few a where cosh does not
  return h + 0.25 / h

def _tanh(x: Tensor) -> Tensor:
  def on_positive(a: Tensor) -> Tensor:
    # tanh(a) = e / (e + 2) for e = expm1(2a), accurate near 0; past a = 20 tanh is 1 in float64, and e would overflow
    e = _expm1((a > 20).where(20.0, a) * 2)
    return e / (e + 2)
  return _odd(x, on_positive)

def _asinh(x: Tensor) -> Tensor:
  def on_positive(a: Tensor) -> Tensor:
    big = a >= LOG_2X_FROM
    xs = big.where(1.0, a)
    # log(a + sqrt(a^2 + 1)) = log1p(a + a^2 / (1 + sqrt(a^2 + 1))), written as a * (...) so that -0.0 stays -0.0
    small = _log1p(xs * (xs / ((xs * xs + 1).sqrt() + 1) + 1))
    return big.where(big.where(a, 1.0).log() + math.log(2), small)
  return _odd(x, on_positive)

def _acosh_from_1(x: Tensor) -> Tensor:
  big = x >= LOG_2X_FROM
  xs = big.where(2.0, x)
  # log(x + sqrt(x^2 - 1)) as log1p of (x - 1) + sqrt(x - 1) sqrt(x + 1): x - 1 is exact near 1, x^2 - 1 is not; and
  # the root of x - 1 alone is NaN for every x < 1 (that of (x - 1)(x + 1) is not, below -1)
  small = _log1p((xs - 1) + (xs - 1).sqrt() * (xs + 1).sqrt())
  return big.where(big.where(x, 2.0).log() + math.log(2), small)

def _acosh(x: Tensor) -> Tensor:
  # from -1 down the value is NaN, but torch's gradient there is 1 / sqrt(x^2 - 1), the derivative of -acosh(-x)
  below = x <= -1
  return below.where(math.nan - _acosh_from_1(below.where(-x, 2.0)), _acosh_from_1(below.where(2.0, x)))

def _gelu_tanh(x: Tensor) -> Tensor:
  # (1 + tanh(z)) / 2 = sigmoid(2z); the sigmoid saturates long before |x| = 1e10, and x^3 would overflow past it
  xc = x.clamp(-1e10, 1e10)
  return x * (xc * (1 + 0.044715 * xc * xc) * (2 * math.sqrt(2 / math.pi))).sigmoid()

def _softplus(x: Tensor) -> Tensor:
  """log(1 + e^x) as max(x, 0) + log1p(e^-|x|), which neither overflows nor loses the small values. Both are spelled
  as wheres on x >= 0, so that the gradient at 0 is 1/2 (maximum and abs would split it to 0)."""
  pos = x >= 0
  return pos.where(x, 0.0) + _log1p(pos.where(-x, x).exp())

class UnaryMixin(TensorStub):
  """Tensor's unary math methods. Its only subclass is Tensor (tensor.py), so every UnaryMixin is a Tensor."""
  __slots__ = ()
  if TYPE_CHECKING:  # what the methods below use from Tensor and its other mixins, beyond TensorStub, for mypy
    def _to_float(self) -> Tensor: ...
    def cast(self, dtype: DType | str) -> Tensor: ...
    def maximum(self, x: Tensor | Any) -> Tensor: ...
    def ne(self, x: Tensor | Any) -> Tensor: ...
    def eq(self, x: Tensor | Any) -> Tensor: ...
    def where(self, x: Tensor | Any, y: Tensor | Any) -> Tensor: ...
    def bitcast(self, dtype: DType | str) -> Tensor: ...
    def softmax(self, axis: int = -1, *, dim: int | None = None) -> Tensor: ...
    def __mul__(self, x: Any) -> Tensor: ...
    def __rmul__(self, x: Any) -> Tensor: ...
    def __add__(self, x: Any) -> Tensor: ...
    def __sub__(self, x: Any) -> Tensor: ...
    def __truediv__(self, x: Any) -> Tensor: ...
    def __and__(self, x: Any) -> Tensor: ...
    def __lt__(self, x: Tensor | Any) -> Tensor: ...
    def __gt__(self, x: Tensor | Any) -> Tensor: ...
    def __le__(self, x: Tensor | Any) -> Tensor: ...
    def __ge__(self, x: Tensor | Any) -> Tensor: ...

  def _unary(self, op: Ops) -> Tensor: return self._apply_uop(lambda x: UOp(op, x.dtype, (x,)))

  def _float_op(self, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """fn of self as a float (ints and bools become the default float); float16 and bfloat16 are computed in float32."""
    x = self._to_float()
    if x.dtype.is_half: return fn(x.cast(dtypes.float32)).cast(x.dtype)
    return fn(x)

  # ---- arithmetic, roots, exponentials and logarithms ----

  def neg(self) -> Tensor:
    """Elementwise negation (`-x`).

    >>> (-Tensor([1, -2])).tolist()
    [-1, 2]
    """
    if self.dtype.is_bool: raise TypeError("negation of a bool tensor is not supported; use logical_not or ~")
    return self._unary(Ops.NEG)

  __neg__ = neg

  def reciprocal(self) -> Tensor:
    """1 / x (ints become float).

    >>> Tensor([2, 4]).reciprocal().tolist()
    [0.5, 0.25]
    """
    return self._to_float()._unary(Ops.RECIP)

  def sqrt(self) -> Tensor:
    """The square root (ints become float; negative values give NaN).

    >>> Tensor([4.0, 9.0]).sqrt().tolist()
    [2.0, 3.0]
    """
    return self._to_float()._unary(Ops.SQRT)

  def rsqrt(self) -> Tensor:
    """1 / sqrt(x).

    >>> Tensor([4.0]).rsqrt().tolist()
    [0.5]
    """
    return self.sqrt().reciprocal()

  def square(self) -> Tensor:
    """x * x; a bool tensor squares as int64, as in torch.

    >>> Tensor([-3, 2]).square().tolist()
    [9, 4]
    """
    x = self.cast(dtypes.default_int) if self.dtype.is_bool else cast("Tensor", self)
    return x * x

  def exp2(self) -> Tensor:
    """2 ** x, elementwise.

    >>> Tensor([3.0, -1.0]).exp2().tolist()
    [8.0, 0.5]
    """
    return self._to_float()._unary(Ops.EXP2)

  def log2(self) -> Tensor:
    """The base-2 logarithm.

    >>> Tensor([8.0, 0.5]).log2().tolist()
    [3.0, -1.0]
    """
    return self._to_float()._unary(Ops.LOG2)

  def exp(self) -> Tensor:
    """e ** x, elementwise.

    >>> round(Tensor([1.0]).exp().item(), 5)
    2.71828
    """
    # 16-bit floats in float32: x / ln 2 rounded to bfloat16 would be off by up to 2 ulps of the result
    return self._float_op(lambda x: (x * (1 / math.log(2))).exp2())

  def log(self) -> Tensor:
    """The natural logarithm.

    >>> round(Tensor([2.718281828]).log().item(), 5)
    1.0
    """
    return self.log2() * math.log(2)

  def log1p(self) -> Tensor:
    """log(1 + x), accurate where x is small (log(1 + x) would round 1 + x first).

    >>> round(Tensor([1e-10]).log1p().item() / 1e-10, 6)
    1.0
    """
    return self._float_op(_log1p)

  def expm1(self) -> Tensor:
    """exp(x) - 1, accurate where x is small (exp(x) - 1 would cancel).

    >>> round(Tensor([1e-10]).expm1().item() / 1e-10, 6)
    1.0
    """
    return self._float_op(_expm1)

  def log10(self) -> Tensor:
    """The base-10 logarithm.

    >>> Tensor([100.0, 0.001]).log10().tolist()
    [2.0, -3.0]
    """
    return self._float_op(lambda x: x.log2() * math.log10(2))

  # ---- trigonometry ----

  def sin(self) -> Tensor:
    """The sine (radians).

    >>> Tensor([0.0]).sin().tolist()
    [0.0]
    """
    return self._to_float()._unary(Ops.SIN)

  def cos(self) -> Tensor:
    """The cosine (radians), accurate near its zeros too (see _cos).

    >>> Tensor([0.0]).cos().tolist()
    [1.0]
    """
    return self._float_op(_cos)

  def tan(self) -> Tensor:
    """The tangent, sin(x) / cos(x), accurate near its poles too.

    >>> round(Tensor([math.pi / 4]).tan().item(), 6)
    1.0
    """
    return self._float_op(lambda x: x.sin() / _cos(x))

  def atan(self) -> Tensor:
    """The arctangent, in (-pi/2, pi/2): a polynomial on [0, 1], and pi/2 - atan(1/x) beyond.

    >>> [round(v, 6) for v in Tensor([0.0, 1.0, -math.inf]).atan().tolist()]
    [0.0, 0.785398, -1.570796]
    """
    return self._float_op(_atan)

  def asin(self) -> Tensor:
    """The arcsine, in [-pi/2, pi/2]: atan(x / sqrt((1 - x)(1 + x))); NaN outside [-1, 1].

    >>> [round(v, 6) for v in Tensor([0.0, 1.0]).asin().tolist()]
    [0.0, 1.570796]
    """
    return self._float_op(lambda x: (x / ((1 - x) * (1 + x)).sqrt()).atan())

  def acos(self) -> Tensor:
    """The arccosine, in [0, pi]: 2 atan(sqrt((1 - x) / (1 + x))), accurate near 1 where pi/2 - asin(x) cancels.

    >>> [round(v, 6) for v in Tensor([1.0, -1.0]).acos().tolist()]
    [0.0, 3.141593]
    """
    return self._float_op(lambda x: 2 * ((1 - x) / (1 + x)).sqrt().atan())

  # ---- hyperbolic functions ----

  def sinh(self) -> Tensor:
    """The hyperbolic sine.

    >>> round(Tensor([1.0]).sinh().item(), 6)
    1.175201
    """
    return self._float_op(_sinh)

  def cosh(self) -> Tensor:
    """The hyperbolic cosine.

    >>> round(Tensor([1.0]).cosh().item(), 6)
    1.543081
    """
    return self._float_op(_cosh)

  def tanh(self) -> Tensor:
    """The hyperbolic tangent, accurate near 0 (from expm1, not from 2 sigmoid(2x) - 1).

    >>> Tensor([0.0, math.inf]).tanh().tolist()
    [0.0, 1.0]
    """
    return self._float_op(_tanh)

  def asinh(self) -> Tensor:
    """The inverse hyperbolic sine.

    >>> round(Tensor([1.0]).asinh().item(), 6)
    0.881374
    """
    return self._float_op(_asinh)

  def acosh(self) -> Tensor:
    """The inverse hyperbolic cosine (NaN below 1).

    >>> round(Tensor([2.0]).acosh().item(), 6)
    1.316958
    """
    return self._float_op(_acosh)

  def atanh(self) -> Tensor:
    """The inverse hyperbolic tangent, (log1p(x) - log1p(-x)) / 2: both terms are accurate, and they never cancel
    (they have opposite signs); +-inf at +-1, NaN beyond.

    >>> Tensor([0.0, 1.0, -1.0]).atanh().tolist()
    [0.0, inf, -inf]
    """
    return self._float_op(lambda x: (_log1p(x) - _log1p(-x)) * 0.5)

  def erf(self) -> Tensor:
    """The error function, from minimax polynomials (about 2 ulp in float32 and float64).

    >>> round(Tensor([0.5]).erf().item(), 6)
    0.5205
    """
    return self._float_op(_erf)

  # ---- rounding ----

  def trunc(self) -> Tensor:
    """Round toward zero.

    >>> Tensor([-1.5, 1.5]).trunc().tolist()
    [-1.0, 1.0]
    """
    return cast("Tensor", self) if not self.dtype.is_float else self._unary(Ops.TRUNC)

  def floor(self) -> Tensor:
    """Round toward negative infinity.

    >>> Tensor([-1.5, 1.5]).floor().tolist()
    [-2.0, 1.0]
    """
    if not self.dtype.is_float: return cast("Tensor", self)
    t = self.trunc()
    return (self < t).where(t - 1, t)

  def ceil(self) -> Tensor:
    """Round toward positive infinity.

    >>> Tensor([-1.5, 1.5]).ceil().tolist()
    [-1.0, 2.0]
    """
    if not self.dtype.is_float: return cast("Tensor", self)
    t = self.trunc()
    return (self > t).where(t + 1, t)

  def round(self) -> Tensor:
    """Round to the nearest integer, halves to even (as torch and numpy).

    >>> Tensor([0.5, 1.5, 2.5, -0.5]).round().tolist()
    [0.0, 2.0, 2.0, -0.0]
    """
    if not self.dtype.is_float: return cast("Tensor", self)
    # from trunc and the exact fraction x - trunc(x): x + 0.5 would round before the floor for large or near-half x
    t = self.trunc()
    frac = (self - t).abs()
    t_odd = ((t * 0.5).trunc() * 2).ne(t)
    away = (frac > 0.5) | ((frac == 0.5) & t_odd)
    return away.where(t + (self > 0).where(1.0, -1.0).cast(self.dtype), t)

  # ---- sign and magnitude ----

  def abs(self) -> Tensor:
    """The absolute value.

    >>> Tensor([-2, 3]).abs().tolist()
    [2, 3]
    """
    return cast("Tensor", self) if self.dtype.is_bool or self.dtype.is_unsigned else self.maximum(-self)

  def signbit(self) -> Tensor:
    """True where the sign bit is set: for floats that includes -0.0 and -NaN, which x < 0 misses.

    >>> Tensor([-1.0, -0.0, 0.0, 2.0]).signbit().tolist()
    [True, True, False, False]
    """
    if self.dtype.is_float:
      ints = {2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
      return self.bitcast(ints[self.dtype.itemsize]) < 0
    return self.ne(self) if self.dtype.is_unsigned or self.dtype.is_bool else self < 0  # all False, or x < 0

  def sign(self) -> Tensor:
    """-1, 0 or 1 by the sign of each element; NaN stays NaN (as numpy; torch gives 0).

    >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist()
    [-1.0, 0.0, 1.0]
    """
    if self.dtype.is_bool: return cast("Tensor", self)
    s = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
    return self.ne(self).where(self, s) if self.dtype.is_float else s

  # ---- tests of values ----

  def isnan(self) -> Tensor:
    """True where the value is NaN (never, for ints and bools).

    >>> Tensor([1.0, math.nan]).isnan().tolist()
    [False, True]
    """
    return self.ne(self)

  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """True where the value is +inf (if detect_positive) or -inf (if detect_negative).

    >>> Tensor([1.0, math.inf, -math.inf]).isinf().tolist()
    [False, True, True]
    """
    if not self.dtype.is_float: return self.ne(self)
    return (self.eq(math.inf) & detect_positive) | (self.eq(-math.inf) & detect_negative)

  def isfinite(self) -> Tensor:
    """True where the value is neither infinite nor NaN (always, for ints and bools).

    >>> Tensor([1.0, math.inf, math.nan]).isfinite().tolist()
    [True, False, False]
    """
    if not self.dtype.is_float: return self.eq(self)
    return (self < math.inf) & (self > -math.inf)

  # ---- activations ----

  def relu(self) -> Tensor:
    """max(x, 0); NaN stays NaN and, as torch, the gradient at 0 is 0 (maximum would split it, giving 0.5).

    >>> Tensor([-1.0, 2.0]).relu().tolist()
    [0.0, 2.0]
    """
    return (self <= 0).where(0, self)

  def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """x clamped to [min_val, max_val], keeping the dtype (the bounds are converted to it, as torch does); unlike
    clamp, the gradient is 0 at the bounds themselves, as torch's.

    >>> Tensor([-2.0, 0.5, 3.0]).hardtanh().tolist()
    [-1.0, 0.5, 1.0]
    """
    if self.dtype.is_bool: raise TypeError("hardtanh of a bool tensor is not supported")
    if min_val > max_val: raise ValueError(f"hardtanh: min_val {min_val} is greater than max_val {max_val}")
    lo, hi = (type(self).full((), v, dtype=self.dtype, device=self.device) for v in (min_val, max_val))
    return (self <= lo).where(lo, (self >= hi).where(hi, self))

  def relu6(self) -> Tensor:
    """min(max(x, 0), 6), keeping the dtype.

    >>> Tensor([-1.0, 3.0, 7.0]).relu6().tolist()
    [0.0, 3.0, 6.0]
    """
    return self.hardtanh(0, 6)

  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
    """x for x > 0, neg_slope * x elsewhere.

    >>> Tensor([-2.0, 3.0]).leaky_relu(0.5).tolist()
    [-1.0, 3.0]
    """
    return self._float_op(lambda x: (x > 0).where(x, x * neg_slope))

  def elu(self, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x) - 1) elsewhere.

    >>> round(Tensor([-1.0]).elu().item(), 6)
    -0.632121
    """
    return self._float_op(lambda x: (x > 0).where(x, alpha * _expm1((x > 0).where(0.0, x))))

  def celu(self, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha * (exp(x / alpha) - 1) elsewhere; alpha must not be 0.

    >>> round(Tensor([-1.0]).celu(2.0).item(), 6)
    -0.786939
    """
    if alpha == 0: raise ValueError("celu: alpha must not be 0")
    return self._float_op(lambda x: (x > 0).where(x, alpha * _expm1((x > 0).where(0.0, x) / alpha)))

  def selu(self, alpha: float = SELU_ALPHA, gamma: float = SELU_SCALE) -> Tensor:
    """gamma * elu(x, alpha), with the self-normalizing constants of Klambauer et al. by default.

    >>> round(Tensor([1.0]).selu().item(), 6)
    1.050701
    """
    return self.elu(alpha) * gamma

  def gelu(self, approximate: str = "tanh") -> Tensor:
    """The Gaussian error linear unit. The default is the tanh approximation, as tinygrad's gelu (torch's default is
    approximate="none", the exact x * (1 + erf(x / sqrt(2))) / 2, which this gives with approximate="none").

    >>> round(Tensor([1.0]).gelu().item(), 6), round(Tensor([1.0]).gelu(approximate="none").item(), 6)
    (0.841192, 0.841345)
    """
    if approximate == "none": return self._float_op(lambda x: x * 0.5 * (1 + _erf(x * math.sqrt(0.5))))
    if approximate != "tanh": raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return self._float_op(_gelu_tanh)

  def quick_gelu(self) -> Tensor:
    """x * sigmoid(1.702 x), the sigmoid approximation of gelu.

    >>> round(Tensor([1.0]).quick_gelu().item(), 6)
    0.845796
    """
    return self._float_op(lambda x: x * (x * 1.702).sigmoid())

  def silu(self) -> Tensor:
    """x * sigmoid(x), also called swish.

    >>> round(Tensor([1.0]).silu().item(), 6)
    0.731059
    """
    return self._float_op(lambda x: x * x.sigmoid())

  def swish(self) -> Tensor:
    """x * sigmoid(x), the same as silu.

    >>> round(Tensor([1.0]).swish().item(), 6)
    0.731059
    """
    return self.silu()

  def mish(self) -> Tensor:
    """x * tanh(softplus(x)).

    >>> round(Tensor([1.0]).mish().item(), 6)
    0.865098
    """
    return self._float_op(lambda x: x * _tanh(_softplus(x)))

  def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold, as torch.

    >>> round(Tensor([0.0]).softplus().item(), 6)
    0.693147
    """
    if beta == 0: raise ValueError("softplus: beta must not be 0")
    return self._float_op(lambda x: (x * beta > threshold).where(x, _softplus(x * beta) / beta))

  def softsign(self) -> Tensor:
    """x / (1 + |x|).

    >>> Tensor([-3.0, 1.0]).softsign().tolist()
    [-0.75, 0.5]
    """
    return self._float_op(lambda x: x / (x.abs() + 1))

  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """alpha * x + beta clamped to [0, 1] (torch's hardsigmoid with the defaults: relu6(x + 3) / 6).

    >>> Tensor([-4.0, 0.0, 4.0]).hardsigmoid().tolist()
    [0.0, 0.5, 1.0]
    """
    return self._float_op(lambda x: (x * alpha + beta).hardtanh(0.0, 1.0))

  def hardswish(self) -> Tensor:
    """x * relu6(x + 3) / 6.

    >>> Tensor([-4.0, 1.0, 4.0]).hardswish().tolist()
    [-0.0, 0.6666666865348816, 4.0]
    """
    return self._float_op(lambda x: x * (x + 3).relu6() * (1 / 6))

  def sigmoid(self) -> Tensor:
    """1 / (1 + exp(-x)), computed from e = exp(-|x|) <= 1: exp(-x) overflows to inf for x < -88 (float32), and
    the chain rule through that inf turns the gradient (zero there) into NaN.

    >>> Tensor([0.0]).sigmoid().tolist()
    [0.5]
    """
    x = self._to_float()
    pos = x >= 0
    # -|x| spelled as a where: abs would give the gradient 0 at x = 0, a where gives -1 there
    e = pos.where(-x, x).exp()
    r = (1 + e).reciprocal()
    return pos.where(r, e * r)

  def logsigmoid(self) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), without overflow or loss of the small values.

    >>> round(Tensor([0.0]).logsigmoid().item(), 6)
    -0.693147
    """
    return self._float_op(lambda x: -_softplus(-x))

  def softmin(self, axis: int = -1, *, dim: int | None = None) -> Tensor:
    """softmax(-x) along `axis`.

    >>> [round(v, 4) for v in Tensor([1.0, 2.0]).softmin().tolist()]
    [0.7311, 0.2689]
    """
    axis = dim_alias("softmin", axis, dim, -1)
    return (-self._to_float()).softmax(axis)
