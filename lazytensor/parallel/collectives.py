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
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from lazytensor.frontend.tensor import Tensor
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

def stack(values: Sequence[Tensor]) -> Tensor:
  """One value per device (each tensor on a device of its own, all of one shape) as a stack (n, *shape).

  >>> stack([Tensor([1, 2], device="CPU:0"), Tensor([3, 4], device="CPU:1")]).shape
  (2, 2)
  """
  return from_pieces([v.reshape(1, *v.shape) for v in values], axis=0)

def _devices(t: Tensor, what: str) -> tuple[str, ...]:
  devices = t.device
  if not isinstance(devices, tuple) or not all(isinstance(d, str) for d in devices) or t.shard_axis != 0 or \
     t.shape[0] != len(devices):
    raise ValueError(f"{what}: expected a stack (one row per device, sharded on axis 0), got a tensor of shape "
                     f"{t.shape} on {t.device}; make one with stack()")
  return cast(tuple[str, ...], devices)

def unstack(t: Tensor) -> list[Tensor]:
  """The value of each device in a stack, each a tensor on its device.

  >>> [v.device for v in unstack(stack([Tensor([1]), Tensor([2], device="CPU:1")]))]
  ['CPU', 'CPU:1']
  """
  devices = _devices(t, "unstack")
  return [t[i].to(d) for i, d in enumerate(devices)]

def _reduce(t: Tensor, op: str, axis: int) -> Tensor:
  if op not in REDUCE_OPS: raise ValueError(f"reduce op {op!r}: expected one of {REDUCE_OPS}")
  return {"sum": t.sum, "max": t.max, "min": t.min, "prod": t.prod}[op](axis)

def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
  """Every device's value combined by `op` (sum, max, min or prod), on every device (replicated).

  >>> all_reduce(stack([Tensor([1.0, 5.0]), Tensor([3.0, 2.0], device="CPU:1")]), "max").tolist()
  [3.0, 5.0]
  """
  _devices(t, "all_reduce")
  return _reduce(t, op, 0)

def all_gather(t: Tensor) -> Tensor:
  """Every device's value, on every device: the stack itself, replicated.

  >>> all_gather(stack([Tensor([1]), Tensor([2], device="CPU:1")])).shard_axis is None
  True
  """
  return t.shard(_devices(t, "all_gather"), None)

def reduce_scatter(t: Tensor, op: str = "sum") -> Tensor:
  """The values combined by `op`, device i keeping only slice i of axis 0 of the result (of ceil(m/n) rows): each
  device receives only its slice from each of the others.

  >>> r = reduce_scatter(stack([Tensor([1.0, 2.0]), Tensor([10.0, 20.0], device="CPU:1")]))
  >>> r.tolist(), r.bounds
  ([11.0, 22.0], ((0, 1), (1, 2)))
  """
  devices = _devices(t, "reduce_scatter")
  if t.ndim < 2: raise ValueError(f"reduce_scatter: a stack of shape {t.shape} has no axis to scatter")
  bounds = even_bounds(t.shape[1], len(devices))
  pieces = [_reduce(Tensor.stack(*[t[i, lo:hi].to(d) for i in range(len(devices))]), op, 0)
            for d, (lo, hi) in zip(devices, bounds)]
  return from_pieces(pieces, axis=0)

def broadcast(t: Tensor, src: int = 0) -> Tensor:
  """Device `src`'s value, on every device.

  >>> broadcast(stack([Tensor([1]), Tensor([2], device="CPU:1")]), src=1).tolist()
  [2]
  """
  devices = _devices(t, "broadcast")
  if not 0 <= src < len(devices): raise IndexError(f"broadcast: src {src} is not one of {len(devices)} devices")
  return t[src].to(devices[src]).to(devices)

def all_to_all(t: Tensor) -> Tensor:
  """Device i's value cut into n chunks along its first axis; device j receives chunk j of every device, stacked:
  the stack resharded from axis 0 to axis 1 (each device sends n-1 chunks, one to each other device).

  >>> a = all_to_all(stack([Tensor([1, 2]), Tensor([3, 4], device="CPU:1")]))
  >>> a.shard_axis, a.tolist()
  (1, [[1, 2], [3, 4]])
  """
  devices = _devices(t, "all_to_all")
  if t.ndim < 2: raise ValueError(f"all_to_all: a stack of shape {t.shape} has no axis to exchange")
  return t.shard(devices, 1)
