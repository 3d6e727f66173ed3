"""Loop-level graph -> linear program: each node placed in the innermost loop it needs, loops opened and closed.

A REDUCE becomes an accumulator: DEFINE_ACC before its loops, LOAD(acc)/ASSIGN inside them, and a LOAD(acc, update)
after them. Every node lives in the loops of the ranges it depends on (plus the loops those ranges sit in); the
loops form a tree, and each level of the tree is put in dependency order with whole child loops as single items.
"""
from __future__ import annotations

import heapq
import itertools

from lazytensor.uop.ops import Ops, UOp, identity_element

_acc_ids = itertools.count()

def _expand_reduces(sink: UOp) -> tuple[UOp, dict[UOp, tuple[UOp, ...]]]:
  """Replace each REDUCE by accumulator ops; returns the graph and, for each after-loop read, the ranges it closes."""
  done: dict[UOp, UOp] = {}
  closes: dict[UOp, tuple[UOp, ...]] = {}
  for node in sink.toposort:
    new_src = tuple(done[s] for s in node.src)
    if node.op is not Ops.REDUCE:
      done[node] = node if new_src == node.src else node.replace(src=new_src)
      continue
    is_mma = isinstance(node.arg, tuple) and node.arg[0] is Ops.WMMA
    operands, ranges = (new_src[:2], new_src[2:]) if is_mma else (new_src[:1], new_src[1:])
    init = 0 if is_mma else identity_element(node.arg, node.dtype.scalar())
    acc = UOp(Ops.DEFINE_ACC, node.dtype, (UOp.const(node.dtype, init),), next(_acc_ids))
    running = UOp(Ops.LOAD, node.dtype, (acc,) + ranges)
    # a tensor-core reduce accumulates D = A*B + C; any other reduce combines the running value with the new one
    if is_mma: step = UOp(Ops.WMMA, node.dtype, (*operands, running), node.arg[1])
    else: step = running.alu(node.arg, operands[0])
    update = UOp(Ops.ASSIGN, node.dtype, (acc, step))
    result = UOp(Ops.LOAD, node.dtype, (acc, update))
    closes[result] = ranges
    done[node] = result
  return done[sink], closes

def _axis(r: UOp) -> int: return r.arg[0]

class _Placement:
  """For every node, the loops it must run in, innermost last."""
  def __init__(self, sink: UOp, closes: dict[UOp, tuple[UOp, ...]]) -> None:
    # a reduce result lives at least in the loops around the loops it closes: two reduces over the same ranges, one of
    # them independent of the outer loops (a count of valid window positions), share those loops, so both results
    # come after them. And a node that reads a reduce's range from outside the reduce (an index check's record of an
    # index computed in the reduce loop) needs that loop inside its own other loops: the reduce is then computed there
    # too, since a loop runs in one place. Grown until both hold.
    extra: dict[UOp, frozenset[UOp]] = {}
    reduce_ranges = frozenset(r for rs in closes.values() for r in rs)
    while True:
      self._contexts(sink, closes, extra)
      self.enclosing = self._enclosing(sink, closes)
      grown = False
      for result, rs in closes.items():
        need = frozenset().union(*(self.enclosing[r] for r in rs))
        need |= frozenset().union(*(c - reduce_ranges for c in self.ctx.values() if not c.isdisjoint(rs)))
        if not (need := need - set(rs)) <= self.ctx[result]:
          extra[result], grown = extra.get(result, frozenset()) | need, True
      if not grown: break
    self.path: dict[UOp, tuple[UOp, ...]] = {n: self._path(self.ctx[n]) for n in sink.toposort}
    for result in closes: self.path[result.src[0]] = self._path(self.ctx[result])

  def _contexts(self, sink: UOp, closes: dict[UOp, tuple[UOp, ...]], extra: dict[UOp, frozenset[UOp]]) -> None:
    self.ctx: dict[UOp, frozenset[UOp]] = {}
    for node in sink.toposort:
      c = frozenset().union(*(self.ctx[s] for s in node.src))
      if node.op is Ops.RANGE: c = c | {node}
      if node in closes: c = (c - set(closes[node])) | extra.get(node, frozenset())
      if node.op is Ops.DEFINE_ACC: c = frozenset()
      self.ctx[node] = c
    # an accumulator is (re)initialized in the loops its result lives in
    for result in closes:
      acc = result.src[0]
      self.ctx[acc] = self.ctx[result]

  def _enclosing(self, sink: UOp, closes: dict[UOp, tuple[UOp, ...]]) -> dict[UOp, frozenset[UOp]]:
    ranges = sorted((n for n in sink.toposort if n.op is Ops.RANGE), key=_axis)
    reduce_ranges = {r for rs in closes.values() for r in rs}
    enclosing: dict[UOp, frozenset[UOp]] = {}
    for r in ranges:
      if r in reduce_ranges: continue
      enclosing[r] = frozenset(o for o in ranges if o not in reduce_ranges and _axis(o) < _axis(r))
    for result, rs in closes.items():
      for j, r in enumerate(rs):
        enclosing[r] = enclosing.get(r, frozenset()) | self.ctx[result] | frozenset(rs[:j])
    return enclosing

  def _path(self, ctx: frozenset[UOp]) -> tuple[UOp, ...]:
    todo, full = list(ctx), set(ctx)
    while todo:
      for e in self.enclosing.get(todo.pop(), frozenset()):
        if e not in full:
          full.add(e)
          todo.append(e)
    return tuple(sorted(full, key=_axis))

