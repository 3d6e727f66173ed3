"""Tensor-core kernels with shared-memory staging: several warps a block, several mma tiles a warp, K in blocks copied
into padded shared tiles (asynchronously, cp.async double buffering, where the operand is 16-bit and needs no cast).
Values against numpy on EMU and CUDACPU (with NVCC_CHECK where nvcc is installed), the opts the heuristics choose,
BEAM's reach, and EMU's traffic counters against the goal: an fp16 matmul 512^3 loads at most 2x what an ideal kernel
with 128x128 output tiles loads (M*N*K/32 bytes: 4 MiB), with no shared-memory bank conflicts.

EMU runs every lane in numpy: the sizes are small except for the one counter check at 512^3.
"""
from __future__ import annotations

import re
import shutil
from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Context, Tensor, dtypes
from lazytensor.codegen.program import get_program
from lazytensor.dtype import DType, from_storage
from lazytensor.engine.realize import compile_kernel, run_schedule
from lazytensor.helpers import prod
from lazytensor.opt.heuristic import TC_K_BYTES, TC_TILES, TC_WARPS, hand_coded_optimizations
from lazytensor.opt.kernel import AxisKind, Kernel, KernelOptError, Opt, OptOps, bank_replays
from lazytensor.opt.rules import apply_opt
from lazytensor.opt.search_actions import actions
from lazytensor.renderer.cuda import CUDARenderer, ldmatrix_wrapper
from lazytensor.runtime.cuda_compiler import find_nvcc
from lazytensor.runtime.device import Device
from lazytensor.runtime.ops_cpu import CPUMemory
from lazytensor.runtime.ops_emu import EmuError, EmuProgram
from lazytensor.schedule.scheduler import ScheduleItem, create_schedule

rng = np.random.default_rng(27)
F16, BF16 = dtypes.float16, dtypes.bfloat16
needs_gpp = pytest.mark.skipif(shutil.which("g++") is None, reason="CUDACPU needs g++")

def _operands(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
  return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)

def _matmul_item(device: str, a: np.ndarray, b: np.ndarray, dt: DType, cast_in_kernel: bool) -> ScheduleItem:
  """The matmul's kernel, its inputs realized: float32 buffers cast to dt in the kernel, or dt buffers."""
  with Context(DEV=device):
    x, y = Tensor(a), Tensor(b)
    if not cast_in_kernel: x, y = x.cast(dt), y.cast(dt)
    x, y = x.realize(), y.realize()
    items, _ = create_schedule([(x.cast(dt) @ y.cast(dt)).lazydata])
  run_schedule(items[:-1])
  return items[-1]

def _heuristic_kernel(item: ScheduleItem, device: str) -> Kernel:
  return hand_coded_optimizations(Kernel(item.ast, Device[device].renderer))

def _run(item: ScheduleItem, device: str, opts: list[Opt]) -> tuple[np.ndarray, Callable]:
  runner = compile_kernel(item.ast, Device[device], opts)
  runner(item.bufs)
  out = item.bufs[0]
  return from_storage(out.numpy(), out.dtype).astype(np.float32), runner

def _reference(a: np.ndarray, b: np.ndarray, dt: DType) -> np.ndarray:
  """The product of the operands rounded to dt, in float64: the tensor core multiplies them exactly and sums in
  float32."""
  rounded = [Tensor(x).cast(dt).cast(dtypes.float32).numpy().astype(np.float64) for x in (a, b)]
  return rounded[0] @ rounded[1]

def _check_values(got: np.ndarray, a: np.ndarray, b: np.ndarray, dt: DType) -> None:
  # the result is rounded to dt (8 bits of bfloat16's mantissa, 11 of half's); the float32 sum is far closer
  rtol = 2 ** -7 if dt == BF16 else 2 ** -10
  ref = _reference(a, b, dt)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=rtol, atol=rtol * np.abs(ref).max())

def _staged(k: Kernel) -> dict[str, int]:
  """The block the heuristics built: warps, mma tiles a warp holds, K steps a block stages."""
  assert k.tensor_core is not None
  warps = prod(k.full_shape[a] for a in k.axes_of(AxisKind.LOCAL))
  return {"warps": warps, "tiles": k.upcast_size() // prod(k.full_shape[a] for a in k.axes_of(AxisKind.UNROLL)),
          "steps": prod(k.full_shape[a] for a in k.axes_of(AxisKind.UNROLL))}

