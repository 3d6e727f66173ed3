"""Differential fuzzing of op semantics against torch, one area at a time: integer division, remainder and shifts of
negative numbers, dtype promotion of mixed operands, reductions over size-0 and size-1 axes with keepdim and negative
dims, empty tensors through every op, where/clamp/min/max with NaN, integer wrap-around, float -> int casts, int
matmul, softmax of -inf rows, and TinyJit with changing inputs. Writes into views, gradients and chains of ops are
fuzz_compose.py's, which draws them at random together with the ops here.

Each area draws random cases from a seed; a case runs one function on lazytensor and on torch and compares shape,
dtype and values (ints and bools exactly, floats within a tolerance, NaN and inf in the same places). The modes are
fuzz_compose.py's, but for the sharded one: the areas make their tensors on the default device.

  python extra/fuzz_semantics.py --cases 200                              # every area on the CPU
  python extra/fuzz_semantics.py --area division --cases 2000 --devices emu,cudacpu  # one area on two devices

What torch leaves undefined is not compared: float -> int casts out of the target's range (lazytensor clamps them as
its ALU rewrite documents; torch gives whatever the CPU instruction gives), int division by zero (lazytensor gives 0,
torch raises), INT_MIN // -1.
"""
from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from fuzz_compose import Mismatch, Mode, compare_values, fuzz_args, running_in, sweep, tdt

from lazytensor import Tensor, TinyJit, dtypes
from lazytensor.dtype import DType

INTS = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64]
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]
ALL = INTS + FLOATS + [dtypes.bool]

def pair(arr: np.ndarray, dt: DType) -> tuple[Tensor, Any]:
  return Tensor(arr, dtype=dt), torch.from_numpy(np.array(arr, copy=True)).to(tdt(dt))  # ascontiguousarray: 0-d -> (1,)

def values(rng: np.random.Generator, shape: tuple[int, ...], dt: DType, special: bool = True) -> np.ndarray:
  """Random values of dt: small ints, the extremes of the range sometimes; quarters and specials for floats."""
  if dt == dtypes.bool: return rng.random(shape) < 0.5
  if dt in INTS:
    info = np.iinfo(dt.np)
    lo, hi = (0, 9) if dt == dtypes.uint8 else (-9, 9)
    a = rng.integers(lo, hi + 1, size=shape)
    if special and rng.random() < 0.3:
      a = np.where(rng.random(shape) < 0.3, rng.choice([info.min, info.max, info.min + 1, info.max - 1], size=shape), a)
    return a.astype(dt.np)
  a = rng.integers(-20, 21, size=shape) / 4
  if special and rng.random() < 0.3:
    a = np.where(rng.random(shape) < 0.25, rng.choice([np.nan, np.inf, -np.inf, -0.0], size=shape), a)
  return a.astype(dt.np)

def shape(rng: np.random.Generator, ndim: int | None = None, zero: float = 0.1) -> tuple[int, ...]:
  n = int(rng.integers(0, 4)) if ndim is None else ndim
  return tuple(0 if rng.random() < zero else int(rng.choice([1, 1, 2, 3, 5])) for _ in range(n))

def compare(what: str, got: Any, want: Any, atol: float = 1e-5, rtol: float = 1e-4) -> None:
  if isinstance(want, torch.Tensor):
    if not isinstance(got, Tensor): raise Mismatch(f"{what}: lazytensor gave {type(got).__name__}, torch a tensor")
    if tdt(got.dtype) != want.dtype: raise Mismatch(f"{what}: dtype {got.dtype.name} != torch's {want.dtype}")
    if tuple(got.shape) != tuple(want.shape):
      raise Mismatch(f"{what}: shape {got.shape} != torch's {tuple(want.shape)}")
    g = got.numpy()
    w = want.detach().float().numpy() if want.dtype == torch.bfloat16 else want.detach().numpy()
  else: g, w = np.asarray(got), np.asarray(want)
  # a few ulps: torch's `3.0 / half` multiplies by a reciprocal, its half log_softmax rounds on the way
  if g.dtype == np.float16 or w.dtype == np.float16: rtol = max(rtol, 4e-3)
  if (problem := compare_values(g, w, None, False, (atol, rtol))) is not None: raise Mismatch(f"{what}: {problem}")

