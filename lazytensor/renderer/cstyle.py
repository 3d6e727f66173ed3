"""What every C-like language shares: linear program -> one C function, one statement an op.

A subclass (CUDA; a future C, Metal or OpenCL renderer) says how its kernels are declared, what the launch ids are
called, how shared memory and barriers are spelled, and which float types it only stores (computing on them in float).
Everything else is here:

  * values: every op with a value becomes a local variable of its C type (constants are written inline); the C
    compiler folds them back into expressions, and DEBUG=4 shows one line a node of the linear program.
  * vectors: a struct `<dtype><n>` (`float32x4`, `float16x8`, `boolx2`) holding `v[n]`, aligned to its size, so that a
    load or store of one through a pointer is a single vector access (16 bytes: ld.global.v4.f32 on CUDA). ALU ops on
    vectors are written lane by lane; loads and stores are vector accesses only where the index is provably a
    multiple of the width (an unaligned one is undefined on GPUs), else one access a lane.
  * loops: RANGE/ENDRANGE become `for` blocks, IF/ENDIF `if` blocks; a DEFINE_ACC is a variable declared where the
    linearizer placed it (so it is re-initialized in every iteration of the loops around it), ASSIGN writes it.
  * gated loads are `gate ? load : alt` (C evaluates only the branch taken, so a masked-off address is never read);
    gated stores are `if (gate) ...`. A STORE with an op as its arg is an atomic update, a statement the subclass
    writes (`atomic`). A STORE of arg ASYNC_COPY is the subclass's asynchronous copy (`async_copy_stmt`) of the LOAD
    it stores, which is then never read into registers; where either address is not aligned to the copy's size, it
    is a plain load and store (a copy that is done at once is done by the wait).
  * fixed-width integers wrap: every result is stored in a variable of its own type, and results narrower than int
    are cast back explicitly (C computes them in int).
"""
from __future__ import annotations

import math
import struct
from collections.abc import Callable

from lazytensor.dtype import DType, PtrDType, dtypes
from lazytensor.renderer import ASYNC_COPY, Renderer
from lazytensor.uop.ops import GroupOp, Ops, UOp

C_TYPES: dict[str, str] = {
  "bool": "bool", "int8": "signed char", "uint8": "unsigned char", "int16": "short", "uint16": "unsigned short",
  "int32": "int", "uint32": "unsigned int", "int64": "long long", "uint64": "unsigned long long",
  "float32": "float", "float64": "double"}

# integer constants need a suffix (or a cast) to have their type; the most negative ones are not a literal in C
_INT_SUFFIX = {"int32": "", "uint32": "u", "int64": "ll", "uint64": "ull"}

# per op, per kind of operand ("f" float, "i" signed, "u" unsigned, "b" bool): the C expression of scalar operands
# {0}, {1}, {2}; {f} is the float function suffix ("f" for float, "" for double)
_OPS: dict[Ops, dict[str, str]] = {
  Ops.NEG: {"fiu": "(-{0})", "b": "(!{0})"},
  Ops.EXP2: {"f": "exp2{f}({0})"}, Ops.LOG2: {"f": "log2{f}({0})"}, Ops.SIN: {"f": "sin{f}({0})"},
  Ops.COS: {"f": "cos{f}({0})"},
  Ops.SQRT: {"f": "sqrt{f}({0})"}, Ops.TRUNC: {"f": "trunc{f}({0})"}, Ops.RECIP: {"f": "(1/{0})"},
  Ops.ADD: {"fiu": "({0}+{1})", "b": "({0}||{1})"}, Ops.SUB: {"fiu": "({0}-{1})", "b": "({0}!={1})"},
  Ops.MUL: {"fiu": "({0}*{1})", "b": "({0}&&{1})"}, Ops.FDIV: {"f": "({0}/{1})"}, Ops.IDIV: {"iu": "({0}/{1})"},
  Ops.MOD: {"f": "fmod{f}({0},{1})", "iu": "({0}%{1})"},
  # divisors are never 0 (nor -1 when signed), shift amounts lie in [0, width), float -> int casts are in range and
  # float MAX is gone: codegen/alu.py rewrote each before rendering
  Ops.MAX: {"iub": "(({0}>{1})?{0}:{1})"},
  Ops.CMPLT: {"fiub": "({0}<{1})"}, Ops.CMPNE: {"fiub": "({0}!={1})"},
  Ops.AND: {"iu": "({0}&{1})", "b": "({0}&&{1})"}, Ops.OR: {"iu": "({0}|{1})", "b": "({0}||{1})"},
  Ops.XOR: {"iu": "({0}^{1})", "b": "({0}!={1})"}, Ops.SHL: {"iu": "({0}<<{1})"}, Ops.SHR: {"iu": "({0}>>{1})"},
  Ops.WHERE: {"fiub": "({0}?{1}:{2})"}, Ops.MULACC: {"fiu": "(({0}*{1})+{2})"},
  # CUDA's dp4a takes both words' bytes signed: a's unsigned bytes are those minus 128 (the top bit flipped), plus 128
  # times the sum of b's bytes
  Ops.DOT4: {"i": "(__dp4a((int)({0}^0x80808080u),{1},0)+__dp4a(0x01010101,{1},0)*128)"},
}
_OPS_BY_KIND = {(op, k): fmt for op, per in _OPS.items() for kinds, fmt in per.items() for k in kinds}

