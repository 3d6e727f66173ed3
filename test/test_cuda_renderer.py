"""The CUDA renderer through the real pipeline (schedule -> Kernel + opts -> lower -> linearize -> render), every kernel
compiled by nvcc for sm_80 and sm_90; the compiler module; the CUDA device's error without pycuda. (The values these
kernels compute are checked by running the same source on DEV=CUDACPU.)"""
from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Context, Tensor, dtypes
from lazytensor.codegen.heuristic import hand_coded_optimizations
from lazytensor.codegen.kernel import Kernel, Opt, OptOps
from lazytensor.codegen.linearize import linearize
from lazytensor.codegen.lowerer import lower_kernel
from lazytensor.codegen.renderer.cstyle import known_multiple
from lazytensor.codegen.renderer.cuda import CUDARenderer
from lazytensor.device import Device, _compile_memo
from lazytensor.dtype import DType
from lazytensor.engine.schedule import create_schedule
from lazytensor.helpers import to_function_name
from lazytensor.runtime.cuda_compiler import (
  CUDACompileError,
  NVCCCompiler,
  NVRTCCompiler,
  cuda_compiler,
  find_nvcc,
  kernel_name,
  load_nvrtc,
)
from lazytensor.uop.ops import Ops, UOp

R = CUDARenderer()
ARCHS = ("sm_80", "sm_90")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
rng = np.random.default_rng(0)

# ---- rendering through the pipeline ----

def kernels(out: Tensor, opts: list[Opt] | None = None) -> list[tuple[Kernel, str]]:
  """Each kernel of out's schedule (made on EMU, a GPU-like device) with the CUDA renderer: optimized by the GPU
  heuristics, or by `opts` for the last kernel. Returns the kernels with their sources."""
  items, _ = create_schedule([out.lazydata])
  asts = [it.ast for it in items if it.ast.op is Ops.SINK]
  out_ks = []
  for i, ast in enumerate(asts):
    k = Kernel(ast, R)
    if opts is not None and i == len(asts) - 1:
      for o in opts: k.apply_opt(o)
    else: k = hand_coded_optimizations(k)
    name = to_function_name(k.name)
    out_ks.append((k, R.render(name, linearize(lower_kernel(k)))))
  return out_ks

def compile_all(srcs: list[str]) -> None:
  """Every source through nvcc for every architecture; a failure names the kernel (CUDACompileError)."""
  for arch in ARCHS:
    compiler = NVCCCompiler(arch)
    for src in srcs: assert compiler.compile_cached(src)[:4] == b"\x7fELF"

def t(*shape: int, dtype: DType = dtypes.float32) -> Tensor:
  if dtype.is_bool: return Tensor(rng.random(shape) < 0.5, device="EMU")
  if dtype.is_int:
    return Tensor(rng.integers(0 if dtype.is_unsigned else -50, 50, shape).astype(dtype.np), device="EMU")
  return Tensor(rng.standard_normal(shape).astype(dtype.np), device="EMU")

ALL = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
       dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64]

def _chain(dt: DType) -> Tensor:
  a, b = t(16, 64, dtype=dt), t(16, 64, dtype=dt)
  if dt.is_bool: return (a & b) | (a ^ b) != (a < b)
  if dt.is_int: return ((a * b + a) // (b.abs() + 1) - (a % 3)).maximum(b) << 1 if not dt.is_unsigned else (
    (a * b + a) // (b + 1) - (a % 3)).maximum(b) >> 1
  return (a * b + a / (b.abs() + 1)).exp().log().sqrt().sin().maximum(b).reciprocal().trunc() + (-a)

@needs_nvcc
@pytest.mark.parametrize("dt", ALL, ids=str)
def test_elementwise_chain_every_dtype(dt: DType) -> None:
  ks = kernels(_chain(dt))
  compile_all([src for _, src in ks])
  if dt == dtypes.float16: assert "#include <cuda_fp16.h>" in ks[-1][1] and "__half2float" in ks[-1][1]
  else: assert "cuda_fp16.h" not in ks[-1][1]

REDUCES: dict[str, tuple[Callable[[], Tensor], list[Opt]]] = {
  "sum_group": (lambda: t(8, 1024).sum(1), [Opt(OptOps.UNROLL, 1, 4), Opt(OptOps.GROUP, 1, 64)]),
  "sum_grouptop": (lambda: t(8, 1024).sum(1), [Opt(OptOps.GROUPTOP, 1, 128), Opt(OptOps.LOCAL, 0, 2)]),
  "max_group_upcast": (lambda: t(64, 256).max(1), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.GROUP, 1, 32)]),
  "column_sum": (lambda: t(512, 64).sum(0), [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 16),
                                             Opt(OptOps.GROUPTOP, 2, 8)]),
  "full_sum_half": (lambda: t(1 << 14, dtype=dtypes.float16).sum(), [Opt(OptOps.UNROLL, 0, 4),
                                                                    Opt(OptOps.GROUP, 0, 256)]),
}

