"""BEAM=2 next to the heuristics (BEAM=0), numpy and torch (when installed), measured in the same run, float32 on the
CPU; plus what the search costs: its time on a cold cache, and the set-up time on a warm one (a second run of the same
program: searches come from the cache, programs from the disk cache).

Usage: python extra/bench/beam.py [--threads N] [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bench_clock


@dataclass
class Item:
  name: str
  unit: str
  work: int  # flops or bytes
  build: Callable[[], Any]  # the lazytensor expression
  numpy: Callable[[], object] | None
  torch: Callable[[], object] | None

def _items(quick: bool, np: Any, torch: Any, Tensor: Any) -> list[Item]:
  rng = np.random.default_rng(0)
  def arr(*shape: int) -> Any: return rng.standard_normal(shape, dtype=np.float32)
  def tt(x: Any) -> Any: return torch.from_numpy(x) if torch else None
  out = []
  for n in ((256,) if quick else (512, 1024, 2048)):
    a, b = arr(n, n), arr(n, n)
    la, lb, ta, tb = Tensor(a).realize(), Tensor(b).realize(), tt(a), tt(b)
    out.append(Item(f"matmul {n}", "GFLOP/s", 2 * n ** 3, lambda la=la, lb=lb: la @ lb, lambda a=a, b=b: a @ b,
                    (lambda ta=ta, tb=tb: ta @ tb) if torch else None))
  bs, hw = (4, 28) if quick else (32, 56)
  x, w = arr(bs, 64, hw, hw), arr(64, 64, 3, 3)
  lx, lw, tx, tw = Tensor(x).realize(), Tensor(w).realize(), tt(x), tt(w)
  out.append(Item(f"conv2d {bs}x64x{hw}x{hw}, 64 out, 3x3, pad 1", "GFLOP/s", 2 * bs * 64 * hw * hw * 64 * 9,
                  lambda: lx.conv2d(lw, padding=1), None,
                  (lambda: torch.nn.functional.conv2d(tx, tw, padding=1)) if torch else None))
  side = 1024 if quick else 4096
  big = arr(side, side)
  lbig, tbig = Tensor(big).realize(), tt(big)
  out.append(Item(f"softmax {side}x{side}", "GB/s", 8 * side * side, lambda: lbig.softmax(1),
                  lambda: (lambda e: e / e.sum(1, keepdims=True))(np.exp(big - big.max(1, keepdims=True))),
                  (lambda: torch.softmax(tbig, 1)) if torch else None))
  n = 1 << (20 if quick else 24)
  ca, cb, cc = arr(n), arr(n), arr(n)
  lca, lcb, lcc = (Tensor(v).realize() for v in (ca, cb, cc))
  tca, tcb, tcc = tt(ca), tt(cb), tt(cc)
  out.append(Item(f"chain ((a*b+c).relu()*0.5).exp() {n >> 20}M", "GB/s", 16 * n,
                  lambda: ((lca * lcb + lcc).relu() * 0.5).exp(), lambda: np.exp(np.maximum(ca * cb + cc, 0) * 0.5),
                  (lambda: torch.exp(torch.relu(tca * tcb + tcc) * 0.5)) if torch else None))
  return out

def _runners(items: list[Any]) -> Callable[[], None]:
  """Compile (optimize as the knobs say) every kernel of a schedule; a function that runs them all."""
  from lazytensor import Device
  from lazytensor.engine.realize import compile_kernel
  runners = [(compile_kernel(it.ast, Device[it.bufs[0].device]), it.bufs) for it in items]
  for _, bufs in runners:
    for b in bufs: b.ensure_allocated()
  def run() -> None:
    for r, bufs in runners: r(bufs, wait=True)
  return run

def _fresh_process_caches() -> None:
  """What a second run of the program starts with: no compiled programs in memory (the disk caches stay)."""
  from lazytensor.engine import realize
  from lazytensor.uop import symbolic
  realize.forget_programs()
  symbolic.simplify.cache_clear()

def setup_ms(kernels: list[Any], repeats: int = 3) -> float:
  """The best time to get every kernel of a schedule ready to run, as a new process would (caches on disk only)."""
  best = float("inf")
  for _ in range(repeats):
    _fresh_process_caches()
    st = time.perf_counter()
    _runners(kernels)
    best = min(best, time.perf_counter() - st)
  return best * 1e3

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
  ap.add_argument("--width", type=int, default=2, help="beam width")
  args = ap.parse_args()
  bench_clock.set_threads(args.threads)
  import numpy as np

  from lazytensor import Context, Device, Tensor
  from lazytensor.opt.search import beam_stats
  from lazytensor.schedule.scheduler import create_schedule
  try:
    import torch
    torch.set_num_threads(args.threads)
  except ImportError: torch = None

  runs = 3 if args.quick else 10
  cache = os.path.join(tempfile.mkdtemp(prefix="lazytensor-beam-bench-"), "cache.db")
  print(f"CPU_TARGET {Device['CPU'].renderer.target.describe()}")
  print(f"threads={args.threads}  beam width {args.width}  (numpy {np.__version__}"
        f"{', torch ' + torch.__version__ if torch else ''}); cold cache {cache}")
  print(f"{'item':44s} {'BEAM=0':>9s} {'BEAM=' + str(args.width):>9s} {'numpy':>9s} {'torch':>9s} {'search s':>9s} "
        f"{'warm ms':>8s} {'BEAM=0 ms':>9s}")
  with Context(THREADS=args.threads):
    for item in _items(args.quick, np, torch, Tensor):
      with Context(BEAM=0):
        kernels, _ = create_schedule([item.build().lazydata])
        run_heuristic = _runners(kernels)
      with Context(BEAM=args.width, CACHEDB=cache):
        before, st = dict(beam_stats), time.perf_counter()
        # the schedule too: BEAM times the packing copies the heuristics offer (engine/pack_search.beam_packing)
        beam_kernels, _ = create_schedule([item.build().lazydata])
        run_beam = _runners(beam_kernels)
        search_s = time.perf_counter() - st
        searched, compiled = (beam_stats[k] - before[k] for k in ("searches", "compiled"))
        warm_ms = setup_ms(beam_kernels)
        assert beam_stats["searches"] == before["searches"] + searched, "a warm cache searches nothing"
      with Context(BEAM=0): setup0_ms = setup_ms(kernels)
      times = bench_clock.best_times([run_heuristic, run_beam], runs)
      times += [bench_clock.best_times([fn], runs)[0] for fn in (item.numpy, item.torch)]
      rate = [f"{item.work / t * 1e-9:9.2f}" if t else f"{'-':>9s}" for t in times]
      print(f"{item.name:44s} {' '.join(rate)} {search_s:9.1f} {warm_ms:8.1f} {setup0_ms:9.1f}   {item.unit}, "
            f"{len(kernels)}/{len(beam_kernels)} kernels, {searched} searched, {compiled} candidates compiled")
      sys.stdout.flush()

if __name__ == "__main__":
  main()
