"""Which nodes of the tensor graph get a buffer of their own ("are materialized"); the scheduler (scheduler.py) then
builds one kernel for each of them.

A node is materialized when the user asks (outputs, contiguous, copies, assigns), when a reduce is consumed through
anything but a reshape (e.g. `x - x.max(1, keepdim=True)`), when a reduce sits inside another reduce's input, when two
reduces of different shapes would share a kernel, when two kernels would otherwise both compute the same reduce, when
an assign's value reads its target elsewhere, or when several kernels would each compute an elementwise value that is
cheaper stored once: one cost model (_worth_storing) weighs one write and a load per kernel against each kernel's ALU
ops and the loads the value adds to it, asked as the kernels are walked, each time one more meets at the value.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from lazytensor.runtime.device import Device
from lazytensor.uop.ops import GroupOp, Ops, UOp
from lazytensor.uop.sint import max_size, sint_lt, sint_prod

LEAVES = {Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR, Ops.IOTA, Ops.DEVICE}

def is_plain_buffer_view(u: UOp) -> bool:
  """Whether u reads a whole buffer densely: a contiguous() of it is the buffer itself."""
  return u.op is Ops.VIEW and u.src[0].op is Ops.BUFFER and u.arg.contiguous and u.arg.size == u.src[0].arg[1]

@dataclass(frozen=True)
class _ValueCost:
  """What an elementwise value costs a kernel that computes it, per element (_worth_storing)."""
  size: int
  ops: int               # float ALU ops
  full: frozenset[UOp]   # the inputs it reads at full size (not broadcast)
  fits: bool             # at most MAX_GROWTH times larger than the largest thing it reads

@dataclass
class Graph:
  """What the scheduler learns about one graph: which nodes are materialized (each with the reason, which VIZ shows),
  and each kernel's reduce."""
  realize: dict[UOp, str] = field(default_factory=dict)
  kernel_reduce: dict[UOp, UOp] = field(default_factory=dict)
  # in this pass over the kernels: the kernel that computes each reduce, the kernels found to compute each elementwise
  # value, in the order they were walked, and, worked out once per value and once per (value, kernel) as more kernels
  # meet at it (_worth_storing): the value's cost, and how many of its full-size inputs a kernel loads for it alone
  owner: dict[UOp, UOp] = field(default_factory=dict)
  computed_by: dict[UOp, list[UOp]] = field(default_factory=dict)
  value_cost: dict[UOp, _ValueCost] = field(default_factory=dict)
  loads_for: dict[UOp, dict[UOp, int]] = field(default_factory=dict)  # by kernel, then value

@dataclass
class _Walk:
  """One kernel's walk in a pass of find_realizes: the nodes it visited, and what it added to the pass's state (to
  take back when one of those nodes is materialized: the walk is then done again)."""
  root: UOp
  nodes: set[UOp] = field(default_factory=set)
  owned: list[UOp] = field(default_factory=list)     # the reduces it computes (Graph.owner)
  computes: list[UOp] = field(default_factory=list)  # the values it was added to Graph.computed_by for

def _computes_part(out: UOp, outs: tuple[UOp, ...]) -> bool:
  """Whether an output that views a computed value is computed on its own, through its view, instead of as a view of
  the whole value: when it reads fewer elements (Tensor.arange(10**7)[-3:] computes 3) of an elementwise value that is
  not itself an output, and no reduce lies under it (its kernel would then copy out of the reduce's buffer, where the
  view of that buffer costs no kernel). A view of a contiguous, copy or assign stays a view of that buffer."""
  base = out.base
  return out.op is Ops.VIEW and (base.op in GroupOp.Elementwise or base.op is Ops.IOTA) and base not in outs and \
    bool(sint_lt(sint_prod(out.shape), sint_prod(base.shape))) and \
    not any(n.op is Ops.REDUCE_AXIS for n in base.toposort)

def _must_realize_roots(sink: UOp) -> dict[UOp, str]:
  roots: dict[UOp, str] = {}
  for out in sink.src:
    base = out.base
    if base.op not in (Ops.BUFFER, Ops.CONST, Ops.DEFINE_VAR):
      roots.setdefault(out if _computes_part(out, sink.src) else base, "an output")
  for node in sink.toposort:
    if node.op in (Ops.CONTIGUOUS, Ops.ASSIGN, Ops.COPY): roots.setdefault(node, f"{node.op.name.lower()} asks for it")
    # a copy moves a dense buffer: whatever it copies is materialized first
    if node.op is Ops.COPY and not is_plain_buffer_view(node.src[0]):
      roots.setdefault(node.src[0], "a copy moves a dense buffer")
  return roots

