"""The schedule cache: graphs of one structure (the same ops, shapes, dtypes and constants over other buffers) share
one schedule, made once over placeholder buffers (a `Template`) and instantiated with each graph's own, as a JIT
replays its captured kernels with new inputs.

Two keys find a template:
  * the abstract graph (`abstract`): realized nodes swapped for their buffers, each buffer for a numbered parameter,
    interned, so that graphs of one structure give one SINK node. It is what the scheduler schedules, and keys
    `templates`. Building it makes a UOp per node.
  * the structure (`Structure`): the same walk writing plain tuples instead of nodes (op, dtype, arg, sources by
    position in the walk), which keys `structures`: the template's key and where in the walk its outputs lie. An
    eager call whose structure was seen finds its schedule without building the abstract graph (a 16-element add:
    about a third of the time to realize it). Equal structures have equal abstract graphs, since each entry holds
    what its abstract node is made of; the converse is not needed (a miss only costs the abstract walk).

Constants, as torch.compile's "automatic dynamic" treats shapes: the structure writes each constant of a scalar
argument's dtype (ARG_DTYPES) as a position, not a value, and `Positions` remembers, per structure, the values the first
graph had there. While a position keeps that value the graph is scheduled with it (a specialized kernel: x*1, x+0 and
their kin fold away); the first graph with another value there makes the position dynamic for good, and from then on
the abstract graph holds a DEFINE_VAR in its place: the kernels take the number as an argument, each schedule item
carries the values to pass (`ScheduleItem.vals`), and one compiled program serves every later value (a learning rate
that changes every step compiles twice, not once a step). A position is the constant's node, so two positions that
hold equal values in one graph are one (x * a + a is another structure than x * a + b).

Graphs on several devices (schedule/multi.py) are templates too: the multi pass splits the abstract graph into one
graph per device, which is scheduled, and what its outputs become is put back together (MULTIs of the pieces' views);
a graph of the same structure then runs neither the multi pass nor the scheduler (a data-parallel step of a small MLP
over 2 devices without TinyJit: its schedules took 14.9 of its 23.5 ms CPU time, 7.7 of them the multi pass, and take
1.3 of 8.7 now). Everything the multi pass reads is in the key: the devices are in the buffers' args, the layouts
(axis and bounds) in the MULTI nodes' args, a mesh in the nesting of its MULTIs and in its copies' devices; the RING
knob, which chooses how to all-reduce, is a knob; and the ranks of a mesh across MPI processes (runtime/remote.py),
which order a schedule's copies between ranks, key both maps. The exchanges between ranks are grouped from each
schedule's buffers as it runs (engine/realize.py), so a template holds no description of them.
"""
from __future__ import annotations

import weakref
from typing import Any, NamedTuple

from lazytensor.dtype import DType, dtypes
from lazytensor.helpers import DEBUG, LRU, SCHEDULE_CACHE, knob_state
from lazytensor.runtime import remote
from lazytensor.runtime.device import Buffer, buffer_map, new_buffer_uop
from lazytensor.schedule import pack_cache
from lazytensor.schedule.index_check import IndexFlags
from lazytensor.uop.ops import NodeMap, Ops, UOp
from lazytensor.uop.sint import unbind


class ScheduleItem(NamedTuple):
  """One kernel (ast is a SINK of STOREs) or one copy (ast is a COPY); bufs lists outputs first, vals the numbers the
  kernel's scalar arguments (its DEFINE_VARs, by index) take. (A NamedTuple: an eager step makes one per kernel, at a
  third of a frozen dataclass's cost.) In a template, vals holds the slots of the abstract graph's DEFINE_VARs that
  each argument takes its value from, as its placeholder buffers stand for the caller's."""
  ast: UOp
  bufs: tuple[Buffer, ...]
  vals: tuple[Any, ...] = ()

# a ScheduleItem made without the Python __new__ of a NamedTuple: an eager step makes one per kernel
_new_item = tuple.__new__

# read per node: an enum member is a class attribute lookup (~0.1 us on Python 3.11), a module global is not
_BUFFER, _CONTIGUOUS, _VIEW, _CONST, _MULTI = Ops.BUFFER, Ops.CONTIGUOUS, Ops.VIEW, Ops.CONST, Ops.MULTI

# the dtypes of the constants that may become kernel arguments: those every runtime passes as a plain machine number
ARG_DTYPES: frozenset[DType] = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64, dtypes.uint32,
                                          dtypes.uint64})
_ARG_IDENTS = frozenset(dt.ident for dt in ARG_DTYPES)
_BUFFER_ATTR = buffer_map.attr

# computed node -> VIEW(BUFFER) holding its value, kept on the node: an entry lives as long as some graph holds the node
realized_map: NodeMap[UOp] = NodeMap("_realized")
_REALIZED = realized_map.attr

