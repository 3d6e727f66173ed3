"""Collectives across processes (and machines) over MPI, with torch.distributed's names and semantics: one rank per
process, every rank calls the same collectives in the same order, and each returns a new Tensor.

  pip install -e ".[mpi]"        # mpi4py and the mpich wheel, which brings mpiexec
  mpiexec -n 2 python train.py

>>> from lazytensor.parallel import distributed as dist
>>> dist.init()                  # MPI under mpiexec; a single process (rank 0 of 1) otherwise
>>> dist.all_reduce(Tensor([1.0, 2.0])).tolist() if dist.world_size() == 1 else None
[1.0, 2.0]

Values travel through host memory: MPI reads a tensor of more than 64 KB on a CPU device from its buffer and writes the
result into the buffer of the new tensor (no copies); a tensor on a GPU is copied to a numpy array and back. A
collective that some ranks never call would wait forever; here it raises TimeoutError after DIST_TIMEOUT seconds (300
by default) on the ranks that wait, naming the collective. Before a result is written, the ranks check that each called
the same (the collective, the tensor's shape and dtype, the op, the src: each rank sends the others a 256-byte
description): where they differ, every rank raises the same ValueError, naming what differs on which rank (MPI itself
would reduce float32 bytes as int64, or read past a shorter buffer). A tensor of at most 64 KB travels in that message,
and each rank computes the result from every rank's values: a collective of small tensors is one message to each other
rank.
mpi4py is imported by init(), only when the process was started by an MPI launcher (or when asked with
init(backend="mpi")).
"""
from __future__ import annotations

import atexit
import functools
import sys
import zlib
from typing import Any, cast

import numpy as np

from lazytensor.frontend.state import state
from lazytensor.frontend.tensor import Tensor
from lazytensor.helpers import launched_ranks, prod
from lazytensor.runtime import remote
from lazytensor.runtime.device import Buffer, buffer_map, new_buffer_uop
from lazytensor.schedule import cache
from lazytensor.uop.graph import buffer_view
from lazytensor.uop.ops import Ops, UOp

INSTALL_HINT = "pip install mpi4py mpich (or pip install -e \".[mpi]\" in the lazytensor repository)"
REDUCE_OPS = ("sum", "max", "min", "prod")

class _World:
  """The communicator of this process; None when it runs alone (no MPI)."""
  comm: Any = None
  initialized: bool = False
  messages: _Messages | None = None  # of comm, made by its first collective

def init(backend: str | None = None, devices_per_rank: int | None = None) -> None:
  """Join the processes started together: over MPI when an MPI launcher started this one (or backend="mpi"), as the
  only rank otherwise. Calling it again does nothing; the other functions call it when it was not called.
  With devices_per_rank=k, the devices CPU:0 .. CPU:(k * world_size() - 1) form one mesh across the ranks, CPU:i held
  by rank i // k, and every rank runs the same program over them (runtime/remote.py; docs/multi-device.md).

  >>> init(); rank(), world_size()
  (0, 1)
  """
  if devices_per_rank is not None and remote.joined is None: _join_mesh(backend, devices_per_rank)
  if _World.initialized: return
  if backend not in (None, "mpi"): raise ValueError(f"init: backend {backend!r}: only 'mpi' is supported")
  if backend == "mpi" or launched_ranks() > 1:
    try:
      from mpi4py import MPI
    except ImportError as e:
      raise ImportError(f"lazytensor.parallel.distributed needs mpi4py to run over MPI: {INSTALL_HINT}") from e
    _World.comm = MPI.COMM_WORLD
  _World.initialized = True

def _join_mesh(backend: str | None, devices_per_rank: int) -> None:
  if isinstance(devices_per_rank, bool) or not isinstance(devices_per_rank, int) or devices_per_rank < 1:
    raise ValueError(f"init: devices_per_rank {devices_per_rank!r}: expected a positive int, the CPU devices of each "
                     "rank")
  init(backend)
  if _World.comm is None: return  # alone, every device is this process's: nothing changes
  from mpi4py import MPI
  remote.join(_World.comm, devices_per_rank, MPI.Query_thread() >= MPI.THREAD_MULTIPLE)
  # schedules made before put copies between devices anywhere; across ranks those between ranks go last and together
  # (schedule/scheduler.py), so that they are one exchange: schedule again
  cache.templates.clear()
  cache.structures.clear()

