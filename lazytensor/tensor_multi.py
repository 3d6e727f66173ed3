"""The sharding API of Tensor: shard, shard_, and what a tensor spread over several devices tells about itself.

A sharded tensor is one value: every op on it means what it means on one device, and the multi pass
(engine/multi.py) works out what each device computes and where data must move.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from lazytensor.device import Device
from lazytensor.graph import Bounds, shard_uop
from lazytensor.tensor_stub import TensorStub
from lazytensor.uop.ops import Ops

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

def open_devices(devices: Sequence[str] | str, what: str) -> tuple[str, ...]:
  """A tuple of devices in canonical form, each opened now so that one that is not there fails here, clearly."""
  if isinstance(devices, str) or not isinstance(devices, (tuple, list)):
    raise TypeError(f"{what}: expected a tuple or list of device names such as ('CPU:0', 'CPU:1'), got {devices!r}")
  names = Device.canonicalize_any(tuple(devices))
  assert isinstance(names, tuple)
  for d in names:
    try: Device[d]
    except Exception as e: raise ValueError(f"{what}: device {d!r} is not available here: {e}") from e
  return names

class MultiMixin(TensorStub):
  __slots__ = ()

  def shard(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
    """This tensor spread over `devices`: device i holds the i-th slice of `axis` (slices of ceil(n/len(devices)),
    the last ones smaller: 15 rows over 4 devices are 4, 4, 4, 3), or all of it when axis is None (replicated). Ops on
    the result run on every device, with data moved between them where slices must meet; `.device` is the tuple.

    >>> x = Tensor.arange(15).reshape(15, 1).shard(("CPU:0", "CPU:1", "CPU:2", "CPU:3"), axis=0)
    >>> x.device, x.bounds, (x * 2).sum().item()
    (('CPU', 'CPU:1', 'CPU:2', 'CPU:3'), ((0, 4), (4, 8), (8, 12), (12, 15)), 210)
    """
    names = open_devices(devices, "shard")
    if axis is not None:
      if not isinstance(axis, int): raise TypeError(f"shard: axis must be an int or None, got {axis!r}")
      if not -self.ndim <= axis < self.ndim:
        raise IndexError(f"shard: axis {axis} does not exist for a tensor of shape {self.shape}")
      axis %= self.ndim
    if isinstance(self.device, tuple) and set(self.device) != set(names):
      raise ValueError(f"shard: the tensor is on the devices {self.device}, not {names}; gather it first with "
                       ".to(device)")
    return self._apply_uop(lambda x: shard_uop(x, names, axis))

  def shard_(self, devices: Sequence[str], axis: int | None = None) -> Tensor:
    """shard() in place: the tensor's values move to `devices` now (realized there); returns self.

    >>> w = Tensor.ones(4, 2).shard_(("CPU:0", "CPU:1"), axis=0)
    >>> w.device, w.shard_axis
    (('CPU', 'CPU:1'), 0)
    """
    sharded = self.shard(devices, axis).realize()
    me = cast("Tensor", self)
    me.lazydata = sharded.lazydata
    return me

  @property
  def shard_axis(self) -> int | None:
    """The axis a tensor is sharded on: None when it is replicated or on one device. Unrealized results of ops are
    realized first, since the multi pass decides their layout.

    >>> Tensor.ones(4, 2).shard(("CPU:0", "CPU:1"), axis=1).shard_axis
    1
    """
    return self._layout()[0]

  @property
  def bounds(self) -> Bounds | None:
    """The [lo, hi) slice of shard_axis that each device holds (None unless sharded).

    >>> Tensor.ones(5).shard(("CPU:0", "CPU:1"), axis=0).bounds
    ((0, 3), (3, 5))
    """
    return self._layout()[1]

  def _layout(self) -> tuple[int | None, Bounds | None]:
    if not isinstance(self.device, tuple): return None, None
    ld = self.lazydata if self.lazydata.op is Ops.MULTI else self.realize().lazydata
    return ld.arg
