"""Pipeline schedules (GPipe, 1F1B, ZB-H1) over a pp mesh axis, ring attention over cp, and nn.MoE with experts over ep,
each against one device on CPU:0..3 (and dp x pp, dp x cp, dp x ep meshes); the schedules' bubble fractions against
their formulas; the errors."""
from __future__ import annotations

import doctest
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lazytensor import Context, DeviceMesh, GlobalCounters, Tensor, nn, shard_map
from lazytensor.engine import realize
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.parallel import context, pipeline
from lazytensor.parallel.context import ring_attention
from lazytensor.parallel.pipeline import Action, Pipeline, Schedule, gpipe, one_f_one_b, zero_bubble_h1
from lazytensor.runtime.device import Buffer, max_memory_allocated, reset_peak_memory_stats

D4 = tuple(f"CPU:{i}" for i in range(4))
RNG = np.random.default_rng(0)

def rand(*shape: int) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)

def largest_difference(a: object, b: object) -> float:
  return max(float(np.abs(p.numpy() - q.numpy()).max()) for p, q in zip(get_parameters(a), get_parameters(b)))

# ---- schedules ----

@pytest.mark.parametrize("p,m", [(2, 2), (2, 5), (3, 6), (4, 4), (4, 8)])
def test_bubble_fractions_match_their_formulas(p: int, m: int) -> None:
  assert gpipe(p, m).bubble_fraction() == pytest.approx((p - 1) / (m + p - 1))
  assert one_f_one_b(p, m).bubble_fraction() == pytest.approx((p - 1) / (m + p - 1))
  assert zero_bubble_h1(p, m).bubble_fraction() == pytest.approx((p - 1) / (3 * m + p - 1))

@pytest.mark.parametrize("p,m", [(2, 8), (4, 8), (3, 2)])
def test_peak_activations_count_the_micro_batches_between_forward_and_backward(p: int, m: int) -> None:
  assert gpipe(p, m).peak_activations() == (m,) * p
  assert one_f_one_b(p, m).peak_activations() == tuple(min(p - s, m) for s in range(p))
  assert zero_bubble_h1(p, m).peak_activations() == (min(p, m),) * p  # W deferred past B holds them on every stage
  F0, B0, W0, F1, B1, W1 = (Action(k, i) for i in range(2) for k in "FBW")
  assert Schedule("mine", 2, ((F0, F1, B0, B1, W0, W1),), split_backward=True).peak_activations() == (2,)
  assert Schedule("mine", 2, ((F0, B0, W0, F1, B1, W1),), split_backward=True).peak_activations() == (1,)

def test_chart_draws_the_timeline() -> None:
  assert zero_bubble_h1(2, 2).chart().splitlines() == [
    "ZB-H1, 2 stages, 2 micro-batches: bubble 14.3%",
    "stage 0 | F0 F1 .  B0 W0 B1 W1",
    "stage 1 | .  F0 B0 F1 B1 W0 W1"]

@pytest.mark.parametrize("p,m", [(1, 3), (2, 4), (3, 5), (4, 8), (5, 3)])
@pytest.mark.parametrize("make", [gpipe, one_f_one_b, zero_bubble_h1], ids=lambda f: f.__name__)
def test_order_keeps_each_stage_order_and_puts_what_an_action_needs_first(make: Callable[[int, int], Schedule], p: int,
                                                                          m: int) -> None:
  schedule = make(p, m)
  order = schedule.order()
  assert len(order) == sum(map(len, schedule.actions))
  for s in range(p): assert tuple(a for t, a in order if t == s) == schedule.actions[s]
  done: set[tuple[int, Action]] = set()
  for s, a in order:
    assert all(d in done for d in pipeline._deps(s, p, a))
    done.add((s, a))

