"""Linear program -> LLVM IR text for the CPU: one function a kernel, loops in the canonical shape (header phi, latch,
exit) that LLVM's O3 pipeline vectorizes and unrolls.

The function is `void @name(ptr %data0, ..., ptr %dataN-1, i32 %core_id)`: the buffers in argument order, then the id
of the core that runs this call (SPECIAL core*).
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from lazytensor.dtype import DType, PtrDType, dtypes, to_storage
from lazytensor.helpers import CPU_TARGET, FASTMATH, FTZ
from lazytensor.renderer import VAR_SLOT, Renderer
from lazytensor.renderer.cpu_target import CPUTarget, cpu_target
from lazytensor.renderer.transcendental import pm_fast_math
from lazytensor.uop.ops import GroupOp, Ops, PatternMatcher, UOp

_SCALAR = {"bool": "i1", "int8": "i8", "uint8": "i8", "int16": "i16", "uint16": "i16", "int32": "i32", "uint32": "i32",
           "int64": "i64", "uint64": "i64", "float16": "half", "float32": "float", "float64": "double",
           "bfloat16": "i16"}  # bfloat16 as its bits: codegen/alu.py leaves only loads, stores, selects and f32 casts
_SUFFIX = {"half": "f16", "float": "f32", "double": "f64"}  # float types in intrinsic names (ints spell themselves)

def ltype(dt: DType) -> str:
  """The LLVM type of a value (bool is i1 in registers)."""
  return f"<{dt.count} x {_SCALAR[dt.name]}>" if dt.count > 1 else _SCALAR[dt.name]

def mtype(dt: DType) -> str:
  """The LLVM type of a value in memory: a bool is stored as one byte, 0 or 1."""
  return ltype(dtypes.uint8.vec(dt.count) if dt.is_bool else dt)

def suffix(dt: DType) -> str:
  """The overload suffix of an intrinsic: f32, v8f32, i64, v4i1."""
  s = _SCALAR[dt.name]
  return f"v{dt.count}{_SUFFIX.get(s, s)}" if dt.count > 1 else _SUFFIX.get(s, s)

def lconst(dt: DType, v: Any) -> str:
  """A scalar constant. Floats are written as the hex of their double value, which LLVM reads exactly for any float type
  (decimal text would have to be exact in the type, and inf/nan have no decimal form)."""
  if dt.is_bool: return "true" if v else "false"
  if dt.is_int: return str(int(v))
  if dt.scalar() == dtypes.bfloat16:
    bits = int(to_storage(np.array(float(v)), dtypes.bfloat16))
    return str(bits - (1 << 16) if bits >= 1 << 15 else bits)  # an i16 literal is signed
  with np.errstate(over="ignore"): exact = float(np.array(v, dtype=dt.scalar().np))
  return f"0x{struct.unpack('<Q', struct.pack('<d', exact))[0]:016X}"

def lconst_vec(dt: DType, v: Any) -> str:
  """The constant v of dt, as a splat vector when dt is one."""
  if dt.count == 1: return lconst(dt, v)
  one = f"{ltype(dt.scalar())} {lconst(dt.scalar(), v)}"
  return "<" + ", ".join([one] * dt.count) + ">"

# ---- ALU ops: per op, per kind of operand ("f" float, "i" signed, "u" unsigned, "b" bool), a builder that emits code.
# Format keys: {0}.. operands, {t} operand type, {s} its intrinsic suffix, {c} the bool type of the same width,
# {one} the constant 1 of the type, {fl} fast-math flags, {nw} no-wrap flags.

Builder = Callable[["_Function", dict[str, str], list[str]], str]

def _ins(fmt: str) -> Builder:
  return lambda f, env, xs: f.emit(fmt.format(*xs, **env))

def _bin(instr: str) -> Builder: return _ins(instr + " {t} {0}, {1}")

def _intr(name: str) -> Builder:
  return lambda f, env, xs: f.call(f"llvm.{name}.{env['s']}", env["t"], [(env["t"], x) for x in xs], env["fl"])

def _int_mulacc(f: _Function, env: dict[str, str], xs: list[str]) -> str:
  return _bin("add")(f, env, [_bin("mul")(f, env, xs[:2]), xs[2]])

# ---- DOT4: an int8 dot product in groups of 4 bytes (uop/ops.py), with the accumulator it is added to when it is
# the one use of the dot product (the reduce loop of an int8 matmul): VNNI adds into it in the same instruction

_PMADDWD = {4: "sse2.pmadd.wd", 8: "avx2.pmadd.wd", 16: "avx512.pmaddw.d.512"}

def _dot4_vnni(f: _Function, n: int, a: str, b: str, acc: str | None) -> str:
  """vpdpbusd: per int32 lane, a's 4 bytes unsigned times b's signed, added to acc, in one instruction."""
  t = f"<{n} x i32>"
  return f.call(f"llvm.x86.avx512.vpdpbusd.{32 * n}", t, [(t, acc or "zeroinitializer"), (t, a), (t, b)])

def _dot4_pmaddwd(f: _Function, n: int, a: str, b: str) -> str:
  """Without VNNI: the bytes widened to 16 bits in place (the even ones by masking or shifting left and back, the odd
  ones by shifting right: zero-extended for a, sign-extended for b), then vpmaddwd multiplies 16-bit pairs and adds
  each pair into 32 bits: a0*b0 + a2*b2 and a1*b1 + a3*b3, exact. (vpmaddubsw takes the bytes as they are, but
  saturates its 16-bit pair sums: 255*127*2 does not fit.)"""
  t, w = f"<{n} x i32>", f"<{2 * n} x i16>"
  def k(v: int) -> str: return lconst_vec(dtypes.int16.vec(2 * n), v)
  a16, b16 = (f.emit(f"bitcast {t} {x} to {w}") for x in (a, b))
  a_even, a_odd = f.emit(f"and {w} {a16}, {k(0xFF)}"), f.emit(f"lshr {w} {a16}, {k(8)}")
  b_even, b_odd = f.emit(f"ashr {w} {f.emit(f'shl {w} {b16}, {k(8)}')}, {k(8)}"), f.emit(f"ashr {w} {b16}, {k(8)}")
  even, odd = (f.call(f"llvm.x86.{_PMADDWD[n]}", t, [(w, x), (w, y)]) for x, y in ((a_even, b_even), (a_odd, b_odd)))
  return f.emit(f"add {t} {even}, {odd}")

def _dot4_generic(f: _Function, n: int, a: str, b: str) -> str:
  """Any target: the bytes extended to 32 bits, multiplied, and each lane's 4 products added."""
  t, bytes_t, wide = ltype(dtypes.int32.vec(n)), f"<{4 * n} x i8>", f"<{4 * n} x i32>"
  a8, b8 = (f.emit(f"bitcast {t} {x} to {bytes_t}") for x in (a, b))
  p = f.emit(f"mul nsw {wide} {f.emit(f'zext {bytes_t} {a8} to {wide}')}, {f.emit(f'sext {bytes_t} {b8} to {wide}')}")
  if n == 1: return f.call("llvm.vector.reduce.add.v4i32", "i32", [(wide, p)])
  parts = [f.emit(f"shufflevector {wide} {p}, {wide} poison, <{n} x i32> <" +
                  ", ".join(f"i32 {4 * i + j}" for i in range(n)) + ">") for j in range(4)]
  return f.emit(f"add {t} {f.emit(f'add {t} {parts[0]}, {parts[1]}')}, {f.emit(f'add {t} {parts[2]}, {parts[3]}')}")

