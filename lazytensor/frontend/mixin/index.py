"""Indexing: `x[...]`, the writes `x[...] = v` makes, the gather/scatter family, masks, triangles and selections.

Basic indices (ints, slices, None, ...) are views. The graph has no load from a computed address, so an integer
tensor index is a gather written with existing ops: each output element compares its index against an arange of the
indexed dimension and sums the one matching element (`where(index == arange, x, 0).sum()`). That is one kernel that
fuses with whatever computes `x` and the index, and its gradient is the same pattern summed the other way (a
scatter-add). An index out of range matches nothing, so it never reads or writes out of bounds; each op also wraps its
index tensors in a check (`_check_index`), and the realize that runs a kernel reading one out of range raises
IndexError naming the op, the index and the size (schedule/index_check.py; CHECK_INDICES=0 leaves the check out, and
such an index then reads 0 and writes nothing).
The scheduler folds the gather's reduce into one load at the index (schedule/gather.py): the kernel reads one candidate
per output, not all of them.
A scatter is the transposed pattern: each output element reduces the sources whose index names it. The scheduler
runs it as a fill and a kernel that combines each source into the target its index names (schedule/scatter.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from lazytensor.dtype import DType, dtypes
from lazytensor.engine.realize import capturing
from lazytensor.frontend.mixin.compact import check_not_capturing, compacted, first_selected, unravel
from lazytensor.frontend.mixin.movement import _is_int, is_sym_dim
from lazytensor.frontend.mixin.operands import broadcast_shape
from lazytensor.frontend.mixin.order import OrderMixin
from lazytensor.helpers import CHECK_INDICES, ArgumentError, DTypeError, IndexTypeError, argsort, prod
from lazytensor.schedule.index_check import IndexSite, dim_site
from lazytensor.uop.graph import const_like
from lazytensor.uop.ops import Ops, UOp

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="IndexMixin")

# unique of ints counts them into one bin per value in their range when it has at most this many bins per element:
# a scatter-add and a compaction of the bins, O(numel + bins), beat a sort's O(numel log^2 numel) passes far beyond it
UNIQUE_BINS_PER_ELEMENT = 4
# the reductions of scatter_reduce
SCATTER_REDUCES = ("sum", "prod", "mean", "amax", "amin")

def _is_tensor(x: Any) -> bool: return isinstance(x, IndexMixin)

# ---- parsing an index ----

@dataclass(frozen=True)
class _Advanced:
  """An integer index array into one dim of the basic view: numpy values known now (in bounds, non-negative) or an
  integer Tensor (checked by the kernel that reads it: schedule/index_check.py)."""
  axis: int
  index: Any

@dataclass
class _Parsed(Generic[TensorT]):
  view: TensorT                      # x after the basic indices, the dims that advanced indices index kept whole
  advanced: list[_Advanced]
  masks: list[tuple[int, TensorT]]   # bool Tensor masks: (first dim of the view they cover, mask)

def _as_item(i: Any) -> Any:
  """One entry of an index, with lists and numpy arrays as numpy arrays and numpy bools as Python bools."""
  if i is None or i is Ellipsis or isinstance(i, (slice, bool)) or _is_int(i) or _is_tensor(i): return i
  if isinstance(i, np.bool_): return bool(i)
  if isinstance(i, (list, tuple, np.ndarray)):
    try: arr = np.asarray(i)
    except ValueError: raise TypeError(f"index {i!r} is ragged; expected a (nested) list of ints or bools") from None
    if arr.size == 0 and arr.dtype.kind == "f": arr = arr.astype(np.int64)  # [] is an empty index, not a float one
    if arr.dtype.kind == "b" and arr.ndim == 0: return bool(arr)
    if arr.dtype.kind not in "biu":
      raise IndexTypeError(f"index {i!r} of numpy dtype {arr.dtype} is not supported; index arrays hold ints or bools")
    return arr
  raise TypeError(f"index {i!r} of type {type(i).__name__} is not supported; expected an int, slice, None, ..., "
                  "bool, a list or numpy array of ints or bools, or an integer Tensor")

def _dims_consumed(i: Any) -> int:
  if i is None or i is Ellipsis or isinstance(i, bool): return 0
  if isinstance(i, np.ndarray) and i.dtype.kind == "b": return i.ndim
  if _is_tensor(i) and i.dtype.is_bool: return i.ndim
  return 1

def _expand_ellipsis(items: list[Any], ndim: int) -> list[Any]:
  if sum(i is Ellipsis for i in items) > 1: raise IndexError("an index can only have a single ellipsis (...)")
  consumed = sum(_dims_consumed(i) for i in items)
  if consumed > ndim: raise IndexError(f"too many indices: {consumed} for a tensor of {ndim} dimensions")
  fill = [slice(None)] * (ndim - consumed)
  # found by identity: `Ellipsis in items` would compare it with == to every Tensor and array in the index
  pos = next((k for k, i in enumerate(items) if i is Ellipsis), None)
  return items + fill if pos is None else items[:pos] + fill + items[pos + 1:]

def _static_index(arr: np.ndarray, dim: int, n: int) -> np.ndarray:
  """Index values known now: checked against the dimension's size, negatives wrapped."""
  bad = arr[(arr < -n) | (arr >= n)]
  if bad.size: raise IndexError(f"index {bad.reshape(-1)[0]} is out of bounds for dimension {dim} with size {n}")
  return np.where(arr < 0, arr + n, arr).astype(np.int32)

def _check_mask_shape(mask_shape: tuple[int, ...], view_shape: tuple[int, ...], dim: int, in_dim: int) -> None:
  covered = view_shape[dim:dim + len(mask_shape)]
  if tuple(mask_shape) != covered:
    raise IndexError(f"the boolean mask of shape {tuple(mask_shape)} does not match the shape {covered} of the "
                     f"dimensions it indexes (from dimension {in_dim})")

def _symbolic_slice(i: slice, n: Any) -> bool:
  """Whether a slice has a symbolic bound or slices a symbolic dimension (uop/sint.py): a shrink of [start, stop),
  which must be a step of 1 between non-negative bounds (no Python slice arithmetic applies to a Variable)."""
  if not any(is_sym_dim(b) for b in (i.start, i.stop, n)): return False
  if i.step not in (None, 1) or any(_is_int(b) and b < 0 for b in (i.start, i.stop)):
    raise IndexError(f"slice {i} of a symbolic dimension or with symbolic bounds: only steps of 1 between "
                     "non-negative bounds are supported")
  return True

