"""What the CPU heuristics pick for matrix-vector products (a decode step's x @ W, x @ W.T and one query's attention),
and that the kernels they pick compute the product: structure and values, never timings."""
from __future__ import annotations

import numpy as np
import pytest
from test_opts import _assert_matmul_close

from lazytensor import Context, Device, Tensor
from lazytensor.engine.realize import compile_kernel, run_schedule
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import AxisKind, Kernel, Opt, OptOps
from lazytensor.renderer.cpu_target import cpu_target
from lazytensor.renderer.llvm import LLVMRenderer
from lazytensor.schedule import reduce_split
from lazytensor.schedule.scheduler import create_schedule

VECTOR_FLOATS = {"x86-64-v4": 16, "x86-64-v3": 8}

def _operands(rows: int, k: int, n: int, transposed: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  return rng.standard_normal((rows, k), dtype=np.float32), rng.standard_normal((n, k) if transposed else (k, n),
                                                                               dtype=np.float32)

def _item(x: np.ndarray, w: np.ndarray, transposed: bool):
  xt, wt = Tensor(x).realize(), Tensor(w).realize()
  items, _ = create_schedule([(xt @ wt.T if transposed else xt @ wt).lazydata])
  assert len(items) == 1
  return items[0]

def _opts(item, target: str, threads: int = 1) -> Kernel:
  with Context(THREADS=threads): return hand_coded_optimizations(Kernel(item.ast, LLVMRenderer(cpu_target(target))))

def _run(item, opts: list[Opt], threads: int = 1) -> np.ndarray:
  with Context(THREADS=threads): compile_kernel(item.ast, Device["CPU"], opts)(item.bufs)
  return item.bufs[0].numpy().copy()

@pytest.mark.parametrize("target", list(VECTOR_FLOATS))
def test_x_at_w_vectorizes_the_output_not_the_reduce(target: str) -> None:
  # W (K, N) is contiguous along N: 4 vectors of outputs, each step one broadcast of x and FMAs into them; vectors
  # along K (x's contiguous axis) would gather W a float at a time
  item = _item(*_operands(1, 256, 512, False), False)
  k = _opts(item, target)
  assert k.applied_opts == [Opt(OptOps.UPCAST, 0, 4 * VECTOR_FLOATS[target])], k.applied_opts
  assert k.axes_of(AxisKind.UNROLL) == []

@pytest.mark.parametrize("target", list(VECTOR_FLOATS))
def test_x_at_w_t_vectorizes_the_reduce_with_several_accumulators(target: str) -> None:
  # W (N, K), as Linear stores it, is contiguous along K: vector partial sums, 4 of them in flight, added across lanes
  item = _item(*_operands(1, 512, 256, True), True)
  assert _opts(item, target).applied_opts == [Opt(OptOps.UNROLL, 1, VECTOR_FLOATS[target]), Opt(OptOps.UNROLL, 1, 4)]

@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("k, n", [(256, 512), (197, 200), (300, 197), (1000, 50)])
def test_matvec_values_within_float32_sum_tolerance(transposed: bool, k: int, n: int) -> None:
  # odd K and N no vector divides are padded to vectors: the padded lanes must add nothing and store nowhere
  x, w = _operands(1, k, n, transposed, seed=k + n)
  item = _item(x, w, transposed)
  opts = _opts(item, "x86-64-v4").applied_opts
  assert any(o.op in (OptOps.UPCAST, OptOps.UNROLL) for o in opts), opts
  _assert_matmul_close(_run(item, opts).reshape(1, n), x, w.T if transposed else w)

@pytest.mark.parametrize("transposed, k, n, axis", [(False, 300, 197, 0), (True, 197, 300, 1)])
def test_odd_matvec_axis_is_padded_not_scalar(transposed: bool, k: int, n: int, axis: int) -> None:
  # the vectorized axis (N for x @ W, K for x @ W.T) is padded up to a vector multiple where no vector divides it
  item = _item(*_operands(1, k, n, transposed), transposed)
  opts = _opts(item, "x86-64-v4").applied_opts
  assert opts[0].op is OptOps.PADTO and opts[0].axis == axis, opts
  assert opts[1].op in (OptOps.UPCAST, OptOps.UNROLL) and opts[1].amt % 4 == 0, opts

def test_few_rows_against_w_t_are_taken_whole() -> None:
  # 8 rows of x (a batch of decodes) by 2 outputs, 16 accumulators: W is streamed once, not once per 4 rows
  x, w = _operands(8, 256, 64, True)
  item = _item(x, w, True)
  k = _opts(item, "x86-64-v4")
  assert Opt(OptOps.UPCAST, 0, 8) in k.applied_opts, k.applied_opts
  assert k.full_shape[0] == 1, "no loop over row tiles is left"
  _assert_matmul_close(_run(item, k.applied_opts).reshape(8, 64), x, w.T)

@pytest.mark.parametrize("transposed", [False, True])
def test_matvec_threads_only_when_large(transposed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
  # a small matrix-vector product (in cache, a few us) stays on one thread; a large one splits its outputs. The
  # kernel whole: a weight stored (in, out) this large is otherwise split into blocks of rows (test_reduce_split)
  monkeypatch.setattr(reduce_split, "MATVEC_MIN_L2", 1 << 30)
  small = _item(*_operands(1, 256, 768, transposed), transposed)
  assert not any(o.op is OptOps.THREAD for o in _opts(small, "x86-64-v4", threads=2).applied_opts)
  x, w = _operands(1, 1024, 4096, transposed)
  large = _item(x, w, transposed)
  assert not any(o.op is OptOps.THREAD for o in _opts(large, "x86-64-v4", threads=1).applied_opts)
  opts = _opts(large, "x86-64-v4", threads=2).applied_opts
  thread = [o for o in opts if o.op is OptOps.THREAD]
  assert len(thread) == 1 and thread[0].axis == 0 and thread[0].amt % 2 == 0, opts
  _assert_matmul_close(_run(large, opts, threads=2).reshape(1, 4096), x, w.T if transposed else w)

def test_one_query_attention_vectorizes_keys_and_values() -> None:
  # q @ k with k (H, D, T) and probs @ v with v (H, T, D): both products of one query are x @ W, each vectorized along
  # the output (T, then D)
  rng = np.random.default_rng(1)
  q, kk, v = (rng.standard_normal(s, dtype=np.float32) for s in ((4, 1, 64), (4, 64, 128), (4, 128, 64)))
  out = ((Tensor(q) @ Tensor(kk)) * 0.125).softmax(-1) @ Tensor(v)
  items, _ = create_schedule([out.lazydata])
  run_schedule(items[:-1])
  for item in (items[0], items[-1]):
    opts = _opts(item, "x86-64-v4").applied_opts
    assert opts[0].op is OptOps.UPCAST and opts[0].amt == 64, opts
  scores = q @ kk * 0.125
  probs = np.exp(scores - scores.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  got = _run(items[-1], _opts(items[-1], "x86-64-v4").applied_opts).reshape(4, 1, 64)
  np.testing.assert_allclose(got, probs @ v, rtol=1e-4, atol=1e-5)
