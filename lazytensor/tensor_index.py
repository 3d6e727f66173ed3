"""Basic indexing: ints, slices (any step), None and Ellipsis, all as views."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

def _normalize(indices: Any, ndim: int) -> list[Any]:
  idx = list(indices) if isinstance(indices, tuple) else [indices]
  for i in idx:
    if not (i is None or i is Ellipsis or isinstance(i, (slice, int, np.integer)) and not isinstance(i, bool)):
      raise TypeError(f"index {i!r} of type {type(i).__name__} is not supported; expected int, slice, None or ...")
  if sum(i is Ellipsis for i in idx) > 1: raise IndexError("an index can only have a single ellipsis (...)")
  consumed = sum(i is not None and i is not Ellipsis for i in idx)
  if consumed > ndim: raise IndexError(f"too many indices: {consumed} for a tensor of {ndim} dimensions")
  fill = [slice(None)] * (ndim - consumed)
  if Ellipsis in idx:
    pos = idx.index(Ellipsis)
    return idx[:pos] + fill + idx[pos + 1:]
  return idx + fill

def _take_strided(x: Tensor, dim: int, start: int, stop: int, step: int) -> Tensor:
  """Elements start, start+step, ... (< stop) of one dimension, as a view."""
  n = x.shape[dim]
  count = max(0, -(-(stop - start) // step)) if step > 0 else max(0, -(-(start - stop) // -step))
  if count == 0: return x.shrink([(0, 0) if j == dim else None for j in range(x.ndim)])
  if step < 0:
    x = x.flip(dim)
    start, step = n - 1 - start, -step
  x = x.shrink([(start, start + (count - 1) * step + 1) if j == dim else None for j in range(x.ndim)])
  if step == 1: return x
  # pad to count*step, split the dim into (count, step) and keep column 0
  x = x.pad([(0, count * step - x.shape[dim]) if j == dim else (0, 0) for j in range(x.ndim)])
  x = x.reshape(*x.shape[:dim], count, step, *x.shape[dim + 1:])
  x = x.shrink([(0, 1) if j == dim + 1 else None for j in range(x.ndim)])
  return x.reshape(*x.shape[:dim], count, *x.shape[dim + 2:])

def getitem(x: Tensor, indices: Any) -> Tensor:
  """`x[...]` with numpy semantics for ints, slices, None and Ellipsis."""
  idx = _normalize(indices, x.ndim)
  dim = 0
  for i in idx:
    if i is None: continue
    n = x.shape[dim]
    if isinstance(i, slice):
      start, stop, step = i.indices(n)
      x = _take_strided(x, dim, start, stop, step)
      dim += 1
    else:
      j = int(i)
      if not -n <= j < n: raise IndexError(f"index {j} is out of bounds for dimension {dim} with size {n}")
      x = x.shrink([(j % n, j % n + 1) if k == dim else None for k in range(x.ndim)])
      x = x.reshape(*x.shape[:dim], *x.shape[dim + 1:])
  # insert the new axes where the Nones stood
  pos, result_shape = 0, []
  for i in idx:
    if i is None: result_shape.append(1)
    elif isinstance(i, slice):
      result_shape.append(x.shape[pos])
      pos += 1
  return x.reshape(tuple(result_shape)) if tuple(result_shape) != x.shape else x
