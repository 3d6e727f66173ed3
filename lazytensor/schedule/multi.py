"""Multi-device tensors: the pass that turns ops over Ops.MULTI into per-device ops, and the collectives it inserts.

A tensor spread over devices is one node of the tensor graph, MULTI(piece_0, ..., piece_n-1) with arg (axis, bounds):
piece i lives on device i and holds the slice bounds[i] = [lo, hi) of `axis` (axis None: every piece holds all of the
tensor, replicated; bounds None). Tensor ops build the graph over such nodes in full (logical) shapes, so gradients
are derived as on one device. Before scheduling, pm_multi rewrites that graph bottom-up until every node lives on one
device, so the scheduler, optimizer, JIT and renderers never see more than one:

* a constant or iota on a tuple of devices: one per device (replicated);
* elementwise ops: per device, after resharding the inputs whose layout differs from the first sharded input's;
* a reduce over the sharded axis: per-device reduces, then an all-reduce of the partial results (replicated);
* movement ops: per device; a reshape that splits the sharded axis where a slice boundary cannot follow gathers
  first; a shrink, pad or flip of the sharded axis changes the bounds (slices may become empty or uneven);
* a copy to one device gathers; a copy of a one-device value to a tuple of devices replicates it.

On a DeviceMesh a value is a MULTI over the first mesh axis whose pieces are MULTIs over the next one: each piece
lives on a tuple of devices (a row of the mesh). The rules are the same at every level, since what a rule makes of
the outer level is rewritten again until every node lives on one device; a copy of a MULTI to another tuple of
devices of the same structure moves piece i to device i, keeping its layout, which is what makes an all-reduce over
the first mesh axis run between devices at the same place of each row only.

Collectives are built from COPY nodes and elementwise ops, so the scheduler sees them as copies and kernels and fuses
the combining ops with what surrounds them. Bounds may be uneven (15 rows over 4 devices: 4, 4, 4, 3) or empty.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from lazytensor.dtype import dtypes
from lazytensor.helpers import RING, prod
from lazytensor.uop.graph import (
  Bounds,
  axis_pad,
  axis_shrink,
  const_uop,
  copy_to,
  even_bounds,
  movement,
  multi_leaves,
  own_value,
  reduce_uop,
)
from lazytensor.uop.ops import DeviceLike, GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite

Layout = tuple[int | None, Bounds | None]

def multi_uop(pieces: Sequence[UOp], axis: int | None, bounds: Bounds | None) -> UOp:
  """A MULTI node; an empty piece becomes a constant, so it never costs a kernel or a buffer."""
  pieces = tuple(const_uop(0, p.dtype, p.device, p.shape) if p.size == 0 else p for p in pieces)
  return UOp(Ops.MULTI, pieces[0].dtype, pieces, (axis, bounds))

def _devices(m: UOp) -> tuple[DeviceLike, ...]: return tuple(p.device for p in m.src)

def _per_piece(m: UOp, fn: Callable[[UOp], UOp], layout: Layout | None = None) -> UOp:
  return multi_uop([fn(p) for p in m.src], *(m.arg if layout is None else layout))

def _with_axis(shape: tuple[int, ...], axis: int, size: int) -> tuple[int, ...]:
  return shape[:axis] + (size,) + shape[axis + 1:]

# ---- moving slices between devices ----

# the unsigned integer of each width: what a float's bits are read as
_BITS = {dt.itemsize: dt for dt in (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)}

def _concat(parts: list[tuple[int, UOp]], axis: int, like: UOp, shape: tuple[int, ...], device: DeviceLike) -> UOp:
  """Parts (offset along `axis`, value on `device`) placed side by side into `shape` (with the dtype of `like`):
  padded with zeros and ORed together, a float's as its bits, which the scheduler fuses into one kernel that reads each
  part once. Each element is one part's, exactly: a sum of the padded floats made -0.0 + 0.0 = 0.0."""
  if not parts or prod(shape) == 0: return const_uop(0, like.dtype, device, shape)
  if len(parts) == 1 and parts[0][1].shape == shape: return parts[0][1]
  bits = _BITS[like.dtype.itemsize] if like.dtype.is_float else like.dtype
  padded = [axis_pad(x.bitcast(bits), axis, off, shape[axis] - off - x.shape[axis]) for off, x in parts]
  return combine(Ops.OR, padded).bitcast(like.dtype)

def _local(m: UOp, device: DeviceLike) -> UOp:
  """A replicated value's piece for `device`: its own, or a copy of the first. A piece that is a copy of one value is
  that value, so that whatever is cut from it is cut before it is copied (a scatter, not a broadcast)."""
  devs = _devices(m)
  piece = m.src[devs.index(device)] if device in devs else m.src[0]
  return piece.src[0] if piece.op is Ops.COPY else piece