def dot4_kind(target: CPUTarget, n: int) -> str:
  """The instructions a vector of n DOT4 lanes takes on the target: "vnni" (vpdpbusd), "pmaddwd" or "generic"."""
  if n == 16 and target.has("avx512vnni") or n in (4, 8) and (target.has("avxvnni") or
                                                             target.has("avx512vnni") and target.has("avx512vl")):
    return "vnni"
  if n == 16 and target.has("avx512bw") or n == 8 and target.has("avx2") or n == 4 and target.has("sse2"):
    return "pmaddwd"
  return "generic"

def _dot4(f: _Function, u: UOp, acc: UOp | None = None) -> str:
  n, (a, b) = u.dtype.count, (f.r[s] for s in u.src)
  kind = dot4_kind(f.target, n) if f.target.triple.startswith("x86_64") else "generic"
  if kind == "vnni": return _dot4_vnni(f, n, a, b, None if acc is None else f.r[acc])
  v = _dot4_pmaddwd(f, n, a, b) if kind == "pmaddwd" else _dot4_generic(f, n, a, b)
  return v if acc is None else f.emit(f"add {ltype(u.dtype)} {v}, {f.r[acc]}")

def _add(f: _Function, u: UOp) -> str:
  dot = next((s for s in u.src if s in f.fused_dots), None)
  if dot is None: return _alu(f, u)
  return _dot4(f, dot, u.src[1] if u.src[0] is dot else u.src[0])