def _comm() -> Any:
  if not _World.initialized: init()
  return _World.comm

def rank() -> int:
  """This process's number, 0 .. world_size()-1.

  >>> rank()
  0
  """
  comm = _comm()
  return 0 if comm is None else int(comm.Get_rank())

def world_size() -> int:
  """How many processes take part.

  >>> world_size()
  1
  """
  comm = _comm()
  return 1 if comm is None else int(comm.Get_size())

RULE = "every rank must call the same collectives in the same order"

def _host_dtype(t: Tensor) -> np.dtype:
  # MPI has no float16 or bfloat16 arithmetic: reduce in float32 (a bfloat16 tensor's numpy() is float32 already)
  return np.dtype(np.float32) if t.dtype.is_half else np.dtype(t.dtype.np)

# read at every call: module globals, where an enum member is a class attribute lookup (~70 ns each on CPython 3.11)
_VIEW, _BUFFER = Ops.VIEW, Ops.BUFFER

def _host(t: Tensor, n: int | None = None) -> np.ndarray:
  """The values of t as a flat array for MPI to read, while the caller holds t. On a CPU device they are read where
  they lie, in t's buffer once t is realized: no copy (with the two copies this saves, a 64 MB all_reduce took ~0.8x
  the time of mpi4py's own Allreduce). Only a view that is not dense is copied densely first (a dense one made
  contiguous again took 24 of a 1 KB all_reduce's us). A dense view of a buffer with no write into memory pending
  is read without a call to realize (which would find nothing to do, in ~0.8 of a 1 KB all_reduce's us), with the
  fewest calls (a small call passes its count of elements, `n`): 1.6 -> 1.3 us with the copy into a 1 KB message."""
  ld = t.lazydata
  if not _dense(ld) or state.pending:
    if ld.dtype.is_half or isinstance(ld.device, tuple):  # converted, or spread over devices (gathered by numpy())
      return np.ascontiguousarray(t.numpy(), _host_dtype(t)).reshape(-1)
    ld = t.realize().lazydata
    if not _dense(ld): ld = t.contiguous().realize().lazydata
  if (n := prod(ld.shape) if n is None else n) and not ld.dtype.is_half and \
      (host := buffer_map[ld.src[0]].host_view()) is not None:
    return host[:n]
  return np.ascontiguousarray(t.numpy(), _host_dtype(t)).reshape(-1)  # a half converted, or memory not the host's

def _dense(ld: UOp) -> bool:
  """Whether a tensor's graph is its buffer, read densely from the start: the buffer's first elements are its values."""
  return ld.op is _VIEW and ld.src[0].op is _BUFFER and ld.arg.contiguous

def _result(call: _Call, like: Tensor) -> tuple[np.ndarray, Tensor | None]:
  """Memory for MPI to write the call's result (of call.shape) into, as call.layout, and the tensor that it is (the
  result, with nothing to copy), when the device's memory is host memory; else a numpy array to copy into a tensor
  afterwards, and None. The tensor is made straight from a new Buffer (Tensor.empty and a realize took 17 of a 1 KB
  all_reduce's 50 us), or for a small call over the last result's Buffer when nothing holds that any more (_Kept). It
  writes nothing: it is made while the messages that check the call travel (_start), before the ranks are known to
  agree."""
  device, shape = like.lazydata.device, call.shape
  assert shape is not None, "reduce_scatter makes no result where dim 0 does not split"  # not typing.cast: no call
  # the counts: kept.view held by kept alone, its BUFFER node by the view and kept, the Buffer by its node and kept
  if (kept := call.kept) is not None and kept.device == device and sys.getrefcount(kept.view) == HELD_ONCE and \
      sys.getrefcount(kept.node) == HELD_ONCE + 1 and sys.getrefcount(kept.buffer) == HELD_ONCE + 1:
    return kept.host, Tensor._of(kept.view)
  n, dtype = prod(shape), like.dtype
  if not dtype.is_half and n and isinstance(device, str) and (host := (buf := Buffer(device, n, dtype)).host_view()) \
      is not None:
    result = Tensor._of(buffer_view(node := new_buffer_uop(device, n, dtype, buf), shape))
    out = host[:n].reshape(call.layout)
    if call.values is not None: call.kept = _Kept(result.lazydata, node, buf, out, device)
    return out, result
  return np.empty(call.layout, _host_dtype(like)), None

