"""The LLVM renderer, compiler and CPU runtime on hand-built linear programs, checked against numpy."""
import math
import os
import platform
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lazytensor.codegen.alu import alu_semantics
from lazytensor.dtype import DType, dtypes, truncate
from lazytensor.helpers import Context
from lazytensor.renderer.llvm import LLVMRenderer
from lazytensor.renderer.transcendental import SIN_REDUCED_UP_TO, pm_fast_math, xcos, xexp2, xlog2, xmod, xsin
from lazytensor.runtime.ops_cpu import (
  CorruptProgramError,
  CpuDevice,
  CPUProgram,
  LLVMCompiler,
  undefined_symbols,
  unpack_object,
)
from lazytensor.uop.opcodes import GroupOp, Ops, exec_alu
from lazytensor.uop.ops import UOp, graph_rewrite

DEV = CpuDevice("CPU")
COMPILER = LLVMCompiler()
I32, F32 = dtypes.int32, dtypes.float32
ALL = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
       dtypes.uint64, dtypes.float16, F32, dtypes.float64]

# ---- building and running linear programs ----

def c(v: Any, dt: DType = I32) -> UOp: return UOp.const(dt, v)
def like(dt: DType, x: UOp) -> DType: return dt.vec(x.dtype.count)
def glob(i: int, dt: DType) -> UOp: return UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), i)
def rng(n: int, axis: int = 0) -> UOp: return UOp(Ops.RANGE, I32, (c(0), c(n)), (axis, "global"))
def end(r: UOp) -> UOp: return UOp(Ops.ENDRANGE, dtypes.void, (r,))
def load(buf: UOp, idx: UOp, dt: DType, *gate: UOp) -> UOp: return UOp(Ops.LOAD, dt, (buf, idx, *gate))
def store(buf: UOp, idx: UOp, val: UOp, *gate: UOp) -> UOp: return UOp(Ops.STORE, dtypes.void, (buf, idx, val, *gate))

def linear(*roots: UOp) -> list[UOp]:
  """Each root's dependencies, then the root, in the order given: enough to place loops by hand."""
  out: dict[UOp, None] = {}
  for root in roots:
    for u in root.toposort: out.setdefault(u, None)
  return list(out)

def run(uops: list[UOp], arrays: list[np.ndarray], core_count: int = 1) -> list[np.ndarray]:
  """ALU semantics, render, compile and run; buffer i holds arrays[i]; returns every buffer's contents afterwards."""
  prog = CPUProgram(DEV, "kernel", COMPILER.compile(DEV.renderer.render("kernel", alu_semantics(uops))))
  handles = [DEV.allocator.alloc(a.nbytes) for a in arrays]
  for h, a in zip(handles, arrays): DEV.allocator.copyin(h, np.ascontiguousarray(a).data.cast("B"))
  prog(*handles, core_count=core_count)
  outs = [np.empty_like(a) for a in arrays]
  for h, o in zip(handles, outs): DEV.allocator.copyout(o.data.cast("B"), h)
  return outs

def elementwise(fns: list[Callable[..., UOp]], ins: list[DType], outs: list[DType], n: int, width: int) -> list[UOp]:
  """for r: out_k[r*width : (r+1)*width] = fns[k](*inputs), with buffers (outputs..., inputs...)."""
  r = rng(n // width)
  idx = r * width if width > 1 else r
  vals = [load(glob(len(outs) + i, dt), idx, dt.vec(width)) for i, dt in enumerate(ins)]
  return linear(*[store(glob(k, dt), idx, fn(*vals)) for k, (fn, dt) in enumerate(zip(fns, outs))], end(r))

def samples(dt: DType, n: int, seed: int) -> np.ndarray:
  """Random values of dt with its special values (0, -1, min, max, inf, nan, ...) at a seed-dependent position."""
  gen = np.random.default_rng(seed)
  if dt.is_bool: return gen.random(n) < 0.5
  if dt.is_float:
    special = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 0.5, -2.5, 3.75, 1e-3, 100.0]
    vals = (gen.standard_normal(n) * 4).astype(dt.np)
  else:
    special = [0, 1, -1, 2, -2, dt.min(), dt.max(), 7]
    vals = gen.integers(int(dt.min()), int(dt.max()), n, endpoint=True, dtype=dt.np)
  vals[:len(special)] = [truncate(dt, v) for v in special]
  return np.roll(vals, seed)

def assert_same(got: np.ndarray, want: np.ndarray, dt: DType, rtol: float = 0.0, msg: str = "") -> None:
  if not dt.is_float: np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=msg)
  else: np.testing.assert_allclose(got.astype(float), want.astype(float), rtol, atol=0, equal_nan=True, err_msg=msg)