# ---- the heuristics' choice ----

@pytest.mark.parametrize("device", ["EMU", pytest.param("CUDACPU", marks=needs_gpp)])
@pytest.mark.parametrize("dt", [F16, BF16])
def test_heuristics_stage_large_16_bit_matmuls(device: str, dt: DType) -> None:
  item = _matmul_item(device, *_operands(256, 256, 128), dt, cast_in_kernel=False)
  k = _heuristic_kernel(item, device)
  assert k.applied_opts[0].op is OptOps.TC and k.tensor_core is not None and k.tensor_core.tc.dtype_in == dt
  assert _staged(k) == {"warps": prod(TC_WARPS), "tiles": prod(TC_TILES), "steps": TC_K_BYTES // (16 * dt.itemsize)}
  assert k.local_size() == 32 * prod(TC_WARPS) and 0 < k.shared_bytes() <= k.renderer.shared_max

def test_heuristics_stage_tf32_matmuls_with_the_knob() -> None:
  item = _matmul_item("EMU", *_operands(128, 128, 64), dtypes.float32, cast_in_kernel=False)
  with Context(TF32=1):
    k = _heuristic_kernel(item, "EMU")
    got, _ = _run(item, "EMU", k.applied_opts)
  assert k.tensor_core is not None and k.tensor_core.tc.name == "m16n8k8_tf32_f32"
  # 16 floats of K a block (two k8 steps), two stages of both tiles within the 48 KiB a block has
  assert _staged(k) == {"warps": prod(TC_WARPS), "tiles": prod(TC_TILES), "steps": 2}
  assert k.shared_bytes() <= 48 * 1024
  a, b = item.bufs[1].numpy().reshape(128, 64), item.bufs[2].numpy().reshape(64, 128)
  tf32 = lambda v: ((v.view(np.uint32) + 0x1000) & 0xFFFFE000).view(np.float32)  # cvt.rna.tf32.f32
  np.testing.assert_allclose(got.reshape(128, 128), tf32(a).astype(np.float64) @ tf32(b), rtol=1e-5, atol=1e-4)

def test_small_matmuls_take_what_divides() -> None:
  # 48 rows are 3 tiles of 16, 40 columns 5 of 8: no tiles a warp, no warps; K 48 is 3 steps: one a block
  item = _matmul_item("EMU", *_operands(48, 40, 48), F16, cast_in_kernel=False)
  k = _heuristic_kernel(item, "EMU")
  assert k.applied_opts == [Opt(OptOps.TC, 0, 0)] and k.local_size() == 32

# ---- values ----

SIZES = [(16, 8, 16), (64, 64, 64), (128, 64, 96), (48, 40, 48), (96, 136, 32)]

@pytest.mark.parametrize("m,n,k", SIZES)
@pytest.mark.parametrize("dt", [F16, BF16])
def test_values_on_emu(m: int, n: int, k: int, dt: DType) -> None:
  a, b = _operands(m, n, k)
  item = _matmul_item("EMU", a, b, dt, cast_in_kernel=False)
  got, _ = _run(item, "EMU", _heuristic_kernel(item, "EMU").applied_opts)
  _check_values(got, a, b, dt)

@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (20, 36, 50), (100, 60, 70)])
def test_float32_buffers_cast_in_the_kernel(m: int, n: int, k: int) -> None:
  # a.half() @ b.half() of float32 buffers: rounded on the way into shared memory, one kernel. Sizes no tile divides
  # run without tensor cores (TC refuses them), never with wrong values
  a, b = _operands(m, n, k)
  item = _matmul_item("EMU", a, b, F16, cast_in_kernel=True)
  kern = _heuristic_kernel(item, "EMU")
  assert (kern.tensor_core is not None) == (m % 16 == 0 and n % 8 == 0 and k % 16 == 0)
  got, _ = _run(item, "EMU", kern.applied_opts)
  _check_values(got, a, b, F16)

@needs_gpp
@pytest.mark.parametrize("m,n,k,dt,cast", [(128, 128, 64, F16, False), (64, 128, 96, BF16, False),
                                           (64, 64, 32, F16, True), (48, 40, 48, F16, False)])
