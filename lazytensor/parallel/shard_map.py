"""shard_map: per-device code on a DeviceMesh, with collectives named by mesh axis (JAX's shard_map).

`shard_map(f, mesh, in_specs, out_specs)(*xs)` lays each x out on the mesh by its spec and runs f once per device, on
that device's block of each x: plain Tensor code on tensors of the block's shape, on that device. Inside f, the
collectives (psum, pmax, pmin, pmean, all_gather, psum_scatter, all_to_all, ppermute, axis_index) name the mesh axes
they run along. The results of f, one per device, are put together by out_specs: a dimension that names mesh axes is
the devices' results side by side along it; along a mesh axis that out_specs does not name, the result is replicated,
and check_rep checks that f's result is the same on every device along it.

How f runs. f runs once per device, each run in a thread of its own, one thread at a time: a device's f runs until its
next collective, then the next device's runs; once every device has reached it, the collective is built from every
device's operand (with the functions of parallel/collectives.py, so it becomes the copies and kernels of the multi
pass) and each device's f goes on with its part of the result. So f may read values (print a block) and every device
must call the same collectives in the same order, as in any SPMD program (a mismatch is a ValueError naming it).

Gradients. Each collective is a CUSTOM_GRAD node on each device whose sources are the operands of every device of its
group, and whose rule is the collective's transpose, as in JAX: psum's is the identity on each device (the gradient of
a value replicated along an axis is held whole by each device), all_gather's is psum_scatter, psum_scatter's is
all_gather, all_to_all's is the all_to_all back, ppermute's the inverse permutation. The rules read the gradient of a
value that is the same on every device of an axis (an input replicated along it, a psum's result) as the whole
gradient on each device, and the gradient of a value that varies along it as each device's own share; where a value
of the first kind meets one of the second (Megatron's replicated input times a column-parallel weight), JAX inserts a
`pvary` whose transpose is a psum. Here, once every device's f has returned, a pass over the graph finds which mesh
axes each value varies along and puts that pvary (over the same values of the other devices of the group) where they
meet: the input gradient's all-reduce of Megatron's tensor parallelism comes out of the rules, with no custom function.
"""
from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from lazytensor.dtype import dtypes
from lazytensor.frontend.mixin.multi import DeviceMesh, Spec
from lazytensor.frontend.tensor import Tensor
from lazytensor.parallel import collectives
from lazytensor.runtime.device import Device
from lazytensor.uop.graph import const_uop, copy_to, movement, multi_leaves
from lazytensor.uop.ops import Ops, UOp

Axes = frozenset[str]

# ---- the mesh seen from one device ----

def _flat(mesh: DeviceMesh, coords: Sequence[int]) -> int:
  c = 0
  for i, size in zip(coords, mesh.shape): c = c * size + i
  return c

def _group(mesh: DeviceMesh, c: int, axes: tuple[int, ...]) -> list[int]:
  """The devices (flat indices) that differ from device c only along the mesh axes `axes`, the first axis major."""
  coords, members = collectives.unravel(mesh.shape, c), []
  for idx in itertools.product(*(range(mesh.shape[a]) for a in axes)):
    for a, i in zip(axes, idx): coords[a] = i
    members.append(_flat(mesh, coords))
  return members

def _axis_positions(mesh: DeviceMesh, axis_name: str | Sequence[str], what: str) -> tuple[int, ...]:
  names = (axis_name,) if isinstance(axis_name, str) else tuple(axis_name)
  if not names or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
    raise TypeError(f"{what}: expected a mesh axis name or a tuple of distinct ones, got {axis_name!r}")
  for n in names:
    if n not in mesh.names: raise ValueError(f"{what}: {n!r} is not an axis of the mesh; its axes are {mesh.names}")
  return tuple(mesh.names.index(n) for n in names)

# ---- the rules: CUSTOM_GRAD args, each a vector-Jacobian product ----

class _Rule:
  """A CUSTOM_GRAD arg of shard_map: `varying` tells the mesh axes its value varies along, given those of the
  operand on its own device (sources[position])."""
  position: int
  axes: Axes
  def varying(self, operand: Axes) -> Axes: return self.axes

@dataclass(frozen=True)
class _Entry(_Rule):
  """Device `position`'s block of an input (CUSTOM_GRAD(block, input)): its gradient is the input's at that block,
  zero on the other devices; the sum over devices is the input's gradient, laid out as the input."""
  position: int
  axes: Axes

  def __call__(self, ctx: UOp, whole: UOp) -> tuple[UOp]:
    leaves = itertools.count()
    def place(m: UOp) -> UOp:
      if m.op is Ops.MULTI: return m.replace(src=tuple(place(p) for p in m.src))
      return ctx if next(leaves) == self.position else const_uop(0.0, ctx.dtype, m.device, m.shape)
    return (place(whole),)

