"""The CUDACPU device: the CUDA renderer's source, compiled for the host by g++ and run with GPU semantics.

The renderer is the CUDA device's (same locals, shared memory and tensor cores, so the GPU heuristics and BEAM choose
GPU-style opts), and the source is the very text nvcc would get, compiled with `-include prelude.h -I cudacpu/
-DLT_CUDACPU`: the prelude gives what CUDA C gives (qualifiers, vector types, math, threadIdx, __syncthreads), the
directory holds CPU versions of cuda_fp16.h and cuda_bf16.h (round-to-nearest-even conversions, float arithmetic), and
LT_CUDACPU swaps the inline-PTX mma.sync wrappers for ones that exchange fragments between the 32 lanes of a warp.
runtime.cpp (built once per machine into the cache directory) runs the kernel: blocks spread over THREADS OS threads,
the threads of a block as fibers with real barriers and really shared `__shared__` memory (see its header comment).
Blocks run at once, so the prelude's atomicAdd/atomicMax/atomicCAS (a scatter's updates) are real atomic operations;
the threads of one block take turns (a fiber runs until it waits at a barrier or ends), never at once.

With NVCC_CHECK=1 every kernel is also compiled by nvcc for sm_80 and sm_90, and an nvcc error fails the compile: the
source must be valid CUDA, not just valid C++ for g++ with this prelude.
"""
from __future__ import annotations

import _ctypes
import ctypes
import functools
import hashlib
import os
import pathlib
import shutil
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from lazytensor.helpers import NVCC_CHECK, THREADS, ensure_cache_dir
from lazytensor.renderer.cuda import CUDARenderer
from lazytensor.runtime.cuda_compiler import CUDACompileError, cuda_compiler, kernel_name
from lazytensor.runtime.device import Compiled, Compiler
from lazytensor.runtime.ops_cpu import CPUAllocator, CPUMemory, pack_vars

HEADERS = pathlib.Path(__file__).resolve().parent / "cudacpu"
PRELUDE = HEADERS / "prelude.h"
NVCC_CHECK_ARCHS = ("sm_80", "sm_90")
# g++ reads the source as C++20; CUDA's semantics where C++ leaves room: signed overflow wraps (-fwrapv), pointers of
# any type alias (vector loads and bitcasts cast pointers), math never sets errno, and a*b+c may fuse into an fma as
# nvcc's default -fmad=true does. -march=native: the binaries are cached per machine (the key names the host).
_FLAGS = ("-std=c++20", "-O2", "-march=native", "-fPIC", "-shared", "-fwrapv", "-fno-strict-aliasing",
          "-fno-math-errno", "-ffp-contract=fast", "-DLT_CUDACPU")
_MAGIC = b"LTCUDACPU1\0\0\0\0\0\0"  # 16 bytes, then a checksum of the shared object, then the shared object

class CudacpuCompileError(RuntimeError):
  """g++ or nvcc rejected a kernel's source."""

@functools.cache
def gxx() -> str:
  """The C++ compiler, found at first use."""
  if (path := shutil.which("g++")) is None:
    raise RuntimeError("CUDACPU needs a C++ compiler: no g++ on PATH (install g++ 10 or newer: apt-get install g++)")
  return path

@functools.cache
def _gxx_version() -> str:
  return subprocess.run([gxx(), "--version"], capture_output=True, text=True, check=True).stdout.split("\n")[0]

def _checksum(so: bytes) -> bytes: return hashlib.blake2b(so, digest_size=8).digest()

def _build_once(name: str, inputs: bytes, build: Callable[[pathlib.Path], list[str]]) -> pathlib.Path:
  """CACHEDIR/<tag>/name, made by the g++ command `build(out_dir)` unless there already: built once per machine, per
  version of its `inputs`, compiler and host."""
  tag = hashlib.sha256(inputs + f"{_gxx_version()} {_host_cpu()}".encode()).hexdigest()[:16]
  final = ensure_cache_dir() / f"cudacpu-{tag}"
  if not (final / name).exists():
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"cudacpu-{tag}-", dir=final.parent))
    if (res := subprocess.run(build(tmp), capture_output=True, text=True)).returncode != 0:
      shutil.rmtree(tmp, ignore_errors=True)
      raise CudacpuCompileError(f"CUDACPU: g++ failed to build {name}:\n{res.stderr}")
    try: os.rename(tmp, final)  # atomic: a process beside this one sees all of it or none
    except OSError: shutil.rmtree(tmp, ignore_errors=True)  # that process was first
  return final / name

