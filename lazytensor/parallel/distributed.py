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
by default) on the ranks that wait, naming the collective. Before any result is made, the ranks check that each called
the same (the collective, the tensor's shape and dtype, the op, the src: each rank sends the others a 256-byte
description): where they differ, every rank raises the same ValueError, naming what differs on which rank (MPI itself
would reduce float32 bytes as int64, or read past a shorter buffer). A tensor of at most 64 KB travels in that message,
and each rank computes the result from every rank's values: a collective of small tensors is one message to each other
rank.
mpi4py is imported by init(), only when the process was started by an MPI launcher (or when asked with
init(backend="mpi")).
"""
from __future__ import annotations

import functools
import zlib
from typing import Any

import numpy as np

from lazytensor.frontend.tensor import Tensor
from lazytensor.helpers import launched_ranks, prod
from lazytensor.runtime import remote
from lazytensor.runtime.device import Buffer, new_buffer_uop
from lazytensor.schedule import cache
from lazytensor.uop.graph import buffer_view
from lazytensor.uop.ops import Ops

INSTALL_HINT = "pip install mpi4py mpich (or pip install -e \".[mpi]\" in the lazytensor repository)"
REDUCE_OPS = ("sum", "max", "min", "prod")

class _World:
  """The communicator of this process; None when it runs alone (no MPI)."""
  comm: Any = None
  initialized: bool = False
  rows: np.ndarray | None = None  # see _rows

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
  init()
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

def _dense(t: Tensor) -> Tensor:
  """t itself where it already lies densely in a buffer of its own (making it contiguous again took 24 of a 1 KB
  all_reduce's us), else a dense copy of it. MPI reads it while the caller holds it."""
  ld = t.lazydata
  return t if ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER and ld.arg.contiguous else t.contiguous()

def _host_dtype(t: Tensor) -> np.dtype:
  # MPI has no float16 or bfloat16 arithmetic: reduce in float32 (a bfloat16 tensor's numpy() is float32 already)
  return np.dtype(np.float32) if t.dtype.is_half else np.dtype(t.dtype.np)

def _host(t: Tensor) -> np.ndarray:
  """The values of t (dense, see _dense) as a flat array for MPI to read. On a CPU device they are read where they
  lie, in the buffer: no copy (with the two copies this saves, a 64 MB all_reduce took ~0.8x the time of mpi4py's own
  Allreduce)."""
  if t.dtype.is_half: return t.numpy().astype(np.float32).reshape(-1)
  if t.numel() and (host := _memory(t)) is not None: return host
  return np.ascontiguousarray(t.numpy()).reshape(-1)

def _memory(t: Tensor) -> np.ndarray | None:
  """The memory of a tensor laid out densely in its buffer, itself (writes change the tensor), flat, if it is host
  memory."""
  if isinstance(t.device, tuple): return None  # spread over devices: gathered by numpy()
  buf, st = t._buffer()
  host = buf.host_view()
  return host[:t.numel()] if host is not None and st.contiguous else None

def _result(shape: tuple[int, ...], like: Tensor) -> tuple[np.ndarray, Tensor | None]:
  """Flat memory for MPI to write a result of `shape` into, and the tensor that it is (the result, with nothing to
  copy), when the device's memory is host memory; else a numpy array to copy into a tensor afterwards, and None. The
  tensor is made straight from a new Buffer (Tensor.empty and a realize took 17 of a 1 KB all_reduce's 50 us)."""
  n, dtype, device = prod(shape), like.dtype, like.device
  if not dtype.is_half and n and isinstance(device, str) and (host := (buf := Buffer(device, n, dtype)).host_view()) \
      is not None:
    return host[:n], Tensor(buffer_view(new_buffer_uop(device, n, dtype, buf), shape))
  return np.empty(n, _host_dtype(like)), None

def _back(arr: np.ndarray, out: Tensor | None, shape: tuple[int, ...], like: Tensor) -> Tensor:
  return out if out is not None else Tensor(arr.reshape(shape), device=like.device, dtype=like.dtype)

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

@functools.lru_cache(maxsize=1024)
def _signature(fields: tuple[tuple[str, object], ...]) -> np.ndarray:
  """A call's description as `name=value` lines, HEADER_BYTES long (zeros after the text). Cached: a training step
  makes the same few calls at every step."""
  text = "\n".join(f"{k}={_short(v)}" for k, v in fields).encode()
  assert len(text) <= HEADER_BYTES, text
  header = np.zeros(HEADER_BYTES, np.uint8)
  header[:len(text)] = np.frombuffer(text, np.uint8)
  header.flags.writeable = False  # shared by every call with this description
  return header

def _fields(header: np.ndarray) -> dict[str, str]:
  return dict(line.split("=", 1) for line in header.tobytes().rstrip(b"\0").decode().split("\n"))

def _rows(comm: Any) -> np.ndarray:
  """Room for each rank's message of a call (row k: rank k's), made once: every call fills it and reads it."""
  if _World.rows is None or len(_World.rows) != comm.Get_size():
    _World.rows = np.empty((comm.Get_size(), HEADER_BYTES + SMALL_BYTES), np.uint8)
  return _World.rows

def _agree(comm: Any, what: str, t: Tensor | None = None, payload: np.ndarray | None = None,
           **args: object) -> np.ndarray:
  """Every rank sends each other rank the description of its call (the collective, t's shape and dtype, `args`) and
  then `payload`'s bytes (at most SMALL_BYTES), in one message, and receives theirs: rows[k] holds rank k's, its
  payload from HEADER_BYTES on. Where the calls differ, each rank raises the same ValueError, which names the first
  field that differs and its value on each rank, before MPI reads or writes any tensor. Point-to-point messages, not a
  collective: a receive may take less than it has room for, so ranks whose calls differ in size exchange them too
  (the counts of MPI's collectives must agree). It waits as long as a collective does (DIST_TIMEOUT)."""
  fields = (("collective", what), *((("shape", t.shape), ("dtype", t.dtype.name)) if t is not None else ()),
            *args.items())
  try: header = _signature(fields)
  except TypeError: header = _signature.__wrapped__(fields)  # a value that cannot be a key (a list for an op)
  me, rows = comm.Get_rank(), _rows(comm)
  rows[me, :HEADER_BYTES] = header
  end = HEADER_BYTES
  if payload is not None:
    end += payload.nbytes
    rows[me, HEADER_BYTES:end] = payload.view(np.uint8)
  peers = [k for k in range(len(rows)) if k != me]
  remote.wait_all([comm.Irecv(rows[k], k, TAG) for k in peers] + [comm.Isend(rows[me, :end], k, TAG) for k in peers],
                  what, me, RULE)
  if rows[:, :HEADER_BYTES].tobytes() == header.tobytes() * len(rows): return rows
  raise _disagreement([_fields(h) for h in rows[:, :HEADER_BYTES]])

def _disagreement(calls: list[dict[str, str]]) -> ValueError:
  """The error for calls that differ: the first field that differs, and its value on each rank."""
  field = next(k for k in ("collective", *(k for c in calls for k in c)) if len({c.get(k) for c in calls}) > 1)
  ranks: dict[str, list[int]] = {}
  for r, c in enumerate(calls): ranks.setdefault(c.get(field, "nothing"), []).append(r)
  where = ", ".join(f"{v} on rank{'s' * (len(rs) > 1)} {', '.join(map(str, rs))}" for v, rs in ranks.items())
  return ValueError(f"{calls[0]['collective']}: the ranks disagree on the {field}: {where}; every rank must call the "
                    "same collectives in the same order, with tensors of one shape and dtype (and one op and src)")

def _small(t: Tensor) -> bool:
  """Whether t's values travel with the check of the call (see _agree)."""
  return prod(t.shape) * _host_dtype(t).itemsize <= SMALL_BYTES

def _payloads(rows: np.ndarray, t: Tensor) -> np.ndarray:
  """Every rank's values of t, as _agree received them: one row a rank."""
  dtype = _host_dtype(t)
  return rows[:, HEADER_BYTES:HEADER_BYTES + prod(t.shape) * dtype.itemsize].view(dtype)

def _check_op(op: str) -> None:
  if op not in REDUCE_OPS: raise ValueError(f"reduce op {op!r}: expected one of {REDUCE_OPS}")

@functools.cache
def _mpi_op(op: str) -> Any:
  from mpi4py import MPI
  return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]

