"""The recorder behind VIZ: while it listens, what the run did becomes a JSON model of plain lists and dicts.

It listens to four places of the pipeline (each a list of callables there, empty while VIZ is off, so recording costs
nothing then): the scheduler's graphs scheduled anew (schedule/scheduler.py `schedule_listeners`), the named rewrite
passes (uop/ops.py `rewrite_listeners`), BEAM's timed candidates (opt/search.py `candidate_listeners`) and the
kernels compiled and schedules run (engine/realize.py `kernel_listeners`, `run_listeners`). Rewrite passes belong to
the next schedule or kernel recorded: the scheduler's passes come before it tells its listeners, a kernel's lowering
before it is compiled.

Everything is turned into JSON-ready values when it is recorded, so the model holds no UOp (nothing is kept alive)
and the page, written or served from another thread, never walks a graph.
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from lazytensor.codegen.program import ProgramSpec
from lazytensor.engine import realize
from lazytensor.helpers import ansistrip
from lazytensor.opt import search
from lazytensor.opt.kernel import AxisKind, Kernel, Opt
from lazytensor.schedule import materialize, scheduler
from lazytensor.schedule.cache import ScheduleItem
from lazytensor.uop import ops
from lazytensor.uop.ops import Ops, UOp, pretty_print
from lazytensor.viz.layout import layered

# the CSS of the terminal colors that DEBUG>=3 gives each axis kind (opt/kernel.py AxisKind): (normal, bright)
CSS_COLORS = {"blue": ("#2f6fdf", "#5fa8ff"), "cyan": ("#0fa8b8", "#5fe0ee"), "green": ("#2e9e44", "#66d97a"),
              "red": ("#d23c3c", "#ff7070"), "magenta": ("#b23cc8", "#e07af0"), "yellow": ("#c9a400", "#f0d04a"),
              "white": ("#8a8a8a", "#c8c8c8")}  # grey on the page's white background
MAX_GRAPH_NODES = 2000    # a larger tensor graph is summarized (its node count), not drawn: a browser chokes on it
MAX_PASSES = 200          # rewrite passes kept per schedule or kernel (BEAM with PARALLEL=0 lowers each candidate)
PASS_LISTING_NODES = 300  # a pass's graph before and after is listed up to this many nodes (pretty_print's limit)
NOT_DRAWN = {Ops.SINK, Ops.DEVICE}  # in every graph, and saying nothing about it

def axis_css(kind: AxisKind) -> str:
  color, bright = kind.value
  return CSS_COLORS[color][int(bright)]

def legend() -> list[dict[str, str]]:
  return [{"kind": kind.name.lower(), "color": axis_css(kind)} for kind in AxisKind]

def opt_text(o: Opt) -> str: return f"{o.op.name}({o.axis}, {o.amt})"

def ast_id(ast: UOp) -> str: return ast.key.hex()[:16]

def _label(u: UOp) -> str:
  """A node's op and the part of its arg that fits in a box."""
  if u.op is Ops.VIEW: return f"VIEW {u.arg.shape}"
  if u.op in (Ops.REDUCE_AXIS, Ops.CONST, Ops.COPY, Ops.CAST): return f"{u.op.name} {u.arg}"[:40]
  return u.op.name

def _describe(u: UOp) -> str:
  arg = "" if u.arg is None else f"\narg={u.arg!r}"[:400]
  return f"{u.op.name} {u.dtype}{arg}"

