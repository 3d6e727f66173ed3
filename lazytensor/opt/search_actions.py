"""BEAM search's candidates (opt/search.py): the opts worth trying on a kernel (`actions`), the opt lists one edit
away from a kernel's (`edits`), and what prunes a candidate before it is compiled (`hopeless`) or marks it as one
already seen (`kernel_state`).
"""
from __future__ import annotations

from collections.abc import Sequence

from lazytensor.helpers import BEAM_LOCAL_MAX, BEAM_UPCAST_MAX, THREADS, prod
from lazytensor.opt.heuristic import blocks_may_pay
from lazytensor.opt.kernel import Kernel, KernelOptError, Opt, OptOps
from lazytensor.opt.rules import OPTOPS, Amt, apply_opt
from lazytensor.uop.ops import GroupOp, Ops, UOp

MAX_PAD_WORK = 1.25     # PADTO may add at most this much work
MAX_BODY_OPS = 4096     # register lanes x ALU ops per element: longer unrolled bodies mostly cost compile time
# a kernel without a reduce keeps no accumulators in its lanes: past 4 vectors of 16 floats (a 16x4 tile of a
# transposing copy) its timings tie (the 1024 matmul's packing copies: 32-128 lanes within 3% of each other) while each
# lane's index costs lowering time (128 lanes: ~150 ms a candidate; the copies' searches were half of a cold BEAM=2 of
# the matmul)
MAX_ELEMENTWISE_LANES = 64
EXPANDING_OPS = {Ops.EXP2: 16, Ops.LOG2: 16, Ops.SIN: 32, Ops.COS: 32}  # about this many ALU ops each once lowered

def _beam_worthy(k: Kernel, op: OptOps) -> bool:
  """Whether BEAM tries `op` on `k` at all, beyond what the rows allow: on one thread THREAD shares are only cache
  blocks, worth trying where they may pay; TC only as the first opt (its row rejects it later anyway)."""
  if op is OptOps.THREAD: return int(THREADS.value) > 1 or blocks_may_pay(k)
  if op is OptOps.TC: return not k.applied_opts
  return True

def actions(k: Kernel) -> list[Opt]:
  """Every opt worth trying next on `k`, from the rows of rules.OPTOPS: each row's amounts on each axis of its kinds
  (SWAP: each later axis of its kinds; TC: each tensor core), where the renderer has what the row needs."""
  rows = [(op, row) for op, row in OPTOPS.items()
          if all(need.has(k.renderer) for need in row.needs) and _beam_worthy(k, op)]
  out = []
  for axis, kind in enumerate(k.kinds):
    for op, row in rows:
      if kind not in row.kinds: continue
      if row.amt is Amt.AXIS: out += [Opt(op, axis, other) for other in range(axis + 1, k.shape_len)
                                      if k.kinds[other] in row.kinds]
      else: out += [Opt(op, axis, a) for a in row.amounts()]
  out += [Opt(op, i, 0) for op, row in rows if op is OptOps.TC for i in range(len(k.renderer.tensor_cores))]
  return out

def edits(opts: Sequence[Opt]) -> list[list[Opt]]:
  """Opt lists one edit away: one opt dropped, or one opt with another amount. Appending only ever adds to a beam
  member; edits let the search leave a good start (the heuristics' tile) for a neighbouring one (a narrower tile that
  leaves registers for an unroll, threads on another axis)."""
  out = []
  for i, o in enumerate(opts):
    out.append([*opts[:i], *opts[i + 1:]])
    out += [[*opts[:i], Opt(o.op, o.axis, amt), *opts[i + 1:]] for amt in OPTOPS[o.op].amounts() if amt != o.amt]
  return out

def kernel_state(k: Kernel) -> tuple:
  """What decides the code a kernel lowers to: two kernels with the same state are the same candidate."""
  return (k.full_shape, tuple(k.kinds), tuple(k.sts), k.reduce_pad, k.out_pad, k.tensor_core)

def body_ops(ast: UOp) -> int:
  """ALU ops per output element, transcendentals counted as the polynomials they lower to."""
  return sum(EXPANDING_OPS.get(u.op, 1) for u in ast.toposort if u.op in GroupOp.ALU or u.op is Ops.REDUCE_AXIS)

def hopeless(k: Kernel, work: int, ops: int) -> bool:
  """Too many register lanes (MAX_ELEMENTWISE_LANES without a reduce) or local threads, a register body so long that it
  only costs compile time, or padding that adds too much work."""
  lanes = k.upcast_size()
  most = int(BEAM_UPCAST_MAX.value) if k.reduce_axes else min(int(BEAM_UPCAST_MAX.value), MAX_ELEMENTWISE_LANES)
  return lanes > most or k.local_size() > int(BEAM_LOCAL_MAX.value) or \
    (lanes > 1 and lanes * ops > MAX_BODY_OPS) or prod(k.full_shape) > MAX_PAD_WORK * work

def replay(k: Kernel, opts: Sequence[Opt]) -> Kernel | None:
  """`k` with `opts` applied, or None when one of them is illegal for it."""
  out = k.copy()
  try:
    for o in opts: apply_opt(out, o)
  except KernelOptError: return None
  return out
