"""Two tensors computed alike never share memory that a write reaches (issue 24): graphs are interned, so `x * 2` built
twice is one node, and realizing one tensor left its buffer where the other's realize found it. Each case runs the
same steps on lazytensor and on torch, whose results never share memory unless one is a view of the other."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, torch

from lazytensor import GlobalCounters, Tensor, TinyJit, no_grad

pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")

X = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
D2 = ("CPU:0", "CPU:1")

def _lib_of(t: Any) -> Any: return torch if HAVE_TORCH and isinstance(t, torch.Tensor) else Tensor

def _make(lib: Any, a: np.ndarray = X) -> Any:
  return torch.tensor(a) if lib is torch else Tensor(a).realize()

def _realize(*ts: Any) -> None:
  if isinstance(ts[0], Tensor): Tensor.realize(*ts)

def _values(*ts: Any) -> list[Any]: return [t.tolist() for t in ts]

# the same expression built twice: each a node the scheduler computes, or finds computed
BUILDS: dict[str, Callable[[Any], Any]] = {
  "elementwise": lambda x: x * 2,
  "reduce": lambda x: x.sum(0, keepdim=True),
  "flip": lambda x: x.flip(0),
  "pad": lambda x: torch.nn.functional.pad(x, (1, 1)) if _lib_of(x) is torch else x.pad((1, 1)),
  "cat": lambda x: torch.cat([x, x]) if _lib_of(x) is torch else x.cat(x),
  "detach": lambda x: (x * 3).detach(),
  "contiguous": lambda x: (x + 1).contiguous(),
  "a view": lambda x: (x * 4).T,
  "cast": lambda x: x.int(),
  "to another device": lambda x: x.clone() if _lib_of(x) is torch else x.to("CPU:1"),  # (torch: a copy too)
  "from constants": lambda x: torch.arange(6.0).reshape(2, 3) + 1 if _lib_of(x) is torch else
    Tensor.arange(6).float().reshape(2, 3) + 1,
}

def _same_expression_twice(lib: Any, build: Callable[[Any], Any], how: str) -> list[Any]:
  x = _make(lib)
  a, b = build(x), build(x)
  if how == "one after the other":
    _realize(a)
    _realize(b)
  else: _realize(a, b)
  a.add_(1)
  return _values(a, b, x)

@pytest.mark.parametrize("how", ["one after the other", "together"])
@pytest.mark.parametrize("build", BUILDS.values(), ids=BUILDS.keys())
def test_same_expression_twice_then_a_write(build: Callable[[Any], Any], how: str) -> None:
  assert _same_expression_twice(Tensor, build, how) == _same_expression_twice(torch, build, how)

# the writes into one of the two, or into a view of it
WRITES: dict[str, Callable[[Any], Any]] = {
  "add_": lambda t: t.add_(1),
  "mul_": lambda t: t.mul_(3),
  "clamp_": lambda t: t.clamp_(3, 5),
  "fill_": lambda t: t.fill_(-1),
  "+=": lambda t: t.__iadd__(10),
  "setitem": lambda t: t.__setitem__((0, 1), 9.0),
  "assign": lambda t: t.copy_(t * 0 + 7) if _lib_of(t) is torch else t.assign(t * 0 + 7),
  "unsqueeze_ then add_": lambda t: t.unsqueeze_(0).add_(1),
  "through .T": lambda t: t.T.add_(1),
  "through [0]": lambda t: t[0].mul_(-1),
  "through detach()": lambda t: t.detach().sub_(1),
}

def _write_into_one(lib: Any, write: Callable[[Any], Any], which: int) -> list[Any]:
  x = _make(lib)
  pair = (x * 2, x * 2)
  _realize(pair[0])
  _realize(pair[1])
  write(pair[which])
  return _values(*pair, x)

@pytest.mark.parametrize("which", [0, 1], ids=["first", "second"])
@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_each_write_reaches_only_the_tensor_written(write: Callable[[Any], Any], which: int) -> None:
  assert _write_into_one(Tensor, write, which) == _write_into_one(torch, write, which)

def _lazy_twin_written(lib: Any) -> list[Any]:
  x = _make(lib)
  a, b, c = x * 2, x * 2, x * 2
  _realize(a)
  b[0, 1] = 9.0  # b gets memory to write into: it was a's buffer
  c.T.mul_(-1)  # the same, through a view
  return _values(a, b, c)

def test_a_lazy_twin_written_gets_memory_of_its_own() -> None:
  assert _lazy_twin_written(Tensor) == _lazy_twin_written(torch)

def _realized_while_a_write_is_pending(lib: Any) -> list[Any]:
  x = _make(lib)
  a, b = x * 3, x * 3
  _realize(a)
  a.add_(1)  # pending until a is read
  _realize(b)  # found a's buffer, which the write then changed
  return _values(a, b)

def test_realized_while_a_write_into_the_other_is_pending() -> None:
  assert _realized_while_a_write_is_pending(Tensor) == _realized_while_a_write_is_pending(torch)

def _computed_as_an_old_value(lib: Any) -> list[Any]:
  x = _make(lib)
  a, b = x * 4, x * 4
  _realize(a)
  x.add_(5)  # b (lazy) reads x: computed before the write, it found a's buffer
  _realize(x)
  a.add_(1)
  return _values(a, b, x)

def test_a_value_computed_before_a_write_into_what_it_reads() -> None:
  assert _computed_as_an_old_value(Tensor) == _computed_as_an_old_value(torch)

def _contiguous_of_a_twin(lib: Any) -> list[Any]:
  x = _make(lib)
  a, b = x * 2, x * 2
  _realize(a)
  c = b.contiguous()  # of a dense value found in a's buffer: the scheduler folds it into that buffer
  _realize(c)
  a.add_(1)
  c.mul_(10)
  return _values(a, c)  # (not b: torch's contiguous() is b itself, lazytensor's of a lazy tensor a copy)

def test_contiguous_of_a_twin_is_not_the_other_ones_memory() -> None:
  assert _contiguous_of_a_twin(Tensor) == _contiguous_of_a_twin(torch)

# which of (a, b, a[1], b.T) are realized together, in order
ORDERS = {"together": [(0, 1, 2, 3)], "tensors first": [(0,), (1,), (2,), (3,)],
          "views first": [(2,), (3,), (0,), (1,)], "lazy views": [(0,), (1,)]}

def _views_of_twins(lib: Any, order: list[tuple[int, ...]]) -> list[Any]:
  x = _make(lib)
  a, b = x * 2, x * 2
  ts = (a, b, a[1], b.T)
  for part in order: _realize(*(ts[i] for i in part))
  ts[2].add_(100)  # reaches a alone
  ts[3].mul_(-1)  # reaches b alone
  b[0, 0] = 50.0  # reaches b's view
  return _values(*ts)

@pytest.mark.parametrize("order", ORDERS.values(), ids=ORDERS.keys())
def test_views_of_twins_follow_their_own_tensor(order: list[tuple[int, ...]]) -> None:
  assert _views_of_twins(Tensor, order) == _views_of_twins(torch, order)

def test_a_schedule_found_in_the_cache_gives_each_its_memory() -> None:
  # the same structure over other buffers: the schedule cache replays the first one's schedule
  for i in range(3):
    results = [_same_expression_twice(lib, lambda x, i=i: x * 2 + i, how) for lib in (Tensor, torch)
               for how in ("one after the other", "together")]
    assert results[:2] == results[2:]

def _jitted(lib: Any) -> list[Any]:
  def step(x: Any) -> tuple[Any, Any]:
    a, b = x * 2, x * 2
    _realize(a, b)
    return a, b
  run = TinyJit(step) if lib is Tensor else step
  out = []
  for i in range(4):  # run, capture, replay, replay
    a, b = run(_make(lib, X + i))
    a.add_(1)
    out += _values(a, b)
  return out

def test_twins_returned_by_a_jitted_function() -> None:
  assert _jitted(Tensor) == _jitted(torch)

def test_twins_on_several_devices() -> None:
  x = Tensor(X).shard(D2, 1).realize()
  a, b = x * 2, x * 2
  a.realize()
  b.realize()
  a.add_(1)
  b[0] = -1.0
  np.testing.assert_equal(a.numpy(), X * 2 + 1)
  np.testing.assert_equal(b.numpy(), np.concatenate([np.full((1, 3), -1.0), X[1:] * 2]))

def _twin_gradients(lib: Any) -> list[Any]:
  # the gradients of two weights used alike are one node: realized, they shared a buffer, so scaling one gradient in
  # place (as clipping does, one parameter after the other) scaled the other
  x = _make(lib)
  w1, w2 = (lib.ones(3, requires_grad=True) for _ in range(2))
  ((x * w1).sum() + (x * w2).sum()).backward()
  _realize(w1.grad, w2.grad)
  w1.grad.mul_(0.5)
  return _values(w1.grad, w2.grad)

def test_gradients_computed_alike_are_scaled_in_place_apart() -> None:
  assert _twin_gradients(Tensor) == _twin_gradients(torch)

def _twins_with_gradients(lib: Any) -> list[Any]:
  w = lib.tensor([1.0, -2.0, 3.0], requires_grad=True) if lib is torch else Tensor([1.0, -2.0, 3.0], requires_grad=True)
  a, b = w * 2, w * 2
  _realize(a)
  _realize(b)
  with (torch.no_grad() if lib is torch else no_grad()): a.add_(1)
  (b * b).sum().backward()
  return _values(a, b, w.grad)

def test_twins_that_need_gradients_keep_their_values_and_gradients() -> None:
  assert _twins_with_gradients(Tensor) == _twins_with_gradients(torch)

# ---- what shares memory, as in torch, and costs no copy ----

def test_views_share_memory_with_their_tensor() -> None:
  w = Tensor(X).realize()
  t, row, d = w.T, w[0], w.detach()
  Tensor.realize(t, row)
  w.add_(1)
  t[0, 1] = -5.0
  d[1, 2] = 50.0
  w_now = [[2.0, 3.0, 4.0], [-5.0, 6.0, 50.0]]
  assert _values(w, t, row, d) == [w_now, [[2.0, -5.0], [3.0, 6.0], [4.0, 50.0]], [2.0, 3.0, 4.0], w_now]

def test_realizing_again_or_with_views_runs_no_copy() -> None:
  x = Tensor(X).realize()
  a, b = x * 2, x * 2
  GlobalCounters.reset()
  Tensor.realize(a, a.T, a[0])  # one kernel: the views read a's buffer
  a.realize()
  assert GlobalCounters.kernel_count == 1
  b.realize()  # a's node, found in a's buffer, which a holds: a copy of it
  assert GlobalCounters.kernel_count == 2 and b.tolist() == (X * 2).tolist()

def test_a_value_no_tensor_holds_is_taken_without_a_copy() -> None:
  # the max of a softmax is materialized on the way; realizing it afterwards finds it in memory no tensor holds
  x = Tensor(np.arange(8, dtype=np.float32).reshape(2, 4)).realize()
  m = x.max(1, keepdim=True)
  (x - m).exp().realize()
  GlobalCounters.reset()
  m.realize()
  assert GlobalCounters.kernel_count == 0 and m.tolist() == [[3.0], [7.0]]

@pytest.mark.parametrize("make", [lambda: Tensor.zeros(2, 3), lambda: Tensor(X), lambda: Tensor(X).realize().clone()],
                         ids=["constant", "from numpy", "clone"])
def test_made_twice_each_its_own(make: Callable[[], Tensor]) -> None:
  a, b = make(), make()
  Tensor.realize(a, b)
  a.add_(1)
  assert not np.array_equal(a.numpy(), b.numpy())
