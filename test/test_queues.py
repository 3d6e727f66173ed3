"""Devices that work at once (engine/queues.py): each CPU device's steps on a worker thread, ordered by the buffers
they share, with results bit-identical to running them in order."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from lazytensor import Context, Tensor, dtypes, nn
from lazytensor.engine import realize
from lazytensor.engine.queues import Queues, queueable
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.runtime.device import Buffer, Device

DEVICES = ("CPU:0", "CPU:1")

def _buf(device: str) -> Buffer: return Buffer(device, 4, dtypes.float32)

def test_steps_wait_for_what_they_read_and_independent_steps_overlap() -> None:
  q, order = Queues(), []
  a, b, c = _buf("CPU:0"), _buf("CPU:1"), _buf("CPU:1")
  other_ran = threading.Event()
  def slow_write() -> None:  # waits until a step on the other device has run: only possible if both run at once
    assert other_ran.wait(10), "the independent step on CPU:1 did not run while CPU:0 was busy"
    order.append("write a")
  def independent() -> None:
    order.append("c")
    other_ran.set()
  q.submit("CPU:0", slow_write, (a,), (a,))
  q.submit("CPU:1", independent, (c,), (c,))
  q.submit("CPU:1", lambda: order.append("copy a -> b"), (b, a), (b,))  # reads a: after its write
  q.submit("CPU:0", lambda: order.append("overwrite a"), (a,), (a,))  # writes a: after the copy read it
  q.finish()
  assert order == ["c", "write a", "copy a -> b", "overwrite a"]

def test_a_failed_step_is_raised_and_what_read_its_output_does_not_run() -> None:
  q, ran = Queues(), []
  a, b = _buf("CPU:0"), _buf("CPU:1")
  def fail() -> None: raise RuntimeError("kernel failed")
  q.submit("CPU:0", fail, (a,), (a,))
  q.submitted[0].done.wait()  # failed before its reader is queued: the reader must still see it
  q.submit("CPU:1", lambda: ran.append("reader"), (b, a), (b,))
  q.submit("CPU:1", lambda: ran.append("independent"), (b,), (b,))
  with pytest.raises(RuntimeError, match="kernel failed"): q.finish()
  assert ran == []  # the reader, and the step that overwrites what the reader wrote, do not run
  q2 = Queues()
  q2.submit("CPU:1", lambda: ran.append("next schedule"), (b,), (b,))
  q2.finish()
  assert ran == ["next schedule"]

def test_only_several_queued_devices_queue() -> None:
  assert queueable({"CPU:0", "CPU:1"}) and not queueable({"CPU:0"}) and not queueable({"CPU:0", "EMU"})

class _MLP:
  def __init__(self) -> None: self.layers = [nn.Linear(16, 32), nn.Linear(32, 4)]
  def __call__(self, x: Tensor) -> Tensor: return self.layers[1](self.layers[0](x).relu())

def _train(queues: bool, devices: tuple[str, ...]) -> list[np.ndarray]:
  Tensor.manual_seed(0)
  model = _MLP()
  for p in get_parameters(model): p.shard_(devices)
  opt = SGD(get_parameters(model), lr=0.1, momentum=0.9)
  rng = np.random.default_rng(0)
  with Context(QUEUES=queues), Tensor.train():
    for _ in range(3):
      x = Tensor(rng.standard_normal((8, 16), dtype=np.float32)).shard(devices, 0)
      y = Tensor(rng.integers(0, 4, 8)).shard(devices, 0)
      opt.zero_grad()
      model(x).cross_entropy(y).backward()
      opt.step()
  return [p.numpy() for p in get_parameters(model)]

@pytest.mark.parametrize("devices", [DEVICES, ("CPU:0", "CPU:1", "CPU:2", "CPU:3")], ids=["2", "4"])
def test_data_parallel_training_is_bit_identical_to_serial(devices: tuple[str, ...],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
  threads: dict[str, set[str]] = {}
  launch = realize._launch
  def recording(runner: Any, bufs: tuple[Buffer, ...], vals: tuple[Any, ...]) -> None:
    threads.setdefault(bufs[0].device, set()).add(threading.current_thread().name)
    launch(runner, bufs, vals)
  monkeypatch.setattr(realize, "_launch", recording)
  queued = _train(True, devices)
  canonical = {Device.canonicalize(d) for d in devices}
  assert threads == {d: {f"lazytensor queue {d}"} for d in canonical}
  for got, want in zip(queued, _train(False, devices)): np.testing.assert_array_equal(got, want)
