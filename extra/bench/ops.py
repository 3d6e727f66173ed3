"""lazytensor next to numpy (and torch when installed), measured in the same run, float32 on the CPU.

Usage: python extra/bench/ops.py [--threads N] [--quick] [--clock wall|cpu]
Prints GB/s or GFLOP/s for each item and the ratio against numpy and torch: "kernels" runs the scheduled kernels
alone (with --threads N > 1, "vs 1T" is their speed-up over the same kernels on one thread, timed in turns, each
threaded run right after another as in a loop of kernels, its worker threads awake);
"eager" is what a user's call costs end to end (build the graph from realized inputs, schedule it, allocate the
output, run, free it), with other input tensors at every call (two sets, alternating). The header names the
host's CPU as lazytensor's native CPU target sees it (its x86-64 level: v3 is AVX2, v4 AVX-512; vector width, FMA,
caches), and the CPU_TARGET kernels are compiled for when it is another.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import bench_clock


def kernels_of(build: Callable[[], object]) -> Callable[[], None]:
  """Schedule the tensor once, return a function that runs its kernels.

  Realizing the same expression twice is free in lazytensor (interned graphs remember their buffers), so the timed
  loop runs the scheduled kernels themselves."""
  from lazytensor.engine.realize import run_schedule
  from lazytensor.schedule.scheduler import create_schedule
  items, _ = create_schedule([build().lazydata])  # type: ignore[attr-defined]
  return lambda: run_schedule(items)

def eager_calls(build: Callable[[tuple], object], sets: list[tuple]) -> Callable[[], None]:
  """One eager call per run, on the next set of inputs: the graph is new each time (the last result was freed with
  its graph, so nothing is remembered), only its structure repeats."""
  turn = [0]
  def call() -> None:
    turn[0] += 1
    build(sets[turn[0] % len(sets)]).realize()  # type: ignore[attr-defined]
  return call

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--threads", type=int, default=1)
  ap.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
  args = bench_clock.setup(ap)
  import numpy as np

  from lazytensor import Context, Device, Tensor
  from lazytensor.renderer.cpu_target import cpu_target
  torch = bench_clock.torch_on(args.threads)

  rng = np.random.default_rng(0)
  n_chain = 1 << (20 if args.quick else 24)
  side = 1024 if args.quick else 4096
  runs = 3 if args.quick else 5
  a, b, c = (rng.random(n_chain, dtype=np.float32) for _ in range(3))
  big = rng.standard_normal((side, side), dtype=np.float32)
  t = {k: torch.from_numpy(v) for k, v in dict(a=a, b=b, c=c, big=big).items()} if torch else {}
  arrays = [a, b, c, big]  # the inputs of every item, by position; lazytensor gets two realized copies of each

  # each item: name, unit, work, the lazytensor expression over a set of realized inputs, numpy, torch
  items = [
    ("chain ((a*b+c).relu()*0.5).exp()", "GB/s", 16 * n_chain, lambda s: ((s[0] * s[1] + s[2]).relu() * 0.5).exp(),
     lambda: np.exp(np.maximum(a * b + c, 0) * 0.5),
     (lambda: torch.exp(torch.relu(t["a"] * t["b"] + t["c"]) * 0.5)) if torch else None),
    (f"row sum {side}x{side}", "GB/s", 4 * side * side, lambda s: s[3].sum(1),
     lambda: big.sum(1), (lambda: t["big"].sum(1)) if torch else None),
    (f"full sum {n_chain}", "GB/s", 4 * n_chain, lambda s: s[0].sum(),
     lambda: a.sum(), (lambda: t["a"].sum()) if torch else None),
    (f"column sum {side}x{side}", "GB/s", 4 * side * side, lambda s: s[3].sum(0),
     lambda: big.sum(0), (lambda: t["big"].sum(0)) if torch else None),
    (f"transpose {side}x{side}", "GB/s", 8 * side * side, lambda s: s[3].T.contiguous(),
     lambda: np.ascontiguousarray(big.T), (lambda: t["big"].T.contiguous()) if torch else None),
    (f"softmax {side}x{side}", "GB/s", 8 * side * side, lambda s: s[3].softmax(1),
     lambda: (lambda e: e / e.sum(1, keepdims=True))(np.exp(big - big.max(1, keepdims=True))),
     (lambda: torch.softmax(t["big"], 1)) if torch else None),
  ]
  for n in ((256,) if args.quick else (512, 1024, 2048)):
    xa, xb = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    ta_, tb_ = (torch.from_numpy(xa), torch.from_numpy(xb)) if torch else (None, None)
    arrays += [xa, xb]
    items.append((f"matmul {n}", "GFLOP/s", 2 * n ** 3, lambda s, i=len(arrays) - 2: s[i] @ s[i + 1],
                  lambda xa=xa, xb=xb: xa @ xb, (lambda ta_=ta_, tb_=tb_: ta_ @ tb_) if torch else None))
  # the other layouts a model's matmuls take: x @ w.T (a Linear's forward) and a batch of small ones (attention)
  mm, (bb, bm) = (256 if args.quick else 1024), ((8, 64) if args.quick else (64, 128))
  xw = rng.random((mm, mm), dtype=np.float32), rng.random((mm, mm), dtype=np.float32)
  xbm = rng.random((bb, bm, bm), dtype=np.float32), rng.random((bb, bm, bm), dtype=np.float32)
  tw_, tbm = ([torch.from_numpy(v) for v in xw], [torch.from_numpy(v) for v in xbm]) if torch else ([], [])
  arrays += [*xw, *xbm]
  items.append((f"matmul {mm} x @ w.T", "GFLOP/s", 2 * mm ** 3, lambda s, i=len(arrays) - 4: s[i] @ s[i + 1].T,
                lambda: xw[0] @ xw[1].T, (lambda: tw_[0] @ tw_[1].T) if torch else None))
  items.append((f"bmm {bb}x{bm}^3", "GFLOP/s", 2 * bb * bm ** 3, lambda s, i=len(arrays) - 2: s[i] @ s[i + 1],
                lambda: xbm[0] @ xbm[1], (lambda: tbm[0] @ tbm[1]) if torch else None))
  q = side // 4  # a quarter of big's rows
  items.append((f"cumsum {q}x{side}", "GB/s", 8 * q * side, lambda s: s[3][:q].cumsum(1),
                lambda: np.cumsum(big[:q], 1), (lambda: torch.cumsum(t["big"][:q], 1)) if torch else None))
  bs, hw = (4, 28) if args.quick else (32, 56)
  cx, cw = rng.random((bs, 64, hw, hw), dtype=np.float32), rng.random((64, 64, 3, 3), dtype=np.float32)
  tcx, tcw = (torch.from_numpy(cx), torch.from_numpy(cw)) if torch else (None, None)
  conv_torch = (lambda: torch.nn.functional.conv2d(tcx, tcw, padding=1)) if torch else None
  arrays += [cx, cw]
  items.append((f"conv2d {bs}x64x{hw}x{hw}, 64 out, 3x3, pad 1", "GFLOP/s", 2 * bs * 64 * hw * hw * 64 * 9,
                lambda s, i=len(arrays) - 2: s[i].conv2d(s[i + 1], padding=1), None, conv_torch))
  sets = [tuple(Tensor(x).realize() for x in arrays) for _ in range(2)]
  versions = f"numpy {np.__version__}{', torch ' + torch.__version__ if torch else ''}"
  host, target = cpu_target("native").describe(), Device["CPU"].renderer.target.describe()
  print(f"threads={args.threads}  host {host}{'' if target == host else f'  CPU_TARGET {target}'}  ({versions})")
  print(f"{'item':40s} {'kernels':>10s} {'eager':>10s} {'numpy':>10s} {'torch':>10s} {'eager/kern':>10s} "
        f"{'vs numpy':>9s} {'vs torch':>9s}" + (f" {'vs 1T':>8s}" if args.threads > 1 else ""))
  with Context(THREADS=args.threads):
    for name, unit, work, build, np_fn, torch_fn in items:
      kernels = kernels_of(lambda build=build: build(sets[0]))
      if args.threads > 1:
        # the same kernels on one thread, in turns with these: the scaling, with the same noise on both. Each timed
        # threaded run follows an untimed one, as kernels follow each other in a user's step: the one-thread run in
        # between outlasts the workers' spin, and a sleeping worker's wake-up (0.1-0.6 ms under load) is not the
        # kernel's cost
        def one_thread(kernels: Callable[[], None] = kernels) -> None:
          with Context(THREADS=1): kernels()
        lt, lt1 = bench_clock.best_times([kernels, one_thread], runs, before={0: kernels})
        assert lt is not None and lt1 is not None
        scaling = f" {lt1 / lt:7.2f}x"
      else: lt, scaling = bench_clock.best_time(kernels, runs), ""
      eager = bench_clock.best_time(eager_calls(build, sets), runs)
      npt = bench_clock.best_time(np_fn, runs) if np_fn else None
      tt = bench_clock.best_time(torch_fn, runs) if torch_fn else None
      cols = [f"{work / x * 1e-9:10.2f}" if x else f"{'-':>10s}" for x in (npt, tt)]
      ratios = [f"{x / lt:8.2f}x" if x else f"{'-':>9s}" for x in (npt, tt)]
      print(f"{name:40s} {work / lt * 1e-9:10.2f} {work / eager * 1e-9:10.2f} {cols[0]} {cols[1]} "
            f"{lt / eager:9.2f}x {ratios[0]} {ratios[1]}{scaling}   {unit}")
    # the whole path of a small op on realized inputs: build the graph, schedule it, allocate, run
    tiny_sets = [tuple(Tensor(rng.random(16, dtype=np.float32)).realize() for _ in range(2)) for _ in range(2)]
    tiny = bench_clock.best_time(eager_calls(lambda s: s[0] + s[1], tiny_sets), 200)
    tx, ty = tiny_sets[0][0].numpy(), tiny_sets[0][1].numpy()
    tiny_np = bench_clock.best_time(lambda: np.add(tx, ty), 200)
    tiny_t = None
    if torch:
      ttx, tty = torch.from_numpy(tx), torch.from_numpy(ty)
      tiny_t = bench_clock.best_time(lambda: ttx + tty, 200)
    print(f"{'tiny op, 16 elements, eager (us)':40s} {'':>10s} {tiny * 1e6:10.1f} {tiny_np * 1e6:10.2f} "
          f"{(f'{tiny_t * 1e6:10.2f}' if tiny_t else '-'):>10s}")
  sys.stdout.flush()

if __name__ == "__main__":
  main()
