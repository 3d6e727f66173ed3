"""The CPU's THREAD shares: spinning workers, the launching thread claiming shares of sleeping ones, and the fallback
for kernels with more buffers than the compiled trampoline takes."""
import time

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor
from lazytensor.codegen.kernel import Opt, OptOps
from lazytensor.engine.realize import compile_kernel
from lazytensor.runtime import cpu_threads


def _threaded(n: int, cores: int):
  a = Tensor(np.arange(n, dtype=np.float32)).realize()
  item = (a * 2 + 1).schedule()[-1]
  for b in item.bufs: b.ensure_allocated()
  with Context(THREADS=cores): runner = compile_kernel(item.ast, Device["CPU"], [Opt(OptOps.THREAD, 0, cores)])
  return runner, item.bufs, np.arange(n, dtype=np.float32) * 2 + 1

@pytest.mark.parametrize("spin", [cpu_threads.SPIN_CYCLES, 0])
def test_shares_all_run_whether_workers_spin_or_sleep(monkeypatch, spin: int) -> None:
  # spin 0: a worker sleeps right after each share, so the launching thread claims the next ones itself
  monkeypatch.setattr(cpu_threads, "SPIN_CYCLES", spin)
  runner, bufs, want = _threaded(4096, 4)
  for i in range(20):
    bufs[0].copyin(memoryview(bytes(bufs[0].nbytes)))
    runner(bufs, wait=True)
    np.testing.assert_array_equal(bufs[0].numpy(), want)
    if i % 5 == 4: time.sleep(0.003)  # long enough for spinning workers to go to sleep

def test_a_kernel_with_more_buffers_than_the_trampoline_runs_its_shares_in_turn() -> None:
  seen: list[tuple[int, int]] = []
  cpu_threads.workers().run(lambda *args: seen.append((len(args), args[-1])), 0, [0] * (cpu_threads.MAX_ARGS + 1), 3)
  assert seen == [(cpu_threads.MAX_ARGS + 2, core) for core in range(3)]
