"""Building blocks of the tensor graph: shaped constants and movement nodes (used by Tensor and by gradients)."""
from __future__ import annotations

import functools
from typing import Any

from lazytensor.dtype import DType, dtypes, truncate
from lazytensor.shape.view import ShapeTracker
from lazytensor.uop.ops import DeviceLike, Ops, UOp
from lazytensor.uop.sint import sint


@functools.lru_cache(maxsize=4096)
def _broadcast_st(shape: tuple[sint, ...]) -> ShapeTracker:
  # every scalar in an op makes one of these: the view math runs once per shape, not per constant
  return ShapeTracker.from_shape(()).reshape((1,) * len(shape)).expand(shape)

# the constants ops made last, held: an eager op makes the same few (0, 1, True in its shape) at every call, and a
# held node is one dict lookup where building it is two nodes, a truncation and a view. Cleared when full (a bound)
_CONSTS_MAX = 4096
_consts: dict[tuple, UOp] = {}

def const_uop(value: Any, dtype: DType, device: DeviceLike, shape: tuple[sint, ...]) -> UOp:
  """`value` broadcast to `shape`: one scalar CONST under a stride-0 VIEW, no memory (on a tuple of devices: the same
  constant on each)."""
  shape = tuple(shape)
  # ints and bools key by value; anything else by type and text, as UOp interns floats (0.0 and -0.0 differ, a NaN
  # finds itself)
  key = (value if type(value) in (int, bool) else (type(value), repr(value)), type(value), dtype, device, shape)
  if (hit := _consts.get(key)) is not None: return hit
  c = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, dtypes.void, (), device),), truncate(dtype, value))
  out = UOp(Ops.VIEW, dtype, (c,), _broadcast_st(shape))
  if len(_consts) >= _CONSTS_MAX: _consts.clear()
  _consts[key] = out
  return out

def buffer_view(buf: UOp, shape: tuple[sint, ...]) -> UOp:
  """A BUFFER read densely in `shape`: what a realized tensor holds."""
  return UOp(Ops.VIEW, buf.dtype, (buf,), ShapeTracker.from_shape(shape))

def const_like(x: UOp, value: Any, dtype: DType | None = None) -> UOp:
  return const_uop(value, dtype or x.dtype, x.device, x.shape)

def movement(x: UOp, op: Ops, arg: Any) -> UOp:
  """A movement of x; a no-op movement is x itself."""
  if op is Ops.RESHAPE and tuple(arg) == x.shape: return x
  if op is Ops.EXPAND and tuple(arg) == x.shape: return x
  if op is Ops.PERMUTE and tuple(arg) == tuple(range(x.ndim)): return x
  if op is Ops.PAD and all(tuple(p) == (0, 0) for p in arg): return x
  if op is Ops.SHRINK and all(tuple(r) == (0, s) for r, s in zip(arg, x.shape)): return x
  if op is Ops.FLIP and not any(arg): return x
  return UOp(op, x.dtype, (x,), tuple(arg))

def own_value(x: UOp) -> UOp:
  """x as the result of an op that torch documents as returning a copy (flip, roll, repeat, pad, cat, ...): an identity
  CAST over it. The value is the same and nothing is copied while it is lazy, but it is no longer a view of x's
  buffer: a write into either tensor never reaches the other, and realizing it computes a buffer of its own. The
  scheduler reads through it wherever an op consumes it (schedule.pm_resolve), so kernels are as without it."""
  return x if is_own_value(x) else UOp(Ops.CAST, x.dtype, (x,))

def is_own_value(x: UOp) -> bool:
  """Whether x is an own_value node (an identity CAST)."""
  return x.op is Ops.CAST and x.dtype == x.src[0].dtype

def reduce_uop(x: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
  """Reduce over `axes`, keeping them as size 1 (no node when there is nothing to reduce)."""
  axes = tuple(a for a in axes if x.shape[a] != 1)
  return x if not axes else UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (op, axes))

# ---- values spread over several devices ----

Bounds = tuple[tuple[int, int], ...]

def even_bounds(size: int, n: int) -> Bounds:
  """[lo, hi) of each of n devices' slices of `size` elements: ceil(size/n) each, the last ones smaller (15 over 4:
  4, 4, 4, 3), as torch's DTensor splits."""
  chunk = -(-size // n)
  return tuple((min(i * chunk, size), min((i + 1) * chunk, size)) for i in range(n))

def axis_shrink(x: UOp, axis: int, lo: int, hi: int) -> UOp:
  return movement(x, Ops.SHRINK, tuple((lo, hi) if i == axis else (0, s) for i, s in enumerate(x.shape)))

def axis_pad(x: UOp, axis: int, before: int, after: int) -> UOp:
  return movement(x, Ops.PAD, tuple((before, after) if i == axis else (0, 0) for i in range(x.ndim)))

def copy_to(x: UOp, device: DeviceLike) -> UOp:
  return x if x.device == device else UOp(Ops.COPY, x.dtype, (x,), device)

def shard_piece(x: UOp, device: DeviceLike, axis: int | None, bounds: tuple[int, int]) -> UOp:
  """The slice [lo, hi) of `axis` of x (all of x for axis None), on `device`."""
  return copy_to(x if axis is None else axis_shrink(x, axis, *bounds), device)

def mesh_uop(x: UOp, devices: DeviceLike, axes: tuple[int | None, ...]) -> UOp:
  """x on a mesh: `devices` nested one tuple level per mesh axis, axes[k] the dimension of x sliced along mesh axis k
  (None: replicated along it). A MULTI over the first mesh axis whose pieces are values over the next ones."""
  if isinstance(devices, str): return copy_to(x, devices)
  if all(a is None for a in axes): return UOp(Ops.COPY, x.dtype, (x,), devices)
  axis, rest = axes[0], axes[1:]
  if axis is None: return UOp(Ops.MULTI, x.dtype, tuple(mesh_uop(x, d, rest) for d in devices), (None, None))
  bounds = even_bounds(x.shape[axis], len(devices))
  pieces = tuple(mesh_uop(axis_shrink(x, axis, *b), d, rest) for d, b in zip(devices, bounds))
  return UOp(Ops.MULTI, x.dtype, pieces, (axis, bounds))

def shard_like(x: UOp, m: UOp) -> UOp:
  """x laid out over devices as m is, at every level of a mesh: the same slices of the same axes, or replicated."""
  if m.op is not Ops.MULTI: return copy_to(x, m.device)
  axis, bounds = m.arg
  if axis is None: return UOp(Ops.MULTI, x.dtype, tuple(shard_like(x, p) for p in m.src), m.arg)
  return UOp(Ops.MULTI, x.dtype, tuple(shard_like(axis_shrink(x, axis, *b), p) for p, b in zip(m.src, bounds)), m.arg)

def multi_leaves(u: UOp) -> tuple[UOp, ...]:
  """The pieces of a value spread over devices that each live on one device (through every level of a mesh)."""
  return tuple(leaf for p in u.src for leaf in multi_leaves(p)) if u.op is Ops.MULTI else (u,)