def test_values_on_cudacpu(m: int, n: int, k: int, dt: DType, cast: bool) -> None:
  a, b = _operands(m, n, k)
  with Context(NVCC_CHECK=find_nvcc() is not None):  # sm_80 and sm_90 compile it too where nvcc is installed
    item = _matmul_item("CUDACPU", a, b, dt, cast)
    k_opt = _heuristic_kernel(item, "CUDACPU")
    assert k_opt.tensor_core is not None
    got, runner = _run(item, "CUDACPU", k_opt.applied_opts)
  _check_values(got, a, b, dt)

def test_cuda_source_stages_through_shared_memory() -> None:
  item = _matmul_item("EMU", *_operands(128, 128, 64), F16, cast_in_kernel=True)
  src = get_program(hand_coded_optimizations(Kernel(item.ast, CUDARenderer())), "mm").source
  # copies of 8 floats (rounded to half on the way: 16-byte stores) into two stages of padded tiles, one barrier a
  # K-block, the fragments read with ldmatrix (A's 4 matrices; B's 2, transposed: it is N-contiguous)
  assert "float32x8 val" in src and "float16x8 cast" in src and src.count("__shared__") == 2
  assert "__half tc_a" in src and "__half tc_b" in src and "cp_async" not in src  # cast in registers: no cp.async
  assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in src and "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in src
  assert src.count("lt_ldmatrix_x4(") == TC_TILES[0] + 1 and src.count("lt_ldmatrix_x2_trans(") == TC_TILES[1] + 1
  assert src.count("__syncthreads();") == 1 and "__launch_bounds__(256)" in src
  assert src.count("lt_mma_m16n8k16_f16_f32(") == prod(TC_TILES) + 1  # per tile of a warp, and its definition

# ---- cp.async ----

def _async_copies(k: Kernel) -> int:
  """The asynchronous copies (STOREs of arg ASYNC_COPY) in the kernel's EMU program."""
  return sum(" STORE " in line and line.endswith("'cp.async'") for line in get_program(k, "mm").source.splitlines())

def test_cuda_source_copies_the_next_k_block_asynchronously() -> None:
  item = _matmul_item("EMU", *_operands(128, 128, 64), F16, cast_in_kernel=False)
  opts = hand_coded_optimizations(Kernel(item.ast, CUDARenderer())).applied_opts
  src = get_program(_with_opts(item, CUDARenderer(), opts), "mm").source
  before, loop = src.split("for (", 1)
  math = loop.index("lt_ldmatrix_x4(")
  # 128x32 halves of A and 32x128 of B a K-block: two 16-byte copies each of 256 threads. The first K-block's before
  # the loop; each K-block waits for its copies at its barrier, then issues the next one's (gated: there may be none)
  # before its math
  assert before.count("lt_cp_async_16(") == 4 + 1 and "cp.async.cg.shared.global [%0], [%1], 16, %2;" in before
  assert loop.count("lt_cp_async_wait_all();\n    __syncthreads();") == 1 and src.count("__syncthreads();") == 1
  assert len(re.findall(r"if \(\w+\) \{ lt_cp_async_16\(tc_[ab]\w+\+\w+, data[12]\+\w+, 16\); \}", loop[:math])) == 4
  assert "val" not in loop[:math]  # no register holds a copied element
  # a GPU before sm_80 has no cp.async: the tiles go through registers, as a cast operand's do
  old = get_program(_with_opts(item, CUDARenderer(75), opts), "mm").source
  assert "cp_async" not in old and old.count("float16x8 val") == 4 and old.count("__syncthreads();") == 1

def _with_opts(item: ScheduleItem, renderer: CUDARenderer, opts: list[Opt]) -> Kernel:
  k = Kernel(item.ast, renderer)
  for opt in opts: apply_opt(k, opt)
  return k

# padded operands: K 40 padded to 48 (zeros 8 halves at once: gated 16-byte copies, zero-filled), K 44 to 48 (A's row
# ends inside a vector: A loads lane by lane in registers, B's rows are whole vectors, gated), a tile of 8 warps over
# 128 columns
PADDED = [(64, 64, 40, 8), (64, 64, 44, 4), (32, 128, 40, 8)]

def _padded_item(device: str, m: int, n: int, k: int, pad: int) -> tuple[ScheduleItem, np.ndarray, np.ndarray]:
  a, b = _operands(m, n, k)
  with Context(DEV=device):
    x, y = Tensor(a).half().realize(), Tensor(b).half().realize()
    items, _ = create_schedule([(x.pad(((0, 0), (0, pad))) @ y.pad(((0, pad), (0, 0)))).lazydata])
  run_schedule(items[:-1])
  return items[-1], a, b

