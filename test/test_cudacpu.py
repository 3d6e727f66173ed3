"""CUDACPU: the CUDA source run on the CPU. First hand-written CUDA C kernels against the runtime and headers (barriers,
shared memory, warp mma, half/bfloat16 rounding, errors), then the engine on DEV=CUDACPU: the acceptance tests (fusion,
reductions, softmax, matmul, conv, indexing, an fp16 matmul on tensor cores, a 1M-element sum) with NVCC_CHECK; BEAM,
the training example and other files' engine tests again without it (for their number of kernels).

g++ compiles cost ~0.1-0.3 s of CPU each (the prelude is precompiled), nvcc ~0.6 s an architecture: the hand-written
kernels share one source, and the engine tests keep to a few small kernels each.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import pathlib
import shutil
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from lazytensor import Context, GlobalCounters, Tensor
from lazytensor.engine.realize import get_runner
from lazytensor.runtime import ops_cudacpu
from lazytensor.runtime.cuda_compiler import cuda_compiler, find_nvcc
from lazytensor.runtime.device import Device
from lazytensor.runtime.ops_cpu import CPUMemory
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="CUDACPU needs g++")
ROOT = pathlib.Path(__file__).resolve().parent.parent
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="NVCC_CHECK needs nvcc")

KERNELS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// 4096 floats per block: each of 256 threads sums 16, then a tree in shared memory, a barrier between levels
extern "C" __global__ void __launch_bounds__(256) block_sum(float* __restrict__ out, const float* __restrict__ x) {
  __shared__ alignas(16) float part[256];
  int lid = threadIdx.x, gid = blockIdx.x;
  float acc = 0.0f;
  for (int i = 0; i < 16; i++) acc += x[gid * 4096 + i * 256 + lid];
  part[lid] = acc;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (lid < s) part[lid] += part[lid + s];
    __syncthreads();
  }
  if (lid == 0) out[gid] = part[0];
}

// one warp per 16x8 tile: out = a (16x16, row-major) @ b (16x8, row-major), fragments loaded in PTX's layout
template <class T, class Mma> __device__ void mma_tile(float* out, const T* a, const T* b, Mma mma) {
  int lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
  T fa[8], fb[4];
  float c[4] = {0.5f, 0.5f, 0.5f, 0.5f}, d[4];
  for (int i = 0; i < 8; i++) fa[i] = a[(group + 8 * (i / 2 % 2)) * 16 + quad * 2 + i % 2 + 8 * (i / 4)];
  for (int i = 0; i < 4; i++) fb[i] = b[(quad * 2 + i % 2 + 8 * (i / 2)) * 8 + group];
  mma(d, fa, fb, c);
  for (int i = 0; i < 4; i++) out[(group + 8 * (i / 2)) * 8 + quad * 2 + i % 2] = d[i];
}
extern "C" __global__ void __launch_bounds__(64) mma_f16(float* out, const __half* a, const __half* b) {
  mma_tile(out + 128 * (threadIdx.x / 32), a + 256 * (threadIdx.x / 32), b,
           [](float* d, const __half* a, const __half* b, const float* c) { lt_mma_m16n8k16_f16_f32(d, a, b, c); });
}
extern "C" __global__ void __launch_bounds__(64) mma_bf16(float* out, const __nv_bfloat16* a, const __nv_bfloat16* b) {
  mma_tile(out + 128 * (threadIdx.x / 32), a + 256 * (threadIdx.x / 32), b,
           [](float* d, const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c) {
             lt_mma_m16n8k16_bf16_f32(d, a, b, c);
           });
}
extern "C" __global__ void __launch_bounds__(32) mma_tf32(float* out, const float* a, const float* b) {
  int lane = threadIdx.x, group = lane / 4, quad = lane % 4;
  float fa[4], fb[2], c[4] = {0.5f, 0.5f, 0.5f, 0.5f}, d[4];
  for (int i = 0; i < 4; i++) fa[i] = a[(group + 8 * (i % 2)) * 8 + quad + 4 * (i / 2)];
  for (int i = 0; i < 2; i++) fb[i] = b[(quad + 4 * i) * 8 + group];
  lt_mma_m16n8k8_tf32_f32(d, fa, fb, c);
  for (int i = 0; i < 4; i++) out[(group + 8 * (i / 2)) * 8 + quad * 2 + i % 2] = d[i];
}

// float and double -> half and bfloat16 bits, and half arithmetic (each op rounds to half)
extern "C" __global__ void __launch_bounds__(256) convert(unsigned short* h, unsigned short* bf, unsigned short* hd,
                                                          float* arith, const float* x, const double* xd) {
  int i = blockIdx.x * 256 + threadIdx.x;
  __half a = __float2half(x[i]);
  h[i] = __half_as_ushort(a);
  bf[i] = __bfloat16_as_ushort(__float2bfloat16(x[i]));
  hd[i] = __half_as_ushort(__half(xd[i]));
  arith[i] = __half2float(a * a + a);
}

// half the threads wait at __syncthreads, the other half in an mma.sync: neither can complete
extern "C" __global__ void __launch_bounds__(32) divergent(float* out) {
  if (threadIdx.x < 16) __syncthreads();
  else {
    __half a[8], b[4];
    float c[4] = {0, 0, 0, 0};
    lt_mma_m16n8k16_f16_f32(out, a, b, c);
  }
}
"""