# ---- loops, vectors, reductions ----

@pytest.mark.parametrize("width", [1, 8])
def test_add_loop(width: int) -> None:
  a, b = samples(F32, 64, 1), samples(F32, 64, 2)
  with np.errstate(invalid="ignore"): want = a + b
  prog = elementwise([lambda x, y: x + y], [F32, F32], [F32], 64, width)
  assert_same(run(prog, [np.zeros(64, np.float32), a, b])[0], want, F32)

def test_vectorize_gep() -> None:
  # lanes gathered from four scalar loads, a splat of a non-constant, a constant vector; GEP takes lanes out again
  g_out, g_in = glob(0, F32), glob(1, F32)
  r = rng(4)
  lanes = [load(g_in, r * 4 + i, F32) for i in range(4)]
  gathered = UOp(Ops.VECTORIZE, F32.vec(4), tuple(lanes))
  splat = UOp(Ops.VECTORIZE, F32.vec(4), (lanes[0],) * 4)
  consts = UOp(Ops.VECTORIZE, F32.vec(4), tuple(c(float(i), F32) for i in range(4)))
  v = gathered * splat + consts
  a = np.arange(16, dtype=np.float32)
  want = (a.reshape(4, 4) * a[::4, None] + np.arange(4))[:, ::-1].ravel()
  prog = linear(*[store(g_out, r * 4 + i, v.gep(3 - i)) for i in range(4)], end(r))
  assert_same(run(prog, [np.zeros(16, np.float32), a])[0], want, F32)

def reduce_program(n: int, dt: DType, op: Ops) -> list[UOp]:
  """out[0] = op-reduce of in[0:n], accumulating in a register of dtype dt (a vector: lanes combined after the loop)."""
  acc = UOp(Ops.DEFINE_ACC, dt, (UOp.const(dt, 0.0 if op is Ops.ADD else -math.inf),), 0)
  r = rng(n // dt.count)
  x = load(glob(1, F32), r * dt.count if dt.count > 1 else r, dt)
  assign = UOp(Ops.ASSIGN, dt, (acc, UOp(op, dt, (load(acc, r, dt), x))))
  e = end(r)
  lanes = [load(acc, e, dt).gep(i) for i in range(dt.count)]
  total = lanes[0]
  for lane in lanes[1:]: total = UOp(op, F32, (total, lane))
  return linear(acc, r, assign, e, store(glob(0, F32), c(0), total))

@pytest.mark.parametrize("dt", [F32, F32.vec(8)], ids=str)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX])
def test_reduce(dt: DType, op: Ops) -> None:
  a = np.random.default_rng(3).standard_normal(1024).astype(np.float32)
  got = run(reduce_program(1024, dt, op), [np.zeros(1, np.float32), a])[0][0]
  np.testing.assert_allclose(got, a.sum() if op is Ops.ADD else a.max(), rtol=1e-5)

@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="looks for x86 instructions")
def test_reduce_is_vectorized() -> None:
  # the accumulator's add is marked reassoc, which is what lets LLVM vectorize a scalar sum
  asm = COMPILER.assembly(DEV.renderer.render("kernel", reduce_program(1024, F32, Ops.ADD)))
  assert "addps" in asm, asm

def test_reduce_rows() -> None:
  # an accumulator inside an outer loop is reset on each of its iterations
  g_out, g_in = glob(0, F32), glob(1, F32)
  i, j = rng(8, 0), rng(16, 1)
  acc = UOp(Ops.DEFINE_ACC, F32, (c(0.0, F32),), 0)
  assign = UOp(Ops.ASSIGN, F32, (acc, load(acc, j, F32) + load(g_in, i * 16 + j, F32)))
  ej = end(j)
  prog = linear(i, acc, j, assign, ej, store(g_out, i, load(acc, ej, F32)), end(i))
  a = np.random.default_rng(4).standard_normal(128).astype(np.float32)
  np.testing.assert_allclose(run(prog, [np.zeros(8, np.float32), a])[0], a.reshape(8, 16).sum(1), rtol=1e-5)

def test_zero_trip_loop() -> None:
  r = rng(0)
  out = run(linear(store(glob(0, F32), r, c(1.0, F32)), end(r)), [np.zeros(4, np.float32)])[0]
  assert (out == 0).all()

# ---- gates and bools ----

