"""A device mesh across MPI processes, as JAX's multi-controller runtime: after
`lazytensor.parallel.distributed.init(devices_per_rank=k)` under `mpiexec -n n`, the devices CPU:0 .. CPU:(k*n-1) are
one set that every rank names alike, CPU:i held by rank i // k. Every rank runs the same program, so it builds the
same graphs and the same schedules; each step of a schedule then runs where its memory is:

* a kernel runs on the rank that holds its device; the others skip it (their Buffer for that device is a placeholder
  that is never allocated, nor is its kernel compiled);
* a copy between two devices of one rank is a copy there; copies from one rank's devices to another's run as an
  Exchange: copies between ranks that follow one another in the schedule (the scheduler puts them last and together)
  are one step, in which each rank sends one message to each rank it copies to and receives one from each rank it
  copies from, carrying all of those copies' buffers. Its tag is the number of exchanges before it, a counter that
  advances alike on every rank since each steps past the same exchanges in the same order;
* a tensor made from host data (Tensor(array, device)) holds it on the device's rank only: its copy is the truth;
* reading a value (`.numpy()`, `.item()`, `.tolist()`) is collective: a tensor replicated on a device of every rank is
  read from this rank's replica, without a message; any other is gathered on its first device and broadcast from
  the rank that holds it, so every rank must read it.

A send waits until its receive has taken the data (no copy of the buffer is kept, and the memory planner may give it
to the next kernel). That cannot deadlock: every rank walks the same steps in the same order and groups them into the
same exchanges, so the earliest exchange that waits has every step before it done on every rank, and each rank posts
all of its messages before it waits for any. With engine/queues.py, an exchange runs on the worker of a device of this
rank that it reads or writes, after the steps it depends on; MPI is then called from several threads, which needs
MPI_THREAD_MULTIPLE (mpi4py asks for it, and MPICH and Open MPI give it); where MPI gives less, schedules run in order
on the calling thread.

Before a schedule runs, and before a read, the ranks exchange a checksum of what they are about to do (each step's
kind, devices, sizes, dtypes and code): where they differ (a tensor of another shape or dtype on one rank, a step one
rank takes and another does not), every rank raises the same ValueError, naming the first step that differs and what
it is on each rank, before any data moves. One 16-byte all-gather per schedule and per read (0.3-3 ms for a schedule
of 10 steps over 2 ranks on a 2-core host under a load of 14, mostly the wait for the other rank to get a core).

Which tensors are alive decides what a schedule computes (an assign first computes the live tensors that read what it
overwrites: frontend/live.py), and a tensor in a reference cycle dies when Python's cyclic garbage collector runs, which
allocations trigger at different moments on each rank (the ranks' paths differ: a send here, a receive there). So
joining turns the automatic collector off and collects at the same steps on every rank instead (every GC_EVERY
schedules and reads). Without that, 4 ranks training a linear model under TinyJit disagreed at its first
step: one rank copied the weight to its replicas again, the others still held a dead tensor that had kept them.

Devices of any other kind (EMU, CUDA) are each rank's own: every rank has its own EMU, and one rank's CPU memory is
never copied to another's EMU. mpi4py is only imported by distributed.init; this module holds what it joined.
"""
from __future__ import annotations

import gc
import os
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any, cast

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
    self.steps = 0  # schedules and reads since joining: when to collect garbage

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
  # the requests are mpi4py's, so it is imported: found without an import statement (~1 us of a small collective's)
  testall = sys.modules["mpi4py.MPI"].Request.Testall
  _poll(lambda: testall(requests), what, rank, rule)

# how long _poll polls before it starts to yield its core between polls. 1 KB eager all_reduce, all_gather and
# reduce_scatter over 2 ranks on a 2-core host under load 7.5-8.5, three runs with the choices taking turns, medians of
# 15 runs of 200 calls: 28.7-49.7 us a call yielding at once (41 the median of the nine), 11.4-68.0 spinning 20 us first
# (26; lower in 7 of the 9), the fastest runs alike (7.3-28.8 and 8.3-47.2 us)
SPIN_SECONDS = 20e-6

