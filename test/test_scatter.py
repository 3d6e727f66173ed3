"""Scatter-adds run as stores at computed addresses (schedule/scatter.py): the gradient of nn.Embedding, of `x[idx]` and
of `gather`, `scatter_reduce` "sum"/"mean"/"amax" and `scatter(reduce="add")` become a fill and a scatter kernel that
walks the entries once, instead of every target scanning every entry; they compute what the reduce as written computes
(duplicates accumulate, an index outside the targets writes nothing), under every opt the optimizer and BEAM may
take, on CPU threads, EMU and CUDACPU. The tests that feed indices outside the targets run with CHECK_INDICES=0:
checked, they raise (test_index_check.py)."""
from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor, TinyJit, dtypes, nn
from lazytensor.dtype import DType
from lazytensor.engine.realize import compile_kernel, run_schedule
from lazytensor.opt import search, search_actions, search_workers
from lazytensor.opt.kernel import AxisKind, Kernel, KernelOptError, Opt, OptOps
from lazytensor.opt.rules import apply_opt
from lazytensor.renderer import Renderer
from lazytensor.schedule.scatter import SCATTER_MIN_WORK
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops, UOp

rng = np.random.default_rng(0)
V, D, N = 300, 32, 256  # targets, elements per target, entries: V * D * N is past SCATTER_MIN_WORK

def _asts(*ts: Tensor) -> list[UOp]:
  items, _ = create_schedule([t.lazydata for t in ts])
  return [it.ast for it in items if it.ast.op is Ops.SINK]

def _scatters(*ts: Tensor) -> int:
  """How many kernels realizing ts runs as scatters (a STORE at an index)."""
  return sum(1 for ast in _asts(*ts) if any(u.op is Ops.SCATTER for u in ast.src))

def _scans(*ts: Tensor) -> int:
  """The largest loop nest (product of a kernel's shared shape) among the kernels realizing ts: a scatter run as
  written scans entries x targets x elements; as a scatter, entries x elements."""
  return max(_work(ast) for ast in _asts(*ts))

def _work(ast: UOp) -> int:
  return int(np.prod(Kernel(ast, Device["CPU"].renderer).full_shape))

