"""The sharding API of Tensor: shard, shard_, and what a tensor spread over several devices tells about itself.

A sharded tensor is one value: every op on it means what it means on one device, and the multi pass
(schedule/multi.py) works out what each device computes and where data must move.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np

from lazytensor.dtype import from_storage
from lazytensor.frontend.mixin.nn import NNMixin
from lazytensor.helpers import prod
from lazytensor.runtime import remote
from lazytensor.runtime.device import Device, buffer_map
from lazytensor.uop.graph import Bounds, mesh_uop, multi_leaves
from lazytensor.uop.ops import DeviceLike, Ops, UOp

if TYPE_CHECKING:
  from typing import Self

# per tensor dimension: the mesh axis it is sliced along, a tuple of mesh axes (sliced along the first, each slice
# sliced again along the next: ("dp", "tp") is dp-major), or None
SpecEntry = str | tuple[str, ...] | None
Spec = Sequence[SpecEntry]

def open_devices(devices: Sequence[DeviceLike] | str, what: str) -> tuple[DeviceLike, ...]:
  """A tuple of devices (nested for a mesh) in canonical form, each opened now so that one that is not there fails
  here, clearly."""
  if isinstance(devices, str) or not isinstance(devices, (tuple, list)):
    raise TypeError(f"{what}: expected a tuple or list of device names such as ('CPU:0', 'CPU:1'), got {devices!r}")
  names = Device.canonicalize_any(tuple(devices))
  assert isinstance(names, tuple)
  for d in Device.flat(names):
    try: Device[d]
    except Exception as e: raise ValueError(f"{what}: device {d!r} is not available here: {e}") from e
    if remote.joined is not None: remote.owner(d)  # across ranks, a device that no rank holds fails here
  return names

class DeviceMesh:
  """Devices on a grid with named axes (JAX's Mesh): DeviceMesh(devices, shape=(2, 2), names=("dp", "tp")) puts
  devices[0], devices[1] in the first row and devices[2], devices[3] in the second. A tensor is laid out on it by
  `Tensor.shard(mesh, spec)`, spec naming per tensor dimension the mesh axis it is sliced along (or None): each mesh
  axis not named replicates the tensor along it, and a reduce over a dimension sliced along one mesh axis sums
  within the lines of devices along that axis only (an all-reduce over "tp" runs in each "tp" group).

  >>> mesh = DeviceMesh(("CPU:0", "CPU:1", "CPU:2", "CPU:3"), shape=(2, 2), names=("dp", "tp"))
  >>> mesh.devices, mesh.axis_size("tp")
  ((('CPU', 'CPU:1'), ('CPU:2', 'CPU:3')), 2)
  """
  def __init__(self, devices: Sequence[str], shape: Sequence[int] | None = None,
               names: Sequence[str] | None = None) -> None:
    flat = open_devices(devices, "DeviceMesh")
    if any(not isinstance(d, str) for d in flat):
      raise TypeError(f"DeviceMesh: expected a flat tuple of device names, got {devices!r}; shape= makes the grid")
    self.shape = tuple(shape) if shape is not None else (len(flat),)
    if any(not isinstance(n, int) or n < 1 for n in self.shape):
      raise ValueError(f"DeviceMesh: shape {self.shape} must be positive integers")
    if prod(self.shape) != len(flat):
      raise ValueError(f"DeviceMesh: a mesh of shape {self.shape} holds {prod(self.shape)} devices, but {len(flat)} "
                       f"were given: {flat}")
    self.names = tuple(names) if names is not None else tuple(f"axis{i}" for i in range(len(self.shape)))
    if len(self.names) != len(self.shape) or any(not isinstance(n, str) for n in self.names) or \
       len(set(self.names)) != len(self.names):
      raise ValueError(f"DeviceMesh: names {self.names} must be {len(self.shape)} distinct strings, one per axis of "
                       f"the shape {self.shape}")
    self.devices: DeviceLike = _grid(flat, self.shape)

  def __repr__(self) -> str: return f"DeviceMesh({self.devices}, names={self.names})"

  def axis_size(self, name: str) -> int:
    """How many devices lie along the mesh axis `name`.

    >>> DeviceMesh(("CPU:0", "CPU:1"), names=("dp",)).axis_size("dp")
    2
    """
    return self.shape[self._axis(name, "axis_size")]

  def _axis(self, name: str, what: str) -> int:
    if name not in self.names:
      raise ValueError(f"{what}: {name!r} is not an axis of the mesh; its axes are {self.names}")
    return self.names.index(name)

  def dims_of(self, spec: Spec | None, ndim: int) -> tuple[int | None, ...]:
    """The tensor dimension sliced along each mesh axis (None: replicated along it), from a spec of one entry per
    tensor dimension (a mesh axis name, a tuple of them in the mesh's order, or None; spec None replicates on the whole
    mesh)."""
    if spec is None: return (None,) * len(self.shape)
    if isinstance(spec, str) or not isinstance(spec, (tuple, list)):
      raise TypeError(f"shard: on a mesh, expected a spec of one mesh axis name (or None) per tensor dimension, such "
                      f"as ('dp', None), got {spec!r}")
    if len(spec) != ndim:
      raise ValueError(f"shard: the spec {tuple(spec)} has {len(spec)} entries for a tensor of {ndim} dimensions")
    dims: list[int | None] = [None] * len(self.shape)
    for dim, entry in enumerate(spec):
      for k in self.entry_axes(entry, f"shard: spec entry {entry!r} for dimension {dim}"):
        if dims[k] is not None:
          raise ValueError(f"shard: the spec {tuple(spec)} slices two dimensions along {self.names[k]!r}")
        dims[k] = dim
    return tuple(dims)

  def entry_axes(self, entry: object, what: str) -> tuple[int, ...]:
    """The mesh axes (their positions) that one spec entry names: none for None, one for a name, several for a tuple
    of names, which must follow the mesh's order (a slice of a slice: the first is the major one)."""
    if entry is None: return ()
    names = (entry,) if isinstance(entry, str) else entry
    if not isinstance(names, tuple) or not names or not all(isinstance(n, str) for n in names):
      raise TypeError(f"{what}: expected a mesh axis name, a tuple of them or None")
    axes = tuple(self._axis(n, what) for n in names)
    if list(axes) != sorted(set(axes)):
      raise ValueError(f"{what}: the mesh axes of one dimension must be distinct and in the mesh's order "
                       f"{self.names}, as {tuple(n for n in self.names if n in names)}")
    return axes

  def spec(self, t: MultiMixin) -> tuple[SpecEntry, ...]:
    """The spec a tensor laid out on this mesh has now: per dimension, the mesh axis it is sliced along (a tuple of
    them where several slice it), or None.

    >>> mesh = DeviceMesh(("CPU:0", "CPU:1", "CPU:2", "CPU:3"), shape=(2, 2), names=("dp", "tp"))
    >>> mesh.spec(Tensor.ones(4, 6).shard(mesh, ("dp", None)) @ Tensor.ones(6, 8).shard(mesh, (None, "tp")))
    ('dp', 'tp')
    """
    if t.device != self.devices:
      raise ValueError(f"spec: the tensor is on {t.device}, not on this mesh {self.devices}")
    out: list[tuple[str, ...]] = [() for _ in range(t.ndim)]
    level = t.lazydata if t.lazydata.op is Ops.MULTI else t.realize().lazydata
    for name in self.names:
      if level.op is not Ops.MULTI: break  # replicated along this axis and the ones after it
      if (dim := level.arg[0]) is not None: out[dim] += (name,)
      level = _first_live_piece(level)
    return tuple(names[0] if len(names) == 1 else (names or None) for names in out)

def _grid(flat: tuple[DeviceLike, ...], shape: tuple[int, ...]) -> DeviceLike:
  """Devices in row-major order nested into a tuple per mesh axis: the first axis outermost."""
  if len(shape) == 1: return flat
  step = len(flat) // shape[0]
  return tuple(_grid(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0]))

