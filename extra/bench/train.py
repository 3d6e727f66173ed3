"""Training steps per second: an MLP 784-256-10, batch 128, SGD, cross-entropy, float32 on the CPU.

Usage: python extra/bench/train.py [--threads N] [--steps N] [--clock wall|cpu]

lazytensor with TinyJit (the step's kernels captured once, then replayed) and without (every step builds, schedules
and runs its graph; compiled kernels come from the cache), next to torch (when installed) measured in the same run
with the same number of threads. Prints steps/s and the ratio of each to torch. Reference points on a 2-vCPU Zen4:
torch ~670 steps/s on one thread, tinygrad ~175 with its JIT and ~20 without.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

import bench_clock

if TYPE_CHECKING:  # numpy is imported in main(), after the thread count is set in the environment
  import numpy as np
  Batch = tuple[np.ndarray, np.ndarray]

BATCH, IN, HIDDEN, CLASSES, LR = 128, 784, 256, 10, 0.01

def steps_per_second(step: Callable[[int], object], steps: int, warmup: int, repeats: int = 3) -> float:
  """The best of `repeats` timed runs of `steps` steps each, after `warmup` untimed ones (compiling, capturing)."""
  for i in range(warmup): step(i)
  best = float("inf")
  for _ in range(repeats):
    start = bench_clock.now()
    for i in range(steps): step(i)
    best = min(best, bench_clock.now() - start)
  return steps / best

def lazytensor_step(jit: bool, data: list[Batch]) -> Callable[[int], object]:
  from lazytensor import Tensor, nn
  from lazytensor.engine.jit import TinyJit
  from lazytensor.nn.optim import SGD
  from lazytensor.nn.state import get_parameters
  Tensor.manual_seed(0)
  l1, l2 = nn.Linear(IN, HIDDEN), nn.Linear(HIDDEN, CLASSES)
  opt = SGD(get_parameters([l1, l2]), lr=LR)
  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = l2(l1(x).relu()).cross_entropy(y).backward()
    opt.step()  # the loss and the gradients are computed in the step's schedule, from the weights before the update
    return loss
  fn = TinyJit(step) if jit else step
  # fresh input tensors every step, as a data loader gives them: the graph is never the same as the last one
  return lambda i: fn(*(Tensor(a) for a in data[i % len(data)]))

def torch_step(data: list[Batch]) -> Callable[[int], object]:
  import torch
  torch.manual_seed(0)
  model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))
  opt = torch.optim.SGD(model.parameters(), lr=LR)
  def step(i: int) -> object:
    x, y = (torch.from_numpy(a) for a in data[i % len(data)])
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y.long())
    loss.backward()
    opt.step()
    return loss
  return step

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--steps", type=int, default=200, help="steps per timed run (the eager run does a tenth)")
  ap.add_argument("--stages", action="store_true", help="then where the time of a step without TinyJit goes")
  args = bench_clock.setup(ap)
  import numpy as np

  from lazytensor import Context
  torch = bench_clock.torch_on(args.threads)

  rng = np.random.default_rng(0)
  data = [(rng.standard_normal((BATCH, IN), dtype=np.float32), rng.integers(0, CLASSES, BATCH).astype(np.int32))
          for _ in range(8)]
  results: dict[str, float] = {}
  with Context(THREADS=args.threads):
    results["lazytensor TinyJit"] = steps_per_second(lazytensor_step(True, data), args.steps, warmup=5)
    results["lazytensor no JIT"] = steps_per_second(lazytensor_step(False, data), max(args.steps // 10, 5), warmup=3)
  if torch: results["torch"] = steps_per_second(torch_step(data), args.steps, warmup=5)
  print(f"MLP {IN}-{HIDDEN}-{CLASSES}, batch {BATCH}, SGD, cross-entropy; threads={args.threads}"
        f"{'  (torch ' + torch.__version__ + ')' if torch else ''}")
  print(f"{'':20s} {'steps/s':>9s} {'ms/step':>9s} {'vs torch':>9s}")
  for name, rate in results.items():
    ratio = f"{rate / results['torch']:8.2f}x" if "torch" in results else f"{'-':>9s}"
    print(f"{name:20s} {rate:9.1f} {1e3 / rate:9.2f} {ratio}")
  if args.stages:
    from eager import Stages

    from lazytensor.frontend.mixin.grads import GradMixin
    from lazytensor.nn.optim import Optimizer
    step = lazytensor_step(False, data)
    with Context(THREADS=args.threads):
      for i in range(3): step(i)
      # the step's parts before its realize: backward and the optimizer's update graph (their ops count in "op" too)
      extra = (("backward (all)", GradMixin, "backward"), ("optimizer update graph", Optimizer, "schedule_step"))
      print()
      Stages(extra).report(step, max(args.steps // 10, 5), "step without TinyJit (ms, inclusive)", unit=1e3)

if __name__ == "__main__":
  main()
