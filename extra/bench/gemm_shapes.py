"""The matmuls of BERT-base and GPT-2 124M at 128 tokens and ResNet50's stride-1 1x1 convolutions, next to numpy and
torch measured in the same run, float32 on the CPU.

Usage: python extra/bench/gemm_shapes.py [--threads N] [--runs N] [--only SUBSTRING] [--clock wall|cpu]
Each row is one product as the model writes it: a Linear (x @ W.T + b, W (out, in) as nn.Linear stores it; the MLP's
second one of gelu(x), the gelu computed in the copy that packs x), attention's
scores (q @ k.T) and weighted values (p @ v) over 12 heads whose q, k, v are views of (128, 768) projections, a 1x1
convolution without bias (its weight (cout, cin, 1, 1)), and a square 1024 matmul for reference. "kernels" runs the
scheduled kernels alone, after two calls (a weight packed twice keeps its packed copy: schedule/pack_cache.py), as a
TinyJit replay of a model runs them; "eager" is a user's call end to end on activations copied in anew before each call
(the weights stay, as in a model). GFLOP/s count 2 flops per multiply-add; "vs torch" is the speed ratio of the kernels
against torch (above 1: faster). DEBUG=2 shows the kernels of each row and their times.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import bench_clock

TOKENS, DIM, HEADS = 128, 768, 12

Item = tuple[str, int, Callable[[tuple], Any], list[Any], list[Any], Callable[..., Any] | None, Callable[..., Any]]

def linear_item(rng: Any, rows: int, cin: int, cout: int, bias: bool = True) -> Item:
  """(name, flops, lazytensor build, activations, weights, numpy, torch) of y = x @ W.T + b (without b: x @ W.T)."""
  acts = [rng.standard_normal((rows, cin), dtype="float32")]
  weights = [rng.standard_normal((cout, cin), dtype="float32")]
  if not bias:
    return (f"linear {rows}x{cin} -> {cout}, no bias", 2 * rows * cin * cout, lambda s: s[0].linear(s[1].T), acts,
            weights, lambda x, w: x @ w.T, lambda torch, x, w: torch.nn.functional.linear(x, w))
  weights.append(rng.standard_normal(cout, dtype="float32"))
  return (f"linear {rows}x{cin} -> {cout}", 2 * rows * cin * cout, lambda s: s[0].linear(s[1].T, s[2]), acts, weights,
          lambda x, w, b: x @ w.T + b, lambda torch, x, w, b: torch.nn.functional.linear(x, w, b))

def swap(x: Any, a: int, b: int) -> Any:
  """x with axes a and b swapped, for lazytensor and torch (transpose) and numpy (swapaxes)."""
  return x.swapaxes(a, b) if hasattr(x, "__array_interface__") else x.transpose(a, b)

def gelu_linear_item(rng: Any, rows: int, cin: int, cout: int) -> Item:
  """y = gelu(x) @ W.T + b: the second Linear of a transformer's MLP, with its activation (numpy has no erf)."""
  name, flops, _, acts, weights, _, _ = linear_item(rng, rows, cin, cout)
  return (name.replace(f"{rows}x{cin}", f"gelu({rows}x{cin})"), flops, lambda s: s[0].gelu().linear(s[1].T, s[2]),
          acts, weights, None,
          lambda torch, x, w, b: torch.nn.functional.linear(torch.nn.functional.gelu(x), w, b))

