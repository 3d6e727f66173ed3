"""The CPU's THREAD shares: claimed one at a time by spinning workers and the launching thread (each exactly once,
more shares than threads or not, workers awake or asleep), and the fallback for kernels with more buffers than the
compiled trampoline takes."""
import time

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor
from lazytensor.engine.realize import compile_kernel
from lazytensor.opt.kernel import Opt, OptOps
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

@pytest.mark.parametrize("shares, size", [(2, 2 * 5), (3, 3 * 1000), (7, 7 * 13), (16, 16 * 64)])
@pytest.mark.parametrize("spin", [cpu_threads.SPIN_CYCLES, 0])
def test_every_share_runs_exactly_once(monkeypatch, shares: int, size: int, spin: int) -> None:
  # a += 1 in place: a share run twice adds 2 to its rows, one left out adds 0; more shares than the 2 threads, and
  # share counts that 2 does not divide
  monkeypatch.setattr(cpu_threads, "SPIN_CYCLES", spin)
  a = Tensor(np.zeros(size, dtype=np.float32)).realize()
  item = a.assign(a + 1).schedule()[-1]
  with Context(THREADS=2): runner = compile_kernel(item.ast, Device["CPU"], [Opt(OptOps.THREAD, 0, shares)])
  assert runner.launch["core_count"] == shares
  for i in range(1, 13):
    with Context(THREADS=2): runner(item.bufs, wait=True)
    np.testing.assert_array_equal(item.bufs[0].numpy(), np.full(size, i, dtype=np.float32))
    if i % 4 == 3: time.sleep(0.003)  # long enough for spinning workers to go to sleep

def test_a_kernel_with_more_buffers_than_the_trampoline_runs_its_shares_in_turn() -> None:
  seen: list[tuple[int, int]] = []
  cpu_threads.workers().run(lambda *args: seen.append((len(args), args[-1])), 0, [0] * (cpu_threads.MAX_ARGS + 1), 3,
                            2)
  assert seen == [(cpu_threads.MAX_ARGS + 2, core) for core in range(3)]