def _parse(x: TensorT, indices: Any, op: str) -> _Parsed[TensorT]:
  """Split an index into basic indices, applied to x as a view, and the advanced ones that index the view's dims
  (`op` names the operation in the IndexError of a tensor index out of range).

  Ints are basic (they remove their dim before anything else), as in torch; None and each bool add a dim of size 1,
  a bool adding an advanced index into it too ([0] for True, [] for False), as in numpy and torch."""
  items = _expand_ellipsis([_as_item(i) for i in (indices if isinstance(indices, tuple) else (indices,))], x.ndim)
  p: _Parsed[TensorT] = _Parsed(x, [], [])
  layout: list[int] = []  # the view's final shape: a kept dim's size, or 1 for a new dim
  dim, in_dim = 0, 0      # the next dim of the view, and of x (for messages)
  for i in items:
    if i is None: layout.append(1)
    elif isinstance(i, bool):
      p.advanced.append(_Advanced(len(layout), np.zeros(1 if i else 0, dtype=np.int32)))
      layout.append(1)
    elif isinstance(i, slice):
      if any(_is_tensor(b) for b in (i.start, i.stop, i.step)):
        # as tinygrad: a bound's value would fix the view's shape, which the graph needs now (torch reads it)
        raise TypeError(f"slice bounds must be ints or None, got a Tensor in {i}: the view's shape would depend on "
                        "its value; read it first with int(t)")
      if _symbolic_slice(i, p.view.shape[dim]):
        bounds = (0 if i.start is None else i.start, p.view.shape[dim] if i.stop is None else i.stop)
        p.view = p.view.shrink([bounds if k == dim else None for k in range(p.view.ndim)])
      else: p.view = p.view._take_strided(dim, *i.indices(p.view.shape[dim]))
      layout.append(p.view.shape[dim])
      dim += 1
    elif _is_int(i):
      n = p.view.shape[dim]
      if not -n <= i < n: raise IndexError(f"index {i} is out of bounds for dimension {in_dim} with size {n}")
      one = p.view.shrink([(int(i) % n, int(i) % n + 1) if k == dim else None for k in range(p.view.ndim)])
      p.view = one.reshape(p.view.shape[:dim] + p.view.shape[dim + 1:])
    else: dim += _add_array_index(p, i, dim, in_dim, layout, op)
    in_dim += _dims_consumed(i)
  p.view = p.view.reshape(tuple(layout))
  return p

def _add_array_index(p: _Parsed[TensorT], i: Any, dim: int, in_dim: int, layout: list[int], op: str) -> int:
  """Record an index array or tensor that starts at the view's dim `dim`; returns how many dims it indexes."""
  shape = p.view.shape
  if isinstance(i, np.ndarray) and i.dtype.kind == "b":  # a mask known now: its True positions, one array per dim
    _check_mask_shape(i.shape, shape, dim, in_dim)
    for j, hits in enumerate(np.nonzero(i)):
      p.advanced.append(_Advanced(len(layout), hits.astype(np.int32)))
      layout.append(shape[dim + j])
    return i.ndim
  if _is_tensor(i) and i.dtype.is_bool:
    _check_mask_shape(i.shape, shape, dim, in_dim)
    p.masks.append((len(layout), i))
    layout.extend(shape[dim:dim + i.ndim])
    return i.ndim
  if isinstance(i, np.ndarray): p.advanced.append(_Advanced(len(layout), _static_index(i, in_dim, shape[dim])))
  elif i.dtype.is_int:
    p.advanced.append(_Advanced(len(layout), i._check_index(dim_site(op, in_dim, shape[dim], i.dtype, wraps=True))))
  else: raise IndexTypeError(f"a tensor index must have an integer (or bool) dtype, got {i.dtype}")
  layout.append(shape[dim])
  return 1

# ---- advanced indices as rows of a flattened view ----

@dataclass(frozen=True)
class _Rows(Generic[TensorT]):
  """The view's indexed dims merged into one leading dim of rows: `flat` is (rows, *rest), `row` the row each result
  element reads (int32, the broadcast shape of the indices; -1 for an out-of-range tensor index)."""
  flat: TensorT
  row: TensorT
  order: list[int]          # the permutation of the view that puts the indexed dims first
  moves_to: int | None      # where the index dims go in the result: at the first indexed dim when they are adjacent

def _wrapped(t: TensorT, n: int) -> tuple[TensorT, TensorT]:
  """A tensor index with negatives wrapped, as int32, and whether each entry is in range."""
  small = t.dtype.itemsize < 4 or t.dtype == dtypes.int32
  wide = t.cast(dtypes.int32 if small else dtypes.int64)
  wide = (wide < 0).where(wide + n, wide)
  return wide.cast(dtypes.int32), (wide >= 0) & (wide < n)

def _rows(p: _Parsed[TensorT]) -> _Rows[TensorT]:
  x, adv = p.view, p.advanced
  dims = [a.axis for a in adv]
  try: shape = broadcast_shape(*[tuple(a.index.shape) for a in adv])
  except ValueError:
    raise IndexError("shape mismatch: index arrays of shapes " + ", ".join(str(tuple(a.index.shape)) for a in adv) +
                     " cannot be broadcast together") from None
  sizes = [x.shape[d] for d in dims]
  strides = [prod(sizes[k + 1:]) for k in range(len(sizes))]
  # the part of the row number that lists and arrays give is computed now, in numpy
  static = [(a.index, s) for a, s in zip(adv, strides) if isinstance(a.index, np.ndarray)]
  row_np = sum((np.broadcast_to(i, shape).astype(np.int64) * s for i, s in static), np.zeros(shape, dtype=np.int64))
  row = type(x)(row_np.astype(np.int32), device=x.device) if static else None
  valid: TensorT | None = None
  for a, n, s in zip(adv, sizes, strides):
    if isinstance(a.index, np.ndarray): continue
    wrapped, ok = _wrapped(a.index, n)
    term = (wrapped * s)._broadcast_to(shape)
    row = term if row is None else row + term
    valid = ok if valid is None else valid & ok
  assert row is not None
  if valid is not None: row = valid._broadcast_to(shape).where(row, -1)
  rest = [d for d in range(x.ndim) if d not in dims]
  order = dims + rest
  flat = x.permute(order).reshape(prod(sizes), *[x.shape[d] for d in rest])
  # a 0-d index takes its dim away as an int does (torch reads it as one), so it neither places the index dims nor
  # parts them: x[t0, :, [0, 1]] puts them after the slice's dim, as x[0, :, [0, 1]] does
  placed = [d - sum(z.axis < d for z in adv if z.index.ndim == 0) for a, d in zip(adv, dims) if a.index.ndim]
  adjacent = placed == list(range(placed[0], placed[0] + len(placed))) if placed else True
  return _Rows(flat, row, order, (placed[0] if placed else 0) if adjacent else None)

