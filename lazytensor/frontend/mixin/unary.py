"""Elementwise math functions: roots, exponentials and logarithms, powers, trigonometry and activations.

Everything is composed from the primitive ops (EXP2, LOG2, SIN, COS, SQRT, RECIP, TRUNC, arithmetic, comparisons,
WHERE), so it fuses into one kernel and gets its gradient from the rules of those ops. Three habits run through the
file:
  * float functions take ints and bools as the default float, and compute float16 in float32, rounding once at the
    end (as torch does on the CPU): intermediates such as x*x overflow float16 at x = 256;
  * a branch chosen by `where` gets an input clamped into its own domain: the unchosen branch still runs, and an inf
    in it would turn its zero gradient into NaN (0 * inf);
  * odd functions are computed on |x| and given the sign bit of x back, so that f(-0.0) is -0.0.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from lazytensor.dtype import dtypes
from lazytensor.frontend.mixin.create import CreationMixin
from lazytensor.frontend.mixin.operands import check_operand
from lazytensor.helpers import ArgumentError
from lazytensor.uop.graph import const_uop
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="UnaryMixin")

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

def _f64(x: TensorT) -> bool: return x.dtype == dtypes.float64

def _poly(x: TensorT, coeffs: tuple[float, ...]) -> TensorT:
  """coeffs[0] + coeffs[1]*x + ... by Horner's rule."""
  acc = x * coeffs[-1] + coeffs[-2]
  for c in reversed(coeffs[:-2]): acc = acc * x + c
  return acc

def _odd(x: TensorT, fn: Callable[[TensorT], TensorT]) -> TensorT:
  """f(x) for an odd function f, from fn(a) = f(a) for a = |x| >= 0: the sign bit of x goes onto the result."""
  neg = x.signbit()
  r = fn(neg.where(-x, x))
  return neg.where(-r, r)

def _log1p(z: TensorT) -> TensorT:
  """log(1 + z), accurate for small z: log(u) * z / (u - 1) for u = fl(1 + z) cancels the rounding of 1 + z (Goldberg,
  "What every computer scientist should know about floating-point arithmetic", theorem 4). The derivative 1 / (1 + z)
  is stated, as torch's: the chain rule through the formula was off by the correction z / (u - 1) (0.25 instead of 1
  at z = 3e-8 in float32), and where z is below half an ulp of 1 (the value is z) its second derivative was 0, not -1.
  Stated, it is differentiated again as a graph of z: every order is log1p's."""
  zd = z.detach()
  u = zd + 1
  exact = u.eq(1)  # z is below half an ulp of 1: log1p(z) = z
  ratio = (exact | u.eq(math.inf)).where(1.0, zd / (u - 1))
  value = exact.where(zd, u.log() * ratio)
  return value._apply_uop(lambda v, x, d: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, x, d)), z, 1 / (z + 1))

def _expm1(x: TensorT) -> TensorT:
  """exp(x) - 1, accurate for small x: a Taylor series for |x| < 1/2, where exp(x) - 1 would cancel."""
  small = (x < 0.5) & (x > -0.5)
  xs = small.where(x, 0.0)
  series = xs * (xs * _poly(xs, EXPM1_F64 if _f64(x) else EXPM1_F32) + 1)
  return small.where(series, x.exp() - 1)

def _atan(x: TensorT) -> TensorT:
  def on_positive(a: TensorT) -> TensorT:
    # atan(a) = pi/2 - atan(1/a) takes a > 1 into [0, 1], where the polynomial holds
    big = a > 1
    r = big.where(big.where(a, 1.0).reciprocal(), a)
    s = r * r
    p = r + r * s * _poly(s, ATAN_F64 if _f64(x) else ATAN_F32)
    return big.where(math.pi / 2 - p, p)
  return _odd(x, on_positive)

def _erf(x: TensorT) -> TensorT:
  hi, small_c, tail_c = (6.0, ERF_SMALL_F64, ERF_TAIL_F64) if _f64(x) else (4.0, ERF_SMALL_F32, ERF_TAIL_F32)
  def on_positive(a: TensorT) -> TensorT:
    small = a <= 1
    xs = small.where(a, 0.0)
    # a clamped to [1, hi]: past hi the tail is 1 in this float type, and its gradient (exp(-a^2)) is 0
    xt = (a > hi).where(hi, small.where(1.0, a))
    tail = 1 - (-(xt * xt)).exp() * _poly(xt * (2 / (hi - 1)) - (hi + 1) / (hi - 1), tail_c)
    return small.where(xs * _poly(xs * xs, small_c), tail)
  return _odd(x, on_positive)

