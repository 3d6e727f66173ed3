"""Symbolic shapes (uop/sint.py): a Variable stands for a dimension, one compiled kernel serves every value it is bound
to, and the values travel beside the graph into each kernel's arguments."""
from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from lazytensor import Context, Tensor, TinyJit, Variable, memory_allocated
from lazytensor.runtime.device import compile_stats
from lazytensor.shape.view import ShapeTracker
from lazytensor.uop.ops import UOp
from lazytensor.uop.sint import shape_str, sint_eq, sint_prod, smax, ssimplify, sym_infer, unbind

DEVICES = ["CPU", "EMU", "CUDACPU"]

@pytest.fixture
def built() -> Iterator[Callable[[], int]]:
  """The programs built (compiled, or read from the disk cache) since the test began."""
  start = compile_stats["compiled"] + compile_stats["disk"]
  yield lambda: compile_stats["compiled"] + compile_stats["disk"] - start

# ---- Variable, BIND and the sint helpers ----

def test_variable_bounds_and_bind() -> None:
  v = Variable("n", 2, 9)
  assert (v.vmin, v.vmax) == (2, 9)
  b = v.bind(5)
  assert (b.vmin, b.vmax) == (2, 9)  # bound or not, what is compiled for it serves the whole range
  assert b.unbind() == (v, 5)
  assert Variable("n", 2, 9) is v

@pytest.mark.parametrize("value", [1, 10, -3])
def test_bind_outside_the_range_names_the_variable(value: int) -> None:
  with pytest.raises(ValueError, match=r"Variable 'n' bound to .*: expected 2 <= value <= 9"):
    Variable("n", 2, 9).bind(value)

@pytest.mark.parametrize("args", [("n", 5, 2), ("n", -1, 3), ("", 0, 3), ("n", 0.5, 3)])
def test_bad_variable(args: tuple) -> None:
  with pytest.raises(ValueError, match="Variable"): Variable(*args)

def test_bound_variable_value_and_comparisons_its_range_decides() -> None:
  # tinygrad's programs branch on a bound Variable: `if start_pos.val == 0:` and `if start_pos > 0:` for a start_pos
  # in [1, 127] (gpt2.py's decode step); a comparison the range does not decide has no truth value to give
  b = Variable("start_pos", 1, 127).bind(5)
  assert b.val == 5
  assert bool(b > 0) and not bool(b < 1) and bool(b + 1 <= 128)
  with pytest.raises(ValueError, match="truth value of 3<start_pos depends on the values its Variables are bound to"):
    bool(b > 3)
  with pytest.raises(TypeError, match="no truth value: Ops.BIND"): bool(b)
  with pytest.raises(TypeError, match="only a bound Variable"): Variable("n", 0, 3).val  # noqa: B018

def test_a_variable_as_a_tensors_value_is_a_clear_error() -> None:
  # a Variable stands for a dimension; as a value (Tensor(v), x * v) it once failed deep in the graph code
  n = Variable("n", 1, 10)
  for value in (n, n.bind(3)):
    with pytest.raises(TypeError, match="Variable 'n' stands for a dimension, not a Tensor's value"): Tensor(value)
    with pytest.raises(TypeError, match="Variable 'n' stands for a dimension"): Tensor.ones(4) * value
  assert (Tensor.ones(4) * n.bind(3).val).tolist() == [3.0] * 4

def test_sint_helpers_simplify() -> None:
  v = Variable("v", 1, 10)
  assert ssimplify((v + 1) - 1) is v
  assert ssimplify((v + 1) - v) == 1
  assert sint_eq(v * 2, v + v) and not sint_eq(v, v + 1)
  assert sint_prod((2, v, 3)) is ssimplify(v * 6)
  assert smax(v, 1) is v and smax(v, 10) == 10
  assert sym_infer(v * 2 + 1, {v: 4}) == 9
  assert unbind(v.bind(3) * 2) == (ssimplify(v * 2), {v: 3})
  assert shape_str((1, v + 1)) == "(1, v+1)"

