"""Float sums are accurate however long they are: the error of a float32 sum, mean or long row sum stays within ~1e-6
of the float64 sum (codegen/lowerer.py, REDUCE_BLOCK: no accumulator adds more than a block of values in a row), on
every device and for whatever opts a kernel gets; float16 and bfloat16 sum in float32 and round once."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import HAVE_TORCH, avx2_target

from lazytensor import Context, Device, Tensor, dtypes
from lazytensor.codegen.linearize import linearize
from lazytensor.codegen.lowerer import REDUCE_BLOCK, REDUCE_FIRST_BLOCK, REDUCE_TILE_STEPS, lower_kernel
from lazytensor.engine.realize import compile_kernel
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import AxisKind, Kernel, Opt, OptOps
from lazytensor.opt.rules import apply_opt
from lazytensor.renderer.llvm import LLVMRenderer
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops, UOp

TOL = 1e-6

def _data(kind: str, shape: tuple[int, ...]) -> np.ndarray:
  rng = np.random.default_rng(0)
  # values near 1: once a running float32 sum is large, their small parts are below its precision and round away
  if kind == "near1": return (1 + 1e-3 * rng.random(shape)).astype(np.float32)
  return rng.random(shape, dtype=np.float32)

def _rel_err(got: np.ndarray, ref: np.ndarray) -> float: return float(np.max(np.abs(got - ref) / np.abs(ref)))

@pytest.mark.parametrize("kind", ["uniform", "near1"])
@pytest.mark.parametrize("n", [10**6, 10**7])
def test_full_sum_and_mean_of_float32(n: int, kind: str) -> None:
  # one accumulator per lane over the whole input was off by 4.5e-4 (1e7 near 1) and 7.9e-6 (1e6 near 1)
  x = _data(kind, (n,))
  ref = x.astype(np.float64).sum()
  t = Tensor(x)
  assert _rel_err(t.sum().numpy(), ref) <= TOL
  assert _rel_err(t.mean().numpy(), ref / n) <= TOL

@pytest.mark.parametrize("shape", [(16, 625_000), (4, 2_500_000), (3, 1_000_003)])
def test_long_row_sums(shape: tuple[int, int]) -> None:
  # 1_000_003 is prime: no vector unrolls it and no block divides it, so the last block of each level is shorter
  x = _data("near1", shape)
  assert _rel_err(Tensor(x).sum(1).numpy(), x.astype(np.float64).sum(1)) <= TOL

@pytest.mark.parametrize("shape", [(1_000_000, 16), (40_000, 256)])
def test_column_sums_of_tall_matrices(shape: tuple[int, int]) -> None:
  x = _data("near1", shape)
  assert _rel_err(Tensor(x).sum(0).numpy(), x.astype(np.float64).sum(0)) <= TOL

def test_sum_over_several_axes_and_var() -> None:
  # the reduce loops of two axes (not merged: the middle one is kept) share the levels; var sums squared deviations
  x = _data("near1", (40, 8, 20_000))
  assert _rel_err(Tensor(x).sum((0, 2)).numpy(), x.astype(np.float64).sum((0, 2))) <= TOL
  y = _data("uniform", (10**7,))
  assert _rel_err(Tensor(y).var().numpy(), y.astype(np.float64).var(ddof=1)) <= TOL

@pytest.mark.parametrize("k", [4096, 65536])
def test_matmul_with_a_long_k(k: int) -> None:
  # a register tile sums in blocks of REDUCE_FIRST_BLOCK steps: in one chain K 4096 was off by 2.7e-6
  a, b = _data("near1", (16, k)), _data("near1", (k, 32))
  ref = a.astype(np.float64) @ b.astype(np.float64)
  assert _rel_err((Tensor(a) @ Tensor(b)).numpy(), ref) <= TOL

@pytest.mark.parametrize("device", ["EMU", "CUDACPU"])
def test_gpu_devices_sum_in_blocks(device: str) -> None:
  # GROUP splits the sum across a block's threads; each thread's loop is cut into blocks as on the CPU, and the
  # threads' partials are summed in levels too (in one chain these 256 alike partials were off by 1.5e-6)
  x = _data("near1", (1, 1 << 23))
  got = Tensor(x, device=device).sum(1).numpy()
  assert _rel_err(got, x.astype(np.float64).sum(1)) <= TOL

def test_threaded_row_sums() -> None:
  x = _data("near1", (8, 1 << 20))
  with Context(THREADS=2): got = Tensor(x).sum(1).numpy()
  assert _rel_err(got, x.astype(np.float64).sum(1)) <= TOL

def test_integer_sums_stay_exact_and_unblocked() -> None:
  x = np.arange(3 * 10**6, dtype=np.int64) % 1000 - 300
  assert Tensor(x).sum().item() == int(x.sum())
  k = _kernel(lambda: Tensor(x).sum())
  assert _chains(k) == [_steps(k)]  # one accumulator over the whole loop, as before

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_sums_accumulate_in_float32_and_round_once(dtype: str) -> None:
  n = 3 * 10**6
  x = (np.random.default_rng(0).random(n) * 4e-3 + 1e-3).astype(np.float32)
  t = Tensor(x).cast(dtype)
  (item,), _ = create_schedule([t.sum().lazydata])
  (r,) = [u for u in item.ast.toposort if u.op is Ops.REDUCE_AXIS]
  assert r.dtype == dtypes.float32, "the kernel sums the 16-bit values in float32"
  vals = t.cast(dtypes.float32).numpy().astype(np.float64)
  got = t.sum()
  assert got.dtype == getattr(dtypes, dtype)
  once = Tensor(np.array([vals.sum()], dtype=np.float32)).cast(dtype)  # the float64 sum rounded to the dtype once
  assert got.cast(dtypes.float32).item() == once.cast(dtypes.float32).item()
  if HAVE_TORCH:  # torch sums them in float32 too, in another order: an ulp apart at most
    import torch
    ref = torch.from_numpy(x).to(getattr(torch, dtype)).sum().float().item()
    ulp = 2.0 ** (np.floor(np.log2(ref)) - (10 if dtype == "float16" else 7))
    assert abs(got.cast(dtypes.float32).item() - ref) <= ulp

# ---- the structure of the sum kernels: what the heuristics choose, and how long each accumulator's chain is ----

def _kernel(build, renderer=None) -> Kernel:
  items, _ = create_schedule([build().lazydata])
  return Kernel(items[-1].ast, renderer or Device["CPU"].renderer)

def _steps(k: Kernel) -> int:
  """The steps of the kernel's reduce loops."""
  out = 1
  for a in k.axes_of(AxisKind.REDUCE): out *= k.full_shape[a]
  return out

