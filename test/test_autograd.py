"""Gradients: every differentiable op against torch (check_op compares the inputs' gradients) and against central finite
differences in float64 (check_grad_numeric, no torch needed); then the semantics of backward, gradient, requires_grad,
detach, no_grad and training, and the kernels a backward pass costs.

Each distinct kernel costs a compile, so every op runs on one or two small shapes that still exercise broadcasting.
"""
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, check_grad_numeric, check_op, named, nonzero, positive, torch

from lazytensor import Tensor, dtypes, nn, no_grad
from lazytensor.frontend.gradient import gradient_path
from lazytensor.nn.state import get_parameters
from lazytensor.uop.ops import Ops, UOp

F16, F32, F64 = dtypes.float16, dtypes.float32, dtypes.float64
NAN = math.nan

def _rand(*shapes: tuple[int, ...], gen: Any = None, seed: int = 0) -> list[np.ndarray]:
  """float64 inputs for the numerical checks: uniform in [-2, 2), or from a helpers generator (positive, nonzero)."""
  rng = np.random.default_rng(seed)
  return [gen(s, F64, rng) if gen else rng.uniform(-2, 2, s) for s in shapes]

# ---- elementwise: (name, fn, input shapes, generator of the inputs (None: uniform in [-2, 2)), torch's fn if other)

ELEMENTWISE: list[tuple[str, Callable[..., Any], list[tuple[int, ...]], Any, Any]] = [
  ("add", lambda a, b: a + b, [(3, 1, 5), (4, 5)], None, None),
  ("sub", lambda a, b: a - b, [(3, 1, 5), (4, 5)], None, None),
  ("rsub_scalar", lambda a: 1.5 - a, [(3, 4)], None, None),
  ("mul", lambda a, b: a * b, [(3, 1, 5), (4, 5)], None, None),
  ("div", lambda a, b: a / b, [(3, 1, 5), (4, 5)], nonzero, None),
  ("rdiv_scalar", lambda a: 2 / a, [(3, 4)], nonzero, None),
  ("pow_tensor", lambda a, b: a ** b, [(3, 4), (4,)], positive, None),
  ("pow_int", lambda a: a ** 3, [(3, 4)], None, None),
  ("pow_neg_float", lambda a: a ** -1.5, [(3, 4)], positive, None),
  ("pow_half", lambda a: a ** 0.5, [(3, 4)], positive, None),
  ("rpow", lambda a: 2 ** a, [(3, 4)], None, None),
  ("neg", lambda a: -a, [(3, 4)], None, None),
  ("exp", lambda a: a.exp(), [(3, 4)], None, None),
  ("exp2", lambda a: a.exp2(), [(3, 4)], None, None),
  ("log", lambda a: a.log(), [(3, 4)], positive, None),
  ("log2", lambda a: a.log2(), [(3, 4)], positive, None),
  ("sqrt", lambda a: a.sqrt(), [(3, 4)], positive, None),
  ("rsqrt", lambda a: a.rsqrt(), [(3, 4)], positive, None),
  ("sin", lambda a: a.sin(), [(3, 4)], None, None),
  ("cos", lambda a: a.cos(), [(3, 4)], None, None),
  ("sin_large", lambda a: (a * 300).sin(), [(3, 4)], None, None),
  ("relu", lambda a: a.relu(), [(3, 4)], None, None),
  ("sigmoid", lambda a: a.sigmoid(), [(3, 4)], None, None),
  ("tanh", lambda a: a.tanh(), [(3, 4)], None, None),
  ("abs", lambda a: a.abs(), [(3, 4)], None, None),
  ("reciprocal", lambda a: a.reciprocal(), [(3, 4)], nonzero, None),
  ("square", lambda a: a.square(), [(3, 4)], None, None),
  ("maximum", lambda a, b: a.maximum(b), [(3, 1, 5), (4, 5)], None, None),
  ("minimum", lambda a, b: a.minimum(b), [(3, 1, 5), (4, 5)], None, None),
  ("where", lambda a, b: (a > b).where(a, b * 2), [(3, 1, 5), (4, 5)], None,
   lambda a, b: torch.where(a > b, a, b * 2)),
  ("clamp", lambda a: a.maximum(-0.5).minimum(0.5), [(3, 4)], None, lambda a: a.clamp(-0.5, 0.5)),
  ("chain", lambda a, b: ((a * b).sigmoid() + a.exp() / (b * b + 1)).tanh(), [(3, 4), (4,)], None, None),
]

@pytest.mark.parametrize("name,fn,shapes,gen,torch_fn", named(ELEMENTWISE))
def test_elementwise_vs_torch(name: str, fn: Callable[..., Any], shapes: list[tuple[int, ...]], gen: Any,
                              torch_fn: Any) -> None:
  check_op(shapes, fn, torch_fn=torch_fn, gen=gen, atol=1e-4 if name == "sin_large" else None)