def vector_name(dt: DType) -> str: return f"{dt.name}x{dt.count}"

def _is_pow2(n: int) -> bool: return n > 0 and n & (n - 1) == 0

def known_multiple(u: UOp) -> int:
  """A number the integer value of u is always a multiple of (0: u is the constant 0, a multiple of anything)."""
  if u.op is Ops.CONST: return abs(int(u.arg))
  if u.op is Ops.ADD: return math.gcd(known_multiple(u.src[0]), known_multiple(u.src[1]))
  if u.op is Ops.MUL: return known_multiple(u.src[0]) * known_multiple(u.src[1])
  if u.op is Ops.SHL and u.src[1].op is Ops.CONST: return known_multiple(u.src[0]) << int(u.src[1].arg)
  return 1


def _signed(literal: str) -> str:
  """A negative literal in parentheses: after a binary minus, `a--2.5f` is a decrement (g++ and nvcc reject it)."""
  return f"({literal})" if literal.startswith("-") else literal

class CStyleRenderer(Renderer):
  """The C-like base. Subclasses fill in the language's names and `render_kernel`."""
  kernel_prefix: str = ""         # before `void`: 'extern "C" __global__' on CUDA
  buffer_qualifier: str = ""      # after the `*` of a kernel's buffer parameter: ' __restrict__' on CUDA
  shared_prefix: str = ""         # before a shared memory declaration: '__shared__ ' on CUDA
  barrier: str = ""               # the statement that makes a block's threads wait for each other
  function_prefix: str = "static inline"  # before a helper function: '__device__ __forceinline__' on CUDA
  # float types the language only stores: dtype name -> (C type, function to float, function from float)
  storage_floats: dict[str, tuple[str, str, str]] = {}

  # ---- what a subclass provides ----

  def special(self, name: str) -> str:
    """The C expression of a launch id (gidx0, lidx1, ...)."""
    raise NotImplementedError

  def render_wmma(self, u: UOp, out: str, srcs: list[str]) -> str:
    """The statement that sets the (already declared) vector `out` to the tensor-core product of u."""
    raise NotImplementedError(f"{type(self).__name__}: no tensor cores")

  def render_matrix_load(self, u: UOp, out: str, ptr: str) -> str:
    """The statement that sets the (already declared) vector `out` to a warp's matrix load u (a LOAD whose arg is
    (MATRIX_LOAD, n, trans): codegen/tensor_cores.py) whose lane's row starts at `ptr`."""
    raise NotImplementedError(f"{type(self).__name__}: no matrix loads")

  def async_copy_stmt(self, dst: str, src: str, nbytes: int, gate: str) -> str:
    """The statement that starts copying `nbytes` from global `src` to shared `dst`, or zeros where `gate` is false
    (then `src` is the buffer's start); an ASYNC_COPY STORE (renderer.ASYNC_COPY) where the renderer's async_copy."""
    raise NotImplementedError(f"{type(self).__name__}: no asynchronous copies")

  def async_wait(self) -> str:
    """The statement that waits for the thread's asynchronous copies (before a BARRIER of arg ASYNC_COPY)."""
    raise NotImplementedError(f"{type(self).__name__}: no asynchronous copies")

  def render_kernel(self, name: str, params: list[str], body: list[str], uops: list[UOp]) -> str:
    raise NotImplementedError

  def atomic(self, op: Ops, dt: DType, ptr: str, value: str) -> str:
    """The statement that combines `value` into *ptr with op atomically (a STORE with arg op: the renderer's
    `atomics` say which)."""
    raise NotImplementedError(f"{type(self).__name__}: no atomic {op.name} of {dt.name}")

  def non_finite(self, dt: DType, v: float) -> str:
    """inf, -inf or nan of float32 or float64 (C has no literal for them, and compilers differ in their builtins)."""
    raise NotImplementedError

  # ---- types and constants ----

  def scalar_type(self, dt: DType) -> str:
    if dt.name in self.storage_floats: return self.storage_floats[dt.name][0]
    if dt.name not in C_TYPES: raise NotImplementedError(f"{type(self).__name__}: no C type for {dt.name}")
    return C_TYPES[dt.name]

  def ctype(self, dt: DType) -> str:
    return vector_name(dt) if dt.count > 1 else self.scalar_type(dt)

  def vector_types(self, uops: list[UOp]) -> list[str]:
    """The struct of every vector type the program uses; aligned to its size when that is a power of two, so that a
    load of a whole one is one access."""
    seen: dict[DType, None] = {}
    for u in uops:
      for dt in (u.dtype, *(s.dtype for s in u.src)):
        if dt.count > 1 and not isinstance(dt, PtrDType): seen.setdefault(dt, None)
    out = []
    for dt in seen:
      size = dt.count * dt.itemsize
      align = f"alignas({size}) " if _is_pow2(size) else ""
      out.append(f"struct {align}{vector_name(dt)} {{ {self.scalar_type(dt.scalar())} v[{dt.count}]; }};")
    return out

  def helpers(self, uops: list[UOp]) -> list[str]:
    """Declarations the body needs: vector structs, and the bit cast helper when a BITCAST is used (copying the bytes
    is the one form of bit cast that both device code and C++ define)."""
    out = self.vector_types(uops)
    if any(u.op is Ops.BITCAST for u in uops): out.append(self.bitcast_helper())
    return out

  def bitcast_helper(self) -> str:
    return (f"template <class T, class F> {self.function_prefix} T lt_bitcast(F x) "
            "{ T t; memcpy(&t, &x, sizeof(T)); return t; }")

  def const(self, dt: DType, v: float | int | bool) -> str:
    """A constant of a scalar type, exact: floats through their shortest round-trip decimal, inf/nan as the
    language writes them (`non_finite`)."""
    if dt.is_bool: return "true" if v else "false"
    if dt.is_int:
      iv, name = int(v), dt.name
      if name in _INT_SUFFIX:
        if iv == dt.min() and dt.kind == "i": return f"({iv + 1}{_INT_SUFFIX[name]}-1)"
        return _signed(f"{iv}{_INT_SUFFIX[name]}")
      return f"(({self.scalar_type(dt)}){iv})"
    if dt.name in self.storage_floats: return f"{self.storage_floats[dt.name][2]}({self.const(dtypes.float32, v)})"
    suffix = "f" if dt == dtypes.float32 else ""
    fv = float(struct.unpack("<f", struct.pack("<f", float(v)))[0]) if dt == dtypes.float32 else float(v)
    if not math.isfinite(fv): return self.non_finite(dt, fv)
    return _signed(f"{fv!r}{suffix}")

  def const_value(self, dt: DType, v: float | int | bool) -> str:
    if dt.count == 1: return self.const(dt, v)
    return f"{vector_name(dt)}{{{', '.join([self.const(dt.scalar(), v)] * dt.count)}}}"

  # ---- scalar expressions ----

  def to_compute(self, dt: DType, x: str) -> str:
    """A scalar operand as the type ALU ops compute in: a storage-only float becomes a float."""
    return f"{self.storage_floats[dt.name][1]}({x})" if dt.name in self.storage_floats else x

  def from_compute(self, dt: DType, x: str) -> str:
    """A computed scalar back in dt: a storage-only float from float, an integer narrower than int truncated."""
    if dt.name in self.storage_floats: return f"{self.storage_floats[dt.name][2]}({x})"
    if dt.is_int and dt.itemsize < 4: return f"(({self.scalar_type(dt)}){x})"
    return x

  def alu(self, op: Ops, dt: DType, operand_dt: DType, xs: list[str]) -> str:
    """A scalar ALU op; dt is the result type, operand_dt the type of the (last) operands."""
    if (fmt := _OPS_BY_KIND.get((op, operand_dt.kind))) is None:
      raise NotImplementedError(f"{type(self).__name__}: {op.name} on {operand_dt.name} is not supported")
    cond = [xs[0]] if op is Ops.WHERE else []
    ins = [self.to_compute(operand_dt, x) for x in xs[len(cond):]]
    expr = fmt.format(*cond, *ins, f="" if operand_dt == dtypes.float64 else "f")
    return expr if dt.is_bool else self.from_compute(dt, expr)

  def cast(self, fr: DType, to: DType, x: str) -> str:
    """A scalar conversion. Storage-only floats go through float; a conversion to bool is a test for nonzero."""
    if to.is_bool: return f"({self.to_compute(fr, x)}!=0)"
    if to.name in self.storage_floats and fr.name in self.storage_floats and fr != to:
      return self.from_compute(to, self.to_compute(fr, x))
    if to.name in self.storage_floats:
      return self.from_compute(to, x if fr == dtypes.float32 else f"(float)({x})")
    return f"(({self.scalar_type(to)})({self.to_compute(fr, x)}))"

  # ---- rendering ----

  def render(self, name: str, uops: list[UOp]) -> str:
    w = _Writer(self, uops)
    for u in uops: w.op(u)
    nbufs = max((u.arg + 1 for u in uops if u.op is Ops.DEFINE_GLOBAL), default=0)
    params = [w.params.get(i, f"void* data{i}") for i in range(nbufs)]
    # the scalar arguments by value after the buffers (codegen keeps every one in the program, read or not)
    params += [f"const {self.scalar_type(u.dtype)} var{u.arg}" for u in scalar_args(uops)]
    return self.render_kernel(name, params, w.lines, uops)

