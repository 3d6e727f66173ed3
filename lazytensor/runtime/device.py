"""Devices: the registry, Buffer, and the Allocator / Compiler / Program interfaces every backend implements.

A backend is one file, `ops_<name>.py` in this folder, defining the class `<Name>Device` (a Compiled: `CpuDevice`,
`CudacpuDevice`, ...): `Device["NAME"]` and `Device["NAME:1"]` import the file and open that class; the file's name is
all that lists a device (helpers.device_names)."""
from __future__ import annotations

import functools
import hashlib
import heapq
import importlib
import itertools
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from lazytensor.dtype import DType
from lazytensor.helpers import (
  BUFFER_CACHE,
  DEBUG,
  DEV,
  LRU,
  PROGRAM_CACHE,
  device_names,
  diskcache_get,
  diskcache_put,
)
from lazytensor.uop.ops import DeviceLike, NodeMap, Ops, UOp, node_cached


class Allocator:
  """Raw device memory. Handles are opaque to everything above the runtime.

  Backends implement alloc/free; Buffers go through alloc_cached/free_cached, which keep freed memory for the next
  allocation of the same size: a loop of eager calls on large tensors then reuses last step's memory instead of paying
  the OS's zeroing and first-touch page faults of fresh memory at every step (filling a fresh 64 MB buffer took 22-35 ms
  on a Zen 3 VM, refilling it 6-11 ms). Up to BUFFER_CACHE bytes are kept, and past that as long as the memory in use
  and kept stays within the most that was in use at once: a step whose temporaries outgrow the cap (GPT-2 124M's
  training step frees ~1.5 GB a step) then allocates nothing fresh either, and holds no more than its own peak. Where
  one more does not fit, the handles kept longest are given back first: sizes no step asks for any more (the
  optimizer's start, a first call's) made each GPT-2 step give back its gradients at zero_grad and fault in 344 MB-
  1.5 GB afresh (1-3 s of system time a step, where TinyJit's replay, holding its buffers, faulted in none)."""
  def alloc(self, nbytes: int) -> Any: raise NotImplementedError
  def free(self, handle: Any, nbytes: int) -> None: pass

  @functools.cached_property
  def freed(self) -> dict[int, list[Any]]:
    """Freed handles kept for reuse, by size in bytes (most recently freed last)."""
    return {}

  @functools.cached_property
  def kept(self) -> dict[int, int]:
    """The sizes of the handles `freed` holds, by the handle's id, least recently freed first."""
    return {}

  def alloc_cached(self, nbytes: int) -> Any:
    # a freed handle of the size taken here, without a call: every eager step's output is allocated through it
    if hs := self.freed.get(nbytes):
      handle = hs.pop()
      del self.kept[id(handle)]
      self.cached_bytes -= nbytes
    else: handle = self._alloc_fresh(nbytes)
    self.allocated_bytes += nbytes
    if self.allocated_bytes > self.peak_bytes: self.peak_bytes = self.allocated_bytes
    if self.allocated_bytes > self.high_water_bytes: self.high_water_bytes = self.allocated_bytes
    return handle

  def _alloc_fresh(self, nbytes: int) -> Any:
    try: return self.alloc(nbytes)
    except MemoryError:
      # memory pressure: what the cache holds goes back to the device before giving up
      self.free_cache()
      return self.alloc(nbytes)

  def free_cached(self, handle: Any, nbytes: int) -> None:
    self.allocated_bytes -= nbytes
    # the cap, or past it what keeps the memory in use and kept within the most in use at once
    room = max(BUFFER_CACHE.value, self.high_water_bytes - self.allocated_bytes)
    if not (self.reuse_freed and 0 < nbytes <= room and BUFFER_CACHE.value > 0):
      self.free(handle, nbytes)
      return
    # room is made by giving back the handles kept longest, each the first of its size (both are in the order freed)
    while self.cached_bytes + nbytes > room:
      old = self.kept.pop(next(iter(self.kept)))
      self.free((hs := self.freed[old]).pop(0), old)
      if not hs: del self.freed[old]
      self.cached_bytes -= old
    self.freed.setdefault(nbytes, []).append(handle)
    self.kept[id(handle)] = nbytes
    self.cached_bytes += nbytes

  def free_cache(self) -> None:
    """Give every kept handle back to the device."""
    for nbytes, hs in self.freed.items():
      for h in hs: self.free(h, nbytes)
    self.freed.clear()
    self.kept.clear()
    self.cached_bytes = 0

  cached_bytes = 0  # the bytes `freed` holds
  # the bytes of the buffers that hold memory now (what `freed` keeps is not counted), and the most since the last reset
  allocated_bytes = 0
  peak_bytes = 0
  high_water_bytes = 0  # the most bytes in use at once ever (peak_bytes can be reset), which bounds what is kept
  # False where fresh memory matters (EMU fills it with a poison pattern) or the backend keeps freed blocks itself
  reuse_freed = True
  def copyin(self, handle: Any, src: memoryview) -> None: raise NotImplementedError
  def copyout(self, dest: memoryview, handle: Any) -> None: raise NotImplementedError
  def host_array(self, handle: Any) -> np.ndarray | None:
    """The memory itself as a uint8 numpy array (no copy) when it is host memory; None when it is not (a GPU's)."""
    return None
  def transfer(self, dest: Any, src: Any, nbytes: int, src_allocator: Allocator) -> bool:
    """Copy from another device's memory without a trip through the host, if this allocator can (GPU to GPU)."""
    return False

