"""The smallest and largest value a UOp can take: interval arithmetic over index math, read as `UOp.vmin`/`UOp.vmax`.

Bounds are sound, not always tight: every value the node takes at run time lies in [vmin, vmax]. An integer result
whose interval leaves its dtype's range falls back to the whole range, because a wrapped value can be anywhere in it.
Each node's bounds are cached on the node (`UOp.vmin_vmax`), so a rule asking for them costs one lookup after the
first time.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, Protocol

from lazytensor.dtype import DType, PtrDType
from lazytensor.uop.opcodes import GroupOp, Ops, exec_alu, python_alu

Bounds = tuple[Any, Any]

class Node(Protocol):
  """What bounds read of a node: `uop/ops.py`'s UOp, which imports this module to give every node its bounds."""
  @property
  def op(self) -> Ops: ...
  @property
  def dtype(self) -> DType: ...
  @property
  def src(self) -> tuple[Node, ...]: ...
  @property
  def arg(self) -> Any: ...
  @property
  def vmin_vmax(self) -> Bounds: ...
  @property
  def vmin(self) -> Any: ...
  @property
  def vmax(self) -> Any: ...

def dtype_bounds(dt: DType) -> Bounds:
  """Everything the dtype can hold: the answer when nothing better is known."""
  return dt.min(), dt.max()

def bounds(u: Node) -> Bounds:
  """The (min, max) of the values `u` can take."""
  if u.op is Ops.CONST: return u.arg, u.arg
  # why: a float can be nan, which lies in no interval, so only float constants get bounds of their own
  if isinstance(u.dtype, PtrDType) or u.dtype.is_float: return dtype_bounds(u.dtype)
  if u.dtype.is_bool and u.op in GroupOp.ALU and all(s.dtype.is_bool for s in u.src): return _bool_bounds(u)
  rule = _rules.get(u.op)
  ret = rule(u) if rule is not None else None
  if ret is None or (u.dtype.is_int and not u.dtype.min() <= ret[0] <= ret[1] <= u.dtype.max()):
    return dtype_bounds(u.dtype)
  return ret

def _bool_bounds(u: Node) -> Bounds:
  # a bool's bounds are the whole set of values it takes, so trying every combination of them is exact
  vals = [exec_alu(u.op, u.dtype, combo) for combo in itertools.product(*(s.vmin_vmax for s in u.src))]
  return min(vals), max(vals)

def _corners(op: Ops, a: Node, b: Node) -> Bounds:
  # for ops monotonic in each argument on the box, the extremes lie on its corners
  vals = [python_alu[op](x, y) for x in a.vmin_vmax for y in b.vmin_vmax]
  return min(vals), max(vals)

def _range(u: Node) -> Bounds:
  start, end = u.src
  return start.vmin, max(start.vmin, end.vmax - 1)

def _idiv(u: Node) -> Bounds | None:
  a, b = u.src
  # truncation is monotonic, and so is a/b in each argument while b keeps one sign
  return _corners(Ops.IDIV, a, b) if b.vmin > 0 or b.vmax < 0 else None

def _mod(u: Node) -> Bounds | None:
  a, b = u.src
  if b.vmin <= 0 <= b.vmax: return None
  d = abs(b.vmin)
  if b.vmin == b.vmax and a.vmin >= 0 and a.vmin // d == a.vmax // d:
    return a.vmin % d, a.vmax % d  # a stays inside one block of |b|: the remainder just shifts it
  # why: the C remainder takes the dividend's sign and is smaller than the divisor in magnitude
  m = max(abs(b.vmin), abs(b.vmax)) - 1
  return max(a.vmin, -m) if a.vmin < 0 else 0, min(a.vmax, m) if a.vmax > 0 else 0

def _cmplt(u: Node) -> Bounds:
  a, b = u.src
  if a.vmax < b.vmin: return True, True
  if a.vmin >= b.vmax: return False, False
  return False, True

def _ne(a: Bounds, b: Bounds) -> Bounds:
  if a[1] < b[0] or b[1] < a[0]: return True, True
  if a[0] == a[1] == b[0] == b[1]: return False, False
  return False, True

def _and(u: Node) -> Bounds | None:
  # x & c with c >= 0 keeps only bits of c: it lies in [0, c]
  nonneg = [s.vmax for s in u.src if s.vmin >= 0]
  return (0, min(nonneg)) if nonneg else None

def _or(u: Node) -> Bounds | None:
  a, b = u.src
  if a.vmin < 0 or b.vmin < 0: return None
  # the bits of two non-negative numbers: at least the larger, at most all ones up to the highest bit
  return max(a.vmin, b.vmin), (1 << max(a.vmax, b.vmax).bit_length()) - 1

def _shift(u: Node) -> Bounds | None:
  a, b = u.src
  # why: amounts out of [0, width) take codegen/alu.py's meaning (0 or the sign), which the corners do not model
  if b.vmin < 0 or b.vmax >= 8 * u.dtype.itemsize or (u.op is Ops.SHL and a.vmin < 0): return None
  return _corners(u.op, a, b)

def _where(u: Node) -> Bounds:
  c, a, b = u.src
  if c.vmin: return a.vmin_vmax
  if not c.vmax: return b.vmin_vmax
  return min(a.vmin, b.vmin), max(a.vmax, b.vmax)

def _cast(u: Node) -> Bounds | None:
  src = u.src[0]
  if src.dtype.is_float: return None
  if u.dtype.is_bool: return _ne(src.vmin_vmax, (0, 0))
  return int(src.vmin), int(src.vmax)  # out of the target's range: the caller widens to all of it (values wrap)

def _gep(u: Node) -> Bounds:
  src = u.src[0]
  return src.src[u.arg].vmin_vmax if src.op is Ops.VECTORIZE else src.vmin_vmax

_rules: dict[Ops, Callable[[Node], Bounds | None]] = {
  Ops.RANGE: _range,
  # a Variable takes any value of its range, bound or not: what is compiled for it serves them all
  Ops.DEFINE_VAR: lambda u: (u.arg[1], u.arg[2]) if isinstance(u.arg, tuple) else None,
  Ops.BIND: lambda u: u.src[0].vmin_vmax,
  Ops.SPECIAL: lambda u: (0, u.arg[1] - 1),
  Ops.ADD: lambda u: (u.src[0].vmin + u.src[1].vmin, u.src[0].vmax + u.src[1].vmax),
  Ops.SUB: lambda u: (u.src[0].vmin - u.src[1].vmax, u.src[0].vmax - u.src[1].vmin),
  Ops.NEG: lambda u: (-u.src[0].vmax, -u.src[0].vmin),
  Ops.MUL: lambda u: _corners(Ops.MUL, *u.src),
  Ops.IDIV: _idiv,
  Ops.MOD: _mod,
  Ops.MAX: lambda u: (max(s.vmin for s in u.src), max(s.vmax for s in u.src)),
  Ops.CMPLT: _cmplt,
  Ops.CMPNE: lambda u: _ne(u.src[0].vmin_vmax, u.src[1].vmin_vmax),
  Ops.AND: _and,
  Ops.OR: _or,
  Ops.SHL: _shift,
  Ops.SHR: _shift,
  Ops.WHERE: _where,
  Ops.DOT4: lambda u: (4 * 255 * -128, 4 * 255 * 127),  # 4 products of a byte in [0, 255] and one in [-128, 127]
  Ops.CAST: _cast,
  Ops.VECTORIZE: lambda u: (min(s.vmin for s in u.src), max(s.vmax for s in u.src)),
  Ops.GEP: _gep,
}
