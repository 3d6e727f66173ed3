"""Scatters (schedule/scatter.py): nn.Embedding forward + backward, scatter_reduce "sum" and scatter without a reduce
(the last write to a target wins), each step on fresh inputs, against numpy (`np.add.at`, fancy assignment) and torch
(`F.embedding` backward, `scatter_add_`, `scatter_`) where installed, timed in the same run, with the kernels each
lazytensor step runs; `--unfolded` also times the reduce as written (every target scanning every entry: slow).

Usage: python extra/bench/scatter.py [--vocab V] [--dim D] [--tokens N] [--steps S] [--unfolded]
  e.g. --vocab 50257 --dim 768 --tokens 8192 for GPT-2's embedding.
Prints the best step of each and the ratios (above 1: lazytensor is slower).
"""
from __future__ import annotations

import argparse
import contextlib
import platform
import time
from collections.abc import Callable, Iterator

import numpy as np

from lazytensor import GlobalCounters, Tensor, nn
from lazytensor.helpers import THREADS, Context
from lazytensor.schedule import scheduler as schedule

Inputs = tuple[np.ndarray, np.ndarray]
Step = Callable[[Inputs], object]

def best(step: Step, inputs: Callable[[], Inputs], steps: int) -> float:
  """The fastest of `steps` runs of step on fresh inputs (made before the clock starts), in seconds; the first run
  compiles and warms the caches."""
  times = []
  for _ in range(steps):
    args = inputs()
    st = time.perf_counter()
    step(args)
    times.append(time.perf_counter() - st)
  return min(times)

@contextlib.contextmanager
def unfolded() -> Iterator[None]:
  """The scheduler without the scatter kernels: each target reduces over every entry, as before them."""
  split, embedded = schedule.split_scatter, schedule.embedded_scatters
  schedule.split_scatter, schedule.embedded_scatters = lambda ast: None, lambda ast: []
  try:
    with Context(SCHEDULE_CACHE=0): yield
  finally: schedule.split_scatter, schedule.embedded_scatters = split, embedded

def embedding_steps(v: int, d: int, n: int) -> tuple[dict[str, Step], Callable[[], Inputs]]:
  rng = np.random.default_rng(0)
  emb = nn.Embedding(v, d)
  emb.weight.requires_grad_()
  weight = emb.weight.numpy()
  def inputs() -> Inputs: return rng.integers(0, v, n).astype(np.int32), rng.standard_normal((n, d)).astype(np.float32)
  def lazy(args: Inputs) -> Tensor:
    g, = (emb(Tensor(args[0])) * Tensor(args[1])).sum().gradient(emb.weight)
    return g.realize()  # in memory, as torch's and numpy's results are: no copy out
  def numpy_step(args: Inputs) -> np.ndarray:
    idx, up = args
    _ = (weight[idx] * up).sum()
    g = np.zeros_like(weight)
    np.add.at(g, idx, up)
    return g
  steps: dict[str, Step] = {"lazytensor": lazy, "numpy": numpy_step}
  with contextlib.suppress(ImportError):
    import torch
    tw = torch.from_numpy(weight.copy()).requires_grad_()
    def torch_step(args: Inputs) -> object:
      tw.grad = None
      (torch.nn.functional.embedding(torch.from_numpy(args[0]).long(), tw) * torch.from_numpy(args[1])).sum().backward()
      return tw.grad
    steps["torch"] = torch_step
  return steps, inputs

def scatter_steps(v: int, d: int, n: int) -> tuple[dict[str, Step], Callable[[], Inputs]]:
  rng = np.random.default_rng(1)
  def inputs() -> Inputs:
    return rng.integers(0, v, (n, d)).astype(np.int32), rng.standard_normal((n, d)).astype(np.float32)
  def lazy(args: Inputs) -> Tensor:
    return Tensor.zeros(v, d).scatter_reduce(0, Tensor(args[0]), Tensor(args[1]), "sum").realize()
  def numpy_step(args: Inputs) -> np.ndarray:
    out = np.zeros((v, d), np.float32)
    np.add.at(out, (args[0], np.arange(d)[None, :]), args[1])
    return out
  steps: dict[str, Step] = {"lazytensor": lazy, "numpy": numpy_step}
  with contextlib.suppress(ImportError):
    import torch
    def torch_step(args: Inputs) -> object:
      return torch.zeros(v, d).scatter_add_(0, torch.from_numpy(args[0]).long(), torch.from_numpy(args[1]))
    steps["torch"] = torch_step
  return steps, inputs

def last_write_steps(v: int, d: int, n: int) -> tuple[dict[str, Step], Callable[[], Inputs]]:
  rng = np.random.default_rng(2)
  base = rng.standard_normal((v, d)).astype(np.float32)
  x = Tensor(base).realize()
  def inputs() -> Inputs:
    return rng.integers(0, v, (n, d)).astype(np.int32), rng.standard_normal((n, d)).astype(np.float32)
  def lazy(args: Inputs) -> Tensor: return x.scatter(0, Tensor(args[0]), Tensor(args[1])).realize()
  def numpy_step(args: Inputs) -> np.ndarray:
    out = base.copy()
    out[args[0], np.arange(d)[None, :]] = args[1]  # numpy's fancy assignment: the last write wins too
    return out
  steps: dict[str, Step] = {"lazytensor": lazy, "numpy": numpy_step}
  with contextlib.suppress(ImportError):
    import torch
    tx = torch.from_numpy(base)
    def torch_step(args: Inputs) -> object:
      return tx.scatter(0, torch.from_numpy(args[0]).long(), torch.from_numpy(args[1]))
    steps["torch"] = torch_step
  return steps, inputs

def report(name: str, case: tuple[dict[str, Step], Callable[[], Inputs]], runs: int, with_unfolded: bool) -> None:
  steps, inputs = case
  times = {who: best(fn, inputs, runs) for who, fn in steps.items()}
  if with_unfolded:
    with unfolded(): times["lazytensor unfolded"] = best(steps["lazytensor"], inputs, 1)
  ours = times["lazytensor"]
  GlobalCounters.reset()
  steps["lazytensor"](inputs())
  print(f"{name}: lazytensor {ours * 1e3:.2f} ms, {GlobalCounters.kernel_count} kernels")
  for who, t in times.items():
    if who != "lazytensor": print(f"  {who:20s} {t * 1e3:9.2f} ms   lazytensor / {who}: {ours / t:.3g}x")

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--vocab", type=int, default=32000)
  ap.add_argument("--dim", type=int, default=256)
  ap.add_argument("--tokens", type=int, default=4096)
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--unfolded", action="store_true", help="also time the reduce as written (one step, slow)")
  args = ap.parse_args()
  print(f"{platform.processor() or platform.machine()}, THREADS={THREADS.value} (torch too)")
  with contextlib.suppress(ImportError):
    import torch
    torch.set_num_threads(THREADS.value)
  v, d, n = args.vocab, args.dim, args.tokens
  report(f"nn.Embedding({v}, {d}) forward+backward, {n} indices", embedding_steps(v, d, n), args.steps,
         args.unfolded)
  report(f"scatter_reduce sum of ({n}, {d}) into ({v}, {d})", scatter_steps(v, d, n), args.steps, args.unfolded)
  report(f"scatter (last write wins) of ({n}, {d}) into ({v}, {d})", last_write_steps(v, d, n), args.steps,
         args.unfolded)

if __name__ == "__main__":
  main()