def _rows_index(r: _Rows[TensorT]) -> TensorT:
  """The row numbers as a gather index into `flat` along dim 0: (entries, *rest)."""
  rest = r.flat.shape[1:]
  return r.row.reshape(r.row.numel(), *(1,) * len(rest)).expand(r.row.numel(), *rest)

def _move_index_dims(t: TensorT, nb: int, to: int | None, back: bool = False) -> TensorT:
  """The result of advanced indexing has the index dims (nb of them) first; adjacent indices put them at `to`."""
  if to is None or to == 0: return t
  front = list(range(nb, nb + to)) + list(range(nb)) + list(range(nb + to, t.ndim))
  return t.permute(argsort(front) if back else front)

def _progression(p: _Parsed[TensorT]) -> _Parsed[TensorT]:
  """A lone 1-D index known now whose values step evenly ([2, 3, 4], [5, 3], [0] from True, [] from False) is a
  strided view of its dim, as a slice would be: no gather."""
  if len(p.advanced) != 1 or p.masks: return p
  a = p.advanced[0]
  if not isinstance(a.index, np.ndarray) or a.index.ndim != 1: return p
  idx = a.index.astype(np.int64)
  step = int(idx[1] - idx[0]) if idx.size > 1 else 1
  if step == 0 or (idx.size > 2 and (np.diff(idx) != step).any()): return p
  start = int(idx[0]) if idx.size else 0
  stop = start + step * idx.size
  return _Parsed(p.view._take_strided(a.axis, start, stop, step), [], [])

def getitem(x: TensorT, indices: Any, op: str = "x[index]") -> TensorT:
  """x[indices]; `op` names the operation in the IndexError of a tensor index out of range."""
  p = _progression(_parse(x, indices, op))
  if p.masks:
    raise ValueError(f"indexing with a boolean Tensor of shape {p.masks[0][1].shape}: the result has as many elements "
                     "as the mask has True values, which is only known once it is computed, and lazytensor needs "
                     "shapes when the graph is built. Use mask.where(x, 0) or x.masked_fill(~mask, 0) to keep the "
                     "shape, or x[mask.numpy()] to read the mask now and index with its values")
  if not p.advanced: return p.view
  r = _rows(p)
  rows, index, rest = r.flat.shape[0], r.row, r.flat.shape[1:]
  # the result's layout from the start, after the rows summed over: (rows, *rest[:to], *index dims, *rest[to:])
  to = r.moves_to or 0
  spread = r.flat.reshape(rows, *rest[:to], *(1,) * index.ndim, *rest[to:])
  return _pick(spread, index.reshape(1, *(1,) * to, *index.shape, *(1,) * (len(rest) - to)), 0)

def setitem_parts(x: TensorT, indices: Any, value: Any) -> tuple[TensorT, TensorT]:
  """What `x[indices] = value` writes: (the view of x it writes into, the new values of that view).

  Basic indices write `value` into their view. Integer indices write into the whole dims they index: a scatter of
  `value` into the old contents (where an index repeats, the last write wins, as in numpy). A boolean Tensor mask
  writes where(mask, value, old), so `value` must not depend on how many entries the mask selects (one with none for
  them is written where the mask is checked to select none)."""
  p = _progression(_parse(x, indices, "x[index] = value"))
  if p.masks and p.advanced:
    raise ValueError("x[...] = value with a boolean Tensor mask and other tensor indices together is not supported")
  if p.masks: return p.view, _masked_write(x, p, value)
  if not p.advanced: return p.view, x._as_value_for(value, p.view.shape)
  r = _rows(p)
  nb, rest = r.row.ndim, r.flat.shape[1:]
  v = _move_index_dims(x._as_value_for(value, _result_shape(r)), nb, r.moves_to, back=True)
  new_rows = _scatter(r.flat, 0, _rows_index(r), v.reshape(r.row.numel(), *rest), None, False)
  unflat = new_rows.reshape(*[p.view.shape[d] for d in r.order])
  # materialized: the scheduler cannot yet build an assign whose value reaches a reduce through a reshape
  return p.view, unflat.permute(argsort(r.order)).contiguous()

def _result_shape(r: _Rows[TensorT]) -> tuple[int, ...]:
  out = r.row.shape + r.flat.shape[1:]
  if r.moves_to is None: return out
  nb = r.row.ndim
  return out[nb:nb + r.moves_to] + out[:nb] + out[nb + r.moves_to:]

def _masked_write(x: TensorT, p: _Parsed[TensorT], value: Any) -> TensorT:
  (first, mask), = p.masks
  view = p.view
  k = mask.ndim
  # x[mask] has the mask's count of True values in place of its dims, a count known only once the mask is computed:
  # only a value that broadcasts along that dim can be written
  selected = view.shape[:first] + (1,) + view.shape[first + k:]
  m = mask.reshape((1,) * first + mask.shape + (1,) * (view.ndim - first - k))
  try: v = x._as_value_for(value, selected)
  except ValueError:
    if _has_no_entries(x, value, view.shape[:first] + (0,) + view.shape[first + k:]): return _selects_none(m, view)
    raise ValueError(f"x[mask] = value: a value of shape {getattr(value, 'shape', ())} cannot be written with a "
                     f"boolean Tensor mask; it must broadcast to {selected}, with a dim of size 1 for the count of "
                     "True values (or 0, where the mask selects none), which is only known once the mask is "
                     "computed") from None
  return m.where(v.reshape(view.shape[:first] + (1,) * k + view.shape[first + k:]), view)

def _has_no_entries(x: TensorT, value: Any, none_selected: tuple[int, ...]) -> bool:
  """Whether value has no entries for the mask's True values: it broadcasts to x[mask]'s shape with 0 of them (torch's
  x[mask] = torch.tensor([]), which it takes where the mask is all False)."""
  try: x._as_value_for(value, none_selected)
  except ValueError: return False
  return True