def _poll(done: Callable[[], bool], what: str, rank: int | None, rule: str) -> None:
  """Call `done` until it is true. It polls (MPI moves a message forward only inside MPI calls), giving the core to
  any other process that is ready to run between polls (sched_yield): a rank waits for another's kernels as often as
  for data, and a spinning rank takes a core from the ranks that compute. It does not sleep: a message larger than
  MPI's shared-memory cells moves a cell per poll of each side, so a sleep between polls (at most 1 ms once it had
  waited 1 ms, before) made every cell wait for it. On a 2-core host under a load of 9-10, a TinyJit replay of 32
  all-reduces over 2 ranks (one exchange) took 23-29 ms yielding and 330-360 ms sleeping at 64 KB each, 0.19 s and
  4.8 s at 1 MB each, 4.6-5.6 ms and 4.9-6.3 ms at 1 KB each. For its first SPIN_SECONDS it polls without yielding:
  a rank that is running answers within microseconds, and a core given to another process comes back a time slice
  later (see SPIN_SECONDS)."""
  if done(): return  # a small message from a rank that got there first: no clock read
  start = time.monotonic()
  while not done():
    if (waited := time.monotonic() - start) > SPIN_SECONDS: os.sched_yield()
    if waited > DIST_TIMEOUT.value:
      who = rank if rank is not None else joined.rank if joined is not None else 0
      raise TimeoutError(f"rank {who}: {what} waited {waited:.0f} s for the other ranks; {rule} (DIST_TIMEOUT sets "
                         "the limit)")

def crosses(dst: Buffer, src: Buffer) -> bool:
  """Whether a copy from src to dst is a message between ranks (both devices shared out, held by different ranks)."""
  return (fro := owner(src.device)) is not None and (to := owner(dst.device)) is not None and fro != to

def route(dst: Buffer, src: Buffer) -> bool:
  """Whether this rank runs a copy from src to dst that stays on one rank (a copy between ranks is an Exchange's)."""
  assert joined is not None
  to, fro = owner(dst.device), owner(src.device)
  if fro is None: return to is None or to == joined.rank
  if to is None:
    raise ValueError(f"a copy from {src.device} (rank {fro}'s) to {dst.device}, which every rank has its own of: copy "
                     f"to a {SHARED_KIND} device first")
  assert to == fro, f"a copy {src.device} -> {dst.device} between ranks outside an exchange"
  return to == joined.rank

class Exchange:
  """Copies between ranks that run as one step: one message to each rank that this rank sends any of them to, one
  from each rank that it receives any of them from, all posted at once and waited for together. A message carries
  its copies' buffers in the exchange's order, read and written where they lie (an MPI datatype of their addresses,
  made when the buffers change: once per TinyJit capture, not per replay, as long as they stay the same); its tag is
  the number of exchanges before it, a counter that advances alike on every rank (tag_of). A send waits until its
  receive has taken the data: no copy of a buffer is kept. The buffers of the step are each copy's (dst, src) in turn,
  so a TinyJit replay swaps them as any step's."""
  __slots__ = ("copies", "messages", "made")
  def __init__(self, copies: int, messages: tuple[tuple[int, bool, tuple[int, ...]], ...]) -> None:
    # messages: (the other rank, whether this rank receives it, the indices in bufs of the buffers it carries)
    self.copies, self.messages = copies, messages
    self.made: list[tuple[tuple[Buffer, ...], Any] | None] = [None] * len(messages)  # each message's last memory

  def written(self, bufs: Sequence[Buffer]) -> tuple[Buffer, ...]:
    """The buffers this rank's messages write: the destinations of its receives."""
    return tuple(bufs[i] for _, receive, held in self.messages if receive for i in held)

  def mine(self, bufs: Sequence[Buffer]) -> tuple[Buffer, ...]:
    """The buffers of this rank that its messages read or write."""
    return tuple(bufs[i] for _, _, held in self.messages for i in held)

  def __call__(self, bufs: Sequence[Buffer], tag: int) -> None:
    assert joined is not None
    comm = joined.comm
    requests = [(comm.Irecv if receive else comm.Isend)(self._memory(k, bufs), peer, tag)
                for k, (peer, receive, _) in enumerate(self.messages)]
    if requests: wait_all(requests, self.describe(bufs))

  def _memory(self, k: int, bufs: Sequence[Buffer]) -> Any:
    """Message k's buffers as MPI reads or writes them: one buffer's memory itself; several, their addresses in a
    datatype, made again only when the buffers are others than last time."""
    held = tuple(bufs[i] for i in self.messages[k][2])
    if (last := self.made[k]) is not None and last[0] == held: return last[1]
    from mpi4py import MPI
    hosts = [b.host_view() for b in held]
    assert all(h is not None for h in hosts), f"{held[0].device}: a device shared out over ranks holds host memory"
    if len(held) == 1: memory: Any = cast(np.ndarray, hosts[0]).view(np.uint8)[:held[0].nbytes]
    else:
      kind = MPI.BYTE.Create_hindexed([b.nbytes for b in held], [MPI.Get_address(h) for h in hosts]).Commit()
      memory = [MPI.BOTTOM, 1, kind]
    self._free(k)
    self.made[k] = (held, memory)
    return memory

  def _free(self, k: int) -> None:
    if (last := self.made[k]) is not None and isinstance(last[1], list): last[1][2].Free()
    self.made[k] = None

  def __del__(self) -> None:
    # the datatypes are MPI's to free, while it runs (not at exit, where MPI may be finalized and imports fail)
    if (mpi := sys.modules.get("mpi4py.MPI")) is not None and not mpi.Is_finalized():
      for k in range(len(self.made)): self._free(k)

  def describe(self, bufs: Sequence[Buffer]) -> str:
    """What this rank does of it, as DEBUG=2 prints it and a TimeoutError names it."""
    def message(peer: int, receive: bool, held: tuple[int, ...]) -> str:
      return f"{sum(bufs[i].nbytes for i in held)} bytes of {len(held)} {'<-' if receive else '->'} rank {peer}"
    return f"exchange of {self.copies} copies between ranks: " + \
      (", ".join(message(*m) for m in self.messages) or "none of this rank's")

