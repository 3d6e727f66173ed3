"""The eager path: what a user's call on small tensors costs end to end, in us per call, next to numpy and torch in
the same run, and where lazytensor's time goes, stage by stage.

Usage: python extra/bench/eager.py [--calls N] [--clock wall|cpu] [--no-stages]

Each case runs on new inputs at every call (new numpy arrays made into Tensors, or other realized tensors): a graph
built from the same tensors again is one interned node, already realized, so repeating an identical expression costs
nearly nothing and hides the real cost; that case is printed apart ("repeated"). The stage table wraps the functions
of each stage with a timer (about 0.2 us a wrapper, counted in the stage), inclusive: "schedule" holds the structure
walk, the schedule-cache lookup and the instance's new buffers; "run" holds the kernel-cache lookup, the allocation
and the call into the compiled function; "realize, rest" is realize's own bookkeeping.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import bench_clock

N = 16  # elements per tensor


class Stages:
  """Timers wrapped around the functions of each stage of an eager call (attributes of modules and classes, restored
  on exit), each adding up its time: inclusive, a stage's inner stages indented under it. They read the wall clock
  whatever --clock says: this thread's CPU time is a system call (about 1 us), which would swamp the stages it times."""
  def __init__(self, extra: tuple[tuple[str, Any, str], ...] = ()) -> None:
    self.total: dict[str, float] = {}
    self.extra = extra

  def wrap(self, name: str, owner: Any, attr: str) -> Callable[[], None]:
    inner = owner.__dict__[attr]
    total, now = self.total, time.perf_counter
    total.setdefault(name, 0.0)
    @functools.wraps(inner)
    def timed(*args: Any, **kwargs: Any) -> Any:
      start = now()
      try: return inner(*args, **kwargs)
      finally: total[name] += now() - start
    setattr(owner, attr, timed)
    return lambda: setattr(owner, attr, inner)

  @contextlib.contextmanager
  def timed(self) -> Iterator[dict[str, float]]:
    from lazytensor.engine import realize
    from lazytensor.frontend import tensor
    from lazytensor.runtime import device, ops_cpu
    from lazytensor.schedule import cache
    undo = [self.wrap(*w) for w in (
      ("Tensor(numpy): copy-in", tensor.Tensor, "__init__"),
      ("op: graph building", tensor.Tensor, "_apply_uop"),
      *self.extra,
      ("realize (all)", tensor.Tensor, "realize"),
      ("  schedule (all)", tensor, "create_schedule"),
      ("    structure walk", cache, "structure"),
      ("    schedule-cache lookup", cache, "find"),
      ("    instantiate", cache.Template, "instantiate"),
      ("  run (all)", tensor, "run_schedule"),
      ("    kernel-cache lookup", realize, "_memo"),
      ("    buffer allocation", device.Allocator, "alloc_cached"),
      ("    compiled function (ctypes)", ops_cpu.CPUProgram, "__call__"),
      ("  commit", tensor, "commit_realized"),
      ("numpy() (all)", tensor.Tensor, "numpy"),
      ("  copy-out", device.Buffer, "numpy"),
    )]
    try: yield self.total
    finally:
      for u in reversed(undo): u()

  def report(self, fn: Callable[[int], object], calls: int, name: str, unit: float = 1e6) -> None:
    """Time `calls` calls of fn under the timers; print the time per call of each stage (x unit: us by default)."""
    with self.timed() as total:
      start = time.perf_counter()
      for i in range(calls): fn(i)
      whole = time.perf_counter() - start
    label = "us" if unit == 1e6 else "ms"
    print(f"{name}: {whole / calls * unit:.2f} {label} per call with the timers")
    for stage, secs in total.items():
      if secs: print(f"  {stage:40s} {secs / calls * unit:8.2f}")

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--calls", type=int, default=2000, help="calls per timed loop")
  ap.add_argument("--no-stages", action="store_true", help="skip the table of stages")
  args = bench_clock.setup(ap)
  import numpy as np

  from lazytensor import Context, Tensor
  from lazytensor.renderer.cpu_target import cpu_target
  torch = bench_clock.torch_on(args.threads)

  rng = np.random.default_rng(0)
  xs = [rng.random(N, dtype=np.float32) for _ in range(8)]
  tx = [torch.from_numpy(x) for x in xs] if torch else []
  real = [Tensor(x).realize() for x in xs]
  def pick(seq: list, i: int) -> tuple:
    return seq[i % 8], seq[(i + 3) % 8]
  def chain(a: Any, b: Any, relu: Callable, exp: Callable) -> Any:
    return exp(relu(a * b + 1.0))

  # name: lazytensor, numpy, torch; each takes the call's number and picks its inputs by it
  cases: dict[str, tuple[Callable[[int], object], Callable[[int], object], Callable[[int], object] | None]] = {
    "a + b, realized inputs, .realize()": (
      lambda i: (lambda a, b: (a + b).realize())(*pick(real, i)),
      lambda i: np.add(*pick(xs, i)), (lambda i: torch.add(*pick(tx, i))) if torch else None),
    "a + b, Tensor(numpy) inputs, .numpy()": (
      lambda i: (lambda a, b: (Tensor(a) + Tensor(b)).numpy())(*pick(xs, i)),
      lambda i: np.add(*pick(xs, i)),
      (lambda i: (lambda a, b: (torch.from_numpy(a) + torch.from_numpy(b)).numpy())(*pick(xs, i))) if torch else None),
    "exp(relu(a*b+1)), Tensor(numpy), .numpy()": (
      lambda i: chain(*map(Tensor, pick(xs, i)), Tensor.relu, Tensor.exp).numpy(),
      lambda i: chain(*pick(xs, i), lambda x: np.maximum(x, 0), np.exp),
      (lambda i: chain(*map(torch.from_numpy, pick(xs, i)), torch.relu, torch.exp).numpy()) if torch else None),
    "a + b repeated (same tensors: interned)": (
      lambda i: (real[0] + real[1]).realize(), lambda i: np.add(xs[0], xs[1]),
      (lambda i: torch.add(tx[0], tx[1])) if torch else None),
  }
  versions = f"numpy {np.__version__}{', torch ' + torch.__version__ if torch else ''}"
  print(f"{N}-element float32 tensors, us per call; host {cpu_target('native').describe()} ({versions})")
  print(f"{'case':44s} {'lazytensor':>10s} {'numpy':>8s} {'torch':>8s} {'/ numpy':>8s} {'/ torch':>8s}")
  with Context(THREADS=args.threads):
    for name, (lt_fn, np_fn, torch_fn) in cases.items():
      lt, npt = bench_clock.per_call(lt_fn, args.calls), bench_clock.per_call(np_fn, args.calls)
      tt = bench_clock.per_call(torch_fn, args.calls) if torch_fn else None
      tcols = (f"{tt:8.2f}", f"{lt / tt:7.1f}x") if tt else ("-", "-")
      print(f"{name:44s} {lt:10.1f} {npt:8.2f} {tcols[0]:>8s} {lt / npt:7.0f}x {tcols[1]:>8s}")
    if args.no_stages: return
    print(f"\nstages (us per call, inclusive, each wrapper adds ~0.2 us), over {args.calls} calls")
    for name, (lt_fn, _, _) in list(cases.items())[:3]:
      for i in range(args.calls): lt_fn(i)  # warm
      Stages().report(lt_fn, args.calls, name)

if __name__ == "__main__":
  main()