class _Writer:
  """The state of one render: the body's lines, the indentation, each value's C expression."""
  def __init__(self, lang: CStyleRenderer, uops: list[UOp]) -> None:
    self.lang, self.lines, self.depth = lang, list[str](), 1
    self.r: dict[UOp, str] = {}
    self.params: dict[int, str] = {}
    self.count = 0
    self.stored = {u.src[0] for u in uops if u.op is Ops.STORE}
    self.vector_bytes = {u.dtype.count * u.dtype.itemsize for u in uops if u.dtype.count > 1}
    # the loads that asynchronous copies take straight to shared memory (whole, aligned vectors only)
    self.copied = {u.src[2] for u in uops if u.op is Ops.STORE and u.arg == ASYNC_COPY and _aligned_copy(u)}

  def emit(self, line: str) -> None: self.lines.append("  " * self.depth + line)

  def var(self, u: UOp, prefix: str, expr: str) -> str:
    """Declare a variable for u's value; returns its name."""
    name = f"{prefix}{self.count}"
    self.count += 1
    self.emit(f"{self.lang.ctype(u.dtype)} {name} = {expr};")
    return name

  def lane(self, u: UOp, i: int) -> str:
    """Lane i of a value: the value itself when it is a scalar (splat)."""
    return f"{self.r[u]}.v[{i}]" if u.dtype.count > 1 else self.r[u]

  def lanes(self, dt: DType, exprs: list[str]) -> str:
    return exprs[0] if dt.count == 1 else f"{vector_name(dt)}{{{', '.join(exprs)}}}"

  def op(self, u: UOp) -> None:
    if (handler := _HANDLERS.get(u.op)) is None:
      raise NotImplementedError(f"{type(self.lang).__name__}: cannot render {u.op.name}")
    if (value := handler(self, u)) is not None: self.r[u] = value

  # ---- memory ----

  def address(self, buf: UOp, idx: UOp, dt: DType, access: str) -> list[str]:
    """The lvalue of an access of dt at buf[idx]: one vector access when aligned, else one a lane."""
    base, i = self.r[buf], self.r[idx]
    if dt.count == 1: return [f"{base}[{i}]"]
    if _is_pow2(dt.count * dt.itemsize) and known_multiple(idx) % dt.count == 0:
      return [f"(*(({access}{vector_name(dt)}*)({base}+{i})))"]
    return [f"{base}[{i}+{n}]" for n in range(dt.count)]

  def load(self, u: UOp) -> str:
    buf = u.src[0]
    if buf.op is Ops.DEFINE_ACC: return self.var(u, "acc_val", self.r[buf])  # a copy: the ASSIGN after changes it
    if u in self.copied: return ""  # only its address is used, by the copy
    # a barrier source (and the stores issued after it) only order the load after them
    src = [s for s in u.src if s.op not in (Ops.BARRIER, Ops.STORE)]
    if u.arg is not None:  # a warp's matrix load: the language's helper fills the vector
      name = f"frag{self.count}"
      self.count += 1
      self.emit(f"{self.lang.ctype(u.dtype)} {name};")
      self.emit(self.lang.render_matrix_load(u, name, f"{self.r[buf]}+{self.r[src[1]]}"))
      return name
    const = "const " if buf not in self.stored else ""
    if len(src) == 4 and src[2].dtype.count > 1:  # a gate a lane: each lane reads only when its own gate is set
      where = [f"{self.r[buf]}[{self.r[src[1]]}+{n}]" for n in range(u.dtype.count)]
      return self.var(u, "val", self.lanes(u.dtype, [f"({self.lane(src[2], n)}?{at}:{self.lane(src[3], n)})"
                                                     for n, at in enumerate(where)]))
    where = self.address(buf, src[1], u.dtype, const)
    value = where[0] if len(where) == 1 else self.lanes(u.dtype, where)
    if len(src) == 4: value = f"({self.r[src[2]]}?{value}:{self.r[src[3]]})"
    return self.var(u, "val", value)

  def store(self, u: UOp) -> None:
    buf, idx, val = u.src[:3]
    if val in self.copied: stmts = self.async_copy(u, val)
    elif u.arg is not None and u.arg != ASYNC_COPY:
      stmts = self.lang.atomic(u.arg, val.dtype, f"{self.r[buf]}+{self.r[idx]}", self.r[val])
    else:
      where = self.address(buf, idx, val.dtype, "")
      values = [self.r[val]] if len(where) == 1 else [self.lane(val, n) for n in range(val.dtype.count)]
      stmts = " ".join(f"{w} = {v};" for w, v in zip(where, values))
    self.emit(f"if ({self.r[u.src[3]]}) {{ {stmts} }}" if len(u.src) == 4 else stmts)

  def async_copy(self, u: UOp, load: UOp) -> str:
    """The asynchronous copy of `load` (global) that STORE u puts in shared memory: zeros where its gate is false."""
    src = [s for s in load.src if s.op is not Ops.BARRIER]
    mem, at = self.r[src[0]], f"{self.r[src[0]]}+{self.r[src[1]]}"
    # a gate the store has too is tested already: where the copy runs, it holds
    gated = len(src) == 4 and not (len(u.src) == 4 and src[2] is u.src[3])
    gate = self.r[src[2]] if gated else "true"
    if gated: at = f"({gate}?{at}:{mem})"
    return self.lang.async_copy_stmt(f"{self.r[u.src[0]]}+{self.r[u.src[1]]}", at,
                                     load.dtype.count * load.dtype.itemsize, gate)

  # ---- values ----

  def alu(self, u: UOp) -> str:
    operand_dt = u.src[-1].dtype.scalar()  # WHERE's condition comes first, comparisons return bools
    exprs = [self.lang.alu(u.op, u.dtype.scalar(), operand_dt, [self.lane(s, i) for s in u.src])
             for i in range(u.dtype.count)]
    return self.var(u, "alu", self.lanes(u.dtype, exprs))

  def cast(self, u: UOp) -> str:
    fr = u.src[0].dtype.scalar()
    exprs = [self.lang.cast(fr, u.dtype.scalar(), self.lane(u.src[0], i)) for i in range(u.dtype.count)]
    return self.var(u, "cast", self.lanes(u.dtype, exprs))

  def begin(self, line: str) -> None:
    self.emit(line)
    self.depth += 1

  def end(self) -> None:
    self.depth -= 1
    self.emit("}")