def both(what: str, fn: Callable[[Any], Any], lt_args: list[Any], t_args: list[Any], **tol: float) -> None:
  """fn on both frameworks' arguments; torch raising means the case does not apply."""
  try: want = fn(*t_args)
  except (RuntimeError, ValueError, TypeError, IndexError): return
  try: got = fn(*lt_args)
  except Exception as e: raise Mismatch(f"{what}: lazytensor raised {type(e).__name__}: {e}; torch gave {want}") from e
  if isinstance(want, tuple):
    for i, (g, w) in enumerate(zip(got, want)): compare(f"{what}[{i}]", g, w, **tol)
  else: compare(what, got, want, **tol)

# float16 reductions accumulate in float32 and round once (torch rounds on the way: its half prod overflows to inf,
# then inf * 0 gives NaN where the product is 0): the reference is torch's float32 result rounded to its result dtype
HALF_IN_FLOAT32 = ("sum", "prod", "mean", "var", "std", "cumsum", "logsumexp", "softmax", "log_softmax")

def reference(name: str, dt: DType, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
  if dt != dtypes.float16 or name not in HALF_IN_FLOAT32: return fn
  return lambda x: fn(x) if isinstance(x, Tensor) else fn(x.float()).to(fn(x).dtype)

# ---- the areas ----

def area_division(rng: np.random.Generator) -> None:
  dt = INTS[int(rng.integers(len(INTS)))]
  s = shape(rng, int(rng.integers(1, 3)), zero=0.0)
  a, b = values(rng, s, dt), values(rng, s, dt)
  b = np.where(b == 0, 3, b).astype(dt.np)
  if dt != dtypes.uint8: a = np.where((a == np.iinfo(dt.np).min) & (b == -1), 5, a).astype(dt.np)
  (la, ta), (lb, tb) = pair(a, dt), pair(b, dt)
  for name, fn in [("//", lambda x, y: x // y), ("%", lambda x, y: x % y),
                   ("div trunc", lambda x, y: x.div(y, rounding_mode="trunc")),
                   ("div floor", lambda x, y: x.div(y, rounding_mode="floor")), ("fmod", lambda x, y: x.fmod(y)),
                   ("true div", lambda x, y: x / y)]:
    both(f"{dt.name} {name}", fn, [la, lb], [ta, tb])
  k = int(rng.choice([-7, -3, -2, -1, 1, 2, 3, 7]))
  if dt == dtypes.uint8 and k < 0: k = -k
  both(f"{dt.name} // {k}", lambda x: x // k, [la], [ta])
  both(f"{dt.name} % {k}", lambda x: x % k, [la], [ta])
  both(f"{k} // {dt.name}", lambda y: k // y, [lb], [tb])
  both(f"{k} % {dt.name}", lambda y: k % y, [lb], [tb])
  bits = dt.itemsize * 8
  sh = rng.integers(0, bits, size=s).astype(dt.np)
  ls, ts = pair(sh, dt)
  both(f"{dt.name} << t", lambda x, y: x << y, [la, ls], [ta, ts])
  both(f"{dt.name} >> t", lambda x, y: x >> y, [la, ls], [ta, ts])
  n = int(rng.integers(0, bits))
  both(f"{dt.name} >> {n}", lambda x: x >> n, [la], [ta])
  both(f"{dt.name} << {n}", lambda x: x << n, [la], [ta])

def area_promotion(rng: np.random.Generator) -> None:
  d1, d2 = (ALL[int(i)] for i in rng.integers(len(ALL), size=2))
  s1, s2 = shape(rng, 2, zero=0.0), shape(rng, 2, zero=0.0)
  s2 = tuple(1 if rng.random() < 0.4 else a for a in s1)
  (la, ta), (lb, tb) = pair(values(rng, s1, d1, False), d1), pair(values(rng, s2, d2, False), d2)
  scalar = rng.choice([True, False, 0, 3, -2, 0.5, -1.5, 2.0])
  scalar = bool(scalar) if isinstance(scalar, np.bool_) else scalar.item() if hasattr(scalar, "item") else scalar
  ops: list[tuple[str, Callable[[Any, Any], Any]]] = [
    ("+", lambda x, y: x + y), ("-", lambda x, y: x - y), ("*", lambda x, y: x * y), ("/", lambda x, y: x / y),
    ("max", lambda x, y: x.maximum(y) if isinstance(x, Tensor) else torch.maximum(x, y)),
    ("==", lambda x, y: x == y), ("<", lambda x, y: x < y), ("&", lambda x, y: x & y), ("|", lambda x, y: x | y),
    ("where", lambda x, y: (x != 0).where(x, y) if isinstance(x, Tensor) else torch.where(x != 0, x, y))]
  for name, fn in ops:
    if name == "-" and dtypes.bool in (d1, d2): continue  # torch rejects bool subtraction
    both(f"{d1.name} {name} {d2.name}", fn, [la, lb], [ta, tb])
    if name in ("max", "where"): continue
    both(f"{d1.name} {name} {scalar!r}", fn, [la, scalar], [ta, scalar])
    if name in ("+", "*", "/"): both(f"{scalar!r} {name} {d1.name}", lambda x, f=fn: f(scalar, x), [la], [ta])
  for name, fn in [("sum", lambda x: x.sum()), ("mean", lambda x: x.float().mean() if isinstance(x, Tensor) else
                   x.float().mean()), ("prod", lambda x: x.prod()), ("cumsum", lambda x: x.cumsum(0)),
                   ("abs", lambda x: x.abs()), ("neg", lambda x: -x), ("sign", lambda x: x.sign())]:
    if name == "neg" and d1 == dtypes.bool: continue
    both(f"{name}({d1.name})", reference(name, d1, fn), [la], [ta])

def area_mixed(rng: np.random.Generator) -> None:
  """Promotion with 0-d tensors (which, as Python numbers, do not raise the category's width), float floor division
  and remainder with signs, zeros and infinities, integer powers, clamp and where with numbers of another kind."""
  d1, d2 = (ALL[int(i)] for i in rng.integers(len(ALL), size=2))
  s = shape(rng, int(rng.integers(1, 3)), zero=0.0)
  (la, ta), (lz, tz) = pair(values(rng, s, d1, False), d1), pair(values(rng, (), d2, False), d2)
  for name, fn in [("+", lambda x, y: x + y), ("*", lambda x, y: x * y), ("/", lambda x, y: x / y),
                   ("<", lambda x, y: x < y), ("max", lambda x, y: x.maximum(y) if isinstance(x, Tensor) else
                                                torch.maximum(x, y))]:
    both(f"{d1.name} {name} 0-d {d2.name}", fn, [la, lz], [ta, tz])
    both(f"0-d {d2.name} {name} {d1.name}", fn, [lz, la], [tz, ta])
  f = FLOATS[int(rng.integers(len(FLOATS)))]
  (lf, tf), (lg, tg) = pair(values(rng, s, f), f), pair(values(rng, s, f), f)
  for name, fn in [("//", lambda x, y: x // y), ("%", lambda x, y: x % y), ("fmod", lambda x, y: x.fmod(y)),
                   ("floor div", lambda x, y: x.div(y, rounding_mode="floor")),
                   ("trunc div", lambda x, y: x.div(y, rounding_mode="trunc")), ("pow", lambda x, y: x ** y),
                   ("copysign", lambda x, y: x.copysign(y))]:
    if f == dtypes.float16 and name in ("//", "%", "floor div"): continue  # torch rounds each step to float16
    both(f"{f.name} {name}", fn, [lf, lg], [tf, tg], atol=1e-3 if f == dtypes.float16 else 1e-5)
  k = float(rng.choice([-2.5, -0.0, 0.0, 1.5, np.inf, -np.inf]))
  both(f"{f.name} // {k}", lambda x: x // k, [lf], [tf])
  both(f"{f.name} % {k}", lambda x: x % k, [lf], [tf])
  if d1 in INTS:
    e = int(rng.integers(0, 4))
    both(f"{d1.name} ** {e}", lambda x: x ** e, [la], [ta])
    both(f"{e} ** {d1.name}", lambda x: e ** x, [la], [ta])
    lo, hi = float(rng.choice([-1.5, 0.5])), int(rng.choice([2, 5]))
    both(f"{d1.name}.clamp({lo}, {hi})", lambda x: x.clamp(lo, hi), [la], [ta])
    both(f"{d1.name}.clamp(None, {hi})", lambda x: x.clamp(None, hi), [la], [ta])
  c = rng.random(s) < 0.5
  lc, tc = Tensor(c), torch.from_numpy(c)
  v = rng.choice([1, 2.5, True, -3])
  v = v.item() if hasattr(v, "item") else v
  both(f"where(c, {d1.name}, {v!r})", lambda cc, x: cc.where(x, v) if isinstance(x, Tensor) else torch.where(cc, x, v),
       [lc, la], [tc, ta])
  both(f"where(c, {v!r}, {d1.name})", lambda cc, x: cc.where(v, x) if isinstance(x, Tensor) else torch.where(cc, v, x),
       [lc, la], [tc, ta])

def area_reduce(rng: np.random.Generator) -> None:
  dt = ALL[int(rng.integers(len(ALL)))]
  s = shape(rng, int(rng.integers(1, 4)), zero=0.25)
  la, ta = pair(values(rng, s, dt), dt)
  nd = len(s)
  dim = int(rng.integers(-nd, nd))
  keep = bool(rng.random() < 0.5)
  dims = tuple(sorted({int(d) for d in rng.integers(-nd, nd, size=int(rng.integers(1, nd + 1)))}, key=lambda d: d % nd))
  if len({d % nd for d in dims}) != len(dims): dims = (dim,)
  tests: list[tuple[str, Callable[[Any], Any]]] = [
    ("sum", lambda x: x.sum(dims, keepdim=keep)), ("prod", lambda x: x.prod(dim, keepdim=keep)),
    ("max", lambda x: x.max(dim, keepdim=keep) if isinstance(x, Tensor) else x.amax(dim, keepdim=keep)),
    ("min", lambda x: x.min(dim, keepdim=keep) if isinstance(x, Tensor) else x.amin(dim, keepdim=keep)),
    ("amax dims", lambda x: x.max(dims, keepdim=keep) if isinstance(x, Tensor) else x.amax(dims, keepdim=keep)),
    ("argmax", lambda x: x.argmax(dim, keepdim=keep)), ("argmin", lambda x: x.argmin(dim, keepdim=keep)),
    ("any", lambda x: x.any(dim, keepdim=keep)), ("all", lambda x: x.all(dim, keepdim=keep)),
    ("cumsum", lambda x: x.cumsum(dim)), ("cummax", lambda x: x.cummax(dim) if isinstance(x, Tensor) else
                                          x.cummax(dim).values)]
  if dt in FLOATS:
    tests += [("mean", lambda x: x.mean(dims, keepdim=keep)), ("var", lambda x: x.var(dim, keepdim=keep)),
              ("std", lambda x: x.std(dims, keepdim=keep)),
              ("logsumexp", lambda x: x.logsumexp(dim, keepdim=keep)),
              ("softmax", lambda x: x.softmax(dim)), ("log_softmax", lambda x: x.log_softmax(dim))]
  for name, fn in tests:
    if name in ("any", "all") and dt == dtypes.uint8: continue  # torch gives uint8 here
    if name in ("argmax", "argmin", "max", "min", "amax dims", "cummax") and dt in FLOATS and \
       bool(np.isnan(np.asarray(la.numpy(), dtype=np.float64)).any()):
      continue  # which NaN's index: see area_nan
    both(f"{name}({dt.name} {s}, dim={dim}, dims={dims}, keepdim={keep})", reference(name, dt, fn), [la], [ta],
         atol=1e-4, rtol=1e-3)

def area_empty(rng: np.random.Generator) -> None:
  s = list(shape(rng, int(rng.integers(1, 4)), zero=0.0))
  s[int(rng.integers(len(s)))] = 0
  dt = [dtypes.float32, dtypes.int32, dtypes.bool][int(rng.integers(3))]
  (la, ta), (lb, tb) = pair(values(rng, tuple(s), dt), dt), pair(values(rng, tuple(s), dt), dt)
  ops: list[tuple[str, Callable[..., Any]]] = [
    ("add", lambda x, y: x + y), ("mul", lambda x, y: x * y), ("eq", lambda x, y: x == y),
    ("where", lambda x, y: (x == y).where(x, y) if isinstance(x, Tensor) else torch.where(x == y, x, y)),
    ("sum", lambda x, y: x.sum()), ("sum0", lambda x, y: x.sum(0)),
    ("sum-1 keep", lambda x, y: x.sum(-1, keepdim=True)),
    ("mean", lambda x, y: x.float().mean()), ("prod", lambda x, y: x.prod()),
    ("any", lambda x, y: x.any()), ("all", lambda x, y: x.all()), ("flip", lambda x, y: x.flip(0)),
    ("cat", lambda x, y: x.cat(y) if isinstance(x, Tensor) else torch.cat([x, y])),
    ("stack", lambda x, y: x.stack(y) if isinstance(x, Tensor) else torch.stack([x, y])),
    ("reshape", lambda x, y: x.reshape(-1)), ("T", lambda x, y: x.permute(*range(x.ndim - 1, -1, -1))),
    ("cumsum", lambda x, y: x.cumsum(0)), ("sort", lambda x, y: x.sort(-1)[0]),
    ("pad", lambda x, y: x.pad((1, 1)) if isinstance(x, Tensor) else torch.nn.functional.pad(x, (1, 1))),
    ("matmul", lambda x, y: x.float() @ y.float().transpose(-1, -2) if x.ndim >= 2 else x.float() @ y.float()),
    ("softmax", lambda x, y: x.float().softmax(-1)), ("max -1", lambda x, y: x.float().max(-1)[0]
                                                     if not isinstance(x, Tensor) else x.float().max(-1)),
    ("getitem", lambda x, y: x[..., :1]), ("expand", lambda x, y: x.unsqueeze(0).expand(2, *x.shape)),
    ("repeat", lambda x, y: x.repeat(*([2] * x.ndim))), ("tril", lambda x, y: x.tril() if x.ndim >= 2 else x),
    ("clone", lambda x, y: x.clone()), ("cast", lambda x, y: x.half() if isinstance(x, Tensor) else x.half())]
  for name, fn in ops: both(f"{name} of empty {dt.name} {tuple(s)}", fn, [la, lb], [ta, tb])

def area_nan(rng: np.random.Generator) -> None:
  dt = [dtypes.float32, dtypes.float16, dtypes.float64][int(rng.integers(3))]
  s = shape(rng, int(rng.integers(1, 3)), zero=0.0)
  a = values(rng, s, dt)
  a = np.where(rng.random(s) < 0.3, np.nan, a).astype(dt.np)
  b = np.where(rng.random(s) < 0.3, np.nan, values(rng, s, dt)).astype(dt.np)
  (la, ta), (lb, tb) = pair(a, dt), pair(b, dt)
  lo, hi = float(rng.choice([-1.0, 0.0, np.nan])), float(rng.choice([1.0, 2.0, np.nan]))
  dim = int(rng.integers(-len(s), len(s)))
  ops: list[tuple[str, Callable[..., Any]]] = [
    ("maximum", lambda x, y: x.maximum(y) if isinstance(x, Tensor) else torch.maximum(x, y)),
    ("minimum", lambda x, y: x.minimum(y) if isinstance(x, Tensor) else torch.minimum(x, y)),
    ("clamp", lambda x, y: x.clamp(lo, hi)), ("clamp t", lambda x, y: x.clamp(y, None)),
    ("relu", lambda x, y: x.relu()), ("max", lambda x, y: x.max() if isinstance(x, Tensor) else x.max()),
    ("min", lambda x, y: x.min()), ("amax dim", lambda x, y: x.max(dim) if isinstance(x, Tensor) else x.amax(dim)),
    ("argmax", lambda x, y: x.argmax(dim)), ("argmin", lambda x, y: x.argmin()),
    ("where", lambda x, y: (x > y).where(x, y) if isinstance(x, Tensor) else torch.where(x > y, x, y)),
    ("sort", lambda x, y: x.sort(dim)[0]), ("topk", lambda x, y: x.topk(1, dim)[0]),
    ("cummax", lambda x, y: x.cummax(dim) if isinstance(x, Tensor) else x.cummax(dim).values),
    ("softmax", lambda x, y: x.softmax(dim)), ("logsumexp", lambda x, y: x.logsumexp(dim)),
    ("nan_to_num", lambda x, y: x.nan_to_num()), ("isnan", lambda x, y: x.isnan()),
    ("hardtanh", lambda x, y: x.hardtanh() if isinstance(x, Tensor) else torch.nn.functional.hardtanh(x)),
    ("sign", lambda x, y: x.sign()), ("==", lambda x, y: x == y), ("!=", lambda x, y: x != y)]
  for name, fn in ops:
    if name == "sign": continue  # documented: sign(NaN) is NaN (numpy's), torch's 0
    both(f"{name}({dt.name} with NaN {s}, lo={lo}, hi={hi}, dim={dim})", fn, [la, lb], [ta, tb], atol=1e-3,
         rtol=1e-3)

def area_overflow(rng: np.random.Generator) -> None:
  dt = INTS[int(rng.integers(len(INTS)))]
  info = np.iinfo(dt.np)
  s = (int(rng.integers(1, 6)),)
  a = rng.choice([info.min, info.max, info.min + 1, info.max - 1, 0, 1, -1 if info.min < 0 else 2], size=s)
  b = rng.choice([info.min, info.max, 1, 2, 3, 100 if info.max > 100 else 7], size=s)
  (la, ta), (lb, tb) = pair(a.astype(dt.np), dt), pair(b.astype(dt.np), dt)
  for name, fn in [("+", lambda x, y: x + y), ("-", lambda x, y: x - y), ("*", lambda x, y: x * y),
                   ("neg", lambda x, y: -x),
                   ("sum", lambda x, y: x.sum()), ("cumsum", lambda x, y: x.cumsum(0)),
                   ("prod", lambda x, y: x.prod()), ("abs", lambda x, y: x.abs()), ("+1", lambda x, y: x + 1),
                   ("*2", lambda x, y: x * 2), ("pow 2", lambda x, y: x ** 2), ("square", lambda x, y: x * x)]:
    both(f"{dt.name} {name}", fn, [la, lb], [ta, tb])

def area_cast(rng: np.random.Generator) -> None:
  src = FLOATS[int(rng.integers(len(FLOATS)))]
  dst = (INTS + [dtypes.bool])[int(rng.integers(len(INTS) + 1))]
  s = (int(rng.integers(1, 8)),)
  a = rng.uniform(-300, 300, size=s)
  a = np.where(rng.random(s) < 0.3, np.trunc(a), a)
  a = np.where(rng.random(s) < 0.2, rng.choice([0.5, -0.5, 0.999, -0.999, -0.0, 1e-3], size=s), a).astype(src.np)
  if dst != dtypes.bool:
    info = np.iinfo(dst.np)
    a = a[(np.trunc(a.astype(np.float64)) >= info.min) & (np.trunc(a.astype(np.float64)) <= info.max)]  # defined only
  la, ta = pair(a, src)
  both(f"{src.name} -> {dst.name}", lambda x: x.cast(dst) if isinstance(x, Tensor) else x.to(tdt(dst)), [la], [ta])
  i = values(rng, s, dst if dst != dtypes.bool else dtypes.int32)
  li, ti = pair(i, dst if dst != dtypes.bool else dtypes.int32)
  both(f"{li.dtype.name} -> {src.name}", lambda x: x.cast(src) if isinstance(x, Tensor) else x.to(tdt(src)), [li], [ti])

def area_matmul(rng: np.random.Generator) -> None:
  dt = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.bool][int(rng.integers(6))]
  m, k, n = (int(rng.choice([0, 1, 2, 3, 5, 17])) for _ in range(3))
  batch = tuple(int(rng.choice([1, 2])) for _ in range(int(rng.integers(0, 2))))
  a, b = values(rng, (*batch, m, k), dt), values(rng, (k, n), dt)
  (la, ta), (lb, tb) = pair(a, dt), pair(b, dt)
  both(f"{dt.name} matmul {a.shape} @ {b.shape}", lambda x, y: x @ y, [la, lb], [ta, tb])
  if k: both(f"{dt.name} dot", lambda x, y: x[..., 0, :] @ y[:, 0] if x.shape[-2] else x.sum(), [la, lb], [ta, tb])

def area_softmax_inf(rng: np.random.Generator) -> None:
  dt = [dtypes.float32, dtypes.float16, dtypes.float64][int(rng.integers(3))]
  s = (int(rng.integers(1, 4)), int(rng.integers(1, 6)))
  a = values(rng, s, dt, special=False)
  a[int(rng.integers(s[0]))] = -np.inf
  a = np.where(rng.random(s) < 0.3, -np.inf, a).astype(dt.np)
  la, ta = pair(a, dt)
  dim = int(rng.choice([-1, 0, 1]))
  for name, fn in [("softmax", lambda x: x.softmax(dim)), ("log_softmax", lambda x: x.log_softmax(dim)),
                   ("logsumexp", lambda x: x.logsumexp(dim)), ("logcumsumexp", lambda x: x.logcumsumexp(dim)),
                   ("cross_entropy", lambda x: x.float().cross_entropy(Tensor([0] * x.shape[0]))
                    if isinstance(x, Tensor) else
                    torch.nn.functional.cross_entropy(x.float(), torch.zeros(x.shape[0], dtype=torch.long)))]:
    both(f"{name}({dt.name} rows of -inf, dim={dim})", fn, [la], [ta], atol=1e-3, rtol=1e-3)

def area_jit(rng: np.random.Generator) -> None:
  w = Tensor(rng.standard_normal((3, 4)).astype(np.float32)).realize()
  @TinyJit
  def f(x: Tensor, y: Tensor) -> Tensor: return ((x @ w) * y + x.sum()).realize()
  for _ in range(5):
    x, y = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((1, 4)).astype(np.float32)
    got = f(Tensor(x), Tensor(y)).numpy()
    want = (x @ w.numpy()) * y + x.sum()
    compare("TinyJit replay", got, want, atol=1e-4, rtol=1e-4)

AREAS: dict[str, Callable[[np.random.Generator], None]] = {
  "division": area_division, "promotion": area_promotion, "mixed": area_mixed, "reduce": area_reduce,
  "empty": area_empty, "nan": area_nan, "overflow": area_overflow, "cast": area_cast, "matmul": area_matmul,
  "softmax": area_softmax_inf, "jit": area_jit}

def run_area(area: Callable[[np.random.Generator], None], seed: int, mode: Mode) -> None:
  try:
    with running_in(mode): area(np.random.default_rng(seed))
  except Mismatch: raise
  except Exception as e: raise Mismatch(traceback.format_exc()) from e  # lazytensor raised where torch ran

def main() -> None:
  ap = fuzz_args(__doc__, 100, shard_ok=False)
  ap.add_argument("--area", choices=sorted(AREAS), action="append")
  args = ap.parse_args()
  for mode in args.devices:
    for name in args.area or sorted(AREAS):
      sweep(f"{name} ({mode.name})", lambda seed, area=AREAS[name], m=mode: run_area(area, seed, m),
            range(args.start, args.start + args.cases), args.quiet)

if __name__ == "__main__":
  main()