class Abstract(NamedTuple):
  """A graph with realized nodes swapped for their buffers, each buffer replaced by a numbered parameter and each
  CONTIGUOUS's identity by its position: graphs that differ only in the buffers they read abstract to one interned
  sink, which keys the schedule cache (as a JIT keys its captured kernels by the function, with the buffers as
  inputs)."""
  sink: UOp
  origin: dict[UOp, UOp]  # abstract node -> the node of the caller's graph that it stands for
  params: list[UOp]       # parameter slot -> the caller's BUFFER node
  consts: list[UOp]       # DEFINE_VAR slot -> the caller's CONST node
  var_vals: dict[UOp, int]  # Variable -> the value the caller's graph binds it to

# placeholder Buffers, never allocated: one per (device, size, dtype, alias), so parameters that name the same memory
# (an old and a new BUFFER node of one buffer) share one, as the scheduler's buffer identity checks expect
_param_buffers: weakref.WeakValueDictionary[tuple, Buffer] = weakref.WeakValueDictionary()

def _param_uop(buf_uop: UOp, slot: int, alias: int) -> UOp:
  device, size = buf_uop.arg[0], buf_uop.arg[1]
  uop = UOp(Ops.BUFFER, buf_uop.dtype, (), (device, size, ("param", slot, alias)))
  if uop not in buffer_map:
    key = (device, size, buf_uop.dtype, alias)
    if (buf := _param_buffers.get(key)) is None: buf = _param_buffers[key] = Buffer(device, size, buf_uop.dtype)
    buffer_map[uop] = buf
  return uop

# ---- Variables: a graph's BINDs (uop/sint.py) stand in the args of its movements and views. The abstract graph and the
# structure hold the Variables alone, and the values they are bound to travel beside (into ScheduleItem.vals), so that
# graphs bound to other values share one schedule and one program ----

# the ops whose arg may hold a symbolic dimension
_SYMBOLIC_ARGS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.VIEW})
_UNBOUND = "_unbound"
# the movement args seen to hold no Variable (plain numbers): a step's movements repeat the last step's args, and a set
# lookup of one (hashed in C) answers where _holds_uop's loop would run for each new node. Emptied when it grows past
# _PLAIN_ARGS_MAX, as graphs of ever new shapes would grow it
_plain_args: set[tuple] = set()
_PLAIN_ARGS_MAX = 4096

def _holds_uop(arg: tuple) -> bool:
  """Whether a (nested) tuple holds a UOp: a loop, as every new movement node of an eager step asks once."""
  for x in arg:
    if isinstance(x, UOp) or (isinstance(x, tuple) and _holds_uop(x)): return True
  return False

def unbound_arg(node: UOp) -> tuple[Any, dict[UOp, int]] | None:
  """The arg of a movement or VIEW node with each BIND in it replaced by its Variable, and the values they had; None
  where it binds nothing. Kept on the node: a graph is walked at every realize."""
  if (hit := node.__dict__.get(_UNBOUND, node)) is not node: return hit
  ret: tuple[Any, dict[UOp, int]] | None = None
  if node.op is Ops.VIEW:
    if node.arg.symbolic and (found := node.arg.unbind())[1]: ret = found
  elif node.arg in _plain_args: pass
  elif _holds_uop(node.arg):
    vals: dict[UOp, int] = {}
    def strip(x: Any) -> Any:
      if isinstance(x, tuple): return tuple(strip(y) for y in x)
      x, found = unbind(x)
      bind_values(vals, found)
      return x
    if (arg := strip(node.arg)) != node.arg: ret = arg, vals
  else:
    if len(_plain_args) >= _PLAIN_ARGS_MAX: _plain_args.clear()
    _plain_args.add(node.arg)
  node.__dict__[_UNBOUND] = ret
  return ret

def bind_values(into: dict[UOp, int], found: dict[UOp, int]) -> None:
  """Add the values `found` to a graph's values of its Variables: one graph binds a Variable to one value."""
  for v, val in found.items():
    if into.setdefault(v, val) != val:
      raise ValueError(f"Variable {v.arg[0]!r} is bound to both {into[v]} and {val} in one graph; realize the parts "
                       "bound to each value apart")

def item_vals(slots: tuple[Any, ...], consts: list[UOp], var_vals: dict[UOp, int]) -> tuple[Any, ...]:
  """The values of a kernel's scalar arguments: the graph's constant at each slot, then its Variables' values."""
  out = []
  for s in slots:
    if type(s) is int: out.append(consts[s].arg)
    elif (val := var_vals.get(s)) is not None: out.append(val)
    else: raise ValueError(f"Variable {s.arg[0]!r} stands in a shape with no value: bind it (v.bind(n)) where the "
                           "shape is made")
  return tuple(out)