class Compiler:
  """Source -> binary. `cache_key` names everything besides the source that changes the binary."""
  cache_key: str = ""

  def compile(self, src: str) -> bytes: raise NotImplementedError

  def compile_cached(self, src: str) -> bytes:
    lib, origin = self.binary(src)
    compile_stats[origin] += 1
    return lib

  def binary(self, src: str) -> tuple[bytes, str]:
    """The binary of `src` and where it came from (a key of compile_stats): this process's memory, the disk cache
    (the one place object code is stored on disk: program entries name their source), or compiled now."""
    key = hashlib.sha256(f"{self.cache_key}\n{src}".encode()).hexdigest()
    if (lib := _compile_memo.get(key)) is not None: return lib, "memory"
    if self.cache_key and (lib := diskcache_get("compile", key)) is not None:
      if self.is_valid(lib): return _compile_memo.put(key, lib), "disk"
      if DEBUG >= 1: print("compile cache: a corrupt entry was recompiled")
    lib = _compile_memo.put(key, self.compile(src))
    if self.cache_key: diskcache_put("compile", key, lib)
    return lib, "compiled"

  def is_valid(self, lib: bytes) -> bool:
    """Whether bytes from the disk cache are an intact binary; a corrupt entry is recompiled, never loaded."""
    return True

  def disassemble(self, lib: bytes) -> str: return "(no disassembly for this device)"

# binaries by their source, as many as there are loaded programs (a BEAM search compiles hundreds of candidates)
_compile_memo: LRU[str, bytes] = LRU(PROGRAM_CACHE)
# where each program came from: compiled now, the on-disk cache, or this process's memory (DEBUG=1 prints these)
compile_stats: dict[str, int] = {"compiled": 0, "disk": 0, "memory": 0}

class Program(Protocol):
  """A loaded kernel, called with its buffers' handles and its scalar arguments (`vals`, numpy scalars of the
  ProgramSpec's `vars` dtypes). Returns its run time in seconds when `wait` is set."""
  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               core_count: int = 1, wait: bool = False, vals: tuple[Any, ...] = ()) -> float | None: ...

class Compiled:
  """A device: memory, a renderer, a compiler, and the class that loads and runs compiled programs. `queued`: its
  programs and copies may be launched from a worker thread of its own (engine/queues.py)."""
  queued = False

  def __init__(self, name: str, allocator: Allocator, renderer: Any, compiler: Compiler, program_cls: Any) -> None:
    self.name, self.allocator, self.renderer = name, allocator, renderer
    self.compiler, self.program_cls = compiler, program_cls

  def synchronize(self) -> None: pass

  def load(self, name: str, lib: bytes) -> Program: return self.program_cls(self, name, lib)

def device_class(base: str) -> Callable[[str], Compiled]:
  """The class of the devices named `base` (canonical, without ':N'): `<Base>Device` of runtime/ops_<base>.py."""
  module = importlib.import_module(f"lazytensor.runtime.ops_{base.lower()}")
  cls = getattr(module, class_name := f"{base.capitalize()}Device", None)
  if not (isinstance(cls, type) and issubclass(cls, Compiled)):
    raise TypeError(f"device {base}: {module.__name__} defines no Compiled subclass named {class_name}")
  return cls

