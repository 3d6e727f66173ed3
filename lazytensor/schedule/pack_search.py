"""BEAM's question about a schedule rather than a kernel: which packing copies a large reduce over products reads from.

The scheduler builds the variants `packing.pack_candidates` offers (schedules of the one reduce, with other copies);
`beam_packing` times them in turns with the heuristics' opts, searches each kernel of the variants that are not
hopeless (PACK_HOPELESS_RATIO) as `beam_search` does, times those in turns again and keeps the fastest, the heuristics'
choice (variant 0) on a tie. The answer is cached in table "beam_pack" under a key that names everything the code
depends on, as the kernel search's answers are.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from lazytensor.codegen.program import build_program
from lazytensor.helpers import CACHELEVEL, DEBUG, IGNORE_BEAM_CACHE, diskcache_get, diskcache_put
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import Kernel
from lazytensor.opt.search import TIE_RATIO, beam_search, fmt_time
from lazytensor.opt.search_cache import beam_cache_key, report_once
from lazytensor.opt.search_workers import buffer_specs, input_values, raw_bytes
from lazytensor.runtime.device import Buffer, Compiled
from lazytensor.uop.ops import UOp

PACKING_RUNS = 5    # turns each searched variant gets, the variants in turn so that drift hits all of them
PRESCREEN_RUNS = 2  # turns each variant gets with the heuristics' opts
# a variant this much slower than the fastest one with the heuristics' opts is not searched: a search gains a matmul's
# reduce 0-25% over the heuristics' opts (1024, AVX-512, one thread), while the variant that packs nothing is 2-3x
# slower there (6x at 2048) and its search was a fifth of a cold BEAM=2 of the matmul
PACK_HOPELESS_RATIO = 1.5
# ... and slower by more than this: variants alike of a reduce of microseconds differ by noise alone, which a loaded
# host can make 1.5x (the variants this screen is for add copies of milliseconds)
PACK_HOPELESS_SECONDS = 100e-6

Variant = Sequence[tuple[UOp, Sequence[Buffer]]]

def _loaded_variant(device: Compiled, items: Variant, optimize: Callable[[Kernel], Kernel]) -> Callable[[], float]:
  """Each kernel of one variant optimized and loaded, its inputs filled with fixed random values; a function that runs
  them all and returns their time."""
  runs: list[Callable[[], float]] = []
  for ast, bufs in items:
    # through the program caches: the winner's kernels are the ones realize then asks for
    spec, program = build_program(optimize(Kernel(ast, device.renderer)), device)
    for s, b in zip(buffer_specs(ast), bufs):
      if s.loaded: b.copyin(raw_bytes(input_values(s)))
    launch = spec.launch.kwargs() | {"vals": spec.var_args()}  # scalar arguments: 1 each, for every variant alike
    runs.append(functools.partial(_run_program, program, [b.handle for b in bufs], launch))
  return lambda: sum(run() for run in runs)

def _best_in_turns(runs: Sequence[Callable[[], float]], turns: int) -> list[float]:
  """The best time of each run function over `turns` turns, after a first run each that pays for cold caches."""
  times: list[list[float]] = [[run()] for run in runs]
  for _ in range(turns):
    for t, run in zip(times, runs): t.append(run())
  return [min(t[1:]) for t in times]

def _run_program(program: Any, handles: list[Any], launch: dict[str, Any]) -> float:
  return float(program(*handles, wait=True, **launch) or 0.0)

def beam_packing(device: Compiled, width: int, what: bytes, variants: Sequence[Callable[[], Variant]]) -> int:
  """The index of the fastest of `variants` (schedules of one reduce, each with other packing copies: functions that
  build its kernels as (AST, buffers)), each kernel optimized by a beam search of `width`; from the cache ("beam_pack",
  keyed by `what` and everything that changes the code) when it can. Variants more than PACK_HOPELESS_RATIO (and
  PACK_HOPELESS_SECONDS) slower than the fastest with the heuristics' opts are not searched; a lone survivor wins
  unsearched (realize searches its kernels). Variant 0 is the heuristics' choice: another wins only when faster by
  more than a tie (so does an earlier one over a later). The variants run in this process: each kernel is the
  heuristics' or one whose output the search checked."""
  key = beam_cache_key(device, width, b"packing " + what)
  if not IGNORE_BEAM_CACHE and CACHELEVEL.value >= 2 and (raw := diskcache_get("beam_pack", key)) is not None:
    if raw.isdigit() and int(raw) < len(variants): return int(raw)
    report_once("BEAM cache: ignoring corrupt entries in table 'beam_pack'; they are searched again")
  built = [build() for build in variants]
  first = _best_in_turns([_loaded_variant(device, items, hand_coded_optimizations) for items in built], PRESCREEN_RUNS)
  bound = max(PACK_HOPELESS_RATIO * min(first), min(first) + PACK_HOPELESS_SECONDS)
  kept = [i for i, t in enumerate(first) if t <= bound]
  best = [first[kept[0]]]
  if len(kept) > 1:
    def search(k: Kernel) -> Kernel: return beam_search(k, device, width)
    best = _best_in_turns([_loaded_variant(device, built[i], search) for i in kept], PACKING_RUNS)
  pick = min(range(len(kept)), key=lambda i: best[i])
  if best[pick] >= best[0] * (1 - TIE_RATIO): pick = 0
  winner = kept[pick]
  if DEBUG >= 1:
    searched = "; searched " + ", ".join(f"{i}: {fmt_time(t)}" for i, t in zip(kept, best)) if len(kept) > 1 else ""
    print(f"beam: packing {winner} of {len(variants)}: heuristics {', '.join(fmt_time(t) for t in first)}{searched}")
  if CACHELEVEL.value >= 2: diskcache_put("beam_pack", key, str(winner).encode())
  return winner
