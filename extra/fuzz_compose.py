"""Differential fuzzing of op compositions against torch: each case builds a random chain of ops (views of views,
indexing, gathers, writes into views, elementwise ops and casts over mixed dtypes, reductions over odd axes, scans,
sorts, matmul and conv on non-contiguous inputs) over random inputs of 0 to 4 dims, runs it on lazytensor and on torch,
and compares every value of the chain: shapes and dtypes at once, values when they are realized, and in the gradient
cases (every third seed) the gradients too.

Each case runs in one mode: `cpu` (the heuristics), `beam` (BEAM=1: a search for every kernel), `emu` (DEV=EMU),
`cudacpu` (DEV=CUDACPU: the CUDA source compiled by g++) or `shard` (every input sharded over CPU:0..3 along a random
axis or replicated). A seed makes the same chain in every mode.

How values are compared. Every value is computed three ways: by lazytensor, by torch in the same dtypes, and by
torch with every float in float64 (the shadow). Float inputs are small multiples of 1/4, so that additions,
products, sums and matmuls of them are exact; a value is *exact* when torch's result equals its shadow (no rounding
happened anywhere before it), and lazytensor must then give exactly the same. Ops whose result jumps (floor,
comparisons, casts to int, argmax, sort indices, floordiv, mod, indices) only read exact floats, where both frameworks
must see the same values; other values are compared with a tolerance that grows with torch's own rounding error (the
distance to the shadow), so that a cancellation which amplifies rounding in both is not a mismatch. Ints and bools
must match exactly; NaN and inf must sit at the same places. The gradient cases use continuous float32 and float64
inputs and compare the gradient of a random weighting of the last value with torch autograd's; their values are exact
only where an op moved or picked values and computed none (continuous values round in any other op, whatever order
each framework computes it in).

What is not compared: what torch leaves undefined (a float out of an int's range made an int, by a cast or by a write
into an int tensor, where lazytensor refuses a Python float; int division by zero, which lazytensor defines as 0;
INT_MIN // -1), and what lazytensor documents as its own (sign(NaN) is NaN, as numpy).
An op that torch rejects for its inputs is left out of the chain; one that torch runs and lazytensor rejects fails.

test/test_fuzz_compose.py runs a fixed set of seeds in every mode; more by hand:

  python extra/fuzz_compose.py --cases 2000 --devices cpu,emu,cudacpu,shard
  python extra/fuzz_compose.py --cases 100 --devices beam --start 5000

A failure prints the chain as a lazytensor program that runs on its own (the inputs with their values, the mode's
settings), the seed, the mode and what differed.
"""
from __future__ import annotations

import argparse
import math
import operator
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lazytensor import Context, Tensor, dtypes
from lazytensor.dtype import DType
from lazytensor.opt import search

Number = bool | int | float
Arg = Any  # a Val or a Python number
F16, BF16, F32, F64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64
I8, U8, I16, I32, I64, BOOL = dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.bool
FLOATS = (F16, BF16, F32, F64)
INTS = (I8, U8, I16, I32, I64)
# (dtype, weight) of the fresh inputs
DTYPES = [(F32, 6.0), (I32, 1.5), (I64, 1.5), (BOOL, 1.5), (I8, 1.0), (U8, 1.0), (I16, 0.5), (F16, 1.5), (BF16, 1.5),
          (F64, 1.0)]
SIZES = (1, 1, 2, 3, 4, 5, 7)
MAX_NUMEL = 400
# (atol, rtol) for values that are not exact, on top of the rounding error torch itself made
TOLERANCE = {F16: (1e-3, 2e-3), BF16: (1e-2, 1.6e-2), F32: (1e-6, 2e-5), F64: (1e-12, 1e-10)}
# how many times torch's own rounding error lazytensor may make
ERROR_GROWTH = 16.0
ALL = (0, 1, 2)  # exact_in: the op jumps in every input
SHARD_DEVICES = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")

@dataclass(frozen=True)
class Mode:
  """Where a case runs: the knobs set around it (as Context takes them), whether its inputs are sharded, and whether
  BEAM searches every kernel (it leaves kernels shorter than search.MIN_SEARCH_S, as all of these are, to the
  heuristics)."""
  name: str
  knobs: dict[str, Any] = field(default_factory=dict)
  shard: bool = False
  search_all: bool = False

# BEAM=1 searches in this process (PARALLEL=0: the kernels are small, worker processes cost more than they win), and
# searches again kernels it has searched before (a case checks the candidates of each of its kernels)
MODES = {m.name: m for m in [
  Mode("cpu"), Mode("beam", {"BEAM": 1, "PARALLEL": 0, "IGNORE_BEAM_CACHE": 1}, search_all=True),
  Mode("emu", {"DEV": "EMU"}), Mode("cudacpu", {"DEV": "CUDACPU"}), Mode("shard", shard=True)]}

@contextmanager
def searched(mode: Mode) -> Iterator[None]:
  """In a mode that searches every kernel, search.MIN_SEARCH_S is 0 (as the search tests set it); a candidate that
  the search discarded, as its output differed from the unoptimized kernel's or it failed to compile or run, is a
  wrong kernel that BEAM hid: an error."""
  if not mode.search_all:
    yield
    return
  before, limit = dict(search.beam_stats), search.MIN_SEARCH_S
  search.MIN_SEARCH_S = 0.0
  try: yield
  finally: search.MIN_SEARCH_S = limit
  bad = {k: search.beam_stats[k] - before[k] for k in ("rejected", "failed") if search.beam_stats[k] > before[k]}
  if bad: raise RuntimeError(f"BEAM discarded candidates ({bad}): run with DEBUG=1 to see their opts")

def is_gradient_case(seed: int) -> bool: return seed % 3 == 2

class Skip(Exception):
  """The op does not apply to these inputs: torch rejects them, or the result would be undefined."""

@dataclass(eq=False)
class Val:
  """One value of the chain: lazytensor's, torch's and torch's in float64 (the shadow)."""
  name: str
  lt: Tensor
  tt: Any
  t64: Any
  exact: bool  # torch's value is its shadow's: nothing was rounded on the way
  coarsest: DType  # the least precise float it was computed through, whose tolerance it gets

  @property
  def shape(self) -> tuple[int, ...]: return tuple(self.lt.shape)
  @property
  def ndim(self) -> int: return len(self.lt.shape)
  @property
  def dtype(self) -> DType: return self.lt.dtype
  @property
  def numel(self) -> int: return math.prod(self.lt.shape)

def tdt(dt: DType) -> Any:
  return getattr(torch, dt.name)

def same(a: Any, b: Any) -> bool:
  """Equal values, NaN equal to NaN."""
  return bool(((a == b) | (a.isnan() & b.isnan())).all())

def result_dtype(x: Val, y: Arg) -> Any:
  """torch's dtype for an elementwise op of x and y."""
  return torch.result_type(x.tt, y.tt if isinstance(y, Val) else y)

