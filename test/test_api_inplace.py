"""torch's in-place ops (lazytensor/frontend/mixin/inplace.py) against torch: every entry of the table, on a tensor,
through a view, with gradients where torch gives them, and the dtype errors torch raises."""
from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from lazytensor import Tensor, no_grad
from lazytensor.frontend.mixin.inplace import InPlaceMixin

rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, (3, 4)).astype(np.float32)
Y = rng.uniform(-3, 3, (3, 4)).astype(np.float32)
POS = rng.uniform(0.2, 3, (3, 4)).astype(np.float32)
UNIT = rng.uniform(-0.9, 0.9, (3, 4)).astype(np.float32)
PROB = rng.uniform(0.05, 0.6, (3, 4)).astype(np.float32)  # 1.5 times it is a probability (the gradient test's input)
ROUNDED = np.round(X)
I = rng.integers(-20, 20, (3, 4)).astype(np.int32)
J = rng.integers(1, 20, (3, 4)).astype(np.int32)
SHIFT = rng.integers(0, 5, (3, 4)).astype(np.int32)
MASK = rng.random((3, 4)) < 0.5
ROWS = np.array([2, 0, 2, 1, 0, 1, 1, 2, 0, 0, 2, 1]).reshape(3, 4)
COLS = np.array([3, 0, 1])
NAN = np.array([[np.nan, np.inf, -np.inf, 1.0]] * 3, dtype=np.float32)

UNARY = [(X, "abs absolute neg negative sign sgn square exp exp2 expm1 sin cos tan atan arctan sinh cosh tanh asinh "
            "arcsinh deg2rad rad2deg sinc erf erfc sigmoid relu floor ceil round trunc fix frac"),
         (POS, "sqrt rsqrt reciprocal log log2 log10 log1p lgamma digamma"),
         (UNIT, "asin acos arcsin arccos atanh arctanh erfinv"), (PROB, "logit"), (POS + 1, "acosh arccosh"),
         (I, "logical_not bitwise_not"), (NAN, "nan_to_num")]
CASES: list[tuple[str, np.ndarray, tuple, dict]] = [(n, x, (), {}) for x, names in UNARY for n in names.split()]
CASES += [(n, X, (Y,), {}) for n in "add sub mul div subtract multiply divide true_divide atan2 arctan2 copysign "
          "heaviside".split()]
CASES += [(n, X, (POS,), {}) for n in "floor_divide remainder fmod hypot".split()]
CASES += [(n, ROUNDED, (ROUNDED.T.reshape(3, 4),), {}) for n in
          "eq ne not_equal lt le gt ge less less_equal greater greater_equal".split()]
CASES += [(n, I, (J,), {}) for n in "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor gcd lcm"
          .split()]
CASES += [(n, J, (SHIFT,), {}) for n in ("bitwise_left_shift", "bitwise_right_shift")]
CASES += [
  ("pow", POS, (Y,), {}), ("pow", I, (2,), {}), ("float_power", POS.astype(np.float64), (1.5,), {}),
  ("xlogy", POS, (POS.T.reshape(3, 4),), {}), ("ldexp", X, (SHIFT,), {}), ("add", I, (J,), {}),
  ("addcmul", X, (Y, POS), {"value": 0.5}), ("addcdiv", X, (Y, POS), {"value": 2.0}), ("lerp", X, (Y, 0.25), {}),
  ("clamp", X, (-1.0, 1.0), {}), ("clip", I, (-3, 5), {}), ("clamp_min", X, (0.5,), {}), ("clamp_max", X, (Y,), {}),
  ("masked_fill", X, (MASK, 7.0), {}), ("masked_scatter", X, (MASK, Y), {}),
  ("scatter", X, (0, ROWS, Y), {}), ("scatter_add", X, (0, ROWS, Y), {}),
  ("scatter_reduce", X, (0, ROWS, Y, "amax"), {}), ("scatter_reduce", X, (0, ROWS, Y, "mean"), {"include_self": False}),
  ("index_add", X, (1, COLS, Y[:, :3]), {"alpha": 2.0}), ("index_copy", X, (1, COLS, Y[:, :3]), {}),
  ("index_fill", X, (1, COLS[:2], -1.0), {}), ("index_put", X, ((ROWS[0, :3], COLS), Y[0, :3]), {}),
  ("index_put", X, ((ROWS[0, :3],), Y[0]), {"accumulate": True}),
  ("index_reduce", X, (1, COLS, POS[:, :3], "prod"), {}),
  ("tril", X, (), {}), ("triu", X, (1,), {}), ("cumsum", X, (1,), {}), ("cumprod", POS, (0,), {}),
  ("cumsum", I, (1,), {}), ("fill_diagonal", X, (5.0,), {}),
  ("addmm", X, (POS[:, :2], Y[:2]), {"beta": 0.5}), ("addmv", X[0], (Y.T, X[:, 0]), {"alpha": 2.0}),
  ("addr", X, (X[:, 0], Y[0]), {}), ("baddbmm", X.reshape(3, 2, 2), (POS.reshape(3, 2, 2), Y.reshape(3, 2, 2)), {}),
  ("addbmm", X, (POS.reshape(2, 3, 2), Y.reshape(2, 2, 3)[:, :, :1].repeat(4, 2)), {"beta": 2.0}),
  ("renorm", X, (2.0, 0, 3.0), {}), ("fill_diagonal", np.zeros((7, 2), np.float32), (3.0,),
                                                               {"wrap": True}),
]

