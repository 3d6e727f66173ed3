"""What pads and joins tensors: `pad` (a fill value, or the edge modes), `pad_to`, `cat` and `stack`."""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from lazytensor.dtype import dtypes, promote_types
from lazytensor.frontend.mixin.elementwise import ElementwiseMixin
from lazytensor.frontend.mixin.movement import MovementMixin
from lazytensor.helpers import ArgumentError, NotSupportedError

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="JoinMixin")

class JoinMixin(ElementwiseMixin):
  """Padding and joining: on the elementwise mixin, whose where and casts they are built from."""
  __slots__ = ()

  def pad(self, padding: Sequence[Any], mode: str = "constant", value: float | None = None) -> Self:
    """Pad each dim: `padding` holds (before, after) per dim, or a flat torch-style list from the last dim; negative
    amounts crop. Modes as torch: "constant" (with `value`, default 0), "reflect" (mirrored, without repeating the
    edge), "replicate" (the edge repeated) and "circular" (wrapped around). All are views and selects of views; the
    result is a copy, as torch's: writes into it do not reach self.

    >>> Tensor([1, 2, 3]).pad((2, 1)).tolist(), Tensor([1, 2, 3]).pad((2, 1), mode="reflect").tolist()
    ([0, 0, 1, 2, 3, 0], [3, 2, 1, 2, 3, 2])
    """
    pairs = self._pad_pairs(padding)
    if mode == "constant": return self._pad_constant(pairs, 0.0 if value is None else value)._copy_result()
    if mode not in ("reflect", "replicate", "circular"):
      raise NotSupportedError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if value is not None: raise ValueError(f"pad: mode {mode!r} takes no value, got value={value}")
    x = self
    for d, (b, a) in enumerate(pairs):
      if (b, a) != (0, 0): x = x._pad_edge(d, b, a, mode)
    return x._copy_result()

  def _pad_constant(self, pairs: list[tuple[int, int]], value: float) -> Self:
    ret = self._pad_zeros(pairs)
    if value == 0 or all(b <= 0 and a <= 0 for b, a in pairs): return ret
    # the same padding of ones marks where the values are (negative amounts crop both alike)
    mask = type(self).full(self.shape, 1, dtype=dtypes.bool, device=self.device)._pad_zeros(pairs)
    # the fill takes the tensor's dtype, as torch
    return mask.where(ret, type(ret).full(ret.shape, value, dtype=ret.dtype, device=ret.device))

  def _pad_edge(self, d: int, before: int, after: int, mode: str) -> Self:
    """One dim padded in a mode that repeats the tensor's own values, with negative amounts cropping as torch does:
    reflect and replicate pad the whole dim with its own edges and then crop; circular crops first and wraps what
    is left."""
    def along(start: int, end: int, t: Self) -> Self:
      return t.shrink([(start, end) if i == d else None for i in range(t.ndim)])
    x, n = self, self.shape[d]
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
      return along(n - b, 2 * n + a, x._repeated(tuple(3 if i == d else 1 for i in range(x.ndim))))
    if mode == "reflect" and max(b, a) >= n:
      raise ValueError(f"pad: reflect padding ({before}, {after}) of dim {d} must be less than its size {n} "
                       f"(shape {self.shape})")
    def edge(t: Self, at: int, count: int) -> Self:
      return along(at, at + 1, t).expand([count if i == d else s for i, s in enumerate(t.shape)])
    left = along(1, b + 1, x)._flip_view({d}) if mode == "reflect" else edge(x, 0, b)
    right = along(n - 1 - a, n - 1, x)._flip_view({d}) if mode == "reflect" else edge(x, n - 1, a)
    padded = type(self).cat(*[t for t in (left, x, right) if t.shape[d]], dim=d)
    return along(max(0, -before), n + b + a - max(0, -after), padded)

  def pad_to(self, *shape: Any) -> Self:
    """Pad the end of each dim with zeros up to `shape` (None keeps a dim).

    >>> Tensor([[1, 2]]).pad_to(2, 3).tolist()
    [[1, 2, 0], [0, 0, 0]]
    """
    new = self._target_shape("pad_to", shape)
    if any(ns < s for ns, s in zip(new, self.shape)): raise ValueError(f"pad_to: cannot pad {self.shape} to {shape}")
    return self.pad([(0, ns - s) for ns, s in zip(new, self.shape)])

  def cat(self: Any, *others: TensorT, dim: int = 0) -> TensorT:
    """Join tensors along an existing dimension (each is padded into place and selected there: one fused kernel); a
    copy, as torch.cat, even of one tensor. Called as `a.cat(b, c)`, `Tensor.cat(a, b, c)` or `Tensor.cat([a, b, c])`.

    >>> Tensor([1]).cat(Tensor([2, 3])).tolist()
    [1, 2, 3]
    """
    ts: tuple[TensorT, ...] = (*self, *others) if isinstance(self, (list, tuple)) else (self, *others)
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
    pads = [[(offsets[i], total - offsets[i + 1]) if j == d else (0, 0) for j in range(first.ndim)]
            for i in range(len(ts))]
    out = ts[0].cast(dt)._pad_zeros(pads[0])
    for t, pad in zip(ts[1:], pads[1:]): out = out._merge_disjoint(t.cast(dt), pad)
    return out._copy_result()

  def _merge_disjoint(self, part: Self, pad: list[tuple[int, int]]) -> Self:
    """self with `part`, padded by `pad`, in the place that self leaves empty. A select, not a sum: 0.0 + -0.0 is
    0.0, and a sum would lose the sign of a joined -0.0. Bools are ORed."""
    placed = part._pad_zeros(pad)
    if self.dtype.is_bool: return self | placed
    inside = type(self).full(part.shape, True, dtype=dtypes.bool, device=self.device)._pad_zeros(pad)
    return inside.where(placed, self)

  def stack(self: Any, *others: TensorT, dim: int = 0) -> TensorT:
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
