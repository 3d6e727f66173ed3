"""Memory of a process that builds a new kernel at every step: a Python number that changes between calls makes a new
kernel each time (`Tensor.full((1024,), float(i))`). The in-memory caches of programs, schedules and compiled code are
bounded (PROGRAM_CACHE, SCHEDULE_CACHE), so the resident size levels off once PROGRAM_CACHE kernels are loaded, when
the kernels come from the disk cache. Kernels compiled in the process still add about 80 KB each: llvmlite 0.50 never
frees the instrumentation callbacks of the pass builder that each LLVM optimization makes.

Usage: python extra/bench/cache_growth.py [--steps 3000] [--every 500] [--fresh]
Prints the resident set size every `every` steps and where the kernels came from: compiled now, or the disk cache (a
second run of the script reads them all from disk; --fresh uses an empty cache directory, so that every kernel is
compiled). Linux only: the resident size is read from /proc/self/statm.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time


def rss_mb() -> float:
  with open("/proc/self/statm") as f: return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=3000)
  ap.add_argument("--every", type=int, default=500)
  ap.add_argument("--fresh", action="store_true", help="an empty disk cache: every kernel is compiled")
  args = ap.parse_args()
  from lazytensor import Context, Tensor
  from lazytensor.runtime.device import compile_stats
  knobs = {"CACHEDB": os.path.join(tempfile.mkdtemp(prefix="lt-cache-growth-"), "cache.db")} if args.fresh else {}
  with Context(**knobs):
    Tensor.full((1024,), -1.0).contiguous().realize()  # the imports and the first kernel are not growth
    print(f"{'step':>6s} {'RSS MB':>8s} {'s':>7s} {'compiled':>9s} {'from disk':>9s}")
    print(f"{0:6d} {rss_mb():8.1f} {0.0:7.1f} {compile_stats['compiled']:9d} {compile_stats['disk']:9d}", flush=True)
    start = time.perf_counter()
    for i in range(1, args.steps + 1):
      Tensor.full((1024,), float(i)).contiguous().realize()
      if i % args.every == 0:
        print(f"{i:6d} {rss_mb():8.1f} {time.perf_counter() - start:7.1f} {compile_stats['compiled']:9d} "
              f"{compile_stats['disk']:9d}", flush=True)

if __name__ == "__main__": main()