@pytest.mark.parametrize("m,n,k,pad", PADDED)
def test_padded_operands_on_emu(m: int, n: int, k: int, pad: int) -> None:
  item, a, b = _padded_item("EMU", m, n, k, pad)
  kern = _heuristic_kernel(item, "EMU")
  # prologue and next K-block: 2 copies of each asynchronous operand's turns
  assert kern.tensor_core is not None and _async_copies(kern) > 0
  got, _ = _run(item, "EMU", kern.applied_opts)
  _check_values(got, a, b, F16)

@needs_gpp
def test_padded_operands_on_cudacpu() -> None:
  with Context(NVCC_CHECK=find_nvcc() is not None):  # zero-filled copies (src-size 0) compile for sm_80 and sm_90
    item, a, b = _padded_item("CUDACPU", *PADDED[0])
    kern = _heuristic_kernel(item, "CUDACPU")
    assert "lt_cp_async_16(" in get_program(kern, "mm").source
    got, _ = _run(item, "CUDACPU", kern.applied_opts)
  _check_values(got, a, b, F16)

@needs_gpp
def test_unaligned_rows_copy_through_registers() -> None:
  # A's rows 52 halves apart (x[:, 4:] of a 64x52 buffer): its 16-byte vectors are not provably aligned, which cp.async
  # needs, so they are plain copies, issued where the asynchronous ones would be; B's (rows 64 apart) stay cp.async
  a, b = _operands(64, 64, 52)
  with Context(DEV="CUDACPU", NVCC_CHECK=find_nvcc() is not None):
    x, y = Tensor(a).half().realize(), Tensor(b).half().realize()
    items, _ = create_schedule([(x[:, 4:] @ y[4:]).lazydata])
    run_schedule(items[:-1])
    kern = _heuristic_kernel(items[-1], "CUDACPU")
    src = get_program(kern, "mm").source
    got, _ = _run(items[-1], "CUDACPU", kern.applied_opts)
  assert re.findall(r"lt_cp_async_16\((tc_[ab])", src) == ["tc_b"] * 4 and src.count("lt_cp_async_wait_all();") == 1
  _check_values(got, a[:, 4:], b[4:], F16)

def test_async_copies_need_16_bit_operands_without_casts() -> None:
  for dt, cast, copies in ((F16, False, 8), (BF16, False, 8), (F16, True, 0)):
    item = _matmul_item("EMU", *_operands(128, 128, 64), dt, cast_in_kernel=cast)
    assert _async_copies(_heuristic_kernel(item, "EMU")) == copies
  with Context(TF32=1):  # tf32 takes float32 buffers as they are: 4 floats are one 16-byte copy
    item = _matmul_item("EMU", *_operands(128, 128, 64), dtypes.float32, cast_in_kernel=False)
    assert _async_copies(_heuristic_kernel(item, "EMU")) == 8

def test_convolution_prefetches_across_its_loops() -> None:
  # channels-last: K (input channels) contiguous, so the copies of 16 pixels' input are 16-byte vectors, gated at the
  # image's border (the weights' along the output channels); the K-blocks run over three loops (channel blocks,
  # kernel rows, kernel columns), the next one found across them
  x, w = rng.standard_normal((2, 8, 8, 32)).astype(np.float32), rng.standard_normal((3, 3, 32, 16)).astype(np.float32)
  with Context(DEV="EMU"):
    img, ker = Tensor(x).half().realize().permute(0, 3, 1, 2), Tensor(w).half().realize().permute(3, 2, 0, 1)
    items, _ = create_schedule([img.conv2d(ker, padding=1).lazydata])
  run_schedule(items[:-1])
  k = Kernel(items[-1].ast, Device["EMU"].renderer)
  apply_opt(k, Opt(OptOps.TC, 0, 0))
  assert k.tensor_core is not None
  apply_opt(k, Opt(OptOps.UPCAST, 2, 2))  # two image rows: a tile of 16 pixels
  assert _async_copies(k) == 2 * 2 and sum(" RANGE " in line for line in get_program(k, "mm").source.splitlines()) >= 3
  got, _ = _run(items[-1], "EMU", k.applied_opts)
  ref = _conv_reference(x, w)
  np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=2 ** -10, atol=2 ** -10 * np.abs(ref).max())

