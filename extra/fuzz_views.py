"""Differential fuzzing of views and in-place writes against numpy, whose views share memory as torch's do and also
take negative steps (`x[::-1]`), which lazytensor's slices take as numpy does.

Each seed makes a few tensors (realized, or lazy values computed from realized ones), takes random chains of views of
them (strided and reversed slices, ints, None, permutes, transposes, diagonals, reshapes that numpy makes as views,
detach), copies (clone, contiguous, flip, an integer-array index) and values computed from them, then writes into
random ones (setitem with basic and advanced indices, assign, add_, mul_, fill_), realizing and reading random ones on
the way. numpy replays the same program on arrays and views; every tensor must hold its array's values at each read
and at the end. A value computed from a tensor (`x + 1`) keeps the values it had when it was built, as in an eager
framework: numpy computes it then.

  python extra/fuzz_views.py --cases 2000 --start 0 --devices cpu,emu   # prints the program of each failing seed

The modes are fuzz_compose.py's, but for the sharded one.
"""
from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from fuzz_compose import Mode, fuzz_args, running_in, sweep

from lazytensor import Tensor, dtypes


@dataclass(eq=False)
class Pair:
  name: str
  lt: Tensor
  ref: np.ndarray
  writable: bool  # writes through it reach what it views (numpy: a view that owns no repeated element)

class Program:
  def __init__(self, seed: int, mode: Mode) -> None:
    self.rng = np.random.default_rng(seed)
    self.pairs: list[Pair] = []
    self.lines: list[str] = [f"# seed {seed} in mode {mode.name} ({mode.knobs}): "
                             f"python extra/fuzz_views.py --devices {mode.name} --start {seed} --cases 1"]

  def chance(self, p: float) -> bool: return bool(self.rng.random() < p)
  def randint(self, lo: int, hi: int) -> int: return int(self.rng.integers(lo, hi + 1))
  def pick(self, seq: Any) -> Any: return seq[int(self.rng.integers(len(seq)))]

  def add(self, text: str, lt: Tensor, ref: np.ndarray, writable: bool = True) -> Pair:
    p = Pair(f"t{len(self.pairs)}", lt, ref, writable)
    self.pairs.append(p)
    self.lines.append(f"{p.name} = {text}")
    return p

  def say(self, text: str) -> None: self.lines.append(text)

  def check(self, p: Pair, when: str) -> None:
    got = p.lt.numpy()
    if got.shape != p.ref.shape or not np.array_equal(got, p.ref):
      raise AssertionError(f"{p.name} {when}: lazytensor {got.tolist()} != numpy {p.ref.tolist()}\n" +
                           "\n".join(self.lines))

# ---- the steps ----

def new_root(pr: Program) -> None:
  shape = tuple(pr.randint(1, 4) for _ in range(pr.randint(1, 3)))
  dt = pr.pick([dtypes.float32, dtypes.int32])
  arr = pr.rng.integers(-9, 10, size=shape).astype(dt.np)
  base = Tensor(arr).realize()
  data = f"Tensor(np.array({arr.tolist()}, dtype=np.{np.dtype(dt.np).name}))"
  r = pr.rng.random()
  if r < 0.35: pr.add(f"{data}.realize()", base, arr.copy())
  elif r < 0.7: pr.add(f"{data} * 2", base * 2, arr * 2)
  elif r < 0.85: pr.add(f"({data} + 1).realize()", (base + 1).realize(), arr + 1)
  else: pr.add(f"{data}.contiguous()", base.contiguous(), arr.copy())

def _slice(pr: Program, n: int) -> slice:
  step = pr.pick([None, 1, 2, -1, -2, 3])
  return slice(pr.pick([None, pr.randint(-n, n)]), pr.pick([None, pr.randint(-n, n)]), step)

# (name, fn(program, pair) -> (text, lt fn, numpy fn) or None): views that numpy also makes as views
def view_index(pr: Program, p: Pair) -> tuple[str, Callable[[Any], Any], Callable[[Any], Any]] | None:
  if p.ref.ndim == 0: return None
  idx: tuple[Any, ...] = ()
  for n in p.ref.shape[:pr.randint(1, p.ref.ndim)]:
    if pr.chance(0.2): idx += (None,)  # a new dim, which indexes none
    idx += (pr.randint(-n, n - 1) if n and pr.chance(0.4) else _slice(pr, n),)
  # numpy gives a scalar (a copy) where every dim has an int: the Ellipsis makes it a 0-d view
  return f"[{idx!r}]", lambda t: t[idx], lambda a: a[idx + (Ellipsis,)]

def view_permute(pr: Program, p: Pair) -> tuple[str, Callable[[Any], Any], Callable[[Any], Any]] | None:
  order = [int(d) for d in pr.rng.permutation(p.ref.ndim)]
  return f".permute({order})", lambda t: t.permute(order), lambda a: a.transpose(order)

def view_reshape(pr: Program, p: Pair) -> tuple[str, Callable[[Any], Any], Callable[[Any], Any]] | None:
  shape = pr.pick([(-1,), (1, -1), (-1, 1), (p.ref.size,) + (1,) * pr.randint(0, 1)])
  out = p.ref.reshape(shape)
  if not np.shares_memory(out, p.ref) and p.ref.size > 1: return None  # numpy copies: torch's reshape may too
  return f".reshape({shape})", lambda t: t.reshape(shape), lambda a: a.reshape(shape)

def view_diagonal(pr: Program, p: Pair) -> tuple[str, Callable[[Any], Any], Callable[[Any], Any]] | None:
  if p.ref.ndim < 2: return None
  off = pr.randint(-1, 1)
  return f".diagonal({off})", lambda t: t.diagonal(off), lambda a: writable_diagonal(a, off)

