"""Decode-step products on the CPU: batch-1 (and 4, 8) matrix-vector products and one query's attention, next to numpy
and torch measured in the same run.

Usage: python extra/bench/gemv.py [--threads 1|2] [--quick] [--dtypes float32,float16,bfloat16] [--clock wall|cpu]
Each product streams its weights once, so the figure is GB/s of weights read (attention: of its keys and values).
"x @ W" reads W (K, N) row-major (the output is contiguous along W's rows); "x @ W.T" reads W (N, K) as nn.Linear
stores it (the reduce is contiguous). float16 and bfloat16 weights are multiplied by a float32 x in float32; torch gets
x in the weights' type (it has no mixed product), numpy only float32. "kernels" runs the scheduled kernels alone;
"eager" is a user's call end to end with a fresh x each time (the weights stay, as in decoding). "kern/torch" and
"eager/torch" are the speed ratios against torch (above 1: faster than torch).
"""
from __future__ import annotations

import argparse
import functools
import itertools
from collections.abc import Callable
from typing import Any

import bench_clock
from ops import eager_calls, kernels_of

SIZES = (256, 768, 1024, 3072, 4096)
QUICK_SIZES = (256, 1024)
ATTENTION_T = (16, 32, 64, 128, 256, 512, 1024)
SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}

def product(x: Any, w: Any, transposed: bool) -> Any:
  """x @ W, or x @ W.T for W stored (N, K): the same expression for lazytensor, numpy and torch."""
  return x @ w.T if transposed else x @ w

def row(name: str, nbytes: int, kernels: float, eager: float, np_t: float | None, torch_t: float | None) -> str:
  rates = [f"{nbytes / t * 1e-9:9.2f}" if t else f"{'-':>9s}" for t in (kernels, eager, np_t, torch_t)]
  ratios = [f"{torch_t / t:10.2f}x" if torch_t else f"{'-':>11s}" for t in (kernels, eager)]
  vs_np = f"{np_t / kernels:8.2f}x" if np_t else f"{'-':>9s}"
  return f"{name:34s} {' '.join(rates)} {vs_np} {' '.join(ratios)}"

def measure(build: Callable[[tuple], Any], sets: list[tuple], np_fn: Callable[[], object] | None,
            torch_fn: Callable[[], object] | None, runs: int) -> tuple[float, float, float | None, float | None]:
  """Best times of the kernels alone, the eager call (a new set of inputs each time), numpy and torch."""
  kernels = bench_clock.best_time(kernels_of(lambda: build(sets[0])), runs)
  eager = bench_clock.best_time(eager_calls(build, sets), runs)
  np_t = bench_clock.best_time(np_fn, runs) if np_fn else None
  torch_t = bench_clock.best_time(torch_fn, runs) if torch_fn else None
  return kernels, eager, np_t, torch_t

def gemv_rows(args: argparse.Namespace, torch: Any, runs: int) -> None:
  import numpy as np

  from lazytensor import Tensor, dtypes
  rng = np.random.default_rng(0)
  sizes = QUICK_SIZES if args.quick else SIZES
  for dtype_name, batch, (k, n), transposed in itertools.product(args.dtypes.split(","), (1, 4, 8),
                                                                 itertools.product(sizes, sizes), (False, True)):
    if batch > 1 and k != n: continue  # batches of rows on the square sizes only
    dtype = getattr(dtypes, dtype_name)
    w_np = rng.standard_normal((n, k) if transposed else (k, n), dtype=np.float32)
    w = Tensor(w_np).cast(dtype).realize()
    xs = [rng.standard_normal((batch, k), dtype=np.float32) for _ in range(2)]
    sets = [(Tensor(x).realize(), w) for x in xs]
    build = functools.partial(lambda s, t: product(s[0], s[1], t), t=transposed)
    np_fn = functools.partial(product, xs[0], w_np, transposed) if dtype == dtypes.float32 else None
    torch_fn = None
    if torch:
      tdtype = getattr(torch, dtype_name)
      tw, tx = torch.from_numpy(w_np).to(tdtype), torch.from_numpy(xs[0]).to(tdtype)
      torch_fn = functools.partial(product, tx, tw, transposed)
    times = measure(build, sets, np_fn, torch_fn, runs)
    name = f"{SHORT[dtype_name]} {batch}x{k} @ {f'({n}x{k}).T' if transposed else f'{k}x{n}'}"
    print(row(name, k * n * dtype.itemsize, *times), flush=True)

def attention_rows(args: argparse.Namespace, torch: Any, runs: int) -> None:
  import numpy as np

  from lazytensor import Tensor
  rng = np.random.default_rng(1)
  h, d = args.heads, args.head_dim
  scale = d ** -0.5
  for t in ATTENTION_T[::3] if args.quick else ATTENTION_T:
    k_np, v_np = rng.standard_normal((h, d, t), dtype=np.float32), rng.standard_normal((h, t, d), dtype=np.float32)
    k, v = Tensor(k_np).realize(), Tensor(v_np).realize()
    qs = [rng.standard_normal((h, 1, d), dtype=np.float32) for _ in range(2)]
    sets = [(Tensor(q).realize(), k, v) for q in qs]
    def np_fn(q: Any = qs[0], k_np: Any = k_np, v_np: Any = v_np) -> object:
      s = (q @ k_np) * scale
      e = np.exp(s - s.max(-1, keepdims=True))
      return (e / e.sum(-1, keepdims=True)) @ v_np
    torch_fn = None
    if torch:
      tq, tk, tv = (torch.from_numpy(a) for a in (qs[0], k_np, v_np))
      torch_fn = lambda tq=tq, tk=tk, tv=tv: torch.softmax((tq @ tk) * scale, -1) @ tv  # noqa: E731
    times = measure(lambda s: ((s[0] @ s[1]) * scale).softmax(-1) @ s[2], sets, np_fn, torch_fn, runs)
    print(row(f"attention {h}x1x{d} over T={t}", 2 * h * t * d * 4, *times), flush=True)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--threads", type=int, choices=(1, 2), default=1)
  ap.add_argument("--quick", action="store_true", help="two sizes and fewer runs, for a smoke run")
  ap.add_argument("--dtypes", default=",".join(SHORT), help="weight types, comma separated: " + ", ".join(SHORT))
  ap.add_argument("--heads", type=int, default=4, help="attention heads (GPT-2 at width 256: 4 of 64)")
  ap.add_argument("--head-dim", type=int, default=64)
  ap.add_argument("--no-attention", action="store_true")
  args = bench_clock.setup(ap)
  import numpy as np

  from lazytensor import Context, Device
  from lazytensor.renderer.cpu_target import cpu_target
  torch = bench_clock.torch_on(args.threads)
  runs = 5 if args.quick else 20
  versions = f"numpy {np.__version__}{', torch ' + torch.__version__ if torch else ''}"
  host, target = cpu_target("native").describe(), Device["CPU"].renderer.target.describe()
  print(f"threads={args.threads}  host {host}{'' if target == host else f'  CPU_TARGET {target}'}  ({versions})")
  print(f"{'GB/s of weights':34s} {'kernels':>9s} {'eager':>9s} {'numpy':>9s} {'torch':>9s} {'vs numpy':>9s} "
        f"{'kern/torch':>11s} {'eager/torch':>11s}")
  with Context(THREADS=args.threads):
    gemv_rows(args, torch, runs)
    if not args.no_attention: attention_rows(args, torch, runs)

if __name__ == "__main__":
  main()
