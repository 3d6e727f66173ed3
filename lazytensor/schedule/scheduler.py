"""The scheduler: the tensor graph -> kernels (ScheduleItems) in dependency order.

Fusion rules: elementwise ops fuse into their consumers; views are pushed down to the loads (a masked view over an
elementwise op becomes a validity check around it); a reduce fuses with the elementwise ops before it and after it.
Which nodes get a buffer of their own (are "materialized") instead is schedule/materialize.py's to decide; here the
graph is resolved (movement ops become views), each reduce is laid out for its device (operands packed, reduces
split), and each materialized node becomes a kernel, run in dependency order.
"""
from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lazytensor.codegen.program import knob_key
from lazytensor.dtype import dtypes
from lazytensor.helpers import BEAM, RING, SCALAR_ARGS, SCHEDULE_CACHE, argsort, prod
from lazytensor.opt.packing import Packing, pack_candidates, pack_choice
from lazytensor.runtime import remote
from lazytensor.runtime.device import Buffer, Device, buffer_map, new_buffer_uop
from lazytensor.schedule import cache, pack_cache
from lazytensor.schedule.cache import ScheduleItem, realized_map
from lazytensor.schedule.gather import fold_gathers
from lazytensor.schedule.index_check import IndexFlags
from lazytensor.schedule.materialize import Graph, find_realizes, is_plain_buffer_view
from lazytensor.schedule.memory import plan_memory
from lazytensor.schedule.multi import is_multi, split_multi
from lazytensor.schedule.pack_search import beam_packing
from lazytensor.schedule.reduce_split import (
  batch_block,
  gpu_split_block,
  matmul_k_block,
  matvec_block,
  split_block,
  split_reduce,
)
from lazytensor.schedule.scatter import embedded_scatters, split_scatter
from lazytensor.shape.view import ShapeTracker, ast_variables
from lazytensor.uop.graph import is_own_value
from lazytensor.uop.ops import GroupOp, Ops, PatternMatcher, UOp, UPat, graph_rewrite
from lazytensor.uop.sint import is_sym, max_size

# called with each graph scheduled anew (not for a schedule cache hit): the graph as the fusion rules see it, its
# materialized nodes with the reasons, and each of those with its items in the order they run (lazytensor/viz)
schedule_listeners: list[Callable[[UOp, dict[UOp, str], list[tuple[UOp, tuple[ScheduleItem, ...]]]], None]] = []

# the walks of deep graphs (a chain of 10**4 ops) recurse past Python's default limit of 1000 frames
sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

MOVES: dict[Ops, Callable[[ShapeTracker, Any], ShapeTracker]] = {
  Ops.RESHAPE: lambda st, a: st.reshape(a), Ops.PERMUTE: lambda st, a: st.permute(a),
  Ops.EXPAND: lambda st, a: st.expand(a), Ops.PAD: lambda st, a: st.pad(a),
  Ops.SHRINK: lambda st, a: st.shrink(a), Ops.FLIP: lambda st, a: st.flip(a),
}

def _movement_st(op: Ops, arg: Any, src_shape: tuple[int, ...]) -> ShapeTracker:
  return MOVES[op](ShapeTracker.from_shape(src_shape), arg)

def fold_movement(m: UOp, x: UOp) -> UOp:
  """A movement op becomes a VIEW, composed with the VIEW below it: the scheduler only ever sees views."""
  st = _movement_st(m.op, m.arg, x.shape)
  if x.op is Ops.VIEW: return UOp(Ops.VIEW, m.dtype, x.src, (x.arg + st).simplify())
  return UOp(Ops.VIEW, m.dtype, (x,), st)

def own_value_up(m: UOp, c: UOp) -> UOp | None:
  """A movement of a copy op's result (graph.own_value) is the own_value of the movement: the marker goes up the
  views, which fold onto the value under it as they would without it."""
  return UOp(Ops.CAST, m.dtype, (m.replace(src=(c.src[0],)),)) if is_own_value(c) else None

def read_through_own_values(u: UOp) -> UOp | None:
  """An op that consumes a copy op's result reads the value under it, so kernels and fusion are as if it were not
  there. Only where a tensor holds it (a root, a contiguous of it) it stays, for a buffer of its own."""
  src = tuple(s.src[0] if is_own_value(s) else s for s in u.src)
  return None if src == u.src else u.replace(src=src)

