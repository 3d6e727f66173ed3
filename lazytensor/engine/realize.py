"""Lowering, compiling (cached) and running schedule items; DEBUG=2 prints one line per kernel."""
from __future__ import annotations

import contextlib
import functools
import operator
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from lazytensor.codegen.program import ProgramSpec, build_program, opts_choice, print_listing, program_key
from lazytensor.engine.queues import Queues, all_queued, queueable
from lazytensor.helpers import (
  BEAM,
  DEBUG,
  LRU,
  NOOPT,
  PROGRAM_CACHE,
  QUEUES,
  GlobalCounters,
  ansilen,
  knob_state,
  use_color,
)
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import Kernel, Opt
from lazytensor.opt.optops import KernelOptError, axis_legend
from lazytensor.opt.rules import apply_opt
from lazytensor.opt.search import beam_search
from lazytensor.runtime import remote
from lazytensor.runtime.device import Buffer, Compiled, Device, Program, _compile_memo, compile_stats
from lazytensor.schedule.index_check import IndexFlags, bad_index
from lazytensor.schedule.scheduler import ScheduleItem
from lazytensor.uop.ops import Ops, UOp


@dataclass
class CompiledRunner:
  """A compiled kernel and how to launch it."""
  display_name: str
  program: Program
  kernel: Kernel
  flops: int
  mem: int
  spec: ProgramSpec

  def __post_init__(self) -> None:
    self.launch: dict[str, Any] = self.spec.launch.kwargs()
    # the arguments that are the flags of index checks (schedule/index_check.py), read after the schedule
    self.flag_args = tuple(sorted({u.src[0].arg for u in self.kernel.ast.toposort if u.op is Ops.CHECK}))
    # a launch with no scalar arguments, untimed, as one call on the Buffers where the device has one (its
    # program's `launcher`, made once here): every eager kernel runs through it
    make = getattr(self.program, "launcher", None)
    self.direct: Callable[[tuple[Buffer, ...]], None] | None = \
      make(len(self.spec.buffers), **self.launch) if make is not None and not self.spec.vars else None

  def __call__(self, bufs: tuple[Buffer, ...], wait: bool = False, vals: tuple[Any, ...] = ()) -> float | None:
    """One launch on `bufs`, the kernel's scalar arguments taking `vals` (ScheduleItem.vals)."""
    typed = self.spec.var_args(vals) if vals else ()
    return self.program(*map(_handle, bufs), wait=wait, vals=typed, **self.launch)

# a buffer's memory, read with no Python frame (map of a comprehension's frame) at every launch
_handle = operator.attrgetter("handle")

# lazytensor/viz listens: to each kernel compiled (with its program), and to each schedule that ran
kernel_listeners: list[Callable[[Kernel, ProgramSpec], None]] = []
run_listeners: list[Callable[[list[ScheduleItem]], None]] = []

def optimize_kernel(ast: UOp, device: Compiled) -> Kernel:
  """The kernel with its optimizations: none with NOOPT, beam search with BEAM >= 1, the hand-coded heuristics
  otherwise."""
  k = Kernel(ast, device.renderer)
  if NOOPT: return k
  if k.symbolic: return _replay(k, _choose(k.at_max(), device))
  return _choose(k, device)

def _choose(k: Kernel, device: Compiled) -> Kernel:
  return beam_search(k, device, int(BEAM.value)) if BEAM >= 1 else hand_coded_optimizations(k)

def _replay(k: Kernel, chosen: Kernel) -> Kernel:
  """A copy of the symbolic kernel k with the opts chosen for it at its Variables' largest values, up to the first
  that it refuses (a split of a symbolic axis): the opts after it name axes of the other kernel's layout."""
  k = k.copy()
  for opt in chosen.applied_opts:
    try: apply_opt(k, opt)
    except KernelOptError: break
  return k

