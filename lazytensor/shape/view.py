"""Views: how a tensor's index space maps onto its buffer, composed from movement ops without ever copying.

A View is one affine map (shape, strides, offset) with an optional box of valid positions (the mask; the rest reads
as padding). A ShapeTracker is a stack of views: views[0] indexes the buffer and every later view indexes the
row-major flattening of the one below it. A view is pushed only when a reshape cannot be folded into the last one,
because each extra view costs a div/mod chain in every kernel that reads through it.
"""
from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np

from lazytensor.dtype import dtypes
from lazytensor.uop.ops import Ops, UOp
from lazytensor.uop.sint import (
  is_sym,
  sint,
  sint_eq,
  sint_le,
  sint_lt,
  sint_prod,
  smax,
  smin,
  ssimplify,
  sym_infer,
  unbind,
  variables,
)

Mask = tuple[tuple[sint, sint], ...]

def strides_for_shape(shape: tuple[sint, ...]) -> tuple[sint, ...]:
  """Row-major strides, 0 for size-1 dims: their index is always 0, so a canonical view does not depend on them."""
  return tuple(0 if s == 1 else span for s, span in zip(shape, _spans(shape)))

def _spans(shape: tuple[sint, ...]) -> tuple[sint, ...]:
  # the true row-major stride of every dim (size-1 dims included), the radix of the flat index
  return tuple(sint_prod(shape[d + 1:]) for d in range(len(shape)))

def _index(x: sint) -> UOp: return x if isinstance(x, UOp) else UOp.const(dtypes.index, x)

_TRUE = UOp.const(dtypes.bool, True)

def _and(a: UOp, b: UOp) -> UOp:
  # a validity that always holds is left out so that unmasked views produce no comparisons at all
  if a is _TRUE: return b
  return a if b is _TRUE else a & b