# what sys.getrefcount reads of an object held once, read through its holder (the read's own reference included: 2 on
# CPython 3.11, measured rather than assumed)
_PROBE = [object()]
HELD_ONCE = sys.getrefcount(_PROBE[0])

class _Kept:
  """The last result of a small call (its values travel with the check: SMALL_BYTES), kept for the next call of the
  same description: its VIEW node, its BUFFER node, the Buffer, its memory as a numpy array (call.layout) and the
  device. Once nothing but this holds them (no tensor, no graph built on them, no other view of the buffer, no
  DLPack reader: each would hold one of the three), the next call writes its values there and gives a new tensor
  over the same node: a result that is still held is never written. Making the result anew (a Buffer, its memory,
  two nodes) and freeing it took ~7 of a 1 KB all_reduce's ~15 us (CPU time, one process); each kept result holds
  its memory (at most SMALL_BYTES a rank) until its call is forgotten (KEPT_CALLS)."""
  __slots__ = ("view", "node", "buffer", "host", "device")
  def __init__(self, view: UOp, node: UOp, buffer: Buffer, host: np.ndarray, device: str) -> None:
    self.view, self.node, self.buffer, self.host, self.device = view, node, buffer, host, device

def _back(arr: np.ndarray, call: _Call, like: Tensor) -> Tensor:
  """A new tensor of the call's result, copied from arr (where the result's memory is not the host's)."""
  return Tensor(arr.reshape(cast(tuple[int, ...], call.shape)), device=like.device, dtype=like.dtype)

# bytes of the description of a call that opens each rank's message, and of each value in it
HEADER_BYTES, VALUE_CHARS = 256, 64
# a tensor of at most this many bytes a rank travels in the message that checks the call, after the description: the
# collective is then that one message to each other rank, and each rank computes its result from every rank's values
# (a 1 KB all_reduce over 2 ranks: a median of 28 -> 23 us a call, where the check was a collective of its own before
# MPI's Allreduce, and back to back 140-300 -> 45-150 us; docs/multi-device.md). A larger one follows the check in
# MPI's own collective, straight from the tensor's buffer into the result's.
SMALL_BYTES = 64 << 10
TAG = 0x4C54  # of the messages that check a call, on COMM_WORLD: the ranks' own messages there take other tags

def _short(value: object) -> str:
  """A value as text that fits the header: a long one (a shape of many dims, a stray op string) is its beginning and
  a checksum of all of it, which still tells two apart."""
  text = str(value) if "\n" not in str(value) else repr(value)  # a line of its own: names and values stay apart
  return text if len(text) <= VALUE_CHARS else f"{text[:32]}... (checksum {zlib.crc32(text.encode()):08x})"

def _signature(fields: tuple[tuple[str, object], ...]) -> np.ndarray:
  """A call's description as `name=value` lines, HEADER_BYTES long (zeros after the text)."""
  text = "\n".join(f"{k}={_short(v)}" for k, v in fields).encode()
  assert len(text) <= HEADER_BYTES, text
  header = np.zeros(HEADER_BYTES, np.uint8)
  header[:len(text)] = np.frombuffer(text, np.uint8)
  return header

def _fields(header: np.ndarray) -> dict[str, str]:
  return dict(line.split("=", 1) for line in header.tobytes().rstrip(b"\0").decode().split("\n"))

# the calls kept (_Messages.calls): a training step makes a few the same at every step; more, and they are made again
KEPT_CALLS = 1024

