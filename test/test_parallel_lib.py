"""lazytensor.parallel: each strategy (replicate, fully_shard, ZeRO-1/2, tensor and sequence parallelism, and the 2-D
combinations) trains a tiny transformer a few steps on CPU:0..3 and matches one device; sharded state takes 1/N of
each device's memory; bad inputs give clear errors."""
from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from tiny_transformer import TinyTransformer, megatron_plan

from lazytensor import Device, DeviceMesh, Tensor, max_memory_allocated, memory_allocated, nn, reset_peak_memory_stats
from lazytensor.nn.optim import SGD, Adam, Optimizer
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import (
  ColwiseParallel,
  ZeroRedundancyOptimizer,
  fully_shard,
  parallelize_module,
  replicate,
)
from lazytensor.parallel.data import state_of
from lazytensor.uop.graph import multi_leaves

DEVICES = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
VOCAB, STEPS = 16, 3

def dp_mesh() -> DeviceMesh: return DeviceMesh(DEVICES, names=("dp",))
def tp_mesh() -> DeviceMesh: return DeviceMesh(DEVICES[:2], names=("tp",))
def dp_tp_mesh() -> DeviceMesh: return DeviceMesh(DEVICES, shape=(2, 2), names=("dp", "tp"))

def make_model() -> TinyTransformer:
  Tensor.manual_seed(0)
  return TinyTransformer(vocab=VOCAB, dim=8, heads=2, layers=1, context=4)

def optimizer(kind: str) -> Callable[[list[Tensor]], Optimizer]:
  if kind == "sgd": return lambda ps: SGD(ps, lr=0.1, momentum=0.9)
  return lambda ps: Adam(ps, lr=0.01)

def train(model: Any, opt: Optimizer, place: Callable[[Tensor], Tensor]) -> tuple[list[float], list[np.ndarray]]:
  """STEPS steps on fixed random token batches; the losses and the weights after."""
  rng, losses = np.random.default_rng(0), []
  for _ in range(STEPS):
    x, y = (Tensor(rng.integers(0, VOCAB, (4, 4)).astype(np.int32)) for _ in range(2))
    opt.zero_grad()
    loss = model(place(x)).reshape(-1, VOCAB).cross_entropy(place(y).reshape(-1)).backward()
    opt.step()
    losses.append(loss.item())
  return losses, [p.numpy() for p in get_parameters(model)]

_reference: dict[str, tuple[list[float], list[np.ndarray]]] = {}

def one_device(kind: str) -> tuple[list[float], list[np.ndarray]]:
  if kind not in _reference:
    model = make_model()
    _reference[kind] = train(model, optimizer(kind)(get_parameters(model)), lambda t: t)
  return _reference[kind]

def check_matches(kind: str, model: Any, opt: Optimizer, place: Callable[[Tensor], Tensor]) -> None:
  losses, weights = train(model, opt, place)
  want_losses, want_weights = one_device(kind)
  np.testing.assert_allclose(losses, want_losses, atol=1e-5, rtol=0)
  for got, want in zip(weights, want_weights): np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)

def batch_on(mesh: DeviceMesh) -> Callable[[Tensor], Tensor]:
  return lambda t: t.shard(mesh, ("dp",) + (None,) * (t.ndim - 1))

def fsdp_units(model: TinyTransformer, mesh: DeviceMesh, nested: bool = False) -> TinyTransformer:
  """A unit per block (and with `nested`, first one per Linear of it, as torch's FSDP2 allows any nesting), then the
  root."""
  for block in model.blocks:
    if nested:
      for lin in (block.attn.wq, block.attn.wk, block.attn.wv, block.attn.wo, block.fc1, block.fc2):
        fully_shard(lin, mesh)
    fully_shard(block, mesh)
  return fully_shard(model, mesh)

@pytest.mark.parametrize("kind", ["sgd"])
def test_replicate(kind: str) -> None:
  mesh = dp_mesh()
  model = replicate(make_model(), mesh, bucket_cap_bytes=512)
  assert len(state_of(model).sync.buckets) > 1  # several buckets, each one all-reduce
  check_matches(kind, model, optimizer(kind)(get_parameters(model)), batch_on(mesh))