def bind_views(value: UOp, var_vals: dict[UOp, int]) -> UOp:
  """A realized value (VIEWs of buffers) with its views' Variables bound to var_vals, as a tensor's graph holds them."""
  views = {u: u.replace(arg=u.arg.bind(var_vals)) for u in value.toposort if u.op is Ops.VIEW and u.arg.symbolic}
  return value.substitute(views) if views else value

# deeper graphs are walked with an explicit stack: two frames a level (the visit and its comprehension) stay well
# inside Python's default limit of 1000 frames, whoever calls
_MAX_RECURSION = 200

class _TooDeep(Exception):
  """A graph deeper than _MAX_RECURSION: the abstract walk goes on with an explicit stack."""

class _Abstracter:
  """Walks a graph from its outputs down, stopping at realized nodes (their buffers stand in for them), so the cost is
  the graph still to compute, not the history behind its inputs. The CONST nodes in `dynamic` become DEFINE_VARs,
  numbered by their position there."""
  def __init__(self, dynamic: list[UOp] | None = None) -> None:
    self.consts = dynamic or []
    self.var_slots = {c: i for i, c in enumerate(self.consts)}
    self.done: dict[UOp, UOp] = {}     # caller's node -> abstract node
    self.in_hits: dict[UOp, UOp] = {}  # the same for the nodes of realized values (not looked up in realized_map)
    self.origin: dict[UOp, UOp] = {}
    self.params: list[UOp] = []
    self.slots: dict[UOp, UOp] = {}     # caller's BUFFER node -> its parameter
    self.aliases: dict[int, int] = {}   # memory bit -> alias number
    self.contiguous = 0
    self.var_vals: dict[UOp, int] = {}

  def rebuild(self, node: UOp, src: tuple[UOp, ...]) -> UOp:
    """node over the sources src, its arg's BINDs replaced by their Variables (their values recorded)."""
    if node.op in _SYMBOLIC_ARGS and (ub := unbound_arg(node)) is not None:
      bind_values(self.var_vals, ub[1])
      return UOp(node.op, node.dtype, src, ub[0])
    return node if src == node.src else UOp(node.op, node.dtype, src, node.arg)

  def convert(self, node: UOp, src: tuple[UOp, ...]) -> UOp:
    if node.op is Ops.BUFFER:
      if (p := self.slots.get(node)) is None:
        # a BUFFER node's `reads` is its memory's bit: nodes of one buffer share it, no two live buffers do
        alias = self.aliases.setdefault(node.reads, len(self.aliases))
        p = self.slots[node] = _param_uop(node, len(self.params), alias)
        self.params.append(node)
      return p
    if node.op is Ops.CONTIGUOUS and node.arg is not None:
      self.contiguous += 1
      return UOp(Ops.CONTIGUOUS, node.dtype, src, ("param", self.contiguous))
    if node.op is _CONST and (slot := self.var_slots.get(node)) is not None:
      return UOp(Ops.DEFINE_VAR, node.dtype, src, slot)
    return self.rebuild(node, src)

  def plain(self, root: UOp) -> UOp:
    for node in root.toposort:
      if node not in self.in_hits: self.in_hits[node] = self.convert(node, tuple(self.in_hits[s] for s in node.src))
    return self.in_hits[root]

  def walk(self, root: UOp) -> UOp:
    """The abstract node of root. The loop every eager realize runs over its new nodes: recursive (a third less time
    than a stack of (node, expanded) pairs on the graph of a training step), continued by the stack past
    _MAX_RECURSION levels (a chain of 10**5 adds). Both visit sources left to right, after their own sources, so
    parameters are numbered in the same order whichever finishes the walk."""
    try: return self._visit(root, 0)
    except _TooDeep: return self._walk_stack(root)

  def _visit(self, node: UOp, depth: int) -> UOp:
    if (new := self.done.get(node)) is not None: return new
    if (hit := node.__dict__.get(realized_map.attr)) is not None:
      new = self.plain(hit)
      self.stands_for(new, node)
    else:
      if depth > _MAX_RECURSION: raise _TooDeep
      src = tuple([self._visit(s, depth + 1) for s in node.src]) if node.src else ()  # leaves: no comprehension
      op = node.op
      if op is Ops.BUFFER or op is Ops.CONTIGUOUS or op is _CONST: new = self.convert(node, src)
      else: new = self.rebuild(node, src)
      self.origin[new] = node
    self.done[node] = new
    return new

  def stands_for(self, new: UOp, realized: UOp) -> None:
    """A realized node is the origin of its value's abstract node unless a node of the graph is: the value itself (a
    tensor's memory, on several devices a MULTI of its pieces' views), whose new buffer nodes an assign in the graph
    must reach. The realized node stands for what it computed: committed to the assigned memory, a clone read that
    memory's new contents as its own."""
    if new not in self.origin: self.origin[new] = realized

  def _walk_stack(self, root: UOp) -> UOp:
    done, origin, stack, attr = self.done, self.origin, [(root, False)], realized_map.attr
    while stack:
      node, expanded = stack.pop()
      if node in done: continue
      if expanded:
        src = tuple([done[s] for s in node.src])
        if node.op in (Ops.BUFFER, Ops.CONTIGUOUS, _CONST): new = self.convert(node, src)
        else: new = self.rebuild(node, src)
        origin[new] = node
      elif (hit := node.__dict__.get(attr)) is not None:
        new = self.plain(hit)
        self.stands_for(new, node)
      else:
        stack.append((node, True))
        stack += [(s, False) for s in reversed(node.src) if s not in done]
        continue
      done[node] = new
    return done[root]