def linearize(sink: UOp) -> list[UOp]:
  """The program in execution order; RANGE opens a loop and ENDRANGE closes it."""
  sink, closes = _expand_reduces(sink)
  place = _Placement(sink, closes)
  order = {n: i for i, n in enumerate(sink.toposort)}
  nodes = [n for n in sink.toposort if n.op not in (Ops.SINK, Ops.NOOP)]
  out: list[UOp] = []
  _emit_level((), nodes, place, order, out)
  return out

def _emit_level(prefix: tuple[UOp, ...], nodes: list[UOp], place: _Placement, order: dict[UOp, int],
                out: list[UOp]) -> None:
  depth = len(prefix)
  def item_of(n: UOp) -> UOp | None:
    p = place.path[n]
    if p[:depth] != prefix or (len(p) == depth and n.op is Ops.RANGE and n in prefix): return None
    return n if len(p) == depth else p[depth]  # a node here, or the child loop (named by its RANGE) holding it
  members: dict[UOp, list[UOp]] = {}
  deps: dict[UOp, set[UOp]] = {}
  for n in nodes:
    it = item_of(n)
    if it is None: continue
    members.setdefault(it, []).append(n)
    deps.setdefault(it, set()).update(d for s in n.src if (d := item_of(s)) is not None and d is not it)
  for it in _toposort_items(deps, order):
    if it.op is Ops.RANGE:  # a range's own path ends with itself, so here it always names a child loop
      out.append(it)
      _emit_level(prefix + (it,), [m for m in members[it] if m is not it], place, order, out)
      out.append(UOp(Ops.ENDRANGE, it.dtype, (it,)))
    else: out.append(it)

def _toposort_items(deps: dict[UOp, set[UOp]], order: dict[UOp, int]) -> list[UOp]:
  """Kahn's algorithm; ties go to the item that came first in the graph's own order, so output is deterministic."""
  indeg = {it: len(ds) for it, ds in deps.items()}
  users: dict[UOp, list[UOp]] = {}
  for it, ds in deps.items():
    for d in ds: users.setdefault(d, []).append(it)
  ready = [(order[it], it) for it, n in indeg.items() if n == 0]
  heapq.heapify(ready)
  result = []
  while ready:
    _, it = heapq.heappop(ready)
    result.append(it)
    for u in users.get(it, []):
      indeg[u] -= 1
      if indeg[u] == 0: heapq.heappush(ready, (order[u], u))
  assert len(result) == len(deps), "cycle in the loop-level graph"
  return result
