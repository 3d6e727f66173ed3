"""Text generation with a GPT-2 model: a prompt is run once (prefill), then one token at a time (decode), each step
reading the keys and values of the earlier positions from a cache instead of computing them again.

Usage: python extra/examples/generate.py [--weights model.safetensors] [--layers L --dim D --heads H --vocab V
       --context T] [--prompt 464,2068,7586] [--tokens N] [--temperature 0.8 --top-k 40 --top-p 0.95] [--seed S]

The model is GPT-2's architecture, written out here; its default configuration is GPT-2 small (124M parameters), a
smaller one with the flags. Weights come from a local `.safetensors` file in Hugging Face's layout (`wte.weight`,
`h.0.attn.c_attn.weight`, ...; its linear layers are Conv1D, weights stored input x output), random otherwise. There is
no tokenizer here (no download): the prompt and the output are token ids.

Each attention layer keeps its keys and values in buffers of the longest context (KVCache). The decode step writes
position `start_pos` and attends over the first `start_pos + 1`, where start_pos is a bound `Variable`: one TinyJit
capture, and one compiled program per kernel, serve every position. At temperature 0 the next token is the most
likely one (greedy); otherwise it is drawn from the softmax of the logits over temperature, restricted to the top-k
tokens and to the smallest set whose probability reaches top-p. When the cache is full the last half of the tokens is
run again as a new prompt. train_gpt.py's character model samples through the same functions.
"""
from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lazytensor import Tensor, TinyJit, Variable, nn
from lazytensor.nn.state import get_state_dict, load_state_dict, safe_load
from lazytensor.uop.ops import UOp

Pos = int | UOp  # a position: a number (prefill), or a bound Variable (decode)

class KVCache:
  """The keys and values of the positions a sequence has reached, in a buffer of the longest context (one for every
  length, so that a decode step at any position is the same program): keys and values stacked, (2, batch, heads,
  context, head_dim), so that one assign writes both (a kernel and a schedule fewer per layer than two buffers)."""
  def __init__(self, batch: int, heads: int, context: int, head_dim: int) -> None:
    self.kv = Tensor.zeros(2, batch, heads, context, head_dim).contiguous().realize()

  def attend(self, q: Tensor, k: Tensor, v: Tensor, start_pos: Pos) -> Tensor:
    """Causal attention of q (batch, heads, time, head_dim), at positions start_pos.. of the sequence, over the
    positions up to each: k and v of those positions are written into the cache first."""
    time_ = q.shape[2]
    self.kv[:, :, :, start_pos:start_pos + time_].assign(Tensor.stack(k, v)).realize()
    # each half picked before its positions are cut: the other order reshapes a view of a symbolic length, which left a
    # division by the head size in every index of the attention over the values
    keys, values = (self.kv[i, :, :, :start_pos + time_] for i in range(2))
    return causal_attention(q, keys, values, start_pos)

def causal_attention(q: Tensor, keys: Tensor, values: Tensor, start_pos: Pos) -> Tensor:
  """Attention of q (batch, heads, time, head_dim) at positions start_pos.. over keys and values of the positions
  0..start_pos + time - 1, each query seeing the keys up to its own position."""
  time_ = q.shape[2]
  if time_ == 1:
    # one query: products summed along the cache's own axes, not matmuls, whose reshapes of the cache's symbolic-length
    # view leave divisions by the head size in every index (r_12_start_pos+1_1_16_4 read 400 KB at 1-3 GB/s)
    scores = (q * keys).sum(-1).unsqueeze(2) * (1 / math.sqrt(q.shape[-1]))
    return (scores.softmax(-1).transpose(2, 3) * values).sum(2, keepdim=True)
  assert isinstance(start_pos, int), "a prompt runs at a concrete position"
  scores = (q @ keys.transpose(2, 3)) * (1 / math.sqrt(q.shape[-1]))
  # a prompt: its position i sees the keys up to start_pos + i
  scores = Tensor.ones(time_, start_pos + time_).tril(start_pos).where(scores, -math.inf)
  return scores.softmax(-1) @ values

class CachedModel(Protocol):
  context: int
  def __call__(self, tokens: Tensor, start_pos: Pos | None = None) -> Tensor: ...

# ---- GPT-2 ----

@dataclass(frozen=True)
class Config:
  vocab: int = 50257
  context: int = 1024
  dim: int = 768
  layers: int = 12
  heads: int = 12

