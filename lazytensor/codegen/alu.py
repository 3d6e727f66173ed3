"""ALU edge cases get their meaning here, once, as a rewrite of the linear program before any renderer sees it.

The framework's answers (and `uop.ops.exec_alu`/`exec_cast`, which fold constants, give the same ones):
  * integer x / 0 -> 0 and x % 0 -> 0; INT_MIN / -1 -> INT_MIN (it wraps) and x % -1 -> 0; division truncates toward
    zero and the remainder takes the dividend's sign (C's);
  * a shift amount is read as unsigned; amounts >= the width give 0 for SHL and for SHR of unsigned values, and the
    sign (0 or -1) for SHR of signed ones;
  * float -> int truncates toward zero; NaN -> 0; values out of range saturate to `float_to_int_via(target)` (int32
    for narrow targets, int64 for uint32) and then wrap to the target;
  * MAX of floats is NaN when either operand is (MIN is -MAX(-a, -b), so it is too); CMPLT with a NaN is false and
    CMPNE with a NaN true, as IEEE's ordered < and unordered != are in every target language;
  * bfloat16 arithmetic is float32 arithmetic rounded to bfloat16 (nearest even) after every op, and a conversion
    between bfloat16 and anything but float32 goes through float32 (as CUDA's __float2bfloat16 after a C cast does).

After `alu_semantics`, every IDIV/MOD divisor is never 0 (nor -1 for signed types), every shift amount lies in
[0, width), every float -> int CAST has its input in range, no float MAX is left, and bfloat16 values are only loaded,
stored, selected (WHERE) and converted from and to float32: a renderer (LLVM, CUDA, EMU) emits plain division, shifts,
conversions and compare-and-select, and needs no bfloat16 arithmetic. Where the bounds prove an operand safe (a constant
divisor, as in all index math) nothing is added, so index math stays as fast as before.
"""
from __future__ import annotations

import numpy as np

from lazytensor.dtype import DType, dtypes, float_to_int_via
from lazytensor.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite

INT_DTYPES = tuple(dt for dt in dtypes.all() if dt.is_int)
FLOAT_DTYPES = tuple(dt for dt in dtypes.all() if dt.is_float)

def _signed(dt: DType) -> bool: return not dt.is_unsigned

def _can_be(x: UOp, v: int) -> bool: return bool(x.vmin <= v <= x.vmax)

# ---- division ----

def _divisor_guard(b: UOp) -> tuple[UOp | None, UOp | None, UOp]:
  """Whether b is 0, whether it is -1 (signed types), each None where the bounds rule it out, and a divisor that is
  neither: 1 in their place."""
  is0 = b.eq(0) if _can_be(b, 0) else None
  ism1 = b.eq(-1) if _signed(b.dtype) and _can_be(b, -1) else None
  bad = is0 if ism1 is None else ism1 if is0 is None else is0 | ism1
  return is0, ism1, b if bad is None else bad.where(1, b)

def _guarded(b: UOp) -> bool:
  """A divisor `_divisor_guard` made safe, or one the bounds prove safe."""
  return _divisor_guard(b)[2] is b or (b.op is Ops.WHERE and _divisor_guard(b.src[2])[2] is b)

def _idiv(d: UOp, a: UOp, b: UOp) -> UOp | None:
  if _guarded(b): return None
  is0, ism1, safe = _divisor_guard(b)
  q = a // safe
  if ism1 is not None: q = ism1.where(-a, q)  # x / -1 -> -x, wrapping for INT_MIN
  return q if is0 is None else is0.where(0, q)  # x / 0 -> 0

def _mod(d: UOp, a: UOp, b: UOp) -> UOp | None:
  # x % 1 is 0, which is the answer for x % 0 and x % -1 too
  return None if _guarded(b) else a % _divisor_guard(b)[2]

# ---- shifts ----

def _shift(s: UOp, a: UOp, b: UOp) -> UOp | None:
  width = 8 * s.dtype.itemsize
  if (b.vmin >= 0 and b.vmax < width) or (b.op is Ops.AND and b.src[1] is b.const_like(width - 1)): return None
  amount = b if b.dtype.is_unsigned else b.cast(dtypes.from_np(f"u{b.dtype.itemsize}").vec(b.dtype.count))
  in_range = amount.lt(width)
  shifted = s.replace(src=(a, b & (width - 1)))
  # out of range: SHL and unsigned SHR shift every bit out; signed SHR leaves the sign
  out = a.const_like(0) if s.op is Ops.SHL or a.dtype.is_unsigned else a >> (width - 1)
  return in_range.where(shifted, out)

# ---- float -> int ----

def _int_limits(wide: DType) -> tuple[int, int]:
  """The range [lo, hi) of floats that convert to `wide` exactly after truncation."""
  bits = 8 * wide.itemsize
  return (0, 1 << bits) if wide.is_unsigned else (-(1 << (bits - 1)), 1 << (bits - 1))

def _inside(x: UOp, wide: DType) -> UOp:
  """Whether float x truncates to a value of `wide`: false for NaN, infinities and out of range."""
  lo, hi = _int_limits(wide)
  # why the clamp: -2^31 is -inf in float16; any finite float16 fits every wide int, so the limit is its lowest
  lo_c = max(float(lo), -float(_largest_finite(x.dtype)))
  return x.lt(hi) & x.lt(lo_c).logical_not()  # hi rounds to inf where it does not fit: x < inf

def _largest_finite(dt: DType) -> float: return float(np.finfo(dt.scalar().np).max)

def _safe_float(x: UOp, wide: DType) -> UOp: return _inside(x, wide).where(x, 0.0)