@needs_nvcc
@pytest.mark.parametrize("name", list(REDUCES))
def test_reductions_through_shared_memory(name: str) -> None:
  fn, opts = REDUCES[name]
  ks = kernels(fn(), opts)
  src = ks[-1][1]
  assert "__shared__" in src and "__syncthreads();" in src and "threadIdx.x" in src
  compile_all([s for _, s in ks])

@needs_nvcc
def test_matmul_with_locals_and_upcasts_uses_vector_loads() -> None:
  opts = [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.LOCAL, 0, 8)]
  [(k, src)] = kernels(t(128, 64) @ t(64, 128), opts)
  assert "__launch_bounds__(128)" in src and "threadIdx.y" in src and "blockIdx.x" in src
  assert "*((const float32x4*)(data2+" in src and "*((float32x4*)(data0+" in src  # B rows and C rows as float4
  compile_all([src])

@needs_nvcc
def test_half_matmul_on_tensor_cores() -> None:
  [(k, src)] = kernels(t(64, 32, dtype=dtypes.float16) @ t(32, 48, dtype=dtypes.float16))
  assert k.tensor_core is not None  # the heuristics pick TC for a half matmul
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src and "lt_mma_m16n8k16_f16_f32(" in src
  assert src.index("#ifndef LT_CUDACPU") < src.index("asm volatile") < src.index("#endif")
  compile_all([src])

def test_tf32_tensor_cores_only_with_the_knob() -> None:
  with Context(TF32=0): assert [tc.name for tc in R.tensor_cores] == ["m16n8k16_f16_f32"]
  with Context(TF32=1): assert [tc.name for tc in R.tensor_cores] == ["m16n8k16_f16_f32", "m16n8k8_tf32_f32"]

@needs_nvcc
def test_tf32_matmul_on_tensor_cores_with_the_knob() -> None:
  with Context(TF32=1): [(k, src)] = kernels(t(64, 32) @ t(32, 48))
  assert k.tensor_core is not None and "cvt.rna.tf32.f32" in src and ".m16n8k8.row.col.f32.tf32.tf32.f32" in src
  compile_all([src])

@needs_nvcc
def test_bfloat16_mma_wrapper_compiles() -> None:
  # lazytensor has no bfloat16 dtype yet: the program is built by hand, with a DType of that name
  bf16 = DType("bfloat16", 2, "f", "e")
  a_buf, b_buf, out = (UOp(Ops.DEFINE_GLOBAL, d.ptr(), (), i) for i, d in ((1, bf16), (2, bf16), (0, dtypes.float32)))
  lane = UOp(Ops.SPECIAL, dtypes.int32, (), ("lidx0", 32))
  def frag(buf: UOp, n: int) -> UOp:
    return UOp(Ops.VECTORIZE, bf16.vec(n), tuple(UOp(Ops.LOAD, bf16, (buf, lane * n + i)) for i in range(n)))
  mma = UOp(Ops.WMMA, dtypes.float32.vec(4), (frag(a_buf, 8), frag(b_buf, 4), UOp.const(dtypes.float32.vec(4), 0.0)),
            "m16n8k16_bf16_f32")
  src = R.render("mma", list(UOp(Ops.STORE, dtypes.void, (out, lane * 4, mma)).toposort))
  assert "#include <cuda_bf16.h>" in src and "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in src
  compile_all([src])

@needs_nvcc
def test_conv_and_softmax() -> None:
  ks = kernels(t(2, 3, 12, 12).conv2d(t(8, 3, 3, 3), padding=1)) + kernels(t(8, 100).softmax(1))
  compile_all([src for _, src in ks])

