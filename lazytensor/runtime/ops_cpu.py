"""The CPU device: host memory aligned to a cache line and the widest vector; LLVM IR optimized and compiled to object
code for the CPU_TARGET by llvmlite (cached on disk), loaded into an MCJIT engine and called through ctypes. The core
ids of one launch (its THREAD shares) run on up to THREADS threads (runtime/cpu_threads.py)."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import operator
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from lazytensor.helpers import CPU_TARGET, THREADS
from lazytensor.renderer import VAR_SLOT
from lazytensor.renderer.cpu_target import CPUTarget, cpu_target, target_machine, x86_level
from lazytensor.renderer.llvm import LLVMRenderer, cpu_readable_past
from lazytensor.runtime import cpu_threads
from lazytensor.runtime.device import Allocator, Buffer, Compiled, Compiler

# ---- memory ----

@functools.cache
def _alignment() -> int:
  """Buffers start on a cache line and on the widest vector this host runs (what any target it runs needs)."""
  return max(64, cpu_target("native").vector_bits // 8)

@dataclass(frozen=True)
class CPUMemory:
  """One host allocation: `array` is a uint8 view of it (and keeps it alive), `addr` its address for kernel calls."""
  array: np.ndarray
  addr: int

class CPUAllocator(Allocator):
  # freed memory is kept for reuse by Allocator.free_cached (BUFFER_CACHE): dropping a handle frees it
  def alloc(self, nbytes: int) -> CPUMemory:
    align = _alignment()
    raw = np.empty(nbytes + align + cpu_readable_past(nbytes), dtype=np.uint8)  # kernels may read on past the end
    addr = raw.ctypes.data  # each .ctypes builds an object: a replay of TinyJit allocates its outputs, so read it once
    start = -addr % align
    return CPUMemory(raw[start:start + nbytes], addr + start)

  def host_array(self, handle: CPUMemory) -> np.ndarray: return handle.array
  def copyin(self, handle: CPUMemory, src: memoryview) -> None: handle.array[:] = np.frombuffer(src, dtype=np.uint8)
  def copyout(self, dest: memoryview, handle: CPUMemory) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = handle.array

# ---- compiling ----

# llvmlite works in one global LLVM context, which is not thread-safe: every use of it goes through this lock
# (re-entrant: a program freed by the garbage collector while this thread holds it disposes of its engine under it too)
_llvm_lock = threading.RLock()

class CorruptProgramError(RuntimeError):
  """Bytes that LLVMCompiler.compile did not produce, such as a damaged disk-cache entry: compile the source again."""

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

def undefined_symbols(obj: bytes) -> list[str]:
  """The names an ELF object file needs from outside (libm calls, compiler-rt helpers); [] for other formats."""
  if obj[:4] != b"\x7fELF": return []
  (shoff,), (shentsize, shnum) = struct.unpack_from("<Q", obj, 0x28), struct.unpack_from("<HH", obj, 0x3A)
  sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
  names: list[str] = []
  for _, kind, _, _, offset, size, link, _, _, entsize in sections:
    if kind != 2: continue  # SHT_SYMTAB
    strtab = sections[link][4]
    for at in range(offset + entsize, offset + size, entsize):  # entry 0 is the null symbol
      name, _, _, shndx = struct.unpack_from("<IBBH", obj, at)
      if shndx == 0 and name: names.append(obj[strtab + name:obj.index(b"\0", strtab + name)].decode())
  return names

def _check_linkable(obj: bytes) -> None:
  # MCJIT leaves a symbol it cannot find as a null address, and the kernel then crashes the process when it runs
  process = ctypes.CDLL(None)
  if missing := [name for name in undefined_symbols(obj) if not hasattr(process, name)]:
    raise RuntimeError(f"CPU: the kernel calls {', '.join(missing)}, which this process cannot resolve")

@functools.cache
def _emitter(target: CPUTarget) -> llvm.TargetMachine:
  # only emits object code and is never given to an engine (engines take ownership of theirs), so it can be reused
  return target_machine(target)

# LLVM 22.1's X86CompressEVEX pass (llvm/llvm-project#191304) turns `vpmovd2m %xmmN, %k; kmov %k, %eax` (the sign bits
# of a vector of i8/i32/i64 taken to a general register) into the VEX vmovmskps/vmovmskpd/vpmovmskb without checking N:
# a source in xmm16-31, which VEX cannot name, is encoded as xmm(N-16), so the sign bits of another vector are read.
# Minimal reproducer (x86-64-v4; right on v3, which has no xmm16): 17 `<4 x i32>` loaded volatile and stored volatile at
# the end (all live), `%m = icmp slt <4 x i32> %a16, zeroinitializer`, `%b = extractelement <4 x i1> %m, i64 0`,
# `select i1 %b, i32 1, i32 2` -> 2 for a negative lane 0 of %a16. Our IR has no such mask; SLP makes one of the scalar
# sign tests of orderable float keys (cummin/sort's `icmp ult bits, 0x80000000`) when it vectorizes the tests but not
# the selects after them: cummin of exp(x) was wrong on AVX-512. Such a module is optimized again without SLP.
_SIGN_TEST = re.compile(r"(%[\w.]+) = icmp (?:slt|sgt) <\d+ x i(?:8|32|64)> %[\w.]+, "
                        r"(?:zeroinitializer|splat \(i\d+ -1\))")

def _sign_mask_out(ir: str) -> bool:
  """Whether optimized IR takes lanes of a vector sign test to scalar code (extractelement or a bitcast to an integer),
  the shape that LLVM compiles through vpmov*2m + kmov."""
  return any(re.search(rf"(?:extractelement|bitcast) <\d+ x i1> {re.escape(name)}(?![\w.])", ir)
             for name in _SIGN_TEST.findall(ir))

# what optimize() does, in the compile cache's key: changed with it, so that no object the old pipeline built (such as
# a miscompiled one) is taken from the disk cache
_PIPELINE = "O3 with loop and SLP vectorizers and unrolling; no SLP where it takes a sign mask to scalars"

class LLVMCompiler(Compiler):
  """LLVM IR -> O3 (new pass manager, loop and SLP vectorizers on) -> object code for the target: `target`, or the one
  CPU_TARGET names at each use when None."""
  def __init__(self, target: CPUTarget | None = None) -> None: self._target = target

  @property
  def target(self) -> CPUTarget: return self._target or cpu_target(str(CPU_TARGET.value))

  @property
  def cache_key(self) -> str:  # type: ignore[override]
    return f"llvmlite {llvmlite.__version__} llvm {llvm.llvm_version_info} {self.target.key} {_MAGIC!r} {_PIPELINE}"

  def optimize(self, src: str) -> llvm.ModuleRef:
    mod = self._pipeline(src, slp=True)
    # with AVX-512's 32 vector registers, a sign mask that SLP hands to scalar code can be miscompiled (_SIGN_TEST)
    if self.target.triple.startswith("x86_64") and self.target.vector_registers > 16 and _sign_mask_out(str(mod)):
      mod = self._pipeline(src, slp=False)
    return mod

  def _pipeline(self, src: str, slp: bool) -> llvm.ModuleRef:
    tm = _emitter(self.target)
    mod = llvm.parse_assembly(src)
    mod.triple, mod.data_layout = tm.triple, str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization, pto.slp_vectorization, pto.loop_unrolling = True, slp, True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod

  def compile(self, src: str) -> bytes:
    with _llvm_lock: obj = _emitter(self.target).emit_object(self.optimize(src))
    _check_linkable(obj)
    return _MAGIC + _checksum(obj) + obj

  def is_valid(self, lib: bytes) -> bool:
    try: unpack_object(lib)
    except CorruptProgramError: return False
    return True

  def assembly(self, src: str) -> str:
    """The host assembly of LLVM IR source, after the same optimization as compile."""
    with _llvm_lock: return _emitter(self.target).emit_assembly(self.optimize(src))

  def disassemble(self, lib: bytes) -> str:
    tool = shutil.which("llvm-objdump") or shutil.which("objdump")
    if tool is None: return "(no objdump on PATH to disassemble with; LLVMCompiler.assembly(src) shows the assembly)"
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
      f.write(unpack_object(lib))
      f.flush()
      return subprocess.run([tool, "-d", "--no-show-raw-insn", f.name], capture_output=True, text=True).stdout

# ---- running ----

@functools.cache
def _kernel_type(nbufs: int) -> Any:
  # a CFUNCTYPE call releases the GIL, so core ids run truly in parallel
  return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * nbufs, ctypes.c_int32)

# a buffer's address, read with no Python frame at every launch
_addr = operator.attrgetter("addr")
# the same through the Buffer (allocated as it is read): what a direct launch reads
_buffer_addr = operator.attrgetter("handle.addr")

def pack_vars(vals: tuple[np.generic, ...]) -> ctypes.Array:
  """A kernel's scalar arguments as the block of memory it reads them from (renderer.VAR_SLOT bytes each)."""
  return (ctypes.c_uint64 * len(vals)).from_buffer_copy(b"".join(v.tobytes().ljust(VAR_SLOT, b"\0") for v in vals))

