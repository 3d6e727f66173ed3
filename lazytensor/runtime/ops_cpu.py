"""The CPU device: 64-byte aligned host memory, LLVM IR optimized and compiled to object code by llvmlite (cached on disk),
loaded into an MCJIT engine and called through ctypes. Core ids of one launch run on threads pinned to separate CPUs."""
from __future__ import annotations
import ctypes
import functools
import hashlib
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable
import llvmlite
import llvmlite.binding as llvm
import numpy as np
from lazytensor.codegen.renderer.llvm import LLVMRenderer
from lazytensor.device import Allocator, Compiled, Compiler

# ---- memory ----

_ALIGN = 64  # a cache line, and the size of an AVX-512 vector

@dataclass(frozen=True)
class CPUMemory:
  """One host allocation: `array` is a uint8 view of it (and keeps it alive), `addr` its address for kernel calls."""
  array: np.ndarray
  addr: int

class CPUAllocator(Allocator):
  def alloc(self, nbytes: int) -> CPUMemory:
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return CPUMemory(raw[start:start + nbytes], raw.ctypes.data + start)

  def copyin(self, handle: CPUMemory, src: memoryview) -> None: handle.array[:] = np.frombuffer(src, dtype=np.uint8)
  def copyout(self, dest: memoryview, handle: CPUMemory) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = handle.array

# ---- compiling ----

# llvmlite works in one global LLVM context, which is not thread-safe: every use of it goes through this lock
_llvm_lock = threading.Lock()

@functools.cache
def _host() -> tuple[str, str]:
  """The host's cpu name and feature string; initializes LLVM's native target on first use."""
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()

def _host_target_machine(jit: bool) -> llvm.TargetMachine:
  cpu, features = _host()
  return llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(cpu=cpu, features=features, opt=3, jit=jit)

class CorruptProgramError(RuntimeError):
  """Bytes that are not what LLVMCompiler.compile returned (e.g. a damaged disk-cache entry): compile the source again."""

# compiled programs are framed as magic + checksum + object code, so that a damaged cache entry is caught before MCJIT
# reads it (a truncated or flipped object file can crash the process instead of raising)
_MAGIC = b"LTCPUO1\0"

def _checksum(obj: bytes) -> bytes: return hashlib.blake2b(obj, digest_size=8).digest()

def unpack_object(lib: bytes) -> bytes:
  """The object code inside `lib`, after checking its frame; CorruptProgramError when it does not check out."""
  magic, digest, obj = lib[:8], lib[8:16], lib[16:]
  if magic != _MAGIC or _checksum(obj) != digest:
    raise CorruptProgramError(f"CPU: {len(lib)} bytes are not a valid compiled program (bad header or checksum)")
  return obj

