"""Every parallelism strategy of lazytensor.parallel on a named mesh, each trained a few steps on scikit-learn's digits
and compared with the same model trained on one device.

  python extra/examples/mesh_zoo.py [--steps 3] [--batch 32]

Per strategy it prints the mesh (axis names and sizes), the copies between devices that one training step made (the
collectives are built from them: a ring all-reduce is a chain of copies and adds) and their bytes, and the largest
difference of the losses and weights from one device:
  ddp, fsdp, zero1, zero2          data parallel over "dp" (replicate, fully_shard, ZeroRedundancyOptimizer)
  tp, dp x tp                      Megatron column/row parallel over "tp" (parallelize_module), and with "dp"
  pp gpipe / 1f1b / zb             a pipeline over "pp", with each schedule's bubble fraction
  ep                               a mixture-of-experts layer, experts spread over "ep" (tokens routed by all_to_all)
  cp                               ring attention over "cp" (one attention step, forward and gradients)
"""
from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
from parallel_common import batches, largest_difference

from lazytensor import DeviceMesh, Tensor, nn, shard_map
from lazytensor.engine import realize
from lazytensor.nn.optim import SGD, Optimizer
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import (
  ColwiseParallel,
  ParallelStyle,
  RowwiseParallel,
  ZeroRedundancyOptimizer,
  fully_shard,
  parallelize_module,
  replicate,
)
from lazytensor.parallel.context import ring_attention
from lazytensor.parallel.pipeline import Pipeline, gpipe, one_f_one_b, zero_bubble_h1
from lazytensor.schedule.scheduler import ScheduleItem
from lazytensor.uop.ops import Ops

D2, D4 = ("CPU:0", "CPU:1"), ("CPU:0", "CPU:1", "CPU:2", "CPU:3")

class MLP:
  def __init__(self, moe: bool = False) -> None:
    self.layers: list[Any] = [nn.Linear(64, 128), nn.Linear(128, 10)]
    self.moe = nn.MoE(128, 64, num_experts=4, top_k=2, groups=2) if moe else None
  def __call__(self, x: Tensor) -> Tensor:
    h = self.layers[0](x).relu()
    if self.moe is not None: h = h + self.moe(h)
    return self.layers[1](h)

class Copies:
  """The copies between devices that the schedules run while it is on, and their bytes."""
  def __init__(self) -> None: self.count, self.nbytes = 0, 0
  def __call__(self, items: list[ScheduleItem]) -> None:
    for item in items:
      if item.ast.op is Ops.COPY and item.bufs[0].device != item.bufs[1].device:
        self.count, self.nbytes = self.count + 1, self.nbytes + item.bufs[0].nbytes
  def __enter__(self) -> Copies:
    realize.run_listeners.append(self)
    return self
  def __exit__(self, *_: object) -> None: realize.run_listeners.remove(self)

def make(moe: bool = False) -> MLP:
  Tensor.manual_seed(0)
  return MLP(moe)

def sgd(params: list[Tensor]) -> Optimizer: return SGD(params, lr=0.05, momentum=0.9)

def train(model: MLP, opt: Optimizer, data: list[tuple[np.ndarray, np.ndarray]], place: Callable[[Tensor], Tensor],
          step: Callable[[Tensor, Tensor], Tensor] | None = None) -> tuple[list[float], Copies]:
  """Each batch: zero_grad, loss, backward, step; the losses, and the copies of the last step."""
  losses, copies = [], Copies()
  for i, (x, y) in enumerate(data):
    with Copies() if i == len(data) - 1 else contextlib.nullcontext() as seen:
      opt.zero_grad()
      if step is not None: loss = step(place(Tensor(x)), place(Tensor(y)))
      else:
        loss = model(place(Tensor(x))).cross_entropy(place(Tensor(y)))
        loss.backward()
      opt.step()
      losses.append(loss.item())
    if isinstance(seen, Copies): copies = seen
  return losses, copies

def _differ(a: Any, b: Any) -> float: return float(np.abs(np.asarray(a) - np.asarray(b)).max())

def report(name: str, mesh: DeviceMesh, result: tuple[list[float], Copies], reference: tuple[list[float], MLP],
           model: MLP, extra: str = "") -> None:
  losses, copies = result
  diff = max(_differ(losses, reference[0]), largest_difference(model, reference[1]))
  axes = " x ".join(f"{n}={s}" for n, s in zip(mesh.names, mesh.shape))
  print(f"{name:14s} {axes:14s} {copies.count:5d} copies {copies.nbytes / 1024:9.1f} KiB  diff {diff:.1e} {extra}")

