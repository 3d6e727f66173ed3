"""Movement: reshape, permute, expand, pad, shrink, flip, and what is built from them (cat, stack, split, indexing).

The six primitives are views: each composes a ShapeTracker into the tensor's VIEW and copies nothing.
"""
from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from lazytensor.dtype import dtypes, promote_types
from lazytensor.graph import movement
from lazytensor.helpers import ArgumentError, NotSupportedError, flatten, make_tuple, prod
from lazytensor.mixin.index import IndexMixin, _take_strided
from lazytensor.uop.ops import Ops

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

class MovementMixin(IndexMixin):
  """Tensor's movement methods, and through IndexMixin its indexing ones. Its only subclass is Tensor (tensor.py), so
  every MovementMixin is a Tensor."""
  __slots__ = ()
  if TYPE_CHECKING:  # what the methods below use from Tensor and its other mixins, beyond TensorStub, for mypy
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
    """The same elements in a new shape; one dimension may be -1 (whatever is left), and None keeps the size of
    that dimension (as tinygrad).

    >>> Tensor.arange(6).reshape(2, -1).shape, Tensor.zeros(2, 3).reshape(None, 3, 1).shape
    ((2, 3), (2, 3, 1))
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if any(s is None and i >= self.ndim for i, s in enumerate(shape)):
      raise ValueError(f"reshape: None keeps a dimension of {self.shape}, but {shape} has None beyond them")
    shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
    if any(not isinstance(s, (int, np.integer)) or s < -1 for s in shape):
      raise ValueError(f"reshape: bad shape {shape}; dimensions must be ints >= 0, or one -1")
    if list(shape).count(-1) > 1: raise ArgumentError(f"reshape: only one dimension can be -1, got {shape}")
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
      raise ArgumentError(f"permute: {order} is not a permutation of the {self.ndim} dimensions of {self.shape}")
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

  def _pad_pairs(self, padding: Sequence[Any]) -> list[tuple[int, int]]:
    """(before, after) per dim, from pairs per dim or a flat torch-style list that starts at the last dim."""
    if padding and isinstance(padding[0], (int, np.integer)):
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise ValueError(f"pad: flat padding {padding} for {self.shape}: expected (before, after) from the last dim")
      from_last = [(padding[i], padding[i + 1]) for i in range(len(padding) - 2, -1, -2)]
      pairs = [(0, 0)] * (self.ndim - len(padding) // 2) + from_last
    else: pairs = [(0, 0) if p is None else tuple(p) for p in padding]
    if len(pairs) != self.ndim:
      raise ValueError(f"pad: {len(pairs)} (before, after) pairs for a {self.ndim}-d tensor {self.shape}")
    for p in pairs:
      if len(p) != 2 or not all(isinstance(v, (int, np.integer)) for v in p):
        raise ValueError(f"pad: padding {padding} must hold (before, after) pairs of ints")
    return [(int(b), int(a)) for b, a in pairs]

  def pad(self, padding: Sequence[Any], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad each dim: `padding` holds (before, after) per dim, or a flat torch-style list from the last dim; negative
    amounts crop. Modes as torch: "constant" (with `value`, default 0), "reflect" (mirrored, without repeating the
    edge), "replicate" (the edge repeated) and "circular" (wrapped around). All are views and sums of views.

    >>> Tensor([1, 2, 3]).pad((2, 1)).tolist(), Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()
    ([0, 0, 1, 2, 3, 0], [3, 2, 1, 2, 3, 2])
    """
    pairs = self._pad_pairs(padding)
    if mode == "constant": return self._pad_constant(pairs, 0.0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
      raise NotSupportedError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if value is not None: raise ValueError(f"pad: mode {mode!r} takes no value, got value={value}")
    x = cast("Tensor", self)
    for d, (b, a) in enumerate(pairs):
      if (b, a) != (0, 0): x = x._pad_edge(d, b, a, mode)
    return x

  def _pad_constant(self, pairs: list[tuple[int, int]], value: float) -> Tensor:
    if any(b < 0 or a < 0 for b, a in pairs):  # negative padding crops
      crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, self.shape))
      return self.shrink(crop)._pad_constant([(max(0, b), max(0, a)) for b, a in pairs], value)
    arg = tuple(pairs)
    if all(p == (0, 0) for p in arg): return cast("Tensor", self)
    ret = self._apply_uop(lambda x: movement(x, Ops.PAD, arg))
    if value == 0: return ret
    mask = type(self).ones(self.shape, dtype=dtypes.bool, device=self.device).pad(arg)
    return mask.where(ret, ret.full_like(value))  # the fill takes the tensor's dtype, as torch

  def _pad_edge(self, d: int, before: int, after: int, mode: str) -> Tensor:
    """One dim padded in a mode that repeats the tensor's own values, with negative amounts cropping as torch does:
    reflect and replicate pad the whole dim with its own edges and then crop; circular crops first and wraps what
    is left."""
    def along(start: int, end: int, t: Tensor) -> Tensor:
      return t.shrink([(start, end) if i == d else None for i in range(t.ndim)])
    x, n = cast("Tensor", self), self.shape[d]
    if n == 0: raise ValueError(f"pad: mode {mode!r} cannot pad dim {d} of size 0 in {self.shape}")
    if n + before + after < 0: raise ArgumentError(f"pad: padding ({before}, {after}) crops more than the {n} "
                                                   f"elements of dim {d}")
    if mode == "circular" and n + min(before, 0) + min(after, 0) <= 0:  # torch returns uninitialized memory here
      raise NotSupportedError(f"pad: circular padding ({before}, {after}) crops all {n} elements of dim {d}, leaving "
                              "nothing to wrap around")
    b, a = max(before, 0), max(after, 0)
    if mode == "circular":  # the cropped tensor three times over (a view), cut around the middle copy
      x = along(max(0, -before), n - max(0, -after), x)
      n = x.shape[d]
      if max(b, a) > n:
        raise ArgumentError(f"pad: circular padding ({before}, {after}) of dim {d} wraps around more than once: it "
                            f"must be at most its size {n} after cropping (shape {self.shape})")
      return along(n - b, 2 * n + a, x.repeat([3 if i == d else 1 for i in range(x.ndim)]))
    if mode == "reflect" and max(b, a) >= n:
      raise ValueError(f"pad: reflect padding ({before}, {after}) of dim {d} must be less than its size {n} "
                       f"(shape {self.shape})")
    def edge(at: int, count: int) -> Tensor:
      return along(at, at + 1, x).expand([count if i == d else s for i, s in enumerate(x.shape)])
    left = along(1, b + 1, x).flip(d) if mode == "reflect" else edge(0, b)
    right = along(n - 1 - a, n - 1, x).flip(d) if mode == "reflect" else edge(n - 1, a)
    padded = type(self).cat(*[t for t in (left, x, right) if t.shape[d]], dim=d)
    return along(max(0, -before), n + b + a - max(0, -after), padded)

  def pad_to(self, *shape: Any) -> Tensor:
    """Pad the end of each dim with zeros up to `shape` (None keeps a dim).

    >>> Tensor([[1, 2]]).pad_to(2, 3).tolist()
    [[1, 2, 0], [0, 0, 0]]
    """
    new = self._target_shape("pad_to", shape)
    if any(ns < s for ns, s in zip(new, self.shape)): raise ValueError(f"pad_to: cannot pad {self.shape} to {shape}")
    return self.pad([(0, ns - s) for ns, s in zip(new, self.shape)])

  def shrink_to(self, *shape: Any) -> Tensor:
    """Keep the start of each dim, up to `shape` (None keeps a dim), as a view.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink_to(None, 2).tolist()
    [[1, 2], [4, 5]]
    """
    new = self._target_shape("shrink_to", shape)
    if any(ns > s for ns, s in zip(new, self.shape)):
      raise ValueError(f"shrink_to: cannot shrink {self.shape} to {shape}")
    return self.shrink([(0, ns) for ns in new])

  def _target_shape(self, name: str, shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if len(shape) != self.ndim: raise ValueError(f"{name}: shape {shape} has {len(shape)} dims, the tensor {self.ndim}")
    if any(ns is not None and (not isinstance(ns, (int, np.integer)) or ns < 0) for ns in shape):
      raise ValueError(f"{name}: shape {shape} must hold non-negative ints or None")
    return tuple(s if ns is None else int(ns) for ns, s in zip(shape, self.shape))

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

  def flip(self, axis: int | Sequence[int], *more: int) -> Tensor:
    """Reverse the order of elements along the given axes (a sequence, or several ints); an axis named twice is an
    error, as in torch.

    >>> Tensor([1, 2, 3]).flip(0).tolist(), Tensor([[1, 2], [3, 4]]).flip(0, 1).tolist()
    ([3, 2, 1], [[4, 3], [2, 1]])
    """
    named = make_tuple(axis, 1) + more
    axes = {self._resolve_axis(a) for a in named}
    if len(axes) != len(named): raise ArgumentError(f"flip: axes {named} name a dimension twice")
    arg = tuple(i in axes for i in range(self.ndim))
    return self._apply_uop(lambda x: movement(x, Ops.FLIP, arg))

  def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
    """Remove the dimensions `dim` (an int or a sequence; negative counts from the end) whose size is 1, leaving
    the others; every size-1 dimension when `dim` is None. A 0-d tensor takes dim 0 or -1 and stays as it is.

    >>> x = Tensor.zeros(1, 3, 1)
    >>> x.squeeze().shape, x.squeeze(-1).shape, x.squeeze((0, 1)).shape, Tensor.zeros(0, 3).squeeze(0).shape
    ((3,), (1, 3), (3, 1), (0, 3))
    """
    dims = range(self.ndim) if dim is None else {self._resolve_axis(d) for d in make_tuple(dim, 1)}
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

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
    if first.ndim == 0: raise IndexError("cat: 0-d tensors have no dimension to join along; use stack")
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

  def stack(self: Any, *others: Tensor, dim: int = 0) -> Tensor:
    """Join tensors along a new dimension. Called as `a.stack(b, c)`, `Tensor.stack(a, b, c)` or
    `Tensor.stack([a, b, c])`.

    >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4])).tolist(), Tensor([1]).stack(Tensor([2]), dim=1).tolist()
    ([[1, 2], [3, 4]], [[1, 2]])
    """
    if isinstance(self, (list, tuple)) and others:
      raise ValueError("stack: give the tensors as separate arguments or as one sequence, not both")
    ts: list[Any] = [*self, *others] if isinstance(self, (list, tuple)) else [self, *others]
    if not ts: raise ValueError("stack: needs at least one tensor")
    for t in ts:
      if isinstance(t, (list, tuple)):
        raise ValueError("stack: give the tensors as separate arguments or as one sequence, not both")
      if not isinstance(t, MovementMixin): raise TypeError(f"stack: expected Tensors, got {type(t).__name__}")
    d = ts[0]._resolve_axis(dim, ts[0].ndim + 1)
    for t in ts[1:]:
      if t.shape != ts[0].shape: raise ValueError(f"stack: shapes {ts[0].shape} and {t.shape} differ")
    return ts[0].unsqueeze(d).cat(*[t.unsqueeze(d) for t in ts[1:]], dim=d)

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

  def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Shift elements along dims, wrapping around (a view). With dims None the tensor rolls as if flattened (shifts
    is then one int, or a sequence of one).

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).roll(1, 1).tolist(), Tensor([[1, 2, 3], [4, 5, 6]]).roll(1).tolist()
    ([[3, 1, 2], [6, 4, 5]], [[6, 1, 2], [3, 4, 5]])
    """
    shift_list = make_tuple(shifts, 1)
    if dims is None:
      if len(shift_list) != 1: raise ArgumentError(f"roll: without dims, shifts must be one int, got {shifts}")
      return self.flatten().roll(shift_list[0], 0).reshape(self.shape)
    dim_list = make_tuple(dims, 1)
    if len(shift_list) != len(dim_list):
      raise ArgumentError(f"roll: {len(shift_list)} shifts {shift_list} for {len(dim_list)} dims {dim_list}")
    x = cast("Tensor", self)
    for s, dim in zip(shift_list, dim_list):
      d = self._resolve_axis(dim)
      n = x.shape[d]
      if n == 0 or s % n == 0: continue
      # the tensor twice over along d (a view), read from n - s
      twice = x.repeat([2 if i == d else 1 for i in range(x.ndim)])
      x = twice.shrink([(n - s % n, 2 * n - s % n) if i == d else None for i in range(x.ndim)])
    return x

  def repeat_interleave(self, repeats: int | Sequence[int], dim: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along dim (flattened when dim is None): an int repeats all alike (a view),
    a list gives each element its count (a gather). A Tensor of counts is not supported: the result's shape would
    depend on its values; pass repeats.tolist().

    >>> Tensor([1, 2]).repeat_interleave(2).tolist(), Tensor([1, 2]).repeat_interleave([1, 3]).tolist()
    ([1, 1, 2, 2], [1, 2, 2, 2])
    """
    x = self.flatten() if dim is None else cast("Tensor", self)
    d = 0 if dim is None else self._resolve_axis(dim)
    if isinstance(repeats, MovementMixin):
      raise ValueError("repeat_interleave: a Tensor of repeats gives a shape that depends on its values, known only "
                       "once it is computed; pass repeats.tolist() (or an int)")
    if isinstance(repeats, (int, np.integer)):
      if repeats < 0: raise ValueError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
      wide = x.unsqueeze(d + 1).expand(*x.shape[:d + 1], int(repeats), *x.shape[d + 1:])
      return wide.flatten(d, d + 1)
    counts = np.asarray(repeats)
    if counts.ndim != 1 or counts.dtype.kind not in "iu" and counts.size:
      raise TypeError(f"repeat_interleave: repeats must be an int or a list of ints, got {repeats!r}")
    n = x.shape[d] if x.ndim else 1
    if counts.size == 1: return self.repeat_interleave(int(counts[0]), dim)
    if counts.size != n or (counts < 0).any():
      raise ValueError(f"repeat_interleave: repeats {list(repeats)} must be {n} non-negative ints, one per element "
                       f"of dim {d}")
    return x[(slice(None),) * d + (np.repeat(np.arange(n), counts.astype(np.int64)),)]

  def unfold(self, dimension: int, size: int, step: int) -> Tensor:
    """Sliding windows of `size` elements every `step` along a dim, as torch.Tensor.unfold: the dim becomes the window
    count and the windows' elements a new last dim. A view.

    >>> Tensor([1, 2, 3, 4, 5]).unfold(0, 2, 2).tolist()
    [[1, 2], [3, 4]]
    """
    if self.ndim == 0: return self.reshape(1).unfold(0, size, step).reshape(size)
    d = self._resolve_axis(dimension)
    n = self.shape[d]
    if not isinstance(step, (int, np.integer)) or step <= 0:
      raise ArgumentError(f"unfold: step must be > 0, got {step}")
    if not isinstance(size, (int, np.integer)) or not 0 <= size <= n:
      raise ArgumentError(f"unfold: size {size} must be between 0 and {n}, the size of dim {d} of {self.shape}")
    last = self.permute([i for i in range(self.ndim) if i != d] + [d])
    lead = last.shape[:-1]
    # size + 1 copies of the row read in rows of n + 1: row k starts at element k, so (k, j) holds x[k + j]
    tiled = last.unsqueeze(-2).expand(*lead, size + 1, n).reshape(*lead, (size + 1) * n)
    shifted = tiled.shrink([None] * len(lead) + [(0, size * (n + 1))]).reshape(*lead, size, n + 1)
    starts = _take_strided(shifted, len(lead) + 1, 0, n - size + 1, int(step))       # (..., size, count)
    windows = starts.transpose(-1, -2)                                                # (..., count, size)
    nl = len(lead)
    return windows.permute(list(range(d)) + [nl] + list(range(d, nl)) + [nl + 1])

  def meshgrid(self: Any, *others: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors, as torch.meshgrid: indexing "ij" gives grids of shape (len0, len1, ...),
    "xy" swaps the first two dims. Each grid is a broadcast view. Called as `a.meshgrid(b)` or `Tensor.meshgrid(a, b)`.

    >>> [g.tolist() for g in Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))]
    [[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]
    """
    ts: tuple[Tensor, ...] = (*self, *others) if isinstance(self, (list, tuple)) else (self, *others)
    if indexing not in ("ij", "xy"): raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in ts:
      if not isinstance(t, MovementMixin): raise TypeError(f"meshgrid: expected Tensors, got {type(t).__name__}")
      if t.ndim > 1: raise ValueError(f"meshgrid: expected 0-d or 1-d tensors, got shape {t.shape}")
    axes = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1: axes[0], axes[1] = 1, 0
    shape = [0] * len(ts)
    for t, a in zip(ts, axes): shape[a] = t.numel()
    return tuple(t.reshape([shape[a] if i == a else 1 for i in range(len(ts))]).expand(shape) for t, a in zip(ts, axes))

  def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
    """Split one dim into several of the given sizes (one may be -1).

    >>> Tensor.zeros(2, 6).unflatten(1, (3, -1)).shape
    (2, 3, 2)
    """
    d = self._resolve_axis(dim)
    sizes = tuple(sizes)
    if not sizes: raise ValueError("unflatten: sizes must not be empty")
    known = prod(s for s in sizes if s != -1)
    n = self.shape[d]
    if sizes.count(-1) > 1 or (-1 in sizes and (known == 0 or n % known)) or (-1 not in sizes and known != n):
      raise ValueError(f"unflatten: sizes {sizes} do not multiply to {n}, the size of dim {d} of {self.shape}")
    full = tuple(n // known if s == -1 else s for s in sizes)
    return self.reshape(self.shape[:d] + full + self.shape[d + 1:])

  def rearrange(self, formula: str, **sizes: int) -> Tensor:
    """Reorder, split and merge dims with einops notation: "b (h w) c -> b h w c". Parentheses group axes into one
    dim, "..." stands for the dims not named, "1" and "()" are dims of size 1; a split needs all its sizes but one
    as keywords. A view.

    >>> Tensor.zeros(2, 6, 5).rearrange("b (h w) c -> c b h w", h=2).shape
    (5, 2, 2, 3)
    """
    return _rearrange(cast("Tensor", self), formula, sizes)

  @classmethod
  def einsum(cls, formula: str, *operands: Tensor | Sequence[Tensor]) -> Tensor:
    """Sum of products over the subscripts of `formula`, as torch.einsum: "ij,jk->ik" is a matmul, a repeated
    subscript in one operand takes its diagonal ("ii->i"), without "->" the output is the subscripts that appear
    once, in alphabetical order; "..." broadcasts, as do dims of size 1. Operands are contracted two at a time,
    each pair in one kernel.

    >>> Tensor.einsum("ij,j->i", Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
    [3, 7]
    """
    one_list = len(operands) == 1 and isinstance(operands[0], (list, tuple))
    ops: list[Any] = list(cast(Sequence[Any], operands[0])) if one_list else list(operands)
    for t in ops:
      if not isinstance(t, cls): raise TypeError(f"einsum: expected Tensors, got {type(t).__name__}")
    return _einsum(formula, ops)

# ---- einops and einsum notation ----

def _rearrange_groups(side: str, formula: str) -> list[list[str]]:
  """One side of an einops pattern as groups of axis names, each group one dim; "1" is dropped (a group of no axes
  is a dim of size 1). A lone "..." is the group ["..."] (as many dims as it stands for), inside parentheses it is
  "(...)" (those dims merged into one)."""
  groups: list[list[str]] = []
  group: list[str] | None = None
  for tok in re.findall(r"\.\.\.|[()]|[^\s().]+|\S", side):
    if tok == "(":
      if group is not None: raise ValueError(f"rearrange: nested parentheses in {formula!r}")
      group = []
    elif tok == ")":
      if group is None: raise ValueError(f"rearrange: unbalanced parentheses in {formula!r}")
      groups.append(group)
      group = None
    elif tok != "..." and not tok.isidentifier() and tok != "1":
      raise ValueError(f"rearrange: {tok!r} in {formula!r} is not an axis name (only the number 1 can stand for one)")
    elif group is not None: group += {"1": [], "...": ["(...)"]}.get(tok, [tok])
    else: groups.append([] if tok == "1" else [tok])
  if group is not None: raise ValueError(f"rearrange: unbalanced parentheses in {formula!r}")
  return groups

def _rearrange_sides(formula: str) -> tuple[list[list[str]], list[list[str]]]:
  if formula.count("->") != 1: raise ValueError(f"rearrange: {formula!r} must have exactly one '->'")
  left, right = (_rearrange_groups(side, formula) for side in formula.split("->"))
  names = [[a for g in side for a in g if a not in ("...", "(...)")] for side in (left, right)]
  for side_names in names:
    if dups := sorted({a for a in side_names if side_names.count(a) > 1}):
      raise ValueError(f"rearrange: axis {dups[0]!r} appears twice on one side of {formula!r}")
  if unknown := sorted(set(names[1]) - set(names[0])):
    raise ValueError(f"rearrange: axes {unknown} on the right of {formula!r} are not on the left (unknown axis names)")
  if dropped := sorted(set(names[0]) - set(names[1])):
    raise ValueError(f"rearrange: axes {dropped} on the left of {formula!r} are missing on the right; rearrange keeps "
                     "every axis (reduce with sum or max, or index, to drop one)")
  if any("(...)" in g for g in left):
    raise ValueError(f"rearrange: '...' cannot be inside parentheses on the left of {formula!r}")
  ell = [sum(a in ("...", "(...)") for g in side for a in g) for side in (left, right)]
  if ell[0] != ell[1] or ell[0] > 1:
    raise ValueError(f"rearrange: '...' must appear once on each side or not at all in {formula!r}")
  return left, right

def _rearrange(x: Tensor, formula: str, sizes: dict[str, int]) -> Tensor:
  left, right = _rearrange_sides(formula)
  if unknown := sorted(set(sizes) - {a for g in left for a in g}):
    raise ValueError(f"rearrange: sizes given for axes {unknown} that {formula!r} does not name")
  has_ell = ["..."] in left
  named = len(left) - has_ell
  if named > x.ndim or (not has_ell and named != x.ndim):
    raise ValueError(f"rearrange: the left of {formula!r} names {named} dims, the tensor has shape {x.shape}")
  ell = [f"...{j}" for j in range(x.ndim - named)]
  axis_size: dict[str, int] = {}
  dim = 0
  for g in left:
    if g == ["..."]:
      axis_size.update(zip(ell, x.shape[dim:dim + len(ell)]))
      dim += len(ell)
    else:
      axis_size.update(_split_sizes(g, x.shape[dim], sizes, formula))
      dim += 1
  def spelled_out(g: list[str]) -> list[list[str]]:
    """A group with the dims of '...' named: a lone '...' is a group per dim, '(...)' puts them all in its group."""
    if g == ["..."]: return [[e] for e in ell]
    return [[b for a in g for b in (ell if a == "(...)" else [a])]]
  rgroups = [h for g in right for h in spelled_out(g)]
  lkeys = [a for g in left for h in spelled_out(g) for a in h]
  # split into single axes, reorder them, merge them into the right's groups
  single = x.reshape([axis_size[a] for a in lkeys])
  moved = single.permute([lkeys.index(a) for g in rgroups for a in g])
  return moved.reshape([prod(axis_size[a] for a in g) for g in rgroups])

def _split_sizes(group: list[str], n: int, sizes: dict[str, int], formula: str) -> dict[str, int]:
  """The size of each axis in a group that makes one dim of size n: given as keywords, at most one inferred."""
  unknown = [a for a in group if a not in sizes]
  known = prod(int(sizes[a]) for a in group if a in sizes)
  label = "(" + " ".join(group) + ")" if len(group) != 1 else group[0]
  if len(unknown) > 1:
    raise ValueError(f"rearrange: cannot infer the sizes of {unknown} in {label} of {formula!r}; give all but one "
                     "as keywords")
  if unknown and (known == 0 or n % known) or not unknown and known != n:
    raise ValueError(f"rearrange: a dim of size {n} cannot be split as {label} with sizes {sizes} ({formula!r})")
  return {a: int(sizes[a]) if a in sizes else n // known for a in group}

def _einsum_term(term: str, formula: str) -> list[str]:
  """The subscripts of one operand: letters, and "..." as one entry."""
  out: list[str] = []
  rest = term
  while rest:
    if rest.startswith("..."):
      if "..." in out: raise ArgumentError(f"einsum: '...' appears twice in {term!r} of {formula!r}")
      out.append("...")
      rest = rest[3:]
    elif rest[0].isascii() and rest[0].isalpha():
      out.append(rest[0])
      rest = rest[1:]
    else: raise ValueError(f"einsum: {rest[0]!r} in {formula!r} is not a subscript; subscripts are letters a-z, A-Z "
                           "and '...'")
  return out

def _einsum_labels(t: Tensor, term: list[str], i: int, formula: str) -> tuple[Tensor, list[Any]]:
  """An operand with its dims labeled (letters; ints -k for the k-th dim from the end of its '...'), repeated
  letters replaced by their diagonal."""
  letters = [s for s in term if s != "..."]
  n_ell = t.ndim - len(letters)
  if n_ell < 0 or ("..." not in term and n_ell):
    raise ValueError(f"einsum: operand {i} of shape {t.shape} has {t.ndim} dims, but its subscripts "
                     f"{''.join(term)!r} in {formula!r} name {len(letters)}")
  labels: list[Any] = [lab for s in term for lab in (range(-n_ell, 0) if s == "..." else [s])]
  for dup in [s for s in dict.fromkeys(letters) if letters.count(s) > 1]:
    p = labels.index(dup)
    q = labels.index(dup, p + 1)
    if t.shape[p] != t.shape[q]:
      raise ValueError(f"einsum: subscript {dup} repeats in operand {i} with sizes {t.shape[p]} and {t.shape[q]}")
    t = t.diagonal(0, p, q)
    labels = [lab for j, lab in enumerate(labels) if j not in (p, q)] + [dup]
  return t, labels

def _einsum_output(rhs: str | None, terms: list[list[str]], n_ell: int, formula: str) -> list[Any]:
  ell = list(range(-n_ell, 0))
  letters = [s for term in terms for s in term if s != "..."]
  if rhs is None: return ell + sorted(s for s in set(letters) if letters.count(s) == 1)
  out = _einsum_term(rhs, formula)
  for s in out:
    if s != "..." and out.count(s) > 1: raise ValueError(f"einsum: output subscript {s} appears twice in {formula!r}")
    if s != "..." and s not in letters:
      raise ValueError(f"einsum: output subscript {s} of {formula!r} is in no operand")
  return [lab for s in out for lab in (ell if s == "..." else [s])]

def _einsum(formula: str, operands: list[Tensor]) -> Tensor:
  eq = formula.replace(" ", "")
  if eq.count("->") > 1: raise ValueError(f"einsum: {formula!r} has more than one '->'")
  lhs, rhs = eq.split("->") if "->" in eq else (eq, None)
  terms = [_einsum_term(term, formula) for term in lhs.split(",")]
  if len(terms) != len(operands):
    raise ValueError(f"einsum: {formula!r} has {len(terms)} operands, but {len(operands)} tensors were given")
  labeled = [_einsum_labels(t, term, i, formula) for i, (t, term) in enumerate(zip(operands, terms))]
  seen: dict[Any, int] = {}
  for t, labels in labeled:
    for lab, n in zip(labels, t.shape):
      if seen.get(lab, 1) != 1 and n not in (1, seen[lab]):
        name = lab if isinstance(lab, str) else "..."
        raise ArgumentError(f"einsum: subscript {name} has sizes {seen[lab]} and {n}, which do not broadcast, in "
                            f"{formula!r}")
      if n != 1 or lab not in seen: seen[lab] = n
  n_ell = max(sum(isinstance(lab, int) for lab in labels) for _, labels in labeled)
  output = _einsum_output(rhs, terms, n_ell, formula)
  dt = functools.reduce(promote_types, [t.dtype for t in operands])
  dt = dtypes.default_int if dt.is_bool else dt  # bools are counted, as torch sums them
  acc, acc_labels = labeled[0][0].cast(dt), labeled[0][1]
  for k in range(len(labeled)):
    # what later steps need, the output's labels first: after the last step the result is in the output's order
    needed = list(dict.fromkeys(output + [lab for _, labels in labeled[k + 1:] for lab in labels]))
    if k: acc, acc_labels = _contract(acc, acc_labels, labeled[k][0].cast(dt), labeled[k][1], needed)
    else: acc, acc_labels = _contract(acc, acc_labels, None, [], needed)
  return acc

def _contract(a: Tensor, a_labels: list[Any], b: Tensor | None, b_labels: list[Any],
              needed: list[Any]) -> tuple[Tensor, list[Any]]:
  """a times b (broadcast by label), summed over the labels not needed later: one kernel. The kept labels come in the
  order of `needed`, the summed ones last, as in matmul, so that the reduce reads along them."""
  union = a_labels + [lab for lab in b_labels if lab not in a_labels]
  keep = [lab for lab in needed if lab in union]
  summed = [lab for lab in union if lab not in needed]
  order = keep + summed
  def aligned(t: Tensor, labels: list[Any]) -> Tensor:
    mine = [lab for lab in order if lab in labels]
    moved = t.permute([labels.index(lab) for lab in mine])
    return moved.reshape([t.shape[labels.index(lab)] if lab in labels else 1 for lab in order])
  prod_ = aligned(a, a_labels) if b is None else aligned(a, a_labels) * aligned(b, b_labels)
  if not summed: return prod_, keep
  return prod_.sum(tuple(range(len(keep), len(order))), dtype=prod_.dtype), keep
