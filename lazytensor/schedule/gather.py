"""Gathers folded into loads from a computed address, in a kernel's AST.

An integer tensor index is written with existing ops (frontend/mixin/index.py): every output element compares its index
with an arange of the indexed dim and sums the one element that matches, `where(e == arange(n), v, 0).sum(axis)` (or a
one-hot times the values, as `nn.Embedding`'s matmul). Run as written that reads all n candidates for every output:
`table[idx]` with a 50000-row table and 8192 indices is 10**11 multiply-adds for 8 MB of output.

`fold_gathers` rewrites such a reduce into the one read it stands for: the values `v` with the reduced axis fixed at
`e`, and the reduce's identity where `e` is outside [0, n) (which is what the sum gives: no candidate matches). A
load of `v` that walks the reduced axis becomes a GATHER, a load with a third source, the index `e`, and arg
(stride, n): the
lowerer adds `clamp(e, 0, n - 1) * stride` to its address, so a load is always in bounds, whatever the index buffer
holds (BEAM fills it with random bits). The graph a Tensor builds is unchanged, and so are its gradients; only the
kernel reads less.
"""
from __future__ import annotations

from lazytensor.dtype import dtypes
from lazytensor.shape.view import ShapeTracker
from lazytensor.uop.ops import GroupOp, Ops, UOp, identity_element

LEAVES = (Ops.LOAD, Ops.GATHER, Ops.CONST, Ops.DEFINE_VAR, Ops.IOTA, Ops.VALID)

def _view(u: UOp) -> ShapeTracker | None:
  return next((s.arg for s in u.src if s.op is Ops.VIEW), None)

def _invariant(st: ShapeTracker, axis: int) -> bool:
  """Whether a view reads the same element at every index of `axis` (stride 0, and no mask that cuts it)."""
  last = st.views[-1]
  return last.strides[axis] == 0 and (last.mask is None or last.mask[axis] == (0, last.shape[axis]))

class AxisFold:
  """One reduce over `axis` whose candidates are picked by `e == arange`: values seen at index `e` of the axis."""
  def __init__(self, axis: int, e: UOp, size: int) -> None:
    self.axis, self.size = axis, size
    self.memo: dict[UOp, UOp | None] = {}
    self.e: UOp | None = None
    self.e = self.at(e)  # e does not vary along the axis: the same at index 0

  def _first(self, st: ShapeTracker) -> ShapeTracker:
    return st.shrink(tuple((0, 1) if i == self.axis else (0, s) for i, s in enumerate(st.shape)))

  def at(self, u: UOp) -> UOp | None:
    """`u` with the axis fixed at e (at 0 where nothing varies along it); None where that cannot be written."""
    if u in self.memo: return self.memo[u]
    self.memo[u] = ret = self._at(u)
    return ret

  def _at(self, u: UOp) -> UOp | None:
    if (u.op is Ops.CONST and not u.src) or u.op is Ops.DEFINE_GLOBAL: return u  # an index check's flags: a buffer
    if u.op in LEAVES and (st := _view(u)) is not None:
      src = tuple(s.replace(arg=self._first(st)) if s.op is Ops.VIEW else s for s in u.src)
      if _invariant(st, self.axis): return u.replace(src=src)
      if self.e is None or len(st.views) != 1 or st.views[0].mask is not None or u.op is Ops.GATHER:
        return None
      stride = st.views[0].strides[self.axis]
      if u.op is Ops.LOAD: return UOp(Ops.GATHER, u.dtype, src + (self.e,), (stride, self.size))
      if u.op is Ops.IOTA: return u.replace(src=src) + self.e.cast(u.dtype) * stride
      return None
    if u.op not in GroupOp.Elementwise: return None
    srcs = tuple(self.at(s) for s in u.src)
    return u.replace(src=srcs) if all(s is not None for s in srcs) else None

def _arange(u: UOp, axis: int) -> tuple[int, int] | None:
  """(n, start) where u counts start, start+1, ... along `axis` and is the same along every other axis: an iota of n
  seen along the axis, through int casts that keep every value (an int64 arange narrowed to int32 where its values fit)
  and added constants (Tensor.arange is `start + step * iota`)."""
  if u.op is Ops.CAST and u.dtype.is_int and u.src[0].dtype.is_int:
    found = _arange(u.src[0], axis)
    if found is None or u.dtype.itemsize >= u.src[0].dtype.itemsize: return found
    return found if u.dtype.min() <= found[1] and found[1] + found[0] - 1 <= u.dtype.max() else None
  if u.op in (Ops.ADD, Ops.MUL) and (c := u.src[1]).op is Ops.CONST and (found := _arange(u.src[0], axis)):
    if u.op is Ops.ADD: return found[0], found[1] + c.arg
    return found if c.arg == 1 else None
  if u.op is not Ops.IOTA or (st := _view(u)) is None or len(st.views) != 1: return None
  v = st.views[0]
  if v.offset != 0 or v.mask is not None or any(s != (i == axis) for i, s in enumerate(v.strides)): return None
  return v.shape[axis], 0

