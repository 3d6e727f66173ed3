"""Run by test_mesh_ranks.py under mpiexec: a DeviceMesh of CPU:0..3 spread over the ranks (runtime/remote.py), each
case checked against the same computation in one process (made before the ranks join the mesh)."""
from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from lazytensor import DeviceMesh, Tensor
from lazytensor.engine.jit import TinyJit
from lazytensor.frontend.mixin.multi import local_replica
from lazytensor.nn.optim import SGD
from lazytensor.parallel import distributed as dist
from lazytensor.parallel.collectives import stack
from lazytensor.runtime import remote
from lazytensor.runtime.device import memory_allocated
from lazytensor.schedule.cache import schedule_stats

DEVICES = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")

def join() -> tuple[int, int]:
  """Join the mesh of CPU:0..3, 4 // ranks devices on each rank."""
  dist.init()
  dist.init(devices_per_rank=len(DEVICES) // dist.world_size())
  return dist.rank(), dist.world_size()

def sgd_steps(place: Callable[[Tensor], Tensor], xs: list[np.ndarray], w0: np.ndarray) -> tuple[list[float], Tensor]:
  """Linear regression trained by SGD with momentum under TinyJit, a step per batch of xs: the losses, the weight."""
  w = place(Tensor(w0)).requires_grad_()
  opt = SGD([w], lr=0.1, momentum=0.9)
  def step(x: Tensor) -> Tensor:
    opt.zero_grad()
    loss = ((x @ w - 1) ** 2).mean().backward()
    opt.step()
    return loss
  jitted = TinyJit(step)
  return [jitted(place(Tensor(x))).item() for x in xs], w

def basics() -> None:
  """An elementwise op, a matmul sharded on its inner dimension (an all-reduce of the partial products), a gather of
  a sharded tensor and reads of tensors on one rank's device; the same under TinyJit replays, and a jitted training
  step of data parallelism (the gradients all-reduced between ranks)."""
  rng = np.random.default_rng(0)
  a, b, c, w0 = (rng.standard_normal(shape, np.float32) for shape in ((4, 6), (6, 5), (4,), (6, 1)))
  xs = [rng.standard_normal((8, 6), np.float32) for _ in range(5)]
  want_losses, want_w = sgd_steps(lambda t: t, xs, w0)
  r, n = join()
  before = {d: memory_allocated(d) for d in DEVICES}  # what the one-process reference left
  try: DeviceMesh(DEVICES + ("CPU:4",))
  except ValueError as e: assert "device CPU:4 is past the mesh's devices CPU:0 .. CPU:3" in str(e), e
  else: raise AssertionError("a device that no rank holds was taken")
  mesh = DeviceMesh(DEVICES, shape=(2, 2), names=("dp", "tp"))
  x, y = Tensor(a).shard(mesh, ("dp", "tp")), Tensor(b).shard(mesh, ("tp", None))
  np.testing.assert_allclose((x * 2 + 1).numpy(), a * 2 + 1, rtol=1e-6)
  prod = x @ y  # each device's partial product, summed over "tp": an all-reduce between ranks when tp spans them
  np.testing.assert_allclose(prod.numpy(), a @ b, rtol=1e-5, atol=1e-5)
  assert mesh.spec(prod) == ("dp", None)
  flat = Tensor(c).shard(DEVICES, 0)
  total = flat.sum()  # an all-reduce of the partial sums: replicated, read from this rank's replica
  assert local_replica(total) is not None and local_replica(flat) is None
  np.testing.assert_allclose(total.item(), c.sum(), rtol=1e-5)
  last = Tensor(c, device="CPU:3")  # held by the last rank only; every rank reads it
  np.testing.assert_allclose((last + 1).tolist(), c + 1, rtol=1e-6)
  # printing shows the values of a tensor held here only (it sends no message); DLPack exports only those
  assert ("Tensor([" in repr(last)) == remote.owns("CPU:3"), repr(last)
  if not remote.owns("CPU:3"):
    try: np.from_dlpack(last)
    except ValueError as e: assert "another rank's device" in str(e), e
    else: raise AssertionError("DLPack exported another rank's memory")
  step = TinyJit(lambda x, y: (x @ y).relu().realize())
  for i in range(4):
    got = step(Tensor(a + i).shard(mesh, ("dp", "tp")), Tensor(b).shard(mesh, ("tp", None)))
    np.testing.assert_allclose(got.numpy(), np.maximum((a + i) @ b, 0), rtol=1e-5, atol=1e-4)
  dp = DeviceMesh(DEVICES, names=("dp",))
  losses, w = sgd_steps(lambda t: t.shard(dp, ("dp", None) if t.shape[0] == 8 else None), xs, w0)  # w replicated
  np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
  np.testing.assert_allclose(w.numpy(), want_w.numpy(), rtol=1e-5)
  # the other ranks' devices hold placeholders, never memory; the all-reduces crossed ranks
  assert remote.joined is not None and remote.joined.transfers > 0
  assert all(memory_allocated(d) <= before[d] for d in DEVICES if not remote.owns(d)), \
    [(memory_allocated(d), before[d]) for d in DEVICES]
  sys.stdout.write(f"rank {r} of {n}: ok\n")
  sys.stdout.flush()

def transformer(*data: str) -> None:
  """test_parallel_lib's tiny transformer trained 3 steps (Adam) over the mesh under dp x tp (or each of `data`:
  dp, fsdp), against one device."""
  from test_parallel_lib import batch_on, dp_tp_mesh, fsdp_units, make_model, megatron_plan, optimizer, train

  from lazytensor.nn.state import get_parameters
  from lazytensor.parallel import parallelize_module, replicate
  want_losses, want_weights = train(model := make_model(), optimizer("adam")(get_parameters(model)), lambda t: t)
  r, n = join()
  for kind in data or ("dp",):
    mesh = dp_tp_mesh()
    model = parallelize_module(make_model(), mesh, megatron_plan())
    model = replicate(model, mesh) if kind == "dp" else fsdp_units(model, mesh)
    losses, weights = train(model, optimizer("adam")(get_parameters(model)), batch_on(mesh))
    np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
    for got, want in zip(weights, want_weights): np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    sys.stdout.write(f"rank {r} of {n}: {kind} x tp equals one device (loss {losses[-1]:.6f})\n")
    sys.stdout.flush()

def mismatch() -> None:
  """One rank's tensor of another shape, then of another dtype, then a read where another rank runs a kernel first: the
  same ValueError on every rank, and the ranks in step afterwards."""
  r, n = join()
  mesh = DeviceMesh(DEVICES, names=("dp",))
  held = Tensor([1.0, 2.0], device="CPU:3")
  cases = [lambda: Tensor.ones(8 if r == 0 else 12, 2).shard(mesh, ("dp", None)).sum(0).numpy(),
           lambda: (Tensor.ones(4, 2, dtype="float32" if r == 0 else "float16").shard(mesh, ("dp", None)) * 2).numpy(),
           lambda: (held if r == 0 else held + 1).numpy()]
  for i, case in enumerate(cases):
    try: case()
    except ValueError as e: said = str(e)
    else: said = "no error"
    sys.stdout.write(f"case {i} rank {r}: {said}\n")  # one write: the ranks share the pipe
    sys.stdout.flush()
  assert Tensor.ones(8, 2).shard(mesh, ("dp", None)).sum().item() == 16.0
  print(f"rank {r}: in step", flush=True)

class Recorder:
  """A communicator that counts the MPI calls made through it, by name."""
  def __init__(self, comm: Any) -> None: self.comm, self.calls = comm, Counter[str]()
  def __getattr__(self, name: str) -> Any:
    fn = getattr(self.comm, name)
    if name.startswith("Get_"): return fn
    def call(*args: Any, **kwargs: Any) -> Any:
      self.calls[name] += 1
      return fn(*args, **kwargs)
    return call

def small_all_reduces() -> None:
  """N small all-reduces over a mesh axis that crosses the ranks, realized at once and as TinyJit replays: equal to
  one process's, bit for bit, and one exchange: one message to each other rank and one from it, whatever N (N sends
  and N receives, each a round trip with a sum between, before)."""
  rng = np.random.default_rng(1)
  values = [[rng.standard_normal(64).astype(np.float32) for _ in DEVICES] for _ in range(N_SMALL)]
  want = [v.numpy() for v in _reduced(_stacks(values, DeviceMesh(DEVICES, names=("dp",))))]  # before joining
  r, n = join()
  mesh = DeviceMesh(DEVICES, names=("dp",))
  assert remote.joined is not None
  stacks = _stacks(values, mesh)
  Tensor.realize(*stacks)
  remote.joined.comm = recorder = Recorder(remote.joined.comm)
  got = _reduced(stacks)
  messages = dict(recorder.calls)
  for g, w in zip(got, want): np.testing.assert_array_equal(g.numpy(), w)
  peers = n - 1
  assert messages == {"Iallgather": 1, "Isend": peers, "Irecv": peers}, messages  # the check of the schedule, then
  # the same all-reduces of other values again: the schedule cache's (schedule/cache.py), with no multi pass and no
  # scheduling, and one exchange as before
  stacks = _stacks([[v * 3 for v in vs] for vs in values], mesh)
  Tensor.realize(*stacks)
  recorder.calls.clear()
  before = dict(schedule_stats)
  got = _reduced(stacks)
  assert {k: schedule_stats[k] - before[k] for k in before} == {"split": 0, "scheduled": 0, "reused": 1}
  assert dict(recorder.calls) == messages, recorder.calls
  for g, vs in zip(got, values): np.testing.assert_array_equal(g.numpy(), _rank_order_sum([v * 3 for v in vs]))
  step = TinyJit(lambda *xs: [t.realize() for t in _reduced(list(xs))])
  for k in range(4):
    shifted = [[v + k for v in vs] for vs in values]
    stacks = _stacks(shifted, mesh)
    Tensor.realize(*stacks)
    recorder.calls.clear()
    got = step(*stacks)
    if k >= 2: assert dict(recorder.calls) == {"Isend": peers, "Irecv": peers}, (k, recorder.calls)  # replays
    for g, vs in zip(got, shifted): np.testing.assert_array_equal(g.numpy(), _rank_order_sum(vs))
  print(f"rank {r} of {n}: small all-reduces ok", flush=True)

N_SMALL = 8

def _stacks(values: list[list[np.ndarray]], mesh: DeviceMesh) -> list[Tensor]:
  return [stack([Tensor(v, device=d) for v, d in zip(vs, DEVICES)], mesh) for vs in values]

def _reduced(stacks: list[Tensor]) -> list[Tensor]:
  """Each stack's values doubled and summed over the devices (a sum over the sliced dimension: the multi pass's
  all-reduce of the partial sums, as data parallelism's gradients), realized together."""
  outs = [(s * 2).sum(0) for s in stacks]
  Tensor.realize(*outs)
  return outs

def _rank_order_sum(vs: list[np.ndarray]) -> np.ndarray:
  """What every device holds: each device's value doubled, summed in the mesh's order (float32, as the kernel)."""
  out = vs[0] * np.float32(2)
  for v in vs[1:]: out = out + v * np.float32(2)
  return out

if __name__ == "__main__":
  {"basics": basics, "transformer": transformer, "mismatch": mismatch,
   "small": small_all_reduces}[sys.argv[1]](*sys.argv[2:])
