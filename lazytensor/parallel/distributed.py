"""Collectives across processes (and machines) over MPI, with torch.distributed's names and semantics: one rank per
process, every rank calls the same collectives in the same order, and each returns a new Tensor.

  pip install -e ".[mpi]"        # mpi4py and the mpich wheel, which brings mpiexec
  mpiexec -n 2 python train.py

>>> from lazytensor.parallel import distributed as dist
>>> dist.init()                  # MPI under mpiexec; a single process (rank 0 of 1) otherwise
>>> dist.all_reduce(Tensor([1.0, 2.0])).tolist() if dist.world_size() == 1 else None
[1.0, 2.0]

Values travel through host memory: MPI reads a tensor on a CPU device from its buffer and writes the result into the
buffer of the new tensor (no copies); a tensor on a GPU is copied to a numpy array and back. A collective that some
ranks never call would wait forever; here it raises TimeoutError after DIST_TIMEOUT seconds (300 by default) on the
ranks that wait, naming the collective. Before any data moves, the ranks check that each called the same (the
collective, the tensor's shape and dtype, the op, the src: a hash of them, in one 16-byte all-reduce): where they
differ, every rank raises the same ValueError, naming what differs on which rank (MPI itself would reduce float32 bytes
as int64, or read past a shorter buffer).
mpi4py is imported by init(), only when the process was started by an MPI launcher (or when asked with
init(backend="mpi")).
"""
from __future__ import annotations

import functools
import hashlib
import zlib
from typing import Any

import numpy as np

from lazytensor.frontend.tensor import Tensor
from lazytensor.helpers import launched_ranks, prod
from lazytensor.runtime import remote
from lazytensor.uop.ops import Ops

INSTALL_HINT = "pip install mpi4py mpich (or pip install -e \".[mpi]\" in the lazytensor repository)"
REDUCE_OPS = ("sum", "max", "min", "prod")

class _World:
  """The communicator of this process; None when it runs alone (no MPI)."""
  comm: Any = None
  initialized: bool = False

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

def _wait(request: Any, what: str) -> None:
  remote.wait(request, what, rank(), "every rank must call the same collectives in the same order")

def _dense(t: Tensor) -> Tensor:
  """t itself where it already lies densely in a buffer of its own (making it contiguous again took 24 of a 1 KB
  all_reduce's us), else a dense copy of it. MPI reads it while the caller holds it."""
  ld = t.lazydata
  return t if ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER and ld.arg.contiguous else t.contiguous()

def _host(t: Tensor) -> np.ndarray:
  """The values of t (dense, see _dense) as a flat array for MPI to read. On a CPU device they are read where they
  lie, in the buffer: no copy (with the two copies this saves, a 64 MB all_reduce took ~0.8x the time of mpi4py's own
  Allreduce)."""
  # MPI has no float16 or bfloat16 arithmetic: reduce in float32 (a bfloat16 tensor's numpy() is float32 already)
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
  copy), when the device's memory is host memory; else a numpy array to copy into a tensor afterwards, and None."""
  if not like.dtype.is_half and prod(shape):
    out = Tensor.empty(*shape, dtype=like.dtype, device=like.device)
    if (host := _memory(out)) is not None: return host, out
  return np.empty(prod(shape), np.float32 if like.dtype.is_half else like.dtype.np), None

def _back(arr: np.ndarray, out: Tensor | None, shape: tuple[int, ...], like: Tensor) -> Tensor:
  return out if out is not None else Tensor(arr.reshape(shape), device=like.device, dtype=like.dtype)

# bytes of the description of a call that the ranks exchange where they disagree, and of each value in it
HEADER_BYTES, VALUE_CHARS = 256, 64

def _short(value: object) -> str:
  """A value as text that fits the header: a long one (a shape of many dims, a stray op string) is its beginning and
  a checksum of all of it, which still tells two apart."""
  text = str(value) if "\n" not in str(value) else repr(value)  # a line of its own: names and values stay apart
  return text if len(text) <= VALUE_CHARS else f"{text[:32]}... (checksum {zlib.crc32(text.encode()):08x})"

@functools.lru_cache(maxsize=1024)
def _signature(fields: tuple[tuple[str, object], ...]) -> tuple[bytes, int]:
  """A call's description as text, `name=value` lines (at most HEADER_BYTES), and a 63-bit hash of it (63: its negation
  is an int64 too). Cached: a training step makes the same few calls at every step."""
  text = "\n".join(f"{k}={_short(v)}" for k, v in fields).encode()
  assert len(text) <= HEADER_BYTES, text
  return text, int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1

def _fields(header: np.ndarray) -> dict[str, str]:
  return dict(line.split("=", 1) for line in header.tobytes().rstrip(b"\0").decode().split("\n"))