pm_resolve: PatternMatcher[UOp] = PatternMatcher([
  (UPat(GroupOp.Movement, src=(UPat(Ops.CAST, name="c"),), name="m"), own_value_up),      # move(own(x)) -> own(move(x))
  (UPat(GroupOp.Movement, src=(UPat.var("x"),), name="m"), fold_movement),                # movement -> VIEW
  (UPat(Ops.DETACH, src=(UPat.var("x"),)), lambda x: x),                                  # detach(x) -> x
  (UPat(GroupOp.Elementwise | {Ops.REDUCE_AXIS, Ops.ASSIGN, Ops.COPY}, name="u"),          # f(own(x)) -> f(x)
   read_through_own_values),
  (UPat(Ops.CUSTOM_GRAD, name="c"), lambda c: c.src[0]),                                  # the value alone
  (UPat(Ops.CONTIGUOUS, src=(UPat(Ops.VIEW, name="v"),)),                                 # contiguous(buffer) -> buffer
   lambda v: v if is_plain_buffer_view(v) else None),
  (UPat(Ops.COPY, src=(UPat.var("x"),), name="c"), lambda c, x: x if x.device == c.arg else None),  # copy to self -> x
  (UPat(Ops.CONTIGUOUS, src=(UPat((Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN), name="x"),)), lambda x: x),  # already dense
])