def _selects_none(m: TensorT, view: TensorT) -> TensorT:
  """view unchanged, once the mask is checked to select nothing: a True raises IndexError at the realize that runs the
  write (as masked_scatter's source index past its end: the count of True values is not read now), and keeps the old
  value there, as the write does not happen in torch."""
  site = IndexSite("x[mask] = value", "a value with no entries for the mask's True values", 0, 1, dtypes.uint8,
                   noun="mask entry")
  return m.cast(dtypes.uint8)._check_index(site).cast(dtypes.bool).where(view, view)

# ---- the gather and scatter patterns ----

def _checked(x: UOp, site: IndexSite, wide: DType | None) -> UOp:
  """The index x checked against the site's range, compared in `wide` where x's dtype cannot hold its bounds. Built as
  nodes, not Tensor ops: every op that takes an index makes one (as Tensor ops it took 6x as long as an add)."""
  w = x if wide is None else UOp(Ops.CAST, wide, (x,))
  def const(v: int | bool) -> UOp: return const_like(w, v, dtypes.bool if isinstance(v, bool) else w.dtype)
  def not_below(v: int) -> UOp: return w.alu(Ops.CMPLT, const(v)).alu(Ops.CMPNE, const(True))
  ok = not_below(site.low).alu(Ops.AND, w.alu(Ops.CMPLT, const(site.size)))
  if site.allowed is not None: ok = ok.alu(Ops.OR, w.alu(Ops.CMPNE, const(site.allowed)).alu(Ops.CMPNE, const(True)))
  return UOp(Ops.CHECK, x.dtype, (x, ok), site)

def _zero(x: TensorT, value: Any = 0) -> TensorT:
  return type(x).full((), value, dtype=x.dtype, device=x.device)

def _arange_at(n: int, axis: int, ndim: int, like: TensorT) -> TensorT:
  """0..n-1 along `axis` of an ndim-dim shape of 1s: what indices are compared with."""
  return type(like)._iota(n, like.device).reshape([n if i == axis else 1 for i in range(ndim)])

def _sum_selected(mask: TensorT, values: TensorT, axis: int) -> TensorT:
  """The sum over `axis` of the values where mask is set (the two broadcast), in the values' dtype (an OR for bools)."""
  picked = mask.where(values, _zero(values))
  return picked.any(axis) if values.dtype.is_bool else picked.sum(axis, dtype=values.dtype)

def _pick(spread: TensorT, index: TensorT, axis: int) -> TensorT:
  """The gather pattern: `spread` holds each result element's candidates along `axis`, and `index` (size 1 along
  axis, broadcasting with spread elsewhere) names one of them; an index outside the candidates picks nothing: 0.
  The candidates keep their place in x's layout, so the gradient (a sum over the index's dims) needs no permute."""
  return _sum_selected(index == _arange_at(spread.shape[axis], axis, spread.ndim, spread), spread, axis)

def _gather(x: TensorT, dim: int, index: TensorT) -> TensorT:
  """out[..., i, ...] = x[..., index[..., i, ...], ...] along dim; x is read only where index has entries."""
  shape = index.shape
  region = x.shrink([None if d == dim else (0, shape[d]) for d in range(x.ndim)])
  # (..., k candidates, 1, ...) against (..., 1, index entries, ...)
  return _pick(region.unsqueeze(dim + 1), index.unsqueeze(dim), dim)

def _scatter(x: TensorT, dim: int, index: TensorT, src: TensorT, reduce: str | None, include_self: bool) -> TensorT:
  """x with the entries of src written (reduce None) or reduced into x[..., index[..., i, ...], ...] along dim."""
  if x.ndim == 0: return _scatter(x.reshape(1), 0, index.reshape(1), src.reshape(1), reduce, include_self).reshape(())
  n = index.shape[dim]
  if n == 0 or index.numel() == 0: return x  # no entries: nothing written, every reduce keeps the old value
  # index entries cover part of x's other dims: outside it, an index of -1 matches nothing
  grow = [(0, 0) if d == dim else (0, x.shape[d] - index.shape[d]) for d in range(x.ndim)]
  # (..., 1, n entries, ...) against (..., k targets, 1, ...): the entries are reduced, the targets keep x's layout
  idx = index.pad(grow, value=-1).unsqueeze(dim)
  vals = src.shrink([(0, s) for s in index.shape]).pad(grow).unsqueeze(dim)
  hit = idx == _arange_at(x.shape[dim], dim, idx.ndim, x)
  if reduce is None: return _scatter_last(hit, vals, x, dim + 1, n)
  return _scatter_reduce(hit, vals, x, dim + 1, reduce, include_self)

def _scatter_last(hit: TensorT, vals: TensorT, old: TensorT, axis: int, n: int) -> TensorT:
  # each target takes the value of the last entry that names it: its position is a max, which the scheduler runs as a
  # scatter (schedule/scatter.py; from the smallest int where no entry matches), then the value at that position is a
  # gather, one load per target (schedule/gather.py). Picking the value by a second scatter (a sum over the entries
  # that are the last of their target) took two more kernels and twice the passes over the entries
  pos = _arange_at(n, axis, hit.ndim, old)
  last = hit.where(pos, pos.dtype.min()).max(axis)
  return (last >= 0).where(_pick(vals, last.unsqueeze(axis), axis), old)

def _reduce_start(dt: DType, reduce: str) -> Any:
  if reduce in ("sum", "mean"): return False if dt.is_bool else 0
  if reduce == "prod": return True if dt.is_bool else 1
  if dt.is_bool: return reduce == "amin"
  if dt.is_float: return -float("inf") if reduce == "amax" else float("inf")
  return dt.min() if reduce == "amax" else dt.max()