def _read_by_kernel(n: UOp, g: Graph) -> bool:
  """Whether a kernel that uses n loads it rather than computes it: materialized nodes, buffers, copies."""
  return n in g.realize or n.op in (Ops.BUFFER, Ops.COPY)

def _fused_nodes(start: UOp, g: Graph, through_reduces: bool = True, loaded: UOp | None = None) -> \
    tuple[list[UOp], list[UOp]]:
  """The nodes a kernel computing `start` computes itself, and the nodes it reads instead: materialized ones, buffers,
  copies (and unmaterialized reduces, unless `through_reduces`; and `loaded`, as if it were materialized)."""
  inner, reads, stack, seen = [], [], [start], set()
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    if n is not start and (n is loaded or _read_by_kernel(n, g) or (n.op is Ops.REDUCE_AXIS and not through_reduces)):
      reads.append(n)
      continue
    inner.append(n)
    stack.extend(n.src)
  return inner, reads

def _reads_target_elsewhere(assign: UOp, g: Graph) -> bool:
  """Whether an assign's own kernel reads its target at positions other than the one it writes (a.assign(a.flip(0))):
  that would race. A read is in place only where it reaches the target's own view through elementwise ops alone: a
  view or a reduce on the way (the windows of a cumsum over the target) reads elsewhere. Reads in other kernels of the
  schedule (a gradient that reads the weight) are ordered before it."""
  target = assign.src[0]
  buffer = target.src[0] if target.op is Ops.VIEW else target
  stack, seen = [(assign.src[1], False)], set()
  while stack:
    item = stack.pop()
    if item in seen: continue
    seen.add(item)
    n, moved = item
    if n is buffer or (n.op is Ops.VIEW and n.src[0] is buffer):
      if moved or n is not target: return True
      continue
    if n is not assign.src[1] and _read_by_kernel(n, g): continue
    stack.extend((s, moved or n.op in (Ops.VIEW, Ops.REDUCE_AXIS)) for s in n.src)
  return False

def _kernel_value(root: UOp) -> UOp:
  """What the kernel of a materialized node computes: an assign's value, what a contiguous makes dense, the node."""
  return root.src[1] if root.op is Ops.ASSIGN else (root.src[0] if root.op is Ops.CONTIGUOUS else root)

def _walk_kernel(walk: _Walk, g: Graph) -> tuple[UOp, str] | None:
  """Visit what `walk.root`'s kernel would compute; returns a node that must be materialized and why, if one is
  found."""
  root = walk.root
  stack: list[tuple[UOp, bool, bool]] = [(_kernel_value(root), True, False)]
  seen: set[tuple[UOp, bool, bool]] = set()
  while stack:
    item = stack.pop()
    if item in seen: continue
    seen.add(item)
    node, reshape_only, in_reduce = item
    walk.nodes.add(node)
    # the value of a contiguous or an assign that is materialized itself is loaded (a copy), not computed again
    if node is not root and (node in g.realize or node.op in LEAVES): continue
    if node.op is Ops.COPY: continue
    if node.op is Ops.VIEW:
      if in_reduce and _worth_materializing_before_expand(node, g):
        return node.src[0], "cheaper stored than recomputed per element of an expand into a reduce"
      # a contiguous view is a reshape only when it reads all of its source (not a prefix of it: x[:1] of a reduce)
      whole = node.arg.contiguous and sint_prod(node.shape) == sint_prod(node.src[0].shape)
      stack.append((node.src[0], reshape_only and whole, in_reduce))
    elif node.op is Ops.REDUCE_AXIS:
      if in_reduce: return node, "a reduce in another reduce's input"
      if not reshape_only: return node, "a reduce read through a view that is not a reshape"
      if g.owner.get(node, root) is not root: return node, "a reduce that two kernels would both compute"
      other = g.kernel_reduce.get(root)
      if other is not None and (other.src[0].shape, other.arg[1]) != (node.src[0].shape, node.arg[1]):
        return node, "a reduce of another shape than the kernel's"
      g.kernel_reduce.setdefault(root, node)
      if node not in g.owner:
        g.owner[node] = root
        walk.owned.append(node)
      stack.append((node.src[0], True, True))
    else:
      if node.op in GroupOp.Elementwise and _computed_again(node, walk, g):
        return node, "cheaper stored than recomputed by each of the kernels that read it"
      stack.extend((s, reshape_only, in_reduce) for s in node.src)
  return None

