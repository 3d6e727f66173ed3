"""The IR spec: for the kernel AST and after each pass of codegen/program.PIPELINE, which ops may appear, with which
sources and dtypes.

A table is a list of rules; a rule names an op (or several) and says, as a UPat and a test of what it binds, what a
valid node of that op looks like. A node is valid when a rule for its op holds; a node no rule names, or that breaks
every rule for its op, fails. `check_pass` checks one pass's output; as a listener of uop.ops.rewrite_listeners it
checks every pass as it runs: the tests register it for representative kernels (test/test_spec.py), so a pass that
leaves a wrong node fails with an error that names the pass, the node and the rules it breaks. The passes over the
tensor graph (multi, resolve) have no table: their graphs hold every op a Tensor may build.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lazytensor.dtype import DType, PtrDType, dtypes
from lazytensor.renderer import ASYNC_COPY
from lazytensor.uop.ops import GroupOp, Ops, UOp, UPat


@dataclass(frozen=True)
class Rule:
  """Nodes that `pat` matches are valid where `ok` holds of its bindings. `text` says the rule in words."""
  text: str
  pat: UPat
  ok: Callable[..., bool] = lambda **_: True

class SpecError(AssertionError):
  """A node that the spec of a pass does not allow (an AssertionError: a bug in lazytensor, never the user's)."""

def _idx(dt: DType) -> bool: return dt.scalar() in (dtypes.index, dtypes.int32, dtypes.int64)
def _sized(dt: DType) -> bool: return dt.scalar() in (dtypes.int32, dtypes.int64)
def _ptr(u: UOp) -> bool: return isinstance(u.dtype, PtrDType)
def _bool(u: UOp) -> bool: return u.dtype.scalar() == dtypes.bool
def _scalar_arg(u: UOp) -> bool:
  # its index among the kernel's scalar arguments, or a Variable's (name, min, max) until index_dtype numbers it
  numbered = type(u.arg) is int and u.arg >= 0
  return (numbered or isinstance(u.arg, tuple)) and not _ptr(u) and u.dtype.count == 1 and u.dtype != dtypes.void

_BUF, _ANY = UPat((Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL), name="buf"), UPat(name="x")
_ALU_OK: dict[Ops, Callable[[UOp], bool]] = {
  Ops.WHERE: lambda u: _bool(u.src[0]) and u.src[1].dtype == u.src[2].dtype == u.dtype,
  Ops.CMPLT: lambda u: _bool(u) and u.src[0].dtype == u.src[1].dtype,
  Ops.CMPNE: lambda u: _bool(u) and u.src[0].dtype == u.src[1].dtype,
}

def _alu(u: UOp) -> bool:
  """Sources as wide as the node, of its dtype (a comparison's are alike and it is bool, a WHERE's condition bool)."""
  if u.op in _ALU_OK: return _ALU_OK[u.op](u)
  return all(s.dtype == u.dtype for s in u.src) and len(u.src) == (1 if u.op in GroupOp.Unary else
                                                                     2 if u.op in GroupOp.Binary else 3)

_ALU_TEXT = "ALU ops: sources of the node's dtype (comparisons: alike, bool out; WHERE: a bool condition)"
def _of(x: UOp, buf: UOp) -> bool: return x.dtype.scalar().name == buf.dtype.name  # an element of the buffer

# ---- the kernel AST: what the scheduler hands to `lower` ----

_VIEW = UPat(Ops.VIEW, name="view")
AST: list[Rule] = [
  Rule("SINK of the kernel's stores", UPat(Ops.SINK, name="u"),
       lambda u: all(s.op in GroupOp.Store | {Ops.CHECK} for s in u.src)),
  Rule("STORE(buffer, VIEW, value)", UPat(Ops.STORE, dtypes.void, (_BUF, _VIEW, _ANY))),
  Rule("SCATTER(buffer, VIEW, value, int index), arg (op, entry axes, stride, n)",
       UPat(Ops.SCATTER, dtypes.void, (_BUF, _VIEW, _ANY, UPat(name="e")), name="u"),
       lambda u, e, **_: e.dtype.is_int and u.arg[0] in (Ops.ADD, Ops.MAX) and len(u.arg) == 4),
  Rule("LOAD(buffer, VIEW) of the buffer's dtype", UPat(Ops.LOAD, src=(_BUF, _VIEW), name="u"),
       lambda u, buf, **_: _of(u, buf)),
  Rule("GATHER(buffer, VIEW, int index), arg (stride, n)",
       UPat(Ops.GATHER, src=(_BUF, _VIEW, UPat(name="e")), name="u"),
       lambda u, buf, e, **_: e.dtype.is_int and _of(u, buf) and len(u.arg) == 2),
  Rule("CONST, IOTA or VALID of a VIEW (a CONST also alone)", UPat((Ops.CONST, Ops.IOTA, Ops.VALID), src=(_VIEW,))),
  Rule("a CONST without a view", UPat(Ops.CONST, src=())),
  Rule("DEFINE_VAR of a VIEW: a scalar argument, its index", UPat(Ops.DEFINE_VAR, src=(_VIEW,), name="u"),
       lambda u: _scalar_arg(u)),
  Rule("VIEW: a ShapeTracker, no sources", UPat(Ops.VIEW, src=())),
  Rule("DEFINE_GLOBAL: a pointer, its argument index", UPat(Ops.DEFINE_GLOBAL, src=(), name="u"),
       lambda u: _ptr(u) and isinstance(u.arg, int)),
  Rule("REDUCE_AXIS(value), arg (op, axes)", UPat(Ops.REDUCE_AXIS, src=(_ANY,), name="u"),
       lambda u, x: u.arg[0] in GroupOp.Reduce and u.dtype == x.dtype),
  Rule("CHECK(flags, int index, bool ok)", UPat(Ops.CHECK, src=(_BUF, UPat(name="e"), UPat(name="ok")), name="u"),
       lambda u, e, ok, **_: e.dtype.is_int and _bool(ok) and u.dtype == e.dtype),
  Rule("CAST or BITCAST of one value", UPat((Ops.CAST, Ops.BITCAST), src=(_ANY,))),
  Rule(_ALU_TEXT, UPat(GroupOp.ALU, name="u"), _alu),
]

# ---- the loop-level graph: after lower, renderer_rules, symbolic ----

def _ld(u: UOp, buf: UOp, idx: UOp, index: Callable[[DType], bool]) -> bool:
  src = u.src[:-1] if u.src[-1].op is Ops.BARRIER else u.src  # a barrier, last, only orders the load after it
  gated = len(src) == 4
  return len(src) in (2, 4) and index(idx.dtype) and _of(u, buf) and \
    (not gated or (_bool(src[2]) and src[3].dtype == u.dtype))

def _async_store(u: UOp, buf: UOp) -> bool:
  """An asynchronous copy: a LOAD from global memory stored to shared memory as it is."""
  return buf.op is Ops.DEFINE_LOCAL and u.src[2].op is Ops.LOAD and u.src[2].src[0].op is Ops.DEFINE_GLOBAL

def _loop(index: Callable[[DType], bool], alu: Callable[[UOp], bool] = _alu, alu_text: str = _ALU_TEXT) -> list[Rule]:
  """The loop-level ops, index math in dtypes for which `index` holds, ALU ops valid where `alu` holds."""
  i = UPat(name="idx")
  return [
    Rule("SINK of STOREs and the arguments none reads", UPat(Ops.SINK, name="u"),
         lambda u: all(s.op in (Ops.STORE, Ops.DEFINE_GLOBAL, Ops.DEFINE_VAR) for s in u.src)),
    Rule("STORE(buffer, index, value, [bool gate]), arg None, an atomic op, or ASYNC_COPY (shared <- global LOAD)",
         UPat(Ops.STORE, dtypes.void, (_BUF, i, _ANY), name="u", allow_any_len=True),
         lambda u, buf, idx, x: index(idx.dtype) and len(u.src) in (3, 4) and (len(u.src) == 3 or _bool(u.src[3])) and
         _of(x, buf) and (u.arg in (None, Ops.ADD, Ops.MAX) or (u.arg == ASYNC_COPY and _async_store(u, buf)))),
    Rule("LOAD(buffer, index, [bool gate, alt of its dtype], [BARRIER])", UPat(Ops.LOAD, src=(_BUF, i), name="u",
                                                                                 allow_any_len=True),
         lambda u, buf, idx: _ld(u, buf, idx, index)),
    Rule("LOAD(shared memory, index, BARRIER, *STOREs issued after the barrier)",
         UPat(Ops.LOAD, src=(UPat(Ops.DEFINE_LOCAL), i, UPat(Ops.BARRIER)), name="u", allow_any_len=True),
         lambda u, **_: all(s.op is Ops.STORE for s in u.src[3:])),
    Rule("RANGE(start, end) of index dtype, arg (axis, kind)", UPat(Ops.RANGE, src=(UPat(), UPat()), name="u"),
         lambda u: index(u.dtype) and all(s.dtype == u.dtype for s in u.src)),
    Rule("SPECIAL: a launch index of index dtype, arg (name, size)", UPat(Ops.SPECIAL, src=(), name="u"),
         lambda u: index(u.dtype)),
    Rule("REDUCE(value, *RANGEs), arg the op", UPat(Ops.REDUCE, name="u"),
         lambda u: u.arg in GroupOp.Reduce and all(s.op is Ops.RANGE for s in u.src[1:]) and u.src[0].dtype == u.dtype),
    Rule("REDUCE(A, B, *RANGEs), arg (WMMA, tensor core)", UPat(Ops.REDUCE, name="u"),
         lambda u: isinstance(u.arg, tuple) and u.arg[0] is Ops.WMMA and all(s.op is Ops.RANGE for s in u.src[2:])),
    Rule("DEFINE_GLOBAL or DEFINE_LOCAL: a pointer, no sources", UPat((Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL), src=(),
                                                                        name="u"), lambda u: _ptr(u)),
    Rule("BARRIER after the stores to shared memory, in the loops of its RANGEs; arg None or ASYNC_COPY (a wait first)",
         UPat(Ops.BARRIER, dtypes.void, name="u"),
         lambda u: u.arg in (None, ASYNC_COPY) and
         all((s.op is Ops.STORE and s.src[0].op is Ops.DEFINE_LOCAL) or s.op is Ops.RANGE for s in u.src)),
    Rule("CONST, no sources", UPat(Ops.CONST, src=())),
    Rule("DEFINE_VAR: a scalar argument, its index, no sources", UPat(Ops.DEFINE_VAR, src=(), name="u"),
         lambda u: _scalar_arg(u)),
    Rule("VECTORIZE of count scalars of its dtype", UPat(Ops.VECTORIZE, name="u"),
         lambda u: len(u.src) == u.dtype.count > 1 and all(s.dtype == u.dtype.scalar() for s in u.src)),
    Rule("GEP: lane arg of a vector", UPat(Ops.GEP, src=(_ANY,), name="u"),
         lambda u, x: 0 <= u.arg < x.dtype.count and u.dtype == x.dtype.scalar()),
    Rule("CAST or BITCAST of one value as wide", UPat((Ops.CAST, Ops.BITCAST), src=(_ANY,), name="u"),
         lambda u, x: u.dtype.count == x.dtype.count),
    Rule(alu_text, UPat(GroupOp.ALU, name="u"), alu),
  ]

LOOP = _loop(_idx)
SIZED = _loop(_sized)  # after index_dtype: every index in int32 or int64

# ---- the linear program: after linearize, alu_semantics ----

def _in_order(u: UOp) -> bool:
  seen: set[UOp] = set()
  for n in u.src:
    if any(s not in seen for s in n.src): return False
    seen.add(n)
  return True

def _linear(alu: Callable[[UOp], bool], alu_text: str) -> list[Rule]:
  """The ops of the linear program: the loop level's with sized indices, less REDUCE (now accumulators), in order."""
  return [r for r in _loop(_sized, alu, alu_text) if r.pat.op not in ((Ops.SINK,), (Ops.REDUCE,))] + [
    Rule("SINK of the program, each op after its sources", UPat(Ops.SINK, name="u"), _in_order),
    Rule("ENDRANGE(RANGE)", UPat(Ops.ENDRANGE, src=(UPat(Ops.RANGE),))),
    Rule("DEFINE_ACC(initial constant of its dtype)", UPat(Ops.DEFINE_ACC, src=(UPat((Ops.CONST, Ops.VECTORIZE)),),
                                                           name="u"), lambda u: u.src[0].dtype == u.dtype),
    Rule("LOAD(acc, *RANGEs) inside its loops, LOAD(acc, ASSIGN) after them",
         UPat(Ops.LOAD, src=(UPat(Ops.DEFINE_ACC),), allow_any_len=True, name="u"),
         lambda u: all(s.op is Ops.RANGE for s in u.src[1:]) or (len(u.src) == 2 and u.src[1].op is Ops.ASSIGN)),
    Rule("ASSIGN(acc, value of its dtype)", UPat(Ops.ASSIGN, src=(UPat(Ops.DEFINE_ACC), _ANY), name="u"),
         lambda u, x: x.dtype == u.dtype),
    Rule("WMMA(A, B, C): a tensor-core multiply-accumulate", UPat(Ops.WMMA, src=(UPat(), UPat(), UPat())))]

def _alu_done(u: UOp) -> bool:
  """After alu_semantics also: no float MAX (NaN's meaning is made explicit), no bfloat16 arithmetic (a select is
  none: it moves bits)."""
  return _alu(u) and not (u.op is Ops.MAX and u.dtype.is_float) and \
    (u.op is Ops.WHERE or all(s.dtype.scalar() != dtypes.bfloat16 for s in (u, *u.src)))

LINEAR = _linear(_alu, _ALU_TEXT)
ALU_DONE = _linear(_alu_done, _ALU_TEXT + "; no float MAX, no bfloat16 arithmetic but selects")

# the spec of each pass's output, by the pass's name
SPEC: dict[str, list[Rule]] = {"lower": LOOP, "renderer_rules": LOOP, "symbolic": LOOP, "index_dtype": SIZED,
                               "linearize": LINEAR, "alu_semantics": ALU_DONE}

def check(root: UOp, rules: list[Rule], where: str) -> None:
  """SpecError unless every node under root is valid by some rule for its op."""
  by_op: dict[Ops, list[Rule]] = {}
  for r in rules:
    for op in r.pat.op or (): by_op.setdefault(op, []).append(r)
  for u in root.toposort:
    mine = by_op.get(u.op, [])
    if any(r.ok(**b) for r in mine for b in r.pat.match(u, {})): continue
    node = f"{u.op.name} {u.dtype} arg={u.arg!r} with sources ({', '.join(f'{s.op.name} {s.dtype}' for s in u.src)})"
    broken = "; ".join(f"'{r.text}'" for r in mine)
    raise SpecError(f"{where}: {node} breaks {broken}" if mine else f"{where}: {node}: no rule allows {u.op.name}")

def check_pass(name: str, before: UOp, after: UOp) -> None:
  """The spec of pass `name`'s output, and for `lower` the kernel AST's too; passes without a table pass."""
  if name == "lower": check(before, AST, "the kernel AST")
  if name in SPEC: check(after, SPEC[name], f"after pass {name}")
