"""Training end to end: a jitted step learns real data, replays exactly what eager runs, and matches torch."""
import gc
from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Tensor, nn
from lazytensor.engine.jit import TinyJit
from lazytensor.nn.optim import SGD, Adam, AdamW, Optimizer
from lazytensor.nn.state import get_parameters
from lazytensor.runtime.device import Buffer, memory_allocated

try:
  import torch
except ImportError:
  torch = None

def make_step(forward: Callable[[Tensor], Tensor], opt: Optimizer, also: tuple[Tensor, ...] = ()) -> Callable:
  """forward, cross-entropy, backward, update; the loss is realized with the gradients (and `also`, e.g. batchnorm's
  running statistics), so it is the loss of the weights before the update, as in the examples."""
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = forward(x).cross_entropy(y).backward()
      loss.realize(*[p.grad for p in opt.params if p.grad is not None], *also)
      opt.step()
    return loss
  return step

def _random_batches(seed: int, n: int, shape: tuple[int, int], classes: int) -> list[tuple[np.ndarray, np.ndarray]]:
  rng = np.random.default_rng(seed)
  return [(rng.standard_normal(shape).astype(np.float32), rng.integers(0, classes, shape[0]).astype(np.int32))
          for _ in range(n)]

def test_mlp_learns_digits() -> None:
  datasets = pytest.importorskip("sklearn.datasets")
  digits = datasets.load_digits()
  order = np.random.default_rng(0).permutation(len(digits.target))
  x = (digits.data[order] / 16.0).astype(np.float32)
  y = digits.target[order].astype(np.int32)
  x_train, y_train, x_test, y_test = x[:600], y[:600], x[600:900], y[600:900]
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(64, 32), nn.Linear(32, 10)
  def forward(t: Tensor) -> Tensor: return l2(l1(t).relu())
  step = TinyJit(make_step(forward, Adam(get_parameters([l1, l2]), lr=0.01)))
  rng = np.random.default_rng(0)
  losses = []
  for _ in range(150):
    idx = rng.integers(0, len(x_train), 50)
    losses.append(step(Tensor(x_train[idx]), Tensor(y_train[idx])).item())
  assert step.calls == 2, "the step was captured and replayed"
  assert losses[0] > 2.0 and np.mean(losses[-20:]) < 0.25, f"loss went from {losses[0]:.3f} to {losses[-20:]}"
  accuracy = (forward(Tensor(x_test)).argmax(1).numpy() == y_test).mean()
  assert accuracy >= 0.9, f"held-out accuracy {accuracy:.3f}"

def _batchnorm_net(seed: int) -> tuple[Callable[[Tensor], Tensor], list[Tensor], list[Tensor]]:
  Tensor.manual_seed(seed)
  l1, bn, l2 = nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Linear(16, 3)
  stats = [bn.running_mean, bn.running_var, bn.num_batches_tracked]
  assert bn.weight is not None and bn.bias is not None
  return lambda t: l2(bn(l1(t)).relu()), get_parameters([l1, l2]) + [bn.weight, bn.bias], stats

def test_jitted_step_matches_eager_with_adamw_batchnorm_and_lr_changes() -> None:
  batches = _random_batches(3, 7, (8, 6), classes=3)
  results = []
  for jit in (False, True):
    forward, params, stats = _batchnorm_net(seed=1)
    opt = AdamW(params, lr=0.05, weight_decay=0.1)
    step = make_step(forward, opt, tuple(stats))
    run = TinyJit(step) if jit else step
    losses = []
    for i, (x, y) in enumerate(batches):
      # a new learning rate between steps: the captured step must read it (and the step count) from their buffers
      opt.lr.assign(Tensor([0.05 / (i + 1)])).realize()
      losses.append(run(Tensor(x), Tensor(y)).item())
    results.append((losses, [p.numpy() for p in params + stats]))
  (eager_losses, eager_state), (jit_losses, jit_state) = results
  np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-5)
  for got, want in zip(jit_state, eager_state): np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  assert jit_state[-1].item() == len(batches), "batchnorm counted every batch"

@pytest.mark.skipif(torch is None, reason="torch is the reference")
def test_jitted_training_matches_torch() -> None:
  batches = _random_batches(4, 6, (16, 5), classes=4)
  Tensor.manual_seed(2)
  l1, l2 = nn.Linear(5, 12), nn.Linear(12, 4)
  ours = get_parameters([l1, l2])
  theirs = [torch.tensor(p.numpy(), requires_grad=True) for p in ours]
  step = TinyJit(make_step(lambda t: l2(l1(t).tanh()), SGD(ours, lr=0.5, momentum=0.9)))
  torch_opt = torch.optim.SGD(theirs, lr=0.5, momentum=0.9)
  for x, y in batches:
    loss = step(Tensor(x), Tensor(y)).item()
    w1, b1, w2, b2 = theirs
    torch_opt.zero_grad()
    ref = torch.nn.functional.cross_entropy(torch.tanh(torch.tensor(x) @ w1.T + b1) @ w2.T + b2,
                                            torch.tensor(y).long())
    ref.backward()
    torch_opt.step()
    assert loss == pytest.approx(ref.item(), rel=1e-5), "the loss is that of the weights before the update"
  for p, q in zip(ours, theirs): np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-5)

def test_a_training_step_frees_its_memory_without_the_garbage_collector() -> None:
  # a step's graph, its buffers included, must go when its last user does: a node that kept a toposort holding itself
  # left each step's graph in a reference cycle (120-160 MiB a step of ResNet18 or GPT-2 until a gc.collect())
  Tensor.manual_seed(0)
  conv, norm, head = nn.Conv2d(2, 4, 3), nn.BatchNorm(4), nn.Linear(4 * 6 * 6, 3)
  def forward(x: Tensor) -> Tensor: return head(norm(conv(x)).relu().flatten(1))
  step = make_step(forward, Adam(get_parameters([conv, norm, head]), lr=1e-3))
  batches = [(Tensor(x), Tensor(y)) for x, y in _random_batches(3, 2, (4, 128), 3)]
  def live_buffers() -> int: return sum(type(o) is Buffer for o in gc.get_objects())
  for x, y in batches: step(x.reshape(4, 2, 8, 8), y)  # compiled and scheduled once; the optimizer's state made
  gc.collect()
  gc.disable()
  try:
    seen = []
    for x, y in batches * 2:
      step(x.reshape(4, 2, 8, 8), y).item()
      seen.append((memory_allocated(), live_buffers()))
  finally: gc.enable()
  assert seen == [seen[0]] * len(seen)