@dataclass(frozen=True)
class View:
  """One affine map from a shape to buffer indices; `mask` is the per-dim [start, end) box of valid positions.

  Any of its numbers may be symbolic (uop/sint.py: an expression of Variables, folded to a canonical node), which the
  view math here, the scheduler and the lowerer handle through the sint helpers. The fields are typed as the ints that
  every other reader (the heuristics, BEAM, packing and gather folding) sees: those only meet views at numbers
  (Kernel.at_max, and the scheduler leaves symbolic reduces unpacked)."""
  shape: tuple[int, ...]
  strides: tuple[int, ...]
  offset: int
  mask: tuple[tuple[int, int], ...] | None
  contiguous: bool

  @staticmethod
  def create(shape: tuple[sint, ...], strides: tuple[sint, ...] | None = None, offset: sint = 0,
             mask: Mask | None = None) -> View:
    """The canonical view, so that views describing the same map compare equal (and intern as one UOp arg)."""
    shape = tuple(shape)
    strides = strides_for_shape(shape) if strides is None else tuple(strides)
    assert len(strides) == len(shape) and \
      (mask is None or len(mask) == len(shape)), f"bad view {shape} {strides} {mask}"
    if 0 in shape: return _view(shape, (0,) * len(shape), 0, None, True)
    if mask is not None:
      mask = tuple(mask)
      if any(sint_le(end, start) for start, end in mask):
        return _view(shape, (0,) * len(shape), 0, ((0, 0),) * len(shape), False)
      # a dim with one valid index only ever reads that index: fold it into the offset
      one = [ssimplify(end - start) == 1 for start, end in mask]
      offset = ssimplify(offset + sum(start * st for (start, end), st, o in zip(mask, strides, one) if o))
      strides = tuple(0 if o else st for o, st in zip(one, strides))
      if all(m == (0, s) for m, s in zip(mask, shape)): mask = None
    strides = tuple(0 if s == 1 else st for s, st in zip(shape, strides))
    contiguous = offset == 0 and mask is None and strides == strides_for_shape(shape)
    return _view(shape, strides, offset, mask, contiguous)

  @property
  def masked_out(self) -> bool:
    """No position is valid (the canonical empty mask)."""
    return self.mask is not None and self.mask[0] == (0, 0)

  def valid_ranges(self) -> Mask: return self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
  def axis_masked(self, axis: int) -> bool: return self.mask is not None and self.mask[axis] != (0, self.shape[axis])

  def real_size(self) -> sint:
    """1 + the largest buffer index a valid position reads, 0 when none is valid."""
    if 0 in self.shape or self.masked_out: return 0
    ranges = zip(self.strides, self.valid_ranges())
    return ssimplify(1 + self.offset + sum(st * (end - 1) if sint_lt(0, st) else st * start
                                           for st, (start, end) in ranges))

  @property
  def symbolic(self) -> bool:
    """Whether a number of this view is an expression of Variables."""
    return is_sym(self.shape) or is_sym(self.strides) or isinstance(self.offset, UOp) or \
      (self.mask is not None and any(is_sym(m) for m in self.mask))

  def map_sints(self, fn: Callable[[sint], sint]) -> View:
    """This view with every number replaced by fn of it (binding or unbinding its Variables)."""
    mask = None if self.mask is None else tuple((fn(b), fn(e)) for b, e in self.mask)
    return View.create(tuple(fn(s) for s in self.shape), tuple(fn(st) for st in self.strides), fn(self.offset), mask)

  # ---- movement ops that a single view always expresses ----

  def permute(self, order: tuple[int, ...]) -> View:
    assert sorted(order) == list(range(len(self.shape))), f"permute: {order} is no order of {len(self.shape)} dims"
    mask = None if self.mask is None else tuple(self.mask[i] for i in order)
    return View.create(tuple(self.shape[i] for i in order), tuple(self.strides[i] for i in order), self.offset, mask)

  def expand(self, new_shape: tuple[sint, ...]) -> View:
    assert len(new_shape) == len(self.shape) and \
      all(s == 1 or sint_eq(s, ns) for s, ns in zip(self.shape, new_shape)), f"expand: {self.shape} -> {new_shape}"
    if self.masked_out: return View.create(new_shape, mask=((0, 0),) * len(new_shape))
    mask = None if self.mask is None else \
      tuple(m if s == ns else (0, ns) for m, s, ns in zip(self.mask, self.shape, new_shape))
    return View.create(new_shape, self.strides, self.offset, mask)

  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> View:
    assert len(arg) == len(self.shape) and all(sint_le(0, b) is not False and sint_le(0, a) is not False
                                               for b, a in arg), f"pad: {arg} for {self.shape}"
    mask = tuple((ssimplify(before + start), ssimplify(before + end))
                 for (before, _), (start, end) in zip(arg, self.valid_ranges()))
    offset = ssimplify(self.offset - sum(before * st for (before, _), st in zip(arg, self.strides)))
    return View.create(tuple(ssimplify(s + b + a) for s, (b, a) in zip(self.shape, arg)), self.strides, offset, mask)

  def grow(self, axis: int, size: int) -> View:
    """This view with `axis` lengthened to `size`, reading on with the same strides past its end (unmasked there
    where it was unmasked up to the end): a kernel that pads an output axis (PADTO) computes results there that it
    never stores, so what those positions read does not matter, as long as it is in bounds (codegen/lowerer.py)."""
    assert size >= self.shape[axis], f"grow: axis {axis} of {self.shape} to {size}"
    mask = None if self.mask is None else tuple((lo, size if hi == self.shape[axis] else hi) if i == axis else (lo, hi)
                                                for i, (lo, hi) in enumerate(self.mask))
    return View.create(self.shape[:axis] + (size,) + self.shape[axis + 1:], self.strides, self.offset, mask)

  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> View:
    assert len(arg) == len(self.shape) and all(sint_le(0, b) is not False and sint_le(b, e) is not False and
                                               sint_le(e, s) is not False for (b, e), s in zip(arg, self.shape)), \
      f"shrink: {arg} for {self.shape}"
    mask = tuple((ssimplify(smax(start, b) - b), ssimplify(smin(end, e) - b))
                 for (b, e), (start, end) in zip(arg, self.valid_ranges()))
    offset = ssimplify(self.offset + sum(b * st for (b, _), st in zip(arg, self.strides)))
    return View.create(tuple(ssimplify(e - b) for b, e in arg), self.strides, offset, mask)

  def flip(self, arg: tuple[bool, ...]) -> View:
    assert len(arg) == len(self.shape), f"flip: {arg} for {self.shape}"
    offset = ssimplify(self.offset + sum((s - 1) * st for f, s, st in zip(arg, self.shape, self.strides) if f))
    strides = tuple(ssimplify(-st) if f else st for f, st in zip(arg, self.strides))
    mask = None if self.mask is None else tuple((ssimplify(s - end), ssimplify(s - start)) if f else (start, end)
                                                for f, s, (start, end) in zip(arg, self.shape, self.mask))
    return View.create(self.shape, strides, offset, mask)

  # ---- reshape: split and merge dims, None when one view cannot say it ----

  def reshape(self, new_shape: tuple[sint, ...]) -> View | None:
    new_shape = tuple(new_shape)
    assert sint_eq(sint_prod(new_shape), sint_prod(self.shape)), \
      f"reshape: {self.shape} -> {new_shape} changes the size"
    if new_shape == self.shape: return self
    if self.contiguous: return View.create(new_shape)
    if self.masked_out: return _masked_out(new_shape)
    # size-1 dims carry nothing (stride 0, always valid): match the others in the fewest groups of equal size
    old: list[Dim] = [(s, st, m) for s, st, m in zip(self.shape, self.strides, self.valid_ranges()) if s != 1]
    new = [s for s in new_shape if s != 1]
    strides: list[sint] = []
    mask: list[tuple[sint, sint]] = []
    offset: sint = self.offset
    i, j = 0, 0
    while i < len(old):
      if (ends := _group(old, new, i, j)) is None: return None
      i_end, j_end = ends
      if (merged := _merge_dims(old[i:i_end])) is None: return None
      if (split := _split_dim(merged[1], merged[2], tuple(new[j:j_end]))) is None: return None
      offset += merged[3]
      strides += split[0]
      mask += split[1]
      i, j = i_end, j_end
    return View.create(new_shape, _with_ones(new_shape, [ssimplify(st) for st in strides], 0), ssimplify(offset),
                       _with_ones(new_shape, mask, (0, 1)))

  # ---- merging two views ----

  def __add__(self, other: View) -> View | None:
    """The one view equal to `other` read through this one (other indexes this view's row-major flattening)."""
    # only a grown view (View.grow) reads past the end: its reads there are not this view's, so it stays on top
    if sint_lt(sint_prod(self.shape), other.real_size()): return None
    if self.contiguous or 0 in other.shape: return other
    if self.masked_out or other.masked_out: return _masked_out(other.shape)
    # the affine merge below reasons about concrete numbers: symbolic views stay stacked (a div/mod chain)
    if self.symbolic or other.symbolic: return None
    # padding and flips of `other` are peeled off and put back, so that the core only sees non-negative strides
    if other.mask is not None:
      inner = self + other.shrink(other.mask)
      return None if inner is None else inner.pad(tuple((b, s - e) for (b, e), s in zip(other.mask, other.shape)))
    if any(flipped := tuple(cast(int, st) < 0 for st in other.strides)):
      inner = self + other.flip(flipped)
      return None if inner is None else inner.flip(flipped)
    return self._collapsed()._merge_affine(other)

  def _collapsed(self) -> View:
    # every run of adjacent dims that one dim can express, merged: fewer, larger dims make coordinates carry less often
    groups: list[list[Dim]] = []
    for dim in zip(self.shape, self.strides, self.valid_ranges()):
      if dim[0] == 1: continue
      if groups and _merge_dims(groups[-1] + [dim]) is not None: groups[-1].append(dim)
      else: groups.append([dim])
    collapsed = self.reshape(tuple(sint_prod(d[0] for d in g) for g in groups))
    assert collapsed is not None, "merging mergeable dims always reshapes"
    return collapsed

  def _merge_affine(self, other: View) -> View | None:
    # when every coordinate of self, (flat // span) % size, is affine in other's indices, so is the buffer index, and
    # self's mask becomes a condition on other's indices that must be a box (numbers only: __add__ keeps symbolic views
    # stacked)
    me, them = _ints(self), _ints(other)
    strides, offset = [0] * len(them.shape), me.offset
    mask = [(0, s) for s in them.shape]
    for d, (size, span, stride) in enumerate(zip(me.shape, _spans(me.shape), me.strides)):
      if stride == 0 and not self.axis_masked(d): continue  # a coordinate that moves nothing may wrap as it likes
      if (coord := _coordinate(them, cast(int, span), size)) is None: return None
      strides = [st + stride * step for st, step in zip(strides, coord[0])]
      offset += stride * coord[1]
      if self.axis_masked(d):
        if (narrowed := _narrow(mask, coord, me.valid[d], them.shape)) is None: return None
        mask = narrowed
    return View.create(other.shape, tuple(strides), offset, tuple(mask))

  def to_indexed_uops(self, idxs: list[UOp]) -> tuple[UOp, UOp]:
    """(buffer index, validity) of the position `idxs`, skipping the terms that are always 0 or always true."""
    assert len(idxs) == len(self.shape), f"{len(idxs)} indices for shape {self.shape}"
    if self.masked_out: return _index(0), _TRUE.const_like(False)
    terms = [i if st == 1 else i * st for i, st in zip(idxs, self.strides) if st != 0]
    idx = terms[0] if terms else _index(self.offset)
    for t in terms[1:]: idx = idx + t
    if terms and self.offset != 0: idx = idx + self.offset
    valid = _TRUE
    for i, (start, end), s in zip(idxs, self.valid_ranges(), self.shape):
      # a bound that Variables leave undecided is checked: it is right for every value
      if sint_lt(0, start) is not False: valid = _and(valid, i > start - 1)  # i >= start, as one comparison
      if sint_lt(end, s) is not False: valid = _and(valid, i < end)
    return idx, valid

