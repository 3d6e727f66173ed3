"""The EMU device on hand-built linear programs: GPU ids, shared memory, barriers, WMMA, and its strictness (bounds,
races). Programs without GPU ops also run on the CPU backend, so that the two backends check each other."""
import math
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_llvm_renderer import (
  ALL,
  BOOL_OPS,
  FLOAT_OPS,
  INT_OPS,
  assert_same,
  build,
  c,
  elementwise,
  end,
  glob,
  like,
  linear,
  load,
  reduce_program,
  reference,
  rng,
  samples,
  saturating_cast,
  store,
)
from test_llvm_renderer import run as run_cpu

from lazytensor import Context, GlobalCounters, Tensor
from lazytensor.codegen.alu import alu_semantics
from lazytensor.dtype import DType, dtypes
from lazytensor.renderer import TC_NV_BF16, TC_NV_F16, TC_NV_TF32, TensorCore, launch_dims
from lazytensor.renderer.emu import EmuRenderer, parse_program
from lazytensor.runtime.device import Device
from lazytensor.runtime.ops_emu import EmuDevice, EmuError, EmuProgram, RaceError, Traffic
from lazytensor.uop.ops import GroupOp, Ops, UOp

EMU = EmuDevice("EMU")
I32, F16, F32 = dtypes.int32, dtypes.float16, dtypes.float32
VOID = dtypes.void

# ---- building and running ----

def special(name: str, size: int) -> UOp: return UOp(Ops.SPECIAL, I32, (), (name, size))
def shared(name: str, size: int) -> UOp: return UOp(Ops.DEFINE_LOCAL, F32.ptr(local=True), (), (name, size))
def acc(uid: int, dt: DType = F32) -> UOp: return UOp(Ops.DEFINE_ACC, dt, (UOp.const(dt, 0),), uid)
def accumulate(a: UOp, r: UOp, x: UOp) -> UOp: return UOp(Ops.ASSIGN, a.dtype, (a, load(a, r, a.dtype) + x))
def barrier(*after: UOp) -> UOp: return UOp(Ops.BARRIER, VOID, after)
def if_(cond: UOp) -> UOp: return UOp(Ops.IF, VOID, (cond,))
def endif(i: UOp) -> UOp: return UOp(Ops.ENDIF, VOID, (i,))

def compile_emu(uops: list[UOp]) -> EmuProgram:
  return EmuProgram(EMU, "kernel", EMU.compiler.compile(EMU.renderer.render("kernel", alu_semantics(uops))))

def launch_emu(uops: list[UOp], arrays: list[np.ndarray], **launch: Any) -> tuple[EmuProgram, list[np.ndarray]]:
  """Render, compile and run on EMU (launched as the program's SPECIALs ask, unless told otherwise); buffer i holds
  arrays[i]; returns the program and every buffer's contents afterwards."""
  prog, alloc = compile_emu(uops), EMU.allocator
  handles = [alloc.alloc(a.nbytes) for a in arrays]
  for h, a in zip(handles, arrays): alloc.copyin(h, np.ascontiguousarray(a).data.cast("B"))
  prog(*handles, **{**launch_dims(uops).kwargs(), **launch})
  outs = [np.empty_like(a) for a in arrays]
  for h, o in zip(handles, outs): alloc.copyout(o.data.cast("B"), h)
  return prog, outs

def run_emu(uops: list[UOp], arrays: list[np.ndarray], **launch: Any) -> list[np.ndarray]:
  return launch_emu(uops, arrays, **launch)[1]

BACKENDS: dict[str, Callable[[list[UOp], list[np.ndarray]], list[np.ndarray]]] = {"EMU": run_emu, "CPU": run_cpu}