def _agree(comm: Any, what: str, t: Tensor | None = None, **args: object) -> None:
  """Every rank checks that the others called what it called (the collective, t's shape and dtype, `args`), before
  any data moves. Where the calls differ, each rank raises the same ValueError, which names the first field that
  differs and its value on each rank. Where they agree (every call but a bug's) it costs one 16-byte all-reduce: the
  max and the min of a 63-bit hash of the description (the max of the hash and of its negation); only where those
  differ do the ranks all-gather the whole descriptions. It waits as long as a collective does (DIST_TIMEOUT)."""
  fields = (("collective", what), *((("shape", t.shape), ("dtype", t.dtype.name)) if t is not None else ()),
            *args.items())
  try: text, digest = _signature(fields)
  except TypeError: text, digest = _signature.__wrapped__(fields)  # a value that cannot be a key (a list for an op)
  bounds = np.empty(2, np.int64)
  _wait(comm.Iallreduce(np.array([digest, -digest], np.int64), bounds, op=_mpi_op("max")), what)
  if bounds[0] == -bounds[1]: return
  header, every = np.zeros(HEADER_BYTES, np.uint8), np.empty((comm.Get_size(), HEADER_BYTES), np.uint8)
  header[:len(text)] = np.frombuffer(text, np.uint8)
  _wait(comm.Iallgather(header, every), what)
  raise _disagreement([_fields(h) for h in every])

def _disagreement(calls: list[dict[str, str]]) -> ValueError:
  """The error for calls that differ: the first field that differs, and its value on each rank."""
  field = next(k for k in ("collective", *(k for c in calls for k in c)) if len({c.get(k) for c in calls}) > 1)
  ranks: dict[str, list[int]] = {}
  for r, c in enumerate(calls): ranks.setdefault(c.get(field, "nothing"), []).append(r)
  where = ", ".join(f"{v} on rank{'s' * (len(rs) > 1)} {', '.join(map(str, rs))}" for v, rs in ranks.items())
  return ValueError(f"{calls[0]['collective']}: the ranks disagree on the {field}: {where}; every rank must call the "
                    "same collectives in the same order, with tensors of one shape and dtype (and one op and src)")

def _check_op(op: str) -> None:
  if op not in REDUCE_OPS: raise ValueError(f"reduce op {op!r}: expected one of {REDUCE_OPS}")

@functools.cache
def _mpi_op(op: str) -> Any:
  from mpi4py import MPI
  return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]

def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
  """Every rank's `t` combined elementwise by `op` (sum, max, min or prod), on every rank.

  >>> all_reduce(Tensor([3.0]), "max").tolist()
  [3.0]
  """
  comm = _comm()
  if comm is not None: _agree(comm, "all_reduce", t, op=op)
  _check_op(op)
  if comm is None: return t.contiguous()
  src, (out, result) = _dense(t), _result(t.shape, t)
  comm.Allreduce(_host(src), out, op=_mpi_op(op))  # blocking: _agree saw every rank here
  return _back(out, result, t.shape, t)

def all_gather(t: Tensor) -> Tensor:
  """Every rank's `t`, concatenated along dim 0 in rank order, on every rank (torch's all_gather_into_tensor; a 0-d
  tensor gives one element per rank).

  >>> all_gather(Tensor([[1, 2]])).tolist()
  [[1, 2]]
  """
  comm = _comm()
  if comm is None: return t.reshape(1) if t.ndim == 0 else t.contiguous()
  _agree(comm, "all_gather", t)
  shape = (world_size(),) if t.ndim == 0 else (world_size() * t.shape[0],) + t.shape[1:]
  src, (out, result) = _dense(t), _result(shape, t)
  comm.Allgather(_host(src), out)
  return _back(out, result, shape, t)

def reduce_scatter(t: Tensor, op: str = "sum") -> Tensor:
  """Every rank's `t` combined by `op`; rank r keeps the r-th of world_size() equal slices of dim 0 (torch's
  reduce_scatter_tensor: dim 0 must divide evenly).

  >>> reduce_scatter(Tensor([1.0, 2.0])).tolist()
  [1.0, 2.0]
  """
  comm, n = _comm(), world_size()
  if comm is not None: _agree(comm, "reduce_scatter", t, op=op)
  if t.ndim == 0 or t.shape[0] % n:
    raise ValueError(f"reduce_scatter: dim 0 of a tensor of shape {t.shape} must divide evenly among {n} ranks")
  _check_op(op)
  if comm is None: return t.contiguous()
  shape = (t.shape[0] // n,) + t.shape[1:]
  src, (out, result) = _dense(t), _result(shape, t)
  comm.Reduce_scatter_block(_host(src), out, op=_mpi_op(op))
  return _back(out, result, shape, t)

def broadcast(t: Tensor, src: int = 0) -> Tensor:
  """Rank `src`'s `t` on every rank (every rank passes a tensor of the same shape and dtype).

  >>> broadcast(Tensor([5])).tolist()
  [5]
  """
  comm, n = _comm(), world_size()
  if comm is not None: _agree(comm, "broadcast", t, src=src)
  if not 0 <= src < n: raise IndexError(f"broadcast: src {src} is not a rank of {n}")
  if comm is None: return t.contiguous()
  out, result = _result(t.shape, t)
  if rank() == src: out[...] = _host(_dense(t))
  comm.Bcast(out, root=src)
  return _back(out, result, t.shape, t)

def barrier() -> None:
  """Wait until every rank has called barrier().

  >>> barrier()
  """
  comm = _comm()
  if comm is not None: _agree(comm, "barrier")  # the exchange of what each rank called is a barrier itself
