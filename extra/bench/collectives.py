"""Collective bandwidth: all_reduce over CPU:0..N-1 in one process (ring and naive), and all_reduce, all_gather and
reduce_scatter over MPI ranks, each next to a reference measured in the same run on numpy arrays of the same size.

Usage: python extra/bench/collectives.py [--devices 4] [--max-mb 64] [--mpi-max-mb 256] [--ranks 2] [--no-mpi]
                                         [--mpi-only]

Bandwidth is the size of the tensor (reduced, gathered or scattered) over the time of one call (nccl-tests' "algbw"),
best of a few runs.
* In one process: every device holds a float32 vector; `all_reduce(stack(...))` leaves the sum on every device.
  ring and naive build, schedule and run the graph on every call (what eager code pays); jit replays the kernels and
  copies that TinyJit captured (what a jitted training step pays), with the RING knob's default choice.
  Reference: numpy summing the same N arrays into N outputs (what the devices' memory must at least move).
* Over MPI (--ranks ranks started with mpiexec by this script, 1 KB to --mpi-max-mb): all_reduce, all_gather and
  reduce_scatter of `lazytensor.parallel.distributed` on a Tensor next to mpi4py's own Allreduce, Allgather and
  Reduce_scatter_block on numpy arrays; us per call of calls back to back, the ratio of lazytensor's speed to
  mpi4py's, and whether each size meets issue 29's goal: up to 64 KB, a time per call at most 3x mpi4py's; from 1 MB
  up, a speed at least 0.8x mpi4py's. --small-only: the three eager collectives up to 64 KB (medians, each next to
  mpi4py's), then small all-reduces as the engine runs them (small_in_engine); --clock cpu times the calling thread.
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_clock
import numpy as np

SIZES = [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28]  # bytes

def repeats_for(nbytes: int) -> int: return 20 if nbytes <= 1 << 20 else 3

def gbps(nbytes: int, seconds: float) -> float: return nbytes / seconds / 1e9

def in_one_process(devices: int, sizes: list[int]) -> None:
  names = [f"CPU:{i}" for i in range(devices)]
  print(f"all_reduce over {devices} devices of one process (GB/s; ratio to numpy's sum of the same arrays)")
  print(f"{'size':>8} {'ring':>8} {'naive':>8} {'jit':>8} {'numpy':>8} {'ring/np':>8} {'naive/np':>9} {'jit/np':>7}")
  for nbytes in sizes:
    def best(fn: Callable[[], object], n: int = nbytes) -> float:
      return bench_clock.best_time(fn, repeats_for(n), collect=True)
    times = {name: best(lambda ring=ring, n=nbytes // 4: _lazytensor_all_reduce(names, n, ring))
             for name, ring in (("ring", 0), ("naive", 1 << 62))}
    times["jit"] = best(_jitted_all_reduce(names, nbytes // 4))
    ref = best(lambda n=nbytes // 4: _numpy_all_reduce(len(names), n))
    _numpy_arrays.clear()
    cols = ("ring", "naive", "jit")
    rates = " ".join(f"{gbps(nbytes, times[c]):8.3f}" for c in cols)
    ratios = " ".join(f"{ref / times[c]:{w}.2f}x" for c, w in zip(cols, (8, 8, 6)))
    print(f"{_size(nbytes):>8} {rates} {gbps(nbytes, ref):8.3f} {ratios}")

def _lazytensor_all_reduce(names: list[str], n: int, ring: int) -> None:
  """One all-reduce of new buffers (a graph realized before would be found already computed and not run again)."""
  from lazytensor import Context, Tensor
  from lazytensor.parallel.collectives import all_reduce, stack
  s = stack([Tensor.empty(n, device=d) for d in names])
  with Context(RING=ring): all_reduce(s).realize()

def _jitted_all_reduce(names: list[str], n: int) -> Callable[[], object]:
  """A TinyJit of one all-reduce, replayed on one stack (a replay runs its kernels and copies again)."""
  from lazytensor import Tensor, TinyJit
  from lazytensor.parallel.collectives import all_reduce, stack
  a, b = (stack([Tensor.full((n,), float(i + k), device=d).contiguous() for i, d in enumerate(names)]).realize()
          for k in (0, 1))
  step = TinyJit(lambda x: all_reduce(x).realize())
  step(a)
  step(b)  # captured on new inputs: on the same ones, everything would already be computed
  assert step.items, "nothing was captured"
  return lambda: step(a)

_numpy_arrays: dict[tuple[int, int], tuple[list[np.ndarray], list[np.ndarray]]] = {}

def _numpy_all_reduce(devices: int, n: int) -> None:
  """The same sums with numpy: each of `devices` outputs gets the sum of `devices` arrays."""
  ins, outs = _numpy_arrays.setdefault((devices, n), ([np.ones(n, np.float32) for _ in range(devices)],
                                                      [np.empty(n, np.float32) for _ in range(devices)]))
  for o in outs:
    np.add(ins[0], ins[1], out=o)
    for a in ins[2:]: np.add(o, a, out=o)

# the collectives measured over MPI: lazytensor's name, mpi4py's, and the elements per rank in and out for a size of n
# elements (nccl-tests' sizes: the reduced tensor, the gathered result, the tensor scattered)
MPI_COLLECTIVES: dict[str, tuple[str, Callable[[int, int], tuple[int, int]]]] = {
  "all_reduce": ("Allreduce", lambda n, ranks: (n, n)),
  "all_gather": ("Allgather", lambda n, ranks: (n // ranks, n)),
  "reduce_scatter": ("Reduce_scatter_block", lambda n, ranks: (n, n // ranks)),
}

# issue 29's goals over MPI: from GOAL_SPEED_FROM bytes up at least GOAL_SPEED of mpi4py's speed; up to GOAL_LATENCY_TO
# bytes at most GOAL_LATENCY times mpi4py's time a call
GOAL_SPEED_FROM, GOAL_SPEED, GOAL_LATENCY_TO, GOAL_LATENCY = 1 << 20, 0.8, 1 << 16, 3.0

def over_mpi(sizes: list[int]) -> None:
  from mpi4py import MPI

  from lazytensor.parallel import distributed as dist
  dist.init()
  comm, rank = MPI.COMM_WORLD, dist.rank()
  for name, (theirs, counts) in MPI_COLLECTIVES.items():
    if rank == 0:
      print(f"\n{name} over {dist.world_size()} MPI ranks: us per call (back to back), GB/s, lazytensor's speed over "
            f"mpi4py's {theirs} on numpy arrays, and the goal: up to {_size(GOAL_LATENCY_TO)} a time per call at most "
            f"{GOAL_LATENCY:g}x mpi4py's, from {_size(GOAL_SPEED_FROM)} a speed at least {GOAL_SPEED:g}x")
      print(f"{'size':>8} {'us':>9} {'mpi4py us':>10} {'lazytensor':>11} {'mpi4py':>8} {'ratio':>7}  goal")
    for nbytes in sizes:
      n_in, n_out = counts(nbytes // 4, dist.world_size())
      lt, mp = map(min, _mpi_pair(name, theirs, n_in, n_out, nbytes, comm))
      if rank == 0:
        print(f"{_size(nbytes):>8} {lt * 1e6:9.1f} {mp * 1e6:10.1f} {gbps(nbytes, lt):11.3f} {gbps(nbytes, mp):8.3f} "
              f"{mp / lt:6.2f}x  {goal(nbytes, lt, mp)}")

def small_eager(sizes: list[int]) -> None:
  """For each collective and each size up to GOAL_LATENCY_TO: the eager call of lazytensor.parallel.distributed on a
  Tensor and mpi4py's own on numpy arrays, the median us per call of runs of calls back to back, the ratio and whether
  the eager call is within GOAL_LATENCY of mpi4py's time; then the same of the fastest runs (on a shared host, the
  runs where the load let both ranks run)."""
  from mpi4py import MPI

  from lazytensor.parallel import distributed as dist
  dist.init()
  comm, rank = MPI.COMM_WORLD, dist.rank()
  if rank == 0:
    print(f"\neager collectives up to {_size(GOAL_LATENCY_TO)} over {dist.world_size()} ranks: us per call (median of "
          f"runs of calls back to back), mpi4py's on numpy arrays, lazytensor's time over mpi4py's (goal: at most "
          f"{GOAL_LATENCY:g}x)")
    print(f"{'':>24} {'median':-^31} {'fastest run':-^31}")
    print(f"{'collective':>15} {'size':>8}" + f" {'eager':>8} {'mpi4py':>8} {'ratio':>6}  {'goal':<7}" * 2)
  for name, (theirs, counts) in MPI_COLLECTIVES.items():
    for nbytes in (s for s in sizes if s <= GOAL_LATENCY_TO):
      n_in, n_out = counts(nbytes // 4, dist.world_size())
      runs = _mpi_pair(name, theirs, n_in, n_out, nbytes, comm)
      if rank == 0:
        cols = [f"{lt * 1e6:8.1f} {mp * 1e6:8.1f} {lt / mp:5.1f}x  {'met' if lt <= GOAL_LATENCY * mp else 'NOT met':<7}"
                for lt, mp in (map(statistics.median, runs), map(min, runs))]
        print(f"{name:>15} {_size(nbytes):>8} {' '.join(cols)}")

# collectives in one engine step each, in one realize or one TinyJit replay (in_engine)
IN_ENGINE_CALLS = 32

def small_in_engine(sizes: list[int]) -> None:
  """For each size up to GOAL_LATENCY_TO: mpi4py's Allreduce, lazytensor.parallel.distributed.all_reduce (an eager
  call) and an all-reduce as the engine runs one over a mesh across the ranks (a device each: runtime/remote.py), N at
  once: realized together (a schedule) and as a TinyJit replay. In-engine latency per all-reduce = (the time of the
  N all-reduces of x + 1 - that of the N x + 1 alone) / N. Each with its ratio to mpi4py's time and whether it is
  within GOAL_LATENCY of it."""
  from mpi4py import MPI

  from lazytensor import DeviceMesh
  from lazytensor.parallel import distributed as dist
  dist.init(devices_per_rank=1)  # from here on CPU:r is rank r's, and each rank's tensors live there
  comm, rank, n = MPI.COMM_WORLD, dist.rank(), dist.world_size()
  mesh = DeviceMesh(tuple(f"CPU:{r}" for r in range(n)), names=("dp",))
  if rank == 0:
    print(f"\nall_reduce up to {_size(GOAL_LATENCY_TO)} over {n} ranks, us per all-reduce (median of runs of calls "
          f"back to back), and lazytensor's time over mpi4py's (goal: at most {GOAL_LATENCY:g}x). eager: "
          f"distributed.all_reduce on a Tensor; schedule: {IN_ENGINE_CALLS} all-reduces over a mesh across the ranks "
          "realized at once; jit: the same as a TinyJit replay (the time each adds to the step)")
    print(f"{'size':>8} {'mpi4py':>8} {'eager':>8} {'ratio':>6} {'schedule':>9} {'ratio':>6} {'jit':>8} {'ratio':>6}  "
          "goal (eager, schedule, jit)")
  for nbytes in sizes:
    if nbytes > GOAL_LATENCY_TO: continue
    src, dst = np.full(nbytes // 4, rank + 1, np.float32), np.empty(nbytes // 4, np.float32)
    t = _on_own_device(src, rank)
    sched, jit = _engine_all_reduces(mesh, nbytes // 4)
    mp, eager = per_call([lambda s=src, d=dst: comm.Allreduce(s, d), lambda t=t: dist.all_reduce(t)], nbytes, comm,
                         statistic="median")
    s_with, s_without, j_with, j_without = per_call([*sched, *jit], nbytes, comm, statistic="median", calls=10)
    times = [eager, (s_with - s_without) / IN_ENGINE_CALLS, (j_with - j_without) / IN_ENGINE_CALLS]
    if rank == 0:
      cols = " ".join(f"{us * 1e6:{w}.1f} {us / mp:5.1f}x" for us, w in zip(times, (8, 9, 8)))
      met = ", ".join("met" if us <= GOAL_LATENCY * mp else "NOT met" for us in times)
      print(f"{_size(nbytes):>8} {mp * 1e6:8.1f} {cols}  {met}")

def _on_own_device(arr: np.ndarray, rank: int) -> Any:
  from lazytensor import Tensor
  return Tensor(arr, device=f"CPU:{rank}").realize()

def _engine_all_reduces(mesh: Any, n: int) -> tuple[list[Callable[[], object]], list[Callable[[], object]]]:
  """(with, without) of IN_ENGINE_CALLS all-reduces of x + 1 over the mesh: realized at once on new buffers (a
  graph realized before would be found computed), and as TinyJit replays on one set of inputs."""
  from lazytensor import Tensor, TinyJit
  from lazytensor.parallel.collectives import stack
  def stacks(fill: float | None) -> list[Tensor]:
    def value(d: str) -> Tensor: return Tensor.empty(n, device=d) if fill is None else Tensor.full((n,), fill, device=d)
    return [stack([value(d) for d in mesh.devices], mesh) for _ in range(IN_ENGINE_CALLS)]
  def reduced(*xs: Tensor) -> list[Tensor]:
    # a sum over the devices' dimension: the multi pass's all-reduce, as data parallelism's gradients (collectives'
    # all_reduce of x + 1 first checks that it is a stack on the mesh, by a multi pass of x + 1: 150-200 us a call here)
    outs = [(x + 1).sum(0) for x in xs]
    Tensor.realize(*outs)
    return outs
  def alone(*xs: Tensor) -> list[Tensor]:
    outs = [x + 1 for x in xs]
    Tensor.realize(*outs)
    return outs
  sched: list[Callable[[], object]] = [lambda fn=fn: fn(*stacks(None)) for fn in (reduced, alone)]
  jit: list[Callable[[], object]] = []
  for fn in (reduced, alone):
    step, (a, b) = TinyJit(fn), ([x.contiguous().realize() for x in stacks(float(k))] for k in (1, 2))
    step(*a)
    step(*b)  # captured on new inputs: on the same ones, everything would already be computed
    assert step.items, "nothing was captured"
    jit.append(lambda step=step, a=a: step(*a))
  return sched, jit

def goal(nbytes: int, ours: float, theirs: float) -> str:
  """Whether a size meets its goal (seconds per call of lazytensor's collective and of mpi4py's)."""
  if nbytes <= GOAL_LATENCY_TO:
    return f"{ours / theirs:.1f}x mpi4py's time: {'met' if ours <= GOAL_LATENCY * theirs else 'NOT met'}"
  if nbytes >= GOAL_SPEED_FROM: return "met" if theirs / ours >= GOAL_SPEED else "NOT met"
  return "-"

def _mpi_pair(name: str, theirs: str, n_in: int, n_out: int, nbytes: int,
              comm: Any) -> tuple[list[float], list[float]]:
  """Seconds per call of lazytensor's collective on a Tensor and of mpi4py's on numpy arrays of the same sizes, in
  each of timed_runs' runs."""
  from lazytensor import Tensor
  from lazytensor.parallel import distributed as dist
  src, dst = np.full(n_in, comm.Get_rank() + 1, np.float32), np.empty(n_out, np.float32)
  t = Tensor(src).realize()
  ours, mpi = getattr(dist, name), getattr(comm, theirs)
  lt, mp = timed_runs([lambda: ours(t), lambda: mpi(src, dst)], nbytes, comm)
  return lt, mp

