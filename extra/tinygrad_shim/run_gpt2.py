"""Runs tinygrad's examples/gpt2.py through the shim with random weights (its main downloads GPT-2's weights and
tiktoken's vocabulary): gpt2.py's Transformer and its GPT2.generate loop (the prompt, then one token at a time as a
bound Variable at a bound Variable start_pos, through its TinyJit), and lazytensor's extra/examples/generate.py on the
same weights. Prints the tokens of both, whether they agree (greedy), and the milliseconds of a decode step of each.

  PYTHONPATH=$PWD:$PWD/extra/tinygrad_shim:<tinygrad checkout> python extra/tinygrad_shim/run_gpt2.py \\
    --gpt2 <tinygrad checkout>/examples/gpt2.py [--layers 2 --dim 64 --heads 4] [--count 20] [--prompt 1,2,3]

The checkout's directory goes on PYTHONPATH for gpt2.py's `from extra.bench_log import ...`; README.md here says which
gpt2.py and what to change in it. The vocabulary is gpt2.py's VOCAB_SIZE (its token Variable ranges over it) and the
context its MAX_CONTEXT (set by the environment variable of that name, 128 by default).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from lazytensor import Tensor
from lazytensor.nn.state import get_state_dict, load_state_dict

# the weights that gpt2.py's Linear layers hold transposed from Hugging Face's Conv1D layout (GPT2.build transposes)
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

def load_module(name: str, path: Path) -> ModuleType:
  spec = importlib.util.spec_from_file_location(name, path)
  if spec is None or spec.loader is None: raise ValueError(f"--gpt2: cannot load {path} as a Python module")
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module  # before it runs: its dataclasses look their module up there
  spec.loader.exec_module(module)
  return module

class TokenIds:
  """gpt2.py's tokenizer interface over token ids written "464,2068": no tiktoken vocabulary to download."""
  def encode(self, text: str, allowed_special: Any = ()) -> list[int]: return [int(t) for t in text.split(",")]
  def decode(self, tokens: list[int]) -> str: return ",".join(map(str, tokens))

class TimedModel:
  """gpt2.py's model, each call timed up to its tokens on the host."""
  def __init__(self, model: Any) -> None:
    self.model = model
    self.seconds: list[float] = []

  def __call__(self, *args: Any) -> Tensor:
    start = time.perf_counter()
    out = self.model(*args)
    out.numpy()
    self.seconds.append(time.perf_counter() - start)
    return out

def random_weights(model: Any, seed: int) -> dict[str, Tensor]:
  """Weights for generate.py's GPT-2 (Hugging Face's layout). Not GPT-2's init: with its std of 0.02 and the head tied
  to the token embedding, a random model's most likely next token is its last one, and both programs would print one
  token over and over, agreeing on little; wider weights give varied greedy tokens."""
  rng = np.random.default_rng(seed)
  def init(name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")): return np.ones(shape, np.float32)
    std = 0.02 if name.endswith(("wte.weight", "wpe.weight")) else 0.3
    return (rng.standard_normal(shape) * std).astype(np.float32)
  return {name: Tensor(init(name, t.shape)).realize() for name, t in get_state_dict(model).items()}

def median_ms(seconds: list[float]) -> str:
  rest = seconds[2:]  # the first two decode steps run the step, then capture it
  return f"{np.median(rest) * 1e3:.2f} ms per decode step (median of {len(rest)})" if rest else "too few steps"

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--gpt2", type=Path, required=True, help="tinygrad's examples/gpt2.py")
  ap.add_argument("--layers", type=int, default=2)
  ap.add_argument("--dim", type=int, default=64)
  ap.add_argument("--heads", type=int, default=4)
  ap.add_argument("--count", type=int, default=20, help="tokens to generate")
  ap.add_argument("--prompt", default="464,2068,7586,21831", help="token ids, comma-separated")
  ap.add_argument("--temperature", type=float, default=0.0, help="gpt2.py's sampling (tokens compared at 0 only)")
  ap.add_argument("--batch-size", type=int, default=1, help="gpt2.py's rows (tokens as a Tensor, not a Variable)")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  tg = load_module("gpt2", args.gpt2)
  lt = load_module("generate", Path(__file__).resolve().parents[1] / "examples" / "generate.py")
  cfg = lt.Config(vocab=tg.VOCAB_SIZE, context=tg.MAX_CONTEXT, dim=args.dim, layers=args.layers, heads=args.heads)
  ref = lt.GPT2(cfg)
  weights = random_weights(ref, args.seed)
  load_state_dict(ref, weights)
  model = tg.Transformer(args.dim, args.heads, args.layers, 1e-5, tg.VOCAB_SIZE, max_seq_len=tg.MAX_CONTEXT)
  ours = {name: t.T.contiguous().realize() if name.endswith(CONV1D) else t for name, t in weights.items()}
  load_state_dict(model, {**ours, "lm_head.weight": weights["wte.weight"]})  # the head is tied to wte

  timed, prompt = TimedModel(model), TokenIds().encode(args.prompt)
  texts = tg.GPT2(timed, TokenIds()).generate(args.prompt, args.count, args.temperature, batch_size=args.batch_size)
  tg_tokens = TokenIds().encode(texts[0])[len(prompt):]
  timing = lt.Timing()
  lt_tokens = lt.generate(ref, prompt, args.count, lambda logits: int(np.argmax(logits)), timing)
  print(f"gpt2.py through the shim: {','.join(map(str, tg_tokens))}\n  prompt {timed.seconds[0] * 1e3:.1f} ms, "
        f"{median_ms(timed.seconds[1:])}; TinyJit calls {model.forward_jit.calls} (the rest replays)")
  print(f"extra/examples/generate.py: {','.join(map(str, lt_tokens))}\n  prompt {timing.prefill_s * 1e3:.1f} ms, "
        f"{median_ms(timing.decode_s)}")
  if args.temperature == 0:
    same = tg_tokens == lt_tokens and len(set(texts)) == 1
    print("the same tokens" + (" in every row" if args.batch_size > 1 else "") if same else "the tokens DIFFER")

if __name__ == "__main__":
  main()