@pytest.mark.parametrize("name,fn,shapes,gen,torch_fn", named(ELEMENTWISE))
def test_elementwise_numeric(name: str, fn: Callable[..., Any], shapes: list[tuple[int, ...]], gen: Any,
                             torch_fn: Any) -> None:
  check_grad_numeric(fn, _rand(*shapes, gen=gen))

# values on the kinks: ties of maximum/minimum split the gradient as torch does; relu and abs have gradient 0 at 0
TIES = np.array([[-1.0, 0.0, 2.0, 2.0], [0.0, 0.0, -3.0, 1.0]], dtype=np.float32)

@pytest.mark.parametrize("name,fn,torch_fn", named([
  ("maximum", lambda a, b: a.maximum(b), None), ("minimum", lambda a, b: a.minimum(b), None),
  ("relu", lambda a, b: a.relu() + b.relu(), None), ("abs", lambda a, b: a.abs() * b, None),
  ("maximum_scalar", lambda a, b: a.maximum(0) + b.minimum(2.0),
   lambda a, b: a.maximum(torch.tensor(0.0)) + b.minimum(torch.tensor(2.0)))]))
def test_elementwise_ties(name: str, fn: Callable[..., Any], torch_fn: Any) -> None:
  check_op([TIES, TIES[::-1].copy()], fn, torch_fn=torch_fn)

def _exact_grads_vs_torch(fn: Callable[..., Any], values: list[list[float]], weight: list[float]) -> None:
  """The gradients of sum(fn(*values) * weight) in float64, equal to torch's bit for bit, NaN and inf included
  (check_op does not check the gradients of inputs with NaN or inf)."""
  ours = [Tensor(v, dtype=F64, requires_grad=True) for v in values]
  (fn(*ours) * Tensor(weight, dtype=F64)).sum().backward()
  refs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
  (fn(*refs) * torch.tensor(weight, dtype=torch.float64)).sum().backward()
  for i, (t, r) in enumerate(zip(ours, refs)): np.testing.assert_equal(t.grad.numpy(), r.grad.numpy(), f"input {i}")

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
def test_maximum_infinite_gradient_and_nan() -> None:
  # an infinite output gradient reaches only the larger side: the smaller got inf * 0 = NaN; a NaN side gives both all
  _exact_grads_vs_torch(lambda a, b: a.maximum(b), [[0.0, 1.0, NAN, 2.0, 1.0], [1.0, 0.0, 1.0, NAN, 1.0]],
                        [math.inf, -math.inf, 1.0, 1.0, math.inf])

# clamp by tensor bounds, on and around ties, with min == max and min > max (torch's rule gives x < min == max nothing)
CLAMP_X = np.array([0.0, 1.0, 2.0, 1.0, 0.0, 3.0, 1.5, 0.5, 2.5], np.float32)
CLAMP_LO = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0], np.float32)
CLAMP_HI = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0], np.float32)

@pytest.mark.parametrize("name,fn", named([
  ("both", lambda x, lo, hi: x.clamp(lo, hi)), ("same_tensor", lambda x, lo, hi: x.clip(lo, lo) + hi),
  ("min_only", lambda x, lo, hi: x.clamp(min=lo) * hi), ("max_only", lambda x, lo, hi: x.clamp(max=hi) * lo)]))
def test_clamp_tensor_bounds_gradient(name: str, fn: Callable[..., Any]) -> None:
  check_op([CLAMP_X, CLAMP_LO, CLAMP_HI], fn)

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
def test_clamp_gradient_with_nan() -> None:
  # a NaN x gets no gradient, a NaN bound none either, as torch
  x, lo, hi = [NAN, 0.0, 0.5, 3.0, 0.5], [0.0, NAN, 0.0, NAN, 0.0], [1.0, 1.0, NAN, 2.0, 1.0]
  _exact_grads_vs_torch(lambda a, b, c: a.clamp(b, c), [x, lo, hi], [1.0, 2.0, 3.0, 4.0, 5.0])
  _exact_grads_vs_torch(lambda a, b: a.clamp(min=b), [x, lo], [1.0, 2.0, 3.0, 4.0, 5.0])

# far out where exp overflows, a saturated sigmoid or tanh has gradient 0, not inf * 0 = NaN; a zero base of a power
# keeps its gradient finite
SATURATED = np.array([-1000.0, -100.0, -50.0, -1.0, 0.0, 1.0, 50.0, 100.0, 1000.0], dtype=np.float32)