@pytest.mark.parametrize("width", [1, 4])
def test_gated_load_never_touches_memory(width: int) -> None:
  # masked-off lanes point gigabytes past the buffer: touching them would crash the process
  g_out, g_in = glob(0, F32), glob(1, F32)
  r = rng(16)
  gate = r.lt(4)
  val = load(g_in, gate.where(r * width, r * 100_000_000), F32.vec(width), gate, UOp.const(F32.vec(width), 5.0))
  a = np.arange(4 * width, dtype=np.float32)
  out = run(linear(store(g_out, r * width, val), end(r)), [np.zeros(16 * width, np.float32), a])[0]
  assert_same(out, np.concatenate([a, np.full(12 * width, 5.0)]), F32)

def test_gated_store() -> None:
  g_out, g_in = glob(0, F32), glob(1, F32)
  r = rng(16)
  x = load(g_in, r, F32)
  gate = c(0.0, F32).lt(x)
  prog = linear(store(g_out, gate.where(r, r * 100_000_000), x, gate), end(r))
  a = np.random.default_rng(5).standard_normal(16).astype(np.float32)
  assert_same(run(prog, [np.full(16, -7.0, np.float32), a])[0], np.where(a > 0, a, -7.0), F32)

@pytest.mark.parametrize("width", [1, 4])
def test_bool_buffers(width: int) -> None:
  # bools are bytes in memory; any nonzero byte reads as true, stores write 0/1
  a, b = samples(dtypes.bool, 32, 1), samples(dtypes.bool, 32, 2)
  fns = [lambda x, y: x ^ y, lambda x, y: x.cast(like(dtypes.uint8, x))]
  prog = elementwise(fns, [dtypes.bool, dtypes.bool], [dtypes.bool, dtypes.uint8], 32, width)
  x, y, *_ = run(prog, [np.zeros(32, np.bool_), np.zeros(32, np.uint8), a.view(np.uint8) * 3, b])
  assert_same(x.view(np.uint8), (a ^ b).view(np.uint8), dtypes.uint8)
  assert_same(y, a.astype(np.uint8), dtypes.uint8)

# ---- every ALU op on every dtype, against numpy ----

FLOAT_OPS = [Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.TRUNC, Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV,
             Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.WHERE, Ops.MULACC]
INT_OPS = [Ops.NEG, Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR,
           Ops.XOR, Ops.SHL, Ops.SHR, Ops.WHERE, Ops.MULACC]
BOOL_OPS = [Ops.NEG, Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR, Ops.WHERE]

