"""int8 quantization (lazytensor.nn.quant), measured in one run on one host: the goals of issue 28, section 3.

Usage: python extra/bench/quant.py [--threads N] [--quick] [--skip-accuracy]

1. matmul 1024: the int8 kernel (bytes in int32 words of 4, int32 sums: one vpdpbusd per 64 multiply-adds on AVX-512
   VNNI) next to lazytensor's float32 matmul, kernels alone. Goal: >= 2x.
2. a stack of Linear layers (4 x 1024 -> 1024 with ReLU, batch 256) quantized by quantize_dynamic, next to torch's
   torch.ao.quantization.quantize_dynamic (fbgemm) on the same layers, each forward end to end (lazytensor's through
   TinyJit, torch eager). Goal: >= 1.0x torch.
3. the digits MLP and CNN of extra/examples/train_digits.py: held-out accuracy in float32, after post-training
   quantization (prepare, calibration on the training images, convert) and after quantization-aware training (a few
   epochs from the float weights, then convert). Goal: within 0.5 points of float32.
4. the character GPT of extra/examples/train_gpt.py (its defaults): held-out loss in float32 and with its Linear layers
   quantized by quantize_dynamic. Goal: within 2%.
The header names the CPU (lazytensor's native target: its x86-64 level, and whether it has AVX-512 VNNI).
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Callable

import bench_clock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

def _kernels(build: Callable[[], object]) -> Callable[[], None]:
  from lazytensor.engine.realize import run_schedule
  from lazytensor.schedule.scheduler import create_schedule
  items, _ = create_schedule([build().lazydata])  # type: ignore[attr-defined]
  return lambda: run_schedule(items)

def matmul(n: int, runs: int) -> None:
  from lazytensor import Tensor, dtypes
  from lazytensor.nn.quant import dot4
  a, b = Tensor.rand(n, n).realize(), Tensor.rand(n, n).realize()
  qa = Tensor.randint(n, n // 4, low=-2 ** 31, high=2 ** 31 - 1, dtype=dtypes.int32).realize()
  qb = Tensor.randint(n // 4, n, low=-2 ** 31, high=2 ** 31 - 1, dtype=dtypes.int32).realize()
  f32 = bench_clock.best_time(_kernels(lambda: a @ b), runs)
  int8_sums = lambda: dot4(qa.reshape(n, -1, 1), qb.reshape(1, -1, n)).sum(1, dtype=dtypes.int32)  # noqa: E731
  i8 = bench_clock.best_time(_kernels(int8_sums), runs)
  ops = 2 * n ** 3 / 1e9
  print(f"matmul {n}: float32 {f32 * 1e3:7.2f} ms ({ops / f32:6.0f} GFLOP/s)   int8 {i8 * 1e3:7.2f} ms "
        f"({ops / i8:6.0f} GOP/s)   int8 / float32 speed {f32 / i8:.2f}x (goal 2x)")

def linear_stack(width: int, depth: int, batch: int, runs: int) -> None:
  import numpy as np
  import torch

  from lazytensor import GlobalCounters, Tensor, nn
  from lazytensor.engine.jit import TinyJit
  from lazytensor.nn.quant import quantize_dynamic
  layers = [nn.Linear(width, width) for _ in range(depth)]
  tlayers = []
  for layer in layers:
    t = torch.nn.Linear(width, width)
    t.weight.data, t.bias.data = torch.tensor(layer.weight.numpy()), torch.tensor(layer.bias.numpy())  # type: ignore[union-attr]
    tlayers += [t, torch.nn.ReLU()]
  tmodel = torch.ao.quantization.quantize_dynamic(copy.deepcopy(torch.nn.Sequential(*tlayers[:-1])), {torch.nn.Linear},
                                                  torch.qint8)
  qlayers = [quantize_dynamic(layer) for layer in layers]
  @TinyJit
  def forward(x: Tensor) -> Tensor:
    for layer in qlayers[:-1]: x = layer(x).relu()
    return qlayers[-1](x).realize()
  x = np.random.default_rng(0).standard_normal((batch, width)).astype(np.float32)
  tx = torch.tensor(x)
  ours = bench_clock.best_time(lambda: forward(Tensor(x)), runs)
  tfloat = torch.nn.Sequential(*tlayers[:-1])
  with torch.no_grad():
    theirs = bench_clock.best_time(lambda: tmodel(tx), runs)
    theirs_f32 = bench_clock.best_time(lambda: tfloat(tx), runs)
  GlobalCounters.reset()
  out = forward(Tensor(x))
  kernels = GlobalCounters.kernel_count
  err = np.abs(out.numpy() - tmodel(tx).detach().numpy()).max()
  print(f"Linear stack {depth} x {width}, batch {batch}: lazytensor int8 {ours * 1e3:7.2f} ms ({kernels / depth:.2f} "
        f"kernels a layer)   torch quantize_dynamic ({torch.backends.quantized.engine}) {theirs * 1e3:7.2f} ms (torch "
        f"float32 {theirs_f32 * 1e3:.2f} ms)   speed {theirs / ours:.2f}x (goal 1.0x); outputs differ by {err:.3f} at "
        "most")

def digits(quick: bool) -> None:
  import numpy as np
  from train_digits import MODELS, accuracy, load_split, make_step, train

  from lazytensor import Tensor
  from lazytensor.nn import quant
  from lazytensor.nn.optim import AdamW
  from lazytensor.nn.state import get_parameters, get_state_dict, load_state_dict
  x_train, y_train, x_test, y_test = load_split()
  for name in MODELS:
    model = train(name, 2 if quick else 0, 64, 3e-3, 0, x_train, y_train)
    state = {k: v.contiguous().realize() for k, v in get_state_dict(model).items()}
    f32 = accuracy(model, x_test, y_test)
    with Tensor.test():
      quant.prepare(model)
      for i in range(0, len(x_train), 256): model(Tensor(x_train[i:i + 256]))
    ptq = accuracy(quant.convert(model), x_test, y_test)
    qat_model = MODELS[name].make()
    load_state_dict(qat_model, state)
    quant.prepare_qat(qat_model)
    opt = AdamW(get_parameters(qat_model), lr=1e-4, weight_decay=0.0)
    step, rng = make_step(qat_model, opt, MODELS[name].label_smoothing), np.random.default_rng(1)
    for _ in range(1 if quick else 3):
      order = rng.permutation(len(x_train))
      for i in range(0, len(x_train) - 63, 64): step(Tensor(x_train[order[i:i + 64]]), Tensor(y_train[order[i:i + 64]]))
    qat = accuracy(quant.convert(qat_model), x_test, y_test)
    print(f"digits {name}: float32 {f32:.2%}   PTQ int8 {ptq:.2%} ({(ptq - f32) * 100:+.2f} points)   "
          f"QAT int8 {qat:.2%} ({(qat - f32) * 100:+.2f} points) (goal: at most 0.5 points below)")

def gpt(quick: bool) -> None:
  import numpy as np
  from train_gpt import GPT, encode, held_out_loss, stdlib_text, train

  from lazytensor import Tensor, nn
  from lazytensor.nn import quant
  ids = encode(stdlib_text(2_000_000))
  split = len(ids) * 9 // 10
  Tensor.manual_seed(0)
  model = GPT(32, 64, 2, 4)
  train(model, ids[:split], 60 if quick else 600, 32, 1e-2, np.random.default_rng(0))
  f32 = held_out_loss(model, ids[split:], 32)
  quant.quantize_dynamic(model, (nn.Linear,))  # GPT reads its embedding tables' weights itself
  q = held_out_loss(model, ids[split:], 32)
  print(f"character GPT (train_gpt.py's defaults): held-out loss float32 {f32:.4f}   int8 dynamic {q:.4f} "
        f"({(q / f32 - 1) * 100:+.2f}%, goal within 2%)")

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=2)
  ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer epochs, for a smoke run")
  ap.add_argument("--skip-accuracy", action="store_true", help="the speeds only")
  args = bench_clock.setup(ap)
  import torch
  torch.set_num_threads(args.threads)
  torch.backends.quantized.engine = "fbgemm"

  from lazytensor import Context
  from lazytensor.renderer.cpu_target import cpu_target
  t = cpu_target("native")
  print(f"host: {t.describe()}; AVX-512 VNNI: {'yes' if t.has('avx512vnni') else 'no'}; threads {args.threads}")
  runs = 3 if args.quick else 10
  with Context(THREADS=args.threads):
    matmul(1024, runs)
    linear_stack(512 if args.quick else 1024, 4, 256, runs)
    if not args.skip_accuracy:
      digits(args.quick)
      gpt(args.quick)

if __name__ == "__main__":
  main()