def randn(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

# ---- the text format ----

def test_render_reads_back_exactly() -> None:
  # every kind of arg and dtype the format writes: the parsed program is the very same interned UOps
  g, sm = glob(0, F32), shared("temp0", 8)
  consts = [c(v, F32) for v in (math.nan, math.inf, -math.inf, -0.0, 0.1)] + [c(True, dtypes.bool), c(-5, dtypes.int64)]
  vec = UOp(Ops.VECTORIZE, F32.vec(4), tuple(consts[:4]))
  odd = UOp(Ops.NOOP, VOID, (), ("a'b\n", (1,), None, Ops.ADD, F16.vec(8), dtypes.uint64, -3))
  uops = linear(*consts, store(g, c(0), vec.gep(2)), store(sm, special("lidx0", 8), c(1.0, F32)), odd)
  src = EmuRenderer().render("kernel", uops)
  name, back = parse_program(src)
  assert name == "kernel" and len(back) == len(uops) and all(a is b for a, b in zip(back, uops)), src
  assert "float32*local" in src and "('lidx0', 8)" in src

@pytest.mark.parametrize("bad", ["", "   0 CONST float33 ()  1", "   0 ADD int32 (0, 0)", "   1 NOOP void ()",
                                 "   0 CONST int32 ()  __import__('os')", "   0 CONST int32 ()  1 +"])
def test_bad_text_is_rejected(bad: str) -> None:
  with pytest.raises(ValueError): parse_program(f"# EMU kernel k\n{bad}\n" if bad else bad)

def test_device() -> None:
  dev = Device["EMU"]
  r = dev.renderer
  assert isinstance(dev, EmuDevice) and r.has_local and r.has_shared and not r.has_threads
  assert r.tensor_cores == (TC_NV_F16, TC_NV_BF16)
  r = rng(4)
  prog = compile_emu(linear(store(glob(0, F32), r, r.cast(F32)), end(r)))
  buf = dev.allocator.alloc(16)
  assert isinstance(prog(buf, wait=True), float)
  np.testing.assert_array_equal(buf.view(np.float32), np.arange(4))

# ---- programs both backends run ----

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("width", [1, 2, 4])
def test_vector_elementwise(backend: str, width: int) -> None:
  a, b = randn(64, seed=1), randn(64, seed=2)
  prog = elementwise([lambda x, y: x * y + x, lambda x, y: x.lt(y)], [F32, F32], [F32, dtypes.bool], 64, width)
  out, lt, _, _ = BACKENDS[backend](prog, [np.zeros(64, np.float32), np.zeros(64, bool), a, b])
  assert_same(out, a * b + a, F32, rtol=1e-6)
  assert_same(lt, a < b, dtypes.bool)

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dt,op", [(F32, Ops.ADD), (F32.vec(4), Ops.ADD), (F32, Ops.MAX), (F32.vec(2), Ops.MAX)],
                         ids=str)
def test_reduce(backend: str, dt: DType, op: Ops) -> None:
  a = randn(256, seed=3)
  got = BACKENDS[backend](reduce_program(256, dt, op), [np.zeros(1, np.float32), a])[0][0]
  np.testing.assert_allclose(got, a.sum() if op is Ops.ADD else a.max(), rtol=1e-5)

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("width", [1, 4])
def test_gated_load_and_store(backend: str, width: int) -> None:
  # masked-off lanes point far outside the buffers: EMU must neither raise nor touch them, the CPU must not crash
  g_out, g_in = glob(0, F32), glob(1, F32)
  r = rng(16)
  gate = r.lt(4)
  val = load(g_in, gate.where(r * width, r * 100_000_000), F32.vec(width), gate, UOp.const(F32.vec(width), 5.0))
  pos = UOp(Ops.VECTORIZE, F32.vec(width), (c(0.0, F32),) * width).lt(val) if width > 1 else c(0.0, F32).lt(val)
  keep = pos.gep(0)
  a = randn(4 * width, seed=4)
  gated = store(glob(2, F32), keep.where(r, r * 100_000_000), val.gep(0), keep)
  prog = linear(store(g_out, r * width, val), gated, end(r))
  out, _, pos_out = BACKENDS[backend](prog, [np.zeros(16 * width, np.float32), a, np.full(16, -7.0, np.float32)])
  assert_same(out, np.concatenate([a, np.full(12 * width, 5.0)]), F32)
  firsts = out[::width]
  assert_same(pos_out, np.where(firsts > 0, firsts, -7.0), F32)

# ---- every ALU op and cast, against numpy (the CPU test checks the same references) ----

@pytest.mark.parametrize("width", [1, 4])
@pytest.mark.parametrize("dt", ALL, ids=str)
def test_alu(dt: DType, width: int) -> None:
  ops = FLOAT_OPS if dt.is_float else BOOL_OPS if dt.is_bool else INT_OPS
  n = 64
  a, b, cond = samples(dt, n, 1), samples(dt, n, 2), samples(dtypes.bool, n, 3)
  s = (samples(dtypes.uint8, n, 4) % (8 * dt.itemsize)).astype(dt.np)
  out_dts = [dtypes.bool if op in GroupOp.Comparison else dt for op in ops]
  fns = [lambda x, y, z, w, op=op: build(op, x, y, z, w) for op in ops]
  outs = run_emu(elementwise(fns, [dt, dt, dt, dtypes.bool], out_dts, n, width),
                 [np.zeros(n, odt.np) for odt in out_dts] + [a, b, s, cond])
  for op, odt, got in zip(ops, out_dts, outs):
    assert_same(got, reference(op, dt, a, b, s, cond), odt, msg=f"{op} {dt}")  # numpy is the reference: exact

