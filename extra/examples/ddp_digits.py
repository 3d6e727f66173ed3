"""Data-parallel training (DDP) of an MLP on scikit-learn's digits, checked step for step against one device.

  python extra/examples/ddp_digits.py [--devices 4] [--steps 30]   # one process, devices CPU:0..CPU:N-1
  mpiexec -n 2 python extra/examples/ddp_digits.py                 # one process per rank, over MPI

In one process `lazytensor.parallel.replicate` replicates the weights on every device of a ("dp",) mesh, runs the
forward once per device on its slice of each batch (sharded along its first axis), and sums the devices' local
gradients with one all-reduce per bucket of parameters, as torch's DistributedDataParallel does.

Over MPI each rank holds the whole model, computes the loss of its slice of every global batch (summed, divided by
the global batch size, so that the ranks' gradients add up to the gradient of the mean loss) and sums the gradients
with `lazytensor.parallel.distributed.all_reduce` before the update, as torch's DistributedDataParallel does.

Both check every step against the same model trained on one device on the whole batches, and print the largest
difference of the losses and of the weights.
"""
from __future__ import annotations

import argparse

import numpy as np
from parallel_common import batches, compare, largest_difference

from lazytensor import DeviceMesh, Tensor, nn
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import distributed as dist
from lazytensor.parallel import replicate


class MLP:
  def __init__(self) -> None: self.layers = [nn.Linear(64, 128), nn.Linear(128, 10)]
  def __call__(self, x: Tensor) -> Tensor: return self.layers[1](self.layers[0](x).relu())

def make(seed: int, devices: tuple[str, ...] | None = None) -> tuple[MLP, SGD]:
  """The model, replicated on `devices` when given (data parallel), and its optimizer, whose state lives where the
  weights do."""
  Tensor.manual_seed(seed)
  model = MLP() if devices is None else replicate(MLP(), DeviceMesh(devices, names=("dp",)))
  return model, SGD(get_parameters(model), lr=0.05, momentum=0.9)

def step(model: MLP, opt: SGD, x: Tensor, y: Tensor, scale: float = 0.0,
         all_reduce: bool = False) -> float:
  """One SGD step; with `scale` the loss is a sum over the batch times scale (its share of a larger batch's mean)."""
  opt.zero_grad()
  logits = model(x)
  loss = logits.cross_entropy(y, reduction="sum") * scale if scale else logits.cross_entropy(y)
  loss.backward()
  if all_reduce:
    for p in opt.params:
      assert p.grad is not None
      p.grad = dist.all_reduce(p.grad)
  opt.step()
  return loss.item()

def in_one_process(devices: tuple[str, ...], data: list[tuple[np.ndarray, np.ndarray]], seed: int) -> None:
  ref, ref_opt = make(seed)
  ddp, ddp_opt = make(seed, devices)
  compare(f"DDP over {len(devices)} devices",
          lambda x, y: step(ref, ref_opt, Tensor(x), Tensor(y)),
          lambda x, y: step(ddp, ddp_opt, Tensor(x).shard(devices, 0), Tensor(y).shard(devices, 0)), ref, ddp, data)

def over_mpi(data: list[tuple[np.ndarray, np.ndarray]], seed: int) -> None:
  rank, world = dist.rank(), dist.world_size()
  ref, ref_opt = make(seed)
  ddp, ddp_opt = make(seed)
  worst_loss = worst_weight = 0.0
  for i, (x, y) in enumerate(data):
    want = step(ref, ref_opt, Tensor(x), Tensor(y))
    lo, hi = len(x) * rank // world, len(x) * (rank + 1) // world
    mine = step(ddp, ddp_opt, Tensor(x[lo:hi]), Tensor(y[lo:hi]), scale=1.0 / len(x), all_reduce=True)
    got = dist.all_reduce(Tensor([mine])).item()
    worst_loss, worst_weight = max(worst_loss, abs(got - want)), max(worst_weight, largest_difference(ddp, ref))
    if rank == 0 and (i % 10 == 0 or i == len(data) - 1):
      print(f"step {i:3d}: loss {got:.4f} (one process: {want:.4f})")
  worst_weight = dist.all_reduce(Tensor([worst_weight]), "max").item()
  if rank == 0:
    print(f"DDP over {world} MPI ranks, {len(data)} steps: largest difference from one process: "
          f"loss {worst_loss:.2e}, weights {worst_weight:.2e}")

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--devices", type=int, default=4, help="CPU devices in one process (ignored under mpiexec)")
  ap.add_argument("--steps", type=int, default=30)
  ap.add_argument("--batch", type=int, default=64)
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  dist.init()
  data = batches(args.steps, args.batch, args.seed)
  if dist.world_size() > 1: over_mpi(data, args.seed)
  else: in_one_process(tuple(f"CPU:{i}" for i in range(args.devices)), data, args.seed)

if __name__ == "__main__":
  main()
