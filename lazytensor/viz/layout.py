"""A layered drawing of a directed acyclic graph (after Sugiyama): sources on top, each edge pointing down.

1. Ranks by longest path: a node sits one layer below the lowest of its sources, so every edge points down.
2. Order within a layer by barycenter: a few sweeps down and up, each placing a node at the mean position of its
   neighbours in the layers already placed, which removes most crossings of a tensor graph (a chain of ops with
   branches that meet again).
   An edge that spans several layers gets a dummy node in each layer between its ends, so it is ordered like the
   nodes and runs between boxes instead of under them.
3. Coordinates: layers LAYER_GAP apart, nodes NODE_GAP wide and dummies DUMMY_GAP, each layer centered on the widest.

No external tool or JS library: the page stays one offline file.
"""
from __future__ import annotations

from typing import NamedTuple

NODE_GAP = 170.0   # horizontal distance between node centers: a box of 150 px with a margin
LAYER_GAP = 70.0   # vertical distance between layers: a box of 36 px and room for the edges
DUMMY_GAP = 24.0   # the room an edge takes where it crosses a layer
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

class Layout(NamedTuple):
  nodes: list[tuple[float, float]]        # each node's center
  bends: list[list[tuple[float, float]]]  # each edge's points between its ends: one per layer it crosses

def layered(n: int, edges: list[tuple[int, int]]) -> Layout:
  """Where each node goes (all coordinates >= 0), and the route of each edge. An edge that crosses layers goes through
  a point in each (a dummy node, ordered with the others), so it runs between the boxes of those layers, never under
  one."""
  rank = ranks(n, edges)
  preds: list[list[int]] = [[] for _ in range(n)]
  succs: list[list[int]] = [[] for _ in range(n)]
  chains: list[list[int]] = []  # each edge's dummy nodes, top down
  for a, b in edges:
    chain = []
    for r in range(rank[a] + 1, rank[b]):
      chain.append(len(rank))
      rank.append(r)
      preds.append([])
      succs.append([])
    path = [a, *chain, b]
    for u, v in zip(path, path[1:]):
      preds[v].append(u)
      succs[u].append(v)
    chains.append(chain)
  layers: list[list[int]] = [[] for _ in range(max(rank, default=-1) + 1)]
  for v in range(len(rank)): layers[rank[v]].append(v)
  for _ in range(SWEEPS):
    _sweep(layers, preds, range(1, len(layers)))
    _sweep(layers, succs, range(len(layers) - 2, -1, -1))
  where = _place(layers, n)
  return Layout(where[:n], [[where[d] for d in chain] for chain in chains])

def _place(layers: list[list[int]], n: int) -> list[tuple[float, float]]:
  """Coordinates: a node takes NODE_GAP of its layer, a dummy DUMMY_GAP; each layer centered on the widest."""
  def gap(v: int) -> float: return NODE_GAP if v < n else DUMMY_GAP
  widest = max((sum(map(gap, layer)) for layer in layers), default=0.0)
  where = [(0.0, 0.0)] * sum(map(len, layers))
  for r, layer in enumerate(layers):
    x = (widest - sum(map(gap, layer))) / 2
    for v in layer:
      where[v] = (x + gap(v) / 2, (r + 0.5) * LAYER_GAP)
      x += gap(v)
  return where
