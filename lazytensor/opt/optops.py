"""The vocabulary of kernel optimizations: the kinds of a kernel's axes (`AxisKind`, with their DEBUG colors), the
optimizations (`OptOps`) and one step of them (`Opt`), and the error an illegal one raises. What each OptOp may do is
its row in opt/rules.py's table."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from lazytensor.helpers import THREADS, colored


class AxisKind(enum.Enum):
  GLOBAL = ("blue", False)
  THREAD = ("blue", True)
  LOCAL = ("cyan", False)
  GROUP = ("green", False)
  MID = ("white", False)   # an output axis of a GROUP kernel: threads while the reduce runs, upcast where it finishes
  REDUCE = ("red", False)
  UNROLL = ("magenta", False)
  UPCAST = ("yellow", False)

  @property
  def is_reduce(self) -> bool: return self in (AxisKind.GROUP, AxisKind.REDUCE, AxisKind.UNROLL)

def axis_legend() -> str:
  """The color of each axis kind, as DEBUG>=3 shows kernel shapes."""
  return "axis colors: " + " ".join(colored(kind.name.lower(), *kind.value) for kind in AxisKind)

class KernelOptError(Exception):
  """An optimization that this kernel or its renderer cannot take; search treats it as a failed candidate."""

class OptOps(enum.Enum):
  LOCAL = enum.auto()      # part of a global axis becomes GPU threads of a block
  UPCAST = enum.auto()     # part of a global axis is computed per thread in registers / SIMD lanes
  UNROLL = enum.auto()     # part of a reduce axis is unrolled into registers
  GROUP = enum.auto()      # part of a reduce axis is split across threads, combined through shared memory
  GROUPTOP = enum.auto()   # GROUP taking the outer part of the axis
  PADTO = enum.auto()      # pad an axis up to a multiple of amt (masked) so it splits evenly
  TC = enum.auto()         # map a multiply-accumulate onto tensor cores
  NOLOCALS = enum.auto()   # forbid LOCAL from here on
  SWAP = enum.auto()       # exchange two global axes (loop order)
  THREAD = enum.auto()     # split a global axis into shares that CPU threads claim (one thread: a cache block loop)
  UPCASTMID = enum.auto()  # in a GROUP kernel, part of an output axis: threads in the reduce, upcast where it finishes
  def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True)
class Opt:
  """One optimization step. `axis` indexes the kernel's current axes (as DEBUG=3 shows them); amt 0 = the whole axis.
  For SWAP, amt is the other axis; for TC, axis picks one of the renderer's tensor cores."""
  op: OptOps
  axis: int | None = None
  amt: int = 0
  def __repr__(self) -> str: return f"Opt(op={self.op!r}, axis={self.axis}, amt={self.amt})"

# a THREAD axis may have more shares (core ids) than there are threads: the threads claim them one at a time
# (runtime/cpu_threads.py), so one that starts late or is held up does fewer of them. A share is also the outermost
# loop of the kernel, a block of its output finished before the next: with THREADS=1 the shares run in order, which
# keeps the part of an operand one share reads in cache (heuristic._cache_blocks)
MAX_SHARES_PER_THREAD = 8

def max_shares() -> int:
  """The most shares a THREAD axis may have (on one thread the shares run in order)."""
  return max(1, int(THREADS.value)) * MAX_SHARES_PER_THREAD
