"""The optimizations a kernel can take, as a table: one row per OptOp says which axis kinds it applies to, the kind of
the part it splits off, whether its amount may be the whole axis (0), what the renderer must be able to do, its limits,
and the amounts BEAM tries. `apply_opt(k, opt)` checks an opt against its row (`check`) and applies the row's effect,
the heuristics ask `legal`, and BEAM's actions are built from the rows (opt/search_actions.py). A new OptOp is a row
(plus lowering, codegen/lowerer.py, if it brings a new axis kind).

Reading a row, e.g. UPCAST: it takes a GLOBAL or LOCAL axis, splits `amt` off it (amt must divide the axis; 0 is the
whole axis) as an UPCAST axis, needs nothing of the renderer, keeps within the renderer's upcast budget and never
splits a scatter's entries; BEAM tries the amounts 0, 2, 3, 4, 6, 7, 8, 16 and 32 on each such axis.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lazytensor.helpers import THREADS
from lazytensor.opt.kernel import Kernel
from lazytensor.opt.optops import MAX_SHARES_PER_THREAD, AxisKind, KernelOptError, Opt, OptOps, max_shares
from lazytensor.uop.ops import UOp

if TYPE_CHECKING:
  from lazytensor.renderer import Renderer

@dataclass(frozen=True)
class Need:
  """A renderer capability: `what` it lacks is said in the error."""
  what: str
  has: Callable[[Renderer], bool]

LOCALS = Need("local threads", lambda r: r.has_local)
SHARED = Need("shared memory to group a reduce through", lambda r: r.has_local and r.has_shared)
CPU_THREADS = Need("CPU threads to run a kernel on", lambda r: r.has_threads)
TENSOR_CORES = Need("tensor cores", lambda r: bool(r.tensor_cores))

# a limit says why `amt` of `axis` breaks it, or None
Limit = Callable[["Kernel", int, int], "str | None"]

def upcast_budget(k: Kernel, axis: int, amt: int) -> str | None:
  most = k.renderer.upcast_max
  return None if k.upcast_size() * amt <= most else f"upcasting past {most} elements"

def block_threads(k: Kernel, axis: int, amt: int) -> str | None:
  most = k.renderer.threads_max
  return None if k.local_size() * amt <= most else f"more than {most} threads per block"

def locals_allowed(k: Kernel, axis: int, amt: int) -> str | None:
  return "NOLOCALS was applied" if k.dont_use_locals else None

def no_locals_yet(k: Kernel, axis: int, amt: int) -> str | None:
  return "the kernel already has local axes" if k.axes_of(AxisKind.LOCAL, AxisKind.GROUP, AxisKind.MID) else None

def one_axis(kind: AxisKind) -> Limit:
  def limit(k: Kernel, axis: int, amt: int) -> str | None:
    return f"the kernel already has a {kind.name} axis" if k.axes_of(kind) else None
  return limit

def grouped(k: Kernel, axis: int, amt: int) -> str | None:
  return None if k.axes_of(AxisKind.GROUP) else "needs a GROUP axis first (it is upcast where the partials meet)"

def shares_per_thread(k: Kernel, axis: int, amt: int) -> str | None:
  return None if amt <= max_shares() else \
    f"{amt} shares is more than {MAX_SHARES_PER_THREAD} per thread of THREADS={THREADS.value}"

def entries_in_order(k: Kernel, axis: int, amt: int) -> str | None:
  # two entries may name one target: without atomics, entries run one after another in one thread, never in lanes or
  # threads at once
  return None if k.scatter is None or k.atomic else \
    "a scatter kernel's entries (its reduce axes) may name the same target, so they run in order: no UNROLL or GROUP"

def entries_whole(k: Kernel, axis: int, amt: int) -> str | None:
  # a padded entry would still update the target its masked index reads as (0); lanes of one thread naming one target
  # would be one store (the same node), so even atomic entries are never lanes
  return "a scatter kernel's entries are neither padded nor upcast" if axis in k.entry_axes() else None

def first(k: Kernel, axis: int, amt: int) -> str | None:
  return "TC must be the first optimization" if k.applied_opts else None

def beside_the_tensor_core(k: Kernel, axis: int, amt: int) -> str | None:
  # the instruction's own M, N and K are spread over a warp's lanes and registers as its layout says; its tiles
  # (axis_m, axis_n, axis_k) and any other axis may be split
  tc = k.tensor_core
  return f"axis {axis} is the tensor core's own" if tc is not None and axis in tc.inner else None

def one_of_the_tensor_cores(k: Kernel, axis: int, amt: int) -> str | None:
  n = len(k.renderer.tensor_cores)
  return None if 0 <= axis < n else f"axis selects one of {n} tensor cores"

def pads_something(k: Kernel, axis: int, amt: int) -> str | None:
  size = k.full_shape[axis]
  return None if size % amt else f"axis {axis} of size {size} is already a multiple of {amt}"

def pads_at_most_double(k: Kernel, axis: int, amt: int) -> str | None:
  size, new = k.full_shape[axis], -(-k.full_shape[axis] // amt) * amt
  return None if new <= size * 2 else f"padding {size} to {new} more than doubles the work"

def thread_amounts() -> tuple[int, ...]:
  """THREAD shares BEAM tries: powers of two and the thread count's multiples, up to max_shares() (on one thread,
  shares are blocks of the output that run in order: heuristic._cache_blocks)."""
  cores = max(1, int(THREADS.value))
  return tuple(sorted({n for n in (2, 4, 8, 16, 32, 64, 128) if n <= max_shares()} |
                      {cores * m for m in (1, 2, 4) if cores * m > 1}))

class Amt(enum.Enum):
  """What an opt's amt means."""
  SPLIT = enum.auto()  # the size of the part split off, dividing the axis; 0 = the whole axis
  PAD = enum.auto()    # the multiple the axis is padded up to
  AXIS = enum.auto()   # another axis of one of the row's kinds (SWAP)
  NONE = enum.auto()   # unused