@dataclass(frozen=True)
class _AxisIndex(_Rule):
  """axis_index's value on one device: an integer (no gradient) that varies along `axes`."""
  position: int
  axes: Axes
  def __call__(self, ctx: UOp, *xs: UOp) -> tuple[None, ...]: return (None,) * len(xs)

@dataclass(frozen=True)
class _Collective(_Rule):
  """A collective over the mesh axes `axes` (their names), on the device at `position` of its group: the sources are
  the operands of the group's devices. `reduces`: its result is the same on the group's devices."""
  position: int
  axes: Axes
  reduces: ClassVar[bool] = False

  def varying(self, operand: Axes) -> Axes: return operand - self.axes if self.reduces else operand | self.axes

def _to(t: Tensor, device: object) -> UOp: return copy_to(t.lazydata, cast(str, device))

@dataclass(frozen=True)
class _Psum(_Collective):
  # psum's transpose: the gradient of its result, the same on every device, is that of each device's operand
  reduces: ClassVar[bool] = True
  scale: float = 1.0

  def __call__(self, ctx: UOp, *xs: UOp) -> tuple[UOp | None, ...]:
    g = ctx if self.scale == 1.0 else (Tensor(ctx) * self.scale).lazydata
    return tuple(g if i == self.position else None for i in range(len(xs)))

@dataclass(frozen=True)
class _Pmax(_Collective):
  # the gradient goes to the devices whose operand is the result, shared evenly between ties (as Tensor.max's)
  reduces: ClassVar[bool] = True
  op: str = "max"

  def __call__(self, ctx: UOp, *xs: UOp) -> tuple[UOp | None, ...]:
    mine = Tensor(xs[self.position])
    here = [Tensor(copy_to(x, mine.device)) for x in xs]
    best = here[0]
    for h in here[1:]: best = best.maximum(h) if self.op == "max" else best.minimum(h)
    hits = Tensor.stack(*[h == best for h in here]).float().sum(0)
    g = (Tensor(ctx) * (mine == best).float() / hits).cast(mine.dtype).lazydata
    return tuple(g if i == self.position else None for i in range(len(xs)))

@dataclass(frozen=True)
class _AllGather(_Collective):
  # all_gather's transpose is psum_scatter: each device's part of the gradient goes back to the device it came from,
  # and the autograd's sum over the devices' contributions is the psum
  axis: int = 0
  tiled: bool = False

  def __call__(self, ctx: UOp, *xs: UOp) -> tuple[UOp, ...]:
    g, n = Tensor(ctx), len(xs)
    parts = g.chunk(n, self.axis) if self.tiled else g.unbind(self.axis)
    return tuple(_to(p, x.device) for p, x in zip(parts, xs))

@dataclass(frozen=True)
class _PsumScatter(_Collective):
  # psum_scatter's transpose is all_gather: each device's operand gets the gradient of the part it was scattered to
  axis: int = 0
  tiled: bool = False

  def __call__(self, ctx: UOp, *xs: UOp) -> tuple[UOp, ...]:
    g = Tensor(ctx) if self.tiled else Tensor(ctx).unsqueeze(self.axis)
    size = g.shape[self.axis]
    pads = [(0, 0)] * g.ndim
    pads[self.axis] = (self.position * size, (len(xs) - 1 - self.position) * size)
    return tuple(_to(g.pad(pads), x.device) for x in xs)

@dataclass(frozen=True)
class _AllToAll(_Collective):
  # all_to_all's transpose is the all_to_all back: device j's part of the gradient that came from device i goes to
  # device i, at the place of chunk j of its operand
  split: int = 0
  concat: int = 0
  tiled: bool = False

  def __call__(self, ctx: UOp, *xs: UOp) -> tuple[UOp, ...]:
    g, n = Tensor(ctx), len(xs)
    parts = g.chunk(n, self.concat) if self.tiled else g.unbind(self.concat)
    out = []
    for p, x in zip(parts, xs):
      p = p if self.tiled else p.unsqueeze(self.split)
      size = p.shape[self.split]
      pads = [(0, 0)] * p.ndim
      pads[self.split] = (self.position * size, (n - 1 - self.position) * size)
      out.append(_to(p.pad(pads), x.device))
    return tuple(out)

@dataclass(frozen=True)
class _Ppermute(_Collective):
  # ppermute's transpose: the gradient goes back to the device the value came from
  source: int | None = None

  def __call__(self, ctx: UOp, *xs: UOp) -> tuple[UOp | None, ...]:
    return tuple(copy_to(ctx, x.device) if i == self.source else None for i, x in enumerate(xs))