@functools.cache
def device() -> ops_cudacpu.CudacpuDevice: return Device["CUDACPU"]  # type: ignore[return-value]

@functools.cache
def kernels() -> bytes: return device().compiler.compile_cached(KERNELS)

def mem(a: np.ndarray) -> CPUMemory: return CPUMemory(a.view(np.uint8).reshape(-1), a.ctypes.data)

def launch(name: str, *arrays: np.ndarray, grid: int = 1, block: int = 1) -> None:
  device().load(name, kernels())(*[mem(a) for a in arrays], global_size=(grid, 1, 1), local_size=(block, 1, 1))

# ---- the runtime and headers, with hand-written kernels ----

def test_barrier_and_shared_memory_reduction() -> None:
  x = np.random.default_rng(0).random(64 * 4096, dtype=np.float32)
  out = np.zeros(64, np.float32)
  with Context(THREADS=2):  # blocks on two workers, each with its own shared memory
    launch("block_sum", out, x, grid=64, block=256)
  np.testing.assert_allclose(out, x.reshape(64, 4096).sum(1), rtol=1e-5)

def _bf16_bits(x: np.ndarray) -> np.ndarray:
  """float32 -> bfloat16 bits, round to nearest even (the reference for the headers' conversion)."""
  u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
  rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
  return np.where(np.isnan(x), (u >> 16).astype(np.uint16) | 0x40, rounded)

def _bf16_value(bits: np.ndarray) -> np.ndarray: return (bits.astype(np.uint32) << 16).view(np.float32)

@pytest.mark.parametrize("kind", ["f16", "bf16", "tf32"])
def test_warp_mma_matches_numpy(kind: str) -> None:
  rng = np.random.default_rng(1)
  out = np.zeros(256, np.float32)
  if kind == "tf32":
    a, b = rng.standard_normal((16, 8), np.float32), rng.standard_normal((8, 8), np.float32)
    launch("mma_tf32", out, a, b, block=32)
    tf32 = lambda v: ((v.view(np.uint32) + 0x1000) & 0xFFFFE000).view(np.float32)  # cvt.rna.tf32.f32
    np.testing.assert_allclose(out[:128].reshape(16, 8), tf32(a) @ tf32(b) + 0.5, rtol=1e-5, atol=1e-5)
    return
  a, b = rng.standard_normal((2, 16, 16), np.float32), rng.standard_normal((16, 8), np.float32)
  if kind == "f16":
    a_in, b_in = a.astype(np.float16), b.astype(np.float16)
    a_ref, b_ref = a_in.astype(np.float32), b_in.astype(np.float32)
  else:
    a_in, b_in = _bf16_bits(a), _bf16_bits(b)
    a_ref, b_ref = _bf16_value(a_in), _bf16_value(b_in)
  launch(f"mma_{kind}", out, a_in, b_in, block=64)  # two warps, each with its own tile of a
  ref = a_ref @ b_ref + 0.5
  np.testing.assert_allclose(out.reshape(2, 16, 8), ref, rtol=1e-5, atol=1e-5)