def c_semantics(op: Ops, dt: DType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return np.array([exec_alu(op, dt, [int(x), int(y)]) for x, y in zip(a, b)], dtype=dt.np)

def reference(op: Ops, dt: DType, a: np.ndarray, b: np.ndarray, s: np.ndarray, cond: np.ndarray) -> np.ndarray:
  table: dict[Ops, Callable[[], Any]] = {
    Ops.NEG: lambda: np.logical_not(a) if dt.is_bool else -a, Ops.EXP2: lambda: np.exp2(a),
    Ops.LOG2: lambda: np.log2(a), Ops.SIN: lambda: np.sin(a), Ops.SQRT: lambda: np.sqrt(a),
    Ops.RECIP: lambda: np.reciprocal(a), Ops.TRUNC: lambda: np.trunc(a),
    Ops.ADD: lambda: a + b, Ops.SUB: lambda: a - b, Ops.MUL: lambda: a * b, Ops.FDIV: lambda: a / b,
    Ops.IDIV: lambda: c_semantics(Ops.IDIV, dt, a, b),
    Ops.MOD: lambda: np.fmod(a, b) if dt.is_float else c_semantics(Ops.MOD, dt, a, b),
    Ops.MAX: lambda: np.maximum(a, b), Ops.CMPLT: lambda: a < b, Ops.CMPNE: lambda: a != b,
    Ops.AND: lambda: a & b, Ops.OR: lambda: a | b, Ops.XOR: lambda: a ^ b, Ops.SHL: lambda: a << s,
    Ops.SHR: lambda: a >> s, Ops.WHERE: lambda: np.where(cond, a, b), Ops.MULACC: lambda: a * b + a,
  }
  with np.errstate(all="ignore"): return np.asarray(table[op]())

def build(op: Ops, a: UOp, b: UOp, s: UOp, cond: UOp) -> UOp:
  if op in GroupOp.Unary: return UOp(op, a.dtype, (a,))
  if op is Ops.WHERE: return UOp(op, a.dtype, (cond, a, b))
  if op is Ops.MULACC: return UOp(op, a.dtype, (a, b, a))
  if op in GroupOp.Comparison: return UOp(op, like(dtypes.bool, a), (a, b))
  return UOp(op, a.dtype, (a, s if op in (Ops.SHL, Ops.SHR) else b))

@pytest.mark.parametrize("width", [1, 4])
@pytest.mark.parametrize("dt", ALL, ids=str)
def test_alu(dt: DType, width: int) -> None:
  ops = FLOAT_OPS if dt.is_float else BOOL_OPS if dt.is_bool else INT_OPS
  n = 64
  a, b, cond = samples(dt, n, 1), samples(dt, n, 2), samples(dtypes.bool, n, 3)
  s = (samples(dtypes.uint8, n, 4) % (8 * dt.itemsize)).astype(dt.np)  # shift amounts within the width
  out_dts = [dtypes.bool if op in GroupOp.Comparison else dt for op in ops]
  fns = [lambda x, y, z, w, op=op: build(op, x, y, z, w) for op in ops]
  prog = elementwise(fns, [dt, dt, dt, dtypes.bool], out_dts, n, width)
  outs = run(prog, [np.zeros(n, odt.np) for odt in out_dts] + [a, b, s, cond])
  rtol = {dtypes.float16: 1e-3, dtypes.float32: 2e-6, dtypes.float64: 1e-14}.get(dt, 0.0)
  for op, odt, got in zip(ops, out_dts, outs):
    want = reference(op, dt, a, b, s, cond)
    if op is Ops.MULACC and dt.is_float:
      # llvm.fmuladd may fuse (one rounding) or not: a host with native float16 FMA (AVX512-FP16) fuses half's
      with np.errstate(all="ignore"): fused = (a.astype(np.float64) * b + a).astype(dt.np)
      want = np.where(got == fused, fused, want)
    assert_same(got, want, odt, rtol, msg=f"{op} {dt}")

# ---- casts ----

def saturating_cast(x: np.ndarray, to: DType) -> np.ndarray:
  """The documented float -> int cast: NaN -> 0, saturate (narrow targets: to int32, uint32: to int64), then wrap."""
  wide = to if to.itemsize == 8 or to == dtypes.int32 else (dtypes.int64 if to.itemsize == 4 else dtypes.int32)
  def one(v: float) -> int: return 0 if math.isnan(v) else int(max(min(v, wide.max()), wide.min()))
  return np.array([truncate(to, one(float(v))) for v in x], dtype=to.np)

@pytest.mark.parametrize("width", [1, 8])
@pytest.mark.parametrize("fr", ALL, ids=str)
def test_cast(fr: DType, width: int) -> None:
  n = 64
  a = samples(fr, n, 1)
  if fr.is_float: a[12:] = (np.random.default_rng(5).standard_normal(n - 12) * 150).astype(fr.np)  # wraps in uint8
  tos = [dt for dt in ALL if dt != fr]
  prog = elementwise([lambda x, to=to: x.cast(like(to, x)) for to in tos], [fr], tos, n, width)
  outs = run(prog, [np.zeros(n, to.np) for to in tos] + [a])
  for to, got in zip(tos, outs):
    if fr.is_float and to.is_int: want = saturating_cast(a, to)  # NaN, inf, out of range: defined, no crash
    else:
      with np.errstate(all="ignore"): want = a.astype(to.np)
    assert_same(got, want, to, msg=f"{fr} -> {to}")
    if fr.is_float and to.is_int and not to.is_unsigned:  # in range, the same as numpy
      ok = np.isfinite(a) & (np.abs(a) < 100)
      assert_same(got[ok], a[ok].astype(to.np), to)

def test_double_to_half_rounds_once() -> None:
  # doubles just off the midpoints between halves, where rounding through float32 rounds twice and goes wrong
  halves = np.arange(0x3C00, 0x3C40, dtype=np.uint16).view(np.float16).astype(np.float64)
  mids = (halves[:-1] + halves[1:]) / 2
  x = np.concatenate([mids + 2.0 ** -40, mids - 2.0 ** -40, mids, -mids - 2.0 ** -40, [1e300, -1e-300, 65520.0]])
  x = x[:len(x) // 8 * 8]
  got = run(elementwise([lambda v: v.cast(like(dtypes.float16, v))], [dtypes.float64], [dtypes.float16], len(x), 8),
            [np.zeros(len(x), np.float16), x])[0]
  with np.errstate(over="ignore"): np.testing.assert_array_equal(got, x.astype(np.float16))

def test_bitcast() -> None:
  a = samples(F32, 64, 1)
  prog = elementwise([lambda x: x.bitcast(like(dtypes.int32, x))], [F32], [dtypes.int32], 64, 8)
  assert_same(run(prog, [np.zeros(64, np.int32), a])[0], a.view(np.int32), dtypes.int32)

@pytest.mark.parametrize("dt", [dtypes.float16, F32, dtypes.float64], ids=str)
def test_float_constants(dt: DType) -> None:
  vals = [0.1, -0.0, math.inf, -math.inf, 1e-45, 6e-8, 65504.0, 3.4e38, 1 / 3, math.nan]
  r = rng(1)
  got = run(linear(*[store(glob(0, dt), c(i), c(v, dt)) for i, v in enumerate(vals)], end(r)), [np.zeros(10, dt.np)])[0]
  with np.errstate(over="ignore"): want = np.array(vals).astype(dt.np)
  bits = f"u{dt.itemsize}"
  np.testing.assert_array_equal(got[:-1].view(bits), want[:-1].view(bits))  # bit-exact, -0.0 included
  assert np.isnan(got[-1])

# ---- threads ----

def test_core_count() -> None:
  # each core id writes its half; the workers are not pinned (runtime/cpu_threads.py: the OS keeps a spinning worker
  # off the launching thread's CPU, which it could not do for a pinned one)
  n, cores = 4096, 2
  half = n // cores
  core = UOp(Ops.SPECIAL, I32, (), ("core0", cores))
  r = rng(half)
  idx = core * half + r
  a = np.random.default_rng(6).standard_normal(n).astype(np.float32)
  prog = linear(store(glob(0, F32), idx, load(glob(1, F32), idx, F32) * 2.0 + core.cast(F32)), end(r))
  out = run(prog, [np.zeros(n, np.float32), a], core_count=cores)[0]
  assert_same(out, a * 2 + np.repeat(np.arange(cores), half).astype(np.float32), F32)
  if hasattr(os, "sched_getaffinity"):
    workers = [t for t in threading.enumerate() if t.name.startswith("lazytensor-cpu")]
    assert len(workers) >= cores - 1  # the calling thread runs shares too
    for t in workers:
      assert t.native_id is not None
      assert os.sched_getaffinity(t.native_id) == os.sched_getaffinity(0)

# ---- runtime robustness ----

def test_corrupt_program_is_detected() -> None:
  lib = COMPILER.compile(DEV.renderer.render("kernel", reduce_program(8, F32, Ops.ADD)))
  CPUProgram(DEV, "kernel", lib)
  for bad in (lib[:-10], lib[:40] + bytes([lib[40] ^ 1]) + lib[41:], b"", lib[16:]):
    with pytest.raises(CorruptProgramError): CPUProgram(DEV, "kernel", bad)

def test_unresolvable_call_is_an_error() -> None:
  # MCJIT would leave the call as a null address and crash at run time: compile refuses instead
  src = "declare void @no_such_fn()\ndefine void @kernel(i32 %core_id) {\n  call void @no_such_fn()\n  ret void\n}\n"
  with pytest.raises(RuntimeError, match="no_such_fn"): COMPILER.compile(src)

@pytest.mark.skipif(platform.system() != "Linux", reason="reads ELF objects")
def test_libm_calls_link() -> None:
  prog = elementwise([lambda x: UOp(Ops.SIN, x.dtype, (x,))], [F32], [F32], 64, 8)
  lib = COMPILER.compile(DEV.renderer.render("kernel", prog))
  assert "sinf" in undefined_symbols(unpack_object(lib))
  assert "kernel" in COMPILER.disassemble(lib)

@pytest.mark.parametrize("op", [Ops.BARRIER, Ops.IF, Ops.DEFINE_LOCAL, Ops.WMMA])
def test_gpu_ops_are_rejected(op: Ops) -> None:
  with pytest.raises(NotImplementedError, match=op.name): LLVMRenderer().render("kernel", [UOp(op)])

def test_fastmath_knob() -> None:
  assert LLVMRenderer().extra_matcher is pm_fast_math
  with Context(FASTMATH=False): assert LLVMRenderer().extra_matcher is None

# ---- polynomial exp2 / log2 ----

def ulp_error(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
  """|got - exact| in units of the float32 spacing at the exact value (the denormal spacing below 2^-126)."""
  spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
  return np.abs(got.astype(np.float64) - exact) / spacing

def run_unary(fn: Callable[[UOp], UOp], x: np.ndarray, width: int) -> np.ndarray:
  dt = dtypes.from_np(x.dtype)
  return run(elementwise([fn], [dt], [dt], len(x), width), [np.zeros_like(x), x])[0]

EDGES = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 127.0, 127.99999, 128.0, 129.0, -126.0, -126.5, -149.0,
                  -149.5, -150.0, -151.0, -1000.0, 1e30, 1e-40, -1e-40, 2.0 ** -126, 0.5, 3.0], dtype=np.float32)

def sweep_exp2() -> np.ndarray:
  gen = np.random.default_rng(7)
  tiny = gen.standard_normal(1 << 18).astype(np.float32) * 1e-6
  return np.concatenate([EDGES, np.linspace(-155, 130, 1 << 20, dtype=np.float32),
                         gen.uniform(-1, 1, 1 << 18).astype(np.float32), tiny])

def sweep_log2() -> np.ndarray:
  gen = np.random.default_rng(8)
  bits = gen.integers(0, 0x7F800000, 1 << 20, dtype=np.uint32)  # every positive finite float, denormals included
  near_one = np.linspace(0.9, 1.1, 1 << 18, dtype=np.float32)
  return np.concatenate([EDGES, np.abs(EDGES) * 3, -np.abs(EDGES) - 1, bits.view(np.float32), near_one])

def check_special(got: np.ndarray, exact: np.ndarray, what: str) -> np.ndarray:
  """Results that round to inf or are NaN must match exactly; returns the mask of the rest (zeros included: an
  underflow is measured in denormal ulps)."""
  with np.errstate(over="ignore"): rounded = exact.astype(np.float32)
  finite = np.isfinite(rounded)
  np.testing.assert_array_equal(got[~finite], rounded[~finite], err_msg=what)
  return finite

@pytest.mark.parametrize("width", [1, 8])
@pytest.mark.parametrize("name", ["exp2", "log2"])
def test_fast_float32(name: str, width: int) -> None:
  fn, x = (xexp2, sweep_exp2()) if name == "exp2" else (xlog2, sweep_log2())
  x = x[:len(x) // width * width]
  got = run_unary(fn, x, width)
  with np.errstate(all="ignore"): exact = (np.exp2 if name == "exp2" else np.log2)(x.astype(np.float64))
  finite = check_special(got, exact, name)
  err = ulp_error(got[finite], exact[finite])
  assert err.max() <= 1.5, f"{name}: {err.max():.2f} ulp at x={x[finite][err.argmax()]!r}"

def evaluate_with_numpy(root: UOp, leaf: UOp, x: np.ndarray) -> np.ndarray:
  """`root`, a scalar graph of `leaf`, evaluated with numpy on the values `x` (under the caller's np.errstate)."""
  vals: dict[UOp, Any] = {leaf: x}
  for u in root.toposort:
    if u in vals: continue
    src = [vals[s] for s in u.src]
    np_dt = u.dtype.scalar().np
    if u.op is Ops.CONST: vals[u] = np.array(u.arg, dtype=np_dt)
    elif u.op is Ops.BITCAST: vals[u] = np.asarray(src[0]).view(np_dt)
    elif u.op is Ops.CAST: vals[u] = np.asarray(src[0]).astype(np_dt)
    elif u.op is Ops.WHERE: vals[u] = np.where(*src).astype(np_dt)
    elif u.op is Ops.MULACC: vals[u] = src[0] * src[1] + src[2]
    else: vals[u] = {Ops.CMPLT: np.less, Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply,
                     Ops.SHL: np.left_shift, Ops.SHR: np.right_shift}[u.op](*src)
  return np.asarray(vals[root])

@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64], ids=str)
def test_exp2_of_what_rounds_to_zero_takes_no_tiny_product(dt: DType) -> None:
  """exp2 of -inf (a causal softmax's masked half) or of anything whose result rounds to 0 is 0 without a product
  below the normal range on the way: such a product costs a microcode assist of ~100 cycles per lane on x86 (12 x
  128x128 causal scores on one AVX-512 thread: 660 us, 110 for zeros). The exact denormals above stay exact."""
  leaf = UOp(Ops.DEFINE_VAR, dt, arg=("x", -math.inf, math.inf))
  x = np.array([-np.inf, -1e30, -2000.0, -1076.0] if dt == dtypes.float64 else [-np.inf, -1e30, -1000.0, -151.0],
               dtype=dt.np)
  with np.errstate(under="raise", over="ignore", invalid="ignore"):
    np.testing.assert_array_equal(evaluate_with_numpy(xexp2(leaf), leaf, x), np.zeros_like(x))