@dataclass(frozen=True)
class OptRow:
  """How one OptOp is checked, applied and searched."""
  kinds: tuple[AxisKind, ...]  # the kinds of axis it applies to; () where opt.axis is not an axis of the shape
  makes: AxisKind | None = None  # the kind of the part split off; None where the effect is not a split
  top: bool = False              # the split takes the outer part of the axis
  amt: Amt = Amt.SPLIT
  whole: bool = True             # amt 0 (the whole axis) is allowed
  needs: tuple[Need, ...] = ()
  limits: tuple[Limit, ...] = ()
  after_tc: bool = False         # may follow TC: splits of its tiles into warps (LOCAL), tiles a warp holds (UPCAST)
                                 # and K-blocks staged in shared memory at once (UNROLL); no SWAP, pad or group
  beam: tuple[int, ...] | Callable[[], tuple[int, ...]] = ()  # the amounts BEAM tries on each axis it applies to
  effect: Callable[[Kernel, int, int], None] | None = None  # what it does, where it is not a split into `makes`

  def amounts(self) -> tuple[int, ...]: return self.beam() if callable(self.beam) else self.beam

def _swap(k: Kernel, axis: int, other: int) -> None:
  order = list(range(k.shape_len))
  order[axis], order[other] = other, axis
  k.permute(order)

def _no_locals(k: Kernel, axis: int, amt: int) -> None: k.dont_use_locals = True

def _pad(k: Kernel, axis: int, amt: int) -> None: k.pad_axis(axis, amt)

def _tensor_core(k: Kernel, axis: int, amt: int) -> None: k.use_tensor_core(axis)

_OUT, _RED = (AxisKind.GLOBAL,), (AxisKind.REDUCE,)

# in the order BEAM tries them on each axis (opt/search_actions.py); 6: rows of an AVX2 register tile (6 x 2 <8 x float>
# fill 12 of 16 registers); 7: a conv's 56-wide rows
OPTOPS: dict[OptOps, OptRow] = {
  OptOps.UPCAST: OptRow((AxisKind.GLOBAL, AxisKind.LOCAL), AxisKind.UPCAST,
                        limits=(entries_whole, upcast_budget, beside_the_tensor_core), after_tc=True,
                        beam=(0, 2, 3, 4, 6, 7, 8, 16, 32)),
  OptOps.SWAP: OptRow(_OUT, amt=Amt.AXIS, effect=_swap),
  OptOps.THREAD: OptRow(_OUT, AxisKind.THREAD, top=True, needs=(CPU_THREADS,),
                        limits=(one_axis(AxisKind.THREAD), shares_per_thread), beam=thread_amounts),
  OptOps.LOCAL: OptRow(_OUT, AxisKind.LOCAL, needs=(LOCALS,), limits=(locals_allowed, block_threads,
                                                                       beside_the_tensor_core),
                       after_tc=True, beam=(2, 4, 8, 16, 32)),
  OptOps.UPCASTMID: OptRow(_OUT, AxisKind.MID, needs=(SHARED,),
                           limits=(locals_allowed, grouped, block_threads, upcast_budget), beam=(2, 4)),
  OptOps.UNROLL: OptRow(_RED, AxisKind.UNROLL, limits=(entries_in_order, upcast_budget, beside_the_tensor_core),
                        after_tc=True, beam=(0, 2, 3, 4, 8, 16)),
  OptOps.GROUP: OptRow(_RED, AxisKind.GROUP, needs=(SHARED,),
                       limits=(entries_in_order, locals_allowed, one_axis(AxisKind.GROUP), block_threads),
                       beam=(0, 4, 8, 16)),
  OptOps.GROUPTOP: OptRow(_RED, AxisKind.GROUP, top=True, needs=(SHARED,),
                          limits=(entries_in_order, locals_allowed, one_axis(AxisKind.GROUP), block_threads),
                          beam=(16, 32, 64, 128, 256)),
  OptOps.PADTO: OptRow((AxisKind.GLOBAL, AxisKind.REDUCE), amt=Amt.PAD, whole=False,
                       limits=(entries_whole, pads_something, pads_at_most_double), beam=(4, 8, 16, 32), effect=_pad),
  OptOps.TC: OptRow((), amt=Amt.NONE, needs=(TENSOR_CORES,), limits=(one_of_the_tensor_cores, first),
                   effect=_tensor_core),
  OptOps.NOLOCALS: OptRow((), amt=Amt.NONE, limits=(no_locals_yet,), after_tc=True,
                         effect=_no_locals),
}
assert set(OPTOPS) == set(OptOps), "every OptOp has a row"