def run_data_parallel(data: list[tuple[np.ndarray, np.ndarray]], reference: tuple[list[float], MLP]) -> None:
  dp = DeviceMesh(D2, names=("dp",))
  on_dp = lambda t: t.shard(dp, ("dp",) + (None,) * (t.ndim - 1))  # noqa: E731
  model = replicate(make(), dp)
  report("ddp", dp, train(model, sgd(get_parameters(model)), data, on_dp), reference, model)
  model = make()
  for layer in model.layers: fully_shard(layer, dp)
  model = fully_shard(model, dp)
  report("fsdp", dp, train(model, sgd(get_parameters(model)), data, on_dp), reference, model)
  for stage in (1, 2):
    model = replicate(make(), dp, shard_gradients=stage == 2)
    opt = ZeroRedundancyOptimizer(get_parameters(model), SGD, dp, stage=stage, lr=0.05, momentum=0.9)
    report(f"zero{stage}", dp, train(model, opt, data, on_dp), reference, model)

def run_tensor_parallel(data: list[tuple[np.ndarray, np.ndarray]], reference: tuple[list[float], MLP]) -> None:
  plan: dict[str, ParallelStyle] = {"layers.0": ColwiseParallel(), "layers.1": RowwiseParallel()}
  tp = DeviceMesh(D2, names=("tp",))
  model = parallelize_module(make(), tp, plan)
  report("tp", tp, train(model, sgd(get_parameters(model)), data, lambda t: t.shard(tp, None)), reference, model)
  mesh = DeviceMesh(D4, shape=(2, 2), names=("dp", "tp"))
  model = replicate(parallelize_module(make(), mesh, plan), mesh)
  on_dp = lambda t: t.shard(mesh, ("dp",) + (None,) * (t.ndim - 1))  # noqa: E731
  report("dp x tp", mesh, train(model, sgd(get_parameters(model)), data, on_dp), reference, model)

def run_pipelines(data: list[tuple[np.ndarray, np.ndarray]], reference: tuple[list[float], MLP]) -> None:
  pp = DeviceMesh(D2, names=("pp",))
  for name, schedule in (("gpipe", gpipe), ("1f1b", one_f_one_b), ("zb", zero_bubble_h1)):
    model = make()
    pipe = Pipeline([[model.layers[0], Tensor.relu], [model.layers[1]]], pp, lambda out, y: out.cross_entropy(y))
    opt = sgd(get_parameters(model))  # after the pipeline moved the weights: the optimizer's state lies beside them
    plan = schedule(2, 4)
    def step(x: Tensor, y: Tensor, pipe: Pipeline = pipe, plan: Any = plan) -> Tensor: return pipe.step(x, y, plan)
    result = train(model, opt, data, lambda t: t, step)
    report(f"pp {name}", pp, result, reference, model, f"bubble {plan.bubble_fraction():.2f}")

def run_experts(data: list[tuple[np.ndarray, np.ndarray]]) -> None:
  ep = DeviceMesh(D2, names=("ep",))
  one = make(moe=True)
  reference = train(one, sgd(get_parameters(one)), data, lambda t: t)[0], one
  model = make(moe=True)
  assert model.moe is not None
  model.moe.expert_parallel(ep)
  for layer in model.layers:
    for p in get_parameters(layer): p.shard_(ep, None)
  report("ep", ep, train(model, sgd(get_parameters(model)), data, lambda t: t.shard(ep, None)), reference, model)

def run_ring_attention() -> None:
  cp = DeviceMesh(D4, names=("cp",))
  rng = np.random.default_rng(0)
  q, k, v, w = (rng.standard_normal((2, 16, 8), dtype=np.float32) for _ in range(4))
  ring_in, full_in = ([Tensor(a, requires_grad=True) for a in (q, k, v)] for _ in range(2))
  spec = (None, "cp", None)
  with Copies() as copies:
    ring = shard_map(lambda q, k, v: ring_attention(q, k, v, "cp", True), cp, (spec,) * 3, spec)(*ring_in)
    (ring.to("CPU") * Tensor(w)).sum().backward()
    ring.realize(*(t.grad for t in ring_in if t.grad is not None))
  full = full_in[0].scaled_dot_product_attention(full_in[1], full_in[2], is_causal=True)
  (full * Tensor(w)).sum().backward()
  diff = max(_differ(ring.numpy(), full.numpy()),
             *(_differ(r.grad.numpy(), f.grad.numpy()) for r, f in zip(ring_in, full_in)
               if r.grad is not None and f.grad is not None))
  print(f"{'cp (ring)':14s} {'cp=4':14s} {copies.count:5d} copies {copies.nbytes / 1024:9.1f} KiB  diff {diff:.1e} "
        "(one causal attention step over a sequence of 16, forward and gradients)")

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--batch", type=int, default=32)
  args = ap.parse_args()
  data = batches(args.steps, args.batch)
  one = make()
  reference = train(one, sgd(get_parameters(one)), data, lambda t: t)[0], one
  print(f"{'strategy':14s} {'mesh':14s} {'copies between devices in one step':>36s}  largest difference from one "
        "device")
  run_data_parallel(data, reference)
  run_tensor_parallel(data, reference)
  run_pipelines(data, reference)
  run_experts(data)
  run_ring_attention()

if __name__ == "__main__":
  main()