def sweep_sin() -> np.ndarray:
  gen = np.random.default_rng(9)
  mags = np.exp2(gen.uniform(-149, 128, 1 << 16)) * np.sign(gen.standard_normal(1 << 16))  # every exponent
  near = np.float32(SIN_REDUCED_UP_TO) + np.arange(-64, 64, dtype=np.float32) * 0.125  # both sides of the libm switch
  pi_multiples = (np.arange(-1000, 1000) * (np.pi / 2)).astype(np.float32)  # the remainder cancels most here
  return np.concatenate([EDGES, near, -near, pi_multiples, mags.astype(np.float32), np.linspace(-100, 100, 1 << 18,
                         dtype=np.float32), gen.uniform(-3e6, 3e6, 1 << 18).astype(np.float32)])

def sweep_f64(name: str) -> np.ndarray:
  gen = np.random.default_rng(11)
  edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1023.0, 1023.999, 1024.0, 1025.0, -1022.0,
                    -1022.5, -1074.0, -1074.5, -1075.0, -1076.0, -2000.0, 1e300, 5e-324, -5e-324, 2.0 ** -1022, 0.5])
  if name == "exp2":
    return np.concatenate([edges, np.linspace(-1080, 1030, 1 << 18), gen.uniform(-1, 1, 1 << 16),
                           gen.standard_normal(1 << 14) * 1e-10])
  every = gen.integers(0, 0x7FF0000000000000, 1 << 18, dtype=np.uint64).view(np.float64)  # denormals included
  return np.concatenate([edges, np.abs(edges) * 3, every, np.linspace(0.9, 1.1, 1 << 16),
                         1 + gen.standard_normal(1 << 14) * 1e-12])