def _scatter_reduce(hit: TensorT, vals: TensorT, old: TensorT, axis: int, reduce: str, include_self: bool) -> TensorT:
  terms = hit.where(vals, _zero(old, _reduce_start(old.dtype, reduce)))
  # a sum adds the old value to the sources' sum: the reduce stays a scatter that the scheduler runs as one
  # (schedule/scatter.py). Elsewhere the old value is one more term of the reduce: ties between it and the sources
  # share the gradient, as in torch
  if not include_self: out = _reduce_along(terms, axis, reduce)
  elif reduce in ("sum", "mean") and not old.dtype.is_bool: out = old + _reduce_along(terms, axis, reduce)
  else: out = _reduce_along(terms.cat(old.unsqueeze(axis), dim=axis), axis, reduce)
  count = hit.sum(axis)
  if reduce == "mean":
    total = (count + 1) if include_self else count.maximum(1)  # never a division by 0, even where it is not used
    out = out // total.cast(out.dtype) if old.dtype.is_int else out / total.cast(out.dtype)
  return out if include_self else (count > 0).where(out, old)

def _reduce_along(terms: TensorT, axis: int, reduce: str) -> TensorT:
  dt = terms.dtype
  if dt.is_bool: return terms.all(axis) if reduce in ("prod", "amin") else terms.any(axis)
  if reduce in ("sum", "mean"): return terms.sum(axis, dtype=dt)
  if reduce == "prod": return terms.prod(axis, dtype=dt)
  return terms.max(axis) if reduce == "amax" else terms.min(axis)

# ---- the methods ----

def _min_max_now(x: TensorT, *keep: TensorT) -> tuple[int, int]:
  """The smallest and largest of the ints (or bools) in x, read now (one schedule, with `keep` computed alongside)."""
  lo, hi = x.min(), x.max()
  lo.realize(hi, *keep)
  return int(lo.item()), int(hi.item())

def _unique_dense(v: TensorT) -> TensorT | None:
  """The distinct values of the 1-d ints v, counted into one bin per value between their minimum and maximum (a
  scatter-add), then the bins that are hit compacted in order: O(numel + bins) where a sort is O(numel log^2 numel)
  (1M ints in [0, 1000): one bitonic sort alone was 0.2-0.75 s, torch's unique 23 ms). Two syncs: the range, then the
  count. None, after the first, when the range has more than UNIQUE_BINS_PER_ELEMENT bins per element."""
  check_not_capturing("unique")
  # offsets from the minimum in 64 bits: in the input's own type they overflow (int8 from -128 to 127)
  wide = v if v.dtype.itemsize == 8 else v.cast(dtypes.int64)
  lo, hi = _min_max_now(wide, wide)
  bins = hi - lo + 1
  if bins > UNIQUE_BINS_PER_ELEMENT * v.numel(): return None
  n = v.numel()
  ones = type(v).ones(n, dtype=dtypes.int32, device=v.device)
  counts = _scatter(type(v).zeros(bins, dtype=dtypes.int32, device=v.device), 0, (wide - lo).cast(dtypes.int32), ones,
                    "sum", True)
  hit = counts > 0
  flat, _ = first_selected("unique", hit, None, keep=(hit,))
  return (flat.cast(wide.dtype) + lo).cast(v.dtype)