class _Messages:
  """What every call over one communicator shares: room for each rank's message of a call (row k: rank k's), MPI's
  persistent requests that receive each other rank's into it, and the calls made so far (_Call). A persistent request
  is started again at each call, not made anew: making them took ~1.7 of the 2.8 us of an exchange on this host."""
  def __init__(self, comm: Any) -> None:
    from mpi4py import MPI
    self.comm, self.me, self.start, self.testall = comm, comm.Get_rank(), MPI.Prequest.Startall, MPI.Request.Testall
    self.rows = np.empty((comm.Get_size(), HEADER_BYTES + SMALL_BYTES), np.uint8)
    self.headers, self.my_header = self.rows[:, :HEADER_BYTES], self.rows[self.me, :HEADER_BYTES]
    self.peers = [k for k in range(len(self.rows)) if k != self.me]
    self.receives = [comm.Recv_init(self.rows[k], k, TAG) for k in self.peers]
    self.calls: dict[tuple[object, ...], _Call] = {}
    self.last: _Call | None = None  # the call whose description this rank's row holds

  def call(self, what: str, t: Tensor | None, sends: bool, field: str, value: object) -> _Call:
    """The call of this description (`field`, when not "", names what `value` is: the op, the src), made on its first
    use."""
    key = (what, sends, value) if t is None else (what, sends, value, (ld := t.lazydata).shape, ld.dtype.name)
    try: call = self.calls.get(key)
    except TypeError:  # a value that cannot be a key (a list for an op) is known by its text, as in the description
      key = (what, sends, repr(value), *key[3:])
      call = self.calls.get(key)
    if call is not None: return call
    if len(self.calls) >= KEPT_CALLS: self.forget_calls()
    fields = (("collective", what), *((("shape", t.shape), ("dtype", t.dtype.name)) if t is not None else ()),
              *(((field, value),) if field else ()))
    call = self.calls[key] = _Call(self, what, _signature(fields), t, sends)
    return call

  def forget_calls(self) -> None:
    for call in self.calls.values():
      for r in call.sends: r.Free()
    self.calls.clear()
    self.last = None

  def free(self) -> None:
    """Every request given back to MPI (one left at exit makes MPICH print a warning)."""
    self.forget_calls()
    for r in self.receives: r.Free()

