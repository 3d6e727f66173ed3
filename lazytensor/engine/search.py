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

The scheduler asks one more question under BEAM, answered by timing in `engine/pack_search.py`: which packing copies
a large reduce over products reads from.

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
  * Abandoning slow work early. A candidate stops being timed once two runs are ABANDON_RATIO times slower than the
    best; one still running long after that is killed with its worker. Beam members more than HOPELESS_RATIO times
    slower than the best are not expanded, and kernels under MIN_SEARCH_S keep the heuristics' opts without a search
    (launch overhead is all there is to win).
  * Pruning before compiling: candidates with more register lanes than BEAM_UPCAST_MAX (upcast x unroll; the
    renderer's own upcast_max is a hard limit), more local threads than BEAM_LOCAL_MAX, an unrolled body longer than
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

import contextlib
import hashlib
import json
import math
import multiprocessing
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np
from tqdm import tqdm

from lazytensor.codegen.heuristic import blocks_may_pay, hand_coded_optimizations
from lazytensor.codegen.kernel import (
  MAX_SHARES_PER_THREAD,
  AxisKind,
  Kernel,
  KernelOptError,
  Opt,
  OptOps,
  reach,
  view_of,
)
from lazytensor.codegen.program import LaunchDims, get_program, program_key
from lazytensor.device import Buffer, Compiled, Device
from lazytensor.dtype import DType, from_storage, to_dtype, to_storage
from lazytensor.helpers import (
  BEAM_DEBUG,
  BEAM_LOCAL_MAX,
  BEAM_MIN_PROGRESS,
  BEAM_TIMEOUT_SEC,
  BEAM_UPCAST_MAX,
  CACHELEVEL,
  DEBUG,
  IGNORE_BEAM_CACHE,
  PARALLEL,
  THREADS,
  Context,
  ContextVar,
  ansistrip,
  diskcache_get,
  diskcache_put,
  prod,
)
from lazytensor.uop.ops import GroupOp, Ops, UOp

CANDIDATE_NAME = "beam_candidate"  # every candidate renders under one name, so equal code is equal text
ABANDON_RATIO = 2.0     # a run this much slower than the best ends a candidate's timing
HOPELESS_RATIO = 4.0    # beam members this much slower than the best are not expanded
PATIENCE = 2            # rounds in a row without progress that end the search: a step that does not pay alone (a
                        # narrower tile) may make room for one that does (a wider unroll), and old members' children
                        # are not tried twice, so the extra round costs only the new members' children
MIN_RUNS, MAX_RUNS = 3, 20
DUEL_RUNS = 5           # turns each when the winner and the heuristics' kernel are timed side by side
MIN_TIMED_S = 0.005     # short kernels run more than MIN_RUNS times, until this much run time is summed
TARGET_RUN_S = 0.01     # kernels slower than this are timed on a slice that runs about this long
CHECK_RUN_S = 0.05      # the unoptimized reference of the output check runs on a slice about this long
MIN_SEARCH_S = 20e-6    # kernels faster than this keep the heuristics' opts
MAX_PAD_WORK = 1.25     # PADTO may add at most this much work
MAX_BODY_OPS = 4096     # register lanes x ALU ops per element: longer unrolled bodies mostly cost compile time
EXPANDING_OPS = {Ops.EXP2: 16, Ops.LOG2: 16, Ops.SIN: 32, Ops.COS: 32}  # about this many ALU ops each once lowered
TIE_RATIO = 0.02        # candidates this close to the fastest are a tie, won by the one cheaper to lower and compile
KILL_GRACE_S = 0.5      # a timing job gets this long beyond its runs (to load the program) before it is killed
# relative; exact for ints and bools
CHECK_TOLERANCE = {"float16": 2e-2, "bfloat16": 2e-2, "float32": 1e-3, "float64": 1e-8}

# what searching has done in this process: tests and benchmarks read it
beam_stats: dict[str, int] = {"searches": 0, "cache_hits": 0, "compiled": 0, "duplicates": 0, "timed": 0, "failed": 0,
                              "rejected": 0}

# ---- the action list ----

# 6: rows of an AVX2 register tile (6 x 2 <8 x float> fill 12 of 16 registers); 7: a conv's 56-wide rows
UPCAST_AMTS = (0, 2, 3, 4, 6, 7, 8, 16, 32)
UNROLL_AMTS = (0, 2, 3, 4, 8, 16)
LOCAL_AMTS = (2, 4, 8, 16, 32)
GROUP_AMTS = (0, 4, 8, 16)
GROUPTOP_AMTS = (16, 32, 64, 128, 256)
PADTO_AMTS = (4, 8, 16, 32)

def _thread_amts() -> tuple[int, ...]:
  """THREAD shares to try: powers of two and the thread count's multiples, up to MAX_SHARES_PER_THREAD per thread (on
  one thread, shares are blocks of the output that run in order: heuristic._cache_blocks)."""
  cores = max(1, int(THREADS.value))
  return tuple(sorted({n for n in (2, 4, 8, 16, 32, 64, 128) if n <= cores * MAX_SHARES_PER_THREAD} |
                      {cores * m for m in (1, 2, 4) if cores * m > 1}))

def actions(k: Kernel) -> list[Opt]:
  """Every opt worth trying next on `k`: by the kind of each axis and by what its renderer can do."""
  r, out = k.renderer, []
  for axis, kind in enumerate(k.kinds):
    if kind in (AxisKind.GLOBAL, AxisKind.LOCAL): out += [Opt(OptOps.UPCAST, axis, a) for a in UPCAST_AMTS]
    if kind is AxisKind.GLOBAL:
      out += [Opt(OptOps.SWAP, axis, other) for other in range(axis + 1, k.shape_len)
              if k.kinds[other] is AxisKind.GLOBAL]
      # on one thread, shares are only cache blocks
      if r.has_threads and (int(THREADS.value) > 1 or blocks_may_pay(k)):
        out += [Opt(OptOps.THREAD, axis, a) for a in _thread_amts()]
      if r.has_local: out += [Opt(OptOps.LOCAL, axis, a) for a in LOCAL_AMTS]
    if kind is AxisKind.REDUCE:
      out += [Opt(OptOps.UNROLL, axis, a) for a in UNROLL_AMTS]
      if r.has_shared:
        out += [Opt(OptOps.GROUP, axis, a) for a in GROUP_AMTS] + [Opt(OptOps.GROUPTOP, axis, a) for a in GROUPTOP_AMTS]
    if kind in (AxisKind.GLOBAL, AxisKind.REDUCE): out += [Opt(OptOps.PADTO, axis, a) for a in PADTO_AMTS]
  if not k.applied_opts: out += [Opt(OptOps.TC, i, 0) for i in range(len(r.tensor_cores))]
  return out

def _amounts(op: OptOps) -> tuple[int, ...]:
  table = {OptOps.UPCAST: UPCAST_AMTS, OptOps.UNROLL: UNROLL_AMTS, OptOps.LOCAL: LOCAL_AMTS, OptOps.GROUP: GROUP_AMTS,
           OptOps.GROUPTOP: GROUPTOP_AMTS, OptOps.PADTO: PADTO_AMTS, OptOps.THREAD: _thread_amts()}
  return table.get(op, ())

def edits(opts: Sequence[Opt]) -> list[list[Opt]]:
  """Opt lists one edit away: one opt dropped, or one opt with another amount. Appending only ever adds to a beam
  member; edits let the search leave a good start (the heuristics' tile) for a neighbouring one (a narrower tile that
  leaves registers for an unroll, threads on another axis)."""
  out = []
  for i, o in enumerate(opts):
    out.append([*opts[:i], *opts[i + 1:]])
    out += [[*opts[:i], Opt(o.op, o.axis, amt), *opts[i + 1:]] for amt in _amounts(o.op) if amt != o.amt]
  return out

def _state(k: Kernel) -> tuple:
  """What decides the code a kernel lowers to: two kernels with the same state are the same candidate."""
  return (k.full_shape, tuple(k.kinds), tuple(k.sts), k.reduce_pad, k.out_pad, k.tensor_core)

def body_ops(ast: UOp) -> int:
  """ALU ops per output element, transcendentals counted as the polynomials they lower to."""
  return sum(EXPANDING_OPS.get(u.op, 1) for u in ast.toposort if u.op in GroupOp.ALU or u.op is Ops.REDUCE_AXIS)

def _hopeless(k: Kernel, work: int, ops: int) -> bool:
  """Too many register lanes or local threads, a register body so long that it only costs compile time, or padding
  that adds too much work."""
  lanes = k.upcast_size()
  return lanes > int(BEAM_UPCAST_MAX.value) or k.local_size() > int(BEAM_LOCAL_MAX.value) or \
    (lanes > 1 and lanes * ops > MAX_BODY_OPS) or prod(k.full_shape) > MAX_PAD_WORK * work

def _replay(k: Kernel, opts: Sequence[Opt]) -> Kernel | None:
  """`k` with `opts` applied, or None when one of them is illegal for it."""
  out = k.copy()
  try:
    for o in opts: out.apply_opt(o)
  except KernelOptError: return None
  return out

# ---- the cache: opts as JSON rows, under a key that names everything the choice depends on ----

def beam_cache_key(device: Compiled, width: int, what: bytes) -> str:
  return program_key(device.renderer, device.compiler.cache_key, what, ("BEAM", width))

def _shape_signature(k: Kernel) -> bytes:
  """The loop structure of a kernel without its arithmetic: shape, axis kinds, how each buffer is walked."""
  access = [(n.op.name, n.src[0].dtype.name, st.shape, st.real_strides()) for n, st in zip(k.view_nodes, k.sts)
            if n.op in (Ops.LOAD, Ops.STORE)]
  return repr((k.full_shape, [kind.name for kind in k.kinds], access)).encode()

def encode_opts(opts: Sequence[Opt]) -> bytes: return json.dumps([[o.op.name, o.axis, o.amt] for o in opts]).encode()

def decode_opts(raw: bytes) -> list[Opt] | None:
  """The opts of a cache row, or None when the row is not what encode_opts writes."""
  try:
    rows = json.loads(raw)
    assert isinstance(rows, list) and all(isinstance(r, list) and len(r) == 3 for r in rows)
    assert all(isinstance(a, (int, type(None))) and isinstance(n, int) for _, a, n in rows)
    return [Opt(OptOps[name], axis, amt) for name, axis, amt in rows]
  except (ValueError, KeyError, TypeError, AssertionError): return None

_reported: set[str] = set()

def report_once(msg: str) -> None:
  if msg not in _reported:
    _reported.add(msg)
    print(f"lazytensor: {msg}", file=sys.stderr)

def _cached(table: str, key: str, k: Kernel) -> Kernel | None:
  if CACHELEVEL.value < 2 or (raw := diskcache_get(table, key)) is None: return None
  if (opts := decode_opts(raw)) is None:
    report_once(f"BEAM cache: ignoring corrupt entries in table {table!r}; they are searched again")
    return None
  return _replay(k, opts)

def _cache_put(table: str, key: str, k: Kernel) -> None:
  if CACHELEVEL.value >= 2: diskcache_put(table, key, encode_opts(k.applied_opts))

# ---- scratch buffers and the jobs that workers run ----

@dataclass(frozen=True)
class BufferSpec:
  """One buffer argument of a kernel: how large the kernel's views need it, and how the kernel uses it."""
  index: int
  size: int
  dtype: DType
  loaded: bool
  stored: bool
  whole: bool  # the kernel stores every element (an unmasked store view with one position per element)

def buffer_specs(ast: UOp) -> list[BufferSpec]:
  nodes = [u for u in ast.toposort if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.DEFINE_GLOBAL]
  specs = []
  for g in sorted({n.src[0] for n in nodes}, key=lambda g: g.arg):
    mine = [n for n in nodes if n.src[0] is g]
    size = max(1, *(reach(n) for n in mine))
    stores = [view_of(n) for n in mine if n.op is Ops.STORE]
    whole = any(st.size == size and all(v.mask is None for v in st.views) for st in stores)
    # a scatter's store reads what it updates
    loaded = any(n.op is Ops.LOAD or len(n.src) == 4 for n in mine)
    specs.append(BufferSpec(g.arg, size, to_dtype(g.dtype.name), loaded, bool(stores), whole))
  assert [s.index for s in specs] == list(range(len(specs))), "a kernel's buffers are numbered 0..n-1"
  return specs

def input_values(spec: BufferSpec) -> np.ndarray:
  """Fixed random values for an input buffer: the same in every process, so timing and checks see the same data."""
  rng = np.random.default_rng(spec.index)
  if spec.dtype.is_bool: return rng.random(spec.size) < 0.5
  if spec.dtype.is_int: return rng.integers(0 if spec.dtype.is_unsigned else -8, 9, spec.size).astype(spec.dtype.np)
  return to_storage(rng.random(spec.size, dtype=np.float32) * 4 - 2, spec.dtype)

def raw_bytes(x: np.ndarray) -> memoryview: return np.ascontiguousarray(x).view(np.uint8).data

@dataclass
class _Scratch:
  key: tuple[str, bytes]
  specs: list[BufferSpec]
  bufs: list[Buffer]
  inputs: dict[int, np.ndarray]

# the buffers of the kernel this process is timing; one kernel's at a time
_scratch: list[_Scratch] = []

def _scratch_for(device: str, ast: UOp) -> _Scratch:
  if not _scratch or _scratch[0].key != (device, ast.key):
    _scratch.clear()  # free the last kernel's buffers first
    specs = buffer_specs(ast)
    bufs = [Buffer(device, s.size, s.dtype) for s in specs]
    inputs = {s.index: input_values(s) for s in specs if s.loaded}
    for s, b in zip(specs, bufs): b.copyin(raw_bytes(inputs[s.index]) if s.loaded else memoryview(bytes(b.nbytes)))
    _scratch.append(_Scratch((device, ast.key), specs, bufs, inputs))
  return _scratch[0]

@dataclass(frozen=True)
class Binary:
  """A compiled candidate: a digest of its source (equal code, equal digest), the program, its launch dims, and how
  long lowering and compiling it took."""
  digest: bytes
  lib: bytes
  launch: LaunchDims
  compile_s: float

@dataclass(frozen=True)
class CompileJob:
  device: str
  ast: UOp
  opts: tuple[Opt, ...]
  keep: tuple[tuple[int, int], ...] = ()  # (axis, size): GLOBAL axes cut to a prefix, for timing a slice

@dataclass(frozen=True)
class RunJob:
  device: str
  ast: UOp
  binary: Binary
  cutoff: float = math.inf  # seconds: a run slower than this ends the timing
  fill: int = 0             # output runs: the byte that output buffers hold before the run

def compile_job(job: CompileJob) -> Binary:
  """Kernel -> opts -> (slice) -> ProgramSpec -> binary, all in a worker."""
  start, dev = time.perf_counter(), Device[job.device]
  k = Kernel(job.ast, dev.renderer)
  for o in job.opts: k.apply_opt(o)
  for axis, size in job.keep: k.keep_prefix(axis, size)
  spec = get_program(k, CANDIDATE_NAME)
  lib = dev.compiler.compile(spec.source)
  return Binary(hashlib.sha256(spec.source.encode()).digest(), lib, spec.launch, time.perf_counter() - start)

def prepare_job(job: RunJob) -> None:
  """Allocate and fill the scratch buffers (outputs too: their pages get touched here, not in a timed run), so that
  the time limits of the runs that follow do not count it."""
  _scratch_for(job.device, job.ast)

def release_job(job: None) -> None:
  """Free the scratch buffers once a kernel's search is over."""
  _scratch.clear()

def _launch(job: RunJob) -> Callable[[], float]:
  scratch = _scratch_for(job.device, job.ast)
  program = Device[job.device].load(CANDIDATE_NAME, job.binary.lib)
  handles = [b.handle for b in scratch.bufs]
  launch = job.binary.launch.kwargs()
  return lambda: float(program(*handles, wait=True, **launch) or 0.0)

def time_job(job: RunJob) -> list[float]:
  """Run times in seconds: at least MIN_RUNS (more for short kernels), fewer once a run is slower than the cutoff."""
  run, times = _launch(job), list[float]()
  while len(times) < MAX_RUNS:
    times.append(run())
    # two runs over the cutoff, not one: a first run pays for cold caches and page faults
    if (len(times) >= 2 and min(times) > job.cutoff) or (len(times) >= MIN_RUNS and sum(times) >= MIN_TIMED_S): break
  return times

def duel_job(jobs: tuple[RunJob, RunJob]) -> tuple[float, float]:
  """The best times of two programs run in turns on the same buffers, so that drift in the machine hits both: at least
  DUEL_RUNS turns (two for kernels so long that those would not fit in a third of BEAM_TIMEOUT_SEC), more for short
  kernels until MIN_TIMED_S."""
  a, b = _launch(jobs[0]), _launch(jobs[1])
  ta, tb, start = [a()], [b()], time.perf_counter()
  budget = float(BEAM_TIMEOUT_SEC.value) / 3
  while len(ta) < MAX_RUNS and (len(ta) < DUEL_RUNS or sum(ta) + sum(tb) < MIN_TIMED_S):
    if time.perf_counter() - start > budget and len(ta) >= 2: break
    ta.append(a())
    tb.append(b())
  return min(ta), min(tb)

def output_job(job: RunJob) -> list[bytes]:
  """The stored buffers after one run, from the fixed inputs; outputs start as `fill` bytes, so that comparing two
  runs with different fills shows which elements the kernel wrote."""
  scratch = _scratch_for(job.device, job.ast)
  for s, b in zip(scratch.specs, scratch.bufs):
    if s.loaded and s.stored: b.copyin(raw_bytes(scratch.inputs[s.index]))  # an earlier run changed it
    elif s.stored: b.copyin(memoryview(bytes([job.fill]) * b.nbytes))
  _launch(job)()
  return [b.numpy().tobytes() for s, b in zip(scratch.specs, scratch.bufs) if s.stored]

# ---- the worker pool ----

class JobFailed:
  """What a job that raised, killed its worker or ran out of time returns instead of a result."""
  def __init__(self, why: str) -> None: self.why = why
  def __repr__(self) -> str: return f"JobFailed({self.why})"

def _serve(conn: Connection) -> None:
  """A worker: run (function, job, knob values) messages one at a time and answer each."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the searching process, which then stops its workers
  while True:
    try: fn, job, knobs = conn.recv()
    except EOFError: return
    try:
      with Context(**knobs): reply: tuple[bool, Any] = (True, fn(job))
    except Exception as e: reply = (False, f"{type(e).__name__}: {e}")
    conn.send(reply)

def _mp_context() -> Any:
  """forkserver: workers fork from a clean server with lazytensor imported (fast to replace after a kill, and safe with
  threads or a GPU context in this process); spawn where there is no forkserver."""
  if "forkserver" not in multiprocessing.get_all_start_methods(): return multiprocessing.get_context("spawn")
  ctx = multiprocessing.get_context("forkserver")
  ctx.set_forkserver_preload([__name__, "lazytensor.runtime.ops_cpu", "lazytensor.runtime.ops_emu"])
  return ctx

@contextlib.contextmanager
def _main_script_hidden() -> Iterator[None]:
  """Workers need nothing from the user's script, but spawn and forkserver children import `__main__` again (and run
  all of it when it has no `if __name__ == "__main__":` guard) unless it looks like an interactive session."""
  main = sys.modules["__main__"]
  spec, path = getattr(main, "__spec__", None), main.__dict__.pop("__file__", None)
  main.__spec__ = None
  try: yield
  finally:
    main.__spec__ = spec
    if path is not None: main.__file__ = path

class _Worker:
  def __init__(self, ctx: Any) -> None:
    self.conn, child = ctx.Pipe()
    self.proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="lazytensor-beam")
    with _main_script_hidden(): self.proc.start()
    child.close()

  def stop(self) -> None:
    if self.proc.is_alive(): self.proc.kill()
    self.proc.join()
    self.conn.close()

class WorkerPool:
  """Worker processes, each running one job at a time, so a job that hangs or crashes is known by its worker: that
  worker alone is killed and replaced, the job fails, the others go on."""
  def __init__(self, size: int) -> None:
    self.ctx = _mp_context()
    self.workers = [_Worker(self.ctx) for _ in range(size)]

  def _replace(self, slot: int) -> None:
    self.workers[slot].stop()
    self.workers[slot] = _Worker(self.ctx)

  def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], timeout: float, workers: int = 0) -> list[Any]:
    """fn(job) for each job on the first `workers` workers (0: all), results in order; JobFailed for failures."""
    knobs = {key: var.value for key, var in ContextVar.registry.items()} | {"DEBUG": 0}  # the bar owns the terminal
    todo, results = list(enumerate(jobs))[::-1], [JobFailed("not run")] * len(jobs)
    busy: dict[int, tuple[int, float]] = {}  # worker slot -> (job index, deadline)
    try:
      while todo or busy:
        for slot in range(workers or len(self.workers)):
          if slot not in busy and todo:
            i, job = todo.pop()
            self._send(slot, (fn, job, knobs))
            busy[slot] = (i, time.monotonic() + timeout)
        self._collect(busy, results, timeout)
    finally:  # interrupted: answers still on their way would be read as answers to later jobs
      for slot in busy: self._replace(slot)
    return results

  def _send(self, slot: int, msg: tuple) -> None:
    try: self.workers[slot].conn.send(msg)
    except OSError:  # the worker died while idle (killed from outside): a fresh one takes the job
      self._replace(slot)
      self.workers[slot].conn.send(msg)

  def _collect(self, busy: dict[int, tuple[int, float]], results: list[Any], timeout: float) -> None:
    next_deadline = min(deadline for _, deadline in busy.values())
    ready = wait([self.workers[slot].conn for slot in busy], timeout=max(0.0, next_deadline - time.monotonic()))
    for slot, (i, deadline) in list(busy.items()):
      w = self.workers[slot]
      if w.conn in ready:
        try:
          ok, val = w.conn.recv()
          results[i] = val if ok else JobFailed(val)
        except (EOFError, OSError):
          w.proc.join()
          results[i] = JobFailed(f"the worker died (exit code {w.proc.exitcode})")
          self._replace(slot)
      elif time.monotonic() >= deadline:
        results[i] = JobFailed(f"took longer than {timeout:.3g} s")
        self._replace(slot)
      else: continue
      del busy[slot]

  def close(self) -> None:
    for w in self.workers: w.stop()
    self.workers = []

class InlinePool:
  """PARALLEL=0: jobs run in this process one after another, with no time limit and no protection from crashes."""
  def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], timeout: float, workers: int = 0) -> list[Any]:
    out: list[Any] = []
    for job in jobs:
      try: out.append(fn(job))
      except Exception as e: out.append(JobFailed(f"{type(e).__name__}: {e}"))
    return out

  def close(self) -> None: pass

_pools: dict[int, WorkerPool | InlinePool] = {}  # one pool per process, of PARALLEL workers

def get_pool() -> WorkerPool | InlinePool:
  size = max(0, int(PARALLEL.value))
  if size not in _pools:
    close_pool()
    _pools[size] = WorkerPool(size) if size > 0 else InlinePool()
  return _pools[size]

def close_pool() -> None:
  for pool in _pools.values(): pool.close()
  _pools.clear()


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
    for child in [_replay(k, [opt]) for opt in actions(k)] + [_replay(self.root, e) for e in edits(k.applied_opts)]:
      if child is None or _hopeless(child, self.work, self.ops): continue
      if (state := _state(child)) in self.seen_states: continue
      self.seen_states.add(state)
      out.append(child)
    return out

  def select(self, cands: list[Candidate]) -> list[Candidate]:
    """The `width` fastest, except those so much slower than the best that expanding them is hopeless."""
    ranked = sorted(cands, key=lambda c: c.time)
    return [c for c in ranked[:self.width] if c.time <= HOPELESS_RATIO * ranked[0].time]

  def run(self, starts: list[Kernel]) -> list[Candidate]:
    """Rounds until PATIENCE rounds in a row gain less than BEAM_MIN_PROGRESS; the last beam, fastest first."""
    for k in starts: self.seen_states.add(_state(k))
    beam, stale = self.select(self.evaluate(starts)), 0
    while beam and stale < PATIENCE:
      self.round += 1
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
    starts = list({_state(x): x for x in (heuristic, sibling, self.root) if x is not None}.values())
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
  key, sibling_key = beam_cache_key(device, width, k.ast.key), beam_cache_key(device, width, _shape_signature(k))
  if not IGNORE_BEAM_CACHE and (hit := _cached("beam", key, k)) is not None:
    beam_stats["cache_hits"] += 1
    if DEBUG >= 1: print(f"beam: {k.name}: from the cache: {hit.applied_opts}")
    return hit
  beam_stats["searches"] += 1
  start = time.perf_counter()
  best = _search(k, device, width, _cached("beam_shape", sibling_key, k))
  if DEBUG >= 1: print(f"beam: {k.name}: searched in {time.perf_counter() - start:.2f} s")
  _cache_put("beam", key, best)
  _cache_put("beam_shape", sibling_key, best)
  return best
