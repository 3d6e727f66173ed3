"""What checking indices costs (engine/index_check.py): each case run with CHECK_INDICES=1 and =0 in turns, on the same
inputs, so that the load of a shared machine hits both alike; the best step of each and their ratio, in seconds of
the process's CPU time (`time.process_time`: a step preempted by another process on a loaded machine does not count the
wait; run with THREADS=1, or the spinning pool threads count too) or, with --wall, of the clock.

Cases: a table lookup (`table[idx]`, one gather kernel), and extra/bench/scatter.py's: nn.Embedding forward + backward
(a gather, a fill and a scatter), scatter_reduce "sum" and scatter (the last write wins). A step is what a user waits
for: building the graph, scheduling (a cache hit after the first), the kernels, and reading the flags.

Usage: python extra/bench/index_check.py [--vocab V] [--dim D] [--tokens N] [--rounds R] [--wall]
  e.g. --vocab 50000 --dim 256 --tokens 8192, or GPT-2's embedding: --vocab 50257 --dim 768 --tokens 8192.
"""
from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable

import numpy as np

from lazytensor import Tensor, nn
from lazytensor.helpers import THREADS, Context

Step = Callable[[], Tensor]

def cases(v: int, d: int, n: int) -> dict[str, Callable[[np.ndarray, np.ndarray], Step]]:
  rng = np.random.default_rng(0)
  table = Tensor(rng.standard_normal((v, d)).astype(np.float32)).realize()
  emb = nn.Embedding(v, d)
  emb.weight.requires_grad_()
  def embedding(idx: np.ndarray, up: np.ndarray) -> Step:
    return lambda: (emb(Tensor(idx[:, 0])) * Tensor(up)).sum().gradient(emb.weight)[0]
  return {
    f"table[idx] ({v}x{d} by {n})": lambda idx, up: lambda: table[Tensor(idx[:, 0])],
    "nn.Embedding forward+backward": embedding,
    "scatter_reduce sum": lambda idx, up: lambda: Tensor.zeros(v, d).scatter_reduce(0, Tensor(idx), Tensor(up), "sum"),
    "scatter (last write)": lambda idx, up: lambda: table.scatter(0, Tensor(idx), Tensor(up)),
  }

def timed(step: Step, check: bool, clock: Callable[[], float]) -> float:
  with Context(CHECK_INDICES=int(check)):
    st = clock()
    step().realize()
    return clock() - st

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--vocab", type=int, default=32000)
  ap.add_argument("--dim", type=int, default=256)
  ap.add_argument("--tokens", type=int, default=4096)
  ap.add_argument("--rounds", type=int, default=10)
  ap.add_argument("--wall", action="store_true", help="time by the clock, not the process's CPU time")
  args = ap.parse_args()
  clock = time.perf_counter if args.wall else time.process_time
  v, d, n = args.vocab, args.dim, args.tokens
  print(f"{platform.processor() or platform.machine()}, THREADS={THREADS.value}")
  rng = np.random.default_rng(1)
  for name, make in cases(v, d, n).items():
    best = {True: float("inf"), False: float("inf")}
    for r in range(args.rounds + 1):  # round 0 compiles
      idx, up = rng.integers(0, v, (n, d)).astype(np.int32), rng.standard_normal((n, d)).astype(np.float32)
      step = make(idx, up)
      for check in ((True, False) if r % 2 else (False, True)):
        t = timed(step, check, clock)
        if r: best[check] = min(best[check], t)
    print(f"{name:36s} checked {best[True] * 1e3:8.3f} ms  unchecked {best[False] * 1e3:8.3f} ms  "
          f"ratio {best[True] / best[False]:.3f}")

if __name__ == "__main__":
  main()
