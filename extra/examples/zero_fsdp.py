"""ZeRO-1, ZeRO-2 and FSDP: data-parallel training whose optimizer state (ZeRO-1), and gradients (ZeRO-2), or weights,
gradients and optimizer state (FSDP) are sharded over the devices, trained on scikit-learn's digits over CPU:0..N-1
and checked step for step against one device.

  python extra/examples/zero_fsdp.py [--mode zero1|zero2|fsdp] [--devices 2] [--steps 30]

ZeRO-1 and ZeRO-2 (`lazytensor.parallel.ZeroRedundancyOptimizer`): the weights are replicated and each batch split
over the devices, as `replicate` (DDP) does, but the optimizer steps on a copy of each weight sharded over the devices,
so each keeps the momentum of its slice only; the updated slices are all-gathered into the replicated weights. ZeRO-1
all-reduces the gradients and slices them where they lie; ZeRO-2 (`replicate(..., shard_gradients=True)`)
reduce-scatters them, so each device only ever holds the sum of its slice.

FSDP (`lazytensor.parallel.fully_shard`, applied to each layer, then to the model): the weights are sharded too, each
layer's gathered on every device just before its forward, and the gradients reduce-scattered back to the shards, on
which the optimizer steps. Each device holds 1/N of the weights, of the gradients and of the momentum.
"""
from __future__ import annotations

import argparse

from parallel_common import batches, compare, train_step

from lazytensor import DeviceMesh, Tensor, nn
from lazytensor.nn.optim import SGD, Optimizer
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import ZeroRedundancyOptimizer, fully_shard, replicate


class MLP:
  def __init__(self) -> None: self.layers = [nn.Linear(64, 128), nn.Linear(128, 10)]
  def __call__(self, x: Tensor) -> Tensor: return self.layers[1](self.layers[0](x).relu())

def make(seed: int, mode: str | None = None, mesh: DeviceMesh | None = None) -> tuple[MLP, Optimizer]:
  Tensor.manual_seed(seed)
  model = MLP()
  if mode is None or mesh is None: return model, SGD(get_parameters(model), lr=0.05, momentum=0.9)
  if mode == "fsdp":
    for layer in model.layers: fully_shard(layer, mesh)
    return fully_shard(model, mesh), SGD(get_parameters(model), lr=0.05, momentum=0.9)
  stage = 2 if mode == "zero2" else 1
  replicate(model, mesh, shard_gradients=stage == 2)
  return model, ZeroRedundancyOptimizer(get_parameters(model), SGD, mesh, stage=stage, lr=0.05, momentum=0.9)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--mode", choices=["zero1", "zero2", "fsdp"], default="fsdp")
  # 2 by default: every dimension sharded must split evenly over the devices, and the output layer has 10 rows
  ap.add_argument("--devices", type=int, default=2)
  ap.add_argument("--steps", type=int, default=30)
  args = ap.parse_args()
  devices = tuple(f"CPU:{i}" for i in range(args.devices))
  mesh = DeviceMesh(devices, names=("dp",))
  ref, ref_opt = make(0)
  par, par_opt = make(0, args.mode, mesh)
  compare(f"{args.mode} over {len(devices)} devices",
          lambda x, y: train_step(ref_opt, lambda: ref(Tensor(x)).cross_entropy(Tensor(y))),
          lambda x, y: train_step(par_opt, lambda: par(Tensor(x)).cross_entropy(Tensor(y).shard(devices, 0))),
          ref, par, batches(args.steps, 64))
  state = par_opt.optimizer.bufs if isinstance(par_opt, ZeroRedundancyOptimizer) else par_opt.bufs  # type: ignore
  print(f"weights sharded on axes {[p.shard_axis for p in get_parameters(par)]}, momentum sharded on axes "
        f"{[b.shard_axis for b in state]}")

if __name__ == "__main__":
  main()