def _blocked(v: UOp, p: Packing) -> UOp:
  """The view `v` of x, reading instead a copy of the elements it reads, laid out as p says, in a buffer of its own.
  Only those elements: a slice of a larger buffer copies the slice (it copied the whole buffer: 16x as much for a
  1024 block of a 4096x4096 matrix), a strided view the elements it reads, without the gaps."""
  x, st = v.src[0], v.arg
  shape, strides = st.shape, st.views[-1].strides
  own = [a for a in range(len(shape)) if strides[a] != 0 and shape[a] > 1]  # the broadcast axes are read once
  reads = st.shrink(tuple((0, s) if a in own else (0, 1) for a, s in enumerate(shape))).reshape(tuple(shape[a]
                                                                                                       for a in own))
  # the axis is filled up with zeros to a multiple of the block (or of p.multiple)
  j, n = own.index(p.axis), shape[p.axis]
  blocks = -(-n // (p.multiple or p.block)) * (p.multiple or p.block) // p.block
  reads = reads.pad(tuple((0, blocks * p.block - n) if i == j else (0, 0) for i in range(len(reads.shape))))
  split = reads.reshape(reads.shape[:j] + (blocks, p.block) + reads.shape[j + 1:])
  others = [i for i in range(len(split.shape)) if i not in (j, j + 1)]
  if p.source_order: others.sort(key=lambda i: -abs(strides[own[i if i < j else i - 1]]))
  order = (j, *others, j + 1)
  packed_st = split.permute(order)
  packed = UOp(Ops.CONTIGUOUS, x.dtype, (UOp(Ops.VIEW, x.dtype, (x,), packed_st.simplify()),))
  back = ShapeTracker.from_shape(packed_st.shape).permute(tuple(argsort(order))).reshape(
    tuple((blocks * p.block if a == p.axis else s) if a in own else 1 for a, s in enumerate(shape)))
  back = back.shrink(tuple((0, n) if a == p.axis else (0, back.shape[a]) for a in range(len(shape)))).expand(shape)
  return UOp(Ops.VIEW, v.dtype, (packed,), back.simplify())

def _packed(r: UOp, packs: tuple[Packing, ...]) -> UOp:
  """`r`, reading the operands of its products that `packs` names from re-laid copies."""
  mul, by_operand = r.src[0], {p.operand: p for p in packs}
  if not by_operand: return r
  return r.replace(src=(mul.replace(src=tuple(_blocked(v, by_operand[j]) if j in by_operand else v
                                              for j, v in enumerate(mul.src))),))

def _probe(r: UOp, packs: tuple[Packing, ...]) -> list[tuple[UOp, tuple[Buffer, ...]]]:
  """The kernels (AST, buffers) that compute the reduce `r` alone, its operands' sources replaced by fresh buffers and
  read through `packs`: what BEAM times for each packing."""
  device, fresh = Device.first(r.device), {}
  for v in r.src[0].src:
    if (x := v.src[0]) not in fresh: fresh[x] = new_buffer_uop(device, prod(x.shape), x.dtype)
  leaves = tuple(UOp(Ops.VIEW, v.dtype, (fresh[v.src[0]],),
                     (ShapeTracker.from_shape(v.src[0].shape) + v.arg).simplify()) for v in r.src[0].src)
  alone = _packed(r.replace(src=(r.src[0].replace(src=leaves),)), packs)
  items = _schedule_graph(UOp(Ops.SINK, dtypes.void, (alone,)), pack=False)[0]
  return [(it.ast, it.bufs) for it in items]

def _pack_operand(r: UOp) -> UOp:
  """`r`, reading operands of its products from re-laid copies where the device's heuristics ask for them, or with
  BEAM, the copies of the fastest of the packings the heuristics offer (packing.pack_candidates)."""
  mul = r.src[0]
  if mul.op is not Ops.MUL or any(v.op is not Ops.VIEW for v in mul.src): return r
  device = Device[Device.first(r.device)]
  if (target := device.renderer.target) is None: return r
  operands = [v.arg for v in mul.src]
  if BEAM.value < 1: return _packed(r, pack_choice(target, r.arg[1], operands))
  candidates = pack_candidates(target, r.arg[1], operands)
  if len(candidates) == 1: return _packed(r, candidates[0])
  # the search's key: the reduce and how it reads its operands, not what computes them
  what = repr((r.arg, r.dtype, [(v.arg, v.src[0].shape, v.src[0].dtype) for v in mul.src], candidates)).encode()
  best = beam_packing(device, int(BEAM.value), what, [functools.partial(_probe, r, p) for p in candidates])
  return _packed(r, candidates[best])

def _for_device(r: UOp) -> UOp:
  """The reduce `r` as the device's heuristics lay it out: split into partial reduces (over blocks of rows on a CPU,
  of chunks on a GPU: schedule/reduce_split.py), or reading operands of its products from re-laid copies
  (_pack_operand)."""
  # a symbolic reduce is one kernel for every value: blocks and panels are sized for the numbers of one
  if is_sym(r.src[0].shape): return r
  renderer = Device[Device.first(r.device)].renderer  # one device each, after the multi pass
  block = split_block(renderer.target, r) if renderer.target is not None else gpu_split_block(renderer, r)
  if block is not None: return split_reduce(r, block)
  if (target := renderer.target) is not None and (block := matvec_block(target, r)) is not None:
    return split_reduce(r, block, outer=True)
  if target is not None and (block := matmul_k_block(target, r) or batch_block(target, r)) is not None:
    return split_reduce(r, block, outer=True, partial_of=_pack_operand)
  return _pack_operand(r)

def pack_operands(sink: UOp) -> dict[UOp, UOp]:
  """Each reduce over products reads an operand from a re-laid copy (a kernel of its own) where the device's
  heuristics ask for it (packing.pack_choice), and a reduce along a strided axis of a large operand runs in two
  (reduce_split): the tensor graph is the same on every device, its schedule is the device's. One pass, so that a
  reduce is never packed or split twice. Returns each node of `sink` -> its node in the packed graph."""
  done: dict[UOp, UOp] = {}
  for node in sink.toposort:
    new_src = tuple(done[s] for s in node.src)
    new = node if new_src == node.src else node.replace(src=new_src)
    done[node] = _for_device(new) if new.op is Ops.REDUCE_AXIS else new
  return done

class _KernelBuilder:
  """Turns a materialized node into a kernel AST: views are pushed to the leaves, other kernels' outputs are loaded."""
  def __init__(self, root: UOp, g: Graph, outputs: dict[UOp, Buffer], leaf_buffers: dict[UOp, Buffer]) -> None:
    self.root, self.g, self.outputs, self.leaf_buffers = root, g, outputs, leaf_buffers
    self.bufs: list[Buffer] = []
    self.leaf_reads: set[int] = set()  # ids of buffers read as they were before this schedule (not its outputs)
    self.root_reads: set[UOp] = set()  # the other kernels of this schedule whose outputs it loads
    self.memo: dict[tuple[UOp, ShapeTracker | None], UOp] = {}
    self.reduces: dict[UOp, UOp] = {}  # each REDUCE_AXIS of the kernel -> the graph's reduce it computes
    # each CHECK of the graph in the kernel -> its flags (schedule/index_check.py)
    self.flags: dict[UOp, IndexFlags] = {}

  def define_global(self, buf: Buffer) -> UOp:
    idx = next((i for i, b in enumerate(self.bufs) if b is buf), None)
    if idx is None:
      self.bufs.append(buf)
      idx = len(self.bufs) - 1
    return UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(size=buf.size), (), idx)

  def load(self, buf: Buffer, st: ShapeTracker) -> UOp:
    return UOp(Ops.LOAD, buf.dtype, (self.define_global(buf), UOp(Ops.VIEW, dtypes.void, (), st)))

  def build(self) -> UOp:
    root, out_buf = self.root, self.outputs[self.root]
    self.define_global(out_buf)
    if root.op is Ops.ASSIGN: value, store_st = root.src[1], root.src[0].arg  # written through the target's view
    else:
      value = root.src[0] if root.op is Ops.CONTIGUOUS else root
      store_st = ShapeTracker.from_shape(value.shape)
    pending = None
    if (red := self.g.kernel_reduce.get(root)) is not None and red.shape != value.shape:
      # the kernel runs in the reduce's shape; the store writes the same positions, seen in that shape
      pending, store_st = ShapeTracker.from_shape(value.shape).reshape(red.shape), store_st.reshape(red.shape)
    val = self.visit(value, pending, is_root=value is root)
    return UOp(Ops.SINK, dtypes.void, (self._store(out_buf, store_st, val),))

  def _store(self, buf: Buffer, st: ShapeTracker, val: UOp) -> UOp:
    return UOp(Ops.STORE, dtypes.void, (self.define_global(buf), UOp(Ops.VIEW, dtypes.void, (), st), val))

  def visit(self, node: UOp, pending: ShapeTracker | None, is_root: bool = False) -> UOp:
    key = (node, pending)
    if (hit := self.memo.get(key)) is not None: return hit
    ret = self._visit(node, pending, is_root)
    self.memo[key] = ret
    return ret

  def _visit(self, node: UOp, pending: ShapeTracker | None, is_root: bool) -> UOp:
    if not is_root and node in self.outputs:
      self.root_reads.add(node)
      # an assign wrote its buffer through the target's view (a slice of a larger buffer): read it back through it
      st = node.src[0].arg if node.op is Ops.ASSIGN else ShapeTracker.from_shape(node.shape)
      return self.load(self.outputs[node], _compose(st, pending))
    if node.op is Ops.VIEW:
      base = node.src[0]
      if base.op is Ops.BUFFER:
        self.leaf_reads.add(id(self.leaf_buffers[base]))
        return self.load(self.leaf_buffers[base], _compose(node.arg, pending))
      return self.visit(base, _compose(node.arg, pending))
    st = pending if pending is not None else ShapeTracker.from_shape(node.shape)
    if node.op in (Ops.CONST, Ops.DEFINE_VAR):  # a number, or a kernel argument that stands for one
      return UOp(node.op, node.dtype, (UOp(Ops.VIEW, dtypes.void, (), st),), node.arg)
    if node.op is Ops.IOTA: return UOp(Ops.IOTA, node.dtype, (UOp(Ops.VIEW, dtypes.void, (), st),), node.arg)
    if node.op is Ops.REDUCE_AXIS:
      assert pending is None or (pending.contiguous and pending.shape == node.shape), (
        f"reduce reached through {pending}")
      red = UOp(Ops.REDUCE_AXIS, node.dtype, (self.visit(node.src[0], None),), node.arg)
      self.reduces[red] = node
      return red
    assert node.op in GroupOp.Elementwise, f"scheduler cannot put {node.op} in a kernel"
    src = tuple(self.visit(s, pending) for s in node.src)
    masked = pending is not None and any(v.mask is not None for v in pending.views)
    valid = UOp(Ops.VALID, dtypes.bool, (UOp(Ops.VIEW, dtypes.void, (), pending),)) if masked else None
    ret = self._check(node, src, valid) if node.op is Ops.CHECK else UOp(node.op, node.dtype, src, node.arg)
    # a padded view of a computed value is zero outside its mask, whatever the op would give there
    return ret if valid is None else UOp(Ops.WHERE, ret.dtype, (valid, ret, UOp.const(ret.dtype, 0)))

  def _check(self, node: UOp, src: tuple[UOp, ...], valid: UOp | None) -> UOp:
    """An index checked in the kernel, into a buffer of flags of its own (schedule/index_check.py). Outside a padded
    view's mask it is no index: what it computes from the zeros loaded there (i + 5) may look out of range."""
    flags = self.flags.setdefault(node, IndexFlags(self.outputs[self.root].device, node.arg))
    ok = src[1] if valid is None else src[1] | valid.logical_not()
    return UOp(Ops.CHECK, node.dtype, (self.define_global(flags), src[0], ok))

