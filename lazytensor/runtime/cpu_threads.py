"""The threads that run the shares of a kernel's THREAD axis: compiled spin loops, so that a share starts in about a
microsecond instead of the ~100 us it took to wake a Python thread blocked on a queue (on a 2-vCPU VM).

A launch of `shares` core ids runs on up to `threads` threads: the calling thread and daemon workers. The shares are
claimed one at a time from a shared counter (an atomic add), so a thread that starts late (a worker waking from sleep)
or is held up by the OS (a busy machine, a VM's host) does fewer of them while the others do more, instead of every
thread waiting for the slowest one's fixed half. With the workers unpinned too (below), extra/bench/ops.py --threads 2
on a shared 2-vCPU Zen 3 VM, in quiet moments, the speed-up over one thread in the same run went from 1.05x to 1.50x
(matmul 512), 1.68-1.89x to 1.87-1.97x (1024), 1.61-1.85x to 1.92-2.02x (2048), 1.52x to 1.61-1.88x (conv2d).

Each worker thread calls `lt_worker`, an LLVM function that spins on its control block until the launching thread
publishes a job (`lt_post`: the kernel's address, its arguments, the share counter and count, then a release store of
the job's sequence number), claims shares until none is left (`lt_shares`), and stores the sequence number into
`done`; the launching thread claims shares the same way and then spins in `lt_wait` until every worker that joined is
done. Both release the GIL (they are ctypes calls), so shares run truly in parallel. A worker that has had no job for
SPIN_CYCLES goes back to Python and sleeps on an Event until the next post, so idle processes burn no CPU; a worker
joins a job by an atomic exchange on its control block, and the launching thread, done with the shares, makes the same
exchange for each worker that has not joined yet, so a launch never waits for a sleeping worker to wake up.

A worker that sleeps joins late: from the post to it running, GIL included, 44-64 us at best on the shared 2-vCPU Zen 3
VM, but 0.14-0.57 ms in the median and 2.5-4.3 ms at the 75th percentile under a load of 4-5, the OS's delay in giving
it a CPU. Short kernels show it: extra/bench/ops.py --threads 2 times each 2T run right after a 1T run that outlasts
the spin, so each timed 512 matmul (2.9 ms of work in 8 equal shares of 0.34 ms) began with its worker asleep (38 of
40 runs) and scaled 1.38-1.60x, where the same runs right after another 2T launch (the worker spinning) scaled
1.73-1.85x. Smaller shares would not recover it: a worker that joins w late leaves about (work + w) / 2 either way.

Workers are not pinned to CPUs: pinned, a worker shares its CPU with the launching thread whenever the OS put that
one there (another process on the other CPU, say), and a launch then ran no faster than one thread (1024 matmul on a
shared 2-vCPU VM: 0.84-0.99x one thread in 2 of 3 rounds pinned, 1.55-1.85x unpinned); unpinned, the OS moves a
spinning worker off the CPU the launching thread runs on.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable

import llvmlite.binding as llvm
import numpy as np

MAX_ARGS = 64             # buffers a kernel may take here; more run their shares one after another on the caller
SPIN_CYCLES = 3_000_000   # about a millisecond of timestamp-counter ticks without a job before a worker sleeps
SEQ, DONE, FN, ARGS, NARGS, NEXT, SHARES, CLAIM = range(8)  # the fields of a control block (int64 each)

def _call_switch() -> str:
  """lt_call(fn, args, nargs, core): fn(args[0], ..., args[nargs-1], core), for any nargs up to MAX_ARGS."""
  cases = " ".join(f"i64 {n}, label %c{n}" for n in range(MAX_ARGS + 1))
  blocks = []
  for n in range(MAX_ARGS + 1):
    loads = [f"  %p{n}_{i} = getelementptr ptr, ptr %args, i64 {i}\n  %a{n}_{i} = load ptr, ptr %p{n}_{i}"
             for i in range(n)]
    params = "".join(f"ptr %a{n}_{i}, " for i in range(n))
    blocks.append(f"c{n}:\n" + "\n".join(loads) + ("\n" if loads else "") +
                  f"  call void %fn({params}i32 %core)\n  ret void")
  return (f"define void @lt_call(ptr %fn, ptr %args, i64 %nargs, i32 %core) {{\nentry:\n"
          f"  switch i64 %nargs, label %none [ {cases} ]\nnone:\n  ret void\n" + "\n".join(blocks) + "\n}\n")

# the fields that describe a job: lt_post stores them, lt_worker loads them
JOB_FIELDS = (("fn", "ptr", FN), ("args", "ptr", ARGS), ("nargs", "i64", NARGS), ("next", "ptr", NEXT),
              ("shares", "i64", SHARES))

def _field(name: str, index: int) -> str: return f"  %{name}p = getelementptr i64, ptr %ctl, i64 {index}"

def _module(pause: str) -> str:
  relax = f"call void @{pause}()" if pause else ""
  load_job = "\n".join(f"{_field(n, i)}\n  %{n} = load {t}, ptr %{n}p, align 8" for n, t, i in JOB_FIELDS)
  store_job = "\n".join(f"{_field(n, i)}\n  store {t} %{n}, ptr %{n}p, align 8" for n, t, i in JOB_FIELDS)
  return _call_switch() + f"""
