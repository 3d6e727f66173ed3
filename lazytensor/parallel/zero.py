"""ZeRO stages 1 and 2 (torch's ZeroRedundancyOptimizer, DeepSpeed's stages) on a DeviceMesh.

The parameters stay replicated along the data-parallel axis (the mesh's first, or a tuple of its first axes), as
replicate() lays them out; the optimizer steps on a copy of each parameter sharded along that axis (the last, of a
tuple), on its first dimension no other mesh axis slices, so each device holds the optimizer state of 1/N of every
parameter. Each step reads each gradient sharded (stage 1: the all-reduced gradient sliced where it lies; stage 2:
replicate(shard_gradients=True) reduce-scatters the gradients, so each device only ever holds the sum of its slice),
steps the shards, and all-gathers them back into the replicated parameters.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lazytensor.frontend.mixin.multi import DeviceMesh
from lazytensor.frontend.tensor import Tensor
from lazytensor.nn.optim import Optimizer
from lazytensor.parallel.data import DataAxes, check_axis, check_even, lay_out, sharded_dims, spec_dims, spec_of


class ZeroRedundancyOptimizer(Optimizer):
  """An optimizer (`optimizer_class(params, **defaults)`, as SGD or Adam) whose state is sharded along the mesh axis
  `axis` (ZeRO stage 1; stage 2 also expects the gradients sharded, by replicate(shard_gradients=True)).

  >>> from lazytensor import DeviceMesh, Tensor, nn
  >>> from lazytensor.nn.optim import Adam
  >>> from lazytensor.parallel import replicate
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("dp",))
  >>> lin = replicate(nn.Linear(4, 2), mesh)
  >>> opt = ZeroRedundancyOptimizer([lin.weight, lin.bias], Adam, mesh, lr=0.1)
  >>> _ = lin(Tensor.ones(2, 4)).sum().backward()
  >>> opt.step()
  >>> opt.optimizer.m[0].bounds, lin.weight.device
  (((0, 1), (1, 2)), ('CPU', 'CPU:1'))
  """
  def __init__(self, params: list[Tensor], optimizer_class: Callable[..., Optimizer], mesh: DeviceMesh,
               axis: DataAxes = "dp", stage: int = 1, **defaults: Any) -> None:  # no Optimizer.__init__: shards train
    self.axes = check_axis(mesh, axis, "ZeroRedundancyOptimizer")
    if stage not in (1, 2): raise ValueError(f"ZeroRedundancyOptimizer: stage {stage!r} must be 1 or 2")
    self.mesh, self.stage = mesh, stage
    self.params = list({id(p): p for p in params}.values())
    self.buffers: list[Tensor] = []
    self.specs, self.shards = [], []
    for p in self.params:
      lay_out(p, mesh, self.axes, "ZeroRedundancyOptimizer")
      dims = spec_dims(mesh, p)
      self.specs.append(spec_of(mesh, dims, p.ndim))
      dims = sharded_dims(p, dims, self.axes - 1)
      check_even(mesh, p.shape, dims, "ZeroRedundancyOptimizer")
      self.shards.append(p.detach().shard(mesh, spec_of(mesh, dims, p.ndim)).contiguous().realize()
                         .requires_grad_())
    self.optimizer = optimizer_class(self.shards, **defaults)
    self.lr = self.optimizer.lr  # learning-rate schedulers move the inner optimizer's

  def _step(self) -> list[Tensor]:
    for p, s in zip(self.params, self.shards):
      if p.grad is None: raise RuntimeError(f"ZeroRedundancyOptimizer: no gradient for a parameter of shape {p.shape}; "
                                            "call backward() first")
      g = p.grad.detach()
      shard_axis = self.axes - 1  # the data-parallel axis that shards
      sharded = isinstance(p.grad.device, tuple) and spec_dims(self.mesh, p.grad)[shard_axis] is not None
      if self.stage == 2 and spec_dims(self.mesh, s)[shard_axis] is not None and not sharded:
        raise ValueError(f"ZeroRedundancyOptimizer(stage=2): the gradient of a parameter of shape {p.shape} is not "
                         f"sharded along {self.mesh.names[shard_axis]!r}; make the module with replicate(..., "
                         "shard_gradients=True)")
      s.grad = g.shard(self.mesh, self.mesh.spec(s))  # stage 1: a slice where it lies; stage 2: already so
    updated = self.optimizer._step()
    return updated + [p.assign(s.detach().shard(self.mesh, spec)) for p, s, spec in
                      zip(self.params, self.shards, self.specs)]