EXPAND_RATIO = 2          # a view that reads each element of its source this many times or more is an expand
RECOMPUTE_COST = 2        # ALU ops and extra loads per element of a source that is cheaper to store than to recompute
MIN_RECOMPUTE_WORK = 1 << 16  # ...when recomputing adds this much work: below, a kernel launch costs more
MAX_GROWTH = 4            # ...and when it is at most this many times larger than the largest thing it reads
# what storing a value several kernels would compute costs against computing it in each, in loads of an element of a
# full-size buffer (_worth_storing): a float ALU op costs 1/ALU_OPS_PER_LOAD of one (8-lane vectors, two ports), a
# store STORE_LOADS (a CPU reads each cache line it writes first). Re-measure for another vector width or a GPU.
ALU_OPS_PER_LOAD = 4
STORE_LOADS = 2

def _read_size(n: UOp) -> int:
  """The elements a kernel's read of `n` spans (a symbolic size at its largest)."""
  return n.arg[1] if n.op is Ops.BUFFER else max_size(n.shape)

def _alu_ops(inner: list[UOp]) -> int:
  """The float ALU ops per element of the nodes a kernel computes (integer and bool ops are index arithmetic, not
  counted). A float cast to or from a tensor core's input dtype (x.half().float() times a weight) is free: the tensor
  core takes it in registers as it loads its fragments (opt/kernel._mma_operand)."""
  if not inner: return 0
  tc_in = {tc.dtype_in for tc in Device[Device.first(inner[0].device)].renderer.tensor_cores}
  return sum(1 for n in inner if n.op in GroupOp.Elementwise and n.dtype.is_float and
             not (n.op is Ops.CAST and n.src[0].dtype.is_float and {n.dtype, n.src[0].dtype} & tc_in))

def _recompute_cost(src: UOp, g: Graph) -> tuple[int, int]:
  """What computing the elementwise `src` costs a kernel per element, in float ALU ops and loads past the first, and
  the size of the largest thing it reads."""
  inner, reads = _fused_nodes(src, g, through_reduces=False)
  return _alu_ops(inner) + max(len(reads) - 1, 0), max((_read_size(n) for n in reads), default=0)

def _worth_materializing_before_expand(view: UOp, g: Graph) -> bool:
  """Whether the elementwise computation under an expanding view inside a reduce gets a buffer of its own: fused, it
  would run once per element of the expanded view (a matmul of relu'(h) * dh by x recomputes the mask for every output
  column: 1.4 ms instead of 0.65 + 0.01). Not for a single float op on one buffer (a cast: cheaper to recompute than to
  store and load again), not when recomputing adds less work than a kernel launch costs, and not when the computation
  is much larger than what it reads (a one-hot mask from an iota and indices, an outer product: cheap to recompute,
  huge to store)."""
  src = view.src[0]
  ratio = max_size(view.shape) / max(max_size(src.shape), 1)  # symbolic sizes at their largest
  if src.op not in GroupOp.Elementwise or src in g.realize or ratio < EXPAND_RATIO: return False
  cost, largest_read = _recompute_cost(src, g)
  return cost >= RECOMPUTE_COST and max_size(src.shape) <= MAX_GROWTH * largest_read and \
    (ratio - 1) * cost * max_size(src.shape) >= MIN_RECOMPUTE_WORK

def _computed_again(value: UOp, walk: _Walk, g: Graph) -> bool:
  """Records that `walk.root`'s kernel computes the elementwise `value`; whether, computed by one more kernel, it is
  now worth a buffer of its own. The kernels meet first at the outermost value they share, stored first: what the
  values under it read is then cut at it (a residual stream through every layer is stored at each layer)."""
  kernels = g.computed_by.setdefault(value, [])
  if kernels and kernels[-1] is walk.root: return False  # reached again by the same walk (through another view)
  kernels.append(walk.root)
  walk.computes.append(value)
  return len(kernels) >= 2 and _worth_storing(value, kernels, g)

