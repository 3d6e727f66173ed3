"""Scatter kernels with parallel entries (schedule/scatter.py): on a renderer that combines an op into memory atomically
(CUDA, so CUDACPU, and EMU), a scatter's entries are threads and blocks, each an atomic update (a loop-level STORE
whose arg is the op), instead of a loop in each thread. First every atomic the CUDA renderer writes, in one hand-built
program run on CUDACPU (blocks at once on 2 OS threads) and EMU and compiled by nvcc; then the engine on both against
numpy and torch: duplicates, indices outside, sum/amax/amin, half, bfloat16, ints, the last write of `scatter`."""
from __future__ import annotations

import concurrent.futures
import functools
import shutil
from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor, dtypes, nn
from lazytensor.codegen.program import get_program
from lazytensor.dtype import DType, from_storage, to_storage
from lazytensor.engine.realize import compile_kernel, run_schedule
from lazytensor.opt import search, search_workers
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import AxisKind, Kernel, KernelOptError, Opt, OptOps
from lazytensor.opt.rules import apply_opt
from lazytensor.renderer import NVIDIA_ATOMICS
from lazytensor.renderer.cuda import CUDARenderer
from lazytensor.renderer.emu import render_program
from lazytensor.runtime.cuda_compiler import cuda_compiler, find_nvcc
from lazytensor.runtime.ops_cpu import CPUMemory
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops, UOp

rng = np.random.default_rng(0)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="CUDACPU needs g++")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="NVCC_CHECK needs nvcc")
GPU_DEVICES = [pytest.param("CUDACPU", marks=needs_gxx), "EMU"]

# ---- every atomic, in one program ----

ATOMICS = sorted(NVIDIA_ATOMICS, key=lambda a: (a[0].name, a[1].name))
BLOCKS, THREADS_PER_BLOCK, TARGETS = 64, 128, 5
LANES = BLOCKS * THREADS_PER_BLOCK

@functools.cache
def _all_atomics() -> list[UOp]:
  """A linear program in which lane l (of 64 blocks of 128 threads) combines values_k[l] into targets_k[l % 5] with
  every (op, dtype) of NVIDIA_ATOMICS (targets_k is buffer 2k, values_k buffer 2k+1): 1638 updates of each target."""
  i32 = dtypes.int32
  gidx, lidx = (UOp(Ops.SPECIAL, i32, (), (name, n)) for name, n in (("gidx0", BLOCKS), ("lidx0", THREADS_PER_BLOCK)))
  lane = gidx * THREADS_PER_BLOCK + lidx
  at = lane % TARGETS
  stores = []
  for k, (op, dt) in enumerate(ATOMICS):
    targets, values = UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 2 * k), UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 2 * k + 1)
    stores.append(UOp(Ops.STORE, dtypes.void, (targets, at, UOp(Ops.LOAD, dt, (values, lane))), op))
  return list(UOp(Ops.SINK, dtypes.void, tuple(stores)).toposort)[:-1]

