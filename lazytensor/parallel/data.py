"""Data parallelism on a DeviceMesh: `replicate` (torch's DDP), and what fully_shard (FSDP) builds on.

A wrapped module's forward runs once per *replica*: per index along the data-parallel mesh axes (the mesh's first
axis, or its first few: a ("dp", "fsdp", "tp") mesh has 4 replicas over ("dp", "fsdp")), on that replica's devices
(one device on a 1-D mesh; on a ("dp", "tp") mesh, its row of "tp" devices, where tensor parallelism works as it does
on its own). Each replica reads its slice of the batch and its own copy of the
parameters: a leaf of autograd, so that backward leaves each replica its *local* gradient, as each rank of torch's DDP
has. Hooks on those leaves sum them over the replicas with the collectives of parallel/collectives.py, a bucket of
parameters at a time: per device, the local gradients of a bucket flattened into one vector, one all-reduce (or
reduce-scatter) of them over the data-parallel axes, the result cut back into each parameter's `.grad`.

>>> from lazytensor import DeviceMesh, Tensor, nn
>>> from lazytensor.parallel import replicate
>>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("dp",))
>>> model = replicate(nn.Linear(4, 2), mesh)
>>> _ = model(Tensor.ones(6, 4)).sum().backward()      # the batch is sharded over "dp"; its gradients all-reduced
>>> model.weight.grad.device, model.weight.grad.tolist()[0]
(('CPU', 'CPU:1'), [6.0, 6.0, 6.0, 6.0])
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from lazytensor.frontend.mixin.multi import DeviceMesh, SpecEntry
from lazytensor.frontend.tensor import Tensor
from lazytensor.helpers import prod
from lazytensor.parallel import collectives
from lazytensor.runtime.device import Device
from lazytensor.uop.graph import axis_shrink, copy_to, even_bounds
from lazytensor.uop.ops import DeviceLike, Ops, UOp

DEFAULT_BUCKET_BYTES = 25 * 2**20  # torch's bucket_cap_mb=25

# ---- the mesh seen by a replica ----

DataAxes = str | tuple[str, ...]  # the data-parallel mesh axes: a name, or a tuple of names (torch's HSDP's 2-D mesh)

def check_axis(mesh: DeviceMesh, axis: DataAxes, what: str) -> int:
  """The data-parallel axes must be the mesh's first ones, in its order: a replica is then one piece of each tensor's
  top MULTIs. Returns how many they are."""
  if not isinstance(mesh, DeviceMesh): raise TypeError(f"{what}: expected a DeviceMesh, got {mesh!r}")
  names = (axis,) if isinstance(axis, str) else axis
  if not isinstance(names, tuple) or not names or not all(isinstance(n, str) for n in names):
    raise TypeError(f"{what}: axis {axis!r}: expected a mesh axis name or a tuple of them")
  for n in names:
    if n not in mesh.names: raise ValueError(f"{what}: {n!r} is not an axis of the mesh; its axes are {mesh.names}")
  if names != mesh.names[:len(names)]:
    first = "first axis" if len(names) == 1 else f"first {len(names)} axes, in its order"
    raise ValueError(f"{what}: the data-parallel axes {names} must be the mesh's {first}, got a mesh with axes "
                     f"{mesh.names}; put {names} first")
  return len(names)

def replica_devices(mesh: DeviceMesh, axes: int, i: int) -> DeviceLike:
  """Replica i's devices (nested as the mesh's) over the mesh's first `axes` axes, replicas in row-major order."""
  devices = mesh.devices
  for c in collectives.unravel(mesh.shape[:axes], i): devices = devices[c]
  return devices

@functools.cache
def _row(mesh: DeviceMesh, axes: int, i: int) -> DeviceMesh | str:
  """Replica i's devices: the mesh of the other axes (one device where there are none)."""
  row = replica_devices(mesh, axes, i)
  if isinstance(row, str): return row
  return DeviceMesh(Device.flat(row), shape=mesh.shape[axes:], names=mesh.names[axes:])

@dataclass(frozen=True)
class Replica:
  """The replica whose forward runs now: index `index` over the first `axes` axes of `mesh`."""
  mesh: DeviceMesh
  axes: int
  index: int
  generation: int  # which forward of the outermost wrapped module: units pair their replicas' calls by it

