"""The opcodes of the IR, the groups they fall in, and what each ALU op computes on Python numbers.

Below `uop/ops.py` (the node) and `uop/bounds.py` (value bounds), which both read them: an op's meaning does not
depend on the node that carries it.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from typing import Any

from lazytensor.dtype import DType, float_to_int_via, truncate


class Ops(enum.Enum):
  # graph structure
  SINK = enum.auto()
  NOOP = enum.auto()
  # tensor graph
  BUFFER = enum.auto()        # arg=(device, size, uid): storage that exists (or will) on a device
  DEVICE = enum.auto()        # arg=device name; the source of a CONST says where it lives
  VIEW = enum.auto()          # arg=ShapeTracker; a movement of src[0], never a copy
  # movement ops of the tensor graph, kept apart so gradients can invert them; the scheduler folds them into VIEWs
  RESHAPE = enum.auto()       # arg=new shape
  PERMUTE = enum.auto()       # arg=order
  EXPAND = enum.auto()        # arg=new shape (size-1 dims grow)
  PAD = enum.auto()           # arg=((before, after), ...)
  SHRINK = enum.auto()        # arg=((start, end), ...)
  FLIP = enum.auto()          # arg=(bool per dim)
  COPY = enum.auto()          # arg=device, or a tuple of devices (replicate); src[0] moved to another device
  MULTI = enum.auto()         # src=a piece per device, arg=(axis, bounds): a value sharded (or replicated) on devices
  CONTIGUOUS = enum.auto()    # materialize src[0] in a buffer of its own
  ASSIGN = enum.auto()        # src=(target, value): write value into target's buffer; in kernels: acc := value
  REDUCE_AXIS = enum.auto()   # arg=(op, axes)
  DETACH = enum.auto()        # stops gradients
  # src=(value, x1, d1, x2, d2, ...): value, whose gradient reaches each xi times di, a stated derivative (of the same
  # shape), instead of through value's own graph (pow: torch's rule where the formula's chain rule gives NaN or 0);
  # with an arg, src=(value, x1, x2, ...) and arg(gradient, x1, x2, ...) gives the xi's gradients
  # (frontend/mixin/conv.py's ConvGrad). The scheduler keeps value alone
  CUSTOM_GRAD = enum.auto()
  IOTA = enum.auto()          # a virtual buffer whose element i is i: arange and random counters, made on the device
  VALID = enum.auto()         # src=(VIEW,): whether a position is inside a view's mask (pushed-down pads)
  # kernel AST and loop level
  DEFINE_GLOBAL = enum.auto()  # arg=index of the kernel argument; dtype is a PtrDType
  DEFINE_LOCAL = enum.auto()   # arg=(name, size); shared memory of a GPU block
  # a scalar argument of a kernel, a number passed at each launch in place of a CONST (schedule/cache.py says when):
  # arg=its index among the kernel's scalar arguments (in the abstract tensor graph, its slot there); in the tensor
  # graph and the AST src is a CONST's (DEVICE, or the VIEW it is read through), at the loop level none
  # or, for a symbolic value (a Variable: a dimension of a shape, an index), arg=(name, min, max) and no sources; its
  # value at each call travels apart from the graph (ScheduleItem.vals), so kernels and cache keys see only the name
  DEFINE_VAR = enum.auto()
  BIND = enum.auto()           # src=(Variable, CONST value): a Variable with its value for one call (Variable.bind)
  DEFINE_ACC = enum.auto()     # arg=uid; src=(initial value,); a register that a reduce accumulates into
  SPECIAL = enum.auto()        # arg=(name, size): a launch index (gidx0, lidx1, core id)
  RANGE = enum.auto()          # arg=(axis, kind); src=(start, end): a loop variable
  ENDRANGE = enum.auto()       # src=(range,) closes a loop in the linear program
  REDUCE = enum.auto()         # arg=op; src=(value, *ranges): loop-level reduction over the ranges
  LOAD = enum.auto()           # src=(buffer, index, [gate, alt]) or, in the AST, (buffer, VIEW)
  # in the AST only, src=(buffer, VIEW, index), arg=(stride, n): a load whose address moves by clamp(index, 0, n-1)
  # times stride (schedule/gather.py)
  GATHER = enum.auto()
  STORE = enum.auto()          # src=(buffer, index, value, [gate]) or, in the AST, (buffer, VIEW, value); a loop-level
                               # one with arg=op (ADD, MAX) is atomic: buffer[index] op= value in one step
  # in the AST only, src=(buffer, VIEW, value, index), arg=(op, entry axes, stride, n): value combined by op into the
  # element clamp(index, 0, n-1) * stride past the view's, none where index is outside [0, n) (schedule/scatter.py)
  SCATTER = enum.auto()
  IF = enum.auto()
  ENDIF = enum.auto()
  BARRIER = enum.auto()
  VECTORIZE = enum.auto()      # build a vector from scalars
  GEP = enum.auto()            # arg=lane index: a scalar out of a vector
  WMMA = enum.auto()           # a tensor-core multiply-accumulate
  # unary
  CAST = enum.auto()
  BITCAST = enum.auto()
  NEG = enum.auto()
  EXP2 = enum.auto()
  LOG2 = enum.auto()
  SIN = enum.auto()
  COS = enum.auto()
  SQRT = enum.auto()
  RECIP = enum.auto()
  TRUNC = enum.auto()
  # binary
  ADD = enum.auto()
  SUB = enum.auto()
  MUL = enum.auto()
  FDIV = enum.auto()
  IDIV = enum.auto()   # integer division truncating toward zero, as C does
  MOD = enum.auto()    # remainder with the sign of the dividend, as C does
  MAX = enum.auto()
  CMPLT = enum.auto()
  CMPNE = enum.auto()
  AND = enum.auto()
  OR = enum.auto()
  XOR = enum.auto()
  SHL = enum.auto()
  SHR = enum.auto()
  # int32 words of 4 bytes each: the sum of the 4 products of a's bytes read unsigned and b's read signed, in int32
  # (one lane of x86's vpdpbusd, CUDA's dp4a): an int8 dot product in groups of 4 (nn/quant.py)
  DOT4 = enum.auto()
  # ternary
  WHERE = enum.auto()
  MULACC = enum.auto()
  CONST = enum.auto()
  # src=(index, ok), arg=IndexSite: the index, whose entries where ok is False are reported (schedule/index_check.py);
  # in a kernel AST src=(flags, index, ok), flags the DEFINE_GLOBAL the lowerer records a bad entry into
  CHECK = enum.auto()

  def __repr__(self) -> str: return f"Ops.{self.name}"
  # members are singletons: identity hashing is correct and much cheaper than Enum's name hashing
  __hash__ = object.__hash__

class GroupOp:
  Unary = {Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT, Ops.RECIP, Ops.TRUNC}
  Binary = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.AND, Ops.OR,
            Ops.XOR, Ops.SHL, Ops.SHR, Ops.DOT4}
  Ternary = {Ops.WHERE, Ops.MULACC}
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST, Ops.CHECK}
  Commutative = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR}
  Associative = {Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX}
  Comparison = {Ops.CMPLT, Ops.CMPNE}
  Reduce = {Ops.ADD, Ops.MUL, Ops.MAX}
  Movement = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
  # the nodes of a kernel AST that read and that write a buffer through a VIEW
  Load = {Ops.LOAD, Ops.GATHER}
  Store = {Ops.STORE, Ops.SCATTER}

# ---- constant evaluation, shared by symbolic folding and bounds. The meaning of every edge case here (x/0, x%0,
# INT_MIN/-1, shift amounts out of range, float -> int out of range, nan in max) is the one codegen/alu.py gives the
# kernels: a constant folds to what the device computes. ----

def _c_idiv(a: int, b: int) -> int: return 0 if b == 0 else abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
def _c_mod(a: int, b: int) -> int: return 0 if b == 0 else a - _c_idiv(a, b) * b
def _shl(a: int, b: int) -> int: return a << b if 0 <= b < 64 else 0  # exec_alu's truncation drops bits past the width
def _shr(a: int, b: int) -> int: return a >> b if b >= 0 else -1 if a < 0 else 0  # a negative amount is a huge one
def _byte(x: int, i: int, signed: bool) -> int:
  b = (x >> 8 * i) & 0xFF
  return b - 256 if signed and b >= 128 else b
def _dot4(a: int, b: int) -> int: return sum(_byte(a, i, False) * _byte(b, i, True) for i in range(4))
def _max(a: Any, b: Any) -> Any: return a if a != a else b if b != b else max(a, b)  # nan wins
def _safe_exp2(x: float) -> float:
  try: return 2.0 ** x
  except OverflowError: return math.inf
def _safe_log2(x: float) -> float:
  if math.isnan(x) or x < 0: return math.nan
  return -math.inf if x == 0 else math.log2(x)
def _safe_div(a: float, b: float) -> float:
  if b == 0: return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)
  return a / b

python_alu: dict[Ops, Callable[..., Any]] = {
  Ops.NEG: lambda x: not x if isinstance(x, bool) else -x, Ops.EXP2: _safe_exp2, Ops.LOG2: _safe_log2,
  Ops.SIN: lambda x: math.sin(x) if math.isfinite(x) else math.nan,
  Ops.COS: lambda x: math.cos(x) if math.isfinite(x) else math.nan,
  Ops.SQRT: lambda x: math.sqrt(x) if x >= 0 else math.nan, Ops.RECIP: lambda x: _safe_div(1.0, x),
  Ops.TRUNC: lambda x: x if not math.isfinite(x) else float(math.trunc(x)),
  Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b, Ops.FDIV: _safe_div,
  Ops.IDIV: _c_idiv, Ops.MOD: _c_mod, Ops.MAX: _max, Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b,
  Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b, Ops.SHL: _shl, Ops.SHR: _shr,
  Ops.DOT4: _dot4,
  Ops.WHERE: lambda c, a, b: a if c else b, Ops.MULACC: lambda a, b, c: a * b + c,
}

def exec_alu(op: Ops, dt: DType, srcs: Sequence[Any]) -> Any:
  """Evaluate one ALU op on Python scalars with the wrap-around and rounding of `dt`. A shift amount of a signed type
  counts as unsigned: a negative one is out of range."""
  if op in (Ops.SHL, Ops.SHR) and dt.is_int and srcs[1] < 0: srcs = (srcs[0], srcs[1] + (1 << 8 * dt.itemsize))
  return truncate(dt, python_alu[op](*srcs))

def exec_cast(fr: DType, to: DType, x: Any) -> Any:
  """A constant cast from `fr` to `to`. Float -> int truncates toward zero, NaN gives 0, and values out of range
  saturate to `float_to_int_via(to)` before wrapping to `to`."""
  if fr.is_float and to.is_int:
    if math.isnan(x): return 0
    wide = float_to_int_via(to)
    x = wide.max() if x >= wide.max() else wide.min() if x <= wide.min() else math.trunc(x)
  return truncate(to, x)
