"""Megatron-style tensor parallelism: an MLP whose first layer is column-parallel and whose second is row-parallel,
trained on scikit-learn's digits over CPU:0..N-1 and checked step for step against one device.

  python extra/examples/tensor_parallel.py [--devices 4] [--steps 30]

`lazytensor.parallel.parallelize_module` with the plan {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()} slices
the first layer's weight (out, in) on its output features, so each device computes its slice of the hidden
activations from the replicated input, with no communication (relu is elementwise, so it stays local), and the
second layer's weight on its input features: each device multiplies its slice of the activations by its slice of the
weight, and the sum over the features, which crosses the devices, becomes per-device partial sums plus one
all-reduce. Backward mirrors it: the gradient of the replicated input needs one all-reduce; the weights' gradients
stay on their devices.
"""
from __future__ import annotations

import argparse

from parallel_common import batches, compare, train_step

from lazytensor import DeviceMesh, Tensor, nn
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class MLP:
  def __init__(self, hidden: int) -> None: self.fc1, self.fc2 = nn.Linear(64, hidden), nn.Linear(hidden, 10)
  def __call__(self, x: Tensor) -> Tensor: return self.fc2(self.fc1(x).relu())

def make(seed: int, hidden: int, devices: tuple[str, ...] | None = None) -> tuple[MLP, SGD]:
  Tensor.manual_seed(seed)
  model = MLP(hidden)
  if devices is not None:
    parallelize_module(model, DeviceMesh(devices, names=("tp",)), {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
  return model, SGD(get_parameters(model), lr=0.05, momentum=0.9)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--devices", type=int, default=4)
  ap.add_argument("--steps", type=int, default=30)
  ap.add_argument("--hidden", type=int, default=256)
  args = ap.parse_args()
  devices = tuple(f"CPU:{i}" for i in range(args.devices))
  ref, ref_opt = make(0, args.hidden)
  tp, tp_opt = make(0, args.hidden, devices)
  compare(f"tensor parallel over {len(devices)} devices",
          lambda x, y: train_step(ref_opt, lambda: ref(Tensor(x)).cross_entropy(Tensor(y))),
          lambda x, y: train_step(tp_opt, lambda: tp(Tensor(x).to(devices)).cross_entropy(Tensor(y).to(devices))),
          ref, tp, batches(args.steps, 64))

if __name__ == "__main__":
  main()
