"""Fully sharded data parallelism (torch's FSDP2 `fully_shard`, ZeRO stage 3) on a DeviceMesh.

Each parameter is stored sharded along the data-parallel mesh axis (the mesh's first), on its first dimension that no
other mesh axis slices (dimension 0 unless tensor parallelism took it; a parameter whose every dimension another axis
slices, as a column-parallel bias, stays whole along it, its gradient all-reduced), so that each device holds 1/N of
it, of its gradient and of its optimizer state. A module given to fully_shard is a *unit*: when it is called inside
a replica's forward (parallel/data.py), each of its own parameters (not those of units nested in it) is all-gathered
for that replica (a reshard of the parameter, which the multi pass turns into copies between the devices of the
data-parallel axis) and read there. The gathered values are not parameters: nothing holds them once their last reader
(the unit's backward) has run. After backward, the replicas' local gradients of a unit's parameters are
reduce-scattered in one collective: each device receives the sum of its shard only, laid out as the parameter is, and
the optimizer steps on shards.

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
from typing import Any

from lazytensor.frontend.mixin.multi import DeviceMesh
from lazytensor.parallel.data import (
  GradSync,
  check_axis,
  check_even,
  current_replica,
  first_free_dim,
  lay_out,
  make_buckets,
  param_slots,
  piece,
  run_replicas,
  spec_dims,
  spec_of,
  state_of,
  swapped,
  wrap,
)


class FullyShard:
  """fully_shard's state for one unit: its own parameters, sharded, and how each is gathered."""
  def __init__(self, module: Any, mesh: DeviceMesh, axis: str) -> None:
    check_axis(mesh, axis, "fully_shard")
    self.mesh = mesh
    self.slots = param_slots(module, lambda v: isinstance(state_of(v), FullyShard))
    params, sharded = [p for p, _ in self.slots.values()], []
    self.gathered: dict[int, tuple[Any, ...]] = {}  # each parameter's spec once gathered (its other axes' layout)
    for p in params:
      lay_out(p, mesh, "fully_shard")
      dims = spec_dims(mesh, p)
      self.gathered[id(p)] = spec_of(mesh, dims, p.ndim)
      dims = (first_free_dim(p, dims), *dims[1:])
      check_even(mesh, p.shape, dims, "fully_shard")
      p.shard_(mesh, spec_of(mesh, dims, p.ndim))
      sharded.append(dims)
    # one bucket: a unit's gradients are reduce-scattered together, as FSDP2 does (those of parameters left whole
    # all-reduced together)
    self.sync = GradSync(mesh, make_buckets(params, sharded, cap_bytes=2**62)) if params else None
    self.generation, self.called = -1, set[int]()

  def forward(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    r = current_replica(self.mesh)
    if r is None: return run_replicas(self.mesh, lambda *a, **k: self.forward(call, a, k), args, kwargs)
    if self.sync is None: return call(*args, **kwargs)
    if r.generation != self.generation:
      self.sync.start("fully_shard")
      self.generation, self.called = r.generation, set()
    if r.index in self.called:
      raise RuntimeError("fully_shard: a unit was called twice in one forward; wrap each call site's module apart")
    self.called.add(r.index)
    leaves = {pid: self.sync.leaf(pid, r.index, piece(p.shard(self.mesh, self.gathered[pid]), self.mesh, None, r.index))
              for pid, (p, _) in self.slots.items()}
    with swapped(self.slots, leaves): return call(*args, **kwargs)

def fully_shard(module: Any, mesh: DeviceMesh, axis: str = "dp") -> Any:
  """FSDP (ZeRO-3) in place, as torch's fully_shard: the module's own parameters (those of modules given to
  fully_shard before it are theirs) sharded along the mesh axis `axis` (the mesh's first), all-gathered for each
  data-parallel replica when the module is called, their gradients reduce-scattered back to the shards. Apply it to
  the inner modules (the blocks) first, then to the root, whose call splits the batch over the replicas along the first
  dimension of its tensor arguments. Returns the module.

  >>> from lazytensor import DeviceMesh, Tensor, nn
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("dp",))
  >>> fully_shard(nn.Linear(4, 6), mesh).weight.shape, Tensor.ones(3).shape
  ((6, 4), (3,))
  """
  wrap(module, FullyShard(module, mesh, axis), "fully_shard")
  return module
