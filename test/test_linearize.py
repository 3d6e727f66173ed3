"""The linearizer places every node inside the loops of the ranges it reads (codegen/linearize.py)."""
from __future__ import annotations

from lazytensor.codegen.linearize import linearize
from lazytensor.dtype import dtypes
from lazytensor.uop.ops import Ops, UOp


def _idx(v: int) -> UOp: return UOp.const(dtypes.index, v)

def _open_loops_at_each_node(program: list[UOp]) -> dict[UOp, set[UOp]]:
  open_loops: set[UOp] = set()
  seen: dict[UOp, set[UOp]] = {}
  for u in program:
    assert u.op is not Ops.RANGE or u not in open_loops, "a loop opened inside itself"
    if u.op is Ops.RANGE: open_loops.add(u)
    elif u.op is Ops.ENDRANGE: open_loops.remove(u.src[0])
    seen[u] = set(open_loops)
  return seen

def test_a_reduce_range_read_outside_the_reduce_puts_the_reduce_inside_the_readers_loops() -> None:
  # a reduce independent of the global loop (hoisted before it), and an index check's record whose index is computed
  # from the reduce's range and the global one: the record runs in both loops, so the reduce loop must sit inside the
  # global one (fuzz seeds 102218, 102602: LLVM refused the module, an index defined in one loop used in another)
  g = UOp(Ops.RANGE, dtypes.index, (_idx(0), _idx(30)), (0, "global"))
  r = UOp(Ops.RANGE, dtypes.index, (_idx(0), _idx(2)), (1, "reduce"))
  out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0)
  flags = UOp(Ops.DEFINE_GLOBAL, dtypes.int64.ptr(), (), 1)
  total = UOp(Ops.REDUCE, dtypes.float32, (UOp.const(dtypes.float32, 0.0), r), Ops.ADD)
  index = r * 5 + g // 6
  record = UOp(Ops.STORE, dtypes.void, (flags, _idx(1), index.cast(dtypes.int64), index < 2), Ops.MAX)
  sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, g, total)), record))
  program = linearize(sink)
  loops = _open_loops_at_each_node(program)
  for u in program:
    needs = {s for s in u.src if s.op is Ops.RANGE}
    assert needs <= loops[u] or u.op is Ops.ENDRANGE, f"{u.op} reads a range whose loop is not open"
  assert {g, r} <= loops[program[[u.op for u in program].index(Ops.MUL)]]