def heads(x: Any) -> Any:
  """(128, 768) -> (1, 12, 128, 64): the heads of a projection, as BERT and GPT-2 view them."""
  return swap(x.reshape(1, TOKENS, HEADS, DIM // HEADS), 1, 2)

def attention_items(rng: Any) -> list[Item]:
  """q @ k.T and p @ v of 12 heads, q, k, v views of (128, 768) projections, p (1, 12, 128, 128)."""
  proj = [rng.standard_normal((TOKENS, DIM), dtype="float32") for _ in range(2)]
  probs = [rng.random((1, HEADS, TOKENS, TOKENS), dtype="float32"), proj[0]]
  hd = DIM // HEADS
  scores = lambda q, k: heads(q) @ swap(heads(k), -1, -2)  # noqa: E731
  values = lambda p, v: p @ heads(v)  # noqa: E731
  return [(f"attn q @ k.T {HEADS}x{TOKENS}x{hd} @ {hd}x{TOKENS}", 2 * HEADS * TOKENS * TOKENS * hd,
           lambda s: scores(s[0], s[1]), proj, [], scores, lambda torch, q, k: scores(q, k)),
          (f"attn p @ v {HEADS}x{TOKENS}x{TOKENS} @ {TOKENS}x{hd}", 2 * HEADS * TOKENS * TOKENS * hd,
           lambda s: values(s[0], s[1]), probs, [], values, lambda torch, p, v: values(p, v))]

def conv1x1_item(rng: Any, batch: int, cin: int, side: int, cout: int) -> Item:
  """A stride-1 1x1 convolution without bias, numpy as a batched matmul of the weight by the pixels."""
  def np_conv(x: Any, w: Any) -> Any: return (w.reshape(cout, cin) @ x.reshape(batch, cin, side * side))
  return (f"conv1x1 {batch}x{cin}x{side}x{side} -> {cout}", 2 * batch * cin * cout * side * side,
          lambda s: s[0].conv2d(s[1]), [rng.standard_normal((batch, cin, side, side), dtype="float32")],
          [rng.standard_normal((cout, cin, 1, 1), dtype="float32")], np_conv,
          lambda torch, x, w: torch.nn.functional.conv2d(x, w))

VOCAB, BATCH = 50257, 4

def grad_item(rng: Any, shape: tuple[int, ...], cin: int, cout: int, wrt: str, tied: bool) -> Item:
  """The gradient of a training step's product y = x @ W (W (cin, cout): GPT-2's Conv1D) or, `tied`, y = x @ W.T (W
  (cout, cin): its output layer, the token embedding) with respect to x ("dx": dy @ W.T) or W ("dW": x.T @ dy), x of
  `shape` + (cin,), as autograd writes it."""
  rows = math.prod(shape)
  x, dy = rng.standard_normal((*shape, cin), dtype="float32"), rng.standard_normal((*shape, cout), dtype="float32")
  w = rng.standard_normal((cout, cin) if tied else (cin, cout), dtype="float32")
  fwd = (lambda x, w: x @ swap(w, 0, 1)) if tied else (lambda x, w: x @ w)
  flat = lambda t, n: t.reshape(rows, n)  # noqa: E731
  if wrt == "dx":
    ref = (lambda dy, w: dy @ w) if tied else (lambda dy, w: dy @ swap(w, 0, 1))
    return (f"{wrt} {'x'.join(map(str, shape))}x{cout} @ W ({cin} <- {cout})", 2 * rows * cin * cout,
            lambda s: fwd(s[0], s[2]).gradient(s[0], gradient=s[1])[0], [x, dy], [w], lambda x, dy, w: ref(dy, w),
            lambda torch, x, dy, w: ref(dy, w))
  ref = (lambda x, dy: swap(flat(dy, cout), 0, 1) @ flat(x, cin)) if tied else \
    (lambda x, dy: swap(flat(x, cin), 0, 1) @ flat(dy, cout))
  return (f"{wrt} {'x'.join(map(str, shape))}: {cin} -> {cout}{' (tied)' if tied else ''}", 2 * rows * cin * cout,
          lambda s: fwd(s[0], s[2]).gradient(s[2], gradient=s[1])[0], [x, dy], [w], lambda x, dy, w: ref(x, dy),
          lambda torch, x, dy, w: ref(x, dy))

def train_items(rng: Any) -> list[Item]:
  """GPT-2 124M's training step at batch 4, sequence 128: the output layer (tied to the embedding) forward and both
  gradients, the attention projection's input gradient, and the MLP's weight gradients with x 2-D (512, cin), as an
  MLP trained on a large batch has them."""
  seq = (BATCH, TOKENS)
  return [linear_item(rng, BATCH * TOKENS, DIM, VOCAB, bias=False), grad_item(rng, seq, DIM, VOCAB, "dx", True),
          grad_item(rng, seq, DIM, VOCAB, "dW", True), grad_item(rng, seq, DIM, 3 * DIM, "dx", False),
          grad_item(rng, (BATCH * TOKENS,), DIM, 4 * DIM, "dW", False),
          grad_item(rng, (BATCH * TOKENS,), 4 * DIM, DIM, "dW", False)]

def square_item(rng: Any, n: int) -> Item:
  return (f"matmul {n}", 2 * n ** 3, lambda s: s[0] @ s[1], [rng.standard_normal((n, n), dtype="float32")],
          [rng.standard_normal((n, n), dtype="float32")], lambda a, b: a @ b, lambda torch, a, b: a @ b)

def items(rng: Any) -> list[Item]:
  return [linear_item(rng, TOKENS, DIM, DIM), linear_item(rng, TOKENS, DIM, 4 * DIM),
          linear_item(rng, TOKENS, 4 * DIM, DIM), gelu_linear_item(rng, TOKENS, 4 * DIM, DIM), *attention_items(rng),
          conv1x1_item(rng, 1, 1024, 14, 256), conv1x1_item(rng, 8, 1024, 14, 256),
          conv1x1_item(rng, 1, 256, 14, 1024), conv1x1_item(rng, 8, 256, 14, 1024),
          conv1x1_item(rng, 1, 256, 56, 64), conv1x1_item(rng, 1, 512, 7, 2048), square_item(rng, 1024),
          *train_items(rng)]

def kernels_alone(out: Any) -> Callable[[], None]:
  """A function that runs the kernels of `out`'s schedule, with the weights' packed copies of earlier calls (as a
  model's calls run them; ops.kernels_of packs every operand again)."""
  from lazytensor.engine.realize import run_schedule
  from lazytensor.schedule.scheduler import create_schedule
  items, _ = create_schedule([out.lazydata], reuse_packs=True)
  return lambda: run_schedule(items)

def eager_time(build: Callable[[tuple], Any], acts: list[Any], weights: tuple, runs: int) -> float:
  """The best of `runs` eager calls, each on activations copied in anew before it (a model's activations are new
  buffers at every call, so nothing packed from them is reused)."""
  from lazytensor import Tensor
  best = float("inf")
  for i in range(runs + 1):
    fresh = tuple(Tensor(a).realize() for a in acts) + weights
    start = bench_clock.now()
    build(fresh).realize()
    if i: best = min(best, bench_clock.now() - start)
  return best

def measure(item: Item, torch: Any, runs: int) -> tuple[float, float, float | None, float | None]:
  """Best times of the kernels alone, the eager call, numpy and torch."""
  from lazytensor import Tensor
  name, _, build, acts, weights, np_fn, torch_fn = item
  weights_lt = tuple(Tensor(w).realize() for w in weights)
  sets = [tuple(Tensor(a).realize() for a in acts) + weights_lt for _ in range(2)]
  for s in sets: build(s).realize()  # compiled, and the weights' packed copies kept (from the second packing)
  kernels = bench_clock.best_time(kernels_alone(build(sets[0])), runs)
  eager = eager_time(build, acts, weights_lt, runs)
  np_t = bench_clock.best_time(lambda: np_fn(*acts, *weights), runs) if np_fn is not None else None
  torch_t = None
  if torch is not None:
    targs = [torch.from_numpy(a) for a in (*acts, *weights)]
    with torch.no_grad(): torch_t = bench_clock.best_time(lambda: torch_fn(torch, *targs), runs)
  return kernels, eager, np_t, torch_t

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--runs", type=int, default=10, help="timed calls of each, the best kept")
  ap.add_argument("--only", default="", help="rows whose name contains this")
  args = bench_clock.setup(ap)
  import numpy as np

  from lazytensor import Context, Device
  from lazytensor.renderer.cpu_target import cpu_target
  torch = bench_clock.torch_on(args.threads)
  host, target = cpu_target("native").describe(), Device["CPU"].renderer.target.describe()
  print(f"threads={args.threads}  host {host}{'' if target == host else f'  CPU_TARGET {target}'}  "
        f"(numpy {np.__version__}{', torch ' + torch.__version__ if torch else ''}, clock {args.clock})")
  print(f"{'GFLOP/s':44s} {'kernels':>9s} {'eager':>9s} {'numpy':>9s} {'torch':>9s} {'vs numpy':>9s} {'vs torch':>9s}")
  with Context(THREADS=args.threads):
    for item in items(np.random.default_rng(0)):
      if args.only not in item[0]: continue
      times = measure(item, torch, args.runs)
      rates = [f"{item[1] / t * 1e-9:9.1f}" if t else f"{'-':>9s}" for t in times]
      ratios = [f"{t / times[0]:8.2f}x" if t else f"{'-':>9s}" for t in times[2:]]
      print(f"{item[0]:44s} {' '.join(rates)} {' '.join(ratios)}", flush=True)

if __name__ == "__main__":
  main()
