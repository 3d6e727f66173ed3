"""Devices that work at once (engine/queues.py): the same multi-device work with each CPU device's steps on a thread
of its own (QUEUES=1) and run in order on the calling thread (QUEUES=0), one thread per device (THREADS=1), measured
back to back in one run. Results are bit-identical either way (test/test_queues.py); this is what the overlap buys.

Usage: python extra/bench/devices.py [--devices 2] [--width 1024] [--batch 512] [--runs 5]

* DDP step: an MLP (width -> 2 width -> width -> 10) replicated on every device, each batch sharded along its first
  axis, forward, backward (the weight gradients all-reduced by the multi pass) and an SGD step, eager and replayed by
  TinyJit. Goal (issue 29): >= 1.6x over 2 devices on 2 cores.
* all_reduce of a float32 vector over 4 devices (ring for large sizes): the chunks of the ring overlap.
Prints the host (`lscpu` model name) and its load, since on a shared machine the other jobs take the cores.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
from collections.abc import Callable

import bench_clock
import numpy as np


def host() -> str:
  try: model = next(line.split(":", 1)[1].strip() for line in subprocess.run(
      ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name"))
  except (OSError, StopIteration): model = platform.processor()
  return f"{model}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"

def ddp_step(devices: tuple[str, ...], width: int, batch: int, jit: bool) -> Callable[[], object]:
  from lazytensor import Tensor, TinyJit, nn
  from lazytensor.nn.optim import SGD
  from lazytensor.nn.state import get_parameters
  Tensor.manual_seed(0)
  layers = [nn.Linear(width, 2 * width), nn.Linear(2 * width, width), nn.Linear(width, 10)]
  params = get_parameters(layers)
  for p in params: p.shard_(devices)
  opt = SGD(params, lr=0.01)
  rng = np.random.default_rng(0)
  xs = [Tensor(rng.standard_normal((batch, width), dtype=np.float32)).shard(devices, 0).realize() for _ in range(2)]
  ys = [Tensor(rng.integers(0, 10, batch)).shard(devices, 0).realize() for _ in range(2)]
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      h = x
      for i, layer in enumerate(layers): h = layer(h).relu() if i < len(layers) - 1 else layer(h)
      loss = h.cross_entropy(y)
      loss.backward()
      opt.step()
    return loss.realize()
  run = TinyJit(step) if jit else step
  calls = iter(range(1 << 30))
  def call() -> object:
    i = next(calls) % 2  # fresh inputs: the other batch each call
    return run(xs[i], ys[i])
  return call

def all_reduce(devices: tuple[str, ...], n: int) -> Callable[[], object]:
  from lazytensor import Tensor
  from lazytensor.parallel.collectives import all_reduce as reduce_all
  from lazytensor.parallel.collectives import stack
  pieces = [Tensor(np.full(n, i, np.float32), device=d).realize() for i, d in enumerate(devices)]
  return lambda: reduce_all(stack(pieces)).realize()

def compare(name: str, make: Callable[[], Callable[[], object]], runs: int) -> None:
  from lazytensor import Context
  times = {}
  for queues in (False, True, False, True):  # alternated: a noisy moment hits both
    with Context(QUEUES=queues):
      fn = make()
      t = bench_clock.best_time(fn, runs, collect=True)
    times[queues] = min(times.get(queues, float("inf")), t)
  print(f"{name:44s} serial {times[False] * 1e3:8.2f} ms   queued {times[True] * 1e3:8.2f} ms   "
        f"{times[False] / times[True]:5.2f}x")

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--devices", type=int, default=2)
  ap.add_argument("--width", type=int, default=1024)
  ap.add_argument("--batch", type=int, default=512)
  ap.add_argument("--runs", type=int, default=5)
  ap.add_argument("--threads", type=int, default=1, help="CPU threads per kernel (THREADS)")
  args = bench_clock.setup(ap)
  from lazytensor import Context
  print(f"host: {host()}")
  devices = tuple(f"CPU:{i}" for i in range(args.devices))
  with Context(THREADS=args.threads):
    for jit in (False, True):
      compare(f"DDP step over {args.devices} devices{' (TinyJit)' if jit else ''}, width {args.width}",
              lambda jit=jit: ddp_step(devices, args.width, args.batch, jit), args.runs)
    four = tuple(f"CPU:{i}" for i in range(4))
    for n in (1 << 18, 1 << 22):
      compare(f"all_reduce over 4 devices, {n * 4 >> 20} MiB", lambda n=n: all_reduce(four, n), args.runs)

if __name__ == "__main__":
  main()