def compile_kernel(ast: UOp, device: Compiled, opts: list[Opt] | None = None) -> CompiledRunner:
  """AST -> Kernel -> opts -> ProgramSpec -> binary -> loaded program (codegen/program.build_program).

  With `opts` None the kernel is optimized as the knobs say; a list (even empty) is applied as given."""
  if opts is None: k = optimize_kernel(ast, device)
  else:
    k = Kernel(ast, device.renderer)
    for o in opts: apply_opt(k, o)
  if DEBUG >= 5: print_listing(f"AST of {k.name}", repr(ast))
  if DEBUG >= 3: _print_opts(k)
  spec, program = build_program(k, device, relower=bool(kernel_listeners))  # VIZ shows the passes: lower
  flops, mem = k.flops_and_mem()
  for listener in kernel_listeners: listener(k, spec)
  return CompiledRunner(k.name, program, k, flops, mem, spec)

_legend_shown = False

def _print_opts(k: Kernel) -> None:
  """DEBUG>=3: the kernel's name and opts. In color the name's shape shows each axis's kind, and a legend names the
  colors the first time; without color (not a terminal, NO_COLOR) the kinds are written out."""
  global _legend_shown
  if not use_color():
    axes = ", ".join(f"{s} {kind.name.lower()}" for s, kind in zip(k.full_shape, k.kinds))
    print(f"{k.name}: {k.applied_opts}" + (f"  axes: {axes}" if axes else ""))
    return
  if not _legend_shown:
    print(axis_legend())
    _legend_shown = True
  print(f"{k.name}: {k.applied_opts}")

# compiled kernels by program key, as many as PROGRAM_CACHE: an evicted one is freed (its engine or module with it,
# once no TinyJit and no entry of _memo holds it) and built again from the disk cache when it is needed
_runners: LRU[tuple[str, str], CompiledRunner] = LRU(PROGRAM_CACHE)

def _runner_for(device_name: str, ast: UOp, knobs: int) -> CompiledRunner:
  """The runner of an AST under the knobs' present values (`knobs` is their knob_state(), for _memo's key): the one of
  its program key in _runners, else compiled."""
  dev = Device[device_name]
  key = (device_name, program_key(dev.renderer, dev.compiler.cache_key, ast.key, opts_choice()))
  if (hit := _runners.get(key)) is None: hit = _runners.put(key, compile_kernel(ast, dev))
  return hit

# the runner of each (device, AST node, value of every knob), the last PROGRAM_CACHE of them: an eager step looks up
# each of its kernels at every call, and a hit is one call into C (functools.lru_cache), without hashing the AST and
# the knobs into a program key again. Made anew when PROGRAM_CACHE changes
_memo: Callable[[str, UOp, int], CompiledRunner] = functools.lru_cache(maxsize=PROGRAM_CACHE.value)(_runner_for)
_memo_size = PROGRAM_CACHE.value

def get_runner(device_name: str, ast: UOp) -> CompiledRunner:
  """The compiled kernel for an AST on a device; built once per process for each program_key (which covers the knobs
  that choose its opts and every knob that changes its code), again if PROGRAM_CACHE has dropped it since."""
  if _memo_size != PROGRAM_CACHE.value: _new_memo()
  return _memo(device_name, ast, knob_state())

def _new_memo() -> None:
  global _memo, _memo_size
  _memo_size = PROGRAM_CACHE.value
  _memo = functools.lru_cache(maxsize=_memo_size)(_runner_for)

def forget_programs() -> None:
  """Drop every program and binary this process holds, as a new process starts: the next use of a kernel reads it back
  from the disk cache (or compiles it)."""
  _new_memo()
  _runners.clear()
  _compile_memo.clear()

def _copy(dst: Buffer, src: Buffer) -> None:
  if dst.allocator.transfer(dst.handle, src.handle, dst.nbytes, src.allocator): return
  # host memory (CPU devices) is read where it lies: one copy instead of two, and no temporary array
  arr = src.host_view()
  dst.copyin((arr if arr is not None else src.numpy()).data.cast("B"))

