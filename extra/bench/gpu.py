"""lazytensor on a CUDA GPU next to torch (cuBLAS, cuDNN) measured in the same run: fp32 and fp16 (tensor core) matmul
4096, softmax, layernorm, conv2d (fp32, and fp16 on tensor cores), an elementwise chain against the GPU's memory
bandwidth, and index_add (nn.Embedding's backward: a scatter of atomic adds); each with the heuristics (BEAM=0) and
with BEAM=2. Kernel times come from CUDA events around each launch (the sum over a schedule's kernels, best of several
runs). Goals: TC matmul >= 0.7x cuBLAS, elementwise >= 80% of bandwidth.

Usage: python extra/bench/gpu.py [--quick] [--beam N] [--device CUDA:1]
Needs a GPU, pycuda (pip install -e ".[cuda]") and, for the comparisons, a CUDA build of torch; exits with a message
saying what is missing otherwise. `--device CUDACPU --quick` runs the script itself without a GPU (its numbers are the
CPU's, not a GPU's, and nothing is compared).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Item:
  name: str
  unit: str            # GFLOP/s or GB/s
  work: float          # flops or bytes of one run
  build: Callable[[Any], Any]  # (module: lazytensor or torch namespace) -> the expression, on the GPU

def lazytensor_time(build: Callable[[], Any], beam: int, runs: int) -> float:
  """The best over `runs` of the summed kernel times (CUDA events) of the expression's schedule."""
  from lazytensor import Context, Device
  from lazytensor.engine.realize import compile_kernel
  from lazytensor.schedule.scheduler import create_schedule
  from lazytensor.uop.ops import Ops
  items, _ = create_schedule([build().lazydata])
  with Context(BEAM=beam):
    steps = [(compile_kernel(it.ast, Device[it.bufs[0].device]), it.bufs) for it in items if it.ast.op is Ops.SINK]
  for _, bufs in steps:
    for b in bufs: b.ensure_allocated()
  best = float("inf")
  for _ in range(runs):
    best = min(best, sum(runner(bufs, wait=True) or 0.0 for runner, bufs in steps))
  return best

def torch_time(fn: Callable[[], Any], runs: int) -> float:
  import torch
  fn()
  best = float("inf")
  for _ in range(runs):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    best = min(best, start.elapsed_time(end) * 1e-3)
  return best

def memory_bandwidth(dev: Any) -> float:
  """Peak DRAM bandwidth in bytes/s from the device's memory clock (kHz) and bus width (bits), double data rate."""
  attr = dev.drv.device_attribute
  clock_khz = dev.gpu.get_attribute(attr.MEMORY_CLOCK_RATE)
  bus_bits = dev.gpu.get_attribute(attr.GLOBAL_MEMORY_BUS_WIDTH)
  return clock_khz * 1e3 * bus_bits / 8 * 2

def items(quick: bool) -> list[Item]:
  n = 256 if quick else 4096
  chain = 1 << (18 if quick else 26)
  batch, ch, hw = (2, 16, 16) if quick else (32, 64, 56)
  vocab, dim, rows = (1000, 64, 512) if quick else (32000, 256, 4096)
  return [
    Item(f"matmul fp32 {n}", "GFLOP/s", 2 * n**3, lambda m: m.rand(n, n) @ m.rand(n, n)),
    Item(f"matmul fp16 {n} (tensor cores)", "GFLOP/s", 2 * n**3,
         lambda m: m.rand(n, n, half=True) @ m.rand(n, n, half=True)),
    Item(f"softmax {n}x{n}", "GB/s", 2 * 4 * n * n, lambda m: m.rand(n, n).softmax(1)),
    Item(f"layernorm {n}x{n}", "GB/s", 2 * 4 * n * n, lambda m: m.rand(n, n).layernorm()),
    Item(f"conv2d {batch}x{ch}x{hw}x{hw} 3x3", "GFLOP/s", 2 * batch * ch * ch * 9 * hw * hw,
         lambda m: m.rand(batch, ch, hw, hw).conv2d(m.rand(ch, ch, 3, 3), padding=1)),
    Item(f"conv2d fp16 {batch}x{ch}x{hw}x{hw} 3x3 (tensor cores)", "GFLOP/s", 2 * batch * ch * ch * 9 * hw * hw,
         lambda m: m.rand(batch, ch, hw, hw, half=True).conv2d(m.rand(ch, ch, 3, 3, half=True), padding=1)),
    Item(f"elementwise chain {chain}", "GB/s", 4 * 4 * chain,
         lambda m: ((m.rand(chain) * m.rand(chain) + m.rand(chain)).exp() * 0.5).sqrt()),
    # nn.Embedding's backward: rows of the gradient added into a table at their indices (atomicAdd, entries in
    # parallel); bytes: each row read, and its target read and written
    Item(f"index_add {vocab}x{dim} <- {rows} rows", "GB/s", 3 * 4 * rows * dim,
         lambda m: m.zeros(vocab, dim).index_add(0, m.indices(vocab, rows), m.rand(rows, dim))),
  ]