def test_schedules_are_checked() -> None:
  F0, B0, W0 = Action("F", 0), Action("B", 0), Action("W", 0)
  with pytest.raises(ValueError, match="stage 1 runs F0; expected each of F/B once"):
    Schedule("mine", 1, ((F0, B0), (F0,)))
  with pytest.raises(ValueError, match="cannot run: stage 0 at B0"):
    Schedule("mine", 1, ((B0, F0), (F0, B0)))
  with pytest.raises(ValueError, match="W once"):
    Schedule("mine", 1, ((F0, B0),), split_backward=True)
  assert Schedule("mine", 1, ((F0, B0, W0),), split_backward=True).bubble_fraction() == 0.0
  with pytest.raises(ValueError, match="microbatches must be a positive int"): gpipe(2, 0)

# ---- the pipeline runner against one device ----

def mlp(seed: int) -> list[nn.Linear]:
  Tensor.manual_seed(seed)
  return [nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 3)]

def forward(layers: list[nn.Linear], x: Tensor) -> Tensor:
  for layer in layers[:-1]: x = layer(x).relu()
  return layers[-1](x)

def cut(layers: list[nn.Linear], stages: int) -> list[list[Callable[[Tensor], Tensor]]]:
  """The MLP as `stages` stages: relu after each layer but the last."""
  per = len(layers) // stages
  out: list[list[Callable[[Tensor], Tensor]]] = []
  for s in range(stages):
    out.append([f for layer in layers[s * per:(s + 1) * per] for f in (layer, Tensor.relu)])
  out[-1].pop()
  return out

def train_against_one_device(make: Callable[[int, int], Schedule], stages: int, mesh: DeviceMesh) -> None:
  ref, par = mlp(0), mlp(0)
  pipe = Pipeline(cut(par, stages), mesh, lambda out, y: out.cross_entropy(y))
  ref_opt, par_opt = SGD(get_parameters(ref), lr=0.1), SGD(get_parameters(par), lr=0.1)
  for _ in range(3):
    x, y = rand(12, 8), RNG.integers(0, 3, 12).astype(np.int32)
    ref_opt.zero_grad()
    want = forward(ref, Tensor(x)).cross_entropy(Tensor(y)).backward()
    ref_opt.step()
    par_opt.zero_grad()
    got = pipe.step(Tensor(x), Tensor(y), make(stages, 4))
    par_opt.step()
    assert abs(got.item() - want.item()) < 1e-5
    assert largest_difference(ref, par) < 1e-5

@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("make", [gpipe, one_f_one_b, zero_bubble_h1], ids=lambda f: f.__name__)
def test_pipeline_trains_as_one_device(make: Callable[[int, int], Schedule], stages: int) -> None:
  train_against_one_device(make, stages, DeviceMesh(D4[:stages], names=("pp",)))

@pytest.mark.parametrize("make", [one_f_one_b, zero_bubble_h1], ids=lambda f: f.__name__)
def test_dp_x_pp_trains_as_one_device(make: Callable[[int, int], Schedule]) -> None:
  mesh = DeviceMesh(D4, shape=(2, 2), names=("dp", "pp"))
  train_against_one_device(make, 2, mesh)

class Block:
  """A pre-norm transformer block: causal self-attention and an MLP, each around a residual."""
  def __init__(self, dim: int) -> None:
    self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
    self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

  def __call__(self, x: Tensor) -> Tensor:
    q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
    x = x + self.proj(q.scaled_dot_product_attention(k, v, is_causal=True))
    return x + self.down(self.up(self.ln2(x)).gelu())

def transformer(seed: int) -> list[Callable[[Tensor], Tensor]]:
  Tensor.manual_seed(seed)
  return [Block(8), nn.Linear(8, 5)]

def token_loss(out: Tensor, y: Tensor) -> Tensor: return out.reshape(-1, 5).cross_entropy(y.reshape(-1))

