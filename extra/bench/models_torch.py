"""The torch twins of extra/models/resnet.py, extra/models/bert.py and extra/examples/generate.py's GPT-2, for
models.py: the same architectures with the same parameter names, so that lazytensor's state dict loads into them name
for name. Imported after models.py has set the thread count (torch reads it at import). The GPT-2 twin keeps its keys
and values the straightforward way: each step concatenates the new position's to the past ones.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

Past = list[tuple[torch.Tensor, torch.Tensor]]

# ---- ResNet (the names of torchvision's) ----

class BasicBlock(nn.Module):
  expansion = 1

  def __init__(self, cin: int, planes: int, stride: int) -> None:
    super().__init__()
    self.conv1, self.bn1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
    self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False), nn.BatchNorm2d(planes)
    self.downsample = shortcut(cin, planes * self.expansion, stride)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
    return (out + self.downsample(x)).relu()

class Bottleneck(nn.Module):
  expansion = 4

  def __init__(self, cin: int, planes: int, stride: int) -> None:
    super().__init__()
    self.conv1, self.bn1 = nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes)
    self.conv2, self.bn2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
    self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
    self.bn3 = nn.BatchNorm2d(planes * self.expansion)
    self.downsample = shortcut(cin, planes * self.expansion, stride)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu())).relu()
    return (self.bn3(self.conv3(out)) + self.downsample(x)).relu()

def shortcut(cin: int, cout: int, stride: int) -> nn.Sequential:
  if stride == 1 and cin == cout: return nn.Sequential()
  return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

class ResNet(nn.Module):
  def __init__(self, bottleneck: bool, depths: list[int], classes: int, width: int) -> None:
    super().__init__()
    block: Any = Bottleneck if bottleneck else BasicBlock
    self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
    cin, stages = width, []
    for i, depth in enumerate(depths):
      blocks = []
      for j in range(depth):
        blocks.append(block(cin, width * 2 ** i, 2 if i > 0 and j == 0 else 1))
        cin = width * 2 ** i * block.expansion
      stages.append(nn.Sequential(*blocks))
    self.layer1, self.layer2, self.layer3, self.layer4 = stages
    self.fc = nn.Linear(cin, classes)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    x = F.max_pool2d(self.bn1(self.conv1(x)).relu(), 3, 2, 1)
    return self.fc(self.layer4(self.layer3(self.layer2(self.layer1(x)))).mean((2, 3)))

# ---- BERT ----

class BertLayer(nn.Module):
  def __init__(self, dim: int, heads: int, eps: float) -> None:
    super().__init__()
    self.heads = heads
    self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
    self.attn_out, self.attn_norm = nn.Linear(dim, dim), nn.LayerNorm(dim, eps=eps)
    self.intermediate, self.output = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
    self.out_norm = nn.LayerNorm(dim, eps=eps)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    batch, time_, dim = x.shape
    q, k, v = (proj(x).reshape(batch, time_, self.heads, dim // self.heads).transpose(1, 2)
               for proj in (self.query, self.key, self.value))
    attended = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, time_, dim)
    x = self.attn_norm(x + self.attn_out(attended))
    return self.out_norm(x + self.output(F.gelu(self.intermediate(x))))

class Bert(nn.Module):
  def __init__(self, vocab: int, context: int, dim: int, layers: int, heads: int, segments: int, eps: float) -> None:
    super().__init__()
    self.word, self.position = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
    self.segment, self.norm = nn.Embedding(segments, dim), nn.LayerNorm(dim, eps=eps)
    self.layers = nn.ModuleList(BertLayer(dim, heads, eps) for _ in range(layers))

  def forward(self, tokens: torch.Tensor) -> torch.Tensor:
    x = self.norm(self.word(tokens) + self.position.weight[:tokens.shape[1]] + self.segment.weight[0])
    for layer in self.layers: x = layer(x)
    return x

# ---- GPT-2 ----

class Conv1D(nn.Module):
  def __init__(self, fan_in: int, fan_out: int) -> None:
    super().__init__()
    self.weight, self.bias = nn.Parameter(torch.empty(fan_in, fan_out)), nn.Parameter(torch.empty(fan_out))

  def forward(self, x: torch.Tensor) -> torch.Tensor: return x @ self.weight + self.bias

class Attention(nn.Module):
  def __init__(self, dim: int, heads: int) -> None:
    super().__init__()
    self.heads, self.c_attn, self.c_proj = heads, Conv1D(dim, 3 * dim), Conv1D(dim, dim)

  def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, Any]:
    batch, time_, dim = x.shape
    q, k, v = self.c_attn(x).reshape(batch, time_, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
    if past is not None: k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
    scores = q @ k.transpose(2, 3) / math.sqrt(q.shape[-1])
    if time_ > 1: scores = scores.masked_fill(torch.ones(time_, k.shape[2]).tril(k.shape[2] - time_) == 0, -math.inf)
    out = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(batch, time_, dim)
    return self.c_proj(out), (k, v)

class MLP(nn.Module):
  def __init__(self, dim: int) -> None:
    super().__init__()
    self.c_fc, self.c_proj = Conv1D(dim, 4 * dim), Conv1D(4 * dim, dim)

  def forward(self, x: torch.Tensor) -> torch.Tensor: return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

class Block(nn.Module):
  def __init__(self, dim: int, heads: int) -> None:
    super().__init__()
    self.ln_1, self.attn = nn.LayerNorm(dim), Attention(dim, heads)
    self.ln_2, self.mlp = nn.LayerNorm(dim), MLP(dim)

  def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, Any]:
    attended, kv = self.attn(self.ln_1(x), past)
    x = x + attended
    return x + self.mlp(self.ln_2(x)), kv

class GPT2(nn.Module):
  def __init__(self, vocab: int, context: int, dim: int, layers: int, heads: int) -> None:
    super().__init__()
    self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
    self.h = nn.ModuleList(Block(dim, heads) for _ in range(layers))
    self.ln_f = nn.LayerNorm(dim)

  def forward(self, tokens: torch.Tensor, past: Past | None = None, last: bool = False) -> tuple[torch.Tensor, Past]:
    """Logits of every position (batch, time, vocab), or with `last` of the last one (batch, vocab), and the keys and
    values of every position so far, per layer."""
    start = 0 if past is None else past[0][0].shape[2]
    x = self.wte(tokens) + self.wpe.weight[start:start + tokens.shape[1]]
    new_past = []
    for i, block in enumerate(self.h):
      x, kv = block(x, None if past is None else past[i])
      new_past.append(kv)
    return self.ln_f(x[:, -1] if last else x) @ self.wte.weight.T, new_past