def _region(m: UOp, axis: int, lo: int, hi: int, device: DeviceLike) -> UOp:
  """The slice [lo, hi) of `axis` of the multi value m (all of its other axes), on `device`."""
  src_axis, src_bounds = m.arg
  if src_axis is None: return copy_to(axis_shrink(_local(m, device), axis, lo, hi), device)
  shape = _with_axis(m.shape, axis, hi - lo)
  parts: list[tuple[int, UOp]] = []
  for p, (plo, phi) in zip(m.src, src_bounds):
    if src_axis != axis:
      if phi > plo: parts.append((plo, copy_to(axis_shrink(p, axis, lo, hi), device)))
    elif (a := max(lo, plo)) < (b := min(hi, phi)):
      parts.append((a - lo, copy_to(axis_shrink(p, axis, a - plo, b - plo), device)))
  return _concat(parts, src_axis, m, shape, device)

def gather(m: UOp, device: DeviceLike) -> UOp:
  """All of the multi value m on one device (a gather: each slice is copied once)."""
  axis, bounds = m.arg
  if axis is None: return copy_to(_local(m, device), device)
  parts = [(lo, copy_to(p, device)) for p, (lo, hi) in zip(m.src, bounds) if hi > lo]
  return _concat(parts, axis, m, m.shape, device)

def relayout(m: UOp, axis: int | None, bounds: Bounds | None) -> tuple[UOp, ...]:
  """m's pieces laid out as (axis, bounds) on m's devices: nothing when it is already, local slices from a replicated
  value, an all-gather to replicate, an all-to-all from another sharded axis."""
  if m.arg == (axis, bounds): return m.src
  if axis is None or bounds is None: return tuple(gather(m, d) for d in _devices(m))
  return tuple(_region(m, axis, lo, hi, d) for d, (lo, hi) in zip(_devices(m), bounds))

# ---- collectives ----

def combine(op: Ops, xs: Sequence[UOp]) -> UOp:
  """xs (on one device) combined elementwise by a reduce op: ADD sums, MUL multiplies, MAX takes the largest."""
  return functools.reduce(lambda a, b: a.alu(op, b), xs)

def all_reduce(op: Ops, partials: Sequence[UOp], devices: Sequence[DeviceLike], ring_bytes: int) -> tuple[UOp, ...]:
  """The partial values combined by `op` (ADD, MUL or MAX), on every device of `devices`. Small values: each device
  receives every other partial (naive; (n-1) copies of the whole value per device, the fewest steps). Large ones, on
  3 or more devices (`ring_bytes` or more): a ring, reduce-scatter then all-gather, in which each device sends
  2(n-1)/n of the value. Along one axis of a mesh, the participants are rows of devices, and copies between them go
  device by device (the naive way, which keeps each row's own layout)."""
  nbytes = partials[0].size * partials[0].dtype.itemsize
  flat_devices = [d for d in devices if isinstance(d, str)]
  if len(partials) > 2 and nbytes >= ring_bytes and len(flat_devices) == len(devices) and \
     all(isinstance(p.device, str) for p in partials):
    return ring_all_reduce(op, partials, flat_devices)
  return tuple(combine(op, [copy_to(p, d) for p in partials]) for d in devices)

def ring_all_reduce(op: Ops, partials: Sequence[UOp], devices: Sequence[str]) -> tuple[UOp, ...]:
  """Ring all-reduce: the flattened partials are cut into one chunk per participant. Reduce-scatter: chunk c starts
  on participant c+1 and travels the ring, each participant adding its own chunk c, until it is complete on c. All-
  gather: each complete chunk travels the ring again, from device to next device, until every device has it."""
  k, shape = len(partials), partials[0].shape
  flat = [movement(p, Ops.RESHAPE, (prod(shape),)) for p in partials]
  chunks = even_bounds(prod(shape), k)
  owners = [str(p.device) for p in partials]
  ring = list(devices) + [d for d in owners if d not in devices]
  out_parts: dict[str, list[tuple[int, UOp]]] = {d: [] for d in devices}
  for c, (lo, hi) in enumerate(chunks):
    if hi <= lo: continue
    acc = axis_shrink(flat[(c + 1) % k], 0, lo, hi)
    for s in range(2, k + 1):
      j = (c + s) % k
      acc = combine(op, [copy_to(acc, owners[j]), axis_shrink(flat[j], 0, lo, hi)])
    start = ring.index(owners[c])
    for s in range(len(ring)):
      dev = ring[(start + s) % len(ring)]
      acc = copy_to(acc, dev)
      if dev in out_parts: out_parts[dev].append((lo, acc))
  return tuple(movement(_concat(out_parts[d], 0, partials[0], (prod(shape),), d), Ops.RESHAPE, shape) for d in devices)