@pytest.mark.parametrize("name,fn", named([
  ("sigmoid", lambda x: x.sigmoid()), ("tanh", lambda x: x.tanh()), ("abs_pow", lambda x: (x * 0.01).abs() ** 1.5)]))
def test_saturated_and_singular(name: str, fn: Callable[..., Any]) -> None:
  check_op([SATURATED], fn)

def test_lgamma_gradient_at_its_zeros() -> None:
  # lgamma is exactly 0 at 1 and 2, where its gradient (digamma) was 0 too: -0.5772 and 0.4228
  check_op([np.float32([0.5, 1.0, 2.0, 3.0]), np.float32([1.0, 2.0, 2.0, 1.0])], lambda x, y: x.lgamma() * y)

# ---- casts: the gradient comes back in the input's dtype ----

@pytest.mark.parametrize("name,fn,dtype", named([
  ("f32_f64", lambda a: (a.double() * 3).exp(), F32), ("f64_f32", lambda a: a.float().sin(), F64),
  ("f16_f32", lambda a: a.float().square(), F16), ("f32_f16", lambda a: a.half() * 2, F32),
  ("f16", lambda a: (a * a).sum(1), F16), ("f32_int_f32", lambda a: a.int().float() + a, F32)]))
def test_casts(name: str, fn: Callable[..., Any], dtype: Any) -> None:
  check_op([(3, 4)], fn, dtype=dtype, atol=1e-2 if dtype == F16 or name == "f32_f16" else None)

# ---- movement: (name, input shapes, fn, torch's fn if other) ----

def _torch_pad(pads: tuple[int, ...], value: float = 0.0) -> Callable[[Any], Any]:
  return lambda x: torch.nn.functional.pad(x, pads, value=value)

MOVEMENT: list[tuple[str, list[tuple[int, ...]], Callable[..., Any], Any]] = [
  ("reshape", [(3, 4, 5)], lambda x: x.reshape(4, -1, 3), None),
  ("permute", [(3, 4, 5)], lambda x: x.permute(2, 0, 1), None),
  ("transpose", [(3, 4, 5)], lambda x: x.transpose(0, 2), None),
  ("expand", [(3, 1, 5)], lambda x: x.expand(2, 3, 4, 5), None),
  ("pad", [(3, 4)], lambda x: x.pad((1, 2, 0, 3)), _torch_pad((1, 2, 0, 3))),
  ("pad_value", [(3, 4)], lambda x: x.pad((2, 0, 1, 1), value=2.5), _torch_pad((2, 0, 1, 1), 2.5)),
  ("pad_negative", [(3, 4)], lambda x: x.pad((1, -2, -1, 2)), _torch_pad((1, -2, -1, 2))),
  ("shrink", [(3, 4, 5)], lambda x: x.shrink(((1, 3), None, (2, 5))), lambda x: x[1:3, :, 2:5]),
  ("flip", [(3, 4, 5)], lambda x: x.flip((0, 2)), None),
  ("squeeze", [(3, 1, 5, 1)], lambda x: x.squeeze(), None),
  ("squeeze_dim", [(3, 1, 5, 1)], lambda x: x.squeeze(1), None),
  ("unsqueeze", [(3, 4)], lambda x: x.unsqueeze(1), None),
  ("flatten", [(3, 4, 5)], lambda x: x.flatten(1), None),
  ("repeat", [(3, 4)], lambda x: x.repeat(2, 1, 3), None),
  ("cat", [(2, 3), (2, 1), (2, 4)], lambda a, b, c: Tensor.cat(a, b, c, dim=1),
   lambda a, b, c: torch.cat([a, b, c], 1)),
  ("stack", [(2, 3), (2, 3)], lambda a, b: Tensor.stack(a, b, dim=1), lambda a, b: torch.stack([a, b], 1)),
  ("split", [(7, 3)], lambda x: x.split([2, 0, 5]), None),
  ("chunk", [(2, 9)], lambda x: x.chunk(4, 1), None),
  ("getitem_int", [(4, 5, 6)], lambda x: x[1, -2], None),
  ("getitem_slices", [(4, 5, 6)], lambda x: x[1:3, ::2, 4:], None),
  ("getitem_steps", [(4, 5, 6)], lambda x: x[::3, 1::2, ::4], None),
  ("getitem_none_ellipsis", [(4, 5, 6)], lambda x: x[None, ..., 1:, None, 2], None),
  ("chain", [(6, 4)], lambda x: x.T.reshape(2, 12)[:, 1::3].unsqueeze(0).expand(3, 2, 4).flip(2), None),
]

@pytest.mark.parametrize("name,shapes,fn,torch_fn", named(MOVEMENT))
def test_movement_vs_torch(name: str, shapes: list[tuple[int, ...]], fn: Callable[..., Any], torch_fn: Any) -> None:
  check_op(shapes, fn, torch_fn=torch_fn)

