"""Linear program -> CUDA C: one translation unit per kernel, compiled as is by nvcc or NVRTC (and by g++ for CUDACPU).

Everything the source takes from CUDA, so that a CPU prelude (runtime/ops_cudacpu.py) can provide exactly this:

  kernel        extern "C" __global__ void __launch_bounds__(T) name(T0* __restrict__ data0,
                const T1* __restrict__ data1, ...): buffers in argument order, `const` when the kernel never stores
                to one, `void* dataN` for a buffer it does not touch; T = threads per block (the product of the lidx
                sizes, 1 without any)
  launch ids    blockIdx.x/.y/.z (gidx0/1/2), threadIdx.x/.y/.z (lidx0/1/2), read once each into an int
  shared        __shared__ alignas(16) T name[size]; at the top of the body; __syncthreads(); as the barrier
  helpers       __device__ __forceinline__ before the source's own helper functions (lt_bitcast, lt_atomic_max_*, mma
                wrappers)
  types         bool, signed char, unsigned char, short, unsigned short, int, unsigned int, long long, unsigned long
                long, float, double; __half (#include <cuda_fp16.h>, only when the kernel uses float16) and
                __nv_bfloat16 (#include <cuda_bf16.h>, only when it uses bfloat16); vectors are the source's own
                structs `struct alignas(N) float32x4 { float v[4]; };` built with `float32x4{a, b, c, d}`, read with
                `x.v[i]`, and loaded or stored through a cast pointer `*((const float32x4*)(data1+i))` when aligned
  half/bf16     only stored: every op converts to float and back, with __half2float, __float2half (round to nearest
                even), __bfloat162float, __float2bfloat16; a double converts through float (the C cast
                `(float)(x)`), ints through a C cast to float
  math          exp2f log2f sinf cosf sqrtf truncf fmodf and the double versions exp2 log2 sin cos sqrt trunc fmod
  bit casts     __int_as_float(0x7f800000) and __longlong_as_double(0x7ff0000000000000ll) for non-finite constants
                (inf, nan 0x7fc00000 / 0x7ff8000000000000ll, -inf as a negation); memcpy in
                `template <class T, class F> __device__ __forceinline__ T lt_bitcast(F x)` (with a BITCAST or an atomic
                float max). No GNU builtins (__builtin_inff, __builtin_memcpy): nvcc takes them, NVRTC does not
  atomics       a scatter's updates (a STORE whose arg is ADD or MAX; renderer.NVIDIA_ATOMICS lists the dtypes), return
                values unused: `atomicAdd(p, v);` for float, double, __half, __nv_bfloat16, int, unsigned int,
                unsigned long long, and for long long as
                `atomicAdd((unsigned long long*)(p), (unsigned long long)(v));`;
                `atomicMax(p, v);` for int, unsigned int, long long, unsigned long long; a float max calls the source's
                own `__device__ __forceinline__ void lt_atomic_max_<dtype>(T* p, T v)` (float16, bfloat16, float32,
                float64), a loop of `atomicCAS(unsigned short* / unsigned int* / unsigned long long*, old, new)` on the
                bits (read with `*p` first, converted with lt_bitcast). sm_80 and later, as the tensor cores
  tensor cores  __device__ __forceinline__ void lt_mma_m16n8k16_f16_f32(float* d, const __half* a, const __half* b,
                const float* c), lt_mma_m16n8k16_bf16_f32(float* d, const __nv_bfloat16* a, const __nv_bfloat16* b,
                const float* c), lt_mma_m16n8k8_tf32_f32(float* d, const float* a, const float* b, const float* c):
                d = a @ b + c for the warp, each thread passing its fragments in PTX's mma.sync layout (m16n8k16: a
                8, b 4, c and d 4 elements; m16n8k8: a 4, b 2, c and d 4). Called as `lt_mma_...(out.v, a.v, b.v,
                c.v);` on vector structs. Each is defined inside `#ifndef LT_CUDACPU ... #endif` with inline PTX
                (`asm volatile("mma.sync.aligned...")`, tf32 inputs rounded with `cvt.rna.tf32.f32`), so that the
                CPU prelude can define the same functions with a real exchange between the 32 lanes of a warp.
  ldmatrix      __device__ __forceinline__ void lt_ldmatrix_x4(void* d, const void* p), lt_ldmatrix_x2_trans, ... (x1,
                x2, x4, each with and without _trans): a warp's ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16, p
                this lane's row in shared memory (from __cvta_generic_to_shared), d its n 32-bit registers. Called as
                `lt_ldmatrix_x4(frag.v, tc_a+i);`, defined inside `#ifndef LT_CUDACPU ... #endif` as the mma wrappers.
  cp.async      (sm_80 on) __device__ __forceinline__ void lt_cp_async_16(void* dst, const void* src, unsigned n): PTX's
                cp.async.cg.shared.global of 16 bytes from global src to shared dst, the last 16 - n of them zeros (n
                16 or 0), called as `lt_cp_async_16(tc_a+i, (g?data1+j:data1), (g)?16:0);`; and
                lt_cp_async_wait_all(), cp.async.wait_all (the thread's copies are done), written before the
                __syncthreads() that makes them the block's. Defined inside `#ifndef LT_CUDACPU ... #endif`.

Signed integer arithmetic is C's: the GPU wraps on overflow; a C++ compiler must be told to (g++ -fwrapv). Vector
loads read through a struct pointer cast from the element pointer (g++: -fno-strict-aliasing).
"""
from __future__ import annotations