class Fuzz:
  """One seed's chain: random choices, the values made so far and the program text that made them."""

  def __init__(self, seed: int, mode: Mode, without: frozenset[str] = frozenset()) -> None:
    self.seed, self.mode, self.grad, self.without = seed, mode, is_gradient_case(seed), without  # ops left out
    self.rng = np.random.default_rng(seed)
    self.placement = np.random.default_rng((seed, 1))  # the shards' axes: the chain stays the same in every mode
    self.vals: list[Val] = []
    self.leaves: list[Val] = []
    self.lines: list[str] = []
    self.indices = 0  # index tensors made so far

  # ---- random choices ----

  def chance(self, p: float) -> bool: return bool(self.rng.random() < p)
  def randint(self, lo: int, hi: int) -> int: return int(self.rng.integers(lo, hi + 1))  # inclusive
  def pick(self, seq: Sequence[Any]) -> Any: return seq[int(self.rng.integers(len(seq)))]

  def shape(self, ndim: int | None = None) -> tuple[int, ...]:
    for _ in range(20):
      n = self.randint(0, 4) if ndim is None else ndim
      s = tuple(0 if self.chance(0.03) else self.pick(SIZES) for _ in range(n))
      if math.prod(s) <= MAX_NUMEL: return s
    return (2,) * (n if ndim is None else ndim)

  def dtype(self) -> DType:
    if self.grad: return self.pick([F32, F32, F64])
    dts, weights = zip(*DTYPES)
    return dts[int(self.rng.choice(len(dts), p=np.array(weights) / sum(weights)))]

  def array(self, shape: tuple[int, ...], dt: DType, nonzero: bool = False) -> np.ndarray:
    """Random values of dt (float32 for bfloat16): quarters for floats (sums and products stay exact), a few special
    values now and then; small ints mostly, the whole range sometimes (wrap-around)."""
    if dt == BOOL: return self.rng.random(shape) < 0.5
    if dt in INTS:
      lo, hi = (0, 8) if dt == U8 else (-6, 6)
      if self.chance(0.25) and dt.itemsize < 8: lo, hi = int(dt.min()), int(dt.max())
      a = self.rng.integers(lo, hi + 1, size=shape).astype(dt.np)
      return np.where(a == 0, 1, a).astype(dt.np) if nonzero else a
    if self.grad: a = self.rng.uniform(-2, 2, size=shape)
    else:
      a = self.rng.integers(-12, 13, size=shape) / 4
      if nonzero: a = np.where(a == 0, 0.5, a)
      if a.size and self.chance(0.1):
        specials = [math.nan, math.inf, -math.inf, -0.0, 1e4, 3.0e38 if dt in (F32, F64, BF16) else 6e4]
        at = self.rng.random(shape) < 0.2
        a = np.where(at, self.rng.choice(specials, size=shape), a)
    return a.astype(np.float32 if dt == BF16 else dt.np)

  def scalar(self, dt: DType | None = None) -> Number:
    kind = dt.kind if dt is not None else self.pick("bif")
    if kind == "b": return self.chance(0.5)
    if kind in "iu": return int(self.pick([0, 1, -1, 2, 3, -7, 100, 300] if kind == "i" else [0, 1, 2, 3, 7, 100]))
    if self.grad: return float(self.pick([0.5, 2.0, -1.5, 3.0]))
    return float(self.pick([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, 0.1, 1e10, math.inf, -math.inf, math.nan]))

  # ---- values ----

  def leaf(self, shape: tuple[int, ...], dt: DType, nonzero: bool = False) -> Val:
    arr = np.asarray(self.array(shape, dt, nonzero))
    needs_grad = self.grad and dt in (F32, F64)
    lt, code = self.tensor(arr, dt, needs_grad)
    tt = torch.from_numpy(arr.copy()).to(tdt(dt)).requires_grad_(needs_grad)
    t64 = tt.detach().double().requires_grad_(needs_grad) if dt in FLOATS else tt
    v = self._add(lt, tt, t64, True, coarsest([dt]))
    self.lines.append(f"{v.name} = {code}")
    self.leaves.append(v)
    return v

  def tensor(self, arr: np.ndarray, dt: DType, requires_grad: bool = False) -> tuple[Tensor, str]:
    """arr as a lazytensor input, and the code that makes it; in the shard mode sharded along a random axis or
    replicated (the rng of placement, so that the chain is the same in every mode)."""
    t = Tensor(arr, dtype=dt)
    code = f"Tensor(np.array({arr.tolist()!r}, dtype=np.{arr.dtype.name}).reshape({arr.shape}), dtype=dtypes.{dt.name})"
    if self.mode.shard:
      axis = None if arr.ndim == 0 or self.placement.random() < 0.3 else int(self.placement.integers(arr.ndim))
      t, code = t.shard(SHARD_DEVICES, axis), f"{code}.shard(DEVICES, {axis})"
    if requires_grad: t, code = t.requires_grad_(), f"{code}.requires_grad_()"
    return t, code

  def _add(self, lt: Tensor, tt: Any, t64: Any, exact: bool, coarsest: DType) -> Val:
    v = Val(f"v{len(self.vals)}", lt, tt, t64, exact, coarsest)
    self.vals.append(v)
    return v

  def index_array(self, arr: np.ndarray, numpy: bool = False) -> IndexArray:
    """arr as an index of the program, named iN: a lazytensor Tensor (placed as inputs are), or where `numpy` the
    array itself. lazytensor reads a bool mask of __getitem__ as a numpy array: a mask Tensor would make a shape known
    only once computed, which it refuses (setitem takes Tensor masks, only getitem gets them)."""
    if numpy: lt, code = arr, f"np.array({arr.tolist()!r}, dtype=np.{arr.dtype.name}).reshape({arr.shape})"
    else: lt, code = self.tensor(arr, BOOL if arr.dtype == np.bool_ else I64)
    self.lines.append(f"i{self.indices} = {code}")
    self.indices += 1
    return IndexArray(arr, lt, f"i{self.indices - 1}")

  def operand(self, shape: tuple[int, ...], scalar: float = 0.25, dt: DType | None = None,
              nonzero: bool = False) -> Arg:
    """An operand for a value of this shape: a Python number, an earlier value or a new input, whose shape
    broadcasts with it."""
    if self.chance(scalar):
      s = self.scalar(dt)
      return (s or 1) if nonzero else s
    if not nonzero and self.chance(0.2):
      fits = [v for v in self.vals if (dt is None or v.dtype == dt) and broadcasts(v.shape, shape)]
      if fits: return self.pick(fits)
    return self.leaf(self.broadcast_shape(shape), dt or self.dtype(), nonzero)

  def broadcast_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
    out = [1 if self.chance(0.25) else d for d in s]
    if out and self.chance(0.25): out = out[self.randint(1, len(out)):]
    if self.chance(0.1) and len(out) < 5: out = [self.pick([1, 2, 3])] + out
    return tuple(out)

  def apply(self, expr: str, ins: Sequence[Arg], lt_fn: Callable[..., Any], tt_fn: Callable[..., Any] | None = None,
            exact_in: Sequence[int] = (), shadow_fn: Callable[..., Any] | None = None) -> Val:
    """Run one op on both sides: lt_fn on lazytensor values, tt_fn (default lt_fn) on torch's and shadow_fn (default
    tt_fn) on the shadows. `expr` is the op as lazytensor code, {0}, {1}, ... standing for the inputs; `exact_in`
    names the inputs in which the op jumps (floor, comparisons, ...): those must be exact."""
    tt_fn = lt_fn if tt_fn is None else tt_fn
    shadow_fn = tt_fn if shadow_fn is None else shadow_fn
    if any(isinstance(ins[i], Val) and not ins[i].exact for i in exact_in if i < len(ins)):
      raise Skip("a discontinuous op of a rounded value")
    def args(side: str) -> list[Any]: return [getattr(a, side) if isinstance(a, Val) else a for a in ins]
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref, shadow = tt_fn(*args("tt")), shadow_fn(*args("t64"))
    except (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError) as e:
      raise Skip(f"torch rejects it: {e}") from None
    name = f"v{len(self.vals)}"
    first, *rest = expr.format(*[a.name if isinstance(a, Val) else repr(a) for a in ins], out=name).split("\n")
    self.lines += [f"{name} = {first}", *rest]  # before it runs: a lazytensor error then shows the op that raised
    out = lt_fn(*args("lt"))
    exact = all(a.exact for a in ins if isinstance(a, Val))
    if ref.is_floating_point():
      shadow, exact = self._float_shadow(tt_fn, ins, ref, shadow, exact)
      # continuous inputs (the gradient cases) round in any op that computes a new value, even where torch's result
      # is its shadow's (lerp's a + w * (b - a) representable: another order of the same op rounds on the way)
      exact = exact and (not self.grad or moved_values(ref, ins))
    least = coarsest([a.coarsest for a in ins if isinstance(a, Val)] + [out.dtype])
    v = self._add(out, ref, shadow, exact, least)
    if v.shape != tuple(ref.shape): self.fail(f"{v.name}: shape {v.shape} != torch's {tuple(ref.shape)}", v.name)
    if tdt(v.dtype) != ref.dtype: self.fail(f"{v.name}: dtype {v.dtype} != torch's {ref.dtype}", v.name)
    return v

  def _float_shadow(self, tt_fn: Callable[..., Any], ins: Sequence[Arg], ref: Any, shadow: Any,
                    exact: bool) -> tuple[Any, bool]:
    """The float64 shadow of a float result, and whether the result is exact. A float made from ints (int / int,
    exp of an int) is made again from the ints in float64; a float64 result, whose shadow is itself, is exact only
    where float32 inputs give the same."""
    def args(cast: Callable[[Any], Any]) -> list[Any]:
      return [cast(a) if isinstance(a, Val) else a for a in ins]
    def ints_wide(v: Val) -> Any: return v.t64 if v.dtype in FLOATS else v.t64.double()
    def floats_narrow(v: Val) -> Any: return v.tt.float() if v.dtype == F64 else v.tt
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if shadow.dtype != torch.float64: shadow = tt_fn(*args(ints_wide))
        shadow = shadow.double()
        exact = exact and same(ref.detach().double(), shadow.detach())
        if exact and ref.dtype == torch.float64:
          exact = same(tt_fn(*args(floats_narrow)).detach().double(), shadow.detach())
    except (RuntimeError, ValueError, TypeError, IndexError): return ref.detach().double(), False
    return shadow, exact

  def program(self, show: str | None = None) -> str:
    """The chain as a program that runs on its own, in this case's mode, ending with a print of the value `show`."""
    without = f" --without {','.join(sorted(self.without))}" if self.without else ""
    head = [f"# seed {self.seed}{' (gradients)' if self.grad else ''} in mode {self.mode.name}: "
            f"python extra/fuzz_compose.py --devices {self.mode.name} --start {self.seed} --cases 1{without}",
            "import numpy as np", "from lazytensor import Context, Tensor, dtypes",
            'nan, inf = float("nan"), float("inf")']
    if self.mode.shard: head.append(f"DEVICES = {SHARD_DEVICES!r}")
    if self.mode.search_all: head += ["from lazytensor.engine import search", "search.MIN_SEARCH_S = 0.0"]
    body = self.lines + ([f"print({show}.numpy())"] if show else [])
    if not self.mode.knobs: return "\n".join(head + body)
    knobs = ", ".join(f"{k}={v!r}" for k, v in self.mode.knobs.items())
    return "\n".join([*head, f"with Context({knobs}):", *("  " + line for line in body)])

  def fail(self, problem: str, show: str | None = None) -> None:
    raise Mismatch(f"{problem}\n{self.program(show)}")

def broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
  return all(x == y or x == 1 or y == 1 for x, y in zip(a[::-1], b[::-1]))

# ---- movement ----

def factor_shape(f: Fuzz, n: int) -> tuple[int, ...]:
  """A random shape of n elements."""
  if n == 0: return tuple(f.pick([0, 1, 2, 3]) for _ in range(f.randint(1, 3))) + (0,)
  primes, k = [], n
  for p in range(2, n + 1):
    while k % p == 0: primes.append(p); k //= p
    if k == 1: break
  dims = [1] * f.randint(1 if primes else 0, 4)
  for p in primes: dims[f.randint(0, len(dims) - 1)] *= p
  return tuple(dims)

def op_reshape(f: Fuzz, x: Val) -> Val:
  shape = factor_shape(f, x.numel)
  arg = list(shape)
  if shape and x.numel and f.chance(0.3): arg[f.randint(0, len(arg) - 1)] = -1
  return f.apply(f"{{0}}.reshape({tuple(arg)})", [x], lambda t: t.reshape(tuple(arg)))