class _DeviceRegistry:
  """`Device["CPU:1"]` opens (once) the device of that name; `Device.DEFAULT` is where new tensors go."""
  def __init__(self) -> None:
    self._opened: dict[str, Compiled] = {}
    # (DEV's value, DEFAULT's name for it), checked once per value of DEV: every Tensor made from data asks
    self._default: tuple[str | None, str] = (None, "")

  @staticmethod
  def canonicalize(name: str) -> str:
    if not isinstance(name, str) or not name:
      raise ValueError(f"device name {name!r}: expected a string such as 'CPU', 'CPU:1', 'CUDA' or 'EMU'")
    base, _, num = name.upper().partition(":")
    if num and not num.isdigit(): raise ValueError(f"device name {name!r}: the part after ':' must be a number")
    if base not in device_names(): raise ValueError(f"unknown device {name!r}; known: {', '.join(device_names())}")
    return base if num in ("", "0") else f"{base}:{int(num)}"

  def __getitem__(self, name: str) -> Compiled:
    if (opened := self._opened.get(name)) is not None: return opened  # a canonical name: every Buffer asks this
    name = self.canonicalize(name)
    if name not in self._opened:
      self._opened[name] = device_class(name.partition(":")[0])(name)
      if DEBUG >= 1: print(f"opened device {name}")
    return self._opened[name]

  def canonicalize_any(self, device: DeviceLike) -> DeviceLike:
    """A device name, or a tuple of them (a value spread over several devices; nested on a mesh), in canonical form."""
    if not isinstance(device, (tuple, list)): return self.canonicalize(device)
    names = tuple(self.canonicalize_any(d) for d in device)
    if not names: raise ValueError("an empty tuple of devices; expected one or more names such as 'CPU:1'")
    flat = self.flat(names)
    if len(set(flat)) != len(flat): raise ValueError(f"devices {tuple(device)} name one device more than once")
    return names

  def flat(self, device: DeviceLike) -> tuple[str, ...]:
    """Every device named, in order (a tuple of tuples of a mesh flattened)."""
    return (device,) if isinstance(device, str) else tuple(d for sub in device for d in self.flat(sub))

  def first(self, device: DeviceLike) -> str:
    """The device itself, or the first of a tuple: where one-device decisions (the renderer to plan for) are made."""
    return self.flat(device)[0]

  @property
  def DEFAULT(self) -> str:
    if (dev := DEV.value) != self._default[0]: self._default = (dev, self.canonicalize(dev or "CPU"))
    return self._default[1]

Device = _DeviceRegistry()

def memory_allocated(device: str | None = None) -> int:
  """The bytes of the buffers that hold memory on `device` (the default device if None) now, as
  torch.cuda.memory_allocated: memory the allocator keeps for reuse (BUFFER_CACHE) is not counted.

  >>> t = Tensor.ones(256).contiguous().realize()
  >>> before = memory_allocated()
  >>> del t  # its buffer goes (into the allocator's cache for reuse, which is not counted)
  >>> before - memory_allocated()
  1024
  """
  return Device[Device.canonicalize(device or Device.DEFAULT)].allocator.allocated_bytes

def max_memory_allocated(device: str | None = None) -> int:
  """The most bytes of buffers that held memory on `device` at once since the start or the last
  reset_peak_memory_stats, as torch.cuda.max_memory_allocated.

  >>> reset_peak_memory_stats()
  >>> (Tensor.ones(1024).contiguous() + 1).sum().realize().item() == 2048 and max_memory_allocated() >= 4096
  True
  """
  return Device[Device.canonicalize(device or Device.DEFAULT)].allocator.peak_bytes

def reset_peak_memory_stats(device: str | None = None) -> None:
  """Start max_memory_allocated of `device` over from what is allocated now, as torch.cuda.reset_peak_memory_stats.

  >>> reset_peak_memory_stats()
  >>> max_memory_allocated() == memory_allocated()
  True
  """
  allocator = Device[Device.canonicalize(device or Device.DEFAULT)].allocator
  allocator.peak_bytes = allocator.allocated_bytes

# bits of UOp.reads/writes that no live Buffer holds, lowest first: masks stay as short as the number of live buffers
_free_bits: list[int] = []
_bit_count = itertools.count()