import math

from lazytensor.dtype import DType, dtypes
from lazytensor.helpers import TF32, prod
from lazytensor.renderer import (
  ASYNC_COPY,
  NVIDIA_ATOMICS,
  TC_NV_BF16,
  TC_NV_F16,
  TC_NV_TF32,
  VAR_SLOT,
  TensorCore,
  launch_dims,
)
from lazytensor.renderer.cstyle import CStyleRenderer, scalar_args
from lazytensor.uop.ops import Ops, UOp

_IDS = {"gidx": "blockIdx", "lidx": "threadIdx"}

def _mma(name: str, ptx: str, in_type: str, a_regs: int, b_regs: int, convert: str = "") -> str:
  """The wrapper of one mma.sync shape: fragments in as arrays, reinterpreted as the 32-bit registers PTX takes."""
  d = ", ".join(f'"=f"(d[{i}])' for i in range(4))
  c = ", ".join(f'"f"(c[{i}])' for i in range(4))
  regs = ", ".join([f'"r"(A[{i}])' for i in range(a_regs)] + [f'"r"(B[{i}])' for i in range(b_regs)])
  n = 4 + a_regs + b_regs
  slots = ("{" + ", ".join(f"%{i}" for i in range(4)) + "}, {" + ", ".join(f"%{i}" for i in range(4, 4 + a_regs)) +
           "}, {" + ", ".join(f"%{i}" for i in range(4 + a_regs, n)) + "}, {" +
           ", ".join(f"%{i}" for i in range(n, n + 4)) + "}")
  if convert:  # tf32: round each float to nearest into a 32-bit register, as cuBLAS's TF32 mode does
    regs_in = (f"  unsigned A[{a_regs}], B[{b_regs}];\n"
               f"  for (int i = 0; i < {a_regs}; i++) asm(\"{convert} %0, %1;\" : \"=r\"(A[i]) : \"f\"(a[i]));\n"
               f"  for (int i = 0; i < {b_regs}; i++) asm(\"{convert} %0, %1;\" : \"=r\"(B[i]) : \"f\"(b[i]));\n")
  else:
    regs_in = ("  const unsigned* A = reinterpret_cast<const unsigned*>(a);\n"
               "  const unsigned* B = reinterpret_cast<const unsigned*>(b);\n")
  return (f"#ifndef LT_CUDACPU\n__device__ __forceinline__ void {name}(float* d, const {in_type}* a, "
          f"const {in_type}* b, const float* c) {{\n{regs_in}"
          f"  asm volatile(\"{ptx} {slots};\"\n    : {d}\n    : {regs}, {c});\n}}\n#endif")