@pytest.mark.parametrize("width", [1, 4])
@pytest.mark.parametrize("name", ["exp2", "log2"])
def test_fast_float64(name: str, width: int) -> None:
  """float64 exp2/log2 as arithmetic: within 1 ulp of numpy's (libm), infinities, NaN, zeros and denormals alike."""
  x = sweep_f64(name)
  x = x[:len(x) // width * width]
  got = run_unary(xexp2 if name == "exp2" else xlog2, x, width)
  with np.errstate(all="ignore"): want = (np.exp2 if name == "exp2" else np.log2)(x)
  normal = np.isfinite(want) & (want != 0)
  np.testing.assert_array_equal(got[~normal], want[~normal])
  err = np.abs(got[normal] - want[normal]) / np.spacing(np.abs(want[normal]))
  assert err.max() <= 1.0, f"{name}: {err.max():.2f} ulp at x={x[normal][err.argmax()]!r}"

@pytest.mark.parametrize("width", [1, 8])
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_fast_sin_cos_float32(name: str, width: int) -> None:
  """Vectors that mix lanes below and above SIN_REDUCED_UP_TO take the branch to libm for the latter: every lane
  within half an ulp (plus the float64 evaluation's 1e-11), cos near its zeros too, sin keeps -0.0, NaN for
  infinities and NaN."""
  x = sweep_sin()
  x = x[:len(x) // width * width]
  got = run_unary(xsin if name == "sin" else xcos, x, width)
  with np.errstate(invalid="ignore"): exact = (np.sin if name == "sin" else np.cos)(x.astype(np.float64))
  finite = check_special(got, exact, name)
  err = ulp_error(got[finite], exact[finite])
  assert err.max() <= 0.501, f"{name}: {err.max():.4f} ulp at x={x[finite][err.argmax()]!r}"
  if name == "sin": np.testing.assert_array_equal(np.signbit(got[x == 0]), np.signbit(x[x == 0]))

@pytest.mark.parametrize("fns", [[xsin], [xsin, xcos]])
def test_libm_calls_are_branched(fns: list[Callable[[UOp], UOp]]) -> None:
  """The libm calls for the lanes past the reduction sit behind a branch on any lane needing them: as a select, all
  eight lanes would call it for every vector. They call the C functions (not llvm.sin/llvm.cos, which LLVM turned into
  an unconditional sincos when both were there)."""
  src = DEV.renderer.render("kernel", alu_semantics(elementwise(fns, [F32], [F32] * len(fns), 64, 8)))
  lines = src.splitlines()
  assert not any("@llvm.sin" in line or "@llvm.cos" in line for line in lines)
  calls = [i for i, line in enumerate(lines) if "call double @sin(" in line or "call double @cos(" in line]
  assert len(calls) == 8 * len(fns)
  for i in calls:
    block = max(j for j in range(i) if lines[j].endswith(":"))  # the label of the call's block
    assert lines[block].startswith("call") and lines[block - 1].startswith("  br i1")
    assert "llvm.vector.reduce.or.v8i1" in lines[block - 2]

@pytest.mark.parametrize("width", [1, 8])
@pytest.mark.parametrize("dt", [F32, dtypes.float64])
@pytest.mark.parametrize("op", [Ops.SIN, Ops.COS, Ops.EXP2, Ops.LOG2])
def test_branched_libm_calls_link(op: Ops, dt: DType, width: int) -> None:
  """A WHERE that reads a libm call on its true side calls the C function (sinf, cos, ...) for its lanes alone."""
  x = np.linspace(-3, 3, 64).astype(dt.np)
  got = run(elementwise([lambda v: v.lt(1.0).where(UOp(op, v.dtype, (v,)), v)], [dt], [dt], 64, width),
            [np.zeros_like(x), x])[0]
  ref = {Ops.SIN: np.sin, Ops.COS: np.cos, Ops.EXP2: np.exp2, Ops.LOG2: np.log2}[op]
  with np.errstate(invalid="ignore"): want = np.where(x < 1.0, ref(x), x)
  np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)

def fmod_operands(dt: type) -> tuple[np.ndarray, np.ndarray]:
  gen = np.random.default_rng(10)
  n = 1 << 16
  def wide() -> np.ndarray: return np.exp2(gen.uniform(-149, 128, n)) * np.sign(gen.standard_normal(n))
  special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.0, -3.0]
  pairs = [(x, y) for x in special for y in special]
  a = np.concatenate([[p[0] for p in pairs], gen.standard_normal(n) * 100, wide(), np.arange(-64, 64) * 0.5])
  b = np.concatenate([[p[1] for p in pairs], gen.standard_normal(n), wide(), np.full(128, -1.5)])
  with np.errstate(over="ignore"): return a.astype(dt), b.astype(dt)