def _unfolded(fn: Callable[[], Tensor], monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
  """fn() computed by the reduces as written, every target comparing every entry (as before the scatter kernel)."""
  with monkeypatch.context() as m, Context(SCHEDULE_CACHE=0):
    m.setattr("lazytensor.schedule.scheduler.split_scatter", lambda ast: None)
    m.setattr("lazytensor.schedule.scheduler.embedded_scatters", lambda ast: [])
    out = fn()
    assert _scatters(out) == 0
    return out.numpy()

def _index(lo: int, hi: int, shape: tuple[int, ...], dtype: DType = dtypes.int32) -> np.ndarray:
  return rng.integers(lo, hi, shape).astype(dtype.np)

def _add_at(shape: tuple[int, ...], dim: int, idx: np.ndarray, src: np.ndarray, dtype: type = np.float64) -> np.ndarray:
  """np.add.at along dim of an index shaped like src (torch's scatter_add); entries outside [0, shape[dim]) skipped."""
  out = np.zeros(shape, dtype)
  ok = (idx >= 0) & (idx < shape[dim])
  coords = list(np.indices(idx.shape))
  coords[dim] = idx
  np.add.at(out, tuple(c[ok] for c in coords), src[ok])
  return out

# ---- the fast path is taken ----

def test_embedding_gradient_is_one_pass_over_the_indices() -> None:
  emb = nn.Embedding(V, D)
  emb.weight.requires_grad_()
  idx = _index(0, V, (4, N // 4))
  idx[0, :10] = 7  # duplicates
  up = rng.standard_normal((4, N // 4, D)).astype(np.float32)
  (emb(Tensor(idx)) * Tensor(up)).sum().backward()
  assert emb.weight.grad is not None
  grad = emb.weight.grad
  assert _scatters(grad) == 1 and _scans(grad) == V * D  # the fill; the scatter walks N x D
  np.testing.assert_allclose(grad.numpy(), _add_at((V, D), 0, np.repeat(idx.reshape(-1, 1), D, 1),
                                                   up.reshape(-1, D)), rtol=1e-5, atol=1e-5)

def test_getitem_and_gather_gradients_are_scatters(monkeypatch: pytest.MonkeyPatch) -> None:
  x0 = rng.standard_normal((V, D)).astype(np.float32)
  idx = _index(-V, V, (N,))  # negative entries count from the end in x[idx]
  idx2 = _index(0, V, (N, D))
  up = rng.standard_normal((N, D)).astype(np.float32)
  def grads() -> tuple[Tensor, Tensor]:
    x = Tensor(x0, requires_grad=True)
    g1, = (x[Tensor(idx)] * Tensor(up)).sum().gradient(x)
    g2, = (x.gather(0, Tensor(idx2)) * Tensor(up)).sum().gradient(x)
    return g1, g2
  g1, g2 = grads()
  assert _scatters(g1) == 1 and _scatters(g2) == 1 and _scans(g1, g2) == V * D  # the fills; scatters of N x D
  np.testing.assert_allclose(g1.numpy(), _add_at((V, D), 0, np.repeat((idx % V).reshape(-1, 1), D, 1), up),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(g2.numpy(), _add_at((V, D), 0, idx2, up), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(g1.numpy(), _unfolded(lambda: grads()[0], monkeypatch), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32])
def test_scatter_reduce_takes_the_scatter(reduce: str, include_self: bool, dtype: DType,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
  torch = pytest.importorskip("torch")
  x, src = (rng.standard_normal((V, D)) * 9).astype(dtype.np), (rng.standard_normal((N, D)) * 9).astype(dtype.np)
  idx = _index(0, V, (N, D))
  idx[:40, 3] = 5  # many entries naming one target
  fn = lambda: Tensor(x).scatter_reduce(0, Tensor(idx), Tensor(src), reduce, include_self=include_self)
  out = fn()
  # a max or min with its old value is one reduce over the entries and the old value together: not a scatter. A sum
  # adds the old value to one scatter; the rest are where(count > 0, reduce, old): the count and the reduce scatter
  folded = 0 if include_self and reduce in ("amax", "amin") else 1 if include_self and reduce == "sum" else 2
  assert _scatters(out) == folded
  want = torch.from_numpy(x).scatter_reduce(0, torch.from_numpy(idx).long(), torch.from_numpy(src), reduce,
                                            include_self=include_self).numpy()
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(out.numpy(), _unfolded(fn, monkeypatch), rtol=1e-5, atol=1e-5)

def test_scatter_with_reduce_add() -> None:
  x, idx = rng.standard_normal((V, D)).astype(np.float32), _index(0, V, (N, D))
  out = Tensor(x).scatter(0, Tensor(idx), 2.5, reduce="add")
  assert _scatters(out) == 1
  np.testing.assert_allclose(out.numpy(), x + _add_at((V, D), 0, idx, np.full((N, D), 2.5)), rtol=1e-6)

@pytest.mark.parametrize("dim", [0, 1])
def test_index_add_and_scatter_add_are_torchs(dim: int) -> None:
  torch = pytest.importorskip("torch")
  x = rng.standard_normal((V, D)).astype(np.float32)
  idx = _index(0, x.shape[dim], (N,))
  source = rng.standard_normal((N, D) if dim == 0 else (V, N)).astype(np.float32)
  out = Tensor(x).index_add(dim, Tensor(idx), Tensor(source), alpha=0.5)
  assert _scatters(out) == 1
  want = torch.from_numpy(x).index_add(dim, torch.from_numpy(idx).long(), torch.from_numpy(source), alpha=0.5)
  np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
  idx2 = _index(0, x.shape[dim], source.shape)
  out = Tensor(x).scatter_add(dim, Tensor(idx2), Tensor(source))
  assert _scatters(out) == 1
  want = torch.from_numpy(x).scatter_add(dim, torch.from_numpy(idx2).long(), torch.from_numpy(source))
  np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)

def test_index_add_errors_name_the_shapes() -> None:
  x = Tensor.zeros(4, 3)
  with pytest.raises(ValueError, match=r"1-d integer Tensor"): x.index_add(0, Tensor([[0, 1]]), Tensor.ones(2, 3))
  with pytest.raises(ValueError, match=r"1-d integer Tensor"): x.index_add(0, Tensor([0.0, 1.0]), Tensor.ones(2, 3))
  with pytest.raises(ValueError, match=r"shape \(2, 3\).*got \(3, 3\)"):
    x.index_add(0, Tensor([0, 1]), Tensor.ones(3, 3))

@Context(CHECK_INDICES=0)
def test_last_write_wins_scatters(monkeypatch: pytest.MonkeyPatch) -> None:
  # scatter without a reduce and x[idx] = v: each target takes its last entry's value, a max scatter of positions (a
  # fill and a scatter) and a gather of the value at that position, written where a position was found: 3 kernels
  x, src = rng.standard_normal((V, D)).astype(np.float32), rng.standard_normal((N, D)).astype(np.float32)
  idx = _index(-5, V + 5, (N, D))
  idx[:50, 2] = 4  # many writes to one target: the 50th wins
  fn = lambda: Tensor(x).scatter(0, Tensor(idx), Tensor(src))
  out = fn()
  assert _scatters(out) == 1 and len(_asts(out)) == 3
  want = x.copy()
  for n, d in itertools.product(range(N), range(D)):
    if 0 <= idx[n, d] < V: want[idx[n, d], d] = src[n, d]
  np.testing.assert_array_equal(out.numpy(), want)
  np.testing.assert_array_equal(out.numpy(), _unfolded(fn, monkeypatch))
  t = Tensor(x).contiguous().realize()
  rows, vals = _index(-V, V, (1000,)), rng.standard_normal((1000, D)).astype(np.float32)
  t[Tensor(rows)] = Tensor(vals)
  want = x.copy()
  want[rows] = vals  # numpy: the last write wins too
  np.testing.assert_array_equal(t.numpy(), want)

def test_small_scatters_stay_one_kernel() -> None:
  # below SCATTER_MIN_WORK pairs the reduce as written is one kernel, cheaper than a fill and a scatter
  x, idx = Tensor.zeros(10, 4).contiguous().realize(), Tensor(np.array([[1, 2, 3, 4]] * 3, np.int32))
  out = x.scatter_reduce(0, idx, Tensor.ones(3, 4), "sum")
  assert 3 * 10 * 4 < SCATTER_MIN_WORK and _scatters(out) == 0 and len(_asts(out)) == 1
  assert out.numpy()[1:5].tolist() == [[3, 0, 0, 0], [0, 3, 0, 0], [0, 0, 3, 0], [0, 0, 0, 3]]

def test_what_reads_its_own_output_is_not_split() -> None:
  # x += scatter of x's own rows: the fill would overwrite the rows the entries read
  x = Tensor(rng.standard_normal((V, D)).astype(np.float32)).contiguous().realize()
  before = x.numpy()
  idx = _index(0, V, (N, D))
  x.assign(x.scatter_reduce(0, Tensor(idx), x[:N], "sum")).realize()
  np.testing.assert_allclose(x.numpy(), before + _add_at((V, D), 0, idx, before[:N]), rtol=1e-5, atol=1e-5)

# ---- values: duplicates, indices outside, dtypes, dims ----

@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.int32, dtypes.int8, dtypes.float64])
@pytest.mark.parametrize("idx_dtype", [dtypes.int32, dtypes.int64, dtypes.uint8])
@Context(CHECK_INDICES=0)
def test_duplicates_and_indices_outside(dtype: DType, idx_dtype: DType, monkeypatch: pytest.MonkeyPatch) -> None:
  lo = 0 if idx_dtype.is_unsigned else -50
  idx = _index(lo, 250, (N, D), idx_dtype)  # a uint8 index never reaches V = 300: other targets stay 0
  idx[:, 0] = 9  # every entry names one target
  src = (rng.standard_normal((N, D)) * 4).astype(dtype.np)
  fn = lambda: Tensor.zeros(V, D, dtype=dtype).scatter_reduce(0, Tensor(idx), Tensor(src), "sum")
  out = fn()
  assert _scatters(out) == 1
  want = _add_at((V, D), 0, idx.astype(np.int64), src.astype(np.float64))
  tol = 0.1 if dtype == dtypes.float16 else 1e-5  # half accumulates in half: 256 terms of up to ~16
  got = out.numpy()
  if dtype.is_int: np.testing.assert_array_equal(got, want.astype(dtype.np))  # wraps as the ints do
  else: np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 16)
  unfolded = _unfolded(fn, monkeypatch)
  if dtype.is_int: np.testing.assert_array_equal(got, unfolded)

@pytest.mark.parametrize("shape,dim,entries", [((3, 200, 40), 1, 60), ((2, 20, 300), 2, 150), ((250, 3, 2, 40), 0, 90)])
def test_dims_other_than_0(shape: tuple[int, ...], dim: int, entries: int) -> None:
  torch = pytest.importorskip("torch")
  ishape = shape[:dim] + (entries,) + shape[dim + 1:]
  idx = _index(0, shape[dim], ishape)
  src, x = rng.standard_normal(ishape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
  out = Tensor(x).scatter_reduce(dim, Tensor(idx), Tensor(src), "sum")
  assert _scatters(out) == 1
  want = torch.from_numpy(x).scatter_add(dim, torch.from_numpy(idx).long(), torch.from_numpy(src)).numpy()
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("seed", range(8))
def test_random_shapes(seed: int) -> None:
  torch = pytest.importorskip("torch")
  r = np.random.default_rng(seed)
  shape = tuple(int(s) for s in r.integers(1, 70, r.integers(1, 4)))
  dim = int(r.integers(0, len(shape)))
  ishape = tuple(int(r.integers(1, s + 1)) if d != dim else int(r.integers(1, 200)) for d, s in enumerate(shape))
  idx = r.integers(0, shape[dim], ishape).astype(np.int64)
  src, x = r.standard_normal(ishape).astype(np.float32), r.standard_normal(shape).astype(np.float32)
  out = Tensor(x).scatter_add(dim, Tensor(idx), Tensor(src))
  work = int(np.prod(shape)) * ishape[dim]  # entries x targets x x's other elements (the index is padded to them)
  assert _scatters(out) == (1 if work >= SCATTER_MIN_WORK else 0)
  want = torch.from_numpy(x).scatter_add(dim, torch.from_numpy(idx), torch.from_numpy(src)).numpy()
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=f"{shape} {dim} {ishape}")

@Context(CHECK_INDICES=0)
def test_embedding_of_a_batch_with_out_of_range_entries(monkeypatch: pytest.MonkeyPatch) -> None:
  # what the pattern computes: an index outside [0, V) (negative included) names no row, so its gradient goes nowhere
  idx = _index(-20, V + 20, (8, 40))
  up = rng.standard_normal((8, 40, D)).astype(np.float32)
  def grad() -> Tensor:
    Tensor.manual_seed(3)
    emb = nn.Embedding(V, D)
    emb.weight.requires_grad_()
    g, = (emb(Tensor(idx)) * Tensor(up)).sum().gradient(emb.weight)
    return g
  got = grad().numpy()
  np.testing.assert_allclose(got, _add_at((V, D), 0, np.repeat(idx.reshape(-1, 1), D, 1), up.reshape(-1, D)),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got, _unfolded(grad, monkeypatch), rtol=1e-5, atol=1e-5)

# unchecked: a run outside run_schedule leaves a hit flag for the next run of the schedule (test_index_check.py runs
# the checked kernel on junk)
@Context(CHECK_INDICES=0)
def test_garbage_indices_never_write_out_of_bounds() -> None:
  # what BEAM does to an index buffer: random bits; entries outside write nothing, the rest still add
  out = Tensor.zeros(V, D).contiguous().scatter_reduce(0, Tensor(_index(0, V, (N, D))), Tensor.ones(N, D), "sum")
  items, _ = create_schedule([out.lazydata])
  run_schedule(items[:-1])
  item = items[-1]
  idx_buf = next(b for b in item.bufs if b.dtype == dtypes.int32)
  junk = rng.integers(-2**31, 2**31, (N, D)).astype(np.int32)
  junk[::3] = rng.integers(0, V, (len(junk[::3]), D))
  idx_buf.copyin(memoryview(np.ascontiguousarray(junk).view(np.uint8)))
  compile_kernel(item.ast, Device["CPU"])(item.bufs)
  np.testing.assert_array_equal(item.bufs[0].numpy().reshape(V, D), _add_at((V, D), 0, junk, np.ones((N, D))))

# ---- every opt the optimizer and BEAM may take is race-free ----

def _scatter_item(idx: np.ndarray, device: str = "CPU", dtype: DType = dtypes.float32) -> tuple[UOp, tuple]:
  """The scatter kernel of a scatter-add of ones into zeros, and its buffers with the inputs in place."""
  with Context(DEV=device):
    out = Tensor.zeros(V, D, dtype=dtype).contiguous().scatter_reduce(0, Tensor(idx), Tensor.ones(*idx.shape,
                                                                                                   dtype=dtype), "sum")
    items, _ = create_schedule([out.lazydata])
    run_schedule(items[:-1])
  return items[-1].ast, items[-1].bufs

# EMU has atomics (as CUDA) for float32 adds, none for int16 (test_scatter_atomic.py has the parallel entries)
@pytest.mark.parametrize("device,dtype", [("CPU", dtypes.float32), ("EMU", dtypes.int16)])
def test_kernel_refuses_opts_that_run_entries_together(device: str, dtype: DType) -> None:
  ast, _ = _scatter_item(_index(0, V, (N, D)), device, dtype)
  k = Kernel(ast, Device[device].renderer)
  entry = k.axes_of(AxisKind.REDUCE)[0]
  assert k.scatter is not None and not k.atomic and k.full_shape[entry] == N
  for opt in [Opt(OptOps.UNROLL, entry, 4), Opt(OptOps.GROUP, entry, 16), Opt(OptOps.GROUPTOP, entry, 16),
              Opt(OptOps.PADTO, entry, 300)]:
    with pytest.raises(KernelOptError): apply_opt(k, opt)
  # the other axes are split as in any kernel
  apply_opt(k, Opt(OptOps.UPCAST, 0, 4))
  assert k.full_shape[k.axes_of(AxisKind.REDUCE)[0]] == N

@pytest.mark.parametrize("device,every,dtype", [("CPU", 7, dtypes.float32), ("EMU", 23, dtypes.int16),
                                                ("EMU", 23, dtypes.float32), ("CUDACPU", 97, dtypes.int32)])
def test_every_search_action_computes_the_same(device: str, every: int, dtype: DType) -> None:
  # every opt BEAM tries first, and some of the pairs of them, either is refused or adds each entry once, duplicates
  # included: entries in order (CPU; int16 on EMU, which has no 16-bit atomics) or in parallel threads and blocks with
  # atomic adds (float32 on EMU, int32 on CUDACPU, whose blocks run at once on 2 OS threads). EMU has local threads and
  # shared memory (LOCAL, GROUP) and reports races
  try: dev = Device[device]
  except Exception as e: pytest.skip(f"{device}: {e}")
  idx = _index(0, 40, (N, D))
  ast, bufs = _scatter_item(idx, device, dtype)
  want = _add_at((V, D), 0, idx, np.ones((N, D)), dtype.np)
  with Context(THREADS=2):
    assert Kernel(ast, dev.renderer).atomic == (device != "CPU" and dtype != dtypes.int16)
    first = [o for o in search_actions.actions(Kernel(ast, dev.renderer)) if _legal(ast, dev.renderer, [o])]
    pairs = itertools.islice(itertools.product(first, first), 0, None, every)
    tried = [[o] for o in first] + [[a, b] for a, b in pairs if _legal(ast, dev.renderer, [a, b])]
    assert len(tried) > 10
    for opts in tried:
      bufs[0].copyin(memoryview(np.zeros(V * D, dtype.np).view(np.uint8)))
      compile_kernel(ast, dev, opts)(bufs)
      np.testing.assert_array_equal(bufs[0].numpy().reshape(V, D), want, err_msg=str(opts))

def _legal(ast: UOp, renderer: Renderer, opts: list[Opt]) -> bool:
  k = Kernel(ast, renderer)
  try:
    for o in opts: apply_opt(k, o)
  except KernelOptError: return False
  # entries run in order in one thread (REDUCE loops), or as threads and blocks with atomic updates: never as lanes
  assert not k.axes_of(AxisKind.UNROLL, AxisKind.GROUP)
  assert all(k.kinds[a] in ((AxisKind.GLOBAL, AxisKind.LOCAL) if k.atomic else (AxisKind.REDUCE,))
             for a in k.entry_axes())
  return True

@pytest.mark.parametrize("beam", [1, 2])
@Context(CHECK_INDICES=0)
def test_beam_searched_scatters(beam: int, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(search, "MIN_SEARCH_S", 0.0)  # search these small kernels too
  idx, src = _index(-5, 60, (N, D)), rng.standard_normal((N, D)).astype(np.float32)
  with Context(BEAM=beam, CACHEDB=str(tmp_path / "beam.db"), BEAM_TIMEOUT_SEC=5.0, PARALLEL=0, IGNORE_BEAM_CACHE=1):
    emb = nn.Embedding(V, D)
    emb.weight.requires_grad_()
    g, = (emb(Tensor(idx[:, 0])) * Tensor(src)).sum().gradient(emb.weight)
    out = Tensor.zeros(V, D).scatter_reduce(0, Tensor(idx), Tensor(src), "sum")
    got_g, got = g.numpy(), out.numpy()
  search_workers.close_pool()
  np.testing.assert_allclose(got_g, _add_at((V, D), 0, np.repeat(idx[:, :1], D, 1), src), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got, _add_at((V, D), 0, idx, src), rtol=1e-5, atol=1e-5)

def test_threaded_scatter() -> None:
  big_d = 256
  idx = _index(0, 50, (2048,))
  up = rng.standard_normal((2048, big_d)).astype(np.float32)
  with Context(THREADS=2):
    w = Tensor(np.zeros((50, big_d), np.float32), requires_grad=True)
    g, = (w[Tensor(idx)] * Tensor(up)).sum().gradient(w)
    item = create_schedule([g.lazydata])[0][-1]
    k = compile_kernel(item.ast, Device["CPU"]).kernel
    assert k.scatter is not None and k.axes_of(AxisKind.THREAD)  # the output's columns split across the threads
    got = g.numpy()
  np.testing.assert_allclose(got, _add_at((50, big_d), 0, np.repeat(idx[:, None], big_d, 1), up), rtol=1e-4, atol=1e-4)

@Context(CHECK_INDICES=0)
def test_jit_replays_the_scatter_with_new_indices() -> None:
  emb = nn.Embedding(V, D)
  emb.weight.requires_grad_()
  @TinyJit
  def grad(idx: Tensor, up: Tensor) -> Tensor:
    g, = (emb(idx) * up).sum().gradient(emb.weight)
    return g.realize()
  for _ in range(4):
    idx, up = _index(-3, V, (N,)), rng.standard_normal((N, D)).astype(np.float32)
    np.testing.assert_allclose(grad(Tensor(idx), Tensor(up)).numpy(),
                               _add_at((V, D), 0, np.repeat(idx[:, None], D, 1), up), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("axis", [None, 0, 1])
def test_sharded_table_gradient(axis: int | None) -> None:
  devices = ("CPU:0", "CPU:1")
  idx, up = _index(-5, V, (N,)), rng.standard_normal((N, D)).astype(np.float32)
  w = Tensor(rng.standard_normal((V, D)).astype(np.float32)).shard(devices, axis).requires_grad_()
  g, = (w[Tensor(idx).shard(devices, None)] * Tensor(up).shard(devices, 1 if axis == 1 else None)).sum().gradient(w)
  np.testing.assert_allclose(g.numpy(), _add_at((V, D), 0, np.repeat((idx % V)[:, None], D, 1), up), rtol=1e-5,
                             atol=1e-5)

# ---- selections whose slots are found by a scatter ----

@pytest.mark.parametrize("n", [1 << 16, (1 << 16) + 40])
def test_masked_select_nonzero_unique_scatter_their_slots(n: int) -> None:
  """masked_select, nonzero and unique place each selected element in its slot with a scatter: work O(numel), not
  slots x numel (a 1024x1024 half-true mask took minutes as the reduce)."""
  x = rng.standard_normal(n).astype(np.float32)
  x[:5] = [-0.0, np.nan, np.inf, -np.inf, 0.0]
  mask = rng.random(n) < 0.5
  mask[:5] = True
  mask[-1] = True  # the last element fills the last slot
  sel, nz = Tensor(x).masked_select(Tensor(mask)), Tensor(mask.reshape(-1, 8)).nonzero()
  assert _scatters(sel) == 1 and _scatters(nz) == 1
  assert _scans(sel, nz) < 64 * n  # the cumsum: blocks times a 32x32 triangle; slots x entries would be n^2/2
  got = sel.numpy()
  np.testing.assert_array_equal(got, x[mask])
  assert np.signbit(got[0]) and not np.signbit(got[4])  # values are read, not summed: -0.0 stays -0.0
  np.testing.assert_array_equal(nz.numpy(), np.argwhere(mask.reshape(-1, 8)))
  short = Tensor(x).masked_select(Tensor(mask), size=int(mask.sum()) + 3, fill_value=7.0).numpy()
  np.testing.assert_array_equal(short, np.append(x[mask], [7.0] * 3).astype(np.float32))
  ints = rng.integers(-50, 50, n).astype(np.int32)
  np.testing.assert_array_equal(Tensor(ints).unique().numpy(), np.unique(ints))

def test_masked_select_gradient() -> None:
  x = Tensor(rng.standard_normal((300, 300)).astype(np.float32), requires_grad=True)
  mask = rng.random((300, 300)) < 0.3
  w = rng.standard_normal(int(mask.sum())).astype(np.float32)
  g, = (x.masked_select(Tensor(mask)) * Tensor(w)).sum().gradient(x)
  want = np.zeros((300, 300), np.float32)
  want[mask] = w
  np.testing.assert_array_equal(g.numpy(), want)

# ---- GPU backends ----

@pytest.mark.parametrize("device", ["EMU", "CUDACPU"])
def test_scatter_on_gpu_backends(device: str) -> None:
  try: Device[device]
  except Exception as e: pytest.skip(f"{device}: {e}")
  idx = _index(-10, V + 10, (N, 8))
  src = rng.standard_normal((N, 8)).astype(np.float32)
  with Context(DEV=device, CHECK_INDICES=0):
    emb = nn.Embedding(V, 8)
    emb.weight.requires_grad_()
    g, = (emb(Tensor(idx[:, 0])) * Tensor(src)).sum().gradient(emb.weight)
    out = Tensor.zeros(V, 8).scatter_reduce(0, Tensor(idx), Tensor(src), "sum")
    low = Tensor.zeros(V, 8).scatter_reduce(0, Tensor(idx), Tensor(src), "amin", include_self=False)  # max scatters
    last = Tensor.zeros(V, 8).scatter(0, Tensor(idx), Tensor(src))
    assert _scatters(g) == 1 and _scatters(out) == 1 and _scatters(low) == 2 and _scatters(last) == 1
    got_g, got, got_low, got_last = g.numpy(), out.numpy(), low.numpy(), last.numpy()
  np.testing.assert_allclose(got_g, _add_at((V, 8), 0, np.repeat(idx[:, :1], 8, 1), src), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got, _add_at((V, 8), 0, idx, src), rtol=1e-5, atol=1e-5)
  want_low, want_last = np.full((V, 8), np.inf, np.float32), np.zeros((V, 8), np.float32)
  for n, d in itertools.product(range(N), range(8)):
    if 0 <= (row := idx[n, d]) < V: want_low[row, d], want_last[row, d] = min(want_low[row, d], src[n, d]), src[n, d]
  np.testing.assert_array_equal(got_low, np.where(np.isinf(want_low), 0, want_low))
  np.testing.assert_array_equal(got_last, want_last)