declare i64 @llvm.readcyclecounter()
{f"declare void @{pause}()" if pause else ""}

define i64 @lt_claim(ptr %ctl, i64 %seq) {{
entry:
{_field("claim", CLAIM)}
  %was = atomicrmw xchg ptr %claimp, i64 %seq acq_rel
  %mine = icmp ne i64 %was, %seq
  %r = zext i1 %mine to i64
  ret i64 %r
}}

define void @lt_shares(ptr %fn, ptr %args, i64 %nargs, ptr %next, i64 %shares) {{
entry:
  br label %claim
claim:
  %share = atomicrmw add ptr %next, i64 1 monotonic
  %left = icmp slt i64 %share, %shares
  br i1 %left, label %run, label %out
run:
  %core = trunc i64 %share to i32
  call void @lt_call(ptr %fn, ptr %args, i64 %nargs, i32 %core)
  br label %claim
out:
  ret void
}}

define i64 @lt_worker(ptr %ctl, i64 %last, i64 %spin) {{
entry:
{_field("seq", SEQ)}
{_field("done", DONE)}
  br label %idle
idle:
  %cur = phi i64 [ %last, %entry ], [ %s, %run ], [ %s, %call ]
  %t0 = call i64 @llvm.readcyclecounter()
  br label %poll
poll:
  %s = load atomic i64, ptr %seqp acquire, align 8
  %new = icmp ne i64 %s, %cur
  br i1 %new, label %run, label %wait
wait:
  {relax}
  %t = call i64 @llvm.readcyclecounter()
  %elapsed = sub i64 %t, %t0
  %more = icmp ult i64 %elapsed, %spin
  br i1 %more, label %poll, label %out
out:
  ret i64 %cur
run:
  %claimed = call i64 @lt_claim(ptr %ctl, i64 %s)
  %mine = icmp ne i64 %claimed, 0
  br i1 %mine, label %call, label %idle
call:
{load_job}
  call void @lt_shares(ptr %fn, ptr %args, i64 %nargs, ptr %next, i64 %shares)
  store atomic i64 %s, ptr %donep release, align 8
  br label %idle
}}

define void @lt_post(ptr %ctl, ptr %fn, ptr %args, i64 %nargs, ptr %next, i64 %shares, i64 %seq) {{
entry:
{store_job}
{_field("seq", SEQ)}
  store atomic i64 %seq, ptr %seqp release, align 8
  ret void
}}

