"""A convolution's training step on the CPU: forward, relu, and both gradients (input and weights), end to end with a
fresh input each call, next to torch measured in the same run (float32).

Usage: python extra/bench/conv_train.py [--threads N] [--quick] [--clock wall|cpu]
Prints GFLOP/s (three convolutions' worth of multiply-adds: the forward and the two gradients) and the ratio.
"""
from __future__ import annotations

import argparse
import os

import bench_clock


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
  bench_clock.add_argument(ap)
  args = ap.parse_args()
  bench_clock.use(ap, args)
  for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"): os.environ[var] = str(args.threads)
  import numpy as np

  from lazytensor import Context, Tensor
  from lazytensor.codegen.renderer.cpu_target import cpu_target
  try:
    import torch
    torch.set_num_threads(args.threads)
  except ImportError: torch = None

  rng = np.random.default_rng(0)
  shapes = [(4, 16, 16, 16, 32)] if args.quick else [(16, 32, 32, 32, 64), (8, 64, 56, 56, 64), (32, 128, 14, 14, 128)]
  print(f"threads={args.threads}  host {cpu_target('native').describe()}"
        f"{'  (torch ' + torch.__version__ + ')' if torch else ''}")
  print(f"{'conv 3x3 pad 1, relu, x.grad and w.grad':44s} {'lazytensor':>11s} {'torch':>8s} {'vs torch':>9s}")
  with Context(THREADS=args.threads):
    for bs, cin, h, w, cout in shapes:
      xs = [rng.standard_normal((bs, cin, h, w), dtype=np.float32) for _ in range(2)]
      wn = (rng.standard_normal((cout, cin, 3, 3), dtype=np.float32) * 0.1)
      weight = Tensor(wn, requires_grad=True).realize()
      turn = [0]
      def ours() -> None:
        turn[0] += 1
        x = Tensor(xs[turn[0] % 2], requires_grad=True)
        weight.grad = None
        x.conv2d(weight, padding=1).relu().sum().backward()
        assert x.grad is not None and weight.grad is not None
        Tensor.realize(x.grad, weight.grad)
      tw = torch.from_numpy(wn).requires_grad_() if torch else None
      def theirs() -> None:
        assert torch is not None and tw is not None
        tw.grad = None
        x = torch.from_numpy(xs[turn[0] % 2]).requires_grad_()
        torch.nn.functional.conv2d(x, tw, padding=1).relu().sum().backward()
      work = 3 * 2 * bs * cout * cin * h * w * 9
      lt = bench_clock.best_time(ours, 3)
      tt = bench_clock.best_time(theirs, 3) if torch else None
      ratio = f"{tt / lt:8.2f}x" if tt else f"{'-':>9s}"
      torch_col = f"{work / tt * 1e-9:8.1f}" if tt else f"{'-':>8s}"
      print(f"{f'{bs}x{cin}x{h}x{w} -> {cout}':44s} {work / lt * 1e-9:11.1f} {torch_col} {ratio}   GFLOP/s")

if __name__ == "__main__": main()