def _view(shape: tuple[sint, ...], strides: tuple[sint, ...], offset: sint, mask: Mask | None,
          contiguous: bool) -> View:
  # the one place symbolic numbers enter a View's int-typed fields (see View)
  return View(cast(tuple[int, ...], shape), cast(tuple[int, ...], strides), cast(int, offset),
              cast(tuple[tuple[int, int], ...] | None, mask), contiguous)

def _masked_out(shape: tuple[sint, ...]) -> View | None:
  # nothing valid; a 0-d shape has no dim to carry the empty mask, so it needs a view of its own (None)
  return View.create(shape, mask=((0, 0),) * len(shape)) if shape else None

Dim = tuple[sint, sint, tuple[sint, sint]]  # (size, stride, valid range) of one dim

def _group(old: list[Dim], new: list[sint], i: int, j: int) -> tuple[int, int] | None:
  """The ends of the smallest groups old[i:i_end], new[j:j_end] of equal size, for reshape: concrete dims group by
  their products, a symbolic dim only with itself (None where it would have to merge or split)."""
  if isinstance(old[i][0], UOp) or isinstance(new[j], UOp): return (i + 1, j + 1) if old[i][0] is new[j] else None
  i_end, j_end = i + 1, j + 1
  while (a := math.prod(d[0] for d in old[i:i_end])) != (b := math.prod(new[j:j_end])):
    if a < b: i_end += 1
    else: j_end += 1
    if i_end > len(old) or j_end > len(new) or isinstance(old[i_end - 1][0], UOp) or isinstance(new[j_end - 1], UOp):
      return None
  return i_end, j_end

