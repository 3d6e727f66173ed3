"""BEAM search's candidates (opt/search.py): the opts worth trying on a kernel (`actions`), the opt lists one edit
away from a kernel's (`edits`), and what prunes a candidate before it is compiled (`hopeless`) or marks it as one
already seen (`kernel_state`).
"""
from __future__ import annotations

from collections.abc import Sequence

from lazytensor.helpers import BEAM_LOCAL_MAX, BEAM_UPCAST_MAX, THREADS, prod
from lazytensor.opt.heuristic import blocks_may_pay
from lazytensor.opt.kernel import MAX_SHARES_PER_THREAD, AxisKind, Kernel, KernelOptError, Opt, OptOps
from lazytensor.uop.ops import GroupOp, Ops, UOp

MAX_PAD_WORK = 1.25     # PADTO may add at most this much work
MAX_BODY_OPS = 4096     # register lanes x ALU ops per element: longer unrolled bodies mostly cost compile time
EXPANDING_OPS = {Ops.EXP2: 16, Ops.LOG2: 16, Ops.SIN: 32, Ops.COS: 32}  # about this many ALU ops each once lowered

# 6: rows of an AVX2 register tile (6 x 2 <8 x float> fill 12 of 16 registers); 7: a conv's 56-wide rows
UPCAST_AMTS = (0, 2, 3, 4, 6, 7, 8, 16, 32)
UNROLL_AMTS = (0, 2, 3, 4, 8, 16)
LOCAL_AMTS = (2, 4, 8, 16, 32)
GROUP_AMTS = (0, 4, 8, 16)
GROUPTOP_AMTS = (16, 32, 64, 128, 256)
PADTO_AMTS = (4, 8, 16, 32)

def _thread_amts() -> tuple[int, ...]:
  """THREAD shares to try: powers of two and the thread count's multiples, up to MAX_SHARES_PER_THREAD per thread (on
  one thread, shares are blocks of the output that run in order: heuristic._cache_blocks)."""
  cores = max(1, int(THREADS.value))
  return tuple(sorted({n for n in (2, 4, 8, 16, 32, 64, 128) if n <= cores * MAX_SHARES_PER_THREAD} |
                      {cores * m for m in (1, 2, 4) if cores * m > 1}))

def actions(k: Kernel) -> list[Opt]:
  """Every opt worth trying next on `k`: by the kind of each axis and by what its renderer can do."""
  r, out = k.renderer, []
  for axis, kind in enumerate(k.kinds):
    if kind in (AxisKind.GLOBAL, AxisKind.LOCAL): out += [Opt(OptOps.UPCAST, axis, a) for a in UPCAST_AMTS]
    if kind is AxisKind.GLOBAL:
      out += [Opt(OptOps.SWAP, axis, other) for other in range(axis + 1, k.shape_len)
              if k.kinds[other] is AxisKind.GLOBAL]
      # on one thread, shares are only cache blocks
      if r.has_threads and (int(THREADS.value) > 1 or blocks_may_pay(k)):
        out += [Opt(OptOps.THREAD, axis, a) for a in _thread_amts()]
      if r.has_local: out += [Opt(OptOps.LOCAL, axis, a) for a in LOCAL_AMTS]
    if kind is AxisKind.REDUCE:
      out += [Opt(OptOps.UNROLL, axis, a) for a in UNROLL_AMTS]
      if r.has_shared:
        out += [Opt(OptOps.GROUP, axis, a) for a in GROUP_AMTS] + [Opt(OptOps.GROUPTOP, axis, a) for a in GROUPTOP_AMTS]
    if kind in (AxisKind.GLOBAL, AxisKind.REDUCE): out += [Opt(OptOps.PADTO, axis, a) for a in PADTO_AMTS]
  if not k.applied_opts: out += [Opt(OptOps.TC, i, 0) for i in range(len(r.tensor_cores))]
  return out

def _amounts(op: OptOps) -> tuple[int, ...]:
  table = {OptOps.UPCAST: UPCAST_AMTS, OptOps.UNROLL: UNROLL_AMTS, OptOps.LOCAL: LOCAL_AMTS, OptOps.GROUP: GROUP_AMTS,
           OptOps.GROUPTOP: GROUPTOP_AMTS, OptOps.PADTO: PADTO_AMTS, OptOps.THREAD: _thread_amts()}
  return table.get(op, ())

def edits(opts: Sequence[Opt]) -> list[list[Opt]]:
  """Opt lists one edit away: one opt dropped, or one opt with another amount. Appending only ever adds to a beam
  member; edits let the search leave a good start (the heuristics' tile) for a neighbouring one (a narrower tile that
  leaves registers for an unroll, threads on another axis)."""
  out = []
  for i, o in enumerate(opts):
    out.append([*opts[:i], *opts[i + 1:]])
    out += [[*opts[:i], Opt(o.op, o.axis, amt), *opts[i + 1:]] for amt in _amounts(o.op) if amt != o.amt]
  return out

def kernel_state(k: Kernel) -> tuple:
  """What decides the code a kernel lowers to: two kernels with the same state are the same candidate."""
  return (k.full_shape, tuple(k.kinds), tuple(k.sts), k.reduce_pad, k.out_pad, k.tensor_core)

def body_ops(ast: UOp) -> int:
  """ALU ops per output element, transcendentals counted as the polynomials they lower to."""
  return sum(EXPANDING_OPS.get(u.op, 1) for u in ast.toposort if u.op in GroupOp.ALU or u.op is Ops.REDUCE_AXIS)

def hopeless(k: Kernel, work: int, ops: int) -> bool:
  """Too many register lanes or local threads, a register body so long that it only costs compile time, or padding
  that adds too much work."""
  lanes = k.upcast_size()
  return lanes > int(BEAM_UPCAST_MAX.value) or k.local_size() > int(BEAM_LOCAL_MAX.value) or \
    (lanes > 1 and lanes * ops > MAX_BODY_OPS) or prod(k.full_shape) > MAX_PAD_WORK * work

def replay(k: Kernel, opts: Sequence[Opt]) -> Kernel | None:
  """`k` with `opts` applied, or None when one of them is illegal for it."""
  out = k.copy()
  try:
    for o in opts: out.apply_opt(o)
  except KernelOptError: return None
  return out