def _compose(st: ShapeTracker, pending: ShapeTracker | None) -> ShapeTracker:
  return st if pending is None else (st + pending).simplify()

def _toposort_roots(sink: UOp, roots: dict[UOp, str]) -> list[UOp]:
  return [n for n in sink.toposort if n in roots]

def _root_shape(root: UOp) -> tuple[int, ...]:
  return root.src[0].shape if root.op in (Ops.CONTIGUOUS, Ops.COPY) else root.shape

def _output_buffer(root: UOp) -> Buffer:
  if root.op is Ops.ASSIGN: return _buffer_of(root.src[0].src[0])
  device = root.device
  assert isinstance(device, str), f"{root.op} on the devices {device} reached the scheduler"
  # a symbolic size gets memory for its Variables' largest values: one buffer serves them all
  return Buffer(device, max_size(_root_shape(root)), root.dtype)

def _buffer_of(buf_uop: UOp) -> Buffer: return buffer_map[buf_uop]

def _schedule_graph(sink: UOp, pack: bool = True, held: frozenset[UOp] = frozenset()) -> \
    tuple[list[ScheduleItem], dict[UOp, UOp], tuple[UOp, ...], tuple[int, ...]]:
  """The kernels that compute the outputs of `sink` (a graph whose realized nodes are already buffers), in order, what
  each computed node becomes once they have run, the lenders (cache.Template), and the positions of the items that
  pack a buffer of the caller's (pack_cache keeps those copies); without `pack`, no packing copies are added (a graph
  that has them already). The values of the nodes `held` keep their buffers."""
  # packing copies are the device's choice (pack_operands), made after the multi pass left one device per node
  resolved = graph_rewrite(sink, pm_resolve, name="resolve")
  packed = pack_operands(resolved) if pack else {}
  copies: set[UOp] = set()
  if pack: resolved, copies = packed[resolved], _buffer_copies(resolved, packed[resolved])
  g = find_realizes(resolved)
  leaf_buffers = {n: _buffer_of(n) for n in resolved.toposort if n.op is Ops.BUFFER}
  roots, outputs, built, scatters = _build_kernels(resolved, g, leaf_buffers)
  if scatters:  # scatter reduces inside bigger expressions get buffers of their own: each a fill and a scatter kernel
    g = find_realizes(resolved, scatters)
    roots, outputs, built, _ = _build_kernels(resolved, g, leaf_buffers)
  ran = _order_roots(roots, built, outputs)
  items = [it for r in ran for it in built[r].items]
  buffer_uops = {r: _buffer_uop_for(r, outputs[r]) for r in roots}
  becomes = _becomes(sink, resolved, buffer_uops)
  # an output's buffer holds its base, or itself when it was computed through its view (materialize._computes_part)
  outs = {o.base for o in resolved.src} | set(resolved.src)
  computes = _computed_nodes(sink, packed)
  stands_for = {r: (r, *computes.get(r, ())) for r in roots}  # each root, and the nodes of `sink` whose value it is
  # a buffer's packed copy may serve later schedules: its memory serves no other kernel of this one
  keep = {id(outputs[r]) for r in roots
          if r in outs or r.op is Ops.ASSIGN or r in copies or not held.isdisjoint(stands_for[r])}
  items, reused = plan_memory(items, keep)
  starts = itertools.accumulate((len(built[r].items) for r in ran), initial=0)
  packs = tuple(at for r, at in zip(ran, starts) if r in copies and built[r].items)
  # where buffers are handed on, every intermediate's nodes: the caller keeps those its live tensors read (one more
  # schedule, with them held), or they are computed again by the next realize that reads them
  lenders = tuple(n for r in roots if id(outputs[r]) not in keep for n in stands_for[r]) if reused else ()
  if pack and schedule_listeners: _tell_listeners(resolved, g, ran, [len(built[r].items) for r in ran], items)
  for r in roots:
    if id(outputs[r]) in reused: continue
    for node in stands_for[r] if r.op is not Ops.ASSIGN else (r,): becomes.setdefault(node, buffer_uops[r])
  # the order commit_realized records them in: the assigns in the order they run, so that the last one into a buffer
  # is the node that stands for its contents (each assign's value is a BUFFER node of its own), then the values: an
  # assign's commit drops what stood for its memory, which a view of it realized with it (y.add_(w).T) must outlive
  # (positions in `ran`, which holds the other roots too: the values sort after the last of them)
  run_at = {buffer_uops[r].src[0]: i for i, r in enumerate(ran) if r.op is Ops.ASSIGN}
  last = len(ran)
  ordered = dict(sorted(becomes.items(), key=lambda kv: run_at[kv[1].src[0]] if kv[0].op is Ops.ASSIGN else last))
  return items, ordered, lenders, packs

