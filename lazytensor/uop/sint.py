"""Symbolic integers: a shape's dimension, a view's stride or offset that is an int or a UOp expression of Variables.

A `Variable(name, min, max)` is a DEFINE_VAR whose value is given at each call (`.bind(value)`, a BIND node); what is
compiled for it serves its whole range. Dimensions mix ints and such expressions (`sint`). UOp equality is identity
and a UOp has no truth value, so the view and shape math compares and combines them through the helpers here: they
keep plain ints plain (the common case costs an isinstance), fold expressions with the symbolic rules so that
`(v+1)-1` is `v` (interned: one node, so two equal expressions are `is`-equal), and decide comparisons by bounds.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from lazytensor.dtype import dtypes
from lazytensor.uop import ops
from lazytensor.uop.opcodes import GroupOp, Ops, python_alu
from lazytensor.uop.ops import UOp, render_index
from lazytensor.uop.symbolic import simplify

sint = int | UOp

def not_a_value(u: UOp) -> TypeError:
  """The error for a Variable (or another graph node) given where a Tensor's value is expected."""
  if u.op in (Ops.BIND, Ops.DEFINE_VAR):
    name = (u.src[0] if u.op is Ops.BIND else u).arg[0]
    return TypeError(f"Variable {name!r} stands for a dimension, not a Tensor's value: use it in a shape (reshape, "
                     "shrink or slicing, pad, expand, the creation functions), or give the value as a Python number "
                     "(`v.val` of a bound one): a number that changes between calls becomes a kernel argument")
  return TypeError(f"cannot make a Tensor from a {u.op} node; expected a number, a (nested) list, a numpy array or "
                   "a Tensor")

def Variable(name: str, min_val: int, max_val: int) -> UOp:  # noqa: N802  (tinygrad's name: a constructor to users)
  """A symbolic integer in [min_val, max_val]: a dimension or index whose value is given at each call by `.bind`,
  so that one compiled kernel serves every value.

  >>> v = Variable("n", 1, 10)
  >>> v.vmin, v.vmax, v.bind(3).unbind()[1]
  (1, 10, 3)
  """
  if not isinstance(name, str) or not name.isidentifier():
    raise ValueError(f"Variable: the name must be an identifier, got {name!r}")
  if type(min_val) is not int or type(max_val) is not int or not 0 <= min_val <= max_val:
    raise ValueError(f"Variable {name!r}: expected ints 0 <= min <= max, got min={min_val!r}, max={max_val!r}")
  return UOp(Ops.DEFINE_VAR, dtypes.index, (), (name, min_val, max_val))

def is_variable(u: Any) -> bool:
  """Whether u is a Variable (a DEFINE_VAR of a name, not a kernel's numbered scalar argument)."""
  return isinstance(u, UOp) and u.op is Ops.DEFINE_VAR and isinstance(u.arg, tuple)

def ssimplify(x: sint) -> sint:
  """x folded by the symbolic rules: an int where the expression is a constant."""
  if not isinstance(x, UOp): return x
  x = simplify(x)
  return int(x.arg) if x.op is Ops.CONST else x

def resolve(x: bool | UOp, default: bool = True) -> bool:
  """The truth of a comparison, decided by bounds where it involves Variables; `default` where they cannot decide."""
  if not isinstance(x, UOp): return bool(x)
  assert x.dtype == dtypes.bool, f"resolve of a {x.dtype} value"
  lo, hi = x.vmin_vmax
  return bool(lo) if lo == hi else default

def sint_eq(a: sint, b: sint) -> bool:
  """Whether a and b are provably equal."""
  if not isinstance(a, UOp) and not isinstance(b, UOp): return a == b
  return ssimplify(a - b) == 0 if isinstance(a, UOp) else ssimplify(b - a) == 0

def sint_prod(xs: Iterable[sint]) -> sint:
  """The product of dims, an int where they all are."""
  p = math.prod(xs)
  return p if not isinstance(p, UOp) else ssimplify(p)

def max_size(shape: Iterable[sint]) -> int:
  """The number of elements of `shape` at its Variables' largest values: the memory one buffer for all of them takes."""
  p = sint_prod(shape)
  return p if not isinstance(p, UOp) else int(p.vmax)

def sint_le(a: sint, b: sint) -> bool | None:
  """Whether a <= b: decided by the bounds of b - a (which decide more than the bounds of each side), None where they
  cannot decide."""
  if not isinstance(a, UOp) and not isinstance(b, UOp): return a <= b
  d = ssimplify(b - a)
  if not isinstance(d, UOp): return d >= 0
  return True if d.vmin >= 0 else False if d.vmax < 0 else None

def sint_lt(a: sint, b: sint) -> bool | None:
  """Whether a < b, or None where bounds cannot decide."""
  return sint_le(a + 1, b) if isinstance(a, UOp) or isinstance(b, UOp) else a < b

def smax(a: sint, b: sint) -> sint:
  """The larger of a and b: decided by bounds where they can, else a MAX node."""
  if not isinstance(a, UOp) and not isinstance(b, UOp): return max(a, b)
  if sint_le(a, b): return b
  if sint_le(b, a): return a
  return ssimplify(_uop(a).maximum(_uop(b)))

def smin(a: sint, b: sint) -> sint:
  """The smaller of a and b: decided by bounds where they can, else a MIN node."""
  if not isinstance(a, UOp) and not isinstance(b, UOp): return min(a, b)
  if sint_le(a, b): return a
  if sint_le(b, a): return b
  return ssimplify(_uop(a).minimum(_uop(b)))

def _uop(x: sint) -> UOp: return x if isinstance(x, UOp) else UOp.const(dtypes.index, x)

def is_sym(xs: Iterable[Any]) -> bool:
  """Whether any of xs is symbolic."""
  return any(isinstance(x, UOp) for x in xs)

def sym_infer(x: sint, var_vals: dict[UOp, int]) -> int:
  """The value of x with each Variable at its value in var_vals (a BIND at its own value)."""
  if not isinstance(x, UOp): return x
  if x.op is Ops.CONST: return int(x.arg)
  if x.op is Ops.BIND: return int(x.src[1].arg)
  if x.op is Ops.DEFINE_VAR:
    if x not in var_vals: raise ValueError(f"Variable {x.arg[0]!r} has no value here: bind it (v.bind(n))")
    return var_vals[x]
  assert x.op in GroupOp.ALU, f"sym_infer of {x.op}"
  return int(python_alu[x.op](*(sym_infer(s, var_vals) for s in x.src)))

def unbind(x: sint) -> tuple[sint, dict[UOp, int]]:
  """x with each BIND replaced by its Variable, and the values they were bound to."""
  if not isinstance(x, UOp): return x, {}
  binds = [u for u in x.toposort if u.op is Ops.BIND]
  if not binds: return x, {}
  return ssimplify(x.substitute({b: b.src[0] for b in binds})), {b.src[0]: int(b.src[1].arg) for b in binds}

def variables(x: sint) -> list[UOp]:
  """The Variables x depends on (through BINDs too)."""
  return [] if not isinstance(x, UOp) else [u for u in x.toposort if is_variable(u)]

ops.dim_folders.append(ssimplify)

def sint_str(x: sint) -> str:
  """x as an expression in its Variables' names (`start_pos+1`), for shapes in messages and DEBUG output."""
  return str(x) if not isinstance(x, UOp) else render_index(x)

def shape_str(shape: Iterable[sint]) -> str:
  """A shape for a message: `(1, 4, start_pos+1)`."""
  items = [sint_str(s) for s in shape]
  return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