def abstract(outs: list[UOp], dynamic: list[UOp] | None = None) -> Abstract:
  """The abstract graph of `outs`, with the CONST nodes in `dynamic` as kernel arguments (Positions.dynamic)."""
  # the outputs are walked one by one: a SINK of the caller's nodes would be a new node at every call, made to die
  a = _Abstracter(dynamic)
  sink = UOp(Ops.SINK, dtypes.void, tuple([a.walk(o) for o in outs]))
  return Abstract(sink, a.origin, a.params, a.consts, a.var_vals)

# what names a node of an instance's values (Template.names)
_PARAM, _FRESH, _CONST_SLOT = "param", "fresh", "const"

class Template:
  """A schedule over placeholder buffers, instantiated with the buffers of each graph of its structure.

  `lenders` are the nodes of `sink` computed into buffers of the schedule's own where it hands some to later kernels
  (then none stands for the node once it has run); `kept` holds the schedules of the same graph that keep some of them
  (those live tensors read again), by those nodes. `packs` are the positions of the items that pack a buffer of the
  caller's (a weight: pack_cache)."""
  def __init__(self, sink: UOp, items: list[ScheduleItem], becomes: dict[UOp, UOp], lenders: tuple[UOp, ...],
               packs: tuple[int, ...] = ()) -> None:
    self.sink, self.items, self.becomes, self.lenders = sink, items, list(becomes.items()), lenders
    self.kept: dict[frozenset[UOp], Template] = {}
    self.uses = 0
    params = [n for n in sink.toposort if n.op is Ops.BUFFER]
    # an instance runs on a list of buffers: the caller's, by parameter slot, then new ones for those the schedule
    # makes; the items and values name them by position there
    self.param_slots = [p.arg[2][1] for p in params]
    position = {id(buffer_map[p]): i for i, p in enumerate(params)}
    # BUFFER nodes of the values the outputs become: parameters map back to the caller's nodes, the others are new
    # nodes (for new memory, or new names for assigned memory) made for each instance
    value_buffers = dict.fromkeys(n for _, v in self.becomes for n in v.toposort if n.op is Ops.BUFFER)
    # new memory: what the items use, and outputs that no item writes (of 0 elements)
    made = [b for it in items for b in it.bufs]
    made += [buffer_map[n] for n in value_buffers if not isinstance(n.arg[2], tuple)]
    made = list({id(b): b for b in made if id(b) not in position}.values())
    # the flags of index checks (schedule/index_check.py) are the same at every instance: they carry the message, and
    # come back clear from every run
    fresh = [b for b in made if not isinstance(b, IndexFlags)]
    self.flags = [b for b in made if isinstance(b, IndexFlags)]
    for i, b in enumerate([*fresh, *self.flags]): position[id(b)] = len(params) + i
    # the plan of an instance, made here once: what each new buffer is, what each item's buffers and each value's nodes
    # are made of (an eager step instantiates one at every call)
    self.fresh = [(b.device, b.size, b.dtype) for b in fresh]
    self.item_bufs = [(it.ast, tuple(position[id(b)] for b in it.bufs), it.vals) for it in items]
    # the nodes of the values' buffers and constants: a parameter names the caller's buffer (_PARAM, its slot), a
    # placeholder a new node of the instance's buffer (_FRESH, its position), a DEFINE_VAR (a constant output's kernel
    # argument) the caller's constant (_CONST_SLOT, its slot)
    self.names = [(n, _PARAM, n.arg[2][1]) if isinstance(n.arg[2], tuple) else (n, _FRESH, position[id(buffer_map[n])])
                  for n in value_buffers]
    self.names += [(n, _CONST_SLOT, n.arg) for _, v in self.becomes for n in v.toposort if n.op is Ops.DEFINE_VAR]
    # most values are a view of one buffer: rebuilt directly, without the walk of a general substitute
    # (on several devices, a MULTI of such views, nested on a mesh)
    self.direct = [_direct(v) for _, v in self.becomes]
    # the items that pack a parameter's buffer (a weight): (item, the copy's position, the parameter's)
    self.packs = [(i, *self.item_bufs[i][1]) for i in packs]
    assert all(len(self.item_bufs[i][1]) == 2 and w < len(params) for i, _, w in self.packs), "a pack reads a parameter"

  def _kept_copies(self, bufs: list[Buffer], params: list[UOp], reuse: bool) -> set[int]:
    """With `reuse`, the packing items whose copies are kept (their copies put in `bufs`); the copies of the others are
    to be kept once this schedule has run."""
    skip: set[int] = set()
    for i, copy, weight in self.packs:
      pack_cache.made(bufs[weight], bufs[copy])
      if not reuse: continue
      node, ast = params[self.param_slots[weight]], self.item_bufs[i][0]
      if (kept := pack_cache.packed_copy(bufs[weight], node, ast)) is not None:
        bufs[copy] = kept
        skip.add(i)
      else: pack_cache.will_keep(bufs[weight], node, ast, bufs[copy])
    return skip

  def instantiate(self, params: list[UOp], origins: list[UOp | None], consts: list[UOp], var_vals: dict[UOp, int],
                  reuse_packs: bool = False) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
    """The schedule with the caller's buffers and numbers: `params` are its BUFFER nodes by parameter slot, `consts`
    its CONST nodes by DEFINE_VAR slot, `var_vals` the values of its Variables, `origins` its node for each value of
    `becomes` (None where its graph has none); with `reuse_packs`, a weight's packed copy kept from an earlier schedule
    stands for its packing item (pack_cache)."""
    # loops rather than comprehensions: each of those is a function call on Python 3.11, and an eager step has a
    # handful of buffers
    schedule_stats["reused" if self.uses else "scheduled"] += 1
    self.uses += 1
    bufs: list[Buffer] = []
    for slot in self.param_slots: bufs.append(params[slot].__dict__[_BUFFER_ATTR])
    for device, size, dtype in self.fresh: bufs.append(Buffer(device, size, dtype))
    bufs += self.flags
    skip = self._kept_copies(bufs, params, reuse_packs) if self.packs else ()
    items: list[ScheduleItem] = []
    for i, (ast, positions, slots) in enumerate(self.item_bufs):
      if skip and i in skip: continue
      vals = item_vals(slots, consts, var_vals) if slots else ()
      items.append(_new_item(ScheduleItem, (ast, tuple(map(bufs.__getitem__, positions)), vals)))
    names: dict[UOp, UOp] = {}
    for n, kind, i in self.names:
      if kind is _FRESH:
        buf = bufs[i]
        names[n] = new_buffer_uop(buf.device, buf.size, buf.dtype, buf)
      else: names[n] = params[i] if kind is _PARAM else consts[i]
    becomes: dict[UOp, UOp] = {}
    for (_, value), direct, orig in zip(self.becomes, self.direct, origins):
      if orig is None: continue
      if direct is _VIEW:
        view = value.arg.bind(var_vals) if var_vals else value.arg
        becomes[orig] = UOp(_VIEW, value.dtype, (names[value.src[0]],), view)
      elif direct is _MULTI: becomes[orig] = _views_rebuilt(value, names, var_vals)
      else: becomes[orig] = bind_views(value.substitute(names), var_vals) if var_vals else value.substitute(names)
    if DEBUG.value >= 1 and items:  # the knob's value: its __ge__ is a Python call at every eager step
      print(f"scheduled {len(items)} items from {len(self.sink.toposort)} nodes"
            f"{' (schedule cache hit)' if self.uses > 1 else ''}")
    return items, becomes