class _Torch:
  """The few Tensor methods the items use, as torch on the GPU: one build function serves both frameworks."""
  def __init__(self, torch: Any) -> None: self.torch = torch
  def rand(self, *shape: int, half: bool = False) -> Any:
    return _TorchT(self.torch.rand(*shape, device="cuda", dtype=self.torch.float16 if half else self.torch.float32))
  def zeros(self, *shape: int) -> Any: return _TorchT(self.torch.zeros(*shape, device="cuda"))
  def indices(self, high: int, n: int) -> Any: return _TorchT(self.torch.from_numpy(_indices(high, n)).cuda())

def _indices(high: int, n: int) -> Any:
  """n indices in [0, high), the same for both frameworks (repeats included, as a batch of tokens has them)."""
  import numpy as np
  return np.random.default_rng(0).integers(0, high, n).astype(np.int64)

class _TorchT:
  def __init__(self, t: Any) -> None: self.t = t
  def __matmul__(self, o: _TorchT) -> _TorchT: return _TorchT(self.t @ o.t)
  def __mul__(self, o: Any) -> _TorchT: return _TorchT(self.t * (o.t if isinstance(o, _TorchT) else o))
  def __add__(self, o: _TorchT) -> _TorchT: return _TorchT(self.t + o.t)
  def exp(self) -> _TorchT: return _TorchT(self.t.exp())
  def sqrt(self) -> _TorchT: return _TorchT(self.t.sqrt())
  def softmax(self, axis: int) -> _TorchT: return _TorchT(self.t.softmax(axis))
  def layernorm(self) -> _TorchT:
    import torch.nn.functional as F
    return _TorchT(F.layer_norm(self.t, self.t.shape[-1:]))
  def conv2d(self, w: _TorchT, padding: int) -> _TorchT:
    import torch.nn.functional as F
    return _TorchT(F.conv2d(self.t, w.t, padding=padding))
  def index_add(self, dim: int, index: _TorchT, source: _TorchT) -> _TorchT:
    return _TorchT(self.t.index_add(dim, index.t, source.t))

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
  ap.add_argument("--beam", type=int, default=2, help="beam width compared with the heuristics (0 skips it)")
  ap.add_argument("--device", default="CUDA", help="CUDA, CUDA:1, ...; CUDACPU to run the script without a GPU")
  args = ap.parse_args()
  from lazytensor import Device, Tensor
  from lazytensor.runtime.ops_cuda import CudaDevice, CUDAUnavailableError
  try: dev = Device[args.device]
  except (CUDAUnavailableError, IndexError) as e: sys.exit(f"extra/bench/gpu.py needs a CUDA GPU: {e}")
  on_gpu = isinstance(dev, CudaDevice)
  tt, peak = None, None
  if on_gpu:
    try:
      import torch
      tt = _Torch(torch) if torch.cuda.is_available() else None
    except ImportError: pass
    if tt is None: print("torch with CUDA is not installed: no cuBLAS/cuDNN comparison")
    peak = memory_bandwidth(dev)
    print(f"{dev.gpu.name()}, peak memory bandwidth {peak * 1e-9:.0f} GB/s")
  else: print(f"{dev.name}: not a GPU; these numbers say nothing about CUDA speed")
  runs = 3 if args.quick else 10
  lt = _Lazy(Tensor, dev.name)
  for it in items(args.quick):
    line = [f"{it.name:44s}"]
    base = lazytensor_time(lambda it=it: it.build(lt), 0, runs)
    line.append(f"BEAM=0 {it.work / base * 1e-9:9.1f} {it.unit}")
    if args.beam:
      searched = lazytensor_time(lambda it=it: it.build(lt), args.beam, runs)
      line.append(f"BEAM={args.beam} {it.work / searched * 1e-9:9.1f} ({base / searched:4.2f}x BEAM=0)")
      base = min(base, searched)
    if tt is not None:
      ref = torch_time(lambda it=it: it.build(tt), runs)
      line.append(f"torch {it.work / ref * 1e-9:9.1f} (lazytensor {ref / base:4.2f}x torch)")
    if it.unit == "GB/s" and peak is not None: line.append(f"{it.work / base / peak * 100:5.1f}% of peak bandwidth")
    print("  ".join(line))

class _Lazy:
  """lazytensor's Tensor, made on the benchmarked device and realized before timing (so that a half input is half in
  memory, as tensor cores need, not a float32 one converted inside the kernel)."""
  def __init__(self, tensor: Any, device: str) -> None: self.Tensor, self.device = tensor, device
  def rand(self, *shape: int, half: bool = False) -> Any:
    return self.Tensor.rand(*shape, device=self.device, dtype="float16" if half else "float32").realize()
  def zeros(self, *shape: int) -> Any: return self.Tensor.zeros(*shape, device=self.device)
  def indices(self, high: int, n: int) -> Any: return self.Tensor(_indices(high, n), device=self.device).realize()

if __name__ == "__main__":
  main()