def _first_live_piece(m: UOp) -> UOp:
  # an empty slice is a constant replicated on its devices: the layout is read from a piece that holds something
  axis, bounds = m.arg
  return next((p for p, (lo, hi) in zip(m.src, bounds) if hi > lo), m.src[0]) if axis is not None else m.src[0]

def local_replica(t: MultiMixin) -> np.ndarray | None:
  """In a mesh across ranks (runtime/remote.py), the values of a tensor replicated on devices of every rank, read from
  a replica on this rank's device without a message; None otherwise (it is gathered, and the read is collective).
  Every rank decides alike: the layout is the same on all of them."""
  if remote.joined is None: return None
  ld = t.realize().lazydata
  if not all(_dense(leaf) for leaf in multi_leaves(ld)): ld = t.contiguous().realize().lazydata
  buffers = [buffer_map[leaf.src[0]] for leaf in multi_leaves(ld)]
  if not _replicated(ld) or {remote.owner(b.device) for b in buffers} != set(range(remote.joined.size)): return None
  mine = next(b for b in buffers if remote.owns(b.device))
  return from_storage(mine.numpy()[:t.numel()].reshape(t.shape), t.dtype)

def _dense(u: UOp) -> bool: return u.op is Ops.VIEW and u.src[0].op is Ops.BUFFER and u.arg.contiguous
def _replicated(u: UOp) -> bool: return u.op is not Ops.MULTI or (u.arg[0] is None and all(map(_replicated, u.src)))

