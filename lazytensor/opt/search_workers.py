"""BEAM search's workers (opt/search.py): the jobs that compile, time and check candidates, run in worker processes
on scratch buffers of fixed random inputs, and the pool that runs them, where a job that raises, crashes its worker or
runs out of time is an ordinary outcome (JobFailed) that costs one worker, replaced.
"""
from __future__ import annotations

import contextlib
import hashlib
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

from lazytensor.codegen.program import CANDIDATE_NAME, compile_program
from lazytensor.dtype import DType, to_dtype, to_storage
from lazytensor.helpers import BEAM_TIMEOUT_SEC, PARALLEL, Context, ContextVar
from lazytensor.opt.kernel import Kernel, Opt, reach, view_of
from lazytensor.opt.rules import apply_opt
from lazytensor.renderer import LaunchDims
from lazytensor.runtime.device import Buffer, Device
from lazytensor.uop.ops import GroupOp, Ops, UOp

# the best of two runs ranks a candidate: the last beam is timed again at full size and the winner side by side with the
# heuristics' kernel, so a third run bought little but a third more of the search's run time
MIN_RUNS, MAX_RUNS = 2, 20
FAR_RATIO = 4.0         # a first run this many times the cutoff ends the timing: no cold cache costs that much
DUEL_RUNS = 5           # turns each when the winner and the heuristics' kernel are timed side by side
MIN_TIMED_S = 0.005     # short kernels run more than MIN_RUNS times, until this much run time is summed

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

_ACCESSES = GroupOp.Load | GroupOp.Store | {Ops.CHECK}

def buffer_specs(ast: UOp) -> list[BufferSpec]:
  # an index check's flags (schedule/index_check.py) are neither loaded nor stored: zeros, never compared
  nodes = [u for u in ast.toposort if u.op in _ACCESSES and u.src[0].op is Ops.DEFINE_GLOBAL]
  specs = []
  for g in sorted({n.src[0] for n in nodes}, key=lambda g: g.arg):
    mine = [n for n in nodes if n.src[0] is g]
    size = max(1, *(reach(n) for n in mine))
    stores = [view_of(n) for n in mine if n.op in GroupOp.Store]
    whole = any(st.size == size and all(v.mask is None for v in st.views) for st in stores)
    # a scatter's store reads what it updates
    loaded = any(n.op in GroupOp.Load or n.op is Ops.SCATTER for n in mine)
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
  """A compiled candidate: a digest of its source (equal code, equal digest), the program, its launch dims, how long
  lowering and compiling it took, and the scalar arguments it is run with (ProgramSpec.var_args: 1 each, for every
  candidate alike)."""
  digest: bytes
  lib: bytes
  launch: LaunchDims
  compile_s: float
  vals: tuple[Any, ...] = ()

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
  """Kernel -> opts -> (slice) -> ProgramSpec -> binary, all in a worker (the process that runs it loads it)."""
  start, dev = time.perf_counter(), Device[job.device]
  k = Kernel(job.ast, dev.renderer)
  for o in job.opts: apply_opt(k, o)
  for axis, size in job.keep: k.keep_prefix(axis, size)
  spec, lib = compile_program(k, dev, candidate=True)
  return Binary(hashlib.sha256(spec.source.encode()).digest(), lib, spec.launch, time.perf_counter() - start,
                spec.var_args())

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
  launch, vals = job.binary.launch.kwargs(), job.binary.vals
  return lambda: float(program(*handles, wait=True, vals=vals, **launch) or 0.0)

def time_job(job: RunJob) -> list[float]:
  """Run times in seconds: at least MIN_RUNS (more for short kernels), fewer once a run is slower than the cutoff."""
  run = _launch(job)
  times = [run()]
  # two runs over the cutoff, not one: a first run pays for cold caches and page faults, though not FAR_RATIO times
  # over (a cutoff of 0 asks for two runs)
  far = FAR_RATIO * job.cutoff if job.cutoff > 0 else math.inf
  while len(times) < MAX_RUNS and times[0] <= far:
    times.append(run())
    if min(times) > job.cutoff or (len(times) >= MIN_RUNS and sum(times) >= MIN_TIMED_S): break
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
  conn.send(True)  # started: a job's time limit counts from here, not from the (maybe slow) start of the process
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
  START_TIMEOUT = 120.0  # seconds for a worker process to start: a loaded machine's fork and imports, not a job's time

  def __init__(self, ctx: Any) -> None:
    self.conn, child = ctx.Pipe()
    self.proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="lazytensor-beam")
    with _main_script_hidden(): self.proc.start()
    child.close()

  def wait_started(self) -> None:
    try: started = self.conn.poll(self.START_TIMEOUT) and self.conn.recv() is True
    except (EOFError, OSError): started = False  # it died while starting
    if not started:
      self.stop()
      raise RuntimeError(f"a BEAM worker process did not start within {self.START_TIMEOUT:.0f} s")

  def stop(self) -> None:
    if self.proc.is_alive(): self.proc.kill()
    self.proc.join()
    self.conn.close()

class WorkerPool:
  """Worker processes, each running one job at a time, so a job that hangs or crashes is known by its worker: that
  worker alone is killed and replaced, the job fails, the others go on."""
  def __init__(self, size: int) -> None:
    self.ctx = _mp_context()
    self.workers = [_Worker(self.ctx) for _ in range(size)]  # all start at once, then each is waited for
    for w in self.workers: w.wait_started()

  def _replace(self, slot: int) -> None:
    self.workers[slot].stop()
    self.workers[slot] = _Worker(self.ctx)
    self.workers[slot].wait_started()

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
