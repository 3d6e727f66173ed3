"""Devices that work at once: a worker thread per device runs that device's steps (kernels, and copies into it) in
program order, each step first waiting for the steps it depends on, so that steps on different devices overlap.

A step depends on the last earlier step that wrote a buffer it reads or writes (read after write, write after write)
and on every step since then that read a buffer it writes (write after read: the memory planner gives a buffer that
nobody reads any more to a later kernel). Buffers are compared by identity: the memory planner reuses the object, and
no two Buffers share memory. So every buffer sees its reads and writes in program order, as serial execution would
give them, and the results are bit-identical to it; only steps with nothing between them run at once.

Each worker takes its device's steps in the order they were submitted, and a step only waits for earlier steps, so the
earliest step not done yet can always run: no two workers wait for each other. A copy runs on its destination's worker
(reading the source, which the dependencies order). Memory is allocated on the submitting thread, before the step is
queued, so the allocators are only ever used by one thread. Kernels run through ctypes, which releases the GIL: two
CPU devices on two cores run their kernels in parallel (with THREADS=1 each, or their threaded kernels take turns on
the one pool of kernel threads, runtime/cpu_threads.py).

Only devices whose runtime is safe to launch from another thread queue their steps (`Compiled.queued`: the CPU); a
schedule that touches any other device runs in order on the calling thread, as does one on a single device (a queue
would only add its hand-off, ~20 us a step, to every eager kernel).

One Queues may also outlive a schedule (engine/realize.deferred: the schedules of a pipeline step submitted one after
another, none waited for): its dependencies then span the schedules, as they span one. What else touches memory must
then wait for the steps queued on it: a read on the host waits for the buffer's last writer (`Buffer.writer`, set
here); a buffer is held by the Queues until the steps on it are done (`forget_done` lets go of those that are, on the
submitting thread), so its memory is never handed to another while a step still uses it.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence

from lazytensor.runtime import remote
from lazytensor.runtime.device import Buffer, Device

Step = Callable[[], None]

class _Work:
  """A step queued on a worker: what it waits for, and the event it sets when done (or failed)."""
  __slots__ = ("run", "after", "done", "error")
  def __init__(self, run: Step, after: Sequence[_Work]) -> None:
    self.run, self.after, self.done = run, after, threading.Event()
    self.error: BaseException | None = None

  def wait(self) -> None:
    """Wait until the step is done (a host read of what it writes: `Buffer.writer`). A worker does not wait: its step
    waited for what it reads already, and a buffer's last writer may be a later step that waits for it."""
    if not getattr(_on_worker, "flag", False): self.done.wait()

# a point in the devices' queues: the last step submitted to each so far (Queues.latest)
Ticket = list[_Work]

_on_worker = threading.local()

def _worker(q: queue.SimpleQueue[_Work]) -> None:
  _on_worker.flag = True
  while True:
    work = q.get()
    for dep in work.after: dep.done.wait()
    failed = next((d.error for d in work.after if d.error is not None), None)
    work.after = ()  # done with: a chain of finished steps is not kept alive by the newest
    try:
      if failed is None: work.run()
      else: work.error = failed  # what it would have read is wrong: it does not run, and says why
    except BaseException as e: work.error = e
    finally:
      # the step's buffers are let go before it is seen done: the submitter holds them until then, so a buffer is
      # never freed (its memory handed back to an allocator) on this thread
      work.run = _nothing
      work.done.set()
      del work

def _nothing() -> None: pass

_queues: dict[str, queue.SimpleQueue[_Work]] = {}
_queues_lock = threading.Lock()

def _queue_of(device: str) -> queue.SimpleQueue[_Work]:
  if (q := _queues.get(device)) is None:
    with _queues_lock:
      if (q := _queues.get(device)) is None:
        q = queue.SimpleQueue()
        threading.Thread(target=_worker, args=(q,), name=f"lazytensor queue {device}", daemon=True).start()
        _queues[device] = q
  return q

def queueable(devices: set[str]) -> bool:
  """Whether steps on these devices may run on their workers: more than one device, each safe to launch from there
  (and, in a mesh across ranks, MPI safe to call from several threads: runtime/remote.py)."""
  return len(devices) > 1 and all_queued(devices) and (remote.joined is None or remote.joined.threaded)

def all_queued(devices: set[str]) -> bool:
  """Whether each of these devices runs its steps on a worker (its runtime is safe to launch from another thread)."""
  return all(getattr(Device[d], "queued", False) for d in devices)

class Queues:
  """One schedule's steps submitted in program order to their devices' workers; `finish` waits for all of them and
  raises the first failure (in program order)."""
  def __init__(self) -> None:
    self.last_write: dict[Buffer, _Work] = {}
    self.reads_since: dict[Buffer, list[_Work]] = {}
    self.submitted: list[_Work] = []
    self.last_on: dict[str, _Work] = {}

  def submit(self, device: str, run: Step, bufs: Sequence[Buffer], written: Sequence[Buffer]) -> None:
    for b in bufs: b.ensure_allocated()
    after: dict[int, _Work] = {}
    for b in bufs:
      if (w := self.last_write.get(b)) is not None: after[id(w)] = w
      if b in written:
        for r in self.reads_since.get(b, ()): after[id(r)] = r
    work = _Work(run, [w for w in after.values() if not w.done.is_set() or w.error is not None])
    for b in bufs:
      if b in written: self.last_write[b], self.reads_since[b], b.writer = work, [], work
      else: self.reads_since.setdefault(b, []).append(work)
    self.submitted.append(work)
    self.last_on[device] = work
    _queue_of(device).put(work)

  def latest(self, devices: Sequence[str]) -> Ticket:
    """The last step submitted so far to each of these devices: when they are done, so is every step submitted to the
    devices before them (a worker runs its steps in order)."""
    return [w for d in devices if (w := self.last_on.get(Device.canonicalize(d))) is not None]

  def wait(self, ticket: Ticket) -> None:
    """Wait for the steps of a `latest`; if one failed, wait for all and raise the first failure in program order."""
    for w in ticket: w.done.wait()
    if any(w.error is not None for w in ticket): self.finish()

  def forget_done(self) -> None:
    """Let go of the steps done without failing and of the buffers only they used (a Queues that outlives a schedule:
    what a step that already ran wrote or read needs no waiting for, and its buffers may be freed now, here, on the
    submitting thread). A failure is kept, for the steps that read what it did not write and for `finish`."""
    def live(w: _Work) -> bool: return not w.done.is_set() or w.error is not None
    self.last_write = {b: w for b, w in self.last_write.items() if live(w)}
    self.reads_since = {b: rs for b, ws in self.reads_since.items() if (rs := [w for w in ws if live(w)])}
    self.submitted = [w for w in self.submitted if live(w)]
    self.last_on = {d: w for d, w in self.last_on.items() if live(w)}

  def finish(self) -> None:
    if (error := self.finish_quietly()) is not None: raise error

  def finish_quietly(self) -> BaseException | None:
    """Wait for every step submitted; the first failure, in program order, or None."""
    for work in self.submitted: work.done.wait()
    error = next((w.error for w in self.submitted if w.error is not None), None)
    self.last_write.clear()
    self.reads_since.clear()
    self.submitted.clear()
    self.last_on.clear()
    return error
