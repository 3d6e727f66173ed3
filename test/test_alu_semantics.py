"""ALU edge cases have one meaning (codegen/alu.py): the same expression folded as constants, run on the CPU (LLVM), on
EMU and on CUDACPU (the CUDA renderer's source, where g++ exists) gives the same answer, for every edge case and every
dtype; and the rewrite adds nothing where bounds prove an operand safe, so index math stays as it was."""
import math
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_emu import run_emu
from test_llvm_renderer import elementwise, like
from test_llvm_renderer import run as run_cpu

from lazytensor.codegen.alu import alu_semantics
from lazytensor.dtype import DType, dtypes, from_storage, to_storage, truncate
from lazytensor.renderer import launch_dims
from lazytensor.runtime.device import Device
from lazytensor.runtime.ops_cpu import CPUMemory
from lazytensor.uop.ops import Ops, UOp, graph_rewrite
from lazytensor.uop.symbolic import symbolic

INTS = [dt for dt in dtypes.all() if dt.is_int]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]

def int_cases(dt: DType) -> list[tuple[int, int]]:
  lo, hi, width = int(dt.min()), int(dt.max()), 8 * dt.itemsize
  pairs = [(7, 0), (0, 0), (lo, 0), (hi, 0), (7, 2), (lo, 1), (hi, hi), (5, width), (5, width + 1), (hi, width - 1),
           (3, 63 if width == 64 else width * 2)]
  if not dt.is_unsigned: pairs += [(lo, -1), (7, -1), (-7, 2), (-7, -2), (-1, width), (lo, width), (-5, -1), (5, lo)]
  return [(truncate(dt, a), truncate(dt, b)) for a, b in pairs]

def folded(op: Ops, dt: DType, *args: Any, fr: DType | None = None) -> Any:
  """The expression built from constants and simplified: what constant folding makes of it."""
  srcs = tuple(UOp.const(fr or dt, a) for a in args)
  out_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else dt
  node = UOp(op, out_dt, srcs)
  out = graph_rewrite(node, symbolic, name="symbolic")
  assert out.op is Ops.CONST, f"{op} of {args} did not fold: {out}"
  return out.arg

def run_cudacpu(uops: list[UOp], arrays: list[np.ndarray]) -> list[np.ndarray]:
  """ALU semantics, the CUDA renderer, g++ and the CUDACPU runtime; buffer i holds arrays[i]; returns the buffers."""
  dev = Device["CUDACPU"]
  prog = dev.load("kernel", dev.compiler.compile_cached(dev.renderer.render("kernel", alu_semantics(uops))))
  bufs = [np.ascontiguousarray(a).copy() for a in arrays]
  launch = launch_dims(uops)
  prog(*[CPUMemory(b.view(np.uint8).reshape(-1), b.ctypes.data) for b in bufs], global_size=launch.global_size,
       local_size=launch.local_size)
  return bufs

RUNS = {"CPU": run_cpu, "EMU": run_emu, **({"CUDACPU": run_cudacpu} if shutil.which("g++") else {})}

def on_devices(fns: list[Callable[..., UOp]], ins: list[np.ndarray], in_dts: list[DType],
               out_dts: list[DType]) -> dict[str, list[np.ndarray]]:
  """out_k = fns[k](*inputs) elementwise, as one kernel (one compile a device), on each device of RUNS."""
  n = len(ins[0])
  prog = elementwise(fns, in_dts, out_dts, n, 1)
  outs = [np.zeros(n, dt.np) for dt in out_dts]
  return {device: run(prog, [*outs, *ins])[:len(outs)] for device, run in RUNS.items()}

def alu(op: Ops, out_dt: DType) -> Callable[..., UOp]: return lambda *xs: UOp(op, like(out_dt, xs[0]), xs)

INT_OPS = [Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR]

@pytest.mark.parametrize("dt", INTS, ids=str)
def test_int_edges_agree(dt: DType) -> None:
  cases = int_cases(dt)
  a, b = (np.array([c[i] for c in cases], dt.np) for i in (0, 1))
  wants = [np.array([folded(op, dt, x, y) for x, y in cases], dt.np) for op in INT_OPS]
  for device, gots in on_devices([alu(op, dt) for op in INT_OPS], [a, b], [dt, dt], [dt] * len(INT_OPS)).items():
    for op, got, want in zip(INT_OPS, gots, wants):
      np.testing.assert_array_equal(got, want, err_msg=f"{op} {dt} on {device}, cases {cases}")

def test_the_int_answers() -> None:
  i32 = dtypes.int32
  assert [folded(Ops.IDIV, i32, a, b) for a, b in [(7, 0), (-2**31, -1), (-7, 2), (7, -1)]] == [0, -2**31, -3, -7]
  assert [folded(Ops.MOD, i32, a, b) for a, b in [(7, 0), (-2**31, -1), (-7, 2), (7, -2)]] == [0, 0, -1, 1]
  assert [folded(Ops.SHL, i32, 1, b) for b in (31, 32, -1)] == [-2**31, 0, 0]
  assert [folded(Ops.SHR, i32, -8, b) for b in (1, 32, 100, -1)] == [-4, -1, -1, -1]
  assert [folded(Ops.SHR, dtypes.uint8, 200, b) for b in (7, 8, 255)] == [1, 0, 0]

