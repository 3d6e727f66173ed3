"""Movement: reshape, permute, expand, pad, shrink, flip, and what is built from them (cat, stack, split, indexing).

The six primitives are views: each composes a ShapeTracker into the tensor's VIEW and copies nothing.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from lazytensor.dtype import DType, dtypes, promote_types
from lazytensor.graph import movement
from lazytensor.helpers import flatten, make_tuple, prod
from lazytensor.tensor_index import getitem
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

class MovementMixin:
  """Tensor's movement methods. Its only subclass is Tensor (tensor.py), so every MovementMixin is a Tensor."""
  __slots__ = ()
  if TYPE_CHECKING:  # what the methods below use from Tensor and its other mixins, declared for mypy
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def device(self) -> str: ...
    @property
    def ndim(self) -> int: ...
    def numel(self) -> int: ...
    def _apply_uop(self, fn: Callable[..., UOp], *others: Tensor) -> Tensor: ...
    @classmethod
    def ones(cls, *shape: Any, **kwargs: Any) -> Tensor: ...

  def _resolve_axis(self, axis: int, ndim: int | None = None) -> int:
    """axis as an index in [0, ndim); ndim is self.ndim, or one more where an axis is being inserted."""
    n = max(self.ndim if ndim is None else ndim, 1)  # a 0-d tensor accepts axis 0 and -1, as torch
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
      raise TypeError(f"axis must be an int, got {axis!r}")
    if not -n <= axis < n:
      raise IndexError(f"axis {axis} is out of range for a tensor of shape {self.shape}: expected {-n} <= axis < {n}")
    return int(axis) % n

  def reshape(self, *shape: Any) -> Tensor:
    """The same elements in a new shape; one dimension may be -1.

    >>> Tensor.arange(6).reshape(2, -1).shape
    (2, 3)
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if any(not isinstance(s, (int, np.integer)) or s < -1 for s in shape):
      raise ValueError(f"reshape: bad shape {shape}; dimensions must be ints >= 0, or one -1")
    if list(shape).count(-1) > 1: raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
    if -1 in shape:
      known = prod(s for s in shape if s != -1)
      if known == 0 or self.numel() % known: raise ValueError(f"reshape: cannot reshape {self.shape} into {shape}")
      shape = tuple(self.numel() // known if s == -1 else s for s in shape)
    shape = tuple(int(s) for s in shape)
    if prod(shape) != self.numel(): raise ValueError(f"reshape: cannot reshape {self.shape} into {shape}: "
                                                     f"{self.numel()} != {prod(shape)} elements")
    if shape == self.shape: return cast("Tensor", self)
    return self._apply_uop(lambda x: movement(x, Ops.RESHAPE, shape))

  def view(self, *shape: Any) -> Tensor:
    """The same as reshape.

    >>> Tensor.arange(6).view(3, 2).shape
    (3, 2)
    """
    return self.reshape(*shape)

  def permute(self, *order: Any) -> Tensor:
    """Reorder the dimensions.

    >>> Tensor.zeros(2, 3, 4).permute(2, 0, 1).shape
    (4, 2, 3)
    """
    if len(order) == 1 and isinstance(order[0], (tuple, list)): order = tuple(order[0])
    resolved = tuple(self._resolve_axis(o) for o in order)
    if sorted(resolved) != list(range(self.ndim)):
      raise ValueError(f"permute: {order} is not a permutation of the {self.ndim} dimensions of {self.shape}")
    if resolved == tuple(range(self.ndim)): return cast("Tensor", self)
    return self._apply_uop(lambda x: movement(x, Ops.PERMUTE, resolved))

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    """Swap two dimensions.

    >>> Tensor.zeros(2, 3, 4).transpose(0, 2).shape
    (4, 3, 2)
    """
    order = list(range(self.ndim))
    a, b = self._resolve_axis(dim0), self._resolve_axis(dim1)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Tensor:
    """All dimensions in reverse order.

    >>> Tensor([[1, 2, 3]]).T.tolist()
    [[1], [2], [3]]
    """
    return self.permute(tuple(reversed(range(self.ndim))))

  def expand(self, *shape: Any) -> Tensor:
    """Broadcast size-1 dimensions to a larger size (-1 keeps a dimension); no memory is copied.

    >>> Tensor([[1], [2]]).expand(2, 3).tolist()
    [[1, 1, 1], [2, 2, 2]]
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if len(shape) < self.ndim: raise ValueError(f"expand: cannot expand {self.shape} to fewer dimensions {shape}")
    cur = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(c if s == -1 else s for c, s in zip(cur, shape))
    for c, s in zip(cur, new):
      if c != s and c != 1: raise ValueError(f"expand: cannot expand {self.shape} to {shape}")
    x = self.reshape(cur) if cur != self.shape else cast("Tensor", self)
    if new == x.shape: return x
    return x._apply_uop(lambda u: movement(u, Ops.EXPAND, new))

  def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
    """self with 1s prepended to its shape and expanded to `shape`."""
    if self.shape == shape: return cast("Tensor", self)
    return self.reshape((1,) * (len(shape) - self.ndim) + self.shape).expand(shape)

  def pad(self, padding: Sequence[Any], value: float = 0.0) -> Tensor:
    """Pad with `value`: `padding` holds (before, after) per dimension, or a flat torch-style list from the last dim.

    >>> Tensor([1, 2]).pad(((1, 2),)).tolist()
    [0, 1, 2, 0, 0]
    """
    if padding and isinstance(padding[0], (int, np.integer)):
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise ValueError(f"pad: flat padding {padding} for {self.shape}: expected (before, after) from the last dim")
      from_last = [(padding[i], padding[i + 1]) for i in range(len(padding) - 2, -1, -2)]
      pairs = [(0, 0)] * (self.ndim - len(padding) // 2) + from_last
    else: pairs = [(0, 0) if p is None else tuple(p) for p in padding]
    if len(pairs) != self.ndim:
      raise ValueError(f"pad: {len(pairs)} (before, after) pairs for a {self.ndim}-d tensor {self.shape}")
    if any(b < 0 or a < 0 for b, a in pairs):  # negative padding crops
      crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, self.shape))
      return self.shrink(crop).pad([(max(0, b), max(0, a)) for b, a in pairs], value)
    arg = tuple((int(b), int(a)) for b, a in pairs)
    if all(p == (0, 0) for p in arg): return cast("Tensor", self)
    ret = self._apply_uop(lambda x: movement(x, Ops.PAD, arg))
    if value == 0: return ret
    mask = type(self).ones(self.shape, dtype=dtypes.bool, device=self.device).pad(arg)
    return mask.where(ret, ret.full_like(value))  # the fill takes the tensor's dtype, as torch

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    """Keep [start, end) of each dimension (None keeps all).

    >>> Tensor([1, 2, 3, 4]).shrink(((1, 3),)).tolist()
    [2, 3]
    """
    if len(arg) != self.ndim: raise ValueError(f"shrink: {len(arg)} ranges for a {self.ndim}-d tensor {self.shape}")
    full = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(full, self.shape):
      if not 0 <= b <= e <= s:
        raise ValueError(f"shrink: range ({b}, {e}) is out of bounds for a dimension of size {s}")
    if all(r == (0, s) for r, s in zip(full, self.shape)): return cast("Tensor", self)
    return self._apply_uop(lambda x: movement(x, Ops.SHRINK, full))

  def flip(self, axis: int | Sequence[int]) -> Tensor:
    """Reverse the order of elements along the given axes.

    >>> Tensor([1, 2, 3]).flip(0).tolist()
    [3, 2, 1]
    """
    axes = {self._resolve_axis(a) for a in make_tuple(axis, 1)}
    arg = tuple(i in axes for i in range(self.ndim))
    return self._apply_uop(lambda x: movement(x, Ops.FLIP, arg))

  def squeeze(self, dim: int | None = None) -> Tensor:
    """Remove dimension `dim` if its size is 1, or every size-1 dimension when `dim` is None.

    >>> Tensor.zeros(1, 3, 1).squeeze().shape
    (3,)
    """
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    d = self._resolve_axis(dim)
    return cast("Tensor", self) if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

  def unsqueeze(self, dim: int) -> Tensor:
    """Insert a dimension of size 1 at `dim`.

    >>> Tensor([1, 2]).unsqueeze(-1).shape
    (2, 1)
    """
    d = self._resolve_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dimensions start_dim..end_dim (all by default) into one.

    >>> Tensor.zeros(2, 3, 4).flatten(1).shape
    (2, 12)
    """
    if self.ndim == 0: return self.reshape(1)
    s, e = self._resolve_axis(start_dim), self._resolve_axis(end_dim)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def repeat(self, *repeats: Any) -> Tensor:
    """Tile the tensor `repeats[i]` times along each dimension.

    >>> Tensor([1, 2]).repeat(2).tolist()
    [1, 2, 1, 2]
    """
    if len(repeats) == 1 and isinstance(repeats[0], (tuple, list)): repeats = tuple(repeats[0])
    if len(repeats) < self.ndim: raise ValueError(f"repeat: {len(repeats)} repeats for a {self.ndim}-d tensor")
    if any(not isinstance(r, (int, np.integer)) or r < 0 for r in repeats):
      raise ValueError(f"repeat: repeats must be non-negative ints, got {repeats}")
    base = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    new_shape = tuple(r * s for r, s in zip(repeats, base.shape))
    interleaved = base.reshape(flatten((1, s) for s in base.shape))
    expanded = interleaved.expand(flatten((r, s) for r, s in zip(repeats, base.shape)))
    return expanded.reshape(new_shape)

  def cat(self: Any, *others: Tensor, dim: int = 0) -> Tensor:
    """Join tensors along an existing dimension (each is padded into place, then summed: one fused kernel).
    Called as `a.cat(b, c)`, `Tensor.cat(a, b, c)` or `Tensor.cat([a, b, c])`.

    >>> Tensor([1]).cat(Tensor([2, 3])).tolist()
    [1, 2, 3]
    """
    ts: tuple[Tensor, ...] = (*self, *others) if isinstance(self, (list, tuple)) else (self, *others)
    if not ts: raise ValueError("cat: needs at least one tensor")
    for t in ts:
      if not isinstance(t, MovementMixin): raise TypeError(f"cat: expected Tensors, got {type(t).__name__}")
    first = ts[0]
    if first.ndim == 0: raise ValueError("cat: 0-d tensors have no dimension to join along; use stack")
    d = first._resolve_axis(dim)
    for t in ts[1:]:
      if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d):
        raise ValueError(f"cat: shapes {first.shape} and {t.shape} differ outside dimension {d}")
    dt = first.dtype
    for t in ts[1:]: dt = promote_types(dt, t.dtype)
    offsets = list(itertools.accumulate([t.shape[d] for t in ts], initial=0))
    total = offsets[-1]
    parts = [t.cast(dt).pad([(offsets[i], total - offsets[i + 1]) if j == d else (0, 0) for j in range(first.ndim)])
             for i, t in enumerate(ts)]
    out = parts[0]
    for p in parts[1:]: out = out._merge_disjoint(p)
    return out

  def _merge_disjoint(self, other: Tensor) -> Tensor:
    # padded parts never overlap, so OR for bools and ADD otherwise puts each value in place exactly
    return self | other if self.dtype.is_bool else self + other

  @classmethod
  def stack(cls, *tensors: Tensor | Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along a new dimension.

    >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4])).tolist()
    [[1, 2], [3, 4]]
    """
    ts: list[Any] = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    if not ts: raise ValueError("stack: needs at least one tensor")
    for t in ts:
      if not isinstance(t, cls): raise TypeError(f"stack: expected Tensors, got {type(t).__name__}")
    d = ts[0]._resolve_axis(dim, ts[0].ndim + 1)
    for t in ts[1:]:
      if t.shape != ts[0].shape: raise ValueError(f"stack: shapes {ts[0].shape} and {t.shape} differ")
    return cls.cat(*[t.unsqueeze(d) for t in ts], dim=d)

  def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Split into chunks of `sizes` (an int: equal chunks, the last may be smaller) along `dim`.

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).split(2)]
    [[1, 2], [3, 4], [5]]
    """
    d = self._resolve_axis(dim)
    n = self.shape[d]
    if isinstance(sizes, int):
      if sizes <= 0: raise ValueError(f"split: chunk size must be positive, got {sizes}")
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    if any(not isinstance(sz, (int, np.integer)) or sz < 0 for sz in sizes):
      raise ValueError(f"split: sizes {list(sizes)} must be non-negative ints")
    if sum(sizes) != n:
      raise ValueError(f"split: sizes {list(sizes)} do not add up to {n} (dimension {d} of {self.shape})")
    offs = list(itertools.accumulate(sizes, initial=0))
    return tuple(self.shrink([(offs[i], offs[i + 1]) if j == d else None for j in range(self.ndim)])
                 for i in range(len(sizes)))

  def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into `chunks` pieces of equal size along `dim` (the last may be smaller, fewer pieces if too small).

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).chunk(2)]
    [[1, 2, 3], [4, 5]]
    """
    if chunks <= 0: raise ValueError(f"chunk: number of chunks must be positive, got {chunks}")
    d = self._resolve_axis(dim)
    return self.split(math.ceil(self.shape[d] / chunks) if self.shape[d] else 1, dim=d)

  def __getitem__(self, indices: Any) -> Tensor:
    """Basic indexing as numpy: ints, slices with any step, None and ...; the result is a view.

    >>> Tensor([[1, 2, 3], [4, 5, 6]])[:, ::-2].tolist()
    [[3, 1], [6, 4]]
    """
    return getitem(cast("Tensor", self), indices)