def op_permute(f: Fuzz, x: Val) -> Val:
  order = [int(d) - (x.ndim if f.chance(0.3) else 0) for d in f.rng.permutation(x.ndim)]
  return f.apply(f"{{0}}.permute({order})", [x], lambda t: t.permute(order))

def op_transpose(f: Fuzz, x: Val) -> Val:
  """transpose and the other views that move or cut dims: swapaxes, movedim, mT, narrow, rot90."""
  if x.ndim < 1: raise Skip("0-d")
  a, b = f.randint(-x.ndim, x.ndim - 1), f.randint(-x.ndim, x.ndim - 1)
  name = f.pick(["transpose", "transpose", "swapaxes", "movedim", "mT", "narrow", "rot90"])
  if name in ("transpose", "swapaxes", "movedim"):
    return f.apply(f"{{0}}.{name}({a}, {b})", [x], lambda t: getattr(t, name)(a, b))
  if name == "narrow":
    n = x.shape[a]
    start = f.randint(-n, n - 1) if n else 0
    length = f.randint(0, n - start % max(n, 1))
    return f.apply(f"{{0}}.narrow({a}, {start}, {length})", [x], lambda t: t.narrow(a, start, length))
  if x.ndim < 2: raise Skip("needs 2 dims")
  if name == "mT": return f.apply("{0}.mT", [x], lambda t: t.mT)
  k, dims = f.randint(-3, 4), [int(d) for d in f.rng.permutation(x.ndim)[:2]]
  return f.apply(f"{{0}}.rot90({k}, {dims})", [x], lambda t: t.rot90(k, dims))

def op_expand(f: Fuzz, x: Val) -> Val:
  new = [f.pick([1, 2, 3]) if d == 1 else (-1 if f.chance(0.3) else d) for d in x.shape]
  new = [f.pick([1, 2, 3]) for _ in range(f.randint(0, 2 if x.numel <= 100 else 0))] + new
  return f.apply(f"{{0}}.expand({new})", [x], lambda t: t.expand(*new))

def op_shrink(f: Fuzz, x: Val) -> Val:
  arg: list[tuple[int, int] | None] = []
  for n in x.shape:
    s = f.randint(0, n)
    arg.append(None if f.chance(0.25) else (s, f.randint(s, n)))
  index = tuple(slice(None) if a is None else slice(*a) for a in arg)
  return f.apply(f"{{0}}.shrink({arg})", [x], lambda t: t.shrink(arg), lambda t: t[index])

def op_pad(f: Fuzz, x: Val) -> Val:
  if x.ndim == 0: raise Skip("0-d")
  dims = f.randint(1, x.ndim)
  flat: list[int] = []
  for n in x.shape[::-1][:dims]:
    b = f.randint(-min(n, 2), 3)
    flat += [b, f.randint(-min(n + b, 2), 3) if n + b > 0 else f.randint(0, 3)]
  mode = "constant" if f.chance(0.75) else f.pick(["reflect", "replicate", "circular"])
  pairs = zip(x.shape[::-1], flat[::2], flat[1::2])
  # torch checks a circular padding against the size before cropping: past the cropped size it reads uninitialized
  # memory (all of it cropped), refuses the write of its own output (3-d), or wraps around more than once; lazytensor
  # raises
  if mode == "circular" and any(max(b, a) > n + min(b, 0) + min(a, 0) or n + min(b, 0) + min(a, 0) <= 0
                                for n, b, a in pairs):
    raise Skip("circular padding that crops everything or wraps around more than once")
  value = f.scalar(x.dtype) if mode == "constant" and f.chance(0.5) else None
  kw = f", mode={mode!r}" if mode != "constant" else f", value={value!r}" if value is not None else ""
  def ref(t: Any) -> Any:
    return torch.nn.functional.pad(t, flat, mode=mode, value=value) if mode == "constant" else \
      torch.nn.functional.pad(t, flat, mode=mode)
  return f.apply(f"{{0}}.pad({flat}{kw})", [x], lambda t: t.pad(flat, mode=mode, value=value), ref)

def op_flip(f: Fuzz, x: Val) -> Val:
  if x.ndim == 0: raise Skip("0-d")
  axes = sorted({f.randint(-x.ndim, x.ndim - 1) % x.ndim for _ in range(f.randint(1, x.ndim))})
  return f.apply(f"{{0}}.flip({axes})", [x], lambda t: t.flip(axes))

def op_squeeze(f: Fuzz, x: Val) -> Val:
  if f.chance(0.5) or x.ndim == 0:
    d = f.randint(-x.ndim - 1, x.ndim)
    return f.apply(f"{{0}}.unsqueeze({d})", [x], lambda t: t.unsqueeze(d))
  dim = f.randint(-x.ndim, x.ndim - 1)
  return f.apply(f"{{0}}.squeeze({dim})", [x], lambda t: t.squeeze(dim))

def op_flatten(f: Fuzz, x: Val) -> Val:
  if x.ndim == 0 or f.chance(0.3):
    return f.apply("{0}.flatten()", [x], lambda t: t.flatten())
  a = f.randint(0, x.ndim - 1)
  b = f.randint(a, x.ndim - 1)
  if f.chance(0.5) and x.shape[a]:
    sizes = factor_shape(f, x.shape[a])
    return f.apply(f"{{0}}.unflatten({a}, {sizes})", [x], lambda t: t.unflatten(a, sizes))
  return f.apply(f"{{0}}.flatten({a}, {b})", [x], lambda t: t.flatten(a, b))

def op_repeat(f: Fuzz, x: Val) -> Val:
  if x.numel > 60: raise Skip("large")
  reps = [f.pick([1, 2, 3]) for _ in range(x.ndim + f.randint(0, 1))]
  return f.apply(f"{{0}}.repeat({reps})", [x], lambda t: t.repeat(*reps))

def op_roll(f: Fuzz, x: Val) -> Val:
  if x.ndim == 0: raise Skip("0-d")
  dims = sorted({f.randint(0, x.ndim - 1) for _ in range(f.randint(1, 2))})
  shifts = [f.randint(-8, 8) for _ in dims]
  return f.apply(f"{{0}}.roll({shifts}, {dims})", [x], lambda t: t.roll(shifts, dims))