def _sinh(x: TensorT) -> TensorT:
  def on_positive(a: TensorT) -> TensorT:
    small = a < 1
    xs = small.where(a, 0.0)
    series = xs + xs * xs * xs * _poly(xs * xs, SINH_F64 if _f64(x) else SINH_F32)
    # (e^a - e^-a) / 2 as h - 1/(4h), h = e^(a - ln 2): e^a alone overflows for a few a where sinh does not
    h = (a - math.log(2)).exp()
    return small.where(series, h - 0.25 / h)
  return _odd(x, on_positive)

def _cosh(x: TensorT) -> TensorT:
  a = x.signbit().where(-x, x)
  h = (a - math.log(2)).exp()  # cosh = h + 1/(4h), h = e^a / 2: e^a alone overflows for a few a where cosh does not
  return h + 0.25 / h

def _tanh(x: TensorT) -> TensorT:
  def on_positive(a: TensorT) -> TensorT:
    # tanh(a) = e / (e + 2) for e = expm1(2a), accurate near 0; past a = 20 tanh is 1 in float64, and e would overflow
    e = _expm1((a > 20).where(20.0, a) * 2)
    return e / (e + 2)
  return _odd(x, on_positive)._apply_uop(lambda v, u: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, u), TanhGrad(type(x))), x)

@dataclass(frozen=True)
class TanhGrad:
  """tanh's derivative 1 - tanh(x)^2, stated (a CUSTOM_GRAD's arg, called by frontend/gradient.py with the output's
  gradient) and built from tanh itself when a gradient needs it, so that every order of derivative is as accurate as
  tanh: the chain rule through e / (e + 2) overflowed e^3 at the second order (-8 instead of 0 for 11 < |x| < 20 in
  float32). `tensor` is the class that wraps the graph nodes."""
  tensor: type

  def __call__(self, ctx: UOp, xu: UOp) -> tuple[UOp]:
    y = self.tensor(xu).tanh()
    return ((self.tensor(ctx) * (1 - y * y)).lazydata,)

def _asinh(x: TensorT) -> TensorT:
  def on_positive(a: TensorT) -> TensorT:
    big = a >= LOG_2X_FROM
    xs = big.where(1.0, a)
    # log(a + sqrt(a^2 + 1)) = log1p(a + a^2 / (1 + sqrt(a^2 + 1))), written as a * (...) so that -0.0 stays -0.0
    small = _log1p(xs * (xs / ((xs * xs + 1).sqrt() + 1) + 1))
    return big.where(big.where(a, 1.0).log() + math.log(2), small)
  return _odd(x, on_positive)

def _acosh_from_1(x: TensorT) -> TensorT:
  big = x >= LOG_2X_FROM
  xs = big.where(2.0, x)
  # log(x + sqrt(x^2 - 1)) as log1p of (x - 1) + sqrt(x - 1) sqrt(x + 1): x - 1 is exact near 1, x^2 - 1 is not; and
  # the root of x - 1 alone is NaN for every x < 1 (that of (x - 1)(x + 1) is not, below -1)
  small = _log1p((xs - 1) + (xs - 1).sqrt() * (xs + 1).sqrt())
  return big.where(big.where(x, 2.0).log() + math.log(2), small)

def _acosh(x: TensorT) -> TensorT:
  # from -1 down the value is NaN, but torch's gradient there is 1 / sqrt(x^2 - 1), the derivative of -acosh(-x)
  below = x <= -1
  return below.where(math.nan - _acosh_from_1(below.where(-x, 2.0)), _acosh_from_1(below.where(2.0, x)))

def _sigmoid(x: TensorT) -> TensorT:
  pos = x >= 0
  # -|x| spelled as a where: abs would give the gradient 0 at x = 0, a where gives -1 there
  e = pos.where(-x, x).exp()
  r = (1 + e).reciprocal()
  return pos.where(r, e * r)

def _gelu_tanh(x: TensorT) -> TensorT:
  # (1 + tanh(z)) / 2 = sigmoid(2z); the sigmoid saturates long before |x| = 1e10, and x^3 would overflow past it
  xc = x.clamp(-1e10, 1e10)
  return x * (xc * (1 + 0.044715 * xc * xc) * (2 * math.sqrt(2 / math.pi))).sigmoid()

