"""Gathers folded into loads at the index (schedule/gather.py): the kernel of `x[idx]`, `gather` and `nn.Embedding`
reads one candidate per output instead of reducing over all of them, and computes what the unfolded reduce computes (an
index outside the candidates gives 0, every dtype of values and indices), on every backend. The tests that feed
indices out of range run with CHECK_INDICES=0: checked, they raise (test_index_check.py)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor, dtypes, nn
from lazytensor.engine.realize import compile_kernel, run_schedule
from lazytensor.opt import search_workers
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops, UOp

rng = np.random.default_rng(0)
TABLE = rng.standard_normal((50, 24)).astype(np.float32)
IDX = np.array([3, 49, 0, 50, -1, -51, 7, 1000, -7], dtype=np.int32)  # in range, out of range, negative

def _asts(t: Tensor) -> list[UOp]:
  items, _ = create_schedule([t.lazydata])
  return [it.ast for it in items if it.ast.op is Ops.SINK]

def _reduces(t: Tensor) -> int: return sum(u.op is Ops.REDUCE_AXIS for ast in _asts(t) for u in ast.toposort)

def _gathered_loads(t: Tensor) -> int:
  return sum(u.op is Ops.GATHER for ast in _asts(t) for u in ast.toposort)

def _unfolded(fn: Callable[[], Tensor], monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
  """fn() computed by the reduce as written, every candidate compared."""
  with monkeypatch.context() as m:
    m.setattr("lazytensor.schedule.scheduler.fold_gathers", lambda ast: ast)
    return fn().numpy()

def _getitem_reference(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
  n = table.shape[0]
  ok = (idx >= -n) & (idx < n)
  return np.where(ok.reshape(-1, *[1] * (table.ndim - 1)), table[np.where(ok, idx, 0)], 0)

@pytest.mark.parametrize("idx_dtype", [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.uint32])
@Context(CHECK_INDICES=0)
def test_getitem_reads_one_row_per_index(idx_dtype) -> None:
  idx = IDX if not idx_dtype.name.startswith("u") else np.abs(IDX) % 120
  idx = idx.astype(idx_dtype.np) if idx_dtype != dtypes.int8 else np.clip(idx, -128, 127).astype(np.int8)
  out = Tensor(TABLE)[Tensor(idx, dtype=idx_dtype)]
  assert _reduces(out) == 0 and _gathered_loads(out) == 1
  np.testing.assert_array_equal(out.numpy(), _getitem_reference(TABLE, idx.astype(np.int64)))

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.int32, dtypes.uint8, dtypes.bool, dtypes.float64])
@Context(CHECK_INDICES=0)
def test_every_value_dtype_folds(dtype) -> None:
  # floats and ints are picked out of a sum, ints out of a max from the smallest int, bools out of an any
  table = (rng.standard_normal((30, 5)) * 50).astype(dtype.np)
  idx = np.array([0, 29, 30, -3, 4], dtype=np.int32)
  out = Tensor(table)[Tensor(idx)]
  assert _reduces(out) == 0, dtype
  np.testing.assert_array_equal(out.numpy(), _getitem_reference(table, idx))

def test_gather_with_indices_that_differ_along_the_vectors(monkeypatch: pytest.MonkeyPatch) -> None:
  # gather along the last dim: neighbouring outputs (the SIMD lanes) read from different places, one load per lane
  x = rng.standard_normal((16, 40)).astype(np.float32)
  idx = rng.integers(0, 40, (16, 32))
  fn = lambda: Tensor(x).gather(1, Tensor(idx))
  assert _reduces(fn()) == 0
  np.testing.assert_array_equal(fn().numpy(), np.take_along_axis(x, idx, 1))
  np.testing.assert_array_equal(fn().numpy(), _unfolded(fn, monkeypatch))

def test_embedding_reads_rows_and_its_gradient_sums_them() -> None:
  emb = nn.Embedding(1000, 16)
  idx = rng.integers(0, 1000, (4, 7)).astype(np.int32)
  w = emb.weight.numpy()
  out = emb(Tensor(idx))
  assert _reduces(out) == 0
  np.testing.assert_array_equal(out.numpy(), w[idx])
  emb.weight.requires_grad_()
  (emb(Tensor(idx)) * 3).sum().backward()
  expected = np.zeros_like(w)
  np.add.at(expected, idx.reshape(-1), 3.0)
  assert emb.weight.grad is not None
  np.testing.assert_allclose(emb.weight.grad.numpy(), expected)

def test_arange_with_a_start_folds() -> None:
  # (e == arange(5, 55)) picks candidate e - 5; Tensor.arange is start + step * iota, in int64
  x = Tensor(TABLE)
  e = Tensor(np.array([5, 54, 4, 30], dtype=np.int32))
  hot = e.reshape(4, 1, 1) == Tensor.arange(5, 55).reshape(50, 1)
  out = hot.where(x, 0).sum(1)
  assert _reduces(out) == 0
  np.testing.assert_array_equal(out.numpy(), np.where(np.array([1, 1, 0, 1])[:, None], TABLE[[0, 49, 0, 25]], 0))

@pytest.mark.parametrize("dtype", [dtypes.int32, dtypes.int16, dtypes.uint8])
def test_an_arange_narrowed_to_a_type_its_values_fit_folds(dtype) -> None:
  # Tensor.arange is int64; cast to a narrower int that holds all of its values, it still counts 0..n-1
  x = Tensor(np.arange(200, dtype=np.float32))
  e = Tensor(np.array([5, 199, 0, 7], dtype=np.int32))
  out = (e.unsqueeze(-1) == Tensor.arange(200).cast(dtype)).where(x, 0).sum(-1)
  assert _reduces(out) == 0
  np.testing.assert_array_equal(out.numpy(), [5, 199, 0, 7])

def test_an_arange_narrowed_past_its_type_stays_a_reduce() -> None:
  # 0..299 cast to int8 wraps: each of 0..43 appears twice (as i and i + 256), so a match may pick two candidates
  x = Tensor(np.arange(300, dtype=np.float32))
  e8 = np.array([5, -24, 0, 7], dtype=np.int8)
  out = (Tensor(e8).unsqueeze(-1) == Tensor.arange(300).cast(dtypes.int8)).where(x, 0).sum(-1)
  assert _reduces(out) == 1
  ref = np.where(e8[:, None] == np.arange(300).astype(np.int8), np.arange(300, dtype=np.float32), 0).sum(-1)
  np.testing.assert_array_equal(out.numpy(), ref)

def test_what_is_not_a_gather_stays_a_reduce() -> None:
  x, e = Tensor(TABLE), Tensor(np.array([1, 2], dtype=np.int32))
  hot = e.reshape(2, 1, 1) == Tensor.arange(50).reshape(50, 1)
  assert _reduces(hot.where(x, 1).sum(1)) == 1       # the other value is not the sum's identity
  assert _reduces((hot.where(x, 0) * 2).sum(1)) == 1  # a product outside the where
  assert _reduces(hot.where(x, 0).sum((0, 1))) == 1   # a second axis reduced with it
  stepped = e.reshape(2, 1, 1) == Tensor.arange(0, 100, 2).reshape(50, 1)
  assert _reduces(stepped.where(x, 0).sum(1)) == 1    # a step: not folded (yet), still right
  np.testing.assert_array_equal(stepped.where(x, 0).sum(1).numpy(), TABLE[[0, 1]] * [[0], [1]])

def test_index_math_stays_int32_with_int64_indices() -> None:
  # the loaded index is clamped before it becomes an address, so its bounds are the table's
  from lazytensor.codegen.lowerer import lower_kernel
  from lazytensor.engine.realize import optimize_kernel
  ast = _asts(Tensor(TABLE)[Tensor(IDX.astype(np.int64))])[0]
  sink = lower_kernel(optimize_kernel(ast, Device["CPU"]))
  assert all(u.dtype.scalar() != dtypes.int64 or u.op not in (Ops.RANGE, Ops.SPECIAL) for u in sink.toposort)
  assert not any(u.op is Ops.LOAD and u.dtype.scalar() == dtypes.index for u in sink.toposort)

# unchecked: a run outside run_schedule leaves a hit flag for the next run of the schedule (test_index_check.py runs
# the checked kernel on junk)
@Context(CHECK_INDICES=0)
def test_garbage_indices_never_read_out_of_bounds() -> None:
  # what BEAM does to an index buffer: random bits; the kernel must still run, and give 0 for them
  item = create_schedule([Tensor(TABLE)[Tensor(IDX)].lazydata])[0][-1]
  run_schedule(create_schedule([Tensor(TABLE)[Tensor(IDX)].lazydata])[0][:-1])
  idx_buf = next(b for b in item.bufs if b.dtype == dtypes.int32)
  junk = np.array([2**31 - 1, -2**31, 2**30, -2**30, 49, 0, 12345678, -12345678, 1], dtype=np.int32)
  idx_buf.copyin(memoryview(junk.view(np.uint8)))
  compile_kernel(item.ast, Device["CPU"])(item.bufs)
  got = item.bufs[0].numpy().reshape(9, 24)
  np.testing.assert_array_equal(got, _getitem_reference(TABLE, junk.astype(np.int64)))

def test_beam_searches_a_gather(tmp_path) -> None:
  with Context(BEAM=1, CACHEDB=str(tmp_path / "beam.db"), BEAM_TIMEOUT_SEC=5.0, PARALLEL=0, IGNORE_BEAM_CACHE=1):
    got = Tensor(np.tile(TABLE, (40, 1)))[Tensor(rng.integers(-2000, 2000, 4096).astype(np.int32))].numpy()
  assert got.shape == (4096, 24)
  search_workers.close_pool()

@pytest.mark.parametrize("device", ["EMU", "CUDACPU"])
def test_gather_on_gpu_backends(device: str) -> None:
  try: Device[device]
  except Exception as e: pytest.skip(f"{device}: {e}")
  with Context(DEV=device, CHECK_INDICES=0):
    out = Tensor(TABLE)[Tensor(IDX)]
    assert _reduces(out) == 0
    got = out.numpy()
  np.testing.assert_array_equal(got, _getitem_reference(TABLE, IDX.astype(np.int64)))
