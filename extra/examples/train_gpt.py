"""Train a tiny character-level transformer on Python's own standard library, then sample from it.

Usage: python extra/examples/train_gpt.py [--steps N] [--dim D] [--layers L] [--heads H] [--context T] [--batch B]

The text is the source of the standard library's top-level modules (`os.path.dirname(os.__file__)`), in sorted order
and cut at --chars characters: on every machine, no download. The model is a GPT in miniature, written out here:
token and position embeddings, pre-norm blocks of causal self-attention (matmuls, a causal mask, softmax) and an MLP,
a final layernorm and a linear head to next-character logits. Each training step is one TinyJit-captured program.
It prints the unigram entropy of the text (the loss of the best model that ignores context) next to the loss, which
falls well below it (to about 1.8 nats/char against 3.1), and samples some text at the end. The defaults train in
a little over a minute on 2 cores, plus about two minutes of compiling on the first run (compiled kernels are cached
on disk). A bigger run, about 1.2 s a step: `--dim 128 --layers 4 --context 64 --steps 1000 --lr 3e-3`.
"""
from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
from generate import KVCache, Pos, generate, next_token  # extra/examples/generate.py, next to this file
from tqdm import tqdm

from lazytensor import Tensor, dtypes, nn, no_grad
from lazytensor.engine.jit import TinyJit
from lazytensor.nn.optim import AdamW
from lazytensor.nn.state import get_parameters

# printable ASCII, newline and a stand-in for everything else: the same vocabulary on every machine
UNKNOWN = "\x7f"
VOCAB = "\n" + "".join(chr(c) for c in range(32, 127)) + UNKNOWN
CHAR_ID = {c: i for i, c in enumerate(VOCAB)}

def stdlib_text(chars: int) -> str:
  """The standard library's top-level .py files, sorted by name, concatenated and cut at `chars` characters."""
  root = os.path.dirname(os.__file__)
  parts, total = [], 0
  for name in sorted(f for f in os.listdir(root) if f.endswith(".py")):
    with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f: parts.append(f.read())
    total += len(parts[-1])
    if total >= chars: break
  return "".join(parts)[:chars]

def encode(text: str) -> np.ndarray:
  unknown = CHAR_ID[UNKNOWN]
  return np.array([CHAR_ID.get(c, unknown) for c in text.replace("\t", "    ")], dtype=np.int32)

def decode(ids: np.ndarray) -> str: return "".join(VOCAB[i] for i in ids)

def unigram_entropy(ids: np.ndarray) -> float:
  """Entropy of the character frequencies in nats: the cross-entropy of predicting each character without context."""
  p = np.bincount(ids, minlength=len(VOCAB)) / len(ids)
  p = p[p > 0]
  return float(-(p * np.log(p)).sum())

class CausalSelfAttention:
  def __init__(self, dim: int, heads: int, context: int) -> None:
    if dim % heads: raise ValueError(f"--dim {dim} does not split into {heads} heads")
    self.heads, self.context = heads, context
    self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    self.cache: KVCache | None = None  # keys and values of the positions sampled so far (generate.py)

  def __call__(self, x: Tensor, start_pos: Pos | None = None) -> Tensor:
    batch, time_, dim = x.shape
    head_dim = dim // self.heads
    # (batch, time, 3 * dim) -> three of (batch, heads, time, head_dim)
    q, k, v = self.qkv(x).reshape(batch, time_, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
    if start_pos is not None:  # sampling: positions start_pos.. after those in the cache
      if self.cache is None: self.cache = KVCache(batch, self.heads, self.context, head_dim)
      return self.proj(self.cache.attend(q, k, v, start_pos).permute(0, 2, 1, 3).reshape(batch, time_, dim))
    scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(head_dim))
    # position i attends to positions <= i: the model never sees the character it must predict
    causal = Tensor.ones(time_, time_, dtype=dtypes.bool).tril()
    # contiguous: the weights are materialized once instead of recomputed inside the matmul for every output column
    # (the scheduler fuses an elementwise producer into a matmul operand; here that doubles the time of a step)
    weights = causal.where(scores, -math.inf).softmax(-1).contiguous()
    return self.proj((weights @ v).permute(0, 2, 1, 3).reshape(batch, time_, dim))

class Block:
  """Pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""
  def __init__(self, dim: int, heads: int, context: int) -> None:
    self.ln1, self.attn = nn.LayerNorm(dim), CausalSelfAttention(dim, heads, context)
    self.ln2, self.fc, self.out = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

  def __call__(self, x: Tensor, start_pos: Pos | None = None) -> Tensor:
    x = x + self.attn(self.ln1(x), start_pos)
    return x + self.out(self.fc(self.ln2(x)).gelu().contiguous())  # contiguous: see CausalSelfAttention

class GPT:
  def __init__(self, context: int, dim: int, layers: int, heads: int) -> None:
    self.context = context
    self.tok, self.pos = nn.Embedding(len(VOCAB), dim), nn.Embedding(context, dim)
    self.blocks = [Block(dim, heads, context) for _ in range(layers)]
    self.ln_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, len(VOCAB))

  def __call__(self, idx: Tensor, start_pos: Pos | None = None) -> Tensor:
    """Character ids (batch, time) -> next-character logits (batch, time, vocab). With start_pos (sampling), the ids
    are at positions start_pos.. of a sequence whose earlier positions are in the attention layers' caches, and the
    logits are the last position's (batch, vocab)."""
    # rows of the embedding tables by indexing, not nn.Embedding's one-hot matmul: the same values, but the gradient
    # of the matmul form fuses the whole backward chain into a reduce that recomputes it once per vocabulary entry
    pos = 0 if start_pos is None else start_pos
    x = self.tok.weight[idx] + self.pos.weight[pos:pos + idx.shape[1]]
    for block in self.blocks: x = block(x, start_pos)
    return self.head(self.ln_f(x)) if start_pos is None else self.head(self.ln_f(x[:, -1]))