def _buffer_copies(resolved: UOp, packed: UOp) -> set[UOp]:
  """The packing copies (_blocked) that pack_operands added to `resolved` that read a buffer directly (a weight): the
  same at every call until the buffer is written."""
  before = set(resolved.toposort)
  return {n for n in packed.toposort if n.op is Ops.CONTIGUOUS and n not in before and
          n.src[0].op is Ops.VIEW and n.src[0].src[0].op is Ops.BUFFER}

def _computed_nodes(sink: UOp, packed: dict[UOp, UOp]) -> dict[UOp, list[UOp]]:
  """Each node of the scheduled graph -> the nodes of `sink` whose value it is, where those are other nodes: resolving
  (a value above a movement op reads a VIEW) and packing rebuild every node above what they change. The values kept
  for later graphs must be those nodes, the caller's: a value computed in one realize and read again in the next (a
  decode step's layer output, read by the next layer's cache write and by the logits) was computed again each time,
  the cost of a step growing with the square of the layers."""
  computes: dict[UOp, list[UOp]] = {}
  for node in sink.toposort:
    if (r := pm_resolve.rewritten(node)) is None: continue
    r = packed.get(r, r)
    if r is not node: computes.setdefault(r, []).append(node)
  return computes

def _tell_listeners(sink: UOp, g: Graph, ran: list[UOp], counts: list[int], items: list[ScheduleItem]) -> None:
  starts = [sum(counts[:i]) for i in range(len(counts))]
  per_root = [(r, tuple(items[s:s + n])) for r, s, n in zip(ran, starts, counts)]
  for listener in schedule_listeners: listener(sink, g.realize, per_root)

