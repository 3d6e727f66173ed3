"""The CUDA renderer through the real pipeline (schedule -> Kernel + opts -> get_program: lower, linearize, ALU
semantics, render), every kernel compiled by nvcc for sm_80 and sm_90 and run on DEV=CUDACPU (the same source) against
the CPU backend; the compiler module; the CUDA device's errors without pycuda."""
from __future__ import annotations

import importlib.util
import math
import pathlib
import re
import shutil
import sqlite3
from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Context, Tensor, autocast, dtypes
from lazytensor.codegen.program import get_program
from lazytensor.dtype import DType, from_storage
from lazytensor.engine.realize import compile_kernel, run_schedule
from lazytensor.helpers import DISKCACHE_TABLE, to_function_name
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import Kernel, KernelOptError, Opt, OptOps
from lazytensor.opt.rules import apply_opt
from lazytensor.renderer.cstyle import known_multiple
from lazytensor.renderer.cuda import CUDARenderer
from lazytensor.runtime.cuda_compiler import (
  CUDACompileError,
  NVCCCompiler,
  NVRTCCompiler,
  _nvrtc_candidates,
  cuda_compiler,
  find_nvcc,
  kernel_name,
  load_nvrtc,
)
from lazytensor.runtime.device import Device, _compile_memo, compile_stats
from lazytensor.runtime.ops_cuda import CUDAUnavailableError, gpu_index
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops, UOp

R = CUDARenderer()
ARCHS = ("sm_80", "sm_90")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")

# ---- rendering through the pipeline, running on CUDACPU ----

Maker = Callable[..., Tensor]
Build = Callable[[Maker], Tensor]

def maker(device: str) -> Maker:
  """Tensors on `device` with the same contents on every device (each maker draws the same sequence)."""
  rng = np.random.default_rng(0)
  def make(*shape: int, dtype: DType = dtypes.float32) -> Tensor:
    if dtype.is_bool: return Tensor(rng.random(shape) < 0.5, device=device)
    if dtype.is_int: return Tensor(rng.integers(0 if dtype.is_unsigned else -50, 50, shape), device=device, dtype=dtype)
    return Tensor(rng.standard_normal(shape), device=device, dtype=dtype)
  return make

def kernels(build: Build, opts: list[Opt] | None = None) -> list[tuple[Kernel, str]]:
  """Each kernel of the expression's schedule with the CUDA renderer: optimized by the GPU heuristics, or by `opts`
  for the last kernel. Returns the kernels with their sources."""
  items, _ = create_schedule([build(maker("EMU")).lazydata])
  asts = [it.ast for it in items if it.ast.op is Ops.SINK]
  out_ks = []
  for i, ast in enumerate(asts):
    k = Kernel(ast, R)
    if opts is not None and i == len(asts) - 1:
      for o in opts: apply_opt(k, o)
    else: k = hand_coded_optimizations(k)
    name = to_function_name(k.name)
    out_ks.append((k, get_program(k, name).source))
  return out_ks

def compile_all(srcs: list[str]) -> None:
  """Every source through nvcc for every architecture; a failure names the kernel (CUDACompileError)."""
  for arch in ARCHS:
    compiler = NVCCCompiler(arch)
    for src in srcs: assert compiler.compile_cached(src)[:4] == b"\x7fELF"

def run_cudacpu(build: Build, opts: list[Opt] | None) -> np.ndarray:
  items, _ = create_schedule([build(maker("CUDACPU")).lazydata])
  run_schedule(items[:-1])
  compile_kernel(items[-1].ast, Device["CUDACPU"], opts)(items[-1].bufs)
  out = items[-1].bufs[0]
  return from_storage(out.numpy(), out.dtype)

