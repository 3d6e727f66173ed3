"""BEAM search: each kernel finds its own opts by compiling and timing candidates, checked and cached.

`beam_search(k, device, width)`, used when `BEAM=width`:

  1. The cache (sqlite table "beam", keyed by `program_key` of the AST and the width: the renderer, the compiler,
     lazytensor's code, the knobs that change code, THREADS on CPUs) answers with the chosen opts as JSON; replaying
     them is the whole cost of a warm run.
  2. Otherwise the starting kernels (the unoptimized one, the heuristics' choice, and a sibling's cached opts) are
     compiled and timed. Each round takes every beam member's children: every action (`actions`) appended, and every
     edit of its opts (`edits`: one dropped, or one with another amount). It drops illegal children (KernelOptError),
     hopeless ones (below) and ones equal to a kernel already seen (same axes and views), compiles the rest in
     parallel in PARALLEL worker processes, drops those that render the same code as one already timed, times each,
     and keeps the `width` fastest of the beam and the children. It stops when PATIENCE rounds in a row make the best
     kernel faster by less than BEAM_MIN_PROGRESS.
  3. The fastest candidates are checked in order against the unoptimized kernel on the same random inputs; the first
     that agrees wins, unless timed side by side with the heuristics' kernel it is not faster by more than a tie, and
     is cached. If none agrees, the heuristics' kernel is used (said at DEBUG>=1).

The scheduler asks one more question under BEAM, answered by timing in `schedule/pack_search.py`: which packing copies
a large reduce over products reads from.

This module is the search loop; the candidates (`actions`, `edits`, the pruning) are in `search_actions.py`, the
cache in `search_cache.py`, and the jobs that compile, time and check candidates in worker processes, with the pool
that runs them, in `search_workers.py`.

Failures are ordinary outcomes: a candidate whose compile raises, crashes its worker or takes longer than
BEAM_TIMEOUT_SEC, or whose run crashes or overruns, counts as infinitely slow. Workers run one job at a time, so the
job that hung or crashed is known; only its worker is killed and replaced. Runs also happen in a worker (always the
first), on scratch buffers it keeps for the kernel being searched, so that a candidate that crashes cannot take the
searching process down and an overlong run can be cut short.

What keeps the search cheap:
  * Slices of large kernels. When the heuristics' kernel takes more than TARGET_RUN_S, every candidate is timed on a
    slice: its outermost GLOBAL loops keep only a prefix of their indices (`Kernel.keep_prefix`), so every inner loop,
    tile and access pattern is the one of the whole kernel and only the trip count of the outer loop shrinks; the
    time is scaled back up by the work ratio. Before the winner is chosen, the best candidates and the heuristics'
    kernel are timed again at full size, so a slice that predicted badly cannot pick a slower kernel. The output
    check runs the unoptimized reference on a slice too (about CHECK_RUN_S), comparing only the outputs it wrote.
  * Abandoning slow work early. A candidate is ranked by the best of two runs (MIN_RUNS) and stops being timed once two
    runs are ABANDON_RATIO times slower than the best, or its first FAR_RATIO times that; one still running long after
    that is killed with its worker. Beam members more than HOPELESS_RATIO times
    slower than the best are not expanded, and kernels under MIN_SEARCH_S keep the heuristics' opts without a search
    (launch overhead is all there is to win).
  * Pruning before compiling: candidates with more register lanes than BEAM_UPCAST_MAX (upcast x unroll; the
    renderer's own upcast_max is a hard limit; MAX_ELEMENTWISE_LANES without a reduce, where lanes hold no
    accumulators), more local threads than BEAM_LOCAL_MAX, an unrolled body longer than
    MAX_BODY_OPS ALU ops (it costs compile time, not run time), or padding that adds more than MAX_PAD_WORK of work are
    dropped, and so are duplicates by kernel state; candidates that render the same code as one already timed (in any
    round) are dropped without timing.
  * Starting points: the heuristics' kernel joins the first beam, and edits let the search move from it to its
    neighbours (another tile, threads on another axis) without rebuilding it one opt at a time from nothing. A second
    cache ("beam_shape") keyed by the loop structure alone (shape, axis kinds, buffer strides and dtypes, not the
    arithmetic) lets a kernel that differs from an earlier one only in its elementwise ops start from that sibling's
    opts as one more beam member.
  * Ties (within TIE_RATIO) go to the candidate that was quickest to lower and compile: every later process lowers the
    chosen kernel again to find its program in the disk cache.
"""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from lazytensor.dtype import from_storage
from lazytensor.helpers import (
  BEAM_DEBUG,
  BEAM_MIN_PROGRESS,
  BEAM_TIMEOUT_SEC,
  DEBUG,
  IGNORE_BEAM_CACHE,
  ansistrip,
  prod,
)
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import AxisKind, Kernel
from lazytensor.opt.search_actions import actions, body_ops, edits, hopeless, kernel_state, replay
from lazytensor.opt.search_cache import beam_cache_key, cache_put, cached_kernel, shape_signature
from lazytensor.opt.search_workers import (
  MIN_RUNS,
  MIN_TIMED_S,
  Binary,
  BufferSpec,
  CompileJob,
  JobFailed,
  RunJob,
  buffer_specs,
  compile_job,
  duel_job,
  get_pool,
  output_job,
  prepare_job,
  release_job,
  time_job,
)
from lazytensor.runtime.device import Compiled

