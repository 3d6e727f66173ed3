"""BERT's encoder (Devlin et al. 2018) for lazytensor: token, position and segment embeddings, then post-norm blocks of
bidirectional self-attention and an MLP with the exact (erf) gelu. The default configuration is BERT-base; smaller
ones come from the same Config. The output is the last layer's hidden states (no pooler, no task head).
"""
from __future__ import annotations

from dataclasses import dataclass

from lazytensor import Tensor, nn


@dataclass(frozen=True)
class Config:
  vocab: int = 30522
  context: int = 512
  dim: int = 768
  layers: int = 12
  heads: int = 12
  segments: int = 2
  eps: float = 1e-12

class Layer:
  def __init__(self, cfg: Config) -> None:
    self.heads = cfg.heads
    self.query, self.key, self.value = (nn.Linear(cfg.dim, cfg.dim) for _ in range(3))
    self.attn_out, self.attn_norm = nn.Linear(cfg.dim, cfg.dim), nn.LayerNorm(cfg.dim, eps=cfg.eps)
    self.intermediate, self.output = nn.Linear(cfg.dim, 4 * cfg.dim), nn.Linear(4 * cfg.dim, cfg.dim)
    self.out_norm = nn.LayerNorm(cfg.dim, eps=cfg.eps)

  def __call__(self, x: Tensor) -> Tensor:
    batch, time_, dim = x.shape
    q, k, v = (proj(x).reshape(batch, time_, self.heads, dim // self.heads).transpose(1, 2)
               for proj in (self.query, self.key, self.value))
    attended = q.scaled_dot_product_attention(k, v).transpose(1, 2).reshape(batch, time_, dim)
    x = self.attn_norm(x + self.attn_out(attended))
    return self.out_norm(x + self.output(self.intermediate(x).gelu(approximate="none")))

class Bert:
  def __init__(self, cfg: Config) -> None:
    self.word, self.position = nn.Embedding(cfg.vocab, cfg.dim), nn.Embedding(cfg.context, cfg.dim)
    self.segment, self.norm = nn.Embedding(cfg.segments, cfg.dim), nn.LayerNorm(cfg.dim, eps=cfg.eps)
    self.layers = [Layer(cfg) for _ in range(cfg.layers)]

  def __call__(self, tokens: Tensor, segments: Tensor | None = None) -> Tensor:
    """Token ids (batch, time) and their segment ids (default all 0) -> hidden states (batch, time, dim)."""
    # rows of the tables by indexing (a gather), as generate.py's GPT-2 reads its embeddings
    x = self.word.weight[tokens] + self.position.weight[:tokens.shape[1]]
    x = x + (self.segment.weight[0] if segments is None else self.segment.weight[segments])
    return self.norm(x).sequential(self.layers)