# negative steps flip: torch has no such slices, so only the numerical check
NUMERIC_ONLY_MOVEMENT: list[tuple[str, list[tuple[int, ...]], Callable[..., Any], Any]] = [
  ("getitem_negative_steps", [(4, 5, 6)], lambda x: x[::-1, 3:0:-2, ::-4], None),
  ("getitem_mixed", [(4, 5, 6)], lambda x: x[..., None, ::-2][1:, 0], None),
]

@pytest.mark.parametrize("name,shapes,fn,torch_fn", named(MOVEMENT + NUMERIC_ONLY_MOVEMENT))
def test_movement_numeric(name: str, shapes: list[tuple[int, ...]], fn: Callable[..., Any], torch_fn: Any) -> None:
  check_grad_numeric(fn, _rand(*shapes))

# ---- reductions ----

# rows with no zero, one zero and two zeros: the product's gradient needs no division by x
ZEROS = np.array([[1.5, -2.0, 0.5, 3.0], [2.0, 0.0, -1.0, 0.5], [0.0, 1.0, 0.0, 2.0]])
# rows with a unique maximum, a tie of two and a tie of three (and the same for the minimum, per column)
TIED = np.array([[1.0, 3.0, -2.0, 0.5], [2.0, -1.0, 2.0, 0.0], [1.0, 1.0, 1.0, -4.0]])

REDUCE: list[tuple[str, list[Any], Callable[..., Any], Any]] = [
  ("sum_axis", [(3, 4, 5)], lambda x: x.sum(1), None),
  ("sum_all", [(3, 4, 5)], lambda x: x.sum(), None),
  ("sum_keepdim", [(3, 4, 5)], lambda x: x.sum((0, 2), keepdim=True), None),
  ("prod_zeros", [ZEROS], lambda x: x.prod(1), None),
  ("prod_all", [(2, 3)], lambda x: x.prod(), None),
  ("max", [(3, 4, 5)], lambda x: x.max(1), lambda x: x.amax(1)),
  ("max_ties", [TIED], lambda x: x.max(1), lambda x: x.amax(1)),
  ("max_all_ties", [TIED], lambda x: x.max(), lambda x: x.amax()),
  ("min_ties", [TIED], lambda x: x.min(0), lambda x: x.amin(0)),
  ("mean", [(3, 4, 5)], lambda x: x.mean((0, 2)), None),
  ("var", [(3, 4, 5)], lambda x: x.var(1), None),
  ("var_correction0", [(3, 4)], lambda x: x.var(0, correction=0), None),
  ("std", [(3, 4)], lambda x: x.std(), None),
  ("logsumexp", [(3, 4, 5)], lambda x: x.logsumexp(1), None),
  ("softmax", [(3, 4, 5)], lambda x: x.softmax(1), None),
  ("log_softmax", [(3, 4)], lambda x: x.log_softmax(0), None),
]

@pytest.mark.parametrize("name,shapes,fn,torch_fn", named(REDUCE))
def test_reduce_vs_torch(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any) -> None:
  check_op([s.astype(np.float32) if isinstance(s, np.ndarray) else s for s in shapes], fn, torch_fn=torch_fn)

@pytest.mark.parametrize("name,shapes,fn,torch_fn", named([r for r in REDUCE if "ties" not in r[0]]))
def test_reduce_numeric(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any) -> None:
  check_grad_numeric(fn, [s if isinstance(s, np.ndarray) else _rand(s)[0] for s in shapes])

def test_sum_float16_accumulates() -> None:
  # the gradient of a float16 sum is float16, however many elements it spreads over
  check_op([(3, 700)], lambda x: x.sum(1), dtype=F16, atol=1e-2)

# ---- matmul and convolution ----

MATMUL = [((3, 4), (4, 5)), ((4,), (4,)), ((4,), (4, 5)), ((3, 4), (4,)), ((2, 3, 4), (4, 5)),
          ((2, 1, 3, 4), (5, 4, 6))]