def check(build: Build, opts: list[Opt] | None = None, tol: float = 1e-5) -> list[tuple[Kernel, str]]:
  """The kernels' sources; each kernel compiled by nvcc for sm_80 and sm_90 and, where g++ is, run on CUDACPU (the
  same source) and compared with the CPU backend."""
  ks = kernels(build, opts)
  if shutil.which("g++") is None: compile_all([src for _, src in ks])
  else:
    want = build(maker("CPU")).numpy()
    with Context(NVCC_CHECK=find_nvcc() is not None): got = run_cudacpu(build, opts).reshape(want.shape)
    if want.dtype.kind == "f": np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
    else: np.testing.assert_array_equal(got, want)
  return ks

ALL = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
       dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]

def _chain(dt: DType) -> Build:
  def build(m: Maker) -> Tensor:
    a, b = m(16, 64, dtype=dt), m(16, 64, dtype=dt)
    if dt.is_bool: return (a & b) | (a ^ b) != (a < b)
    if dt.is_unsigned: return ((a * b + a) // (b + 1) - (a % 3)).maximum(b) >> 1
    if dt.is_int: return ((a * b + a) // (b.abs() + 1) - (a % 3)).maximum(b) << 1
    return (a * b + a / (b.abs() + 1)).exp().log().sqrt().sin().maximum(b).reciprocal() + (-a).trunc()
  return build

@needs_nvcc
@pytest.mark.parametrize("dt", ALL, ids=str)
def test_elementwise_chain_every_dtype(dt: DType) -> None:
  ks = check(_chain(dt), tol=1e-2 if dt.itemsize == 2 and dt.is_float else 1e-5)
  if dt == dtypes.float16: assert "#include <cuda_fp16.h>" in ks[-1][1] and "__half2float" in ks[-1][1]
  else: assert "cuda_fp16.h" not in ks[-1][1]
  assert ("#include <cuda_bf16.h>" in ks[-1][1]) == (dt == dtypes.bfloat16)

REDUCES: dict[str, tuple[Build, list[Opt]]] = {
  "sum_group": (lambda m: m(8, 1024).sum(1), [Opt(OptOps.UNROLL, 1, 4), Opt(OptOps.GROUP, 1, 64)]),
  "sum_grouptop": (lambda m: m(8, 1024).sum(1), [Opt(OptOps.GROUPTOP, 1, 128), Opt(OptOps.LOCAL, 0, 2)]),
  "max_group_upcast": (lambda m: m(64, 256).max(1), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.GROUP, 1, 32)]),
  "column_sum": (lambda m: m(512, 64).sum(0), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 16),
                                               Opt(OptOps.GROUPTOP, 2, 8)]),
  "full_sum_half": (lambda m: m(1 << 14, dtype=dtypes.float16).sum(), [Opt(OptOps.UNROLL, 0, 4),
                                                                      Opt(OptOps.GROUP, 0, 256)]),
}

@needs_nvcc
@pytest.mark.parametrize("name", list(REDUCES))
def test_reductions_through_shared_memory(name: str) -> None:
  build, opts = REDUCES[name]
  src = check(build, opts, tol=2e-2 if name.endswith("half") else 1e-4)[-1][1]
  assert "__shared__" in src and "__syncthreads();" in src and "threadIdx.x" in src

@needs_nvcc
def test_shared_memory_is_aligned_for_its_widest_vector() -> None:
  # 8 partial sums a thread go to shared memory as one float32x8 (32 bytes): in an array aligned to 16 that access
  # faults on a GPU, and in AVX's aligned loads on CUDACPU
  src = check(lambda m: m(16, 64).exp().sum(1), [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.GROUP, 1, 16)], tol=1e-4)[-1][1]
  assert "__shared__ alignas(32) float temp" in src and "(*((float32x8*)(temp" in src

@needs_nvcc
def test_matmul_with_locals_and_upcasts_uses_vector_loads() -> None:
  opts = [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.LOCAL, 0, 8)]
  [(k, src)] = check(lambda m: m(128, 64) @ m(64, 128), opts, tol=1e-4)
  assert "__launch_bounds__(128)" in src and "threadIdx.y" in src and "blockIdx.x" in src
  assert "*((const float32x4*)(data2+" in src and "*((float32x4*)(data0+" in src  # B rows and C rows as float4