def _ids(cases: list[tuple[str, np.ndarray, tuple, dict]]) -> list[str]:
  return [f"{n}-{x.dtype}-{i}" for i, (n, x, _, _) in enumerate(cases)]

def _on(lib: str, a: Any) -> Any:
  """An argument of the case as the library takes it: arrays as its tensors."""
  if isinstance(a, tuple): return tuple(_on(lib, v) for v in a)
  if not isinstance(a, np.ndarray): return a
  return torch.tensor(a) if lib == "torch" else Tensor(a)

def _run(lib: str, t: Any, name: str, args: tuple, kwargs: dict) -> Any:
  return getattr(t, name + "_")(*_on(lib, args), **{k: _on(lib, v) for k, v in kwargs.items()})

def _assert_same(t: Tensor, ref: torch.Tensor) -> None:
  assert t.dtype.name == str(ref.dtype).removeprefix("torch."), (t.dtype, ref.dtype)
  np.testing.assert_allclose(t.numpy(), ref.numpy(), rtol=2e-5, atol=2e-5, equal_nan=True)

def test_every_entry_of_the_table_is_tested() -> None:
  made = {n for n, f in vars(InPlaceMixin).items() if getattr(f, "__wrapped__", None) is not None
          and not n.startswith("__")}  # the operators (__iadd__, ...): test_augmented_assignment
  assert made - {n + "_" for n, *_ in CASES} == set()
  assert {"exp_", "scatter_add_", "fill_diagonal_", "index_put_", "bitwise_left_shift_"} <= set(dir(Tensor))

@pytest.mark.parametrize("name,x,args,kwargs", CASES, ids=_ids(CASES))
def test_inplace(name: str, x: np.ndarray, args: tuple, kwargs: dict) -> None:
  ref = torch.tensor(x)
  _run("torch", ref, name, args, kwargs)
  t = Tensor(x).realize()
  assert _run("lt", t, name, args, kwargs) is t
  _assert_same(t, ref)
  assert t.__class__.__dict__.get(name + "_") is None and getattr(Tensor, name + "_").__name__ == name + "_"

@pytest.mark.parametrize("name,x,args,kwargs", CASES, ids=_ids(CASES))
def test_inplace_through_a_view(name: str, x: np.ndarray, args: tuple, kwargs: dict) -> None:
  # the op on a transposed view of a buffer (and a slice of a wider one) writes the buffer, as in torch
  def base_of(new: Any) -> Any: return new(np.ascontiguousarray(np.swapaxes(np.concatenate([x, x[:1]]), 0, -1)))
  ref = base_of(torch.tensor)
  try: _run("torch", ref.transpose(0, -1)[:x.shape[0]], name, args, kwargs)
  except RuntimeError as e: pytest.skip(f"torch refuses this view: {e}")
  t = base_of(lambda a: Tensor(a).realize())
  _run("lt", t.transpose(0, -1)[:x.shape[0]], name, args, kwargs)
  _assert_same(t, ref)

GRAD_CASES = [c for c in CASES if c[1].dtype == np.float32]

