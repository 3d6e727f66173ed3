"""How fast the EMU device runs GPU-style kernels: a 64x64 matmul with local threads, GROUP and tensor cores.

Usage: python extra/bench/emu.py
"""
from __future__ import annotations

import time

import numpy as np

from lazytensor import Context, Device, Tensor
from lazytensor.engine.realize import compile_kernel, run_schedule
from lazytensor.opt.kernel import Opt, OptOps
from lazytensor.schedule.scheduler import create_schedule


def time_kernel(out: Tensor, opts: list[Opt]) -> tuple[float, float]:
  items, _ = create_schedule([out.lazydata])
  run_schedule(items[:-1])
  runner = compile_kernel(items[-1].ast, Device["EMU"], opts)
  runner(items[-1].bufs)
  best = min(runner(items[-1].bufs, wait=True) or 0.0 for _ in range(3))
  return best, float(np.abs(items[-1].bufs[0].numpy().astype(np.float32)).sum())

def main() -> None:
  rng = np.random.default_rng(0)
  with Context(DEV="EMU"):
    a32, b32 = (Tensor(rng.standard_normal((64, 64), dtype=np.float32)).realize() for _ in range(2))
    a16, b16 = (Tensor(rng.standard_normal((64, 64)).astype(np.float16)).realize() for _ in range(2))
    cases = [
      ("matmul 64 fp32, no opts", a32 @ b32, []),
      ("matmul 64 fp32, LOCAL 16x16", a32 @ b32, [Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16)]),
      ("matmul 64 fp32, LOCAL + GROUP", a32 @ b32, [Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.GROUP, 3, 4)]),
      ("matmul 64 fp16, TC", a16 @ b16, [Opt(OptOps.TC, 0, 0)]),
    ]
    for name, out, opts in cases:
      st = time.perf_counter()
      t, _ = time_kernel(out, opts)
      print(f"{name:36s} run {t * 1e3:8.2f} ms   (compile + first run {time.perf_counter() - st:6.2f} s)")

if __name__ == "__main__":
  main()