def _axis(k: Kernel, opt: Opt, row: OptRow) -> int:
  """The axis an opt names, of one of the row's kinds."""
  if not row.kinds: return opt.axis or 0
  _check(opt.axis is not None and 0 <= opt.axis < k.shape_len, f"{opt}: axis out of range for shape {k.full_shape}")
  assert opt.axis is not None
  kind = k.kinds[opt.axis]
  _check(kind in row.kinds, f"{opt}: axis {opt.axis} is {kind.name}, expected {'/'.join(x.name for x in row.kinds)}")
  return opt.axis

def _amount(k: Kernel, opt: Opt, row: OptRow, axis: int) -> int:
  """The amount an opt names, checked as the row reads it."""
  if row.amt is Amt.AXIS:
    _check(0 <= opt.amt < k.shape_len and opt.amt != axis and k.kinds[opt.amt] in row.kinds,
           f"{opt}: amt must name another {'/'.join(x.name for x in row.kinds)} axis")
    return opt.amt
  if row.amt is Amt.NONE: return opt.amt
  size = k.full_shape[axis]
  # one program serves every value of a symbolic axis: no amount is known to divide it, nor to pad it
  _check(not isinstance(size, UOp), f"{opt}: axis {axis} has the symbolic size {size}; it is not split")
  _check(opt.amt != 0 or row.whole, f"{opt}: amt 0 (the whole axis) is not an amount for {opt.op.name}")
  amt = size if opt.amt == 0 else opt.amt
  _check(amt > 1 or (opt.amt == 0 and size > 1), f"{opt}: amount must be > 1")
  if row.amt is Amt.SPLIT:
    _check(size % amt == 0, f"{opt}: {amt} does not divide axis {axis} of size {size} (use PADTO first)")
  return amt

def check(k: Kernel, opt: Opt) -> tuple[int, int]:
  """Check `opt` against its row: raise KernelOptError naming the opt and what its row allows, else return its axis
  and amount (0 resolved to the whole axis)."""
  row, r = OPTOPS[opt.op], k.renderer
  for need in row.needs: _check(need.has(r), f"{opt}: {r.device or 'this device'} has no {need.what}")
  _check(row.after_tc or k.tensor_core is None,
         f"{opt}: {opt.op.name} cannot follow TC (the tensor core fixes the layout)")
  axis = _axis(k, opt, row)
  amt = _amount(k, opt, row, axis)
  for limit in row.limits:
    if (why := limit(k, axis, amt)) is not None: raise KernelOptError(f"{opt}: {why}")
  return axis, amt

def apply(k: Kernel, opt: Opt) -> None:
  """Check `opt` against its row and apply its effect (apply_opt undoes it where it then fails)."""
  row = OPTOPS[opt.op]
  axis, amt = check(k, opt)
  if row.effect is not None: row.effect(k, axis, amt)
  else:
    assert row.makes is not None, f"{opt.op.name}: a row without an effect splits"
    k.split_axis(axis, amt, row.makes, top=row.top)

def apply_opt(k: Kernel, opt: Opt) -> None:
  """Apply one optimization (checked against its row of OPTOPS), or raise KernelOptError and leave the kernel as it
  was."""
  saved = (k.full_shape, list(k.kinds), list(k.sts), k.reduce_pad, k.out_pad, k.tensor_core, k.dont_use_locals)
  try:
    apply(k, opt)
    _check(k.shared_bytes() <= k.renderer.shared_max, f"{opt}: {k.shared_bytes()} bytes of shared memory; "
           f"a block has at most {k.renderer.shared_max}")
  except KernelOptError:
    (k.full_shape, k.kinds, k.sts, k.reduce_pad, k.out_pad, k.tensor_core, k.dont_use_locals) = saved
    raise
  k.applied_opts.append(opt)

def legal(k: Kernel, opt: Opt) -> bool:
  """Whether `opt`'s row allows it on `k` now (applying it may still find that it needs too much shared memory)."""
  try: check(k, opt)
  except KernelOptError: return False
  return True

def _check(cond: bool, msg: str) -> None:
  if not cond: raise KernelOptError(msg)