@functools.cache
def _prelude() -> pathlib.Path:
  """The prelude, with its precompiled header beside it (g++ uses prelude.h.gch when it -includes prelude.h)."""
  src = PRELUDE.read_bytes()
  def build(out: pathlib.Path) -> list[str]:
    (out / "prelude.h").write_bytes(src)
    return [gxx(), *_FLAGS, "-x", "c++-header", str(out / "prelude.h"), "-o", str(out / "prelude.h.gch")]
  return _build_once("prelude.h", src + repr(_FLAGS).encode(), build)

def _run_gxx(src_path: pathlib.Path, out_path: pathlib.Path) -> subprocess.Popen[str]:
  cmd = [gxx(), *_FLAGS, "-include", str(_prelude()), "-I", str(HEADERS), "-x", "c++", str(src_path), "-o",
         str(out_path)]
  return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

# ---- the runtime library ----

@functools.cache
def runtime() -> ctypes.CDLL:
  """runtime.cpp built for this machine (once, into the cache directory) and loaded with RTLD_GLOBAL, so that kernels'
  shared objects find threadIdx, lt_syncthreads and lt_warp_exchange in it."""
  src = HEADERS / "runtime.cpp"
  path = _build_once("runtime.so", src.read_bytes(), lambda out: [gxx(), "-std=c++20", "-O2", "-fPIC", "-shared",
                                                                  "-pthread", str(src), "-o", str(out / "runtime.so")])
  lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
  lib.lt_launch.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                            ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint), ctypes.c_int,
                            ctypes.c_char_p, ctypes.c_size_t]
  lib.lt_launch.restype = ctypes.c_int
  return lib

# ---- compiling ----

class CudacpuCompiler(Compiler):
  """CUDA C -> a shared object for this host, by g++ with the CUDACPU headers; with NVCC_CHECK also by nvcc."""
  def __init__(self) -> None:
    headers = b"".join(p.read_bytes() for p in sorted(HEADERS.iterdir()) if p.suffix == ".h")
    headers_hash = hashlib.sha256(headers).hexdigest()
    self._base_key = f"{_gxx_version()} {_FLAGS} {os.uname().machine} {_host_cpu()} {headers_hash}"

  @property
  def cache_key(self) -> str:  # type: ignore[override]
    # a binary cached while NVCC_CHECK was on is one nvcc accepted; without this a cached one would skip the check
    return self._base_key + (f" nvcc-checked {NVCC_CHECK_ARCHS}" if NVCC_CHECK else "")

  def compile(self, src: str) -> bytes:
    checks = [cuda_compiler(arch) for arch in NVCC_CHECK_ARCHS] if NVCC_CHECK else []
    with tempfile.TemporaryDirectory() as tmp:
      src_path, out_path = pathlib.Path(tmp) / "kernel.cu", pathlib.Path(tmp) / "kernel.so"
      src_path.write_text(src)
      proc = _run_gxx(src_path, out_path)
      for check in checks:  # nvcc (or NVRTC) runs while g++ does
        try: check.compile(src)
        except CUDACompileError as e:
          proc.kill()
          proc.wait()
          raise CudacpuCompileError(f"CUDACPU (NVCC_CHECK): {e}") from e
      out, _ = proc.communicate()
      if proc.returncode != 0:
        raise CudacpuCompileError(f"CUDACPU: g++ failed to compile kernel {kernel_name(src)}:\n{out}")
      so = out_path.read_bytes()
    return _MAGIC + _checksum(so) + so

  def is_valid(self, lib: bytes) -> bool: return lib[:16] == _MAGIC and _checksum(lib[24:]) == lib[16:24]

  def disassemble(self, lib: bytes) -> str:
    if (tool := shutil.which("objdump")) is None: return "(no objdump on PATH to disassemble with)"
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
      f.write(lib[24:])
      f.flush()
      return subprocess.run([tool, "-d", "--no-show-raw-insn", "-C", f.name], capture_output=True, text=True).stdout

@functools.cache
def _host_cpu() -> str:
  """What -march=native depends on: the CPU model and its flags."""
  try: info = pathlib.Path("/proc/cpuinfo").read_text()
  except OSError: return os.uname().machine
  fields = dict(line.split(":", 1) for line in info.split("\n") if ":" in line)
  return hashlib.sha256(repr(sorted((k.strip(), v.strip()) for k, v in fields.items()
                                   if k.strip() in ("model name", "flags", "Features"))).encode()).hexdigest()[:16]