def tag_of(exchange: Exchange) -> int:
  """The tag of an exchange's messages, advancing the counter: called in program order on every rank (as the
  exchange is submitted), so the tags agree. (Not a step that collects garbage: the schedule it belongs to counted
  one, and a TinyJit replay makes no graphs, whose schedules depend on what is alive.)"""
  assert joined is not None
  tag = joined.transfers % (joined.tag_limit + 1)
  joined.transfers += 1
  return tag

def exchanges(copies: Sequence[tuple[Buffer, Buffer] | None]) -> list[int | tuple[Exchange, tuple[int, ...]]]:
  """A schedule's steps (each copy's (dst, src), None for a kernel) in order, each run of copies between ranks that
  follow one another grouped into Exchanges (with the indices of their copies); a copy that reads or writes what an
  earlier one of the run writes, or writes what one reads (a hop of a ring), starts the next. The scheduler puts the
  copies between ranks together where it can (schedule/scheduler.py: _order_roots). Every rank groups the same
  schedule alike, so the exchanges match and cannot deadlock: the earliest unfinished one has every step before it
  done on every rank, and posts all its halves on each."""
  out: list[int | tuple[Exchange, tuple[int, ...]]] = []
  group: list[tuple[int, tuple[Buffer, Buffer]]] = []
  reads: set[int] = set()
  writes: set[int] = set()
  def flush() -> None:
    if group: out.append((_exchange([c for _, c in group]), tuple(i for i, _ in group)))
    group.clear()
    reads.clear()
    writes.clear()
  for i, copy in enumerate(copies):
    if copy is None or not crosses(*copy):
      flush()
      out.append(i)
      continue
    dst, src = id(copy[0]), id(copy[1])
    if dst in writes or dst in reads or src in writes: flush()
    group.append((i, copy))
    reads.add(src)
    writes.add(dst)
  flush()
  return out

def _exchange(copies: list[tuple[Buffer, Buffer]]) -> Exchange:
  """The Exchange of these copies ((dst, src) each): this rank's message to or from each other rank, carrying its
  copies in order (the other rank's message lists the same copies in the same order)."""
  assert joined is not None
  held: dict[tuple[int, bool], list[int]] = {}
  for place, (dst, src) in enumerate(copies):
    to, fro = owner(dst.device), owner(src.device)
    assert to is not None and fro is not None
    if fro == joined.rank: held.setdefault((to, False), []).append(2 * place + 1)
    elif to == joined.rank: held.setdefault((fro, True), []).append(2 * place)
  return Exchange(len(copies), tuple((peer, receive, tuple(idx)) for (peer, receive), idx in sorted(held.items())))

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
