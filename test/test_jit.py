"""TinyJit: capture once, replay with new inputs; clear errors when inputs change; JIT=0 turns it off."""
import numpy as np
import pytest

from lazytensor import Context, GlobalCounters, Tensor, dtypes
from lazytensor.engine.jit import JitError, TinyJit, _Same
from lazytensor.nn.optim import SGD
from lazytensor.uop.ops import UOp


def test_replay_gives_fresh_results_for_new_inputs() -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return (a @ b).relu() + a.sum()
  rng = np.random.default_rng(0)
  for _ in range(5):
    x, y = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 2)).astype(np.float32)
    out = f(Tensor(x), Tensor(y)).numpy()
    np.testing.assert_allclose(out, np.maximum(x @ y, 0) + x.sum(), rtol=1e-5, atol=1e-5)
  assert f.calls == 2 and len(f.items) >= 1

def test_replay_skips_scheduling(monkeypatch) -> None:
  f = TinyJit(lambda a: (a * 2 + 1).sum())
  for i in range(2): f(Tensor([float(i), 2.0]))
  import lazytensor.schedule.scheduler as schedule
  def no_schedule(*args, **kwargs): raise AssertionError("a replay must not schedule")
  x = Tensor([5.0, 6.0]).realize()
  import lazytensor.frontend.tensor as tensor_module
  monkeypatch.setattr(schedule, "create_schedule", no_schedule)
  monkeypatch.setattr(tensor_module, "create_schedule", no_schedule)
  GlobalCounters.reset()
  assert f(x).item() == 24.0
  assert GlobalCounters.kernel_count == len(f.items)

def test_changed_shape_or_dtype_raises() -> None:
  f = TinyJit(lambda a: a * 2)
  for _ in range(3): f(Tensor([1.0, 2.0]))
  with pytest.raises(JitError, match=r"input 0 .*\(2,\).*\(3,\)"): f(Tensor([1.0, 2.0, 3.0]))
  with pytest.raises(JitError, match="float64"): f(Tensor([1.0, 2.0], dtype="float64"))
  f.reset()
  assert f(Tensor([1.0, 2.0, 3.0])).tolist() == [2.0, 4.0, 6.0]

def test_jit_off_runs_the_function_every_time() -> None:
  calls = []
  def body(a: Tensor) -> Tensor:
    calls.append(1)
    return a + 1
  f = TinyJit(body)
  with Context(JIT=0):
    for _ in range(4): f(Tensor([1.0]))
  assert len(calls) == 4

def test_training_step_under_jit_matches_eager() -> None:
  rng = np.random.default_rng(1)
  w0 = rng.standard_normal((3, 1)).astype(np.float32)
  xs = [rng.standard_normal((8, 3)).astype(np.float32) for _ in range(6)]
  def make():
    w = Tensor(w0.copy(), requires_grad=True)
    return w, SGD([w], lr=0.1, momentum=0.9)
  def step(w: Tensor, opt: SGD, x: Tensor) -> Tensor:
    opt.zero_grad()
    loss = ((x @ w) ** 2).mean()
    loss.backward()
    opt.step()
    return loss
  w_eager, opt_eager = make()
  eager = [step(w_eager, opt_eager, Tensor(x)).item() for x in xs]
  w_jit, opt_jit = make()
  jitted = TinyJit(lambda x: step(w_jit, opt_jit, x))
  got = [jitted(Tensor(x)).item() for x in xs]
  np.testing.assert_allclose(got, eager, rtol=1e-5)
  np.testing.assert_allclose(w_jit.numpy(), w_eager.numpy(), rtol=1e-5)

def test_same_inputs_twice_do_not_capture_an_empty_program() -> None:
  f = TinyJit(lambda a: (a * 2).realize())
  x = Tensor([1.0]).realize()
  f(x)
  f(x)  # the result is remembered, so nothing ran: nothing to capture yet
  assert f(Tensor([5.0])).tolist() == [10.0]
  assert f(Tensor([7.0])).tolist() == [14.0]

def test_random_numbers_are_new_on_every_replay() -> None:
  Tensor.manual_seed(0)
  @TinyJit
  def noisy(x: Tensor) -> Tensor: return (x + Tensor.rand(64)).realize()
  outs = [noisy(Tensor.zeros(64).contiguous()).numpy() for _ in range(5)]
  for i in range(5):
    assert ((outs[i] >= 0) & (outs[i] < 1)).all()
    for j in range(i): assert not np.array_equal(outs[i], outs[j]), f"calls {j} and {i} drew the same numbers"
  # the replays continue the eager stream: the same numbers as five eager draws after the same seed
  Tensor.manual_seed(0)
  eager = [Tensor.rand(64).numpy() for _ in range(5)]
  np.testing.assert_array_equal(np.stack(outs), np.stack(eager))

def test_dropout_under_jit_changes_its_mask() -> None:
  Tensor.manual_seed(1)
  @TinyJit
  def drop(x: Tensor) -> Tensor:
    with Tensor.train(): return x.dropout(0.5).realize()
  masks = [drop(Tensor.ones(256).contiguous()).numpy() != 0 for _ in range(4)]
  assert not np.array_equal(masks[2], masks[3]) and 64 < masks[3].sum() < 192