def _inputs(op: Ops, dt: DType) -> tuple[np.ndarray, np.ndarray]:
  """Targets and values whose every sum is exact in dt whatever the order (small integers; ints near the top of their
  range, so that 64-bit sums wrap); a NaN among a float max's values."""
  if dt.is_float:
    targets, values = rng.integers(-3, 4, TARGETS).astype(np.float32), rng.integers(-2, 3, LANES).astype(np.float32)
    if op is Ops.MAX: values[7] = np.nan  # target 2 becomes NaN, as MAX of floats defines it
    return to_storage(targets, dt), to_storage(values, dt)
  top = int(dt.max())
  return (rng.integers(0 if dt.is_unsigned else -9, 9, TARGETS).astype(dt.np),
          rng.integers(top // 3 if op is Ops.ADD else 0, top, LANES, dtype=dt.np))

def _expected(op: Ops, dt: DType, targets: np.ndarray, values: np.ndarray) -> np.ndarray:
  out = from_storage(targets, dt).copy()
  (np.add if op is Ops.ADD else np.maximum).at(out, np.arange(LANES) % TARGETS, from_storage(values, dt))
  return out

def _check_all(run: Callable[[list[UOp], list[np.ndarray]], None]) -> None:
  """run(uops, arrays) launches the program on the arrays (in place); every target must hold what np.add.at and
  np.maximum.at compute."""
  arrays = [a for op, dt in ATOMICS for a in _inputs(op, dt)]
  with np.errstate(over="ignore", invalid="ignore"):  # the 64-bit sums wrap; NaN wins a max
    want = [_expected(op, dt, arrays[2 * k], arrays[2 * k + 1]) for k, (op, dt) in enumerate(ATOMICS)]
    run(_all_atomics(), arrays)
  for k, (op, dt) in enumerate(ATOMICS):
    np.testing.assert_array_equal(from_storage(arrays[2 * k], dt), want[k], err_msg=f"{op.name} {dt.name}")

@needs_gxx
def test_every_atomic_on_cudacpu_blocks_at_once() -> None:
  def run(uops: list[UOp], arrays: list[np.ndarray]) -> None:
    dev = Device["CUDACPU"]
    prg = dev.load("atomics", dev.compiler.compile_cached(CUDARenderer().render("atomics", uops)))
    with Context(THREADS=2):  # blocks on two OS threads at once: the prelude's atomics must be real ones
      prg(*[CPUMemory(a.view(np.uint8).reshape(-1), a.ctypes.data) for a in arrays],
          global_size=(BLOCKS, 1, 1), local_size=(THREADS_PER_BLOCK, 1, 1))
  _check_all(run)

def test_every_atomic_on_emu() -> None:
  def run(uops: list[UOp], arrays: list[np.ndarray]) -> None:
    dev = Device["EMU"]
    prg = dev.load("atomics", dev.compiler.compile(render_program("atomics", uops)))
    prg(*[a.view(np.uint8).reshape(-1) for a in arrays], global_size=(BLOCKS, 1, 1),
        local_size=(THREADS_PER_BLOCK, 1, 1))
  _check_all(run)

def _nvcc_both(src: str) -> None:
  """nvcc compiles src for sm_80 and sm_90 (at once: ~1 s each)."""
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    list(pool.map(lambda arch: cuda_compiler(arch).compile(src), ("sm_80", "sm_90")))

@needs_nvcc
def test_nvcc_compiles_every_atomic() -> None:
  src = CUDARenderer().render("atomics", _all_atomics())
  for call in ("atomicAdd(data", "atomicAdd((unsigned long long*)(data", "atomicMax(data", "lt_atomic_max_float16(",
               "lt_atomic_max_bfloat16(", "lt_atomic_max_float32(", "lt_atomic_max_float64(", "atomicCAS("):
    assert call in src, call
  _nvcc_both(src)

# ---- the kernels the engine makes ----

V, D, N = 300, 32, 256  # targets, elements per target, entries: past SCATTER_MIN_WORK

def _scatter_asts(t: Tensor) -> list[UOp]:
  items, _ = create_schedule([t.lazydata])
  return [it.ast for it in items if it.ast.op is Ops.SINK and any(s.op is Ops.SCATTER for s in it.ast.src)]

def _index(lo: int, hi: int, shape: tuple[int, ...]) -> np.ndarray: return rng.integers(lo, hi, shape).astype(np.int32)

@pytest.mark.parametrize("op,dt,atomic", [("sum", dtypes.float32, True), ("amax", dtypes.float16, True),
                                          ("sum", dtypes.bfloat16, True), ("sum", dtypes.int64, True),
                                          ("amax", dtypes.uint32, True), ("sum", dtypes.int16, False),
                                          ("amax", dtypes.int8, False)])
def test_which_scatters_run_entries_in_parallel(op: str, dt: DType, atomic: bool) -> None:
  # where CUDA has an exact atomic for the op and dtype; 8- and 16-bit ints keep the entries in order
  out = Tensor.zeros(V, D, dtype=dt).scatter_reduce(0, Tensor(_index(0, V, (N, D))), Tensor.ones(N, D, dtype=dt), op,
                                                    include_self=False)
  ast = _scatter_asts(out)[-1]  # after the count's int scatter (include_self=False), the values' one
  for renderer in (CUDARenderer(), Device["EMU"].renderer):
    k = Kernel(ast, renderer)
    assert k.atomic is atomic and bool(k.axes_of(AxisKind.REDUCE)) is not atomic
    assert k.entry_axes() == (k.axes_of(AxisKind.GLOBAL)[-1:] if atomic else k.axes_of(AxisKind.REDUCE))
  assert not Kernel(ast, Device["CPU"].renderer).atomic  # LLVM: in order

def _program(ast: UOp) -> str:
  return get_program(_heuristic(ast), "k").source

def _heuristic(ast: UOp) -> Kernel:
  return hand_coded_optimizations(Kernel(ast, CUDARenderer()))

def test_embedding_backward_is_a_grid_of_atomic_adds() -> None:
  # every (entry, column) its own thread: threadIdx.x along the columns (coalesced), no loop over the entries
  emb = nn.Embedding(1000, 256)
  emb.weight.requires_grad_()
  g, = emb(Tensor(_index(0, 1000, (4096,)))).sum().gradient(emb.weight)
  ast, = _scatter_asts(g)
  k = _heuristic(ast)
  spec = get_program(k, "k")
  assert spec.launch.local_size == (256, 1, 1) and spec.launch.global_size == (4096, 1, 1)
  assert "atomicAdd(data0+" in spec.source and "for (" not in spec.source
  assert k.kinds == [AxisKind.GLOBAL, AxisKind.GLOBAL, AxisKind.LOCAL]

def test_rendered_atomics_per_op() -> None:
  idx, ones = Tensor(_index(0, V, (N, D))), Tensor.ones(N, D)
  # amin is minus the amax of minus the values; scatter's last write is an int max of positions (then a gather)
  src_min = _program(_scatter_asts(Tensor.zeros(V, D).scatter_reduce(0, idx, ones, "amin", include_self=False))[-1])
  assert "lt_atomic_max_float32(data0+" in src_min and "atomicCAS(" in src_min
  last = _scatter_asts(Tensor.zeros(V, D).scatter(0, idx, ones))
  assert len(last) == 1 and "atomicMax(data0+" in _program(last[0])
  assert "atomicAdd((unsigned long long*)(data0+" in _program(
    _scatter_asts(Tensor.zeros(V, D, dtype=dtypes.int64).scatter_reduce(0, idx, ones.cast(dtypes.int64), "sum"))[-1])

@needs_nvcc
def test_nvcc_compiles_an_engine_scatter() -> None:
  out = Tensor.zeros(V, D, dtype=dtypes.float16).scatter_reduce(0, Tensor(_index(0, V, (N, D))),
                                                                Tensor.ones(N, D, dtype=dtypes.float16), "amax",
                                                                include_self=False)
  _nvcc_both(_program(_scatter_asts(out)[-1]))

# ---- values on CUDACPU (blocks at once on 2 OS threads) and EMU ----

def _add_at(shape: tuple[int, ...], idx: np.ndarray, src: np.ndarray) -> np.ndarray:
  """np.add.at along dim 0 with an index shaped like src; entries outside [0, shape[0]) skipped."""
  out = np.zeros(shape, np.float64)
  ok = (idx >= 0) & (idx < shape[0])
  np.add.at(out, (idx[ok], np.indices(idx.shape)[1][ok]), src[ok])
  return out

@pytest.mark.parametrize("device", GPU_DEVICES)
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.int32, dtypes.int64])
def test_sums_with_duplicates_and_indices_outside(device: str, dt: DType) -> None:
  idx = _index(-30, V + 30, (N, D))
  idx[:, 0] = 9  # every entry names one target
  src = rng.integers(-4, 5, (N, D)).astype(np.float32) / (2 if dt.is_float else 1)  # every order adds them exactly
  with Context(DEV=device, THREADS=2, CHECK_INDICES=0):  # checked, the indices outside raise (test_index_check.py)
    out = Tensor.zeros(V, D, dtype=dt).scatter_reduce(0, Tensor(idx), Tensor(src).cast(dt), "sum")
    assert all(Kernel(a, Device[device].renderer).atomic for a in _scatter_asts(out))
    got = out.cast(dtypes.float64).numpy()
  np.testing.assert_array_equal(got, _add_at((V, D), idx, src))

