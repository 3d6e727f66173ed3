"""A mixture-of-experts layer (GShard's), on one device or with its experts spread over a mesh axis ("ep").

Routing: a linear gate gives each token a softmax over the experts; the token goes to its top_k experts, its weight
for each the gate's probability renormalized over those k. Each expert takes at most `capacity` tokens of a group
(ceil(capacity_factor * top_k * tokens of the group / experts)); places are given in order, every token's first choice
before any second choice (GShard's priority), and a token that finds its expert full is dropped there: that expert
adds nothing to its output, and its other experts' weights are not renormalized (a token dropped everywhere gives
zeros, which a residual connection around the layer carries over). Tokens are routed in groups (the `groups` leading
parts of the tokens), each group with its own capacity, as GShard's.

The auxiliary load-balancing loss (GShard's, Switch's): experts * sum over experts of (the share of the group's tokens
whose first choice it is) * (the mean gate probability it gets), averaged over the groups; 1 when the load is even.
After each call it is `aux_loss`, to be added to the training loss with a small coefficient.

Expert parallelism: `expert_parallel(mesh, axis)` spreads the experts over the devices along `axis` (experts / n on
each) and makes each device's tokens a group (the tokens are split over all the mesh's axes, the first axis major).
Each device routes its group, sends each expert's slots to the device holding it with all_to_all over `axis`, runs its
experts on the slots of every device, and sends the results back with the inverse all_to_all: the same result as one
device with `groups` = the mesh's size. Along other mesh axes (data parallel) the experts are replicated.
"""
from __future__ import annotations

import math

from lazytensor.frontend.mixin.multi import DeviceMesh, SpecEntry
from lazytensor.frontend.tensor import Tensor
from lazytensor.parallel.shard_map import all_to_all, pmean, shard_map