@needs_nvcc
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float32], ids=str)
def test_elementwise_vectors_are_16_bytes(dt: DType) -> None:
  # the heuristics' vectors hold 16 bytes of the widest type: 8 halves, 4 floats (a float32 store after a half load: 4)
  [(k, src)] = check(lambda m: m(64, 64, dtype=dt) * 2 + 1, tol=1e-2)
  n = 16 // dt.itemsize
  assert f"*((const {dt.name}x{n}*)(data1+" in src and f"*(({dt.name}x{n}*)(data0+" in src
  [(k, src)] = check(lambda m: m(64, 64, dtype=dt).cast(dtypes.float32) * 2, tol=1e-2)
  assert f"*((const {dt.name}x4*)(data1+" in src and "*((float32x4*)(data0+" in src

@needs_nvcc
def test_half_matmul_on_tensor_cores() -> None:
  # a tensor core multiplies exactly where the CPU rounds each product to half first
  [(k, src)] = check(lambda m: m(64, 32, dtype=dtypes.float16) @ m(32, 48, dtype=dtypes.float16), tol=5e-2)
  assert k.tensor_core is not None  # the heuristics pick TC for a half matmul
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src and "lt_mma_m16n8k16_f16_f32(" in src
  assert src.index("#ifndef LT_CUDACPU") < src.index("asm volatile") < src.index("#endif")

@needs_nvcc
def test_half_conv_on_tensor_cores() -> None:
  # the input channels are K; the 3x3 window is a loop around the mma
  conv = lambda m: m(2, 16, 8, 16, dtype=dtypes.float16).conv2d(m(32, 16, 3, 3, dtype=dtypes.float16), padding=1)
  [(k, src)] = check(conv, tol=5e-2)
  assert k.tensor_core is not None and "lt_mma_m16n8k16_f16_f32(" in src

def test_tf32_tensor_cores_only_with_the_knob() -> None:
  with Context(TF32=0): assert [tc.name for tc in R.tensor_cores] == ["m16n8k16_f16_f32", "m16n8k16_bf16_f32"]
  with Context(TF32=1):
    assert [tc.name for tc in R.tensor_cores] == ["m16n8k16_f16_f32", "m16n8k16_bf16_f32", "m16n8k8_tf32_f32"]

@needs_nvcc
def test_tf32_matmul_on_tensor_cores_with_the_knob() -> None:
  # inputs rounded to tf32 (10 mantissa bits): about 1e-3 relative per product
  with Context(TF32=1): [(k, src)] = check(lambda m: m(64, 32) @ m(32, 48), tol=5e-2)
  assert k.tensor_core is not None and "cvt.rna.tf32.f32" in src and ".m16n8k8.row.col.f32.tf32.tf32.f32" in src

@needs_nvcc
def test_bfloat16_matmul_on_tensor_cores() -> None:
  [(k, src)] = check(lambda m: m(64, 32, dtype=dtypes.bfloat16) @ m(32, 48, dtype=dtypes.bfloat16), tol=1e-1)
  assert k.tensor_core is not None and k.tensor_core.tc.name == "m16n8k16_bf16_f32"  # the heuristics pick bf16 TC
  assert "#include <cuda_bf16.h>" in src and "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src
  assert "lt_mma_m16n8k16_bf16_f32(" in src and "lt_mma_m16n8k16_f16_f32" not in src

def _autocast_matmul(m: Maker) -> Tensor:
  with autocast(dtypes.half): return m(64, 32) @ m(32, 48)