@dataclass(frozen=True)
class _Pvary(_Rule):
  """A value that is the same on the devices of its group, read where values that vary along the group's axes are:
  the same value, whose transpose is a psum (each device's share of the gradient is sent to every device)."""
  position: int
  axes: Axes

  def __call__(self, ctx: UOp, *xs: UOp) -> tuple[UOp, ...]: return tuple(copy_to(ctx, x.device) for x in xs)

def _custom(value: Tensor, operands: Sequence[Tensor], rule: _Rule) -> Tensor:
  """value, whose gradient reaches `operands` through `rule`."""
  return operands[0]._apply_uop(lambda *us: UOp(Ops.CUSTOM_GRAD, value.dtype, (value.lazydata, *us), rule),
                                *operands[1:])

# ---- the collectives, built once every device of the mesh has reached one ----

def _psum(xs: list[Tensor], axes: Axes, op: str) -> list[Tensor]:
  whole = collectives.all_reduce(collectives.stack(xs), "sum" if op == "mean" else op)
  if op == "mean": whole = whole / len(xs)
  def rule(i: int) -> _Rule:
    if op in ("max", "min"): return _Pmax(i, axes, op=op)
    return _Psum(i, axes, scale=1 / len(xs) if op == "mean" else 1.0)
  return [_custom(whole.to(x.device), xs, rule(i)) for i, x in enumerate(xs)]

def _all_gather(xs: list[Tensor], axes: Axes, axis: int, tiled: bool) -> list[Tensor]:
  whole = collectives.all_gather(collectives.stack(xs))  # (n, *shape) on every device of the group
  out = []
  for i, x in enumerate(xs):
    v = whole.to(x.device).movedim(0, axis)
    if tiled: v = v.reshape(*x.shape[:axis], len(xs) * x.shape[axis], *x.shape[axis + 1:])
    out.append(_custom(v, xs, _AllGather(i, axes, axis=axis, tiled=tiled)))
  return out

def _psum_scatter(xs: list[Tensor], axes: Axes, axis: int, tiled: bool) -> list[Tensor]:
  n = len(xs)
  whole = collectives.reduce_scatter(collectives.stack([x.movedim(axis, 0) for x in xs]))
  size = xs[0].shape[axis] // n
  out = []
  for i, x in enumerate(xs):
    v = whole[i * size:(i + 1) * size].to(x.device).movedim(0, axis)
    out.append(_custom(v if tiled else v.squeeze(axis), xs, _PsumScatter(i, axes, axis=axis, tiled=tiled)))
  return out

def _all_to_all(xs: list[Tensor], axes: Axes, split: int, concat: int, tiled: bool) -> list[Tensor]:
  n = len(xs)
  # device j receives chunk j of every operand's split axis, by source: (n, chunk of the split axis, the rest)
  whole = collectives.all_to_all(collectives.stack([x.movedim(split, 0) for x in xs]))
  size = xs[0].shape[split] // n
  out = []
  for j, x in enumerate(xs):
    v = whole[:, j * size:(j + 1) * size].to(x.device).movedim(1, split + 1)
    if tiled:
      v = v.movedim(0, concat)
      v = v.reshape(*v.shape[:concat], n * v.shape[concat + 1], *v.shape[concat + 2:])
    else: v = v.squeeze(split + 1).movedim(0, concat)
    out.append(_custom(v, xs, _AllToAll(j, axes, split=split, concat=concat, tiled=tiled)))
  return out

def _ppermute(xs: list[Tensor], axes: Axes, perm: tuple[tuple[int, int], ...]) -> list[Tensor]:
  source = {dst: src for src, dst in perm}
  out = []
  for d, x in enumerate(xs):
    v = xs[source[d]].to(x.device) if d in source else x.zeros_like()
    out.append(_custom(v, xs, _Ppermute(d, axes, source=source.get(d))))
  return out

_BUILD: dict[str, Callable[..., list[Tensor]]] = {"psum": _psum, "all_gather": _all_gather,
                                                 "psum_scatter": _psum_scatter, "all_to_all": _all_to_all,
                                                 "ppermute": _ppermute}

# ---- f on every device, one at a time ----

@dataclass(frozen=True)
class _Call:
  """A collective that one device's f asked for: `kind` (a key of _BUILD) over the mesh axes `axes` (positions)."""
  name: str
  kind: str
  axes: tuple[int, ...]
  params: tuple[Any, ...]
  x: Tensor

  def signature(self) -> tuple[Any, ...]: return (self.name, self.axes, self.params, self.x.shape, self.x.dtype)

@dataclass(frozen=True)
class _Returned:
  value: Any

@dataclass(frozen=True)
class _Raised:
  error: BaseException

class _Abandoned(Exception):
  """Raised inside f on a device whose run is given up: another device's f raised or asked for something else."""

_here = threading.local()  # in a thread of shard_map: .run (the _Run) and .device (its flat index on the mesh)

