"""A device mesh across MPI processes, as JAX's multi-controller runtime: after
`lazytensor.parallel.distributed.init(devices_per_rank=k)` under `mpiexec -n n`, the devices CPU:0 .. CPU:(k*n-1) are
one set that every rank names alike, CPU:i held by rank i // k. Every rank runs the same program, so it builds the
same graphs and the same schedules; each step of a schedule then runs where its memory is:

* a kernel runs on the rank that holds its device; the others skip it (their Buffer for that device is a placeholder
  that is never allocated, nor is its kernel compiled);
* a copy between two devices of one rank is a copy there; a copy from rank a's device to rank b's is an MPI send on a
  and a receive on b, skipped by the others. Its tag is the number of copies between ranks before it, a counter that
  advances alike on every rank since each steps past the same copies in the same order;
* a tensor made from host data (Tensor(array, device)) holds it on the device's rank only: its copy is the truth;
* reading a value (`.numpy()`, `.item()`, `.tolist()`) is collective: a tensor replicated on a device of every rank is
  read from this rank's replica, without a message; any other is gathered on its first device and broadcast from
  the rank that holds it, so every rank must read it.

A send waits until its receive has taken the data (no copy of the buffer is kept, and the memory planner may give it
to the next kernel). That cannot deadlock: every rank walks the same steps in the same order, so the earliest step
that waits has its other half at the same place of the other rank's walk, where nothing earlier holds it up. With
engine/queues.py, a transfer runs on the worker of the device of this rank that it reads or writes, in that device's
program order; MPI is then called from several threads, which needs MPI_THREAD_MULTIPLE (mpi4py asks for it, and
MPICH and Open MPI give it); where MPI gives less, schedules run in order on the calling thread.

Before a schedule runs, and before a read, the ranks exchange a checksum of what they are about to do (each step's
kind, devices, sizes, dtypes and code): where they differ (a tensor of another shape or dtype on one rank, a step one
rank takes and another does not), every rank raises the same ValueError, naming the first step that differs and what
it is on each rank, before any data moves. One 16-byte all-gather per schedule and per read (0.3-3 ms for a schedule
of 10 steps over 2 ranks on a 2-core host under a load of 14, mostly the wait for the other rank to get a core).

Which tensors are alive decides what a schedule computes (an assign first computes the live tensors that read what it
overwrites: frontend/live.py), and a tensor in a reference cycle dies when Python's cyclic garbage collector runs, which
allocations trigger at different moments on each rank (the ranks' paths differ: a send here, a receive there). So
joining turns the automatic collector off and collects at the same steps on every rank instead (every GC_EVERY
schedules, reads and transfers). Without that, 4 ranks training a linear model under TinyJit disagreed at its first
step: one rank copied the weight to its replicas again, the others still held a dead tensor that had kept them.

Devices of any other kind (EMU, CUDA) are each rank's own: every rank has its own EMU, and one rank's CPU memory is
never copied to another's EMU. mpi4py is only imported by distributed.init; this module holds what it joined.
"""
from __future__ import annotations

import gc
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lazytensor.helpers import DIST_TIMEOUT
from lazytensor.runtime.device import Buffer
from lazytensor.uop.ops import Ops, UOp

SHARED_KIND = "CPU"  # the kind of device that the ranks share out
GC_EVERY = 256  # steps between two garbage collections (each costs milliseconds)

class Ranks:
  """This process's place among the ranks of a mesh, and the counter of copies between ranks."""
  def __init__(self, comm: Any, per_rank: int, threaded: bool, tag_limit: int) -> None:
    self.comm, self.per_rank, self.threaded, self.tag_limit = comm, per_rank, threaded, tag_limit
    self.rank, self.size = int(comm.Get_rank()), int(comm.Get_size())
    self.transfers = 0
    self.steps = 0  # schedules, reads and transfers since joining: when to collect garbage

# None in a process that did not join a mesh across ranks: every device is its own, and nothing here runs
joined: Ranks | None = None

