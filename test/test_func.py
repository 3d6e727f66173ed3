"""lazytensor.func against torch.func: every transformation and the compositions issue 28 names (vmap of grad, jacfwd
of jacrev, vmap of vmap, vmap of a sharded tensor), on an MLP, a conv net, attention and a scan-like loop; the kernel
counts of jvp next to the forward and of vmap(f) next to the hand-batched f; what vmap refuses."""
from __future__ import annotations

import doctest
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from lazytensor import Tensor, func
from lazytensor.func import VmapError
from lazytensor.func.tree import flatten

torch = pytest.importorskip("torch")
F = torch.nn.functional

# ---- the models: one example's output from (params, x), written once for each framework ----

def _mlp(p: Any, x: Any) -> Any:
  w1, b1, w2 = p
  return (x @ w1 + b1).tanh() @ w2

def _attention(p: Any, x: Any) -> Any:
  wq, wk, wv = p
  q, k, v = x @ wq, x @ wk, x @ wv
  return ((q @ k.T) / 2).softmax(-1) @ v

def _scan(p: Any, x: Any) -> Any:
  # an RNN's loop: each step reads the last one's state
  wh, wx = p
  h = (x[0] @ wx).tanh()
  for t in range(1, x.shape[0]): h = (h @ wh + x[t] @ wx).tanh()
  return h

def _conv_lt(p: Any, x: Any) -> Any:
  w, wo = p
  return x.reshape(1, *x.shape).conv2d(w, padding=1).relu().reshape(-1) @ wo

def _conv_th(p: Any, x: Any) -> Any:
  w, wo = p
  return F.conv2d(x.reshape(1, *x.shape), w, padding=1).relu().reshape(-1) @ wo

@dataclass(frozen=True)
class Model:
  name: str
  lt: Callable[[Any, Any], Any]
  th: Callable[[Any, Any], Any]
  params: tuple[tuple[int, ...], ...]
  x: tuple[int, ...]  # one example

MODELS = [
  Model("mlp", _mlp, _mlp, ((4, 8), (8,), (8, 3)), (4,)),
  Model("conv", _conv_lt, _conv_th, ((3, 2, 3, 3), (48, 2)), (2, 4, 4)),
  Model("attention", _attention, _attention, ((4, 4), (4, 4), (4, 4)), (5, 4)),
  Model("scan", _scan, _scan, ((3, 3), (2, 3)), (4, 2)),
]
by_model = pytest.mark.parametrize("m", MODELS, ids=[m.name for m in MODELS])

def _data(shapes: Any, seed: int) -> Any:
  rng = np.random.default_rng(seed)
  if isinstance(shapes, tuple) and shapes and isinstance(shapes[0], tuple):
    return tuple(rng.uniform(-1, 1, s).astype(np.float32) for s in shapes)
  return rng.uniform(-1, 1, shapes).astype(np.float32)

def _both(tree: Any) -> tuple[Any, Any]:
  """A tree of numpy arrays as lazytensor tensors and as torch tensors."""
  if isinstance(tree, tuple): return tuple(_both(t)[0] for t in tree), tuple(_both(t)[1] for t in tree)
  return Tensor(tree), torch.tensor(tree)

def _close(got: Any, want: Any, rtol: float = 1e-4, atol: float = 1e-5) -> None:
  got_leaves, got_spec = flatten(got)
  want_leaves, want_spec = flatten(want)
  assert got_spec == want_spec, (got_spec, want_spec)
  for g, w in zip(got_leaves, want_leaves):
    w = w.detach().numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    np.testing.assert_allclose(g.numpy(), w, rtol=rtol, atol=atol)

def _inputs(m: Model, batch: tuple[int, ...] = ()) -> tuple[Any, Any, Any, Any]:
  (p, tp), (x, tx) = _both(_data(m.params, 0)), _both(_data(batch + m.x, 1))
  return p, x, tp, tx