class Buffer:
  """`size` elements of `dtype` on `device`; memory is allocated on first use and freed with the object. `serial`
  numbers buffers in the order they were made (TinyJit tells the buffers a capture made from older ones by it)."""
  serials = itertools.count()
  _bit = 0  # no bit until one is asked for (memory_bit); a class default, one store less per Buffer made
  # the queued step that writes it last (engine/queues.py), which a read on the host waits for: steps of schedules
  # that realize did not wait for (engine/realize.deferred) may still be running
  writer: Any = None
  def __init__(self, device: str, size: int, dtype: DType) -> None:
    self.device, self.size, self.dtype = device, size, dtype
    self.nbytes = size * dtype.itemsize  # read at each allocation and free: an attribute, not a property
    self.serial = next(Buffer.serials)
    # the allocator of an opened device, taken here: the lookup below is three Python calls at each buffer's allocation
    if (opened := Device._opened.get(device)) is not None: self.__dict__["allocator"] = opened.allocator
    # the graph nodes whose values were realized into this memory (weakly): an assign to it makes them stale
    self.realized_nodes: list[weakref.ref[Any]] = []

  def remember_realized(self, node: Any) -> None:
    if len(self.realized_nodes) >= 64:  # an assign every step commits a node here: the dead ones go
      self.realized_nodes = [r for r in self.realized_nodes if r() is not None]
    self.realized_nodes.append(weakref.ref(node))

  @property
  def memory_bit(self) -> int:
    """This buffer's bit in the UOp.reads/writes masks, given out on first use. It goes back with the buffer: then no
    BUFFER node maps to it any more, so no live graph's mask holds it."""
    if not self._bit: self._bit = 1 << (heapq.heappop(_free_bits) if _free_bits else next(_bit_count))
    return self._bit

  @property
  def is_allocated(self) -> bool: return "handle" in self.__dict__
  @node_cached  # lockless: every buffer an eager step makes reads it once (functools.cached_property takes a lock)
  def allocator(self) -> Allocator: return Device[self.device].allocator

  def ensure_allocated(self) -> Buffer:
    _ = self.handle
    return self

  @node_cached
  def handle(self) -> Any:
    """The device memory, allocated on first use. Read at every kernel launch, for every buffer: once allocated it is
    a plain attribute (the descriptor is not called again)."""
    return self.allocator.alloc_cached(self.nbytes)

  def copyin(self, data: memoryview) -> Buffer:
    assert data.nbytes == self.nbytes, f"copyin of {data.nbytes} bytes into a buffer of {self.nbytes}"
    self.allocator.copyin(self.handle, data)
    return self

  def host_view(self) -> np.ndarray | None:
    """The buffer's memory as a numpy array of its dtype, without a copy, when it is host memory (else None): writes
    to it change the buffer."""
    if self.writer is not None: self.writer.wait()
    raw = self.allocator.host_array(self.handle)
    return None if raw is None else raw.view(self.dtype.np)

  def numpy(self) -> np.ndarray:
    if self.writer is not None: self.writer.wait()
    # host memory is copied where it lies, in one step (every .numpy() of a CPU tensor): no empty array filled
    if self.size and (raw := self.allocator.host_array(self.handle)) is not None: return raw.view(self.dtype.np).copy()
    out = np.empty(self.size, dtype=self.dtype.np)
    if self.size: self.allocator.copyout(out.data.cast("B"), self.handle)
    return out

  def __del__(self) -> None:
    try:
      if self._bit: heapq.heappush(_free_bits, self._bit.bit_length() - 1)
      if (handle := self.__dict__.get("handle")) is not None: self.allocator.free_cached(handle, self.nbytes)
    except Exception: pass  # interpreter shutdown

  def __repr__(self) -> str: return f"<Buffer {self.device} {self.size} {self.dtype}>"

# the slot's own setter, past UOp's immutability (object.__setattr__ takes twice as long: every eager step maps a node)
_set_reads = UOp.reads.__set__  # type: ignore[attr-defined]

class _BufferMap(NodeMap[Buffer]):
  """The memory behind each BUFFER node of the tensor graph, kept on the node: freed with the last graph that uses it.
  Mapping a node gives it its buffer's bit in UOp.reads, before any graph is built on it."""
  def __setitem__(self, node: UOp, buf: Buffer) -> None:
    assert node.op is Ops.BUFFER and not node.reads, f"{node.op} node mapped to memory twice; a BUFFER node gets one"
    node.__dict__[self.attr] = buf
    _set_reads(node, buf.memory_bit)

buffer_map = _BufferMap("_buffer")
_buffer_uid = itertools.count()

def new_buffer_uop(device: str, size: int, dtype: DType, buf: Buffer | None = None) -> UOp:
  """A BUFFER node and the Buffer behind it; the node's arg is unique, so two buffers never intern together."""
  uop = UOp(Ops.BUFFER, dtype, (), (device, size, next(_buffer_uid)))
  buffer_map[uop] = buf if buf is not None else Buffer(device, size, dtype)
  return uop