_ALU: dict[Ops, dict[str, Builder]] = {
  Ops.NEG: {"f": _ins("fneg {t} {0}"), "iu": _ins("sub {t} zeroinitializer, {0}"),
            "b": _ins("icmp eq {t} {0}, zeroinitializer")},
  Ops.EXP2: {"f": _intr("exp2")}, Ops.LOG2: {"f": _intr("log2")}, Ops.SIN: {"f": _intr("sin")},
  Ops.COS: {"f": _intr("cos")}, Ops.SQRT: {"f": _intr("sqrt")}, Ops.TRUNC: {"f": _intr("trunc")},
  Ops.RECIP: {"f": _ins("fdiv {t} {one}, {0}")},
  Ops.ADD: {"f": _bin("fadd{fl}"), "iu": _bin("add{nw}"), "b": _bin("or")},
  Ops.SUB: {"f": _bin("fsub"), "iu": _bin("sub{nw}"), "b": _bin("xor")},
  Ops.MUL: {"f": _bin("fmul{fl}"), "iu": _bin("mul{nw}"), "b": _bin("and")},
  Ops.FDIV: {"f": _bin("fdiv")},
  # divisors are never 0 (nor -1 when signed) and shift amounts lie in [0, width): codegen/alu.py made sure
  Ops.IDIV: {"i": _bin("sdiv"), "u": _bin("udiv")},
  Ops.MOD: {"f": _bin("frem"), "i": _bin("srem"), "u": _bin("urem")},
  Ops.MAX: {"i": _intr("smax"), "u": _intr("umax"), "b": _bin("or")},
  Ops.CMPLT: {"f": _bin("fcmp olt"), "i": _bin("icmp slt"), "ub": _bin("icmp ult")},
  Ops.CMPNE: {"f": _bin("fcmp une"), "iub": _bin("icmp ne")},
  Ops.AND: {"iub": _bin("and")}, Ops.OR: {"iub": _bin("or")}, Ops.XOR: {"iub": _bin("xor")},
  Ops.SHL: {"iu": _bin("shl{nw}")}, Ops.SHR: {"i": _bin("ashr"), "u": _bin("lshr")},
  Ops.WHERE: {"fiub": _ins("select {c} {0}, {t} {1}, {t} {2}")},
  Ops.MULACC: {"f": _intr("fmuladd"), "iu": _int_mulacc},
}
_ALU_BY_KIND = {(op, k): fn for op, per in _ALU.items() for kinds, fn in per.items() for k in kinds}

# ---- casts ----

def _double_to_half(f: _Function, fr: DType, to: DType, x: str) -> str:
  # x86 has no double->half instruction and LLVM calls __truncdfhf2, which the process may not have (it lives in newer
  # libgcc_s only). Going through float rounds twice, unless the float is rounded to odd: truncated toward zero, with
  # the last bit set when inexact. Then the second rounding is the correct one.
  n = fr.count
  ft, fl, it, ct = ltype(fr), ltype(dtypes.float32.vec(n)), ltype(dtypes.int32.vec(n)), ltype(dtypes.bool.vec(n))
  near = f.emit(f"fptrunc {ft} {x} to {fl}")
  back = f.emit(f"fpext {fl} {near} to {ft}")
  abs_back, abs_x = (f.call(f"llvm.fabs.{suffix(fr)}", ft, [(ft, v)]) for v in (back, x))
  rounded_up = f.emit(f"zext {ct} {f.emit(f'fcmp ogt {ft} {abs_back}, {abs_x}')} to {it}")
  inexact = f.emit(f"zext {ct} {f.emit(f'fcmp one {ft} {back}, {x}')} to {it}")
  toward_zero = f.emit(f"sub {it} {f.emit(f'bitcast {fl} {near} to {it}')}, {rounded_up}")
  odd = f.emit(f"bitcast {it} {f.emit(f'or {it} {toward_zero}, {inexact}')} to {fl}")
  return f.emit(f"fptrunc {fl} {odd} to {ltype(to)}")

def _bf16_to_float(f: _Function, fr: DType, to: DType, x: str) -> str:
  # exact: a bfloat16 is the top half of the float32 of the same value
  assert to.scalar() == dtypes.float32, f"bfloat16 -> {to} must go through float32 (codegen/alu.py)"
  it = ltype(dtypes.uint32.vec(fr.count))
  wide = f.emit(f"shl {it} {f.emit(f'zext {ltype(fr)} {x} to {it}')}, {lconst_vec(dtypes.uint32.vec(fr.count), 16)}")
  return f.emit(f"bitcast {it} {wide} to {ltype(to)}")

def _float_to_bf16(f: _Function, fr: DType, to: DType, x: str) -> str:
  # round to nearest even on the 16 bits dropped (as __float2bfloat16); a NaN keeps its top bits, made quiet
  assert fr.scalar() == dtypes.float32, f"{fr} -> bfloat16 must go through float32 (codegen/alu.py)"
  u32 = dtypes.uint32.vec(fr.count)
  it, ct = ltype(u32), ltype(dtypes.bool.vec(fr.count))
  def k(v: int) -> str: return lconst_vec(u32, v)
  bits = f.emit(f"bitcast {ltype(fr)} {x} to {it}")
  top = f.emit(f"lshr {it} {bits}, {k(16)}")
  biased = f.emit(f"add {it} {f.emit(f'add {it} {bits}, {k(0x7FFF)}')}, {f.emit(f'and {it} {top}, {k(1)}')}")
  rounded = f.emit(f"lshr {it} {biased}, {k(16)}")
  quiet = f.emit(f"or {it} {top}, {k(0x40)}")
  nan = f.emit(f"fcmp uno {ltype(fr)} {x}, {x}")
  return f.emit(f"trunc {it} {f.emit(f'select {ct} {nan}, {it} {quiet}, {it} {rounded}')} to {ltype(to)}")