def _aligned_copy(store: UOp) -> bool:
  """Whether both addresses of an asynchronous copy are multiples of its (power of two) size."""
  load = store.src[2]
  n = load.dtype.count
  return _is_pow2(n * load.dtype.itemsize) and known_multiple(load.src[1]) % n == 0 and \
    known_multiple(store.src[1]) % n == 0

def scalar_args(uops: list[UOp]) -> list[UOp]:
  """The DEFINE_VARs of a program in the order of their arguments."""
  return sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg)

def _define_global(w: _Writer, u: UOp) -> str:
  assert isinstance(u.dtype, PtrDType)
  const = "const " if u not in w.stored else ""
  w.params[u.arg] = f"{const}{w.lang.scalar_type(u.dtype.scalar())}*{w.lang.buffer_qualifier} data{u.arg}"
  return f"data{u.arg}"

def _define_local(w: _Writer, u: UOp) -> str:
  name, size = u.arg
  dt = u.dtype.scalar()
  # aligned as the widest vector struct of the program (at least 16 bytes), since a vector access through a pointer
  # to the struct assumes the struct's alignment: a float32x8 in a 16-byte aligned array faults on a GPU and in g++'s
  # aligned AVX loads
  align = max([16] + [n for n in w.vector_bytes if _is_pow2(n)])
  w.emit(f"{w.lang.shared_prefix}alignas({align}) {w.lang.scalar_type(dt)} {name}[{size}];")
  return str(name)