# ---- the rules ----

def _on_devices(x: UOp, d: UOp) -> UOp | None:
  """A constant or iota made on a tuple of devices, or a kernel argument standing for such a constant in the schedule
  cache's abstract graph (schedule/cache.py): one on each."""
  if not isinstance(d.arg, tuple): return None
  return multi_uop([x.replace(src=(d.replace(arg=dev),)) for dev in d.arg], None, None)

def _elementwise(x: UOp) -> UOp | None:
  if not any(s.op is Ops.MULTI for s in x.src): return None
  for s in x.src:
    assert s.op is Ops.MULTI and s.device == x.src[0].device, f"{x.op} mixes devices {s.device}, {x.src[0].device}"
  lead = next((s for s in x.src if s.arg[0] is not None), x.src[0])
  per_src = [relayout(s, *lead.arg) for s in x.src]
  return multi_uop([x.replace(src=srcs) for srcs in zip(*per_src)], *lead.arg)

def _reduce(ctx: int, r: UOp, m: UOp) -> UOp:
  op, axes = r.arg
  axis, bounds = m.arg
  partial = [reduce_uop(p, op, axes) for p in m.src]
  if axis is None or axis not in axes: return multi_uop(partial, axis, bounds)
  live = [p for p, (lo, hi) in zip(partial, bounds) if hi > lo]
  return multi_uop(all_reduce(op, live, _devices(m), ctx), None, None)