def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  """conv2d (padding 1) of NHWC x by HWIO w, rounded to half, in float64, as NCHW."""
  x, w = (Tensor(v).half().float().numpy().astype(np.float64) for v in (x, w))
  xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
  h, wd = x.shape[1:3]
  out = sum(np.einsum("nhwc,co->nohw", xp[:, i:i + h, j:j + wd], w[i, j]) for i in range(3) for j in range(3))
  return np.asarray(out)

def test_emu_catches_a_read_before_the_wait() -> None:
  # the same kernel with its barrier no longer waiting for the copies: the first fragment read sees a copy in flight
  item = _matmul_item("EMU", *_operands(64, 64, 64), F16, cast_in_kernel=False)
  kern = _heuristic_kernel(item, "EMU")
  _, runner = _run(item, "EMU", kern.applied_opts)
  source = runner.spec.source
  broken = re.sub(r"( BARRIER .*\)) 'cp\.async'$", r"\1", source, flags=re.M)
  assert broken != source
  program = EmuProgram(Device["EMU"], runner.spec.name, broken.encode())  # type: ignore[arg-type]
  with pytest.raises(EmuError, match=r"reads tc_\w+\[\d+\], which an asynchronous copy of block .* writes, before a "
                                     r"wait for it"):
    program(*(buf.handle for buf in item.bufs), **runner.launch)

# ---- ldmatrix ----

def _matrix_loads(k: Kernel) -> list[tuple]:
  uops = get_program(k, "mm").source  # the EMU program's text: one op a line
  return sorted({line.split(")", 1)[1].strip() for line in uops.splitlines() if "'ldmatrix'" in line})

@pytest.mark.parametrize("transposed_b", [False, True])
def test_fragments_read_with_matrix_loads(transposed_b: bool) -> None:
  # x @ y reads B along N (ldmatrix .trans); x @ w.T along K, as A (no .trans)
  a, b = _operands(64, 64, 64)
  with Context(DEV="EMU"):
    x, y = Tensor(a).half().realize(), Tensor(np.ascontiguousarray(b.T) if transposed_b else b).half().realize()
    items, _ = create_schedule([(x @ (y.T if transposed_b else y)).lazydata])
  k = _heuristic_kernel(items[-1], "EMU")
  assert _matrix_loads(k) == ["('ldmatrix', 2, False)", "('ldmatrix', 4, False)"] if transposed_b else \
    ["('ldmatrix', 2, True)", "('ldmatrix', 4, False)"]
  got, runner = _run(items[-1], "EMU", k.applied_opts)
  _check_values(got, a, b, F16)
  assert runner.program.traffic.bank_conflicts == 0  # type: ignore[attr-defined]

def test_tf32_fragments_are_not_matrix_loads() -> None:
  item = _matmul_item("EMU", *_operands(64, 64, 32), dtypes.float32, cast_in_kernel=False)
  with Context(TF32=1): assert _matrix_loads(_heuristic_kernel(item, "EMU")) == []  # ldmatrix moves 16-bit elements

LDMATRIX = r"""
#include <cuda_fp16.h>
// a 16x16 tile of halves in shared memory (rows 24 apart); every lane's registers of an x4 load (matrices at rows 0
// and 8, columns 0 and 8) and of an x2.trans load (rows 0 and 8, column 0) written out in lane order
extern "C" __global__ void __launch_bounds__(32) matrices(__half* out4, __half* out2, const __half* tile) {
  __shared__ alignas(16) __half s[16 * 24];
  int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) s[i / 16 * 24 + i % 16] = tile[i];
  __syncthreads();
  __half r4[8], r2[4];
  lt_ldmatrix_x4(r4, s + (lane % 8 + 8 * (lane / 8 % 2)) * 24 + 8 * (lane / 16));
  lt_ldmatrix_x2_trans(r2, s + (lane % 16) * 24);
  for (int i = 0; i < 8; i++) out4[lane * 8 + i] = r4[i];
  for (int i = 0; i < 4; i++) out2[lane * 4 + i] = r2[i];
}
"""