@pytest.mark.parametrize("kind,nested", [("adam", False), ("sgd", True)], ids=["blocks", "nested"])
def test_fully_shard(kind: str, nested: bool) -> None:
  mesh = dp_mesh()
  model = fsdp_units(make_model(), mesh, nested)
  assert all(p.shard_axis == 0 for p in get_parameters(model))
  check_matches(kind, model, optimizer(kind)(get_parameters(model)), batch_on(mesh))

@pytest.mark.parametrize("stage", [1, 2])
def test_zero(stage: int) -> None:
  mesh = dp_mesh()
  model = replicate(make_model(), mesh, shard_gradients=stage == 2)
  opt = ZeroRedundancyOptimizer(get_parameters(model), Adam, mesh, stage=stage, lr=0.01)
  check_matches("adam", model, opt, batch_on(mesh))
  assert all(m.shard_axis == 0 for m in opt.optimizer.m)  # type: ignore[attr-defined]
  assert all(p.shard_axis is None for p in get_parameters(model))

@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp", "tp+sp"])
def test_tensor_parallel(sequence_parallel: bool) -> None:
  mesh = tp_mesh()
  model = parallelize_module(make_model(), mesh, megatron_plan(sequence_parallel))
  assert mesh.spec(model.blocks[0].attn.wq.weight) == ("tp", None)
  assert mesh.spec(model.blocks[0].attn.wo.weight) == (None, "tp")
  check_matches("sgd", model, optimizer("sgd")(get_parameters(model)), lambda t: t.shard(mesh, None))

@pytest.mark.parametrize("data", ["dp", "fsdp"])
def test_two_d(data: str) -> None:
  mesh = dp_tp_mesh()
  model = parallelize_module(make_model(), mesh, megatron_plan())
  model = replicate(model, mesh) if data == "dp" else fsdp_units(model, mesh)
  want = ("dp", None) if data == "fsdp" else (None, None)
  assert mesh.spec(model.blocks[0].attn.wo.weight) == (want[0], "tp")
  check_matches("adam", model, optimizer("adam")(get_parameters(model)), batch_on(mesh))

# ---- memory: sharded state takes 1/N per device ----

class Wide:
  def __init__(self) -> None: self.layers = [nn.Linear(32, 32) for _ in range(3)]
  def __call__(self, x: Tensor) -> Tensor:
    for layer in self.layers: x = layer(x).relu()
    return x

def bytes_on(device: str, tensors: list[Tensor]) -> int:
  """The bytes of the tensors' realized pieces that live on `device`."""
  device = Device.canonicalize(device)
  return sum(u.size * u.dtype.itemsize for t in tensors for u in multi_leaves(t.lazydata) if u.device == device)

def state_after_step(model: Wide, opt: Optimizer, mesh: DeviceMesh) -> list[Tensor]:
  opt.zero_grad()
  model(Tensor.ones(8, 32).shard(mesh, ("dp", None))).square().mean().backward()
  opt.step()
  moments = [t for ts in (getattr(opt, "optimizer", opt).m, getattr(opt, "optimizer", opt).v) for t in ts]  # type: ignore
  return [*get_parameters(model), *[p.grad for p in get_parameters(model) if p.grad is not None], *moments]

def test_fsdp_holds_a_quarter_per_device() -> None:
  mesh, whole = dp_mesh(), sum(p.numel() * 4 for p in get_parameters(Wide()))
  Tensor.manual_seed(0)
  model = Wide()
  for layer in model.layers: fully_shard(layer, mesh)
  state = state_after_step(model, Adam(get_parameters(model), lr=0.01), mesh)
  for d in DEVICES: assert bytes_on(d, state) == 4 * whole // 4  # weights, gradients, Adam's m and v: 1/4 each

class Deep:
  def __init__(self) -> None: self.layers = [nn.Linear(64, 64) for _ in range(8)]
  def __call__(self, x: Tensor) -> Tensor:
    for layer in self.layers: x = layer(x).relu()
    return x

class Residual:
  """A unit of its own (its layernorm's parameters) around two units (its Linears)."""
  def __init__(self) -> None: self.ln, self.fc1, self.fc2 = nn.LayerNorm(64), nn.Linear(64, 64), nn.Linear(64, 64)
  def __call__(self, x: Tensor) -> Tensor: return x + self.fc2(self.fc1(self.ln(x)).relu())

