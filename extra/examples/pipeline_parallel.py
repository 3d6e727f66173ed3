"""GPipe-style pipeline parallelism: an MLP cut into stages on different devices, each batch split into micro-batches,
trained on scikit-learn's digits and checked step for step against one device.

  python extra/examples/pipeline_parallel.py [--stages 2] [--micro 4] [--steps 30]

Stage s holds its layers on CPU:s; a micro-batch's activations move to the next stage's device with `.to()`, and its
gradients move back in the backward pass (the backward of a copy is a copy). The micro-batches' losses are summed, so
the gradients accumulate over them as GPipe's do, and one optimizer step updates every stage. The graph of one step
holds every micro-batch of every stage; the scheduler orders the kernels by their dependencies. This process runs one
kernel at a time, so the stages do not overlap in time here: the example shows the partitioning and the bookkeeping
(devices, copies, accumulation), not the speed-up of a pipeline with one worker per device.
"""
from __future__ import annotations

import argparse

from parallel_common import batches, compare, train_step

from lazytensor import Tensor, nn
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters


def make(seed: int, stages: int) -> list[tuple[nn.Linear, str]]:
  """Linear layers 64 -> 128 -> ... -> 10, one per stage, each with the device it lives on."""
  Tensor.manual_seed(seed)
  sizes = [64] + [128] * (stages - 1) + [10]
  layers = [nn.Linear(a, b) for a, b in zip(sizes, sizes[1:])]
  return [(layer, f"CPU:{i}") for i, layer in enumerate(layers)]

def forward(pipeline: list[tuple[nn.Linear, str]], x: Tensor, move: bool) -> Tensor:
  for i, (layer, device) in enumerate(pipeline):
    x = layer(x.to(device) if move else x)
    if i < len(pipeline) - 1: x = x.relu()
  return x

def gpipe_loss(pipeline: list[tuple[nn.Linear, str]], x: Tensor, y: Tensor, micro: int) -> Tensor:
  """The batch's mean loss as a sum over micro-batches of their summed losses: the gradients accumulate."""
  n, last = x.shape[0], pipeline[-1][1]
  losses = [forward(pipeline, x[i * n // micro:(i + 1) * n // micro], True)
            .cross_entropy(y[i * n // micro:(i + 1) * n // micro].to(last), reduction="sum") for i in range(micro)]
  return sum(losses[1:], losses[0]) / n

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--stages", type=int, default=2)
  ap.add_argument("--micro", type=int, default=4)
  ap.add_argument("--steps", type=int, default=30)
  args = ap.parse_args()
  ref, pipe = make(0, args.stages), make(0, args.stages)
  for layer, device in pipe:
    for p in get_parameters(layer): p.lazydata = p.to(device).realize().lazydata
  ref_model, pipe_model = [layer for layer, _ in ref], [layer for layer, _ in pipe]
  ref_opt, pipe_opt = SGD(get_parameters(ref_model), lr=0.05), SGD(get_parameters(pipe_model), lr=0.05)
  compare(f"GPipe over {args.stages} stages, {args.micro} micro-batches",
          lambda x, y: train_step(ref_opt, lambda: forward(ref, Tensor(x), False).cross_entropy(Tensor(y))),
          lambda x, y: train_step(pipe_opt, lambda: gpipe_loss(pipe, Tensor(x), Tensor(y), args.micro)),
          ref_model, pipe_model, batches(args.steps, 64))

if __name__ == "__main__":
  main()