@pytest.mark.parametrize("realized", [False, True], ids=["lazy", "realized"])
@pytest.mark.parametrize("name,x,args,kwargs", GRAD_CASES, ids=_ids(GRAD_CASES))
def test_inplace_gradients(name: str, x: np.ndarray, args: tuple, kwargs: dict, realized: bool) -> None:
  # the op on a non-leaf computed from a leaf that requires gradients; the gradient of the leaf, as torch's. Realized
  # before the op, the loss's gradient reads the new contents and the op's (abs_: the sign of the input) the old ones
  # of one buffer, which one schedule cannot order: the backward was refused
  leaf = torch.tensor(x, requires_grad=True)
  a = leaf * 1.5
  try:
    _run("torch", a, name, args, kwargs)
    (a * torch.tensor(np.resize(Y, x.shape))).tanh().sum().backward()
  except RuntimeError as e:
    pytest.skip(f"torch gives no gradient: {e}")
  assert leaf.grad is not None
  lt_leaf = Tensor(x, requires_grad=True)
  b = lt_leaf * 1.5
  if realized: b.realize()
  _run("lt", b, name, args, kwargs)
  (b * Tensor(np.resize(Y, x.shape))).tanh().sum().backward()
  want = leaf.grad.numpy(force=True)  # force: torch's gradient of sgn is a ZeroTensor
  # no gradient at all where the op's result has none (a comparison): torch's is zeros there
  got = lt_leaf.grad.numpy() if lt_leaf.grad is not None else np.zeros_like(want)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("x,name,args", [
  (I, "sqrt_", ()), (I, "div_", (2,)), (I, "mul_", (2.5,)), (I, "clamp_min_", (0.5,)), (I, "pow_", (2.5,)),
  (MASK, "add_", (1,)), (I, "sigmoid_", ()), (X, "float_power_", (2,)), (MASK, "cumsum_", (0,)),
])
def test_a_result_the_dtype_cannot_hold_is_a_type_error(x: np.ndarray, name: str, args: tuple) -> None:
  with pytest.raises(RuntimeError):
    getattr(torch.tensor(x), name)(*args)
  t = Tensor(x).realize()
  with pytest.raises(TypeError, match=f"{name}: the result has dtype .* cannot be written into this tensor of dtype"):
    getattr(t, name)(*args)
  np.testing.assert_array_equal(t.numpy(), x)  # nothing written

def test_casts_torch_allows() -> None:
  # a narrower dtype of the same kind, and a fill value cast as torch casts it
  t = Tensor(np.ones(3, np.float16)).realize().add_(Tensor(np.full(3, 1 / 3, np.float64)))
  ref = torch.ones(3, dtype=torch.float16).add_(torch.full((3,), 1 / 3, dtype=torch.float64))
  _assert_same(t, ref)
  ref = torch.tensor(I).masked_fill_(torch.tensor(MASK), 2.5)
  _assert_same(Tensor(I).realize().masked_fill_(Tensor(MASK), 2.5), ref)
  _assert_same(Tensor(X).realize().eq_(0.0).logical_not_(), torch.tensor(X).eq_(0.0).logical_not_())

def test_bad_input() -> None:
  with pytest.raises(ValueError, match=r"cannot write a value of shape \(2, 3\) into a target of shape \(3,\)"):
    Tensor.zeros(3).contiguous().realize().add_(Tensor.ones(2, 3))
  with pytest.raises(ValueError, match="fill_diagonal_: needs a tensor of at least 2 dims"):
    Tensor.zeros(3).contiguous().fill_diagonal_(1)
  with pytest.raises(ValueError, match=r"all dims equal, got shape \(2, 2, 3\)"):
    Tensor.zeros(2, 2, 3).contiguous().fill_diagonal_(1)

def test_fill_diagonal_of_a_cube() -> None:
  ref = torch.zeros(3, 3, 3).fill_diagonal_(2.0)
  _assert_same(Tensor.zeros(3, 3, 3).contiguous().realize().fill_diagonal_(2.0), ref)

# ---- Python's augmented assignments: in place, as torch's ----

AUGMENTED = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
             "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "&=": operator.iand,
             "|=": operator.ior, "^=": operator.ixor, "<<=": operator.ilshift, ">>=": operator.irshift}
VIEWS: dict[str, Callable[[Any], Any]] = {"w": lambda w: w, "w[1:]": lambda w: w[1:], "w.T": lambda w: w.T,
                                          "w[:, ::2]": lambda w: w[:, ::2]}

# torch has no pow of bools (lazytensor's is logical: x or not y)
@pytest.mark.parametrize("sym,dtype", [(s, d) for s in AUGMENTED for d in (np.float32, np.int32, np.bool_)
                                       if (s, d) != ("**=", np.bool_)], ids=lambda v: getattr(v, "__name__", v))