class DeepNested:
  def __init__(self) -> None: self.blocks = [Residual() for _ in range(4)]
  def __call__(self, x: Tensor) -> Tensor:
    for block in self.blocks: x = block(x)
    return x

def fsdp_step_peaks(reshard_after_forward: bool, nested: bool = False) -> tuple[list[int], list[np.ndarray]]:
  """Each device's peak during a step of 8 FSDP units of Linear(64, 64) (nested: 4 residual blocks, each a unit
  holding two), over what it holds before, and the gradients."""
  mesh = DeviceMesh(DEVICES[:2], names=("dp",))
  Tensor.manual_seed(0)
  model: Deep | DeepNested = DeepNested() if nested else Deep()
  units = [u for b in model.blocks for u in (b.fc1, b.fc2, b)] if isinstance(model, DeepNested) else model.layers
  for unit in units: fully_shard(unit, mesh, reshard_after_forward=reshard_after_forward)
  opt = SGD(get_parameters(fully_shard(model, mesh)), lr=0.01)
  x = Tensor(np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32))
  def step() -> None:
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    while gc.collect(): pass  # what other tests left in cycles: the counters below are of this step alone
  step()  # compiled and scheduled once
  for d in mesh.devices: reset_peak_memory_stats(d)
  base = [memory_allocated(d) for d in mesh.devices]
  step()
  return [max_memory_allocated(d) - b for d, b in zip(mesh.devices, base)], [p.grad.numpy() for p in opt.params]

def test_fsdp_reshard_after_forward_frees_the_gathered_weights() -> None:
  # the weights gathered for a unit's forward lived until its backward; gathered again there, the peak drops by the
  # gathered weights of the units between (16.6 KB each on each device: 8 units 168 -> 119 KB)
  kept, kept_grads = fsdp_step_peaks(False)
  freed, grads = fsdp_step_peaks(True)
  unit = 64 * 65 * 4
  assert all(k - f >= 2 * unit for k, f in zip(kept, freed)), (kept, freed)
  for g, want in zip(grads, kept_grads): np.testing.assert_allclose(g, want, atol=1e-6, rtol=0)

def test_fsdp_reshard_after_forward_frees_the_gathered_weights_of_nested_units() -> None:
  # a block unit's backward differentiates it over stand-ins of its Linear units' gathered weights: it gathers those
  # again itself (it read the forward's, kept alive to the backward: 185 -> 184 KB per device; now 127 KB)
  kept, kept_grads = fsdp_step_peaks(False, nested=True)
  freed, grads = fsdp_step_peaks(True, nested=True)
  unit = 64 * 65 * 4
  assert all(k - f >= 2 * unit for k, f in zip(kept, freed)), (kept, freed)
  for g, want in zip(grads, kept_grads): np.testing.assert_allclose(g, want, atol=1e-6, rtol=0)

def test_zero2_holds_a_quarter_of_gradients_and_state() -> None:
  mesh, whole = dp_mesh(), sum(p.numel() * 4 for p in get_parameters(Wide()))
  model = replicate(Wide(), mesh, shard_gradients=True)
  opt = ZeroRedundancyOptimizer(get_parameters(model), Adam, mesh, stage=2, lr=0.01)
  state = state_after_step(model, opt, mesh)
  params = get_parameters(model)
  for d in DEVICES:
    assert bytes_on(d, params) == whole                                  # the weights replicated
    assert bytes_on(d, state[len(params):]) == 3 * whole // 4            # gradients, m and v: 1/4 each
    assert bytes_on(d, opt.shards) == whole // 4                         # the shards the optimizer steps

class Big:
  def __init__(self) -> None: self.layers = [nn.Linear(128, 128) for _ in range(4)]
  def __call__(self, x: Tensor) -> Tensor:
    for layer in self.layers: x = layer(x).relu()
    return x