class ExecItem(NamedTuple):
  """One step that ran: a compiled kernel, a copy (runner None) or, in a mesh across ranks, an exchange of copies
  between ranks (runtime/remote.py), its buffers and the values of its scalar arguments. TinyJit replays these. (A
  NamedTuple: every eager kernel launch makes one.)"""
  runner: CompiledRunner | remote.Exchange | None
  bufs: tuple[Buffer, ...]
  vals: tuple[Any, ...] = ()

  @property
  def written(self) -> tuple[Buffer, ...]:
    """The buffers this step writes: a copy's destination, a kernel's stored buffers, an exchange's receives'."""
    return _written(self.runner, self.bufs)

  def run(self, bufs: tuple[Buffer, ...] | None = None, vals: tuple[Any, ...] | None = None,
          queues: Queues | None = None) -> None:
    _execute(self.runner, self.bufs if bufs is None else bufs, DEBUG.value, self.vals if vals is None else vals,
             queues)

def _written(runner: CompiledRunner | remote.Exchange | None, bufs: tuple[Buffer, ...]) -> tuple[Buffer, ...]:
  if runner is None: return bufs[:1]
  if isinstance(runner, remote.Exchange): return runner.written(bufs)
  return tuple(bufs[store.src[0].arg] for store in runner.kernel.ast.src)

def _launch(runner: CompiledRunner | None, bufs: tuple[Buffer, ...], vals: tuple[Any, ...]) -> None:
  if runner is None: _copy(bufs[0], bufs[1])
  else: runner(bufs, vals=vals)

def _execute(runner: CompiledRunner | remote.Exchange | None, bufs: tuple[Buffer, ...], debug: int,
             vals: tuple[Any, ...] = (), queues: Queues | None = None) -> None:
  """Run one step: a kernel, or a copy where runner is None, and count it (DEBUG=2 prints it). The buffers are
  allocated as the copy or the launch reads their handles. With `queues`, the step is queued on its device's worker
  (engine/queues.py) and counted here, untimed. In a mesh across ranks, a copy may be another rank's (skipped), and
  copies between ranks run as Exchanges (runtime/remote.py)."""
  if isinstance(runner, remote.Exchange):
    _exchange(runner, bufs, debug, queues)
    return
  if runner is None and remote.joined is not None and not remote.route(bufs[0], bufs[1]): return
  if queues is not None:
    queues.submit(bufs[0].device, functools.partial(_launch, runner, bufs, vals), bufs, _written(runner, bufs))
    et: float | None = None
    flops, mem = (0, bufs[0].nbytes * 2) if runner is None else (runner.flops, runner.mem)
  elif runner is None:
    st = time.perf_counter()
    _copy(bufs[0], bufs[1])
    et = time.perf_counter() - st
    flops, mem = 0, bufs[0].nbytes * 2
  else:
    if debug < 2 and runner.direct is not None: et = runner.direct(bufs)
    else: et = runner(bufs, wait=debug >= 2, vals=vals)
    flops, mem = runner.flops, runner.mem
  GlobalCounters.kernel_count += 1
  GlobalCounters.global_ops += flops
  GlobalCounters.global_mem += mem
  if et is not None: GlobalCounters.time_sum_s += et
  if debug >= 2:
    name = runner.display_name if runner is not None else \
      f"copy {bufs[0].nbytes:8d}, {bufs[0].device} <- {bufs[1].device}"
    t = et or 0.0
    pad = " " * max(0, 40 - ansilen(name))
    perf = f"({flops / t * 1e-9:9.2f} GFLOPS {mem / t * 1e-9:7.2f} GB/s)" if t > 0 else ""
    # a device that sees every access (EMU) says what the launch moved: its program's `traffic`
    if (traffic := getattr(runner.program, "traffic", None) if runner is not None else None) is not None:
      perf += f" {traffic}"
    print(f"*** {bufs[0].device:6s} {GlobalCounters.kernel_count:4d} {name}{pad} arg {len(bufs):2d} mem "
          f"{GlobalCounters.global_mem * 1e-9:6.3f} GB tm {t * 1e6:9.2f}us/"
          f"{GlobalCounters.time_sum_s * 1e3:9.2f}ms {perf}")