class _Run:
  """One call of a shard_mapped function: f on each device of the mesh in a thread of its own, one at a time (the
  module's docstring), and the values f's results are made of (for the pass that puts in the pvarys)."""
  def __init__(self, mesh: DeviceMesh) -> None:
    self.mesh = mesh
    self.devices = Device.flat(mesh.devices)
    n = len(self.devices)
    self.go = [threading.Event() for _ in range(n)]
    self.back = threading.Event()
    self.stops: list[_Call | _Returned | _Raised | None] = [None] * n
    self.replies: list[Tensor] = []
    self.abandoned = False
    # each value that stands for the same thing on every device (an input's block, a collective's result): the list
    # of them by device, and the device of each
    self.family: dict[UOp, tuple[list[UOp], int]] = {}

  def remember(self, values: list[Tensor]) -> None:
    nodes = [v.lazydata for v in values]
    if all(u.op is Ops.CUSTOM_GRAD for u in nodes):  # under no_grad they are DETACHed: no gradient, no pvary
      self.family.update({u: (nodes, c) for c, u in enumerate(nodes)})

  def meet(self, c: int, call: _Call) -> Tensor:
    """Device c's f waits at `call` until every device has reached it; its part of the result."""
    self.stops[c] = call
    self.back.set()
    self.go[c].wait()
    self.go[c].clear()
    if self.abandoned: raise _Abandoned()
    return self.replies[c]

  def _device(self, c: int, f: Callable[..., Any], args: list[Tensor]) -> None:
    self.go[c].wait()
    self.go[c].clear()
    if self.abandoned: return
    _here.run, _here.device = self, c
    try: self.stops[c] = _Returned(f(*args))
    except _Abandoned: self.stops[c] = None
    except BaseException as e: self.stops[c] = _Raised(e)  # noqa: BLE001 (re-raised by the caller's thread)
    self.back.set()

  def run(self, f: Callable[..., Any], blocks: list[list[Tensor]]) -> list[Any]:
    """f's result on each device."""
    threads = [threading.Thread(target=self._device, args=(c, f, b), daemon=True) for c, b in enumerate(blocks)]
    for t in threads: t.start()
    try:
      while True:
        for c in range(len(threads)):
          self.go[c].set()
          self.back.wait()
          self.back.clear()
          if isinstance(stop := self.stops[c], _Raised): raise stop.error
        stops = list(self.stops)
        if all(isinstance(s, _Returned) for s in stops): return [cast(_Returned, s).value for s in stops]
        self._check_same(stops)
        calls = cast(list[_Call], stops)
        self.replies = self._build(calls)
    finally:
      self.abandoned = True
      for c, t in enumerate(threads):
        self.go[c].set()
        t.join()

  def _check_same(self, stops: list[Any]) -> None:
    def said(s: object) -> str:
      if not isinstance(s, _Call): return "returned"
      names = tuple(self.mesh.names[a] for a in s.axes)
      return f"{s.name}{s.params or ''} over {names} of a {s.x.dtype} operand of shape {s.x.shape}"
    if all(isinstance(s, _Call) for s in stops) and len({s.signature() for s in stops}) == 1: return
    told = ", ".join(f"{d}: {said(s)}" for d, s in zip(self.devices, stops))
    raise ValueError(f"shard_map: every device must call the same collectives in the same order, with operands of "
                     f"the same shape; at this point they did not ({told})")

  def _build(self, calls: list[_Call]) -> list[Tensor]:
    first = calls[0]
    names = frozenset(self.mesh.names[a] for a in first.axes)
    replies: list[Tensor | None] = [None] * len(calls)
    for c in range(len(calls)):
      if replies[c] is not None: continue
      members = _group(self.mesh, c, first.axes)
      results = _BUILD[first.kind]([calls[m].x for m in members], names, *first.params)
      for m, r in zip(members, results): replies[m] = r
    done = cast(list[Tensor], replies)
    self.remember(done)
    return done

# ---- the collectives, called inside f ----

def _current(what: str) -> tuple[_Run, int]:
  run = getattr(_here, "run", None)
  if run is None:
    raise ValueError(f"{what}: called outside shard_map; collectives named by mesh axis run inside the function that "
                     "shard_map maps over the devices of a mesh")
  return run, _here.device

def _meet(what: str, kind: str, x: Tensor, axis_name: str | Sequence[str], *params: Any) -> Tensor:
  run, c = _current(what)
  axes = _axis_positions(run.mesh, axis_name, what)
  if not isinstance(x, Tensor): raise TypeError(f"{what}: expected a Tensor, got {type(x).__name__}")
  return run.meet(c, _Call(what, kind, axes, params, x))

def _dim(x: Tensor, axis: int, what: str, extra: int = 0) -> int:
  if isinstance(axis, bool) or not isinstance(axis, int) or not -(x.ndim + extra) <= axis < x.ndim + extra:
    raise IndexError(f"{what}: axis {axis!r} does not exist for an operand of shape {x.shape}")
  return axis % (x.ndim + extra)

