"""A tensor's graph read as views of buffers: for writes (whether a node is movement ops over a buffer, the view they
make, whether writes through it reach the buffer, the same moves replayed over another base, the values of in-place
ops a gradient must compute), for reading values on the host without running a kernel, and for is_contiguous."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lazytensor.dtype import dtypes, from_storage
from lazytensor.helpers import argsort
from lazytensor.runtime import remote
from lazytensor.runtime.device import buffer_map
from lazytensor.schedule.multi import keeps_pieces_apart
from lazytensor.schedule.scheduler import MOVES, realized_map
from lazytensor.shape.view import ShapeTracker, strides_for_shape
from lazytensor.uop.graph import const_uop, is_own_value, movement
from lazytensor.uop.ops import Ops, UOp

# what a view is made of: movement ops, and DETACH (torch's detach() shares its input's memory: a view that moves
# nothing and stops gradients)
VIEW_OPS = frozenset(MOVES) | {Ops.DETACH}

def moved_buffer(ld: UOp) -> bool:
  """Whether ld is movement ops over a realized buffer (a view of its memory)."""
  ld = unmoved(ld)
  return ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER

def unmoved(ld: UOp) -> UOp:
  """ld without the movement ops (and detaches) on top."""
  while ld.op in VIEW_OPS: ld = ld.src[0]
  return ld

def moved_onto(ld: UOp, old: UOp, new: UOp) -> UOp:
  """ld's movement ops over `old`, replayed over `new`."""
  if ld is old: return new
  return ld.replace(src=(moved_onto(ld.src[0], old, new),))

Moves = tuple[tuple[Ops, Any], ...]

def moves_between(ld: UOp, base: UOp) -> Moves:
  """The view ops (op and arg, the first applied first) that make ld of `base`, which ld moves over."""
  out = []
  while ld is not base:
    out.append((ld.op, ld.arg))
    ld = ld.src[0]
  return tuple(reversed(out))

def replayed(moves: Moves, base: UOp) -> UOp:
  """The view ops `moves` applied to `base`."""
  for op, arg in moves: base = UOp(op, base.dtype, (base,), arg)
  return base

def moves_over(ld: UOp, base: UOp) -> bool:
  """Whether ld is movement ops and detaches (or none) over `base`."""
  while ld is not base and ld.op in VIEW_OPS: ld = ld.src[0]
  return ld is base

def moved_st(ld: UOp) -> ShapeTracker:
  """The view that movement ops over a VIEW of a buffer make of it. Over a value on several devices (MULTI), whose
  arg is its layout and not a view, the view they make of its full shape read densely: an expand or a pad of it is one
  of the pieces cut from it too (schedule/multi.py); where a move merges the pieces, assign_uop writes around it."""
  moves = []
  while ld.op in VIEW_OPS:
    if ld.op in MOVES: moves.append(ld)
    ld = ld.src[0]
  st = ShapeTracker.from_shape(ld.shape) if ld.op is Ops.MULTI else ld.arg
  for m in reversed(moves): st = MOVES[m.op](st, m.arg)
  return st

# each move undone: (its arg, the shape it moved) -> the move that puts its result back in that shape, zeros around it
UNDO: dict[Ops, Callable[[Any, tuple[int, ...]], tuple[Ops, Any]]] = {
  Ops.RESHAPE: lambda arg, shape: (Ops.RESHAPE, shape), Ops.PERMUTE: lambda arg, shape: (Ops.PERMUTE, argsort(arg)),
  Ops.EXPAND: lambda arg, shape: (Ops.SHRINK, tuple((0, n) for n in shape)),  # one copy: a written view shares none
  Ops.PAD: lambda arg, shape: (Ops.SHRINK, tuple((b, b + n) for (b, _), n in zip(arg, shape))),
  Ops.SHRINK: lambda arg, shape: (Ops.PAD, tuple((b, n - e) for (b, e), n in zip(arg, shape))),
  Ops.FLIP: lambda arg, shape: (Ops.FLIP, arg),
}

def placed(view: UOp, base: UOp, value: UOp) -> UOp:
  """value (of view's shape) put where view's elements lie in `base`, which view moves over, zeros elsewhere: each move
  undone, the last one first. Exact in any dtype, where a gradient's adjoint adds the copies of an expand up."""
  while view is not base:
    if view.op in UNDO: value = movement(value, *UNDO[view.op](view.arg, view.src[0].shape))
    view = view.src[0]
  return value

def assign_uop(view: UOp, value: UOp) -> UOp:
  """The ASSIGN that writes value into view (movement ops of memory). On several devices, a view that does not keep
  the pieces apart (x[0] of a tensor sharded on axis 0, which each device would read as a gathered copy) is written
  through the box of its memory that holds its elements instead, a shrink that keeps them apart (the multi pass
  writes the pieces that hold some of it, each where it lies), with those elements replaced: the assign's value is
  then that box's."""
  if not isinstance(view.device, tuple) or keeps_pieces_apart(view):
    return UOp(Ops.ASSIGN, view.dtype, (view, value))
  base = unmoved(view)
  pos, _ = moved_st(view).positions()
  box = tuple((int(c.min()), int(c.max()) + 1) for c in np.unravel_index(pos.reshape(-1), base.shape))
  region = movement(base, Ops.SHRINK, box)
  hit = const_uop(True, dtypes.bool, view.device, view.shape)
  def in_box(v: UOp) -> UOp: return movement(placed(view, base, v), Ops.SHRINK, box)
  return UOp(Ops.ASSIGN, view.dtype, (region, in_box(hit).where(in_box(value), region)))