@pytest.mark.parametrize("width", [1, 8])
@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_fast_fmod_is_exact(width: int, dt: type) -> None:
  """fmod in float64 arithmetic, and libm's behind a branch for quotients from 2^29, infinities, NaN and zero divisors:
  bit for bit C's fmod (numpy's), the sign of zero remainders included."""
  a, b = fmod_operands(dt)
  n = len(a) // width * width
  a, b = a[:n], b[:n]
  d = dtypes.from_np(a.dtype)
  got = run(elementwise([xmod], [d, d], [d], n, width), [np.zeros_like(a), a, b])[0]
  with np.errstate(all="ignore"): want = np.fmod(a, b)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(np.signbit(got)[~np.isnan(want)], np.signbit(want)[~np.isnan(want)])

@pytest.mark.parametrize("name", ["exp2", "log2", "sin", "cos"])
def test_fast_float16_exhaustive(name: str) -> None:
  x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
  fn, ref = {"exp2": (xexp2, np.exp2), "log2": (xlog2, np.log2), "sin": (xsin, np.sin), "cos": (xcos, np.cos)}[name]
  got = run_unary(fn, x, 8)
  with np.errstate(all="ignore"): want = ref(x.astype(np.float64)).astype(x.dtype)
  finite = np.isfinite(want) & (want != 0)
  np.testing.assert_array_equal(got[~finite], want[~finite])
  diff = np.abs(got[finite].view(np.int16).astype(np.int32) - want[finite].view(np.int16).astype(np.int32))
  assert diff.max() <= 1, f"{name}: off by {diff.max()} half ulp"