def _direct(value: UOp) -> Ops | None:
  """_VIEW for a value that is a view of one buffer, _MULTI for a MULTI of such (nested on a mesh): what an instance
  rebuilds without a substitute's walk (32 all-reduces over 2 devices realized at once: 64 outputs)."""
  if value.op is _MULTI: return _MULTI if all(_direct(p) is not None for p in value.src) else None
  return _VIEW if value.op is _VIEW and value.src[0].op is _BUFFER else None

def _views_rebuilt(value: UOp, names: dict[UOp, UOp], var_vals: dict[UOp, int]) -> UOp:
  """A value that _direct calls direct, over the buffers `names` gives and its views' Variables bound to var_vals."""
  if value.op is _MULTI: return UOp(_MULTI, value.dtype, tuple([_views_rebuilt(p, names, var_vals) for p in value.src]),
                                    value.arg)
  return UOp(_VIEW, value.dtype, (names[value.src[0]],), value.arg.bind(var_vals) if var_vals else value.arg)

class _ViewKey:
  """What a view (a VIEW node's ShapeTracker, its Variables unbound) is in a structure: equal views have one, so that
  a structure hashes and compares in C, where a ShapeTracker's hash is a Python call at every lookup of a key."""
  __slots__ = ("__weakref__",)

# view -> its key, while a structure's key or a VIEW node (_VIEW_KEY) holds it
_view_keys: weakref.WeakValueDictionary[Any, _ViewKey] = weakref.WeakValueDictionary()
_VIEW_KEY = "_view_key"