class _Call:
  """A collective as every call of it with one description makes it: the description, what the rows' descriptions
  read when every rank made the same call, the values of a small tensor (SMALL_BYTES) as they travel (every rank's,
  a row a rank; None for a larger one), this rank's among them where it sends its own, what of each rank's values the
  result is made of (`parts`: all of them, or for reduce_scatter this rank's slice), the persistent requests that send
  this rank's message to each other rank, the shape of the result (None: a reduce_scatter of a tensor whose dim 0 does
  not divide evenly, an error once the ranks agree) and the last result (_Kept)."""
  def __init__(self, world: _Messages, what: str, header: np.ndarray, t: Tensor | None, sends: bool) -> None:
    self.world, self.header, self.agreed = world, header, header.tobytes() * len(world.rows)
    self.shape = None if t is None else _result_shape(what, t.shape, len(world.rows))
    # the result's memory as the call writes it: all_gather's a row a rank (made once: a reshape at each call took
    # ~0.2 of a 1 KB call's us), flat otherwise
    count, ranks = prod(self.shape or ()), len(world.rows)
    self.layout = (ranks, count // ranks) if what == "all_gather" else (count,)
    self.values: np.ndarray | None = None
    self.parts: list[np.ndarray] = []
    if t is not None and _small(t):
      dtype = _host_dtype(t)
      self.values = world.rows[:, HEADER_BYTES:HEADER_BYTES + prod(t.shape) * dtype.itemsize].view(dtype)
      size = self.values.shape[1] // len(world.rows) if what == "reduce_scatter" else self.values.shape[1]
      start = world.me * size if what == "reduce_scatter" else 0
      self.parts = [row[start:start + size] for row in self.values]
    self.mine = self.values[world.me] if self.values is not None and sends else None
    end = HEADER_BYTES + (self.mine.nbytes if self.mine is not None else 0)
    self.sends = [world.comm.Send_init(world.rows[world.me, :end], k, TAG) for k in world.peers]
    self.requests = world.receives + self.sends
    self.kept: _Kept | None = None

def _result_shape(what: str, shape: tuple[int, ...], ranks: int) -> tuple[int, ...] | None:
  """The shape of the result of a collective of a tensor of `shape` over `ranks` ranks; None where dim 0 of a
  reduce_scatter's tensor does not divide evenly."""
  if what == "all_gather": return (ranks,) if not shape else (ranks * shape[0],) + shape[1:]
  if what == "reduce_scatter": return (shape[0] // ranks,) + shape[1:] if shape and not shape[0] % ranks else None
  return shape

def _new_messages(comm: Any) -> _Messages:
  """The _Messages of comm, in place of those of another communicator (or of none)."""
  if (world := _World.messages) is not None: world.free()
  world = _World.messages = _Messages(comm)
  # at exit before mpi4py finalizes MPI (handlers run last registered first), once however often this runs
  atexit.unregister(_free_messages)
  atexit.register(_free_messages)
  return world

def _free_messages() -> None:
  if _World.messages is not None: _World.messages.free()

def _start(comm: Any, what: str, t: Tensor | None = None, sends: bool = True, field: str = "",
           value: object = None) -> _Call:
  """Every rank sends each other rank the description of its call (the collective, t's shape and dtype, the `field`
  named `value`: the op, the src) and, where t is small (SMALL_BYTES) and `sends`, t's values, in one message, and
  receives theirs (the call's `values`): started here, finished by _agreed. Point-to-point messages, not a collective:
  a receive may take less than it has room for, so ranks whose calls differ in size exchange them too (the counts of
  MPI's collectives must agree). Between the two the caller makes its result, which writes nothing (_result): that
  takes the ~1 us it took after the wait while the messages travel."""
  if (world := _World.messages) is None or world.comm is not comm: world = _new_messages(comm)
  call = world.call(what, t, sends, field, value)
  if (mine := call.mine) is not None and t is not None: mine[...] = _host(t, len(mine))
  if world.last is not call:  # this rank's row holds another call's description
    world.my_header[...] = call.header
    world.last = call
  world.start(call.requests)
  return call

def _agreed(call: _Call, what: str) -> None:
  """Waits for _start's messages, as long as a collective does (DIST_TIMEOUT). Where the calls differ, each rank
  raises the same ValueError, which names the first field that differs and its value on each rank, before MPI reads
  or writes any tensor."""
  world = call.world
  # tested once here first: where every other rank got here before, the messages are in and no more calls are made
  if not world.testall(call.requests):
    try: remote.wait_all(call.requests, what, world.me, RULE)
    except TimeoutError:
      _World.messages = None  # its requests still wait: the next call makes new ones
      raise
  if world.headers.tobytes() != call.agreed: raise _disagreement([_fields(h) for h in world.headers])

def _disagreement(calls: list[dict[str, str]]) -> ValueError:
  """The error for calls that differ: the first field that differs, and its value on each rank."""
  field = next(k for k in ("collective", *(k for c in calls for k in c)) if len({c.get(k) for c in calls}) > 1)
  ranks: dict[str, list[int]] = {}
  for r, c in enumerate(calls): ranks.setdefault(c.get(field, "nothing"), []).append(r)
  where = ", ".join(f"{v} on rank{'s' * (len(rs) > 1)} {', '.join(map(str, rs))}" for v, rs in ranks.items())
  return ValueError(f"{calls[0]['collective']}: the ranks disagree on the {field}: {where}; every rank must call the "
                    "same collectives in the same order, with tensors of one shape and dtype (and one op and src)")

def _small(t: Tensor) -> bool:
  """Whether t's values travel with the check of the call (see _start)."""
  return prod(t.shape) * _host_dtype(t).itemsize <= SMALL_BYTES

def _check_op(op: str) -> None:
  if op not in REDUCE_OPS: raise ValueError(f"reduce op {op!r}: expected one of {REDUCE_OPS}")

@functools.cache
def _mpi_op(op: str) -> Any:
  from mpi4py import MPI
  return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]

# the reductions of small tensors, in rank order on every rank (so every rank gets the same bits)
UFUNCS: dict[str, np.ufunc] = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}