def _cast(f: _Function, fr: DType, to: DType, x: str) -> str:
  ft, tt = ltype(fr), ltype(to)
  if fr.scalar() == dtypes.bfloat16: return _bf16_to_float(f, fr, to, x)
  if to.scalar() == dtypes.bfloat16: return _float_to_bf16(f, fr, to, x)
  if to.is_bool: return f.emit(f"{'fcmp une' if fr.is_float else 'icmp ne'} {ft} {x}, zeroinitializer")
  if fr.scalar() == dtypes.float64 and to.scalar() == dtypes.float16: return _double_to_half(f, fr, to, x)
  if fr.is_float and to.is_float: op = "fpext" if to.itemsize > fr.itemsize else "fptrunc"
  elif fr.is_float: op = "fptoui" if to.is_unsigned else "fptosi"  # in range: codegen/alu.py clamped it
  elif to.is_float: op = "sitofp" if fr.kind == "i" else "uitofp"
  elif to.itemsize == fr.itemsize and not fr.is_bool: return x  # int32 <-> uint32: the same bits
  else: op = "trunc" if to.itemsize < fr.itemsize else ("sext" if fr.kind == "i" else "zext")
  return f.emit(f"{op} {ft} {x} to {tt}")

# ---- the function being written ----

def _loop_kind(r: UOp) -> str | None: return r.arg[-1] if isinstance(r.arg, tuple) else None

class _Function:
  """The state of one render: lines of the body, allocas for the entry block, intrinsic declarations, value names."""
  def __init__(self, uops: list[UOp], target: CPUTarget) -> None:
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.decls: dict[str, None] = {}
    self.r: dict[UOp, str] = {}
    self.loop_ids: dict[UOp, int] = {}
    self.block, self.count = "entry", 0
    self.nsw = _address_math(uops)
    self.has_reduce = any(u.op is Ops.RANGE and _loop_kind(u) == "reduce" for u in uops)
    # a float add/mul that updates an accumulator may be reassociated: that is what lets LLVM vectorize the reduction
    self.acc_updates = {u.src[1] for u in uops if u.op is Ops.ASSIGN}
    # and a multiply feeding that add may fuse with it into an FMA (a multiply-accumulate is the matmul inner loop)
    self.acc_updates |= {s for u in list(self.acc_updates) for s in u.src if s.op is Ops.MUL}
    self.branched = _branched_calls(uops)
    self.fused_dots = _fused_dots(uops)
    self.target = target

  def fresh(self) -> int:
    self.count += 1
    return self.count

  def emit(self, instr: str) -> str:
    name = f"%v{self.fresh()}"
    self.lines.append(f"  {name} = {instr}")
    return name

  def code(self, instr: str) -> None: self.lines.append(f"  {instr}")

  def label(self, name: str) -> None:
    self.lines.append(f"{name}:")
    self.block = name

  def call(self, fn: str, ret: str, args: list[tuple[str, str]], flags: str = "") -> str:
    self.decls[f"declare {ret} @{fn}({', '.join(t for t, _ in args)})"] = None
    return self.emit(f"call{flags} {ret} @{fn}({', '.join(f'{t} {v}' for t, v in args)})")

def _fused_dots(uops: list[UOp]) -> set[UOp]:
  """The DOT4s whose one use is an ADD: rendered there, with the ADD's other operand as the accumulator."""
  users: dict[UOp, list[UOp]] = {}
  for u in uops:
    for s in u.src: users.setdefault(s, []).append(u)
  return {u for u in uops if u.op is Ops.DOT4 and len(us := users.get(u, [])) == 1 and us[0].op is Ops.ADD}

def _address_math(uops: list[UOp]) -> set[UOp]:
  """Index ALU nodes (int32 or int64, as the lowerer chose) whose every use is an address or a loop bound (directly or
  through other such nodes). In a valid program they cannot overflow, so they are marked nsw: LLVM can then widen
  int32 ones to 64-bit addresses as affine expressions and vectorize the accesses. Values that are also stored as
  data keep wrap-around semantics."""
  users: dict[UOp, list[tuple[UOp, int]]] = {}
  for u in uops:
    for i, s in enumerate(u.src): users.setdefault(s, []).append((u, i))
  out: set[UOp] = set()
  for u in reversed(uops):
    if u.dtype not in (dtypes.int32, dtypes.int64) or u.op not in GroupOp.ALU or u not in users: continue
    if all(v in out or (v.op in (Ops.LOAD, Ops.STORE) and i == 1) or v.op is Ops.RANGE for v, i in users[u]): out.add(u)
  return out

# ---- one handler an op: emits the code of u and returns its value (operand text), or None for no value ----

def _define_global(f: _Function, u: UOp) -> str: return f"%data{u.arg}"

def _define_var(f: _Function, u: UOp) -> str:
  # the scalar arguments come in one block of memory after the buffers (VAR_SLOT)
  at = f.emit(f"getelementptr inbounds i8, ptr %vars, i64 {u.arg * VAR_SLOT}")
  return f.emit(f"load {ltype(u.dtype)}, ptr {at}, align {u.dtype.itemsize}")

def _special(f: _Function, u: UOp) -> str:
  if not u.arg[0].startswith("core"): raise NotImplementedError(f"LLVM renderer: no {u.arg[0]} on the CPU (only core*)")
  return "%core_id" if u.dtype == dtypes.int32 else f.emit(f"sext i32 %core_id to {ltype(u.dtype)}")