def _softplus(x: TensorT) -> TensorT:
  """log(1 + e^x) as max(x, 0) + log1p(e^-|x|), which neither overflows nor loses the small values. Both are spelled
  as wheres on x >= 0, so that the gradient at 0 is 1/2 (maximum and abs would split it to 0)."""
  pos = x >= 0
  return pos.where(x, 0.0) + _log1p(pos.where(-x, x).exp())

# ---- powers ----

def _int_pow(x: TensorT, e: int) -> TensorT:
  # square-and-multiply, unrolled at trace time: exact for ints, a few fused multiplies for floats
  result, base = None, x
  while e:
    if e & 1: result = base if result is None else result * base
    e >>= 1
    if e: base = base * base
  return result if result is not None else x.ones_like()

def _int_pow_tensor(a: TensorT, b: TensorT) -> TensorT:
  """a ** b of int tensors as torch computes it: square-and-multiply over every bit of b, each product wrapping as
  the dtype's multiply does (3 ** 40 in int64 is 3 ** 40 mod 2 ** 64, where float64 would round from 2 ** 53 up and
  saturate past the range); a negative exponent gives 1 for a base of 1, +-1 for -1 and 0 for any other base."""
  e = (b < 0).where(0, b)
  result, base = a.ones_like(), a
  for _ in range(8 * a.dtype.itemsize):
    result = (e & 1).ne(0).where(result * base, result)
    base, e = base * base, e >> 1
  if a.dtype.is_unsigned: return result
  negative = (a == 1).where(1, (a == -1).where((b & 1).ne(0).where(-1, 1), 0)).cast(a.dtype)
  return (b < 0).where(negative, result)

def _float_int_pow(x: TensorT, e: int) -> TensorT:
  """x ** e of a float x for a constant int e by multiplying: e in (2, 3, -1, -2) in x's dtype as torch does (float16
  and bfloat16 in float32), others in float64 and rounded once (within an ulp of C's pow, which torch calls): exact
  where the power is (3.0 ** 4.0 is 81, which exp2(4 * log2(3)) missed by an ulp)."""
  narrow = e in (2, 3, -1, -2) and x.dtype != dtypes.float64
  acc = (dtypes.float32 if x.dtype.is_half else x.dtype) if narrow else dtypes.float64
  p = _int_pow(x.cast(acc), abs(e))
  return (p if e >= 0 else p.reciprocal()).cast(x.dtype)

def _const_int(y: Any, reverse: bool) -> int | None:
  """The exponent y as an int, when it is a Python number with an integer value in [-64, 64]."""
  if reverse or isinstance(y, bool) or not isinstance(y, (int, float)) or not float(y).is_integer(): return None
  return int(y) if -64 <= y <= 64 else None

def _pow(x: TensorT, y: Any, reverse: bool) -> TensorT:
  """x ** y with numpy/torch semantics for dtypes, signs and integer exponents."""
  if not reverse and isinstance(y, int) and not isinstance(y, bool) and y < 0 and not x.dtype.is_float:
    raise ArgumentError(f"integer tensor ({x.dtype}) to the negative power {y}: the result is not an integer; "
                     "cast to float first")
  e = _const_int(y, reverse)
  if e is not None and e >= 0 and x.dtype.is_float: return _float_int_pow(x, e)
  if e is not None and e >= 0 and isinstance(y, int):
    return _int_pow(x.cast(dtypes.default_int) if x.dtype.is_bool else x, e)
  if not reverse and isinstance(y, float) and y == 0.5: return x.sqrt()
  a, b = x._broadcasted(y, reverse)
  if a.dtype.is_int: return _int_pow_tensor(a, b)
  if not a.dtype.is_float: return _float_pow(a.cast(dtypes.float64), b.cast(dtypes.float64)).cast(a.dtype)
  # torch's derivatives, stated: the chain rule through the formula gives 0 or a finite limit where torch (and the
  # calculus) has +-inf at a zero base, and log|a| instead of NaN for a negative base
  if e is not None: out = _float_int_pow(a, e)
  # float32 through float64: exp2(b * log2|a|) in float32 was up to 44 ulps off C's pow (the error of b * log2|a| grows
  # with the result's exponent); in float64 it is within an ulp after the one rounding, at about torch's speed
  elif a.dtype == dtypes.float32: out = _float_pow(a.cast(dtypes.float64), b.cast(dtypes.float64)).cast(a.dtype)
  else: out = _float_pow(a, b)
  # under no_grad nothing differentiates it (Adam's bias corrections 1 - b ** t: the derivatives are ~2/3 of the nodes)
  if type(a).no_grad: return out
  d_a = (b == 0).where(0.0, b * _float_pow(a, b - 1))
  d_b = ((a == 0) & (b >= 0)).where(0.0, out * a.log())
  return out._apply_uop(lambda v, *xd: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, *xd)), a, d_a, b, d_b)