def test_int_division_edges() -> None:
  # C truncation, x/0 -> 0, INT_MIN/-1 wraps, x%-1 -> 0
  a = np.array([7, -7, 7, -7, 5, -2**31, -2**31, 9], np.int32)
  b = np.array([2, 2, -2, -2, 0, -1, 1, -1], np.int32)
  prog = elementwise([lambda x, y: x // y, lambda x, y: x % y], [I32, I32], [I32, I32], 8, 1)
  q, m, _, _ = run_emu(prog, [np.zeros(8, np.int32), np.zeros(8, np.int32), a, b])
  np.testing.assert_array_equal(q, [3, -3, -3, 3, 0, -2**31, -2**31, -9])
  np.testing.assert_array_equal(m, [1, -1, 1, -1, 0, 0, 0, 0])

@pytest.mark.parametrize("width", [1, 4])
@pytest.mark.parametrize("fr", ALL, ids=str)
def test_cast(fr: DType, width: int) -> None:
  n = 64
  a = samples(fr, n, 1)
  if fr.is_float: a[12:] = (np.random.default_rng(5).standard_normal(n - 12) * 150).astype(fr.np)
  tos = [dt for dt in ALL if dt != fr]
  prog = elementwise([lambda x, to=to: x.cast(like(to, x)) for to in tos], [fr], tos, n, width)
  for to, got in zip(tos, run_emu(prog, [np.zeros(n, to.np) for to in tos] + [a])):
    with np.errstate(all="ignore"): want = saturating_cast(a, to) if fr.is_float and to.is_int else a.astype(to.np)
    assert_same(got, want, to, msg=f"{fr} -> {to}")

@pytest.mark.parametrize("width", [1, 4])
def test_bitcast(width: int) -> None:
  a = samples(F32, 64, 1)
  prog = elementwise([lambda x: x.bitcast(like(I32, x)), lambda x: x.bitcast(like(dtypes.uint32, x))], [F32],
                     [I32, dtypes.uint32], 64, width)
  got_i, got_u, _ = run_emu(prog, [np.zeros(64, np.int32), np.zeros(64, np.uint32), a])
  assert_same(got_i, a.view(np.int32), I32)
  assert_same(got_u, a.view(np.uint32), dtypes.uint32)

# ---- GPU ids, shared memory, barriers ----

def test_ids_and_launch_dims() -> None:
  # out[flat id] = 1000*gidx0 + 100*gidx1 + 10*lidx0 + lidx1, with blocks (3, 2) of threads (4, 2)
  g0, g1, l0, l1 = special("gidx0", 3), special("gidx1", 2), special("lidx0", 4), special("lidx1", 2)
  flat = ((g1 * 3 + g0) * 2 + l1) * 4 + l0
  prog = linear(store(glob(0, I32), flat, g0 * 1000 + g1 * 100 + l0 * 10 + l1))
  want = [1000 * a + 100 * b + 10 * x + y for b in range(2) for a in range(3) for y in range(2) for x in range(4)]
  out = run_emu(prog, [np.zeros(48, np.int32)], global_size=(3, 2, 1), local_size=(4, 2))[0]
  np.testing.assert_array_equal(out, want)
  with pytest.raises(ValueError, match="local_size"): run_emu(prog, [np.zeros(48, np.int32)], local_size=(2, 4, 1))

def group_reduce(rows: int, cols: int, threads: int, sync: bool = True) -> list[UOp]:
  """out[row] = sum(x[row, :]): thread t of block `row` sums columns t, t+threads, ... into a register and puts it in
  shared memory; after a barrier, thread 0 adds up the shared values."""
  x, out, tmp = glob(1, F32), glob(0, F32), shared("temp0", threads)
  row, t = special("gidx0", rows), special("lidx0", threads)
  part, total = acc(0), acc(1)
  j, k = rng(cols // threads, 0), rng(threads, 1)
  ej = end(j)
  put = store(tmp, t, load(part, ej, F32))
  first = if_(t.eq(0))
  add = accumulate(total, k, load(tmp, k, F32))
  ek = end(k)
  return linear(part, j, accumulate(part, j, load(x, row * cols + j * threads + t, F32)), ej, put,
                *([barrier(put)] if sync else []), first, total, k, add, ek, store(out, row, load(total, ek, F32)),
                endif(first))

def test_group_reduce() -> None:
  x = randn(8, 64, seed=6)
  out = run_emu(group_reduce(8, 64, 16), [np.zeros(8, np.float32), x])[0]
  np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)

def test_group_reduce_without_barrier_is_a_race() -> None:
  with pytest.raises(RaceError, match=r"thread \(0, 0, 0\) reads temp0\[1\] that block \(0, 0, 0\) thread \(1, 0, 0\)"):
    run_emu(group_reduce(8, 64, 16, sync=False), [np.zeros(8, np.float32), randn(8, 64)])

# ---- matmuls: one thread an output, shared-memory tiles, tensor cores ----

def naive_matmul(n: int, tile: int) -> list[UOp]:
  """C = A @ B for n x n float32, one thread an output, tile x tile threads a block."""
  blocks = n // tile
  row = special("gidx1", blocks) * tile + special("lidx1", tile)
  col = special("gidx0", blocks) * tile + special("lidx0", tile)
  a, k = acc(0), rng(n)
  ek = end(k)
  step = accumulate(a, k, load(glob(1, F32), row * n + k, F32) * load(glob(2, F32), k * n + col, F32))
  return linear(a, k, step, ek, store(glob(0, F32), row * n + col, load(a, ek, F32)))

def tiled_matmul(n: int, tile: int, sync: tuple[bool, bool] = (True, True)) -> list[UOp]:
  """The same through shared memory: each step of the k loop copies a tile of A and of B into it, then sums over it.
  The first barrier makes the tiles complete before they are read; the second keeps the next copy from overwriting
  them while others still read."""
  blocks = n // tile
  lx, ly = special("lidx0", tile), special("lidx1", tile)
  row, col = special("gidx1", blocks) * tile + ly, special("gidx0", blocks) * tile + lx
  sa, sb = shared("tile_a", tile * tile), shared("tile_b", tile * tile)
  a, k0, kk = acc(0), rng(blocks, 0), rng(tile, 1)
  put_a = store(sa, ly * tile + lx, load(glob(1, F32), row * n + k0 * tile + lx, F32))
  put_b = store(sb, ly * tile + lx, load(glob(2, F32), (k0 * tile + ly) * n + col, F32))
  step = accumulate(a, kk, load(sa, ly * tile + kk, F32) * load(sb, kk * tile + lx, F32))
  ekk = end(kk)
  ek0 = end(k0)
  syncs = [[barrier(put_a, put_b)] if sync[0] else [], [barrier(ekk)] if sync[1] else []]
  return linear(a, k0, put_a, put_b, *syncs[0], kk, step, ekk, *syncs[1], ek0,
                store(glob(0, F32), row * n + col, load(a, ek0, F32)))

@pytest.mark.parametrize("kind", ["naive", "tiled"])
def test_matmul_64(kind: str) -> None:
  a, b = randn(64, 64, seed=7), randn(64, 64, seed=8)
  prog = compile_emu(naive_matmul(64, 16) if kind == "naive" else tiled_matmul(64, 16))
  bufs = [EMU.allocator.alloc(64 * 64 * 4) for _ in range(3)]
  for h, x in zip(bufs[1:], (a, b)): EMU.allocator.copyin(h, x.data.cast("B"))
  prog(*bufs, global_size=(4, 4, 1), local_size=(16, 16, 1))
  np.testing.assert_allclose(bufs[0].view(np.float32).reshape(64, 64), a @ b, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("sync,what", [((False, True), r"reads tile_a\[\d+\] that .* wrote"),
                                       ((True, False), r"writes tile_a\[\d+\] that .* read")])
def test_missing_barrier_is_a_race(sync: tuple[bool, bool], what: str) -> None:
  with pytest.raises(RaceError, match=what + " with no BARRIER between"):
    run_emu(tiled_matmul(32, 8, sync), [np.zeros(32 * 32, np.float32), randn(32, 32), randn(32, 32)])

# WMMA fragments as the PTX ISA lists them for mma.m16n8k16 with .f16 inputs: (row, col) of each register of a lane,
# with g = groupID = lane >> 2 and t = threadID_in_group = lane % 4. Written out independently of the device's tables.
# They take ints, or UOps when a kernel computes the same positions.
def a_frag(g: Any, t: Any) -> list[tuple[Any, Any]]:
  return [(g, t * 2), (g, t * 2 + 1), (g + 8, t * 2), (g + 8, t * 2 + 1),
          (g, t * 2 + 8), (g, t * 2 + 9), (g + 8, t * 2 + 8), (g + 8, t * 2 + 9)]
def b_frag(g: Any, t: Any) -> list[tuple[Any, Any]]:
  return [(t * 2, g), (t * 2 + 1, g), (t * 2 + 8, g), (t * 2 + 9, g)]
def c_frag(g: Any, t: Any) -> list[tuple[Any, Any]]:
  return [(g, t * 2), (g, t * 2 + 1), (g + 8, t * 2), (g + 8, t * 2 + 1)]

Layout = Callable[[Any, Any], list[tuple[Any, Any]]]

# the same for mma.m16n8k8 with .tf32 inputs (C/D as above)
def a_frag_k8(g: Any, t: Any) -> list[tuple[Any, Any]]: return [(g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)]
def b_frag_k8(g: Any, t: Any) -> list[tuple[Any, Any]]: return [(t, g), (t + 4, g)]

@pytest.mark.parametrize("tc,frags", [(TC_NV_F16, (a_frag, b_frag, c_frag)),
                                      (TC_NV_TF32, (a_frag_k8, b_frag_k8, c_frag))], ids=["f16", "tf32"])
def test_tensor_core_layouts_are_the_isa_tables(tc: TensorCore, frags: tuple[Layout, ...]) -> None:
  assert tc.threads == 32
  for f, table in zip((tc.a, tc.b, tc.c), frags):
    assert [[f.coords(lane, j) for j in range(f.size)] for lane in range(32)] == \
      [table(lane >> 2, lane % 4) for lane in range(32)]

def test_a_layout_must_cover_its_matrix() -> None:
  with pytest.raises(AssertionError, match="exactly once"):
    TensorCore("bad", (16, 8, 16), F16, F32, TC_NV_F16.a, TC_NV_F16.a, TC_NV_F16.c)

def to_fragments(m: np.ndarray, frag: Layout) -> np.ndarray:
  return np.array([[m[rc] for rc in frag(lane >> 2, lane % 4)] for lane in range(32)], dtype=m.dtype)

def from_fragments(f: np.ndarray, frag: Layout, shape: tuple[int, int]) -> np.ndarray:
  out = np.full(shape, np.nan, f.dtype)
  for lane in range(32):
    for rc, v in zip(frag(lane >> 2, lane % 4), f[lane]): out[rc] = v
  return out

def wmma(a: UOp, b: UOp, cc: UOp) -> UOp: return UOp(Ops.WMMA, F32.vec(4), (a, b, cc), (TC_NV_F16.name, (16, 8, 16)))

def test_wmma_fragment_layout() -> None:
  # one warp: lane l loads its fragments, runs the WMMA, stores D's fragment; the test places values by the ISA's table
  gen = np.random.default_rng(9)
  A, B = gen.standard_normal((16, 16)).astype(np.float16), gen.standard_normal((16, 8)).astype(np.float16)
  C = gen.standard_normal((16, 8)).astype(np.float32)
  lane = special("lidx0", 32)
  d = wmma(load(glob(1, F16), lane * 8, F16.vec(8)), load(glob(2, F16), lane * 4, F16.vec(4)),
           load(glob(3, F32), lane * 4, F32.vec(4)))
  ins = [to_fragments(A, a_frag), to_fragments(B, b_frag), to_fragments(C, c_frag)]
  out = run_emu(linear(store(glob(0, F32), lane * 4, d)), [np.zeros((32, 4), np.float32), *ins])[0]
  want = A.astype(np.float32) @ B.astype(np.float32) + C
  np.testing.assert_allclose(from_fragments(out, c_frag, (16, 8)), want, rtol=1e-6, atol=1e-6)

def tc_matmul(n: int) -> list[UOp]:
  """C = A @ B (float16 in, float32 out) with one warp a 16x8 tile of C, gathering fragments with index math."""
  lane, n0, m0 = special("lidx0", 32), special("gidx0", n // 8) * 8, special("gidx1", n // 16) * 16
  g, t = lane // 4, lane % 4
  k = rng(n // 16)
  def gather(buf: UOp, dt: DType, spots: list[tuple[UOp, UOp]], width: int) -> UOp:
    return UOp(Ops.VECTORIZE, dt.vec(len(spots)), tuple(load(buf, r * width + cc, dt) for r, cc in spots))
  a = gather(glob(1, F16), F16, [(m0 + r, k * 16 + cc) for r, cc in a_frag(g, t)], n)
  b = gather(glob(2, F16), F16, [(k * 16 + r, n0 + cc) for r, cc in b_frag(g, t)], n)
  d = acc(0, F32.vec(4))
  step = UOp(Ops.ASSIGN, d.dtype, (d, wmma(a, b, load(d, k, d.dtype))))
  ek = end(k)
  res = load(d, ek, d.dtype)
  return linear(d, k, step, ek, *[store(glob(0, F32), (m0 + r) * n + n0 + cc, res.gep(i)) for i, (r, cc) in
                                  enumerate(c_frag(g, t))])

def test_wmma_tf32_rounds_its_inputs() -> None:
  # m16n8k8 on tf32: inputs rounded to nearest (ties away) at 10 mantissa bits, products summed in float32
  gen = np.random.default_rng(11)
  A, B = gen.standard_normal((16, 8)).astype(np.float32), gen.standard_normal((8, 8)).astype(np.float32)
  A[0, 0], B[0, 0] = 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -12  # a tie rounds away to 1 + 2^-10; just above half rounds up
  lane = special("lidx0", 32)
  d = UOp(Ops.WMMA, F32.vec(4), (load(glob(1, F32), lane * 4, F32.vec(4)), load(glob(2, F32), lane * 2, F32.vec(2)),
                                 UOp.const(F32.vec(4), 0.0)), (TC_NV_TF32.name, TC_NV_TF32.dims))
  ins = [to_fragments(A, a_frag_k8), to_fragments(B, b_frag_k8)]
  out = from_fragments(run_emu(linear(store(glob(0, F32), lane * 4, d)), [np.zeros((32, 4), np.float32), *ins])[0],
                       c_frag, (16, 8))
  def tf32(x: np.ndarray) -> np.ndarray:
    m, e = np.frexp(x.astype(np.float64))
    return np.ldexp(np.sign(m) * np.floor(np.abs(m) * 2 ** 11 + 0.5) / 2 ** 11, e)
  assert tf32(A)[0, 0] == 1 + 2.0 ** -10 and tf32(B)[0, 0] == 1 + 2.0 ** -10
  np.testing.assert_allclose(out, tf32(A) @ tf32(B), rtol=1e-6, atol=1e-6)

def test_tc_matmul_64() -> None:
  gen = np.random.default_rng(10)
  A, B = gen.standard_normal((64, 64)).astype(np.float16), gen.standard_normal((64, 64)).astype(np.float16)
  out = run_emu(tc_matmul(64), [np.zeros((64, 64), np.float32), A, B])[0]
  np.testing.assert_allclose(out, A.astype(np.float32) @ B.astype(np.float32), rtol=1e-5, atol=1e-5)

def test_wmma_needs_whole_warps() -> None:
  lane = special("lidx0", 16)
  d = wmma(UOp.const(F16.vec(8), 1.0), UOp.const(F16.vec(4), 1.0), UOp.const(F32.vec(4), 0.0))
  with pytest.raises(ValueError, match="multiple of 32"): run_emu(linear(store(glob(0, F32), lane * 4, d)), [])
  lane = special("lidx0", 64)
  inside = if_(lane.lt(48))
  prog = linear(inside, store(glob(0, F32), lane * 4, d), endif(inside))
  with pytest.raises(EmuError, match=r"thread \(48, 0, 0\) skips a WMMA"): run_emu(prog, [np.zeros(256, np.float32)])

# ---- strictness ----

def shifted_copy(shift: int, count: int = 1) -> list[UOp]:
  """out[i] = in[i + shift] for 8 blocks of 8 threads, `count` elements a thread."""
  i = (special("gidx0", 8) * 8 + special("lidx0", 8)) * count
  return linear(store(glob(0, F32), i, load(glob(1, F32), i + shift, F32.vec(count))))

@pytest.mark.parametrize("shift,count,what", [(1, 1, r"data1\[64\]"), (-1, 1, r"data1\[-1\]"),
                                              (2, 4, r"data1\[254:258\]")])
def test_out_of_bounds_load(shift: int, count: int, what: str) -> None:
  n = 64 * count
  with pytest.raises(IndexError, match=rf"block \(\d, 0, 0\) thread \(\d, 0, 0\) loads {what}, out of bounds: "
                                       rf"data1 has {n} elements"):
    run_emu(shifted_copy(shift, count), [np.zeros(n, np.float32), np.zeros(n, np.float32)])

def test_out_of_bounds_store_and_shared() -> None:
  t = special("lidx0", 16)
  with pytest.raises(IndexError, match=r"thread \(15, 0, 0\) stores to data0\[16\]"):
    run_emu(linear(store(glob(0, F32), t + 1, c(1.0, F32))), [np.zeros(16, np.float32)])
  with pytest.raises(IndexError, match=r"stores to temp0\[16\], out of bounds: temp0 has 16 elements"):
    run_emu(linear(store(shared("temp0", 16), t + 1, c(1.0, F32))), [])

def test_lanes_that_do_not_run_touch_nothing() -> None:
  # under IF, lanes that do not run may compute any index: they neither raise nor write
  t = special("lidx0", 16)
  run = t.lt(8)
  inside, idx = if_(run), run.where(t, t * 1000)
  prog = linear(inside, store(glob(0, F32), idx, load(glob(1, F32), idx, F32) + 1.0), endif(inside))
  out = run_emu(prog, [np.zeros(16, np.float32), np.ones(16, np.float32)])[0]
  np.testing.assert_array_equal(out, [2.0] * 8 + [0.0] * 8)

def test_store_conflict() -> None:
  t = special("lidx0", 8)
  with pytest.raises(RaceError, match=r"\(0, 0, 0\) and .* thread \(1, 0, 0\) store different values to data0\[0\]"):
    run_emu(linear(store(glob(0, I32), c(0), t)), [np.zeros(1, np.int32)])
  out = run_emu(linear(store(glob(0, I32), t // 4, c(7))), [np.zeros(2, np.int32)])[0]  # the same value: benign
  np.testing.assert_array_equal(out, [7, 7])

def test_unwritten_shared_read() -> None:
  t, tmp = special("lidx0", 8), shared("temp0", 8)
  with pytest.raises(EmuError, match=r"reads temp0\[0\], which no thread wrote"):
    run_emu(linear(store(glob(0, F32), t, load(tmp, c(0), F32))), [np.zeros(8, np.float32)])

def test_own_shared_writes_need_no_barrier() -> None:
  # a thread reading back what it wrote itself is ordered by program order, barrier or not
  t, tmp = special("lidx0", 8), shared("temp0", 8)
  put = store(tmp, t, t.cast(F32))
  again = load(tmp, t * 1, F32)  # t * 1: not the interned load of t, which comes before the second store
  out = run_emu(linear(put, store(tmp, t, load(tmp, t, F32) * 2.0), store(glob(0, F32), t, again)),
                [np.zeros(8, np.float32)])[0]
  np.testing.assert_array_equal(out, np.arange(8) * 2)

def test_nonuniform_loop_bound() -> None:
  t = special("lidx0", 4)
  r = UOp(Ops.RANGE, I32, (c(0), t), (0, "reduce"))
  with pytest.raises(EmuError, match="loop bounds must be uniform"):
    run_emu(linear(store(glob(0, I32), t, r), end(r)), [np.zeros(4, np.int32)])

def test_divergent_barrier() -> None:
  t, tmp = special("lidx0", 8), shared("temp0", 8)
  inside = if_(t.lt(4))
  prog = linear(store(tmp, t, c(1.0, F32)), inside, barrier(inside), endif(inside))
  with pytest.raises(EmuError, match=r"thread \(4, 0, 0\) skips a BARRIER"): run_emu(prog, [])

@pytest.mark.parametrize("prog,what", [
  (lambda: linear(store(glob(0, I32), special("lidx0", 2048), c(1))), "over the limits"),
  (lambda: linear(store(glob(0, I32), special("lidx0", 32) + special("lidx1", 64), c(1))), "2048 threads in a block"),
])
def test_invalid_launches(prog: Callable[[], list[UOp]], what: str) -> None:
  with pytest.raises(ValueError, match=what): run_emu(prog(), [np.zeros(4096, np.int32)])

def test_launch_dims_must_match_the_ids() -> None:
  prog = linear(store(glob(0, I32), special("gidx0", 4) * 2 + special("lidx0", 2), c(1)))
  assert launch_dims(prog).kwargs() == {"global_size": (4, 1, 1), "local_size": (2, 1, 1), "core_count": 1}
  np.testing.assert_array_equal(run_emu(prog, [np.zeros(8, np.int32)])[0], np.ones(8))
  with pytest.raises(ValueError, match=r"gidx0 counts to 4, but the launch .* gives it 2"):
    run_emu(prog, [np.zeros(8, np.int32)], global_size=(2, 1, 1))

@pytest.mark.parametrize("prog,what", [
  (lambda: linear(rng(4)), "never closed"),
  (lambda: linear(store(shared("big", 16 * 1024), c(0), c(1.0, F32))), "bytes of shared memory"),
  (lambda: linear(store(glob(0, I32), special("core0", 2), c(1))), "not a GPU id"),
  (lambda: linear(store(glob(0, F32), c(0), c(1))), "STORE of dtypes.int32 through a dtypes.float32.ptr"),
])
def test_invalid_programs_do_not_compile(prog: Callable[[], list[UOp]], what: str) -> None:
  with pytest.raises(ValueError, match=what): compile_emu(prog())

# ---- the engine: an output of 0 elements gets its buffer and no kernel (a kernel stored one element into it) ----

def _empty_outputs(dev: str) -> tuple[list[Tensor], list[np.ndarray]]:
  """Outputs of 0 elements realized with others (of other shapes, reduces, writes into empty slices), on `dev`, and
  numpy's values for them."""
  x = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device=dev).realize()
  t = Tensor.zeros(3, 4, device=dev).contiguous().realize()
  t[:, 1:1] = 5.0  # an empty assign target
  empty = Tensor.ones(0, 3, device=dev).contiguous()
  outs = [empty, Tensor.ones(2, device=dev).contiguous(), x[:0].sum(1), x.sum(1), empty.sum(0), (x[:, :0] + 1).exp(),
          t[2:2].assign(Tensor.ones(0, 4, device=dev)), t + 1]
  a = np.arange(12, dtype=np.float32).reshape(4, 3)
  return outs, [np.ones((0, 3)), np.ones(2), np.zeros(0), a.sum(1), np.zeros(3), np.ones((4, 0)), np.ones((0, 4)),
                np.ones((3, 4))]

@pytest.mark.parametrize("dev", ["EMU", "CPU", "CUDACPU"])
def test_outputs_of_zero_elements_run_no_kernel(dev: str) -> None:
  if dev == "CUDACPU" and shutil.which("g++") is None: pytest.skip("CUDACPU needs g++")
  for _ in range(2):  # the second time from the schedule cache, with new buffers (the empty ones too)
    outs, want = _empty_outputs(dev)
    GlobalCounters.reset()
    Tensor.realize(*outs)
    # a kernel for each output that has elements: ones(2), x.sum(1), t + 1 (a sum over an empty axis is a constant)
    assert GlobalCounters.kernel_count == 3
    for out, w in zip(outs, want): np.testing.assert_array_equal(out.numpy(), w)
    assert outs[0].lazydata.op is Ops.VIEW and outs[0].lazydata.src[0].op is Ops.BUFFER  # realized: a buffer

# ---- traffic counters: bytes each warp's access moves, and shared-memory bank replays ----

def traffic(uops: list[UOp], arrays: list[np.ndarray], **launch: Any) -> Traffic:
  got = launch_emu(uops, arrays, **launch)[0].traffic
  assert got is not None
  return got

@pytest.mark.parametrize("count", [1, 4])
def test_traffic_of_a_copy(count: int) -> None:
  # 8 blocks of 8 threads: each warp is a part of one, as on a GPU
  n = 64 * count
  got = traffic(shifted_copy(0, count), [np.zeros(n, np.float32), np.zeros(n, np.float32)])
  assert got == Traffic(global_load=n * 4, global_store=n * 4)

def test_traffic_of_an_elementwise_loop() -> None:
  prog = elementwise([lambda x, y: x * y + x, lambda x, y: x.lt(y)], [F32, F32], [F32, dtypes.bool], 64, 4)
  got = traffic(prog, [np.zeros(64, np.float32), np.zeros(64, bool), randn(64), randn(64)])
  assert got == Traffic(global_load=2 * 64 * 4, global_store=64 * 4 + 64)

@pytest.mark.parametrize("threads,gated", [(64, False), (8, False), (64, True)])
def test_lanes_of_a_warp_share_an_element(threads: int, gated: bool) -> None:
  # thread t reads in[t // 4]: a warp reads each of its elements once; lanes gated off read nothing
  t = special("lidx0", threads)
  gate = t.lt(32) if gated else None
  value = load(glob(1, F32), t // 4, F32, *([gate, c(0.0, F32)] if gate is not None else []))
  got = traffic(linear(store(glob(0, F32), t, value)), [np.zeros(threads, np.float32), randn(threads // 4)])
  read = threads // 2 if gated else threads
  assert got == Traffic(global_load=read, global_store=threads * 4)

def test_traffic_in_a_loop() -> None:
  # a load whose indices move alike in every lane moves as many bytes again; one whose pattern changes is counted anew
  t, r = special("lidx0", 64), rng(2)
  prog = linear(r, store(glob(0, F32), r * 64 + t, load(glob(1, F32), t // (r + 1), F32)), end(r))
  got = traffic(prog, [np.zeros(128, np.float32), randn(64)])
  assert got == Traffic(global_load=(64 + 32) * 4, global_store=128 * 4)

def test_traffic_of_a_group_reduce() -> None:
  # 8 blocks of 16 threads: 16 floats a block into shared memory, thread 0 reads them back one by one
  got = traffic(group_reduce(8, 64, 16), [np.zeros(8, np.float32), randn(8, 64)])
  assert got == Traffic(global_load=8 * 64 * 4, global_store=8 * 4, shared_load=8 * 16 * 4, shared_store=8 * 16 * 4)

@pytest.mark.parametrize("stride,width,replays", [(1, 1, 0), (2, 1, 1), (32, 1, 31), (33, 1, 0), (4, 4, 0),
                                                  (8, 4, 4), (0, 1, 0)])
def test_bank_conflicts(stride: int, width: int, replays: int) -> None:
  # two warps each write and read back shared[t * stride : + width]: a stride of 32 words puts all 32 lanes in one
  # bank, 33 spreads them over all; a float4 a lane takes 4 wavefronts, the fewest its 512 bytes need, but at a
  # stride of 8 words its 128 words fill only 16 banks (8 a bank); a stride of 0 is a broadcast
  t, tmp = special("lidx0", 64), shared("temp0", 64 * 33)
  at = t * stride
  value = t.cast(F32) if width == 1 else UOp(Ops.VECTORIZE, F32.vec(width), tuple(t.cast(F32) for _ in range(width)))
  put = store(tmp, at, value if stride else c(1.0, F32))
  out = store(glob(0, F32), t * width, load(tmp, at, F32.vec(width)))
  got = traffic(linear(put, barrier(put), out), [np.zeros(64 * width, np.float32)])
  moved = 2 * 4 * width if stride == 0 else 64 * 4 * width
  assert got == Traffic(global_store=64 * 4 * width, shared_load=moved, shared_store=moved,
                        bank_conflicts=2 * 2 * replays)

def test_traffic_on_the_debug_line(capsys: pytest.CaptureFixture[str]) -> None:
  n = 1 << 18  # 1 MiB of float32
  a, b = Tensor(randn(n), device="EMU"), Tensor(randn(n, seed=1), device="EMU")
  a.realize(), b.realize()
  with Context(DEBUG=2): (a + b).realize()
  line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("*** EMU")][-1]
  assert line.endswith("global ld 2.000 st 1.000 MiB, shared ld 0.000 st 0.000 MiB, 0 bank replays")
  with Context(DEBUG=2): Tensor(randn(n), device="CPU").add(1).realize()
  assert "global ld" not in capsys.readouterr().out