@pytest.mark.parametrize("device", GPU_DEVICES)
@pytest.mark.parametrize("reduce", ["amax", "amin", "mean"])
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.int32])
def test_scatter_reduce_is_torchs(device: str, reduce: str, dt: DType) -> None:
  torch = pytest.importorskip("torch")
  x = (rng.standard_normal((V, D)) * 9).astype(dt.np)
  src = (rng.standard_normal((N, D)) * 9).astype(dt.np)
  idx = _index(0, V, (N, D))
  idx[:60, 3] = 5
  with Context(DEV=device, THREADS=2):
    out = Tensor(x).scatter_reduce(0, Tensor(idx), Tensor(src), reduce, include_self=False)
    assert all(Kernel(a, Device[device].renderer).atomic for a in _scatter_asts(out))
    got = out.numpy()
  want = torch.from_numpy(x).scatter_reduce(0, torch.from_numpy(idx).long(), torch.from_numpy(src), reduce,
                                            include_self=False).numpy()
  if reduce == "mean" and dt == dtypes.float16: np.testing.assert_allclose(got, want, rtol=2e-2, atol=5e-2)
  elif reduce == "mean" and dt == dtypes.float32: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  else: np.testing.assert_array_equal(got, want)  # a max, and an int mean, are exact whatever the order