def test_augmented_assignment(sym: str, dtype: type) -> None:
  # `v op= x` writes v's memory, so the tensor v views sees it (it was `v = v op x`: a new tensor, w unchanged); where
  # torch refuses the op or the result's dtype (int /= x, float &= x), it is an error here too, and nothing is written
  op, rng = AUGMENTED[sym], np.random.default_rng(0)
  data = rng.integers(1, 6, (3, 4)).astype(dtype)
  for name, view in VIEWS.items():
    x = rng.integers(1, 3, view(data).shape).astype(dtype)
    ref, w = torch.tensor(data), Tensor(data).realize()
    try: ref_error = op(view(ref), torch.tensor(x)) is None
    except RuntimeError: ref_error = True
    v = view(w)
    if ref_error:
      with pytest.raises((TypeError, ValueError)): op(v, Tensor(x))
      np.testing.assert_array_equal(w.numpy(), data, err_msg=name)
      continue
    assert op(v, Tensor(x)) is v, name
    np.testing.assert_array_equal(w.numpy(), ref.numpy(), err_msg=f"{name} {sym}")
    np.testing.assert_array_equal(v.numpy(), view(ref).numpy(), err_msg=f"{name} {sym}")

def test_augmented_assignment_dtype_rule() -> None:
  # as torch: a result the tensor's dtype cannot hold is an error (an int tensor += 2.5), a narrower float is written
  t = Tensor([1, 2]).realize()
  with pytest.raises(RuntimeError): torch.tensor([1, 2]).__iadd__(2.5)
  with pytest.raises(TypeError, match="add_: the result has dtype float32, which cannot be written into this tensor "
                                      "of dtype int"):
    t += 2.5
  assert t.tolist() == [1, 2]
  h = Tensor(np.ones(2, np.float16)).realize()
  h += Tensor(np.full(2, 1 / 3))  # float64
  assert h.dtype.name == "float16" and h.tolist() == (torch.ones(2, dtype=torch.float16) + 1 / 3).tolist()

def test_augmented_assignment_into_a_leaf_that_requires_grad() -> None:
  # refused as in torch, through a view too; allowed under no_grad, where the leaf stays a leaf that requires grad
  w, ref = Tensor([1.0, 2.0, 3.0], requires_grad=True), torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
  for write in (lambda t: t.__iadd__(1), lambda t: t[1:].__imul__(2), lambda t: t.fill_(0),
                lambda t: t.copy_(t * 2), lambda t: t.sub_(1)):
    with pytest.raises(RuntimeError, match="leaf"): write(ref)
    with pytest.raises(RuntimeError, match="requires grad and is a leaf .* cannot be changed in place"): write(w)
  assert w.tolist() == [1.0, 2.0, 3.0]
  with no_grad(), torch.no_grad():
    w += 1
    ref += 1
    w[1:] *= 2
    ref[1:] *= 2
  assert w.tolist() == ref.tolist() == [2.0, 6.0, 8.0]
  assert w.requires_grad and w.is_leaf
  w.detach().add_(1)  # a detached view writes the memory alone, as torch's
  assert w.tolist() == [3.0, 7.0, 9.0]

def test_augmented_assignment_on_a_non_leaf_keeps_gradients() -> None:
  def run(lib: Any) -> list[Any]:
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True) if lib is torch else Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y += 1
    y[1:] *= x[:2]
    (y * y).sum().backward()
    return [y.tolist(), x.grad.tolist()]
  assert run(Tensor) == run(torch)

def _into_a_plain_tensor(case: str, lib: Any) -> list[Any]:
  x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True) if lib is torch else Tensor([1.0, 2.0, 3.0], requires_grad=True)
  zeros = torch.zeros(3) if lib is torch else Tensor.zeros(3).contiguous().realize()
  if case == "realized_and_its_view":
    view = zeros[1:]
    zeros += x * 2
    out = (view * view).sum() + (zeros * zeros).sum()
  elif case == "lazy":
    y = zeros * 1
    y += x * 2
    out = (y * y).sum()
  elif case == "accumulated":
    out = torch.tensor(0.0) if lib is torch else Tensor(0.0)
    for i in range(3): out += x[i] * x[i]
  else:
    zeros += x
    zeros *= x
    out = zeros.sum()
  assert out.requires_grad
  out.backward()
  return x.grad.tolist()

@pytest.mark.parametrize("case", ["realized_and_its_view", "lazy", "accumulated", "twice"])
def test_a_value_with_gradients_written_into_a_tensor_without(case: str) -> None:
  # as torch: the tensor written into (and its views) need gradients from then on; they kept none (.grad stayed None)
  assert _into_a_plain_tensor(case, Tensor) == _into_a_plain_tensor(case, torch)

