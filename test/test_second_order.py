"""Second-order gradients against torch: create_graph=True keeps the graph of a gradient (lazy or realized) so that it
can be differentiated again (Hessian-vector products, a gradient penalty, third derivatives); without it a gradient is a
constant to autograd, and differentiating through it is an error, never zeros."""
import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import named

from lazytensor import Tensor, memory_allocated, nn
from lazytensor.helpers import ArgumentError
from lazytensor.nn.optim import SGD

torch = pytest.importorskip("torch")
F = torch.nn.functional

def _mlp(x: Any, w1: Any, w2: Any) -> Any: return ((x @ w1).tanh() @ w2).log_softmax(1).sum() + (x @ w1).relu().sum()

# (name, fn, input shapes, torch's fn where it differs): each fn maps its inputs to a scalar
FUNCTIONS: list[tuple[str, Callable[..., Any], list[tuple[int, ...]], Any]] = [
  ("sin", lambda x: x.sin().sum(), [(3, 4)], None),
  ("tanh", lambda x: x.tanh().sum(), [(3, 4)], None),
  # tanh's chain rule overflowed for 11 < |x| < 20 in float32 (its second derivative was +-8 there, not 0)
  ("tanh_saturated", lambda x: (x * 12).tanh().sum(), [(3, 4)], None),
  ("mish", lambda x: (x * 12).mish().sum(), [(3, 4)], lambda x: F.mish(x * 12).sum()),
  ("exp", lambda x: x.exp().sum(), [(3, 4)], None),
  ("cube", lambda x: (x ** 3).sum(), [(3, 4)], None),
  ("softmax", lambda x, w: (x.softmax(1) * w).sum(), [(3, 4), (3, 4)], None),
  ("log_softmax", lambda x, w: (x.log_softmax(1) * w).sum(), [(3, 4), (3, 4)], None),
  ("matmul", lambda a, b: ((a @ b) ** 2).sum(), [(3, 4), (4, 5)], None),
  ("conv2d", lambda x, w: x.conv2d(w, padding=1).tanh().sum(), [(2, 3, 5, 5), (4, 3, 3, 3)],
   lambda x, w: F.conv2d(x, w, padding=1).tanh().sum()),
  ("mlp_loss", _mlp, [(8, 4), (4, 6), (6, 3)], None),
]

def _inputs(shapes: list[tuple[int, ...]], seed: int = 0) -> list[np.ndarray]:
  rng = np.random.default_rng(seed)
  return [rng.uniform(-1.5, 1.5, s).astype(np.float32) for s in shapes]

def _close(got: Tensor, want: Any, rtol: float = 1e-4, atol: float = 1e-5) -> None:
  np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=rtol, atol=atol)

@pytest.mark.parametrize("via", ["gradient", "backward"])
@pytest.mark.parametrize("name,fn,shapes,torch_fn", named(FUNCTIONS))
def test_hessian_vector_products(name: str, fn: Callable[..., Any], shapes: list[tuple[int, ...]], torch_fn: Any,
                                 via: str) -> None:
  # H v = d<grad f, v>/dx, with the first gradient from gradient(create_graph=True) or backward(create_graph=True)
  data, vs = _inputs(shapes), _inputs(shapes, seed=1)
  refs = [torch.tensor(d, requires_grad=True) for d in data]
  ref_g = torch.autograd.grad((torch_fn or fn)(*refs), refs, create_graph=True)
  ref_hv = torch.autograd.grad(sum((g * torch.tensor(v)).sum() for g, v in zip(ref_g, vs)), refs)
  xs = [Tensor(d, requires_grad=True) for d in data]
  if via == "gradient": gs = fn(*xs).gradient(*xs, create_graph=True)
  else:
    fn(*xs).backward(create_graph=True)
    gs = [x.grad for x in xs]
  assert all(g.requires_grad for g in gs)
  hv = sum(((g * Tensor(v)).sum() for g, v in zip(gs, vs)), Tensor(0.0)).gradient(*xs)
  for got, want in zip(gs, ref_g): _close(got, want)
  for got, want in zip(hv, ref_hv): _close(got, want, rtol=1e-3, atol=1e-4)