def _combine(op: str, parts: list[np.ndarray], out: np.ndarray) -> None:
  """Every rank's part combined elementwise by `op` into out, in rank order: the bits of ufunc.reduce over the ranks,
  by one binary call a part (two 1 KB rows: ~0.7 us, where reduce took ~1.3)."""
  fn = UFUNCS[op]
  if len(parts) == 1: np.copyto(out, parts[0])
  else: fn(parts[0], parts[1], out)  # out passed by position: ~0.1 us less than by keyword
  for part in parts[2:]: fn(out, part, out)

def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
  """Every rank's `t` combined elementwise by `op` (sum, max, min or prod), on every rank.

  >>> all_reduce(Tensor([3.0]), "max").tolist()
  [3.0]
  """
  comm = _comm()
  if comm is None:
    _check_op(op)
    return t.contiguous()
  call = _start(comm, "all_reduce", t, True, "op", op)
  out, result = _result(call, t)
  _agreed(call, "all_reduce")
  _check_op(op)
  if call.values is not None: _combine(op, call.parts, out)
  else: comm.Allreduce(_host(t), out, op=_mpi_op(op))  # blocking: _agreed saw every rank here
  return result if result is not None else _back(out, call, t)

def all_gather(t: Tensor) -> Tensor:
  """Every rank's `t`, concatenated along dim 0 in rank order, on every rank (torch's all_gather_into_tensor; a 0-d
  tensor gives one element per rank).

  >>> all_gather(Tensor([[1, 2]])).tolist()
  [[1, 2]]
  """
  comm = _comm()
  if comm is None: return t.reshape(1) if t.ndim == 0 else t.contiguous()
  call = _start(comm, "all_gather", t)
  out, result = _result(call, t)
  _agreed(call, "all_gather")
  if call.values is not None: out[...] = call.values
  else: comm.Allgather(_host(t), out)
  return result if result is not None else _back(out, call, t)

def reduce_scatter(t: Tensor, op: str = "sum") -> Tensor:
  """Every rank's `t` combined by `op`; rank r keeps the r-th of world_size() equal slices of dim 0 (torch's
  reduce_scatter_tensor: dim 0 must divide evenly).

  >>> reduce_scatter(Tensor([1.0, 2.0])).tolist()
  [1.0, 2.0]
  """
  comm = _comm()
  if comm is None:
    if _result_shape("reduce_scatter", t.shape, 1) is None: raise _uneven(t, 1)
    _check_op(op)
    return t.contiguous()
  call = _start(comm, "reduce_scatter", t, True, "op", op)
  made = _result(call, t) if call.shape is not None else None
  _agreed(call, "reduce_scatter")
  if made is None: raise _uneven(t, len(call.world.rows))
  _check_op(op)
  out, result = made
  if call.values is not None: _combine(op, call.parts, out)
  else: comm.Reduce_scatter_block(_host(t), out, op=_mpi_op(op))
  return result if result is not None else _back(out, call, t)

def _uneven(t: Tensor, ranks: int) -> ValueError:
  return ValueError(f"reduce_scatter: dim 0 of a tensor of shape {t.shape} must divide evenly among {ranks} ranks")

def broadcast(t: Tensor, src: int = 0) -> Tensor:
  """Rank `src`'s `t` on every rank (every rank passes a tensor of the same shape and dtype).

  >>> broadcast(Tensor([5])).tolist()
  [5]
  """
  comm, n = _comm(), world_size()
  mine = rank() == src
  call = None if comm is None else _start(comm, "broadcast", t, mine, "src", src)
  made = None if call is None else _result(call, t)
  if call is not None: _agreed(call, "broadcast")
  if not 0 <= src < n: raise IndexError(f"broadcast: src {src} is not a rank of {n}")
  if call is None or made is None: return t.contiguous()
  out, result = made
  if call.values is not None: out[...] = call.parts[src]
  else:
    if mine: out[...] = _host(t)
    comm.Bcast(out, root=src)
  return result if result is not None else _back(out, call, t)

def barrier() -> None:
  """Wait until every rank has called barrier().

  >>> barrier()
  """
  comm = _comm()
  if comm is not None: _agreed(_start(comm, "barrier"), "barrier")  # the exchange of the calls is a barrier itself