def test_transformer_trains_as_one_device_under_zero_bubble() -> None:
  # W of a layer with an inner chain (attention, norms, MLP) differentiates it from the gradient of its output
  ref, par = transformer(0), transformer(0)
  pipe = Pipeline([par[:1], par[1:]], DeviceMesh(D4[:2], names=("pp",)), token_loss)
  ref_opt, par_opt = SGD(get_parameters(ref), lr=0.1), SGD(get_parameters(par), lr=0.1)
  for _ in range(3):
    x, y = rand(4, 6, 8), RNG.integers(0, 5, (4, 6)).astype(np.int32)
    ref_opt.zero_grad()
    h = Tensor(x)
    for layer in ref: h = layer(h)
    want = token_loss(h, Tensor(y)).backward()
    ref_opt.step()
    par_opt.zero_grad()
    got = pipe.step(Tensor(x), Tensor(y), zero_bubble_h1(2, 2))
    par_opt.step()
    assert abs(got.item() - want.item()) < 1e-5
    assert largest_difference(ref, par) < 1e-5

def test_split_backward_repeats_no_work() -> None:
  # W computes the weights' gradients from the gradients of the layers' outputs that B kept: a ZB-H1 step runs the
  # flops of a 1F1B step, not a second backward through the stage
  layers = mlp(0)
  for p in get_parameters(layers): p.requires_grad_()
  pipe = Pipeline(cut(layers, 2), DeviceMesh(D4[:2], names=("pp",)), lambda out, y: out.cross_entropy(y))
  x, y = Tensor(rand(12, 8)).realize(), Tensor(RNG.integers(0, 3, 12).astype(np.int32)).realize()
  flops = []
  for make in (one_f_one_b, one_f_one_b, zero_bubble_h1):
    for p in get_parameters(layers): p.grad = None
    GlobalCounters.reset()
    pipe.step(x, y, make(2, 3))
    flops.append(GlobalCounters.global_ops)
  # within 2%: a number that earlier code in this process made a kernel argument is no longer folded, which moves the
  # count a little (0.4% seen); a W that redid B's input gradients would add 45% here
  assert abs(flops[2] - flops[1]) <= 0.02 * flops[1], flops

