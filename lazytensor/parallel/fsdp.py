"""Fully sharded data parallelism (torch's FSDP2 `fully_shard`, ZeRO stage 3) on a DeviceMesh.

Each parameter is stored sharded along the data-parallel mesh axis (the mesh's first), on its first dimension that no
other mesh axis slices (dimension 0 unless tensor parallelism took it; a parameter whose every dimension another axis
slices, as a column-parallel bias, stays whole along it, its gradient all-reduced), so that each device holds 1/N of
it, of its gradient and of its optimizer state. A module given to fully_shard is a *unit*: when it is called inside
a replica's forward (parallel/data.py), each of its own parameters (not those of units nested in it) is all-gathered
for that replica (a reshard of the parameter, which the multi pass turns into copies between the devices of the
data-parallel axis) and read there. The gathered values are not parameters: nothing holds them once their last reader
has run. With reshard_after_forward (the default, as FSDP2's), that reader is the unit's forward: its backward reads
the weights gathered again from the shards once the gradient of its output exists (a CUSTOM_GRAD whose rule, Reshard,
differentiates the unit over new copies of its weights), so that a unit's gathered weights need not live from its
forward to its backward (8 units of Linear(64, 64) over 2 devices: a step's peak 168 -> 119 KB per device); the root
unit keeps its own (its backward comes first). Units nest as FSDP2's do (a unit per Linear, then per block, then the
root): a unit's rule differentiates it over stand-ins of the weights of the units inside it too, so it gathers theirs
again as well (4 blocks of a layernorm and two Linear(64, 64) units, each block a unit: 185 -> 127 KB). After
backward, the replicas' local gradients of a unit's parameters are reduce-scattered in one collective: each device
receives the sum of its shard only, laid out as the parameter is, and the optimizer steps on shards.

>>> from lazytensor import DeviceMesh, Tensor, nn
>>> from lazytensor.parallel import fully_shard
>>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("dp",))
>>> lin = fully_shard(nn.Linear(4, 2), mesh)
>>> lin.weight.shard_axis, lin.weight.bounds
(0, ((0, 1), (1, 2)))
>>> _ = lin(Tensor.ones(6, 4)).sum().backward()
>>> lin.weight.grad.bounds, lin.weight.grad.tolist()[0]
(((0, 1), (1, 2)), [6.0, 6.0, 6.0, 6.0])
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lazytensor.dtype import dtypes
from lazytensor.frontend.gradient import compute_gradient
from lazytensor.frontend.mixin.multi import DeviceMesh
from lazytensor.frontend.tensor import Tensor
from lazytensor.func.batching import placeholder
from lazytensor.func.checkpoint import outside_reads, rebuild_nodes
from lazytensor.func.tree import flatten
from lazytensor.parallel.data import (
  DataAxes,
  GradSync,
  check_axis,
  check_even,
  check_replica,
  current_replica,
  lay_out,
  make_buckets,
  param_slots,
  piece,
  run_replicas,
  sharded_dims,
  spec_dims,
  spec_of,
  state_of,
  swapped,
  wrap,
)
from lazytensor.uop.graph import copy_to, movement
from lazytensor.uop.ops import Ops, UOp

# per unit whose forward runs now (outermost first): the gathered weights its backward reads gathered again, its own
# (with reshard_after_forward) and those of the units nested in it that reshard theirs. A unit's Reshard rule
# differentiates it over placeholders of the weights it reads, so a nested unit's rule sees placeholders and gathers
# nothing: the enclosing unit's rule gathers them in its stead.
_regathered: list[list[Tensor]] = []

class FullyShard:
  """fully_shard's state for one unit: its own parameters, sharded, and how each is gathered."""
  def __init__(self, module: Any, mesh: DeviceMesh, axis: DataAxes, reshard_after_forward: bool) -> None:
    self.mesh, self.reshard_after_forward = mesh, reshard_after_forward
    self.axes = check_axis(mesh, axis, "fully_shard")
    self.slots = param_slots(module, lambda v: isinstance(state_of(v), FullyShard))
    params, sharded = [p for p, _ in self.slots.values()], []
    self.gathered: dict[int, tuple[Any, ...]] = {}  # each parameter's spec once gathered (its other axes' layout)
    for p in params:
      lay_out(p, mesh, self.axes, "fully_shard")
      dims = spec_dims(mesh, p)
      self.gathered[id(p)] = spec_of(mesh, dims, p.ndim)
      dims = sharded_dims(p, dims, self.axes - 1)
      check_even(mesh, p.shape, dims, "fully_shard")
      p.shard_(mesh, spec_of(mesh, dims, p.ndim))
      sharded.append(dims)
    # one bucket: a unit's gradients are reduce-scattered together, as FSDP2 does (those of parameters left whole
    # all-reduced together)
    self.sync = GradSync(mesh, self.axes, make_buckets(params, sharded, 2**62, self.axes)) if params else None
    self.generation, self.called = -1, set[int]()

  def forward(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], root: bool = False) -> Any:
    r = current_replica(self.mesh)
    if r is None:
      return run_replicas(self.mesh, self.axes, lambda *a, **k: self.forward(call, a, k, root=True), args, kwargs)
    check_replica(r, self.axes, "fully_shard")
    if self.sync is None: return call(*args, **kwargs)
    if r.generation != self.generation:
      self.sync.start("fully_shard")
      self.generation, self.called = r.generation, set()
    if r.index in self.called:
      raise RuntimeError("fully_shard: a unit was called twice in one forward; wrap each call site's module apart")
    self.called.add(r.index)
    leaves = {pid: self.sync.leaf(pid, r.index, piece(p.shard(self.mesh, self.gathered[pid]), self.mesh, self.axes,
                                                      None, r.index)) for pid, (p, _) in self.slots.items()}
    _regathered.append(list(leaves.values()) if self.reshard_after_forward else [])
    try:
      with swapped(self.slots, leaves): out = call(*args, **kwargs)
    finally: regathered = _regathered.pop()
    # an enclosing unit that reshards differentiates this one over stand-ins of what it reads: it gathers these
    # weights again itself
    if not root and _regathered: _regathered[-1].extend(regathered)
    # the root's weights are not resharded (as FSDP2's root): its backward, which comes next, would gather them again
    if root or not self.reshard_after_forward: return out
    return regathered_in_backward(out, (args, kwargs), regathered)

