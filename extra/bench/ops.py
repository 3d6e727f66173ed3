"""lazytensor next to numpy (and torch when installed), measured in the same run, float32 on the CPU.

Usage: python extra/bench/ops.py [--threads N] [--quick]
Prints GB/s or GFLOP/s for each item and the ratio against numpy and torch.
"""
from __future__ import annotations
import argparse
import os
import sys
import time
from typing import Callable

def _set_threads(n: int) -> None:
  for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"): os.environ[var] = str(n)

def best_time(fn: Callable[[], object], runs: int) -> float:
  fn()  # warm up: compile, allocate
  times = []
  for _ in range(runs):
    st = time.perf_counter()
    fn()
    times.append(time.perf_counter() - st)
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
  args = ap.parse_args()
  _set_threads(args.threads)
  import numpy as np
  from lazytensor import Context, Tensor
  try:
    import torch
    torch.set_num_threads(args.threads)
  except ImportError: torch = None

  rng = np.random.default_rng(0)
  n_chain = 1 << (20 if args.quick else 24)
  side = 1024 if args.quick else 4096
  mm = 256 if args.quick else 1024
  runs = 3 if args.quick else 5
  a, b, c = (rng.random(n_chain, dtype=np.float32) for _ in range(3))
  big = rng.standard_normal((side, side), dtype=np.float32)
  ma, mb = rng.random((mm, mm), dtype=np.float32), rng.random((mm, mm), dtype=np.float32)
  ta, tb, tc, tbig, tma, tmb = (Tensor(x).realize() for x in (a, b, c, big, ma, mb))
  t = {k: torch.from_numpy(v) for k, v in dict(a=a, b=b, c=c, big=big, ma=ma, mb=mb).items()} if torch else {}
  tiny_x, tiny_y = Tensor(rng.random(16, dtype=np.float32)).realize(), Tensor(rng.random(16, dtype=np.float32)).realize()

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
    (f"matmul {mm}", "GFLOP/s", 2 * mm ** 3, kernels_of(lambda: tma @ tmb), lambda: ma @ mb,
     (lambda: t["ma"] @ t["mb"]) if torch else None),
  ]
  print(f"threads={args.threads}  (numpy {np.__version__}{', torch ' + torch.__version__ if torch else ''})")
  print(f"{'item':40s} {'lazytensor':>12s} {'numpy':>12s} {'torch':>12s} {'vs numpy':>9s} {'vs torch':>9s}")
  with Context(THREADS=args.threads):
    for name, unit, work, lt_fn, np_fn, torch_fn in items:
      lt, npt = best_time(lt_fn, runs), best_time(np_fn, runs)
      tt = best_time(torch_fn, runs) if torch_fn else None
      rate = lambda s: work / s * 1e-9  # noqa: E731
      ts = f"{rate(tt):12.2f}" if tt else f"{'-':>12s}"
      vt = f"{tt / lt:8.2f}x" if tt else f"{'-':>9s}"
      print(f"{name:40s} {rate(lt):12.2f} {rate(npt):12.2f} {ts} {npt / lt:8.2f}x {vt}   {unit}")
    # the whole path of a new small op: build the graph, schedule it, look up the compiled kernel, run it
    tiny = best_time(lambda: kernels_of(lambda: tiny_x + tiny_y)(), 200)
    tx, ty = tiny_x.numpy(), tiny_y.numpy()
    tiny_np = best_time(lambda: np.add(tx, ty), 200)
    tiny_t = best_time(lambda: t["tx"] + t["ty"], 200) if torch and t.update(tx=torch.from_numpy(tx), ty=torch.from_numpy(ty)) is None else None
    print(f"{'tiny op, 16 elements (us)':40s} {tiny * 1e6:12.1f} {tiny_np * 1e6:12.2f} "
          f"{(f'{tiny_t * 1e6:12.2f}' if tiny_t else '-'):>12s}")
  sys.stdout.flush()

if __name__ == "__main__":
  main()
