"""A tiny pre-norm transformer for the parallelism tests (test_parallel_lib.py): small enough to train a few steps
under every strategy on CPU:0..3 in seconds, with the submodule names torch's tensor-parallel plans use."""
from __future__ import annotations

import math

from lazytensor import Tensor, dtypes, nn
from lazytensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel, SequenceParallel, Shard


class Attention:
  def __init__(self, dim: int, heads: int) -> None:
    self.heads = heads
    # no bias on q, k, v (as LLaMA): a key bias has no effect on attention, and Adam would amplify its zero gradient's
    # rounding, which differs between layouts
    self.wq, self.wk, self.wv = (nn.Linear(dim, dim, bias=False) for _ in range(3))
    self.wo = nn.Linear(dim, dim)

  def __call__(self, x: Tensor) -> Tensor:
    b, t, _ = x.shape
    q, k, v = (w(x).reshape(b, t, self.heads, -1).permute(0, 2, 1, 3) for w in (self.wq, self.wk, self.wv))
    scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    causal = Tensor.ones(t, t, dtype=dtypes.bool).tril().to(scores.device)
    out = causal.where(scores, -math.inf).softmax(-1) @ v
    return self.wo(out.permute(0, 2, 1, 3).reshape(b, t, -1))

class Block:
  def __init__(self, dim: int, heads: int) -> None:
    self.ln1, self.attn, self.ln2 = nn.LayerNorm(dim), Attention(dim, heads), nn.LayerNorm(dim)
    self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

  def __call__(self, x: Tensor) -> Tensor:
    x = x + self.attn(self.ln1(x))
    return x + self.fc2(self.fc1(self.ln2(x)).gelu())

class TinyTransformer:
  def __init__(self, vocab: int = 16, dim: int = 8, heads: int = 2, layers: int = 2, context: int = 4) -> None:
    self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
    self.blocks = [Block(dim, heads) for _ in range(layers)]
    self.ln_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

  def __call__(self, idx: Tensor) -> Tensor:
    """Token ids (batch, time) -> next-token logits (batch, time, vocab)."""
    x = self.tok.weight[idx] + self.pos.weight[:idx.shape[1]].to(idx.device)
    for block in self.blocks: x = block(x)
    return self.head(self.ln_f(x))

def megatron_plan(sequence_parallel: bool = False) -> dict[str, ParallelStyle]:
  """Attention heads and the MLP's hidden units over "tp": q, k, v and fc1 column-wise, wo and fc2 row-wise (one
  all-reduce per pair forward, one backward); with sequence_parallel, the layernorms on sequence slices between them
  (their inputs all-gathered, the row-wise outputs reduce-scattered)."""
  seq = Shard(1) if sequence_parallel else None
  col = ColwiseParallel(input_layouts=seq) if seq else ColwiseParallel()
  row = RowwiseParallel(output_layouts=seq) if seq else RowwiseParallel()
  plan: dict[str, ParallelStyle] = {"blocks.*.attn.wq": col, "blocks.*.attn.wk": col, "blocks.*.attn.wv": col,
                                    "blocks.*.attn.wo": row, "blocks.*.fc1": col, "blocks.*.fc2": row}
  if sequence_parallel: plan.update({"blocks.*.ln1": SequenceParallel(), "blocks.*.ln2": SequenceParallel()})
  return plan