def test_fast_math_rewrite() -> None:
  # EXP2/LOG2 of float16/float32 (and vectors of them) become arithmetic; float64 keeps the intrinsic
  for dt in (dtypes.float16, F32, F32.vec(8)):
    for op in (Ops.EXP2, Ops.LOG2):
      out = graph_rewrite(UOp(op, dt, (load(glob(0, dt.scalar()), c(0), dt),)), pm_fast_math, name="renderer_rules")
      assert out.dtype == dt and not any(u.op in (Ops.EXP2, Ops.LOG2) for u in out.toposort)
    out = graph_rewrite(UOp(Ops.MOD, dt, (load(glob(0, dt.scalar()), c(0), dt), load(glob(1, dt.scalar()), c(0), dt))),
                        pm_fast_math, name="renderer_rules")
    assert out.dtype == dt and all(u.dtype.scalar() == dtypes.float64 for u in out.toposort if u.op is Ops.MOD)
    # SIN and COS keep a float64 op for the lanes past the reduction
    for op in (Ops.SIN, Ops.COS):
      out = graph_rewrite(UOp(op, dt, (load(glob(0, dt.scalar()), c(0), dt),)), pm_fast_math, name="renderer_rules")
      assert out.dtype == dt and all(u.dtype.scalar() == dtypes.float64 for u in out.toposort if u.op is op)
  f64 = UOp(Ops.EXP2, dtypes.float64, (load(glob(0, dtypes.float64), c(0), dtypes.float64),))
  out = graph_rewrite(f64, pm_fast_math, name="renderer_rules")
  assert not any(u.op is Ops.EXP2 for u in out.toposort)  # float64 too
