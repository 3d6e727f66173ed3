"""torch's in-place movement ops (unsqueeze_, squeeze_, t_, transpose_, swapaxes_, swapdims_) against torch: the shape
and values, and that the tensor goes on sharing its memory with the views taken of it before and after the op, writes
going both ways; on realized and lazy tensors, on views, in chains, with bad dims, and with autograd."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, torch

from lazytensor import Tensor, no_grad
from lazytensor.nn.optim import Adam

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="compares against torch, which is not installed")

# (op, its arguments, the shape it is applied to)
CASES: list[tuple[str, tuple[Any, ...], tuple[int, ...]]] = [
  ("unsqueeze_", (0,), (2, 3)), ("unsqueeze_", (1,), (2, 3)), ("unsqueeze_", (-1,), (2, 3)),
  ("unsqueeze_", (-3,), (2, 3)), ("unsqueeze_", (0,), ()),
  ("squeeze_", (), (1, 3, 1)), ("squeeze_", (0,), (1, 3, 1)), ("squeeze_", (-1,), (1, 3, 1)),
  ("squeeze_", ((0, 2),), (1, 3, 1)), ("squeeze_", ((0, 1),), (1, 3, 1)),
  ("t_", (), (2, 3)), ("t_", (), (3,)),
  ("transpose_", (0, 1), (2, 3)), ("transpose_", (0, -1), (2, 3, 4)), ("transpose_", (1, 1), (2, 3)),
  ("swapaxes_", (2, 0), (2, 3, 4)), ("swapdims_", (-1, -2), (2, 3, 4)),
]
IDS = [f"{op}{args}{shape}" for op, args, shape in CASES]

def _pair(shape: tuple[int, ...], lazy: bool) -> tuple[Tensor, torch.Tensor]:
  """The same values in lazytensor and torch: realized into a buffer, or lazy (computed, not yet run)."""
  data = np.arange(1, int(np.prod(shape)) + 1, dtype=np.float32).reshape(shape)
  x = Tensor(data) * 1 if lazy else Tensor(data).realize()
  if lazy: assert not x._is_buffer_view()
  return x, torch.tensor(data)

def _same(x: Tensor, ref: torch.Tensor) -> None:
  assert x.shape == tuple(ref.shape)
  np.testing.assert_array_equal(x.numpy(), ref.numpy())

@pytest.mark.parametrize("lazy", [False, True], ids=["realized", "lazy"])
@pytest.mark.parametrize("op,args,shape", CASES, ids=IDS)
def test_shape_and_values(op: str, args: tuple[Any, ...], shape: tuple[int, ...], lazy: bool) -> None:
  x, ref = _pair(shape, lazy)
  assert getattr(x, op)(*args) is x
  getattr(ref, op)(*args)
  _same(x, ref)

@pytest.mark.parametrize("lazy", [False, True], ids=["realized", "lazy"])
@pytest.mark.parametrize("op,args,shape", CASES, ids=IDS)
def test_memory_shared_both_ways(op: str, args: tuple[Any, ...], shape: tuple[int, ...], lazy: bool) -> None:
  x, ref = _pair(shape, lazy)
  old, old_ref = x.view(-1), ref.view(-1)  # a view taken before the op
  getattr(x, op)(*args)
  getattr(ref, op)(*args)
  # a write through the old view reaches the tensor
  old[0] = 100.0
  old_ref[0] = 100.0
  _same(x, ref)
  # a write through the tensor reaches the old view
  x.add_(1)
  ref.add_(1)
  _same(old, old_ref)
  # a view taken after the op, written and read both ways
  new, new_ref = x.unsqueeze(0), ref.unsqueeze(0)
  new.mul_(2)
  new_ref.mul_(2)
  _same(x, ref)
  _same(old, old_ref)
  x.assign(x * 3)
  ref.copy_(ref * 3)
  _same(new, new_ref)
  _same(old, old_ref)

@pytest.mark.parametrize("lazy", [False, True], ids=["realized", "lazy"])
def test_setitem_through_the_moved_tensor(lazy: bool) -> None:
  x, ref = _pair((2, 3), lazy)
  old, old_ref = x[1], ref[1]
  x.t_()
  ref.t_()
  x[0] = -1.0
  ref[0] = -1.0
  x[:, 1] = x[:, 0] * 5
  ref[:, 1] = ref[:, 0] * 5
  _same(x, ref)
  _same(old, old_ref)

@pytest.mark.parametrize("lazy", [False, True], ids=["realized", "lazy"])
def test_chain(lazy: bool) -> None:
  x, ref = _pair((2, 3), lazy)
  old, old_ref = x[0], ref[0]
  assert x.t_().unsqueeze_(0).add_(1) is x
  ref.t_().unsqueeze_(0).add_(1)
  _same(x, ref)
  _same(old, old_ref)
  x.squeeze_(0).transpose_(0, 1).swapaxes_(1, 0).unsqueeze_(-1).mul_(10)
  ref.squeeze_(0).transpose_(0, 1).swapaxes_(1, 0).unsqueeze_(-1).mul_(10)
  _same(x, ref)
  _same(old, old_ref)

@pytest.mark.parametrize("lazy", [False, True], ids=["realized", "lazy"])
def test_on_a_view(lazy: bool) -> None:
  # torch allows the in-place movement of a view: the view moves, the tensor it views keeps its shape
  x, ref = _pair((3, 4), lazy)
  v, v_ref = x[1:, ::2], ref[1:, ::2]
  v.t_().unsqueeze_(0)
  v_ref.t_().unsqueeze_(0)
  _same(v, v_ref)
  assert x.shape == (3, 4)
  v.add_(100)
  v_ref.add_(100)
  _same(x, ref)
  x.mul_(2)
  ref.mul_(2)
  _same(v, v_ref)
  v[0, 1] = -5.0
  v_ref[0, 1] = -5.0
  _same(x, ref)

def test_detached_view_moves_alone() -> None:
  x, ref = _pair((2, 3), False)
  d, d_ref = x.detach(), ref.detach()
  d.t_()
  d_ref.t_()
  assert x.shape == (2, 3)
  d[0] = 0.0
  d_ref[0] = 0.0
  _same(x, ref)
  _same(d, d_ref)

def test_lazy_tensor_realized_after_the_op_still_shares() -> None:
  # a lazy tensor moved in place and realized on its own: a later write into it reaches the views taken before
  x, ref = _pair((2, 3), True)
  old, old_ref = x.view(-1), ref.view(-1)
  x.t_()
  ref.t_()
  x.realize()
  x[0] = 7.0
  ref[0] = 7.0
  _same(old, old_ref)
  _same(x, ref)

def test_view_realized_on_its_own_then_moved() -> None:
  # a view of a lazy tensor realized into a buffer of its own, then moved in place: a write through it reaches the
  # tensor it views once that tensor gets its memory
  x, ref = _pair((3, 4), True)
  v, v_ref = x[1:], ref[1:]
  v.realize()
  v.unsqueeze_(0).add_(1)
  v_ref.unsqueeze_(0).add_(1)
  _same(x, ref)
  _same(v, v_ref)

def test_own_pending_write_runs_first() -> None:
  # the tensor's pending assign is done before the move, as torch's was: a view taken before sees it
  x, ref = _pair((2, 3), False)
  old, old_ref = x.view(-1), ref.view(-1)
  x.mul_(3).t_()
  ref.mul_(3).t_()
  _same(old, old_ref)
  _same(x, ref)

def test_pending_write_into_what_it_reads_runs_first() -> None:
  # y (lazy) was computed before a.add_(1), as torch computed it: after the move, it and its views keep that value
  a, a_ref = _pair((2, 3), False)
  y, y_ref = a * 2, a_ref * 2
  v, v_ref = y.view(-1), y_ref.view(-1)
  a.add_(1)
  a_ref.add_(1)
  y.t_()
  y_ref.t_()
  y[0] = 0.0
  y_ref[0] = 0.0
  _same(v, v_ref)
  _same(y, y_ref)
  _same(a, a_ref)

def test_squeeze_of_a_dim_not_1_changes_nothing() -> None:
  x, ref = _pair((2, 3), False)
  x.squeeze_(0).squeeze_((0, 1))
  ref.squeeze_(0).squeeze_((0, 1))
  _same(x, ref)
  assert x._viewed is None  # no move: it did not become a view

@pytest.mark.parametrize("op,args,shape,bad,lo,hi", [
  ("unsqueeze_", (3,), (2, 3), 3, -3, 3), ("unsqueeze_", (-4,), (2, 3), -4, -3, 3),
  ("squeeze_", (2,), (2, 3), 2, -2, 2), ("squeeze_", ((0, 5),), (1, 3), 5, -2, 2),
  ("transpose_", (0, 2), (2, 3), 2, -2, 2), ("swapaxes_", (-3, 0), (2, 3), -3, -2, 2),
  ("swapdims_", (0, 4), (2, 3, 4), 4, -3, 3),
])
def test_bad_dim(op: str, args: tuple[Any, ...], shape: tuple[int, ...], bad: int, lo: int, hi: int) -> None:
  x, ref = _pair(shape, False)
  with pytest.raises(IndexError, match=rf"out of range.*expected to be in range of \[{lo}, {hi - 1}\].*got {bad}"):
    getattr(ref, op)(*args)
  with pytest.raises(IndexError, match=rf"axis {bad} is out of range .*: expected {lo} <= axis < {hi}"):
    getattr(x, op)(*args)
  assert x.shape == shape and x._viewed is None  # left as it was

def test_t_of_more_than_2_dims() -> None:
  x, ref = _pair((2, 3, 4), False)
  with pytest.raises(RuntimeError, match="expects a tensor with <= 2 dimensions"):
    ref.t_()
  with pytest.raises(ValueError, match=r"expects a tensor of at most 2 dims, got shape \(2, 3, 4\)"):
    x.t_()
  assert x.shape == (2, 3, 4)

# ---- autograd ----

MOVES: list[tuple[str, Callable[[Any], Any]]] = [
  ("t_", lambda t: t.t_()), ("unsqueeze_", lambda t: t.unsqueeze_(1)), ("squeeze_", lambda t: t.squeeze_()),
  ("transpose_", lambda t: t.transpose_(0, 1)), ("swapaxes_", lambda t: t.swapaxes_(0, 1)),
  ("swapdims_", lambda t: t.swapdims_(0, 1)),
]

@pytest.mark.parametrize("name,move", MOVES, ids=[n for n, _ in MOVES])
def test_leaf_that_requires_grad_is_refused(name: str, move: Callable[[Any], Any]) -> None:
  w_ref = torch.ones(2, 3, requires_grad=True)
  with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
    move(w_ref)
  w = Tensor.ones(2, 3, requires_grad=True)
  with pytest.raises(RuntimeError, match=rf"{name}: a tensor that requires grad and is a leaf .* cannot be changed"):
    move(w)
  with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
    move(w_ref[:1])
  with pytest.raises(RuntimeError, match=rf"{name}: a view of a tensor that requires grad and is a leaf"):
    move(w[:1])
  assert w.shape == (2, 3)

def test_leaf_moved_under_no_grad() -> None:
  # allowed under no_grad, as in torch: it stays a leaf, of the new shape, and its gradient has that shape
  data = np.arange(6, dtype=np.float32).reshape(2, 3)
  w, w_ref = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  with no_grad():
    w.t_()
  with torch.no_grad():
    w_ref.t_()
  assert w.is_leaf and w.requires_grad and w.shape == (3, 2)
  c = np.arange(6, dtype=np.float32).reshape(3, 2) - 2
  (w * w * Tensor(c)).sum().backward()
  (w_ref * w_ref * torch.tensor(c)).sum().backward()
  assert w.grad is not None and w_ref.grad is not None
  _same(w.grad, w_ref.grad)
  # still a leaf's memory: writes with gradients into it, or through a view of it, are refused as in torch
  with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
    w_ref.add_(1)
  with pytest.raises(RuntimeError, match="a tensor that requires grad and is a leaf"):
    w.add_(1)

def test_leaf_moved_under_no_grad_trains() -> None:
  # a weight transposed in place at initialization (under no_grad), then trained: the optimizer's writes reach it
  data = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
  inp = np.arange(8, dtype=np.float32).reshape(4, 2) / 7
  w, w_ref = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  with no_grad():
    w.t_()
  with torch.no_grad():
    w_ref.t_()
  opt, opt_ref = Adam([w], lr=0.1), torch.optim.Adam([w_ref], lr=0.1)
  with Tensor.train():
    for _ in range(3):
      opt.zero_grad()
      opt_ref.zero_grad()
      ((Tensor(inp) @ w.T) ** 2).sum().backward()
      ((torch.tensor(inp) @ w_ref.T) ** 2).sum().backward()
      opt.step()
      opt_ref.step()
  np.testing.assert_allclose(w.numpy(), w_ref.detach().numpy(), rtol=1e-5, atol=1e-5)

def test_old_view_of_leaf_moved_under_no_grad_is_still_a_leafs() -> None:
  w = Tensor.ones(2, 3, requires_grad=True)
  w_ref = torch.ones(2, 3, requires_grad=True)
  v, v_ref = w[0], w_ref[0]
  with no_grad():
    w.t_()
  with torch.no_grad():
    w_ref.t_()
  with pytest.raises(RuntimeError, match="a view of a leaf Variable"):
    v_ref.mul_(2)
  with pytest.raises(RuntimeError, match="a view of a tensor that requires grad and is a leaf"):
    v.mul_(2)

@pytest.mark.parametrize("name,move", MOVES, ids=[n for n, _ in MOVES])
def test_gradient_through_a_moved_result(name: str, move: Callable[[Any], Any]) -> None:
  data = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
  w, w_ref = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  y, y_ref = w * w, w_ref * w_ref
  move(y)
  move(y_ref)
  c = np.arange(y_ref.numel(), dtype=np.float32).reshape(tuple(y_ref.shape))
  (y * Tensor(c)).sum().backward()
  (y_ref * torch.tensor(c)).sum().backward()
  assert w.grad is not None and w_ref.grad is not None
  _same(y, y_ref.detach())
  _same(w.grad, w_ref.grad)

@pytest.mark.parametrize("lazy", [False, True], ids=["realized", "lazy"])
def test_gradient_through_writes_after_the_move(lazy: bool) -> None:
  # a non-leaf moved in place, then written with gradients through itself and through a view taken before
  data = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
  w, w_ref = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  y, y_ref = w * 2, w_ref * 2
  if not lazy: y.realize()
  old, old_ref = y[1], y_ref[1]
  y.t_()
  y_ref.t_()
  y.mul_(w.T)
  y_ref.mul_(w_ref.T)
  old.add_(w[0] * 3)
  old_ref.add_(w_ref[0] * 3)
  c = np.arange(6, dtype=np.float32).reshape(3, 2)
  (y * Tensor(c)).sum().backward()
  (y_ref * torch.tensor(c)).sum().backward()
  assert w.grad is not None and w_ref.grad is not None
  _same(y, y_ref.detach())
  _same(w.grad, w_ref.grad)

def test_gradient_through_a_moved_view() -> None:
  # torch allows unsqueeze_ on a view of a non-leaf: the gradient reaches the leaf through the view's new shape
  data = np.arange(6, dtype=np.float32).reshape(2, 3)
  w, w_ref = Tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
  v, v_ref = (w * 2)[0], (w_ref * 2)[0]
  v.unsqueeze_(0)
  v_ref.unsqueeze_(0)
  (v * Tensor([[1.0, 2.0, 3.0]])).sum().backward()
  (v_ref * torch.tensor([[1.0, 2.0, 3.0]])).sum().backward()
  assert w.grad is not None and w_ref.grad is not None
  _same(w.grad, w_ref.grad)