def _size(axis_name: str | Sequence[str], what: str) -> int:
  run, _ = _current(what)
  n = 1
  for a in _axis_positions(run.mesh, axis_name, what): n *= run.mesh.shape[a]
  return n

def _splits(x: Tensor, dim: int, n: int, tiled: bool, what: str) -> None:
  if (x.shape[dim] % n if tiled else x.shape[dim] != n):
    want = f"a multiple of {n}" if tiled else f"{n} (the devices along the axes; tiled=True splits any multiple)"
    raise ValueError(f"{what}: dimension {dim} of the operand of shape {x.shape} must be {want}")

def psum(x: Tensor, axis_name: str | Sequence[str]) -> Tensor:
  """The sum of x over the devices along the mesh axes `axis_name` (all-reduce), on each of them."""
  return _meet("psum", "psum", x, axis_name, "sum")

def pmean(x: Tensor, axis_name: str | Sequence[str]) -> Tensor:
  """The mean of x over the devices along the mesh axes `axis_name`, on each of them."""
  return _meet("pmean", "psum", x, axis_name, "mean")

def pmax(x: Tensor, axis_name: str | Sequence[str]) -> Tensor:
  """The elementwise largest x of the devices along the mesh axes `axis_name`, on each of them."""
  return _meet("pmax", "psum", x, axis_name, "max")

def pmin(x: Tensor, axis_name: str | Sequence[str]) -> Tensor:
  """The elementwise smallest x of the devices along the mesh axes `axis_name`, on each of them."""
  return _meet("pmin", "psum", x, axis_name, "min")

def all_gather(x: Tensor, axis_name: str | Sequence[str], axis: int = 0, tiled: bool = False) -> Tensor:
  """Every x of the devices along `axis_name`, on each of them: stacked on a new dimension `axis`, or with
  tiled=True, side by side along the dimension `axis`."""
  dim = _dim(x, axis, "all_gather", extra=0 if tiled else 1)
  return _meet("all_gather", "all_gather", x, axis_name, dim, bool(tiled))

def psum_scatter(x: Tensor, axis_name: str | Sequence[str], scatter_dimension: int = 0,
                 tiled: bool = False) -> Tensor:
  """psum(x, axis_name), of which the device at index i along the axes keeps part i of the dimension
  `scatter_dimension` (of n parts; without tiled, that dimension has size n and is dropped): each device receives only
  its part."""
  dim = _dim(x, scatter_dimension, "psum_scatter")
  _splits(x, dim, _size(axis_name, "psum_scatter"), tiled, "psum_scatter")
  return _meet("psum_scatter", "psum_scatter", x, axis_name, dim, bool(tiled))

def all_to_all(x: Tensor, axis_name: str | Sequence[str], split_axis: int, concat_axis: int,
               tiled: bool = False) -> Tensor:
  """x cut into n parts along `split_axis`: the device at index j along the axes receives part j of every device's x,
  put together along `concat_axis` in the order of the devices (without tiled, split_axis has size n and is dropped,
  and the parts are stacked on a new dimension concat_axis of the result)."""
  split = _dim(x, split_axis, "all_to_all")
  concat = _dim(x, concat_axis, "all_to_all")
  _splits(x, split, _size(axis_name, "all_to_all"), tiled, "all_to_all")
  return _meet("all_to_all", "all_to_all", x, axis_name, split, concat, bool(tiled))

def ppermute(x: Tensor, axis_name: str | Sequence[str], perm: Sequence[tuple[int, int]]) -> Tensor:
  """x sent along the mesh axes `axis_name` by the (source, destination) index pairs of `perm`: a device that no pair
  sends to gets zeros."""
  n = _size(axis_name, "ppermute")
  pairs = tuple((int(s), int(d)) for s, d in perm)
  srcs, dsts = [s for s, _ in pairs], [d for _, d in pairs]
  if any(not 0 <= i < n for i in srcs + dsts) or len(set(srcs)) != len(srcs) or len(set(dsts)) != len(dsts):
    raise ValueError(f"ppermute: perm {tuple(perm)} must pair distinct sources with distinct destinations, each an "
                     f"index in range({n}) along {axis_name!r}")
  return _meet("ppermute", "ppermute", x, axis_name, pairs)

def axis_size(axis_name: str | Sequence[str]) -> int:
  """How many devices lie along the mesh axes `axis_name` (JAX's lax.axis_size), inside shard_map."""
  return _size(axis_name, "axis_size")