def row_major(ld: UOp) -> bool:
  """Whether ld's elements lie in row-major order in the memory they are (or will be) computed into: its movement
  ops over a buffer or a computed value make one view of it without masks, whose strides are the dense ones (an
  offset is allowed). A constant has one value, laid out however it is moved: always row-major."""
  moves = []
  while ld.op in MOVES:
    moves.append(ld)
    ld = ld.src[0]
  if ld.op is Ops.VIEW and ld.src[0].op is Ops.CONST: return True
  st = ld.arg if ld.op is Ops.VIEW else ShapeTracker.from_shape(ld.shape)
  for m in reversed(moves): st = MOVES[m.op](st, m.arg)
  if len(st.views) != 1 or st.views[0].mask is not None: return False
  v = st.views[0]
  return all(st1 == st2 for size, st1, st2 in zip(v.shape, v.strides, strides_for_shape(v.shape)) if size > 1)

def assign_values(g: UOp) -> UOp:
  """A gradient g with the in-place ops in it replaced by their values where g needs other contents of their memory:
  an in-place op that a later one overwrites (x.add_(b).mul_(a): the gradient reads the value of the add, which the
  mul's assign overwrites), and one not run yet whose memory g also reads as it was before (v.abs_() read by 1 / v:
  abs's derivative reads v's old value, 1 / v's the new one, which no schedule can order in one kernel). The gradient
  computes what it needs instead of reading a buffer that holds something else by then, or running a write again; a
  write not run stays pending."""
  if not g.writes: return g
  superseded: set[UOp] = set()
  for n in g.toposort:
    if n.op is not Ops.ASSIGN: continue
    if n.src[1].writes & n.src[0].reads:
      superseded.update(m for m in n.src[1].toposort if m.op is Ops.ASSIGN and m.src[0].reads & n.src[0].reads)
    if n not in realized_map and _reads_old_value(g, n): superseded.add(n)
  if not superseded: return g
  done: dict[UOp, UOp] = {}
  for n in g.toposort:
    src = tuple(done[s] for s in n.src)
    # an assign whose value changed would be a second write of the buffer: its value alone
    done[n] = n if src == n.src and n not in superseded else src[1] if n.op is Ops.ASSIGN else n.replace(src=src)
  return done[g]

def _reads_old_value(g: UOp, write: UOp) -> bool:
  """Whether g, other than through the assign `write`, reads the memory it writes as it is before it runs: the buffer
  itself (erfinv_'s derivative, computed from its detached input), or a value realized into it (a graph built before
  the write, whose nodes realize() committed to that memory: abs_'s derivative, the sign of its input)."""
  memory, seen, stack = write.src[0].reads, {write}, [g]
  while stack:
    if (n := stack.pop()) in seen: continue
    seen.add(n)
    if (hit := realized_map.get(n)) is not None:
      if hit.reads & memory: return True
      continue  # a value read from memory: what computed it is not read
    if n.op is Ops.BUFFER and n.reads & memory: return True
    stack.extend(n.src)
  return False

def writable_view(st: ShapeTracker) -> bool:
  """Whether writes through this view of a buffer reach it, as writes through torch's views (a permute, a strided
  slice) do: a single view where every element is one element of the buffer of its own. An expanded view (elements
  that share one) or a padded one (elements outside the buffer) is written as a copy instead."""
  if len(st.views) != 1: return False
  v = st.views[0]
  return v.mask is None and all(stride != 0 for size, stride in zip(v.shape, v.strides) if size > 1)

def host_values(ld: UOp) -> np.ndarray | None:
  """The values of a realized or constant tensor, or of views of one, read on the host without running a kernel;
  None for a lazy one."""
  moves = []
  while ld.op in VIEW_OPS or is_own_value(ld):  # a copy op's result has the values of the view under it
    if ld.op in MOVES: moves.append(ld)
    ld = ld.src[0]
  if ld.op is Ops.MULTI:
    if (whole := _gathered(ld)) is None: return None
    flat, st = whole.reshape(-1), ShapeTracker.from_shape(whole.shape)
  elif ld.op is Ops.VIEW and ld.src[0].op in (Ops.BUFFER, Ops.CONST):
    base = ld.src[0]
    # another rank's memory (runtime/remote.py) is not here to read
    if base.op is Ops.BUFFER and not remote.owns(buffer_map[base].device): return None
    # from_storage: a bfloat16 buffer holds bits, shown as the float32 values they are
    flat = from_storage(buffer_map[base].numpy(), ld.dtype) if base.op is Ops.BUFFER else \
      np.array([base.arg], dtype=np.float32 if ld.dtype == dtypes.bfloat16 else ld.dtype.np)
    st = ld.arg
  else: return None
  for m in reversed(moves): st = MOVES[m.op](st, m.arg)
  return st.gather(flat)

def _gathered(m: UOp) -> np.ndarray | None:
  """A sharded tensor's values: its pieces put together along the sharded axis (one piece when replicated)."""
  pieces = [v for v in (host_values(p) for p in m.src) if v is not None]
  axis, bounds = m.arg
  if len(pieces) < len(m.src): return None  # a piece is lazy
  if axis is None: return pieces[0]
  out = np.empty(m.shape, dtype=pieces[0].dtype)
  for p, (lo, hi) in zip(pieces, bounds): out[(slice(None),) * axis + (slice(lo, hi),)] = p
  return out