def test_half_and_bfloat16_round_to_nearest_even() -> None:
  rng = np.random.default_rng(2)
  special = np.array([65504, 65519.99, 65520, 1e9, -1e9, np.inf, -np.inf, np.nan, 2**-25, 2**-25 * 1.0001, 2**-24 * 1.5,
                      2**-24 * 2.5, 0.0, -0.0, 6e-8, 3.4e38, -3.39e38, 1 + 2**-11, 1 + 3 * 2**-11], np.float32)
  x = np.concatenate([special, rng.standard_normal(4096 - len(special)).astype(np.float32) *
                      (10.0 ** rng.integers(-9, 6, 4096 - len(special))).astype(np.float32)])
  # doubles just off a half tie: rounding through float first would land on the tie and go to even
  xd = np.concatenate([[1 + 2**-11 + 2**-40, 1 + 2**-11 - 2**-40, 3 * 2**-25 + 2**-60], rng.standard_normal(4093)])
  h, bf, hd = (np.zeros(4096, np.uint16) for _ in range(3))
  arith = np.zeros(4096, np.float32)
  launch("convert", h, bf, hd, arith, x.astype(np.float32), xd, grid=16, block=256)
  with np.errstate(over="ignore", invalid="ignore"):
    half = x.astype(np.float16)
    np.testing.assert_array_equal(h, half.view(np.uint16) | np.where(np.isnan(x), 0x0200, 0).astype(np.uint16))
    np.testing.assert_array_equal(bf, _bf16_bits(x))
    np.testing.assert_array_equal(hd, xd.astype(np.float16).view(np.uint16))
    np.testing.assert_array_equal(arith, (half * half + half).astype(np.float32))

def test_divergent_barrier_is_an_error_and_the_next_launch_works() -> None:
  with pytest.raises(RuntimeError, match=r"divergent: block \(0, 0, 0\): deadlock: 16 threads wait at __syncthreads"):
    launch("divergent", np.zeros(4, np.float32), block=32)
  test_barrier_and_shared_memory_reduction()  # fibers left inside the broken block start afresh

def test_mma_needs_whole_warps() -> None:
  with pytest.raises(RuntimeError, match="mma.sync needs all 32 lanes of warp 1; the block has 48 threads"):
    launch("mma_f16", np.zeros(256, np.float32), np.zeros(512, np.float16), np.zeros(128, np.float16), block=48)

def test_launch_limits() -> None:
  with pytest.raises(ValueError, match="a block of 2048 threads"):
    launch("block_sum", np.zeros(1, np.float32), np.zeros(4096, np.float32), block=2048)
  big = """extern "C" __global__ void __launch_bounds__(1) too_much_shared(float* out) {
  __shared__ float big[16384];
  big[threadIdx.x] = 1.0f;
  out[0] = big[0];
}"""
  with pytest.raises(ValueError, match="too_much_shared: 65536 bytes of __shared__ memory; a block has at most 49152"):
    device().load("too_much_shared", device().compiler.compile_cached(big))

def test_compile_error_names_the_kernel_and_caches_nothing() -> None:
  bad = 'extern "C" __global__ void __launch_bounds__(1) broken(float* out) { out[0] = undeclared; }\n'
  compiler = device().compiler
  for _ in range(2):  # the second try compiles again: nothing was cached
    with pytest.raises(ops_cudacpu.CudacpuCompileError, match=r"(?s)g\+\+ failed to compile kernel broken:.*undecl"):
      compiler.compile_cached(bad)