def gated_step(schedule: Schedule, held: Callable[[Any, tuple[Buffer, ...]], bool], until: tuple[int, Action],
               monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
  """The loss and gradients of a step of the MLP on 2 stages, in which every kernel or copy `held` (from the first)
  waits until the calling thread has built the action `until` (stage, action): a runner that waited for that step
  before building `until` never finishes (the wait gives up after 10 s and fails the step)."""
  step = train_step(schedule)
  built, launch, action = threading.Event(), realize._launch, Pipeline._action
  def gated(runner: Any, bufs: tuple[Buffer, ...], vals: tuple[Any, ...]) -> None:
    if held(runner, bufs): assert built.wait(10), f"{until[0]}:{until[1]} was not built while the step waited"
    launch(runner, bufs, vals)
  def recording(pipe: Pipeline, s: int, a: Action, *args: Any) -> None:
    action(pipe, s, a, *args)
    if (s, a) == until: built.set()
  monkeypatch.setattr(realize, "_launch", gated)
  monkeypatch.setattr(Pipeline, "_action", recording)
  return step()

def train_step(schedule: Schedule) -> Callable[[], list[np.ndarray]]:
  """One step of the MLP on 2 stages by `schedule` (the weights placed on them now): its loss and the gradients."""
  layers = mlp(0)
  for p in get_parameters(layers): p.requires_grad_()
  pipe = Pipeline(cut(layers, 2), DeviceMesh(D4[:2], names=("pp",)), lambda out, y: out.cross_entropy(y))
  x = Tensor(np.random.default_rng(1).standard_normal((16, 8), dtype=np.float32)).realize()
  y = Tensor(np.arange(16, dtype=np.int32) % 3).realize()
  def step() -> list[np.ndarray]:
    loss = pipe.step(x, y, schedule)
    return [loss.numpy(), *(p.grad.numpy() for p in get_parameters(layers) if p.grad is not None)]
  return step

def copy_into(device: str) -> Callable[[Any, tuple[Buffer, ...]], bool]:
  return lambda runner, bufs: runner is None and bufs[0].device == device

@pytest.mark.parametrize("schedule,held,until", [
  # GPipe: stage 0's forwards need nothing of stage 1: they are all built and run while stage 1 has not run one step
  (gpipe(2, 4), lambda runner, bufs: bufs[0].device == "CPU:1", (0, Action("F", 3))),
  # 1F1B: stage 1 starts B1 once its F1 is done, while stage 0's two-unit B0 still runs (a runner in rounds waited for
  # B0, in F1's round, before building B1); stage 0's B0 starts with the copy of the gradient that stage 1 sent
  (one_f_one_b(2, 4), copy_into("CPU"), (1, Action("B", 1)))], ids=["gpipe", "1f1b"])
def test_a_stage_goes_on_while_another_is_busy(schedule: Schedule, held: Callable[[Any, tuple[Buffer, ...]], bool],
                                              until: tuple[int, Action], monkeypatch: pytest.MonkeyPatch) -> None:
  with Context(QUEUES=False): want = train_step(schedule)()  # each action's steps in order on the calling thread
  got = gated_step(schedule, held, until, monkeypatch)
  assert len(got) == len(want) == 9
  for w, g in zip(want, got): np.testing.assert_array_equal(g, w)

def step_peaks(schedule: Schedule) -> tuple[int, int]:
  """The most bytes each of the 2 stages' devices held during a step of 4 x Linear(64, 64) by `schedule`, 8
  micro-batches of 128 rows, above what they held before it."""
  Tensor.manual_seed(0)
  layers = [nn.Linear(64, 64) for _ in range(4)]
  for p in get_parameters(layers): p.requires_grad_()
  stages = [[layers[0], Tensor.relu, layers[1], Tensor.relu], [layers[2], Tensor.relu, layers[3]]]
  pipe = Pipeline(stages, DeviceMesh(D4[:2], names=("pp",)), lambda out, y: out.cross_entropy(y))
  x = Tensor(np.random.default_rng(1).standard_normal((1024, 64), dtype=np.float32)).realize()
  y = Tensor(np.arange(1024, dtype=np.int32) % 3).realize()
  before = []
  for device in D4[:2]:
    reset_peak_memory_stats(device)
    before.append(max_memory_allocated(device))
  pipe.step(x, y, schedule)
  return max_memory_allocated(D4[0]) - before[0], max_memory_allocated(D4[1]) - before[1]

# a micro-batch's activations on a stage of step_peaks: 4 values of 128 x 64 floats (stage 0: two Linear outputs and
# their relus; stage 1: its input, received, a Linear output, its relu and the last Linear's output)
ACTIVATIONS = 4 * 128 * 64 * 4

def test_each_schedule_holds_the_activations_it_says() -> None:
  # in order (QUEUES=0): what the schedule holds, not how far the queues let a stage run ahead. Besides activations a
  # stage holds what every schedule's B holds (its gradients, the weights' .grads), GPipe's peak less its 8
  # micro-batches' activations. The rest, in micro-batches' activations, is the schedule's peak_activations, or up to
  # 0.75 more: a .grad and the gradient added to it, a quarter (GPipe's peak is at its first B, whose .grads are the
  # gradients), and on ZB-H1's stage 1, whose W0 waits behind F1 B1, the two output gradients W0 reads, a half.
  # Measured (stage 0, stage 1): 1F1B 2.25, 1.17 and ZB-H1 2.25, 2.43, where the runner before held 7.0, 7.0 and
  # 6.75, 7.50: every micro-batch's activations to the step's end, as GPipe
  with Context(QUEUES=False): peaks = {make: step_peaks(make(2, 8)) for make in (gpipe, one_f_one_b, zero_bubble_h1)}
  for make in (one_f_one_b, zero_bubble_h1):
    for s in range(2):
      held = (peaks[make][s] - (peaks[gpipe][s] - 8 * ACTIVATIONS)) / ACTIVATIONS
      assert 0 <= held - make(2, 8).peak_activations()[s] <= 0.75, (make.__name__, s, held, peaks)

def test_a_stage_runs_ahead_of_its_work_by_two_actions_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
  # memory is allocated as an action is submitted: with stage 1 slow, a runner that built all of stage 0's actions at
  # once would hold every micro-batch's activations there (1F1B more than GPipe); two actions in flight hold one
  # action's memory more than the schedule at most, a forward's activations. Measured above the in-order peak, in
  # micro-batches' activations: 0.25 (14.5 with no bound, 2.25 with three in flight)
  with Context(QUEUES=False): in_order = step_peaks(one_f_one_b(2, 8))[0]
  launch = realize._launch
  def slow(runner: Any, bufs: tuple[Buffer, ...], vals: tuple[Any, ...]) -> None:
    if bufs[0].device == "CPU:1": time.sleep(0.003)
    launch(runner, bufs, vals)
  monkeypatch.setattr(realize, "_launch", slow)
  ahead = step_peaks(one_f_one_b(2, 8))[0]
  assert ahead <= in_order + ACTIVATIONS, (ahead, in_order)

def test_frozen_weights_get_no_gradient() -> None:
  ref, par = mlp(0), mlp(0)
  for model in (ref, par):
    for p in get_parameters(model[1:]): p.requires_grad_()  # the first layer frozen
  pipe = Pipeline(cut(par, 2), DeviceMesh(D4[:2], names=("pp",)), lambda out, y: out.cross_entropy(y))
  x, y = rand(12, 8), RNG.integers(0, 3, 12).astype(np.int32)
  forward(ref, Tensor(x)).cross_entropy(Tensor(y)).backward()
  pipe.step(Tensor(x), Tensor(y), zero_bubble_h1(2, 4))
  assert par[0].weight.grad is None and par[0].bias.grad is None
  for p, q in zip(get_parameters(ref[1:]), get_parameters(par[1:])):
    assert p.grad is not None and q.grad is not None
    np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), atol=1e-6)