FLOAT_SPECIALS = [math.nan, math.inf, -math.inf, 1e20, -1e20, 3e9, -3e9, 70000.0, 300.7, -300.7, 255.9, 256.0, -1.5,
                  -0.5, 0.0, 2.0**31, -2.0**31, 2.0**32, 2.0**63, -2.0**63, 2.0**64, 65504.0, -65504.0]

@pytest.mark.parametrize("fr", FLOATS, ids=str)
def test_float_to_int_agrees(fr: DType) -> None:
  with np.errstate(over="ignore"): x = to_storage(np.array(FLOAT_SPECIALS), fr)  # rounded to fr: 1e20 is inf in f16
  wants = [np.array([folded(Ops.CAST, to, float(v), fr=fr) for v in from_storage(x, fr)], to.np) for to in INTS]
  casts = [lambda v, to=to: v.cast(like(to, v)) for to in INTS]
  for device, gots in on_devices(casts, [x], [fr], INTS).items():
    for to, got, want in zip(INTS, gots, wants):
      np.testing.assert_array_equal(got, want, err_msg=f"{fr} -> {to} on {device} of {x}")

def test_float_to_int_answers() -> None:
  def cast(v: float, to: DType) -> Any: return folded(Ops.CAST, to, v, fr=dtypes.float32)
  assert [cast(v, dtypes.int32) for v in (math.nan, 3e9, -3e9, math.inf, -2.7)] == [0, 2**31 - 1, -2**31, 2**31 - 1, -2]
  assert [cast(v, dtypes.uint8) for v in (300.0, -1.0, 1e10)] == [44, 255, 255]  # via int32, then wrapped
  assert [cast(v, dtypes.uint32) for v in (-1.0, 5e9)] == [2**32 - 1, int(np.float32(5e9)) % 2**32]  # via int64

NAN_OPS = [Ops.MAX, Ops.CMPLT, Ops.CMPNE]

@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_nan_agrees(dt: DType) -> None:
  vals = [math.nan, 1.0, -math.inf, math.inf, -0.0]
  cases = [(x, y) for x in vals for y in vals]
  a, b = (from_storage(to_storage(np.array([c[i] for c in cases]), dt), dt) for i in (0, 1))  # values of dt
  out_dts = [dt if op is Ops.MAX else dtypes.bool for op in NAN_OPS]
  wants = [np.array([folded(op, dt, float(x), float(y)) for x, y in zip(a, b)]) for op in NAN_OPS]
  assert np.isnan(wants[0]).sum() == 9  # MAX is NaN when either operand is
  ops = [alu(op, o) for op, o in zip(NAN_OPS, out_dts)]
  for device, gots in on_devices(ops, [to_storage(a, dt), to_storage(b, dt)], [dt, dt], out_dts).items():
    for op, o, got, want in zip(NAN_OPS, out_dts, gots, wants):
      np.testing.assert_array_equal(from_storage(got, o), want.astype(from_storage(got, o).dtype),
                                    err_msg=f"{op} {dt} on {device}")

def test_minimum_propagates_nan() -> None:
  x = UOp.const(dtypes.float32, 1.0)
  assert math.isnan(graph_rewrite(x.minimum(UOp.const(dtypes.float32, math.nan)), symbolic, name="symbolic").arg)

def test_safe_operands_are_left_alone() -> None:
  # a constant divisor (index math), an amount the bounds keep in range, a known-positive divisor: nothing added
  i32 = dtypes.int32
  idx = UOp(Ops.RANGE, i32, (UOp.const(i32, 0), UOp.const(i32, 64)), (0, "global"))
  buf = UOp(Ops.DEFINE_GLOBAL, i32.ptr(), (), 0)
  exprs = [idx // 7, idx % 7, idx << 3, (idx >> 2) + idx // (idx + 1)]
  prog = [u for e in exprs for u in UOp(Ops.STORE, dtypes.void, (buf, idx, e)).toposort]
  assert alu_semantics(prog) == list(dict.fromkeys(prog))

def test_emu_rejects_unrewritten_edge_cases() -> None:
  from test_emu import EMU, compile_emu
  from test_llvm_renderer import c, end, glob, load, rng, store

  from lazytensor.renderer.emu import parse_program
  from lazytensor.runtime.ops_emu import EmuError, EmuProgram
  r = rng(4)
  prog = [*dict.fromkeys(store(glob(0, dtypes.int32), r, load(glob(1, dtypes.int32), r, dtypes.int32) // c(0))
                         .toposort), end(r)]
  raw = EmuProgram(EMU, "kernel", EMU.renderer.render("kernel", prog).encode())  # past the rewrite on purpose
  bufs = [EMU.allocator.alloc(16), EMU.allocator.alloc(16)]
  with pytest.raises(EmuError, match="division by 0"): raw(*bufs)
  assert parse_program(EMU.renderer.render("kernel", prog))[1] == prog
  compile_emu(prog)(*bufs)  # with it, x/0 is 0
  assert (bufs[0].view(np.int32) == 0).all()
