"""A weight that a matmul reads from a packed copy (scheduler._pack_operand) is packed at most twice, not at every
call, and never read stale: every way of writing it (an optimizer step, assign, a write through a view, a TinyJit
replay) packs it again at the next call (schedule/pack_cache.py)."""
from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import GlobalCounters, Tensor, memory_allocated, nn
from lazytensor.engine.jit import TinyJit
from lazytensor.nn.optim import SGD

# 128 rows of 256 -> 512: the CPU heuristics pack the weight (a kernel of its own) and the input
ROWS, IN, OUT = 128, 256, 512

def _linear() -> nn.Linear:
  layer = nn.Linear(IN, OUT)
  Tensor.realize(layer.weight, layer.bias)
  return layer

def _x(seed: int) -> Tensor:
  return Tensor(np.random.default_rng(seed).standard_normal((ROWS, IN), dtype=np.float32)).realize()

def _expected(layer: nn.Linear, x: Tensor) -> np.ndarray:
  return x.numpy() @ layer.weight.numpy().T + layer.bias.numpy()

def _kernels(fn: Callable[[], Tensor]) -> tuple[int, np.ndarray]:
  GlobalCounters.reset()
  out = fn().realize()
  return GlobalCounters.kernel_count, out.numpy()

def test_a_weight_packed_twice_is_not_packed_again() -> None:
  layer = _linear()
  counts = []
  for seed in range(4):
    n, got = _kernels(lambda: layer(_x(seed)))  # noqa: B023 (called at once)
    counts.append(n)
    np.testing.assert_allclose(got, _expected(layer, _x(seed)), rtol=1e-4, atol=1e-4)
  assert counts[2:] == [counts[0] - 1] * 2 and counts[1] == counts[0], counts

def _sgd_step(layer: nn.Linear) -> None:
  opt = SGD([layer.weight, layer.bias], lr=0.5)
  with Tensor.train():
    opt.zero_grad()
    layer(_x(7)).square().sum().backward()
    opt.step()

def _assign(layer: nn.Linear) -> None:
  layer.weight.assign(layer.weight * -2 + 1).realize()

def _setitem_through_view(layer: nn.Linear) -> None:
  layer.weight.T[3] = 5.0  # column 3 of the weight, written through its transpose

def _setitem_rows(layer: nn.Linear) -> None:
  layer.weight[10:20] = Tensor.full((10, IN), -3.0)

@pytest.mark.parametrize("write", [_sgd_step, _assign, _setitem_through_view, _setitem_rows])
def test_a_written_weight_is_packed_again(write: Callable[[nn.Linear], None]) -> None:
  layer = _linear()
  for seed in range(3): layer(_x(seed)).realize()  # the third call reads the kept copy
  before = layer.weight.numpy()
  write(layer)
  assert not np.array_equal(before, layer.weight.numpy())
  np.testing.assert_allclose(layer(_x(2)).numpy(), _expected(layer, _x(2)), rtol=1e-4, atol=1e-4)

def test_a_weight_a_jit_replay_updates_is_packed_again() -> None:
  # the replay writes the weight without naming its memory anew (it is not returned): the kept copy is stale then
  layer = _linear()
  opt = SGD([layer.weight, layer.bias], lr=0.5)

  @TinyJit
  def step(x: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = layer(x).square().sum()
      loss.backward()
      opt.step()
    return loss.realize()

  for seed in range(2): step(_x(seed))  # the second call captures
  for seed in (3, 4, 5): layer(_x(seed)).realize()  # the eager calls keep the weight's copy
  before = layer.weight.numpy()
  step(_x(5))  # a replay
  assert not np.array_equal(before, layer.weight.numpy())
  np.testing.assert_allclose(layer(_x(6)).numpy(), _expected(layer, _x(6)), rtol=1e-4, atol=1e-4)

def test_a_jit_replay_does_not_pack_a_weight_it_does_not_write() -> None:
  layer = _linear()
  forward = TinyJit(lambda x: layer(x).realize())
  counts = []
  for seed in range(4):
    n, got = _kernels(lambda: forward(_x(seed)))  # noqa: B023 (called at once)
    counts.append(n)
    np.testing.assert_allclose(got, _expected(layer, _x(seed)), rtol=1e-4, atol=1e-4)
  assert counts[2:] == [counts[1] - 1] * 2, counts  # the second call captures, packing as it goes

@pytest.mark.parametrize("write", [_sgd_step, _assign, _setitem_through_view, _setitem_rows])
def test_a_jit_replays_a_weight_written_outside_it(write: Callable[[nn.Linear], None]) -> None:
  layer = _linear()
  forward = TinyJit(lambda x: layer(x).realize())
  for seed in range(3): forward(_x(seed))
  write(layer)
  np.testing.assert_allclose(forward(_x(3)).numpy(), _expected(layer, _x(3)), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(forward(_x(4)).numpy(), _expected(layer, _x(4)), rtol=1e-4, atol=1e-4)

def test_the_copy_is_counted_and_goes_with_the_weight() -> None:
  gc.collect()
  start = memory_allocated()
  layer, x = _linear(), _x(0)
  before = memory_allocated()
  layer(x).realize()
  assert memory_allocated() == before  # packed once (as the input x is): no copy kept
  layer(x).realize()
  assert memory_allocated() - before == (IN * OUT + ROWS * IN) * 4  # the copies of the weight and x, packed twice
  held = memory_allocated()
  del layer, x
  gc.collect()
  # the weight, x and both copies go (other tests' buffers freed meanwhile may take memory below `start`)
  assert held - memory_allocated() >= (IN * OUT + ROWS * IN) * 4 * 2 and memory_allocated() <= start
