"""Devices are discovered by name: each is one file runtime/ops_<name>.py that defines the Compiled subclass
<Name>Device."""
from __future__ import annotations

import sys
import types

import pytest

from lazytensor import Context
from lazytensor.helpers import device_names
from lazytensor.runtime.device import Compiled, Device, device_class


def test_the_runtime_files_are_the_devices() -> None:
  assert device_names() == ("CPU", "CUDA", "CUDACPU", "EMU")
  for name in device_names():  # found without opening one (CUDA needs pycuda and a GPU for that)
    cls = device_class(name)
    assert isinstance(cls, type) and issubclass(cls, Compiled)
    assert cls.__module__ == f"lazytensor.runtime.ops_{name.lower()}" and cls.__name__.upper() == f"{name}DEVICE"
  assert type(Device["emu:1"]) is device_class("EMU") and Device["cpu:0"] is Device["CPU"]

def test_an_unknown_device_names_the_known_ones() -> None:
  with pytest.raises(ValueError, match=r"unknown device 'TPU:1'; known: CPU, CUDA, CUDACPU, EMU$"): Device["TPU:1"]
  with pytest.raises(ValueError, match=r"DEV takes a string that names a device \(CPU, CUDA, CUDACPU, EMU; :N"):
    Context(DEV="TPU")

def test_a_runtime_file_without_its_device_class(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setitem(sys.modules, "lazytensor.runtime.ops_fake", types.ModuleType("lazytensor.runtime.ops_fake"))
  with pytest.raises(TypeError, match="device FAKE: lazytensor.runtime.ops_fake defines no Compiled subclass named "
                                      "FakeDevice"):
    device_class("FAKE")
