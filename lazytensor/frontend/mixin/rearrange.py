"""Views and copies that rearrange elements, built from the primitive moves of movement.py: repeats and tiles, rolls
and rotations (copies, as torch's), strided takes and sliding windows (unfold, and the pooling and convolution windows
of nn.py), diagonals, pixel shuffles, meshgrid and einops' rearrange.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from lazytensor.frontend.mixin.movement import MovementMixin, _is_int
from lazytensor.helpers import ArgumentError, flatten, make_tuple, prod
from lazytensor.uop.ops import Ops

TensorT = TypeVar("TensorT", bound="MovementMixin")

if TYPE_CHECKING:
  from typing import Self

def _window_width(i: int, k: int, s: int, d: int, o: int) -> int:
  # the repeated row must hold every window start: w >= o*s and w = i + d (mod i) so that row a begins at a*d
  w = i + d
  if o * s > w: w += i * math.ceil((o * s - w) / i)
  return w

def window_counts(spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                  dilation: Sequence[int]) -> list[int]:
  """How many windows fit along each of the trailing dims `spatial`."""
  outs = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(spatial, kernel, stride, dilation)]
  if any(o <= 0 for o in outs):
    raise ArgumentError(f"window {tuple(kernel)} (dilation {tuple(dilation)}) is larger than input {tuple(spatial)}")
  return outs

def window_moves(shape: tuple[int, ...], kernel: Sequence[int], stride: Sequence[int],
                 dilation: Sequence[int]) -> list[tuple[Ops, tuple]]:
  """The movements that make sliding windows over the trailing dims of a tensor of `shape`, (..., *i) -> (..., *o, *k)
  (MovementMixin._moves applies them): the input is repeated along each dim and re-read with a row length of i+d,
  which shifts each repetition by d: element (o, k) of a dim lands on x[o*s + k*d]."""
  nk = len(kernel)
  lead, spatial = tuple(shape[:-nk]), shape[-nk:]
  nl, keep = len(lead), tuple((0, s) for s in shape[:-nk])
  outs = window_counts(spatial, kernel, stride, dilation)
  widths = [_window_width(i, k, s, d, o) for i, k, s, d, o in zip(spatial, kernel, stride, dilation, outs)]
  reps = [math.ceil(k * w / i) for i, k, w in zip(spatial, kernel, widths)]
  return [(Ops.RESHAPE, (*lead, *flatten((1, i) for i in spatial))),
          (Ops.EXPAND, (*lead, *flatten((r, i) for r, i in zip(reps, spatial)))),
          (Ops.RESHAPE, (*lead, *[r * i for r, i in zip(reps, spatial)])),
          (Ops.SHRINK, (*keep, *[(0, k * w) for k, w in zip(kernel, widths)])),
          (Ops.RESHAPE, (*lead, *flatten(zip(kernel, widths)))),
          (Ops.SHRINK, (*keep, *flatten(((0, k), (0, o * s)) for k, o, s in zip(kernel, outs, stride)))),
          (Ops.RESHAPE, (*lead, *flatten((k, o, s) for k, o, s in zip(kernel, outs, stride)))),
          (Ops.SHRINK, (*keep, *flatten(((0, k), (0, o), (0, 1)) for k, o in zip(kernel, outs)))),
          (Ops.RESHAPE, (*lead, *flatten(zip(kernel, outs)))),
          (Ops.PERMUTE, (*range(nl), *[nl + 2 * j + 1 for j in range(nk)], *[nl + 2 * j for j in range(nk)]))]

class RearrangeMixin(MovementMixin):
  """Tensor's repeats, rolls, rotations, windows, diagonals, pixel shuffles and einops' rearrange: on the movement
  mixin."""
  __slots__ = ()

  def repeat(self, *repeats: Any) -> Self:
    """Tile the tensor `repeats[i]` times along each dimension; a copy, as torch's repeat.

    >>> Tensor([1, 2]).repeat(2).tolist()
    [1, 2, 1, 2]
    """
    if len(repeats) == 1 and isinstance(repeats[0], (tuple, list)): repeats = tuple(repeats[0])
    if len(repeats) < self.ndim: raise ValueError(f"repeat: {len(repeats)} repeats for a {self.ndim}-d tensor")
    if any(not isinstance(r, (int, np.integer)) or r < 0 for r in repeats):
      raise ValueError(f"repeat: repeats must be non-negative ints, got {repeats}")
    return self._repeated(tuple(int(r) for r in repeats))._copy_result()

  def _repeated(self, repeats: tuple[int, ...]) -> Self:
    """repeat as a view (an expand between reshapes)."""
    base = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    new_shape = tuple(r * s for r, s in zip(repeats, base.shape))
    interleaved = base.reshape(flatten((1, s) for s in base.shape))
    expanded = interleaved.expand(flatten((r, s) for r, s in zip(repeats, base.shape)))
    return expanded.reshape(new_shape)

  def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Self:
    """Shift elements along dims, wrapping around (a copy, as torch.roll). With dims None the tensor rolls as if
    flattened (shifts is then one int, or a sequence of one).

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).roll(1, 1).tolist(), Tensor([[1, 2, 3], [4, 5, 6]]).roll(1).tolist()
    ([[3, 1, 2], [6, 4, 5]], [[6, 1, 2], [3, 4, 5]])
    """
    shift_list = make_tuple(shifts, 1)
    if dims is None:
      if len(shift_list) != 1: raise ArgumentError(f"roll: without dims, shifts must be one int, got {shifts}")
      return self.flatten().roll(shift_list[0], 0).reshape(self.shape)._copy_result()
    dim_list = make_tuple(dims, 1)
    if len(shift_list) != len(dim_list):
      raise ArgumentError(f"roll: {len(shift_list)} shifts {shift_list} for {len(dim_list)} dims {dim_list}")
    x = self
    for s, dim in zip(shift_list, dim_list):
      d = self._resolve_axis(dim)
      n = x.shape[d]
      if n == 0 or s % n == 0: continue
      # the tensor twice over along d (a view), read from n - s
      twice = x._repeated(tuple(2 if i == d else 1 for i in range(x.ndim)))
      x = twice.shrink([(n - s % n, 2 * n - s % n) if i == d else None for i in range(x.ndim)])
    return x._copy_result()

  def _take_strided(self, dim: int, start: int, stop: int, step: int) -> Self:
    """Elements start, start+step, ... (< stop) of one dimension, as a view."""
    x = self
    n = x.shape[dim]
    count = max(0, -(-(stop - start) // step)) if step > 0 else max(0, -(-(start - stop) // -step))
    if count == 0: return x.shrink([(0, 0) if j == dim else None for j in range(x.ndim)])
    if step < 0:
      x = x._flip_view({dim})
      start, step = n - 1 - start, -step
    x = x.shrink([(start, start + (count - 1) * step + 1) if j == dim else None for j in range(x.ndim)])
    if step == 1: return x
    # pad to count*step, split the dim into (count, step) and keep column 0
    x = x._pad_zeros([(0, count * step - x.shape[dim]) if j == dim else (0, 0) for j in range(x.ndim)])
    x = x.reshape(*x.shape[:dim], count, step, *x.shape[dim + 1:])
    x = x.shrink([(0, 1) if j == dim + 1 else None for j in range(x.ndim)])
    return x.reshape(*x.shape[:dim], count, *x.shape[dim + 2:])

  def _pool_windows(self, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Self:
    """Sliding windows over the trailing dims as a view: (..., *i) -> (..., *o, *k), without copying (window_moves)."""
    return self._moves(window_moves(self.shape, kernel, stride, dilation))

  def unfold(self, dimension: int, size: int, step: int) -> Self:
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
    starts = shifted._take_strided(len(lead) + 1, 0, n - size + 1, int(step))       # (..., size, count)
    windows = starts.transpose(-1, -2)                                                # (..., count, size)
    nl = len(lead)
    return windows.permute(list(range(d)) + [nl] + list(range(d, nl)) + [nl + 1])

  def meshgrid(self: Any, *others: TensorT, indexing: str = "ij") -> tuple[TensorT, ...]:
    """Coordinate grids from 1-D tensors, as torch.meshgrid: indexing "ij" gives grids of shape (len0, len1, ...),
    "xy" swaps the first two dims. Each grid is a broadcast view. Called as `a.meshgrid(b)` or `Tensor.meshgrid(a, b)`.

    >>> [g.tolist() for g in Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))]
    [[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]
    """
    ts: tuple[TensorT, ...] = (*self, *others) if isinstance(self, (list, tuple)) else (self, *others)
    if indexing not in ("ij", "xy"): raise ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in ts:
      if not isinstance(t, MovementMixin): raise TypeError(f"meshgrid: expected Tensors, got {type(t).__name__}")
      if t.ndim > 1: raise ValueError(f"meshgrid: expected 0-d or 1-d tensors, got shape {t.shape}")
    axes = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1: axes[0], axes[1] = 1, 0
    shape = [0] * len(ts)
    for t, a in zip(ts, axes): shape[a] = t.numel()
    return tuple(t.reshape([shape[a] if i == a else 1 for i in range(len(ts))]).expand(shape) for t, a in zip(ts, axes))

  def rearrange(self, formula: str, **sizes: int) -> Self:
    """Reorder, split and merge dims with einops notation: "b (h w) c -> b h w c". Parentheses group axes into one
    dim, "..." stands for the dims not named, "1" and "()" are dims of size 1; a split needs all its sizes but one
    as keywords. A view.

    >>> Tensor.zeros(2, 6, 5).rearrange("b (h w) c -> c b h w", h=2).shape
    (5, 2, 2, 3)
    """
    return _rearrange(self, formula, sizes)

  def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
    """The `offset`-th diagonal of the dims dim1 and dim2, as a view; it becomes the last dim, as in torch.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).diagonal(1).tolist()
    [2, 6]
    """
    a, b = self._resolve_axis(dim1), self._resolve_axis(dim2)
    if a == b: raise ArgumentError(f"diagonal: dim1 and dim2 must differ, both are dim {a}")
    if not _is_int(offset): raise TypeError(f"diagonal: offset must be an int, got {offset!r}")
    x = self.permute([d for d in range(self.ndim) if d not in (a, b)] + [a, b])
    n, m = x.shape[-2:]
    size = max(0, min(n + min(offset, 0), m - max(offset, 0)))
    r0, c0 = max(0, -offset), max(0, offset)
    sq = x.shrink([None] * (x.ndim - 2) + [(min(r0, n), min(r0, n) + size), (min(c0, m), min(c0, m) + size)])
    # in the flattened square, element (i, i) is at i * (size + 1): rows of size + 1 have it in column 0
    lead = sq.shape[:-2]
    flat = sq.reshape(*lead, size * size)._pad_zeros([(0, 0)] * len(lead) + [(0, size)])
    return flat.reshape(*lead, size, size + 1).shrink([None] * len(lead) + [None, (0, min(1, size + 1))]) \
      .reshape(*lead, size)

  def tile(self, *dims: Any) -> Self:
    """Repeat the tensor dims[i] times along each dim, as torch.tile (a copy): unlike repeat, fewer entries than dims
    are padded with 1s in front (so they tile the last dims).

    >>> Tensor([[1, 2], [3, 4]]).tile(2).tolist()
    [[1, 2, 1, 2], [3, 4, 3, 4]]
    """
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)): dims = tuple(dims[0])
    return self.repeat((1,) * (self.ndim - len(dims)) + tuple(dims))

  def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Self:
    """Rotate by 90 degrees k times in the plane of `dims`, from the first dim toward the second, as torch.rot90
    (a flip and a transpose, as a copy).

    >>> Tensor([[1, 2], [3, 4]]).rot90().tolist()
    [[2, 4], [1, 3]]
    """
    if not _is_int(k): raise TypeError(f"rot90: k must be an int, got {k!r}")
    if len(dims) != 2: raise ValueError(f"rot90: dims must name 2 dims, got {dims}")
    a, b = (self._resolve_axis(d) for d in dims)
    if a == b: raise ValueError(f"rot90: dims {tuple(dims)} name the same dim twice")
    turns = int(k) % 4
    if turns == 0: return self._copy_result()
    if turns == 2: return self._flip_view({a, b})._copy_result()
    turned = self._flip_view({b}).transpose(a, b) if turns == 1 else self.transpose(a, b)._flip_view({b})
    return turned._copy_result()

  def pixel_shuffle(self, upscale_factor: int) -> Self:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r): each group of r*r channels becomes an r x r block of pixels, as
    torch.nn.functional.pixel_shuffle (sub-pixel convolution); r is upscale_factor. A reshape and a permute.

    >>> Tensor.arange(4).reshape(1, 4, 1, 1).pixel_shuffle(2).tolist()
    [[[[0, 1], [2, 3]]]]
    """
    r = upscale_factor
    if not _is_int(r) or r < 1: raise ValueError(f"pixel_shuffle: upscale_factor must be a positive int, got {r!r}")
    if self.ndim < 3 or self.shape[-3] % (r * r):
      raise ValueError(f"pixel_shuffle: input of shape {self.shape} needs (*, C*{r * r}, H, W)")
    *lead, c, h, w = self.shape
    n = len(lead)
    x = self.reshape(*lead, c // (r * r), r, r, h, w)
    return x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2).reshape(*lead, c // (r * r), h * r, w * r)

  def pixel_unshuffle(self, downscale_factor: int) -> Self:
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W): the inverse of pixel_shuffle, as torch.nn.functional.pixel_unshuffle.

    >>> Tensor.arange(4).reshape(1, 1, 2, 2).pixel_unshuffle(2).reshape(-1).tolist()
    [0, 1, 2, 3]
    """
    r = downscale_factor
    if not _is_int(r) or r < 1:
      raise ValueError(f"pixel_unshuffle: downscale_factor must be a positive int, got {r!r}")
    if self.ndim < 3 or self.shape[-2] % r or self.shape[-1] % r:
      raise ValueError(f"pixel_unshuffle: input of shape {self.shape} needs (*, C, H*{r}, W*{r})")
    *lead, c, h, w = self.shape
    n = len(lead)
    x = self.reshape(*lead, c, h // r, r, w // r, r)
    return x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3).reshape(*lead, c * r * r, h // r, w // r)


# ---- einops notation ----

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

def _rearrange(x: TensorT, formula: str, sizes: dict[str, int]) -> TensorT:
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