@pytest.mark.parametrize("device", GPU_DEVICES)
def test_last_write_wins_and_is_deterministic(device: str) -> None:
  # scatter without a reduce: an atomic max of the positions, then a gather of the value at the last one
  x, src = rng.standard_normal((V, D)).astype(np.float32), rng.standard_normal((N, D)).astype(np.float32)
  idx = _index(-5, V + 5, (N, D))
  idx[:80, 2] = 4
  want = x.copy()
  for n in range(N):
    ok = (idx[n] >= 0) & (idx[n] < V)
    want[idx[n][ok], np.flatnonzero(ok)] = src[n][ok]
  with Context(DEV=device, THREADS=2, CHECK_INDICES=0):  # checked, the indices outside raise (test_index_check.py)
    for _ in range(2):
      out = Tensor(x).scatter(0, Tensor(idx), Tensor(src))
      assert [Kernel(a, Device[device].renderer).atomic for a in _scatter_asts(out)] == [True]
      np.testing.assert_array_equal(out.numpy(), want)

@pytest.mark.parametrize("device", GPU_DEVICES)
def test_embedding_gradient_and_setitem(device: str) -> None:
  idx = _index(-20, V + 20, (4, N // 4))  # a batch of sequences, some indices outside the table
  up = rng.standard_normal((4, N // 4, D)).astype(np.float32)
  x, rows, vals = rng.standard_normal((V, D)).astype(np.float32), _index(-V, V, (N,)), rng.standard_normal((N, D))
  with Context(DEV=device, THREADS=2, CHECK_INDICES=0):  # checked, the indices outside raise (test_index_check.py)
    emb = nn.Embedding(V, D)
    emb.weight.requires_grad_()
    g, = (emb(Tensor(idx)) * Tensor(up)).sum().gradient(emb.weight)
    assert [Kernel(a, Device[device].renderer).atomic for a in _scatter_asts(g)] == [True]
    got = g.numpy()
    t = Tensor(x).contiguous().realize()
    t[Tensor(rows)] = Tensor(vals.astype(np.float32))  # the last write to a row wins
    got_set = t.numpy()
  np.testing.assert_allclose(got, _add_at((V, D), np.repeat(idx.reshape(-1, 1), D, 1), up.reshape(-1, D)), rtol=1e-5,
                             atol=1e-5)
  want = x.copy()
  want[rows] = vals
  np.testing.assert_array_equal(got_set, want)

@pytest.mark.parametrize("device", GPU_DEVICES)
@pytest.mark.parametrize("shape,dim,entries", [((3, 200, 40), 1, 60), ((2, 20, 300), 2, 150)])
def test_dims_other_than_0(device: str, shape: tuple[int, ...], dim: int, entries: int) -> None:
  torch = pytest.importorskip("torch")
  ishape = shape[:dim] + (entries,) + shape[dim + 1:]
  idx = rng.integers(0, shape[dim], ishape).astype(np.int32)
  src, x = rng.integers(-4, 5, ishape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)
  with Context(DEV=device, THREADS=2):
    out = Tensor(x).scatter_reduce(dim, Tensor(idx), Tensor(src), "sum")
    assert [Kernel(a, Device[device].renderer).atomic for a in _scatter_asts(out)] == [True]
    got = out.numpy()
  want = torch.from_numpy(x).scatter_add(dim, torch.from_numpy(idx).long(), torch.from_numpy(src)).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

@needs_gxx
# unchecked: a run outside run_schedule leaves a hit flag for the next run of the schedule (test_index_check.py runs
# the checked kernel on junk)
@Context(CHECK_INDICES=0)
def test_garbage_indices_never_write_out_of_bounds() -> None:
  # random bits as indices: entries outside write nothing, the others still add (each its own thread)
  with Context(DEV="CUDACPU", THREADS=2):
    out = Tensor.zeros(V, D).contiguous().scatter_reduce(0, Tensor(_index(0, V, (N, D))), Tensor.ones(N, D), "sum")
    items, _ = create_schedule([out.lazydata])
    run_schedule(items[:-1])
    item = items[-1]
    junk = rng.integers(-2**31, 2**31, (N, D)).astype(np.int32)
    junk[::3] = rng.integers(0, V, (len(junk[::3]), D))
    next(b for b in item.bufs if b.dtype == dtypes.int32).copyin(memoryview(np.ascontiguousarray(junk).view(np.uint8)))
    runner = compile_kernel(item.ast, Device["CUDACPU"])
    assert runner.kernel.atomic
    runner(item.bufs)
    got = item.bufs[0].numpy().reshape(V, D)
  np.testing.assert_array_equal(got, _add_at((V, D), junk, np.ones((N, D))))

def test_beam_search_of_an_atomic_scatter(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(search, "MIN_SEARCH_S", 0.0)  # search this small kernel too
  idx, src = _index(-5, 60, (N, D)), rng.standard_normal((N, D)).astype(np.float32)
  with Context(DEV="EMU", BEAM=1, CACHEDB=str(tmp_path / "beam.db"), BEAM_TIMEOUT_SEC=5.0, PARALLEL=0,
               IGNORE_BEAM_CACHE=1, CHECK_INDICES=0):  # checked, the indices outside raise (test_index_check.py)
    got = Tensor.zeros(V, D).scatter_reduce(0, Tensor(idx), Tensor(src), "sum").numpy()
  search_workers.close_pool()
  np.testing.assert_allclose(got, _add_at((V, D), idx, src), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("device", GPU_DEVICES)
# unchecked: a run outside run_schedule leaves a hit flag for the next run of the schedule (test_index_check.py runs
# the checked kernel on junk)
@Context(CHECK_INDICES=0)
def test_padded_targets_are_never_updated(device: str) -> None:
  # PADTO of the output's other axis (30 columns to 32): the padded columns' loads read on (or are masked), their
  # atomic updates are gated off; the entries themselves are never padded
  idx = _index(-5, V + 5, (N, 30))
  with Context(DEV=device, THREADS=2):
    out = Tensor.zeros(V, 30).contiguous().scatter_reduce(0, Tensor(idx), Tensor.ones(N, 30), "sum")
    items, _ = create_schedule([out.lazydata])
    run_schedule(items[:-1])
    item, dev = items[-1], Device[device]
    assert Kernel(item.ast, dev.renderer).entry_axes() == [1]
    for opts in ([Opt(OptOps.PADTO, 0, 8)], [Opt(OptOps.PADTO, 0, 8), Opt(OptOps.UPCAST, 0, 8)],
                 [Opt(OptOps.PADTO, 0, 8), Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.LOCAL, 1, 16)]):
      item.bufs[0].copyin(memoryview(np.zeros(V * 30, np.float32).view(np.uint8)))
      compile_kernel(item.ast, dev, opts)(item.bufs)
      np.testing.assert_array_equal(item.bufs[0].numpy().reshape(V, 30), _add_at((V, 30), idx, np.ones((N, 30))),
                                    err_msg=str(opts))
    with pytest.raises(KernelOptError, match="neither padded nor upcast"):
      apply_opt(Kernel(item.ast, dev.renderer), Opt(OptOps.PADTO, 1, 300))