# per input dtype and registers of A a lane holds: the wrapper's name and definition
_MMA: dict[tuple[str, int], tuple[str, str]] = {
  ("float16", 8): ("lt_mma_m16n8k16_f16_f32", _mma(
    "lt_mma_m16n8k16_f16_f32", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "__half", 4, 2)),
  ("bfloat16", 8): ("lt_mma_m16n8k16_bf16_f32", _mma(
    "lt_mma_m16n8k16_bf16_f32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "__nv_bfloat16", 4, 2)),
  ("float32", 4): ("lt_mma_m16n8k8_tf32_f32", _mma(
    "lt_mma_m16n8k8_tf32_f32", "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "float", 4, 2,
    convert="cvt.rna.tf32.f32")),
}

def _ldmatrix(u: UOp) -> tuple[str, str]: return ldmatrix_wrapper(*u.arg[1:])

def ldmatrix_wrapper(n: int, trans: bool) -> tuple[str, str]:
  """The name and definition of the wrapper of one ldmatrix shape (a LOAD whose arg is (MATRIX_LOAD, n, trans)): this
  lane's row address in, its n 32-bit registers (two 16-bit elements each) out."""
  name = f"lt_ldmatrix_x{n}{'_trans' if trans else ''}"
  regs, slots = ", ".join(f'"=r"(r[{i}])' for i in range(n)), ", ".join(f"%{i}" for i in range(n))
  return name, (f"#ifndef LT_CUDACPU\n__device__ __forceinline__ void {name}(void* d, const void* p) {{\n"
                "  unsigned* r = reinterpret_cast<unsigned*>(d);\n"
                "  unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(p));\n"
                f"  asm volatile(\"ldmatrix.sync.aligned.m8n8.x{n}{'.trans' if trans else ''}.shared.b16 {{{slots}}}, "
                f"[%{n}];\"\n    : {regs}\n    : \"r\"(at) : \"memory\");\n}}\n#endif")

# the asynchronous copy (a STORE of arg ASYNC_COPY) and the wait for it (a BARRIER of that arg); cg: through L2 only,
# as a tile read once per block wants
_CP_ASYNC = """#ifndef LT_CUDACPU
__device__ __forceinline__ void lt_cp_async_16(void* dst, const void* src, unsigned n) {
  unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(at), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void lt_cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
#endif"""

def _mma_of(u: UOp) -> tuple[str, str]:
  a = u.src[0].dtype
  if (hit := _MMA.get((a.scalar().name, a.count))) is None or u.dtype != dtypes.float32.vec(4):
    raise NotImplementedError(f"CUDA: no tensor core {u.arg!r} taking {a} to {u.dtype}; have {sorted(_MMA)}")
  return hit

# inf and nan as CUDA's bit casts of their bits (the quiet nan of C's NAN): NVRTC knows none of the GNU builtins
# (__builtin_inff, __builtin_nanf, __builtin_memcpy) that nvcc accepts; the CUDACPU prelude defines these casts too
_NON_FINITE = {dtypes.float32: ("__int_as_float", "0x7f800000", "0x7fc00000"),
               dtypes.float64: ("__longlong_as_double", "0x7ff0000000000000ll", "0x7ff8000000000000ll")}

# the unsigned type atomicCAS swaps for a float of each size
_CAS_TYPES = {2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}

def _float_maxes(uops: list[UOp]) -> list[DType]:
  """The float dtypes of the program's atomic MAX stores (each needs its compare-and-swap helper)."""
  return list(dict.fromkeys(u.src[2].dtype for u in uops if u.op is Ops.STORE and u.arg is Ops.MAX and
                            u.src[2].dtype.is_float))

class CUDARenderer(CStyleRenderer):
  device = "CUDA"
  has_local = True
  has_shared = True
  has_threads = False
  global_max = (2**31 - 1, 65535, 65535)  # blocks per grid dimension
  local_max = (1024, 1024, 64)            # threads per block dimension
  threads_max = 1024                      # threads per block
  shared_max = 48 * 1024                  # static __shared__ per block (more needs an opt-in per kernel)
  upcast_max = 128                        # of 255 registers a thread has
  multiprocessors = 132                   # an H100 / H200 (SXM); a CUDA device sets its GPU's own count
  vector_widths = (2, 4, 8)               # 8 halves are 16 bytes; nvcc splits a wider access (8 floats) in 16s
  kernel_prefix = 'extern "C" __global__'
  buffer_qualifier = " __restrict__"
  shared_prefix = "__shared__ "
  barrier = "__syncthreads();"
  function_prefix = "__device__ __forceinline__"
  storage_floats = {"float16": ("__half", "__half2float", "__float2half"),
                    "bfloat16": ("__nv_bfloat16", "__bfloat162float", "__float2bfloat16")}
  atomics = NVIDIA_ATOMICS

  def __init__(self, arch: int = 80) -> None:
    self.arch = arch  # the compute capability it writes for, major * 10 + minor (sm_80: 80)

  @property
  def async_copy(self) -> bool:  # type: ignore[override]
    """cp.async: sm_80 (Ampere) and later; older GPUs stage tiles through registers."""
    return self.arch >= 80

  @property
  def cache_key(self) -> str: return f"CUDARenderer sm_{self.arch}"

  @property
  def tensor_cores(self) -> tuple[TensorCore, ...]:
    """mma.sync f16 -> f32 and bf16 -> f32, and tf32 for float32 matmuls when the TF32 knob allows it (read per use,
    so that `with Context(TF32=1)` takes effect on a device that exists)."""
    return (TC_NV_F16, TC_NV_BF16, TC_NV_TF32) if TF32 else (TC_NV_F16, TC_NV_BF16)

  def special(self, name: str) -> str:
    if name[:4] not in _IDS or name[4:] not in ("0", "1", "2"):
      raise NotImplementedError(f"CUDA: no launch id {name!r}; expected gidx0-2 or lidx0-2")
    return f"{_IDS[name[:4]]}.{'xyz'[int(name[4:])]}"

  def render_wmma(self, u: UOp, out: str, srcs: list[str]) -> str:
    return f"{_mma_of(u)[0]}({out}.v, {srcs[0]}.v, {srcs[1]}.v, {srcs[2]}.v);"

  def render_matrix_load(self, u: UOp, out: str, ptr: str) -> str: return f"{_ldmatrix(u)[0]}({out}.v, {ptr});"

  def async_copy_stmt(self, dst: str, src: str, nbytes: int, gate: str) -> str:
    if nbytes != 16: raise NotImplementedError(f"CUDA: an asynchronous copy of {nbytes} bytes; cp.async.cg copies 16")
    return f"lt_cp_async_16({dst}, {src}, {'16' if gate == 'true' else f'({gate})?16:0'});"

  def async_wait(self) -> str: return "lt_cp_async_wait_all();"

  def non_finite(self, dt: DType, v: float) -> str:
    cast, inf, nan = _NON_FINITE[dt]
    if math.isnan(v): return f"{cast}({nan})"
    return f"{'-' if v < 0 else ''}{cast}({inf})"

  def atomic(self, op: Ops, dt: DType, ptr: str, value: str) -> str:
    if (op, dt) not in self.atomics: return super().atomic(op, dt, ptr, value)
    if op is Ops.MAX and dt.is_float: return f"lt_atomic_max_{dt.name}({ptr}, {value});"
    if dt == dtypes.int64 and op is Ops.ADD:  # no signed 64-bit atomicAdd; the unsigned one adds the same bits
      return f"atomicAdd((unsigned long long*)({ptr}), (unsigned long long)({value}));"
    return f"atomic{'Add' if op is Ops.ADD else 'Max'}({ptr}, {value});"

  def helpers(self, uops: list[UOp]) -> list[str]:
    out, maxes = super().helpers(uops), _float_maxes(uops)
    if maxes and not any(u.op is Ops.BITCAST for u in uops): out.append(self.bitcast_helper())
    return out + [self._atomic_max(dt) for dt in maxes]

  def _atomic_max(self, dt: DType) -> str:
    """*p = max(*p, v) for a float type, as codegen/alu.py defines MAX (NaN in either gives NaN): a compare-and-swap of
    its bits, retried while another thread changed them in between; nothing is written where *p already holds the
    max."""
    t, bits = self.scalar_type(dt), _CAS_TYPES[dt.itemsize]
    cur, v = self.to_compute(dt, "cur"), self.to_compute(dt, "v")
    return (f"{self.function_prefix} void lt_atomic_max_{dt.name}({t}* p, {t} v) {{\n"
            f"  {bits}* at = ({bits}*)p;\n  {bits} old = *at, seen;\n  do {{\n"
            f"    {t} cur = lt_bitcast<{t}>(old);\n    if (!({cur} < {v} || {v} != {v})) return;\n"
            f"    seen = old;\n    old = atomicCAS(at, seen, lt_bitcast<{bits}>(v));\n  }} while (old != seen);\n}}")

  def render(self, name: str, uops: list[UOp]) -> str:
    self._check_limits(name, uops)
    return super().render(name, uops)

  def render_kernel(self, name: str, params: list[str], body: list[str], uops: list[UOp]) -> str:
    used = {dt.scalar().name for u in uops for dt in (u.dtype, *(s.dtype for s in u.src))}
    includes = [f"#include <{h}>" for dt, h in (("float16", "cuda_fp16.h"), ("bfloat16", "cuda_bf16.h")) if dt in used]
    mmas = list(dict.fromkeys([_ldmatrix(u)[1] for u in uops if u.op is Ops.LOAD and u.arg is not None] +
                              [_mma_of(u)[1] for u in uops if u.op is Ops.WMMA] +
                              [_CP_ASYNC for u in uops if u.op is Ops.STORE and u.arg == ASYNC_COPY]))
    threads = prod(launch_dims(uops).local_size)
    head = f"{self.kernel_prefix} void __launch_bounds__({threads}) {name}({', '.join(params)}) {{"
    return "\n".join([*includes, *self.helpers(uops), *mmas, head, *body, "}", *self._vars_entry(name, params, uops),
                      ""])

  def _vars_entry(self, name: str, params: list[str], uops: list[UOp]) -> list[str]:
    """For CUDACPU, whose launcher passes pointers only: `name`_vars, taking the scalar arguments in one block of
    memory after the buffers (VAR_SLOT bytes each) and calling the kernel with them. nvcc never sees it."""
    if not (scalars := scalar_args(uops)): return []
    bufs = params[:len(params) - len(scalars)]
    args = [p.rsplit(" ", 1)[1] for p in bufs] + \
      [f"*(const {self.scalar_type(u.dtype)}*)(vars + {u.arg * VAR_SLOT})" for u in scalars]
    return ["#ifdef LT_CUDACPU", f'extern "C" void {name}_vars({", ".join([*bufs, "const char* vars"])}) {{',
            f"  {name}({', '.join(args)});", "}", "#endif"]

  def _check_limits(self, name: str, uops: list[UOp]) -> None:
    launch = launch_dims(uops)
    grid, block = launch.global_size, launch.local_size
    for what, dims, most in (("grid", grid, self.global_max), ("block", block, self.local_max)):
      if any(d > m for d, m in zip(dims, most or ())):
        raise ValueError(f"CUDA kernel {name}: {what} {dims} is over the limits {most}")
    if prod(block) > self.threads_max:
      raise ValueError(f"CUDA kernel {name}: {prod(block)} threads per block; at most {self.threads_max}")
    shared = sum(u.arg[1] * u.dtype.itemsize for u in uops if u.op is Ops.DEFINE_LOCAL)
    if shared > self.shared_max:
      raise ValueError(f"CUDA kernel {name}: {shared} bytes of shared memory; at most {self.shared_max}")