def _build_kernels(sink: UOp, g: Graph, leaf_buffers: dict[UOp, Buffer]) -> \
    tuple[list[UOp], dict[UOp, Buffer], dict[UOp, _Built], tuple[UOp, ...]]:
  """The roots in dependency order, their output buffers, what each runs, and the reduces of the graph that are
  scatters inside bigger expressions (schedule/scatter.py): they would run as one kernel each if materialized."""
  roots = _toposort_roots(sink, g.realize)
  outputs = {r: _output_buffer(r) for r in roots}
  built: dict[UOp, _Built] = {}
  scatters: dict[UOp, None] = {}
  for root in roots:
    if prod(_root_shape(root)) == 0:  # it writes no element: no kernel (one would store into memory of 0 elements)
      built[root] = _Built((), set(), set())
      continue
    if root.op is Ops.COPY:
      src = root.src[0]
      src_buf = outputs[src] if src in outputs else leaf_buffers[src.src[0]]
      old_reads, root_reads = (set(), {src}) if src in outputs else ({id(src_buf)}, set())
      built[root] = _Built((ScheduleItem(root.replace(src=()), (outputs[root], src_buf)),), old_reads, root_reads)
      continue
    kb = _KernelBuilder(root, g, outputs, leaf_buffers)
    ast = kb.build()
    scatters.update(dict.fromkeys(kb.reduces[r] for r in embedded_scatters(ast)))
    ast = fold_gathers(ast)
    asts = split_scatter(ast) or (ast,)  # a scatter: a fill, then the scatter kernel updating its output in place
    built[root] = _Built(tuple(_item(a, kb.bufs) for a in asts), kb.leaf_reads, kb.root_reads)
  return roots, outputs, built, tuple(scatters)

def _item(ast: UOp, bufs: list[Buffer]) -> ScheduleItem:
  """A kernel of the AST with the buffers it uses, renumbered 0..n-1 in their order (a kernel split in two uses part
  of the buffers each), and its scalar arguments numbered 0..m-1, each with the slot of the graph's DEFINE_VAR it
  reads (the template's placeholder for the value): kernels that differ only in which constants of their graphs they
  take are one kernel."""
  used = sorted({u.arg for u in ast.toposort if u.op is Ops.DEFINE_GLOBAL})
  slots = tuple(dict.fromkeys(u.arg for u in ast.toposort if u.op is Ops.DEFINE_VAR))
  index = {Ops.DEFINE_GLOBAL: used.index, Ops.DEFINE_VAR: slots.index}
  renumber = {u: u.replace(arg=new) for u in ast.toposort if u.op in index and (new := index[u.op](u.arg)) != u.arg}
  # the Variables of its views come after, each standing for the value the caller's graph binds it to
  return ScheduleItem(ast.substitute(renumber) if renumber else ast, tuple(bufs[i] for i in used),
                      slots + tuple(ast_variables(ast)))

# given nodes of the caller's graph, those that live tensors (other than the ones realized) read again
Held = Callable[[list[UOp]], set[UOp]]

def create_schedule(outs: list[UOp], held: Held | None = None, reuse_packs: bool = False) -> \
    tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """The kernels that compute `outs`, in order, and what each computed node becomes once they have run. With
  `reuse_packs`, a weight packed by an earlier schedule is not packed again (schedule/pack_cache.py), and the copies
  this one packs are kept once the caller has run it and calls pack_cache.keep_pending.

  A graph of the same structure as one scheduled before (other buffers, the same ops, shapes, dtypes and constants)
  reuses that schedule with its own buffers (schedule/cache.py); a constant that has had another value there before
  is a kernel argument, and the items carry this graph's value. Nothing is recorded until the caller has run the
  items and calls `commit_realized(becomes)`. Where the schedule hands the buffer of a value it computes on to a later
  kernel, `held` says which of those values live tensors read again: they keep their buffers, to be read, not
  computed again (a decode step's layer output, computed inside the next layer's cache write)."""
  pack_cache.drop_pending()
  cap = int(SCHEDULE_CACHE.value)
  seen = cache.structure(outs) if cap > 0 else None
  dynamic: list[UOp] = []
  if seen is not None:
    key, walk = seen
    found, positions, at = cache.find(key, walk, bool(SCALAR_ARGS.value))
    dynamic = [walk.consts[i] for i in at] if at else []
    # a schedule that lends no buffer on has none that a live tensor could hold (an eager op's: no look, no call)
    if found is not None and (origins := cache.origins(walk, found.entries)) is not None and \
        (not found.lenders or ((lent := cache.origins(walk, found.lenders)) is not None and
                               not _held(found.template, lent, held))):
      return found.template.instantiate(walk.params, origins, dynamic, walk.var_vals, reuse_packs)
  abstract = cache.abstract(outs, dynamic)
  # the packing copies a schedule makes are the CPU target's heuristics', or a BEAM search's of that width: keyed by
  # the knobs every program key holds (knob_key: the target, THREADS) and the width; a graph on several devices also by
  # how the multi pass makes its all-reduces (RING) and the ranks, which order its copies between ranks
  template_key = (abstract.sink, int(BEAM.value), knob_key(threads=True), int(RING.value), remote.joined)
  template = cache.templates.get(template_key) if cap > 0 else None
  if template is None:
    template = cache.Template(abstract.sink, *_schedule_sink(abstract.sink))
    if cap > 0: cache.templates.put(template_key, template)
  if kept := _held(template, [abstract.origin.get(n) for n in template.lenders], held):
    # the structure's entry stays the schedule that keeps none: this one is found by the abstract graph
    if (variant := template.kept.get(kept)) is None:
      variant = template.kept[kept] = cache.Template(abstract.sink, *_schedule_sink(abstract.sink, held=kept))
    template = variant
  elif seen is not None and (entries := cache.found_entries(walk, abstract, [n for n, _ in template.becomes])) is not \
      None and (lenders := cache.found_entries(walk, abstract, list(template.lenders))) is not None:
    cache.remember(cache.Found(key, template, entries, positions, at, walk.values(at), lenders))
  return template.instantiate(abstract.params, [abstract.origin.get(n) for n, _ in template.becomes], abstract.consts,
                              abstract.var_vals, reuse_packs)