@needs_nvcc
@pytest.mark.parametrize("dt,build", [
  (dtypes.float16, lambda m: m(64, 32).half() @ m(32, 48).half()),
  (dtypes.bfloat16, lambda m: m(64, 32).cast(dtypes.bfloat16) @ m(32, 48).cast(dtypes.bfloat16)),
  (dtypes.float16, _autocast_matmul)], ids=["half", "bfloat16", "autocast"])
def test_16_bit_casts_of_float32_on_tensor_cores(dt: DType, build: Build) -> None:
  # one kernel: each thread loads float32 elements and rounds them in registers into its fragments (they were stored
  # as float32 copies first, and the product of float32 loads took no tensor core)
  [(k, src)] = check(build, tol=1e-1 if dt == dtypes.bfloat16 else 1e-2)
  name = "bf16" if dt == dtypes.bfloat16 else "f16"
  assert k.tensor_core is not None and f".m16n8k16.row.col.f32.{name}.{name}.f32" in src
  assert "const float* __restrict__ data1" in src and f"__float2{'bfloat16' if name == 'bf16' else 'half'}(val" in src

OTHERS: dict[str, Build] = {
  "conv": lambda m: m(2, 3, 12, 12).conv2d(m(8, 3, 3, 3), padding=1),
  "softmax": lambda m: m(8, 100).softmax(1),
  "gather": lambda m: m(10, 16)[m(6, dtype=dtypes.int32).abs() % 10],
  "where": lambda m: (m(10, 16) > 0).where(m(10, 16), 2.0),
  "casts": lambda m: m(10, 16).mul(40).cast(dtypes.float16).cast(dtypes.int8).cast(dtypes.float64),
  "casts_bool": lambda m: m(10, 16).mul(3).cast(dtypes.int64).cast(dtypes.bool).cast(dtypes.float32),
  "double_to_half": lambda m: m(10, 16).cast(dtypes.float64).mul(1000.0).cast(dtypes.float16),
  "bitcast": lambda m: m(10, 16).bitcast(dtypes.int32) ^ 7,
  "bitcast_half": lambda m: m(16, dtype=dtypes.float16).bitcast(dtypes.int16),
  "inf": lambda m: m(4, 8) + math.inf,
  "minus_inf": lambda m: m(4, 8) * -math.inf,
  "nan": lambda m: m(4, 8).maximum(math.nan),
  "half_inf": lambda m: m(4, 8).cast(dtypes.float16) + math.inf,
  "double_minus_inf": lambda m: m(4, 8).cast(dtypes.float64) - math.inf,
}

@needs_nvcc
@pytest.mark.parametrize("name", list(OTHERS))
def test_conv_softmax_indexing_casts_bitcasts_non_finite(name: str) -> None:
  srcs = [src for _, src in check(OTHERS[name], tol=1e-4)]
  expect = {"bitcast": "lt_bitcast<int32x4>", "bitcast_half": "lt_bitcast<int16x8>",
            "inf": "__int_as_float(0x7f800000)", "minus_inf": "-__int_as_float(0x7f800000)",
            "nan": "__int_as_float(0x7fc00000)", "double_minus_inf": "__longlong_as_double(0x7ff0000000000000ll)"}
  if name in expect: assert any(expect[name] in s for s in srcs), srcs

def _index_kernels() -> dict[str, str]:
  """Kernels past 2**31 and 2**32 elements, and the same below (nothing is allocated: they are only rendered)."""
  def big(m: Maker) -> Tensor: return Tensor.empty(2**32 + 8, dtype=dtypes.uint8, device="EMU").flip(0) + 1
  return {"flip_big": kernels(big)[-1][1],
          "flip_small": kernels(lambda m: m(1000, dtype=dtypes.uint8).flip(0) + 1)[-1][1],
          # the partial maxima (a GPU splits a reduce to one output): 149 blocks of 2 outputs, 7206321 steps each
          "max_big": kernels(lambda m: Tensor.arange(2**31 + 10, device="EMU").max())[0][1],
          "flip_big_one_block_each": kernels(big, [])[-1][1]}  # 2**32 + 8 blocks: over x's 2**31 - 1