# ---- views ----

def test_symbolic_views_match_concrete_ones() -> None:
  v = Variable("v", 1, 15)
  st = ShapeTracker.from_shape((2, 16, 4)).shrink(((0, 2), (0, v + 1), (0, 4))).permute((1, 0, 2))
  st = st.reshape((v + 1, 1, 2, 4)).expand((v + 1, 3, 2, 4))
  assert st.shape[0] is ssimplify(v + 1) and len(st.views) == 1
  for n in (0, 7, 15):
    concrete = ShapeTracker.from_shape((2, 16, 4)).shrink(((0, 2), (0, n + 1), (0, 4))).permute((1, 0, 2))
    concrete = concrete.reshape((n + 1, 1, 2, 4)).expand((n + 1, 3, 2, 4))
    assert st.concrete({v: n}) == concrete

def test_symbolic_offset_and_real_size() -> None:
  v = Variable("v", 0, 15)
  st = ShapeTracker.from_shape((2, 16, 4)).shrink(((0, 2), (v, v + 1), (0, 4)))
  assert st.shape == (2, 1, 4)
  assert st.real_size().vmax == 128 and st.concrete({v: 3}).real_size() == 64 + 12 + 4
  bound, vals = ShapeTracker.from_shape((2, 16, 4)).shrink(((0, 2), (v.bind(3), v.bind(3) + 1), (0, 4))).unbind()
  assert bound == st and vals == {v: 3}

def test_reshape_keeps_a_symbolic_dim_with_itself() -> None:
  v = Variable("v", 1, 8)
  st = ShapeTracker.from_shape((8, 12)).shrink(((0, v), (0, 12))).reshape((v, 3, 4))
  assert len(st.views) == 1 and st.views[0].strides == (12, 4, 1)
  # merging a symbolic dim with a strided one is no single view: a second one reads through the first
  merged = ShapeTracker.from_shape((8, 12)).shrink(((0, v), (0, 6))).reshape((v * 6,))
  assert len(merged.views) == 2 and merged.concrete({v: 3}).simplify() == \
    ShapeTracker.from_shape((8, 12)).shrink(((0, 3), (0, 6))).reshape((18,))

# ---- tensor ops at several bound values, one program each ----

def _bound_rows(a: np.ndarray, v: object, n: int, device: str = "CPU") -> Tensor:
  return Tensor(a, device=device).realize()[: v.bind(n)]  # type: ignore[attr-defined]

@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_and_reduce(device: str, built: Callable[[], int]) -> None:
  v = Variable("rows", 1, 12)
  a = np.random.default_rng(0).standard_normal((12, 5)).astype(np.float32)
  for n in (1, 5, 12):
    x = _bound_rows(a, v, n, device)
    assert x.shape[0].vmax == 12 and shape_str(x.shape) == "(rows, 5)"
    np.testing.assert_allclose((x * 2 + 1).numpy(), a[:n] * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(x.sum(0).numpy(), a[:n].sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.max(1).numpy(), a[:n].max(1))
    if n == 1: first = built()
  assert built() == first

def test_matmul_and_softmax_over_a_symbolic_axis(built: Callable[[], int]) -> None:
  v = Variable("t", 1, 16)
  rng = np.random.default_rng(1)
  a, w, q = (rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (8, 4), (2, 8)))
  for n in (2, 9, 16):
    x = _bound_rows(a, v, n)
    np.testing.assert_allclose((x @ Tensor(w)).numpy(), a[:n] @ w, rtol=1e-5, atol=1e-6)
    scores = q @ a[:n].T
    ref = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose((Tensor(q) @ x.T).softmax(-1).numpy(), ref / ref.sum(-1, keepdims=True), rtol=1e-5)
    if n == 2: first = built()
  assert built() == first

