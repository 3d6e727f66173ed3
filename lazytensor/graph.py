"""Building blocks of the tensor graph: shaped constants and movement nodes (used by Tensor and by gradients)."""
from __future__ import annotations

import functools
from typing import Any

from lazytensor.dtype import DType, dtypes, truncate
from lazytensor.shape.view import ShapeTracker
from lazytensor.uop.ops import Ops, UOp


@functools.lru_cache(maxsize=4096)
def _broadcast_st(shape: tuple[int, ...]) -> ShapeTracker:
  # every scalar in an op makes one of these: the view math runs once per shape, not per constant
  return ShapeTracker.from_shape(()).reshape((1,) * len(shape)).expand(shape)

def const_uop(value: Any, dtype: DType, device: str, shape: tuple[int, ...]) -> UOp:
  """`value` broadcast to `shape`: one scalar CONST under a stride-0 VIEW, no memory."""
  c = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, dtypes.void, (), device),), truncate(dtype, value))
  return UOp(Ops.VIEW, dtype, (c,), _broadcast_st(tuple(shape)))

def buffer_view(buf: UOp, shape: tuple[int, ...]) -> UOp:
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

def reduce_uop(x: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
  """Reduce over `axes`, keeping them as size 1 (no node when there is nothing to reduce)."""
  axes = tuple(a for a in axes if x.shape[a] != 1)
  return x if not axes else UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (op, axes))
