"""Pipeline stages that overlap in time (lazytensor/parallel/pipeline.py): one training step of an MLP cut into stages
on CPU:0..p-1, each stage's devices running the actions of one round on their own queues (QUEUES=1) against the same
step run in order on the calling thread (QUEUES=0: each kernel after the last, as when the runner realized one action
at a time), one thread per device (THREADS=1), the two alternated run by run. Results are bit-identical either way
(test/test_parallel_pipe.py).

Usage: python extra/bench/pipeline.py [--stages 2 4] [--layers 4] [--width 1024] [--batch 256] [--micro 8] [--runs 3]

For each schedule it prints the step time both ways, the speedup, and two ideals from the timeline of unit costs
(F, B, W one unit, an unsplit B two): the timeline's, p (1 - bubble fraction); and the rounds', the runner's steps,
each waiting for its longest action (the busy units over the sum of those longest actions: 1F1B loses about a fifth).
On a host with fewer cores than stages the cores bound it too: 2 cores give at most 2x.

On a host shared with other jobs the wall time measures how much of the cores they leave (the kernel's fair share goes
to each session, whatever its threads), so no overlap shows. `--clock cpu` reads threads' CPU time instead (Linux
/proc/self/task/*/schedstat, in ns): a step in order is the calling thread's; overlapped, the calling thread's (building
and scheduling the graphs, waiting for none) plus, for each schedule run, its workers' longest (at least their sum over
the host's cores): the step's time on this host were its cores free for it.
"""
from __future__ import annotations

import argparse
import os
import threading
from collections.abc import Callable

import bench_clock
import numpy as np
from devices import host

from lazytensor import Context, DeviceMesh, Tensor, nn
from lazytensor.engine import realize
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.parallel.pipeline import Pipeline, Schedule, gpipe, one_f_one_b, zero_bubble_h1
from lazytensor.schedule.scheduler import ScheduleItem


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

class CriticalPath:
  """A step's time from its threads' CPU times: the calling thread's, plus, per schedule run (a listener of
  engine/realize.run_schedule, called once its workers are done), the longest of the queue workers' CPU time in it, or
  their sum over the host's cores if more."""
  def __init__(self) -> None: self.last, self.total = dict[int, int](), 0
  def workers(self) -> dict[int, int]:
    return {t.native_id: cpu_ns(t.native_id) for t in threading.enumerate()
            if t.name.startswith("lazytensor queue") and t.native_id is not None}
  def __call__(self, items: list[ScheduleItem]) -> None:
    now = self.workers()
    spent = [ns - self.last.get(t, 0) for t, ns in now.items()]
    self.last, self.total = now, self.total + max([*spent, sum(spent) // (os.cpu_count() or 1)])
  def time(self, fn: Callable[[], object]) -> float:
    self.last, self.total, me = self.workers(), 0, threading.get_native_id()
    start = cpu_ns(me)
    realize.run_listeners.append(self)
    try: fn()
    finally: realize.run_listeners.remove(self)
    return (cpu_ns(me) - start + self.total) * 1e-9

def best_times(fns: list[Callable[[], object]], runs: int, clock: str) -> list[float]:
  """Each function's best time, the runs alternated; by wall time or by CriticalPath (clock "cpu")."""
  if clock == "wall": return [t for t in bench_clock.best_times(list(fns), runs) if t is not None]
  path = CriticalPath()
  for fn in fns: fn()  # warm up
  return [min(ts) for ts in zip(*[[path.time(fn) for fn in fns] for _ in range(runs)])]

def ideals(schedule: Schedule) -> tuple[float, float]:
  """The speedup over running every action in order that the schedule's timeline allows, and that the runner's rounds
  (each as long as its longest action) allow."""
  busy = sum(schedule.cost(a) for row in schedule.actions for a in row)
  stepped = sum(max(schedule.cost(a) for _, a in step) for step in schedule.rounds())
  return busy / schedule.makespan(), busy / stepped

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--stages", type=int, nargs="+", default=[2, 4])
  ap.add_argument("--layers", type=int, default=4, help="Linear(width, width) layers per stage")
  ap.add_argument("--width", type=int, default=1024)
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--micro", type=int, default=8, help="micro-batches")
  ap.add_argument("--runs", type=int, default=3)
  ap.add_argument("--threads", type=int, default=1, help="CPU threads per kernel (THREADS)")
  args = bench_clock.setup(ap)
  print(f"host: {host()}")
  print(f"{args.layers} x Linear({args.width}, {args.width}) per stage, batch {args.batch}, {args.micro} "
        f"micro-batches, THREADS={args.threads}, clock {args.clock}")
  for stages in args.stages:
    for make in (gpipe, one_f_one_b, zero_bubble_h1):
      schedule = make(stages, args.micro)
      with Context(THREADS=args.threads):
        step = step_of(schedule, args.layers, args.width, args.batch)
        serial, overlapped = best_times([queued(step, False), queued(step, True)], args.runs, args.clock)
      ideal, stepped = ideals(schedule)
      print(f"{schedule.name:6s} {stages} stages: in order {serial * 1e3:7.1f} ms  overlapped "
            f"{overlapped * 1e3:7.1f} ms  {serial / overlapped:5.2f}x   ideal: timeline {ideal:4.2f}x "
            f"(bubble {schedule.bubble_fraction():5.1%}), rounds {stepped:4.2f}x")

if __name__ == "__main__":
  main()