def _view_key(node: UOp, view: Any) -> _ViewKey:
  """The key of `view`, the VIEW node `node`'s (unbound), kept on the node unless it is symbolic (its Variables' values
  are read at each walk, by convert): looked up once per node."""
  if (k := _view_keys.get(view)) is None: k = _view_keys[view] = _ViewKey()
  if not node.arg.symbolic: node.__dict__[_VIEW_KEY] = k
  return k

# a CONTIGUOUS that names its buffer stands in the structure by its position, as in the abstract graph
_NUMBERED = "param"
# a constant that may become a kernel argument stands in the structure by its position too (Positions)
_POSITION = "position"
# the ops whose entry convert writes its own way; of them, the movements, whose entry is the plain one where their arg
# binds no Variable
_OWN_ENTRY = frozenset({_BUFFER, _CONST, _CONTIGUOUS, *_SYMBOLIC_ARGS})
_PLAIN_MOVES = _SYMBOLIC_ARGS - {_VIEW}

def _value_key(arg: Any) -> Any:
  # as UOp interning keys it: 0.0 and -0.0 (equal) apart, and True, 1 and 1.0 (equal) apart
  return (type(arg), repr(arg) if isinstance(arg, float) else arg)

class Structure:
  """The walk `abstract` makes (the same order, the same stops at realized nodes), each node written as a tuple: what
  its abstract node is made of, its sources by their position among the entries. `key` is the whole graph's."""
  # one is made at every realize: slots make it and each field's read cheaper than a __dict__
  __slots__ = ("done", "in_hits", "entries", "node_of", "params", "slots", "aliases", "consts", "const_keys",
               "var_vals")

  def __init__(self) -> None:
    self.done: dict[UOp, int] = {}     # caller's node -> its entry
    self.in_hits: dict[UOp, int] = {}  # the same for the nodes of realized values
    self.entries: list[tuple[Any, ...]] = []
    # entry -> the caller's node the main walk last finished with it (a realized node stands for its value's root,
    # as in the abstract graph's origin); the entries of a realized value's inner nodes have none
    self.node_of: dict[int, UOp] = {}
    self.params: list[UOp] = []         # parameter slot -> the caller's BUFFER node
    self.slots: dict[UOp, int] = {}
    self.aliases: dict[int, int] = {}
    self.consts: list[UOp] = []         # position -> the caller's CONST node there (Positions)
    self.const_keys: list[Any] = []     # position -> its value, as _value_key writes it
    self.var_vals: dict[UOp, int] = {}  # Variable -> the value the graph binds it to (not in the key)

  def param(self, node: UOp) -> int:
    """The entry of a BUFFER node: its parameter's, made when the walk first meets it."""
    if (i := self.slots.get(node)) is None:
      alias = self.aliases.setdefault(node.reads, len(self.aliases))
      self.params.append(node)
      i = self.slots[node] = len(self.entries)
      self.entries.append((_BUFFER, node.dtype.ident, node.arg[0], node.arg[1], alias))
    return i

  def convert(self, node: UOp, src: tuple[int, ...]) -> int:
    op, entries = node.op, self.entries
    if op is _BUFFER: return self.param(node)
    if op is _CONST and node.dtype.ident in _ARG_IDENTS and node.src:
      self.consts.append(node)
      self.const_keys.append(_value_key(node.arg))
      entries.append((op, node.dtype.ident, src, _POSITION))
      return len(entries) - 1
    arg = _NUMBERED if op is _CONTIGUOUS and node.arg is not None else node.arg
    # a VIEW binds a Variable only where its views are symbolic: the eager graph's views are asked nothing more
    if op in _SYMBOLIC_ARGS and (node.arg.symbolic if op is _VIEW else node.arg not in _plain_args) and \
        (ub := unbound_arg(node)) is not None:
      arg = ub[0]
      bind_values(self.var_vals, ub[1])
    if op is _VIEW: arg = node.__dict__.get(_VIEW_KEY) or _view_key(node, arg)
    entries.append((op, node.dtype.ident, src, type(arg), repr(arg) if isinstance(arg, float) else arg))
    return len(entries) - 1

  def values(self, dynamic: tuple[int, ...]) -> tuple[Any, ...]:
    """The constants' values at the positions that are not `dynamic`: with the structure, what keys a schedule."""
    if not dynamic: return tuple(self.const_keys)
    keys = self.const_keys[:]
    for i in dynamic: keys[i] = None
    return tuple(keys)

  def plain(self, root: UOp) -> int:
    for node in root.toposort:
      if node not in self.in_hits: self.in_hits[node] = self.convert(node, tuple(self.in_hits[s] for s in node.src))
    return self.in_hits[root]

  def visit(self, node: UOp, depth: int) -> int:
    """The entry of a node not in `done` yet, after those of its sources. The loop every eager realize runs over its new
    nodes: its callers look nodes up in `done`, and the sources are gathered in a loop, not a comprehension (a
    function call on Python 3.11). A buffer among them is a parameter, taken where it is met rather than visited (each
    realized input is one): its entry is found by `slots`, not `done`. Recursive: on a shallow graph (a training
    step's) a fifth less time than `walk`'s stack of frames."""
    done = self.done
    if (hit := node.__dict__.get(_REALIZED)) is not None: i = self.plain(hit)
    elif depth > _MAX_RECURSION: return self.walk(node)  # deeper: by the stack, in the same order
    else:
      src = []
      for s in node.src:
        if s.op is _BUFFER: src.append(self.param(s))
        elif (j := done.get(s)) is not None: src.append(j)
        elif (k := s.__dict__.get(_VIEW_KEY)) is not None and s.src[0].op is _BUFFER and _REALIZED not in s.__dict__:
          # a realized input (a view of a buffer, walked before): its parameter and its entry, as convert writes it,
          # without the two calls of a visit
          self.entries.append((_VIEW, s.dtype.ident, (self.param(s.src[0]),), _ViewKey, k))
          j = done[s] = len(self.entries) - 1
          self.node_of[j] = s
          src.append(j)
        else: src.append(self.visit(s, depth + 1))
      op, arg = node.op, node.arg
      if (op in _OWN_ENTRY and (op not in _PLAIN_MOVES or arg not in _plain_args)) or isinstance(arg, float):
        i = self.convert(node, tuple(src))
      else:
        # an ALU op, a reduce, a movement by plain numbers (most of a step's nodes): the entry convert would write,
        # without its call
        entries = self.entries
        entries.append((op, node.dtype.ident, tuple(src), type(arg), arg))
        i = len(entries) - 1
    done[node] = i
    self.node_of[i] = node
    return i

  def walk(self, root: UOp) -> int:
    """The entry of root as `visit` finds it (in its order, so that parameters are numbered as the abstract walk numbers
    them), by a stack of frames (a node and the entries of its sources gathered so far): past _MAX_RECURSION levels
    (a model's forward is a chain of thousands of nodes, ResNet50's 2000). Where visit's recursion gave up, the stack
    of (node, expanded) pairs that went on from the root took twice as long (a frame per node, each source gathered
    and pushed by a comprehension, every buffer and realized input given a turn on the stack)."""
    done, entries, node_of = self.done, self.entries, self.node_of
    if (i := done.get(root)) is not None: return i
    if (hit := root.__dict__.get(_REALIZED)) is not None:
      i = done[root] = self.plain(hit)
      node_of[i] = root
      return i
    stack: list[tuple[UOp, list[int]]] = [(root, [])]
    while stack:
      node, src = stack[-1]
      for s in node.src[len(src):] if src else node.src:
        if s.op is _BUFFER: src.append(self.param(s))
        elif (j := done.get(s)) is not None: src.append(j)
        elif (hit := s.__dict__.get(_REALIZED)) is not None:
          j = done[s] = self.plain(hit)
          node_of[j] = s
          src.append(j)
        elif (k := s.__dict__.get(_VIEW_KEY)) is not None and s.src[0].op is _BUFFER:
          entries.append((_VIEW, s.dtype.ident, (self.param(s.src[0]),), _ViewKey, k))
          j = done[s] = len(entries) - 1
          node_of[j] = s
          src.append(j)
        else:
          stack.append((s, []))
          break
      else:
        stack.pop()
        op, arg = node.op, node.arg
        if (op in _OWN_ENTRY and (op not in _PLAIN_MOVES or arg not in _plain_args)) or isinstance(arg, float):
          i = self.convert(node, tuple(src))
        else:
          entries.append((op, node.dtype.ident, tuple(src), type(arg), arg))
          i = len(entries) - 1
        done[node] = i
        node_of[i] = node
    return done[root]