@pytest.mark.parametrize("sa,sb", MATMUL, ids=str)
def test_matmul_vs_torch(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
  check_op([sa, sb], lambda a, b: a @ b, atol=1e-4)

@pytest.mark.parametrize("sa,sb", MATMUL[:2] + MATMUL[-1:], ids=str)
def test_matmul_numeric(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
  check_grad_numeric(lambda a, b: a @ b, _rand(sa, sb))

CONV = [  # x shape, weight shape, stride, padding, dilation, groups, bias
  ((2, 3, 7, 7), (4, 3, 3, 3), 1, 1, 1, 1, True), ((1, 2, 8, 8), (3, 2, 3, 3), 2, 0, 1, 1, False),
  ((1, 2, 9, 9), (2, 2, 3, 3), 1, 2, 2, 1, False), ((1, 6, 9, 11), (3, 2, 3, 2), (2, 1), (1, 2), (1, 2), 3, True)]

def _conv(stride: Any, padding: Any, dilation: Any, groups: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
  def ours(x: Any, w: Any, b: Any = None) -> Any:
    return x.conv2d(w, b, groups=groups, stride=stride, dilation=dilation, padding=padding)
  def theirs(x: Any, w: Any, b: Any = None) -> Any:
    return torch.nn.functional.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
  return ours, theirs

@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups,bias", CONV, ids=str)
def test_conv2d_vs_torch(xs: tuple[int, ...], ws: tuple[int, ...], stride: Any, padding: Any, dilation: Any,
                         groups: int, bias: bool) -> None:
  ours, theirs = _conv(stride, padding, dilation, groups)
  check_op([xs, ws] + ([(ws[0],)] if bias else []), ours, torch_fn=theirs, atol=1e-4)

@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups,bias", [CONV[0], CONV[-1]], ids=str)
def test_conv2d_numeric(xs: tuple[int, ...], ws: tuple[int, ...], stride: Any, padding: Any, dilation: Any,
                        groups: int, bias: bool) -> None:
  ours, _ = _conv(stride, padding, dilation, groups)
  check_grad_numeric(ours, _rand(xs, ws, (ws[0],)) if bias else _rand(xs, ws))

def test_numeric_check_catches_a_wrong_gradient() -> None:
  # the oracle itself: a function whose gradient rule is wrong (detach hides one term from backward) must fail
  with pytest.raises(AssertionError, match="finite differences"):
    check_grad_numeric(lambda x: x * x.detach(), _rand((3,)))

# ---- backward, gradient and requires_grad ----

def test_backward_accumulates() -> None:
  w = Tensor([1.0, -2.0, 3.0], requires_grad=True)
  (w * w).sum().backward()
  (w * 3).sum().backward()
  assert w.grad is not None and w.grad.tolist() == [5.0, -1.0, 9.0]
  w.grad = None
  (w * 2).sum().backward()
  assert w.grad is not None and w.grad.tolist() == [2.0, 2.0, 2.0]

def test_backward_fills_only_leaves_it_depends_on() -> None:
  a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0], requires_grad=True)
  c = Tensor([5.0, 6.0])  # not requires_grad: no .grad
  (a * c).sum().backward()
  assert a.grad is not None and a.grad.tolist() == [5.0, 6.0] and b.grad is None and c.grad is None

def test_leaf_used_twice_sums_its_gradients() -> None:
  x = Tensor([2.0, 3.0], requires_grad=True)
  (x * x + x.exp2() * x).sum().backward()
  want = 2 * x.numpy() + np.exp2(x.numpy()) * (np.log(2) * x.numpy() + 1)
  assert x.grad is not None
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)

def test_constant_leaves_are_distinct() -> None:
  # zeros(3) and zeros(3) are one interned constant; each leaf must still get its own gradient
  b1, b2 = Tensor.zeros(3, requires_grad=True), Tensor.zeros(3, requires_grad=True)
  s = Tensor(2.0, requires_grad=True)
  x = Tensor([1.0, 2.0, 3.0])
  (b1 * 2 + b2 * 5 + (x + Tensor.zeros(3)) * s + x * 2.0).sum().backward()
  assert b1.grad is not None and b2.grad is not None and s.grad is not None
  assert b1.grad.tolist() == [2.0] * 3 and b2.grad.tolist() == [5.0] * 3 and s.grad.item() == 6.0
  assert b1.tolist() == [0.0] * 3 and s.item() == 2.0

def test_gradient_explicit_output_gradient() -> None:
  x, y = Tensor([1.0, 2.0, 3.0]), Tensor([[1.0], [-1.0]])
  out = x * y  # (2, 3)
  gx, gy = out.gradient(x, y, gradient=Tensor([[1.0, 0.0, 2.0], [0.5, 1.0, 1.0]]))
  assert gx.tolist() == [0.5, -1.0, 1.0] and gy.tolist() == [[7.0], [5.5]]
  w = Tensor([1.0, 2.0], requires_grad=True)
  (w * w).backward(Tensor([3.0, -1.0]))
  assert w.grad is not None and w.grad.tolist() == [6.0, -4.0]
  # any tensor is a target, requires_grad or not; the gradient has the target's dtype
  h = Tensor([1.5], dtype=F16)
  gh, = h.square().sum().gradient(h)
  assert gh.dtype == F16 and gh.tolist() == [3.0]