def _worth_storing(value: UOp, kernels: list[UOp], g: Graph) -> bool:
  """Whether an elementwise value that `kernels` would each compute is cheaper stored once, counted in loads of one
  element. Recomputed, each kernel runs its float ops (ALU_OPS_PER_LOAD of them cost a load) and loads those of its
  full-size inputs it reads for this value alone (a broadcast one, a bias or a row's mean, costs little); stored, one
  kernel runs them once, loading each of its full-size inputs, and writes it (STORE_LOADS), and each kernel loads it.
  Stored when that saves at least MIN_RECOMPUTE_WORK, more than a launch costs, and when the value is at most
  MAX_GROWTH times larger than the largest thing it reads (a one-hot mask from an iota and indices: cheap to compute,
  huge to store). So GPT-2's log-softmax backward, which both packing copies of its output layer's gradients computed,
  reading the logits across their rows (0.4-1.5 s of a 6 s step), is stored, and so is a residual stream (x + attn(x)
  + b, then + mlp(...) + b), which a LayerNorm's reduces and the kernels its output feeds each computed from every
  earlier layer's matmul outputs (BERT's last LayerNorm kernels read about 100 buffers); `a * 2 + b` read by two
  reduces, a cast, a scale, and the shared parts of gelu(h) and its derivative (each kernel reads h all the same) are
  not. Nor is a value a kernel stores itself (an assign's: AdamW's new moment, read again by the weight's update):
  stored again, it would be computed into a buffer and copied."""
  if (cost := g.value_cost.get(value)) is None:
    size = max_size(value.shape)
    inner, reads = _fused_nodes(value, g)
    full = frozenset(n for n in reads if EXPAND_RATIO * _read_size(n) > size)
    fits = size <= MAX_GROWTH * max(map(_read_size, reads), default=0)
    cost = g.value_cost[value] = _ValueCost(size, _alu_ops(inner), full, fits)
  # the saving when the kernels load `loads` of its full-size inputs for it alone, in element loads
  def saving(loads: int) -> float:
    return ((len(kernels) - 1) * cost.ops / ALU_OPS_PER_LOAD + loads - len(cost.full) - STORE_LOADS - len(kernels)) * \
      cost.size
  # at most, every kernel loads all of them for this value alone: only then is each kernel's own walk worth it
  if not cost.fits or saving(len(kernels) * len(cost.full)) < MIN_RECOMPUTE_WORK or \
      any(value is _kernel_value(k) for k in kernels): return False
  loads = 0
  for i, k in enumerate(kernels):
    if (n := (for_k := g.loads_for.setdefault(k, {})).get(value)) is None:
      n = for_k[value] = len(cost.full.difference(_fused_nodes(_kernel_value(k), g, loaded=value)[1]))
    loads += n
    # the kernels not walked yet load at least none and at most all of them for it alone
    if saving(loads) >= MIN_RECOMPUTE_WORK: return True
    if saving(loads + (len(kernels) - 1 - i) * len(cost.full)) < MIN_RECOMPUTE_WORK: return False
  return False

def find_realizes(sink: UOp, also: tuple[UOp, ...] = ()) -> Graph:
  """Grow the set of materialized nodes (from the roots, and the scatters `also`) until every kernel obeys the fusion
  rules. The kernels are walked in order, each with what the walks before it learned; a node found is materialized,
  and the walks go on from the first that visited it, those before it left as they are: a node they never reached
  changes nothing they saw. (All of them walked again for each node found made it quadratic: GPT-2 124M's training
  step, 1362 kernels, took 35 s of CPU here, 2.8 s so; BERT's and ResNet50's forwards 0.8 -> 0.6 s, 0.5 -> 0.4 s.)"""
  g = Graph(realize={**_must_realize_roots(sink), **dict.fromkeys(also, "a scatter inside an expression")})
  walks: list[_Walk] = []
  while True:
    found = None
    for root in itertools.islice(g.realize, len(walks), None):
      walks.append(walk := _Walk(root))
      if (found := _walk_kernel(walk, g)) is not None: break
      # an assign that would read its own target elsewhere computes its value into a buffer of its own first
      if root.op is Ops.ASSIGN and root.src[1] not in g.realize and _reads_target_elsewhere(root, g):
        found = root.src[1], "an assign's value reads its target elsewhere"
        break
    if found is None: return g
    # asking again for a node that is materialized already would loop here forever
    assert found[0] not in g.realize, \
      f"scheduler: a kernel asks again for {found[0].op} {found[0].shape}, materialized already"
    g.realize[found[0]] = found[1]
    # the node under a view the walk stopped at is in no walk but the last
    _undo_walks(g, walks, next((i for i, w in enumerate(walks) if found[0] in w.nodes), len(walks) - 1))

def _undo_walks(g: Graph, walks: list[_Walk], start: int) -> None:
  """Takes back what walks[start:] added to the pass's state, the latest first, and the costs worked out with what
  they saw: a value's cost goes with the second of the walks that computed it (it was worked out in that one), a
  kernel's loads for the values with its walk."""
  for w in reversed(walks[start:]):
    g.kernel_reduce.pop(w.root, None)
    g.loads_for.pop(w.root, None)
    for r in w.owned: del g.owner[r]
    for v in w.computes:
      (kernels := g.computed_by[v]).pop()
      if len(kernels) == 1: g.value_cost.pop(v, None)
      elif not kernels: del g.computed_by[v]
  del walks[start:]