def axis_index(axis_name: str | Sequence[str]) -> Tensor:
  """This device's index along the mesh axes `axis_name` (an int32 scalar; over several axes, the first is the major
  one)."""
  run, c = _current("axis_index")
  axes = _axis_positions(run.mesh, axis_name, "axis_index")
  coords, index = collectives.unravel(run.mesh.shape, c), 0
  for a in axes: index = index * run.mesh.shape[a] + coords[a]
  value = Tensor(index, device=run.devices[c], dtype=dtypes.int32)
  return _custom(value, [value], _AxisIndex(0, frozenset(run.mesh.names[a] for a in axes)))

# ---- where values that are the same along an axis meet values that vary along it ----

NONE: Axes = frozenset()

def _rule(u: UOp) -> _Rule | None: return u.arg if u.op is Ops.CUSTOM_GRAD and isinstance(u.arg, _Rule) else None

class _Varying:
  """The mesh axes each value of f's graph varies along (JAX's replication checking), and that graph rebuilt with a
  pvary where a value is read by one that varies along more axes than it does. A pvary goes on the values it stands
  for (inputs' blocks, collectives' results): pvary(y*2) is pvary(y)*2, the same value with the same transpose."""
  def __init__(self, run: _Run, outs: Sequence[UOp]) -> None:
    self.run = run
    self.of: dict[UOp, Axes] = {}  # nodes that depend on f's inputs or collectives: the axes they vary along
    for node in UOp(Ops.SINK, dtypes.void, tuple(outs)).toposort:
      if (rule := _rule(node)) is not None:
        operand = node.src[1 + rule.position] if isinstance(rule, _Collective) else None
        self.of[node] = rule.varying(self.of.get(operand, NONE) if operand is not None else NONE)
      elif any(s in self.of for s in node.src): self.of[node] = NONE.union(*(self.of.get(s, NONE) for s in node.src))
    self.done: dict[tuple[UOp, Axes], UOp] = {}

  def _key(self, s: UOp, axes: Axes) -> tuple[UOp, Axes]: return (s, axes - self.of[s] if s in self.of else NONE)

  def _needs(self, node: UOp, extra: Axes) -> list[tuple[UOp, Axes]]:
    rule = _rule(node)
    if node not in self.of: return []
    if rule is not None and extra: return [(m, NONE) for m in self._family(node, extra)[0]] + [(node, NONE)]
    if isinstance(rule, _Collective): return [self._key(s, rule.axes) for s in node.src[1:]]
    if rule is not None: return []
    return [self._key(s, self.of[node] | extra) for s in node.src]

  def _family(self, node: UOp, axes: Axes) -> tuple[list[UOp], int]:
    siblings, c = self.run.family[node]
    members = _group(self.run.mesh, c, tuple(i for i, n in enumerate(self.run.mesh.names) if n in axes))
    return [siblings[m] for m in members], members.index(c)

  def _make(self, node: UOp, extra: Axes) -> UOp:
    rule = _rule(node)
    if node not in self.of: return node
    if rule is not None and extra:
      base = self.done[(node, NONE)]
      if not node.dtype.is_float or node not in self.run.family: return base
      members, position = self._family(node, extra)
      return UOp(Ops.CUSTOM_GRAD, node.dtype, (base, *(self.done[(m, NONE)] for m in members)), _Pvary(position, extra))
    if isinstance(rule, _Collective):
      return node.replace(src=(node.src[0], *(self.done[self._key(s, rule.axes)] for s in node.src[1:])))
    if rule is not None: return node
    return node.replace(src=tuple(self.done[self._key(s, self.of[node] | extra)] for s in node.src))

  def rebuilt(self, root: UOp) -> UOp:
    """root with the pvarys in (iteratively: graphs are deeper than Python's recursion)."""
    stack: list[tuple[UOp, Axes, bool]] = [(root, NONE, False)]
    while stack:
      node, extra, ready = stack.pop()
      if (node, extra) in self.done: continue
      if ready: self.done[(node, extra)] = self._make(node, extra)
      else:
        stack.append((node, extra, True))
        stack.extend((n, e, False) for n, e in self._needs(node, extra) if (n, e) not in self.done)
    return self.done[(root, NONE)]

# ---- f's inputs and results ----

def _layout(mesh: DeviceMesh, spec: object, x: Tensor, what: str, split: bool) -> tuple[int | None, ...]:
  """The tensor dimension each mesh axis slices (None: replicated along it), from a spec that may leave out trailing
  dimensions; to `split` x, each dimension must split evenly over the devices that slice it (every device's block has
  one shape)."""
  if spec is not None and (isinstance(spec, str) or not isinstance(spec, (tuple, list))):
    raise TypeError(f"shard_map: {what}: expected a spec (a tuple of one mesh axis name, tuple of names or None per "
                    f"dimension) or None, got {spec!r}")
  if spec is not None and len(spec) > x.ndim:
    raise ValueError(f"shard_map: {what}: the spec {tuple(spec)} has more entries than the {x.ndim} dimensions of a "
                     f"tensor of shape {x.shape}")
  full = None if spec is None else (*spec, *[None] * (x.ndim - len(spec)))
  dims = mesh.dims_of(cast(Spec, full), x.ndim)
  for d in range(x.ndim if split else 0):
    n = 1
    for k, dk in enumerate(dims):
      if dk == d: n *= mesh.shape[k]
    if x.shape[d] % n:
      raise ValueError(f"shard_map: {what}: dimension {d} ({x.shape[d]}) of the shape {x.shape} does not split evenly "
                       f"over the {n} devices of the mesh axes {full[d] if full else None!r}")
  return dims