def test_gradient_errors() -> None:
  x = Tensor([1.0, 2.0], requires_grad=True)
  with pytest.raises(ValueError, match=r"shape \(2,\) needs an explicit gradient="): (x * 2).backward()
  with pytest.raises(ValueError, match=r"shape \(2,\) needs an explicit gradient="): (x * 2).gradient(x)
  with pytest.raises(ValueError, match=r"gradient shape \(3,\) does not match the output shape \(2,\)"):
    (x * 2).backward(Tensor([1.0, 1.0, 1.0]))
  with pytest.raises(TypeError, match="only float outputs"): (x > 1).sum().gradient(x)
  with pytest.raises(TypeError, match="only floats"): (x * 2).sum().gradient(Tensor([1, 2]))

def test_gradients_that_are_zero() -> None:
  x = Tensor([1.0, 2.0], requires_grad=True)
  # nothing needs a gradient: backward leaves every .grad alone (as tinygrad), whatever the path
  for out in ((x > 1).sum(), Tensor([1.0]), (x > 1).where(1.0, 0.0).sum()):
    assert out.backward() is out and x.grad is None
  with no_grad(): (x * 2).sum().backward()
  assert x.grad is None
  # a target the output does not depend on, or only through a comparison or detach, gets zeros
  other = Tensor([3.0, 4.0, 5.0])
  g_other, g_x = (x * 2).sum().gradient(other, x)
  assert g_other.tolist() == [0.0, 0.0, 0.0] and g_x.tolist() == [2.0, 2.0]
  assert (x > 1).where(1.0, 0.0).sum().gradient(x)[0].tolist() == [0.0, 0.0]
  assert (x.detach() * 2).sum().gradient(x)[0].tolist() == [0.0, 0.0]
  # targets with a zero-size dimension get an empty gradient of their shape
  e = Tensor.zeros(4, 0, requires_grad=True)
  ge, = (e.sum() + x.sum()).gradient(e)
  assert ge.shape == (4, 0) and ge.dtype == e.dtype
  ge, = (e.T @ Tensor.ones(4, 3)).sum().gradient(e)
  assert ge.shape == (4, 0)
  with pytest.raises(TypeError, match="only float tensors can require gradients"): Tensor([1, 2], requires_grad=True)
  t = Tensor([1, 2])
  with pytest.raises(TypeError, match="int64"): t.requires_grad = True

# ---- zero-size values: backward reaches the leaves under them, with zeros (as torch) ----

ZERO_SIZE: list[tuple[str, Callable[..., Any], list[tuple[int, ...]], Any]] = [
  ("empty_slice", lambda a, w: (a @ w)[0:0].sum(), [(2, 4), (4, 3)], None),
  ("linear_of_an_empty_batch", lambda x, w, b: (x @ w + b).relu().sum(), [(0, 4), (4, 3), (3,)], None),
  ("sum_over_an_empty_axis", lambda x, w: (x.sum(1, keepdim=True) * w).sum() + x.prod(), [(3, 0), (3, 2)], None),
  ("mean_of_an_empty_batch", lambda x, w: (x * w).mean(0).nan_to_num().sum(), [(0, 3), (3,)], None),
  ("cat_with_an_empty_tensor", lambda a, b: a.cat(b).square().sum(), [(0, 3), (2, 3)],
   lambda a, b: torch.cat([a, b]).square().sum()),
  ("logsumexp_of_an_empty_axis", lambda x, w: (x.exp() @ w).logsumexp(0).clamp(-1, 1).sum(), [(0, 2), (2, 3)], None),
]

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
@pytest.mark.parametrize("name,fn,shapes,torch_fn", named(ZERO_SIZE))
def test_zero_size_gradients_vs_torch(name: str, fn: Callable[..., Any], shapes: list[tuple[int, ...]],
                                      torch_fn: Any) -> None:
  # a reduce over no elements was a constant that depended on nothing: backward left .grad None (torch: zeros)
  data = _rand(*shapes)
  xs = [Tensor(d.astype(np.float32), requires_grad=True) for d in data]
  refs = [torch.tensor(d.astype(np.float32), requires_grad=True) for d in data]
  fn(*xs).backward()
  (torch_fn or fn)(*refs).backward()
  for x, ref in zip(xs, refs):
    assert x.grad is not None and x.grad.shape == tuple(ref.grad.shape), name
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)

def test_scalar_shapes() -> None:
  x = Tensor(3.0, requires_grad=True)
  (x * x).backward()
  assert x.grad is not None and x.grad.shape == () and x.grad.item() == 6.0
  y = Tensor([[2.0]], requires_grad=True)
  (y * 4).backward()  # a one-element output has an implicit gradient of 1, whatever its shape
  assert y.grad is not None and y.grad.tolist() == [[4.0]]

