"""What checking indices costs (schedule/index_check.py): each case with CHECK_INDICES=1 and =0, in turns on the same
inputs so that the load of a shared machine hits both alike; the best of each and their ratio.

Cases: a table lookup (`table[idx]`, one gather kernel), and extra/bench/scatter.py's: nn.Embedding forward + backward
(a gather, a fill and a scatter), scatter_reduce "sum" and scatter (the last write wins). Two timings of each:
  step     what a user waits for: building the graph, scheduling (a cache hit after the first), the kernels, and
           reading the flags;
  kernels  the kernels alone, their compiled programs called on the buffers of one schedule.
Times are the process's CPU time (`time.process_time`: a step preempted by other processes of a loaded machine does not
count the wait; run with THREADS=1, or the spinning pool threads count too), or the clock with --wall.

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
from lazytensor.engine.realize import get_runner, run_schedule
from lazytensor.helpers import THREADS, Context
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops

Step = Callable[[np.ndarray, np.ndarray], Tensor]

def cases(v: int, d: int) -> dict[str, Step]:
  rng = np.random.default_rng(0)
  table = Tensor(rng.standard_normal((v, d)).astype(np.float32)).realize()
  emb = nn.Embedding(v, d)
  emb.weight.requires_grad_()
  def embedding(idx: np.ndarray, up: np.ndarray) -> Tensor:
    return (emb(Tensor(idx[:, 0])) * Tensor(up)).sum().gradient(emb.weight)[0]
  return {
    "table[idx]": lambda idx, up: table[Tensor(idx[:, 0])],
    "nn.Embedding forward+backward": embedding,
    "scatter_reduce sum": lambda idx, up: Tensor.zeros(v, d).scatter_reduce(0, Tensor(idx), Tensor(up), "sum"),
    "scatter (last write)": lambda idx, up: table.scatter(0, Tensor(idx), Tensor(up)),
  }

def step_time(step: Step, idx: np.ndarray, up: np.ndarray, check: bool, clock: Callable[[], float]) -> float:
  with Context(CHECK_INDICES=int(check)):
    st = clock()
    step(idx, up).realize()
    return clock() - st

def kernels(step: Step, idx: np.ndarray, up: np.ndarray, check: bool) -> Callable[[Callable[[], float]], float]:
  """The kernels of one schedule of the step, run once (compiled, inputs computed); returns a timer of them."""
  with Context(CHECK_INDICES=int(check), SCHEDULE_CACHE=0):
    items, _ = create_schedule([step(idx, up).lazydata])
  run_schedule(items)
  runs = [(get_runner(bufs[0].device, ast), bufs, vals) for ast, bufs, vals in items if ast.op is Ops.SINK]
  def timed(clock: Callable[[], float]) -> float:
    st = clock()
    for runner, bufs, vals in runs: runner(bufs, vals=vals)
    return clock() - st
  return timed

def compare(name: str, step: Step, v: int, d: int, n: int, rounds: int, clock: Callable[[], float]) -> None:
  rng = np.random.default_rng(1)
  new_inputs = lambda: (rng.integers(0, v, (n, d)).astype(np.int32), rng.standard_normal((n, d)).astype(np.float32))
  best = {(what, check): float("inf") for what in ("step", "kernels") for check in (True, False)}
  idx, up = new_inputs()
  timers = {check: kernels(step, idx, up, check) for check in (True, False)}
  for r in range(rounds + 1):  # round 0 compiles and warms up
    idx, up = new_inputs()
    for check in ((True, False) if r % 2 else (False, True)):
      t_step, t_kernels = step_time(step, idx, up, check, clock), timers[check](clock)
      if r:
        best["step", check] = min(best["step", check], t_step)
        best["kernels", check] = min(best["kernels", check], t_kernels)
  for what in ("step", "kernels"):
    on, off = best[what, True], best[what, False]
    print(f"{name:32s} {what:8s} checked {on * 1e3:8.3f} ms  unchecked {off * 1e3:8.3f} ms  ratio {on / off:.3f}")

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--vocab", type=int, default=32000)
  ap.add_argument("--dim", type=int, default=256)
  ap.add_argument("--tokens", type=int, default=4096)
  ap.add_argument("--rounds", type=int, default=10)
  ap.add_argument("--wall", action="store_true", help="time by the clock, not the process's CPU time")
  args = ap.parse_args()
  v, d, n = args.vocab, args.dim, args.tokens
  print(f"{platform.processor() or platform.machine()}, THREADS={THREADS.value}: a {v}x{d} table, {n} indices")
  for name, step in cases(v, d).items():
    compare(name, step, v, d, n, args.rounds, time.perf_counter if args.wall else time.process_time)

if __name__ == "__main__":
  main()