def op_split(f: Fuzz, x: Val) -> Val:
  if x.ndim == 0 or x.shape[(dim := f.randint(0, x.ndim - 1))] == 0: raise Skip("0-d or empty")
  n = x.shape[dim]
  if f.chance(0.5):
    size = f.randint(1, n)
    k = f.randint(0, (n + size - 1) // size - 1)
    return f.apply(f"{{0}}.split({size}, {dim})[{k}]", [x], lambda t: t.split(size, dim)[k])
  chunks = f.randint(1, n + 1)
  k = f.randint(0, len(range(0, n, -(-n // chunks))) - 1)
  return f.apply(f"{{0}}.chunk({chunks}, {dim})[{k}]", [x], lambda t: t.chunk(chunks, dim)[k])

def op_unfold(f: Fuzz, x: Val) -> Val:
  if x.ndim == 0 or x.numel > 100: raise Skip("0-d or large")
  dim = f.randint(0, x.ndim - 1)
  size, step = f.randint(0, x.shape[dim]), f.randint(1, 3)
  return f.apply(f"{{0}}.unfold({dim}, {size}, {step})", [x], lambda t: t.unfold(dim, size, step))

def op_diagonal(f: Fuzz, x: Val) -> Val:
  if x.ndim < 2: raise Skip("needs 2 dims")
  d1, d2 = (int(d) for d in f.rng.permutation(x.ndim)[:2])
  off = f.randint(-2, 2)
  return f.apply(f"{{0}}.diagonal({off}, {d1}, {d2})", [x], lambda t: t.diagonal(off, d1, d2))

def op_cat(f: Fuzz, x: Val) -> Val:
  if x.ndim == 0: raise Skip("0-d")
  dim = f.randint(-x.ndim, x.ndim - 1)
  shape = list(x.shape)
  shape[dim] = f.randint(0, 3)
  y = f.leaf(tuple(shape), x.dtype if f.chance(0.7) else f.dtype())
  if f.chance(0.5):
    return f.apply(f"{{0}}.cat({{1}}, dim={dim})", [x, y], lambda a, b: a.cat(b, dim=dim),
                   lambda a, b: torch.cat([a, b], dim=dim))
  z = f.leaf(x.shape, x.dtype)
  sd = f.randint(-x.ndim - 1, x.ndim)
  return f.apply(f"{{0}}.stack({{1}}, dim={sd})", [x, z], lambda a, b: a.stack(b, dim=sd),
                 lambda a, b: torch.stack([a, b], dim=sd))

def op_tri(f: Fuzz, x: Val) -> Val:
  if x.ndim < 2: raise Skip("needs 2 dims")
  name, k = f.pick(["tril", "triu"]), f.randint(-2, 2)
  return f.apply(f"{{0}}.{name}({k})", [x], lambda t: getattr(t, name)(k))

def op_materialize(f: Fuzz, x: Val) -> Val:
  """contiguous, clone or realize: later ops read a buffer (through views) instead of fusing the chain."""
  name = f.pick(["contiguous", "clone", "realize"])
  return f.apply(f"{{0}}.{name}()", [x], lambda t: getattr(t, name)(), lambda t: t.clone() if name == "clone" else t)

# ---- indexing ----

@dataclass(eq=False)
class IndexArray:
  """A tensor index: the numpy array that each framework's index is made from, lazytensor's index (a Tensor, or the
  numpy array for a bool mask of getitem) and its name in the program."""
  arr: np.ndarray
  lt: Any
  name: str
  def __repr__(self) -> str: return self.name

def make_index(f: Fuzz, shape: tuple[int, ...], setitem: bool = False) -> tuple[Any, ...]:
  """A random index for a tensor of this shape: ints, slices (negative steps too, except for setitem, which torch
  lacks), None, Ellipsis, int tensors and a bool mask over one or more dims. setitem never repeats a target (the order
  of repeated writes is torch's to choose)."""
  comps: list[Any] = []
  d, ellipsis, tensors = 0, False, 0
  while d < len(shape) and (ellipsis or f.chance(0.8) or not comps):  # after an Ellipsis, every dim to the end
    n, r = shape[d], f.rng.random()
    if r < 0.1 and not ellipsis:
      ellipsis = True
      comps.append(Ellipsis)
      d = len(shape) - f.randint(0, len(shape) - d)
      continue
    if r < 0.18: comps.append(None); continue
    if r < 0.33 and n: comps.append(f.randint(-n, n - 1))
    elif r < 0.45 and n and tensors < 2 and not setitem:
      tensors += 1
      comps.append(f.index_array(f.rng.integers(-n, n, size=f.pick([(2,), (3,), (1,), (2, 2), ()]))))
    elif r < 0.5 and n and tensors < 1 and setitem:
      tensors += 1
      comps.append(f.index_array(f.rng.permutation(n)[:f.randint(1, n)] - (n if f.chance(0.3) else 0)))
    elif r < 0.57 and not tensors and ((dims := f.randint(1, len(shape) - d)) and not setitem or
                                       0 not in shape[d:d + dims]):
      # a mask over several dims selects their elements in row-major order; setitem takes values of one element
      # along an empty mask's count (see write_setitem), which torch refuses
      tensors += 1
      comps.append(f.index_array(f.rng.random(shape[d:d + dims]) < 0.5, numpy=not setitem))
      d += dims
      continue
    else:
      step = f.pick([None, 1, 2, 3] if setitem else [None, 1, 2, -1, -2, 3])
      comps.append(slice(f.pick([None, f.randint(-n - 1, n + 1)]), f.pick([None, f.randint(-n - 1, n + 1)]), step))
    d += 1
  return tuple(comps)

def framework_index(index: tuple[Any, ...], torch_side: bool) -> tuple[Any, ...]:
  return tuple((torch.from_numpy(c.arr.copy()) if torch_side else c.lt) if isinstance(c, IndexArray) else c
               for c in index)

def torch_getitem(t: Any, index: tuple[Any, ...]) -> Any:
  """t[index] in torch, whose slices take no negative steps: those dims are flipped, and the slice stepped forward
  from the other end."""
  consumed = sum(1 if isinstance(c, (int, slice)) or (isinstance(c, torch.Tensor) and c.dtype != torch.bool)
                 else c.ndim if isinstance(c, torch.Tensor) else 0 for c in index)
  comps, d = [], 0
  for c in index:
    if c is Ellipsis: d += t.ndim - consumed
    elif isinstance(c, slice) and c.step is not None and c.step < 0:
      n = t.shape[d]
      r = range(*c.indices(n))
      c = slice(n - 1 - r[0], n - r[-1], -c.step) if len(r) else slice(0, 0)
      t = t.flip(d)
    if c is not None and c is not Ellipsis: d += c.ndim if isinstance(c, torch.Tensor) and c.dtype == torch.bool else 1
    comps.append(c)
  return t[tuple(comps)]

def op_getitem(f: Fuzz, x: Val) -> Val:
  index = make_index(f, x.shape)
  lt_index, tt_index = framework_index(index, False), framework_index(index, True)
  return f.apply(f"{{0}}[{index!r}]", [x], lambda t: t[lt_index], lambda t: torch_getitem(t, tt_index))

def index_values(f: Fuzz, shape: tuple[int, ...], n: int) -> IndexArray:
  """An int64 index tensor of this shape into an axis of n elements."""
  return f.index_array(f.rng.integers(0, n, size=shape).astype(np.int64))

def op_gather(f: Fuzz, x: Val) -> Val:
  """gather, take_along_dim and index_select along a random axis, and take of the flattened elements."""
  if x.ndim == 0 or x.numel == 0: raise Skip("0-d or empty")
  dim = f.randint(-x.ndim, x.ndim - 1)
  n, r = x.shape[dim], f.rng.random()
  if r < 0.35:
    shape = tuple(f.randint(0, 4) if d == dim % x.ndim else f.randint(1, s) for d, s in enumerate(x.shape))
    i = index_values(f, shape, n)
    return f.apply(f"{{0}}.gather({dim}, {i!r})", [x], lambda t: t.gather(dim, i.lt),
                   lambda t: t.gather(dim, torch.from_numpy(i.arr)))
  if r < 0.65:
    shape = tuple(f.randint(0, 4) if d == dim % x.ndim else f.pick([1, s]) for d, s in enumerate(x.shape))
    i = index_values(f, shape, n)
    return f.apply(f"{{0}}.take_along_dim({i!r}, {dim})", [x], lambda t: t.take_along_dim(i.lt, dim),
                   lambda t: t.take_along_dim(torch.from_numpy(i.arr), dim))
  if r < 0.9:
    i = index_values(f, (f.randint(0, 5),), n)
    return f.apply(f"{{0}}.index_select({dim}, {i!r})", [x], lambda t: t.index_select(dim, i.lt),
                   lambda t: t.index_select(dim, torch.from_numpy(i.arr)))
  i = f.index_array(f.rng.integers(-x.numel, x.numel, size=f.pick([(), (3,), (2, 2)])).astype(np.int64))
  return f.apply(f"{{0}}.take({i!r})", [x], lambda t: t.take(i.lt), lambda t: t.take(torch.from_numpy(i.arr)))

# views that torch also makes as views (writes through them reach the base)
WRITABLE_VIEWS: list[tuple[str, Callable[[Fuzz, tuple[int, ...]], tuple[str, Callable[[Any], Any]] | None]]] = [
  ("permute", lambda f, s: (lambda o: (f".permute({o})", lambda t: t.permute(o)))(
    [int(d) for d in f.rng.permutation(len(s))])),
  ("slice", lambda f, s: None if not s else (lambda d, a, st: (
    f"[{', '.join([':'] * d + [f'{a}::{st}'])}]", lambda t: t[(slice(None),) * d + (slice(a, None, st),)]))(
    f.randint(0, len(s) - 1), f.randint(0, 2), f.randint(1, 2))),
  ("int", lambda f, s: None if not s or not s[0] else (lambda i: (f"[{i}]", lambda t: t[i]))(f.randint(0, s[0] - 1))),
  ("unsqueeze", lambda f, s: (lambda d: (f".unsqueeze({d})", lambda t: t.unsqueeze(d)))(f.randint(0, len(s)))),
  ("diagonal", lambda f, s: None if len(s) < 2 else (lambda o: (f".diagonal({o})", lambda t: t.diagonal(o)))(
    f.randint(-1, 1))),
  ("transpose", lambda f, s: None if len(s) < 2 else (lambda a, b: (f".transpose({a}, {b})",
                                                                    lambda t: t.transpose(a, b)))(
    f.randint(-len(s), len(s) - 1), f.randint(-len(s), len(s) - 1))),
  ("squeeze", lambda f, s: None if 1 not in s else (lambda d: (f".squeeze({d})", lambda t: t.squeeze(d)))(
    s.index(1))),
  ("detach", lambda f, s: (".detach()", lambda t: t.detach())),
]

def view_chain(f: Fuzz, shape: tuple[int, ...]) -> tuple[str, list[Callable[[Any], Any]], tuple[int, ...]]:
  """0 to 2 writable views of a tensor of this shape: their code, their functions and the shape they give."""
  text, fns = "", []
  for _ in range(f.randint(0, 2)):
    made = f.pick(WRITABLE_VIEWS)[1](f, shape)
    if made is None: continue
    text, fns = text + made[0], fns + [made[1]]
    shape = tuple(made[1](torch.empty(shape)).shape)
  return text, fns, shape

# in-place methods (name, operands, jumps): "value" a tensor or number that broadcasts to the view, "scalar" a number,
# "bounds" two numbers, "mask" a bool tensor and a number, "" none
INPLACE: list[tuple[str, str, bool]] = [
  ("add_", "value", False), ("sub_", "value", False), ("mul_", "value", False), ("div_", "value", False),
  ("copy_", "value", False), ("clamp_", "bounds", False), ("clamp_min_", "scalar", False), ("fill_", "scalar", False),
  ("masked_fill_", "mask", False), ("zero_", "", False), ("neg_", "", False), ("abs_", "", False), ("exp_", "", False),
  ("sigmoid_", "", False), ("relu_", "", False), ("floor_", "", True),
]
# in-place operators: views see them only where Tensor defines __iadd__ and its kin (Python makes `t += x` into
# `t = t + x` otherwise), so they join the chain once lazytensor has them
IOPS: dict[str, Callable[[Any, Any], Any]] = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
                                             "/=": operator.itruediv, "&=": operator.iand, "|=": operator.ior,
                                             "^=": operator.ixor} if hasattr(Tensor, "__iadd__") else {}

def op_write(f: Fuzz, x: Val) -> Val:
  """A copy of x written into through 0 to 2 views: by setitem (`y = x.clone(); y.T[1:, 0] = v`), an in-place method
  (`y.T[1:].add_(v)`), an in-place operator (`w = y.T; w += v`) or assign (torch's copy_)."""
  chain, views, shape = view_chain(f, x.shape)
  r = f.rng.random()
  if r < 0.45: return write_setitem(f, x, chain, views, shape)
  if r < 0.55 or (r < 0.7 and not IOPS):
    value = f.operand(shape, scalar=0.0, dt=x.dtype)
    return write(f, x, views, "{out}" + chain + ".assign({1})", lambda v, y: v.assign(y), lambda v, y: v.copy_(y),
                 [value])
  if r < 0.7:
    op = f.pick(sorted(IOPS))
    return write(f, x, views, f"w = {{out}}{chain}\nw {op} {{1}}", IOPS[op], IOPS[op], [f.operand(shape)])
  name, kind, jumps = f.pick(INPLACE)
  if kind == "bounds" and x.dtype == BOOL: raise Skip("clamp of bools")
  ins: list[Arg] = {"": lambda: [], "value": lambda: [f.operand(shape)], "scalar": lambda: [f.scalar(x.dtype)],
                    "bounds": lambda: [f.scalar(x.dtype), f.scalar(x.dtype)],
                    "mask": lambda: [f.leaf(f.broadcast_shape(shape), BOOL),
                                     f.scalar(x.dtype if f.chance(0.7) else None)]}[kind]()
  args = ", ".join(f"{{{i + 1}}}" for i in range(len(ins)))
  def method(v: Any, *a: Any) -> Any: return getattr(v, name)(*a)
  return write(f, x, views, f"{{out}}{chain}.{name}({args})", method, method, ins, ALL if jumps else ())

def write(f: Fuzz, x: Val, views: list[Callable[[Any], Any]], stmt: str, lt_op: Callable[..., Any],
          tt_op: Callable[..., Any], ins: list[Arg], exact_in: Sequence[int] = ()) -> Val:
  """y = x.clone(), then op(view of y, *ins), whose code is stmt; the value is y. lazytensor writes into a lazy copy
  (which gets a buffer) or, now and then, into a realized one."""
  realized = f.chance(0.3)
  def on_a_copy(op: Callable[..., Any], copy: Callable[[Any], Any]) -> Callable[..., Any]:
    def run(t: Any, *a: Any) -> Any:
      y = view = copy(t)
      for fn in views: view = fn(view)
      op(view, *a)
      return y
    return run
  # torch leaves a float out of an int's range undefined there (as in a cast); lazytensor refuses such a Python float
  if x.dtype in INTS and int_overflow(x.dtype, ins): raise Skip("float to int out of range: undefined")
  lt_copy = (lambda t: t.clone().realize()) if realized else (lambda t: t.clone())
  return f.apply(f"{{0}}.clone(){'.realize()' if realized else ''}\n{stmt}", [x, *ins], on_a_copy(lt_op, lt_copy),
                 on_a_copy(tt_op, lambda t: t.clone()), exact_in)

def write_setitem(f: Fuzz, x: Val, chain: str, views: list[Callable[[Any], Any]], shape: tuple[int, ...]) -> Val:
  index = make_index(f, shape, setitem=True)
  # a Tensor mask selects a count known only once computed: lazytensor takes values that broadcast along it (a dim of
  # 1 there), the shape that a mask of one True element selects
  one_each = tuple(torch.from_numpy(np.arange(c.arr.size).reshape(c.arr.shape) == 0)
                   if isinstance(c, IndexArray) and c.arr.dtype == np.bool_ else c for c in index)
  target = torch_getitem(torch.empty(shape), framework_index(one_each, True))
  kind = "b" if x.dtype == BOOL else "i" if x.dtype in INTS else f.pick("bif")
  src_dt = {"b": BOOL, "i": f.pick([x.dtype, I32, I64, U8]) if x.dtype != U8 else U8, "f": f.pick([F32, F16, F64])}
  value: Arg = f.scalar(x.dtype) if f.chance(0.4) or not target.ndim else \
    f.leaf(f.broadcast_shape(tuple(target.shape)), src_dt[kind] if x.dtype in FLOATS or kind != "f" else x.dtype)
  if isinstance(value, float) and x.dtype not in FLOATS: raise Skip("a float into an int tensor")
  def setitem(idx: tuple[Any, ...]) -> Callable[[Any, Any], None]:
    def run(view: Any, v: Any) -> None: view[idx] = v
    return run
  return write(f, x, views, f"{{out}}{chain}[{index!r}] = {{1}}", setitem(framework_index(index, False)),
               setitem(framework_index(index, True)), [value])

# ---- elementwise ----

def _act(name: str, **kw: Any) -> Callable[[Any], Any]:
  return lambda t: getattr(torch.nn.functional, name)(t, **kw)

# (name, torch's function when it differs from the method of that name, smooth)
UNARY: list[tuple[str, Callable[[Any], Any] | None, bool]] = [
  ("neg", None, True), ("abs", None, True), ("exp", None, True), ("exp2", None, True), ("log", None, True),
  ("log2", None, True), ("sqrt", None, True), ("rsqrt", None, True), ("reciprocal", None, True), ("sin", None, True),
  ("cos", None, True), ("tanh", None, True), ("sigmoid", None, True), ("relu", None, True), ("square", None, True),
  ("floor", None, False), ("ceil", None, False), ("round", None, False), ("trunc", None, False),
  ("sign", None, False), ("logical_not", None, False), ("bitwise_not", None, False), ("isnan", None, False),
  ("isinf", None, False), ("isfinite", None, False), ("log1p", None, True), ("expm1", None, True),
  ("erf", None, True), ("atan", None, True), ("sinh", None, True), ("cosh", None, True), ("asinh", None, True),
  ("silu", _act("silu"), True), ("gelu", _act("gelu", approximate="tanh"), True), ("elu", _act("elu"), True),
  ("softplus", _act("softplus"), True), ("relu6", _act("relu6"), True), ("hardswish", _act("hardswish"), True),
  ("leaky_relu", _act("leaky_relu"), True), ("mish", _act("mish"), True), ("logsigmoid", _act("logsigmoid"), True),
  ("softsign", _act("softsign"), True), ("hardtanh", _act("hardtanh"), True), ("signbit", None, False),
]

# a NaN that an op makes (0 / 0, inf - inf) has the sign bit the hardware gives it, which torch does not define
NAN_SIGN = "the sign bit of a NaN"

def moved_values(ref: Any, ins: Sequence[Arg]) -> bool:
  """Whether every value of the result is one of its inputs' (the op moved, picked or wrote values, computed none)."""
  known = [np.asarray(a.tt.detach().double().reshape(-1)) if isinstance(a, Val) else np.asarray([a], dtype=np.float64)
           for a in ins if isinstance(a, (Val, int, float))]
  out = np.asarray(ref.detach().double().reshape(-1))
  return bool(np.isin(out, np.concatenate([*known, [0.0]])).all() or not out.size)

def int_overflow(dt: DType, ins: Sequence[Arg]) -> bool:
  """Whether a float among `ins`, written into an int tensor of dtype dt, is out of its range or not finite."""
  for a in ins:
    vals = a.tt.detach().double() if isinstance(a, Val) and a.dtype in FLOATS else \
      torch.tensor([a], dtype=torch.float64) if isinstance(a, float) else None
    if vals is not None and vals.numel() and (not bool(vals.isfinite().all()) or
                                              vals.trunc().min() < dt.min() or vals.trunc().max() > dt.max()):
      return True
  return False

def has_nan(x: Arg) -> bool:
  return isinstance(x, Val) and x.dtype in FLOATS and bool(x.tt.detach().isnan().any())

def op_unary(f: Fuzz, x: Val) -> Val:
  name, ref, smooth = f.pick(UNARY)
  if name == "sign" and has_nan(x): raise Skip("sign(NaN) is NaN, as numpy")
  if name == "signbit" and has_nan(x): raise Skip(NAN_SIGN)
  return f.apply(f"{{0}}.{name}()", [x], lambda t: getattr(t, name)(), ref, () if smooth else ALL)

def op_cast(f: Fuzz, x: Val) -> Val:
  # gradients: no half floats, whose rounding puts values on kinks (a clip's bound) differently in each framework
  dt = f.dtype() if not f.grad else f.pick([F32, F64, I32])
  if x.dtype in FLOATS and dt in INTS:
    vals = x.tt.detach().double().trunc()
    if not bool(vals.isfinite().all()) or (vals.numel() and (vals.min() < dt.min() or vals.max() > dt.max())):
      raise Skip("float to int out of range: undefined")
  exact_in = ALL if dt in INTS or dt == BOOL else ()
  # a cast to a float rounds in torch's value only: the shadow keeps the exact value
  shadow_fn = (lambda t: t.double()) if dt in FLOATS else None
  name = f.pick([None, None, {F32: "float", F16: "half", F64: "double", I32: "int", I64: "long", BOOL: "bool"}.get(dt)])
  if name is None: return f.apply(f"{{0}}.cast(dtypes.{dt.name})", [x], lambda t: t.cast(dt), lambda t: t.to(tdt(dt)),
                                  exact_in, shadow_fn)
  return f.apply(f"{{0}}.{name}()", [x], lambda t: getattr(t, name)(), exact_in=exact_in, shadow_fn=shadow_fn)

# (lazytensor code, lazytensor fn, torch fn, jumps): {0} is x, {1} the other operand
BINARY: list[tuple[str, Callable[[Any, Any], Any], Callable[[Any, Any], Any] | None, bool]] = [
  ("{0} + {1}", lambda a, b: a + b, None, False), ("{0} - {1}", lambda a, b: a - b, None, False),
  ("{0} * {1}", lambda a, b: a * b, None, False), ("{0} / {1}", lambda a, b: a / b, None, False),
  ("{0}.maximum({1})", lambda a, b: a.maximum(b), lambda a, b: torch.maximum(*tensors(a, b)), False),
  ("{0}.minimum({1})", lambda a, b: a.minimum(b), lambda a, b: torch.minimum(*tensors(a, b)), False),
  ("{0} ** {1}", lambda a, b: a ** b, None, True),
  ("{0} < {1}", lambda a, b: a < b, None, True), ("{0} <= {1}", lambda a, b: a <= b, None, True),
  ("{0} == {1}", lambda a, b: a == b, None, True), ("{0} != {1}", lambda a, b: a != b, None, True),
  ("{0} > {1}", lambda a, b: a > b, None, True), ("{0} >= {1}", lambda a, b: a >= b, None, True),
  ("{0}.logical_and({1})", lambda a, b: a.logical_and(b), lambda a, b: torch.logical_and(*tensors(a, b)), True),
  ("{0}.logical_or({1})", lambda a, b: a.logical_or(b), lambda a, b: torch.logical_or(*tensors(a, b)), True),
  ("{0}.logical_xor({1})", lambda a, b: a.logical_xor(b), lambda a, b: torch.logical_xor(*tensors(a, b)), True),
  ("{0} & {1}", lambda a, b: a & b, None, True), ("{0} | {1}", lambda a, b: a | b, None, True),
  ("{0} ^ {1}", lambda a, b: a ^ b, None, True), ("{0} << {1}", lambda a, b: a << b, None, True),
  ("{0} >> {1}", lambda a, b: a >> b, None, True),
  ("{0}.copysign({1})", lambda a, b: a.copysign(b), lambda a, b: torch.copysign(*tensors(a, b)), True),
  ("{0}.logaddexp({1})", lambda a, b: a.logaddexp(b), lambda a, b: torch.logaddexp(*tensors(a, b)), False),
]
# division that rounds: the divisor must not be an int 0 (torch raises, lazytensor gives 0)
DIVISION: list[tuple[str, Callable[[Any, Any], Any], Callable[[Any, Any], Any] | None]] = [
  ("{0} // {1}", lambda a, b: a // b, None), ("{0} % {1}", lambda a, b: a % b, None),
  ("{0}.fmod({1})", lambda a, b: a.fmod(b), lambda a, b: torch.fmod(*tensors(a, b))),
  ("{0}.div({1}, rounding_mode='trunc')", lambda a, b: a.div(b, rounding_mode="trunc"), None),
  ("{0}.div({1}, rounding_mode='floor')", lambda a, b: a.div(b, rounding_mode="floor"), None),
]

def tensors(a: Any, b: Any) -> tuple[Any, Any]:
  """For torch functions that take no Python number: a number becomes a 0-d tensor of the dtype it promotes the
  other argument to, so that the result has the dtype an operator with the number would give."""
  like = a if isinstance(a, torch.Tensor) else b
  def conv(v: Any) -> Any:
    return v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.result_type(like, v))
  return conv(a), conv(b)

def swapped(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
  return lambda a, b: fn(b, a)

def op_binary(f: Fuzz, x: Val) -> Val:
  expr, lt_fn, tt_fn, jumps = f.pick(BINARY)
  y = f.operand(x.shape)
  if "copysign" in expr and (has_nan(x) or has_nan(y)): raise Skip(NAN_SIGN)
  if "<<" in expr or ">>" in expr:
    if x.dtype not in INTS: raise Skip("shifts take ints")
    y = f.operand(x.shape, dt=x.dtype) if not isinstance(y, int) else f.randint(-2, 8 * x.dtype.itemsize + 2)
  tt_fn = tt_fn or lt_fn
  # the operands swapped: a number may stand first only before an operator (`2 - x`), not call a method
  if f.chance(0.3) and (isinstance(y, Val) or not expr.startswith("{0}.")):
    expr = expr.replace("{0}", "{2}").replace("{1}", "{0}").replace("{2}", "{1}")
    lt_fn, tt_fn = swapped(lt_fn), swapped(tt_fn)
  v = f.apply(expr, [x, y], lt_fn, tt_fn, ALL if jumps else ())
  # lazytensor's float pow is exp2(b * log2|a|), a few ulp from the correctly rounded value torch gives: not exact
  if "**" in expr and v.dtype in FLOATS: v.exact = False
  return v

def op_division(f: Fuzz, x: Val) -> Val:
  if f.grad: raise Skip("torch has no derivative for floor_divide")
  expr, lt_fn, tt_fn = f.pick(DIVISION)
  y = f.operand(x.shape, nonzero=True)
  out_dt = torch.empty(0, dtype=result_dtype(x, y))
  if out_dt.dtype == torch.bfloat16 and "trunc" not in expr:
    raise Skip("torch's bfloat16 floor division and remainder round their steps to bfloat16 (1 ulp off)")
  if not out_dt.is_floating_point():
    yt = y.tt if isinstance(y, Val) else torch.tensor(y)
    if bool((yt == 0).any()): raise Skip("int / 0")
    if out_dt.dtype != torch.bool:
      try: int_min_by_minus_1 = bool(((x.tt == torch.iinfo(out_dt.dtype).min) & (yt == -1)).any())
      except RuntimeError: raise Skip("shapes that do not broadcast") from None
      if int_min_by_minus_1: raise Skip("INT_MIN // -1")
  return f.apply(expr, [x, y], lt_fn, tt_fn, ALL)

def op_where(f: Fuzz, x: Val) -> Val:
  r = f.rng.random()
  if r < 0.4:
    cond = f.leaf(f.broadcast_shape(x.shape), BOOL) if x.dtype != BOOL or f.chance(0.5) else x
    other = f.operand(x.shape)
    if f.chance(0.5):
      return f.apply("{0}.where({1}, {2})", [cond, x, other], lambda c, a, b: c.where(a, b),
                     lambda c, a, b: torch.where(c, a, b))
    return f.apply("{0}.where({1}, {2})", [cond, other, x], lambda c, a, b: c.where(a, b),
                   lambda c, a, b: torch.where(c, a, b))
  if r < 0.7:
    if x.dtype == BOOL: raise Skip("clamp of bools")
    lo, hi = f.operand(x.shape, scalar=0.6, dt=x.dtype), f.operand(x.shape, scalar=0.6, dt=x.dtype)
    if f.chance(0.2): lo = None
    elif f.chance(0.2): hi = None
    if lo is None and hi is None: raise Skip("no bounds")
    return f.apply("{0}.clip({1}, {2})", [x, lo, hi], lambda a, b, c: a.clip(b, c), lambda a, b, c: a.clip(b, c))
  mask = f.leaf(f.broadcast_shape(x.shape), BOOL)
  value = f.scalar(x.dtype if f.chance(0.7) else None)
  return f.apply(f"{{0}}.masked_fill({{1}}, {value!r})", [x, mask], lambda a, m: a.masked_fill(m, value))

def op_lerp(f: Fuzz, x: Val) -> Val:
  if x.dtype not in FLOATS: raise Skip("lerp of floats")
  end = f.leaf(f.broadcast_shape(x.shape), x.dtype)
  w = f.scalar(F32) if f.chance(0.5) else f.leaf(f.broadcast_shape(x.shape), x.dtype)
  if huge(x) or huge(end):
    raise Skip("end - x past the float range: torch's lerp rounds once (a fused multiply-add), lazytensor twice")
  return f.apply("{0}.lerp({1}, {2})", [x, end, w], lambda a, b, c: a.lerp(b, c))

# ---- reductions, scans and sorts ----

def axes(f: Fuzz, x: Val, tuple_ok: bool = True, none_ok: bool = True) -> Any:
  if x.ndim == 0: return f.pick([None, 0, -1]) if none_ok else f.pick([0, -1])
  r = f.rng.random()
  if r < 0.2 and none_ok: return None
  if r < 0.5 and tuple_ok and x.ndim > 1:
    return tuple(int(d) - (x.ndim if f.chance(0.3) else 0) for d in f.rng.permutation(x.ndim)[:f.randint(1, x.ndim)])
  return f.randint(-x.ndim, x.ndim - 1)

def _torch_dims(axis: Any, ndim: int) -> Any:
  return tuple(range(ndim)) if axis is None else axis

# (name, tuple axes allowed, torch fn(t, axis, keepdim), jumps)
REDUCE: list[tuple[str, bool, Callable[[Any, Any, bool], Any], bool]] = [
  ("sum", True, lambda t, a, k: t.sum(_torch_dims(a, t.ndim), keepdim=k), False),
  ("prod", False, lambda t, a, k: t.reshape(-1).prod(0).reshape((1,) * t.ndim if k else ()) if a is None else
   t.prod(a, keepdim=k), False),
  ("max", True, lambda t, a, k: t.amax(_torch_dims(a, t.ndim), keepdim=k), False),
  ("min", True, lambda t, a, k: t.amin(_torch_dims(a, t.ndim), keepdim=k), False),
  ("mean", True, lambda t, a, k: t.mean(_torch_dims(a, t.ndim), keepdim=k), False),
  ("var", True, lambda t, a, k: t.var(_torch_dims(a, t.ndim), keepdim=k), False),
  ("std", True, lambda t, a, k: t.std(_torch_dims(a, t.ndim), keepdim=k), False),
  ("logsumexp", True, lambda t, a, k: t.logsumexp(_torch_dims(a, t.ndim), keepdim=k), False),
  ("any", True, lambda t, a, k: t.any(_torch_dims(a, t.ndim), keepdim=k), True),
  ("all", True, lambda t, a, k: t.all(_torch_dims(a, t.ndim), keepdim=k), True),
  ("argmax", False, lambda t, a, k: t.argmax(a, keepdim=k), True),
  ("argmin", False, lambda t, a, k: t.argmin(a, keepdim=k), True),
]

# sums of values near the float range overflow or not by the order of the additions, which is each framework's own
ORDER = "a sum near the float range: whether it overflows depends on the order of the additions"

def huge(x: Val, limit: float = 1e7) -> bool:
  """Whether x is a float holding finite values beyond limit."""
  return x.dtype in FLOATS and bool((x.tt.detach().abs().nan_to_num(0, 0, 0) > limit).any())

def nearly_constant(x: Val, axis: Any) -> bool:
  """Whether some row of x along axis (a dim, dims or all) varies by less than 1e-4 of its size."""
  t = x.t64.detach().double()
  dims = tuple(range(t.ndim)) if axis is None else axis
  spread = t.amax(dims) - t.amin(dims) if t.ndim else torch.zeros(())
  return bool((spread <= 1e-4 * (1 + t.abs().amax(dims) if t.ndim else 1)).any())

def op_reduce(f: Fuzz, x: Val) -> Val:
  name, tuple_ok, ref, jumps = f.pick(REDUCE)
  axis, keepdim = axes(f, x, tuple_ok), f.chance(0.4)
  if name in ("argmax", "argmin") and axis is None and keepdim: keepdim = False
  if name in ("max", "min", "argmax", "argmin") and x.numel == 0: raise Skip("empty")
  if name in ("any", "all") and x.dtype == U8: raise Skip("torch's any and all of uint8 give uint8, lazytensor bool")
  if name in ("var", "std") and huge(x):
    raise Skip("a variance of large values: its cancellation leaves an error of an ulp of the values (a mean of equal "
               "values rounds differently in each framework), which can be far from the variance")
  if name in ("var", "std") and f.grad and x.numel and nearly_constant(x, axis):
    raise Skip("the gradient of a variance of (nearly) equal values: it divides the rounding error of the mean by the "
               "standard deviation (a conv's padded border makes such rows)")
  if name in ("sum", "mean", "prod", "logsumexp") and huge(x): raise Skip(ORDER)
  v = f.apply(f"{{0}}.{name}({axis!r}, keepdim={keepdim})", [x], lambda t: getattr(t, name)(axis, keepdim=keepdim),
              lambda t: ref(t, axis, keepdim), ALL if jumps else ())
  # torch divides the sum by the count (and var its squares' sum) in ways that are exact for equal values, where
  # lazytensor's mean * (1/n) is within an ulp: not exact
  if name in ("mean", "var", "std", "logsumexp"): v.exact = False
  return v

def op_softmax(f: Fuzz, x: Val) -> Val:
  if x.dtype not in FLOATS: raise Skip("torch's softmax takes floats")
  name = f.pick(["softmax", "log_softmax"])
  axis = axes(f, x, tuple_ok=False, none_ok=False)
  return f.apply(f"{{0}}.{name}({axis})", [x], lambda t: getattr(t, name)(axis), lambda t: getattr(t, name)(axis))

def op_scan(f: Fuzz, x: Val) -> Val:
  axis = axes(f, x, tuple_ok=False, none_ok=False)
  name = f.pick(["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"])
  if name in ("cumsum", "cumprod", "logcumsumexp") and huge(x): raise Skip(ORDER)
  pair = name in ("cummax", "cummin")  # (values, indices): the values are compared
  ref: Callable[[Any], Any] = (lambda t: getattr(t, name)(axis).values) if pair else (lambda t: getattr(t, name)(axis))
  ours: Callable[[Any], Any] = (lambda t: getattr(t, name)(axis)[0]) if pair else (lambda t: getattr(t, name)(axis))
  return f.apply(f"{{0}}.{name}({axis})" + ("[0]" if pair else ""), [x], ours, ref)

def _ties(s: Any, dim: int, n: int) -> Any:
  """Where neighbours along `dim` of sorted values `s` (n of them) are equal, NaN to NaN included."""
  a, b = s.narrow(dim, 0, n - 1), s.narrow(dim, 1, n - 1)
  return (a == b) | (a.isnan() & b.isnan())

def op_sort(f: Fuzz, x: Val) -> Val:
  dim, desc = axes(f, x, tuple_ok=False, none_ok=False), f.chance(0.5)
  r = f.rng.random()
  if r < 0.35:
    return f.apply(f"{{0}}.sort({dim}, descending={desc})[0]", [x], lambda t: t.sort(dim, descending=desc)[0],
                   lambda t: t.sort(dim, descending=desc, stable=True)[0])
  if r < 0.6:
    return f.apply(f"{{0}}.sort({dim}, descending={desc})[1]", [x], lambda t: t.sort(dim, descending=desc)[1],
                   lambda t: t.sort(dim, descending=desc, stable=True)[1], ALL)
  n = x.shape[dim] if x.ndim else 1
  # torch's topk(0) of a 0-d tensor gives its value; an empty topk of lazytensor needs no gradient, torch's does
  k, largest = f.randint(0 if x.ndim and not f.grad else 1, max(n, 1)), f.chance(0.6)
  # which of several equal values topk returns is torch's to choose: indices only where a row's values differ
  # (neighbours in sorted order compared, not their difference: inf - inf is NaN, and two NaNs are a tie too)
  distinct = x.ndim == 0 or n < 2 or not bool(_ties(x.tt.sort(dim)[0], dim, n).any())
  which = 1 if distinct and f.chance(0.5) else 0
  return f.apply(f"{{0}}.topk({k}, {dim}, largest={largest})[{which}]", [x],
                 lambda t: t.topk(k, dim, largest=largest)[which], lambda t: t.topk(k, dim, largest=largest)[which],
                 ALL if which else ())

# ---- matmul and conv ----

def op_matmul(f: Fuzz, x: Val) -> Val:
  if x.ndim == 0: raise Skip("0-d")
  if huge(x): raise Skip(ORDER)
  k = x.shape[-1]
  n = f.pick([1, 3, 7, 17, 33] if x.numel * 33 <= 4000 else [1, 2, 3])
  if x.ndim == 1: shape = f.pick([(k,), (k, n), (2, k, n)])
  else: shape = f.pick([(k,), (k, n), (*f.broadcast_shape(x.shape[:-2]), k, n)])
  w = f.leaf(shape, x.dtype)
  if huge(w): raise Skip(ORDER)
  if f.chance(0.3):
    w2 = f.apply("{0}.T", [w], lambda t: t.T, lambda t: t.permute(*range(t.ndim - 1, -1, -1)))
    w = f.apply("{0}.T", [w2], lambda t: t.T, lambda t: t.permute(*range(t.ndim - 1, -1, -1)))
  if f.chance(0.25) and len(shape) >= 2 and x.ndim >= 2:
    return f.apply("{1}.transpose(-1, -2) @ {0}.transpose(-1, -2)", [x, w],
                   lambda a, b: b.transpose(-1, -2) @ a.transpose(-1, -2))
  return f.apply("{0} @ {1}", [x, w], lambda a, b: a @ b)

def op_conv(f: Fuzz, x: Val) -> Val:
  if x.dtype not in FLOATS or x.ndim not in (3, 4) or 0 in x.shape: raise Skip("conv of 3-d or 4-d floats")
  if huge(x): raise Skip(ORDER)
  spatial = x.ndim - 2
  cin = x.shape[1]
  groups = f.pick([g for g in (1, 2, 3) if cin % g == 0])
  cout = groups * f.randint(1, 3)
  ks = tuple(f.randint(1, min(3, x.shape[2 + i] + 2)) for i in range(spatial))
  stride, dilation, padding = f.randint(1, 2), f.randint(1, 2), f.randint(0, 2)
  w = f.leaf((cout, cin // groups, *ks), x.dtype)
  if huge(w): raise Skip(ORDER)
  bias = f.leaf((cout,), x.dtype) if f.chance(0.5) else None
  name = "conv1d" if spatial == 1 else "conv2d"
  kw = dict(groups=groups, stride=stride, dilation=dilation, padding=padding)
  ins: list[Arg] = [x, w] if bias is None else [x, w, bias]
  kw_text = ", ".join(f"{k}={v}" for k, v in kw.items())
  def ref(a: Any, b: Any, c: Any = None) -> Any:
    # torch's native CPU conv: its float32 oneDNN kernels skip the padded taps for some shapes only, which shows where
    # a weight is infinite or NaN (0 * inf); the native one multiplies the padded zeros, as its float64 conv
    with torch.backends.mkldnn.flags(enabled=False): return getattr(torch.nn.functional, name)(a, b, c, **kw)
  return f.apply(f"{{0}}.{name}({{1}}, {'{2}' if bias is not None else None}, {kw_text})", ins,
                 lambda a, b, c=None: getattr(a, name)(b, c, **kw), ref)

def op_pool(f: Fuzz, x: Val) -> Val:
  if x.dtype not in FLOATS or x.ndim not in (3, 4) or 0 in x.shape: raise Skip("pooling of 3-d or 4-d floats")
  k = f.randint(1, min(3, *x.shape[-2:]))
  stride = f.randint(1, 2)
  name = f.pick(["max_pool2d", "avg_pool2d"])
  if name == "avg_pool2d" and huge(x): raise Skip(ORDER)
  return f.apply(f"{{0}}.{name}({k}, {stride})", [x], lambda t: getattr(t, name)((k, k), stride),
                 lambda t: getattr(torch.nn.functional, name)(t, k, stride))

# (op, weight)
OPS: list[tuple[Callable[[Fuzz, Val], Val], float]] = [
  (op_reshape, 3), (op_permute, 3), (op_transpose, 1), (op_expand, 2), (op_shrink, 2), (op_pad, 2), (op_flip, 2),
  (op_squeeze, 1), (op_flatten, 1), (op_repeat, 1), (op_roll, 1), (op_split, 1), (op_unfold, 1), (op_diagonal, 1),
  (op_cat, 1.5), (op_tri, 0.5), (op_materialize, 2), (op_getitem, 4), (op_gather, 2), (op_write, 4), (op_unary, 5),
  (op_cast, 2), (op_binary, 6), (op_division, 2), (op_where, 2.5), (op_lerp, 0.5), (op_reduce, 5),
  (op_softmax, 1), (op_scan, 1.5), (op_sort, 1.5), (op_matmul, 2), (op_conv, 1), (op_pool, 0.5),
]

def op_name(op: Callable[[Fuzz, Val], Val]) -> str: return op.__name__.removeprefix("op_")

def build(f: Fuzz) -> None:
  """The random chain: each op reads a recent value (new inputs join through the ops' second operands)."""
  f.leaf(f.shape(), f.dtype())
  ops, weights = zip(*[(op, w) for op, w in OPS if op_name(op) not in f.without])
  p = np.array(weights) / sum(weights)
  steps = f.randint(1, 8)
  done = tries = 0
  while done < steps and tries < 200:
    tries += 1
    x = f.vals[-1] if f.chance(0.6) else f.pick(f.vals[-4:])
    op = ops[int(f.rng.choice(len(ops), p=p))]
    try: op(f, x)
    except Skip: continue
    done += 1

# ---- comparison ----

def as_numpy(t: Any) -> np.ndarray:
  t = t.detach()
  return (t.float() if t.dtype == torch.bfloat16 else t).numpy()

def coarsest(dts: Sequence[DType]) -> DType:
  """The least precise float among dts (float64 if none is a float)."""
  return max([dt for dt in dts if dt in FLOATS] + [F64], key=lambda dt: TOLERANCE[dt][1])

def compare_values(got: np.ndarray, want: np.ndarray, shadow: np.ndarray | None, exact: bool,
                   tolerance: tuple[float, float]) -> str | None:
  """What differs between lazytensor's values and torch's, or None: ints and bools, and exact floats, must be equal;
  other floats within tolerance (atol, rtol), on top of ERROR_GROWTH times torch's own error (its distance to the
  shadow). NaN must meet NaN, and an infinity the same infinity, unless torch overflowed or gave NaN where its shadow
  has a value its dtype holds."""
  if got.shape != want.shape: return f"shape {got.shape} != {want.shape}"
  floats = got.dtype.kind == "f" or want.dtype.kind == "f"
  if not floats or exact:
    bad = ~((got == want) | (np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))))
  else:
    g, w = got.astype(np.float64), want.astype(np.float64)
    s = w if shadow is None else shadow.astype(np.float64)
    atol, rtol = tolerance
    with np.errstate(invalid="ignore"):
      close = np.abs(g - w) <= atol + rtol * np.abs(w) + ERROR_GROWTH * np.abs(np.nan_to_num(w - s, posinf=0,
                                                                                              neginf=0))
    # torch overflowed on the way to a value its dtype holds (float32 cosh(89) = exp(89) / 2, exp(89) > FLT_MAX), or
    # gave NaN for one (its vectorized float32 fmod(3e38, 0.5) is NaN, the exact result 0): its shadow is the value,
    # within the tolerance
    holds = np.abs(s) <= np.finfo(want.dtype).max if want.dtype.kind == "f" else 0
    lost = (np.isinf(w) | np.isnan(w)) & np.isfinite(s) & holds
    with np.errstate(invalid="ignore"):
      near_shadow = lost & (np.abs(g - s) <= atol + rtol * np.abs(s))
    bad = ~((g == w) | (np.isnan(g) & np.isnan(w)) | (np.isfinite(g) & np.isfinite(w) & close) | near_shadow)
  if not bad.any(): return None
  at = tuple(int(i) for i in np.argwhere(bad)[0]) if bad.ndim else ()
  return f"{int(bad.sum())} of {bad.size} differ{' (exact)' if exact and floats else ''}; " \
         f"at {at}: lazytensor {got[at]!r}, torch {want[at]!r}"

def check_values(f: Fuzz) -> None:
  if f.chance(0.5):
    f.lines.append(f"v0.realize({', '.join(v.name for v in f.vals[1:])})")
    f.vals[0].lt.realize(*[v.lt for v in f.vals[1:]])
  for v in f.vals:
    problem = compare_values(v.lt.numpy(), as_numpy(v.tt), as_numpy(v.t64), v.exact, TOLERANCE[v.coarsest])
    if problem is not None: f.fail(f"{v.name}: {problem}", v.name)

def check_gradients(f: Fuzz) -> None:
  out = f.vals[-1]
  if not out.tt.requires_grad or out.dtype not in FLOATS: return
  cot = f.rng.uniform(-1, 1, size=out.shape)
  # where a value was NaN (log of a negative), the frameworks' chain rules give NaN or numbers in different places
  if any(v.tt.is_floating_point() and bool(v.tt.isnan().any()) for v in f.vals): return
  leaves = [v for v in f.leaves if v.tt.requires_grad]
  try:
    ref = torch.autograd.grad((out.tt * torch.from_numpy(cot).to(out.tt.dtype)).sum(), [v.tt for v in leaves],
                              allow_unused=True)
    ref64 = torch.autograd.grad((out.t64 * torch.from_numpy(cot)).sum(), [v.t64 for v in leaves], allow_unused=True)
  except RuntimeError: return  # torch has no backward for it (bool operands, empty broadcasts)
  if not out.lt.requires_grad:
    # torch's output needs a gradient when an input does, even through ops whose derivative is 0 (copysign's sign)
    if any(g is not None and bool(g.ne(0).any()) for g in ref): f.fail(f"{out.name} needs no gradient, torch's does")
    return
  weights, text = f.tensor(cot if out.dtype == F64 else cot.astype(np.float32), out.dtype)
  f.lines.append(f"({out.name} * {text}).sum().backward()")
  (out.lt * weights).sum().backward()
  # the gradients are as precise as the least precise float in the chain
  least = coarsest([v.dtype for v in f.vals])
  for v, g, g64 in zip(leaves, ref, ref64):
    want = np.zeros(v.shape) if g is None else as_numpy(g)
    shadow = np.zeros(v.shape) if g64 is None else as_numpy(g64)
    got = np.zeros(v.shape) if v.lt.grad is None else v.lt.grad.numpy()
    problem = compare_values(got, want, shadow, False, TOLERANCE[least])
    if problem is not None: f.fail(f"gradient of {v.name}: {problem}", f"{v.name}.grad")

class Mismatch(AssertionError):
  """lazytensor and torch disagree; the message holds the program."""

def run_case(seed: int, mode: Mode, without: frozenset[str] = frozenset()) -> None:
  """The chain of one seed in one mode (without the ops named), checked against torch: a Mismatch, which holds the
  program, where they differ or lazytensor raises."""
  f = Fuzz(seed, mode, without)
  try:
    with running_in(mode):
      build(f)
      check_values(f)
      if f.grad: check_gradients(f)
  except Mismatch: raise
  except Exception as e:  # lazytensor raised where torch ran: where, and the program that ran
    frame = traceback.extract_tb(e.__traceback__)[-1]
    raise Mismatch(f"{type(e).__name__} at {frame.filename}:{frame.lineno}: {e}\n{f.program()}") from e

def modes(names: str, shard_ok: bool = True) -> list[Mode]:
  unknown = [n for n in names.split(",") if n not in MODES or (MODES[n].shard and not shard_ok)]
  known = ", ".join(n for n, m in MODES.items() if shard_ok or not m.shard)
  if unknown: raise argparse.ArgumentTypeError(f"no mode {', '.join(unknown)} here: the modes are {known}")
  return [MODES[n] for n in names.split(",")]

def fuzz_args(doc: str | None, cases: int, shard_ok: bool = True) -> argparse.ArgumentParser:
  """The options of every extra/fuzz_*.py: how many cases, the first seed, the modes, how much of a failure to print."""
  ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--cases", type=int, default=cases, help="how many seeds each mode runs")
  ap.add_argument("--start", type=int, default=0, help="the first seed")
  ap.add_argument("--devices", type=lambda names: modes(names, shard_ok), default=[MODES["cpu"]],
                  help=f"modes, comma-separated: {', '.join(n for n, m in MODES.items() if shard_ok or not m.shard)}")
  ap.add_argument("--quiet", action="store_true", help="print only the first line of each failure")
  return ap

@contextmanager
def running_in(mode: Mode) -> Iterator[None]:
  with Context(**mode.knobs), searched(mode): yield

def sweep(label: str, run: Callable[[int], None], seeds: range, quiet: bool) -> list[int]:
  """run(seed) for each seed; prints each failure (an AssertionError, whose message holds the program that failed),
  progress every 100 cases and a summary with the time a case took. The failing seeds."""
  failed, start = [], time.perf_counter()
  for done, seed in enumerate(seeds, 1):
    try: run(seed)
    except AssertionError as e:
      failed.append(seed)
      print(f"{label} seed {seed}: " + (str(e).split("\n")[0] if quiet else f"{e}\n"), flush=True)
    if done % 100 == 0 and done < len(seeds):
      print(f"{label}: {done} of {len(seeds)} cases, {len(failed)} failed", flush=True)
  took = (time.perf_counter() - start) / max(len(seeds), 1)
  print(f"== {label}: {len(failed)} of {len(seeds)} cases failed, {took * 1e3:.0f} ms a case"
        f"{': seeds ' + str(failed[:50]) if failed else ''}", flush=True)
  return failed

def main() -> None:
  ap = fuzz_args(__doc__, 200)
  names = sorted(op_name(op) for op, _ in OPS)
  ap.add_argument("--without", type=lambda s: frozenset(s.split(",")), default=frozenset(),
                  help=f"ops to leave out of the chains (to look past a known failure), comma-separated: {names}")
  args = ap.parse_args()
  if args.without - set(names): ap.error(f"--without: no op {sorted(args.without - set(names))}; the ops are {names}")
  for mode in args.devices:
    sweep(mode.name, lambda seed, m=mode: run_case(seed, m, args.without), range(args.start, args.start + args.cases),
          args.quiet)

if __name__ == "__main__":
  main()