class IndexMixin(OrderMixin):
  """Tensor's indexing methods: on the order mixin and those below it."""
  __slots__ = ()

  def __getitem__(self, indices: Any) -> Self:
    """Indexing with torch's semantics. Ints, slices (any step), None and ... give a view. Integer Tensors, lists and
    numpy arrays of ints index a dim each (negative values count from the end) and broadcast together; their dims
    replace the indexed ones where those are adjacent, and go first otherwise (ints count as basic, as in torch).
    Lists and numpy arrays of bools are masks known now. A boolean Tensor mask is an error: the result's shape
    would depend on its values. An index out of range is an IndexError: at once for a list or numpy array, at the
    realize that runs the kernel reading it for a Tensor (its values are known only then).

    >>> x = Tensor([[1, 2, 3], [4, 5, 6]])
    >>> x[:, ::-2].tolist(), x[1, [0, 0, 2]].tolist(), x[Tensor([1, 0])].tolist(), x[[True, False]].tolist()
    ([[3, 1], [6, 4]], [4, 4, 6], [[4, 5, 6], [1, 2, 3]], [[1, 2, 3]])
    """
    return getitem(self, indices)

  def _setitem_parts(self, indices: Any, value: Any) -> tuple[Self, Self]:
    """For __setitem__: the view of self that `self[indices] = value` writes into, and its new values."""
    return setitem_parts(self, indices, value)

  def _check_index(self, site: IndexSite) -> Self:
    """This index tensor, checked by the kernels that read it: an entry outside the site's range raises IndexError at
    the realize that runs one (schedule/index_check.py). Itself with CHECK_INDICES off. The range is compared in a dtype
    that holds its bounds (int8 indices into 300 rows, uint8 ones that may count from the end)."""
    if not CHECK_INDICES: return self
    lo, hi = self.dtype.min(), self.dtype.max()
    fits = lo <= site.low and site.size <= hi and (site.allowed is None or lo <= site.allowed <= hi)
    return self._apply_uop(lambda x: _checked(x, site, None if fits else dtypes.int64))

  def _index_tensor(self, name: str, index: Any) -> Self:
    if not _is_tensor(index): raise TypeError(f"{name}: index must be a Tensor, got {type(index).__name__}")
    if not index.dtype.is_int: raise TypeError(f"{name}: index must have an integer dtype, got {index.dtype}")
    if index.ndim != self.ndim:
      raise ArgumentError(f"{name}: index of shape {index.shape} must have as many dims as the tensor {self.shape}")
    return index

  def gather(self, dim: int, index: Self) -> Self:
    """Pick values along `dim` by index, as torch.gather: out[i][j] = self[index[i][j]][j] for dim 0. The index has as
    many dims as self, and no larger sizes outside `dim`. One kernel; an index outside [0, size) raises IndexError
    when it runs.

    >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[0, 0], [1, 0]])).tolist()
    [[1, 1], [4, 3]]
    """
    d = self._resolve_axis(dim)
    index = self._index_tensor("gather", index)
    for i, (si, sx) in enumerate(zip(index.shape, self.shape)):
      if i != d and si > sx:
        raise ArgumentError(f"gather: index of shape {index.shape} is larger than the tensor of shape {self.shape} "
                         f"in dim {i}, which is not the gathered dim {d}")
    index = index._check_index(dim_site("gather", d, self.shape[d] if self.ndim else 1, index.dtype, wraps=False))
    if self.ndim == 0: return _gather(self.reshape(1), 0, index.reshape(1)).reshape(())
    return _gather(self, d, index)

  def _scatter_args(self, name: str, dim: int, index: Any, src: Any) -> tuple[int, Self, Self]:
    d = self._resolve_axis(dim)
    index = self._index_tensor(name, index)
    if not _is_tensor(src) and not isinstance(src, (bool, int, float, np.generic)):
      raise TypeError(f"{name}: src must be a Tensor or a number, got {type(src).__name__}")
    if _is_tensor(src) and src.dtype != self.dtype:  # as torch: a number takes self's dtype, a tensor must have it
      raise DTypeError(f"{name}: src of dtype {src.dtype.name} must have the tensor's dtype {self.dtype.name}")
    value = src if _is_tensor(src) else type(self).full(index.shape, src, dtype=self.dtype, device=self.device)
    too_big = value.ndim != index.ndim or any(si > sv for si, sv in zip(index.shape, value.shape)) or \
      any(si > sx for i, (si, sx) in enumerate(zip(index.shape, self.shape)) if i != d)
    if too_big:
      raise ArgumentError(f"{name}: index of shape {index.shape} must be no larger than src of shape {value.shape} "
                          f"in every dim, and than the tensor of shape {self.shape} outside dim {d}")
    return d, index, value.cast(self.dtype)

  def _scatter_into(self, name: str, dim: int, index: Any, src: Any, reduce: str | None, include_self: bool,
                    check: bool = True) -> Self:
    """The scatter of `name` with its arguments checked, and (`check`) its index too: [0, size) of the dim."""
    d, index, value = self._scatter_args(name, dim, index, src)
    if check: index = index._check_index(dim_site(name, d, self.shape[d] if self.ndim else 1, index.dtype, False))
    return _scatter(self, d, index, value, reduce, include_self)

  def scatter(self, dim: int, index: Self, src: Self | float, reduce: str | None = None) -> Self:
    """Write src (a tensor or a number) into a copy of self at the given indices along `dim`, as torch.scatter:
    out[index[i][j]][j] = src[i][j] for dim 0. Where an index repeats, the last entry wins. `reduce` "add" or
    "multiply" combines a number src instead, as tinygrad (scatter_reduce "sum" and "prod" take a tensor src).
    An index outside [0, size) raises IndexError when the kernel runs.

    >>> Tensor.zeros(2, 3).scatter(1, Tensor([[2], [0]]), Tensor([[5.0], [6.0]])).tolist()
    [[0.0, 0.0, 5.0], [6.0, 0.0, 0.0]]
    """
    if reduce is not None and _is_tensor(src):
      # as tinygrad; torch deprecates reduce with a tensor src for scatter_reduce too
      raise TypeError(f"scatter: reduce={reduce!r} takes a number src, got a Tensor; use scatter_reduce with a tensor")
    if reduce is None: return self._scatter_into("scatter", dim, index, src, None, False)
    modes = {"add": "sum", "multiply": "prod"}
    if reduce not in modes: raise ValueError(f"scatter: reduce must be 'add', 'multiply' or None, got {reduce!r}")
    return self._scatter_into("scatter", dim, index, src, modes[reduce], True)

  def scatter_reduce(self, dim: int, index: Self, src: Self, reduce: str, include_self: bool = True) -> Self:
    """Reduce src into a copy of self at the given indices along `dim`, as torch.scatter_reduce: reduce is "sum",
    "prod", "mean", "amax" or "amin"; include_self counts self's old value as one of the reduced values (targets
    that no index names keep theirs). An int mean rounds down, as torch. An index outside [0, size) raises
    IndexError when the kernel runs.

    >>> Tensor([1.0, 2.0, 3.0]).scatter_reduce(0, Tensor([0, 0, 2]), Tensor([5.0, 7.0, 9.0]), "amax").tolist()
    [7.0, 2.0, 9.0]
    """
    if reduce not in SCATTER_REDUCES:
      raise ArgumentError(f"scatter_reduce: reduce must be one of {', '.join(SCATTER_REDUCES)}, got {reduce!r}")
    return self._scatter_into("scatter_reduce", dim, index, src, reduce, include_self)

  def scatter_add(self, dim: int, index: Self, src: Self) -> Self:
    """Add src into a copy of self at the given indices along `dim`, as torch.scatter_add: out[index[i][j]][j] +=
    src[i][j] for dim 0, repeated indices adding up. One pass over the entries (schedule/scatter.py). An index outside
    [0, size) raises IndexError when the kernel runs.

    >>> Tensor.zeros(3).scatter_add(0, Tensor([0, 2, 0]), Tensor([1.0, 2.0, 3.0])).tolist()
    [4.0, 0.0, 2.0]
    """
    return self._scatter_into("scatter_add", dim, index, src, "sum", True)

  def masked_fill(self, mask: Self, value: Any) -> Self:
    """`value` (a number or a 0-d tensor, cast to self's dtype) where the bool mask is True, self elsewhere; mask and
    self broadcast together.

    >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
    [0, 2, 0]
    """
    if not _is_tensor(mask) or not mask.dtype.is_bool:
      raise TypeError(f"masked_fill: mask must be a bool Tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
    if _is_tensor(value):
      if value.ndim: raise ValueError(f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}")
      fill = value.cast(self.dtype)
    else: fill = type(self).full((), value, dtype=self.dtype, device=self.device)
    return mask.where(fill, self)

  def one_hot(self, num_classes: int = -1) -> Self:
    """Each integer becomes a row of num_classes values (dtypes.default_int) with a 1 at that position (one
    kernel). With num_classes -1 it is the largest value plus one, which reads the tensor now. A value outside
    [0, num_classes) raises IndexError when the kernel runs (as torch and tinygrad raise).

    >>> Tensor([0, 2]).one_hot(3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    if not self.dtype.is_int: raise DTypeError(f"one_hot: needs an integer tensor, got {self.dtype}")
    if num_classes == -1:
      if not self.numel(): raise ArgumentError("one_hot: an empty tensor has no largest class: give num_classes")
      num_classes = int(self.max().item()) + 1
    if not _is_int(num_classes) or num_classes < 0:
      raise ArgumentError(f"one_hot: num_classes must be a non-negative int or -1, got {num_classes!r}")
    n = int(num_classes)
    checked = self._check_index(IndexSite("one_hot", f"num_classes={n}", 0, n, self.dtype, noun="class value"))
    hit = checked.unsqueeze(-1) == type(self)._iota(n, self.device)
    return hit.cast(dtypes.default_int)

  def _triangle(self, name: str, diagonal: int, keep_below: bool) -> Self:
    if self.ndim < 2: raise ValueError(f"{name}: needs a tensor of at least 2 dims, got shape {self.shape}")
    if not _is_int(diagonal): raise TypeError(f"{name}: diagonal must be an int, got {diagonal!r}")
    n, m = self.shape[-2:]
    rows, cols = type(self)._iota(n, self.device).reshape(n, 1), type(self)._iota(m, self.device).reshape(1, m)
    offset = cols - rows
    keep = (offset <= diagonal) if keep_below else (offset >= diagonal)
    return keep.where(self, _zero(self))

  def tril(self, diagonal: int = 0) -> Self:
    """The lower triangle of the last two dims: elements on and below the `diagonal`-th diagonal, zeros above.

    >>> Tensor([[1, 2], [3, 4]]).tril().tolist()
    [[1, 0], [3, 4]]
    """
    return self._triangle("tril", diagonal, True)

  def triu(self, diagonal: int = 0) -> Self:
    """The upper triangle of the last two dims: elements on and above the `diagonal`-th diagonal, zeros below.

    >>> Tensor([[1, 2], [3, 4]]).triu(1).tolist()
    [[0, 2], [0, 0]]
    """
    return self._triangle("triu", diagonal, False)

  def nonzero(self, size: int | None = None, fill_value: int = 0) -> Self:
    """The indices of the nonzero elements, one row of self.ndim indices each, in row-major order (torch.nonzero).
    How many there are is only known once the tensor is computed, while lazytensor needs every shape when the graph
    is built. So, as jax.numpy.nonzero, `size` fixes the number of rows: the first `size` nonzero elements fill them
    and the rows left over hold fill_value. Without size, the count is read now, as torch does: the tensor is
    computed (a sync) to learn it, which a TinyJit function cannot do. A cumsum of the mask and a scatter: O(numel).

    >>> Tensor([[0, 3], [5, 0]]).nonzero(size=3, fill_value=-1).tolist()
    [[0, 1], [1, 0], [-1, -1]]
    >>> Tensor([0, 3, 5]).nonzero().tolist()
    [[1], [2]]
    """
    x = self
    flat, found = first_selected("nonzero", x.reshape(-1) != 0, size)
    cols = [c.unsqueeze(-1) for c in unravel(flat, x.shape)]
    idx = cols[0].cat(*cols[1:], dim=-1) if cols else flat.unsqueeze(-1)[:, :0]  # a 0-d tensor: rows of no index
    return found.unsqueeze(-1).where(idx, fill_value).cast(dtypes.default_int)

  def unique(self, size: int | None = None, fill_value: Any = 0) -> Self:
    """The distinct values, sorted, as a 1-d tensor. How many there are is only known once the tensor is computed,
    so `size` fixes it (as jax.numpy.unique): the `size` smallest distinct values, then fill_value. Without size, the
    count is read now, as torch does: the tensor is computed (a sync) to learn it, which a TinyJit function cannot
    do. A sort, then a scatter of the first of each run of equal values; without size, ints whose range has at most
    UNIQUE_BINS_PER_ELEMENT values per element are counted into one bin per value instead (no sort: O(numel)).

    >>> Tensor([3, 1, 3, 2, 1]).unique(size=4, fill_value=-1).tolist()
    [1, 2, 3, -1]
    >>> Tensor([3, 1, 3]).unique().tolist()
    [1, 3]
    """
    if size is None and (self.dtype.is_int or self.dtype.is_bool) and self.numel():
      if (dense := _unique_dense(self.reshape(-1))) is not None: return dense
    v = self.reshape(-1).sort()[0]
    first = type(v).ones(1, dtype=dtypes.bool, device=v.device).cat(v[1:] != v[:-1]) if v.numel() else v != v
    return compacted("unique", v, first, size, fill_value, keep=(v,))

  def masked_select(self, mask: Self, size: int | None = None, fill_value: Any = 0) -> Self:
    """The elements where mask (broadcast with the tensor) is True, in row-major order, as a 1-d tensor. Their count
    is only known once the mask is computed, so `size` fixes it (as jax): the first `size` selected elements, then
    fill_value. Without size, the count is read now, as tinygrad and torch do: the mask is computed (a sync) to
    learn it, which a TinyJit function cannot do; mask.where(x, 0) keeps the shape instead.

    >>> Tensor([[1, 2], [3, 4]]).masked_select(Tensor([True, False]), size=3).tolist()
    [1, 3, 0]
    >>> Tensor([[1, 2], [3, 4]]).masked_select(Tensor([True, False])).tolist()
    [1, 3]
    """
    if not _is_tensor(mask) or not mask.dtype.is_bool:
      raise TypeError(f"masked_select: mask must be a bool Tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
    shape = broadcast_shape(self.shape, mask.shape)
    return compacted("masked_select", self.expand(shape).reshape(-1), mask.expand(shape).reshape(-1), size, fill_value)

  def repeat_interleave(self, repeats: int | Sequence[int], dim: int | None = None) -> Self:
    """Repeat each element `repeats` times along dim (flattened when dim is None): an int repeats all alike (an
    expand), a list gives each element its count (a gather). A copy, as torch's. A Tensor of counts is not supported:
    the result's shape would depend on its values; pass repeats.tolist().

    >>> Tensor([1, 2]).repeat_interleave(2).tolist(), Tensor([1, 2]).repeat_interleave([1, 3]).tolist()
    ([1, 1, 2, 2], [1, 2, 2, 2])
    """
    x = self.flatten() if dim is None else self
    d = 0 if dim is None else self._resolve_axis(dim)
    if self._is_tensor(repeats):
      raise ValueError("repeat_interleave: a Tensor of repeats gives a shape that depends on its values, known only "
                       "once it is computed; pass repeats.tolist() (or an int)")
    if isinstance(repeats, (int, np.integer)):
      if repeats < 0: raise ValueError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
      wide = x.unsqueeze(d + 1).expand(*x.shape[:d + 1], int(repeats), *x.shape[d + 1:])
      return wide.flatten(d, d + 1)._copy_result()
    counts = np.asarray(repeats)
    if counts.ndim != 1 or counts.dtype.kind not in "iu" and counts.size:
      raise TypeError(f"repeat_interleave: repeats must be an int or a list of ints, got {repeats!r}")
    n = x.shape[d] if x.ndim else 1
    if counts.size == 1: return self.repeat_interleave(int(counts[0]), dim)
    if counts.size != n or (counts < 0).any():
      raise ValueError(f"repeat_interleave: repeats {list(repeats)} must be {n} non-negative ints, one per element "
                       f"of dim {d}")
    return x[(slice(None),) * d + (np.repeat(np.arange(n), counts.astype(np.int64)),)]._copy_result()

  def index_select(self, dim: int, index: Self) -> Self:
    """The entries of `dim` at the positions in `index` (1-d ints, negative counting from the end), in that order, as
    torch.index_select: the same as indexing that dim with the tensor. An index outside [-size, size) raises
    IndexError when the kernel runs.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).index_select(1, Tensor([2, 0])).tolist()
    [[3, 1], [6, 4]]
    """
    if not _is_tensor(index) or index.dtype.is_float or index.dtype.is_bool or index.ndim > 1:
      raise IndexError(f"index_select: index must be a 0-d or 1-d Tensor of ints, got "
                       f"{getattr(index, 'dtype', type(index).__name__)} of shape {getattr(index, 'shape', None)}")
    d = self._resolve_axis(dim)
    if self.ndim == 0: return getitem(self.reshape(1), index.reshape(-1), "index_select").reshape(())
    return getitem(self, (slice(None),) * d + (index.reshape(-1),), "index_select")

  def isin(self, test_elements: Self | Any, invert: bool = False) -> Self:
    """Whether each element is among `test_elements` (a Tensor, a number or a list), as torch.isin; invert=True asks
    whether it is not. Every element is compared with every test element (one kernel), so the work is their product.

    >>> Tensor([[1, 2], [3, 4]]).isin(Tensor([2, 3, 7])).tolist()
    [[False, True], [True, False]]
    """
    test = test_elements if _is_tensor(test_elements) else type(self)(test_elements, device=self.device)
    if test.numel() == 0: return type(self).full(self.shape, bool(invert), dtype=dtypes.bool, device=self.device)
    found = (self.unsqueeze(-1) == test.reshape((1,) * self.ndim + (-1,))).any(-1)
    return found.logical_not() if invert else found

  def searchsorted(self, values: Self | Any, right: bool = False, side: str | None = None) -> Self:
    """Where each of `values` would be inserted into this sorted sequence to keep it sorted, as torch.searchsorted
    (self is the sorted sequence): the count of its elements < the value, or <= with right=True (side="right"). A
    1-d sequence serves values of any shape; an n-d one holds a sequence per row, and the values' leading dims must
    be its. Every value is compared with every element (one kernel), so the work is their product; NaN is not placed
    as torch places it.

    >>> Tensor([1, 3, 5]).searchsorted(Tensor([3, 6, 0])).tolist(), Tensor([1, 3, 5]).searchsorted(3, right=True).item()
    ([1, 3, 0], 2)
    """
    if side is not None:
      if side not in ("left", "right"): raise ValueError(f"searchsorted: side {side!r} must be 'left' or 'right'")
      if right and side == "left": raise ValueError("searchsorted: right=True and side='left' disagree")
      right = side == "right"
    v = values if _is_tensor(values) else type(self)(values, device=self.device)
    if self.ndim == 0: raise ValueError("searchsorted: the sorted sequence must have at least 1 dim, got a 0-d tensor")
    if self.ndim > 1 and v.shape[:-1] != self.shape[:-1]:
      raise ValueError(f"searchsorted: values of shape {v.shape} must have the leading dims of the sequences "
                       f"{self.shape}")
    seq = self if self.ndim == 1 else self.unsqueeze(-2)
    wide = v.unsqueeze(-1)
    return (seq <= wide if right else seq < wide).sum(-1)

  def bucketize(self, boundaries: Self, right: bool = False) -> Self:
    """The index of the bucket of each element between the sorted 1-d `boundaries`, as torch.bucketize: i with
    boundaries[i-1] < x <= boundaries[i] (boundaries[i-1] <= x < boundaries[i] with right=True); the same as
    boundaries.searchsorted(self).

    >>> Tensor([0.5, 3.0, 9.0]).bucketize(Tensor([1.0, 3.0, 5.0])).tolist()
    [0, 1, 3]
    """
    if not _is_tensor(boundaries) or boundaries.ndim != 1:
      raise ValueError(f"bucketize: boundaries must be a 1-d Tensor, got {getattr(boundaries, 'shape', boundaries)!r}")
    return boundaries.searchsorted(self, right=right)

  def bincount(self, weights: Self | None = None, minlength: int = 0) -> Self:
    """How many times each value 0, 1, ..., max occurs in this 1-d tensor of non-negative ints (at least minlength
    bins), or the sum of `weights` at its positions, as torch.bincount. The number of bins depends on the values, so
    their maximum (and minimum, to check it) is read now: not inside a TinyJit function.

    >>> Tensor([1, 1, 3]).bincount().tolist(), Tensor([1, 1, 3]).bincount(Tensor([0.5, 1.0, 2.0])).tolist()
    ([0, 2, 0, 1], [0.0, 1.5, 0.0, 2.0])
    """
    if self.ndim != 1 or not self.dtype.is_int:
      raise TypeError(f"bincount: expected a 1-d tensor of ints, got {self.dtype} of shape {self.shape}")
    if not _is_int(minlength) or minlength < 0: raise ValueError(f"bincount: minlength must be an int >= 0, got "
                                                                 f"{minlength!r}")
    if weights is not None and (not _is_tensor(weights) or weights.shape != self.shape):
      raise ValueError(f"bincount: weights must be a Tensor of the input's shape {self.shape}, got "
                       f"{getattr(weights, 'shape', type(weights).__name__)}")
    n = int(minlength)
    if self.numel():
      if capturing(): raise ValueError("bincount inside a TinyJit function: the number of bins is read from the values "
                                       "while capturing and would be kept by every replay")
      lo, hi = _min_max_now(self)
      if lo < 0: raise ValueError(f"bincount: the values must be non-negative, got {lo}")
      n = max(n, hi + 1)
    hot = self.unsqueeze(-1) == type(self).arange(n, device=self.device)
    if weights is None: return hot.sum(0)
    out = weights.dtype if weights.dtype in (dtypes.float32, dtypes.float64) else dtypes.float64
    return hot.where(weights.cast(out).unsqueeze(-1), 0).sum(0)