class CPUProgram:
  """A compiled kernel loaded into its own MCJIT engine, which lives as long as the program: freeing the program (the
  runner cache dropped it, PROGRAM_CACHE) frees its code pages and target machine."""
  def __init__(self, device: CpuDevice, name: str, lib: bytes) -> None:
    self.device, self.name = device, name
    if not (target := device.compiler.target).runs_on_host:
      raise RuntimeError(f"CPU: kernels compiled for CPU_TARGET={target.name} ({target.describe()}) cannot run on "
                         f"this host; they can be compiled (DEBUG=4 shows them), or choose a target it runs: native, "
                         f"{x86_level(cpu_target('native'))} or below")
    obj = unpack_object(lib)
    with _llvm_lock:
      # the engine takes ownership of its target machine: a fresh one each (it only links the finished object)
      tm = target_machine(cpu_target("native"), jit=True)
      empty = llvm.parse_assembly("")
      empty.triple = tm.triple
      self.engine = llvm.create_mcjit_compiler(empty, tm)
      self.object_file = llvm.ObjectFileRef.from_data(obj)
      self.engine.add_object_file(self.object_file)
      self.engine.finalize_object()
      self.addr = self.engine.get_function_address(name)
    if self.addr == 0: raise RuntimeError(f"CPU: the compiled program has no function named {name!r}")
    self._fns: dict[int, Any] = {}

  def __del__(self) -> None:
    if (engine := getattr(self, "engine", None)) is None: return
    try:
      with _llvm_lock: engine.close()
    except Exception: pass  # interpreter shutdown

  def launcher(self, nbufs: int, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               core_count: int = 1) -> Callable[[tuple[Buffer, ...]], None] | None:
    """The launch of a kernel of `nbufs` buffers and no scalar arguments on the calling thread, as one call that takes
    the Buffers: the ctypes function made once, each address read in C (engine/realize runs every eager kernel
    through it, without the keyword arguments, lists and lookups of __call__). None for a launch the threads share."""
    if core_count != 1: return None
    if (fn := self._fns.get(nbufs)) is None: fn = self._fns[nbufs] = _kernel_type(nbufs)(self.addr)
    return lambda bufs: fn(*map(_buffer_addr, bufs), 0)

  def __call__(self, *bufs: CPUMemory, global_size: tuple[int, ...] = (1, 1, 1),
               local_size: tuple[int, ...] = (1, 1, 1), core_count: int = 1, wait: bool = False,
               vals: tuple[np.generic, ...] = ()) -> float | None:
    addrs = list(map(_addr, bufs))
    block = pack_vars(vals) if vals else None  # held until the kernel has returned
    if block is not None: addrs.append(ctypes.addressof(block))
    if (fn := self._fns.get(len(addrs))) is None: fn = self._fns[len(addrs)] = _kernel_type(len(addrs))(self.addr)
    if core_count == 1:  # on the calling thread (every eager launch of an unthreaded kernel), timed only if asked
      start = time.perf_counter() if wait else 0.0
      fn(*addrs, 0)
      return time.perf_counter() - start if wait else None
    # the worker threads start (and their spin loops compile) before the clock does: DEBUG=2 times the kernel only
    threads = min(core_count, int(THREADS.value))
    pool = cpu_threads.workers()
    pool.start(threads)
    start = time.perf_counter()
    pool.run(fn, self.addr, addrs, core_count, threads)
    return time.perf_counter() - start if wait else None

class CpuDevice(Compiled):
  compiler: LLVMCompiler
  queued = True  # ctypes launches from any thread; the kernel threads' pool takes one launch at a time

  def __init__(self, name: str) -> None:
    super().__init__(name, CPUAllocator(), LLVMRenderer(), LLVMCompiler(), CPUProgram)