def _special(w: _Writer, u: UOp) -> str:
  name, size = u.arg
  w.emit(f"{w.lang.ctype(u.dtype)} {name} = {w.lang.special(name)}; /* {size} */")
  return str(name)

def _range(w: _Writer, u: UOp) -> str:
  name = f"ridx{w.count}"
  w.count += 1
  w.begin(f"for ({w.lang.ctype(u.dtype)} {name} = {w.r[u.src[0]]}; {name} < {w.r[u.src[1]]}; {name}++) {{")
  return name

def _define_acc(w: _Writer, u: UOp) -> str:
  name = f"acc{w.count}"
  w.count += 1
  w.emit(f"{w.lang.ctype(u.dtype)} {name} = {w.r[u.src[0]]};")
  return name

def _assign(w: _Writer, u: UOp) -> str:
  w.emit(f"{w.r[u.src[0]]} = {w.r[u.src[1]]};")
  return w.r[u.src[0]]

def _if(w: _Writer, u: UOp) -> None: w.begin(f"if ({w.r[u.src[0]]}) {{")

def _barrier(w: _Writer, u: UOp) -> None:
  if u.arg == ASYNC_COPY and w.copied: w.emit(w.lang.async_wait())
  w.emit(w.lang.barrier)

def _vectorize(w: _Writer, u: UOp) -> str: return w.var(u, "vec", w.lanes(u.dtype, [w.r[s] for s in u.src]))

