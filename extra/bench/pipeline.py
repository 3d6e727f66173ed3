"""Pipeline stages that overlap in time (lazytensor/parallel/pipeline.py): one training step of an MLP cut into stages
on CPU:0..p-1, each stage's actions submitted to its devices' queues without waiting for them (QUEUES=1), against the
same step run in order on the calling thread (QUEUES=0: each kernel after the last), one thread per device
(THREADS=1), the two alternated run by run. Results are bit-identical either way (test/test_parallel_pipe.py).

Usage: python extra/bench/pipeline.py [--stages 2 4] [--layers 4] [--width 1024] [--batch 256] [--micro 8] [--runs 3]

For each schedule it prints, both ways, the best wall time of a step and its CPU time (all threads: the calling
thread's, which builds and schedules the graphs, and the queue workers', which run the kernels), and the ideal from
the timeline of unit costs (F, B, W one unit, an unsplit B two): p (1 - bubble fraction). On a host with fewer cores
than stages the cores bound it too: 2 cores give at most 2x.

On a host shared with other jobs the wall time measures how much of the cores they leave (the kernel's fair share goes
to each session, whatever its threads), so little overlap shows. The threads' CPU times (Linux
/proc/self/task/*/schedstat) give a bound instead: a step overlapped takes at least its busiest thread's CPU time, and
at least all threads' over the host's cores; in order, the calling thread's. That is the step's time on this host
were its cores free for it and the threads never waited for each other: an optimistic figure, printed beside the wall
time's.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import bench_clock
import numpy as np
from devices import host

from lazytensor import Context, DeviceMesh, Tensor, nn
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.parallel.pipeline import Pipeline, Schedule, gpipe, one_f_one_b, zero_bubble_h1


def step_of(schedule: Schedule, layers: int, width: int, batch: int) -> Callable[[], object]:
  """A training step (the gradients, then SGD: new weights each step, so nothing computed is found again) of `layers`
  Linear(width, width) with relu per stage, a stage per device, run by `schedule`."""
  Tensor.manual_seed(0)
  model = [[nn.Linear(width, width) for _ in range(layers)] for _ in range(schedule.stages)]
  opt = SGD(get_parameters(model), lr=1e-3)
  cut = [[f for layer in stage for f in (layer, Tensor.relu)] for stage in model]
  pipe = Pipeline(cut, DeviceMesh(tuple(f"CPU:{i}" for i in range(schedule.stages)), names=("pp",)),
                  lambda out, y: out.cross_entropy(y))
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((batch, width), dtype=np.float32)).realize()
  y = Tensor(rng.integers(0, 10, batch)).realize()
  def step() -> object:
    opt.zero_grad()
    loss = pipe.step(x, y, schedule)
    opt.step()
    return loss
  return step

def queued(step: Callable[[], object], queues: bool) -> Callable[[], object]:
  def run() -> object:
    with Context(QUEUES=queues): return step()
  return run

def cpu_ns(thread: int) -> int:
  """A thread's CPU time so far (its time on a core, in ns)."""
  with open(f"/proc/self/task/{thread}/schedstat") as f: return int(f.read().split()[0])

def workers() -> dict[int, int]:
  """The queue workers' CPU times so far, by thread."""
  return {t.native_id: cpu_ns(t.native_id) for t in threading.enumerate()
          if t.name.startswith("lazytensor queue") and t.native_id is not None}

@dataclass
class Run:
  """One step: its wall time, the calling thread's CPU time and each queue worker's, in seconds."""
  wall: float
  caller: float
  workers: list[float]

  @property
  def cpu(self) -> float: return self.caller + sum(self.workers)
  @property
  def bound(self) -> float:
    """The least time the threads' CPU times allow: the busiest thread's, and all of them over the host's cores."""
    return max([self.caller, *self.workers, self.cpu / (os.cpu_count() or 1)])

def timed(fn: Callable[[], object]) -> Run:
  me, before = threading.get_native_id(), workers()
  start, caller = time.perf_counter(), cpu_ns(me)
  fn()
  wall, caller = time.perf_counter() - start, cpu_ns(me) - caller
  return Run(wall, caller * 1e-9, [(ns - before.get(t, 0)) * 1e-9 for t, ns in workers().items()])

def best_runs(fns: list[Callable[[], object]], runs: int) -> list[Run]:
  """Each function's best wall time, with the CPU times of its run of the least bound; the runs alternated."""
  for fn in fns: fn()  # warm up
  got = zip(*[[timed(fn) for fn in fns] for _ in range(runs)])
  return [replace(min(rs, key=lambda r: r.bound), wall=min(r.wall for r in rs)) for rs in got]

def ideal(schedule: Schedule) -> float:
  """The speedup over running every action in order that the schedule's timeline allows."""
  return sum(schedule.cost(a) for row in schedule.actions for a in row) / schedule.makespan()

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--stages", type=int, nargs="+", default=[2, 4])
  ap.add_argument("--layers", type=int, default=4, help="Linear(width, width) layers per stage")
  ap.add_argument("--width", type=int, default=1024)
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--micro", type=int, default=8, help="micro-batches")
  ap.add_argument("--runs", type=int, default=3)
  ap.add_argument("--threads", type=int, default=1, help="CPU threads per kernel (THREADS)")
  args = ap.parse_args()
  bench_clock.set_threads(args.threads)
  print(f"host: {host()}")
  print(f"{args.layers} x Linear({args.width}, {args.width}) per stage, batch {args.batch}, {args.micro} "
        f"micro-batches, THREADS={args.threads}; ms per step: wall, CPU of all threads (of the calling thread), bound")
  for stages in args.stages:
    for make in (gpipe, one_f_one_b, zero_bubble_h1):
      schedule = make(stages, args.micro)
      with Context(THREADS=args.threads):
        step = step_of(schedule, args.layers, args.width, args.batch)
        serial, overlapped = best_runs([queued(step, False), queued(step, True)], args.runs)
      print(f"{schedule.name:6s} {stages} stages: in order {serial.wall * 1e3:6.1f} cpu {serial.cpu * 1e3:6.1f} | "
            f"overlapped {overlapped.wall * 1e3:6.1f} cpu {overlapped.cpu * 1e3:6.1f} ({overlapped.caller * 1e3:5.1f}) "
            f"bound {overlapped.bound * 1e3:6.1f} | {serial.wall / overlapped.wall:4.2f}x wall, "
            f"{serial.bound / overlapped.bound:4.2f}x bound; ideal {ideal(schedule):4.2f}x "
            f"(bubble {schedule.bubble_fraction():5.1%})")

if __name__ == "__main__":
  main()