def structure(outs: list[UOp]) -> tuple[tuple[Any, ...], Structure]:
  """The structure key of a graph and its walk. The key holds every knob's value (one number) and the ranks of a mesh
  across ranks (runtime/remote.py), whose copies between ranks a schedule orders apart."""
  s = Structure()
  roots = []
  for o in outs: roots.append(i if (i := s.done.get(o)) is not None else s.visit(o, 0))
  return (tuple(s.entries), tuple(roots), knob_state(), remote.joined), s

class Positions:
  """The constant positions of one structure: the values its first graph had there, and the positions that have seen
  another value since (`dynamic`, for good), whose constants are kernel arguments."""
  def __init__(self, walk: Structure) -> None:
    self.first = walk.values(())
    self.dynamic: tuple[int, ...] = ()

  def update(self, walk: Structure) -> Positions:
    """These positions, once those where this graph's values differ from the first graph's have joined `dynamic`."""
    if walk.consts and (values := walk.values(())) != self.first:
      changed = {i for i, (a, b) in enumerate(zip(values, self.first)) if a != b}
      if not changed <= set(self.dynamic):
        self.dynamic = tuple(sorted(changed | set(self.dynamic)))
        if DEBUG.value >= 1: print(f"schedule cache: {len(self.dynamic)} constants become kernel arguments")
    return self