def _schedule_sink(sink: UOp, held: frozenset[UOp] = frozenset()) -> \
    tuple[list[ScheduleItem], dict[UOp, UOp], tuple[UOp, ...], tuple[int, ...]]:
  """_schedule_graph of an abstract graph; one with values on several devices is first split into a graph per device
  (schedule/multi.py), whose schedule computes them, and what its outputs become is put back together."""
  if not is_multi(sink): return _schedule_graph(sink, held=held)
  cache.schedule_stats["split"] += 1
  flat, regroup = split_multi(sink)
  items, becomes, lenders, packs = _schedule_graph(UOp(Ops.SINK, dtypes.void, tuple(flat)), held=held)
  return items, regroup(becomes), lenders, packs

def _held(template: cache.Template, callers: list[UOp | None], held: Held | None) -> frozenset[UOp]:
  """The template's lenders whose nodes in the caller's graph (`callers`, None where it has none) are `held`."""
  if held is None or not template.lenders or not (nodes := [n for n in callers if n is not None]): return frozenset()
  read = held(nodes)
  return frozenset(a for a, n in zip(template.lenders, callers) if n is not None and n in read)

@dataclass(frozen=True)
class _Built:
  items: tuple[ScheduleItem, ...]  # the kernels of one root, in order
  leaf_reads: set[int]   # ids of buffers it reads as they were before the schedule
  root_reads: set[UOp]   # the roots whose outputs it reads

def _order_roots(roots: list[UOp], built: dict[UOp, _Built], outputs: dict[UOp, Buffer]) -> list[UOp]:
  """The order the roots' kernels run in: dependency order, plus: a kernel that reads a buffer's contents (from before
  the schedule, or as one assign left them) runs before any other assign overwrites them."""
  after: dict[UOp, set[UOp]] = {r: set(built[r].root_reads) for r in roots}  # root -> roots that must run before it
  needs: dict[UOp, set[UOp]] = {}  # root -> every root it depends on, transitively (roots come in dependency order)
  for r in roots: needs[r] = set().union(*(needs[d] | {d} for d in after[r]))
  writes: dict[int, list[UOp]] = {}
  for a in roots:
    if a.op is Ops.ASSIGN: writes.setdefault(id(outputs[a]), []).append(a)
  written = {a: buf for buf, writers in writes.items() for a in writers}
  for r in roots:
    # the written buffers it reads (a look at each of them for each root was quadratic: 2.6 of a 3-d mesh test's 9 s)
    reads = {b for b in built[r].leaf_reads if b in writes} | {written[w] for w in built[r].root_reads if w in written}
    for buf in reads:
      writers = writes[buf]
      if buf in built[r].leaf_reads: after_r = [a for a in writers if a is not r]  # the old contents: before them all
      else:
        # the contents that writer w left: before every other writer, unless r needs that one (an earlier writer)
        read_from = [w for w in built[r].root_reads if w in writers]
        after_r = [a for a in writers if a is not r and a not in read_from and
                   (a not in needs[r] or any(w in needs[a] for w in read_from))] if read_from else []
      for a in after_r: after[a].add(r)
  # across ranks, copies between ranks wait until nothing else is ready, then go together: one exchange (the N small
  # all-reduces of a step's gradients, one message each way each, where a round trip each ran between the sums)
  late = {r for r in roots if r.op is Ops.COPY and len(its := built[r].items) == 1 and its[0].ast.op is Ops.COPY and
          remote.crosses(*its[0].bufs[:2])} if remote.joined is not None else set()
  order: list[UOp] = []
  done: set[UOp] = set()
  while len(done) < len(roots):
    ready = next((r for r in roots if r not in done and r not in late and after[r] <= done), None)
    batch = [ready] if ready is not None else [r for r in roots if r not in done and after[r] <= done]
    if not batch:
      raise ValueError("these assigns read each other's old contents (like a.assign(b); b.assign(a) realized "
                       "together), which one schedule cannot order; realize them one at a time")
    order += batch
    done.update(batch)
  return order