class Conv1D:
  """GPT-2's linear layer (Hugging Face's Conv1D): y = x @ weight + bias, the weight stored input x output."""
  def __init__(self, fan_in: int, fan_out: int) -> None:
    self.weight = Tensor.normal(fan_in, fan_out, std=0.02)
    self.bias = Tensor.zeros(fan_out)

  def __call__(self, x: Tensor) -> Tensor: return x @ self.weight + self.bias

class Attention:
  def __init__(self, cfg: Config) -> None:
    self.c_attn, self.c_proj = Conv1D(cfg.dim, 3 * cfg.dim), Conv1D(cfg.dim, cfg.dim)
    self.heads, self.context = cfg.heads, cfg.context
    self.cache: KVCache | None = None

  def __call__(self, x: Tensor, start_pos: Pos | None) -> Tensor:
    batch, time_, dim = x.shape
    qkv = self.c_attn(x)
    if start_pos is None: out = causal_attention(*split_heads(qkv, self.heads), 0)  # a whole sequence, no cache
    else:
      # realized first: the cache's two writes and the attention each run as a schedule of their own, and each would
      # compute the projection (and the layernorm before it) again: 3x a decode step's largest matrix-vector product
      q, k, v = split_heads(qkv.realize(), self.heads)
      if self.cache is None: self.cache = KVCache(batch, self.heads, self.context, dim // self.heads)
      out = self.cache.attend(q, k, v, start_pos)
    return self.c_proj(out.permute(0, 2, 1, 3).reshape(batch, time_, dim))

def split_heads(qkv: Tensor, heads: int) -> list[Tensor]:
  """(batch, time, 3 * dim) -> q, k and v, each (batch, heads, time, head_dim)."""
  batch, time_, dim3 = qkv.shape
  return list(qkv.reshape(batch, time_, 3, heads, dim3 // 3 // heads).permute(2, 0, 3, 1, 4))

class MLP:
  def __init__(self, cfg: Config) -> None:
    self.c_fc, self.c_proj = Conv1D(cfg.dim, 4 * cfg.dim), Conv1D(4 * cfg.dim, cfg.dim)

  def __call__(self, x: Tensor) -> Tensor: return self.c_proj(self.c_fc(x).gelu())  # GPT-2's gelu is the tanh one

class Block:
  def __init__(self, cfg: Config) -> None:
    self.ln_1, self.attn = nn.LayerNorm(cfg.dim, eps=1e-5), Attention(cfg)
    self.ln_2, self.mlp = nn.LayerNorm(cfg.dim, eps=1e-5), MLP(cfg)

  def __call__(self, x: Tensor, start_pos: Pos | None) -> Tensor:
    x = x + self.attn(self.ln_1(x), start_pos)
    x = x + self.mlp(self.ln_2(x))
    # with a cache, the next layer realizes its projection, a schedule that would compute this layer (and every one
    # before it back to a buffer) again: 78 MLPs per step for GPT-2's 12 layers. Kept in a buffer instead
    return x if start_pos is None else x.realize()

class GPT2:
  """GPT-2 with a key-value cache in each attention layer; the output head is the token embedding (tied)."""
  def __init__(self, cfg: Config) -> None:
    self.context = cfg.context
    self.wte, self.wpe = nn.Embedding(cfg.vocab, cfg.dim), nn.Embedding(cfg.context, cfg.dim)
    self.h = [Block(cfg) for _ in range(cfg.layers)]
    self.ln_f = nn.LayerNorm(cfg.dim, eps=1e-5)

  def __call__(self, tokens: Tensor, start_pos: Pos | None = None) -> Tensor:
    """Token ids (batch, time) at positions start_pos.. of the sequence (whose earlier positions are cached) -> the
    logits of the next token after the last one (batch, vocab). Without start_pos (training): the ids are a whole
    sequence, no cache is read or written, and the logits are every position's (batch, time, vocab)."""
    pos = 0 if start_pos is None else start_pos
    x = self.wte.weight[tokens] + self.wpe.weight[pos:pos + tokens.shape[1]]
    for block in self.h: x = block(x, start_pos)
    return self.ln_f(x if start_pos is None else x[:, -1]) @ self.wte.weight.T

  def load(self, path: str) -> None:
    """Weights from a safetensors file in Hugging Face's layout (names with or without `transformer.`; the causal
    mask buffers some files hold, `attn.bias`, are not weights)."""
    ours = get_state_dict(self)
    loaded = {name.removeprefix("transformer."): t for name, t in safe_load(path).items()}
    load_state_dict(self, {name: t.cast(ours[name].dtype) for name, t in loaded.items() if name in ours})

# ---- sampling ----

def next_token(logits: np.ndarray, temperature: float, top_k: int, top_p: float, rng: np.random.Generator) -> int:
  """The next token from one row of logits: the most likely at temperature 0, else drawn from softmax(logits /
  temperature) over the top_k most likely (0: all) and, of those, the fewest whose probability reaches top_p."""
  if temperature == 0: return int(np.argmax(logits))
  z = logits.astype(np.float64) / temperature
  order = np.argsort(-z, kind="stable")[:top_k if top_k > 0 else len(z)]
  p = np.exp(z[order] - z[order[0]])
  p /= p.sum()
  keep = min(int(np.searchsorted(np.cumsum(p), top_p)) + 1, len(p))  # the fewest whose sum reaches top_p
  p = p[:keep] / p[:keep].sum()
  return int(order[rng.choice(keep, p=p)])

@dataclass
class Timing:
  prefill_s: float = 0.0
  decode_s: list[float] = field(default_factory=list)  # the seconds of each decode step

  def report(self) -> str:
    """Tokens/s of the decode steps after the first two (those capture the step and build its kernels)."""
    first, rest = self.decode_s[:2], self.decode_s[2:]
    rate = f"{len(rest) / sum(rest):.1f} tokens/s" if rest and sum(rest) > 0 else "too few steps to time"
    return (f"prefill {self.prefill_s * 1e3:.1f} ms; decode {len(self.decode_s)} tokens: the first two (capture) "
            f"{sum(first):.2f} s, then {rate}")

def generate(model: CachedModel, prompt: list[int], n: int, pick: Callable[[np.ndarray], int],
             timing: Timing | None = None, clock: Callable[[], float] = time.perf_counter) -> list[int]:
  """n tokens after `prompt` (1 to model.context tokens, batch 1): the prompt is run once, then each new token alone, at
  a Variable position through one TinyJit-captured step. When the cache is full, the last half of the tokens is run
  again as a new prompt. `timing` gets the seconds of each step as `clock` reads them."""
  if not 1 <= len(prompt) <= model.context:
    raise ValueError(f"generate: a prompt of {len(prompt)} tokens; expected 1 to {model.context} (the context)")
  start_pos = Variable("start_pos", 1, model.context - 1)
  decode_step = TinyJit(lambda token, pos: model(token, pos).realize())
  timing = timing if timing is not None else Timing()
  def prefill(window: list[int]) -> np.ndarray:
    start = clock()
    logits = model(Tensor([window], dtype="int32"), 0).numpy()
    timing.prefill_s += clock() - start
    return logits
  tokens, logits = list(prompt), prefill(prompt)
  cached = len(prompt)  # the positions in the cache
  for i in range(n):
    tokens.append(pick(logits[0]))
    if i == n - 1: break
    if cached == model.context:
      window = tokens[-(model.context // 2):]
      logits, cached = prefill(window), len(window)
      continue
    start = clock()
    logits = decode_step(Tensor([[tokens[-1]]], dtype="int32"), start_pos.bind(cached)).numpy()
    timing.decode_s.append(clock() - start)
    cached += 1
  return tokens[len(prompt):]

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--weights", help="a .safetensors file of GPT-2 weights in Hugging Face's layout (default: random)")
  for name, default in vars(Config()).items(): ap.add_argument(f"--{name}", type=int, default=default)
  ap.add_argument("--prompt", default="464,2068,7586,21831",
                  help="token ids, comma-separated (the default: GPT-2's 'The quick brown fox')")
  ap.add_argument("--tokens", type=int, default=32, help="tokens to generate")
  ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
  ap.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens (0: all)")
  ap.add_argument("--top-p", type=float, default=1.0, help="sample among the fewest tokens whose probability reaches p")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  Tensor.manual_seed(args.seed)
  cfg = Config(args.vocab, args.context, args.dim, args.layers, args.heads)
  model = GPT2(cfg)
  if args.weights: model.load(args.weights)
  rng = np.random.default_rng(args.seed)
  prompt = [int(t) for t in args.prompt.split(",")]
  if bad := [t for t in prompt if not 0 <= t < cfg.vocab]:
    raise ValueError(f"--prompt: token ids {bad} are outside the vocabulary of {cfg.vocab} (give ids below it)")
  timing = Timing()
  out = generate(model, prompt, args.tokens, lambda z: next_token(z, args.temperature, args.top_k, args.top_p, rng),
                 timing)
  print("tokens:", ",".join(map(str, out)))
  print(f"{len(prompt)} prompt tokens; {timing.report()}")

if __name__ == "__main__":
  main()