def _reshape(r: UOp, m: UOp) -> UOp:
  """A reshape keeps the slices when the sharded axis, with the axes after it, maps onto one new axis whose slice
  boundaries fall on whole rows of it (never an inserted axis of size 1: one device's slice of everything would land
  there and be gathered by the next expand); otherwise the value is gathered first. With no elements, the sizes before
  the axis match at many places (a 0 among them): the axis and the ones after it must hold as many elements too."""
  axis, bounds = m.arg
  new = tuple(r.arg)
  if axis is None: return _per_piece(m, lambda p: movement(p, Ops.RESHAPE, new))
  outer, inner = prod(m.shape[:axis]), prod(m.shape[axis + 1:])
  for b in range(len(new)):
    new_inner = prod(new[b + 1:])
    if prod(new[:b]) != outer or new_inner == 0 or new[b] * new_inner != m.shape[axis] * inner or \
       (new[b] == 1 != m.shape[axis]) or any(x * inner % new_inner for lh in bounds for x in lh): continue
    nb = tuple((lo * inner // new_inner, hi * inner // new_inner) for lo, hi in bounds)
    pieces = [movement(p, Ops.RESHAPE, _with_axis(new, b, hi - lo)) for p, (lo, hi) in zip(m.src, nb)]
    return multi_uop(pieces, b, nb)
  return multi_uop([movement(p, Ops.RESHAPE, new) for p in relayout(m, None, None)], None, None)

def _permute(p: UOp, m: UOp) -> UOp:
  axis = m.arg[0]
  return _per_piece(m, lambda x: movement(x, Ops.PERMUTE, p.arg), (None if axis is None else p.arg.index(axis),
                                                                   m.arg[1]))

def _expand(e: UOp, m: UOp) -> UOp:
  axis, _ = m.arg
  if axis is not None and m.shape[axis] != e.arg[axis]:  # a sharded axis of size 1 grows: replicate it first
    return multi_uop([movement(p, Ops.EXPAND, e.arg) for p in relayout(m, None, None)], None, None)
  return _per_piece(m, lambda p: movement(p, Ops.EXPAND, e.arg if axis is None else
                                          _with_axis(e.arg, axis, p.shape[axis])))

def _pad(pd: UOp, m: UOp) -> UOp:
  """Padding of the sharded axis goes to the slices at its ends; the bounds move by the padding before."""
  axis, bounds = m.arg
  if axis is None or pd.arg[axis] == (0, 0):
    return _per_piece(m, lambda p: movement(p, Ops.PAD, pd.arg))
  before, after = pd.arg[axis]
  n = m.shape[axis]
  pieces, nb = [], []
  for p, (lo, hi) in zip(m.src, bounds):
    b, a = (before if lo == 0 else 0, after if hi == n else 0) if hi > lo else (0, 0)
    pieces.append(movement(p, Ops.PAD, tuple((b, a) if i == axis else r for i, r in enumerate(pd.arg))))
    # an empty slice at the end stays there, past the padding after (the bounds stay in order)
    shift = before + (after if lo == n else 0)
    nb.append((lo + before - b, hi + before + a) if hi > lo else (lo + shift, hi + shift))
  if n == 0: return multi_uop([movement(p, Ops.PAD, pd.arg) for p in relayout(m, None, None)], None, None)
  return multi_uop(pieces, axis, tuple(nb))

def _shrink(s: UOp, m: UOp) -> UOp:
  """A shrink of the sharded axis keeps what each slice holds of the range (possibly nothing)."""
  axis, bounds = m.arg
  if axis is None: return _per_piece(m, lambda p: movement(p, Ops.SHRINK, s.arg))
  start, end = s.arg[axis]
  pieces, nb = [], []
  for p, (lo, hi) in zip(m.src, bounds):
    a, b = max(lo, start), min(hi, end)
    if b <= a: a = b = min(max(lo, start), end)
    local = (a - lo, b - lo) if b > a else (0, 0)
    pieces.append(movement(p, Ops.SHRINK, tuple(local if i == axis else r for i, r in enumerate(s.arg))))
    nb.append((a - start, b - start))
  return multi_uop(pieces, axis, tuple(nb))

def _flip(f: UOp, m: UOp) -> UOp:
  axis, bounds = m.arg
  if axis is None or not f.arg[axis]: return _per_piece(m, lambda p: movement(p, Ops.FLIP, f.arg))
  n = m.shape[axis]
  return _per_piece(m, lambda p: movement(p, Ops.FLIP, f.arg), (axis, tuple((n - hi, n - lo) for lo, hi in bounds)))

def _same_shape(a: DeviceLike, b: DeviceLike) -> bool:
  """Whether two places have the same structure: one device each, or tuples whose entries pair up alike."""
  if isinstance(a, str) or isinstance(b, str): return isinstance(a, str) and isinstance(b, str)
  return len(a) == len(b) and all(_same_shape(x, y) for x, y in zip(a, b))

def _copy(c: UOp, m: UOp) -> UOp:
  """To one device, or to the devices of one of m's pieces (a row of a mesh): gathered there. To m's own devices:
  replicated on them (an all-gather). To other devices of the same structure: each piece moves to the device at its
  place, keeping the layout (how a row of a mesh sends its value to another row). Otherwise replicated on each."""
  if isinstance(c.arg, str) or c.arg in _devices(m): return gather(m, c.arg)
  if c.arg == _devices(m):  # replicated at every level of a mesh: each row's gathered value replicated on its devices
    return multi_uop([p if isinstance(d, str) else UOp(Ops.COPY, p.dtype, (p,), d)
                      for p, d in zip(relayout(m, None, None), c.arg)], None, None)
  if _same_shape(c.arg, m.device): return multi_uop([copy_to(p, d) for p, d in zip(m.src, c.arg)], *m.arg)
  return multi_uop([gather(m, d) for d in c.arg], None, None)

def _replicate(c: UOp, x: UOp) -> UOp | None:
  if x.op is Ops.MULTI or not isinstance(c.arg, tuple): return None
  return multi_uop([copy_to(x, d) for d in c.arg], None, None)

def _assign(a: UOp, t: UOp, v: UOp) -> UOp:
  """Each piece of the target written on its device; a piece that holds nothing of the view written writes nothing."""
  # a view that does not keep them apart is written through a box of its memory that does (frontend/views.assign_uop)
  assert _pieces_are_memory(t), f"assign into a view of shape {t.shape} on {t.device} that merges its pieces"
  return multi_uop([a.replace(src=(tp, vp)) if tp.size else tp for tp, vp in zip(t.src, relayout(v, *t.arg))], *t.arg)

def _pieces_are_memory(t: UOp) -> bool: return all(not p.size or _is_memory(p) for p in multi_leaves(t))

def keeps_pieces_apart(view: UOp) -> bool:
  """Whether `view` (movement ops of memory on several devices) is, on each device, a view of that device's piece: an
  assign into it can write each piece where it lies. One that drops or merges the sharded axis (x[0] of a tensor
  sharded on axis 0) is a value gathered onto each device instead."""
  return _pieces_are_memory(multi_pass(view))

def _unary(x: UOp, m: UOp) -> UOp: return _per_piece(m, lambda p: x.replace(src=(p,)))

def _view(v: UOp, m: UOp) -> UOp:
  assert m.arg[0] is None, "a VIEW of a sharded value: views are only made of buffers and constants"
  return _per_piece(m, lambda p: v.replace(src=(p,)))

MULTI = UPat(Ops.MULTI, name="m")
pm_multi: PatternMatcher[UOp] = PatternMatcher([
  (UPat((Ops.CONST, Ops.IOTA, Ops.DEFINE_VAR), src=(UPat(Ops.DEVICE, name="d"),), name="x"), _on_devices),
  (UPat(GroupOp.Elementwise, name="x"), _elementwise),
  (UPat(Ops.REDUCE_AXIS, src=(MULTI,), name="r"), _reduce),
  (UPat(Ops.RESHAPE, src=(MULTI,), name="r"), _reshape),
  (UPat(Ops.PERMUTE, src=(MULTI,), name="p"), _permute),
  (UPat(Ops.EXPAND, src=(MULTI,), name="e"), _expand),
  (UPat(Ops.PAD, src=(MULTI,), name="pd"), _pad),
  (UPat(Ops.SHRINK, src=(MULTI,), name="s"), _shrink),
  (UPat(Ops.FLIP, src=(MULTI,), name="f"), _flip),
  (UPat(Ops.VIEW, src=(MULTI,), name="v"), _view),
  (UPat(Ops.COPY, src=(MULTI,), name="c"), _copy),
  (UPat(Ops.COPY, src=(UPat.var("x"),), name="c"), _replicate),
  (UPat((Ops.CONTIGUOUS, Ops.DETACH), src=(MULTI,), name="x"), _unary),
  (UPat(Ops.CUSTOM_GRAD, name="c"), lambda c: c.src[0]),  # only gradients look past the value
  (UPat(Ops.ASSIGN, src=(UPat(Ops.MULTI, name="t"), UPat(Ops.MULTI, name="v")), name="a"), _assign),
])

def multi_pass(root: UOp) -> UOp:
  """root's graph with every node on one device: a value on several devices is a MULTI whose arg (and on a mesh, its
  pieces') is the layout the pass gives it. Nothing runs: what only needs a value's layout reads it here."""
  # the ctx (the RING knob, which chooses how to all-reduce) also keeps results from being remembered across calls
  return graph_rewrite(root, pm_multi, ctx=int(RING.value), name="multi")

def is_multi(root: UOp) -> bool:
  """Whether a graph has anything on more than one device."""
  return any(n.op is Ops.MULTI or (n.op in (Ops.COPY, Ops.DEVICE) and isinstance(n.arg, tuple)) for n in root.toposort)

def _is_memory(piece: UOp) -> bool:
  """Whether a piece is (a view of) memory that exists already: realizing it would compute nothing."""
  while piece.op in GroupOp.Movement or piece.op in (Ops.VIEW, Ops.DETACH): piece = piece.src[0]
  return piece.op is Ops.BUFFER

def own_pieces(out: UOp) -> UOp:
  """A multi output with pieces that are memory which exists already and that its other pieces are copied from (the
  source of a replication, or its slice, left on the source's own device: `q.to(devices)`, `shard_`), with those
  pieces copied too. Else the tensor's piece there would be the source's memory and the others its own: a write into
  either tensor would reach one device's piece only, and the replicas would differ. Pieces that nothing was copied
  from stay views (a stack of tensors, each on its own device; a sharded tensor's own pieces)."""
  if out.op is not Ops.MULTI: return out
  sources = 0
  for leaf in multi_leaves(out):
    if not _is_memory(leaf): sources |= leaf.reads
  def copied(u: UOp) -> UOp:
    if u.op is Ops.MULTI: return u.replace(src=tuple(map(copied, u.src)))
    return own_value(u) if _is_memory(u) and u.reads & sources else u
  return copied(out) if sources else out

def split_multi(sink: UOp) -> tuple[list[UOp], Callable[[dict[UOp, UOp]], dict[UOp, UOp]]]:
  """The outputs of `sink` (a SINK of graphs whose realized nodes are buffers: the schedule cache's abstract graph),
  each on one device: a multi output gives one output per piece, each memory of its own (own_pieces). And the function
  that maps what those became after scheduling back to the outputs of `sink`."""
  lowered = multi_pass(sink)
  lowered = lowered.replace(src=tuple(map(own_pieces, lowered.src)))
  flat = [leaf for out in lowered.src for leaf in multi_leaves(out)]
  def regroup(becomes: dict[UOp, UOp]) -> dict[UOp, UOp]:
    def rebuild(new: UOp) -> UOp:
      return new.replace(src=tuple(rebuild(p) for p in new.src)) if new.op is Ops.MULTI else becomes.get(new, new)
    return {**becomes, **{orig: rebuild(new) for orig, new in zip(sink.src, lowered.src)}}
  return flat, regroup
