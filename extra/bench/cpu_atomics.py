"""Whether a CPU scatter would gain from running its entries on several threads with atomic adds, as a GPU does
(schedule/scatter.py): a 1-d scatter-add (no other axis to split across threads, the case threads could help most) as
LLVM IR compiled by llvmlite, the in-order loop on one thread against `atomicrmw fadd` on THREADS threads, each over
its share of the entries, on the same inputs in the same run, alternating.

Usage: python extra/bench/cpu_atomics.py [--threads T] [--runs N]
Prints the best time of each and the ratio in-order / atomic (above 1: the atomic threads are faster).
Measured on an AMD EPYC (AVX2, 2 vCPUs), 2 threads, 4M entries into 64K / 1M / 16M targets: 0.18x, 0.17x, 0.46x
(a locked add per entry costs more than the second core gives), so the CPU keeps the in-order scatter kernel.
"""
from __future__ import annotations

import argparse
import ctypes
import platform
import threading
import time
from typing import Any

import llvmlite.binding as llvm
import numpy as np

_LOOP = r"""
define void @{name}(ptr %t, ptr %idx, ptr %v, i64 %lo, i64 %hi) {{
entry:
  br label %loop
loop:
  %i = phi i64 [%lo, %entry], [%n, %loop]
  %ip = getelementptr i32, ptr %idx, i64 %i
  %ei = load i32, ptr %ip
  %tp = getelementptr float, ptr %t, i32 %ei
  %vp = getelementptr float, ptr %v, i64 %i
  %x = load float, ptr %vp
{update}
  %n = add i64 %i, 1
  %c = icmp slt i64 %n, %hi
  br i1 %c, label %loop, label %done
done:
  ret void
}}
"""
_IN_ORDER = "  %o = load float, ptr %tp\n  %s = fadd float %o, %x\n  store float %s, ptr %tp"
_ATOMIC = "  %old = atomicrmw fadd ptr %tp, float %x monotonic"

Kernel = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

def compile_loops() -> tuple[llvm.ExecutionEngine, dict[str, Any]]:
  """The in-order and the atomic loop, compiled for this CPU (the engine keeps them alive)."""
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()
  loops = (("in_order", _IN_ORDER), ("atomic", _ATOMIC))
  ir = "".join(_LOOP.format(name=name, update=update) for name, update in loops)
  mod = llvm.parse_assembly(ir)
  mod.verify()
  engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple().create_target_machine(opt=3))
  engine.finalize_object()
  return engine, {name: Kernel(engine.get_function_address(name)) for name in ("in_order", "atomic")}

def cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f: return next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
  except (OSError, StopIteration): return platform.machine()

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=2, help="threads sharing the entries in the atomic run")
  ap.add_argument("--runs", type=int, default=5)
  args = ap.parse_args()
  _engine, fns = compile_loops()
  print(f"{cpu_model()}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}, "
        f"{args.threads} threads for the atomic adds")
  rng = np.random.default_rng(0)
  entries = 1 << 22
  for targets in (1 << 16, 1 << 20, 1 << 24):
    idx, v = rng.integers(0, targets, entries).astype(np.int32), rng.standard_normal(entries).astype(np.float32)
    ptrs = (idx.ctypes.data, v.ctypes.data)
    in_order, atomic = [], []
    for _ in range(args.runs):
      t = np.zeros(targets, np.float32)
      start = time.perf_counter()
      fns["in_order"](t.ctypes.data, *ptrs, 0, entries)
      in_order.append(time.perf_counter() - start)
      t2 = np.zeros(targets, np.float32)
      shares = [threading.Thread(target=fns["atomic"], args=(t2.ctypes.data, *ptrs, k * entries // args.threads,
                                                             (k + 1) * entries // args.threads))
                for k in range(args.threads)]
      start = time.perf_counter()
      for s in shares: s.start()
      for s in shares: s.join()
      atomic.append(time.perf_counter() - start)
      np.testing.assert_allclose(t2, t, rtol=1e-3, atol=1e-3)  # the same sums, in another order
    print(f"{entries} entries into {targets:9d} targets: in order {min(in_order) * 1e3:7.1f} ms, atomic "
          f"{min(atomic) * 1e3:7.1f} ms: in-order / atomic {min(in_order) / min(atomic):.2f}x")

if __name__ == "__main__":
  main()