def test_an_optimizer_step_written_with_augmented_assignment_trains() -> None:
  # `with no_grad(): p -= lr * p.grad` updates the model's parameters (it bound p to a new tensor: nothing trained)
  rng = np.random.default_rng(0)
  weights = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8,), (8, 1))]
  x, y = rng.standard_normal((16, 4)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32)
  def train(lib: Any) -> tuple[list[float], list[np.ndarray]]:
    make, grad_off = (torch.tensor, torch.no_grad) if lib is torch else (Tensor, no_grad)
    params = [make(w, requires_grad=True) for w in weights]
    losses = []
    for _ in range(4):
      loss = (((make(x) @ params[0] + params[1]).relu() @ params[2] - make(y)) ** 2).mean()
      loss.backward()
      with grad_off():
        for p in params:
          p -= 0.05 * p.grad
          p.grad = None
      losses.append(loss.item())
    return losses, [p.detach().numpy() if lib is torch else p.numpy() for p in params]
  (want_losses, want), (losses, got) = train(torch), train(Tensor)
  np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
  assert losses[-1] < losses[0] / 10
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

def test_in_place_matmul() -> None:
  # numpy's rule (torch has none: its `a @= b` makes a new tensor): written in place when the product has a's shape
  data, square = np.arange(6.0, dtype=np.float32).reshape(2, 3), np.float32([[1.0, 2.0], [0.5, -1.0]])
  ref, w = data.copy(), Tensor(data).realize()
  ref_t, t = ref.T, w.T
  ref_t @= square
  t @= Tensor(square)
  np.testing.assert_allclose(w.numpy(), ref, rtol=1e-6)
  with pytest.raises(ValueError):
    data.copy().__imatmul__(np.ones((3, 2), np.float32))
  with pytest.raises(ValueError, match=r"@=: the product has shape \(2, 2\), which cannot be written into this tensor "
                                       r"of shape \(2, 3\)"):
    w @= Tensor.ones(3, 2)
  i = Tensor([[1, 2], [3, 4]]).realize()
  with pytest.raises(TypeError, match="@=: the result has dtype float32"): i @= Tensor([[0.5, 0.0], [0.0, 1.0]])
  i @= Tensor([[0, 1], [1, 0]])
  assert i.tolist() == [[2, 1], [4, 3]] and w.tolist() == ref.tolist()

def test_gradient_of_a_view_of_an_in_place_op_realized_with_another_value() -> None:
  # realized together with another computed value (m), the view d of c's pending abs_ kept no graph: its gradient was
  # None (the scheduler committed the assign after the view, which dropped the view's entry as an older value)
  x = np.float32([-1.0, 2.0, -3.0])
  def run(make: Any) -> np.ndarray:
    a = make(x, requires_grad=True)
    b = a * 2
    m = b + 1
    c = b.clone()
    if make is Tensor: c.realize()
    c.abs_()
    d = c[1:]
    if make is Tensor: a.realize(m, d)
    (d * make([0.5, -2.0])).sum().backward()
    return a.grad.numpy()
  np.testing.assert_allclose(run(Tensor), run(torch.tensor))

def test_gradient_of_an_in_place_op_through_a_view_of_a_clone_of_an_assigned_tensor() -> None:
  # c.diagonal(-1).add_(w), c a lazy clone of a pending assign: the value (diagonal + w) was realized with c's buffer
  # (a reader of the assigned memory), and the write placed its buffer, not its graph: no gradient reached v there
  def run(make: Any) -> tuple[np.ndarray, np.ndarray]:
    a = make(np.float32([1.0, 2.0]), requires_grad=True)
    v = make(np.arange(12, dtype=np.float32).reshape(6, 2), requires_grad=True)
    w = make(np.float32([10.0, 20.0]), requires_grad=True)
    t = (a.reshape(2, 1) * 1).repeat([3, 2]).clone()
    if make is Tensor: t.realize()
    t.copy_(v) if make is torch.tensor else t.assign(v)
    c = t.clone()
    c.diagonal(-1).add_(w)
    (c * make(np.arange(12, dtype=np.float32).reshape(6, 2))).sum().backward()
    return v.grad.numpy(), w.grad.numpy()
  for got, want in zip(run(Tensor), run(torch.tensor)): np.testing.assert_allclose(got, want)
