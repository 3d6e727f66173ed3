"""Context parallelism: attention over a sequence split along a mesh axis ("cp"), by ring attention.

Inside shard_map, each device holds one block of the sequence's queries, keys and values (block r of n along the axis:
positions r*T/n to (r+1)*T/n). `ring_attention` computes its block of attention over the whole sequence without
gathering it: the keys and values go round the ring (ppermute to the next device, n-1 times), and each device folds
each block of keys it holds into its result by the online softmax (a running maximum and sum of the weights per
query, the partial output rescaled when the maximum grows), so only one block of scores exists at a time. Causal:
device r's queries see the key blocks of devices <= r; the block of its own positions is masked above the diagonal,
blocks of later positions are skipped (their devices still pass them on). Gradients flow through the ppermutes' and
the ops' rules; the running maximum is a constant to them, as the result does not depend on it.

Causal attention leaves the work uneven: device r computes r+1 blocks of scores. Load-balanced layouts (each device
holding a block from each end of the sequence) are not done here.
"""
from __future__ import annotations

from lazytensor.frontend.tensor import Tensor
from lazytensor.parallel.shard_map import axis_index, axis_size, ppermute


def ring_attention(q: Tensor, k: Tensor, v: Tensor, axis_name: str = "cp", causal: bool = False,
                   scale: float | None = None) -> Tensor:
  """softmax(q @ k^T * scale) @ v over the whole sequence, for this device's block of it (call inside shard_map, with
  q, k, v of shape (..., T/n, E) split along the sequence over the mesh axis `axis_name`): what
  scaled_dot_product_attention gives on the whole sequence, at this device's positions. scale defaults to
  1/sqrt(E); causal: position i attends to positions <= i.

  >>> from lazytensor import DeviceMesh, Tensor, shard_map
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("cp",))
  >>> q = Tensor.arange(8.0).reshape(1, 4, 2) / 8
  >>> f = shard_map(lambda q, k, v: ring_attention(q, k, v, causal=True), mesh, ((None, "cp"),) * 3, (None, "cp"))
  >>> got, want = f(q, q, q).numpy(), q.scaled_dot_product_attention(q, q, is_causal=True).numpy()
  >>> bool(abs(got - want).max() < 1e-6)
  True
  """
  if q.ndim < 2 or k.shape != v.shape[:-1] + (k.shape[-1],) or q.shape[-1] != k.shape[-1] or \
     q.shape[:-2] != k.shape[:-2]:
    raise ValueError(f"ring_attention: query {q.shape}, key {k.shape} and value {v.shape} need (..., L, E), "
                     "(..., S, E) and (..., S, Ev) with the same leading dimensions")
  if causal and q.shape[-2] != k.shape[-2]:
    raise ValueError(f"ring_attention: causal attention needs blocks of queries and keys of one length (the same "
                     f"positions), got {q.shape[-2]} and {k.shape[-2]}")
  n, me = axis_size(axis_name), int(axis_index(axis_name).item())
  scale = q.shape[-1] ** -0.5 if scale is None else scale
  ring = [(i, (i + 1) % n) for i in range(n)]
  acc: tuple[Tensor, Tensor, Tensor] | None = None  # the running (maximum, sum of weights, output) per query
  kv, width = k.cat(v, dim=-1), k.shape[-1]  # keys and values travel together: one copy a step
  for step in range(n):
    if step: kv = ppermute(kv, axis_name, ring)
    k, v = kv[..., :width], kv[..., width:]
    source = (me - step) % n  # the device whose positions the keys held now are
    if causal and source > me: continue
    scores = (q @ k.transpose(-1, -2)) * scale
    if causal and source == me:
      above = Tensor.ones(*scores.shape[-2:], dtype="bool", device=q.device).triu(1)
      scores = scores.masked_fill(above, float("-inf"))
    acc = _fold(acc, scores, v)
  assert acc is not None, "the first block a device folds in is its own"
  return acc[2] / acc[1]

def _fold(acc: tuple[Tensor, Tensor, Tensor] | None, scores: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
  """The online softmax's step: one block of scores and its values folded into the running maximum, sum and output."""
  block_max = scores.max(-1, keepdim=True).detach()
  top = block_max if acc is None else acc[0].maximum(block_max)
  weights = (scores - top).exp()
  if acc is None: return top, weights.sum(-1, keepdim=True), weights @ v
  keep = (acc[0] - top).exp()
  return top, acc[1] * keep + weights.sum(-1, keepdim=True), acc[2] * keep + weights @ v