@needs_gpp
def test_cudacpu_ldmatrix_is_the_isa_table() -> None:
  tile = np.arange(256, dtype=np.float16).reshape(16, 16)
  out4, out2 = np.zeros((32, 8), np.float16), np.zeros((32, 4), np.float16)
  with Context(NVCC_CHECK=find_nvcc() is not None):
    wrappers = "\n".join(ldmatrix_wrapper(n, trans)[1] for n, trans in ((4, False), (2, True)))
    lib = Device["CUDACPU"].compiler.compile_cached(LDMATRIX.replace("// a 16x16", wrappers + "\n// a 16x16"))
  mem = lambda x: CPUMemory(x.view(np.uint8).reshape(-1), x.ctypes.data)
  Device["CUDACPU"].load("matrices", lib)(mem(out4), mem(out2), mem(tile), global_size=(1, 1, 1), local_size=(32, 1, 1))
  lane = np.arange(32)[:, None]
  # x4: register 2i + e of lane l is element (l // 4, 2 (l % 4) + e) of matrix i, at rows 8 (i % 2), cols 8 (i // 2)
  i, e = np.arange(8)[None, :] // 2, np.arange(8)[None, :] % 2
  np.testing.assert_array_equal(out4, tile[8 * (i % 2) + lane // 4, 8 * (i // 2) + 2 * (lane % 4) + e])
  # x2.trans: register 2i + e is element (2 (l % 4) + e, l // 4) of matrix i (rows 8i)
  i, e = np.arange(4)[None, :] // 2, np.arange(4)[None, :] % 2
  np.testing.assert_array_equal(out2, tile[8 * i + 2 * (lane % 4) + e, lane // 4])

# ---- opts after TC ----

def test_opts_follow_tc_and_beam_reaches_the_heuristics_block() -> None:
  item = _matmul_item("EMU", *_operands(256, 256, 128), F16, cast_in_kernel=False)
  k = Kernel(item.ast, Device["EMU"].renderer)
  for opt in _heuristic_kernel(item, "EMU").applied_opts:
    assert opt in actions(k), f"{opt} is not among BEAM's actions for {k.applied_opts}"
    apply_opt(k, opt)

def test_tile_and_warp_limits_after_tc() -> None:
  item = _matmul_item("EMU", *_operands(512, 512, 64), F16, cast_in_kernel=False)
  k = Kernel(item.ast, Device["EMU"].renderer)
  apply_opt(k, Opt(OptOps.TC, 0, 0))
  assert k.tensor_core is not None
  apply_opt(k, Opt(OptOps.LOCAL, k.tensor_core.axis_m, 16))  # 16 warps: 512 threads
  with pytest.raises(KernelOptError, match="more than 1024 threads per block"):
    apply_opt(k, Opt(OptOps.LOCAL, k.tensor_core.axis_n, 4))
  # 512 columns of B by all 64 of K in one stage: more shared memory than a block has
  k = Kernel(item.ast, Device["EMU"].renderer)
  for name, op, amt in (("", OptOps.TC, 0), ("axis_n", OptOps.UPCAST, 16), ("axis_n", OptOps.LOCAL, 4)):
    apply_opt(k, Opt(op, getattr(k.tensor_core, name) if name else 0, amt))
  assert k.tensor_core is not None
  with pytest.raises(KernelOptError, match="bytes of shared memory; a block has at most 49152"):
    apply_opt(k, Opt(OptOps.UNROLL, k.tensor_core.axis_k, 4))

def test_bank_replays() -> None:
  assert bank_replays(list(range(32))) == 0 and bank_replays(list(range(64))) == 0   # one or two passes needed
  assert bank_replays([0] * 32) == 0                                                  # a broadcast
  assert bank_replays([i * 32 for i in range(8)]) == 7                                # 8 words of one bank

# ---- EMU's counters: the goal ----

def test_fp16_matmul_512_meets_the_traffic_goal() -> None:
  a, b = _operands(512, 512, 512)
  item = _matmul_item("EMU", a, b, F16, cast_in_kernel=False)
  got, runner = _run(item, "EMU", _heuristic_kernel(item, "EMU").applied_opts)
  traffic = runner.program.traffic  # type: ignore[attr-defined]
  assert isinstance(runner.program, EmuProgram) and traffic is not None
  ideal = 512 ** 3 // 32  # bytes an ideal kernel with 128x128 output tiles loads
  assert traffic.global_load <= 2 * ideal and traffic.bank_conflicts == 0
  assert traffic.global_load == ideal  # 128x128 tiles: exactly the ideal
  _check_values(got, a, b, F16)