def test_missing_compiler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(shutil, "which", lambda name: None)
  ops_cudacpu.gxx.cache_clear()
  try:
    with pytest.raises(RuntimeError, match="CUDACPU needs a C\\+\\+ compiler: no g\\+\\+ on PATH"): ops_cudacpu.gxx()
  finally: ops_cudacpu.gxx.cache_clear()

# ---- the engine on DEV=CUDACPU ----

@pytest.fixture
def on_cudacpu() -> Iterator[None]:
  with Context(DEV="CUDACPU"): yield

@pytest.fixture
def nvcc_checked() -> Iterator[None]:
  """DEV=CUDACPU, and every kernel also compiled by nvcc for sm_80 and sm_90 where nvcc is installed."""
  with Context(DEV="CUDACPU", NVCC_CHECK=find_nvcc() is not None): yield

def _kernels_run(fn: Callable[[], Tensor]) -> tuple[np.ndarray, int]:
  GlobalCounters.reset()
  out = fn().numpy()
  return out, GlobalCounters.kernel_count

@pytest.mark.usefixtures("nvcc_checked")
def test_fused_elementwise_reduce_and_softmax() -> None:
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((33, 65), np.float32), rng.standard_normal((33, 65), np.float32)
  out, n = _kernels_run(lambda: (Tensor(a) + Tensor(b)) * 2 - 1)
  np.testing.assert_allclose(out, (a + b) * 2 - 1, rtol=1e-6)
  assert n == 1
  out, n = _kernels_run(lambda: (Tensor(a) * Tensor(b)).sum(1) + 1)
  np.testing.assert_allclose(out, (a * b).sum(1) + 1, rtol=1e-5, atol=1e-5)
  assert n == 1
  out, n = _kernels_run(lambda: Tensor(a).softmax(-1))
  e = np.exp(a - a.max(-1, keepdims=True))
  np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
  assert n <= 3
  np.testing.assert_allclose(Tensor(a).max(0).numpy(), a.max(0))
  np.testing.assert_allclose(Tensor(a).mean().numpy(), a.mean(), rtol=1e-5)

@pytest.mark.usefixtures("nvcc_checked")
def test_matmul_conv_and_indexing() -> None:
  rng = np.random.default_rng(4)
  a, b = rng.standard_normal((64, 80), np.float32), rng.standard_normal((80, 48), np.float32)
  x, w = rng.standard_normal((2, 3, 10, 10), np.float32), rng.standard_normal((4, 3, 3, 3), np.float32)
  idx = np.array([3, 0, 63, 7], np.int32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).relu().numpy(), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
  torch_ref = pytest.importorskip("torch")
  conv = torch_ref.nn.functional.conv2d(torch_ref.tensor(x), torch_ref.tensor(w), padding=1).numpy()
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=1).numpy(), conv, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(a)[Tensor(idx)].numpy(), a[idx])

@pytest.mark.usefixtures("nvcc_checked")
def test_fp16_matmul_runs_on_tensor_cores(capsys: pytest.CaptureFixture[str]) -> None:
  rng = np.random.default_rng(5)
  a, b = rng.standard_normal((256, 256)).astype(np.float16), rng.standard_normal((256, 256)).astype(np.float16)
  with Context(DEBUG=4): out = (Tensor(a) @ Tensor(b)).numpy()
  source = capsys.readouterr().out
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in source and "lt_mma_m16n8k16_f16_f32(" in source
  assert out.dtype == np.float16
  np.testing.assert_allclose(out.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=5e-2)

@pytest.mark.usefixtures("nvcc_checked")
def test_million_element_sum_uses_shared_memory(capsys: pytest.CaptureFixture[str]) -> None:
  x = np.random.default_rng(6).random(1 << 20, dtype=np.float32)
  with Context(DEBUG=4): total = Tensor(x).sum().item()
  source = capsys.readouterr().out
  assert "__shared__" in source and "threadIdx.x" in source and "__syncthreads();" in source
  assert total == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-5)

