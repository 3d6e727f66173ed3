"""ZeRO-1 and FSDP: data-parallel training whose optimizer state (ZeRO-1), or weights and optimizer state (FSDP), are
sharded over the devices, trained on scikit-learn's digits over CPU:0..N-1 and checked step for step against one
device.

  python extra/examples/zero_fsdp.py [--mode zero1|fsdp] [--devices 4] [--steps 30]

ZeRO-1: the weights are replicated and the batch sharded, as in DDP, but each device keeps only its slice of the
momentum. The gradients are all-reduced (a sum over the sharded batch axis); each device updates the momentum of its
slice; the weight update, computed from the sharded momentum, is written into the replicated weights: an all-gather.

FSDP: the weights are sharded too (each device holds a slice of the output features of every layer) and gathered
where they are used (`w.to(devices)`: an all-gather); their gradients come back sharded like the weights, and the
optimizer updates each slice where it lives. The devices' memory holds 1/N of the weights and of the momentum.
"""
from __future__ import annotations

import argparse

from parallel_common import batches, compare, train_step

from lazytensor import Tensor, nn
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters


class MLP:
  def __init__(self) -> None: self.layers = [nn.Linear(64, 128), nn.Linear(128, 10)]

  def __call__(self, x: Tensor, gather: tuple[str, ...] | None = None) -> Tensor:
    """The forward pass; with `gather`, each weight is first gathered on those devices (FSDP's all-gather)."""
    for i, layer in enumerate(self.layers):
      assert layer.bias is not None
      w, b = (layer.weight, layer.bias) if gather is None else (layer.weight.to(gather), layer.bias.to(gather))
      x = x @ w.T + b
      if i < len(self.layers) - 1: x = x.relu()
    return x

def make(seed: int, mode: str | None = None, devices: tuple[str, ...] = ()) -> tuple[MLP, SGD]:
  Tensor.manual_seed(seed)
  model = MLP()
  for p in get_parameters(model):
    if mode is not None: p.shard_(devices, 0 if mode == "fsdp" else None)
  opt = SGD(get_parameters(model), lr=0.05, momentum=0.9)
  if mode is not None:
    for buf in opt.bufs: buf.shard_(devices, 0)  # ZeRO-1: each device keeps the momentum of its slice
  return model, opt

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--mode", choices=["zero1", "fsdp"], default="fsdp")
  ap.add_argument("--devices", type=int, default=4)
  ap.add_argument("--steps", type=int, default=30)
  args = ap.parse_args()
  devices = tuple(f"CPU:{i}" for i in range(args.devices))
  ref, ref_opt = make(0)
  par, par_opt = make(0, args.mode, devices)
  gather = devices if args.mode == "fsdp" else None
  compare(f"{args.mode} over {len(devices)} devices",
          lambda x, y: train_step(ref_opt, lambda: ref(Tensor(x)).cross_entropy(Tensor(y))),
          lambda x, y: train_step(par_opt, lambda: par(Tensor(x).shard(devices, 0), gather)
                                  .cross_entropy(Tensor(y).shard(devices, 0))),
          ref, par, batches(args.steps, 64))
  weights = [p.shard_axis for p in get_parameters(par)]
  print(f"weights sharded on axes {weights}, momentum sharded on axes {[b.shard_axis for b in par_opt.bufs]}")

if __name__ == "__main__":
  main()