def per_call(fns: list[Callable[[], object]], nbytes: int, comm: Any, statistic: str = "best",
             calls: int | None = None) -> list[float]:
  """For each function, the best (or the median) of timed_runs' runs: seconds per call."""
  pick = min if statistic == "best" else statistics.median
  return [pick(r) for r in timed_runs(fns, nbytes, comm, calls)]

def timed_runs(fns: list[Callable[[], object]], nbytes: int, comm: Any, calls: int | None = None) -> list[list[float]]:
  """For each function, the seconds per call of each of a few runs of calls back to back (`calls`, or about 16 MB
  moved in each, at most 200 calls), each run started together on every rank by a barrier, as OSU's micro-benchmarks
  do. The functions' runs take turns, so that a change in the load of a shared machine falls on each alike."""
  calls = calls or max(1, min(200, (16 << 20) // nbytes))
  runs: list[list[float]] = [[] for _ in fns]
  for fn in fns: fn()
  for _ in range(5 if nbytes < 1 << 26 else 3):
    for i, fn in enumerate(fns):
      gc.collect()  # the buffers of the last run back in the allocator before this one allocates
      comm.Barrier()
      start = bench_clock.now()
      for _ in range(calls): fn()
      runs[i].append((bench_clock.now() - start) / calls)
  # every rank takes rank 0's figures, so that all ranks agree on what to print
  return comm.bcast(runs)

def _size(nbytes: int) -> str:
  for unit, div in (("MB", 1 << 20), ("KB", 1 << 10)):
    if nbytes >= div: return f"{nbytes // div}{unit}"
  return f"{nbytes}B"

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--devices", type=int, default=4)
  ap.add_argument("--max-mb", type=int, default=64, help="largest size in MB in one process (256 needs ~3 GB with 4 "
                  "devices)")
  ap.add_argument("--mpi-max-mb", type=int, default=256, help="largest size in MB over MPI (~1 GB a rank at 256)")
  ap.add_argument("--ranks", type=int, default=2, help="MPI ranks")
  ap.add_argument("--no-mpi", action="store_true", help="skip the MPI part")
  ap.add_argument("--mpi-only", action="store_true", help="skip the part in one process")
  bench_clock.add_argument(ap)
  ap.add_argument("--small-only", action="store_true", help="over MPI, only the small collectives: each eager and "
                  "mpi4py's, and all-reduces in the engine")
  ap.add_argument("--mpi", action="store_true", help=argparse.SUPPRESS)  # set when started by mpiexec below
  args = ap.parse_args()
  # small collectives run on the calling thread (one device a rank queues nothing; kernels this small use one thread)
  if args.clock == "cpu": bench_clock.now = time.thread_time
  if args.mpi:
    sizes = [s for s in SIZES if s <= args.mpi_max_mb << 20]
    if args.small_only: small_eager(sizes)
    else: over_mpi(sizes)
    small_in_engine(sizes)
    return
  if not args.mpi_only: in_one_process(args.devices, [s for s in SIZES if s <= args.max_mb << 20])
  if args.no_mpi: return
  mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
  if mpiexec is None:
    print("\nmpiexec not found: pip install mpi4py mpich for the MPI part")
    return
  root = Path(__file__).resolve().parents[2]
  subprocess.run([mpiexec, "-n", str(args.ranks), sys.executable, __file__, "--mpi", "--mpi-max-mb",
                  str(args.mpi_max_mb), "--clock", args.clock, *(["--small-only"] * args.small_only)], check=True,
                 env={**os.environ, "PYTHONPATH": str(root)})

if __name__ == "__main__":
  main()