def _vectorize(f: _Function, u: UOp) -> str:
  t, vt = ltype(u.dtype.scalar()), ltype(u.dtype)
  if all(s.op is Ops.CONST for s in u.src): return "<" + ", ".join(f"{t} {f.r[s]}" for s in u.src) + ">"
  if all(s is u.src[0] for s in u.src):
    one = f.emit(f"insertelement {vt} poison, {t} {f.r[u.src[0]]}, i32 0")
    return f.emit(f"shufflevector {vt} {one}, {vt} poison, <{u.dtype.count} x i32> zeroinitializer")
  v = "poison"
  for i, s in enumerate(u.src): v = f.emit(f"insertelement {vt} {v}, {t} {f.r[s]}, i32 {i}")
  return v

def _gep(f: _Function, u: UOp) -> str:
  return f.emit(f"extractelement {ltype(u.src[0].dtype)} {f.r[u.src[0]]}, i32 {u.arg}")

def _range(f: _Function, u: UOp) -> str:
  # header: phi and exit test at the top (zero-trip loops work); latch: the increment, branching back
  i, name, t = f.fresh(), f"%r{len(f.loop_ids)}", ltype(u.dtype)
  f.loop_ids[u] = i
  pred = f.block
  f.code(f"br label %loop{i}")
  f.label(f"loop{i}")
  f.code(f"{name} = phi {t} [{f.r[u.src[0]]}, %{pred}], [{name}.next, %latch{i}]")
  f.code(f"br i1 {f.emit(f'icmp slt {t} {name}, {f.r[u.src[1]]}')}, label %body{i}, label %exit{i}")
  f.label(f"body{i}")
  return name

# the metadata a loop over outputs carries (see _endrange)
_NO_LOOP_VECTORIZE = ('!0 = distinct !{!0, !1}', '!1 = !{!"llvm.loop.vectorize.enable", i1 false}')

def _endrange(f: _Function, u: UOp) -> None:
  i, name = f.loop_ids[u.src[0]], f.r[u.src[0]]
  f.code(f"br label %latch{i}")
  f.label(f"latch{i}")
  f.code(f"{name}.next = add nuw nsw {ltype(u.src[0].dtype)} {name}, 1")
  # in a kernel with a reduce, LLVM's loop vectorizer may vectorize the reduce loop (an odd length the kernel has no
  # vectors for: 4x on sums of rows of 197) but not a loop over outputs: there, after unrolling the reduce loop inside,
  # LLVM 22 miscompiled a reduce over padded windows (float64 logcumsumexp of 4 rows of 3 lost a term at the second
  # position; the IR without it, EMU and CUDACPU were right). Elementwise kernels keep it (an exp over 50257: 5x)
  outputs = f.has_reduce and _loop_kind(u.src[0]) != "reduce"
  f.code(f"br label %loop{i}" + (", !llvm.loop !0" if outputs else ""))
  f.label(f"exit{i}")

def _address(f: _Function, buf: UOp, idx: UOp) -> str:
  assert isinstance(buf.dtype, PtrDType), f"LLVM renderer: memory access through {buf.op}, expected DEFINE_GLOBAL"
  return f.emit(f"getelementptr inbounds {mtype(buf.dtype.scalar())}, ptr {f.r[buf]}, {ltype(idx.dtype)} {f.r[idx]}")

def _load_global(f: _Function, u: UOp) -> str:
  mt = mtype(u.dtype)
  v = f.emit(f"load {mt}, ptr {_address(f, u.src[0], u.src[1])}, align {u.dtype.itemsize}")
  return f.emit(f"icmp ne {mt} {v}, zeroinitializer") if u.dtype.is_bool else v

def _masked_load(f: _Function, u: UOp) -> str:
  """A vector load whose lanes each have a gate (e.g. a padded row edge): masked-off lanes are never read. The
  address may lie outside the buffer for those lanes, so the GEP is not inbounds."""
  mt, buf = mtype(u.dtype), u.src[0]
  addr = f.emit(f"getelementptr {mtype(buf.dtype.scalar())}, ptr {f.r[buf]}, {ltype(u.src[1].dtype)} {f.r[u.src[1]]}")
  alt = f.r[u.src[3]]
  if u.dtype.is_bool: alt = f.emit(f"zext {ltype(u.dtype)} {alt} to {mt}")
  mem_dt = dtypes.uint8.vec(u.dtype.count) if u.dtype.is_bool else u.dtype
  v = f.call(f"llvm.masked.load.{suffix(mem_dt)}.p0", mt, [("ptr", addr), ("i32", str(u.dtype.itemsize)),
                                                           (ltype(u.src[2].dtype), f.r[u.src[2]]), (mt, alt)])
  return f.emit(f"icmp ne {mt} {v}, zeroinitializer") if u.dtype.is_bool else v