def _float_to_int(c: UOp, x: UOp) -> UOp | None:
  wide = float_to_int_via(c.dtype).vec(c.dtype.count)
  if x.op is Ops.WHERE and x is _safe_float(x.src[1], wide): return None
  lo, hi = _int_limits(wide)
  out_of_range = x.lt(0).where(UOp.const(wide, lo), x.ne(x).where(UOp.const(wide, 0), UOp.const(wide, hi - 1)))
  v = _inside(x, wide).where(_safe_float(x, wide).cast(wide), out_of_range)
  return v.cast(c.dtype)

# ---- bfloat16: computed in float32 ----

BF16, F32 = dtypes.bfloat16, dtypes.float32

def _bf16_math(u: UOp) -> UOp | None:
  if u.op is Ops.WHERE or not any(s.dtype.scalar() == BF16 for s in u.src): return None  # a select needs no math
  wide = tuple(s.cast(F32.vec(s.dtype.count)) if s.dtype.scalar() == BF16 else s for s in u.src)
  out = u.replace(dtype=F32.vec(u.dtype.count) if u.dtype.scalar() == BF16 else u.dtype, src=wide)
  return out.cast(u.dtype) if u.dtype.scalar() == BF16 else out

def _bf16_cast(c: UOp, x: UOp) -> UOp | None:
  other = x.dtype if c.dtype.scalar() == BF16 else c.dtype
  if other.scalar() in (F32, BF16): return None  # float32 <-> bfloat16 is the one conversion renderers write
  return x.cast(F32.vec(c.dtype.count)).cast(c.dtype)

# ---- max ----

def _fmax(m: UOp, a: UOp, b: UOp) -> UOp:
  # b where it is larger or NaN, else a (NaN or not): NaN in either operand gives NaN
  return (a.lt(b) | b.ne(b)).where(b, a)

pm_alu_semantics: PatternMatcher[UOp] = PatternMatcher([
  # first, so that the float32 ops they make get the rules below
  (UPat(GroupOp.ALU, name="u"), _bf16_math),
  (UPat(Ops.CAST, BF16, (UPat.var("x"),), name="c"), _bf16_cast),
  (UPat(Ops.CAST, src=(UPat.var("x", BF16),), name="c"), _bf16_cast),
  (UPat(Ops.IDIV, INT_DTYPES, (UPat.var("a"), UPat.var("b")), name="d"), _idiv),
  (UPat(Ops.MOD, INT_DTYPES, (UPat.var("a"), UPat.var("b")), name="d"), _mod),
  (UPat((Ops.SHL, Ops.SHR), INT_DTYPES, (UPat.var("a"), UPat.var("b")), name="s"), _shift),
  (UPat(Ops.CAST, INT_DTYPES, (UPat.var("x", FLOAT_DTYPES),), name="c"), _float_to_int),
  (UPat(Ops.MAX, FLOAT_DTYPES, (UPat.var("a"), UPat.var("b")), name="m"), _fmax),
])

_REWRITTEN_OPS = {Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR, Ops.CAST, Ops.MAX}

def _may_change(u: UOp) -> bool:
  """Whether a rule of pm_alu_semantics can apply to u (its sources are done): skips the walk for most of a kernel."""
  return u.op in _REWRITTEN_OPS or (u.op in GroupOp.ALU and any(s.dtype.scalar() == BF16 for s in u.src))

def alu_semantics(uops: list[UOp]) -> list[UOp]:
  """The linear program with `pm_alu_semantics` applied: each op rewritten in place, and every later op rebuilt on the
  rewritten ones. A node a rewrite adds is placed right after the last of its sources: an added node is interned,
  so a later op that needs it too (a loop-invariant bfloat16 widened inside a reduce loop and again after it) reuses
  the one placed first, which must therefore sit where every later op can see it, not inside a loop since closed."""
  done: dict[UOp, UOp] = {}
  program = _Program()
  for u in uops:
    new = u.replace(src=tuple(done.get(s, s) for s in u.src)) if any(s in done for s in u.src) else u
    if _may_change(new): new = graph_rewrite(new, pm_alu_semantics, name="alu_semantics")
    program.add(new)
    if new is not u: done[u] = new
  return program.linear()

class _Program:
  """A linear program under construction: the ops in order, and after each node the added nodes placed behind it."""
  def __init__(self) -> None:
    self.ops: list[UOp] = []
    self.placed: set[UOp] = set()
    self.key: dict[UOp, tuple[int, ...]] = {}  # the program order: an op's index, then its added nodes' indices
    self.behind: dict[UOp | None, list[UOp]] = {}  # None: added nodes with no sources (constants) go first

  def add(self, op: UOp) -> None:
    """op at the end of the program, after the nodes under it not yet placed."""
    if op in self.placed: return
    for s in op.src: self._add_behind(s)
    self.placed.add(op)
    self.key[op] = (len(self.ops),)
    self.ops.append(op)

  def _add_behind(self, root: UOp) -> None:
    """root and the nodes under it not yet placed, each right after the last of its sources."""
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
      node, expanded = stack.pop()
      if node in self.placed: continue
      if not expanded:
        stack.append((node, True))
        stack.extend((s, False) for s in reversed(node.src) if s not in self.placed)
        continue
      last = max(node.src, key=self.key.__getitem__, default=None)
      after = self.behind.setdefault(last, [])
      self.key[node] = (self.key[last] if last is not None else (-1,)) + (len(after),)
      after.append(node)
      self.placed.add(node)

  def linear(self) -> list[UOp]:
    out: list[UOp] = []
    stack = list(reversed(self.behind.get(None, []) + self.ops))
    while stack:
      node = stack.pop()
      out.append(node)
      stack.extend(reversed(self.behind.get(node, [])))
    return out
