"""Collectives across processes (and machines) over MPI, with torch.distributed's names and semantics: one rank per
process, every rank calls the same collectives in the same order, and each returns a new Tensor.

  pip install -e ".[mpi]"        # mpi4py and the mpich wheel, which brings mpiexec
  mpiexec -n 2 python train.py

>>> from lazytensor import distributed as dist
>>> dist.init()                  # MPI under mpiexec; a single process (rank 0 of 1) otherwise
>>> dist.all_reduce(Tensor([1.0, 2.0])).tolist() if dist.world_size() == 1 else None
[1.0, 2.0]

Values travel through host memory (a tensor is read into a numpy array, sent by MPI, and the result is a tensor on the
input's device). A collective that some ranks never call would wait forever; here it raises TimeoutError after
DIST_TIMEOUT seconds (300 by default) on the ranks that wait, naming the collective. mpi4py is imported by init(),
only when the process was started by an MPI launcher (or when asked with init(backend="mpi")).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from lazytensor.helpers import DIST_TIMEOUT, launched_ranks
from lazytensor.tensor import Tensor

INSTALL_HINT = "pip install mpi4py mpich (or pip install -e \".[mpi]\" in the lazytensor repository)"
REDUCE_OPS = ("sum", "max", "min", "prod")

class _World:
  """The communicator of this process; None when it runs alone (no MPI)."""
  comm: Any = None
  initialized: bool = False

def init(backend: str | None = None) -> None:
  """Join the processes started together: over MPI when an MPI launcher started this one (or backend="mpi"), as the
  only rank otherwise. Calling it again does nothing; the other functions call it when it was not called.

  >>> init(); rank(), world_size()
  (0, 1)
  """
  if _World.initialized: return
  if backend not in (None, "mpi"): raise ValueError(f"init: backend {backend!r}: only 'mpi' is supported")
  if backend == "mpi" or launched_ranks() > 1:
    try:
      from mpi4py import MPI
    except ImportError as e:
      raise ImportError(f"lazytensor.distributed needs mpi4py to run over MPI: {INSTALL_HINT}") from e
    _World.comm = MPI.COMM_WORLD
  _World.initialized = True

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
  """Wait for a nonblocking MPI call, raising when the other ranks do not join within DIST_TIMEOUT seconds. It polls
  without sleeping: MPI moves a nonblocking collective forward only inside MPI calls, and a 100 us sleep between polls
  made a 16 MB all_reduce 3x slower."""
  start, polls = time.monotonic(), 0
  while not request.Test():
    polls += 1
    if polls % 4096 == 0 and (waited := time.monotonic() - start) > DIST_TIMEOUT.value:
      raise TimeoutError(f"rank {rank()}: {what} waited {waited:.0f} s for the other ranks; every rank must call the "
                         "same collectives in the same order (DIST_TIMEOUT sets the limit)")

def _host(t: Tensor) -> np.ndarray:
  arr = t.numpy()
  # MPI has no float16 or bfloat16 arithmetic: reduce in float32 (a bfloat16 tensor's numpy() is float32 already)
  return np.ascontiguousarray(arr.astype(np.float32) if t.dtype.is_half else arr)

def _back(arr: np.ndarray, like: Tensor) -> Tensor:
  return Tensor(arr, device=like.device, dtype=like.dtype)

def _check_op(op: str) -> None:
  if op not in REDUCE_OPS: raise ValueError(f"reduce op {op!r}: expected one of {REDUCE_OPS}")

def _mpi_op(op: str) -> Any:
  from mpi4py import MPI
  return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op]

def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
  """Every rank's `t` combined elementwise by `op` (sum, max, min or prod), on every rank.

  >>> all_reduce(Tensor([3.0]), "max").tolist()
  [3.0]
  """
  _check_op(op)
  comm = _comm()
  if comm is None: return t.contiguous()
  src = _host(t)
  out = np.empty_like(src)
  _wait(comm.Iallreduce(src, out, op=_mpi_op(op)), "all_reduce")
  return _back(out, t)

def all_gather(t: Tensor) -> Tensor:
  """Every rank's `t`, concatenated along dim 0 in rank order, on every rank (torch's all_gather_into_tensor; a 0-d
  tensor gives one element per rank).

  >>> all_gather(Tensor([[1, 2]])).tolist()
  [[1, 2]]
  """
  comm = _comm()
  if comm is None: return t.reshape(1) if t.ndim == 0 else t.contiguous()
  src = _host(t)
  out = np.empty((world_size(),) + src.shape, dtype=src.dtype)
  _wait(comm.Iallgather(src, out), "all_gather")
  shape = (world_size(),) if t.ndim == 0 else (world_size() * t.shape[0],) + t.shape[1:]
  return _back(out.reshape(shape), t)

def reduce_scatter(t: Tensor, op: str = "sum") -> Tensor:
  """Every rank's `t` combined by `op`; rank r keeps the r-th of world_size() equal slices of dim 0 (torch's
  reduce_scatter_tensor: dim 0 must divide evenly).

  >>> reduce_scatter(Tensor([1.0, 2.0])).tolist()
  [1.0, 2.0]
  """
  n = world_size()
  if t.ndim == 0 or t.shape[0] % n:
    raise ValueError(f"reduce_scatter: dim 0 of a tensor of shape {t.shape} must divide evenly among {n} ranks")
  _check_op(op)
  comm = _comm()
  if comm is None: return t.contiguous()
  src = _host(t)
  out = np.empty((t.shape[0] // n,) + src.shape[1:], dtype=src.dtype)
  _wait(comm.Ireduce_scatter_block(src, out, op=_mpi_op(op)), "reduce_scatter")
  return _back(out, t)

def broadcast(t: Tensor, src: int = 0) -> Tensor:
  """Rank `src`'s `t` on every rank (every rank passes a tensor of the same shape and dtype).

  >>> broadcast(Tensor([5])).tolist()
  [5]
  """
  n = world_size()
  if not 0 <= src < n: raise IndexError(f"broadcast: src {src} is not a rank of {n}")
  comm = _comm()
  if comm is None: return t.contiguous()
  buf = _host(t).copy()
  _wait(comm.Ibcast(buf, root=src), "broadcast")
  return _back(buf, t)

def barrier() -> None:
  """Wait until every rank has called barrier().

  >>> barrier()
  """
  comm = _comm()
  if comm is not None: _wait(comm.Ibarrier(), "barrier")
