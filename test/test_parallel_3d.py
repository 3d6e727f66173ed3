"""A 2x2x2 mesh over CPU:0..7 ("pp", "dp", "tp"): the tiny transformer trained 3 steps with its two blocks in two
pipeline stages, each stage's micro-batches split over "dp" and its attention heads and MLP split over "tp"
(Megatron), equal to one device."""
from __future__ import annotations

import numpy as np
from test_parallel_lib import optimizer, train
from tiny_transformer import Block, TinyTransformer
from tiny_transformer import megatron_plan as full_plan

from lazytensor import Device, DeviceMesh, Tensor
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import parallelize_module
from lazytensor.parallel.pipeline import Pipeline, one_f_one_b

D8 = tuple(f"CPU:{i}" for i in range(8))
MESH = DeviceMesh(D8, shape=(2, 2, 2), names=("pp", "dp", "tp"))
VOCAB, CONTEXT, BATCH = 16, 4, 8

def make_model() -> TinyTransformer:
  Tensor.manual_seed(0)
  return TinyTransformer(vocab=VOCAB, dim=8, heads=2, layers=2, context=CONTEXT)

class Embed:
  def __init__(self, model: TinyTransformer) -> None: self.tok, self.pos = model.tok, model.pos
  def __call__(self, idx: Tensor) -> Tensor: return self.tok.weight[idx] + self.pos.weight[:idx.shape[1]].to(idx.device)

class Head:
  def __init__(self, model: TinyTransformer) -> None: self.ln_f, self.head = model.ln_f, model.head
  def __call__(self, x: Tensor) -> Tensor: return self.head(self.ln_f(x))

class TensorParallelBlock:
  """A block tensor-parallel over "tp" of its stage's ("dp", "tp") mesh. The pipeline splits a stage's values along
  dimension 0 over all its devices; the block reads its input split over "dp" and whole along "tp", and gives its
  output back in the pipeline's layout."""
  def __init__(self, block: Block, mesh: DeviceMesh) -> None:
    plan = {name.removeprefix("blocks.*."): style for name, style in full_plan().items()}
    self.block, self.mesh = parallelize_module(block, mesh, plan), mesh

  def __call__(self, x: Tensor) -> Tensor:
    out = self.block(x.shard(self.mesh, ("dp", None, None)))
    return out.shard(Device.flat(self.mesh.devices), axis=0)

def stage_mesh(s: int) -> DeviceMesh:
  """Stage s's devices (index s along "pp") as a ("dp", "tp") mesh."""
  return DeviceMesh(D8[4 * s:4 * s + 4], shape=(2, 2), names=("dp", "tp"))

def token_loss(out: Tensor, y: Tensor) -> Tensor: return out.reshape(-1, VOCAB).cross_entropy(y.reshape(-1))

def test_pp_x_dp_x_tp_trains_as_one_device() -> None:
  ref, model = make_model(), make_model()
  blocks = [TensorParallelBlock(b, stage_mesh(s)) for s, b in enumerate(model.blocks)]
  pipe = Pipeline([[Embed(model), blocks[0]], [blocks[1], Head(model)]], MESH, token_loss)
  assert stage_mesh(1).spec(model.blocks[1].fc1.weight) == ("tp", None)
  ref_opt, opt = SGD(get_parameters(ref), lr=0.1), SGD(get_parameters(model), lr=0.1)
  rng = np.random.default_rng(0)
  for _ in range(3):
    x, y = (rng.integers(0, VOCAB, (BATCH, CONTEXT)).astype(np.int32) for _ in range(2))
    ref_opt.zero_grad()
    want = token_loss(ref(Tensor(x)), Tensor(y)).backward()
    ref_opt.step()
    opt.zero_grad()
    got = pipe.step(Tensor(x), Tensor(y), one_f_one_b(2, 2))
    opt.step()
    assert abs(got.item() - want.item()) < 1e-5
  for want, got_w in zip(get_parameters(ref), get_parameters(model)):
    np.testing.assert_allclose(got_w.numpy(), want.numpy(), atol=1e-5, rtol=0)

def sgd_losses(model: TinyTransformer) -> list[float]:
  """The losses of 3 steps of SGD with momentum on one device."""
  return train(model, optimizer("sgd")(get_parameters(model)), lambda t: t)[0]

def test_a_pipeline_leaves_later_training_right() -> None:
  # moving a model's weights to the stages once left later training on one device wrong from its second step: the
  # pieces of a zero bias replicated over a stage's devices (CPU:0's the zeros themselves) were realized into memory
  # then remembered for that (interned) constant, and SGD's momentum buffers of its shape, each a contiguous() of the
  # zeros, became that one buffer, the bias's (test_schedule.test_a_constant_realized_is_not_remembered)
  before = sgd_losses(make_model())
  model = make_model()
  Pipeline([[Embed(model), model.blocks[0]], [model.blocks[1], Head(model)]], MESH, token_loss)
  assert sgd_losses(make_model()) == before