def join(comm: Any, devices_per_rank: int, threaded: bool) -> None:
  """Spread CPU:0 .. CPU:(devices_per_rank * ranks - 1) over the ranks of `comm` (an mpi4py communicator); `threaded`:
  whether MPI may be called from several threads at once."""
  global joined
  from mpi4py import MPI
  # a communicator of its own: the mesh's messages never match those of lazytensor.parallel.distributed
  own = comm.Dup()
  joined = Ranks(own, devices_per_rank, threaded, int(own.Get_attr(MPI.TAG_UB)))
  gc.collect()
  gc.disable()

def _step() -> None:
  """Count a step that every rank takes; collect garbage at every GC_EVERY-th, the same on every rank."""
  assert joined is not None
  joined.steps += 1
  if joined.steps % GC_EVERY == 0: gc.collect()

def owner(device: str) -> int | None:
  """The rank that holds a device's memory (CPU:i is rank i // devices_per_rank's); None for a device of another kind,
  which every rank has its own of."""
  assert joined is not None
  kind, _, index = device.partition(":")
  if kind != SHARED_KIND: return None
  rank = int(index or 0) // joined.per_rank
  if rank >= joined.size:
    raise ValueError(f"device {device} is past the mesh's devices CPU:0 .. CPU:{joined.per_rank * joined.size - 1} "
                     f"({joined.per_rank} on each of {joined.size} ranks)")
  return rank

def owns(device: str) -> bool:
  """Whether this rank holds `device`'s memory (always, alone: outside a mesh across ranks)."""
  return joined is None or owner(device) in (None, joined.rank)

def wait(request: Any, what: str, rank: int | None = None,
         rule: str = "every rank must run the same program") -> Any:
  """Wait for a nonblocking MPI call; TimeoutError after DIST_TIMEOUT seconds, naming this rank (`rank`, else the
  mesh's) and the `rule` the ranks broke. Returns its status."""
  from mpi4py import MPI
  status = MPI.Status()
  _poll(lambda: request.Test(status), what, rank, rule)
  return status

def wait_all(requests: list[Any], what: str, rank: int | None = None,
             rule: str = "every rank must run the same program") -> None:
  """wait() for each of several nonblocking MPI calls."""
  from mpi4py import MPI
  _poll(lambda: MPI.Request.Testall(requests), what, rank, rule)

def _poll(done: Callable[[], bool], what: str, rank: int | None, rule: str) -> None:
  """Call `done` until it is true. It polls (MPI moves a message forward only inside MPI calls), sleeping between
  polls once it has waited a millisecond: a rank waits for another's kernels as often as for data, and a spinning rank
  takes a core from the ranks that compute (on a loaded 2-core host, 2 ranks moving 1 MB took 22-24 ms spinning, 8-10
  ms so; 64 MB 94-106 ms, 84 ms). The sleeps are at most 5% of the time waited so far."""
  if done(): return  # a small message from a rank that got there first: no clock read
  start = time.monotonic()
  while not done():
    if (waited := time.monotonic() - start) > 1e-3: time.sleep(min(waited * 0.05, 1e-3))
    if waited > DIST_TIMEOUT.value:
      who = rank if rank is not None else joined.rank if joined is not None else 0
      raise TimeoutError(f"rank {who}: {what} waited {waited:.0f} s for the other ranks; {rule} (DIST_TIMEOUT sets "
                         "the limit)")