def _float_pow(a: TensorT, b: TensorT) -> TensorT:
  """|a| ** b as exp2(b * log2|a|), with the sign and the special cases of C's pow (which torch follows) patched in by
  wheres. A zero base never reaches log2: its -inf would make the chain rule NaN where the gradient is 0 (e.g. of
  x.abs() ** 1.5 at 0). float16 and bfloat16 are computed in float32 and rounded once."""
  if a.dtype.is_half: return _float_pow(a.cast(dtypes.float32), b.cast(dtypes.float32)).cast(a.dtype)
  zero, neg = a == 0, a < 0
  b_int = b.trunc() == b
  # a finite negative base to a fractional power is NaN (-inf's is |a| ** b, as C's pow); its log2 makes it so
  nan_base = neg & b_int.logical_not() & (a != -math.inf)
  mag = (b * zero.where(1.0, nan_base.where(a, a.abs())).log2()).exp2()
  # 0 ** b: inf for b < 0, 0 for b > 0, NaN for a NaN b
  mag = zero.where((b < 0).where(float("inf"), (b > 0).where(0.0, float("nan"))).cast(mag.dtype), mag)
  # an odd integer power keeps the sign, of -0.0 too ((-0.0) ** -1 is -inf)
  b_odd = b_int & ((b.abs() % 2) == 1)
  ret = (a.signbit() & b_odd).where(-mag, mag)
  # 1 for x ** 0 (x = 0, inf and NaN too), 1 ** inf and 1 ** NaN, and (-1) ** +-inf; not for 1 ** b with a finite b,
  # which the formula gives, and where a constant would cut the gradient
  return ((b == 0) | ((a == 1) & b.isfinite().logical_not()) | ((a == -1) & b.isinf())).where(1.0, ret)

