"""The EMU device: runs a kernel's linear program with GPU semantics on numpy, the oracle that tests LOCAL, GROUP and
TC in CI without a GPU.

Every thread of every block runs at once: a value is a numpy array over all (block, thread) lanes, shape (n,) for a
scalar and (n, count) for a vector, or shape () / (count,) while it is the same in every lane (constants, loop
variables, index math on them). Lane b * threads_per_block + t is thread t of block b, with lidx0 (and gidx0) varying
fastest. The program runs once, op by op, each op compiled beforehand into a small closure:
  * RANGE loops must have the same bounds in every lane, and loop in Python around their body.
  * IF / ENDIF narrow the set of running lanes; ops compute on every lane, but only running lanes load, store or
    assign (lanes that do not run never touch memory, so they cannot go out of bounds).
  * shared memory (DEFINE_LOCAL) is one array for all blocks; a lane addresses the part of its own block.
  * lanes run in lockstep, so a BARRIER has nothing to wait for: it starts a new epoch for the race detector.
  * an atomic STORE (arg ADD or MAX) applies the lanes' updates one after another, lanes naming one element in lane
    order.
  * a LOAD from shared memory with an arg (MATRIX_LOAD, n, trans) is a warp's ldmatrix: each lane names a row, and
    receives its elements of the warp's n 8x8 matrices (`_matrix_load`).
  * a STORE of arg ASYNC_COPY (cp.async) stores its global LOAD to shared memory at once, but the elements stay
    pending, unreadable, until a BARRIER of that arg (cp.async.wait_all, then the barrier) run by the copying thread:
    a copy's data may land any time before the wait, so reading (or writing) it earlier is an error.

It is strict where a GPU is undefined: a load or store out of bounds raises IndexError naming the buffer, the index and
the thread; two threads storing different values to one element in one STORE, or touching one shared element (read
after write, write after read, write after write) in the same barrier epoch, raise RaceError; reading shared memory no
thread wrote, touching shared memory that an asynchronous copy not yet waited for writes, non-uniform loop bounds, a
BARRIER, WMMA or matrix load reached by part of a block or warp raise EmuError.

Seeing every access, it counts what each launch moves (Traffic, printed on the DEBUG=2 kernel line): global and shared
bytes loaded and stored, and the replays that shared-memory bank conflicts cost.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from lazytensor.dtype import DType, PtrDType, dtypes, from_storage, to_storage
from lazytensor.helpers import prod
from lazytensor.renderer import ASYNC_COPY, NVIDIA_TENSOR_CORES, Fragment, TensorCore
from lazytensor.renderer.emu import EmuRenderer, parse_program
from lazytensor.runtime.device import Allocator, Compiled, Compiler
from lazytensor.uop.ops import GroupOp, Ops, UOp


class EmuError(RuntimeError):
  """The kernel did something whose result a GPU leaves undefined."""

class RaceError(EmuError):
  """Threads touched one memory element in an order that no barrier fixes."""

# ---- memory ----

class EmuAllocator(Allocator):
  """Host memory as numpy uint8 arrays; kernels see typed views of them. Fresh memory is 0xff bytes (NaN in floats, -1
  in ints), so that a kernel reading what nobody wrote shows it."""
  reuse_freed = False  # every buffer starts as poison, never as another buffer's old values
  def alloc(self, nbytes: int) -> np.ndarray: return np.full(nbytes, 0xFF, np.uint8)
  def host_array(self, handle: np.ndarray) -> np.ndarray: return handle
  def copyin(self, handle: np.ndarray, src: memoryview) -> None: handle[:] = np.frombuffer(src, np.uint8)
  def copyout(self, dest: memoryview, handle: np.ndarray) -> None: np.frombuffer(dest, np.uint8)[:] = handle

def _mem_np(dt: DType) -> np.dtype:
  """How an element is stored: a bool is one byte, 0 or 1, and any nonzero byte reads as true (as on the CPU)."""
  return np.dtype(np.uint8) if dt.is_bool else dt.scalar().np

# ---- launch geometry ----

_AXES = range(3)
WARP = 32
SPECIAL_NAMES = tuple(f"{p}{i}" for p in ("gidx", "lidx") for i in _AXES)

def _dims(what: str, dims: tuple[int, ...]) -> tuple[int, ...]:
  out = tuple(dims) + (1,) * (3 - len(dims))
  if len(out) != 3 or not all(isinstance(d, int) and d >= 1 for d in out):
    raise ValueError(f"EMU: {what} {dims!r}; expected up to 3 positive ints")
  return out

class Grid:
  """The blocks (global_size) and threads per block (local_size) of one launch, and each lane's ids."""
  def __init__(self, global_size: tuple[int, ...], local_size: tuple[int, ...]) -> None:
    self.global_size, self.local_size = _dims("global_size", global_size), _dims("local_size", local_size)
    self.threads, self.blocks = prod(self.local_size), prod(self.global_size)
    self.n = self.threads * self.blocks

  def size_of(self, special: str) -> int:
    """How many values the id `special` (gidx1, lidx0, ...) takes in this launch."""
    return (self.global_size if special.startswith("g") else self.local_size)[int(special[-1])]

  @functools.cached_property
  def lanes(self) -> np.ndarray: return np.arange(self.n)
  @functools.cached_property
  def block(self) -> np.ndarray: return self.lanes // self.threads
  @functools.cached_property
  def warp(self) -> np.ndarray:
    """Each lane's warp: WARP consecutive threads of its block (the last one of a block short if WARP does not divide
    its threads), numbered in lane order."""
    return self.block * -(-self.threads // WARP) + self.lanes % self.threads // WARP
  @functools.cached_property
  def ids(self) -> dict[str, np.ndarray]:
    per_kind = (("gidx", self.block, self.global_size), ("lidx", self.lanes % self.threads, self.local_size))
    return {f"{p}{i}": base // prod(dims[:i]) % dims[i] for p, base, dims in per_kind for i in _AXES}

  def who(self, lane: int) -> str:
    """A lane as the GPU names it: block (gidx0, gidx1, gidx2) thread (lidx0, lidx1, lidx2)."""
    b, t = divmod(lane, self.threads)
    gidx = tuple(b // prod(self.global_size[:i]) % self.global_size[i] for i in _AXES)
    return f"block {gidx} thread {tuple(t // prod(self.local_size[:i]) % self.local_size[i] for i in _AXES)}"

# ---- traffic: what a launch's memory accesses move, counted as a GPU moves them ----

BANKS = 32  # shared memory is 32 banks of 4-byte words; word w is in bank w % BANKS

@dataclass
class Traffic:
  """The bytes one launch loaded and stored in global and in shared memory, each element once per warp and access
  (lanes of a warp that name one element share it, a broadcast; an atomic update counts once per lane), and the
  replays of its shared accesses: for each warp and access, the wavefronts it takes (the most distinct words it
  touches in one bank) beyond the fewest its bytes need (one per 128 bytes), summed."""
  global_load: int = 0
  global_store: int = 0
  shared_load: int = 0
  shared_store: int = 0
  bank_conflicts: int = 0

  def __str__(self) -> str:
    mib = 1 / (1 << 20)
    return (f"global ld {self.global_load * mib:.3f} st {self.global_store * mib:.3f} MiB, shared ld "
            f"{self.shared_load * mib:.3f} st {self.shared_store * mib:.3f} MiB, {self.bank_conflicts} bank replays")

def _per_warp(grid: Grid, lanes: np.ndarray, elem: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """The elements (>= 0) that `lanes` name in an access (lanes x elements), one row a warp, sorted (a row sort is a
  hundred times faster than np.unique over them all), -1 where a lane does not run; and where each is new in its row."""
  if elem.dtype.kind == "u": elem = elem.astype(np.int64)  # room for the -1
  width = WARP * elem.shape[1]
  if lanes.size == grid.n and grid.threads % WARP == 0: rows = elem.reshape(-1, width)
  else:
    rows = np.full((int(grid.warp[-1]) + 1, WARP, elem.shape[1]), -1, elem.dtype)
    rows[grid.warp[lanes], lanes % grid.threads % WARP] = elem
    rows = rows.reshape(-1, width)
  rows = np.sort(rows, axis=1)
  fresh = rows >= 0
  fresh[:, 1:] &= rows[:, 1:] != rows[:, :-1]
  return rows, fresh

def _global_bytes(grid: Grid, x: Any, offs: np.ndarray, act: np.ndarray | None, itemsize: int) -> int:
  """The bytes a global access moves. The common cases need no sort: one index in every lane, or, within each warp,
  each lane's index the one before it or past its elements (coalesced, or lanes sharing elements, as a tile's row)."""
  lanes = grid.lanes if act is None else np.flatnonzero(act)
  if not lanes.size: return 0
  if np.ndim(x) == 0:  # each warp with a running lane reads the elements once
    return (int(np.count_nonzero(np.diff(grid.warp[lanes]))) + 1) * offs.size * itemsize
  at, count = x[lanes], offs.size
  step, warp_starts = np.diff(at), np.diff(grid.warp[lanes]) != 0
  if ((step == 0) | (step >= count) | warp_starts).all():
    return (int(np.count_nonzero((step != 0) | warp_starts)) + 1) * count * itemsize
  return int(np.count_nonzero(_per_warp(grid, lanes, at[:, None] + offs)[1])) * itemsize

class GlobalBytes:
  """The bytes one global LOAD or STORE moves at each run. In a loop its indices mostly move alike in every lane from
  one run to the next, on the same lanes: it moves as many bytes as the last time, found without counting again."""
  __slots__ = ("x", "act", "nbytes")
  def __init__(self) -> None: self.forget()

  def forget(self) -> None:
    """At the end of a launch: the next one starts afresh, and its arrays are not kept alive."""
    self.x: Any = None
    self.act: np.ndarray | None = None
    self.nbytes = 0

  def __call__(self, L: Launch, x: Any, offs: np.ndarray, act: np.ndarray | None, itemsize: int) -> int:
    if self.x is None or act is not self.act or np.ndim(x) != np.ndim(self.x) or not _shifted(x, self.x):
      self.nbytes = _global_bytes(L.grid, x, offs, act, itemsize)
    self.x, self.act = x, act
    return self.nbytes

def _shifted(x: Any, last: Any) -> bool:
  """Whether x is `last` plus the same amount in every lane."""
  if np.ndim(x) == 0: return True
  d = x - last
  return bool((d == d[0]).all())

def _count_shared(L: Launch, lanes: np.ndarray, pos: np.ndarray, itemsize: int, load: bool) -> None:
  """Count a shared access of `lanes` to elements `pos` (lanes x elements) of one DEFINE_LOCAL. A block's part of it
  starts at a multiple of the array's size, which shifts the banks of all the lanes of a warp alike: the conflicts are
  those of the array starting at bank 0."""
  if not lanes.size: return
  per_word = max(1, itemsize // 4)  # an element under 4 bytes lies in one word (it is aligned to its size)
  words = (pos * itemsize // 4)[..., None] + np.arange(per_word)
  words, fresh = _per_warp(L.grid, lanes, words.reshape(len(lanes), -1))
  # elements of 4 bytes or more fill their words; smaller ones may share one
  nbytes = int(np.count_nonzero(fresh if itemsize >= 4 else _per_warp(L.grid, lanes, pos)[1])) * min(itemsize, 4)
  warp = np.broadcast_to(np.arange(len(words))[:, None], words.shape)
  in_bank = np.bincount((warp * BANKS + words % BANKS)[fresh], minlength=len(words) * BANKS).reshape(-1, BANKS)
  fewest = -(-np.count_nonzero(fresh, axis=1) // BANKS)  # the wavefronts of 128 bytes its distinct words fill
  t = L.traffic
  if load: t.shared_load += nbytes
  else: t.shared_store += nbytes
  t.bank_conflicts += int(in_bank.max(1).sum() - fewest.sum())

# ---- the state of one launch ----

class Launch:
  """What the closures of a program read and write while it runs."""
  __slots__ = ("name", "grid", "v", "mask", "masks", "epoch", "traffic")
  def __init__(self, name: str, grid: Grid, values: list[Any]) -> None:
    self.name, self.grid, self.v, self.traffic = name, grid, values, Traffic()
    self.mask: np.ndarray | None = None         # the lanes that run; None: all of them
    self.masks: list[np.ndarray | None] = []    # the masks outside each open IF
    self.epoch = np.zeros(grid.blocks, np.int64)  # barriers each block has passed

  def fail(self, error: type[Exception], lane: int, msg: str) -> Exception:
    return error(f"EMU {self.name}: {self.grid.who(lane)} {msg}")

Step = Callable[[Launch], None]

def _active(L: Launch, gate: int | None) -> np.ndarray | None:
  """The lanes that run this op and pass its gate; None when all lanes do."""
  if gate is None: return L.mask
  g = L.v[gate]
  if np.ndim(g) == 0: return L.mask if g else np.zeros(L.grid.n, bool)
  return g if L.mask is None else L.mask & g

def _per_lane(m: np.ndarray, count: int) -> np.ndarray: return m if count == 1 else m[:, None]

def _uniform(L: Launch, x: Any, what: str) -> int:
  if np.ndim(x) == 0: return int(x)
  if (bad := np.flatnonzero(x != x[0])).size:
    raise L.fail(EmuError, int(bad[0]), f"has {what} {x[bad[0]]} where lane 0 has {x[0]}: loop bounds must be uniform")
  return int(x[0])

# ---- ALU ops: per op, per kind of operand ("f" float, "i" signed, "u" unsigned, "b" bool), a numpy function.
# Fixed-width ints wrap; float16 math rounds to float16 after every op. Edge cases (x/0, shifts by the width, float ->
# int out of range, NaN in MAX) were given their meaning by codegen/alu.py before rendering: reaching one is an error.

def _undefined(what: str) -> EmuError:
  return EmuError(f"EMU: {what}; the ALU semantics rewrite (codegen/alu.py) must run before a program reaches a device")

def _idiv(a: Any, b: Any, signed: bool) -> Any:
  if np.any(b == 0) or (signed and np.any(b == -1)): raise _undefined("an integer division by 0" + " or -1" * signed)
  return (a - np.fmod(a, b)) // b  # exact division of the part that divides: truncation toward zero

def _mod(a: Any, b: Any, signed: bool) -> Any:
  if np.any(b == 0) or (signed and np.any(b == -1)): raise _undefined("an integer remainder by 0" + " or -1" * signed)
  return np.fmod(a, b)

def _shift(a: Any, b: Any, left: bool) -> Any:
  width = 8 * np.asarray(a).itemsize
  if np.any(b < 0) or np.any(b >= width): raise _undefined(f"a shift by an amount outside [0, {width})")
  return np.left_shift(a, b) if left else np.right_shift(a, b)

def _dot4(a: Any, b: Any) -> Any:
  wa, wb = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
  byte = [(wa >> 8 * i & 0xFF, ((wb >> 8 * i & 0xFF) ^ 0x80) - 128) for i in range(4)]  # unsigned, signed
  return np.sum([x * y for x, y in byte], axis=0).astype(np.int32)

_ALU: dict[Ops, dict[str, Callable[..., Any]]] = {
  Ops.NEG: {"fiu": np.negative, "b": np.logical_not},
  Ops.EXP2: {"f": np.exp2}, Ops.LOG2: {"f": np.log2}, Ops.SIN: {"f": np.sin}, Ops.COS: {"f": np.cos},
  Ops.SQRT: {"f": np.sqrt},
  Ops.RECIP: {"f": np.reciprocal}, Ops.TRUNC: {"f": np.trunc},
  Ops.ADD: {"fiu": np.add, "b": np.logical_or}, Ops.SUB: {"fiu": np.subtract, "b": np.logical_xor},
  Ops.MUL: {"fiu": np.multiply, "b": np.logical_and}, Ops.FDIV: {"f": np.divide},
  Ops.IDIV: {"i": functools.partial(_idiv, signed=True), "u": functools.partial(_idiv, signed=False)},
  Ops.MOD: {"f": np.fmod, "i": functools.partial(_mod, signed=True), "u": functools.partial(_mod, signed=False)},
  Ops.MAX: {"iub": np.maximum}, Ops.CMPLT: {"fiub": np.less}, Ops.CMPNE: {"fiub": np.not_equal},
  Ops.AND: {"iub": np.bitwise_and}, Ops.OR: {"iub": np.bitwise_or}, Ops.XOR: {"iub": np.bitwise_xor},
  Ops.SHL: {"iu": functools.partial(_shift, left=True)}, Ops.SHR: {"iu": functools.partial(_shift, left=False)},
  Ops.WHERE: {"fiub": np.where}, Ops.MULACC: {"fiu": lambda a, b, c: a * b + c}, Ops.DOT4: {"i": _dot4},
}
_ALU_BY_KIND = {(op, k): fn for op, per in _ALU.items() for kinds, fn in per.items() for k in kinds}

def _float_to_int(x: Any, to: DType) -> Any:
  f = np.trunc(np.asarray(x, np.float64))  # float16/32/64 values are exact in float64
  if np.any(~((f >= float(to.min())) & (f < float(to.max() + 1)))):  # NaN too; both limits are exact floats
    raise _undefined(f"a float -> {to.name} cast of NaN or a value out of range")
  return f.astype(to.np)

def _cast(x: Any, fr: DType, to: DType) -> Any:
  x = from_storage(x, fr)  # bfloat16 bits -> float32 values
  if to.is_bool: return np.not_equal(x, 0)
  if fr.is_float and to.is_int: return _float_to_int(x, to.scalar())
  return to_storage(np.asarray(x), to)

def _bitcast(x: Any, fr: DType, to: DType) -> Any:
  lead = np.shape(x)[:-1] if fr.count > 1 else np.shape(x)
  bits = np.ascontiguousarray(x).reshape(*lead, fr.count).view(to.np)
  return bits.reshape(*lead, to.count) if to.count > 1 else bits.reshape(lead)

def _vectorize(*xs: Any) -> Any: return np.stack(np.broadcast_arrays(*xs), axis=-1)

# ---- WMMA: a tensor core of the renderer's declarations, a warp being tc.threads consecutive threads of a block ----

_TENSOR_CORES = {tc.name: tc for tc in NVIDIA_TENSOR_CORES}

@functools.cache
def _layout(f: Fragment) -> tuple[np.ndarray, np.ndarray]:
  """Where register j of lane l sits in its matrix: (row[l, j], col[l, j])."""
  cells = np.array([[f.coords(lane, j) for j in range(f.size)] for lane in range(f.threads)])
  return cells[..., 0], cells[..., 1]

def _unfragment(x: Any, f: Fragment, shape: tuple[int, int], n: int) -> np.ndarray:
  rows, cols = _layout(f)
  frag = np.broadcast_to(x, (n, f.size)).reshape(-1, f.threads, f.size)
  out = np.zeros((frag.shape[0], *shape), np.float32)
  out[:, rows, cols] = frag
  return out

def _round_tf32(x: np.ndarray) -> np.ndarray:
  """float32 rounded to tf32's 10 mantissa bits, to nearest with ties away from zero (cvt.rna.tf32.f32)."""
  rounded = ((x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
  return np.where(np.isfinite(x), rounded, x)

def wmma(tc: TensorCore, a: Any, b: Any, c: Any, n: int) -> np.ndarray:
  """D = A @ B + C for every warp of n lanes: products of the inputs (f16, bf16, or f32 rounded to tf32) are exact in
  float32, accumulated in float32."""
  m, nn, k = tc.dims
  a, b = from_storage(a, tc.dtype_in), from_storage(b, tc.dtype_in)
  fa, fb = _unfragment(a, tc.a, (m, k), n), _unfragment(b, tc.b, (k, nn), n)
  if tc.dtype_in == dtypes.float32: fa, fb = _round_tf32(fa), _round_tf32(fb)
  d = np.matmul(fa, fb) + _unfragment(c, tc.c, (m, nn), n)
  rows, cols = _layout(tc.c)
  return d[:, rows, cols].reshape(n, tc.c.size)

# ---- shared memory and the race detector ----

class Shared:
  """One DEFINE_LOCAL for every block at once (element e of block b at b * size + e), with, per element, the last
  writer and the epoch it wrote in, whether that was an asynchronous copy not yet waited for (`pending`), and the
  lowest and highest lane that read it in the epoch `repoch`."""
  def __init__(self, name: str, dt: DType, size: int, blocks: int) -> None:
    self.name, self.size, n = name, size, size * blocks
    self.data = np.zeros(n, _mem_np(dt))
    self.writer, self.wepoch = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    self.pending = np.zeros(n, bool)
    self.rmin, self.rmax, self.repoch = np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, -1, np.int64)

  def _race(self, L: Launch, lanes: np.ndarray, pos: np.ndarray, bad: np.ndarray, verb: str, other: np.ndarray,
            other_verb: str) -> None:
    if not bad.any(): return
    r, j = (int(x[0]) for x in np.nonzero(bad))
    raise L.fail(RaceError, int(lanes[r]), f"{verb} {self.name}[{pos[r, j] % self.size}] that "
                 f"{L.grid.who(int(other[r, j]))} {other_verb} with no BARRIER between")

  def _in_flight(self, L: Launch, lanes: np.ndarray, pos: np.ndarray, verb: str) -> None:
    if not (pending := self.pending[pos]).any(): return
    r, j = (int(x[0]) for x in np.nonzero(pending))
    raise L.fail(EmuError, int(lanes[r]), f"{verb} {self.name}[{pos[r, j] % self.size}], which an asynchronous copy "
                 f"of {L.grid.who(int(self.writer[pos[r, j]]))} writes, before a wait for it (a BARRIER of arg "
                 f"{ASYNC_COPY!r})")

  def check_read(self, L: Launch, lanes: np.ndarray, pos: np.ndarray) -> None:
    me, epoch = lanes[:, None], L.epoch[L.grid.block[lanes]][:, None]
    writer = self.writer[pos]
    if (unwritten := np.nonzero(writer < 0))[0].size:
      r, j = int(unwritten[0][0]), int(unwritten[1][0])
      raise L.fail(EmuError, int(lanes[r]), f"reads {self.name}[{pos[r, j] % self.size}], which no thread wrote")
    self._in_flight(L, lanes, pos, "reads")
    self._race(L, lanes, pos, (self.wepoch[pos] == epoch) & (writer != me), "reads", writer, "wrote")
    flat, who, at = pos.ravel(), np.broadcast_to(me, pos.shape).ravel(), np.broadcast_to(epoch, pos.shape).ravel()
    stale = flat[self.repoch[flat] != at]
    self.rmin[stale], self.rmax[stale], self.repoch[flat] = np.iinfo(np.int64).max, -1, at
    np.minimum.at(self.rmin, flat, who)
    np.maximum.at(self.rmax, flat, who)

  def check_write(self, L: Launch, lanes: np.ndarray, pos: np.ndarray) -> None:
    me, epoch = lanes[:, None], L.epoch[L.grid.block[lanes]][:, None]
    writer = self.writer[pos]
    self._in_flight(L, lanes, pos, "writes")
    self._race(L, lanes, pos, (self.wepoch[pos] == epoch) & (writer != me), "overwrites", writer, "wrote")
    rmin, rmax = self.rmin[pos], self.rmax[pos]
    self._race(L, lanes, pos, (self.repoch[pos] == epoch) & ((rmin != me) | (rmax != me)), "writes",
               np.where(rmin != me, rmin, rmax), "read")
    self.writer[pos], self.wepoch[pos] = me, epoch

# ---- loads and stores: global memory is a typed view of a buffer, shared memory a Shared ----

def _check_bounds(L: Launch, what: str, name: str, size: int, x: Any, count: int, act: np.ndarray | None) -> None:
  bad = (x < 0) | (x > size - count)
  if act is not None: bad = bad & act
  if not bad.any(): return
  lane = int(np.flatnonzero(np.broadcast_to(bad, (L.grid.n,)))[0])
  at = int(np.broadcast_to(x, (L.grid.n,))[lane])
  span = str(at) if count == 1 else f"{at}:{at + count}"
  raise L.fail(IndexError, lane, f"{what} {name}[{span}], out of bounds: {name} has {size} elements")

def _read_global(L: Launch, mem: np.ndarray, x: Any, offs: np.ndarray, act: np.ndarray | None) -> Any:
  if act is not None:  # lanes that do not run read element 0 (of a dummy when there is none): in bounds, never used
    x, mem = np.where(act, x, 0), mem if mem.size else np.zeros(1, mem.dtype)
  return mem[x if offs.size == 1 else np.expand_dims(x, -1) + offs]

def _read_shared(L: Launch, sh: Shared, x: Any, offs: np.ndarray, act: np.ndarray | None) -> Any:
  return _read_shared_at(L, sh, np.broadcast_to(x, (L.grid.n,))[:, None] + offs, act)

def _read_shared_at(L: Launch, sh: Shared, elems: np.ndarray, act: np.ndarray | None) -> Any:
  """The elements `elems` (lanes x count) of each lane's block's part of sh, read by the lanes that run."""
  grid, count = L.grid, elems.shape[1]
  lanes = grid.lanes if act is None else np.flatnonzero(act)
  pos = grid.block[lanes][:, None] * sh.size + elems[lanes]
  sh.check_read(L, lanes, pos)
  _count_shared(L, lanes, pos, sh.data.itemsize, load=True)
  got = sh.data[pos]
  if act is not None:
    full = np.zeros((grid.n, count), got.dtype)
    full[lanes] = got
    got = full
  return got if count > 1 else got[:, 0]

def _sites(L: Launch, x: Any, val: Any, offs: np.ndarray, act: np.ndarray | None,
           dt: np.dtype) -> tuple[np.ndarray, ...]:
  """The lanes that store, the element each of their values goes to, and the values (both lanes x count)."""
  n, count = L.grid.n, offs.size
  lanes = L.grid.lanes if act is None else np.flatnonzero(act)
  elem = np.broadcast_to(x, (n,))[lanes][:, None] + offs
  vals = np.broadcast_to(val, (n, count) if count > 1 else (n,))[lanes].reshape(-1, count).astype(dt, copy=False)
  return lanes, elem, vals

def _check_conflicts(L: Launch, name: str, lanes: np.ndarray, pos: np.ndarray, elem: np.ndarray,
                     vals: np.ndarray) -> None:
  """Two lanes of one STORE may write one element only with the same value (a GPU keeps either one)."""
  flat = pos.ravel()
  if flat.size < 2 or (flat[1:] > flat[:-1]).all(): return  # the common case: every lane stores somewhere else
  order = np.argsort(flat, kind="stable")
  bits = vals.ravel()[order].view(f"u{vals.itemsize}")  # bits, so that NaN == NaN
  clash = np.flatnonzero((flat[order][1:] == flat[order][:-1]) & (bits[1:] != bits[:-1]))
  if not clash.size: return
  first, second = (int(order[j]) // pos.shape[1] for j in (clash[0], clash[0] + 1))
  raise L.fail(RaceError, int(lanes[first]), f"and {L.grid.who(int(lanes[second]))} store different values to "
               f"{name}[{elem.ravel()[order[clash[0]]]}] in one STORE")

def _write_global(L: Launch, mem: np.ndarray, name: str, x: Any, val: Any, offs: np.ndarray,
                  act: np.ndarray | None) -> None:
  lanes, elem, vals = _sites(L, x, val, offs, act, mem.dtype)
  _check_conflicts(L, name, lanes, elem, elem, vals)
  mem[elem] = vals

def _write_shared(L: Launch, sh: Shared, name: str, x: Any, val: Any, offs: np.ndarray,
                  act: np.ndarray | None, asynchronous: bool = False) -> None:
  lanes, elem, vals = _sites(L, x, val, offs, act, sh.data.dtype)
  pos = L.grid.block[lanes][:, None] * sh.size + elem
  _check_conflicts(L, name, lanes, pos, elem, vals)
  sh.check_write(L, lanes, pos)
  _count_shared(L, lanes, pos, sh.data.itemsize, load=False)
  sh.data[pos] = vals
  sh.pending[pos] = asynchronous

_MEMORY = {Ops.DEFINE_GLOBAL: (_read_global, _write_global), Ops.DEFINE_LOCAL: (_read_shared, _write_shared)}

_ATOMIC_OPS: dict[Ops, Callable[[Any, Any], Any]] = {Ops.ADD: np.add, Ops.MAX: np.maximum}  # np.maximum: NaN wins

def _atomic_global(L: Launch, mem: np.ndarray, x: Any, val: Any, act: np.ndarray | None, op: Ops, dt: DType) -> None:
  """Every running lane's atomic update of mem[x] with op, one after another: lanes naming one element take turns in
  lane order (any order is one a GPU may take), each round updating one lane of every element named, rounded to dt."""
  _, elem, vals = _sites(L, x, val, np.arange(1), act, mem.dtype)
  flat, vals = elem[:, 0], vals[:, 0]
  L.traffic.global_store += flat.size * mem.itemsize
  order = np.argsort(flat, kind="stable")
  ranked = flat[order]
  starts = np.maximum.accumulate(np.where(np.r_[True, ranked[1:] != ranked[:-1]], np.arange(ranked.size), 0))
  turn = np.empty(ranked.size, np.int64)
  turn[order] = np.arange(ranked.size) - starts  # how many lanes before this one name its element
  fn = _ATOMIC_OPS[op]
  for t in range(int(turn.max(initial=-1)) + 1):
    at, v = flat[turn == t], vals[turn == t]
    mem[at] = to_storage(np.asarray(fn(from_storage(mem[at], dt), from_storage(v, dt))), dt)

def _memory(u: UOp) -> tuple[Any, Any, str]:
  """How op u reaches the memory of its first source: reader, writer, and the buffer's name in error messages."""
  buf, value = u.src[0], u if u.op is Ops.LOAD else u.src[2]
  if buf.op not in _MEMORY: raise ValueError(f"EMU: {u.op.name} through a {buf.op.name}; expected DEFINE_GLOBAL/LOCAL")
  if not isinstance(buf.dtype, PtrDType) or value.dtype.name != buf.dtype.name:
    raise ValueError(f"EMU: {u.op.name} of {value.dtype} through a {buf.dtype} {buf.op.name}")
  return (*_MEMORY[buf.op], f"data{buf.arg}" if buf.op is Ops.DEFINE_GLOBAL else buf.arg[0])

# ---- building: each op becomes a closure over the positions of its sources ----

class Executable:
  """A linear program compiled to closures, checked once, run many times. `init` holds what is known before a launch
  (constants); a launch, on the grid its launch dims give, adds the buffers, shared memory and thread ids, then runs
  the steps."""
  def __init__(self, name: str, uops: list[UOp]) -> None:
    self.name = name
    self.pos = {u: i for i, u in enumerate(uops)}
    self.init: list[Any] = [None] * len(uops)
    self.globals: list[tuple[int, int, np.dtype]] = []
    self.vars: list[tuple[int, int]] = []  # (value, index among the scalar arguments)
    self.locals: list[tuple[int, UOp]] = []
    self.specials: list[tuple[int, UOp]] = []
    self.warp = 1  # a block must hold whole warps of the widest tensor core it uses
    self.counters: list[GlobalBytes] = []
    self.steps = self._blocks(uops)
    if (shared := sum(u.arg[1] * u.dtype.itemsize for _, u in self.locals)) > EmuRenderer.shared_max:
      raise ValueError(f"EMU: {shared} bytes of shared memory; at most {EmuRenderer.shared_max}")

  def _blocks(self, uops: list[UOp]) -> list[Step]:
    """Steps in order, each loop's body nested in the step of its RANGE."""
    top: list[Step] = []
    body, outer = top, list[tuple[UOp, list[Step]]]()  # the open RANGEs and IFs, and the body each one is in
    for i, u in enumerate(uops):
      if u.op in (Ops.ENDRANGE, Ops.ENDIF):
        if not outer or outer[-1][0] is not u.src[0]:
          raise ValueError(f"EMU: op {i} ({u.op.name}) does not close the innermost open RANGE or IF")
        body = outer.pop()[1]
        if u.op is Ops.ENDIF: body.append(_endif)
      elif u.op is Ops.RANGE:
        inner: list[Step] = []
        body.append(self._loop(i, u, inner))
        outer.append((u, body))
        body = inner
      else:
        if (step := _BUILD.get(u.op, _unsupported)(self, i, u)) is not None: body.append(step)
        if u.op is Ops.IF: outer.append((u, body))
    if outer: raise ValueError(f"EMU: the {outer[-1][0].op.name} at op {self.pos[outer[-1][0]]} is never closed")
    return top

  def _loop(self, i: int, u: UOp, body: list[Step]) -> Step:
    lo, hi, make = self.pos[u.src[0]], self.pos[u.src[1]], u.dtype.np.type
    def loop(L: Launch) -> None:
      v = L.v
      for k in range(_uniform(L, v[lo], "loop start"), _uniform(L, v[hi], "loop end")):
        v[i] = make(k)
        for step in body: step(L)
    return loop

  def pure(self, i: int, fn: Callable[..., Any], srcs: tuple[UOp, ...]) -> Step:
    """A step that sets value i to fn of the source values."""
    at = [self.pos[s] for s in srcs]
    def step(L: Launch) -> None:
      v = L.v
      v[i] = fn(*[v[a] for a in at])
    return step

  def check_launch(self, g: Grid) -> None:
    """The launch within the device's limits, and the size of every id the program reads the one the launch gives."""
    r = EmuRenderer
    for what, dims, most in (("global", g.global_size, r.global_max or ()), ("local", g.local_size, r.local_max or ())):
      if any(d > m for d, m in zip(dims, most)): raise ValueError(f"EMU: {what} size {dims} is over the limits {most}")
    if g.threads > r.threads_max: raise ValueError(f"EMU: {g.threads} threads in a block; at most {r.threads_max}")
    if g.threads % self.warp:
      raise ValueError(f"EMU: a WMMA needs whole warps, but a block has {g.threads} threads, not a multiple of "
                       f"{self.warp}")
    for _, u in self.specials:
      if (size := g.size_of(u.arg[0])) != u.arg[1]:
        raise ValueError(f"EMU {self.name}: {u.arg[0]} counts to {u.arg[1]}, but the launch (global_size "
                         f"{g.global_size}, local_size {g.local_size}) gives it {size}")

  def run(self, bufs: tuple[np.ndarray, ...], grid: Grid, vals: tuple[np.generic, ...] = ()) -> Traffic:
    """One launch; returns what its memory accesses moved."""
    v = list(self.init)
    for at, k, mem_np in self.globals:
      if k >= len(bufs): raise ValueError(f"EMU {self.name}: the program uses data{k}, but got {len(bufs)} buffers")
      v[at] = bufs[k].view(mem_np)
    for at, k in self.vars:
      if k >= len(vals): raise ValueError(f"EMU {self.name}: the program uses var{k}, but got {len(vals)} scalars")
      v[at] = vals[k]
    for at, u in self.locals: v[at] = Shared(u.arg[0], u.dtype, u.arg[1], grid.blocks)
    for at, u in self.specials: v[at] = grid.ids[u.arg[0]].astype(u.dtype.np, copy=False)  # the kernel's index dtype
    L = Launch(self.name, grid, v)
    try:
      with np.errstate(all="ignore"):  # wrap-around, inf and NaN are the semantics here, not accidents
        for step in self.steps: step(L)
    finally:
      for c in self.counters: c.forget()
    return L.traffic

# ---- one builder an op: returns the op's step, or None for a value known before it runs ----

def _const(ex: Executable, i: int, u: UOp) -> None:
  dt = u.dtype.scalar()
  value = to_storage(np.array(u.arg), dt)[()] if dt == dtypes.bfloat16 else dt.np.type(u.arg)
  ex.init[i] = np.full(u.dtype.count, value) if u.dtype.count > 1 else value

def _define_global(ex: Executable, i: int, u: UOp) -> None: ex.globals.append((i, u.arg, _mem_np(u.dtype)))
def _define_var(ex: Executable, i: int, u: UOp) -> None: ex.vars.append((i, u.arg))
def _define_local(ex: Executable, i: int, u: UOp) -> None: ex.locals.append((i, u))
def _special(ex: Executable, i: int, u: UOp) -> None:
  if u.arg[0] not in SPECIAL_NAMES:
    raise ValueError(f"EMU: SPECIAL {u.arg[0]!r} is not a GPU id; expected {SPECIAL_NAMES}")
  ex.specials.append((i, u))

def _global_counter(ex: Executable, buf: UOp) -> GlobalBytes | None:
  """What counts the bytes of an access through buf: a GlobalBytes for global memory (shared accesses are counted as
  they run, with their bank conflicts)."""
  if buf.op is not Ops.DEFINE_GLOBAL: return None
  ex.counters.append(GlobalBytes())
  return ex.counters[-1]

def _matrix_load(ex: Executable, i: int, u: UOp) -> Step:
  """A warp's ldmatrix (arg (MATRIX_LOAD, n, trans), codegen/tensor_cores.py): lane 8i + r names the start of row r
  of 8x8 matrix i, and each lane receives its elements of every matrix, (l // 4, 2 (l % 4) + e) as register 2i + e, or
  (2 (l % 4) + e, l // 4) transposed. All lanes of a warp must run it."""
  _, n, trans = u.arg
  src = _memory_sources(u)
  if src[0].op is not Ops.DEFINE_LOCAL or u.dtype.count != 2 * n or u.dtype.itemsize != 2:
    raise ValueError(f"EMU: a matrix load {u.arg!r} of {u.dtype} from a {src[0].op.name}; expected {2 * n} 16-bit "
                     "elements from shared memory")
  mem, idx, name = ex.pos[src[0]], ex.pos[src[1]], src[0].arg[0]
  ex.warp = max(ex.warp, WARP)
  lane, reg = np.arange(WARP)[:, None], np.arange(2 * n)[None, :]
  # per lane of a warp and register: the lane whose row it reads, and where in that row
  row = 8 * (reg // 2) + (2 * (lane % 4) + reg % 2 if trans else lane // 4)
  col = np.broadcast_to(lane // 4 if trans else 2 * (lane % 4) + reg % 2, row.shape)
  def step(L: Launch) -> None:
    if L.mask is not None and (bad := _partial_group(L.mask, WARP)) is not None:
      raise L.fail(EmuError, bad, "skips a matrix load that other threads of its warp run")
    g, v = L.grid, L.v
    in_warp = g.lanes % g.threads % WARP
    elems = np.broadcast_to(v[idx], (g.n,))[(g.lanes - in_warp)[:, None] + row[in_warp]] + col[in_warp]
    for c in range(2 * n): _check_bounds(L, "loads", name, v[mem].size, elems[:, c], 1, L.mask)
    v[i] = _read_shared_at(L, v[mem], elems, L.mask)
  return step

def _memory_sources(u: UOp) -> tuple[UOp, ...]:
  """A LOAD's sources less those that only order it: a barrier, and stores issued after the barrier."""
  return tuple(s for s in u.src if s.op not in (Ops.BARRIER, Ops.STORE))

def _load(ex: Executable, i: int, u: UOp) -> Step:
  if u.src[0].op is Ops.DEFINE_ACC: return ex.pure(i, lambda acc: acc, u.src[:1])  # later sources only order it
  if u.arg is not None: return _matrix_load(ex, i, u)
  src = _memory_sources(u)
  if len(src) not in (2, 4): raise ValueError(f"EMU: LOAD has {len(src)} sources; expected (buf, idx[, gate, alt])")
  read, _, name = _memory(u)
  mem, idx, is_bool, offs = ex.pos[src[0]], ex.pos[src[1]], u.dtype.is_bool, np.arange(u.dtype.count)
  gate, alt = (ex.pos[src[2]], ex.pos[src[3]]) if len(src) == 4 else (None, None)
  counted, itemsize = _global_counter(ex, src[0]), _mem_np(u.dtype).itemsize
  def load(L: Launch) -> None:
    v = L.v
    x, act = v[idx], _active(L, gate)
    _check_bounds(L, "loads", name, v[mem].size, x, offs.size, act)
    if counted is not None: L.traffic.global_load += counted(L, x, offs, act, itemsize)
    out = read(L, v[mem], x, offs, act)
    if is_bool: out = out != 0
    if alt is not None and act is not None: out = np.where(_per_lane(act, offs.size), out, v[alt])
    v[i] = out
  return load

def _store(ex: Executable, i: int, u: UOp) -> Step:
  if len(u.src) not in (3, 4): raise ValueError(f"EMU: STORE has {len(u.src)} sources, not (buf, idx, val[, gate])")
  if u.arg == ASYNC_COPY: return _async_copy(ex, i, u)
  _, write, name = _memory(u)
  mem, idx, val, offs = ex.pos[u.src[0]], ex.pos[u.src[1]], ex.pos[u.src[2]], np.arange(u.src[2].dtype.count)
  gate = ex.pos[u.src[3]] if len(u.src) == 4 else None
  if u.arg is not None and ((u.arg, u.src[2].dtype) not in EmuRenderer.atomics or u.src[0].op is not Ops.DEFINE_GLOBAL):
    raise ValueError(f"EMU: an atomic {u.arg} STORE of {u.src[2].dtype} to a {u.src[0].op.name}; EMU has "
                     f"{sorted((op.name, dt.name) for op, dt in EmuRenderer.atomics)} on global memory")
  atomic, dt = u.arg, u.src[2].dtype
  counted, itemsize = _global_counter(ex, u.src[0]), _mem_np(dt).itemsize
  def store(L: Launch) -> None:
    v = L.v
    x, act = v[idx], _active(L, gate)
    _check_bounds(L, "stores to", name, v[mem].size, x, offs.size, act)
    if atomic is None:
      if counted is not None: L.traffic.global_store += counted(L, x, offs, act, itemsize)
      write(L, v[mem], name, x, v[val], offs, act)
    else: _atomic_global(L, v[mem], x, v[val], act, atomic, dt)
  return store

def _async_copy(ex: Executable, i: int, u: UOp) -> Step:
  """cp.async: the LOAD's value (zeros where its gate is false, as src-size 0) stored to shared memory at once, pending
  until the copying thread waits."""
  if u.src[0].op is not Ops.DEFINE_LOCAL or u.src[2].op is not Ops.LOAD or u.src[2].src[0].op is not Ops.DEFINE_GLOBAL:
    raise ValueError(f"EMU: an asynchronous copy STORE to a {u.src[0].op.name} of a {u.src[2].op.name}; expected a "
                     "LOAD from global memory stored to shared memory")
  mem, idx, val, offs = ex.pos[u.src[0]], ex.pos[u.src[1]], ex.pos[u.src[2]], np.arange(u.src[2].dtype.count)
  gate, name = ex.pos[u.src[3]] if len(u.src) == 4 else None, u.src[0].arg[0]
  def copy(L: Launch) -> None:
    v = L.v
    x, act = v[idx], _active(L, gate)
    _check_bounds(L, "stores to", name, v[mem].size, x, offs.size, act)
    _write_shared(L, v[mem], name, x, v[val], offs, act, asynchronous=True)
  return copy

def _assign(ex: Executable, i: int, u: UOp) -> Step:
  if u.src[0].op is not Ops.DEFINE_ACC: raise ValueError(f"EMU: ASSIGN to a {u.src[0].op.name}; expected a DEFINE_ACC")
  acc, val, count = ex.pos[u.src[0]], ex.pos[u.src[1]], u.dtype.count
  def assign(L: Launch) -> None:
    v = L.v
    new = v[val] if L.mask is None else np.where(_per_lane(L.mask, count), v[val], v[acc])  # lanes that run, only
    v[acc] = v[i] = new
  return assign

def _if(ex: Executable, i: int, u: UOp) -> Step:
  cond = ex.pos[u.src[0]]
  def if_(L: Launch) -> None:
    L.masks.append(L.mask)
    c = np.broadcast_to(L.v[cond], (L.grid.n,))
    m = c if L.mask is None else L.mask & c
    L.mask = None if m.all() else m
  return if_

def _endif(L: Launch) -> None: L.mask = L.masks.pop()

def _partial_group(mask: np.ndarray, size: int) -> int | None:
  """The first lane that does not run in a group of `size` consecutive lanes where others do; None if none."""
  running = mask.reshape(-1, size)
  partial = np.flatnonzero(running.any(1) & ~running.all(1))
  return None if not partial.size else int(partial[0]) * size + int(np.flatnonzero(~running[partial[0]])[0])

def _barrier(ex: Executable, i: int, u: UOp) -> Step:
  waits = u.arg == ASYNC_COPY
  def barrier(L: Launch) -> None:
    if waits: _wait_copies(L, [L.v[at] for at, _ in ex.locals])
    if L.mask is None: L.epoch += 1
    else:
      threads = L.grid.threads
      if (lane := _partial_group(L.mask, threads)) is not None:
        raise L.fail(EmuError, lane, "skips a BARRIER that other threads of its block wait at")
      L.epoch[L.mask.reshape(-1, threads).all(1)] += 1
  return barrier

def _wait_copies(L: Launch, shared: list[Shared]) -> None:
  """cp.async.wait_all of the running lanes: their asynchronous copies' data becomes readable."""
  for sh in shared:
    if L.mask is None: sh.pending[:] = False
    else: sh.pending &= ~L.mask[np.maximum(sh.writer, 0)]

def _wmma(ex: Executable, i: int, u: UOp) -> Step:
  tc = _TENSOR_CORES.get(u.arg[0]) if isinstance(u.arg, tuple) and u.arg else None
  want = None if tc is None else (tc.dtype_in.vec(tc.a.size), tc.dtype_in.vec(tc.b.size), tc.dtype_acc.vec(tc.c.size))
  srcs = tuple(s.dtype for s in u.src)
  if tc is None or want is None or srcs != want or u.dtype != want[2]:
    raise ValueError(f"EMU: WMMA {u.arg!r} of {list(srcs)} -> {u.dtype}; expected one of "
                     f"{[(t.name, t.dtype_in.name, t.dtype_acc.name) for t in _TENSOR_CORES.values()]} with "
                     "fragments as wide as its layout")
  a, b, c = ex.pos[u.src[0]], ex.pos[u.src[1]], ex.pos[u.src[2]]
  ex.warp = max(ex.warp, tc.threads)
  def step(L: Launch) -> None:
    if L.mask is not None and (lane := _partial_group(L.mask, tc.threads)) is not None:
      raise L.fail(EmuError, lane, "skips a WMMA that other threads of its warp run")
    L.v[i] = wmma(tc, L.v[a], L.v[b], L.v[c], L.grid.n)
  return step

def _alu(ex: Executable, i: int, u: UOp) -> Step:
  dt = u.src[-1].dtype  # the operand type: WHERE's condition comes first, comparisons return bools
  if (fn := _ALU_BY_KIND.get((u.op, dt.kind))) is None: raise NotImplementedError(f"EMU: no {u.op.name} on {dt}")
  return ex.pure(i, fn, u.src)

def _unsupported(ex: Executable, i: int, u: UOp) -> Step:
  raise NotImplementedError(f"EMU: cannot run {u.op.name} (op {i})")

_BUILD: dict[Ops, Callable[[Executable, int, UOp], Step | None]] = {
  Ops.CONST: _const, Ops.DEFINE_GLOBAL: _define_global, Ops.DEFINE_VAR: _define_var, Ops.DEFINE_LOCAL: _define_local,
  Ops.SPECIAL: _special,
  Ops.DEFINE_ACC: lambda ex, i, u: ex.pure(i, lambda init: init, u.src), Ops.LOAD: _load, Ops.STORE: _store,
  Ops.ASSIGN: _assign, Ops.IF: _if, Ops.BARRIER: _barrier, Ops.WMMA: _wmma,
  Ops.VECTORIZE: lambda ex, i, u: ex.pure(i, _vectorize, u.src),
  Ops.GEP: lambda ex, i, u: ex.pure(i, lambda x, k=u.arg: x[..., k], u.src),
  Ops.CAST: lambda ex, i, u: ex.pure(i, functools.partial(_cast, fr=u.src[0].dtype, to=u.dtype), u.src),
  Ops.BITCAST: lambda ex, i, u: ex.pure(i, functools.partial(_bitcast, fr=u.src[0].dtype, to=u.dtype), u.src),
  **{op: _alu for op in GroupOp.ALU},
}

# ---- the device ----

class EmuCompiler(Compiler):
  """The program text is its own binary: compiling checks that it reads back and builds (launch dims are checked at
  each launch)."""
  def compile(self, src: str) -> bytes:
    Executable(*parse_program(src))
    return src.encode()

class EmuProgram:
  """A program read back from its text and built into closures once; each call is one launch."""
  def __init__(self, device: EmuDevice, name: str, lib: bytes) -> None:
    text_name, uops = parse_program(lib.decode())
    if text_name != name: raise ValueError(f"EMU: asked for kernel {name!r}, but the program is {text_name!r}")
    self.device, self.name, self.exe = device, name, Executable(name, uops)
    self.grids: dict[tuple[tuple[int, ...], tuple[int, ...]], Grid] = {}
    self.traffic: Traffic | None = None  # what the last launch moved

  def __call__(self, *bufs: np.ndarray, global_size: tuple[int, ...] = (1, 1, 1),
               local_size: tuple[int, ...] = (1, 1, 1), core_count: int = 1, wait: bool = False,
               vals: tuple[np.generic, ...] = ()) -> float | None:
    """One launch of global_size blocks of local_size threads (a ProgramSpec's launch dims)."""
    if core_count != 1: raise ValueError(f"EMU {self.name}: core_count {core_count}; EMU has no CPU threads (THREAD)")
    dims = (tuple(global_size), tuple(local_size))
    if (grid := self.grids.get(dims)) is None:
      grid = Grid(*dims)
      self.exe.check_launch(grid)
      self.grids[dims] = grid
    start = time.perf_counter()
    self.traffic = self.exe.run(bufs, grid, vals)
    return time.perf_counter() - start if wait else None

class EmuDevice(Compiled):
  def __init__(self, name: str) -> None:
    super().__init__(name, EmuAllocator(), EmuRenderer(), EmuCompiler(), EmuProgram)