def _wmma(w: _Writer, u: UOp) -> str:
  name = f"wmma{w.count}"
  w.count += 1
  w.emit(f"{w.lang.ctype(u.dtype)} {name};")
  w.emit(w.lang.render_wmma(u, name, [w.r[s] for s in u.src]))
  return name

def _bitcast(w: _Writer, u: UOp) -> str:
  return w.var(u, "cast", f"lt_bitcast<{w.lang.ctype(u.dtype)}>({w.r[u.src[0]]})")

_HANDLERS: dict[Ops, Callable[[_Writer, UOp], str | None]] = {
  Ops.DEFINE_GLOBAL: _define_global, Ops.DEFINE_VAR: lambda w, u: f"var{u.arg}", Ops.DEFINE_LOCAL: _define_local,
  Ops.SPECIAL: _special,
  Ops.CONST: lambda w, u: w.lang.const_value(u.dtype, u.arg), Ops.DEFINE_ACC: _define_acc, Ops.ASSIGN: _assign,
  Ops.RANGE: _range, Ops.ENDRANGE: lambda w, u: w.end(), Ops.IF: _if, Ops.ENDIF: lambda w, u: w.end(),
  Ops.BARRIER: _barrier, Ops.LOAD: _Writer.load, Ops.STORE: _Writer.store, Ops.VECTORIZE: _vectorize,
  Ops.GEP: lambda w, u: w.lane(u.src[0], u.arg), Ops.CAST: _Writer.cast, Ops.BITCAST: _bitcast, Ops.WMMA: _wmma,
  **{op: _Writer.alu for op in GroupOp.ALU},
}

