"""Collectives between devices of one process, for writing your own parallelism.

A value per device is held as one tensor, a *stack*: shape (n, *shape), sharded on axis 0 over the n devices, so that
device i holds row i (its own value). `stack` makes one from per-device tensors and `unstack` gives them back. Each
collective is made of ordinary tensor ops, so it is lazy, differentiable and fused with what surrounds it; the multi
pass (schedule/multi.py) turns it into copies between devices and kernels on each:

>>> from lazytensor.parallel.collectives import stack, all_reduce, unstack
>>> s = stack([Tensor([1.0, 2.0], device="CPU:0"), Tensor([10.0, 20.0], device="CPU:1")])
>>> all_reduce(s).tolist(), all_reduce(s).device
([11.0, 22.0], ('CPU', 'CPU:1'))

torch.distributed's collectives, one rank per device: all_reduce (sum/max/min/prod; naive for small values, a ring of
reduce-scatter + all-gather for large ones over 3 or more devices, see the RING knob), all_gather, reduce_scatter,
broadcast, all_to_all.

On a DeviceMesh, `stack(values, mesh)` lays the values (one per device, in the mesh's order) out as a stack of shape
(*mesh.shape, *shape) whose first dimensions are sliced along the mesh's axes, one each, and each collective given
`mesh=` and `axis=` (a mesh axis name or a tuple of them; None: all of them) runs inside each group of devices that
differ only along those axes, as torch.distributed's process groups: all_reduce over "tp" sums CPU:0 with CPU:1 and
CPU:2 with CPU:3 on a 2x2 ("dp", "tp") mesh. The stack dimensions of the named axes are then what the flat form's
dimension 0 is: reduced away (all_reduce, reduce_scatter, broadcast) or no longer sliced (all_gather, all_to_all),
the result replicated along those axes; the multi pass keeps every copy inside its group.

>>> from lazytensor import DeviceMesh
>>> mesh = DeviceMesh(("CPU:0", "CPU:1", "CPU:2", "CPU:3"), shape=(2, 2), names=("dp", "tp"))
>>> m = stack([Tensor([float(i)], device=f"CPU:{i}") for i in range(4)], mesh)
>>> all_reduce(m, mesh=mesh, axis="tp").tolist(), all_reduce(m, mesh=mesh, axis="dp").tolist()
([[1.0], [5.0]], [[2.0], [4.0]])
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from lazytensor.frontend.mixin.multi import DeviceMesh, SpecEntry
from lazytensor.frontend.tensor import Tensor
from lazytensor.helpers import prod
from lazytensor.runtime.device import Device
from lazytensor.schedule.multi import multi_pass
from lazytensor.uop.graph import Bounds, even_bounds
from lazytensor.uop.ops import Ops, UOp

REDUCE_OPS = ("sum", "max", "min", "prod")

def from_pieces(pieces: Sequence[Tensor], axis: int) -> Tensor:
  """One tensor whose slices of `axis` are `pieces`, each staying on its own device (no copy): piece i is slice i.

  >>> from_pieces([Tensor([[1.0]], device="CPU:0"), Tensor([[2.0], [3.0]], device="CPU:1")], axis=0).tolist()
  [[1.0], [2.0], [3.0]]
  """
  if not pieces: raise ValueError("from_pieces: no pieces")
  devices = [p.device for p in pieces]
  if any(not isinstance(d, str) for d in devices) or len(set(devices)) != len(devices):
    raise ValueError(f"from_pieces: each piece must be on a device of its own, got {devices}")
  first = pieces[0]
  if not 0 <= axis < first.ndim: raise IndexError(f"from_pieces: axis {axis} does not exist for shape {first.shape}")
  for p in pieces:
    if p.dtype != first.dtype or p.shape[:axis] + p.shape[axis + 1:] != first.shape[:axis] + first.shape[axis + 1:]:
      raise ValueError(f"from_pieces: pieces of shape {p.shape} ({p.dtype}) and {first.shape} ({first.dtype}) differ "
                       f"outside axis {axis}")
  offsets = [0]
  for p in pieces: offsets.append(offsets[-1] + p.shape[axis])
  bounds: Bounds = tuple(zip(offsets[:-1], offsets[1:]))
  return first._apply_uop(lambda *xs: UOp(Ops.MULTI, first.dtype, xs, (axis, bounds)), *pieces[1:])

def assemble(mesh: DeviceMesh, dims: tuple[int | None, ...], blocks: Sequence[UOp]) -> UOp:
  """The devices' blocks (one per device of the mesh, in its order, all of one shape) as one value laid out on the
  mesh: a MULTI per mesh axis, as Tensor.shard makes, slicing dimension dims[k] along mesh axis k (None: replicated)."""
  def level(k: int, part: Sequence[UOp]) -> UOp:
    if k == len(mesh.shape): return part[0]
    n, d = mesh.shape[k], dims[k]
    step = len(part) // n
    subs = tuple(level(k + 1, part[i * step:(i + 1) * step]) for i in range(n))
    if d is None: return UOp(Ops.MULTI, subs[0].dtype, subs, (None, None))
    size = subs[0].shape[d]
    return UOp(Ops.MULTI, subs[0].dtype, subs, (d, tuple((i * size, (i + 1) * size) for i in range(n))))
  return level(0, blocks)

def stack(values: Sequence[Tensor], mesh: DeviceMesh | None = None) -> Tensor:
  """One value per device (each tensor on a device of its own, all of one shape) as a stack (n, *shape); on a `mesh`,
  one value per device of the mesh in its order, as a stack (*mesh.shape, *shape) sliced along the mesh's axes.

  >>> stack([Tensor([1, 2], device="CPU:0"), Tensor([3, 4], device="CPU:1")]).shape
  (2, 2)
  """
  if mesh is None: return from_pieces([v.reshape(1, *v.shape) for v in values], axis=0)
  devices = Device.flat(mesh.devices)
  if len(values) != len(devices) or tuple(v.device for v in values) != devices:
    raise ValueError(f"stack: expected one value per device of the mesh, on {devices} in that order, got values on "
                     f"{[v.device for v in values]}")
  first = values[0]
  for v in values:
    if v.shape != first.shape or v.dtype != first.dtype:
      raise ValueError(f"stack: values of shape {v.shape} ({v.dtype}) and {first.shape} ({first.dtype}) differ")
  blocks = [v.reshape(*(1,) * len(mesh.shape), *v.shape) for v in values]
  return blocks[0]._apply_uop(lambda *us: assemble(mesh, tuple(range(len(mesh.shape))), us), *blocks[1:])

def unravel(shape: Sequence[int], c: int) -> list[int]:
  """The coordinates of the c-th point of a grid of `shape` in row-major order (the first axis the major one)."""
  out = []
  for size in reversed(shape):
    out.append(c % size)
    c //= size
  return out[::-1]

def _devices(t: Tensor, what: str) -> tuple[str, ...]:
  devices = t.device
  if not isinstance(devices, tuple) or not all(isinstance(d, str) for d in devices) or t.shard_axis != 0 or \
     t.shape[0] != len(devices):
    raise ValueError(f"{what}: expected a stack (one row per device, sharded on axis 0), got a tensor of shape "
                     f"{t.shape} on {t.device}; make one with stack()")
  return cast(tuple[str, ...], devices)

def _named(t: Tensor, mesh: DeviceMesh | None, axis: SpecEntry, what: str) -> tuple[int, ...] | None:
  """None for a flat stack (checked); on a mesh, the mesh axes that `axis` names (their positions, which are the
  stack's dimensions; None names them all), t checked to be a stack on the mesh."""
  if mesh is None:
    if axis is not None: raise TypeError(f"{what}: axis {axis!r} names mesh axes, so it needs the mesh (mesh=)")
    _devices(t, what)
    return None
  if not isinstance(mesh, DeviceMesh): raise TypeError(f"{what}: expected a DeviceMesh, got {mesh!r}")
  k = len(mesh.shape)
  if t.device != mesh.devices or t.shape[:k] != mesh.shape or \
     mesh.spec(_laid_out(t)) != (*mesh.names, *(None,) * (t.ndim - k)):
    raise ValueError(f"{what}: expected a stack on the mesh (shape ({', '.join(map(str, mesh.shape))}, ...), its first "
                     f"dimensions sliced along {mesh.names}), got a tensor of shape {t.shape} on {t.device}; make one "
                     f"with stack(values, mesh)")
  return tuple(range(k)) if axis is None else mesh.entry_axes(axis, what)

def _laid_out(t: Tensor) -> Tensor:
  """t where its layout is known (a MULTI), else its graph after the multi pass, which tells the layout without
  computing t: mesh.spec realizes a value of unknown layout, which took a schedule (and across ranks a check of the
  ranks' programs) at every collective of a lazy value, and kept it from fusing with the collective."""
  return t if t.lazydata.op is Ops.MULTI else Tensor._of(multi_pass(t.lazydata))

def _respec(t: Tensor, mesh: DeviceMesh, named: tuple[int, ...], to_dim: int | None) -> Tensor:
  """The stack t laid out anew: replicated along the mesh axes `named`, with its dimension `to_dim` (if any) sliced
  along them instead, the other mesh axes still slicing their own dimensions."""
  spec: list[SpecEntry] = [None if i in named else n for i, n in enumerate(mesh.names)]
  spec += [None] * (t.ndim - len(mesh.names))
  if to_dim is not None:
    names = tuple(mesh.names[i] for i in named)
    spec[to_dim] = names[0] if len(names) == 1 else names
  return t.shard(mesh, spec)

def unstack(t: Tensor, mesh: DeviceMesh | None = None) -> list[Tensor]:
  """The value of each device in a stack (on a `mesh`: of each of its devices, in its order), each on its device.

  >>> [v.device for v in unstack(stack([Tensor([1]), Tensor([2], device="CPU:1")]))]
  ['CPU', 'CPU:1']
  """
  if mesh is None: return [t[i].to(d) for i, d in enumerate(_devices(t, "unstack"))]
  _named(t, mesh, None, "unstack")
  return [t[tuple(unravel(mesh.shape, c))].to(d) for c, d in enumerate(Device.flat(mesh.devices))]

def _reduce(t: Tensor, op: str, axis: int | tuple[int, ...]) -> Tensor:
  if op not in REDUCE_OPS: raise ValueError(f"reduce op {op!r}: expected one of {REDUCE_OPS}")
  return {"sum": t.sum, "max": t.max, "min": t.min, "prod": t.prod}[op](axis)

def all_reduce(t: Tensor, op: str = "sum", mesh: DeviceMesh | None = None, axis: SpecEntry = None) -> Tensor:
  """Every device's value combined by `op` (sum, max, min or prod), on every device (replicated); on a `mesh`, within
  each group of devices along the mesh axes `axis` (their stack dimensions reduced away).

  >>> all_reduce(stack([Tensor([1.0, 5.0]), Tensor([3.0, 2.0], device="CPU:1")]), "max").tolist()
  [3.0, 5.0]
  """
  named = _named(t, mesh, axis, "all_reduce")
  return _reduce(t, op, 0 if named is None else named)

def all_gather(t: Tensor, mesh: DeviceMesh | None = None, axis: SpecEntry = None) -> Tensor:
  """Every device's value, on every device: the stack itself, replicated; on a `mesh`, replicated along the mesh axes
  `axis` (each device holds the values of its group).

  >>> all_gather(stack([Tensor([1]), Tensor([2], device="CPU:1")])).shard_axis is None
  True
  """
  named = _named(t, mesh, axis, "all_gather")
  if named is None: return t.shard(_devices(t, "all_gather"), None)
  return _respec(t, cast(DeviceMesh, mesh), named, None)

def reduce_scatter(t: Tensor, op: str = "sum", mesh: DeviceMesh | None = None, axis: SpecEntry = None) -> Tensor:
  """The values combined by `op`, device i keeping only slice i of axis 0 of the result (of ceil(m/n) rows): each
  device receives only its slice from each of the others. On a `mesh`, within each group along the mesh axes `axis`:
  their stack dimensions reduced away, the first dimension of the values sliced along them.

  >>> r = reduce_scatter(stack([Tensor([1.0, 2.0]), Tensor([10.0, 20.0], device="CPU:1")]))
  >>> r.tolist(), r.bounds
  ([11.0, 22.0], ((0, 1), (1, 2)))
  """
  named = _named(t, mesh, axis, "reduce_scatter")
  k = 1 if mesh is None else len(mesh.shape)
  if t.ndim <= k: raise ValueError(f"reduce_scatter: a stack of shape {t.shape} has no axis to scatter")
  if named is not None:  # an all_to_all moves each device only its slices; the reduce is then on each device
    return _reduce(_respec(t, cast(DeviceMesh, mesh), named, k), op, named)
  devices = _devices(t, "reduce_scatter")
  bounds = even_bounds(t.shape[1], len(devices))
  pieces = [_reduce(Tensor.stack(*[t[i, lo:hi].to(d) for i in range(len(devices))]), op, 0)
            for d, (lo, hi) in zip(devices, bounds)]
  return from_pieces(pieces, axis=0)

def broadcast(t: Tensor, src: int = 0, mesh: DeviceMesh | None = None, axis: SpecEntry = None) -> Tensor:
  """Device `src`'s value, on every device; on a `mesh`, that of the device at index `src` of each group along the
  mesh axes `axis` (over several axes, the first is the major one), on the devices of its group.

  >>> broadcast(stack([Tensor([1]), Tensor([2], device="CPU:1")]), src=1).tolist()
  [2]
  """
  named = _named(t, mesh, axis, "broadcast")
  sizes = [t.shape[0]] if named is None else [t.shape[i] for i in named]
  if isinstance(src, bool) or not isinstance(src, int) or not 0 <= src < prod(sizes):
    raise IndexError(f"broadcast: src {src!r} is not one of the {prod(sizes)} devices of a group")
  if named is None:
    devices = _devices(t, "broadcast")
    return t[src].to(devices[src]).to(devices)
  at = dict(zip(named, unravel(sizes, src)))
  mesh = cast(DeviceMesh, mesh)
  picked = t[tuple(at.get(i, slice(None)) for i in range(len(mesh.shape)))]
  spec = [n for i, n in enumerate(mesh.names) if i not in at] + [None] * (t.ndim - len(mesh.shape))
  return picked.shard(mesh, spec)

def all_to_all(t: Tensor, mesh: DeviceMesh | None = None, axis: SpecEntry = None) -> Tensor:
  """Device i's value cut into n chunks along its first axis; device j receives chunk j of every device, stacked:
  the stack resharded from axis 0 to axis 1 (each device sends n-1 chunks, one to each other device). On a `mesh`,
  within each group along the mesh axes `axis`: their stack dimensions no longer sliced, the first dimension of the
  values sliced along them instead.

  >>> a = all_to_all(stack([Tensor([1, 2]), Tensor([3, 4], device="CPU:1")]))
  >>> a.shard_axis, a.tolist()
  (1, [[1, 2], [3, 4]])
  """
  named = _named(t, mesh, axis, "all_to_all")
  k = 1 if mesh is None else len(mesh.shape)
  if t.ndim <= k: raise ValueError(f"all_to_all: a stack of shape {t.shape} has no axis to exchange")
  if named is not None: return _respec(t, cast(DeviceMesh, mesh), named, k)
  return t.shard(_devices(t, "all_to_all"), 1)
