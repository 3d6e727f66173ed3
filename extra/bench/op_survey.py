"""A survey of everyday Tensor operations: lazytensor's kernels against torch's (and numpy's, where it has the op), one
thread, float32 on the CPU, on realistic sizes (1M elements, 1024x1024 matrices, 4096-long sorts).

Usage: python extra/bench/op_survey.py [--only SUBSTR] [--runs N] [--clock wall|cpu] [--top K]
Times the kernels alone: inputs are realized, the result's schedule is made once and its kernels run `runs` times
(the best counts), the compile done before. An op whose schedule depends on data it must read first (unique, a
boolean mask's nonzero) is timed end to end instead, marked "eager". The table is sorted by the time against torch's
(above 1: lazytensor is slower), the worst first.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bench_clock


@dataclass(frozen=True)
class Item:
  name: str
  lazy: Callable[[Any], Any]               # the inputs module of lazytensor tensors -> a lazy Tensor (or a tuple)
  torch: Callable[[Any], Any] | None       # the inputs of torch tensors -> a result
  numpy: Callable[[Any], Any] | None = None
  eager: bool = False                      # time the whole call: the schedule depends on values it reads

class Inputs:
  """The same inputs as attributes, one set per framework (lazytensor Tensors, torch tensors, numpy arrays)."""
  def __init__(self, wrap: Callable[[Any], Any], arrays: dict[str, Any]) -> None:
    for k, v in arrays.items(): setattr(self, k, wrap(v))

def make_arrays() -> dict[str, Any]:
  import numpy as np
  rng = np.random.default_rng(0)
  n = 1 << 20
  return dict(
    v=rng.standard_normal(n, dtype=np.float32), w=rng.standard_normal(n, dtype=np.float32),
    pos=rng.random(n, dtype=np.float32) + 0.5, unit=rng.random(n, dtype=np.float32) * 1.98 - 0.99,
    m=rng.standard_normal((1024, 1024), dtype=np.float32), m2=rng.standard_normal((1024, 1024), dtype=np.float32),
    row=rng.standard_normal((1, 1024), dtype=np.float32), mask=rng.random((1024, 1024)) < 0.5,
    s=rng.standard_normal((256, 4096), dtype=np.float32), s1=rng.standard_normal(4096, dtype=np.float32),
    ints=rng.integers(0, 1000, n).astype(np.int32), big=rng.standard_normal(1 << 22, dtype=np.float32),
    idx=rng.integers(0, 1024, (1024, 1024)).astype(np.int64), rows=rng.integers(0, 1024, 512).astype(np.int64),
    img=rng.standard_normal((16, 64, 64, 64), dtype=np.float32),
    logits=rng.standard_normal((4096, 256), dtype=np.float32), labels=rng.integers(0, 256, 4096).astype(np.int64),
    cls=rng.integers(0, 1000, 8192).astype(np.int64), qk=rng.standard_normal((32, 128, 64), dtype=np.float32),
    small=rng.standard_normal((16, 64, 32, 32), dtype=np.float32),
  )

def elementwise_items() -> list[Item]:
  import numpy as np
  import torch
  F = torch.nn.functional
  unary = [  # name, lazytensor, torch, numpy: on v (normal), pos (0.5..1.5) or unit (-0.99..0.99)
    ("exp", lambda x: x.v.exp(), lambda x: x.v.exp(), lambda x: np.exp(x.v)),
    ("log", lambda x: x.pos.log(), lambda x: x.pos.log(), lambda x: np.log(x.pos)),
    ("sqrt", lambda x: x.pos.sqrt(), lambda x: x.pos.sqrt(), lambda x: np.sqrt(x.pos)),
    ("rsqrt", lambda x: x.pos.rsqrt(), lambda x: x.pos.rsqrt(), None),
    ("sin", lambda x: x.v.sin(), lambda x: x.v.sin(), lambda x: np.sin(x.v)),
    ("cos", lambda x: x.v.cos(), lambda x: x.v.cos(), lambda x: np.cos(x.v)),
    ("tan", lambda x: x.unit.tan(), lambda x: x.unit.tan(), lambda x: np.tan(x.unit)),
    ("tanh", lambda x: x.v.tanh(), lambda x: x.v.tanh(), lambda x: np.tanh(x.v)),
    ("sigmoid", lambda x: x.v.sigmoid(), lambda x: x.v.sigmoid(), None),
    ("erf", lambda x: x.v.erf(), lambda x: x.v.erf(), None),
    ("erfc", lambda x: x.v.erfc(), lambda x: x.v.erfc(), None),
    ("erfinv", lambda x: x.unit.erfinv(), lambda x: x.unit.erfinv(), None),
    ("gelu", lambda x: x.v.gelu(), lambda x: F.gelu(x.v, approximate="tanh"), None),
    ("silu", lambda x: x.v.silu(), lambda x: F.silu(x.v), None),
    ("relu", lambda x: x.v.relu(), lambda x: x.v.relu(), lambda x: np.maximum(x.v, 0)),
    ("softplus", lambda x: x.v.softplus(), lambda x: F.softplus(x.v), None),
    ("mish", lambda x: x.v.mish(), lambda x: F.mish(x.v), None),
    ("asin", lambda x: x.unit.asin(), lambda x: x.unit.asin(), lambda x: np.arcsin(x.unit)),
    ("acos", lambda x: x.unit.acos(), lambda x: x.unit.acos(), lambda x: np.arccos(x.unit)),
    ("atan", lambda x: x.v.atan(), lambda x: x.v.atan(), lambda x: np.arctan(x.v)),
    ("log1p", lambda x: x.pos.log1p(), lambda x: x.pos.log1p(), lambda x: np.log1p(x.pos)),
    ("expm1", lambda x: x.v.expm1(), lambda x: x.v.expm1(), lambda x: np.expm1(x.v)),
    ("abs", lambda x: x.v.abs(), lambda x: x.v.abs(), lambda x: np.abs(x.v)),
    ("round", lambda x: x.v.round(), lambda x: x.v.round(), lambda x: np.round(x.v)),
    ("floor", lambda x: x.v.floor(), lambda x: x.v.floor(), lambda x: np.floor(x.v)),
    ("lgamma", lambda x: x.pos.lgamma(), lambda x: x.pos.lgamma(), None),
    ("digamma", lambda x: x.pos.digamma(), lambda x: x.pos.digamma(), None),
    ("sign", lambda x: x.v.sign(), lambda x: x.v.sign(), lambda x: np.sign(x.v)),
    ("reciprocal", lambda x: x.pos.reciprocal(), lambda x: x.pos.reciprocal(), lambda x: 1 / x.pos),
    ("isnan", lambda x: x.v.isnan(), lambda x: x.v.isnan(), lambda x: np.isnan(x.v)),
    ("cast int32", lambda x: x.v.int(), lambda x: x.v.int(), lambda x: x.v.astype(np.int32)),
    ("cast half", lambda x: x.v.half(), lambda x: x.v.half(), lambda x: x.v.astype(np.float16)),
  ]
  binary = [
    ("add", lambda x: x.v + x.w, lambda x: x.v + x.w, lambda x: x.v + x.w),
    ("mul", lambda x: x.v * x.w, lambda x: x.v * x.w, lambda x: x.v * x.w),
    ("div", lambda x: x.v / x.pos, lambda x: x.v / x.pos, lambda x: x.v / x.pos),
    ("pow tensor", lambda x: x.pos ** x.w, lambda x: x.pos ** x.w, lambda x: x.pos ** x.w),
    ("pow 2.5", lambda x: x.pos ** 2.5, lambda x: x.pos ** 2.5, lambda x: x.pos ** 2.5),
    ("pow 2", lambda x: x.v ** 2, lambda x: x.v ** 2, lambda x: x.v ** 2),
    ("maximum", lambda x: x.v.maximum(x.w), lambda x: x.v.maximum(x.w), lambda x: np.maximum(x.v, x.w)),
    ("atan2", lambda x: x.v.atan2(x.w), lambda x: x.v.atan2(x.w), lambda x: np.arctan2(x.v, x.w)),
    ("fmod", lambda x: x.v.fmod(x.pos), lambda x: x.v.fmod(x.pos), lambda x: np.fmod(x.v, x.pos)),
    ("int // int", lambda x: x.ints // 7, lambda x: x.ints // 7, lambda x: x.ints // 7),
    ("lerp", lambda x: x.v.lerp(x.w, 0.3), lambda x: x.v.lerp(x.w, 0.3), None),
    ("clamp", lambda x: x.v.clamp(-0.5, 0.5), lambda x: x.v.clamp(-0.5, 0.5), lambda x: np.clip(x.v, -0.5, 0.5)),
    ("where", lambda x: (x.v > 0).where(x.v, x.w), lambda x: torch.where(x.v > 0, x.v, x.w),
     lambda x: np.where(x.v > 0, x.v, x.w)),
    ("add row bcast 1024x1024", lambda x: x.m + x.row, lambda x: x.m + x.row, lambda x: x.m + x.row),
  ]
  return [Item(f"{n} 1M", lt, th, nf) for n, lt, th, nf in unary + binary]

def reduce_items() -> list[Item]:
  import numpy as np
  import torch
  items = []
  for ax in (0, 1):
    items += [
      Item(f"sum axis {ax} 1024^2", lambda x, ax=ax: x.m.sum(ax), lambda x, ax=ax: x.m.sum(ax),
           lambda x, ax=ax: x.m.sum(ax)),
      Item(f"max axis {ax}", lambda x, ax=ax: x.m.max(ax), lambda x, ax=ax: x.m.amax(ax), lambda x, ax=ax: x.m.max(ax)),
      Item(f"mean axis {ax}", lambda x, ax=ax: x.m.mean(ax), lambda x, ax=ax: x.m.mean(ax),
           lambda x, ax=ax: x.m.mean(ax)),
      Item(f"var axis {ax}", lambda x, ax=ax: x.m.var(ax), lambda x, ax=ax: x.m.var(ax),
           lambda x, ax=ax: x.m.var(ax, ddof=1)),
      Item(f"std axis {ax}", lambda x, ax=ax: x.m.std(ax), lambda x, ax=ax: x.m.std(ax),
           lambda x, ax=ax: x.m.std(ax, ddof=1)),
      Item(f"argmax axis {ax}", lambda x, ax=ax: x.m.argmax(ax), lambda x, ax=ax: x.m.argmax(ax),
           lambda x, ax=ax: x.m.argmax(ax)),
      Item(f"logsumexp axis {ax}", lambda x, ax=ax: x.m.logsumexp(ax), lambda x, ax=ax: x.m.logsumexp(ax), None),
      Item(f"cumsum axis {ax}", lambda x, ax=ax: x.m.cumsum(ax), lambda x, ax=ax: x.m.cumsum(ax),
           lambda x, ax=ax: x.m.cumsum(ax)),
      Item(f"cumprod axis {ax}", lambda x, ax=ax: (x.m * 0.01 + 1).cumprod(ax),
           lambda x, ax=ax: (x.m * 0.01 + 1).cumprod(ax), lambda x, ax=ax: (x.m * 0.01 + 1).cumprod(ax)),
      Item(f"cummax axis {ax}", lambda x, ax=ax: x.m.cummax(ax), lambda x, ax=ax: x.m.cummax(ax).values,
           lambda x, ax=ax: np.maximum.accumulate(x.m, ax)),
    ]
  items += [
    Item("sum all 4M", lambda x: x.big.sum(), lambda x: x.big.sum(), lambda x: x.big.sum()),
    Item("max all 4M", lambda x: x.big.max(), lambda x: x.big.max(), lambda x: x.big.max()),
    Item("argmax all 4M", lambda x: x.big.argmax(), lambda x: x.big.argmax(), lambda x: x.big.argmax()),
    Item("prod axis 1", lambda x: (x.m * 0.001 + 1).prod(1), lambda x: (x.m * 0.001 + 1).prod(1),
         lambda x: (x.m * 0.001 + 1).prod(1)),
    Item("norm axis 1", lambda x: (x.m * x.m).sum(1).sqrt(), lambda x: torch.linalg.vector_norm(x.m, dim=1),
         lambda x: np.linalg.norm(x.m, axis=1)),
    Item("any axis 1", lambda x: (x.m > 3).any(1), lambda x: (x.m > 3).any(1), lambda x: (x.m > 3).any(1)),
    Item("median axis 1 (256x4096)", lambda x: x.s.median(1), lambda x: x.s.median(1).values, None),
  ]
  return items

def sort_items() -> list[Item]:
  import numpy as np
  return [
    Item("sort 4096", lambda x: x.s1.sort()[0], lambda x: x.s1.sort()[0], lambda x: np.sort(x.s1)),
    Item("sort 256x4096 rows", lambda x: x.s.sort(1)[0], lambda x: x.s.sort(1)[0], lambda x: np.sort(x.s, 1)),
    Item("argsort 256x4096 rows", lambda x: x.s.argsort(1), lambda x: x.s.argsort(1),
         lambda x: np.argsort(x.s, 1, kind="stable")),
    Item("sort 1M", lambda x: x.v.sort()[0], lambda x: x.v.sort()[0], lambda x: np.sort(x.v)),
    Item("sort 1024x1024 axis 0", lambda x: x.m.sort(0)[0], lambda x: x.m.sort(0)[0], lambda x: np.sort(x.m, 0)),
    Item("topk 64 of 256x4096", lambda x: x.s.topk(64, 1)[0], lambda x: x.s.topk(64, 1)[0], None),
    Item("topk 5 of 256x4096", lambda x: x.s.topk(5, 1)[0], lambda x: x.s.topk(5, 1)[0], None),
    Item("topk 64 of 1M", lambda x: x.v.topk(64)[0], lambda x: x.v.topk(64)[0], None),
    Item("kthvalue 256x4096", lambda x: x.s.kthvalue(100, 1)[0], lambda x: x.s.kthvalue(100, 1)[0], None),
    Item("unique 1M ints", lambda x: x.ints.unique(), lambda x: x.ints.unique(), lambda x: np.unique(x.ints),
         eager=True),
  ]

def index_items() -> list[Item]:
  import numpy as np
  import torch
  F = torch.nn.functional
  return [
    Item("gather axis 1 1024^2", lambda x: x.m.gather(1, x.idx), lambda x: x.m.gather(1, x.idx),
         lambda x: np.take_along_axis(x.m, x.idx, 1)),
    Item("gather axis 0 1024^2", lambda x: x.m.gather(0, x.idx), lambda x: x.m.gather(0, x.idx),
         lambda x: np.take_along_axis(x.m, x.idx, 0)),
    Item("scatter axis 1 1024^2", lambda x: x.m.scatter(1, x.idx, x.m2), lambda x: x.m.scatter(1, x.idx, x.m2), None),
    Item("scatter_add axis 1", lambda x: x.m.scatter_add(1, x.idx, x.m2),
         lambda x: x.m.scatter_add(1, x.idx, x.m2), None),
    Item("index_select 512 rows", lambda x: x.m.index_select(0, x.rows), lambda x: x.m.index_select(0, x.rows),
         lambda x: x.m[x.rows]),
    Item("m[rows] 512 rows", lambda x: x.m[x.rows], lambda x: x.m[x.rows], lambda x: x.m[x.rows]),
    Item("m[:, rows] 512 cols", lambda x: x.m[:, x.rows], lambda x: x.m[:, x.rows], lambda x: x.m[:, x.rows]),
    Item("embedding 8192 of 1024", lambda x: x.m[x.cls % 1024], lambda x: F.embedding(x.cls % 1024, x.m),
         lambda x: x.m[x.cls % 1024]),
    Item("masked_fill 1024^2", lambda x: x.m.masked_fill(x.mask, 0.0), lambda x: x.m.masked_fill(x.mask, 0.0),
         lambda x: np.where(x.mask, np.float32(0), x.m)),
    Item("masked_select 1024^2", lambda x: x.m.masked_select(x.mask), lambda x: x.m.masked_select(x.mask),
         lambda x: x.m[x.mask], eager=True),
    Item("nonzero 1024^2", lambda x: x.mask.nonzero(), lambda x: x.mask.nonzero(), lambda x: np.argwhere(x.mask),
         eager=True),
    Item("one_hot 8192x1000", lambda x: x.cls.one_hot(1000), lambda x: F.one_hot(x.cls, 1000), None),
    Item("tril 1024^2", lambda x: x.m.tril(), lambda x: x.m.tril(), lambda x: np.tril(x.m)),
    Item("triu 1024^2", lambda x: x.m.triu(1), lambda x: x.m.triu(1), lambda x: np.triu(x.m, 1)),
  ]

def movement_items() -> list[Item]:
  import numpy as np
  import torch
  F = torch.nn.functional
  return [
    Item("cat axis 0", lambda x: x.m.cat(x.m2, dim=0), lambda x: torch.cat([x.m, x.m2], 0),
         lambda x: np.concatenate([x.m, x.m2], 0)),
    Item("cat axis 1", lambda x: x.m.cat(x.m2, dim=1), lambda x: torch.cat([x.m, x.m2], 1),
         lambda x: np.concatenate([x.m, x.m2], 1)),
    Item("stack axis 1", lambda x: x.m.stack(x.m2, dim=1), lambda x: torch.stack([x.m, x.m2], 1),
         lambda x: np.stack([x.m, x.m2], 1)),
    Item("pad 1024^2 by 3", lambda x: x.m.pad((3, 3, 3, 3)), lambda x: F.pad(x.m, (3, 3, 3, 3)),
         lambda x: np.pad(x.m, 3)),
    Item("flip axis 1", lambda x: x.m.flip(1), lambda x: x.m.flip(1), lambda x: np.flip(x.m, 1).copy()),
    Item("flip axis 0", lambda x: x.m.flip(0), lambda x: x.m.flip(0), lambda x: np.flip(x.m, 0).copy()),
    Item("roll 1024^2 (5, 7)", lambda x: x.m.roll((5, 7), (0, 1)), lambda x: x.m.roll((5, 7), (0, 1)),
         lambda x: np.roll(x.m, (5, 7), (0, 1))),
    Item("repeat (2, 2)", lambda x: x.m.repeat(2, 2), lambda x: x.m.repeat(2, 2), lambda x: np.tile(x.m, (2, 2))),
    Item("repeat_interleave 2 axis 1", lambda x: x.m.repeat_interleave(2, 1),
         lambda x: x.m.repeat_interleave(2, 1), lambda x: np.repeat(x.m, 2, 1)),
    Item("transpose 1024^2", lambda x: x.m.T.contiguous(), lambda x: x.m.T.contiguous(),
         lambda x: np.ascontiguousarray(x.m.T)),
    Item("permute img (0,2,3,1)", lambda x: x.img.permute(0, 2, 3, 1).contiguous(),
         lambda x: x.img.permute(0, 2, 3, 1).contiguous(), lambda x: np.ascontiguousarray(x.img.transpose(0, 2, 3, 1))),
    Item("interpolate nearest x2", lambda x: x.small.interpolate((64, 64), mode="nearest").contiguous(),
         lambda x: F.interpolate(x.small, (64, 64), mode="nearest"), None),
    Item("interpolate bilinear x2", lambda x: x.small.interpolate((64, 64), mode="linear"),
         lambda x: F.interpolate(x.small, (64, 64), mode="bilinear"), None),
  ]

def nn_items() -> list[Item]:
  import torch
  F = torch.nn.functional
  return [
    Item("softmax axis 1 1024^2", lambda x: x.m.softmax(1), lambda x: x.m.softmax(1), None),
    Item("softmax axis 0 1024^2", lambda x: x.m.softmax(0), lambda x: x.m.softmax(0), None),
    Item("log_softmax axis 1", lambda x: x.m.log_softmax(1), lambda x: x.m.log_softmax(1), None),
    Item("layernorm 1024^2", lambda x: x.m.layernorm(), lambda x: F.layer_norm(x.m, (1024,), eps=1e-5), None),
    Item("rmsnorm-style 1024^2", lambda x: x.m * (x.m * x.m).mean(1, keepdim=True).add(1e-6).rsqrt(),
         lambda x: x.m * (x.m * x.m).mean(1, keepdim=True).add(1e-6).rsqrt(), None),
    Item("cross_entropy 4096x256", lambda x: x.logits.cross_entropy(x.labels),
         lambda x: F.cross_entropy(x.logits, x.labels), None),
    Item("batchnorm-style img", lambda x: x.img.batchnorm(None, None, x.img.mean((0, 2, 3)),
                                                         (x.img.var((0, 2, 3)) + 1e-5).rsqrt()),
         lambda x: F.batch_norm(x.img, None, None, training=True), None),
    Item("max_pool2d 2x2 img", lambda x: x.img.max_pool2d(2), lambda x: F.max_pool2d(x.img, 2), None),
    Item("max_pool2d 3x3 s2 p1 img", lambda x: x.img.max_pool2d(3, 2, padding=1),
         lambda x: F.max_pool2d(x.img, 3, 2, padding=1), None),
    Item("avg_pool2d 2x2 img", lambda x: x.img.avg_pool2d(2), lambda x: F.avg_pool2d(x.img, 2), None),
    Item("adaptive avg pool img", lambda x: x.img.mean((2, 3)), lambda x: F.adaptive_avg_pool2d(x.img, 1), None),
    Item("einsum bij,bkj->bik", lambda x: type(x.qk).einsum("bij,bkj->bik", x.qk, x.qk),
         lambda x: torch.einsum("bij,bkj->bik", x.qk, x.qk), None),
    Item("einsum ij,ij->i", lambda x: type(x.m).einsum("ij,ij->i", x.m, x.m2),
         lambda x: torch.einsum("ij,ij->i", x.m, x.m2), None),
  ]

def all_items() -> list[Item]:
  return elementwise_items() + reduce_items() + sort_items() + index_items() + movement_items() + nn_items()

def kernels_of(result: Any) -> Callable[[], None]:
  """Schedule the result once; return a function that runs its kernels (realizing the same graph twice is free)."""
  from lazytensor.engine.realize import run_schedule
  from lazytensor.schedule.scheduler import create_schedule
  outs = result if isinstance(result, tuple) else (result,)
  items, _ = create_schedule([o.lazydata for o in outs])
  return lambda: run_schedule(items)

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--only", default="", help="time only the items whose name contains this")
  ap.add_argument("--skip", default="", help="comma-separated: leave out the items whose name contains one of these")
  ap.add_argument("--runs", type=int, default=5)
  ap.add_argument("--top", type=int, default=0, help="print only the K worst against torch")
  bench_clock.add_argument(ap)
  ap.set_defaults(threads=1)
  args = ap.parse_args()
  bench_clock.use(ap, args)
  bench_clock.set_threads(1)
  import numpy as np
  import torch

  from lazytensor import Context, Device, Tensor
  torch.set_num_threads(1)
  arrays = make_arrays()
  lt = Inputs(lambda a: Tensor(a).realize(), arrays)
  th = Inputs(torch.from_numpy, arrays)
  nx = Inputs(lambda a: a, arrays)
  rows = []
  with Context(THREADS=1):
    for item in all_items():
      if args.only not in item.name or any(s and s in item.name for s in args.skip.split(",")): continue
      try:
        run = (lambda item=item: _realize(item.lazy(lt))) if item.eager else kernels_of(item.lazy(lt))
        t_lt = bench_clock.best_time(run, args.runs)
      except Exception as e:  # an op lazytensor lacks or rejects: reported, not fatal
        print(f"{item.name}: {type(e).__name__}: {e}", file=sys.stderr)
        continue
      t_th = bench_clock.best_time(lambda item=item: item.torch(th), args.runs) if item.torch else None
      t_np = bench_clock.best_time(lambda item=item: item.numpy(nx), args.runs) if item.numpy else None
      rows.append((item.name + (" (eager)" if item.eager else ""), t_lt, t_th, t_np))
      print(f"{item.name}: {t_lt * 1e3:.3f} ms, {t_lt / t_th if t_th else 0:.2f}x torch", file=sys.stderr, flush=True)
  rows.sort(key=lambda r: -(r[1] / r[2] if r[2] else 0.0))
  host = Device["CPU"].renderer.target.describe()
  print(f"one thread, host {host}  (numpy {np.__version__}, torch {torch.__version__})")
  print(f"{'op':40s} {'lazy ms':>9s} {'torch ms':>9s} {'numpy ms':>9s} {'x torch':>8s} {'x numpy':>8s}")
  for name, t_lt, t_th, t_np in rows[:args.top or len(rows)]:
    cols = [f"{t * 1e3:9.3f}" if t else f"{'-':>9s}" for t in (t_th, t_np)]
    ratios = [f"{t_lt / t:7.2f}x" if t else f"{'-':>8s}" for t in (t_th, t_np)]
    print(f"{name:40s} {t_lt * 1e3:9.3f} {cols[0]} {cols[1]} {ratios[0]} {ratios[1]}")

def _realize(result: Any) -> None:
  for r in (result if isinstance(result, tuple) else (result,)): r.realize()

if __name__ == "__main__":
  main()