def held_and_peak(strategy: str) -> tuple[list[int], list[int]]:
  """What each device holds between two Adam steps of Big over 4 devices (max_memory_allocated's counter), and its
  peak during the second step, over what the devices held before (other tests' tensors still alive in this process)."""
  mesh = dp_mesh()
  while gc.collect(): pass
  before = [memory_allocated(d) for d in DEVICES]
  Tensor.manual_seed(0)
  model, params = Big(), lambda m: get_parameters(m)
  if strategy == "fsdp":
    for layer in model.layers: fully_shard(layer, mesh)
    opt: Optimizer = Adam(params(fully_shard(model, mesh)), lr=0.01)
  elif strategy == "zero2":
    opt = ZeroRedundancyOptimizer(params(replicate(model, mesh, shard_gradients=True)), Adam, mesh, stage=2, lr=0.01)
  else: opt = Adam(params(replicate(model, mesh)), lr=0.01)
  x = Tensor.ones(8, 128).shard(mesh, ("dp", None))
  def step() -> None:
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    while gc.collect(): pass
  step()
  for d in DEVICES: reset_peak_memory_stats(d)
  held = [memory_allocated(d) - b for d, b in zip(DEVICES, before)]
  step()
  return held, [max_memory_allocated(d) - b for d, b in zip(DEVICES, before)]

def test_peak_memory_of_sharded_state() -> None:
  # in units of the weights' bytes W: DDP holds weights, gradients, Adam's m and v whole (4W); ZeRO-2 the weights and
  # a quarter of the rest and of the shards it steps (2W); FSDP a quarter of everything (W: each weight's shards were
  # views of its whole replicated copy, 1.75W, before shard_ gave them memory of their own)
  w = sum(p.numel() * 4 for p in get_parameters(Big()))
  (ddp, ddp_peak), (zero2, zero2_peak), (fsdp, fsdp_peak) = (held_and_peak(s) for s in ("ddp", "zero2", "fsdp"))
  for held, want in ((ddp, 4), (zero2, 2), (fsdp, 1)):
    assert all(abs(h - want * w) < 0.01 * w for h in held), (want, [h / w for h in held])
  # the step's transients on top (local gradients, buckets, gathered weights): ZeRO-2 and FSDP peak lower still
  assert all(f < 2 * w < z < 4.5 * w < d for f, z, d in zip(fsdp_peak, zero2_peak, ddp_peak)), (fsdp_peak, zero2_peak,
                                                                                                  ddp_peak)

# ---- bad inputs ----

def test_errors() -> None:
  with pytest.raises(ValueError, match="'dp' is not an axis of the mesh"): replicate(nn.Linear(4, 4), tp_mesh())
  with pytest.raises(ValueError, match="'dp' is not an axis of the mesh"): fully_shard(nn.Linear(4, 4), tp_mesh())
  with pytest.raises(ValueError, match=r"the data-parallel axes \('dp',\) must be the mesh's first axis"):
    fully_shard(nn.Linear(4, 4), DeviceMesh(DEVICES, shape=(2, 2), names=("tp", "dp")))
  with pytest.raises(ValueError, match=r"dimension 0 \(3\) of a parameter of shape \(3, 4\) does not split evenly"):
    fully_shard(nn.Linear(4, 3), dp_mesh())
  with pytest.raises(ValueError, match="'tp' is not an axis of the mesh"):
    parallelize_module(nn.Linear(4, 4), dp_mesh(), ColwiseParallel())
  with pytest.raises(ValueError, match="no submodule is named 'nope'"):
    parallelize_module(make_model(), tp_mesh(), {"nope": ColwiseParallel()})
  with pytest.raises(TypeError, match="expected a Linear"):
    parallelize_module(make_model(), tp_mesh(), {"blocks.0.ln1": ColwiseParallel()})
  with pytest.raises(ValueError, match="stage 3 must be 1 or 2"):
    ZeroRedundancyOptimizer(get_parameters(nn.Linear(4, 4)), SGD, dp_mesh(), stage=3)
  lin = replicate(nn.Linear(4, 4), dp_mesh())
  opt = ZeroRedundancyOptimizer(get_parameters(lin), SGD, dp_mesh(), stage=2, lr=0.1)
  lin(Tensor.ones(4, 4)).sum().backward()
  with pytest.raises(ValueError, match="shard_gradients=True"): opt.step()

def test_docstring_examples() -> None:
  import doctest

  from lazytensor.parallel import data, fsdp, tensor_parallel, zero
  for module in (data, fsdp, tensor_parallel, zero):
    result = doctest.testmod(module, extraglobs={"Tensor": Tensor}, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0, module.__name__
