"""What building one tensor op costs: the graph alone (nothing realized), in us per op and Python calls per op, for
the everyday ops of a forward and backward pass and an optimizer step, and the graph of a ResNet50 forward at batch 1.

Usage: python extra/bench/op_cost.py [--calls N] [--clock wall|cpu] [--only SUBSTR] [--no-resnet]

Every input is realized before the timing; each case builds its graph from them again at every call (the nodes are
interned, so a repeated call finds its UOps made: what is measured is the Python around each op, the Tensor methods,
promotion, broadcasting and the Tensors made, which is what an eager step repeats). With the old tree on PYTHONPATH
the same script measures the code before a change.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import bench_clock
import numpy as np

from lazytensor import Tensor, nn
from lazytensor.frontend.state import state
from lazytensor.nn.optim import SGD


def python_calls(fn: Callable[[int], object]) -> int:
  """The Python function calls one call of fn makes (after a first call that fills caches)."""
  fn(0)
  calls = [0]
  def count(frame: object, event: str, arg: object) -> None:
    if event == "call": calls[0] += 1
  sys.setprofile(count)
  try: fn(0)
  finally: sys.setprofile(None)
  return calls[0]

def realized(*shape: int, grad: bool = False) -> Tensor:
  return Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32), requires_grad=grad).realize()

def cases() -> dict[str, Callable[[int], object]]:
  """Each case builds its graph; it takes the call's number (bench_clock.per_call's), which it does not need."""
  x, y, row = realized(4, 16), realized(4, 16), realized(16)
  w, xg = realized(16, 8, grad=True), realized(4, 16, grad=True)
  image, conv, norm = realized(1, 16, 14, 14), nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm(16)
  conv.weight.realize()
  labels = Tensor(np.zeros(4, dtype=np.int32)).realize()
  params = [realized(16, 8, grad=True) for _ in range(4)]
  opt = SGD(params, lr=0.01, momentum=0.9)
  for p in params: p.grad = realized(16, 8)
  def sgd_update_graph(_: int) -> None:
    # built and dropped (the parameters and momenta back on their buffers, their assigns gone): the same graph each call
    written = params + opt.bufs
    before = [t.lazydata for t in written]
    opt.schedule_step()
    for t, ld in zip(written, before):
      state.pending.pop(t._assigned_at, None)
      t.lazydata, t._assigned_at = ld, None
  return {
    "x * 2.0": lambda _: x * 2.0,
    "2.0 - x": lambda _: 2.0 - x,
    "x + y": lambda _: x + y,
    "x + row (broadcast)": lambda _: x + row,
    "x * y (grad)": lambda _: xg * y,
    "x.relu()": lambda _: x.relu(),
    "x.exp()": lambda _: x.exp(),
    "x.reshape(16, 4)": lambda _: x.reshape(16, 4),
    "x.permute(1, 0)": lambda _: x.permute(1, 0),
    "row.expand(4, 16)": lambda _: row.expand(4, 16),
    "x.sum(1)": lambda _: x.sum(1),
    "x.max(1)": lambda _: x.max(1),
    "x @ w": lambda _: x @ w,
    "conv2d 3x3": lambda _: conv(image),
    "batchnorm (eval)": lambda _: norm(image),
    "cross_entropy": lambda _: x.cross_entropy(labels),
    "SGD momentum step graph (4 params)": sgd_update_graph,
  }

def resnet50_build_ms(calls: int) -> float:
  sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
  import resnet
  Tensor.manual_seed(0)
  model = resnet.resnet50()
  image = realized(1, 3, 224, 224)
  return bench_clock.per_call(lambda _: model(image), calls, runs=3) / 1e3

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--calls", type=int, default=300)
  ap.add_argument("--only", default="")
  ap.add_argument("--no-resnet", action="store_true")
  ap.add_argument("--threads", type=int, default=1)
  args = bench_clock.setup(ap)
  print(f"{'case':38s} {'us':>8s} {'calls':>7s}")
  for name, fn in cases().items():
    if args.only in name: print(f"{name:38s} {bench_clock.per_call(fn, args.calls):8.2f} {python_calls(fn):7d}")
  if not args.no_resnet and args.only in "resnet50":
    print(f"{'ResNet50 b1 forward graph (ms)':38s} {resnet50_build_ms(5):8.2f}")

if __name__ == "__main__":
  main()