def _buffer_uop_for(root: UOp, buf: Buffer) -> UOp:
  if root.op is Ops.ASSIGN:
    # a new BUFFER node for the same memory: graphs built from now on are new nodes, so nothing remembered about
    # the old contents is mistaken for the new
    target = root.src[0]
    return UOp(Ops.VIEW, target.dtype, (new_buffer_uop(buf.device, buf.size, buf.dtype, buf),), target.arg)
  shape = _root_shape(root)
  buf_uop = new_buffer_uop(buf.device, buf.size, buf.dtype, buf)
  return UOp(Ops.VIEW, root.dtype, (buf_uop,), ShapeTracker.from_shape(shape))

def _becomes(original_sink: UOp, sink: UOp, buffer_uops: dict[UOp, UOp]) -> dict[UOp, UOp]:
  """Each requested output -> a VIEW of the buffer that now holds it (outputs that were views keep their view)."""
  becomes: dict[UOp, UOp] = {}
  for orig, new in zip(original_sink.src, sink.src):
    if new in buffer_uops: becomes[orig] = buffer_uops[new]
    elif new.op is Ops.VIEW and new.src[0] in buffer_uops:
      base_view = buffer_uops[new.src[0]]
      becomes[orig] = UOp(Ops.VIEW, new.dtype, base_view.src, (base_view.arg + new.arg).simplify())
    else: becomes[orig] = new
  return becomes

def commit_realized(becomes: dict[UOp, UOp]) -> None:
  """After a schedule ran: later graphs that contain these nodes read the buffers instead of recomputing. An assign
  overwrote its buffer: the nodes realized into it before no longer stand for its contents, and are computed again
  where a graph built before the assign holds them (another value computed alike, a value computed from it).

  `becomes` is recorded in its order, which create_schedule makes the one the assigns ran in: the last one into a
  buffer is then the node that stands for its contents (x.add_(1).add_(2) committed in another order left the first
  add standing for x, and a view of x read the second add's node as not computed, running it again)."""
  # the maps' own methods, inlined: an eager step commits every output (a training step 20 values)
  attr, buffer_attr = realized_map.attr, buffer_map.attr
  for node, buf_view in becomes.items():
    # a constant realized (to be copied, or as a piece of a value replicated over devices) is not remembered: it is
    # interned, so every later graph holding it would read that memory instead of folding it, and contiguous() of it
    # would hand that memory to each tensor made so (two SGD momentum buffers of one shape, after a Pipeline moved a
    # zero bias to its stage, were one buffer, the bias's). Only a view or a movement has a base other than itself:
    # the others are told without the property's call
    if node is buf_view or (node.base if node.op in _VIEWS else node).op is Ops.CONST: continue
    # a view of one buffer (nearly every value) is told here, without _memories' call
    memories = (m,) if buf_view.op is Ops.VIEW and (m := buf_view.src[0].__dict__.get(buffer_attr)) is not None else \
      _memories(buf_view)
    for memory in memories:
      if node.op is Ops.ASSIGN:
        pack_cache.forget(memory)
        for ref in memory.realized_nodes:
          if (old := ref()) is not None: old.__dict__.pop(attr, None)
        memory.realized_nodes.clear()
      memory.remember_realized(node)
    node.__dict__[attr] = buf_view

# the ops whose node's base is not itself (UOp.base)
_VIEWS = frozenset({Ops.VIEW, *GroupOp.Movement})

def _memories(buf_view: UOp) -> tuple[Buffer, ...]:
  """The buffers a realized value lies in: that of a view, each piece's of a value on several devices (a MULTI of
  views, nested on a mesh), where an assign overwrites each (y.abs_() on a sharded y left y * 2, realized into it
  before, standing for the new contents)."""
  if buf_view.op is Ops.MULTI: return tuple(m for piece in buf_view.src for m in _memories(piece))
  if buf_view.op is Ops.VIEW and (m := buf_view.src[0].__dict__.get(buffer_map.attr)) is not None: return (m,)
  return ()