Region = tuple[tuple[int, int], ...]  # a [lo, hi) per dimension

def _regions(mesh: DeviceMesh, dims: tuple[int | None, ...], shape: tuple[int, ...]) -> list[Region]:
  """Each device's block (a [lo, hi) per dimension) of a whole of `shape` laid out by `dims`."""
  out = []
  for c in range(len(Device.flat(mesh.devices))):
    coords, region = collectives.unravel(mesh.shape, c), []
    for d, size in enumerate(shape):
      index, parts = 0, 1
      for k, dk in enumerate(dims):
        if dk == d: index, parts = index * mesh.shape[k] + coords[k], parts * mesh.shape[k]
      region.append((index * size // parts, (index + 1) * size // parts))
    out.append(tuple(region))
  return out

def _laid_out(u: UOp, mesh: DeviceMesh, dims: tuple[int | None, ...]) -> bool:
  """Whether u is already laid out on the mesh by dims (its blocks are its pieces: nothing to cut or copy)."""
  def level(k: int, v: UOp) -> bool:
    if k == len(mesh.shape): return isinstance(v.device, str)
    if v.op is not Ops.MULTI or len(v.src) != mesh.shape[k]: return False
    d = dims[k]
    want = (None, None) if d is None else (d, tuple((i * v.shape[d] // mesh.shape[k], (i + 1) * v.shape[d] //
                                                     mesh.shape[k]) for i in range(mesh.shape[k])))
    return v.arg == want and all(level(k + 1, p) for p in v.src)
  return u.device == mesh.devices and level(0, u)

def _blocks(run: _Run, x: Tensor, dims: tuple[int | None, ...]) -> list[Tensor]:
  """Each device's block of x, as f sees it: a tensor on that device whose gradient is x's at that block."""
  mesh = run.mesh
  def whole(u: UOp) -> UOp:
    if _laid_out(u, mesh, dims): return u
    regions = _regions(mesh, dims, u.shape)
    blocks = [copy_to(movement(u, Ops.SHRINK, r), d) for r, d in zip(regions, run.devices)]
    return collectives.assemble(mesh, dims, blocks)
  w = x._apply_uop(whole)
  axes = frozenset(mesh.names[k] for k, d in enumerate(dims) if d is not None)
  leaves = multi_leaves(w.lazydata if w.lazydata.op is Ops.MULTI else w.lazydata.src[0])
  blocks = [_custom(Tensor(leaf), [w], _Entry(c, axes)) for c, leaf in enumerate(leaves)]
  run.remember(blocks)
  return blocks

@dataclass(frozen=True)
class _Exit:
  """f's results on the devices put together (CUSTOM_GRAD(whole, *results)): each result gets the gradient of its
  block of the whole, a device whose result stands in for another's (`regions` None) none."""
  regions: tuple[Region | None, ...]

  def __call__(self, ctx: UOp, *results: UOp) -> tuple[UOp | None, ...]:
    return tuple(None if r is None else copy_to(movement(ctx, Ops.SHRINK, r), u.device)
                 for r, u in zip(self.regions, results))

def _result(run: _Run, vary: _Varying, per_device: list[Tensor], spec: object, check_rep: bool, what: str) -> Tensor:
  """f's results on the devices, one Tensor laid out on the mesh by `spec`. Along a mesh axis the spec does not name,
  the result must be the same on every device (check_rep); unchecked, that of the device at index 0 is taken."""
  mesh = run.mesh
  dims = _layout(mesh, spec, per_device[0], what, split=False)
  named = frozenset(mesh.names[k] for k, d in enumerate(dims) if d is not None)
  results = [vary.rebuilt(t._graph_root()) for t in per_device]
  varying = NONE.union(*(vary.of.get(u, NONE) for u in results), *(vary.of.get(t._graph_root(), NONE)
                                                                     for t in per_device))
  if (unnamed := varying - named) and check_rep:
    raise ValueError(f"shard_map: {what} varies along the mesh axes {tuple(sorted(unnamed))} (it is computed from "
                     f"values that differ along them), but out_specs {spec!r} does not name them, which says that it "
                     f"is the same on each device: psum over them, name them in out_specs, or pass check_rep=False")
  lead = [i for i, n in enumerate(mesh.names) if n in unnamed]
  def stand_in(c: int) -> int:  # the device whose result is taken for device c's
    coords = collectives.unravel(mesh.shape, c)
    for a in lead: coords[a] = 0
    return _flat(mesh, coords)
  blocks = [u if stand_in(c) == c else copy_to(results[stand_in(c)], run.devices[c]) for c, u in enumerate(results)]
  regions = _regions(mesh, dims, collectives.assemble(mesh, dims, blocks).shape)
  exit_rule = _Exit(tuple(r if stand_in(c) == c else None for c, r in enumerate(regions)))
  node = UOp(Ops.CUSTOM_GRAD, blocks[0].dtype, (collectives.assemble(mesh, dims, blocks), *results), exit_rule)
  return per_device[0]._apply_uop(lambda *_: node, *per_device[1:])

def _results(run: _Run, outs: list[Any], out_specs: object, check_rep: bool) -> Tensor | tuple[Tensor, ...]:
  one = isinstance(outs[0], Tensor)
  per_device = [[o] if one else o for o in outs]
  n = len(per_device[0])
  for d, o in zip(run.devices, per_device):
    if not isinstance(o, (tuple, list)) or len(o) != n or not all(isinstance(t, Tensor) for t in o):
      raise TypeError(f"shard_map: f must return a Tensor or a tuple of them, the same on every device; on {d} it "
                      f"returned {o!r}")
    for t, first in zip(o, per_device[0]):
      if t.shape != first.shape or t.dtype != first.dtype:
        raise ValueError(f"shard_map: f's results must have one shape and dtype on every device: {t.shape} {t.dtype} "
                         f"on {d}, {first.shape} {first.dtype} on {run.devices[0]}")
  specs = [out_specs] if one else _spec_list(out_specs, n, "out_specs")
  vary = _Varying(run, [t._graph_root() for o in per_device for t in o])
  got = tuple(_result(run, vary, [o[i] for o in per_device], specs[i], check_rep,
                      "f's result" if one else f"f's result {i}") for i in range(n))
  return got[0] if one else got

def _spec_list(specs: object, n: int, what: str) -> list[object]:
  if not isinstance(specs, (tuple, list)) or len(specs) != n:
    raise ValueError(f"shard_map: {what} must hold one spec per {'argument' if what == 'in_specs' else 'result'} "
                     f"({n}), got {specs!r}")
  return list(specs)

def shard_map(f: Callable[..., Any], mesh: DeviceMesh, in_specs: Sequence[Spec | None],
              out_specs: Spec | Sequence[Spec | None] | None, check_rep: bool = True) -> Callable[..., Any]:
  """f mapped over the devices of `mesh` (JAX's shard_map): the returned function lays each argument out on the mesh
  by its spec in `in_specs` (per dimension a mesh axis, a tuple of them or None; None for the whole: replicated; left-
  out trailing dimensions are None), runs f on every device with that device's block of each, and puts f's results
  together by `out_specs` (one spec, or one per result when f returns a tuple). Inside f, psum, pmean, pmax, pmin,
  all_gather, psum_scatter, all_to_all, ppermute and axis_index name the mesh axes they run along. Gradients flow
  through it, each collective's by its transpose. check_rep: refuse a result that varies along a mesh axis its spec
  does not name (it would be claimed the same on every device).

  >>> from lazytensor import DeviceMesh, Tensor, shard_map
  >>> from lazytensor.parallel.shard_map import psum
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("tp",))
  >>> x, w = Tensor([[1.0, 2.0, 3.0, 4.0]]), Tensor([[1.0], [1.0], [2.0], [2.0]])
  >>> f = shard_map(lambda x, w: psum(x @ w, "tp"), mesh, in_specs=((None, "tp"), ("tp", None)), out_specs=None)
  >>> f(x, w).tolist()
  [[17.0]]
  """
  if not isinstance(mesh, DeviceMesh): raise TypeError(f"shard_map: expected a DeviceMesh, got {mesh!r}")
  def mapped(*args: Tensor) -> Any:
    if getattr(_here, "run", None) is not None: raise ValueError("shard_map: f may not call shard_map in turn")
    for i, a in enumerate(args):
      if not isinstance(a, Tensor): raise TypeError(f"shard_map: argument {i} is a {type(a).__name__}, not a Tensor")
    specs = _spec_list(in_specs, len(args), "in_specs")
    run = _Run(mesh)
    per_arg = [_blocks(run, a, _layout(mesh, s, a, f"argument {i}", split=True))
               for i, (a, s) in enumerate(zip(args, specs))]
    outs = run.run(f, [[blocks[c] for blocks in per_arg] for c in range(len(run.devices))])
    return _results(run, outs, out_specs, check_rep)
  return mapped
