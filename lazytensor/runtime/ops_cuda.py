"""The CUDA device through pycuda (the `cuda` extra): memory, copies, modules loaded from cubin, launches, event timing.

pycuda is imported when a CUDA device is first asked for, never before; without it, a driver or a GPU that
`Device["CUDA"]` (or `CUDA:N`) raises one CUDAUnavailableError saying which is missing. Each device uses its GPU's
primary context (the one the CUDA runtime, and so torch, uses too), made current around every call into the driver,
so that `CUDA` and `CUDA:1` can be used from one thread. Kernels run on the default stream, in order.
"""
from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from typing import Any

import numpy as np

from lazytensor.renderer.cuda import CUDARenderer
from lazytensor.runtime.cuda_compiler import cuda_compiler
from lazytensor.runtime.device import Allocator, Compiled


class CUDAUnavailableError(RuntimeError):
  """No CUDA device can be opened here: pycuda, the NVIDIA driver or a GPU is missing."""

def _driver() -> Any:
  """pycuda.driver, initialized; CUDAUnavailableError naming what is missing."""
  if importlib.util.find_spec("pycuda") is None:
    raise CUDAUnavailableError('CUDA: pycuda is not installed; install it with pip install -e ".[cuda]" (or pip '
                               "install pycuda), or use DEV=CUDACPU to run the CUDA source on the CPU")
  try:
    import pycuda.driver as drv
    drv.init()
  except Exception as e:  # the extension fails to load without libcuda; cuInit fails without a working driver
    raise CUDAUnavailableError(f"CUDA: pycuda is installed but the NVIDIA driver is not usable ({e})") from None
  if drv.Device.count() == 0: raise CUDAUnavailableError("CUDA: the NVIDIA driver sees no GPU")
  return drv

# copies at least this large go through page-locked staging memory, which the GPU reads by DMA at full bus speed;
# smaller ones are dominated by the call, and the driver stages them itself
PINNED_MIN_BYTES = 1 << 20
STAGING_BYTES = 1 << 24  # the staging buffer: large copies go through it in chunks of this size

class CUDAAllocator(Allocator):
  """Device memory. Freed blocks are kept per size and handed out again by Allocator.free_cached (cuMemAlloc and
  cuMemFree synchronize the device and cost ~10-100 us each); an allocation that fails first releases them."""
  def __init__(self, dev: CudaDevice) -> None:
    self.dev, self.drv = dev, dev.drv
    self.staging: np.ndarray | None = None

  def alloc(self, nbytes: int) -> Any:
    with self.dev.current():
      try: return self.drv.mem_alloc(max(nbytes, 1))
      except self.drv.MemoryError as e:  # as Python's MemoryError, which makes alloc_cached release the kept blocks
        raise MemoryError(f"{self.dev.name}: out of memory allocating {nbytes} bytes ({e})") from e

  def free(self, handle: Any, nbytes: int) -> None:
    with self.dev.current(): handle.free()

  def _staged(self, nbytes: int) -> Iterator[tuple[int, np.ndarray]]:
    """The chunks of a large copy: (offset, the page-locked staging memory for it), one after another."""
    if self.staging is None:
      with self.dev.current(): self.staging = self.drv.pagelocked_empty(STAGING_BYTES, np.uint8)
    for start in range(0, nbytes, STAGING_BYTES): yield start, self.staging[:min(STAGING_BYTES, nbytes - start)]

  def copyin(self, handle: Any, src: memoryview) -> None:
    with self.dev.current():
      if src.nbytes < PINNED_MIN_BYTES: return self.drv.memcpy_htod(handle, src)
      data = np.frombuffer(src, np.uint8)
      for start, chunk in self._staged(data.size):
        chunk[:] = data[start:start + chunk.size]
        self.drv.memcpy_htod(int(handle) + start, chunk)

  def copyout(self, dest: memoryview, handle: Any) -> None:
    with self.dev.current():
      if dest.nbytes < PINNED_MIN_BYTES: return self.drv.memcpy_dtoh(dest, handle)
      out = np.frombuffer(dest, np.uint8)
      for start, chunk in self._staged(out.size):
        self.drv.memcpy_dtoh(chunk, int(handle) + start)
        out[start:start + chunk.size] = chunk

  def transfer(self, dest: Any, src: Any, nbytes: int, src_allocator: Allocator) -> bool:
    """Device to device: within one GPU, or from another GPU's memory (a peer copy, which the driver stages itself
    when the two GPUs cannot reach each other directly). Copies from other kinds of device go through the host."""
    if not isinstance(src_allocator, CUDAAllocator): return False
    with self.dev.current():
      if src_allocator.dev is self.dev: self.drv.memcpy_dtod(dest, src, nbytes)
      else: self.drv.memcpy_peer(dest, src, nbytes, dest_context=self.dev.context,
                                 src_context=src_allocator.dev.context)
    return True

