"""The schedule cache over graphs on several devices (schedule/cache.py): a graph of a structure realized before runs
neither the multi pass nor the scheduler, bit for bit as the uncached path (SCHEDULE_CACHE=0) computes it; the same
ops over other devices, another layout, another mesh or another RING choice are other schedules."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lazytensor import Context, DeviceMesh, Tensor, nn
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module, replicate
from lazytensor.schedule.cache import schedule_stats
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops

D2, D4 = ("CPU:0", "CPU:1"), ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
STEPS = 4

def counted(fn: Callable[[], Any]) -> tuple[dict[str, int], Any]:
  """What fn returns, and how many graphs it split by the multi pass, scheduled from scratch and found scheduled."""
  before = dict(schedule_stats)
  out = fn()
  return {k: schedule_stats[k] - before[k] for k in before}, out

class MLP:
  def __init__(self) -> None:
    Tensor.manual_seed(0)
    self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)
  def __call__(self, x: Tensor) -> Tensor: return self.fc2(self.fc1(x).relu())

def train(parallel: Callable[[MLP, DeviceMesh], MLP], place: Callable[[Tensor, DeviceMesh], Tensor]) -> \
    tuple[list[dict[str, int]], list[float], list[np.ndarray]]:
  """STEPS training steps of the MLP made parallel on a mesh of CPU:0, CPU:1 (a step's loss read, its parameters
  updated): what each step counted, the losses and the parameters after."""
  mesh = DeviceMesh(D2, names=("dp",))
  model = parallel(MLP(), mesh)
  opt = SGD(get_parameters(model), lr=0.1)
  rng = np.random.default_rng(0)
  batches = [(rng.standard_normal((6, 8)).astype(np.float32), rng.integers(0, 4, 6)) for _ in range(STEPS)]
  def step(x: np.ndarray, y: np.ndarray) -> float:
    opt.zero_grad()
    loss = model(place(Tensor(x), mesh)).cross_entropy(place(Tensor(y), mesh)).backward()
    opt.step()
    return loss.item()
  counts, losses = [], []
  for x, y in batches:
    count, loss = counted(lambda x=x, y=y: step(x, y))
    counts.append(count)
    losses.append(loss)
  return counts, losses, [p.numpy() for p in get_parameters(model)]

def batch_on(t: Tensor, mesh: DeviceMesh) -> Tensor: return t.shard(mesh, ("dp",) + (None,) * (t.ndim - 1))
def replicated(t: Tensor, mesh: DeviceMesh) -> Tensor: return t.shard(mesh, None)
def tensor_parallel(m: MLP, mesh: DeviceMesh) -> MLP:
  return parallelize_module(m, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}, axis="dp")

@pytest.mark.parametrize("parallel,place", [(replicate, batch_on), (fully_shard, batch_on),
                                            (tensor_parallel, replicated)], ids=["ddp", "fsdp", "tp"])
def test_a_step_again_runs_neither_the_multi_pass_nor_the_scheduler(parallel: Callable, place: Callable) -> None:
  counts, losses, params = train(parallel, place)
  assert counts[0]["split"] > 0
  for count in counts[2:]: assert count["split"] == count["scheduled"] == 0 and count["reused"] > 0, counts
  with Context(SCHEDULE_CACHE=0):
    uncached, want_losses, want_params = train(parallel, place)
  assert all(c["reused"] == 0 for c in uncached)
  assert losses == want_losses
  for got, want in zip(params, want_params): np.testing.assert_array_equal(got, want)

def reduced(x: Tensor) -> Tensor: return (x * 2 + 1).sum(0)

def realize_twice(make: Callable[[], Tensor], fn: Callable[[Tensor], Tensor]) -> list[dict[str, int]]:
  """fn of two inputs that `make` makes, realized one after the other: what each counted (the first checked too)."""
  counts = []
  for _ in range(2):
    x = make()
    count, out = counted(lambda x=x: fn(x).realize())
    np.testing.assert_array_equal(out.numpy(), fn(Tensor(x.numpy())).numpy())
    counts.append(count)
  return counts

@pytest.mark.parametrize("changed", ["devices", "axis", "mesh"])
def test_the_same_ops_on_another_layout_are_another_schedule(changed: str) -> None:
  rng = np.random.default_rng(1)
  a = rng.standard_normal((4, 4)).astype(np.float32)
  first, other = {
    "devices": (lambda: Tensor(a).shard(D2, 0), lambda: Tensor(a).shard(("CPU:2", "CPU:3"), 0)),
    "axis": (lambda: Tensor(a).shard(D2, 0), lambda: Tensor(a).shard(D2, 1)),
    "mesh": (lambda: Tensor(a).shard(DeviceMesh(D4, names=("dp",)), ("dp", None)),
             lambda: Tensor(a).shard(DeviceMesh(D4, shape=(2, 2), names=("dp", "tp")), ("dp", None))),
  }[changed]
  assert realize_twice(lambda: first().realize(), reduced)[1] == {"split": 0, "scheduled": 0, "reused": 1}
  again = realize_twice(lambda: other().realize(), reduced)
  assert again[0]["split"] == 1 and again[1]["split"] == 0

def test_another_ring_choice_is_another_schedule() -> None:
  # the RING knob chooses how the multi pass all-reduces: every partial copied to every device, or a ring of chunks
  x = Tensor(np.arange(6 * 256, dtype=np.float32).reshape(6, 256)).shard(D4[:3], 0).realize()
  copies = {}
  for i, ring in enumerate((1 << 30, 0, 1 << 30)):
    with Context(RING=ring):
      count, (items, _) = counted(lambda: create_schedule([reduced(x).lazydata]))
      copies[ring] = sum(it.ast.op is Ops.COPY for it in items)
      np.testing.assert_array_equal(reduced(x).numpy(), reduced(Tensor(x.numpy())).numpy())
    assert count["split"] == (i < 2), (ring, count)
  assert copies[0] != copies[1 << 30], copies

def test_a_constant_that_changes_is_a_kernel_argument_on_every_device() -> None:
  # a learning rate's constant on the devices of a sharded weight: a kernel argument once a second value came, then
  # one schedule for every value
  x = Tensor(np.arange(8, dtype=np.float32)).shard(D2, 0).realize()
  for i, lr in enumerate([0.5, 0.25, 0.125, 0.0625]):
    count, out = counted(lambda lr=lr: (x * lr).realize())
    np.testing.assert_array_equal(out.numpy(), np.arange(8, dtype=np.float32) * np.float32(lr))
    if i >= 2: assert count == {"split": 0, "scheduled": 0, "reused": 1}, (lr, count)