def _chains(k: Kernel) -> list[int]:
  """How many values each accumulator of the kernel's linear program adds in a row: the steps of the loops opened
  between its definition and its update."""
  open_loops: list[UOp] = []
  depth: dict[UOp, int] = {}
  chains = []
  for u in linearize(lower_kernel(k)):
    if u.op is Ops.RANGE: open_loops.append(u)
    elif u.op is Ops.ENDRANGE: open_loops.pop()
    elif u.op is Ops.DEFINE_ACC: depth[u] = len(open_loops)
    elif u.op is Ops.ASSIGN and u.src[0].op is Ops.DEFINE_ACC:
      steps = 1
      for r in open_loops[depth[u.src[0]]:]: steps *= int(r.src[1].vmax) - int(r.src[0].vmin)
      chains.append(steps)
  return chains

def test_heuristics_of_a_full_sum_on_avx2() -> None:
  # vectors of 8 floats, 4 of them a step (REDUCE_CHAINS); the 1e7 / 32 = 312,500 steps in levels of at most a block
  k = hand_coded_optimizations(_kernel(lambda: Tensor.empty(10**7).sum(), LLVMRenderer(avx2_target())))
  assert k.applied_opts == [Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.UNROLL, 0, 4)]
  assert _steps(k) == 312_500
  chains = _chains(k)
  assert max(chains) <= REDUCE_BLOCK and len(chains) >= 3
  steps = 1
  for c in chains: steps *= c
  assert steps >= _steps(k)  # the levels cover every step

