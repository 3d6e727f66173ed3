"""lazytensor next to numpy (and torch when installed), measured in the same run, float32 on the CPU.

Usage: python extra/bench/ops.py [--threads N] [--quick] [--cpu-time]
Prints GB/s or GFLOP/s for each item and the ratio against numpy and torch. With --cpu-time (one thread only) each
call is timed by the calling thread's CPU time instead of the wall clock: on a machine shared with other jobs the wall
clock also counts the time they run, and ratios from it are noise.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable


def _set_threads(n: int) -> None:
  for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"): os.environ[var] = str(n)

def best_time(fn: Callable[[], object], runs: int, clock: Callable[[], float] = time.perf_counter) -> float:
  fn()  # warm up: compile, allocate
  times = []
  for _ in range(runs):
    st = clock()
    fn()
    times.append(clock() - st)
  return min(times)

def kernels_of(build: Callable[[], object]) -> Callable[[], None]:
  """Schedule the tensor once, return a function that runs its kernels.

  Realizing the same expression twice is free in lazytensor (interned graphs remember their buffers), so the timed
  loop runs the scheduled kernels themselves."""
  from lazytensor.engine.realize import run_schedule
  from lazytensor.engine.schedule import create_schedule
  items, _ = create_schedule([build().lazydata])  # type: ignore[attr-defined]
  return lambda: run_schedule(items)

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
  ap.add_argument("--cpu-time", action="store_true", help="time by the calling thread's CPU time (one thread only)")
  args = ap.parse_args()
  if args.cpu_time and args.threads != 1: ap.error(f"--cpu-time measures one thread; got --threads {args.threads}")
  clock = time.thread_time if args.cpu_time else time.perf_counter
  _set_threads(args.threads)
  import numpy as np

  from lazytensor import Context, Device, Tensor
  try:
    import torch
    torch.set_num_threads(args.threads)
  except ImportError: torch = None

  rng = np.random.default_rng(0)
  n_chain = 1 << (20 if args.quick else 24)
  side = 1024 if args.quick else 4096
  runs = 3 if args.quick else 5
  a, b, c = (rng.random(n_chain, dtype=np.float32) for _ in range(3))
  big = rng.standard_normal((side, side), dtype=np.float32)
  ta, tb, tc, tbig = (Tensor(x).realize() for x in (a, b, c, big))
  t = {k: torch.from_numpy(v) for k, v in dict(a=a, b=b, c=c, big=big).items()} if torch else {}
  tiny_x, tiny_y = (Tensor(rng.random(16, dtype=np.float32)).realize() for _ in range(2))

  items = [
    ("chain ((a*b+c).relu()*0.5).exp()", "GB/s", 16 * n_chain,
     kernels_of(lambda: ((ta * tb + tc).relu() * 0.5).exp()),
     lambda: np.exp(np.maximum(a * b + c, 0) * 0.5),
     (lambda: torch.exp(torch.relu(t["a"] * t["b"] + t["c"]) * 0.5)) if torch else None),
    (f"row sum {side}x{side}", "GB/s", 4 * side * side,
     kernels_of(lambda: tbig.sum(1)), lambda: big.sum(1), (lambda: t["big"].sum(1)) if torch else None),
    (f"softmax {side}x{side}", "GB/s", 8 * side * side,
     kernels_of(lambda: tbig.softmax(1)),
     lambda: (lambda e: e / e.sum(1, keepdims=True))(np.exp(big - big.max(1, keepdims=True))),
     (lambda: torch.softmax(t["big"], 1)) if torch else None),
  ]
  for n in ((256,) if args.quick else (512, 1024, 2048)):
    xa, xb = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    la, lb = Tensor(xa).realize(), Tensor(xb).realize()
    ta_, tb_ = (torch.from_numpy(xa), torch.from_numpy(xb)) if torch else (None, None)
    items.append((f"matmul {n}", "GFLOP/s", 2 * n ** 3, kernels_of(lambda la=la, lb=lb: la @ lb),
                  lambda xa=xa, xb=xb: xa @ xb, (lambda ta_=ta_, tb_=tb_: ta_ @ tb_) if torch else None))
  bs, hw = (4, 28) if args.quick else (32, 56)
  cx, cw = rng.random((bs, 64, hw, hw), dtype=np.float32), rng.random((64, 64, 3, 3), dtype=np.float32)
  lcx, lcw = Tensor(cx).realize(), Tensor(cw).realize()
  tcx, tcw = (torch.from_numpy(cx), torch.from_numpy(cw)) if torch else (None, None)
  conv_torch = (lambda: torch.nn.functional.conv2d(tcx, tcw, padding=1)) if torch else None
  items.append((f"conv2d {bs}x64x{hw}x{hw}, 64 out, 3x3, pad 1", "GFLOP/s", 2 * bs * 64 * hw * hw * 64 * 9,
                kernels_of(lambda: lcx.conv2d(lcw, padding=1)), None, conv_torch))
  timing = "  (CPU time)" if args.cpu_time else ""
  print(f"threads={args.threads}{timing}  (numpy {np.__version__}{', torch ' + torch.__version__ if torch else ''})  "
        f"CPU_TARGET {Device['CPU'].renderer.target.describe()}")
  print(f"{'item':40s} {'lazytensor':>12s} {'numpy':>12s} {'torch':>12s} {'vs numpy':>9s} {'vs torch':>9s}")
  with Context(THREADS=args.threads):
    for name, unit, work, lt_fn, np_fn, torch_fn in items:
      lt = best_time(lt_fn, runs, clock)
      npt = best_time(np_fn, runs, clock) if np_fn else None
      tt = best_time(torch_fn, runs, clock) if torch_fn else None
      cols = [f"{work / x * 1e-9:12.2f}" if x else f"{'-':>12s}" for x in (npt, tt)]
      ratios = [f"{x / lt:8.2f}x" if x else f"{'-':>9s}" for x in (npt, tt)]
      print(f"{name:40s} {work / lt * 1e-9:12.2f} {cols[0]} {cols[1]} {ratios[0]} {ratios[1]}   {unit}")
    # the whole path of a new small op: build the graph, schedule it, look up the compiled kernel, run it
    tiny = best_time(lambda: kernels_of(lambda: tiny_x + tiny_y)(), 200, clock)
    tx, ty = tiny_x.numpy(), tiny_y.numpy()
    tiny_np = best_time(lambda: np.add(tx, ty), 200, clock)
    tiny_t = None
    if torch:
      ttx, tty = torch.from_numpy(tx), torch.from_numpy(ty)
      tiny_t = best_time(lambda: ttx + tty, 200, clock)
    print(f"{'tiny op, 16 elements (us)':40s} {tiny * 1e6:12.1f} {tiny_np * 1e6:12.2f} "
          f"{(f'{tiny_t * 1e6:12.2f}' if tiny_t else '-'):>12s}")
  sys.stdout.flush()

if __name__ == "__main__":
  main()