def test_a_value_made_before_the_capture_is_computed_once_outside_it() -> None:
  w = Tensor([1.0, 2.0], requires_grad=True)
  opt = SGD([w], lr=0.5)
  @TinyJit
  def step(x: Tensor) -> Tensor:
    opt.zero_grad()
    loss = (w * x).sum().backward()
    opt.step()
    return loss
  step(Tensor([1.0, 1.0]))
  before = w * 10  # lazy; reads the weights that the captured step overwrites
  losses = [step(Tensor([1.0, 1.0])).item() for _ in range(3)]
  assert before.tolist() == [5.0, 15.0]  # w after the first step, never recomputed by replays
  assert losses == [2.0, 1.0, 0.0]  # each loss is of the weights its step started from

def test_values_built_on_an_output_after_a_replay_are_new() -> None:
  # a replay writes new values into the output's memory: what was computed from the old ones must not be reused
  step = TinyJit(lambda x: (x * 2).realize())
  for i in range(4):
    out = step(Tensor([float(i)]).realize())
    assert out.tolist() == [2.0 * i] and (out + 1).tolist() == [2.0 * i + 1]
    assert out.to("CPU:1").tolist() == [2.0 * i]

# ---- non-Tensor arguments are part of the capture's key ----

@pytest.mark.parametrize("build", [lambda x, s: x * s, lambda x, s: x * Tensor([s])],
                         ids=["scalar", "tensor_of_scalar"])
def test_a_changed_scalar_argument_captures_again(build) -> None:
  f = TinyJit(lambda x, s: build(x, s).realize())
  scales = [2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 3.0, 3.0]
  assert [f(Tensor([1.0, 2.0]), s).tolist() for s in scales] == [[s, 2 * s] for s in scales]
  assert f.calls == 2 and f.key == {(1,): (float, (3.0).hex())}

def test_tuples_dicts_kwargs_and_objects_are_keyed() -> None:
  def body(x: Tensor, shape: tuple[int, int], opts: dict, act=None) -> Tensor:
    y = x.reshape(shape) * opts["scale"]
    return (act(y) if act is not None else y).realize()
  f = TinyJit(body)
  calls = [((2, 3), {"scale": 1.0}, None), ((2, 3), {"scale": 1.0}, None), ((2, 3), {"scale": 1.0}, None),
           ((3, 2), {"scale": 1.0}, None), ((3, 2), {"scale": 2.0}, None), ((3, 2), {"scale": 2.0}, Tensor.neg),
           ((3, 2), {"scale": 2.0}, Tensor.neg), ((3, 2), {"scale": 2.0}, Tensor.exp)]
  for shape, opts, act in calls:
    want = np.arange(6, dtype=np.float32).reshape(shape) * opts["scale"]
    if act is not None: want = -want if act is Tensor.neg else np.exp(want)
    np.testing.assert_allclose(f(Tensor.arange(6).float(), shape, opts, act=act).numpy(), want, rtol=1e-6)
  assert f.calls == 2 and f.key[("act",)] == _Same(Tensor.exp)

def test_an_int_and_a_float_of_the_same_value_are_different_arguments() -> None:
  f = TinyJit(lambda x, s: (x * s).realize())
  x = Tensor([1, 2]).realize()
  for _ in range(3): assert f(x, 2).dtype == dtypes.int64
  out = f(x, 2.0)
  assert out.dtype == dtypes.float32 and out.tolist() == [2.0, 4.0]

def test_a_changed_argument_is_reported_at_debug_1(capsys) -> None:
  f = TinyJit(lambda x, s: (x * s).realize())
  with Context(DEBUG=1):
    for s in (2.0, 2.0, 2.0, 5.0): f(Tensor([1.0]), s)
  assert "TinyJit: non-Tensor argument 1 ((<class 'float'>, '0x1.0000000000000p+1') -> " in capsys.readouterr().out

# ---- outputs stay valid from call to call ----