def test_dp_x_pp_places_each_stage_on_its_dp_group() -> None:
  layers = mlp(0)
  Pipeline(cut(layers, 2), DeviceMesh(D4, shape=(2, 2), names=("dp", "pp")), lambda out, y: out.cross_entropy(y))
  assert layers[0].weight.device == ("CPU", "CPU:2") and layers[3].bias.device == ("CPU:1", "CPU:3")

def test_pipeline_errors() -> None:
  mesh = DeviceMesh(D4[:2], names=("pp",))
  def loss(out: Tensor, y: Tensor) -> Tensor: return out.cross_entropy(y)
  with pytest.raises(ValueError, match="'stage' is not an axis of the mesh; its axes are \\('pp',\\)"):
    Pipeline(cut(mlp(0), 2), mesh, loss, axis="stage")
  with pytest.raises(ValueError, match="4 stages for the 2 devices along 'pp'"):
    Pipeline(cut(mlp(0), 4), mesh, loss)
  pipe = Pipeline(cut(mlp(0), 2), mesh, loss)
  x, y = Tensor(rand(12, 8)), Tensor(RNG.integers(0, 3, 12).astype(np.int32))
  with pytest.raises(ValueError, match="a batch of 12 does not split into 5 micro-batches"):
    pipe.step(x, y, gpipe(2, 5))
  with pytest.raises(ValueError, match="has 3 stages, the pipeline 2"):
    pipe.step(x, y, gpipe(3, 4))
  with pytest.raises(ValueError, match="one batch dimension"):
    pipe.step(x, y[:6], gpipe(2, 2))
  unreduced = Pipeline(cut(mlp(0), 2), mesh, lambda out, y: out.cross_entropy(y, reduction="none"))
  with pytest.raises(ValueError, match=r"loss_fn must return a one-element Tensor .*, got \(3,\)"):
    unreduced.step(x, y, gpipe(2, 4))