class MoE:
  """Experts that are two-layer MLPs, relu(x @ w1[e]) @ w2[e], on tokens of `dim` features routed to `top_k` of
  `num_experts` (see the module's docstring). The weights are stacked over the experts: w1 (experts, dim, hidden), w2
  (experts, hidden, dim), gate (dim, experts).

  >>> from lazytensor import Tensor, nn
  >>> moe = nn.MoE(4, 8, num_experts=4, top_k=2)
  >>> y = moe(Tensor.rand(2, 6, 4))
  >>> y.shape, moe.aux_loss.shape
  ((2, 6, 4), ())
  """
  def __init__(self, dim: int, hidden: int, num_experts: int, top_k: int = 2, capacity_factor: float = 1.25,
               groups: int = 1) -> None:
    for name, v in (("dim", dim), ("hidden", hidden), ("num_experts", num_experts), ("top_k", top_k),
                    ("groups", groups)):
      if isinstance(v, bool) or not isinstance(v, int) or v < 1: raise ValueError(f"MoE: {name} must be a positive "
                                                                                   f"int, got {v!r}")
    if top_k > num_experts: raise ValueError(f"MoE: top_k={top_k} is more than the {num_experts} experts")
    if not capacity_factor > 0: raise ValueError(f"MoE: capacity_factor must be positive, got {capacity_factor!r}")
    self.top_k, self.capacity_factor, self.groups = top_k, capacity_factor, groups
    self.gate = Tensor.uniform(dim, num_experts, low=-1 / math.sqrt(dim), high=1 / math.sqrt(dim))
    self.w1 = Tensor.uniform(num_experts, dim, hidden, low=-1 / math.sqrt(dim), high=1 / math.sqrt(dim))
    self.w2 = Tensor.uniform(num_experts, hidden, dim, low=-1 / math.sqrt(hidden), high=1 / math.sqrt(hidden))
    self.mesh: DeviceMesh | None = None
    self.axis = "ep"
    self.aux_loss: Tensor | None = None

  @property
  def num_experts(self) -> int: return self.gate.shape[1]

  def expert_parallel(self, mesh: DeviceMesh, axis: str = "ep") -> MoE:
    """Spread the experts over the devices along the mesh axis `axis` (moving the weights now) and route each
    device's tokens as a group of its own; returns self."""
    if not isinstance(mesh, DeviceMesh): raise TypeError(f"MoE.expert_parallel: expected a DeviceMesh, got {mesh!r}")
    if axis not in mesh.names:
      raise ValueError(f"MoE.expert_parallel: {axis!r} is not an axis of the mesh; its axes are {mesh.names}")
    if self.num_experts % mesh.axis_size(axis):
      raise ValueError(f"MoE.expert_parallel: {self.num_experts} experts do not split evenly over the "
                       f"{mesh.axis_size(axis)} devices along {axis!r}")
    self.mesh, self.axis = mesh, axis
    self.gate.shard_(mesh, None)
    for w in (self.w1, self.w2): w.shard_(mesh, (axis, None, None))
    return self

  def __call__(self, x: Tensor) -> Tensor:
    dim = self.gate.shape[0]
    if x.ndim == 0 or x.shape[-1] != dim:
      raise ValueError(f"MoE: expected tokens of {dim} features (..., {dim}), got a tensor of shape {x.shape}")
    tokens = x.reshape(-1, dim)
    groups = self.groups if self.mesh is None else math.prod(self.mesh.shape)
    if tokens.shape[0] % groups:
      raise ValueError(f"MoE: {tokens.shape[0]} tokens do not split into {groups} groups of one size")
    if self.mesh is None:
      y, self.aux_loss = self._moe(tokens.reshape(groups, -1, dim), self.gate, self.w1, self.w2, None)
      return y.reshape(x.shape)
    names = self.mesh.names
    rows: SpecEntry = names[0] if len(names) == 1 else names
    f = shard_map(self._expert_parallel_group, self.mesh, in_specs=((rows, None), None, (self.axis,), (self.axis,)),
                  out_specs=((rows, None), None))
    y, self.aux_loss = f(tokens, self.gate, self.w1, self.w2)
    return y.reshape(x.shape)

  def _expert_parallel_group(self, tokens: Tensor, gate: Tensor, w1: Tensor, w2: Tensor) -> tuple[Tensor, Tensor]:
    """One device's part (inside shard_map): its tokens as one group, its experts' weights."""
    assert self.mesh is not None
    y, aux = self._moe(tokens.reshape(1, *tokens.shape), gate, w1, w2, self.axis)
    return y.reshape(tokens.shape), pmean(aux, self.mesh.names)

  def _moe(self, x: Tensor, gate: Tensor, w1: Tensor, w2: Tensor, axis: str | None) -> tuple[Tensor, Tensor]:
    """Tokens x (groups, tokens per group, dim) through the layer: the output (same shape) and the aux loss. axis:
    inside shard_map, the mesh axis the experts are spread over (w1, w2 hold this device's)."""
    groups, size, _ = x.shape
    experts = gate.shape[1]
    capacity = math.ceil(self.capacity_factor * self.top_k * size / experts)
    dispatch, combine, aux = _route(x @ gate, self.top_k, capacity)
    slots = Tensor.einsum("gsec,gsd->gecd", dispatch, x)  # each expert's slots: (groups, experts, capacity, dim)
    if axis is None:
      flat = slots.permute(1, 0, 2, 3).reshape(experts, groups * capacity, -1)
      done = _experts(flat, w1, w2).reshape(experts, groups, capacity, -1).permute(1, 0, 2, 3)
    else:
      # to the devices holding the experts: (experts here, capacity * devices, dim), the slots of device j at part j
      here = all_to_all(slots[0], axis, split_axis=0, concat_axis=1, tiled=True)
      done = all_to_all(_experts(here, w1, w2), axis, split_axis=1, concat_axis=0, tiled=True).unsqueeze(0)
    return Tensor.einsum("gsec,gecd->gsd", combine, done), aux

def _experts(slots: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
  """Each expert's MLP on its slots (experts, slots, dim)."""
  return (slots @ w1).relu() @ w2

def _route(logits: Tensor, top_k: int, capacity: int) -> tuple[Tensor, Tensor, Tensor]:
  """From the gate's logits (groups, tokens, experts): dispatch (groups, tokens, experts, capacity), 1 where a token
  takes a slot of an expert; combine, the same holding the token's weight for that expert; the aux loss."""
  groups, size, experts = logits.shape
  probs = logits.softmax(-1)
  top, chosen = probs.topk(top_k, -1)  # (groups, tokens, k)
  weights = top / top.sum(-1, keepdim=True)
  picks = chosen.one_hot(experts).float()  # (groups, tokens, k, experts)
  # places in order of choice, then of token: every first choice before any second one
  order = picks.permute(0, 2, 1, 3).reshape(groups, top_k * size, experts)
  place = order.cumsum(1) - 1
  kept = order * (place < capacity).float()
  slot = (place * kept).sum(-1).cast("int32").one_hot(capacity).float() * kept.sum(-1, keepdim=True)
  per_choice = (kept.unsqueeze(-1) * slot.unsqueeze(-2)).reshape(groups, top_k, size, experts, capacity)
  dispatch = per_choice.sum(1)
  combine = (per_choice * weights.permute(0, 2, 1).reshape(groups, top_k, size, 1, 1)).sum(1)
  first_share = picks[:, :, 0].mean(1)  # (groups, experts): the share of tokens whose first choice each is
  aux = ((first_share * probs.mean(1)).sum(-1) * experts).mean()
  return dispatch, combine, aux