def _loss(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
  def loss(p: Any, x: Any) -> Any:
    out = fn(p, x)
    return (out * out).sum()
  return loss

# ---- reverse mode ----

@by_model
def test_grad(m: Model) -> None:
  p, x, tp, tx = _inputs(m)
  _close(func.grad(_loss(m.lt), argnums=(0, 1))(p, x), torch.func.grad(_loss(m.th), argnums=(0, 1))(tp, tx))

@by_model
def test_grad_and_value_has_aux(m: Model) -> None:
  p, x, tp, tx = _inputs(m)
  def with_aux(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def loss(p: Any, x: Any) -> Any:
      out = fn(p, x)
      return (out * out).sum(), {"out": out}
    return loss
  got = func.grad_and_value(with_aux(m.lt), has_aux=True)(p, x)
  _close(got, torch.func.grad_and_value(with_aux(m.th), has_aux=True)(tp, tx))

@by_model
def test_vjp(m: Model) -> None:
  p, x, tp, tx = _inputs(m)
  ct = _data(m.lt(p, x).shape, 2)
  out, vjp_fn = func.vjp(m.lt, p, x)
  want_out, want_fn = torch.func.vjp(m.th, tp, tx)
  _close(out, want_out)
  _close(vjp_fn(Tensor(ct)), want_fn(torch.tensor(ct)))

# ---- forward mode ----

@by_model
def test_jvp(m: Model) -> None:
  p, x, tp, tx = _inputs(m)
  (dp, tdp), (dx, tdx) = _both(_data(m.params, 3)), _both(_data(m.x, 4))
  _close(func.jvp(m.lt, (p, x), (dp, dx)), torch.func.jvp(m.th, (tp, tx), (tdp, tdx)))

@by_model
def test_linearize(m: Model) -> None:
  p, x, tp, tx = _inputs(m)
  (dx, tdx), (dx2, tdx2) = _both(_data(m.x, 4)), _both(_data(m.x, 5))
  out, jvp_fn = func.linearize(lambda x: m.lt(p, x), x)
  want_out, want_fn = torch.func.linearize(lambda x: m.th(tp, x), tx)
  _close((out, jvp_fn(dx), jvp_fn(dx2)), (want_out, want_fn(tdx), want_fn(tdx2)))

# ---- Jacobians ----

@by_model
@pytest.mark.parametrize("mode", ["jacrev", "jacfwd"])
def test_jacobian(m: Model, mode: str) -> None:
  # with respect to the input and to the parameters (a tuple of tensors)
  p, x, tp, tx = _inputs(m)
  _close(getattr(func, mode)(m.lt, argnums=(0, 1))(p, x), getattr(torch.func, mode)(m.th, argnums=(0, 1))(tp, tx))

@by_model
def test_hessian(m: Model) -> None:
  p, x, tp, tx = _inputs(m)
  _close(func.hessian(_loss(m.lt), argnums=1)(p, x), torch.func.hessian(_loss(m.th), argnums=1)(tp, tx),
         rtol=1e-3, atol=1e-4)

@by_model
@pytest.mark.parametrize("outer,inner", [("jacfwd", "jacrev"), ("jacrev", "jacrev"), ("jacrev", "jacfwd")])
def test_jacobian_of_jacobian(m: Model, outer: str, inner: str) -> None:
  # jacfwd(jacrev(f)) is a Hessian of the loss; of the output, a third-order tensor
  p, x, tp, tx = _inputs(m)
  got = getattr(func, outer)(getattr(func, inner)(_loss(m.lt), argnums=1), argnums=1)(p, x)
  want = getattr(torch.func, outer)(getattr(torch.func, inner)(_loss(m.th), argnums=1), argnums=1)(tp, tx)
  _close(got, want, rtol=1e-3, atol=1e-4)

def test_jacobian_with_has_aux_and_trees() -> None:
  p, x, tp, tx = _inputs(MODELS[0])
  def f(p: Any, x: Any) -> Any:
    out = _mlp(p, x)
    return {"out": out, "sq": out * out}, out.sum()
  for mode in ("jacrev", "jacfwd"):
    got = getattr(func, mode)(f, argnums=0, has_aux=True)(p, x)
    _close(got, getattr(torch.func, mode)(f, argnums=0, has_aux=True)(tp, tx))

# ---- batching ----

@by_model
def test_vmap(m: Model) -> None:
  p, x, tp, tx = _inputs(m, (3,))
  _close(func.vmap(m.lt, in_dims=(None, 0))(p, x), torch.func.vmap(m.th, in_dims=(None, 0))(tp, tx))

@by_model
def test_vmap_in_dims_out_dims(m: Model) -> None:
  # the batch along the input's last dimension, and out in the output's last
  p, x, tp, tx = _inputs(m, (3,))
  x, tx = x.movedim(0, -1), tx.movedim(0, -1)
  got = func.vmap(m.lt, in_dims=(None, -1), out_dims=-1)(p, x)
  _close(got, torch.func.vmap(m.th, in_dims=(None, -1), out_dims=-1)(tp, tx))

@by_model
def test_per_example_gradients(m: Model) -> None:
  # vmap(grad(loss)): the gradient of each example's loss with respect to the parameters
  p, x, tp, tx = _inputs(m, (3,))
  got = func.vmap(func.grad(_loss(m.lt)), in_dims=(None, 0))(p, x)
  _close(got, torch.func.vmap(torch.func.grad(_loss(m.th)), in_dims=(None, 0))(tp, tx))

@by_model
def test_vmap_of_vmap(m: Model) -> None:
  p, x, tp, tx = _inputs(m, (2, 3))
  inner = (None, 0)
  got = func.vmap(func.vmap(m.lt, in_dims=inner), in_dims=(None, 1), out_dims=1)(p, x)
  want = torch.func.vmap(torch.func.vmap(m.th, in_dims=inner), in_dims=(None, 1), out_dims=1)(tp, tx)
  _close(got, want)

@by_model
@pytest.mark.parametrize("mode", ["jacrev", "jacfwd", "jvp", "vjp"])
def test_vmap_of(m: Model, mode: str) -> None:
  # vmap over the other transformations, batched over the examples (and their tangents or cotangents)
  p, x, tp, tx = _inputs(m, (3,))
  def per_example(lib: Any, fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    if mode == "jvp": return lambda p, x, t: lib.jvp(lambda x: fn(p, x), (x,), (t,))[1]
    if mode == "vjp": return lambda p, x, t: lib.vjp(lambda x: fn(p, x), x)[1](t)[0]
    return lambda p, x, t: getattr(lib, mode)(fn, argnums=1)(p, x)
  shape = m.x if mode == "jvp" else m.lt(p, x[0]).shape
  t, tt = _both(_data((3, *shape), 6))
  got = func.vmap(per_example(func, m.lt), in_dims=(None, 0, 0))(p, x, t)
  _close(got, torch.func.vmap(per_example(torch.func, m.th), in_dims=(None, 0, 0))(tp, tx, tt), rtol=1e-3, atol=1e-4)

def test_vmap_of_sharded_tensor() -> None:
  devices = ("CPU:0", "CPU:1")
  (p, tp), (x, tx) = _both(_data(MODELS[0].params, 0)), _both(_data((6, 4), 1))
  replicated = tuple(w.to(devices) for w in p)
  sharded = x.shard(devices, axis=0)
  got = func.vmap(_mlp, in_dims=(None, 0))(replicated, sharded)
  assert got.device == tuple(sharded.device)
  _close(got, torch.func.vmap(_mlp, in_dims=(None, 0))(tp, tx))

def test_vmap_unbatched_output_and_none_out_dims() -> None:
  x, w = Tensor(_data((3, 2), 0)), Tensor(_data((2,), 1))
  rows, total = func.vmap(lambda r, w: (r * w, w.sum()), in_dims=(0, None), out_dims=(0, None))(x, w)
  np.testing.assert_allclose(rows.numpy(), x.numpy() * w.numpy(), rtol=1e-6)
  assert total.shape == () and np.isclose(total.item(), w.numpy().sum())
  # an output that does not depend on the batch, with out_dims 0: one copy per example, as torch
  assert func.vmap(lambda r, w: w * 2, in_dims=(0, None))(x, w).shape == (3, 2)
  with pytest.raises(ValueError, match="out_dims is None for an output that depends on the batch"):
    func.vmap(lambda r: r * 2, out_dims=None)(x)

# ---- kernel counts ----

def test_jvp_kernels_next_to_forward() -> None:
  # forward mode costs about one more forward: the tangents' kernels beside the primal's, realized together
  p, x, _, _ = _inputs(MODELS[0], (16,))
  forward = len(_mlp(p, x).schedule())
  out, tangent = func.jvp(lambda x: _mlp(p, x), (x,), (Tensor(_data((16, 4), 2)),))
  both = len(out.schedule(tangent))
  print(f"MLP forward: {forward} kernels; jvp (output and tangent together): {both}")
  assert both <= 2 * forward

def _hand_batched(m: Model, p: Any, x: Any) -> Any:
  """The model written for a batch of examples, as one would by hand."""
  if m.name == "conv": return x.conv2d(p[0], padding=1).relu().reshape(x.shape[0], -1) @ p[1]
  if m.name == "scan":
    h = (x[:, 0] @ p[1]).tanh()
    for t in range(1, x.shape[1]): h = (h @ p[0] + x[:, t] @ p[1]).tanh()
    return h
  if m.name == "attention":
    q, k, v = (x @ w for w in p)
    return ((q @ k.transpose(-1, -2)) / 2).softmax(-1) @ v
  return m.lt(p, x)

@by_model
def test_vmap_kernels_equal_hand_batched(m: Model) -> None:
  p, x, _, _ = _inputs(m, (8,))
  batched, by_hand = func.vmap(m.lt, in_dims=(None, 0))(p, x), _hand_batched(m, p, x)
  kernels = len(batched.schedule())
  assert kernels == len(by_hand.schedule()) and kernels > 0
  np.testing.assert_allclose(batched.numpy(), by_hand.numpy(), rtol=1e-5, atol=1e-6)

# ---- randomness, and what vmap refuses ----

def test_vmap_randomness() -> None:
  x = Tensor.zeros(4, 3)
  with pytest.raises(VmapError, match="randomness='error'"): func.vmap(lambda r: r + Tensor.rand(3))(x)
  same = func.vmap(lambda r: r + Tensor.rand(3), randomness="same")(x).numpy()
  assert (same == same[0]).all()
  different = func.vmap(lambda r: r + Tensor.rand(3), randomness="different")(x).numpy()
  assert len({tuple(row) for row in different}) == 4 and ((0 <= different) & (different < 1)).all()
  # dropout draws too; each example its own mask
  with Tensor.train():
    dropped = func.vmap(lambda r: (r + 1).dropout(0.5), randomness="different")(Tensor.zeros(16, 32)).numpy()
  assert len({tuple(row) for row in dropped}) > 1 and set(np.unique(dropped)) <= {0.0, 2.0}

@pytest.mark.parametrize("fn", [
  lambda r: r * r.sum().item(),
  lambda r: r.masked_select(r > 0),
  lambda r: r.nonzero(),
  lambda r: Tensor(r.numpy()),
], ids=["item", "masked_select", "nonzero", "numpy"])
def test_vmap_refuses_values(fn: Callable[[Tensor], Tensor]) -> None:
  with pytest.raises(VmapError, match="needs the values"): func.vmap(fn)(Tensor(_data((3, 4), 0)))

def test_vmap_refuses_in_place_writes() -> None:
  x, acc = Tensor(_data((3, 4), 0)), Tensor.zeros(4).contiguous().realize()
  def add_into_input(r: Tensor) -> Tensor:
    r.add_(1)
    return r
  def add_into_outside(r: Tensor) -> Tensor:
    acc.assign(acc + r)
    return r * 2
  def setitem(r: Tensor) -> Tensor:
    y = r * 2
    y[0] = 5.0
    return y
  for fn in (add_into_input, add_into_outside, setitem):
    with pytest.raises(VmapError): func.vmap(fn)(x)
  # nothing was left pending: acc and x read as before
  assert acc.tolist() == [0.0] * 4 and np.array_equal(x.numpy(), _data((3, 4), 0))

def test_vmap_argument_errors() -> None:
  x = Tensor.zeros(3, 2)
  with pytest.raises(ValueError, match="different sizes"): func.vmap(lambda a, b: a + b)(x, Tensor.zeros(4, 2))
  with pytest.raises(ValueError, match="no input is batched"): func.vmap(lambda a: a, in_dims=None)(x)
  with pytest.raises(IndexError, match="in_dim 2 is out of range"): func.vmap(lambda a: a, in_dims=2)(x)
  with pytest.raises(TypeError, match="only tensors are batched"): func.vmap(lambda a, n: a * n)(x, 3)
  with pytest.raises(ValueError, match="does not match the structure"): func.vmap(lambda a, b: a, in_dims=(0,))(x, x)
  with pytest.raises(ValueError, match="randomness="): func.vmap(lambda a: a, randomness="sometimes")(x)

# ---- torch.func's semantics ----

def test_closure_is_a_constant() -> None:
  # differentiation is with respect to the argument, not to other uses of the same tensor (torch.func's levels)
  x = Tensor([1.0, 2.0, 3.0])
  assert func.grad(lambda a: (a * x).sum())(x).tolist() == [1.0, 2.0, 3.0]
  # a gradient an enclosing transformation takes is a constant to this one
  inner = func.grad(lambda a: func.grad(lambda b: (a * b * b).sum())(a).sum())(x)
  want = torch.func.grad(lambda a: torch.func.grad(lambda b: (a * b * b).sum())(a).sum())(torch.tensor(x.numpy()))
  _close(inner, want)

def test_grad_of_grad_and_outer_backward() -> None:
  x = Tensor([0.5, -1.0, 2.0], requires_grad=True)
  second = func.grad(lambda a: func.grad(lambda b: (b.sin() * b).sum())(a).sum())(x)
  tx = torch.tensor(x.numpy())
  _close(second, torch.func.grad(lambda a: torch.func.grad(lambda b: (b.sin() * b).sum())(a).sum())(tx))
  # results of func keep the graph to tensors that require gradients: backward reaches them
  g = func.grad(lambda a: (a ** 3).sum())(x)
  assert g.requires_grad
  g.sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), 6 * x.numpy(), rtol=1e-6)

@pytest.mark.parametrize("mode", ["grad", "jacrev", "jacfwd(jacrev)", "jacrev(jacrev)"])
def test_lazily_drawn_tensors(mode: str) -> None:
  # an argument and closed-over tensors drawn with randn and not realized (as a layer's fresh weights): their graphs
  # hold the random count's pending advances, which gradients read through (and a jacrev's vmap must leave alone)
  def loss(w: Any, x: Any, y: Any) -> Any: return ((x @ w).tanh() - y).square().mean()
  Tensor.manual_seed(0)
  w, x, y = Tensor.randn(4, 2), Tensor.randn(8, 4), Tensor.randn(8, 2)
  lib = {"grad": (func.grad, torch.func.grad), "jacrev": (func.jacrev, torch.func.jacrev),
         "jacfwd(jacrev)": (lambda f: func.jacfwd(func.jacrev(f)), lambda f: torch.func.jacfwd(torch.func.jacrev(f))),
         "jacrev(jacrev)": (lambda f: func.jacrev(func.jacrev(f)), lambda f: torch.func.jacrev(torch.func.jacrev(f)))}
  got = lib[mode][0](lambda w: loss(w, x, y))(w)
  got.realize()  # before the inputs are: it reads the memory the count's advances overwrite
  tw, tx, ty = (torch.tensor(t.numpy()) for t in (w, x, y))
  _close(got, lib[mode][1](lambda w: loss(w, tx, ty))(tw))
  # a jacrev's tensors over vmap's placeholders, still alive when the count's advance runs, are not computed with it
  w = Tensor.randn(3)
  jac = func.jacrev(lambda a: a * w)(Tensor([1.0, 2.0, 3.0]))
  np.testing.assert_array_equal(jac.numpy(), np.diag(w.numpy()))
  # Tensor.gradient (which grad uses) as backward: the gradient of x * w is x
  w, x = Tensor.randn(3, requires_grad=True), Tensor.randn(3)
  g = (x * w).sum().gradient(w)[0].numpy()
  np.testing.assert_array_equal(g, x.numpy())

def test_grad_argument_errors() -> None:
  x = Tensor([1.0, 2.0])
  with pytest.raises(ValueError, match="one-element float Tensor"): func.grad(lambda a: a * 2)(x)
  with pytest.raises(TypeError, match="float tensors"): func.grad(lambda a: a.sum().float())(Tensor([1, 2]))
  with pytest.raises(ValueError, match="out of range"): func.grad(lambda a: a.sum(), argnums=1)(x)
  with pytest.raises(ValueError, match="pair"): func.grad(lambda a: a.sum(), has_aux=True)(x)
  with pytest.raises(TypeError, match="tuples"): func.jvp(lambda a: a, x, x)
  with pytest.raises(ValueError, match="tangent of shape"): func.jvp(lambda a: a, (x,), (Tensor([1.0]),))

def test_docstring_examples() -> None:
  import lazytensor.runtime.device
  modules = [sys.modules[n] for n in ("lazytensor.func", "lazytensor.func.checkpoint", "lazytensor.runtime.device")]
  results = [doctest.testmod(m, extraglobs={"Tensor": Tensor}, optionflags=doctest.ELLIPSIS) for m in modules]
  assert sum(r.failed for r in results) == 0 and sum(r.attempted for r in results) >= 20, results
  assert lazytensor.runtime.device.memory_allocated.__doc__
