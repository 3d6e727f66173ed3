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
  def __init__(self, run: Step, after: list[_Work]) -> None:
    self.run, self.after, self.done = run, after, threading.Event()
    self.error: BaseException | None = None

def _worker(q: queue.SimpleQueue[_Work]) -> None:
  while True:
    work = q.get()
    for dep in work.after: dep.done.wait()
    failed = next((d.error for d in work.after if d.error is not None), None)
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
  return len(devices) > 1 and all(getattr(Device[d], "queued", False) for d in devices) and \
    (remote.joined is None or remote.joined.threaded)

class Queues:
  """One schedule's steps submitted in program order to their devices' workers; `finish` waits for all of them and
  raises the first failure (in program order)."""
  def __init__(self) -> None:
    self.last_write: dict[Buffer, _Work] = {}
    self.reads_since: dict[Buffer, list[_Work]] = {}
    self.submitted: list[_Work] = []

  def submit(self, device: str, run: Step, bufs: Sequence[Buffer], written: Sequence[Buffer]) -> None:
    for b in bufs: b.ensure_allocated()
    after: dict[int, _Work] = {}
    for b in bufs:
      if (w := self.last_write.get(b)) is not None: after[id(w)] = w
      if b in written:
        for r in self.reads_since.get(b, ()): after[id(r)] = r
    work = _Work(run, [w for w in after.values() if not w.done.is_set() or w.error is not None])
    for b in bufs:
      if b in written: self.last_write[b], self.reads_since[b] = work, []
      else: self.reads_since.setdefault(b, []).append(work)
    self.submitted.append(work)
    _queue_of(device).put(work)

  def finish(self) -> None:
    if (error := self.finish_quietly()) is not None: raise error

  def finish_quietly(self) -> BaseException | None:
    """Wait for every step submitted; the first failure, in program order, or None."""
    for work in self.submitted: work.done.wait()
    error = next((w.error for w in self.submitted if w.error is not None), None)
    self.last_write.clear()
    self.reads_since.clear()
    self.submitted.clear()
    return error
