"""Lowering, compiling (cached) and running schedule items; DEBUG=2 prints one line per kernel."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import pathlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lazytensor.codegen.heuristic import hand_coded_optimizations
from lazytensor.codegen.kernel import Kernel, Opt
from lazytensor.codegen.linearize import linearize
from lazytensor.codegen.lowerer import lower_kernel
from lazytensor.device import Buffer, Compiled, Device, Program, compile_stats
from lazytensor.engine.schedule import ScheduleItem
from lazytensor.engine.search import beam_search, launch_args
from lazytensor.helpers import (
  BEAM,
  CPU_TARGET,
  DEBUG,
  FASTMATH,
  NOOPT,
  THREADS,
  GlobalCounters,
  ansilen,
  colored,
  diskcache_get,
  diskcache_put,
  to_function_name,
)
from lazytensor.uop.ops import Ops, UOp


def _print_lines(title: str, body: str) -> None:
  print(colored(title, "cyan"))
  print(body)

@dataclass
class CompiledRunner:
  """A compiled kernel and how to launch it."""
  display_name: str
  program: Program
  kernel: Kernel
  flops: int
  mem: int
  launch: dict[str, Any]

  def __call__(self, bufs: tuple[Buffer, ...], wait: bool = False) -> float | None:
    return self.program(*[b.handle for b in bufs], wait=wait, **self.launch)

def optimize_kernel(ast: UOp, device: Compiled) -> Kernel:
  """The kernel with its optimizations: none with NOOPT, beam search with BEAM >= 1, the hand-coded heuristics
  otherwise."""
  k = Kernel(ast, device.renderer)
  if NOOPT: return k
  if BEAM >= 1: return beam_search(k, device, int(BEAM.value))
  return hand_coded_optimizations(k)

def compile_kernel(ast: UOp, device: Compiled, opts: list[Opt] | None = None) -> CompiledRunner:
  """AST -> Kernel -> opts -> loop graph -> linear program -> source -> binary -> loaded program.

  With `opts` None the kernel is optimized as the knobs say; a list (even empty) is applied as given."""
  if opts is None: k = optimize_kernel(ast, device)
  else:
    k = Kernel(ast, device.renderer)
    for o in opts: k.apply_opt(o)
  if DEBUG >= 5: _print_lines(f"AST of {k.name}", repr(ast))
  if DEBUG >= 3: print(f"{k.name}: {k.applied_opts}")
  fn_name = to_function_name(k.name)
  lib, launch = _program(k, device, fn_name)
  flops, mem = k.flops_and_mem()
  return CompiledRunner(k.name, device.load(fn_name, lib), k, flops, mem, launch)

@functools.cache
def _code_version() -> str:
  """A hash of lazytensor's own source: programs cached by (AST, opts) are only valid for the code that lowered them."""
  root = pathlib.Path(__file__).resolve().parent.parent
  h = hashlib.sha256()
  for f in sorted(root.rglob("*.py")): h.update(f.relative_to(root).as_posix().encode() + f.read_bytes())
  return h.hexdigest()

def _program_key(k: Kernel, device: Compiled, fn_name: str) -> str:
  opts = [(o.op.name, o.axis, o.amt) for o in k.applied_opts]
  # FASTMATH chooses the renderer's rules for transcendentals: the one knob besides the opts that changes the code
  parts = (k.ast.key.hex(), opts, fn_name, type(device.renderer).__name__, device.compiler.cache_key, _code_version(),
           bool(FASTMATH))
  return hashlib.sha256(repr(parts).encode()).hexdigest()

