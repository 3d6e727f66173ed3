"""A layered drawing of a directed acyclic graph (after Sugiyama): sources on top, each edge pointing down.

1. Ranks by longest path: a node sits one layer below the lowest of its sources, so every edge points down.
2. Order within a layer by barycenter: a few sweeps down and up, each placing a node at the mean position of its
   neighbours in the layers already placed, which removes most crossings of a tensor graph (a chain of ops with
   branches that meet again).
3. Coordinates: layers LAYER_GAP apart, nodes of a layer NODE_GAP apart, each layer centered on the widest.

No external tool or JS library: the page stays one offline file.
"""
from __future__ import annotations

NODE_GAP = 170.0   # horizontal distance between node centers: a box of 150 px with a margin
LAYER_GAP = 70.0   # vertical distance between layers: a box of 36 px and room for the edges
SWEEPS = 4         # barycenter sweeps down and up; more rarely changes a tensor graph's order

def ranks(n: int, edges: list[tuple[int, int]]) -> list[int]:
  """Each node's layer: the length of the longest path reaching it (edges go from source to consumer)."""
  succ: list[list[int]] = [[] for _ in range(n)]
  indegree = [0] * n
  for a, b in edges:
    succ[a].append(b)
    indegree[b] += 1
  rank = [0] * n
  ready = [i for i in range(n) if indegree[i] == 0]
  while ready:
    a = ready.pop()
    for b in succ[a]:
      rank[b] = max(rank[b], rank[a] + 1)
      indegree[b] -= 1
      if indegree[b] == 0: ready.append(b)
  assert not any(indegree), "layered: the graph has a cycle"
  return rank

def _sweep(layers: list[list[int]], neighbours: list[list[int]], order: range) -> None:
  """Reorder each layer of `order` by the mean position of each node's neighbours (those without keep their place)."""
  pos = {v: i for layer in layers for i, v in enumerate(layer)}
  for r in order:
    def barycenter(v: int) -> float:
      near = neighbours[v]
      return sum(pos[u] for u in near) / len(near) if near else float(pos[v])
    layers[r].sort(key=barycenter)
    for i, v in enumerate(layers[r]): pos[v] = i

def layered(n: int, edges: list[tuple[int, int]]) -> list[tuple[float, float]]:
  """(x, y) of each node's center, all >= 0."""
  rank = ranks(n, edges)
  layers: list[list[int]] = [[] for _ in range(max(rank, default=-1) + 1)]
  for v in range(n): layers[rank[v]].append(v)
  preds: list[list[int]] = [[] for _ in range(n)]
  succs: list[list[int]] = [[] for _ in range(n)]
  for a, b in edges:
    preds[b].append(a)
    succs[a].append(b)
  for _ in range(SWEEPS):
    _sweep(layers, preds, range(1, len(layers)))
    _sweep(layers, succs, range(len(layers) - 2, -1, -1))
  widest = max((len(layer) for layer in layers), default=0)
  where = [(0.0, 0.0)] * n
  for r, layer in enumerate(layers):
    left = (widest - len(layer)) / 2
    for i, v in enumerate(layer): where[v] = ((left + i + 0.5) * NODE_GAP, (r + 0.5) * LAYER_GAP)
  return where