class Recorder:
  """The model of what the run did: schedules (the graph, its kernels and buffers, why each was materialized) and
  kernels (shape and axis kinds, opts, BEAM's candidates, rewrite passes, source, runs)."""
  def __init__(self) -> None:
    self.lock = threading.Lock()   # the server reads the model from its own thread
    self.version = 0  # grows with every schedule and kernel recorded: a page written at this version is current
    self.clear()

  def clear(self) -> None:
    """Forget what was recorded (a page shows what runs from now on: after a warm-up, say)."""
    with self.lock:
      self.schedules: list[dict[str, Any]] = []
      self.kernels: list[dict[str, Any]] = []
      self.kernel_of: dict[str, int] = {}   # ast_id -> index in kernels of its latest compile
      self.runs: dict[str, int] = {}        # ast_id -> how many times a schedule ran it
      self.candidates: dict[str, list[dict[str, Any]]] = {}  # ast_id -> BEAM's timed candidates, until it compiles
      self.passes: list[dict[str, Any]] = []  # rewrite passes since the last schedule or kernel recorded
      self.dropped_passes = 0
      self.version += 1

  # ---- listening ----

  def listeners(self) -> list[tuple[list[Any], Callable[..., None]]]:
    """Each list of the pipeline with the method that listens to it."""
    return [(scheduler.schedule_listeners, self.on_schedule), (ops.rewrite_listeners, self.on_rewrite),
            (search.candidate_listeners, self.on_candidate), (realize.kernel_listeners, self.on_kernel),
            (realize.run_listeners, self.on_run)]

  def attach(self) -> None:
    for where, listener in self.listeners():
      if listener not in where: where.append(listener)

  def detach(self) -> None:
    for where, listener in self.listeners():
      if listener in where: where.remove(listener)

  def on_rewrite(self, name: str, before: UOp, after: UOp) -> None:
    if len(self.passes) >= MAX_PASSES:
      self.dropped_passes += 1
      return
    changed = before is not after
    self.passes.append({"name": name, "changed": changed, "before": pretty_print(before, PASS_LISTING_NODES),
                        "after": pretty_print(after, PASS_LISTING_NODES) if changed else ""})

  def _take_passes(self) -> dict[str, Any]:
    taken = {"passes": self.passes, "dropped_passes": self.dropped_passes}
    self.passes, self.dropped_passes = [], 0
    return taken

  def on_candidate(self, k: Kernel, seconds: float) -> None:
    time_us = seconds * 1e6 if math.isfinite(seconds) else None
    self.candidates.setdefault(ast_id(k.ast), []).append({"opts": [opt_text(o) for o in k.applied_opts],
                                                          "time_us": time_us})

  def on_kernel(self, k: Kernel, spec: ProgramSpec) -> None:
    key = ast_id(k.ast)
    record = {"ast": key, "name": ansistrip(k.name), "function": spec.name,
              "axes": [{"size": s, "kind": kind.name.lower(), "color": axis_css(kind)}
                       for s, kind in zip(k.full_shape, k.kinds)],
              "opts": [opt_text(o) for o in k.applied_opts], "candidates": self.candidates.pop(key, []),
              "launch": spec.launch.kwargs(), "source": spec.source, **self._take_passes()}
    with self.lock:
      self.kernel_of[key] = len(self.kernels)
      self.kernels.append(record)
      self.version += 1

  def on_run(self, items: list[ScheduleItem]) -> None:
    with self.lock:
      for it in items:
        key = ast_id(it.ast)
        self.runs[key] = self.runs.get(key, 0) + 1
    # passes of this realize that no record took (the schedule came from the cache) belong to nothing shown
    self._take_passes()

  def on_schedule(self, sink: UOp, reasons: dict[UOp, str], per_root: list[tuple[UOp, tuple[ScheduleItem, ...]]]
                  ) -> None:
    record = {"graph": tensor_graph(sink, reasons, [r for r, _ in per_root]),
              "kernels": schedule_graph(per_root, reasons), **self._take_passes()}
    with self.lock:
      self.schedules.append(record)
      self.version += 1

  # ---- the model ----

  def model(self) -> dict[str, Any]:
    """The whole model, JSON-ready: what the page draws."""
    with self.lock:
      runs = dict(self.runs)
      return {"legend": legend(), "schedules": list(self.schedules), "kernels": list(self.kernels),
              "kernel_of": dict(self.kernel_of), "runs": runs, "version": self.version}

