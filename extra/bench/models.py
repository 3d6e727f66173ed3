"""Whole models against torch, in one process, with the same weights: ResNet18 and ResNet50 forward (224x224, batch 1
and 8), BERT-base forward (sequence 128), GPT-2 124M prefill (128 tokens) and decode (128 tokens, ms per token), and a
training step of ResNet18 (batch 8, SGD with momentum) and of GPT-2 (batch 4, sequence 128, AdamW).

Usage: python extra/bench/models.py [--quick] [--threads 1 2] [--cases resnet18,bert,...] [--torch-compile]
       [--runs N] [--first-call] [--clock wall|cpu]

lazytensor runs each model as written (every call builds, schedules and runs its graph; compiled kernels come from the
caches) and through TinyJit (captured once, replayed); torch runs eagerly and, with --torch-compile, through
torch.compile (inductor). Every call gets a fresh input (one of three, in turn). The models are extra/models/resnet.py,
extra/models/bert.py and extra/examples/generate.py's GPT-2 (whose decode step is TinyJit-captured at a Variable
position, so that one capture serves every position); their torch twins (models_torch.py) load lazytensor's random
weights name for name, and each case prints how far the two outputs are apart. Times are the best of --runs calls
after the first (whose time is printed apart: it compiles) and two more; decode is the mean of the steps after the
first two of a generation, the best of --runs generations. `--first-call` times ResNet50's first forward in a new
process with an empty cache directory (every kernel compiled), then again in another process (every kernel from the
disk cache), in wall time and in the process's CPU time (on a loaded machine the CPU time is the closer to what an idle
one takes). --quick runs tiny configurations of the same models, for a smoke test.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_clock

EXTRA = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(EXTRA / "models"), str(EXTRA / "examples")]  # resnet.py, bert.py; generate.py

CASES = ("resnet18", "resnet50", "bert", "gpt2-prefill", "gpt2-decode", "resnet18-train", "gpt2-train")
IMPLS = ("lazytensor", "lt TinyJit", "torch", "torch.compile")
Call = Callable[[int], object]  # the i-th call of a case, on the i-th fresh input

@dataclass(frozen=True)
class Sizes:
  image: int
  batches: tuple[int, ...]
  resnet_width: int
  classes: int
  bert: Any  # bert.Config
  bert_seq: int
  gpt: Any  # generate.Config
  prompt: int
  decode: int
  train_batch: int  # ResNet18's
  gpt_batch: int
  gpt_seq: int

def sizes(quick: bool) -> Sizes:
  import bert
  import generate
  if not quick: return Sizes(224, (1, 8), 64, 1000, bert.Config(), 128, generate.Config(), 128, 128, 8, 4, 128)
  return Sizes(32, (1, 2), 8, 10, bert.Config(vocab=100, context=32, dim=32, layers=2, heads=2), 16,
               generate.Config(vocab=100, context=40, dim=32, layers=2, heads=2), 16, 8, 2, 2, 16)

@dataclass
class Result:
  case: str
  threads: int
  best: dict[str, float]  # seconds of a call (decode: of a token), by implementation
  first: dict[str, float]  # seconds of the first call (decode: of the first two steps, the capture)
  agree: str  # how far lazytensor's output is from torch's

# ---- timing ----

def measure(call: Call, runs: int) -> tuple[float, float]:
  """(the first call's seconds, the best of `runs` calls after three untimed ones), each call on its own input."""
  start = bench_clock.now()
  call(0)
  first = bench_clock.now() - start
  counter = itertools.count(1)
  for _ in range(2): call(next(counter))
  return first, bench_clock.best_time(lambda: call(next(counter)), runs)

def timed(calls: dict[str, Call | None], runs: int) -> tuple[dict[str, float], dict[str, float]]:
  best, first = {}, {}
  for name, call in calls.items():
    if call is not None: first[name], best[name] = measure(call, runs)
  return best, first

def difference(ours: Any, theirs: Any) -> str:
  """The largest absolute difference of two outputs, and relative to the largest value."""
  import numpy as np
  a, b = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
  diff = float(np.abs(a - b).max())
  return f"max diff {diff:.1e} ({diff / max(float(np.abs(b).max()), 1e-30):.0e} of max)"

# ---- models and their twins ----

def twin(model: Any, theirs: Any) -> Any:
  """The torch model `theirs` with lazytensor's weights of `model`, name for name (every one of torch's)."""
  import torch

  from lazytensor.nn.state import get_state_dict
  ours = get_state_dict(model)
  names = set(theirs.state_dict())
  if missing := names - set(ours): raise ValueError(f"the torch twin has weights lazytensor's model lacks: {missing}")
  theirs.load_state_dict({name: torch.from_numpy(ours[name].numpy().copy()) for name in names})
  return theirs

def build(case: str, sz: Sizes) -> tuple[Any, Any]:
  """A lazytensor model for the case, with random weights, and its torch twin holding the same weights."""
  import bert
  import generate
  import models_torch
  import resnet

  from lazytensor import Tensor
  Tensor.manual_seed(0)
  ours: Any
  if case.startswith("resnet"):
    bottleneck = case.startswith("resnet50")
    ours = (resnet.resnet50 if bottleneck else resnet.resnet18)(sz.classes, sz.resnet_width)
    depths = [3, 4, 6, 3] if bottleneck else [2, 2, 2, 2]
    return ours, twin(ours, models_torch.ResNet(bottleneck, depths, sz.classes, sz.resnet_width))
  if case == "bert":
    ours = bert.Bert(sz.bert)
    return ours, twin(ours, models_torch.Bert(*vars(sz.bert).values()))
  ours = generate.GPT2(sz.gpt)
  return ours, twin(ours, models_torch.GPT2(*vars(sz.gpt).values()))

def compiled(model: Any, enabled: bool) -> Any:
  import torch
  return torch.compile(model) if enabled else None

# ---- the cases ----

def on_inputs(fn: Callable[[Any], object], inputs: list[Any], wrap: Callable[[Any], Any]) -> Call:
  return lambda i: fn(wrap(inputs[i % len(inputs)]))

def forward_case(case: str, sz: Sizes, batch: int, compile_: bool, runs: int) -> tuple[dict, dict, str]:
  """A forward of ResNet or BERT: logits (or hidden states) of a fresh batch each call."""
  import numpy as np
  import torch

  from lazytensor import Tensor, TinyJit, no_grad
  ours, theirs = build(case, sz)
  theirs.eval()
  rng, inputs = np.random.default_rng(1), list[Any]()
  if case == "bert": inputs = [rng.integers(0, sz.bert.vocab, (batch, sz.bert_seq), dtype=np.int32) for _ in range(3)]
  else: inputs = [rng.standard_normal((batch, 3, sz.image, sz.image), dtype=np.float32) for _ in range(3)]
  jit, fast = TinyJit(lambda x: ours(x).realize()), compiled(theirs, compile_)
  calls = {"lazytensor": on_inputs(lambda x: ours(x).realize(), inputs, Tensor),
           "lt TinyJit": on_inputs(jit, inputs, Tensor),
           "torch": on_inputs(theirs, inputs, torch.from_numpy),
           "torch.compile": None if fast is None else on_inputs(fast, inputs, torch.from_numpy)}
  with no_grad(), torch.inference_mode():
    agree = difference(ours(Tensor(inputs[0])).numpy(), theirs(torch.from_numpy(inputs[0])).numpy())
    return *timed(calls, runs), agree

def prefill_case(sz: Sizes, compile_: bool, runs: int) -> tuple[dict, dict, str]:
  """GPT-2 on a fresh prompt each call, from position 0: the next token's logits, the keys and values cached."""
  import numpy as np
  import torch

  from lazytensor import Tensor, TinyJit, no_grad
  ours, theirs = build("gpt2", sz)
  rng = np.random.default_rng(1)
  prompts = [rng.integers(0, sz.gpt.vocab, (1, sz.prompt), dtype=np.int32) for _ in range(3)]
  jit, fast = TinyJit(lambda t: ours(t, 0).realize()), compiled(theirs, compile_)
  calls = {"lazytensor": on_inputs(lambda t: ours(t, 0).realize(), prompts, Tensor),
           "lt TinyJit": on_inputs(jit, prompts, Tensor),
           "torch": on_inputs(lambda t: theirs(t, last=True), prompts, torch.from_numpy),
           "torch.compile": None if fast is None else on_inputs(lambda t: fast(t, last=True), prompts,
                                                                torch.from_numpy)}
  with no_grad(), torch.inference_mode():
    agree = difference(ours(Tensor(prompts[0]), 0).numpy(), theirs(torch.from_numpy(prompts[0]), last=True)[0].numpy())
    return *timed(calls, runs), agree

def torch_generate(model: Any, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
  """n greedy tokens after `prompt` from the torch twin, and the seconds of each decode step (as generate.py times
  its own: the model's step and its logits read back, not the choice of the token)."""
  import numpy as np
  import torch
  with torch.inference_mode():
    logits, past = model(torch.tensor([prompt]), last=True)
    tokens, seconds = [int(np.argmax(logits[0].numpy()))], []
    for _ in range(n - 1):
      start = bench_clock.now()
      logits, past = model(torch.tensor([[tokens[-1]]]), past, last=True)
      row = logits[0].numpy()
      seconds.append(bench_clock.now() - start)
      tokens.append(int(np.argmax(row)))
  return tokens, seconds

def decode_case(sz: Sizes, runs: int) -> tuple[dict, dict, str]:
  """Greedy decoding after a prompt, per token: lazytensor's generate() (a TinyJit step at a Variable position) and the
  torch twin's cache of concatenated keys and values. The steps after the first two are timed (those capture)."""
  import generate
  import numpy as np

  from lazytensor import no_grad
  ours, theirs = build("gpt2", sz)
  rng = np.random.default_rng(1)
  prompts = [[int(t) for t in rng.integers(0, sz.gpt.vocab, sz.prompt)] for _ in range(runs)]
  best: dict[str, float] = {"lt TinyJit": float("inf"), "torch": float("inf")}
  first: dict[str, float] = {}
  for i, prompt in enumerate(prompts):
    timing = generate.Timing()
    with no_grad():
      ours_tokens = generate.generate(ours, prompt, sz.decode, lambda z: int(np.argmax(z)), timing, bench_clock.now)
    theirs_tokens, seconds = torch_generate(theirs, prompt, sz.decode)
    for name, steps in (("lt TinyJit", timing.decode_s), ("torch", seconds)):
      best[name] = min(best[name], sum(steps[2:]) / len(steps[2:]))
      if i == 0: first[name] = sum(steps[:2])
    if i == 0: agree = f"{sum(a == b for a, b in zip(ours_tokens, theirs_tokens))}/{sz.decode} greedy tokens equal"
  return best, first, agree

def train_data(case: str, sz: Sizes, ours: Any, theirs: Any) -> tuple[list[tuple[Any, Any]], int, Any, Any, Any]:
  """Three batches (inputs, labels), the number of classes, lazytensor's and torch's optimizers and a function of the
  torch twin and inputs to its logits: ResNet18 with SGD and momentum, GPT-2 (every position's next token) with
  AdamW."""
  import numpy as np
  import torch

  from lazytensor.nn.optim import SGD, AdamW
  from lazytensor.nn.state import get_parameters
  rng = np.random.default_rng(1)
  if case == "resnet18-train":
    shape = (sz.train_batch, 3, sz.image, sz.image)
    batches = [(rng.standard_normal(shape, dtype=np.float32), rng.integers(0, sz.classes, sz.train_batch,
                                                                           dtype=np.int32)) for _ in range(3)]
    return (batches, sz.classes, SGD(get_parameters(ours), 0.01, 0.9), torch.optim.SGD(theirs.parameters(), 0.01, 0.9),
            lambda model, x: model(x))
  windows = [rng.integers(0, sz.gpt.vocab, (sz.gpt_batch, sz.gpt_seq + 1), dtype=np.int32) for _ in range(3)]
  # a learning rate that keeps the weights near where they started, so that every step times the same arithmetic: at
  # 1e-4 the model memorized its three batches within a few dozen steps (lazytensor's model takes twice torch's: plain
  # and TinyJit), the other tokens' probabilities underflowed to denormals, and a matmul reading them is ~100x slower
  # in every CPU library (torch's and numpy's alike: a 512x4096 @ 4096x768 0.1 s -> 22 s)
  lr = 1e-6
  return ([(w[:, :-1].copy(), w[:, 1:].copy()) for w in windows], sz.gpt.vocab, AdamW(get_parameters(ours), lr),
          torch.optim.AdamW(theirs.parameters(), lr, weight_decay=0.01), lambda model, x: model(x)[0])

def train_case(case: str, sz: Sizes, compile_: bool, runs: int) -> tuple[dict, dict, str]:
  """A training step on a fresh batch (batchnorm in training mode), with the step's loss realized with its update."""
  import torch

  from lazytensor import Tensor, TinyJit
  ours, theirs = build(case.removesuffix("-train"), sz)
  theirs.train()
  batches, classes, opt, topt, theirs_logits = train_data(case, sz, ours, theirs)
  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = ours(x).reshape(-1, classes).cross_entropy(y.reshape(-1)).backward()
    Tensor.realize(loss, *opt.schedule_step())
    return loss
  def torch_step(model: Any) -> Callable[[tuple[Any, Any]], Any]:
    def run(batch: tuple[Any, Any]) -> Any:
      topt.zero_grad()
      x, y = (torch.from_numpy(a) for a in batch)
      loss = torch.nn.functional.cross_entropy(theirs_logits(model, x).reshape(-1, classes), y.reshape(-1).long())
      loss.backward()
      topt.step()
      return loss
    return run
  jit, fast = TinyJit(step), compiled(theirs, compile_)
  def as_tensors(batch: tuple[Any, Any]) -> tuple[Tensor, Tensor]: return Tensor(batch[0]), Tensor(batch[1])
  calls = {"lazytensor": on_inputs(lambda b: step(*b), batches, as_tensors),
           "lt TinyJit": on_inputs(lambda b: jit(*b), batches, as_tensors),
           "torch": on_inputs(torch_step(theirs), batches, lambda b: b),
           "torch.compile": None if fast is None else on_inputs(torch_step(fast), batches, lambda b: b)}
  with Tensor.train():
    agree = f"first loss {difference(step(*as_tensors(batches[0])).item(), torch_step(theirs)(batches[0]).item())}"
    return *timed(calls, runs), agree

def run_case(case: str, sz: Sizes, compile_: bool, runs: int, threads: int) -> list[Result]:
  if case in ("resnet18", "resnet50", "bert"):
    batches = (1,) if case == "bert" else sz.batches
    return [Result(f"{case} b{batch}", threads, *forward_case(case, sz, batch, compile_, runs)) for batch in batches]
  if case == "gpt2-prefill": return [Result(case, threads, *prefill_case(sz, compile_, runs))]
  if case == "gpt2-decode": return [Result(case + " (ms/token)", threads, *decode_case(sz, runs))]
  return [Result(case, threads, *train_case(case, sz, compile_, runs))]

def row(r: Result) -> str:
  """Milliseconds of each implementation, lazytensor's speed relative to torch eager (above 1: faster), the first
  calls' seconds, and how far the outputs are apart."""
  ms = " ".join(f"{r.best[name] * 1e3:10.2f}" if name in r.best else f"{'-':>10s}" for name in IMPLS)
  torch_s = r.best.get("torch")
  ratios = " ".join(f"{torch_s / r.best[name]:7.2f}x" if torch_s and name in r.best else f"{'-':>8s}"
                    for name in ("lazytensor", "lt TinyJit", "torch.compile"))
  firsts = "/".join(f"{r.first[name]:.1f}" if name in r.first else "-" for name in ("lazytensor", "lt TinyJit",
                                                                                     "torch.compile"))
  return f"{r.case:24s} {r.threads:3d} {ms} {ratios}  {firsts:>15s}  {r.agree}"

def header() -> str:
  ms = " ".join(f"{name:>10s}" for name in IMPLS)
  ratios = " ".join(f"{name:>8s}" for name in ("lt", "lt jit", "compile"))
  return f"{'case':24s} {'thr':>3s} {ms} {ratios}  {'first call s':>15s}  agreement\n{'':28s} {'(ms per call)':^43s} " \
         f"{'(torch eager / x)':^26s} {'(lt/jit/compile)':>15s}"

def first_call_child(quick: bool) -> None:
  """(Run in a process of its own.) ResNet50's first forward, then its second: seconds as JSON."""
  import numpy as np
  import resnet

  from lazytensor import Tensor, no_grad
  from lazytensor.nn.state import get_state_dict
  sz = sizes(quick)
  start = time.perf_counter()
  model = resnet.resnet50(sz.classes, sz.resnet_width)
  Tensor.realize(*get_state_dict(model).values())
  built = time.perf_counter() - start
  times = []
  with no_grad():
    for seed in range(2):
      x = Tensor(np.random.default_rng(seed).standard_normal((1, 3, sz.image, sz.image), dtype=np.float32))
      start, cpu = time.perf_counter(), time.process_time()
      model(x).realize()
      times += [time.perf_counter() - start, time.process_time() - cpu]
  print(json.dumps({"build": built, "first": times[0], "first_cpu": times[1], "second": times[2]}))

def first_call(quick: bool, threads: int) -> None:
  """ResNet50's first forward in a process with an empty cache directory, then in another with the filled one."""
  with tempfile.TemporaryDirectory(prefix="models-bench-cache-") as cache:
    env = {key: value for key, value in os.environ.items() if key != "CACHEDB"} | {"CACHEDIR": cache}
    for label in ("cold cache", "warm cache"):
      args = [sys.executable, __file__, "--child-first-call", "--threads", str(threads)] + ["--quick"] * quick
      res = subprocess.run(args, env=env, capture_output=True, text=True)
      if res.returncode != 0: raise RuntimeError(f"the first-call process failed:\n{res.stdout}{res.stderr}")
      t = json.loads(res.stdout.splitlines()[-1])
      print(f"resnet50 b1 first forward, {label}, threads={threads}: {t['first']:.2f} s, {t['first_cpu']:.2f} s of CPU "
            f"time (then {t['second'] * 1e3:.0f} ms; the model's weights {t['build']:.2f} s)")

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="tiny configurations of the same models (a smoke run)")
  ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts, each a run of every case")
  ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)} (empty: none)")
  ap.add_argument("--torch-compile", action="store_true", help="time torch.compile too (minutes of compiling)")
  ap.add_argument("--runs", type=int, default=3, help="timed calls of each, the best kept")
  ap.add_argument("--first-call", action="store_true", help="ResNet50's first forward with a cold and a warm cache")
  ap.add_argument("--child-first-call", action="store_true", help=argparse.SUPPRESS)
  bench_clock.add_argument(ap)
  args = ap.parse_args()
  cases = [c for c in args.cases.split(",") if c]
  if bad := [c for c in cases if c not in CASES]:
    ap.error(f"--cases: {bad} are not cases; expected some of {', '.join(CASES)}")
  if args.clock == "cpu" and args.threads != [1]: ap.error("--clock cpu measures one thread: use it with --threads 1")
  bench_clock.set_threads(max(args.threads))
  if args.clock == "cpu": bench_clock.now = time.thread_time
  from lazytensor import Context
  if args.child_first_call:
    with Context(THREADS=max(args.threads)): first_call_child(args.quick)
    return
  torch = bench_clock.torch_on(max(args.threads))
  from lazytensor.renderer.cpu_target import cpu_target
  print(f"host {cpu_target('native').describe()}; torch {torch.__version__}{'; quick sizes' if args.quick else ''}")
  if args.first_call:
    for threads in args.threads: first_call(args.quick, threads)
  sz = sizes(args.quick)
  if cases: print(header(), flush=True)
  for threads in args.threads:
    torch.set_num_threads(threads)
    with Context(THREADS=threads):
      for case in cases:
        for result in run_case(case, sz, args.torch_compile, args.runs, threads): print(row(result), flush=True)

if __name__ == "__main__":
  main()