def writable_diagonal(a: np.ndarray, off: int) -> np.ndarray:
  """numpy's diagonal (of the first two axes, as torch's and lazytensor's) as a writable view: np.diagonal's is
  read-only."""
  d = a.diagonal(off)
  start = a[:, off:] if off >= 0 else a[-off:]
  return np.lib.stride_tricks.as_strided(start, d.shape, d.strides, writeable=True)

def view_detach(pr: Program, p: Pair) -> tuple[str, Callable[[Any], Any], Callable[[Any], Any]] | None:
  return ".detach()", lambda t: t.detach(), lambda a: a[...]

def view_unsqueeze(pr: Program, p: Pair) -> tuple[str, Callable[[Any], Any], Callable[[Any], Any]] | None:
  d = pr.randint(0, p.ref.ndim)
  return f".unsqueeze({d})", lambda t: t.unsqueeze(d), lambda a: np.expand_dims(a, d)

VIEWS = [view_index, view_index, view_permute, view_reshape, view_diagonal, view_detach, view_unsqueeze]

def take_view(pr: Program, p: Pair) -> None:
  made = pr.pick(VIEWS)(pr, p)
  if made is None: return
  text, lt_fn, np_fn = made
  pr.add(f"{p.name}{text}", lt_fn(p.lt), np_fn(p.ref), p.writable)

def take_copy(pr: Program, p: Pair) -> None:
  r = pr.rng.random()
  if r < 0.25: pr.add(f"{p.name}.clone()", p.lt.clone(), p.ref.copy())
  elif r < 0.5 and p.ref.ndim: pr.add(f"{p.name}.flip(0)", p.lt.flip(0), np.flip(p.ref, 0).copy())
  elif r < 0.75: pr.add(f"{p.name} + 1", p.lt + 1, np.array(p.ref + 1))  # numpy gives a 0-d sum as a scalar
  elif p.ref.ndim and p.ref.shape[0]:
    idx = pr.rng.integers(0, p.ref.shape[0], size=2)
    pr.add(f"{p.name}[Tensor({idx.tolist()})]", p.lt[Tensor(idx)], p.ref[idx])

def write(pr: Program, p: Pair) -> None:
  if not p.writable or 0 in p.ref.shape: return
  value = pr.randint(-50, 50)
  r = pr.rng.random()
  if r < 0.4 and p.ref.ndim:
    idx = tuple(pr.pick([lambda n: pr.randint(-n, n - 1) if n else slice(None), lambda n: _slice(pr, n)])(n)
                for n in p.ref.shape[:pr.randint(1, p.ref.ndim)])
    pr.say(f"{p.name}[{idx!r}] = {value}")
    p.lt[idx] = value
    p.ref[idx] = value
  elif r < 0.5 and p.ref.ndim:
    rows = pr.rng.permutation(p.ref.shape[0])[:pr.randint(1, p.ref.shape[0])]
    vals = pr.rng.integers(-50, 50, size=(len(rows),) + p.ref.shape[1:]).astype(p.ref.dtype)
    pr.say(f"{p.name}[Tensor({rows.tolist()})] = Tensor({vals.tolist()})")
    p.lt[Tensor(rows)] = Tensor(vals)
    p.ref[rows] = vals
  elif r < 0.6:
    mask = pr.rng.random(p.ref.shape) < 0.5
    pr.say(f"{p.name}[Tensor({mask.tolist()})] = {value}")
    p.lt[Tensor(mask)] = value
    p.ref[mask] = value
  elif r < 0.7:
    pr.say(f"{p.name}.assign({p.name} * 3)")
    p.lt.assign(p.lt * 3)
    p.ref[...] = p.ref * 3
  elif r < 0.8:
    pr.say(f"{p.name}.add_({value})")
    p.lt.add_(value)
    p.ref += value
  elif r < 0.9:
    pr.say(f"{p.name}.fill_({value})")
    p.lt.fill_(value)
    p.ref[...] = value
  else:
    pr.say(f"{p.name}.mul_(2)")
    p.lt.mul_(2)
    p.ref *= 2

def realize(pr: Program, p: Pair) -> None:
  pr.say(f"{p.name}.realize()")
  p.lt.realize()

def read(pr: Program, p: Pair) -> None:
  pr.say(f"{p.name}.numpy()")
  pr.check(p, "read")

STEPS: list[tuple[Callable[[Program, Pair], None], float]] = [
  (take_view, 4), (take_copy, 1), (write, 3), (realize, 1.5), (read, 1)]

def run(seed: int, mode: Mode) -> None:
  pr = Program(seed, mode)
  try:
    with running_in(mode):
      new_root(pr)
      steps, weights = zip(*STEPS)
      p = np.array(weights) / sum(weights)
      for _ in range(pr.randint(2, 12)):
        if pr.chance(0.08): new_root(pr)
        step = steps[int(pr.rng.choice(len(steps), p=p))]
        step(pr, pr.pick(pr.pairs[-4:]) if pr.chance(0.7) else pr.pick(pr.pairs))
      for q in pr.pairs: pr.check(q, "at the end")
  except AssertionError: raise
  except Exception as e:  # lazytensor raised where numpy ran
    raise AssertionError(f"{traceback.format_exc()}\n" + "\n".join(pr.lines)) from e

def main() -> None:
  args = fuzz_args(__doc__, 500, shard_ok=False).parse_args()
  for mode in args.devices:
    sweep(mode.name, lambda seed, m=mode: run(seed, m), range(args.start, args.start + args.cases), args.quiet)

if __name__ == "__main__":
  main()