# ---- running ----

def tls_bytes(so: bytes) -> int:
  """The size of a shared object's thread-local segment (PT_TLS): the `__shared__` memory of its kernels (the engine
  compiles one kernel per program)."""
  if so[:4] != b"\x7fELF" or so[4] != 2: return 0
  phoff, = struct.unpack_from("<Q", so, 0x20)
  phentsize, phnum = struct.unpack_from("<HH", so, 0x36)
  for i in range(phnum):
    kind, = struct.unpack_from("<I", so, phoff + i * phentsize)
    if kind == 7: return struct.unpack_from("<Q", so, phoff + i * phentsize + 0x28)[0]  # p_memsz
  return 0

class CudacpuProgram:
  """A kernel's shared object, loaded with dlopen, launched through the runtime library; closed with the program (the
  runner cache dropped it, PROGRAM_CACHE), since every launch has returned by then."""
  def __init__(self, device: CudacpuDevice, name: str, lib: bytes) -> None:
    self.device, self.name = device, name
    if not device.compiler.is_valid(lib): raise RuntimeError(f"CUDACPU: {len(lib)} bytes are not a compiled program")
    so = lib[24:]
    if (shared := tls_bytes(so)) > device.renderer.shared_max:
      raise ValueError(f"CUDACPU {name}: {shared} bytes of __shared__ memory; a block has at most "
                       f"{device.renderer.shared_max}")
    self.runtime = runtime()
    with tempfile.NamedTemporaryFile(suffix=".so", dir=ensure_cache_dir()) as f:
      f.write(so)
      f.flush()
      self.so = ctypes.CDLL(f.name)  # mapped now; the file can go
    try: self.fn = ctypes.cast(getattr(self.so, name), ctypes.c_void_p).value
    except AttributeError: raise RuntimeError(f"CUDACPU: the compiled program has no kernel named {name!r}") from None
    # a kernel with scalar arguments is entered through the function that takes them in memory (renderer/cuda.py)
    entry = getattr(self.so, f"{name}_vars", None)
    self.fn_vars = None if entry is None else ctypes.cast(entry, ctypes.c_void_p).value
    self._err = ctypes.create_string_buffer(1024)

  def __del__(self) -> None:
    if (so := getattr(self, "so", None)) is None: return
    try: _ctypes.dlclose(so._handle)
    except Exception: pass  # interpreter shutdown

  def __call__(self, *bufs: CPUMemory, global_size: tuple[int, ...] = (1, 1, 1),
               local_size: tuple[int, ...] = (1, 1, 1), core_count: int = 1, wait: bool = False,
               vals: tuple[Any, ...] = ()) -> float | None:
    grid, block = _dims(global_size), _dims(local_size)
    if (threads := block[0] * block[1] * block[2]) > self.device.renderer.threads_max:
      raise ValueError(f"CUDACPU {self.name}: a block of {threads} threads {tuple(block)}; at most "
                       f"{self.device.renderer.threads_max}")
    addrs, fn = [b.addr for b in bufs], self.fn
    scalars = pack_vars(vals) if vals else None  # held until the launch has returned
    if scalars is not None:
      if self.fn_vars is None: raise ValueError(f"CUDACPU {self.name}: {len(vals)} scalars for a kernel of none")
      addrs, fn = addrs + [ctypes.addressof(scalars)], self.fn_vars
    args = (ctypes.c_void_p * max(len(addrs), 1))(*addrs)
    start = time.perf_counter()
    rc = self.runtime.lt_launch(fn, len(addrs), args, grid, block, int(THREADS.value), self._err, len(self._err))
    elapsed = time.perf_counter() - start
    if rc != 0: raise RuntimeError(f"CUDACPU {self.name}: {self._err.value.decode(errors='replace')}")
    return elapsed if wait else None

def _dims(size: tuple[int, ...]) -> Any:
  dims = tuple(size) + (1,) * (3 - len(size))
  if len(dims) != 3 or any(d < 1 or d >= 2**31 for d in dims): raise ValueError(f"CUDACPU: bad launch dims {size}")
  return (ctypes.c_uint * 3)(*dims)

class CudacpuDevice(Compiled):
  def __init__(self, name: str) -> None:
    super().__init__(name, CPUAllocator(), CUDARenderer(), CudacpuCompiler(), CudacpuProgram)