def test_requires_grad_propagation() -> None:
  w = Tensor([1.0, 2.0], requires_grad=True)
  c = Tensor([3.0, 4.0])
  assert w.requires_grad is True and c.requires_grad is None and Tensor.zeros(2).requires_grad is None
  assert (w * c).requires_grad is True and (c * 2).requires_grad is None and w.sum().requires_grad is True
  assert w.reshape(2, 1).requires_grad is True and w.double().requires_grad is True
  # comparisons and casts to ints give values without gradients, as in torch
  assert (w > 1).requires_grad is None and w.int().requires_grad is None and w.argmax().requires_grad is None
  assert Tensor.full((2,), 1.0, requires_grad=True).requires_grad is True
  assert Tensor.rand(2, requires_grad=True).requires_grad is True and Tensor.randn(2).requires_grad is None
  w.requires_grad = False
  assert (w * 2).requires_grad is None
  assert w.requires_grad_() is w and (w * 2).requires_grad is True

def test_detach_stops_gradients() -> None:
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  d = x.detach()
  assert d.requires_grad is False and (d * 2).requires_grad is None
  (x * x.detach()).sum().backward()
  assert x.grad is not None and x.grad.tolist() == [1.0, 2.0, 3.0]  # d(x * c)/dx = c

def test_no_grad() -> None:
  w = Tensor([2.0, 3.0], requires_grad=True)
  with no_grad():
    assert Tensor.no_grad
    y = w * 2
    assert y.requires_grad is None
  assert not Tensor.no_grad and (w * 2).requires_grad is True
  # as torch: what no_grad computed is a constant to backward, even when used with w again
  (y * w).sum().backward()
  assert w.grad is not None and w.grad.tolist() == [4.0, 6.0] and y.tolist() == [4.0, 6.0]
  # the flag itself (tinygrad style), and the context as a decorator that restores it on errors
  Tensor.no_grad = True
  try: assert (w * 2).requires_grad is None
  finally: Tensor.no_grad = False

  @no_grad()
  def fails() -> None:
    assert Tensor.no_grad
    raise RuntimeError("inside")
  with pytest.raises(RuntimeError, match="inside"): fails()
  assert not Tensor.no_grad

def test_backward_inside_no_grad() -> None:
  # as torch: no_grad only stops recording; a graph built before still differentiates
  w = Tensor([1.0, 2.0], requires_grad=True)
  loss = (w * w).sum()
  with no_grad(): loss.backward()
  assert w.grad is not None and w.grad.tolist() == [2.0, 4.0]

def test_train_and_test_contexts() -> None:
  assert Tensor.training is False
  with Tensor.train():
    assert Tensor.training is True
    with Tensor.test():
      assert Tensor.training is False
      with Tensor.train(): assert Tensor.training is True
    assert Tensor.training is True
  assert Tensor.training is False
  with Tensor.train(False): assert Tensor.training is False

  @Tensor.train()
  def step(depth: int) -> bool:
    # reentrant: a recursive decorated call restores what each level found
    if depth: step(depth - 1)
    return Tensor.training
  assert step(2) is True and Tensor.training is False
  with pytest.raises(KeyError), Tensor.train(): raise KeyError("x")
  assert Tensor.training is False

# ---- realizing between forward and backward ----

def test_realize_leaf_after_building_the_loss() -> None:
  Tensor.manual_seed(0)
  x = Tensor.rand(3, requires_grad=True)  # a lazy leaf: its value is computed when first needed
  w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  loss = (x * w).sum()
  x.realize()
  loss.backward()
  assert x.grad is not None and w.grad is not None
  assert x.grad.tolist() == [1.0, 2.0, 3.0] and w.grad.tolist() == x.tolist()

def test_realize_intermediate_and_loss() -> None:
  a = Tensor([1.0, 2.0], requires_grad=True)
  y = a * a
  loss = (y * 3).sum()
  y.realize()
  loss.backward()
  assert a.grad is not None and a.grad.tolist() == [6.0, 12.0]
  a.grad = None
  loss = (a * a * a).sum()
  assert loss.item() == 9.0  # the loss itself realized (printed) before backward
  loss.backward()
  assert a.grad is not None and a.grad.tolist() == [3.0, 12.0]

def test_build_on_a_realized_intermediate() -> None:
  a = Tensor([1.0, 2.0], requires_grad=True)
  y = (a * 2).realize()
  z = y * y
  assert len(z.schedule()) == 1  # y is read from its buffer, not recomputed
  z.sum().backward()
  assert a.grad is not None and a.grad.tolist() == [8.0, 16.0]
  g, = z.sum().gradient(y)  # the realized tensor is a target too
  assert g.tolist() == [4.0, 8.0]