def regathered_in_backward(out: Any, args: Any, gathered: list[Tensor]) -> Any:
  """A unit's output whose backward reads each gathered weight gathered again from its shards (not the forward's
  copy): a CUSTOM_GRAD over the unit's inputs, what it reads from outside (weights of nested units) and the gathered
  weights, whose rule is Reshard."""
  if not isinstance(out, Tensor) or not out.requires_grad: return out
  weights = [w._graph_root() for w in gathered]
  arg_nodes = list(dict.fromkeys(t._graph_root() for t in flatten(args)[0] if isinstance(t, Tensor)))
  kept = [*arg_nodes, *(u for u in outside_reads(out._graph_root(), [*arg_nodes, *weights]) if u not in weights)]
  return out._apply_uop(lambda v, *xs: UOp(Ops.CUSTOM_GRAD, v.dtype, (v, v, *xs), Reshard(len(kept))),
                        *(Tensor(n) for n in kept), *gathered)

@dataclass(frozen=True)
class Reshard:
  """The vector-Jacobian product of a unit's call under reshard_after_forward (the arg of CUSTOM_GRAD(out, out,
  *kept, *weights)): the unit differentiated with each gathered weight gathered again from its shards once the gradient
  of its output exists, so that the forward's gathered copy has its last reader in the unit's forward and is freed
  there, as FSDP2 frees it. What the backward reads of values computed from the `n_kept` first inputs (the unit's
  activations, which read the weights too) is the forward's, as without it: only the weights are read again."""
  n_kept: int

  def __call__(self, ctx: UOp, value: UOp, *inputs: UOp) -> tuple[UOp | None, ...]:
    local = {u: placeholder(u.shape, u.dtype, u.device) for u in inputs}
    seed = placeholder(ctx.shape, ctx.dtype, ctx.device)
    rebuilt = rebuild_nodes(value, local)
    grads = compute_gradient(rebuilt[value], seed, set(local.values()))
    forward = {local[u] for u in inputs[:self.n_kept]}  # and what is computed from them
    for n in rebuilt[value].toposort:
      if any(s in forward for s in n.src): forward.add(n)
    real = {seed: ctx, **{new: old for old, new in rebuilt.items() if new in forward},
            **{local[w]: gathered_again(w, ctx) for w in inputs[self.n_kept:]}}
    found = [grads.get(local[u]) for u in inputs]
    placed = iter(UOp(Ops.SINK, dtypes.void, tuple(g for g in found if g is not None)).substitute(real).src)
    return (None, *(None if g is None else next(placed) for g in found))

def gathered_again(w: UOp, ctx: UOp) -> UOp:
  """The gathered weight w computed again from the shards it reads, each read once ctx exists (so the copies run in
  the backward, not with the forward's, which interning would make them)."""
  shards = [n for n in w.toposort if n.op is Ops.VIEW and n.src and n.src[0].op is Ops.BUFFER]
  return rebuild_nodes(w, {n: read_after(n, ctx) for n in shards})[w]

def read_after(x: UOp, ctx: UOp) -> UOp:
  """x's value, read only once ctx is computed, on any device: where(ctx's first element is NaN, x, x), the flag (one
  element) copied to x's device."""
  first = movement(ctx, Ops.SHRINK, tuple((0, 1) for _ in ctx.shape))
  nan = copy_to(first.ne(first), x.device)
  return movement(movement(nan, Ops.RESHAPE, (1,) * x.ndim), Ops.EXPAND, x.shape).where(x, x)

def fully_shard(module: Any, mesh: DeviceMesh, axis: DataAxes = "dp", reshard_after_forward: bool = True) -> Any:
  """FSDP (ZeRO-3) in place, as torch's fully_shard: the module's own parameters (those of modules given to
  fully_shard before it are theirs) sharded along the mesh axis `axis` (the mesh's first), all-gathered for each
  data-parallel replica when the module is called, their gradients reduce-scattered back to the shards. A tuple of the
  mesh's first axes is HSDP (torch's fully_shard on a 2-D mesh): ("dp", "fsdp") replicates along "dp" and shards along
  "fsdp", every device of both a replica; gradients reduce-scattered along "fsdp", then all-reduced along "dp". Apply
  it to the inner modules (the blocks) first, then to the root, whose call splits the batch over the replicas along
  the first dimension of its tensor arguments. reshard_after_forward (as torch's): the weights gathered for a unit's
  forward are let go after it and gathered again for its backward, one more all-gather per unit for the memory of the
  gathered weights of every unit but one. Returns the module.

  >>> from lazytensor import DeviceMesh, Tensor, nn
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("dp",))
  >>> fully_shard(nn.Linear(4, 6), mesh).weight.shape, Tensor.ones(3).shape
  ((6, 4), (3,))
  """
  wrap(module, FullyShard(module, mesh, axis, reshard_after_forward), "fully_shard")
  return module