def compared_with_arange(cond: UOp, axis: int) -> tuple[UOp, int] | None:
  """(i, n) where cond is `e == arange(start, start + n)` along `axis` (written `(e != arange) != True`), e any int
  expression that does not vary along it: i = e - start is the candidate it picks."""
  if cond.op is not Ops.CMPNE or cond.src[1].op is not Ops.CONST or cond.src[1].arg is not True: return None
  ne = cond.src[0]
  if ne.op is not Ops.CMPNE: return None
  for ar, e in (ne.src, ne.src[::-1]):
    if e.dtype.is_int and (found := _arange(ar, axis)) is not None:
      n, start = found
      return (e - start if start else e), n
  return None

def kept_values(red: UOp) -> tuple[UOp, UOp] | None:
  """(condition, values) of a reduce's source that keeps the values where the condition holds and the reduce's
  identity elsewhere: where(c, v, identity), or (for a sum) a one-hot times the values, or the one-hot alone."""
  src, op = red.src[0], red.arg[0]
  if op is Ops.ADD and src.op is Ops.CAST and src.src[0].op is Ops.WHERE:  # a half summed in float: zero casts to zero
    if (inner := kept_values(red.replace(src=(src.src[0],)))) is not None: return inner[0], inner[1].cast(src.dtype)
  if src.op is Ops.WHERE:
    other = src.src[2]
    if other.op is Ops.CONST and other.arg == identity_element(op, other.dtype.scalar()): return src.src[0], src.src[1]
  if op is Ops.MAX and (flipped := _flipped_where(src)) is not None: return flipped
  if op is Ops.ADD and src.op is Ops.CAST and src.src[0].dtype == dtypes.bool:  # a count of the matches
    return src.src[0], UOp.const(src.dtype, 1)
  if src.op is Ops.MUL and op is Ops.ADD:
    for hot, v in (src.src, src.src[::-1]):
      if hot.op is Ops.CAST and hot.src[0].dtype == dtypes.bool: return hot.src[0], v
  return None

def _flipped_where(src: UOp) -> tuple[UOp, UOp] | None:
  """(c, flip(v)) for a max over flip(where(c, v, o)) with flip(o) the max's identity: a min is written as the max of
  the negated values, -x for floats (o = inf), ~x for ints (o = the largest int)."""
  where = src.src[0] if src.op in (Ops.NEG, Ops.XOR) else None
  if where is None or where.op is not Ops.WHERE or (other := where.src[2]).op is not Ops.CONST: return None
  if src.op is Ops.NEG: flipped = -other.arg
  elif src.src[1].op is Ops.CONST: flipped = other.arg ^ src.src[1].arg
  else: return None
  if flipped != identity_element(Ops.MAX, other.dtype.scalar()): return None
  return where.src[0], src.replace(src=(where.src[1],) + src.src[1:])

def _fold(red: UOp) -> UOp | None:
  op, axes = red.arg
  if op not in (Ops.ADD, Ops.MAX) or len(axes) != 1 or (picked := kept_values(red)) is None: return None
  cond, values = picked
  if (found := compared_with_arange(cond, axes[0])) is None: return None
  e, n = found
  fold = AxisFold(axes[0], e, n)
  if fold.e is None or (v := fold.at(values)) is None: return None
  inside = fold.e.lt(0).logical_not() & fold.e.lt(n)
  return inside.where(v, UOp.const(red.dtype, identity_element(op, red.dtype.scalar())))

def fold_gathers(ast: UOp) -> UOp:
  """`ast` with every reduce that picks one candidate by an index (a gather) replaced by a load at that index."""
  if not any(u.op is Ops.REDUCE_AXIS for u in ast.toposort): return ast
  done: dict[UOp, UOp] = {}
  for u in ast.toposort:
    new = u.replace(src=tuple(done[s] for s in u.src)) if u.src else u
    if new.op is Ops.REDUCE_AXIS and (folded := _fold(new)) is not None: new = folded
    done[u] = new
  return done[ast]