def test_second_order() -> None:
  # with respect to a tensor that requires no gradient too (test_second_order.py has the rest, against torch)
  x = Tensor([1.0, 2.0])
  g, = (x * x * x).sum().gradient(x, create_graph=True)
  gg, = g.sum().gradient(x)
  assert g.tolist() == [3.0, 12.0] and gg.tolist() == [6.0, 12.0]

def test_gradient_across_devices() -> None:
  x = Tensor([1.0, 2.0], requires_grad=True)
  ((x * 2).to("CPU:1") * Tensor([3.0, 4.0], device="CPU:1")).sum().backward()
  assert x.grad is not None and x.grad.device == x.device and x.grad.tolist() == [6.0, 8.0]

# ---- the backward graph is lazy and fuses ----

def test_backward_is_lazy_and_fuses() -> None:
  rng = np.random.default_rng(0)
  x = Tensor(rng.uniform(-1, 1, (4, 5)).astype(np.float32))
  w = Tensor(rng.uniform(-1, 1, (4, 5)).astype(np.float32), requires_grad=True)
  (x * w).relu().sum().backward()
  assert w.grad is not None
  # the relu's backward is a where inside the one kernel that computes the gradient
  assert len(w.grad.schedule()) == 1 and len((x * w).sum().gradient(w)[0].schedule()) == 1
  np.testing.assert_allclose(w.grad.numpy(), x.numpy() * (x.numpy() * w.numpy() > 0), rtol=1e-6)
  # a layer: the forward matmul is materialized once for the mask, the gradient matmul is the second kernel
  v = Tensor(rng.uniform(-1, 1, (5, 3)).astype(np.float32), requires_grad=True)
  assert len((x @ v).relu().sum().gradient(v)[0].schedule()) == 2
  # the shift by the max in softmax cancels out and is not differentiated: 3 forward kernels, 4 backward
  y = Tensor(rng.uniform(-1, 1, (4, 5)).astype(np.float32))
  assert len(y.softmax(1).schedule()) == 3
  assert len((y.softmax(1) * x).sum().gradient(y)[0].schedule()) == 4
  # gradients of several leaves realize together, in one schedule
  (x @ v).relu().sum().backward()
  assert v.grad is not None and len(v.grad.schedule(w.grad)) <= 3

def test_mlp_backward_nodes() -> None:
  # every node a backward builds is Python time at each training step (extra/bench/train.py without TinyJit): an MLP
  # with cross-entropy walks the 44 nodes between the loss and a weight (not the labels' comparisons, not the max that
  # log_softmax subtracts, which is detached) and keeps 42 new ones: no gradient built for an input or a constant, no
  # transpose of a transpose (50 walked and 46 kept before these were cut). A change of the forward graph may move them
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(12, 8), nn.Linear(8, 3)
  params = get_parameters([l1, l2])
  Tensor.realize(*params)
  for p in params: p.requires_grad = True
  x = Tensor(np.random.default_rng(0).standard_normal((4, 12), dtype=np.float32))
  loss = l2(l1(x).relu()).cross_entropy(Tensor([0, 2, 1, 2]))
  forward = loss.lazydata.toposort
  assert len(gradient_path(loss.lazydata, {p.lazydata for p in params})) == 44
  loss.backward()
  grads = UOp(Ops.SINK, src=tuple(p.grad.lazydata for p in params if p.grad is not None)).toposort
  assert len([u for u in grads if u not in forward and u.op is not Ops.SINK]) == 42

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
def test_std_of_equal_values_has_gradient_zero() -> None:
  # torch's std backward gives 0 where the std is 0; sqrt's derivative there is inf, and the chain rule gave NaN
  for data, axis in (([2.0, 2.0, 2.0], None), ([[1.0, 1.0], [1.0, 3.0]], 1)):
    x, t = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    x.std(axis).sum().backward()
    t.std(axis).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)

def test_power_under_no_grad_builds_no_derivatives() -> None:
  # a power states its derivatives (a CUSTOM_GRAD); under no_grad nothing differentiates it, and they were ~half of
  # the graph of Adam's bias corrections 1 - b ** t at every step (216 -> 114 nodes)
  t = Tensor([3.0], requires_grad=True)
  with no_grad(): value = 1 - 0.9 ** t
  assert not any(u.op is Ops.CUSTOM_GRAD for u in value.lazydata.toposort)
  np.testing.assert_allclose(value.numpy(), [1 - 0.9 ** 3], rtol=1e-6)
  assert any(u.op is Ops.CUSTOM_GRAD for u in (0.9 ** t).lazydata.toposort)