@needs_nvcc
def test_indexing_where_casts_and_bitcasts() -> None:
  x, idx = t(10, 16), Tensor(rng.integers(0, 10, (6,)).astype(np.int32), device="EMU")
  outs = [x[idx], (x > 0).where(x, x * 2), x.cast(dtypes.float16).cast(dtypes.int8).cast(dtypes.float64),
          x.bitcast(dtypes.int32) ^ 7, x.cast(dtypes.uint64).cast(dtypes.bool).cast(dtypes.float32),
          t(16, dtype=dtypes.float16).bitcast(dtypes.int16), x.cast(dtypes.float64).cast(dtypes.float16)]
  srcs = [src for o in outs for _, src in kernels(o)]
  assert any("lt_bitcast<int32x4>" in s for s in srcs) and any("lt_bitcast<int16x4>" in s for s in srcs)
  compile_all(srcs)

@needs_nvcc
def test_non_finite_constants() -> None:
  x = t(4, 8)
  srcs = [src for o in (x + math.inf, x * -math.inf, x.maximum(math.nan), x.cast(dtypes.float16) + math.inf,
                        x.cast(dtypes.float64) - math.inf) for _, src in kernels(o)]
  assert any("-__builtin_inff()" in s for s in srcs) and any("__builtin_inf()" in s for s in srcs)
  assert any('__builtin_nanf("")' in s for s in srcs)
  compile_all(srcs)

# ---- pieces of the renderer ----

def test_constants_are_exact() -> None:
  assert R.const(dtypes.float32, 0.1) == "0.10000000149011612f"
  assert R.const(dtypes.float32, -0.0) == "-0.0f"
  assert R.const(dtypes.float64, 0.1) == "0.1"
  assert R.const(dtypes.int32, -2**31) == "(-2147483647-1)"
  assert R.const(dtypes.int64, -2**63) == "(-9223372036854775807ll-1)"
  assert R.const(dtypes.uint64, 2**64 - 1) == "18446744073709551615ull"
  assert R.const(dtypes.int8, -5) == "((signed char)-5)"
  assert R.const(dtypes.float16, math.inf) == "__float2half(__builtin_inff())"

def test_known_multiple() -> None:
  i = UOp(Ops.SPECIAL, dtypes.int32, (), ("lidx0", 32))
  c = lambda v: UOp.const(dtypes.int32, v)  # noqa: E731
  assert known_multiple(i * 8 + c(12)) == 4 and known_multiple(i * 4 * c(2)) == 8 and known_multiple(i + c(4)) == 1

def test_unaligned_vectors_are_accessed_lane_by_lane() -> None:
  # x[1:65] read as float4 starts 4 bytes past a 16-byte boundary: a vector load there faults on a GPU
  [(_, src)] = kernels(t(65)[1:] * 2, [Opt(OptOps.UPCAST, 0, 4)])
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

# ---- the compiler ----

BROKEN = 'extern "C" __global__ void __launch_bounds__(1) broken_kernel(float* data0) { data0[0] = nope; }\n'

def test_kernel_name() -> None:
  assert kernel_name(BROKEN) == "broken_kernel"
  assert kernel_name("int x;") == "<unnamed kernel>"

def test_bad_arch_is_a_value_error() -> None:
  with pytest.raises(ValueError, match="expected e.g. 'sm_80'"): cuda_compiler("80")

COMPILERS = [pytest.param(NVCCCompiler, marks=needs_nvcc),
             pytest.param(NVRTCCompiler, marks=pytest.mark.skipif(load_nvrtc() is None, reason="no libnvrtc"))]

@pytest.mark.parametrize("compiler", COMPILERS)
def test_compile_error_names_the_kernel_and_caches_nothing(compiler: type) -> None:
  c = compiler("sm_80")
  before = dict(_compile_memo)
  for _ in range(2):  # the second attempt compiles again: nothing was cached
    with pytest.raises(CUDACompileError, match=r"(?s)CUDA kernel broken_kernel for sm_80.*nope"):
      c.compile_cached(BROKEN)
  assert _compile_memo == before

@pytest.mark.parametrize("compiler", COMPILERS)
def test_compilers_make_cubins_and_key_the_arch(compiler: type) -> None:
  [(_, src)] = kernels(t(64) + 1)
  c80, c90 = compiler("sm_80"), compiler("sm_90")
  assert c80.cache_key != c90.cache_key and "sm_80" in c80.cache_key
  assert c80.compile(src)[:4] == b"\x7fELF"

# ---- the device ----

@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="pycuda is installed here")
def test_cuda_device_without_pycuda_is_one_clear_error() -> None:
  with pytest.raises(RuntimeError, match=r"CUDA: pycuda is not installed; install it with pip install -e"):
    Device["CUDA"]
  with pytest.raises(RuntimeError, match="pycuda is not installed"): Device["CUDA:1"]