class UnaryMixin(CreationMixin):
  """Tensor's math functions: on the creation mixin and those below it."""
  __slots__ = ()
  no_grad: ClassVar[bool]  # Tensor.no_grad: a power states no derivatives under it

  def _float_op(self, fn: Callable[[Self], Self]) -> Self:
    """fn of self as a float (ints and bools become the default float); float16 and bfloat16 are computed in float32."""
    x = self._to_float()
    if x.dtype.is_half: return fn(x.cast(dtypes.float32)).cast(x.dtype)
    return fn(x)

  # ---- roots, exponentials, logarithms and powers ----

  def reciprocal(self) -> Self:
    """1 / x (ints become float).

    >>> Tensor([2, 4]).reciprocal().tolist()
    [0.5, 0.25]
    """
    return self._to_float()._unary(Ops.RECIP)

  def sqrt(self) -> Self:
    """The square root (ints become float; negative values give NaN).

    >>> Tensor([4.0, 9.0]).sqrt().tolist()
    [2.0, 3.0]
    """
    return self._to_float()._unary(Ops.SQRT)

  def rsqrt(self) -> Self:
    """1 / sqrt(x); float16 and bfloat16 in float32, rounded once (rounding the root too made it 1.3x as far from
    float64).

    >>> Tensor([4.0]).rsqrt().tolist()
    [0.5]
    """
    return self._float_op(lambda x: x.sqrt().reciprocal())

  def square(self) -> Self:
    """x * x; a bool tensor squares as int64, as in torch.

    >>> Tensor([-3, 2]).square().tolist()
    [9, 4]
    """
    x = self.cast(dtypes.default_int) if self.dtype.is_bool else self
    return x * x

  def exp2(self) -> Self:
    """2 ** x, elementwise.

    >>> Tensor([3.0, -1.0]).exp2().tolist()
    [8.0, 0.5]
    """
    return self._to_float()._unary(Ops.EXP2)

  def log2(self) -> Self:
    """The base-2 logarithm.

    >>> Tensor([8.0, 0.5]).log2().tolist()
    [3.0, -1.0]
    """
    return self._to_float()._unary(Ops.LOG2)

  def exp(self) -> Self:
    """e ** x, elementwise.

    >>> round(Tensor([1.0]).exp().item(), 5)
    2.71828
    """
    # 16-bit floats in float32: x / ln 2 rounded to bfloat16 would be off by up to 2 ulps of the result
    return self._float_op(lambda x: (x * (1 / math.log(2))).exp2())

  def log(self) -> Self:
    """The natural logarithm.

    >>> round(Tensor([2.718281828]).log().item(), 5)
    1.0
    """
    return self.log2() * math.log(2)

  def log1p(self) -> Self:
    """log(1 + x), accurate where x is small (log(1 + x) would round 1 + x first).

    >>> round(Tensor([1e-10]).log1p().item() / 1e-10, 6)
    1.0
    """
    return self._float_op(_log1p)

  def expm1(self) -> Self:
    """exp(x) - 1, accurate where x is small (exp(x) - 1 would cancel).

    >>> round(Tensor([1e-10]).expm1().item() / 1e-10, 6)
    1.0
    """
    return self._float_op(_expm1)

  def log10(self) -> Self:
    """The base-10 logarithm.

    >>> Tensor([100.0, 0.001]).log10().tolist()
    [2.0, -3.0]
    """
    return self._float_op(lambda x: x.log2() * math.log10(2))

  def pow(self, x: Self | Any, reverse: bool = False) -> Self:
    """Elementwise power; int ** int stays an int, negative bases with integer exponents keep their sign.
    An int tensor to a negative Python int is a ValueError (as numpy); with a tensor exponent it rounds (2 ** -1 -> 0).
    Int powers wrap around as the dtype's products do, as in torch.
    Float gradients are torch's, also at the edges: +-inf at a zero base, NaN d/dy for a negative base.

    >>> (Tensor([-2, 3]) ** 3).tolist()
    [-8, 27]
    """
    return _pow(self, x, reverse)

  def __pow__(self, x: Any) -> Self: return self.pow(x)

  def __rpow__(self, x: Any) -> Self: return self.pow(x, True)

  def logaddexp(self, x: Self | Any) -> Self:
    """log(exp(self) + exp(x)), without overflow: max + log1p(exp(-|difference|)). Ints become float.

    >>> round(Tensor([1000.0]).logaddexp(1000.0).item(), 3)
    1000.693
    """
    check_operand("logaddexp", "x", x)
    a, b = self._broadcasted_float(x)
    dt = a.dtype
    if dt.is_half: a, b = a.cast(dtypes.float32), b.cast(dtypes.float32)
    # equal values (infinities of one sign included, where a - b is NaN) differ by 0
    d = a.eq(b).where(0.0, a - b)
    return (a.maximum(b) + (d > 0).where(-d, d).exp().log1p()).cast(dt)

  # ---- trigonometry ----

  def sin(self) -> Self:
    """The sine (radians).

    >>> Tensor([0.0]).sin().tolist()
    [0.0]
    """
    return self._to_float()._unary(Ops.SIN)

  def cos(self) -> Self:
    """The cosine (radians), accurate near its zeros too (its own op: sin(x + pi/2) would round x + pi/2).

    >>> Tensor([0.0]).cos().tolist()
    [1.0]
    """
    return self._to_float()._unary(Ops.COS)

  def tan(self) -> Self:
    """The tangent, sin(x) / cos(x), accurate near its poles too.

    >>> round(Tensor([math.pi / 4]).tan().item(), 6)
    1.0
    """
    return self._float_op(lambda x: x.sin() / x.cos())

  def atan(self) -> Self:
    """The arctangent, in (-pi/2, pi/2): a polynomial on [0, 1], and pi/2 - atan(1/x) beyond.

    >>> [round(v, 6) for v in Tensor([0.0, 1.0, -math.inf]).atan().tolist()]
    [0.0, 0.785398, -1.570796]
    """
    return self._float_op(_atan)

  def asin(self) -> Self:
    """The arcsine, in [-pi/2, pi/2]: atan(x / sqrt((1 - x)(1 + x))); NaN outside [-1, 1].

    >>> [round(v, 6) for v in Tensor([0.0, 1.0]).asin().tolist()]
    [0.0, 1.570796]
    """
    return self._float_op(lambda x: (x / ((1 - x) * (1 + x)).sqrt()).atan())

  def acos(self) -> Self:
    """The arccosine, in [0, pi]: 2 atan(sqrt((1 - x) / (1 + x))), accurate near 1 where pi/2 - asin(x) cancels.

    >>> [round(v, 6) for v in Tensor([1.0, -1.0]).acos().tolist()]
    [0.0, 3.141593]
    """
    return self._float_op(lambda x: 2 * ((1 - x) / (1 + x)).sqrt().atan())

  # ---- hyperbolic functions ----

  def sinh(self) -> Self:
    """The hyperbolic sine.

    >>> round(Tensor([1.0]).sinh().item(), 6)
    1.175201
    """
    return self._float_op(_sinh)

  def cosh(self) -> Self:
    """The hyperbolic cosine.

    >>> round(Tensor([1.0]).cosh().item(), 6)
    1.543081
    """
    return self._float_op(_cosh)

  def tanh(self) -> Self:
    """The hyperbolic tangent, accurate near 0 (from expm1, not from 2 sigmoid(2x) - 1).

    >>> Tensor([0.0, math.inf]).tanh().tolist()
    [0.0, 1.0]
    """
    return self._float_op(_tanh)

  def asinh(self) -> Self:
    """The inverse hyperbolic sine.

    >>> round(Tensor([1.0]).asinh().item(), 6)
    0.881374
    """
    return self._float_op(_asinh)

  def acosh(self) -> Self:
    """The inverse hyperbolic cosine (NaN below 1).

    >>> round(Tensor([2.0]).acosh().item(), 6)
    1.316958
    """
    return self._float_op(_acosh)

  def atanh(self) -> Self:
    """The inverse hyperbolic tangent, (log1p(x) - log1p(-x)) / 2: both terms are accurate, and they never cancel
    (they have opposite signs); +-inf at +-1, NaN beyond.

    >>> Tensor([0.0, 1.0, -1.0]).atanh().tolist()
    [0.0, inf, -inf]
    """
    return self._float_op(lambda x: (_log1p(x) - _log1p(-x)) * 0.5)

  def erf(self) -> Self:
    """The error function, from minimax polynomials (about 2 ulp in float32 and float64).

    >>> round(Tensor([0.5]).erf().item(), 6)
    0.5205
    """
    return self._float_op(_erf)

  # ---- activations ----

  def relu(self) -> Self:
    """max(x, 0); NaN stays NaN and, as torch, the gradient at 0 is 0 (maximum would split it, giving 0.5).

    >>> Tensor([-1.0, 2.0]).relu().tolist()
    [0.0, 2.0]
    """
    if not self.dtype.is_float: return (self <= 0).where(0, self)
    zero = const_uop(0.0, self.dtype, self.device, self.shape)
    # where(0 < x or x is NaN, x, 0): the choice of `(x <= 0).where(0, x)` (x <= 0 is false exactly where this is true),
    # as one op of four nodes, where `<=` of floats is an op of four nodes of its own (false at NaN, spelled out)
    return self._apply_uop(lambda x: UOp(Ops.WHERE, x.dtype, (zero.alu(Ops.CMPLT, x).alu(Ops.OR, x.alu(Ops.CMPNE, x)),
                                                               x, zero)))

  def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Self:
    """x clamped to [min_val, max_val], keeping the dtype (the bounds are converted to it, as torch does); unlike
    clamp, the gradient is 0 at the bounds themselves, as torch's.

    >>> Tensor([-2.0, 0.5, 3.0]).hardtanh().tolist()
    [-1.0, 0.5, 1.0]
    """
    if self.dtype.is_bool: raise TypeError("hardtanh of a bool tensor is not supported")
    if min_val > max_val: raise ValueError(f"hardtanh: min_val {min_val} is greater than max_val {max_val}")
    lo, hi = (type(self).full((), v, dtype=self.dtype, device=self.device) for v in (min_val, max_val))
    return (self <= lo).where(lo, (self >= hi).where(hi, self))

  def relu6(self) -> Self:
    """min(max(x, 0), 6), keeping the dtype.

    >>> Tensor([-1.0, 3.0, 7.0]).relu6().tolist()
    [0.0, 3.0, 6.0]
    """
    return self.hardtanh(0, 6)

  def leaky_relu(self, neg_slope: float = 0.01) -> Self:
    """x for x > 0, neg_slope * x elsewhere.

    >>> Tensor([-2.0, 3.0]).leaky_relu(0.5).tolist()
    [-1.0, 3.0]
    """
    return self._float_op(lambda x: (x > 0).where(x, x * neg_slope))

  def elu(self, alpha: float = 1.0) -> Self:
    """x for x > 0, alpha * (exp(x) - 1) elsewhere.

    >>> round(Tensor([-1.0]).elu().item(), 6)
    -0.632121
    """
    return self._float_op(lambda x: (x > 0).where(x, alpha * _expm1((x > 0).where(0.0, x))))

  def celu(self, alpha: float = 1.0) -> Self:
    """x for x > 0, alpha * (exp(x / alpha) - 1) elsewhere; alpha must not be 0.

    >>> round(Tensor([-1.0]).celu(2.0).item(), 6)
    -0.786939
    """
    if alpha == 0: raise ValueError("celu: alpha must not be 0")
    return self._float_op(lambda x: (x > 0).where(x, alpha * _expm1((x > 0).where(0.0, x) / alpha)))

  def selu(self, alpha: float = SELU_ALPHA, gamma: float = SELU_SCALE) -> Self:
    """gamma * elu(x, alpha), with the self-normalizing constants of Klambauer et al. by default.

    >>> round(Tensor([1.0]).selu().item(), 6)
    1.050701
    """
    return self.elu(alpha) * gamma

  def gelu(self, approximate: str = "tanh") -> Self:
    """The Gaussian error linear unit. The default is the tanh approximation, as tinygrad's gelu (torch's default is
    approximate="none", the exact x * (1 + erf(x / sqrt(2))) / 2, which this gives with approximate="none").

    >>> round(Tensor([1.0]).gelu().item(), 6), round(Tensor([1.0]).gelu(approximate="none").item(), 6)
    (0.841192, 0.841345)
    """
    if approximate == "none": return self._float_op(lambda x: x * 0.5 * (1 + _erf(x * math.sqrt(0.5))))
    if approximate != "tanh": raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return self._float_op(_gelu_tanh)

  def quick_gelu(self) -> Self:
    """x * sigmoid(1.702 x), the sigmoid approximation of gelu.

    >>> round(Tensor([1.0]).quick_gelu().item(), 6)
    0.845796
    """
    return self._float_op(lambda x: x * (x * 1.702).sigmoid())

  def silu(self) -> Self:
    """x * sigmoid(x), also called swish.

    >>> round(Tensor([1.0]).silu().item(), 6)
    0.731059
    """
    return self._float_op(lambda x: x * x.sigmoid())

  def swish(self) -> Self:
    """x * sigmoid(x), the same as silu.

    >>> round(Tensor([1.0]).swish().item(), 6)
    0.731059
    """
    return self.silu()

  def mish(self) -> Self:
    """x * tanh(softplus(x)).

    >>> round(Tensor([1.0]).mish().item(), 6)
    0.865098
    """
    return self._float_op(lambda x: x * _tanh(_softplus(x)))

  def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Self:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold, as torch.

    >>> round(Tensor([0.0]).softplus().item(), 6)
    0.693147
    """
    if beta == 0: raise ValueError("softplus: beta must not be 0")
    def op(x: Self) -> Self:
      linear = x * beta > threshold
      # the derivative stated as one factor, sigmoid(beta * x), as torch's: the chain rule through _softplus's two
      # terms adds a gradient of inf and one of -inf * e^-|x| into NaN
      value, slope = linear.where(x, _softplus(x * beta) / beta), linear.where(1.0, (x * beta).sigmoid())
      return value._apply_uop(lambda v, xu, d: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, xu, d)), x, slope)
    return self._float_op(op)

  def softsign(self) -> Self:
    """x / (1 + |x|).

    >>> Tensor([-3.0, 1.0]).softsign().tolist()
    [-0.75, 0.5]
    """
    return self._float_op(lambda x: x / (x.abs() + 1))

  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Self:
    """alpha * x + beta clamped to [0, 1] (torch's hardsigmoid with the defaults: relu6(x + 3) / 6).

    >>> Tensor([-4.0, 0.0, 4.0]).hardsigmoid().tolist()
    [0.0, 0.5, 1.0]
    """
    return self._float_op(lambda x: (x * alpha + beta).hardtanh(0.0, 1.0))

  def hardswish(self) -> Self:
    """x * relu6(x + 3) / 6.

    >>> Tensor([-4.0, 1.0, 4.0]).hardswish().tolist()
    [-0.0, 0.6666666865348816, 4.0]
    """
    return self._float_op(lambda x: x * (x + 3).relu6() * (1 / 6))

  def sigmoid(self) -> Self:
    """1 / (1 + exp(-x)), computed from e = exp(-|x|) <= 1: exp(-x) overflows to inf for x < -88 (float32), and
    the chain rule through that inf turns the gradient (zero there) into NaN. float16 and bfloat16 are computed in
    float32 and rounded once, as torch's (rounding e, 1 + e and the reciprocal each made them 1.7x as far from float64).

    >>> Tensor([0.0]).sigmoid().tolist()
    [0.5]
    """
    return self._float_op(_sigmoid)

  def logsigmoid(self) -> Self:
    """log(sigmoid(x)) = -softplus(-x), without overflow or loss of the small values.

    >>> round(Tensor([0.0]).logsigmoid().item(), 6)
    -0.693147
    """
    return self._float_op(lambda x: -(-x).softplus(threshold=math.inf))

  # ---- torch's special functions built on the ones above ----

  def _float_pair(self, name: str, x: Self | Any, fn: Callable[[Self, Self], Self]) -> Self:
    """fn of self and x broadcast as floats (ints become the default float); float16 and bfloat16 in float32."""
    check_operand(name, "the second operand", x)
    a, b = (t._to_float() for t in self._broadcasted(x))
    if a.dtype.is_half: return fn(a.cast(dtypes.float32), b.cast(dtypes.float32)).cast(a.dtype)
    return fn(a, b)

  def hypot(self, x: Self | Any) -> Self:
    """sqrt(self**2 + x**2) without overflow or underflow in the squares, as torch.hypot: an infinite side gives inf
    (even beside a NaN, as C's hypot); ints become float.

    >>> Tensor([3.0, 3e30, float("inf")]).hypot(Tensor([4.0, 4e30, float("nan")])).tolist()
    [5.0, 4.9999999241216036e+30, inf]
    """
    def fn(a: Self, b: Self) -> Self:
      m = a.abs().maximum(b.abs())
      # scaled by the larger side: a*a overflows float32 beyond 1.8e19 and vanishes below 1e-23. The result does
      # not depend on the scale (its derivative is 0), so no gradient flows through it
      s = ((m == 0) | m.isinf()).where(1, m).detach()
      h = s * ((a / s).square() + (b / s).square()).sqrt()
      return (a.isinf() | b.isinf()).where(math.inf, h)
    return self._float_pair("hypot", x, fn)

  def logit(self, eps: float | None = None) -> Self:
    """log(x / (1 - x)), the inverse of sigmoid, as torch.logit: with `eps`, x is first clamped to [eps, 1 - eps];
    ints become float. Computed as log(x) - log1p(-x), which keeps its digits near 0 and its infinite slope at 0
    and 1.

    >>> [round(v, 4) for v in Tensor([0.25, 0.5, 1.0]).logit().tolist()]
    [-1.0986, 0.0, inf]
    """
    if eps is not None and (not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 <= eps <= 0.5):
      raise ValueError(f"logit: eps must be a number in [0, 0.5] or None, got {eps!r}")
    def fn(x: Self) -> Self:
      if eps is not None: x = x.clamp(eps, 1 - eps)
      return x.log() - (-x).log1p()
    return self._float_op(fn)

  def xlogy(self, x: Self | Any) -> Self:
    """self * log(x), and 0 where self is 0 (even where log(x) is -inf or inf), as torch.xlogy; NaN where x is NaN.
    The information-theory form of x log x terms (entropies, KL divergences). Ints become float.

    >>> Tensor([0.0, 2.0, 0.0]).xlogy(Tensor([0.0, 1.0, float("nan")])).tolist()
    [0.0, 0.0, nan]
    """
    def fn(a: Self, b: Self) -> Self:
      zero = a == 0
      # log runs on 1 where self is 0: its -inf at x = 0 times the zero gradient would be NaN
      return b.isnan().where(math.nan, zero.where(0, a * zero.where(1, b).log()))
    return self._float_pair("xlogy", x, fn)

  def glu(self, dim: int = -1) -> Self:
    """The gated linear unit: the first half of `dim` times the sigmoid of the second half, as
    torch.nn.functional.glu.

    >>> Tensor([[1.0, 2.0, 0.0, 0.0]]).glu().tolist()
    [[0.5, 1.0]]
    """
    d = self._resolve_axis(dim)
    if self.ndim == 0 or self.shape[d] % 2:
      raise ValueError(f"glu: dim {dim} of {self.shape} must have an even size, to split it in halves")
    a, b = self.chunk(2, d)
    return a * b.sigmoid()
