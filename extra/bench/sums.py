"""Float sums: how far from the exact sum, and how fast, next to numpy and torch, float32 on the CPU.

Usage: python extra/bench/sums.py [--sizes 1e7,1e8] [--runs N] [--threads N] [--clock wall|cpu]
For each size n and each kind of data (uniform in [0, 1); near 1: 1 + 1e-3 * uniform, whose small parts a large
running sum rounds away; the constant 0.1, whose every add rounds alike) it prints the relative error against the
float64 sum of the full sum, the mean, 16 row sums of n/16 and 16 column sums of n/16 rows (the largest of each
result), for lazytensor, numpy and torch, and the speed (GB/s) of each with the kernels alone as
extra/bench/ops.py times them. Run it with PYTHONPATH set to another checkout to compare two versions.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import bench_clock
from ops import kernels_of


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--sizes", default="1e7,1e8", help="comma-separated element counts (multiples of 16)")
  ap.add_argument("--runs", type=int, default=5)
  ap.add_argument("--threads", type=int, default=1)
  args = bench_clock.setup(ap)
  import numpy as np

  from lazytensor import Context, Tensor
  torch = bench_clock.torch_on(args.threads)

  rng = np.random.default_rng(0)
  kinds: dict[str, Callable[[int], np.ndarray]] = {
    "uniform": lambda n: rng.random(n, dtype=np.float32),
    "near 1": lambda n: (1 + 1e-3 * rng.random(n, dtype=np.float32)).astype(np.float32),
    "0.1": lambda n: np.full(n, 0.1, np.float32),
  }
  # each reduction: name, how it shapes the data, the lazytensor, numpy and torch calls, the float64 reference
  reductions = [
    ("sum", lambda x: x, lambda t: t.sum(), np.sum, lambda t: t.sum(), np.sum),
    ("mean", lambda x: x, lambda t: t.mean(), np.mean, lambda t: t.mean(), np.mean),
    ("16 rows", lambda x: x.reshape(16, -1), lambda t: t.sum(1), lambda x: x.sum(1), lambda t: t.sum(1),
     lambda x: x.sum(1)),
    ("16 columns", lambda x: x.reshape(-1, 16), lambda t: t.sum(0), lambda x: x.sum(0), lambda t: t.sum(0),
     lambda x: x.sum(0)),
  ]
  def err(got: object, ref: np.ndarray) -> str:
    return f"{float(np.max(np.abs(np.asarray(got, np.float64) - ref) / np.abs(ref))):9.1e}"
  print(f"threads={args.threads}  relative error vs float64 (largest of each result), GB/s of the kernels alone")
  print(f"{'n':>11s} {'data':8s} {'reduce':11s} {'lazytensor':>10s} {'numpy':>9s} {'torch':>9s} "
        f"{'GB/s':>8s} {'numpy':>8s} {'torch':>8s}")
  with Context(THREADS=args.threads):
    for n in (int(float(s)) for s in args.sizes.split(",")):
      for kind, make in kinds.items():
        flat = make(n)
        for name, shape, lt_fn, np_fn, torch_fn, ref_fn in reductions:
          x = shape(flat)
          ref = ref_fn(x.astype(np.float64))
          t = Tensor(x).realize()
          tt = torch.from_numpy(x) if torch else None
          errs = [err(lt_fn(t).numpy(), ref), err(np_fn(x), ref), err(torch_fn(tt).numpy(), ref) if tt is not None
                  else f"{'-':>9s}"]
          times = [bench_clock.best_time(kernels_of(lambda t=t, lt_fn=lt_fn: lt_fn(t)), args.runs),
                   bench_clock.best_time(lambda x=x, np_fn=np_fn: np_fn(x), args.runs),
                   bench_clock.best_time(lambda tt=tt, torch_fn=torch_fn: torch_fn(tt), args.runs) if tt is not None
                   else None]
          speeds = [f"{4 * n / s * 1e-9:8.2f}" if s else f"{'-':>8s}" for s in times]
          print(f"{n:11d} {kind:8s} {name:11s} {errs[0]:>10s} {errs[1]} {errs[2]} {' '.join(speeds)}")
          del t
  sys.stdout.flush()

if __name__ == "__main__":
  main()