# ---- ring attention ----

# causal over 4 devices (every ring step, the mask and the skipped blocks), full attention on a dp x cp mesh
@pytest.mark.parametrize("causal,shape,names,spec", [(True, (4,), ("cp",), (None, None, "cp")),
                                                     (False, (2, 2), ("dp", "cp"), ("dp", None, "cp"))],
                         ids=["cp-causal", "dp_x_cp-full"])
def test_ring_attention_equals_full_attention(causal: bool, shape: tuple[int, ...], names: tuple[str, ...],
                                              spec: tuple[str | None, ...]) -> None:
  mesh = DeviceMesh(D4, shape=shape, names=names)
  data, seed = [rand(2, 3, 8, 4) for _ in range(3)], rand(2, 3, 8, 4)
  f = shard_map(lambda q, k, v: ring_attention(q, k, v, "cp", causal), mesh, (spec,) * 3, spec)
  ring = [Tensor(a, requires_grad=True) for a in data]
  full = [Tensor(a, requires_grad=True) for a in data]
  got = f(*ring)
  want = full[0].scaled_dot_product_attention(full[1], full[2], is_causal=causal)
  (got.to("CPU") * Tensor(seed)).sum().backward()  # gathered: a gradient that differs per element
  (want * Tensor(seed)).sum().backward()
  np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)
  for r, w in zip(ring, full):
    assert r.grad is not None and w.grad is not None
    np.testing.assert_allclose(r.grad.numpy(), w.grad.numpy(), atol=1e-5)

def test_ring_attention_errors() -> None:
  mesh = DeviceMesh(D4[:2], names=("cp",))
  q, kv = Tensor(rand(1, 4, 2)), Tensor(rand(1, 8, 2))
  with pytest.raises(ValueError, match="causal attention needs blocks of queries and keys of one length"):
    shard_map(lambda q, k: ring_attention(q, k, k, causal=True), mesh, ((None, "cp"),) * 2, (None, "cp"))(q, kv)
  with pytest.raises(ValueError, match="'sp' is not an axis of the mesh"):
    shard_map(lambda q: ring_attention(q, q, q, "sp"), mesh, ((None, "cp"),), (None, "cp"))(q)

# ---- mixture of experts ----

def dense_moe(x: np.ndarray, moe: nn.MoE, groups: int) -> tuple[np.ndarray, float]:
  """The layer token by token: each group's tokens take their experts' places in order, first choices first."""
  gate, w1, w2 = moe.gate.numpy(), moe.w1.numpy(), moe.w2.numpy()
  experts, size = gate.shape[1], x.shape[0] // groups
  capacity = int(np.ceil(moe.capacity_factor * moe.top_k * size / experts))
  y, aux = np.zeros_like(x), []
  for g in range(groups):
    xs = x[g * size:(g + 1) * size]
    logits = xs @ gate
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    chosen, taken = np.argsort(-probs, -1)[:, :moe.top_k], np.zeros(experts, int)
    for j in range(moe.top_k):
      for t in range(size):
        e = chosen[t, j]
        if taken[e] == capacity: continue
        taken[e] += 1
        y[g * size + t] += probs[t, e] / probs[t, chosen[t]].sum() * (np.maximum(xs[t] @ w1[e], 0) @ w2[e])
    aux.append(experts * np.sum(np.bincount(chosen[:, 0], minlength=experts) / size * probs.mean(0)))
  return y, float(np.mean(aux))

@pytest.mark.parametrize("groups,top_k,capacity_factor", [(1, 2, 0.75), (2, 2, 0.75), (2, 1, 1.0), (1, 2, 4.0)])
def test_moe_equals_a_loop_over_tokens(groups: int, top_k: int, capacity_factor: float) -> None:
  Tensor.manual_seed(1)
  moe = nn.MoE(6, 10, num_experts=4, top_k=top_k, capacity_factor=capacity_factor, groups=groups)
  x = rand(16, 6)
  got = moe(Tensor(x.reshape(2, 8, 6)))
  want, aux = dense_moe(x, moe, groups)
  np.testing.assert_allclose(got.numpy().reshape(16, 6), want, atol=1e-5)
  assert moe.aux_loss is not None and abs(moe.aux_loss.item() - aux) < 1e-5

