"""Checkpointing: peak memory and time of a training step with every block checkpointed (func.checkpoint) next to the
same step without, on models whose activations, not weights, fill the memory; and that the gradients are the same.

Usage: python extra/bench/checkpoint.py [--model mlp|transformer|both] [--threads N] [--runs N] [--clock wall|cpu]
                                        [--batch N] [--seq N] [--layers N]

* mlp: 16 residual blocks x + W2 gelu(W1 x), width 64, hidden 256, batch 4096 (issue 28's first model).
* transformer: pre-norm blocks (causal attention, 2 heads of 32, then a gelu MLP of 256), 12 layers at sequence 1024,
  batch 1 (issue 28's second model, narrow so that a step fits a small CPU machine: its attention scores, 8 MB a
  layer, are what fills the memory).

A step is SGD's: loss, backward, update, realized in one schedule (optimizer.step()). Peak memory is
max_memory_allocated during the step, less what was allocated before it (weights, inputs); time is the best of --runs
steps of each, the two variants taking turns, so that both see the same load. Goals (issue 28): peak <= 1/3 of the
step without checkpointing, time <= 1.4x, gradients identical (compared bit for bit after one step from the same
weights).
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

import bench_clock

if TYPE_CHECKING:
  from lazytensor import Tensor

Block = Callable[["Tensor"], "Tensor"]

def mlp_blocks(layers: int, width: int = 64, hidden: int = 256) -> tuple[list[Block], list[Tensor]]:
  from lazytensor import nn
  pairs = [(nn.Linear(width, hidden), nn.Linear(hidden, width)) for _ in range(layers)]
  def block(a: nn.Linear, b: nn.Linear) -> Block: return lambda x: x + b(a(x).gelu())
  return [block(a, b) for a, b in pairs], [p for a, b in pairs for p in (a.weight, a.bias, b.weight, b.bias)]

def transformer_blocks(layers: int, width: int = 64, heads: int = 2, hidden: int = 256) -> tuple[list[Block],
                                                                                                list[Tensor]]:
  from lazytensor import nn
  def block(ln1: nn.LayerNorm, qkv: nn.Linear, proj: nn.Linear, ln2: nn.LayerNorm, up: nn.Linear,
            down: nn.Linear) -> Block:
    def run(x: Tensor) -> Tensor:
      b, t, _ = x.shape
      q, k, v = qkv(ln1(x)).reshape(b, t, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
      x = x + proj(q.scaled_dot_product_attention(k, v, is_causal=True).permute(0, 2, 1, 3).reshape(b, t, width))
      return x + down(up(ln2(x)).gelu())
    return run
  layers_ = [(nn.LayerNorm(width), nn.Linear(width, 3 * width), nn.Linear(width, width), nn.LayerNorm(width),
              nn.Linear(width, hidden), nn.Linear(hidden, width)) for _ in range(layers)]
  params = [p for layer in layers_ for m in layer for p in (m.weight, m.bias)]
  return [block(*layer) for layer in layers_], params

class Step:
  """One model's training step, with or without every block checkpointed."""
  def __init__(self, model: tuple[list[Block], list[Tensor]], x: Tensor, checkpointed: bool) -> None:
    from lazytensor import func
    from lazytensor.nn.optim import SGD
    (self.blocks, self.params), self.x = model, x
    self.opt = SGD(self.params, lr=1e-3)
    self.wrap: Callable[[Block], Block] = func.checkpoint if checkpointed else (lambda b: b)

  def loss(self) -> Tensor:
    h = self.x
    for block in self.blocks: h = self.wrap(block)(h)
    return (h * h).mean()

  def gradients(self) -> list:
    self.opt.zero_grad()
    self.loss().backward()
    grads = [p.grad for p in self.params if p.grad is not None]
    grads[0].realize(*grads[1:])
    return [g.numpy() for g in grads]

  def __call__(self) -> float:
    self.opt.zero_grad()
    loss = self.loss().backward()
    self.opt.step()
    return loss.item()

def measure(step: Step) -> tuple[float, int]:
  """The time and peak memory (bytes above what was allocated before) of one training step."""
  import gc

  from lazytensor import max_memory_allocated, memory_allocated, reset_peak_memory_stats
  gc.collect()
  reset_peak_memory_stats()
  base = memory_allocated()
  start = bench_clock.now()
  step()
  return bench_clock.now() - start, max_memory_allocated() - base

def compare(name: str, model: Callable[[], tuple[list[Block], list[Tensor]]], x: Tensor, runs: int) -> None:
  import numpy as np

  from lazytensor import Tensor
  steps = []
  for checkpointed in (False, True):
    Tensor.manual_seed(0)  # the same weights for both
    steps.append(Step(model(), x, checkpointed))
  plain, checkpointed = steps
  same = all(np.array_equal(a, b) for a, b in zip(plain.gradients(), checkpointed.gradients()))
  for s in (plain, checkpointed): s()  # compiles, and the schedules are cached
  times: dict[bool, float] = {False: float("inf"), True: float("inf")}
  peaks: dict[bool, int] = {}
  for _ in range(runs):
    for ck, s in ((False, plain), (True, checkpointed)):
      t, peak = measure(s)
      times[ck], peaks[ck] = min(times[ck], t), peak
  weights = sum(p.nbytes() for p in plain.params)
  print(f"{name}: weights {weights / 1e6:.2f} MB; step without checkpointing {times[False] * 1e3:.0f} ms, peak "
        f"{peaks[False] / 1e6:.1f} MB; checkpointed {times[True] * 1e3:.0f} ms ({times[True] / times[False]:.2f}x, "
        f"goal <= 1.4x), peak {peaks[True] / 1e6:.1f} MB ({peaks[True] / peaks[False]:.2f}x, goal <= 0.33x); "
        f"gradients {'identical' if same else 'DIFFER'}")

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--model", choices=("mlp", "transformer", "both"), default="both")
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--runs", type=int, default=3, help="timed steps of each variant")
  ap.add_argument("--batch", type=int, default=4096, help="the MLP's batch")
  ap.add_argument("--seq", type=int, default=1024, help="the transformer's sequence length")
  ap.add_argument("--layers", type=int, default=0, help="blocks (default: 16 for the MLP, 12 for the transformer)")
  args = bench_clock.setup(ap)
  import numpy as np

  from lazytensor import Context, Tensor
  rng = np.random.default_rng(0)
  with Context(THREADS=args.threads):
    if args.model in ("mlp", "both"):
      x = Tensor(rng.standard_normal((args.batch, 64)).astype(np.float32)).realize()
      compare(f"MLP ({args.layers or 16} residual blocks, batch {args.batch})",
              lambda: mlp_blocks(args.layers or 16), x, args.runs)
    if args.model in ("transformer", "both"):
      x = Tensor(rng.standard_normal((1, args.seq, 64)).astype(np.float32)).realize()
      compare(f"transformer ({args.layers or 12} layers, sequence {args.seq})",
              lambda: transformer_blocks(args.layers or 12), x, args.runs)

if __name__ == "__main__":
  main()