@needs_nvcc
def test_nvcc_check_rejects_what_only_g_plus_plus_accepts() -> None:
  # lt::lane_id comes from the CUDACPU prelude, not from CUDA: g++ compiles it, nvcc must not let it through
  src = 'extern "C" __global__ void __launch_bounds__(32) lanes(int* out) { out[threadIdx.x] = lt::lane_id(); }\n'
  compiler = device().compiler
  with Context(NVCC_CHECK=1):
    for _ in range(2):  # nothing cached from the failure
      with pytest.raises(ops_cudacpu.CudacpuCompileError, match="NVCC_CHECK.*lanes.*sm_80"):
        compiler.compile_cached(src)
  lanes = np.zeros(32, np.int32)
  device().load("lanes", compiler.compile_cached(src))(mem(lanes), local_size=(32, 1, 1))
  np.testing.assert_array_equal(lanes, np.arange(32))

@needs_nvcc
@pytest.mark.usefixtures("on_cudacpu")
def test_beam_finds_kernels_that_nvcc_compiles_and_that_validate(tmp_path: pathlib.Path) -> None:
  # searched with g++ alone (each candidate checked by nvcc would cost ~2 s more), then the winner's source through nvcc
  x = np.random.default_rng(7).standard_normal((16, 64), np.float32)
  out = (Tensor(x).exp() * 2).sum(1)
  (item,) = [it for it in create_schedule([out.lazydata])[0] if it.ast.op is Ops.SINK]
  with Context(BEAM=2, PARALLEL=0, IGNORE_BEAM_CACHE=1, CACHEDB=str(tmp_path / "beam.db")):
    np.testing.assert_allclose(out.numpy(), (np.exp(x) * 2).sum(1), rtol=1e-4)
    chosen = get_runner("CUDACPU", item.ast)
  assert chosen.kernel.applied_opts, "the search chose some opts"
  for arch in ops_cudacpu.NVCC_CHECK_ARCHS: cuda_compiler(arch).compile(chosen.spec.source)

def test_training_example_runs(on_cudacpu: None) -> None:
  pytest.importorskip("sklearn")
  spec = importlib.util.spec_from_file_location("train_digits", ROOT / "extra" / "examples" / "train_digits.py")
  assert spec is not None and spec.loader is not None
  example = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(example)
  x_train, y_train, x_test, y_test = example.load_split()
  model = example.train("mlp", 2, 64, 3e-3, 0, x_train, y_train)
  assert example.accuracy(model, x_test, y_test) > 0.8

# engine tests of other files, run again with CUDACPU as the default device: a subset, for the compile cost
ENGINE_TESTS = [
  ("test_ops", "test_big_elementwise_chain"), ("test_ops", "test_softmax_family_extremes"),
  ("test_ops", "test_conv2d_of_computed_input"), ("test_ops", "test_getitem_dtypes_and_chains"),
  ("test_ops", "test_arg_reduce_random_ties_and_nan"), ("test_ops", "test_float16_mean_var_accumulate_wide"),
  ("test_ops_indexing", "test_gather_numeric_and_kernels"), ("test_ops_indexing", "test_one_hot"),
  ("test_ops_nn", "test_pool_numeric_and_kernels"), ("test_ops_nn", "test_layernorm_batchnorm_vs_torch"),
  ("test_nn", "test_linear"), ("test_nn", "test_embedding"), ("test_schedule", "test_conv2d_one_kernel"),
]

@pytest.mark.parametrize("module,name", ENGINE_TESTS, ids=[f"{m}.{n}" for m, n in ENGINE_TESTS])
def test_engine_test_on_cudacpu(module: str, name: str) -> None:
  fn = getattr(importlib.import_module(module), name)
  with Context(DEV="CUDACPU"): fn()

def test_minus_a_negative_constant_compiles() -> None:
  # logaddexp(x, -2.5) subtracts the constant: rendered `(val0--2.5f)`, a decrement to the compiler (fuzz_compose
  # cudacpu seeds 40014, 40057)
  a = np.arange(-3, 3).astype(np.float32)
  with Context(DEV="CUDACPU"): out = Tensor(a).logaddexp(-2.5).numpy()
  np.testing.assert_allclose(out, np.logaddexp(a, -2.5), rtol=1e-6)