def test_moe_drops_tokens_over_capacity() -> None:
  Tensor.manual_seed(1)
  moe = nn.MoE(6, 10, num_experts=4, top_k=1, capacity_factor=0.25)  # one place per expert for 16 tokens
  x = rand(16, 6)
  y = moe(Tensor(x)).numpy()
  first = (x @ moe.gate.numpy()).argmax(-1)
  kept = [int(np.argmax(first == e)) for e in np.unique(first)]  # the first token that picks each expert
  assert sorted(np.flatnonzero(np.abs(y).sum(-1) > 0)) == sorted(kept)

def train_moe(moe: nn.MoE, xs: list[np.ndarray]) -> list[float]:
  params = [moe.gate, moe.w1, moe.w2]
  for p in params: p.requires_grad_()
  opt, losses = SGD(params, lr=0.5), []
  for x in xs:
    opt.zero_grad()
    y = moe(Tensor(x))
    assert moe.aux_loss is not None
    loss = (y - 1).square().mean() + 0.1 * moe.aux_loss
    losses.append(loss.backward().item())
    opt.step()
  return losses

@pytest.mark.parametrize("shape,names", [((4,), ("ep",)), ((2, 2), ("dp", "ep"))], ids=["ep", "dp_x_ep"])
def test_expert_parallel_trains_as_one_device(shape: tuple[int, ...], names: tuple[str, ...]) -> None:
  Tensor.manual_seed(2)
  one = nn.MoE(6, 10, num_experts=4, top_k=2, capacity_factor=0.75, groups=4)
  Tensor.manual_seed(2)
  ep = nn.MoE(6, 10, num_experts=4, top_k=2, capacity_factor=0.75).expert_parallel(DeviceMesh(D4, shape, names))
  assert ep.w1.device == DeviceMesh(D4, shape, names).devices
  xs = [rand(16, 6) for _ in range(2)]
  np.testing.assert_allclose(train_moe(ep, xs), train_moe(one, xs), atol=1e-5)
  assert largest_difference(one, ep) < 1e-5

def test_moe_errors() -> None:
  with pytest.raises(ValueError, match="top_k=5 is more than the 4 experts"): nn.MoE(6, 10, 4, top_k=5)
  with pytest.raises(ValueError, match="capacity_factor must be positive"): nn.MoE(6, 10, 4, capacity_factor=0)
  moe = nn.MoE(6, 10, 4, groups=3)
  with pytest.raises(ValueError, match="16 tokens do not split into 3 groups"): moe(Tensor(rand(16, 6)))
  with pytest.raises(ValueError, match=r"expected tokens of 6 features \(\.\.\., 6\), got a tensor of shape \(16, 5\)"):
    moe(Tensor(rand(16, 5)))
  with pytest.raises(ValueError, match="'ep' is not an axis of the mesh; its axes are \\('dp',\\)"):
    nn.MoE(6, 10, 4).expert_parallel(DeviceMesh(D4, names=("dp",)))
  with pytest.raises(ValueError, match="3 experts do not split evenly over the 4 devices along 'ep'"):
    nn.MoE(6, 10, 3, top_k=1).expert_parallel(DeviceMesh(D4, names=("ep",)))

def test_doctests() -> None:
  from lazytensor.nn import moe
  results = [doctest.testmod(m, extraglobs={"Tensor": Tensor}, optionflags=doctest.ELLIPSIS)
             for m in (pipeline, context, moe)]
  assert all(r.failed == 0 for r in results) and all(r.attempted > 0 for r in results), results