def _load(f: _Function, u: UOp) -> str:
  if u.src[0].op is Ops.DEFINE_ACC: return f.emit(f"load {ltype(u.dtype)}, ptr {f.r[u.src[0]]}")
  if len(u.src) == 2: return _load_global(f, u)
  if u.src[2].dtype.count > 1: return _masked_load(f, u)
  # gated: branch around the load, so a masked-off address is never touched (LLVM turns this into masked loads)
  i, pred = f.fresh(), f.block
  f.code(f"br i1 {f.r[u.src[2]]}, label %load{i}, label %loaded{i}")
  f.label(f"load{i}")
  v, end = _load_global(f, u), f.block
  f.code(f"br label %loaded{i}")
  f.label(f"loaded{i}")
  return f.emit(f"phi {ltype(u.dtype)} [{v}, %{end}], [{f.r[u.src[3]]}, %{pred}]")

def _store(f: _Function, u: UOp) -> None:
  buf, idx, val = u.src[:3]
  # an int max is the only atomic store rendered: the flags of an index check (schedule/index_check.py), on a path taken
  # only for a bad index. The renderer declares no atomics: a scatter's updates run in order (schedule/scatter.py)
  if u.arg is not None and (u.arg is not Ops.MAX or not val.dtype.is_int or val.dtype.count > 1):
    raise NotImplementedError(f"LLVM renderer: no atomic {u.arg} store of {val.dtype} (only an int max)")
  i = f.fresh()
  if len(u.src) == 4:
    f.code(f"br i1 {f.r[u.src[3]]}, label %store{i}, label %stored{i}")
    f.label(f"store{i}")
  v, mt = f.r[val], mtype(val.dtype)
  if val.dtype.is_bool: v = f.emit(f"zext {ltype(val.dtype)} {v} to {mt}")
  if u.arg is not None:
    op = "umax" if val.dtype.is_unsigned else "max"
    f.code(f"atomicrmw {op} ptr {_address(f, buf, idx)}, {mt} {v} monotonic, align {val.dtype.itemsize}")
  else: f.code(f"store {mt} {v}, ptr {_address(f, buf, idx)}, align {val.dtype.itemsize}")
  if len(u.src) == 4:
    f.code(f"br label %stored{i}")
    f.label(f"stored{i}")

def _define_acc(f: _Function, u: UOp) -> str:
  # an alloca in the entry block, set at this point of the program; SROA/mem2reg turn it into loop phis
  name = f"%acc{f.fresh()}"
  f.allocas.append(f"  {name} = alloca {ltype(u.dtype)}")
  f.code(f"store {ltype(u.dtype)} {f.r[u.src[0]]}, ptr {name}")
  return name

def _assign(f: _Function, u: UOp) -> str:
  f.code(f"store {ltype(u.dtype)} {f.r[u.src[1]]}, ptr {f.r[u.src[0]]}")
  return f.r[u.src[1]]

def _alu(f: _Function, u: UOp, operands: list[str] | None = None) -> str:
  dt = u.src[-1].dtype  # the operand type: WHERE's condition comes first, comparisons return bools
  if (fn := _ALU_BY_KIND.get((u.op, dt.kind))) is None:
    raise NotImplementedError(f"LLVM renderer: {u.op} on {dt} is not supported")
  env = {"t": ltype(dt), "s": suffix(dt), "c": ltype(dtypes.bool.vec(dt.count)), "one": lconst_vec(dt, 1),
         "fl": " reassoc contract" if u in f.acc_updates and dt.is_float else "", "nw": " nsw" if u in f.nsw else ""}
  return fn(f, env, operands if operands is not None else [f.r[s] for s in u.src])

# ops LLVM lowers to a libm call per lane, and the C function of each
_LIBM_CALLS = {Ops.SIN: "sin", Ops.COS: "cos", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.MOD: "fmod"}

def _branched_calls(uops: list[UOp]) -> set[UOp]:
  """The float32/float64 libm calls that only the true side of one WHERE reads: rendered there, behind a branch taken
  when any lane of its condition holds. A fast path (transcendental.py's sin) leaves the call to rare lanes it does not
  cover; as a select, every lane would make the call (8 sin calls per vector of 8, to pick none of them)."""
  users: dict[UOp, int] = {}
  for u in uops:
    for s in u.src: users[s] = users.get(s, 0) + 1
  return {c for u in uops if u.op is Ops.WHERE and (c := u.src[1]).op in _LIBM_CALLS and users[c] == 1
          and c.dtype.scalar() in (dtypes.float32, dtypes.float64)}

def _libm_lanes(f: _Function, call: UOp) -> str:
  """call as a libm call per lane, to the C function itself: LLVM may hoist its intrinsics (llvm.sin and llvm.cos of
  one value become an unconditional sincos: tan 2.9 -> 20 ms for 1M), a call to a function that may set errno it
  keeps where it is."""
  dt = call.dtype.scalar()
  fn, t = _LIBM_CALLS[call.op] + ("f" if dt == dtypes.float32 else ""), ltype(dt)
  def lane(args: list[str]) -> str: return f.call(fn, t, [(t, a) for a in args])
  if call.dtype.count == 1: return lane([f.r[s] for s in call.src])
  vec = f"{ltype(call.dtype)} poison"
  for j in range(call.dtype.count):
    v = lane([f.emit(f"extractelement {ltype(s.dtype)} {f.r[s]}, i32 {j}") for s in call.src])
    vec = f"{ltype(call.dtype)} {f.emit(f'insertelement {vec}, {t} {v}, i32 {j}')}"
  return vec.split(" ")[-1]

