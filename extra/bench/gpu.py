"""lazytensor on a CUDA GPU next to torch (cuBLAS, cuDNN) measured in the same run: fp32 and fp16 (tensor core) matmul
4096, softmax, layernorm, conv2d (fp32, and fp16 on tensor cores), an elementwise chain against the GPU's memory
bandwidth, and index_add (nn.Embedding's backward: a scatter of atomic adds); each with the heuristics (BEAM=0) and
with BEAM=2. Kernel times come from CUDA events around each launch (the sum over a schedule's kernels, best of several
runs). Goals: TC matmul >= 0.7x cuBLAS, elementwise >= 80% of bandwidth.

Usage: python extra/bench/gpu.py [--quick] [--beam N] [--device CUDA:1] [--only WORD] [--json PATH]
Needs a GPU, pycuda (pip install -e ".[cuda]") and, for the comparisons, a CUDA build of torch; exits with a message
saying what is missing otherwise. `--device CUDACPU --quick` runs the script itself without a GPU (its numbers are the
CPU's, not a GPU's, and nothing is compared).

Every item is first timed with the heuristics and torch, then with BEAM (a search can take minutes): a run cut short
still has the first figures of every item. `--json` writes them all after each figure (extra/gpu/check.sh keeps it):
the device, and per item its name, unit, the lazytensor figures by BEAM width, torch's, and the ratio of lazytensor's
best to torch's (above 1: faster than torch).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Item:
  name: str
  unit: str            # GFLOP/s or GB/s
  work: float          # flops or bytes of one run
  inputs: Callable[[Any], tuple[Any, ...]]  # (lazytensor's or torch's namespace) -> the inputs, on the GPU
  op: Callable[..., Any]  # inputs -> the expression timed: the inputs are made once, outside the timing

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
  conv_flops = 2 * batch * ch * ch * 9 * hw * hw
  return [
    Item(f"matmul fp32 {n}", "GFLOP/s", 2 * n**3, lambda m: (m.rand(n, n), m.rand(n, n)), lambda a, b: a @ b),
    Item(f"matmul fp16 {n} (tensor cores)", "GFLOP/s", 2 * n**3,
         lambda m: (m.rand(n, n, half=True), m.rand(n, n, half=True)), lambda a, b: a @ b),
    Item(f"softmax {n}x{n}", "GB/s", 2 * 4 * n * n, lambda m: (m.rand(n, n),), lambda x: x.softmax(1)),
    Item(f"layernorm {n}x{n}", "GB/s", 2 * 4 * n * n, lambda m: (m.rand(n, n),), lambda x: x.layernorm()),
    Item(f"conv2d {batch}x{ch}x{hw}x{hw} 3x3", "GFLOP/s", conv_flops,
         lambda m: (m.rand(batch, ch, hw, hw), m.rand(ch, ch, 3, 3)), lambda x, w: x.conv2d(w, padding=1)),
    Item(f"conv2d fp16 {batch}x{ch}x{hw}x{hw} 3x3 (tensor cores)", "GFLOP/s", conv_flops,
         lambda m: (m.rand(batch, ch, hw, hw, half=True), m.rand(ch, ch, 3, 3, half=True)),
         lambda x, w: x.conv2d(w, padding=1)),
    Item(f"elementwise chain {chain}", "GB/s", 4 * 4 * chain, lambda m: (m.rand(chain), m.rand(chain), m.rand(chain)),
         lambda a, b, c: ((a * b + c).exp() * 0.5).sqrt()),
    # nn.Embedding's backward: rows of the gradient added into a table at their indices (atomicAdd, entries in
    # parallel); bytes: each row read, and its target read and written
    Item(f"index_add {vocab}x{dim} <- {rows} rows", "GB/s", 3 * 4 * rows * dim,
         lambda m: (m.zeros(vocab, dim), m.indices(vocab, rows), m.rand(rows, dim)),
         lambda t, i, r: t.index_add(0, i, r)),
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

def open_device(name: str) -> tuple[Any, Any, float | None]:
  """The lazytensor device, torch's namespace for the comparison (None without a CUDA torch or a GPU), and the GPU's
  peak memory bandwidth in bytes/s (None off a GPU)."""
  from lazytensor import Device
  from lazytensor.runtime.ops_cuda import CudaDevice, CUDAUnavailableError
  try: dev = Device[name]
  except (CUDAUnavailableError, IndexError) as e: sys.exit(f"extra/bench/gpu.py needs a CUDA GPU: {e}")
  if not isinstance(dev, CudaDevice):
    print(f"{dev.name}: not a GPU; these numbers say nothing about CUDA speed")
    return dev, None, None
  tt = None
  try:
    import torch
    tt = _Torch(torch) if torch.cuda.is_available() else None
  except ImportError: pass
  if tt is None: print("torch with CUDA is not installed: no cuBLAS/cuDNN comparison")
  peak = memory_bandwidth(dev)
  print(f"{dev.gpu.name()}, peak memory bandwidth {peak * 1e-9:.0f} GB/s")
  return dev, tt, peak

@dataclass
class Run:
  """One run of the benchmark: where, how, and the rows of figures so far."""
  lt: Any                  # lazytensor's namespace on the device
  tt: Any                  # torch's, or None: no comparison
  peak: float | None       # the GPU's memory bandwidth, bytes/s
  runs: int                # timed runs of each expression, the best kept
  json_path: str | None
  head: dict[str, Any]
  rows: list[dict[str, Any]] = field(default_factory=list)

  def record(self) -> None:
    """Each row's ratio (lazytensor's best figure over torch's) brought up to date, and all of it written out."""
    for row in self.rows:
      row["ratio"] = round(max(row["lazytensor"].values()) / row["torch"], 3) if row["torch"] else None
    if self.json_path is None: return
    with open(self.json_path, "w") as f: json.dump({**self.head, "rows": self.rows}, f, indent=1)

  def heuristics_and_torch(self, it: Item) -> None:
    figure = it.work / lazytensor_time(lambda: it.op(*it.inputs(self.lt)), 0, self.runs) * 1e-9
    row: dict[str, Any] = {"name": it.name, "unit": it.unit, "lazytensor": {"BEAM=0": round(figure, 2)}, "torch": None}
    line = [f"{it.name:44s}", f"BEAM=0 {figure:9.1f} {it.unit}"]
    if self.tt is not None:
      inputs = it.inputs(self.tt)
      row["torch"] = round(it.work / torch_time(lambda: it.op(*inputs), self.runs) * 1e-9, 2)
      line.append(f"torch {row['torch']:9.1f} (lazytensor {figure / row['torch']:4.2f}x torch)")
    if it.unit == "GB/s" and self.peak is not None:
      line.append(f"{figure * 1e9 / self.peak * 100:5.1f}% of peak bandwidth")
    print("  ".join(line))
    self.rows.append(row)
    self.record()

  def searched(self, it: Item, row: dict[str, Any], beam: int) -> None:
    figure = it.work / lazytensor_time(lambda: it.op(*it.inputs(self.lt)), beam, self.runs) * 1e-9
    row["lazytensor"][f"BEAM={beam}"] = round(figure, 2)
    self.record()
    vs_torch = f"  lazytensor {row['ratio']:4.2f}x torch" if row["torch"] else ""
    print(f"{it.name:44s}  BEAM={beam} {figure:9.1f} {it.unit} ({figure / row['lazytensor']['BEAM=0']:4.2f}x BEAM=0)"
          f"{vs_torch}")

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
  ap.add_argument("--beam", type=int, default=2, help="beam width compared with the heuristics (0 skips it)")
  ap.add_argument("--device", default="CUDA", help="CUDA, CUDA:1, ...; CUDACPU to run the script without a GPU")
  ap.add_argument("--only", action="append", default=[], help="only the items whose name holds this word (repeatable)")
  ap.add_argument("--json", help="write the figures to this file as they come")
  args = ap.parse_args()
  from lazytensor import Tensor
  dev, tt, peak = open_device(args.device)
  head = {"device": dev.name, "gpu": dev.gpu.name() if peak else None, "peak_bandwidth_gbs": peak and peak * 1e-9,
          "quick": args.quick}
  run = Run(_Lazy(Tensor, dev.name), tt, peak, 3 if args.quick else 10, args.json, head)
  chosen = [it for it in items(args.quick) if not args.only or any(w in it.name for w in args.only)]
  for it in chosen: run.heuristics_and_torch(it)
  if args.beam:  # the searches last, as they take longest
    for it, row in zip(chosen, run.rows): run.searched(it, row, args.beam)

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