def test_gradient_penalty() -> None:
  # WGAN-GP: the norm of the critic's input gradient in the loss, then backward to the critic's weights
  x_np, w1_np, w2_np = _inputs([(6, 4), (4, 8), (8, 1)])
  def run(lib: Any) -> list[np.ndarray]:
    make = (lambda a: torch.tensor(a, requires_grad=True)) if lib is torch else \
      (lambda a: Tensor(a, requires_grad=True))
    x, w1, w2 = make(x_np), make(w1_np), make(w2_np)
    def critic(v: Any) -> Any: return (v @ w1).tanh() @ w2
    if lib is torch: gx, = torch.autograd.grad(critic(x).sum(), x, create_graph=True)
    else: gx, = critic(x).sum().gradient(x, create_graph=True)
    penalty = ((gx.square().sum(1) + 1e-12).sqrt() - 1).square().mean()
    (critic(x).mean() + 10 * penalty).backward()
    return [t.grad.numpy() for t in (x, w1, w2)]
  for got, want in zip(run(Tensor), run(torch)): np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

def test_gradient_of_a_gradient_of_a_gradient() -> None:
  # Tensor.gradient(..., create_graph=True) used twice, as torch.autograd.grad: d3/dx3 of x**4 * sin(x)
  data = np.float32([0.5, -1.0, 2.0])
  x, ref = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  g1, = (x ** 4 * x.sin()).sum().gradient(x, create_graph=True)
  g2, = g1.sum().gradient(x, create_graph=True)
  g3, = g2.sum().gradient(x)
  r1, = torch.autograd.grad((ref ** 4 * ref.sin()).sum(), ref, create_graph=True)
  r2, = torch.autograd.grad(r1.sum(), ref, create_graph=True)
  r3, = torch.autograd.grad(r2.sum(), ref)
  for got, want in ((g1, r1), (g2, r2), (g3, r3)): _close(got, want)

def test_third_derivative_of_tanh() -> None:
  data = np.float32([0.3, -1.0, 2.5, 12.0, -15.0])
  x, ref = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  g = x.tanh().sum()
  r = ref.tanh().sum()
  for _ in range(3):
    g, = g.sum().gradient(x, create_graph=True)
    r, = torch.autograd.grad(r.sum(), ref, create_graph=True)
    _close(g, r)

@pytest.mark.parametrize("via", ["gradient", "backward"])
def test_a_realized_gradient_is_differentiated(via: str) -> None:
  # realized, a gradient kept no graph: differentiating it gave zeros
  data = np.float32([[0.5, -1.0], [2.0, 0.25]])
  x, ref = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  if via == "gradient": g, = (x.tanh() @ x).sum().gradient(x, create_graph=True)
  else:
    (x.tanh() @ x).sum().backward(create_graph=True)
    g, x.grad = x.grad, None
  g.realize()
  gg, = (g * g).sum().gradient(x)
  r, = torch.autograd.grad((ref.tanh() @ ref).sum(), ref, create_graph=True)
  rr, = torch.autograd.grad((r * r).sum(), ref, retain_graph=True)
  _close(g, r)
  _close(gg, rr)
  (g.exp() * x).sum().backward()  # backward through it fills x.grad (it was left None)
  ref.grad = None
  (r.exp() * ref).sum().backward()
  assert x.grad is not None
  _close(x.grad, ref.grad)

@pytest.mark.parametrize("case", ["lazy", "realized", "computed_from"])
def test_differentiating_a_gradient_made_without_create_graph_is_an_error(case: str) -> None:
  # as torch's "element 0 of tensors does not require grad": not zeros (realized), not a silent no-op (backward)
  x = Tensor([0.5, 1.0], requires_grad=True)
  g, = (x ** 3).sum().gradient(x)
  assert not g.requires_grad
  if case == "realized": g.realize()
  out = (g * 2 + 1).sum() if case == "computed_from" else g.sum()
  with pytest.raises(ArgumentError, match=r"gradient: the output reaches a target of shape \(2,\) only through a "
                                          "gradient computed without create_graph=True"):
    out.gradient(x)
  with pytest.raises(ArgumentError, match="backward: this tensor needs no gradient: it was made from a gradient "
                                          "computed without create_graph"):
    out.backward()
  assert x.grad is None