def test_kept_outputs_are_not_overwritten_by_later_calls() -> None:
  @TinyJit
  def f(x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
    y = (x * 2).realize()
    return y, {"sum": y.sum(), "view": y[::-1]}
  outs = [f(Tensor([float(i), 1.0])) for i in range(6)]
  assert f.calls == 2
  for i, (y, d) in enumerate(outs):
    assert y.tolist() == [2.0 * i, 2.0] and d["sum"].item() == 2.0 * i + 2 and d["view"].tolist() == [2.0, 2.0 * i]
  assert len({id(y) for y, _ in outs}) == 6

def test_returned_state_and_inputs_are_the_tensors_themselves() -> None:
  w = Tensor([1.0, 1.0]).realize()
  @TinyJit
  def step(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    w.assign(w + x).realize()
    return w, x, (w * x).realize()
  for i in range(5):
    x = Tensor([float(i), 1.0]).realize()
    ret_w, ret_x, prod = step(x)
    assert ret_w is w and ret_x.tolist() == [float(i), 1.0]
  assert w.tolist() == [11.0, 6.0] and prod.tolist() == [44.0, 6.0]

# ---- inputs the capture cannot serve ----

def test_a_changed_number_of_tensor_inputs_raises() -> None:
  f = TinyJit(lambda *xs: sum(xs[1:], xs[0] * 2).realize())
  for _ in range(3): f(Tensor([1.0]))
  with pytest.raises(JitError, match=r"captured with 1 tensor inputs, called with 2; call reset\(\)"):
    f(Tensor([1.0]), Tensor([2.0]))

def test_a_different_view_of_the_input_buffer_raises() -> None:
  f = TinyJit(lambda x: (x * 2).realize())
  for _ in range(3): assert f(Tensor([1.0, 2.0, 3.0, 4.0])[0:2]).tolist() == [2.0, 4.0]
  base = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  with pytest.raises(JitError, match=r"input 0 was captured as shape \(2,\) .* is now a different view of its buffer"):
    f(base[2:4])
  f.reset()
  assert f(base[2:4]).tolist() == [6.0, 8.0]

def test_docstring_example() -> None:
  import doctest

  import lazytensor.engine.jit
  result = doctest.testmod(lazytensor.engine.jit, optionflags=doctest.ELLIPSIS)
  assert result.failed == 0 and result.attempted >= 3

def test_a_shape_read_from_values_is_an_error_in_a_capture() -> None:
  # masked_select without size reads its count: a replay would keep the captured one, so the capture refuses it
  f = TinyJit(lambda x: x.masked_select(x > 0).realize())
  assert f(Tensor([1.0, -1.0, 2.0])).tolist() == [1.0, 2.0]  # the first call runs the function as it is
  with pytest.raises(ValueError, match="masked_select without size inside a TinyJit function.*give size="):
    f(Tensor([1.0, 2.0, 3.0]))
  g = TinyJit(lambda x: x.nonzero(size=2, fill_value=-1).realize())
  outs = [g(Tensor(v)).tolist() for v in ([0.0, 3.0, 4.0], [5.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])]
  assert outs == [[[1], [2]], [[0], [-1]], [[-1], [-1]], [[0], [1]]] and g.calls == 2

def test_tinyjit_on_a_method_binds_the_instance() -> None:
  # @TinyJit on a method (tinygrad's usage on a model's __call__ or a train step): self reaches the function
  class Model:
    def __init__(self, w: float) -> None: self.w = Tensor([w]).realize()
    @TinyJit
    def step(self, x: Tensor) -> Tensor: return (x * self.w + 1).realize()
    @TinyJit
    def __call__(self, x: Tensor) -> Tensor: return (x - self.w).realize()
  a, b = Model(2.0), Model(5.0)
  assert [a.step(Tensor([float(i)])).item() for i in range(4)] == [1.0, 3.0, 5.0, 7.0]
  assert [a(Tensor([float(i)])).item() for i in range(4)] == [-2.0, -1.0, 0.0, 1.0]
  assert Model.__dict__["step"].calls == 2 and Model.__dict__["step"].key == {(0,): _Same(a)}
  # the jit is the class's: another instance is another argument, so it captures again for it
  assert [b.step(Tensor([float(i)])).item() for i in range(3)] == [1.0, 6.0, 11.0]
  assert isinstance(Model.step, TinyJit)

@pytest.mark.parametrize("realize_write", [True, False])
def test_a_reduce_of_memory_written_in_the_step_is_fresh_each_call(realize_write: bool) -> None:
  cache = Tensor.zeros(32, 4).contiguous().realize()
  @TinyJit
  def step(x: Tensor) -> Tensor:
    write = cache[3:4].assign(x * 1.0)
    if realize_write: write.realize()
    return cache[:5].sum(0).realize()
  for i in range(5): assert step(Tensor(np.full((1, 4), i + 1, np.float32))).tolist() == [i + 1.0] * 4

def test_replay_across_bound_values_captures_once() -> None:
  # a decode-like step: write at a symbolic position of a max-size buffer, reduce over what is written so far
  from lazytensor import Variable
  from lazytensor.runtime.device import compile_stats
  sp, cache = Variable("start_pos", 0, 31), Tensor.zeros(32, 4).contiguous().realize()
  def step(x: Tensor, pos: UOp) -> Tensor:
    cache[pos:pos + 1].assign((x * 2.0).realize()).realize()
    return (cache[:pos + 1].sum(0) + 1).realize()
  jitted, rng = TinyJit(step), np.random.default_rng(0)
  xs = rng.standard_normal((12, 1, 4)).astype(np.float32)
  for i in range(12):
    out = jitted(Tensor(xs[i]), sp.bind(i))
    if i == 2: built = compile_stats["compiled"] + compile_stats["disk"]
    np.testing.assert_allclose(out.numpy(), xs[:i + 1, 0].sum(0) * 2 + 1, rtol=1e-5, atol=1e-6)
  assert jitted.calls == 2 and jitted.var_items  # captured once, replayed with each call's start_pos
  assert compile_stats["compiled"] + compile_stats["disk"] == built