def _computed_by(roots: list[UOp]) -> dict[UOp, list[int]]:
  """Each node of the graph -> the kernels (indices into roots) that compute it: a kernel computes its root and what
  lies under it down to the leaves and the other roots, which it reads."""
  is_root = set(roots)
  out: dict[UOp, list[int]] = {}
  for i, root in enumerate(roots):
    stack, seen = [root], set()
    while stack:
      n = stack.pop()
      if n in seen or n.op in materialize.LEAVES: continue
      seen.add(n)
      out.setdefault(n, []).append(i)
      stack.extend(s for s in n.src if s not in is_root)
  return out

def tensor_graph(sink: UOp, reasons: dict[UOp, str], roots: list[UOp]) -> dict[str, Any]:
  """The graph as the fusion rules see it (movement ops folded into VIEWs): each node with the kernels that compute it
  and, where it is materialized, why; laid out in layers."""
  nodes = [n for n in sink.toposort if n.op not in NOT_DRAWN]
  if len(nodes) > MAX_GRAPH_NODES: return {"too_large": len(nodes), "nodes": [], "edges": [], "bends": []}
  index = {n: i for i, n in enumerate(nodes)}
  edges = [(index[s], index[n]) for n in nodes for s in n.src if s in index]
  computed = _computed_by(roots)
  layout = layered(len(nodes), edges)
  return {"nodes": [{"label": _label(n), "title": _describe(n), "shape": list(n.shape),
                     "kernels": computed.get(n, []), "reason": reasons.get(n), "x": x, "y": y}
                    for n, (x, y) in zip(nodes, layout.nodes)], "edges": edges, "bends": layout.bends}

def _written(it: ScheduleItem) -> set[int]:
  """The positions in it.bufs that the item writes: a copy's destination, a kernel's stored buffers."""
  if it.ast.op is Ops.COPY: return {0}
  return {store.src[0].arg for store in it.ast.src if store.op is Ops.STORE}

def schedule_graph(per_root: list[tuple[UOp, tuple[ScheduleItem, ...]]], reasons: dict[UOp, str]) -> dict[str, Any]:
  """The kernels (and copies) in the order they run, with the buffers between them: a buffer node for each value a
  buffer holds (a reused or assigned buffer is a new node at each write, so the graph has no cycle)."""
  nodes: list[dict[str, Any]] = []
  edges: list[tuple[int, int]] = []
  holder: dict[int, int] = {}  # id of a Buffer -> the node of the value it holds now
  for root_index, (root, items) in enumerate(per_root):
    for it in items:
      written, me = _written(it), len(nodes)
      nodes.append({"kind": "copy" if it.ast.op is Ops.COPY else "kernel", "ast": ast_id(it.ast), "root": root_index,
                    "reason": reasons[root], "label": "copy" if it.ast.op is Ops.COPY else ""})
      for i, b in enumerate(it.bufs):
        if i in written: continue
        if id(b) not in holder:
          holder[id(b)] = len(nodes)
          nodes.append(_buffer_node(b.size, b.dtype.name, str(b.device)))
        edges.append((holder[id(b)], me))
      for i in sorted(written):
        b = it.bufs[i]
        holder[id(b)] = len(nodes)
        nodes.append(_buffer_node(b.size, b.dtype.name, str(b.device)))
        edges.append((me, holder[id(b)]))
  layout = layered(len(nodes), edges)
  for node, (x, y) in zip(nodes, layout.nodes): node.update(x=x, y=y)
  return {"nodes": nodes, "edges": edges, "bends": layout.bends, "count": sum(len(items) for _, items in per_root)}

def _buffer_node(size: int, dtype: str, device: str) -> dict[str, Any]:
  return {"kind": "buffer", "label": f"{dtype}[{size}]", "title": f"{size} x {dtype} on {device}"}
