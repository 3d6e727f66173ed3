"""Linear program <-> text for the EMU device.

The EMU device runs the linear program itself, so its "source" is the program written out one op a line, in a form
that reads back to the very same (interned) UOps:

  # EMU kernel r_4_4_16_16_64
     0 DEFINE_GLOBAL float32*      ()                 0
     1 SPECIAL       int32         ()                 ('gidx0', 4)
     7 LOAD          float32x4     (2, 6)
    12 DEFINE_LOCAL  float32*local ()                 ('temp0', 256)

Columns: position, op, dtype (`x4` a vector of 4, `*` a pointer to global memory, `*local` to shared memory), the
positions of the sources, and the arg as a Python literal (absent when None). Every source comes earlier in the list.
"""
from __future__ import annotations

import ast
import math
import re
from typing import Any

from lazytensor.dtype import ALL_DTYPES, DType, PtrDType, dtypes
from lazytensor.helpers import TF32
from lazytensor.renderer import NVIDIA_ATOMICS, TC_NV_BF16, TC_NV_F16, TC_NV_TF32, Renderer, TensorCore
from lazytensor.uop.ops import Ops, UOp

HEADER = "# EMU kernel "

# ---- dtypes ----

_DTYPE_NAMES: dict[str, DType] = {**ALL_DTYPES, "void": dtypes.void}
_DTYPE_RE = re.compile(r"([a-z]+?[0-9]*)(?:x([0-9]+))?(\*(?:local)?)?")

def dtype_text(dt: DType) -> str:
  if isinstance(dt, PtrDType): return f"{dt.name}*{'local' if dt.local else ''}"
  return dt.name + (f"x{dt.count}" if dt.count > 1 else "")

def parse_dtype(text: str) -> DType:
  if (m := _DTYPE_RE.fullmatch(text)) is None or m.group(1) not in _DTYPE_NAMES:
    raise ValueError(f"EMU program: bad dtype {text!r}; expected e.g. float32, float32x4, float32* or float32*local")
  dt = _DTYPE_NAMES[m.group(1)]
  if m.group(3): return dt.ptr(local=m.group(3) == "*local")
  return dt.vec(int(m.group(2))) if m.group(2) else dt

# ---- args: Python literals, plus dtypes, Ops and non-finite floats, which repr writes as names ----

def arg_text(arg: Any) -> str:
  if isinstance(arg, tuple): return "(" + ", ".join(arg_text(a) for a in arg) + ("," if len(arg) == 1 else "") + ")"
  # exact types only: a subclass (an enum of int, say) would not read back as itself
  if arg is None or type(arg) in (bool, int, float, str): return repr(arg)
  if isinstance(arg, Ops) or (type(arg) is DType): return repr(arg)
  raise TypeError(f"EMU renderer: cannot write the arg {arg!r} of type {type(arg).__name__}; args must be tuples of "
                  "None, bool, int, float, str, DType or Ops")

_NAMES: dict[str, float] = {"nan": math.nan, "inf": math.inf}

def _literal(node: ast.expr) -> Any:
  if isinstance(node, ast.Constant): return node.value
  if isinstance(node, ast.Tuple): return tuple(_literal(e) for e in node.elts)
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub): return -_literal(node.operand)
  if isinstance(node, ast.Name) and node.id in _NAMES: return _NAMES[node.id]
  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
    if node.value.id == "Ops" and node.attr in Ops.__members__: return Ops[node.attr]
    if node.value.id == "dtypes" and node.attr in _DTYPE_NAMES: return _DTYPE_NAMES[node.attr]
  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "vec" and node.args:
    return _literal(node.func.value).vec(_literal(node.args[0]))
  raise ValueError(f"EMU program: {ast.unparse(node)!r} is not an arg this format writes")

def parse_arg(text: str) -> Any:
  try: tree = ast.parse(text, mode="eval")
  except SyntaxError as e: raise ValueError(f"EMU program: bad arg {text!r}") from e
  return _literal(tree.body)

# ---- programs ----

_LINE_RE = re.compile(r"\s*([0-9]+) ([A-Z_0-9]+) +(\S+) +\(([0-9, ]*)\)(?: +(\S.*))?")

def render_program(name: str, uops: list[UOp]) -> str:
  pos = {u: i for i, u in enumerate(uops)}
  lines = [HEADER + name]
  for i, u in enumerate(uops):
    if (missing := [s for s in u.src if pos.get(s, i) >= i]):
      raise ValueError(f"EMU renderer: op {i} ({u.op.name}) uses a {missing[0].op.name} that is not before it")
    srcs = "(" + ", ".join(str(pos[s]) for s in u.src) + ")"
    arg = "" if u.arg is None else " " + arg_text(u.arg)
    lines.append(f"{i:4d} {u.op.name:<13} {dtype_text(u.dtype):<13} {srcs:<18}{arg}".rstrip())
  return "\n".join(lines) + "\n"

def parse_program(src: str) -> tuple[str, list[UOp]]:
  """The kernel name and the linear program of a text that render_program wrote."""
  head, *body = src.rstrip("\n").split("\n")
  if not head.startswith(HEADER): raise ValueError(f"EMU program: the first line must start with {HEADER!r}: {head!r}")
  uops: list[UOp] = []
  for n, line in enumerate(body):
    if (m := _LINE_RE.fullmatch(line)) is None: raise ValueError(f"EMU program: cannot read line {n + 2}: {line!r}")
    pos, op, dt, srcs, arg = m.groups()
    if int(pos) != n or op not in Ops.__members__:
      raise ValueError(f"EMU program: line {n + 2} must be op {n} with a known op name: {line!r}")
    src_pos = [int(s) for s in srcs.replace(",", " ").split()]
    if any(s >= n for s in src_pos): raise ValueError(f"EMU program: op {n} uses a later op: {line!r}")
    uops.append(UOp(Ops[op], parse_dtype(dt), tuple(uops[s] for s in src_pos), None if arg is None else parse_arg(arg)))
  return head[len(HEADER):], uops

class EmuRenderer(Renderer):
  device = "EMU"
  has_local = True
  has_shared = True
  has_threads = False
  global_max = (2**31 - 1, 65535, 65535)
  local_max = (1024, 1024, 64)
  shared_max = 48 * 1024
  vector_widths = (2, 4)
  threads_max = 1024  # threads in one block, whatever their shape
  multiprocessors = 132  # as CUDA's: the schedule EMU runs is the one a GPU would
  atomics = NVIDIA_ATOMICS  # the GPU's, so that EMU runs the scatter kernels CUDA runs
  async_copy = True  # as sm_80's cp.async: EMU holds a copy's data back from readers until the wait

  def __init__(self, tf32: bool = False) -> None:
    # float32 matmuls on tf32 tensor cores round their inputs: only when asked for (here, or by the TF32 knob as on
    # CUDA), as torch's allow_tf32
    self.tf32 = tf32

  @property
  def cache_key(self) -> str: return f"EmuRenderer tf32={self.tf32}"

  @property
  def tensor_cores(self) -> tuple[TensorCore, ...]:
    """NVIDIA's mma.sync tensor cores, run by EMU with their fragment layouts; tf32 as the CUDA renderer's (the knob
    read per use)."""
    return (TC_NV_F16, TC_NV_BF16, TC_NV_TF32) if self.tf32 or TF32 else (TC_NV_F16, TC_NV_BF16)

  def render(self, name: str, uops: list[UOp]) -> str: return render_program(name, uops)
