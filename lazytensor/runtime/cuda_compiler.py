"""CUDA C -> cubin for one GPU architecture, with NVRTC (a library call, ~10x faster than starting nvcc, which matters
to BEAM) when libnvrtc can be loaded, else with nvcc. Needs no GPU and no pycuda: NVCC_CHECK and the tests use it on
machines without either.

libnvrtc is looked for as the system linker finds it, under CUDA_HOME / CUDA_PATH / /usr/local/cuda, and in the
`nvidia-cuda-nvrtc` wheel that CUDA builds of torch install: nvidia/cuda_nvrtc/lib/libnvrtc.so.12 for CUDA 12,
nvidia/cu13/lib/libnvrtc.so.13 for CUDA 13.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile

from lazytensor.runtime.device import Compiler


class CUDACompileError(RuntimeError):
  """The CUDA compiler rejected a kernel; the message names the kernel and the architecture and holds the log."""

def kernel_name(src: str) -> str:
  """The name of the (first) kernel a CUDA source defines, for error messages."""
  m = re.search(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(", src)
  return m.group(1) if m else "<unnamed kernel>"

def _compile_error(src: str, arch: str, tool: str, log: str) -> CUDACompileError:
  return CUDACompileError(f"{tool} could not compile CUDA kernel {kernel_name(src)} for {arch}:\n{log.strip()}")

def _cuda_homes() -> list[str]:
  return [p for p in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if p]

# ---- nvcc ----

@functools.cache
def find_nvcc() -> str | None:
  """nvcc on PATH, else in a CUDA installation."""
  if (found := shutil.which("nvcc")) is not None: return found
  return next((p for home in _cuda_homes() if os.path.isfile(p := os.path.join(home, "bin", "nvcc"))), None)

@functools.cache
def _nvcc_version(nvcc: str) -> str:
  out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
  return out.strip().splitlines()[-1] if out.strip() else "unknown"

class NVCCCompiler(Compiler):
  """nvcc -cubin in a temporary directory; a failure raises CUDACompileError and leaves nothing behind."""
  def __init__(self, arch: str) -> None:
    if (nvcc := find_nvcc()) is None: raise RuntimeError("CUDA: no nvcc on PATH or in CUDA_HOME/bin")
    self.nvcc, self.arch = nvcc, arch
    self.cache_key = f"nvcc {_nvcc_version(nvcc)} {arch} -O3"

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="lt-nvcc-") as tmp:
      # the file name only shows in nvcc's messages: the kernel's name tells which kernel they are about
      path = os.path.join(tmp, f"{kernel_name(src)}.cu")
      with open(path, "w") as f: f.write(src)
      out = os.path.join(tmp, "kernel.cubin")
      proc = subprocess.run([self.nvcc, "-cubin", f"-arch={self.arch}", "-O3", "-o", out, path],
                            capture_output=True, text=True)
      if proc.returncode != 0: raise _compile_error(src, self.arch, "nvcc", proc.stderr + proc.stdout)
      with open(out, "rb") as f: return f.read()

# ---- NVRTC ----

def _nvrtc_candidates() -> list[str]:
  found = [ctypes.util.find_library("nvrtc") or ""]
  for home in _cuda_homes(): found += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
  if (spec := importlib.util.find_spec("nvidia")) is not None and spec.submodule_search_locations:
    for root in spec.submodule_search_locations:
      found += sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so*")))
  return [p for p in found if p and "builtins" not in p and ".alt." not in p]

def _load_builtins_beside(path: str) -> None:
  """libnvrtc opens libnvrtc-builtins (of its own version) by name as it compiles, through the linker's search path,
  which a wheel's directory is not on ("failed to open libnvrtc-builtins.so.13.0"); a library already loaded is found
  by its name, so the copy beside `path` is loaded first (ctypes never unloads it)."""
  if not os.path.isabs(path): return  # found by the linker, which finds the builtins the same way
  for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
    if ".alt." not in builtins: ctypes.CDLL(builtins)

@functools.cache
def load_nvrtc() -> ctypes.CDLL | None:
  """libnvrtc, or None when no copy of it loads."""
  for path in _nvrtc_candidates():
    try:
      _load_builtins_beside(path)
      lib = ctypes.CDLL(path)
    except OSError: continue
    for fn in ("nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog",
               "nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcDestroyProgram", "nvrtcVersion"):
      getattr(lib, fn).restype = ctypes.c_int
    return lib
  return None

def _include_dirs() -> list[str]:
  # cuda_fp16.h / cuda_bf16.h: built into recent NVRTC; an installed toolkit's headers serve older ones
  return [inc for home in _cuda_homes() if os.path.isfile(os.path.join(inc := os.path.join(home, "include"),
                                                                       "cuda_fp16.h"))]

class NVRTCCompiler(Compiler):
  """One NVRTC program per kernel, compiled straight to a cubin for `arch` (sm_XX)."""
  def __init__(self, arch: str) -> None:
    if (lib := load_nvrtc()) is None: raise RuntimeError("CUDA: libnvrtc was not found")
    self.lib, self.arch = lib, arch
    major, minor = ctypes.c_int(), ctypes.c_int()
    self._check(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    self.options = [f"--gpu-architecture={arch}", *(f"-I{d}" for d in _include_dirs())]
    self.cache_key = f"nvrtc {major.value}.{minor.value} {arch}"

  def _check(self, status: int, what: str) -> None:
    if status != 0: raise RuntimeError(f"CUDA: {what} failed with NVRTC status {status}")

  def compile(self, src: str) -> bytes:
    lib, prog = self.lib, ctypes.c_void_p()
    name = kernel_name(src)
    self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), f"{name}.cu".encode(), 0, None, None),
                "nvrtcCreateProgram")
    try:
      opts = (ctypes.c_char_p * len(self.options))(*[o.encode() for o in self.options])
      if lib.nvrtcCompileProgram(prog, len(self.options), opts) != 0:
        raise _compile_error(src, self.arch, "NVRTC", self._log(prog))
      size = ctypes.c_size_t()
      self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
      cubin = ctypes.create_string_buffer(size.value)
      self._check(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
      return cubin.raw
    finally: lib.nvrtcDestroyProgram(ctypes.byref(prog))

  def _log(self, prog: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    self._check(self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "nvrtcGetProgramLogSize")
    log = ctypes.create_string_buffer(size.value)
    self._check(self.lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
    return log.value.decode(errors="replace")

def cuda_compiler(arch: str) -> Compiler:
  """The compiler for `arch` (e.g. sm_80): NVRTC when libnvrtc loads, else nvcc; a RuntimeError when neither is
  present."""
  if not re.fullmatch(r"sm_[0-9]+a?", arch): raise ValueError(f"CUDA architecture {arch!r}: expected e.g. 'sm_80'")
  if load_nvrtc() is not None: return NVRTCCompiler(arch)
  if find_nvcc() is not None: return NVCCCompiler(arch)
  raise RuntimeError("CUDA: no compiler: neither libnvrtc (pip install nvidia-cuda-nvrtc-cu12, or a CUDA toolkit) "
                     "nor nvcc was found")