class LLVMCompiler(Compiler):
  """LLVM IR -> O3 (new pass manager, loop and SLP vectorizers on) -> object code for this host."""
  def __init__(self) -> None:
    cpu, features = _host()
    self.cache_key = f"llvmlite {llvmlite.__version__} llvm {llvm.llvm_version_info} {cpu} {features} {_MAGIC!r}"
    # only emits object code and is never given to an engine (engines take ownership of theirs), so it can be reused
    self.tm = _host_target_machine(jit=False)

  def optimize(self, src: str) -> llvm.ModuleRef:
    mod = llvm.parse_assembly(src)
    mod.triple, mod.data_layout = self.tm.triple, str(self.tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization, pto.slp_vectorization, pto.loop_unrolling = True, True, True
    pb = llvm.create_pass_builder(self.tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod

  def compile(self, src: str) -> bytes:
    with _llvm_lock: obj = self.tm.emit_object(self.optimize(src))
    return _MAGIC + _checksum(obj) + obj

  def assembly(self, src: str) -> str:
    """The host assembly of LLVM IR source, after the same optimization as compile."""
    with _llvm_lock: return self.tm.emit_assembly(self.optimize(src))

  def disassemble(self, lib: bytes) -> str:
    tool = shutil.which("llvm-objdump") or shutil.which("objdump")
    if tool is None: return "(no objdump on PATH to disassemble with; LLVMCompiler.assembly(src) shows the assembly)"
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
      f.write(unpack_object(lib))
      f.flush()
      return subprocess.run([tool, "-d", "--no-show-raw-insn", f.name], capture_output=True, text=True).stdout

# ---- running ----

class _PinnedWorkers:
  """Daemon threads; the k-th is pinned to the k-th CPU this process may use, so core id k always runs on its own CPU
  (unpinned, the OS often put the threads of short kernels on one CPU and they got no speedup)."""
  def __init__(self) -> None:
    self.cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    self.queues: list[queue.SimpleQueue] = []
    self.lock = threading.Lock()

  @staticmethod
  def _serve(cpu: int, jobs: queue.SimpleQueue) -> None:
    if hasattr(os, "sched_setaffinity"):
      try: os.sched_setaffinity(0, {cpu})  # 0 is the calling thread
      except OSError: pass  # pinning is only for speed; a container may forbid it
    while True:
      job, done = jobs.get()
      try: done.set_result(job())
      except BaseException as e: done.set_exception(e)

  def _queue(self, k: int) -> queue.SimpleQueue:
    with self.lock:
      while len(self.queues) <= k:
        jobs: queue.SimpleQueue = queue.SimpleQueue()
        cpu = self.cpus[len(self.queues) % len(self.cpus)]
        threading.Thread(target=self._serve, args=(cpu, jobs), name=f"lazytensor-cpu{cpu}", daemon=True).start()
        self.queues.append(jobs)
    return self.queues[k]

  def run(self, jobs: list[Callable[[], Any]]) -> None:
    """Run job k on worker k, all at once, and wait for all of them (re-raising the first error)."""
    futures: list[Future] = []
    for k, job in enumerate(jobs):
      futures.append(Future())
      self._queue(k).put((job, futures[-1]))
    for fut in futures: fut.result()

@functools.cache
def _workers() -> _PinnedWorkers: return _PinnedWorkers()

@functools.cache
def _kernel_type(nbufs: int) -> Any:
  # a CFUNCTYPE call releases the GIL, so core ids run truly in parallel
  return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * nbufs, ctypes.c_int32)

class CPUProgram:
  """A compiled kernel loaded into its own MCJIT engine, kept alive as long as the program is."""
  def __init__(self, device: CpuDevice, name: str, lib: bytes) -> None:
    self.device, self.name = device, name
    obj = unpack_object(lib)
    with _llvm_lock:
      tm = _host_target_machine(jit=True)  # the engine takes ownership of its target machine: a fresh one each
      empty = llvm.parse_assembly("")
      empty.triple = tm.triple
      self.engine = llvm.create_mcjit_compiler(empty, tm)
      self.object_file = llvm.ObjectFileRef.from_data(obj)
      self.engine.add_object_file(self.object_file)
      self.engine.finalize_object()
      self.addr = self.engine.get_function_address(name)
    if self.addr == 0: raise RuntimeError(f"CPU: the compiled program has no function named {name!r}")
    self._fns: dict[int, Any] = {}

  def __call__(self, *bufs: CPUMemory, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               core_count: int = 1, wait: bool = False) -> float | None:
    if (fn := self._fns.get(len(bufs))) is None: fn = self._fns[len(bufs)] = _kernel_type(len(bufs))(self.addr)
    addrs = [b.addr for b in bufs]
    start = time.perf_counter()
    if core_count == 1: fn(*addrs, 0)
    else: _workers().run([functools.partial(fn, *addrs, core) for core in range(core_count)])
    return time.perf_counter() - start if wait else None

class CpuDevice(Compiled):
  def __init__(self, name: str) -> None:
    cpu, features = _host()
    super().__init__(name, CPUAllocator(), LLVMRenderer(cpu, features), LLVMCompiler(), CPUProgram)