@pytest.mark.parametrize("device", DEVICES)
def test_a_long_symbolic_sum_is_as_exact_as_a_concrete_one(device: str) -> None:
  # a float sum's loop is cut into blocks of accumulators (codegen/lowerer.py, REDUCE_BLOCK), a symbolic one as for
  # its largest length: in one chain, sums of 0.1 were off by 6.5e-5 (8193 values on EMU) to 6.2e-4 (4194301 on the
  # CPU), in blocks by 5.5e-7 at most, as the concrete sums
  n = 1 << 20 if device == "CPU" else 1 << 14
  t, v = Tensor(np.full(n, 0.1, np.float32), device=device).realize(), Variable("n", 1, n)
  for m in (n - 3, n // 2 + 1):
    exact = np.float64(np.float32(0.1)) * m
    assert abs(t[:v.bind(m)].sum().item() - exact) / exact < 1e-6

def test_creation_of_a_symbolic_shape() -> None:
  v = Variable("n", 1, 6)
  for n in (2, 6):
    assert Tensor.ones(2, v.bind(n) + 1).numpy().shape == (2, n + 1)
    np.testing.assert_array_equal((Tensor.full((v.bind(n),), 3.0) + 1).numpy(), np.full(n, 4.0, np.float32))

def test_pad_and_expand_by_a_variable() -> None:
  v = Variable("n", 0, 4)
  x = Tensor([[1.0, 2.0]])
  for n in (0, 3):
    b = v.bind(n)
    np.testing.assert_array_equal(x.pad(((0, 0), (b, 0))).numpy(), np.pad([[1.0, 2.0]], ((0, 0), (n, 0))))
    np.testing.assert_array_equal(x.reshape(2, 1).expand(2, b + 1).sum(1).numpy(), [n + 1.0, 2 * (n + 1.0)])

def test_kv_cache_writes_and_reads_one_program_each(built: Callable[[], int]) -> None:
  # a buffer of the largest size, written at a symbolic position and read up to it
  sp = Variable("start_pos", 0, 15)
  rng = np.random.default_rng(2)
  cache = Tensor.zeros(1, 2, 16, 4).contiguous().realize()
  ref = np.zeros((1, 2, 16, 4), np.float32)
  for i in range(8):
    kv = rng.standard_normal((1, 2, 1, 4)).astype(np.float32)
    b = sp.bind(i)
    cache[:, :, b:b + 1].assign(Tensor(kv)).realize()
    ref[:, :, i:i + 1] = kv
    np.testing.assert_array_equal(cache[:, :, :b + 1].numpy(), ref[:, :, :i + 1])
    if i == 0: first = built()
  assert built() == first

def test_kv_cache_sums_kept_across_positions(built: Callable[[], int]) -> None:
  # each step's output (a reshape view of a reduce) is kept while the next step writes the cache: it was recomputed as
  # a value of the old contents in the next write's schedule, bound to the old position (two values of start_pos)
  sp = Variable("start_pos", 0, 15)
  rng = np.random.default_rng(3)
  cache = Tensor.zeros(1, 2, 16, 4).contiguous().realize()
  kvs = rng.standard_normal((8, 1, 2, 1, 4)).astype(np.float32)
  outs = []
  for i in range(8):
    b = sp.bind(i)
    cache[:, :, b:b + 1].assign(Tensor(kvs[i]) * 1.0).realize()
    outs.append(cache[:, :, :b + 1].sum(2).realize())
    if i == 1: first = built()
  for i, out in enumerate(outs): np.testing.assert_allclose(out.numpy(), kvs[:i + 1].sum(0)[:, :, 0], rtol=1e-6)
  assert built() == first

def _causal_attention(x: np.ndarray, w: dict[str, np.ndarray], heads: int) -> np.ndarray:
  """Full causal self-attention of the sequence x (T, dim), in numpy: the oracle of a decode that caches keys and
  values."""
  (t, dim), d = x.shape, x.shape[1] // heads
  q, k, v = ((x @ w[n]).reshape(t, heads, d).transpose(1, 0, 2) for n in "qkv")
  s = q @ k.transpose(0, 2, 1) / math.sqrt(d) + np.triu(np.full((t, t), -np.inf, np.float32), 1)
  p = np.exp(s - s.max(-1, keepdims=True))
  return ((p / p.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(t, dim) @ w["o"]

def test_kv_cache_attention_decode(built: Callable[[], int]) -> None:
  # a GPT-style attention layer decoding 64 positions through a TinyJit step: keys and values written into caches of
  # the largest length at start_pos, attention read over the first start_pos+1: captured once, no kernel built after
  # the capture, no memory more per position, and each output the row of full causal attention
  heads, d, t = 2, 8, 64
  rng = np.random.default_rng(4)
  w = {n: (rng.standard_normal((heads * d, heads * d)) / math.sqrt(heads * d)).astype(np.float32) for n in "qkvo"}
  xs = rng.standard_normal((t, heads * d)).astype(np.float32)
  ws = {n: Tensor(a).realize() for n, a in w.items()}
  cache_k, cache_v = (Tensor.zeros(1, heads, t, d).contiguous().realize() for _ in range(2))
  def split(x: Tensor) -> Tensor: return x.reshape(1, 1, heads, d).transpose(1, 2)
  @TinyJit
  def step(x: Tensor, pos: UOp) -> Tensor:
    q, k, v = (split(x @ ws[n]) for n in "qkv")
    cache_k[:, :, pos:pos + 1].assign(k).realize()
    cache_v[:, :, pos:pos + 1].assign(v).realize()
    keys, values = cache_k[:, :, :pos + 1], cache_v[:, :, :pos + 1]
    att = ((q @ keys.transpose(2, 3)) / math.sqrt(d)).softmax(-1) @ values
    return (att.transpose(1, 2).reshape(1, 1, heads * d) @ ws["o"]).realize()
  sp, outs = Variable("start_pos", 0, t - 1), []
  for i in range(t):
    outs.append(step(Tensor(xs[i].reshape(1, 1, -1)), sp.bind(i)).numpy().reshape(-1))
    if i == 3:  # captured (the second call) and replayed once
      gc.collect()
      captured, memory = built(), memory_allocated()
  gc.collect()
  assert step.calls == 2 and built() == captured and memory_allocated() <= memory
  np.testing.assert_allclose(np.stack(outs), _causal_attention(xs, w, heads), rtol=1e-5, atol=1e-5)

def test_debug_shows_the_variable_in_the_kernel_name(capsys: pytest.CaptureFixture[str]) -> None:
  v = Variable("start_pos", 0, 7)
  x = Tensor(np.ones((8, 16), np.float32)).realize()
  with Context(DEBUG=2, NO_COLOR="1"): (x[:v.bind(3) + 1] * 3).realize()
  assert "start_pos+1" in capsys.readouterr().out

# ---- errors ----

def test_unbound_variable_at_numpy_says_to_bind() -> None:
  with pytest.raises(ValueError, match=r"numpy: the shape \(2, n\) has a Variable with no value; bind it"):
    Tensor.ones(2, Variable("n", 1, 4)).numpy()

def test_shrink_past_the_end_for_some_values() -> None:
  v = Variable("n", 0, 10)
  with pytest.raises(ValueError, match="for every value of its Variables"): Tensor.ones(8)[:v.bind(3)]

def test_one_variable_bound_to_two_values_in_one_graph() -> None:
  v = Variable("n", 1, 4)
  x = Tensor(np.ones(4, np.float32)).realize()
  with pytest.raises(ValueError, match="bound to both 1 and 2"): (x[:v.bind(1)].sum() + x[:v.bind(2)].sum()).numpy()