define void @lt_wait(ptr %ctl, i64 %seq) {{
entry:
{_field("done", DONE)}
  br label %poll
poll:
  %d = load atomic i64, ptr %donep acquire, align 8
  %ok = icmp eq i64 %d, %seq
  br i1 %ok, label %out, label %wait
wait:
  {relax}
  br label %poll
out:
  ret void
}}
"""

class _Spinner:
  """The compiled loops, in an MCJIT engine of their own that lives as long as the process."""
  def __init__(self) -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    triple = llvm.get_process_triple()
    pause = "llvm.x86.sse2.pause" if triple.startswith(("x86_64", "i686", "i386")) else ""
    mod = llvm.parse_assembly(_module(pause))
    mod.triple = triple
    mod.verify()
    tm = llvm.Target.from_triple(triple).create_target_machine(opt=2, jit=True)
    self.engine = llvm.create_mcjit_compiler(mod, tm)
    self.engine.finalize_object()
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    self.worker = ctypes.CFUNCTYPE(i64, vp, i64, i64)(self.engine.get_function_address("lt_worker"))
    self.post = ctypes.CFUNCTYPE(None, vp, vp, vp, i64, vp, i64, i64)(self.engine.get_function_address("lt_post"))
    self.shares = ctypes.CFUNCTYPE(None, vp, vp, i64, vp, i64)(self.engine.get_function_address("lt_shares"))
    self.wait = ctypes.CFUNCTYPE(None, vp, i64)(self.engine.get_function_address("lt_wait"))
    self.claim = ctypes.CFUNCTYPE(i64, vp, i64)(self.engine.get_function_address("lt_claim"))

class _Worker:
  def __init__(self, spinner: _Spinner, index: int) -> None:
    self.ctl = np.zeros(16, dtype=np.int64)  # a control block of its own: nothing else shares its cache line's writes
    self.addr = self.ctl.ctypes.data
    self.seq, self.sleeping, self.wake, self.serving = 0, False, threading.Event(), threading.Event()
    threading.Thread(target=self._serve, args=(spinner,), name=f"lazytensor-cpu{index}", daemon=True).start()

  def _serve(self, spinner: _Spinner) -> None:
    self.serving.set()
    last = 0
    while True:
      last = spinner.worker(self.addr, last, SPIN_CYCLES)
      # idle: sleep until a post. Under the GIL, so either the poster sees `sleeping` and sets the event, or this
      # thread sees the new sequence number and does not wait
      self.sleeping = True
      if int(self.ctl[SEQ]) == last: self.wake.wait()
      self.wake.clear()
      self.sleeping = False

class SpinningWorkers:
  """Runs the shares of one kernel launch: core ids 0..shares-1, on the calling thread and up to threads-1 workers."""
  def __init__(self) -> None:
    self.spinner = _Spinner()
    self.workers: list[_Worker] = []
    self.lock = threading.Lock()  # launches from several Python threads take turns
    # the share counter of the launch under way, on a cache line of its own
    self.counter = np.zeros(16, dtype=np.int64)
    self.counter_addr = self.counter.ctypes.data

  def start(self, threads: int) -> None:
    """Start (once) the workers a launch on `threads` threads needs and wait until each is serving, so that the cost
    of starting threads is not part of the first launch (nor of its DEBUG=2 time)."""
    if threads - 1 <= len(self.workers): return
    with self.lock:
      while len(self.workers) < threads - 1: self.workers.append(_Worker(self.spinner, len(self.workers) + 1))
    for w in self.workers: w.serving.wait()

  def run(self, fn: Callable[..., None], fn_addr: int, addrs: list[int], shares: int, threads: int) -> None:
    """fn (a ctypes function at fn_addr) with addrs and each core id 0..shares-1, each exactly once, on up to
    `threads` threads at once; returns when all are done."""
    threads = min(threads, shares)
    if len(addrs) > MAX_ARGS or threads < 2:
      for core in range(shares): fn(*addrs, core)
      return
    self.start(threads)
    args = (ctypes.c_void_p * max(len(addrs), 1))(*addrs)
    with self.lock:
      self.counter[0] = 0  # published to the workers by the release store of each post
      posted = self.workers[:threads - 1]
      for w in posted:
        w.seq += 1
        self.spinner.post(w.addr, fn_addr, ctypes.addressof(args), len(addrs), self.counter_addr, shares, w.seq)
        if w.sleeping: w.wake.set()
      try: self.spinner.shares(fn_addr, ctypes.addressof(args), len(addrs), self.counter_addr, shares)
      finally:
        for w in posted:
          # a worker that has not joined yet (asleep, or not scheduled) is kept out: every share is claimed; one that
          # joined may still run its last share, and every share finishes before the buffers are touched again
          if not self.spinner.claim(w.addr, w.seq): self.spinner.wait(w.addr, w.seq)

@functools.cache
def workers() -> SpinningWorkers: return SpinningWorkers()

# threads do not survive fork: a forked child (a BEAM worker, say) starts workers of its own instead of posting jobs
# to threads that only exist in its parent
os.register_at_fork(after_in_child=workers.cache_clear)
