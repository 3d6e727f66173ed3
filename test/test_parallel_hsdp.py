"""Data parallelism over several mesh axes: fully_shard and replicate given a tuple of the mesh's first axes (torch's
HSDP: replicated along the first, sharded along the last), combined with tensor parallelism on the axis after them, on
the tiny transformer over CPU:0..7, equal to one device."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from test_parallel_lib import check_matches, make_model, optimizer
from tiny_transformer import TinyTransformer, megatron_plan

from lazytensor import DeviceMesh, Tensor, nn
from lazytensor.nn.optim import Adam
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import ZeroRedundancyOptimizer, fully_shard, parallelize_module, replicate
from lazytensor.parallel.data import DataAxes

D8 = tuple(f"CPU:{i}" for i in range(8))

def batch_on(mesh: DeviceMesh, axis: DataAxes) -> Callable[[Tensor], Tensor]:
  return lambda t: t.shard(mesh, (axis,) + (None,) * (t.ndim - 1))

def fsdp_units(model: TinyTransformer, mesh: DeviceMesh, axis: DataAxes) -> TinyTransformer:
  for block in model.blocks: fully_shard(block, mesh, axis)
  return fully_shard(model, mesh, axis)

# fsdp x tp alone: test_parallel_lib.py's test_two_d[fsdp]
MESH3 = DeviceMesh(D8, shape=(2, 2, 2), names=("dp", "fsdp", "tp"))

def test_dp_x_fsdp_x_tp() -> None:
  # HSDP x TP: each parameter sharded along "fsdp", replicated along "dp", sliced along "tp" as the plan says; the
  # batch split over the 4 ("dp", "fsdp") replicas, each running the tensor-parallel layers on its pair of "tp" devices
  model = fsdp_units(parallelize_module(make_model(), MESH3, megatron_plan()), MESH3, ("dp", "fsdp"))
  assert MESH3.spec(model.blocks[0].fc2.weight) == ("fsdp", "tp") and MESH3.spec(model.head.weight) == ("fsdp", None)
  assert model.head.weight.device == MESH3.devices
  check_matches("adam", model, optimizer("adam")(get_parameters(model)), batch_on(MESH3, ("dp", "fsdp")))

def test_replicate_over_two_axes_x_tp() -> None:
  model = replicate(parallelize_module(make_model(), MESH3, megatron_plan()), MESH3, ("dp", "fsdp"))
  assert MESH3.spec(model.blocks[0].fc2.weight) == (None, "tp")
  check_matches("sgd", model, optimizer("sgd")(get_parameters(model)), batch_on(MESH3, ("dp", "fsdp")))

def test_axis_errors() -> None:
  with pytest.raises(ValueError, match=r"the data-parallel axes \('fsdp',\) must be the mesh's first axis"):
    fully_shard(nn.Linear(4, 4), MESH3, "fsdp")
  with pytest.raises(ValueError, match="must be the mesh's first 2 axes, in its order"):
    replicate(nn.Linear(4, 4), MESH3, ("fsdp", "dp"))
  with pytest.raises(ValueError, match="'pp' is not an axis of the mesh"):
    fully_shard(nn.Linear(4, 4), MESH3, ("dp", "pp"))
  with pytest.raises(TypeError, match="expected a mesh axis name or a tuple of them"):
    fully_shard(nn.Linear(4, 4), MESH3, ["dp"])  # type: ignore[arg-type]
  inner = nn.Linear(4, 4)
  class Outer:
    def __init__(self) -> None: self.inner = fully_shard(inner, MESH3, "dp")
    def __call__(self, x: Tensor) -> Tensor: return self.inner(x)
  outer = fully_shard(Outer(), MESH3, ("dp", "fsdp"))
  with pytest.raises(ValueError, match=r"over the mesh axes \('dp',\), but called inside a forward that is data-par"):
    outer(Tensor.ones(4, 4))

def test_zero2_over_two_axes() -> None:
  # gradients reduce-scattered along "fsdp" and all-reduced along "dp"; Adam's state sharded along "fsdp"
  mesh = DeviceMesh(D8[:4], shape=(2, 2), names=("dp", "fsdp"))
  def trained(distributed: bool) -> list[np.ndarray]:
    Tensor.manual_seed(0)
    lin = nn.Linear(8, 4)
    if distributed: lin = replicate(lin, mesh, ("dp", "fsdp"), shard_gradients=True)
    opt = (ZeroRedundancyOptimizer(get_parameters(lin), Adam, mesh, ("dp", "fsdp"), stage=2, lr=0.01) if distributed
           else Adam(get_parameters(lin), lr=0.01))
    x = Tensor(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))
    for _ in range(2):
      opt.zero_grad()
      lin(x.shard(mesh, (("dp", "fsdp"), None)) if distributed else x).square().mean().backward()
      opt.step()
    if distributed:
      assert mesh.spec(lin.weight.grad) == ("fsdp", None) and mesh.spec(lin.weight) == (None, None)
      assert mesh.spec(opt.optimizer.m[0]) == ("fsdp", None)  # type: ignore[attr-defined]
    return [p.numpy() for p in get_parameters(lin)]
  for got, want in zip(trained(True), trained(False)): np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