class CUDAProgram:
  """A kernel loaded from its cubin. A call launches it on the default stream; with `wait`, it returns the kernel's
  time as measured by two events around it (what BEAM compares)."""
  def __init__(self, dev: CudaDevice, name: str, lib: bytes) -> None:
    self.dev, self.name = dev, name
    with dev.current():
      self.module = dev.drv.module_from_buffer(lib)
      self.fn = self.module.get_function(name)
    self.prepared = False  # the argument format is set on first call, when the number of buffers is known

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               core_count: int = 1, wait: bool = False, vals: tuple[Any, ...] = ()) -> float | None:
    if core_count != 1: raise ValueError(f"CUDA {self.name}: core_count {core_count}; CUDA has no CPU threads (THREAD)")
    grid, block = _dims(global_size), _dims(local_size)
    drv = self.dev.drv
    with self.dev.current():
      # the scalar arguments by value after the buffers, in the struct format of their numpy dtypes
      if not self.prepared: self.prepared = bool(self.fn.prepare("P" * len(bufs) + "".join(map(_struct_code, vals))))
      start, end = (drv.Event(), drv.Event()) if wait else (None, None)
      if start is not None: start.record()
      self.fn.prepared_call(grid, block, *[int(b) for b in bufs], *vals)
      if end is None or start is None: return None
      end.record()
      end.synchronize()
      return float(end.time_since(start)) * 1e-3

def _struct_code(v: Any) -> str:
  """The struct module's code of a numpy scalar (int64 is "q": numpy's own character is "l" on Linux)."""
  return {("f", 4): "f", ("f", 8): "d", ("i", 4): "i", ("i", 8): "q", ("u", 4): "I", ("u", 8): "Q"}[
    (v.dtype.kind, v.dtype.itemsize)]

def _dims(size: tuple[int, ...]) -> tuple[int, int, int]:
  d = tuple(int(s) for s in size) + (1,) * (3 - len(size))
  return d[0], d[1], d[2]

def gpu_index(name: str, count: int) -> int:
  """The GPU that a device name (CUDA, CUDA:1, ...) opens, of the `count` the driver sees; IndexError past them."""
  index = int(name.partition(":")[2] or 0)
  if index >= count:
    have = f"{count} GPUs (CUDA to CUDA:{count - 1})" if count > 1 else "1 GPU (CUDA)"
    raise IndexError(f"device {name}: this machine has {have}")
  return index

class CudaDevice(Compiled):
  def __init__(self, name: str) -> None:
    self.drv = _driver()
    self.gpu = self.drv.Device(gpu_index(name, self.drv.Device.count()))
    self.context = self.gpu.retain_primary_context()
    major, minor = self.gpu.compute_capability()
    super().__init__(name, CUDAAllocator(self), CUDARenderer(major * 10 + minor), cuda_compiler(f"sm_{major}{minor}"),
                     CUDAProgram)
    self.renderer.multiprocessors = self.gpu.get_attribute(self.drv.device_attribute.MULTIPROCESSOR_COUNT)

  @contextlib.contextmanager
  def current(self) -> Iterator[None]:
    """This GPU's context, current for the block."""
    self.context.push()
    try: yield
    finally: self.drv.Context.pop()

  def synchronize(self) -> None:
    with self.current(): self.drv.Context.synchronize()
