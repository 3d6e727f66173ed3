"""Schedules that realize does not wait for (engine/realize.deferred): submitted to the devices' queues one after
another, ordered by the buffers they share; what reads their results on the host, or runs a schedule in order here,
waits for them; their buffers live until their steps are done; a failure is raised when the block ends."""
from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from lazytensor import Context, Tensor
from lazytensor.engine import realize
from lazytensor.runtime.device import Buffer, buffer_map
from lazytensor.uop.ops import Ops


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
  """Every kernel and copy on CPU:1 waits until the event is set (or fails after 10 s)."""
  opened, launch = threading.Event(), realize._launch
  def gated(runner: Any, bufs: tuple[Buffer, ...], vals: tuple[Any, ...]) -> None:
    if bufs[0].device == "CPU:1": assert opened.wait(10), "the gate on CPU:1 was not opened"
    launch(runner, bufs, vals)
  monkeypatch.setattr(realize, "_launch", gated)
  yield opened
  opened.set()

def _open_later(gate: threading.Event) -> threading.Timer:
  """The gate opened in 0.2 s, while the calling thread has gone on to what must wait for the steps behind it."""
  timer = threading.Timer(0.2, gate.set)
  timer.start()
  return timer

def _buffer_of(t: Tensor) -> Buffer:
  ld = t.lazydata
  assert ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER
  return buffer_map[ld.src[0]]

def test_a_realize_returns_before_its_steps_run_and_a_read_waits_for_them(gate: threading.Event) -> None:
  a = Tensor(np.arange(8, dtype=np.float32), device="CPU:1").realize()
  with realize.deferred():
    b = (a * 2 + 1).realize()  # one device, one kernel: queued all the same, and not waited for
    c = (b + a).realize()  # reads b: after it on the queue
    assert not gate.is_set()  # neither has run: both realizes returned while the gate was shut
    _open_later(gate)
    np.testing.assert_array_equal(c.numpy(), np.arange(8) * 3 + 1)  # the host read waits for c's writer

def test_a_schedule_run_in_order_waits_for_what_the_block_queued(gate: threading.Event) -> None:
  a = Tensor(np.arange(8, dtype=np.float32), device="CPU:1").realize()
  with realize.deferred():
    b = (a + 1).realize()
    _open_later(gate)
    with Context(QUEUES=False): c = (b * 3).realize()  # runs here, in order: only after b was written
    assert gate.is_set()
  np.testing.assert_array_equal(c.numpy(), (np.arange(8) + 1) * 3)

def test_a_buffer_lives_until_the_steps_on_it_are_done(gate: threading.Event) -> None:
  a = Tensor(np.arange(8, dtype=np.float32), device="CPU:1").realize()
  with realize.deferred():
    b = (a + 1).realize()
    kept, writer = weakref.ref(buf := _buffer_of(b)), buf.writer
    del b, buf
    gc.collect()
    # the queue holds it: its memory is not handed to a new buffer while the queued step writes it
    assert kept() is not None
    gate.set()
    writer.done.wait()
    (a * 2).realize()  # a later schedule lets go of what is done
    gc.collect()
    assert kept() is None

def test_a_failed_step_is_raised_when_the_block_ends_and_what_read_it_does_not_run(
    monkeypatch: pytest.MonkeyPatch) -> None:
  launch, ran = realize._launch, []
  def failing(runner: Any, bufs: tuple[Buffer, ...], vals: tuple[Any, ...]) -> None:
    if runner is not None and bufs[0].device == "CPU:1" and not ran: raise RuntimeError("kernel failed")
    ran.append(bufs[0].device)
    launch(runner, bufs, vals)
  a = Tensor(np.arange(8, dtype=np.float32), device="CPU:1").realize()
  monkeypatch.setattr(realize, "_launch", failing)
  with pytest.raises(RuntimeError, match="kernel failed"), realize.deferred():
    b = (a + 1).realize()
    (b * 2).to("CPU:2").realize()  # reads what failed: neither its kernel nor its copy runs
  assert ran == []
  np.testing.assert_array_equal((a + 1).numpy(), np.arange(8) + 1)  # the next realize, outside, runs

def test_an_index_out_of_range_is_raised_when_the_block_ends() -> None:
  x = Tensor(np.arange(5, dtype=np.float32), device="CPU:1").realize()
  with pytest.raises(IndexError, match=r"index 7 is out of bounds"), realize.deferred():
    x[Tensor([7, 1], device="CPU:1")].realize()
  np.testing.assert_array_equal(x[Tensor([3, 1], device="CPU:1")].numpy(), [3, 1])  # its flag was cleared