def _program(k: Kernel, device: Compiled, fn_name: str) -> tuple[bytes, dict[str, Any]]:
  """The binary and launch arguments of an optimized kernel. A process that has built this kernel before (same AST,
  opts, device and lazytensor code) finds them on disk without lowering it again, which for a large register tile is
  most of the set-up (a 16x7 conv tile: ~140 ms to lower, ~2 ms to load). DEBUG>=4 always lowers, to show the code."""
  key = _program_key(k, device, fn_name) if device.compiler.cache_key and DEBUG < 4 else None
  if key is not None and (raw := diskcache_get("program", key)) is not None:
    try:
      size = int.from_bytes(raw[:4], "little")
      launch, lib = json.loads(raw[4:4 + size]), raw[4 + size:]
      if isinstance(launch, dict) and device.compiler.is_valid(lib):
        compile_stats["disk"] += 1
        return lib, launch
    except ValueError: pass
    if DEBUG >= 1: print("program cache: a corrupt entry was built again")
  uops = linearize(lower_kernel(k))
  if DEBUG >= 6:
    listing = "\n".join(f"{i:4d} {u.op.name:12s} {u.dtype} {u.arg!r}" for i, u in enumerate(uops))
    _print_lines(f"linear program of {k.name}", listing)
  src = device.renderer.render(fn_name, uops)
  if DEBUG >= 4: _print_lines(f"source of {k.name}", src)
  lib = device.compiler.compile_cached(src)
  if DEBUG >= 7: _print_lines(f"assembly of {k.name}", device.compiler.disassemble(lib))
  launch = launch_args(uops)
  if key is not None:
    header = json.dumps(launch).encode()
    diskcache_put("program", key, len(header).to_bytes(4, "little") + header + lib)
  return lib, launch

_runners: dict[tuple[Any, ...], CompiledRunner] = {}

def get_runner(device_name: str, ast: UOp) -> CompiledRunner:
  """The compiled kernel for an AST on a device; built once per process for each setting of the knobs that choose
  its optimizations (the AST is interned, so it is the key)."""
  key = (device_name, ast, NOOPT.value, BEAM.value, THREADS.value, CPU_TARGET.value)
  if (hit := _runners.get(key)) is None:
    hit = _runners[key] = compile_kernel(ast, Device[device_name])
  return hit

def _copy(dst: Buffer, src: Buffer) -> None:
  arr = src.numpy()
  dst.copyin(arr.data.cast("B"))

@dataclass(frozen=True)
class ExecItem:
  """One step that ran: a compiled kernel (or a copy, runner None) and its buffers. TinyJit replays these."""
  runner: CompiledRunner | None
  bufs: tuple[Buffer, ...]

  def run(self, bufs: tuple[Buffer, ...] | None = None) -> None:
    bufs = self.bufs if bufs is None else bufs
    for b in bufs: b.ensure_allocated()
    if self.runner is None:
      st = time.perf_counter()
      _copy(bufs[0], bufs[1])
      _account(f"copy {bufs[0].nbytes:8d}, {bufs[0].device} <- {bufs[1].device}", bufs, 0, bufs[0].nbytes * 2,
               time.perf_counter() - st)
      return
    et = self.runner(bufs, wait=DEBUG >= 2)
    _account(self.runner.display_name, bufs, self.runner.flops, self.runner.mem, et)

# while a TinyJit captures, every step that runs is also recorded here
_capturing: list[list[ExecItem]] = []

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

def run_schedule(items: list[ScheduleItem]) -> None:
  before = dict(compile_stats)
  for item in items:
    runner = None if item.ast.op is Ops.COPY else get_runner(item.bufs[0].device, item.ast)
    step = ExecItem(runner, item.bufs)
    step.run()
    if _capturing: _capturing[-1].append(step)
  if DEBUG >= 1 and items:
    new = {k: compile_stats[k] - before[k] for k in compile_stats}
    print(f"ran {len(items)} items; programs: {new['compiled']} compiled, {new['disk']} from the disk cache")

def _account(name: str, bufs: tuple[Buffer, ...], flops: int, mem: int, et: float | None) -> None:
  GlobalCounters.kernel_count += 1
  GlobalCounters.global_ops += flops
  GlobalCounters.global_mem += mem
  if et is not None: GlobalCounters.time_sum_s += et
  if DEBUG >= 2:
    t = et or 0.0
    pad = " " * max(0, 40 - ansilen(name))
    perf = f"({flops / t * 1e-9:9.2f} GFLOPS {mem / t * 1e-9:7.2f} GB/s)" if t > 0 else ""
    print(f"*** {bufs[0].device:6s} {GlobalCounters.kernel_count:4d} {name}{pad} arg {len(bufs):2d} mem "
          f"{GlobalCounters.global_mem * 1e-9:6.3f} GB tm {t * 1e6:9.2f}us/"
          f"{GlobalCounters.time_sum_s * 1e3:9.2f}ms {perf}")