def test_index_math_is_64_bit_only_past_2_31() -> None:
  srcs = _index_kernels()
  int_index = re.compile(r"\bint (gidx|lidx|ridx|alu)\d")
  assert "long long gidx0 = blockIdx.x;" in srcs["flip_big"] and "4294967303ll" in srcs["flip_big"]
  assert "for (long long ridx" in srcs["max_big"]
  assert not int_index.search(srcs["flip_big"]) and not int_index.search(srcs["max_big"])
  assert "int gidx0 = blockIdx.x;" in srcs["flip_small"] and "long long" not in srcs["flip_small"]
  one_each = srcs["flip_big_one_block_each"]  # the grid's y dim holds the high part of the block number
  assert "long long gidx0 = blockIdx.x; /* 1431655768 */" in one_each and "gidx1 = blockIdx.y; /* 3 */" in one_each

@needs_nvcc
def test_64_bit_index_math_compiles() -> None:
  compile_all(list(_index_kernels().values()))

# ---- pieces of the renderer ----

def test_constants_are_exact() -> None:
  assert R.const(dtypes.float32, 0.1) == "0.10000000149011612f"
  # a negative literal in parentheses: `a - -2.5f` would be written `a--2.5f`, a decrement
  assert R.const(dtypes.float32, -0.0) == "(-0.0f)" and R.const(dtypes.int32, -5) == "(-5)"
  assert R.const(dtypes.float64, 0.1) == "0.1"
  assert R.const(dtypes.int32, -2**31) == "(-2147483647-1)"
  assert R.const(dtypes.int64, -2**63) == "(-9223372036854775807ll-1)"
  assert R.const(dtypes.uint64, 2**64 - 1) == "18446744073709551615ull"
  assert R.const(dtypes.int8, -5) == "((signed char)-5)"
  assert R.const(dtypes.float16, math.inf) == "__float2half(__int_as_float(0x7f800000))"

def test_known_multiple() -> None:
  i = UOp(Ops.SPECIAL, dtypes.int32, (), ("lidx0", 32))
  c = lambda v: UOp.const(dtypes.int32, v)  # noqa: E731
  assert known_multiple(i * 8 + c(12)) == 4 and known_multiple(i * 4 * c(2)) == 8 and known_multiple(i + c(4)) == 1

@needs_nvcc
def test_unaligned_vectors_are_accessed_lane_by_lane() -> None:
  # x[1:65] read as float4 starts 4 bytes past a 16-byte boundary: a vector load there faults on a GPU
  [(_, src)] = check(lambda m: m(65)[1:] * 2, [Opt(OptOps.UPCAST, 0, 4)])
  assert "(const float32x4*)" not in src and "(*((float32x4*)(data0+" in src