def check_replica(r: Replica, axes: int, what: str) -> None:
  """A wrapped module called inside another's replica must split the batch over the same mesh axes."""
  if r.axes != axes:
    raise ValueError(f"{what}: data-parallel over the mesh axes {r.mesh.names[:axes]}, but called inside a forward "
                     f"that is data-parallel over {r.mesh.names[:r.axes]}; give both the same axis")

_active: list[Replica] = []
_generations = iter(range(1 << 62))

def current_replica(mesh: DeviceMesh) -> Replica | None:
  """The replica of `mesh` whose forward runs now, or None outside a data-parallel forward."""
  return next((r for r in reversed(_active) if same_mesh(r.mesh, mesh)), None)

def same_mesh(a: DeviceMesh, b: DeviceMesh) -> bool: return a is b or (a.devices, a.names) == (b.devices, b.names)

def local_mesh(mesh: DeviceMesh) -> DeviceMesh | str:
  """Where a forward lays out its values on `mesh`: the whole mesh, or inside a replica its devices (a mesh of the
  other axes, or one device). Tensor parallelism reads it, so that it runs inside each data-parallel replica."""
  r = current_replica(mesh)
  return mesh if r is None else _row(mesh, r.axes, r.index)

def piece(t: Tensor, mesh: DeviceMesh, axes: int, dim: int | None, i: int) -> Tensor:
  """Replica i's part of t over the mesh's first `axes` axes: its i-th slice of dimension `dim` (None: all of t), on
  replica i's devices. t is laid out on the mesh first (sliced along those axes on `dim`, replicated along the others)
  unless it is already."""
  u = t.lazydata
  if not (t.device == mesh.devices and _laid_out(u, mesh.shape[:axes], dim)):
    if isinstance(t.device, tuple) and t.device != mesh.devices:
      raise ValueError(f"data parallel: a tensor of shape {t.shape} is on {t.device}, not on the mesh {mesh.devices}; "
                       "pass it on one device or on the mesh")
    spec: list[SpecEntry] = [None] * t.ndim
    if dim is not None: spec[dim] = mesh.names[0] if axes == 1 else mesh.names[:axes]
    u = t.shard(mesh, spec).lazydata
  for c in collectives.unravel(mesh.shape[:axes], i):
    # a value replicated on the whole mesh is one COPY to the nested tuple of devices: its piece a COPY to a row
    u = u.src[c] if u.op is Ops.MULTI else copy_to(u.src[0], u.arg[c])
  return Tensor(u)

def _laid_out(u: UOp, sizes: Sequence[int], dim: int | None) -> bool:
  """Whether u's MULTIs slice `dim` evenly (None: replicate) over mesh axes of `sizes`, one level each."""
  if not sizes or dim is None and u.op is Ops.COPY: return True
  want = (None, None) if dim is None else (dim, even_bounds(u.shape[dim], sizes[0]))
  return u.op is Ops.MULTI and u.arg == want and len(u.src) == sizes[0] and \
    all(_laid_out(s, sizes[1:], dim) for s in u.src)

def join(parts: Sequence[Tensor], sizes: Sequence[int], dim: int) -> Tensor:
  """The replicas' results (row-major over data-parallel axes of `sizes`) as one value sliced along those axes on
  `dim`: their concatenation, a MULTI per axis."""
  if len(sizes) > 1:
    step = len(parts) // sizes[0]
    parts = [join(parts[i * step:(i + 1) * step], sizes[1:], dim) for i in range(sizes[0])]
  offsets = [0]
  for p in parts: offsets.append(offsets[-1] + p.shape[dim])
  bounds = tuple(zip(offsets[:-1], offsets[1:]))
  return parts[0]._apply_uop(lambda *us: UOp(Ops.MULTI, us[0].dtype, us, (dim, bounds)), *parts[1:])

