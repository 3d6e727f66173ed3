"""What int32 index math saves: each kernel with the heuristics' opts, lowered as usual (int32 where its bounds fit) and
with int64 index math forced, timed on the same buffers in the same run, runs alternating. One thread on the CPU,
which runs the kernel in the calling thread: its thread CPU time is measured, so that other processes on a busy host
do not count.

Usage: python extra/bench/index_dtype.py [--runs N] [--quick]
Prints each kernel's best time both ways and the ratio int64 / int32 (above 1: int32 is faster).
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable

os.environ.setdefault("THREADS", "1")

from lazytensor import Device, Tensor, dtypes  # noqa: E402
from lazytensor.codegen.program import get_program  # noqa: E402
from lazytensor.engine.realize import optimize_kernel  # noqa: E402
from lazytensor.helpers import to_function_name  # noqa: E402
from lazytensor.nn import Conv2d  # noqa: E402
from lazytensor.schedule.scheduler import ScheduleItem  # noqa: E402
from lazytensor.uop.ops import Ops  # noqa: E402


def cases(quick: bool) -> dict[str, Callable[[], Tensor]]:
  n, hw = (256, 28) if quick else (1024, 56)
  conv = Conv2d(64, 64, 3, padding=1)
  x = Tensor.rand(8, 64, hw, hw).realize()
  a, b, c = (Tensor.rand(n, n).realize() for _ in range(3))
  v = Tensor.rand(n * n * 4).realize()
  table = Tensor.rand(n * 16).realize()
  idx = (Tensor.rand(n * 4) * (n * 16)).cast(dtypes.int32).realize()
  return {
    f"conv2d 8x64x{hw}x{hw} 3x3": lambda: conv(x),
    f"matmul {n}": lambda: a @ b,
    f"elementwise {n * n * 4}": lambda: ((v * 2 + 1).relu() * 0.5).exp(),
    f"transpose+add {n}": lambda: a.T + c,
    f"arange {n * n * 4}": lambda: Tensor.arange(n * n * 4) * 3,
    f"gather {n * 4} of {n * 16}": lambda: table[idx],  # a one-hot compare and a reduce over the table
  }

def timer(si: ScheduleItem, index64: bool) -> Callable[[], float]:
  """A function that runs the item's kernel once and returns its thread CPU time."""
  dev = Device[si.bufs[0].device]
  k = optimize_kernel(si.ast, dev)
  spec = get_program(k, to_function_name(k.name), index64=index64)
  prg = dev.load(spec.name, dev.compiler.compile_cached(spec.source))
  for buf in si.bufs: buf.ensure_allocated()
  handles, launch = [buf.handle for buf in si.bufs], spec.launch.kwargs()
  def run() -> float:
    st = time.thread_time()
    prg(*handles, wait=True, **launch)
    return time.thread_time() - st
  return run

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--runs", type=int, default=20)
  ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
  args = ap.parse_args()
  print(f"# {platform.processor() or platform.machine()}, THREADS={os.environ['THREADS']}, best of {args.runs}")
  print(f"{'kernel':32s} {'int32 ms':>10s} {'int64 ms':>10s} {'int64/int32':>12s}  (thread CPU time)")
  for name, build in cases(args.quick).items():
    items = [si for si in build().schedule() if si.ast.op is Ops.SINK]
    for si in items[:-1]: timer(si, False)()  # the inputs of the kernel timed
    fns = [timer(items[-1], False), timer(items[-1], True)]
    best = [min(fn() for _ in range(2)) for fn in fns]  # warm up
    for _ in range(args.runs):
      for i, fn in enumerate(fns): best[i] = min(best[i], fn())
    print(f"{name:32s} {best[0] * 1e3:10.3f} {best[1] * 1e3:10.3f} {best[1] / best[0]:11.2f}x")

if __name__ == "__main__":
  main()