def test_a_realized_gradient_frees_the_forward_and_still_says_it_is_constant() -> None:
  # its graph's realized nodes held the forward's activations (1089 KB here, for 65 KB of gradients) until zero_grad()
  dev = "CPU:1"  # a device of its own: nothing else allocates there while the test counts
  Tensor.manual_seed(0)
  layers = [nn.Linear(64, 64) for _ in range(4)]
  params = [p.replace(p.to(dev).realize()) for layer in layers for p in (layer.weight, layer.bias)]
  opt = SGD(params, lr=0.01)
  x = Tensor(_inputs([(1024, 64)])[0], device=dev)
  gc.collect()
  before = memory_allocated(dev)
  h = x
  for layer in layers: h = layer(h).relu()
  h.sum().backward()
  opt.step()
  del h
  gc.collect()
  # a gradient holds its own memory, no more: what is left once the step's other values went is the gradients
  assert memory_allocated(dev) - before == sum(p.numel() * 4 for p in params)
  # still a constant to autograd: differentiating through it is an error where its graph reached the target (the
  # first layer's gradient reached every later weight), zeros where not (the last layer's, the first weight)
  first, last = params[0].grad, params[-2].grad
  assert first is not None and last is not None
  with pytest.raises(ArgumentError, match="only through a gradient computed without create_graph"):
    first.sum().gradient(params[4])
  with pytest.raises(ArgumentError, match="backward: this tensor needs no gradient"): first.sum().backward()
  assert (last.sum() + (params[0] * 0).sum()).gradient(params[0])[0].abs().sum().item() == 0.0

def test_a_realized_gradient_remembers_the_tensors_its_graph_reached() -> None:
  data = np.float32([0.5, -1.0])
  x, other, scale = Tensor(data, requires_grad=True), Tensor(data * 2, requires_grad=True), Tensor(data + 3)
  h = (x * scale).tanh()  # a tensor of the graph, lazy: a target through its node, then through its realized memory
  g, = (h * h * other).sum().gradient(x)
  g.realize()
  for _ in range(2):
    with pytest.raises(ArgumentError, match="only through a gradient computed without create_graph"):
      g.sum().gradient(h)
    with pytest.raises(ArgumentError, match="only through a gradient computed without create_graph"):
      (g * x).sum().gradient(other)
    h.realize()
  # memory made after it was realized is not what it read, though it may be given the bit of the masks that memory
  # it read and that was freed since had (scale's)
  del h, scale
  gc.collect()
  fresh = [Tensor(data)]
  while not fresh[-1].lazydata.reads & g._graph_root().arg.reads:  # bits are handed on lowest first
    fresh.append(Tensor(data))
  assert all(gt.tolist() == [0.0, 0.0] for gt in (g.sum() + x.sum()).gradient(fresh[-1]))

def test_a_gradient_made_without_create_graph_is_a_constant() -> None:
  # as in torch: it weighs another term, whose own gradient is unchanged
  data = np.float32([0.5, 1.0, -2.0])
  x, ref = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  (x ** 3).sum().backward()
  (ref ** 3).sum().backward()
  gx, x.grad, gref, ref.grad = x.grad, None, ref.grad, None
  (gx * x.sin()).sum().backward()
  (gref * ref.sin()).sum().backward()
  _close(x.grad, ref.grad)

# log1p's derivative was the chain rule through log(u) * z / (u - 1), u = fl(1 + z): off by that correction (0.25 at
# z = 3e-8 in float32), and 0 from the second order on where z is below half an ulp of 1 (log1p was z there), so that
# asinh''(0) was 1 and atanh'''(0) 0. asinh, atanh and acosh are made of log1p; their derivatives are the chain rule
# through their formulas, whose terms near 0 are of the order of 1: right to the rounding of those in float32
TINY = [0.0, -0.0, 1e-30, -1e-9, 3e-8, 1e-3, -0.3, 0.75, 4.0]
LOG1P_USERS: list[tuple[str, Callable[[Any], Any], list[float]]] = [
  ("log1p", lambda x: x.log1p(), TINY),
  ("asinh", lambda x: x.asinh(), TINY),
  ("atanh", lambda x: x.atanh(), TINY[:-2]),
  ("acosh", lambda x: x.acosh(), [1 + 2 ** -23, 1 + 1e-5, 1.001, 1.5, 20.0]),
]

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("via", ["gradient", "backward"])
@pytest.mark.parametrize("name,fn,points", named(LOG1P_USERS))
def test_derivatives_of_every_order_through_log1p(name: str, fn: Callable[[Any], Any], points: list[float], via: str,
                                                   dtype: str) -> None:
  data = np.array(points, dtype=dtype)
  # torch in float64 (its float32 acosh' near 1 is 1e-5 off: x * x - 1 cancels)
  x, ref = Tensor(data, requires_grad=True), torch.tensor(data.astype(np.float64), requires_grad=True)
  g, r = fn(x), fn(ref)
  for _ in range(3):
    if via == "gradient": g, = g.sum().gradient(x, create_graph=True)
    else:
      g.sum().backward(create_graph=True)
      g, x.grad = x.grad, None
    r, = torch.autograd.grad(r.sum(), ref, create_graph=True)
    _close(g, r, rtol=1e-5, atol=1e-6 if dtype == "float32" else 1e-12)