def loss_of(model: GPT, x: Tensor, y: Tensor) -> Tensor:
  logits = model(x)
  return logits.reshape(-1, logits.shape[-1]).cross_entropy(y.reshape(-1))

def batches(ids: np.ndarray, context: int, batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """`batch` random windows of the text; the targets are the inputs shifted by one character."""
  starts = rng.integers(0, len(ids) - context - 1, size=batch)
  windows = ids[starts[:, None] + np.arange(context + 1)]
  return windows[:, :-1], windows[:, 1:]

def sample(model: GPT, prompt: np.ndarray, n: int, temperature: float, rng: np.random.Generator) -> str:
  """Continue `prompt` (at most `context` characters) by n characters, one at a time, from the model's predictions,
  as generate.py samples GPT-2: keys and values cached, one TinyJit-captured step at a Variable position."""
  with no_grad():
    ids = generate(model, [int(i) for i in prompt], n, lambda z: next_token(z, temperature, 0, 1.0, rng))
  return decode(np.array(ids))

def train(model: GPT, train_ids: np.ndarray, steps: int, batch: int, lr: float,
          rng: np.random.Generator) -> tuple[list[float], float]:
  """AdamW for `steps` TinyJit-captured steps on random windows of the text; returns the losses and the seconds."""
  opt = AdamW(get_parameters(model), lr=lr, weight_decay=0.01)

  @TinyJit
  def train_step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = loss_of(model, x, y).backward()
    opt.step()  # the loss and the gradients are computed in the step's schedule, before the update
    return loss

  warmup = max(1, steps // 20)
  start, losses = time.perf_counter(), []
  with tqdm(range(steps), desc="train", unit="step", dynamic_ncols=True) as bar:
    for i in bar:
      # linear warmup, then cosine decay; the rate lives in a tensor, so the captured step reads each new value
      scale = (i + 1) / warmup if i < warmup else 0.5 * (1 + math.cos(math.pi * (i - warmup) / (steps - warmup)))
      opt.lr.assign(Tensor([lr * scale])).realize()
      losses.append(train_step(*(Tensor(a) for a in batches(train_ids, model.context, batch, rng))).item())
      if i % 20 == 0 or i == steps - 1: bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
  return losses, time.perf_counter() - start

def held_out_loss(model: GPT, val_ids: np.ndarray, batch: int) -> float:
  """The mean loss over 8 batches of held-out text, the same batches at every call."""
  @TinyJit
  def val_step(x: Tensor, y: Tensor) -> Tensor:
    with no_grad(): return loss_of(model, x, y).realize()
  val_rng = np.random.default_rng(1234)
  val_batches = [batches(val_ids, model.context, batch, val_rng) for _ in range(8)]
  return float(np.mean([val_step(Tensor(x), Tensor(y)).item() for x, y in val_batches]))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--chars", type=int, default=2_000_000, help="characters of standard-library source to use")
  ap.add_argument("--steps", type=int, default=600)
  ap.add_argument("--batch", type=int, default=32)
  ap.add_argument("--context", type=int, default=32)
  ap.add_argument("--dim", type=int, default=64)
  ap.add_argument("--layers", type=int, default=2)
  ap.add_argument("--heads", type=int, default=4)
  ap.add_argument("--lr", type=float, default=1e-2)
  ap.add_argument("--sample", type=int, default=300, help="characters to sample at the end")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()

  ids = encode(stdlib_text(args.chars))
  split = len(ids) * 9 // 10  # the last tenth is held out: the validation loss is measured on text never trained on
  train_ids, val_ids = ids[:split], ids[split:]
  entropy = unigram_entropy(train_ids)
  print(f"text: {len(ids):,} characters of standard-library source, vocabulary {len(VOCAB)}")
  print(f"unigram entropy: {entropy:.3f} nats/char ({entropy / math.log(2):.2f} bits): the loss without context")

  Tensor.manual_seed(args.seed)
  rng = np.random.default_rng(args.seed)
  model = GPT(args.context, args.dim, args.layers, args.heads)
  params = get_parameters(model)
  print(f"model: {sum(p.numel() for p in params):,} parameters, {args.layers} layers, dim {args.dim}, "
        f"{args.heads} heads, context {args.context}")
  losses, seconds = train(model, train_ids, args.steps, args.batch, args.lr, rng)
  val = held_out_loss(model, val_ids, args.batch)
  tokens = args.steps * args.batch * args.context
  print(f"trained {args.steps} steps in {seconds:.1f}s ({args.steps / seconds:.1f} steps/s, "
        f"{tokens / seconds:,.0f} chars/s)")
  print(f"loss (nats/char): unigram entropy {entropy:.3f}, first steps {np.mean(losses[:10]):.3f}, "
        f"last steps {np.mean(losses[-20:]):.3f}, held-out {val:.3f} ({val / entropy:.0%} of the entropy)")

  prompt = val_ids[:args.context]
  text = sample(model, prompt, args.sample, temperature=0.8, rng=rng)
  print(f"\n--- prompt (held-out text) ---\n{decode(prompt)}\n--- sampled continuation ---\n{text}")

if __name__ == "__main__":
  main()