class MultiMixin(NNMixin):
  """Tensor's sharding methods, the top of the chain of mixins (they need only the primitives and movement)."""
  __slots__ = ()

  def shard(self, devices: Sequence[str] | DeviceMesh, axis: int | Spec | None = None) -> Self:
    """This tensor spread over `devices`: device i holds the i-th slice of `axis` (slices of ceil(n/len(devices)),
    the last ones smaller: 15 rows over 4 devices are 4, 4, 4, 3), or all of it when axis is None (replicated). Ops on
    the result run on every device, with data moved between them where slices must meet; `.device` is the tuple.
    On a DeviceMesh, `axis` is a spec: per dimension, the mesh axis it is sliced along, a tuple of mesh axes in the
    mesh's order (("dp", "tp"): sliced along dp, each slice sliced again along tp), or None.

    >>> x = Tensor.arange(15).reshape(15, 1).shard(("CPU:0", "CPU:1", "CPU:2", "CPU:3"), axis=0)
    >>> x.device, x.bounds, (x * 2).sum().item()
    (('CPU', 'CPU:1', 'CPU:2', 'CPU:3'), ((0, 4), (4, 8), (8, 12), (12, 15)), 210)
    >>> mesh = DeviceMesh(("CPU:0", "CPU:1", "CPU:2", "CPU:3"), shape=(2, 2), names=("dp", "tp"))
    >>> Tensor.ones(4, 6).shard(mesh, ("dp", "tp")).device
    (('CPU', 'CPU:1'), ('CPU:2', 'CPU:3'))
    >>> mesh.spec(Tensor.ones(8, 6).shard(mesh, (("dp", "tp"), None)))
    (('dp', 'tp'), None)
    """
    if isinstance(devices, DeviceMesh):
      names, dims = devices.devices, devices.dims_of(cast("Spec | None", axis), self.ndim)
    else:
      names, dims = open_devices(devices, "shard"), (self._shard_dim(axis),)
      if any(not isinstance(d, str) for d in names):
        raise TypeError(f"shard: expected a flat tuple of device names, got {devices!r}; use a DeviceMesh for a grid")
    if isinstance(self.device, tuple) and set(Device.flat(self.device)) != set(Device.flat(names)):
      raise ValueError(f"shard: the tensor is on the devices {self.device}, not {names}; gather it first with "
                       ".to(device)")
    return self._apply_uop(lambda x: mesh_uop(x, names, dims))

  def _shard_dim(self, axis: object) -> int | None:
    if axis is None: return None
    if isinstance(axis, bool) or not isinstance(axis, int):
      raise TypeError(f"shard: axis must be an int or None, got {axis!r}")
    if not -self.ndim <= axis < self.ndim:
      raise IndexError(f"shard: axis {axis} does not exist for a tensor of shape {self.shape}")
    return axis % self.ndim

  def shard_(self, devices: Sequence[str] | DeviceMesh, axis: int | Spec | None = None) -> Self:
    """shard() in place: the tensor's values move to `devices` now (realized there); returns self.

    >>> w = Tensor.ones(4, 2).shard_(("CPU:0", "CPU:1"), axis=0)
    >>> w.device, w.shard_axis
    (('CPU', 'CPU:1'), 0)
    """
    me = self
    # constants are interned: two zeros(3) sharded would realize into one memory, and a tensor in place is its own
    if self.lazydata.op is Ops.VIEW and self.lazydata.src[0].op is Ops.CONST:
      me.lazydata = type(self)(np.full(self.shape, self.lazydata.src[0].arg), self.device, self.dtype).lazydata
    sharded = self.shard(devices, axis)
    # a tensor on several devices sliced anew is sliced where its pieces lie: views, which would keep each whole piece
    # alive (an FSDP weight sharded from its replicated copy took all of it on every device); copies of their own
    if isinstance(self.device, tuple): sharded = sharded.contiguous()
    sharded = sharded.realize()
    me.lazydata = sharded.lazydata
    return me

  @property
  def shard_axis(self) -> int | None:
    """The axis a tensor is sharded on: None when it is replicated or on one device (on a mesh: the axis sliced along
    its first mesh axis; DeviceMesh.spec tells them all). Unrealized results of ops are realized first, since the
    multi pass decides their layout.

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
