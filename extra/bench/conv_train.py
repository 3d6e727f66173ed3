"""A convolution's training step on the CPU: forward, relu, and both gradients (input and weights), end to end with a
fresh input each call, next to torch measured in the same run (float32); then ResNet's max pool (3x3, stride 2, padding
1), forward and backward.

Usage: python extra/bench/conv_train.py [--threads N] [--quick] [--clock wall|cpu]
Prints GFLOP/s (three convolutions' worth of multiply-adds: the forward and the two gradients) and the ratio.
"""
from __future__ import annotations

import argparse
from typing import Any

import bench_clock


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
  args = bench_clock.setup(ap)
  import numpy as np

  from lazytensor import Context
  from lazytensor.renderer.cpu_target import cpu_target
  torch = bench_clock.torch_on(args.threads)

  # (batch, in channels, height, width, out channels, stride): the last two, ResNet18's first and last stride-2 3x3
  # convolutions (the last one's input gradient at 7x7: one conv per parity of the input's pixels, 7 wide)
  shapes = [(4, 16, 16, 16, 32, 1), (4, 16, 16, 16, 32, 2)] if args.quick else \
    [(16, 32, 32, 32, 64, 1), (8, 64, 56, 56, 64, 1), (32, 128, 14, 14, 128, 1), (8, 64, 56, 56, 128, 2),
     (8, 256, 14, 14, 512, 2)]
  print(f"threads={args.threads}  host {cpu_target('native').describe()}"
        f"{'  (torch ' + torch.__version__ + ')' if torch else ''}")
  print(f"{'conv 3x3 pad 1, relu, x.grad and w.grad':44s} {'lazytensor':>11s} {'torch':>8s} {'vs torch':>9s}")
  with Context(THREADS=args.threads):
    for bs, cin, h, w, cout, stride in shapes:
      lt, tt = _times(np.random.default_rng(0), (bs, cin, h, w), (cout, cin, 3, 3), stride, torch)
      work = 3 * 2 * bs * cout * cin * (h // stride) * (w // stride) * 9
      ratio = f"{tt / lt:8.2f}x" if tt else f"{'-':>9s}"
      torch_col = f"{work / tt * 1e-9:8.1f}" if tt else f"{'-':>8s}"
      name = f"{bs}x{cin}x{h}x{w} -> {cout}{f', stride {stride}' if stride > 1 else ''}"
      print(f"{name:44s} {work / lt * 1e-9:11.1f} {torch_col} {ratio}   GFLOP/s")
    pool = (2, 16, 32, 32) if args.quick else (8, 64, 112, 112)
    lt, tt = _pool_times(np.random.default_rng(0), pool, torch)
    ratio = f"{tt / lt:8.2f}x" if tt else f"{'-':>9s}"
    torch_col = f"{tt * 1e3:8.1f}" if tt else f"{'-':>8s}"
    print(f"{'max_pool2d(3, 2, padding=1), x.grad':44s} {'lazytensor':>11s} {'torch':>8s} {'vs torch':>9s}")
    print(f"{'x'.join(map(str, pool)):44s} {lt * 1e3:11.1f} {torch_col} {ratio}   ms")

def _times(rng: Any, x_shape: tuple[int, ...], w_shape: tuple[int, ...], stride: int,
           torch: Any) -> tuple[float, float | None]:
  """Best times of a step of lazytensor and of torch, each on one of two inputs in turn."""
  from lazytensor import Tensor
  xs = [rng.standard_normal(x_shape, dtype="float32") for _ in range(2)]
  wn = rng.standard_normal(w_shape, dtype="float32") * 0.1
  weight, turn = Tensor(wn, requires_grad=True).realize(), [0]
  def ours() -> None:
    turn[0] += 1
    x = Tensor(xs[turn[0] % 2], requires_grad=True)
    weight.grad = None
    x.conv2d(weight, stride=stride, padding=1).relu().sum().backward()
    assert x.grad is not None and weight.grad is not None
    Tensor.realize(x.grad, weight.grad)
  lt = bench_clock.best_time(ours, 3)
  if torch is None: return lt, None
  tw = torch.from_numpy(wn).requires_grad_()
  def theirs() -> None:
    turn[0] += 1
    tw.grad = None
    x = torch.from_numpy(xs[turn[0] % 2]).requires_grad_()
    torch.nn.functional.conv2d(x, tw, stride=stride, padding=1).relu().sum().backward()
  return lt, bench_clock.best_time(theirs, 3)

def _pool_times(rng: Any, shape: tuple[int, ...], torch: Any) -> tuple[float, float | None]:
  """Best times of ResNet's max pool, forward and the input's gradient (of the sum of squares, so that the gradient
  that reaches the pool varies), of lazytensor and of torch, each on one of two inputs in turn."""
  from lazytensor import Tensor
  xs, turn = [rng.standard_normal(shape, dtype="float32") for _ in range(2)], [0]
  def ours() -> None:
    turn[0] += 1
    x = Tensor(xs[turn[0] % 2], requires_grad=True)
    x.max_pool2d(3, stride=2, padding=1).square().sum().backward()
    assert x.grad is not None
    x.grad.realize()
  lt = bench_clock.best_time(ours, 3)
  if torch is None: return lt, None
  def theirs() -> None:
    turn[0] += 1
    x = torch.from_numpy(xs[turn[0] % 2]).requires_grad_()
    torch.nn.functional.max_pool2d(x, 3, stride=2, padding=1).square().sum().backward()
  return lt, bench_clock.best_time(theirs, 3)

if __name__ == "__main__": main()
