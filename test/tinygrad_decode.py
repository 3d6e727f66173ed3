"""A GPT-2-style decode loop written against tinygrad's API, run through extra/tinygrad_shim by test_api_parity.py so
that the path of tinygrad's examples/gpt2.py keeps working: keys and values written into a cache at a bound Variable
position, the token a bound Variable that shrinks the embedding, branches on `start_pos.val` and `start_pos > 0`, and
one TinyJit step for every position. Each step's logits are checked against a full-sequence forward of the same model
(no cache); exits non-zero where they differ or the step is built again after its capture."""
from __future__ import annotations

import numpy as np
from tinygrad import Tensor, TinyJit, Variable
from tinygrad.helpers import JIT
from tinygrad.nn import Embedding, LayerNorm, Linear
from tinygrad.uop.ops import UOp

from lazytensor.runtime.device import compile_stats

VOCAB, CONTEXT, DIM, HEADS = 64, 16, 32, 4

class Block:
  def __init__(self) -> None:
    self.ln_1, self.ln_2 = LayerNorm(DIM), LayerNorm(DIM)
    self.c_attn, self.c_proj = Linear(DIM, 3 * DIM), Linear(DIM, DIM)
    self.c_fc, self.c_out = Linear(DIM, 4 * DIM), Linear(4 * DIM, DIM)
    self.cache_kv = Tensor.zeros(2, 1, CONTEXT, HEADS, DIM // HEADS).contiguous().realize()

  def attend(self, x: Tensor, start_pos: UOp | int, mask: Tensor | None) -> Tensor:
    qkv = self.c_attn(x).reshape(None, None, 3, HEADS, DIM // HEADS)
    q, k, v = (qkv[:, :, i] for i in range(3))
    seqlen = q.shape[1]
    self.cache_kv[:, :, start_pos:start_pos + seqlen].assign(Tensor.stack(k, v)).realize()
    if start_pos > 0: k, v = (self.cache_kv[i][:, :start_pos + seqlen] for i in range(2))  # the range decides it
    out = q.transpose(1, 2).scaled_dot_product_attention(k.transpose(1, 2), v.transpose(1, 2), mask)
    return self.c_proj(out.transpose(1, 2).reshape(1, seqlen, DIM))

  def __call__(self, x: Tensor, start_pos: UOp | int, mask: Tensor | None) -> Tensor:
    h = x + self.attend(self.ln_1(x), start_pos, mask)
    return (h + self.c_out(self.c_fc(self.ln_2(h)).gelu())).contiguous()

class Model:
  def __init__(self, layers: int) -> None:
    self.wte, self.wpe = Embedding(VOCAB, DIM), Embedding(CONTEXT, DIM)
    self.blocks = [Block() for _ in range(layers)]
    self.ln_f = LayerNorm(DIM)
    self.allpos = Tensor.arange(CONTEXT).reshape(1, -1).realize()
    self.step = TinyJit(self.forward)

  def forward(self, tokens: Tensor | UOp, start_pos: UOp) -> Tensor:
    """The logits at every position of `tokens` (a prompt), or of one token given as a bound Variable."""
    x = self.wte.weight.shrink(((tokens, tokens + 1), None)) if isinstance(tokens, UOp) else self.wte(tokens)
    seqlen = 1 if isinstance(tokens, UOp) else tokens.shape[1]
    pos: UOp | int = start_pos if seqlen == 1 and start_pos.val > 0 else start_pos.val  # a prompt: concrete shapes
    x = x + self.wpe(self.allpos.shrink((None, (pos, pos + seqlen))))
    mask = Tensor.full((1, 1, seqlen, seqlen), float("-inf")).triu(1) if seqlen > 1 else None
    for block in self.blocks: x = block(x, pos, mask)
    return (self.ln_f(x) @ self.wte.weight.T).realize()

def main() -> None:
  Tensor.manual_seed(1)
  model, toks = Model(layers=2), [3, 1, 4, 1, 5]
  decoded = [model.forward(Tensor([toks]), Variable("start_pos", 0, CONTEXT - 1).bind(0))[0, -1].numpy()]
  step = model.step if JIT else model.forward
  while len(toks) < CONTEXT - 1:
    toks.append(int(decoded[-1].argmax()))
    if len(decoded) == 3: built = compile_stats["compiled"] + compile_stats["disk"]  # captured at the second step
    token = Variable("tokens", 0, VOCAB - 1).bind(toks[-1])
    decoded.append(step(token, Variable("start_pos", 1, CONTEXT - 1).bind(len(toks) - 1))[0, -1].numpy())
  rebuilt = compile_stats["compiled"] + compile_stats["disk"] - built
  full = model.forward(Tensor([toks]), Variable("start_pos", 0, CONTEXT - 1).bind(0))[0, 4:].numpy()
  err = float(np.abs(np.stack(decoded) - full).max())
  print(f"{len(decoded) - 1} decode steps, programs built after the capture: {rebuilt}, max |decode - full|: {err:.2e}")
  if rebuilt or err > 1e-4: raise SystemExit(1)

if __name__ == "__main__":
  main()
