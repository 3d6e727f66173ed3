"""Kernel (AST + axes) -> loop-level UOps: every axis becomes an index, every view becomes index math."""
from __future__ import annotations
from dataclasses import dataclass
from lazytensor.codegen.kernel import AxisKind, Kernel
from lazytensor.dtype import dtypes
from lazytensor.uop.ops import GroupOp, Ops, UOp, graph_rewrite
from lazytensor.uop.symbolic import simplify, symbolic

def _const(v: int) -> UOp: return UOp.const(dtypes.index, v)

@dataclass
class _Indices:
  """The index of each axis, for the kernel's full shape and for its output shape (reduce axes at 0)."""
  full: list[UOp]
  out: list[UOp]

def _axis_indices(k: Kernel) -> _Indices:
  full: list[UOp] = []
  for i, (size, kind) in enumerate(zip(k.full_shape, k.kinds)):
    if kind in (AxisKind.GLOBAL, AxisKind.REDUCE):
      full.append(UOp(Ops.RANGE, dtypes.index, (_const(0), _const(size)), (i, kind.name.lower())))
    else: raise NotImplementedError(f"lowering of {kind} axes")
  out = [_const(0) if kind.is_reduce else idx for idx, kind in zip(full, k.kinds)]
  return _Indices(full, out)

class _Lowerer:
  def __init__(self, k: Kernel) -> None:
    self.k, self.idx = k, _axis_indices(k)
    self.memo: dict[UOp, UOp] = {}

  def index_of(self, node: UOp) -> tuple[UOp, UOp]:
    st = self.k.st_of(node)
    idxs = self.idx.full if st.shape == self.k.full_shape else self.idx.out
    idx, valid = st.to_indexed_uops(idxs)
    return simplify(idx), simplify(valid)

  def lower(self, node: UOp) -> UOp:
    if (hit := self.memo.get(node)) is not None: return hit
    ret = self._lower(node)
    self.memo[node] = ret
    return ret

  def _lower(self, node: UOp) -> UOp:
    op = node.op
    if op is Ops.SINK: return UOp(Ops.SINK, dtypes.void, tuple(self.lower(s) for s in node.src))
    if op in (Ops.LOAD, Ops.STORE, Ops.CONST, Ops.IOTA, Ops.VALID): return self._lower_view_op(node)
    if op is Ops.REDUCE_AXIS:
      ranges = tuple(self.idx.full[i] for i in self.k.axes_of(AxisKind.REDUCE))
      return UOp(Ops.REDUCE, node.dtype, (self.lower(node.src[0]),) + ranges, node.arg[0])
    assert op in GroupOp.Elementwise, f"cannot lower {op}"
    return UOp(op, node.dtype, tuple(self.lower(s) for s in node.src), node.arg)

  def _lower_view_op(self, node: UOp) -> UOp:
    idx, valid = self.index_of(node)
    always = valid.op is Ops.CONST and valid.arg is True
    never = valid.op is Ops.CONST and valid.arg is False
    if node.op is Ops.VALID: return valid
    if node.op is Ops.CONST:
      c = UOp.const(node.dtype, node.arg)
      return c if always else valid.where(c, UOp.const(node.dtype, 0))
    if node.op is Ops.IOTA: return idx if always else valid.where(idx, _const(0))
    buf = node.src[0]
    if node.op is Ops.LOAD:
      if never: return UOp.const(node.dtype, 0)
      srcs = (buf, idx) if always else (buf, idx, valid, UOp.const(node.dtype, 0))
      return UOp(Ops.LOAD, node.dtype, srcs)
    value = self.lower(node.src[2])
    if never: return UOp(Ops.NOOP, dtypes.void)
    return UOp(Ops.STORE, dtypes.void, (buf, idx, value) if always else (buf, idx, value, valid))

def lower_kernel(k: Kernel) -> UOp:
  """The loop-level program of a kernel as a graph: a SINK of STOREs over RANGEs, REDUCEs, LOADs and ALU ops."""
  sink = _Lowerer(k).lower(k.ast)
  if k.renderer.extra_matcher is not None: sink = graph_rewrite(sink, k.renderer.extra_matcher, name="renderer rules")
  return graph_rewrite(sink, symbolic, name="symbolic")