def _where(f: _Function, u: UOp) -> str:
  if (call := u.src[1]) not in f.branched: return _select_pinned(f, u)
  cond, i, pred = u.src[0], f.fresh(), f.block
  taken = f.r[cond] if cond.dtype.count == 1 else \
    f.call(f"llvm.vector.reduce.or.{suffix(cond.dtype)}", "i1", [(ltype(cond.dtype), f.r[cond])])
  f.code(f"br i1 {taken}, label %call{i}, label %called{i}")
  f.label(f"call{i}")
  v, end = _libm_lanes(f, call), f.block
  f.code(f"br label %called{i}")
  f.label(f"called{i}")
  # lanes whose condition is false take the other side: the call's value there is never read
  f.r[call] = f.emit(f"phi {ltype(call.dtype)} [{v}, %{end}], [{lconst_vec(call.dtype, 0.0)}, %{pred}]")
  return _select_pinned(f, u)

def _select_pinned(f: _Function, u: UOp) -> str:
  """A select whose condition has lanes False by construction (a padded view's per-lane validity, some lanes padding
  in every iteration): those lanes of the true side are replaced by the false side's before the select. Such lanes of
  the true side are often constants (gated loads and constants are 0 there), and LLVM 22.1's SelectionDAG takes a
  constant lane that an invalid operation makes NaN (0 / 0) for undef: the select's lane then no longer matters to it,
  the condition is rebuilt with that lane true (<false, c> -> <c, c>) and the NaN the division computes at run time
  comes through (x / 4 read through padded views was NaN on AVX2 and AVX-512)."""
  cond, n = u.src[0], u.dtype.count
  pinned = [s.op is Ops.CONST and s.arg is False for s in cond.src] if cond.op is Ops.VECTORIZE else []
  if not any(pinned) or all(pinned): return _alu(f, u)
  t, no = ltype(u.dtype), f.r[u.src[2]]
  mask = ", ".join(f"i32 {i + n if p else i}" for i, p in enumerate(pinned))
  yes = f.emit(f"shufflevector {t} {f.r[u.src[1]]}, {t} {no}, <{n} x i32> <{mask}>")
  return _alu(f, u, [f.r[cond], yes, no])

def _unsupported(f: _Function, u: UOp) -> None: raise NotImplementedError(f"LLVM renderer: {u.op} has no CPU lowering")

_HANDLERS: dict[Ops, Callable[[_Function, UOp], str | None]] = {
  Ops.DEFINE_GLOBAL: _define_global, Ops.DEFINE_VAR: _define_var, Ops.SPECIAL: _special,
  Ops.CONST: lambda f, u: lconst(u.dtype, u.arg),
  Ops.VECTORIZE: _vectorize, Ops.GEP: _gep, Ops.RANGE: _range, Ops.ENDRANGE: _endrange, Ops.LOAD: _load,
  Ops.STORE: _store, Ops.DEFINE_ACC: _define_acc, Ops.ASSIGN: _assign,
  Ops.CAST: lambda f, u: _cast(f, u.src[0].dtype, u.dtype, f.r[u.src[0]]),
  Ops.BITCAST: lambda f, u: f.emit(f"bitcast {ltype(u.src[0].dtype)} {f.r[u.src[0]]} to {ltype(u.dtype)}"),
  **{op: _alu for op in GroupOp.ALU}, Ops.WHERE: _where, Ops.DOT4: _dot4, Ops.ADD: _add,
}

# every CPU buffer is followed by this many readable bytes (runtime/ops_cpu.py allocates them), an eighth of its size up
# to READ_PAST_MAX: a kernel padded past an odd output size (197 tokens) reads on unmasked where its last row or batch
# ends within them (32 x 197x64x197 on one AVX2 thread: 30 -> 50-60 GFLOP/s, masked B vectors and A scalars without)
READ_PAST_MIN, READ_PAST_MAX = 64, 4096