class Found(NamedTuple):
  """What a structure names: its template (held here too: a structure seen again finds it without the abstract graph,
  even once `templates` has dropped it), for each value of the template's `becomes` the entry of the caller's node
  it stands for (None: the graph has no such node), the structure's constant positions, those that are kernel
  arguments in the template, and the values of the others, which the template holds; and the entries of the
  template's lenders. `key` is the structure's (`structures` holds it by its hash)."""
  key: tuple[Any, ...]
  template: Template
  entries: list[int | None]
  positions: Positions
  dynamic: tuple[int, ...]
  values: tuple[Any, ...]
  lenders: list[int | None]

def find(key: tuple[Any, ...], walk: Structure, scalar_args: bool) -> tuple[Found | None, Positions, tuple[int, ...]]:
  """The schedule of the structure `key` if it suits this graph's values (`walk`), the structure's positions (after
  those values, on a miss) and which of them are kernel arguments; without `scalar_args`, none."""
  # by the key's hash, computed once (the LRU's lookup and its mark of recent use would hash the whole key each), and
  # then the key compared: two structures of one hash are a miss, which schedules again and takes the entry over
  if (found := structures.get(hash(key))) is not None and found.key != key: found = None
  # an eager step that repeats a graph finds its schedule by one tuple of values: its positions stand as they were
  if found is not None and walk.values(found.dynamic) == found.values: return found, found.positions, found.dynamic
  positions = found.positions if found is not None else Positions(walk)
  return None, positions, positions.update(walk).dynamic if scalar_args else ()

def remember(found: Found) -> None:
  """Keep `found` as the schedule of its structure (find looks it up)."""
  structures.put(hash(found.key), found)

def found_entries(s: Structure, a: Abstract, nodes: list[UOp]) -> list[int | None] | None:
  """The entry of the caller's node behind each of `nodes` (a.origin), for `Found`; None if one has none."""
  out: list[int | None] = []
  for node in nodes:
    if (orig := a.origin.get(node)) is None: out.append(None)
    elif (entry := s.done.get(orig)) is None: return None
    else: out.append(entry)
  return out

def origins(s: Structure, entries: list[int | None]) -> list[UOp | None] | None:
  """The caller's nodes at `entries` (of a Found) in a graph of its structure; None if one has none (its entry came
  from inside a realized value there: the abstract walk answers)."""
  out: list[UOp | None] = []
  for entry in entries:
    if entry is None: out.append(None)
    elif (node := s.node_of.get(entry)) is None: return None
    else: out.append(node)
  return out

# keyed by the abstract graph and what chooses the packing copies a schedule makes: the CPU target's heuristics, or
# with BEAM a search of that width (whose choice may differ with the thread count); the knobs as
# codegen/program.knob_key says, the one list of the knobs that change compiled code; and what else the multi pass and
# the order of copies read (the RING knob, the ranks)
templates: LRU[tuple[Any, ...], Template] = LRU(SCHEDULE_CACHE)
# keyed by the hash of a structure, which holds every knob and the ranks (Found.key holds it): the schedule of its
# latest values (once its numbers that change are kernel arguments, of all of them)
structures: LRU[int, Found] = LRU(SCHEDULE_CACHE)
# graphs scheduled from scratch, graphs that reused the schedule of one of the same structure, and graphs on several
# devices that the multi pass split into one per device before they were scheduled (a reuse splits none)
schedule_stats: dict[str, int] = {"scheduled": 0, "reused": 0, "split": 0}