def test_short_row_sums_keep_one_accumulator() -> None:
  # 512 / 32 = 16 steps: a block at most, the kernel is the same as before; 4096: two levels
  avx2 = LLVMRenderer(avx2_target())
  assert _chains(hand_coded_optimizations(_kernel(lambda: Tensor.empty(64, 512).sum(1), avx2))) == [16]
  assert sorted(_chains(hand_coded_optimizations(_kernel(lambda: Tensor.empty(64, 4096).sum(1), avx2)))) == [8, 16]

def test_register_tiles_sum_in_blocks_of_their_own() -> None:
  # a matmul's tile: the first level REDUCE_FIRST_BLOCK steps (its accumulators fill the registers); a padded
  # convolution's keeps one chain up to REDUCE_TILE_STEPS
  avx2 = LLVMRenderer(avx2_target())
  mm = hand_coded_optimizations(_kernel(lambda: Tensor.empty(256, 2048) @ Tensor.empty(2048, 256), avx2))
  assert mm.axes_of(AxisKind.UPCAST) and max(_chains(mm)) == REDUCE_FIRST_BLOCK
  conv = hand_coded_optimizations(_kernel(lambda: Tensor.empty(2, 512, 14, 14).conv2d(Tensor.empty(64, 512, 3, 3),
                                                                                     padding=1), avx2))
  assert set(_chains(conv)) == {512 * 9} and 512 * 9 <= REDUCE_TILE_STEPS

SUM_OPTS = [
  [], [Opt(OptOps.UNROLL, 1, 8)], [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 1, 8), Opt(OptOps.UNROLL, 1, 4)],
  [Opt(OptOps.THREAD, 0, 4), Opt(OptOps.UNROLL, 2, 4)], [Opt(OptOps.PADTO, 1, 7)],
  [Opt(OptOps.PADTO, 1, 7), Opt(OptOps.UNROLL, 1, 7)],
]

@pytest.mark.parametrize("opts", SUM_OPTS, ids=str)
def test_every_accumulator_chain_is_at_most_a_block(opts: list[Opt]) -> None:
  # rows of 32 x 12503 (a prime) values: whatever the opts, no chain is longer than a block, and the result is right
  x = _data("near1", (8, 32 * 12503))
  items, _ = create_schedule([Tensor(x).sum(1).lazydata])
  k = Kernel(items[-1].ast, Device["CPU"].renderer)
  for o in opts: apply_opt(k, o)
  # steps without lanes take a first level of their own (LLVM vectorizes them)
  assert max(_chains(k)) <= (REDUCE_FIRST_BLOCK if k.upcast_size() == 1 else REDUCE_BLOCK)
  compile_kernel(items[-1].ast, Device["CPU"], opts)(items[-1].bufs)
  assert _rel_err(items[-1].bufs[0].numpy(), x.astype(np.float64).sum(1)) <= TOL

@pytest.mark.parametrize("opts", [[Opt(OptOps.GROUP, 1, 16)], [Opt(OptOps.GROUPTOP, 1, 64), Opt(OptOps.UNROLL, 2, 4)],
                                  [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.GROUP, 2, 32)]], ids=str)
def test_grouped_sums_chain_at_most_a_block(opts: list[Opt]) -> None:
  # 2^17 values: a longer reduce to 8 outputs runs as partial reduces first on a GPU (schedule/reduce_split.py)
  k = _kernel(lambda: Tensor.empty(8, 1 << 14, device="EMU").sum(1), Device["EMU"].renderer)
  for o in opts: apply_opt(k, o)
  # each thread's loop is cut into blocks; the partials of a group's threads are one short chain
  assert max(_chains(k)) <= REDUCE_BLOCK