ABANDON_RATIO = 2.0     # a run this much slower than the best ends a candidate's timing
HOPELESS_RATIO = 4.0    # beam members this much slower than the best are not expanded
# rounds in a row without progress that end the search. A step that does not pay alone (a narrower tile) may make room
# for one that does (a wider unroll), but edits reach many such pairs in one round (another amount of an opt already
# there). A cold BEAM=2 of a 1024 matmul (AVX-512, one thread) compiled 88 candidates with 1 in place of 161 with 2, its
# kernels as fast: the one gain seen after a round without one was on a slice, and the full-size check undid it
PATIENCE = 1
# kernels slower than this are timed on a slice that runs about this long: a 1024 matmul (13 ms on one AVX-512 core) on
# 30% of its rows, each row the whole kernel's loops and tiles; 10 ms made timing half of a cold search
TARGET_RUN_S = 0.004
CHECK_RUN_S = 0.05      # the unoptimized reference of the output check runs on a slice about this long
MIN_SEARCH_S = 20e-6    # kernels faster than this keep the heuristics' opts
TIE_RATIO = 0.02        # candidates this close to the fastest are a tie, won by the one cheaper to lower and compile
KILL_GRACE_S = 0.5      # a timing job gets this long beyond its runs (to load the program) before it is killed
# relative; exact for ints and bools
CHECK_TOLERANCE = {"float16": 2e-2, "bfloat16": 2e-2, "float32": 1e-3, "float64": 1e-8}

# what searching has done in this process: tests and benchmarks read it
beam_stats: dict[str, int] = {"searches": 0, "cache_hits": 0, "rounds": 0, "compiled": 0, "duplicates": 0, "timed": 0,
                              "failed": 0, "rejected": 0}

# ---- the search ----

@dataclass
class Candidate:
  kernel: Kernel
  keep: tuple[tuple[int, int], ...] = ()  # the slice it is timed on
  scale: float = 1.0                      # work of the whole kernel / work of the slice
  binary: Binary | None = None
  time: float = math.inf                  # seconds for the whole kernel

def slice_plan(k: Kernel, fraction: float) -> tuple[tuple[tuple[int, int], ...], float]:
  """Prefixes of the outermost GLOBAL axes that keep about `fraction` of the work (at least one index of each), and
  the factor that scales a slice's time back up to the whole kernel's."""
  keep: list[tuple[int, int]] = []
  left = fraction
  for axis in k.axes_of(AxisKind.GLOBAL):
    if left >= 1: break
    size = k.full_shape[axis]
    keep.append((axis, max(1, round(size * left))))
    left *= size / keep[-1][1]
  return tuple(keep), prod(k.full_shape[a] for a, _ in keep) / prod(n for _, n in keep)

@dataclass
class _Outputs:
  values: np.ndarray
  written: np.ndarray

def _agrees(ref: _Outputs, got: _Outputs, spec: BufferSpec) -> bool:
  """Whether a candidate's outputs match the reference wherever both wrote, and it wrote all it must."""
  if spec.whole and not got.written.all(): return False
  mask = ref.written & got.written
  if not mask.any(): return False  # nothing to compare is no evidence: do not trust the candidate
  r, g = ref.values[mask], got.values[mask]
  if not spec.dtype.is_float: return bool(np.array_equal(r, g))
  r64, g64 = (from_storage(x, spec.dtype).astype(np.float64) for x in (r, g))
  finite = np.abs(r64[np.isfinite(r64)])
  tol = CHECK_TOLERANCE.get(spec.dtype.name, 1e-3)
  scale = max(1.0, float(finite.mean())) if finite.size else 1.0  # sums of many terms: absolute error grows with them
  return bool(np.allclose(g64, r64, rtol=tol, atol=tol * scale, equal_nan=True))

