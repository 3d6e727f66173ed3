"""The threads that run the shares of a kernel's THREAD axis: compiled spin loops, so that a share starts in about a
microsecond instead of the ~100 us it took to wake a Python thread blocked on a queue (on a 2-vCPU VM).

Core id 0 runs on the calling thread; core id k > 0 on a daemon thread pinned to the k-th CPU this process may use
(unpinned, the OS often put the threads of short kernels on one CPU). Each worker thread calls `lt_worker`, an LLVM
function that spins on its control block until the launching thread publishes a job (`lt_post`: the kernel's
address, its arguments, the core id, then a release store of the job's sequence number), runs it, and stores the
sequence number into `done`; the launching thread runs its own share and then spins in `lt_wait` until every worker is
done. Both release the GIL (they are ctypes calls), so shares run truly in parallel. A worker that has had no job for
SPIN_CYCLES goes back to Python and sleeps on an Event until the next post, so idle processes burn no CPU; a share
is claimed (an atomic exchange) by whichever of its worker and the launching thread gets to it first, so a launch
never waits for a sleeping worker to wake up: the launching thread runs that share itself.
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
SEQ, DONE, FN, ARGS, NARGS, CORE, CLAIM = range(7)  # the fields of a control block (int64 each)

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
JOB_FIELDS = (("fn", "ptr", FN), ("args", "ptr", ARGS), ("nargs", "i64", NARGS), ("core", "i64", CORE))

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
  %core32 = trunc i64 %core to i32
  call void @lt_call(ptr %fn, ptr %args, i64 %nargs, i32 %core32)
  store atomic i64 %s, ptr %donep release, align 8
  br label %idle
}}

define void @lt_post(ptr %ctl, ptr %fn, ptr %args, i64 %nargs, i64 %core, i64 %seq) {{
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
    self.post = ctypes.CFUNCTYPE(None, vp, vp, vp, i64, i64, i64)(self.engine.get_function_address("lt_post"))
    self.wait = ctypes.CFUNCTYPE(None, vp, i64)(self.engine.get_function_address("lt_wait"))
    self.claim = ctypes.CFUNCTYPE(i64, vp, i64)(self.engine.get_function_address("lt_claim"))

class _Worker:
  def __init__(self, spinner: _Spinner, cpu: int) -> None:
    self.ctl = np.zeros(16, dtype=np.int64)  # a control block of its own: nothing else shares its cache line's writes
    self.addr = self.ctl.ctypes.data
    self.seq, self.sleeping, self.wake, self.serving = 0, False, threading.Event(), threading.Event()
    threading.Thread(target=self._serve, args=(spinner, cpu), name=f"lazytensor-cpu{cpu}", daemon=True).start()

  def _serve(self, spinner: _Spinner, cpu: int) -> None:
    if hasattr(os, "sched_setaffinity"):
      try: os.sched_setaffinity(0, {cpu})  # 0 is the calling thread
      except OSError: pass  # pinning is only for speed; a container may forbid it
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
  """Runs the shares of one kernel launch: share k of `core_count` as core id k."""
  def __init__(self) -> None:
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    self.cpus = sorted(allowed)
    self.spinner = _Spinner()
    self.workers: dict[int, _Worker] = {}
    self.lock = threading.Lock()  # launches from several Python threads take turns
    self.serving = 1  # core ids below this have a worker that is serving (core id 0 is the launching thread)

  def start(self, core_count: int) -> None:
    """Start (once) the workers of core ids 1..core_count-1 and wait until each is pinned and serving, so that the
    cost of starting threads is not part of the first launch (nor of its DEBUG=2 time)."""
    if core_count <= self.serving: return
    with self.lock:
      for core in range(1, core_count):
        if core not in self.workers: self.workers[core] = _Worker(self.spinner, self.cpus[core % len(self.cpus)])
    for core in range(1, core_count): self.workers[core].serving.wait()
    self.serving = max(self.serving, core_count)

  def run(self, fn: Callable[..., None], fn_addr: int, addrs: list[int], core_count: int) -> None:
    """fn (a ctypes function at fn_addr) with addrs and each core id, all at once; returns when all are done."""
    if len(addrs) > MAX_ARGS:
      for core in range(core_count): fn(*addrs, core)
      return
    self.start(core_count)
    args = (ctypes.c_void_p * max(len(addrs), 1))(*addrs)
    with self.lock:
      posted = []
      for core in range(1, core_count):
        w = self.workers[core]
        w.seq += 1
        self.spinner.post(w.addr, fn_addr, ctypes.addressof(args), len(addrs), core, w.seq)
        if w.sleeping: w.wake.set()
        posted.append(w)
      try: fn(*addrs, 0)
      finally:
        for core, w in enumerate(posted, start=1):
          # a share its worker has not started yet (it was asleep) runs here; else wait until it is done
          if self.spinner.claim(w.addr, w.seq): fn(*addrs, core)
          else: self.spinner.wait(w.addr, w.seq)  # every share finishes before the buffers are touched again

@functools.cache
def workers() -> SpinningWorkers: return SpinningWorkers()

# threads do not survive fork: a forked child (a BEAM worker, say) starts workers of its own instead of posting jobs
# to threads that only exist in its parent
os.register_at_fork(after_in_child=workers.cache_clear)