def _exchange(exchange: remote.Exchange, bufs: tuple[Buffer, ...], debug: int, queues: Queues | None) -> None:
  """This rank's halves of copies between ranks, on the worker of the first of its buffers' devices (queued) or here.
  The tag is taken here, in program order on every rank."""
  tag = remote.tag_of(exchange)
  if not (mine := exchange.mine(bufs)): return
  GlobalCounters.kernel_count += 1
  GlobalCounters.global_mem += sum(b.nbytes for b in mine)
  if queues is not None:
    queues.submit(mine[0].device, functools.partial(exchange, bufs, tag), mine, exchange.written(bufs))
    return
  st = time.perf_counter()
  exchange(bufs, tag)
  if debug >= 2:  # the time includes the wait for the other ranks to reach the step
    tm = (time.perf_counter() - st) * 1e6
    print(f"*** {mine[0].device:6s} {GlobalCounters.kernel_count:4d} {exchange.describe(bufs)}  tm {tm:9.2f}us")

# while a TinyJit captures, every step that runs is also recorded here
_capturing: list[list[ExecItem]] = []

def capturing() -> bool:
  """Whether a TinyJit is capturing the steps that run (its replays will not run the Python around them)."""
  return bool(_capturing)

@contextlib.contextmanager
def capture() -> Iterator[list[ExecItem]]:
  """Record every kernel and copy that runs inside the block."""
  items: list[ExecItem] = []
  _capturing.append(items)
  try: yield items
  finally: _capturing.pop()

@contextlib.contextmanager
def paused_capture() -> Iterator[None]:
  """What runs inside the block is not recorded by the capture around it."""
  saved = _capturing[:]
  _capturing.clear()
  try: yield
  finally: _capturing[:] = saved

def _flags_of(runner: CompiledRunner, bufs: tuple[Buffer, ...]) -> list[IndexFlags]:
  return [cast(IndexFlags, bufs[i]) for i in runner.flag_args]

def index_flags(steps: list[ExecItem]) -> list[IndexFlags]:
  """The flags of the index checks of these steps' kernels (schedule/index_check.py)."""
  return [f for s in steps if isinstance(s.runner, CompiledRunner) for f in _flags_of(s.runner, s.bufs)]

def steps_queues(bufs: Sequence[tuple[Buffer, ...]], debug: int) -> Queues | None:
  """Queues for steps on these buffers when they span several devices that queue (engine/queues.py) and QUEUES is on;
  None to run them in order here (DEBUG=2 times each step, so it runs them in order too; one step has nothing to
  overlap, which is every eager op's schedule: it pays no set of devices). In a `deferred` block: its queues where
  every device queues; else what the block queued is waited for first."""
  if _deferred is not None:
    if QUEUES and debug < 2 and remote.joined is None and all_queued({b[0].device for b in bufs}):
      _deferred.queues.forget_done()
      return _deferred.queues
    settle()
  if len(bufs) < 2 or not QUEUES or debug >= 2: return None
  devices = {b[0].device for b in bufs}
  # across ranks, the devices of this rank that its steps run on (another rank's only add a worker's hand-off)
  if remote.joined is not None: devices = {d for d in {x.device for b in bufs for x in b} if remote.owns(d)}
  return Queues() if queueable(devices) else None

def _across_ranks(items: list[ScheduleItem]) -> Sequence[ScheduleItem | tuple[remote.Exchange, tuple[Buffer, ...]]]:
  """The items, the copies between ranks among them grouped into exchanges (remote.exchanges), each with its buffers
  (each copy's dst and src in turn)."""
  groups = remote.exchanges([(bufs[0], bufs[1]) if ast.op is Ops.COPY else None for ast, bufs, _ in items])
  return [items[g] if isinstance(g, int) else (g[0], tuple(b for i in g[1] for b in items[i].bufs[:2])) for g in groups]

class _Deferred:
  """An open `deferred` block: its queues, and the index checks' flags of the kernels queued, read once they ran."""
  def __init__(self) -> None: self.queues, self.flags = Queues(), list[IndexFlags]()

  def wait(self) -> BaseException | None:
    """Wait for every step queued and read (and clear) every flag: the first failure, else the first index out of
    range, else None."""
    error = self.queues.finish_quietly()
    flags, self.flags = self.flags, []
    bad = bad_index(flags)  # all read, whatever is raised: a flag left set would blame a later run of its kernel
    return error if error is not None else bad