def cpu_readable_past(nbytes: int) -> int: return min(READ_PAST_MAX, max(READ_PAST_MIN, nbytes // 8))

# ---- denormals flushed (FTZ): the float mode a kernel sets on entry and restores on exit, per ISA ----

class DenormalMode(NamedTuple):
  """Code that saves the thread's float mode and sets flush-to-zero (at entry), restores it (before the return), and
  what it declares. Set in each call, not once per thread: the calling thread runs kernels and numpy's code alike, and
  a call's mode must not leak into the numpy that follows it (three instructions beside a ~1 us ctypes call)."""
  allocas: tuple[str, ...]
  enter: tuple[str, ...]
  leave: tuple[str, ...]
  decls: tuple[str, ...]

_MXCSR_FTZ_DAZ = (1 << 15) | (1 << 6)  # results flushed (FTZ) | inputs read as zero (DAZ): SSE/AVX float32, float64
_FPCR_FZ = 1 << 24  # aarch64: both at once, for float32 and float64 (FZ16 is another bit, on cores that have it)

_DENORMAL_MODES = {
  "x86_64": DenormalMode(
    ("  %fpmode.saved = alloca i32", "  %fpmode.flush = alloca i32"),
    ("  call void @llvm.x86.sse.stmxcsr(ptr %fpmode.saved)", "  %fpmode.old = load i32, ptr %fpmode.saved",
     f"  %fpmode.new = or i32 %fpmode.old, {_MXCSR_FTZ_DAZ}", "  store i32 %fpmode.new, ptr %fpmode.flush",
     "  call void @llvm.x86.sse.ldmxcsr(ptr %fpmode.flush)"),
    ("  call void @llvm.x86.sse.ldmxcsr(ptr %fpmode.saved)",),
    ("declare void @llvm.x86.sse.stmxcsr(ptr)", "declare void @llvm.x86.sse.ldmxcsr(ptr)")),
  "aarch64": DenormalMode(
    (),
    ("  %fpmode.old = call i64 @llvm.aarch64.get.fpcr()", f"  %fpmode.new = or i64 %fpmode.old, {_FPCR_FZ}",
     "  call void @llvm.aarch64.set.fpcr(i64 %fpmode.new)"),
    ("  call void @llvm.aarch64.set.fpcr(i64 %fpmode.old)",),
    ("declare i64 @llvm.aarch64.get.fpcr()", "declare void @llvm.aarch64.set.fpcr(i64)")),
}

def denormal_mode(target: CPUTarget) -> DenormalMode | None:
  """How a kernel for `target` flushes denormals; None for an ISA this renderer knows no float mode register of."""
  return next((m for isa, m in _DENORMAL_MODES.items() if target.triple.startswith(isa)), None)

class LLVMRenderer(Renderer):
  device = "CPU"
  has_threads = True
  has_local = False
  has_shared = False
  masked_vector_loads = True

  def __init__(self, target: CPUTarget | None = None) -> None:
    # None follows CPU_TARGET at each use, so that `with Context(CPU_TARGET=...)` takes effect on an open device
    self._target = target

  @property
  def target(self) -> CPUTarget:  # type: ignore[override]
    return self._target or cpu_target(str(CPU_TARGET.value))

  @property
  def vector_widths(self) -> tuple[int, ...]:  # type: ignore[override]
    # vectors of up to one register: a wider one is split by LLVM anyway, into registers the heuristics did not count
    return tuple(w for w in (4, 8, 16) if w <= max(4, self.target.vector_floats))

  @property
  def cache_key(self) -> str: return f"LLVMRenderer {self.target.key}"

  def readable_past(self, nbytes: int) -> int: return cpu_readable_past(nbytes)

  @property
  def extra_matcher(self) -> PatternMatcher[UOp] | None:  # type: ignore[override]
    # read per use, so that `with Context(FASTMATH=0)` takes effect on a device that already exists
    return pm_fast_math if FASTMATH else None

  def render(self, name: str, uops: list[UOp]) -> str:
    f = _Function(uops, self.target)
    for u in uops:
      if u in f.branched or u in f.fused_dots: continue  # rendered by the WHERE or ADD that reads it
      if (v := _HANDLERS.get(u.op, _unsupported)(f, u)) is not None: f.r[u] = v
    # every argument index up to the highest, so that a buffer the program does not touch still has its slot (one
    # after the highest is kept by lower_kernel: a missing last one would hand %core_id its pointer)
    nbufs = max((u.arg + 1 for u in uops if u.op is Ops.DEFINE_GLOBAL), default=0)
    args = [f"ptr noalias %data{i}" for i in range(nbufs)]
    if any(u.op is Ops.DEFINE_VAR for u in uops): args.append("ptr noalias readonly %vars")
    args.append("i32 %core_id")
    head = f'define void @"{name}"({", ".join(args)}) #0 {{'
    mode = denormal_mode(self.target) if FTZ else None
    enter, leave = (mode.allocas + mode.enter, mode.leave) if mode else ((), ())
    return "\n".join([head, "entry:", *f.allocas, *enter, *f.lines, *leave, "  ret void", "}", *f.decls,
                      *(mode.decls if mode else ()), f"attributes #0 = {{ {self._attributes(mode is not None)} }}",
                      *_NO_LOOP_VECTORIZE, ""])

  def _attributes(self, flush: bool = False) -> str:
    # the target's cpu, features and vector width go into the function attributes, so that they hold whoever
    # compiles the text (LLVM's own default for x86 is 256-bit vectors even where 512 are legal)
    t = self.target
    attrs = ["nounwind", f'"prefer-vector-width"="{t.vector_bits}"', f'"min-legal-vector-width"="{t.vector_bits}"',
             f'"target-cpu"="{t.cpu}"']
    # float32 math folded at compile time flushes as the code does at run time; not every type's: half may keep its
    # denormals (AVX512-FP16 ignores MXCSR's bits, aarch64's FZ16 is not set)
    if flush: attrs.append('"denormal-fp-math-f32"="preserve-sign,preserve-sign"')
    if t.features: attrs.append(f'"target-features"="{t.features}"')
    return " ".join(attrs)
