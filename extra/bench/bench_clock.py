"""The clock the benchmarks read: wall time, or with `--clock cpu` this thread's CPU time. On a machine shared with
other jobs, wall time also counts the waits for a core; CPU time does not, but it sees one thread only, so it is offered
with --threads 1 alone (work on other threads would not count)."""
from __future__ import annotations

import argparse
import gc
import os
import time
from collections.abc import Callable
from typing import Any

now: Callable[[], float] = time.perf_counter

def add_argument(ap: argparse.ArgumentParser) -> None:
  ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                  help="cpu: this thread's CPU time instead of wall time (a machine shared with other jobs)")

def set_threads(n: int) -> None:
  """numpy's BLAS (and torch's OpenMP) on n threads, as lazytensor's THREADS: set before they are imported."""
  for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"): os.environ[var] = str(n)

def setup(ap: argparse.ArgumentParser) -> argparse.Namespace:
  """The arguments (with --clock added; `ap` has --threads), the clock they name read from now on, and numpy's BLAS
  and torch's OpenMP set to --threads threads: call it before numpy or torch is imported."""
  add_argument(ap)
  args = ap.parse_args()
  use(ap, args)
  set_threads(args.threads)
  return args

def torch_on(threads: int) -> Any:
  """torch on `threads` threads, or None where it is not installed."""
  try:
    import torch
  except ImportError: return None
  torch.set_num_threads(threads)
  return torch

def use(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
  """Read the clock that --clock names from now on."""
  global now
  if args.clock == "cpu":
    if args.threads != 1: ap.error("--clock cpu measures one thread: use it with --threads 1")
    now = time.thread_time

def best_time(fn: Callable[[], object], runs: int, collect: bool = False) -> float:
  """The best of `runs` timed calls of fn after one untimed one (compiling, allocating); with `collect`, garbage is
  collected before each call, so the buffers of the last one are back in the allocator before this one allocates."""
  fn()
  best = float("inf")
  for _ in range(runs):
    if collect: gc.collect()
    start = now()
    fn()
    best = min(best, now() - start)
  return best

def per_call(fn: Callable[[int], object], calls: int, runs: int = 5) -> float:
  """The best of `runs` timed loops of `calls` calls (after one untimed loop), in us per call; fn takes the call's
  number in its loop (a case that picks new inputs by it)."""
  for i in range(calls): fn(i)
  best = float("inf")
  for _ in range(runs):
    start = now()
    for i in range(calls): fn(i)
    best = min(best, now() - start)
  return best / calls * 1e6

def best_times(fns: list[Callable[[], object] | None], runs: int,
               before: dict[int, Callable[[], object]] | None = None) -> list[float | None]:
  """The best time of each function; runs alternate between them, so that a noisy moment hits all of them. (Only for
  lazytensor's kernels: BLAS and OpenMP threads keep spinning after a call and would slow whatever runs next.)
  `before` maps a function's place in fns to an untimed call made right before each of its timed ones."""
  live = [fn for fn in fns if fn is not None]
  for fn in live: fn()  # warm up
  times: dict[int, list[float]] = {id(fn): [] for fn in live}
  for _ in range(runs):
    for i, fn in enumerate(fns):
      if fn is None: continue
      if before and i in before: before[i]()
      start = now()
      fn()
      times[id(fn)].append(now() - start)
  return [min(times[id(fn)]) if fn is not None else None for fn in fns]