class Transfer:
  """This rank's half of a copy between ranks: send `buf` to rank `peer`, or receive into it from there."""
  __slots__ = ("buf", "peer", "tag", "receive")
  def __init__(self, buf: Buffer, peer: int, tag: int, receive: bool) -> None:
    self.buf, self.peer, self.tag, self.receive = buf, peer, tag, receive

  def __call__(self) -> None:
    assert joined is not None
    host = self.buf.host_view()
    assert host is not None, f"{self.buf.device}: a device shared out over ranks holds host memory"
    mem = host.view(np.uint8)[:self.buf.nbytes]
    if self.receive: status = wait(joined.comm.Irecv(mem, self.peer, self.tag), str(self))
    else: status = wait(joined.comm.Isend(mem, self.peer, self.tag), str(self))
    assert not self.receive or status.Get_count() == self.buf.nbytes, (status.Get_count(), self.buf.nbytes)

  def __str__(self) -> str:
    if self.receive: return f"receive {self.buf.nbytes:8d}, {self.buf.device} <- rank {self.peer}"
    return f"send {self.buf.nbytes:8d}, {self.buf.device} -> rank {self.peer}"

def route(dst: Buffer, src: Buffer) -> Transfer | bool:
  """What this rank does of a copy from src to dst: True runs it here, False skips it (another rank's), a Transfer
  is its half of a copy between ranks. Called in program order on every rank, so the tags agree."""
  assert joined is not None
  to, fro = owner(dst.device), owner(src.device)
  if fro is None: return to is None or to == joined.rank
  if to is None:
    raise ValueError(f"a copy from {src.device} (rank {fro}'s) to {dst.device}, which every rank has its own of: copy "
                     f"to a {SHARED_KIND} device first")
  if to == fro: return to == joined.rank
  _step()
  tag = joined.transfers % (joined.tag_limit + 1)
  joined.transfers += 1
  if joined.rank == fro: return Transfer(src, to, tag, False)
  return Transfer(dst, fro, tag, True) if joined.rank == to else False

def step_line(ast: UOp, bufs: Sequence[Buffer]) -> str:
  """A step as the ranks compare it: a copy's buffers; a kernel's device, the shape and dtype of what it stores, and
  a digest of its code."""
  if ast.op is Ops.COPY: return f"a copy of {bufs[0].size} {bufs[0].dtype.name} {bufs[1].device} -> {bufs[0].device}"
  stored = ", ".join(f"{s.src[1].arg.shape} {s.src[2].dtype.name}" for s in ast.src)
  return f"a kernel on {bufs[0].device} storing {stored} (code {ast.key.hex()[:8]})"

def agree(what: str, lines: list[str]) -> None:
  """Every rank tells the others a checksum of the steps it is about to take (`what`: a schedule, a read); where they
  differ, each raises the same ValueError naming the first step that differs and what it is on each rank."""
  assert joined is not None
  _step()
  mine = np.array([len(lines), zlib.crc32("\n".join(lines).encode())], np.int64)
  every = np.empty((joined.size, 2), np.int64)
  wait(joined.comm.Iallgather(mine, every), what)
  if (every == every[0]).all(): return
  steps: list[list[str]] = joined.comm.allgather(lines)  # only on the way to an error: the steps themselves
  i = next(i for i in range(max(map(len, steps))) if len({s[i] if i < len(s) else "" for s in steps}) > 1)
  ranks: dict[str, list[int]] = {}
  for r, s in enumerate(steps): ranks.setdefault(s[i] if i < len(s) else "nothing", []).append(r)
  where = "; ".join(f"{v} on rank{'s' * (len(rs) > 1)} {', '.join(map(str, rs))}" for v, rs in ranks.items())
  raise ValueError(f"the ranks disagree at step {i} of what they run next: {where}; every rank of a mesh across ranks "
                   "must run the same program, on tensors of the same shapes and dtypes")

def read(buf: Buffer) -> np.ndarray:
  """A buffer's values, on every rank: broadcast from the rank that holds it (every rank must read it)."""
  if joined is None or (rank := owner(buf.device)) is None: return buf.numpy()
  agree("read", [f"a read of {buf.size} {buf.dtype.name} on {buf.device}"])
  out = buf.numpy() if rank == joined.rank else np.empty(buf.size, buf.dtype.np)
  wait(joined.comm.Ibcast(out.view(np.uint8), root=rank), f"read of {buf.device}")
  return out