# the reductions of small tensors, in rank order on every rank (so every rank gets the same bits)
UFUNCS: dict[str, np.ufunc] = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}

def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
  """Every rank's `t` combined elementwise by `op` (sum, max, min or prod), on every rank.

  >>> all_reduce(Tensor([3.0]), "max").tolist()
  [3.0]
  """
  comm = _comm()
  if comm is None:
    _check_op(op)
    return t.contiguous()
  rows = _agree(comm, "all_reduce", t, _host(_dense(t)) if (small := _small(t)) else None, op=op)
  _check_op(op)
  out, result = _result(t.shape, t)
  if small: UFUNCS[op].reduce(_payloads(rows, t), axis=0, out=out)
  else: comm.Allreduce(_host(_dense(t)), out, op=_mpi_op(op))  # blocking: _agree saw every rank here
  return _back(out, result, t.shape, t)

def all_gather(t: Tensor) -> Tensor:
  """Every rank's `t`, concatenated along dim 0 in rank order, on every rank (torch's all_gather_into_tensor; a 0-d
  tensor gives one element per rank).

  >>> all_gather(Tensor([[1, 2]])).tolist()
  [[1, 2]]
  """
  comm = _comm()
  if comm is None: return t.reshape(1) if t.ndim == 0 else t.contiguous()
  rows = _agree(comm, "all_gather", t, _host(_dense(t)) if (small := _small(t)) else None)
  shape = (len(rows),) if t.ndim == 0 else (len(rows) * t.shape[0],) + t.shape[1:]
  out, result = _result(shape, t)
  if small: out.reshape(len(rows), -1)[...] = _payloads(rows, t)
  else: comm.Allgather(_host(_dense(t)), out)
  return _back(out, result, shape, t)