def test_limits_are_clear_errors() -> None:
  big = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(local=True), (), ("temp0", 16384))
  store = UOp(Ops.STORE, dtypes.void, (big, UOp.const(dtypes.int32, 0), UOp.const(dtypes.float32, 1)))
  with pytest.raises(ValueError, match="CUDA kernel k: 65536 bytes of shared memory; at most 49152"):
    R.render("k", list(store.toposort))
  with pytest.raises(ValueError, match="grid .* is over the limits"):
    R.render("k", [UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx1", 70000))])
  with pytest.raises(NotImplementedError, match="no launch id 'core'"):
    R.render("k", [UOp(Ops.SPECIAL, dtypes.int32, (), ("core", 4))])

def test_group_past_the_shared_memory_is_an_illegal_opt() -> None:
  # 1024 threads x 16 upcast rows x 4 bytes of partial sums: 64 KiB, over the 48 KiB a block may declare
  (item,) = create_schedule([Tensor.empty(16, 4096, device="EMU").sum(1).lazydata])[0]
  k = Kernel(item.ast, R)
  apply_opt(k, Opt(OptOps.UPCAST, 0, 16))
  with pytest.raises(KernelOptError, match="65536 bytes of shared memory; a block has at most 49152"):
    apply_opt(k, Opt(OptOps.GROUP, 1, 1024))
  apply_opt(k, Opt(OptOps.GROUP, 1, 512))
  assert k.shared_bytes() == 512 * 16 * 4 and "__shared__ alignas(32) float temp" in get_program(k, "k").source

def launch(k: Kernel) -> tuple[int, int]:
  """Blocks in the grid and threads in a block of a kernel's program."""
  dims = get_program(k, to_function_name(k.name)).launch
  return math.prod(dims.global_size), math.prod(dims.local_size)

@pytest.mark.parametrize("build", [lambda m: m(1 << 19).sum(), lambda m: m(16, 1 << 15).max(1),
                                   lambda m: m(1 << 15, 16).sum(0)], ids=["sum", "rows", "columns"])
def test_long_reduces_to_few_outputs_fill_the_multiprocessors(build: Build) -> None:
  # a block reduces each output: one kernel would be 1 or 16 blocks on a GPU of 132 SMs; partial reduces first
  ks = check(build, tol=1e-4)
  assert len(ks) == 2 and launch(ks[0][0])[0] >= R.multiprocessors and launch(ks[0][0])[1] >= 64

@pytest.mark.parametrize("build", [lambda m: m(1 << 17).sum(), lambda m: m(512, 1024).sum(1)], ids=["small", "rows"])
def test_small_reduces_and_reduces_to_many_outputs_are_one_kernel(build: Build) -> None:
  # under 1 MiB a second launch costs what it saves; 512 outputs are blocks enough
  assert len(kernels(build)) == 1

@pytest.mark.parametrize("n", [1000 * 1000, 100003])
def test_elementwise_sizes_without_a_power_of_two_get_full_blocks(n: int) -> None:
  # 1000*1000 in vectors of 4 is 16 x 15625, a prime has no divisor: padded to blocks of 256, the tail masked off
  [(k, src)] = check(lambda m: (m(n) * 2 + 1).exp(), tol=1e-5)
  blocks, threads = launch(k)
  assert threads == 256 and blocks * threads * k.upcast_size() - n < 256 * k.upcast_size()

# ---- the compiler ----

BROKEN = 'extern "C" __global__ void __launch_bounds__(1) broken_kernel(float* data0) { data0[0] = nope; }\n'

def test_kernel_name() -> None:
  assert kernel_name(BROKEN) == "broken_kernel"
  assert kernel_name("int x;") == "<unnamed kernel>"

def test_bad_arch_is_a_value_error() -> None:
  with pytest.raises(ValueError, match="expected e.g. 'sm_80'"): cuda_compiler("80")

COMPILERS = [pytest.param(NVCCCompiler, marks=needs_nvcc),
             pytest.param(NVRTCCompiler, marks=pytest.mark.skipif(load_nvrtc() is None, reason="no libnvrtc"))]

def _disk_entries(db: pathlib.Path) -> int:
  if not db.exists(): return 0
  with sqlite3.connect(db) as conn: return conn.execute(f"SELECT COUNT(*) FROM {DISKCACHE_TABLE}").fetchone()[0]

@pytest.mark.parametrize("compiler", COMPILERS)
def test_compile_error_names_the_kernel_and_caches_nothing(compiler: type, tmp_path: pathlib.Path) -> None:
  c = compiler("sm_80")
  before = dict(_compile_memo.entries)
  with Context(CACHEDB=str(tmp_path / "cache.db")):
    for _ in range(2):  # the second attempt compiles again: nothing was cached, in memory or on disk
      with pytest.raises(CUDACompileError, match=r"(?s)CUDA kernel broken_kernel for sm_80.*nope"):
        c.compile_cached(BROKEN)
  assert _compile_memo.entries == before and _disk_entries(tmp_path / "cache.db") == 0

@pytest.mark.parametrize("compiler", COMPILERS)
def test_cubins_are_cached_on_disk(compiler: type, tmp_path: pathlib.Path) -> None:
  src = BROKEN.replace("nope", "1.5f").replace("broken_kernel", f"k_{tmp_path.name}")  # a source new to the cache
  c = compiler("sm_90")
  with Context(CACHEDB=str(tmp_path / "cache.db")):
    cubin = c.compile_cached(src)
    _compile_memo.clear()  # as in a new process
    stats = dict(compile_stats)
    assert c.compile_cached(src) == cubin and compile_stats["disk"] == stats["disk"] + 1
  assert cubin[:4] == b"\x7fELF" and _disk_entries(tmp_path / "cache.db") == 1

@pytest.mark.parametrize("compiler", COMPILERS)
def test_compilers_make_cubins_and_key_the_arch(compiler: type) -> None:
  [(_, src)] = kernels(lambda m: m(64) + 1)
  c80, c90 = compiler("sm_80"), compiler("sm_90")
  assert c80.cache_key != c90.cache_key and "sm_80" in c80.cache_key
  assert c80.compile(src)[:4] == b"\x7fELF"

@pytest.mark.parametrize("compiler", COMPILERS)
def test_compilers_take_non_finite_constants_and_bit_casts(compiler: type) -> None:
  # NVRTC rejects GNU builtins that nvcc takes (__builtin_inff, __builtin_memcpy): every kernel here once used them
  scatter_max = lambda m: m(8).scatter_reduce(0, Tensor([1, 3, 1], device="EMU"), m(3), "amax")  # noqa: E731
  builds = [OTHERS[name] for name in ("inf", "minus_inf", "nan", "half_inf", "double_minus_inf", "bitcast_half")]
  c = compiler("sm_90")
  for build in [*builds, scatter_max]:
    for _, src in kernels(build): assert c.compile(src)[:4] == b"\x7fELF"

def test_nvrtc_is_looked_for_in_the_cuda_12_and_13_wheels(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: pathlib.Path) -> None:
  libs = [tmp_path / "nvidia" / "cuda_nvrtc" / "lib" / "libnvrtc.so.12", tmp_path / "nvidia" / "cu13" / "lib" /
          "libnvrtc.so.13", tmp_path / "nvidia" / "cu13" / "lib" / "libnvrtc-builtins.so.13.0"]
  for lib in libs:
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.touch()
  monkeypatch.syspath_prepend(str(tmp_path))
  found = _nvrtc_candidates()
  assert str(libs[0]) in found and str(libs[1]) in found and str(libs[2]) not in found

# ---- the device ----

@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here")
def test_cuda_device_without_pycuda_is_one_clear_error() -> None:
  with pytest.raises(CUDAUnavailableError, match=r"CUDA: pycuda is not installed; install it with pip install -e"):
    Device["CUDA"]
  with pytest.raises(CUDAUnavailableError, match="pycuda is not installed"): Device["CUDA:1"]

@pytest.mark.parametrize("name,err", [("CUDA:x", "the part after ':' must be a number"), ("CUDA2", "unknown device"),
                                      ("GPU", "known: CPU, CUDA, CUDACPU, EMU")])
def test_unknown_device_names_are_value_errors(name: str, err: str) -> None:
  with pytest.raises(ValueError, match=err): Device[name]

def test_gpu_index_past_the_gpus_present() -> None:
  assert gpu_index("CUDA", 1) == 0 and gpu_index("CUDA:3", 4) == 3
  with pytest.raises(IndexError, match=r"device CUDA:2: this machine has 2 GPUs \(CUDA to CUDA:1\)"):
    gpu_index("CUDA:2", 2)
  with pytest.raises(IndexError, match=r"device CUDA:1: this machine has 1 GPU \(CUDA\)"): gpu_index("CUDA:1", 1)