def run_replicas(mesh: DeviceMesh, axes: int, forward: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
  """forward(*args, **kwargs) once per replica of `mesh` over its first `axes` axes, each on its slice of every tensor
  argument's first dimension; the results (a Tensor or a tuple of them) put together along their first dimension."""
  sizes, generation = mesh.shape[:axes], next(_generations)
  def part(a: Any, i: int) -> Any: return piece(a, mesh, axes, 0, i) if isinstance(a, Tensor) else a
  outs = []
  for i in range(prod(sizes)):
    _active.append(Replica(mesh, axes, i, generation))
    try: outs.append(forward(*(part(a, i) for a in args), **{k: part(v, i) for k, v in kwargs.items()}))
    finally: _active.pop()
  if all(isinstance(o, Tensor) for o in outs): return join(outs, sizes, 0)
  if all(isinstance(o, tuple) and all(isinstance(t, Tensor) for t in o) for o in outs):
    return tuple(join(parts, sizes, 0) for parts in zip(*outs))
  raise TypeError(f"data parallel: the forward must return a Tensor or a tuple of them, got {type(outs[0]).__name__}")

# ---- the parameters of a module, and their places ----

Slot = tuple[Any, Any]  # (owner, key): owner.key or owner[key] holds a parameter

def param_slots(module: object, stop: Callable[[object], bool]) -> dict[int, tuple[Tensor, list[Slot]]]:
  """The float tensors reachable from `module` (as get_state_dict finds them), each with the places that hold it; the
  objects `stop` names are not entered (nested units of fully_shard)."""
  found: dict[int, tuple[Tensor, list[Slot]]] = {}
  seen: set[int] = set()
  def walk(obj: object) -> None:
    if id(obj) in seen: return
    seen.add(id(obj))
    if isinstance(obj, dict): items: Any = list(obj.items())
    elif isinstance(obj, (list, tuple)): items = list(enumerate(obj))
    elif hasattr(obj, "__dict__"): items = list(vars(obj).items())
    else: return
    for k, v in items:
      if isinstance(v, Tensor) and v.dtype.is_float:
        if isinstance(obj, tuple): raise TypeError(f"data parallel: a parameter of shape {v.shape} is held in a tuple; "
                                                   "hold parameters in attributes, lists or dicts")
        found.setdefault(id(v), (v, []))[1].append((obj, k))
      elif not isinstance(v, Tensor) and (v is module or not stop(v)): walk(v)
  walk(module)
  return found

@contextmanager
def swapped(slots: dict[int, tuple[Tensor, list[Slot]]], stand_ins: dict[int, Tensor]) -> Iterator[None]:
  """The parameters replaced by their stand-ins in every place that holds them, for the duration of the block."""
  def put(owner: Any, key: Any, value: Tensor) -> None:
    if isinstance(owner, (list, dict)): owner[key] = value
    else: setattr(owner, key, value)
  try:
    for pid, (_, places) in slots.items():
      for owner, key in places: put(owner, key, stand_ins[pid])
    yield
  finally:
    for p, places in slots.values():
      for owner, key in places: put(owner, key, p)

# ---- wrapping a module's class, as torch's FSDP2 does ----

class ParallelModule:
  """What a wrapped module's class derives from (its own class with this in front, made for that one module, holding
  its parallel state): calls run through the state. The state lives on the class, not in a table keyed by the module:
  a state refers to its module (its parameters' places), so a table entry would keep every wrapped module alive for
  good; a class of its own is collected with the module (a reference cycle), and is no attribute that get_state_dict
  would walk."""
  parallel_state: Any = None

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    return type(self).parallel_state.forward(super().__call__, args, kwargs)  # type: ignore[misc]

def wrap(module: Any, state: object, what: str) -> None:
  """Route module's calls through `state` (its `forward(call, args, kwargs)`)."""
  if isinstance(module, ParallelModule):
    raise ValueError(f"{what}: the module is already wrapped by {type(state_of(module)).__name__}")
  if not callable(module): raise TypeError(f"{what}: expected a callable module, got {type(module).__name__}")
  cls = type(module)
  module.__class__ = type(cls.__name__, (ParallelModule, cls), {"__module__": cls.__module__, "parallel_state": state})

def state_of(module: object) -> Any: return type(module).parallel_state if isinstance(module, ParallelModule) else None

# ---- gradients summed over the replicas, a bucket at a time ----

def spec_dims(mesh: DeviceMesh, t: Tensor) -> tuple[int | None, ...]:
  """The tensor dimension each mesh axis slices in t's layout (None: replicated along it)."""
  return mesh.dims_of(mesh.spec(t), t.ndim)

def check_even(mesh: DeviceMesh, shape: tuple[int, ...], dims: Sequence[int | None], what: str) -> None:
  """Every dimension a mesh axis slices must split evenly over its devices (the collectives move equal blocks)."""
  for d in range(len(shape)):
    n = prod(mesh.shape[k] for k, dk in enumerate(dims) if dk == d)
    if shape[d] % n:
      names = tuple(mesh.names[k] for k, dk in enumerate(dims) if dk == d)
      raise ValueError(f"{what}: dimension {d} ({shape[d]}) of a parameter of shape {shape} does not split evenly over "
                       f"the {n} devices of the mesh axes {names}")

@dataclass
class Bucket:
  """Parameters whose local gradients are summed over the replicas by one collective. `dims`: per parameter, the
  tensor dimension each mesh axis slices in its gradient's layout (the data-parallel axes' entries None for an
  all-reduce; for a reduce-scatter, one of them the dimension it scatters)."""
  params: list[Tensor]
  dims: list[tuple[int | None, ...]]
  got: dict[tuple[int, int], Tensor] = field(default_factory=dict)  # (param index, replica) -> local gradient

def make_buckets(params: Sequence[Tensor], dims: Sequence[tuple[int | None, ...]], cap_bytes: int,
                 axes: int) -> list[Bucket]:
  """Consecutive parameters in reverse order (their gradients are ready about then, as torch's DDP buckets), a new
  bucket once one holds cap_bytes; those whose gradients are reduce-scattered (an entry of the first `axes`, the
  data-parallel ones, not None) apart from the others."""
  if not isinstance(cap_bytes, int) or cap_bytes < 0:
    raise ValueError(f"bucket size {cap_bytes!r}: expected a number of bytes >= 0")
  out: list[Bucket] = []
  for scatter in (True, False):  # a bucket is all reduce-scattered or all all-reduced
    size = cap_bytes
    for p, d in reversed(list(zip(params, dims))):
      if any(x is not None for x in d[:axes]) != scatter: continue
      if size >= cap_bytes: out, size = out + [Bucket([], [])], 0
      out[-1].params.append(p)
      out[-1].dims.append(d)
      size += p.numel() * p.dtype.itemsize
  return out

class GradSync:
  """Sums the replicas' local gradients of each bucket over the data-parallel axes (the mesh's first `axes`) once all
  of them are in (backward calls each replica leaf's hook), and adds the result to each parameter's .grad."""
  def __init__(self, mesh: DeviceMesh, axes: int, buckets: list[Bucket]) -> None:
    self.mesh, self.axes, self.buckets = mesh, axes, buckets
    self.replicas = prod(mesh.shape[:axes])
    self.index = {id(p): (i, k) for i, b in enumerate(buckets) for k, p in enumerate(b.params)}
    # the replicas' leaves, alive until the backward that reaches them (autograd fills live leaves only); dropped once
    # every bucket is reduced, so that nothing keeps the values they read or their local gradients
    self.leaves: list[Tensor] = []
    self.pending = 0

  def start(self, what: str) -> None:
    """A new forward: the last one's gradients must all have come in, or none (a forward without backward)."""
    for b in self.buckets:
      if b.got:
        missing = sorted({p for p in range(len(b.params)) for i in range(self.replicas) if (p, i) not in b.got})
        raise RuntimeError(f"{what}: the last backward reached only some replicas' copies of the parameters of shapes "
                           f"{[b.params[p].shape for p in missing]}: every parameter must take part in the loss")
      b.got.clear()
    self.leaves, self.pending = [], len(self.buckets)

  def leaf(self, param: int, replica: int, value: Tensor) -> Tensor:
    """Replica `replica`'s copy of the parameter whose id is `param`: a leaf whose gradient goes to its bucket."""
    leaf = value.detach().requires_grad_()
    bucket, index = self.index[param]
    def hook(g: Tensor) -> None:
      b = self.buckets[bucket]
      b.got[(index, replica)] = g
      if len(b.got) == len(b.params) * self.replicas:
        self._reduce(b)
        b.got.clear()
        self.pending -= 1
        if not self.pending: self.leaves = []
    leaf.register_hook(hook)
    self.leaves.append(leaf)
    return leaf

  def _reduce(self, b: Bucket) -> None:
    mesh, axes = self.mesh, self.axes
    devices = Device.flat(mesh.devices)
    per_row = len(devices) // self.replicas
    # per device: each parameter's local gradient there, cut into the blocks its summed gradient is laid out in
    blocks: list[list[list[Tensor]]] = []  # device -> param -> the blocks for each shard (one for an all-reduce)
    local = {(k, i): blocks_of(g.lazydata, replica_devices(mesh, axes, i), b.dims[k][axes:])
             for (k, i), g in b.got.items()}
    scatter = next((a for a in range(axes) if b.dims[0][a] is not None), None)  # the mesh axis that shards them
    n = 1 if scatter is None else mesh.shape[scatter]
    for c in range(len(devices)):
      row = [Tensor(local[(k, c // per_row)][c % per_row]) for k in range(len(b.params))]
      blocks.append([list(g.chunk(n, cast(int, d[scatter]))) if scatter is not None else [g]
                     for g, d in zip(row, b.dims)])
    # the flat vector: for a reduce-scatter, the blocks for shard 0 of every parameter first, then shard 1's...
    flats = [Tensor.cat(*[blk[j].flatten() for j in range(n) for blk in dev]) for dev in blocks]
    summed = self._sum(collectives.stack([f.to(d) for f, d in zip(flats, devices)], mesh), scatter)
    sizes = [blk[0].numel() for blk in blocks[0]]
    mine = [self._local(summed, c, sum(sizes), scatter).to(d) for c, d in enumerate(devices)]
    for k, p in enumerate(b.params):
      lo = sum(sizes[:k])
      parts = [m[lo:lo + sizes[k]].reshape(blocks[c][k][0].shape) for c, m in enumerate(mine)]
      g = parts[0]._apply_uop(lambda *us, k=k: collectives.assemble(mesh, b.dims[k], us), *parts[1:])
      p.grad = g if p.grad is None else p.grad + g

  def _sum(self, stack: Tensor, scatter: int | None) -> Tensor:
    """The stack summed over the data-parallel axes: all-reduced, or reduce-scattered along the mesh axis `scatter`
    and then, as torch's HSDP, all-reduced along the others (1/N of the bucket moves between the replicated groups)."""
    names = self.mesh.names[:self.axes]
    if scatter is None: return collectives.all_reduce(stack, "sum", mesh=self.mesh, axis=names)
    summed = collectives.reduce_scatter(stack, "sum", mesh=self.mesh, axis=names[scatter])
    # the stack dimensions left are the other mesh axes': a sum over those of data-parallel axes is their all-reduce
    others = tuple(a - (a > scatter) for a in range(self.axes) if a != scatter)
    return summed.sum(others) if others else summed

  def _local(self, summed: Tensor, c: int, size: int, scatter: int | None) -> Tensor:
    """Device c's part of a summed stack: its row of the other mesh axes, and for a reduce-scatter its slice."""
    coords = collectives.unravel(self.mesh.shape, c)
    mine = summed[tuple(coords[self.axes:])] if len(coords) > self.axes else summed
    return mine if scatter is None else mine[coords[scatter] * size:(coords[scatter] + 1) * size]

def blocks_of(u: UOp, devices: DeviceLike, dims: Sequence[int | None]) -> list[UOp]:
  """Each device's block of u laid out on a mesh of `devices` (nested, one level per axis) by `dims` (the dimension
  each axis slices, or None), in the mesh's order: the pieces where u is laid out so already, slices of u otherwise."""
  if isinstance(devices, str): return [copy_to(u, devices)]
  d, n = dims[0], len(devices)
  bounds = even_bounds(u.shape[d], n) if d is not None else None
  if u.op is Ops.MULTI and u.arg == (d, bounds): parts: Sequence[UOp] = u.src
  else: parts = [u] * n if bounds is None else [axis_shrink(u, cast(int, d), *b) for b in bounds]
  return [blk for part, sub in zip(parts, devices) for blk in blocks_of(part, sub, dims[1:])]

# ---- replicate ----

class DataParallel:
  """replicate's state: the module's parameters, replicated along the data-parallel axis, and their buckets."""
  def __init__(self, module: Any, mesh: DeviceMesh, axis: DataAxes, bucket_cap_bytes: int,
               shard_gradients: bool) -> None:
    self.mesh, self.axes = mesh, check_axis(mesh, axis, "replicate")
    self.slots = param_slots(module, lambda _: False)
    params = [p for p, _ in self.slots.values()]
    dims = []
    for p in params:
      lay_out(p, mesh, self.axes, "replicate")
      d = spec_dims(mesh, p)
      if shard_gradients: d = sharded_dims(p, d, self.axes - 1)  # ZeRO-2: each replica keeps the sum of its slices
      check_even(mesh, p.shape, d, "replicate")
      dims.append(d)
    self.sync = GradSync(mesh, self.axes, make_buckets(params, dims, bucket_cap_bytes, self.axes))

  def forward(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    r = current_replica(self.mesh)
    if r is None:
      self.sync.start("replicate")
      return run_replicas(self.mesh, self.axes, lambda *a, **k: self.forward(call, a, k), args, kwargs)
    check_replica(r, self.axes, "replicate")
    leaves = {pid: self.sync.leaf(pid, r.index, piece(p, self.mesh, self.axes, None, r.index))
              for pid, (p, _) in self.slots.items()}
    with swapped(self.slots, leaves): return call(*args, **kwargs)

def lay_out(p: Tensor, mesh: DeviceMesh, axes: int, what: str) -> None:
  """p on the mesh, in place: replicated, unless it is laid out on it already (by parallelize_module), then along
  every axis but the data-parallel ones (the first `axes`) as it is."""
  if p.device == mesh.devices:
    if any(d is not None for d in spec_dims(mesh, p)[:axes]):
      raise ValueError(f"{what}: a parameter of shape {p.shape} is already sliced along the data-parallel axes "
                       f"{mesh.names[:axes]}")
    return
  if isinstance(p.device, tuple):
    raise ValueError(f"{what}: a parameter of shape {p.shape} is on {p.device}, not on the mesh {mesh.devices}")
  p.shard_(mesh, None)

def spec_of(mesh: DeviceMesh, dims: Sequence[int | None], ndim: int) -> tuple[SpecEntry, ...]:
  """The spec of a layout given as the dimension each mesh axis slices."""
  names: list[tuple[str, ...]] = [() for _ in range(ndim)]
  for k, d in enumerate(dims):
    if d is not None: names[d] += (mesh.names[k],)
  return tuple(None if not n else n[0] if len(n) == 1 else n for n in names)

def sharded_dims(p: Tensor, dims: tuple[int | None, ...], axis: int) -> tuple[int | None, ...]:
  """p's layout `dims` (replicated along the data-parallel axes) with the mesh axis at position `axis` slicing p's
  first dimension that no other mesh axis slices; where they slice them all (a column-parallel bias), p stays whole
  along it."""
  taken = {d for d in dims if d is not None}
  return (*dims[:axis], next((d for d in range(p.ndim) if d not in taken), None), *dims[axis + 1:])

def replicate(module: Any, mesh: DeviceMesh, axis: DataAxes = "dp", bucket_cap_bytes: int = DEFAULT_BUCKET_BYTES,
              shard_gradients: bool = False) -> Any:
  """Data parallelism (torch's DistributedDataParallel, named as torch's composable `replicate`), in place: the
  module's parameters replicated along the mesh axis `axis` (the mesh's first; or a tuple of its first axes, their
  devices all replicas; the other axes keep the layouts parallelize_module gave), each call split over the replicas
  along the first dimension of its tensor arguments, and the replicas' local gradients summed a bucket at a time
  (buckets of about `bucket_cap_bytes`, each one all-reduce). shard_gradients: a reduce-scatter along the last of the
  axes instead (then an all-reduce along the others), each replica keeping the sum of its slice of each gradient (for
  ZeroRedundancyOptimizer(stage=2) over the same axes). Returns the module.

  >>> from lazytensor import DeviceMesh, Tensor, nn
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("dp",))
  >>> lin = replicate(nn.Linear(3, 1), mesh)
  >>> lin(Tensor.ones(4, 3)).shape, lin.weight.device
  ((4, 1), ('CPU', 'CPU:1'))
  """
  wrap(module, DataParallel(module, mesh, axis, bucket_cap_bytes, shard_gradients), "replicate")
  return module