def reduce_scatter(t: Tensor, op: str = "sum") -> Tensor:
  """Every rank's `t` combined by `op`; rank r keeps the r-th of world_size() equal slices of dim 0 (torch's
  reduce_scatter_tensor: dim 0 must divide evenly).

  >>> reduce_scatter(Tensor([1.0, 2.0])).tolist()
  [1.0, 2.0]
  """
  comm, n = _comm(), world_size()
  small = _small(t)
  rows = None if comm is None else _agree(comm, "reduce_scatter", t, _host(_dense(t)) if small else None, op=op)
  if t.ndim == 0 or t.shape[0] % n:
    raise ValueError(f"reduce_scatter: dim 0 of a tensor of shape {t.shape} must divide evenly among {n} ranks")
  _check_op(op)
  if rows is None: return t.contiguous()
  shape = (t.shape[0] // n,) + t.shape[1:]
  out, result = _result(shape, t)
  me = comm.Get_rank()
  if small: UFUNCS[op].reduce(_payloads(rows, t)[:, me * out.size:(me + 1) * out.size], axis=0, out=out)
  else: comm.Reduce_scatter_block(_host(_dense(t)), out, op=_mpi_op(op))
  return _back(out, result, shape, t)

def broadcast(t: Tensor, src: int = 0) -> Tensor:
  """Rank `src`'s `t` on every rank (every rank passes a tensor of the same shape and dtype).

  >>> broadcast(Tensor([5])).tolist()
  [5]
  """
  comm, n = _comm(), world_size()
  mine, small = rank() == src, _small(t)
  rows = None if comm is None else _agree(comm, "broadcast", t, _host(_dense(t)) if mine and small else None, src=src)
  if not 0 <= src < n: raise IndexError(f"broadcast: src {src} is not a rank of {n}")
  if rows is None: return t.contiguous()
  out, result = _result(t.shape, t)
  if small: out[...] = _payloads(rows, t)[src]
  else:
    if mine: out[...] = _host(_dense(t))
    comm.Bcast(out, root=src)
  return _back(out, result, t.shape, t)

def barrier() -> None:
  """Wait until every rank has called barrier().

  >>> barrier()
  """
  comm = _comm()
  if comm is not None: _agree(comm, "barrier")  # the exchange of what each rank called is a barrier itself