class _Ints(NamedTuple):
  """A view's numbers where none is symbolic: what merging two views reasons about."""
  shape: tuple[int, ...]
  strides: tuple[int, ...]
  offset: int
  valid: tuple[tuple[int, int], ...]

def _ints(v: View) -> _Ints:
  assert not v.symbolic, "a symbolic view has no numbers to merge"
  return _Ints._make((v.shape, v.strides, v.offset, v.valid_ranges()))

def _coordinate(view: _Ints, span: int, size: int) -> tuple[list[int], int] | None:
  """(flat // span) % size of the flat index an unmasked, non-negative-strided view produces, as
  (steps, const) with coordinate = sum(steps[k] * idx[k]) + const; None when it is not affine (it carries or wraps)."""
  reach = [s - 1 for s in view.shape]
  if view.offset % span + sum(st % span * r for st, r in zip(view.strides, reach)) >= span: return None
  steps, const = [st // span % size for st in view.strides], view.offset // span % size
  if const + sum(step * r for step, r in zip(steps, reach)) >= size: return None
  return steps, const

def _narrow(mask: list[tuple[int, int]], coord: tuple[list[int], int], valid: tuple[int, int],
            shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
  """`mask` narrowed to the positions whose coordinate (steps, const) lies in `valid`; None when that is no box."""
  steps, const = coord
  dims = sorted((k for k, step in enumerate(steps) if step != 0 and shape[k] > 1), key=lambda k: -steps[k])
  if valid[0] <= const and const + sum(steps[k] * (shape[k] - 1) for k in dims) < valid[1]: return mask
  # the coordinate is a mixed-radix number of the dims it moves with if every step is a whole number of the next dims
  ms = [steps[k] for k in dims]
  if any(a % b != 0 or a // b < shape[k] for a, b, k in zip(ms, ms[1:], dims[1:])): return None
  radix = tuple(shape[k] for k in dims[:1]) + tuple(a // b for a, b in itertools.pairwise(ms))
  unit = ms[-1] if ms else 1
  start, end = max(0, -((const - valid[0]) // unit)), min(math.prod(radix), -((const - valid[1]) // unit))
  if start >= end: return [(0, 0)] * len(mask) if mask else None  # nothing valid, which a 0-d view cannot say
  if (split := _split_dim(1, (start, end), radix)) is None: return None
  assert not is_sym(x for m in split[1] for x in m), "a concrete split has concrete bounds"
  narrowed = list(mask)
  for k, (b, e) in zip(dims, cast(tuple[tuple[int, int], ...], split[1])):
    narrowed[k] = (max(mask[k][0], b), min(mask[k][1], e))
  return narrowed

def _merge_dims(dims: list[Dim]) -> tuple[sint, sint, tuple[sint, sint], sint] | None:
  """Fold (size, stride, valid range) dims, outermost first, into one: (size, stride, valid range, offset change)."""
  size, stride, (start, end) = dims[0]
  delta: sint = 0
  for q, inner_stride, (i_start, i_end) in dims[1:]:
    if end - start == 1:
      # one valid outer index: the merged dim walks the inner one from that row on, whatever the outer stride was
      delta += start * stride - start * q * inner_stride
      start, end = start * q + i_start, start * q + i_end
    elif (i_start, i_end) == (0, q) and sint_eq(stride, inner_stride * q): start, end = start * q, end * q
    else: return None
    size, stride = size * q, inner_stride
  return size, stride, (start, end), delta

def _split_dim(stride: sint, valid: tuple[sint, sint], sizes: tuple[sint, ...]) -> tuple[list[sint], Mask] | None:
  """Split one dim into `sizes` (row-major); None when its valid range is not a box in the split dims. A symbolic dim
  is never split (reshape groups it with itself alone)."""
  if len(sizes) == 1: return [stride], (valid,)
  if is_sym(valid): return None
  start, end = cast(tuple[int, int], valid)
  mask: list[tuple[sint, sint]] = []
  for span in cast(tuple[int, ...], _spans(sizes)):
    if start % span == 0 and end % span == 0:
      mask.append((start // span, end // span))
      start, end = 0, span
    elif start // span == (end - 1) // span:
      mask.append((start // span, start // span + 1))
      start, end = start % span, start % span + end - start
    else: return None
  return [stride * span for span in _spans(sizes)], tuple(mask)

def _with_ones(shape: tuple[sint, ...], values: list, one: object) -> tuple:
  # put back the entries of size-1 dims that reshape set aside
  it = iter(values)
  return tuple(one if s == 1 else next(it) for s in shape)

def _unflatten(flat: UOp, shape: tuple[sint, ...]) -> list[UOp]:
  # the row-major coordinates of a flat index; the outermost needs no modulo because a valid flat index is in range
  first = next((d for d, s in enumerate(shape) if s != 1), len(shape))
  out = []
  for d, (s, span) in enumerate(zip(shape, _spans(shape))):
    if s == 1: out.append(_index(0))
    else:
      x = flat if span == 1 else flat // span
      out.append(x if d == first else x % s)
  return out

@dataclass(frozen=True)
class ShapeTracker:
  """A stack of views, applied outermost-last: views[-1] has the tensor's shape, views[0] indexes the buffer."""
  views: tuple[View, ...]

  def __post_init__(self) -> None:
    assert self.views, "a ShapeTracker needs at least one view"
    # the arg of every VIEW node: hashed once, not at each lookup in the intern table
    object.__setattr__(self, "_hash", hash(self.views))
  def __hash__(self) -> int: return self._hash  # type: ignore[attr-defined]

  @staticmethod
  def from_shape(shape: tuple[sint, ...]) -> ShapeTracker: return _from_shape(tuple(shape))

  @property
  def shape(self) -> tuple[int, ...]: return self.views[-1].shape
  @property
  def size(self) -> int: return cast(int, sint_prod(self.shape))  # symbolic where the shape is (View says why)

  # ---- Variables ----

  @functools.cached_property
  def symbolic(self) -> bool:
    """Whether a number of a view is an expression of Variables (bound or not)."""
    return any(v.symbolic for v in self.views)

  def variables(self) -> list[UOp]:
    """The Variables the views depend on, each once, in the order met."""
    seen: dict[UOp, None] = {}
    for v in self.views:
      for x in (*v.shape, *v.strides, v.offset, *(b for m in v.mask or () for b in m)):
        seen.update(dict.fromkeys(variables(x)))
    return list(seen)

  def map_sints(self, fn: Callable[[sint], sint]) -> ShapeTracker:
    return ShapeTracker(tuple(v.map_sints(fn) for v in self.views)) if self.symbolic else self

  def unbind(self) -> tuple[ShapeTracker, dict[UOp, int]]:
    """The tracker with its BINDs replaced by their Variables, and the values they were bound to."""
    if not self.symbolic: return self, {}
    vals: dict[UOp, int] = {}
    def strip(x: sint) -> sint:
      x, found = unbind(x)
      vals.update(found)
      return x
    return self.map_sints(strip), vals

  def substitute(self, fn: Callable[[UOp], UOp]) -> ShapeTracker:
    """The tracker with each symbolic number x replaced by fn(x) (e.g. its Variables bound)."""
    return self.map_sints(lambda x: ssimplify(fn(x)) if isinstance(x, UOp) else x)

  def bind(self, var_vals: dict[UOp, int]) -> ShapeTracker:
    """The tracker with each of its Variables that var_vals holds bound to its value there (a BIND), as the shape of
    a realized tensor holds it."""
    if not self.symbolic or not var_vals: return self
    return self.substitute(lambda x: x.substitute({v: v.bind(var_vals[v]) for v in variables(x) if v in var_vals}))

  def concrete(self, var_vals: dict[UOp, int]) -> ShapeTracker:
    """The tracker at the values `var_vals` gives its Variables (BINDs at their own)."""
    return self.map_sints(lambda x: sym_infer(x, var_vals))
  @property
  def contiguous(self) -> bool: return len(self.views) == 1 and self.views[0].contiguous

  # ---- movement ops ----

  def _with_last(self, view: View) -> ShapeTracker:
    # a changed last view may now fold into the ones below (e.g. a reshape back to the original shape)
    st = ShapeTracker(self.views[:-1] + (view,))
    return st.simplify() if len(st.views) > 1 else st

  def reshape(self, new_shape: tuple[sint, ...]) -> ShapeTracker:
    if (view := self.views[-1].reshape(new_shape)) is not None: return self._with_last(view)
    return ShapeTracker(self.views + (View.create(new_shape),))

  def permute(self, order: tuple[int, ...]) -> ShapeTracker: return self._with_last(self.views[-1].permute(order))
  def expand(self, new_shape: tuple[sint, ...]) -> ShapeTracker:
    return self._with_last(self.views[-1].expand(new_shape))
  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> ShapeTracker: return self._with_last(self.views[-1].pad(arg))
  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> ShapeTracker:
    return self._with_last(self.views[-1].shrink(arg))
  def grow(self, axis: int, size: int) -> ShapeTracker: return self._with_last(self.views[-1].grow(axis, size))
  def flip(self, arg: tuple[bool, ...]) -> ShapeTracker: return self._with_last(self.views[-1].flip(arg))

  def __add__(self, other: ShapeTracker) -> ShapeTracker:
    """`other` read through self: other.views[0] indexes a tensor of shape self.shape."""
    return ShapeTracker(self.views + other.views).simplify()

  def simplify(self) -> ShapeTracker:
    """Fold adjacent views into one wherever the single view is the same map."""
    views = self.views
    while len(views) > 1:
      for i in range(len(views) - 2, -1, -1):
        if (merged := views[i] + views[i + 1]) is not None:
          views = views[:i] + (merged,) + views[i + 2:]
          break
      else: break
    return ShapeTracker(views)

  # ---- lowering ----

  def to_indexed_uops(self, idxs: list[UOp]) -> tuple[UOp, UOp]:
    """(buffer index, validity) for one index UOp per dim of self.shape."""
    idx, valid = self.views[-1].to_indexed_uops(idxs)
    for view in reversed(self.views[:-1]):
      idx, view_valid = view.to_indexed_uops(_unflatten(idx, view.shape))
      valid = _and(valid, view_valid)
    return idx, valid

  def gather(self, flat: np.ndarray) -> np.ndarray:
    """The values this tracker reads from the 1-d array `flat` (0 where it reads padding), computed on the host with
    numpy: what printing a realized view shows without running a kernel."""
    pos, valid = self.positions()
    return np.where(valid, flat[pos] if flat.size else 0, 0).astype(flat.dtype)

  def positions(self) -> tuple[np.ndarray, np.ndarray]:
    """Each element's position in the 1-d memory this tracker reads, and whether it reads one (0 where it reads
    padding), computed on the host with numpy (of a tracker at its Variables' values: ShapeTracker.concrete)."""
    shape = _ints(self.views[-1]).shape
    pos = np.arange(math.prod(shape)).reshape(shape)  # each element's row-major position in the outermost view
    valid = np.ones(shape, dtype=bool)
    for view in map(_ints, reversed(self.views)):
      # a padded position's index may lie outside the view below: it reads nothing, so any valid index stands in
      coords = np.unravel_index(np.where(valid, pos, 0), view.shape) if view.shape else ()
      for c, (lo, hi) in zip(coords, view.valid): valid &= (c >= lo) & (c < hi)
      pos = view.offset + sum((c * st for c, st in zip(coords, view.strides)), np.zeros(shape, dtype=np.int64))
    return np.where(valid, pos, 0), valid

  # ---- queries for the optimizer ----

  def real_size(self) -> int:
    """The buffer size this tracker needs: exact for one view, an upper bound through unmerged reshapes (symbolic where
    the view is: View says why it is typed int)."""
    if any(v.masked_out for v in self.views) or self.size == 0: return 0
    return cast(int, self.views[0].real_size())

  def real_strides(self) -> tuple[int | None, ...]:
    """The buffer stride of each dim, None where a mask or a carry between reshaped dims leaves it undefined, or where
    it is symbolic."""
    return tuple(st if not isinstance(st := self._real_stride(axis), UOp) else None for axis in range(len(self.shape)))

  def unit_stride_axes(self) -> list[int]: return [i for i, st in enumerate(self.real_strides()) if st == 1]

  def axis_is_masked(self, axis: int) -> bool:
    """Whether validity may depend on this axis (conservative: True when a reshape hides the answer)."""
    last = self.views[-1]
    if last.axis_masked(axis): return True
    if last.strides[axis] == 0 or len(self.views) == 1: return False
    if (traced := self._trace_axis(axis)) is None: return any(v.mask is not None for v in self.views[:-1])
    return ShapeTracker(self.views[:-1]).axis_is_masked(traced[0])

  def _real_stride(self, axis: int) -> sint | None:
    last = self.views[-1]
    if last.axis_masked(axis): return None
    if last.strides[axis] == 0 or len(self.views) == 1: return last.strides[axis]
    if (traced := self._trace_axis(axis)) is None: return None
    below = ShapeTracker(self.views[:-1])._real_stride(traced[0])
    return None if below is None else below * traced[1]

  def _trace_axis(self, axis: int) -> tuple[int, int] | None:
    """(dim of the view below, steps there per step here) when walking `axis` of the last view moves only that one
    coordinate below; None when the row-major unflattening can carry into another coordinate."""
    if self.symbolic: return None
    view, below = _ints(self.views[-1]), _ints(self.views[-2]).shape
    ranges, spans, stride = view.valid, cast(tuple[int, ...], _spans(below)), view.strides[axis]
    if not (dims := [d for d, s in enumerate(below) if s > 1 and stride % spans[d] == 0]): return None
    d = dims[0]
    unit, block = spans[d], spans[d] * below[d]
    first = view.offset + sum(st * start for st, (start, _) in zip(view.strides, ranges))
    # the other dims must either move whole blocks (digits above d) or stay below one unit without carrying
    low_min = low_max = first % unit
    for k, (st, (start, end)) in enumerate(zip(view.strides, ranges)):
      if k != axis and st % block != 0:
        low_min, low_max = low_min + min(0, st * (end - start - 1)), low_max + max(0, st * (end - start - 1))
    steps = stride // unit
    digit, reach = (first // unit) % below[d], steps * (ranges[axis][1] - ranges[axis][0] - 1)
    if low_min < 0 or low_max >= unit or digit + min(0, reach) < 0 or digit + max(0, reach) >= below[d]: return None
    return d, steps

def ast_variables(ast: UOp) -> list[UOp]:
  """The Variables of a kernel AST's views, in the order of their names: the kernel's scalar arguments after its
  numbered ones (schedule/scheduler._item, codegen/lowerer), each value passed at every launch."""
  found = {v for u in ast.toposort if u.op is Ops.VIEW and u.arg.symbolic for v in u.arg.variables()}
  return sorted(found, key=lambda v: v.arg)

def concrete_ast(ast: UOp, var_vals: dict[UOp, int]) -> UOp:
  """The AST with its views at the values var_vals gives their Variables."""
  views = {u: u.replace(arg=u.arg.concrete(var_vals)) for u in ast.toposort if u.op is Ops.VIEW and u.arg.symbolic}
  return ast.substitute(views) if views else ast

@functools.lru_cache(maxsize=4096)
def _from_shape(shape: tuple[sint, ...]) -> ShapeTracker:
  # trackers are immutable, and every kernel and tensor creation asks for the dense one of its shape
  return ShapeTracker((View.create(shape),))