_deferred: _Deferred | None = None

@contextlib.contextmanager
def deferred() -> Iterator[Queues]:
  """Inside the block, a schedule whose devices all queue (engine/queues.py: the CPU's) is submitted to one set of
  queues, and run_schedule returns without waiting for it: the next schedules are built and scheduled while the
  workers run it, ordered after it by the buffers they share as the steps of one schedule are. The block's end waits
  for every step and raises the first failure (then an index out of range). Meanwhile a read on the host waits for
  what writes the buffer (`Buffer.writer`), a schedule that must run here in order (another device, QUEUES=0,
  DEBUG=2) waits for all first, and a TinyJit replay joins the queues and waits for all at its end. A block inside a
  block is the outer one."""
  global _deferred
  if _deferred is not None:
    yield _deferred.queues
    return
  _deferred = block = _Deferred()
  try:
    yield block.queues
    settle()
  finally:
    _deferred = None
    block.wait()  # an exception left the block: its steps are waited for, and the exception is what is raised

def settle() -> None:
  """Wait for every step queued in the open `deferred` block; raise the first failure, then an index out of range."""
  if _deferred is not None and (error := _deferred.wait()) is not None: raise error

def run_schedule(items: list[ScheduleItem]) -> None:
  """Run the items in order; then raise BadIndexError (an IndexError) if a kernel read an index out of range
  (schedule/index_check.py): every item has run by then."""
  debug = DEBUG.value  # read once: the loop is the launch path of every eager kernel
  before = dict(compile_stats) if debug >= 1 else {}
  recording = _capturing[-1] if _capturing else None
  flags: list[IndexFlags] = []
  steps: Sequence[ScheduleItem | tuple[remote.Exchange, tuple[Buffer, ...]]] = items
  if remote.joined is not None:  # the ranks of a mesh across ranks must be about to take the same steps
    remote.agree("schedule", [remote.step_line(ast, bufs) for ast, bufs, _ in items])
    steps = _across_ranks(items)
  # one step has nothing to overlap: every eager op's schedule skips the look at its devices (but for a deferred one)
  queues = steps_queues([bufs for _, bufs, *_ in steps], debug) if len(steps) > 1 or _deferred is not None else None
  deferral = _deferred if _deferred is not None and queues is _deferred.queues else None
  # get_runner's lookup, its knobs read once: each item's runner is then one call into C (an eager training step
  # looks up 15)
  if _memo_size != PROGRAM_CACHE.value: _new_memo()
  memo, knobs = _memo, knob_state()
  try:
    for step in steps:
      if isinstance(step[0], remote.Exchange):
        _exchange(step[0], step[1], debug, queues)
        if recording is not None: recording.append(ExecItem(*step))
        continue
      ast, bufs, vals = step
      if ast.op is Ops.COPY: runner = None
      elif remote.joined is None or remote.owns(bufs[0].device): runner = memo(bufs[0].device, ast, knobs)
      else: continue  # another rank's kernel: neither compiled nor run here
      _execute(runner, bufs, debug, vals, queues)
      if recording is not None: recording.append(ExecItem(runner, bufs, vals))
      if runner is not None and runner.flag_args: flags += _flags_of(runner, bufs)
    if deferral is not None: deferral.flags += flags  # read once they ran: when the block waits
    elif queues is not None: queues.finish()
  except BaseException:
    if queues is not None: queues.finish_quietly()
    bad_index(flags)  # cleared, or a later run of their kernels would be blamed; the failure is what is raised
    raise
  if flags and deferral is None and (err := bad_index(flags)) is not None: raise err
  for listener in run_listeners: listener(items)
  if debug >= 1 and items:
    new = {k: compile_stats[k] - before[k] for k in compile_stats}
    print(f"ran {len(items)} items; programs: {new['compiled']} compiled, {new['disk']} from the disk cache")
