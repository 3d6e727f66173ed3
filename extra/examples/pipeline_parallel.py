"""Pipeline parallelism with lazytensor.parallel.pipeline: an MLP cut into stages on CPU:0..p-1 (a "pp" mesh axis),
each batch split into micro-batches and run by a schedule (GPipe, 1F1B or ZB-H1), trained on scikit-learn's digits
and checked step for step against one device.

  python extra/examples/pipeline_parallel.py [--stages 2] [--micro 4] [--schedule zb] [--steps 30]

Stage s holds one Linear layer (and its relu) on CPU:s. The schedule says in which order each stage runs the forward
(F), backward (B) and, for ZB-H1, weight-gradient (W) of each micro-batch; the example prints its timeline with unit
costs and its bubble fraction. Activations move to the next stage's device after F, gradients back after B; the weight
gradients accumulate over the micro-batches, and one optimizer step updates every stage. Each stage's actions run on
its device's worker as soon as what they need is done, without waiting for the other stages' (`Schedule.order` is
the order they are built in); at this example's size the work is too small for that to show in time
(extra/bench/pipeline.py measures it on larger layers).
"""
from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from parallel_common import batches, compare, train_step

from lazytensor import DeviceMesh, Tensor, nn
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.parallel.pipeline import Pipeline, gpipe, one_f_one_b, zero_bubble_h1

SCHEDULES = {"gpipe": gpipe, "1f1b": one_f_one_b, "zb": zero_bubble_h1}

def make(seed: int, stages: int) -> list[nn.Linear]:
  """Linear layers 64 -> 128 -> ... -> 10, one per stage."""
  Tensor.manual_seed(seed)
  sizes = [64] + [128] * (stages - 1) + [10]
  return [nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]

def forward(layers: list[nn.Linear], x: Tensor) -> Tensor:
  for layer in layers[:-1]: x = layer(x).relu()
  return layers[-1](x)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--stages", type=int, default=2)
  ap.add_argument("--micro", type=int, default=4)
  ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="zb")
  ap.add_argument("--steps", type=int, default=30)
  args = ap.parse_args()
  schedule = SCHEDULES[args.schedule](args.stages, args.micro)
  print(schedule.chart())
  ref, par = make(0, args.stages), make(0, args.stages)
  mesh = DeviceMesh(tuple(f"CPU:{i}" for i in range(args.stages)), names=("pp",))
  stages: list[list[Callable[[Tensor], Tensor]]] = [[layer, Tensor.relu] for layer in par]
  stages[-1].pop()
  pipe = Pipeline(stages, mesh, lambda out, y: out.cross_entropy(y))
  ref_opt, par_opt = SGD(get_parameters(ref), lr=0.05), SGD(get_parameters(par), lr=0.05)
  def pipeline_step(x: np.ndarray, y: np.ndarray) -> float:
    par_opt.zero_grad()
    loss = pipe.step(Tensor(x), Tensor(y), schedule).item()
    par_opt.step()
    return loss
  compare(f"{schedule.name} over {args.stages} stages, {args.micro} micro-batches",
          lambda x, y: train_step(ref_opt, lambda: forward(ref, Tensor(x)).cross_entropy(Tensor(y))),
          pipeline_step, ref, par, batches(args.steps, 64))

if __name__ == "__main__":
  main()