def cheapest_among_ties(ranked: list[Candidate]) -> list[Candidate]:
  """`ranked` (fastest first) with the candidates that tie with the fastest ordered by lowering and compile time: the
  same speed for less work in every later process, which lowers the kernel again to find its program in the cache."""
  ties = [c for c in ranked if c.time <= ranked[0].time * (1 + TIE_RATIO)]
  return sorted(ties, key=lambda c: c.binary.compile_s if c.binary else math.inf) + ranked[len(ties):]

# called with each candidate timed and its time in seconds for the whole kernel (inf: it failed): lazytensor/viz
candidate_listeners: list[Callable[[Kernel, float], None]] = []

def fmt_time(t: float) -> str: return "inf" if math.isinf(t) else f"{t * 1e6:.1f} us"

class _Search:
  """One kernel's search: the beam, the compiled code seen so far, the best time, how much of the kernel is timed."""
  def __init__(self, k: Kernel, device: Compiled, width: int) -> None:
    self.root, self.device, self.width = k, device, width
    self.pool = get_pool()
    self.work, self.ops, self.specs = prod(k.full_shape), body_ops(k.ast), buffer_specs(k.ast)
    self.stored = [s for s in self.specs if s.stored]
    self.seen_states: set[tuple] = set()
    self.seen_code: set[bytes] = set()
    self.best, self.fraction, self.round = math.inf, 1.0, 0
    self.timed: dict[int, float] = {}  # id of a kernel object -> its latest time
    self.n_compiled, self.n_timed = 0, 0
    # one bar for the whole search, on terminals only: in a log or a pipe its redraws would be noise
    self.bar = tqdm(total=0, desc=ansistrip(k.name), file=sys.stderr, leave=False, disable=not sys.stderr.isatty(),
                    unit="cand")

  @property
  def timeout(self) -> float: return float(BEAM_TIMEOUT_SEC.value)

  def run_job(self, binary: Binary, cutoff: float = math.inf, fill: int = 0) -> RunJob:
    return RunJob(self.device.name, self.root.ast, binary, cutoff, fill)

  # -- compiling and timing --

  def compile(self, cands: list[Candidate]) -> list[Candidate]:
    """Compile in the workers; the candidates that compiled to code not seen before."""
    jobs = [CompileJob(self.device.name, self.root.ast, tuple(c.kernel.applied_opts), c.keep) for c in cands]
    out = []
    for c, res in zip(cands, self.pool.map(compile_job, jobs, self.timeout)):
      if isinstance(res, JobFailed):
        beam_stats["failed"] += 1
        if BEAM_DEBUG >= 2: self.say(f"  failed {c.kernel.applied_opts}: {res.why}")
      elif res.digest in self.seen_code: beam_stats["duplicates"] += 1
      else:
        beam_stats["compiled"] += 1
        self.n_compiled += 1
        self.seen_code.add(res.digest)
        c.binary = res
        out.append(c)
    return out

  def time(self, c: Candidate, cutoff: float = math.inf) -> None:
    """Time a compiled candidate on the first worker (which holds the scratch buffers). A run past `cutoff` (seconds,
    whole kernel) ends its timing; one that runs far past it is killed with its worker."""
    assert c.binary is not None
    self.pool.map(prepare_job, [self.run_job(c.binary)], self.timeout, workers=1)
    slice_cutoff = cutoff / c.scale
    deadline = self.timeout  # a cutoff of 0 asks for two runs, however long they take
    if 0 < slice_cutoff < math.inf:
      deadline = min(deadline, KILL_GRACE_S + MIN_TIMED_S + (MIN_RUNS + 2) * slice_cutoff)
    res = self.pool.map(time_job, [self.run_job(c.binary, slice_cutoff)], deadline, workers=1)[0]
    beam_stats["timed"] += 1
    self.n_timed += 1
    c.time = math.inf if isinstance(res, JobFailed) else min(res) * c.scale
    self.timed[id(c.kernel)] = c.time
    for listener in candidate_listeners: listener(c.kernel, c.time)
    if BEAM_DEBUG >= 2: self.say(f"  {fmt_time(c.time):>12s} {c.kernel.applied_opts}")

  def evaluate(self, kernels: list[Kernel]) -> list[Candidate]:
    """Compile and time kernels (best parents first, so that the cutoff bites early); the ones that ran, fastest
    first."""
    cands = [Candidate(k, *slice_plan(k, self.fraction)) for k in kernels]
    self.bar.total += len(cands)
    self._progress("compiling")
    compiled = self.compile(cands)
    self.bar.update(len(cands) - len(compiled))  # failed and duplicate candidates are done
    for c in compiled:
      self.time(c, ABANDON_RATIO * self.best)
      self.best = min(self.best, c.time)
      self.bar.update(1)
      self._progress("timing")
    return sorted([c for c in compiled if math.isfinite(c.time)], key=lambda c: c.time)

  def say(self, line: str) -> None:
    """Print a line above the progress bar, which is drawn again below it."""
    self.bar.write(line, file=sys.stdout)

  def _progress(self, doing: str) -> None:
    self.bar.set_postfix_str(f"round {self.round}, {self.n_compiled} compiled, {self.n_timed} timed, best "
                             f"{fmt_time(self.best)}, {doing}")

  # -- the beam --

  def children(self, k: Kernel) -> list[Kernel]:
    """Every action appended to `k`, and every edit of its opts; the new, legal, not hopeless ones."""
    out = []
    for child in [replay(k, [opt]) for opt in actions(k)] + [replay(self.root, e) for e in edits(k.applied_opts)]:
      if child is None or hopeless(child, self.work, self.ops): continue
      if (state := kernel_state(child)) in self.seen_states: continue
      self.seen_states.add(state)
      out.append(child)
    return out

  def select(self, cands: list[Candidate]) -> list[Candidate]:
    """The `width` fastest, except those so much slower than the best that expanding them is hopeless."""
    ranked = sorted(cands, key=lambda c: c.time)
    return [c for c in ranked[:self.width] if c.time <= HOPELESS_RATIO * ranked[0].time]

  def run(self, starts: list[Kernel]) -> list[Candidate]:
    """Rounds until PATIENCE rounds in a row gain less than BEAM_MIN_PROGRESS; the last beam, fastest first."""
    for k in starts: self.seen_states.add(kernel_state(k))
    beam, stale = self.select(self.evaluate(starts)), 0
    while beam and stale < PATIENCE:
      self.round += 1
      beam_stats["rounds"] += 1
      children = [child for c in beam for child in self.children(c.kernel)]
      if not children: break
      before = beam[0].time
      beam = self.select(beam + self.evaluate(children))
      if BEAM_DEBUG >= 1:
        self.say(f"beam round {self.round}: {len(children)} candidates, best {fmt_time(beam[0].time)} "
                 f"{beam[0].kernel.applied_opts}")
      stale = stale + 1 if beam[0].time > before * (1 - float(BEAM_MIN_PROGRESS.value)) else 0
    return beam

  # -- full size: the heuristics' time, confirming what slices predicted, the output check --

  def full_size(self, k: Kernel) -> Candidate | None:
    """`k` compiled at full size and timed from two runs (its code is not remembered as seen: it is timed again with
    the other starting kernels)."""
    cands = self.compile([Candidate(k)])
    if not cands: return None
    self.time(cands[0], cutoff=0.0)
    self.seen_code.clear()
    return cands[0]

  def beats(self, winner: Candidate, base: Candidate) -> bool:
    """Whether the winner is faster than the heuristics' kernel by more than a tie, timed side by side at full size:
    the search's own times come from different moments (and perhaps slices), and noise must not make BEAM slower."""
    assert winner.binary is not None and base.binary is not None
    res = self.pool.map(duel_job, [(self.run_job(winner.binary), self.run_job(base.binary))], self.timeout, workers=1)
    return not isinstance(res[0], JobFailed) and res[0][0] < res[0][1] * (1 - TIE_RATIO)

  def confirm(self, ranked: list[Candidate], heuristic: Kernel) -> list[Candidate]:
    """The candidates and the heuristics' kernel timed at full size, fastest first: a slice only predicts."""
    if self.fraction >= 1: return ranked
    self.fraction, self.best, self.seen_code = 1.0, math.inf, set()
    kernels = {id(k): k for k in [c.kernel for c in ranked] + [heuristic]}
    return self.evaluate(list(kernels.values()))

  def outputs(self, binary: Binary) -> list[_Outputs] | None:
    """The stored buffers of one run from the fixed inputs, and which elements the kernel wrote."""
    jobs = [self.run_job(binary, fill=fill) for fill in (0x00, 0xFF)]
    runs = self.pool.map(output_job, jobs, self.timeout, workers=1)
    if any(isinstance(r, JobFailed) for r in runs): return None
    out = []
    for spec, a, b in zip(self.stored, runs[0], runs[1]):
      bytes_a, bytes_b = (np.frombuffer(x, np.uint8).reshape(-1, spec.dtype.itemsize) for x in (a, b))
      out.append(_Outputs(np.frombuffer(a, spec.dtype.np), (bytes_a == bytes_b).all(axis=1)))
    return out

  def reference(self) -> list[_Outputs] | None:
    """The unoptimized kernel's outputs on a slice that runs about CHECK_RUN_S; the whole kernel when a buffer is read
    and written (which elements a slice wrote cannot be told then)."""
    if any(s.loaded and s.stored for s in self.specs): fraction = 1.0
    else:
      if not math.isfinite(root_time := self.timed.get(id(self.root), math.inf)): root_time = self._root_time_on_slice()
      fraction = min(1.0, CHECK_RUN_S / root_time) if 0 < root_time < math.inf else 0.0
    keep, _ = slice_plan(self.root, fraction)
    res = self.pool.map(compile_job, [CompileJob(self.device.name, self.root.ast, (), keep)], self.timeout)[0]
    return None if isinstance(res, JobFailed) else self.outputs(res)

  def _root_time_on_slice(self) -> float:
    # the search dropped the unoptimized kernel (too slow, or the same code as another): time a thin slice of it
    self.seen_code = set()
    cands = self.compile([Candidate(self.root, *slice_plan(self.root, 0.01))])
    if not cands: return math.inf
    self.time(cands[0], cutoff=0.0)
    return cands[0].time

  def pick(self, ranked: list[Candidate]) -> Candidate | None:
    """The fastest candidate whose outputs agree with the unoptimized kernel's."""
    if (ref := self.reference()) is None:
      if DEBUG >= 1: self.say(f"beam: {self.root.name}: the unoptimized kernel did not run, so nothing can be checked")
      return None
    for c in ranked:
      assert c.binary is not None and not c.keep, "the check runs the whole kernel"
      got = self.outputs(c.binary)
      if got is not None and all(_agrees(r, g, s) for r, g, s in zip(ref, got, self.stored)): return c
      beam_stats["rejected"] += 1
      if DEBUG >= 1: self.say(f"beam: {self.root.name}: discarded {c.kernel.applied_opts}: its output is not the "
                              "unoptimized kernel's")
    return None

  def close(self) -> None:
    self.pool.map(release_job, [None], self.timeout, workers=1)
    self.bar.close()

  def search(self, heuristic: Kernel, sibling: Kernel | None) -> Kernel:
    """The fastest checked kernel; the heuristics' one when the kernel is too short to search, when no candidate
    passes the output check, or when the winner is not faster side by side."""
    name, base = self.root.name, self.full_size(heuristic)
    if base is not None and base.time < MIN_SEARCH_S:
      if DEBUG >= 1: self.say(f"beam: {name}: {fmt_time(base.time)} with the heuristics' opts, too short to search")
      return heuristic
    self.fraction = min(1.0, TARGET_RUN_S / base.time) if base is not None and base.time > 0 else 1.0
    starts = list({kernel_state(x): x for x in (heuristic, sibling, self.root) if x is not None}.values())
    winner = self.pick(cheapest_among_ties(self.confirm(self.run(starts), heuristic)))
    if winner is None:
      if DEBUG >= 1: self.say(f"beam: {name}: no candidate passed the output check; using the heuristics' opts")
      return heuristic
    if winner.kernel is not heuristic and base is not None and not self.beats(winner, base):
      if DEBUG >= 1: self.say(f"beam: {name}: {winner.kernel.applied_opts} is not faster than the heuristics' "
                              "opts side by side; keeping those")
      return heuristic
    if DEBUG >= 1: self.say(f"beam: {name}: {fmt_time(winner.time)} with {winner.kernel.applied_opts} (heuristics "
                            f"{fmt_time(self.timed.get(id(heuristic), math.inf))})")
    return winner.kernel

def _search(k: Kernel, device: Compiled, width: int, sibling: Kernel | None) -> Kernel:
  s = _Search(k, device, width)
  try: return s.search(hand_coded_optimizations(k), sibling)
  finally: s.close()

def beam_search(k: Kernel, device: Compiled, width: int) -> Kernel:
  """`k` with the opts that a beam search of this width finds fastest on `device`; from the cache when it can."""
  key, sibling_key = beam_cache_key(device, width, k.ast.key), beam_cache_key(device, width, shape_signature(k))
  if not IGNORE_BEAM_CACHE and (hit := cached_kernel("beam", key, k)) is not None:
    beam_stats["cache_hits"] += 1
    if DEBUG >= 1: print(f"beam: {k.name}: from the cache: {hit.applied_opts}")
    return hit
  beam_stats["searches"] += 1
  start = time.perf_counter()
  best = _search(k, device, width, cached_kernel("beam_shape", sibling_key, k))
  if DEBUG >= 1: print(f"beam: {k.name}: searched in {time.perf_counter() - start:.2f} s")
  cache_put("beam", key, best)
  cache_put("beam_shape", sibling_key, best)
  return best
