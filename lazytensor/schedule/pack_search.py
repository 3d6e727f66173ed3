"""BEAM's question about a schedule rather than a kernel: which packing copies a large reduce over products reads from.

The scheduler builds the variants `heuristic.pack_candidates` offers (schedules of the one reduce, with other copies);
`beam_packing` searches each variant's kernels as `beam_search` does, times the variants in turns and keeps the
fastest, the heuristics' choice (variant 0) on a tie. The answer is cached in table "beam_pack" under a key that
names everything the code depends on, as the kernel search's answers are.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from lazytensor.codegen.program import build_program
from lazytensor.helpers import CACHELEVEL, DEBUG, IGNORE_BEAM_CACHE, diskcache_get, diskcache_put
from lazytensor.opt.kernel import Kernel
from lazytensor.opt.search import TIE_RATIO, beam_search, fmt_time
from lazytensor.opt.search_cache import beam_cache_key, report_once
from lazytensor.opt.search_workers import buffer_specs, input_values, raw_bytes
from lazytensor.runtime.device import Buffer, Compiled
from lazytensor.uop.ops import UOp

PACKING_RUNS = 5  # turns each variant gets, the variants in turn so that drift in the machine hits all of them

def _loaded_variant(device: Compiled, width: int, items: Sequence[tuple[UOp, Sequence[Buffer]]]) -> Callable[[], float]:
  """Each kernel of one variant searched (or from the cache) and loaded, its inputs filled with fixed random values; a
  function that runs them all and returns their time."""
  runs: list[Callable[[], float]] = []
  for ast, bufs in items:
    # through the program caches: the winner's kernels are the ones realize then asks for
    spec, program = build_program(beam_search(Kernel(ast, device.renderer), device, width), device)
    for s, b in zip(buffer_specs(ast), bufs):
      if s.loaded: b.copyin(raw_bytes(input_values(s)))
    launch = spec.launch.kwargs() | {"vals": spec.var_args()}  # scalar arguments: 1 each, for every variant alike
    runs.append(functools.partial(_run_program, program, [b.handle for b in bufs], launch))
  return lambda: sum(run() for run in runs)

def _run_program(program: Any, handles: list[Any], launch: dict[str, Any]) -> float:
  return float(program(*handles, wait=True, **launch) or 0.0)

def beam_packing(device: Compiled, width: int, what: bytes,
                 variants: Sequence[Callable[[], Sequence[tuple[UOp, Sequence[Buffer]]]]]) -> int:
  """The index of the fastest of `variants` (schedules of one reduce, each with other packing copies: functions that
  build its kernels as (AST, buffers)), each kernel optimized by a beam search of `width`; from the cache ("beam_pack",
  keyed by `what` and everything that changes the code) when it can. Variant 0 is the heuristics' choice: another
  wins only when faster by more than a tie. The variants run in this process: each kernel is the heuristics' or one
  whose output the search checked."""
  key = beam_cache_key(device, width, b"packing " + what)
  if not IGNORE_BEAM_CACHE and CACHELEVEL.value >= 2 and (raw := diskcache_get("beam_pack", key)) is not None:
    if raw.isdigit() and int(raw) < len(variants): return int(raw)
    report_once("BEAM cache: ignoring corrupt entries in table 'beam_pack'; they are searched again")
  runs = [_loaded_variant(device, width, build()) for build in variants]
  times: list[list[float]] = [[run()] for run in runs]  # a first run each, which pays for cold caches
  for _ in range(PACKING_RUNS):
    for t, run in zip(times, runs): t.append(run())
  best = [min(t[1:]) for t in times]
  winner = min(range(len(best)), key=lambda i: best[i])
  if best[winner] >= best[0] * (1 - TIE_RATIO): winner = 0
  if DEBUG >= 1: print(f"beam: packing {winner} of {len(best)}: " + ", ".join(fmt_time(t) for t in best))
  if CACHELEVEL.value >= 2: diskcache_put("beam_pack", key, str(winner).encode())
  return winner
