"""vmap: batching as a table of rules over tensor-graph UOps, one per op, each moving a batch dimension through it.

How vmap runs f. Of the two ways a lazy framework can batch, this module takes the graph's: f runs once, on tensors of
one example's shape whose nodes are placeholders (BUFFER nodes with no memory), and builds its graph as it would for one
example; then `batch_graph` walks that graph and rebuilds every node that depends on a placeholder with a batch
dimension in front, by the rule of its op (a reshape keeps the batch size first, a reduce shifts its axes, an
elementwise op broadcasts its unbatched sources), with the placeholders replaced by the batched inputs. The other way,
tensors whose leading dimension is hidden from f's view of their shapes, needs every method that reads `.shape` or
builds a node (hundreds, in the mixins) to know about the hidden dimension; here every Tensor method works under vmap
because all of them end in the few tensor-graph ops these rules cover, and the batched graph is the graph the
hand-batched f builds (the batch dimension in front, broadcast where an operand has none), so it schedules into the same
kernels.

What f cannot do while it runs on placeholders is look at values: `.item()`, `.numpy()`, `.tolist()`, printing, a
data-dependent shape (`nonzero`, `masked_select`, `unique`) or a write that runs now (`x[i] = v`) reaches a
placeholder's memory, which raises VmapError with what to do instead; an in-place write into a batched tensor, or of a
batched value into another tensor (`x.add_(1)`, `acc.assign(acc + x)`), is refused when f returns. Random numbers follow
torch.func's `randomness`: 'error' refuses any draw, 'same' draws once for the whole batch (a draw does not depend on
the batch), 'different' draws for every example (the draw is made for the whole batch, and f sees one example's part of
it).

Transformations compose because each maps graphs to graphs: a grad, jvp or vmap inside f builds its graph over the
placeholders, and this one batches the result. A CUSTOM_GRAD with an arg (a vector-Jacobian product stated as a
function, as a convolution's) gets an arg that traces that function on one example and batches what it builds.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lazytensor.dtype import DType, dtypes
from lazytensor.frontend import live
from lazytensor.frontend.state import state
from lazytensor.helpers import ArgumentError, prod
from lazytensor.runtime.device import Buffer, Device, buffer_map
from lazytensor.uop.graph import buffer_view, const_uop, movement
from lazytensor.uop.ops import DeviceLike, GroupOp, Ops, PatternMatcher, UOp, UPat, node_cached

if TYPE_CHECKING:
  from lazytensor.frontend.tensor import Tensor

class VmapError(ArgumentError):
  """Something f did under vmap that needs values, which f does not have while it runs (or a random draw that
  randomness='error' refuses)."""

NEEDS_VALUES = ("vmap: f needs the values of a tensor computed from a vmapped input (.item(), .numpy(), .tolist(), "
                "printing, a data-dependent shape as nonzero or masked_select, or a write that runs now as x[i] = v). "
                "Under vmap f runs once to build the graph of one example, with no values: compute such things "
                "outside vmap, or with ops that keep the shape (where instead of masked_select, an out-of-place op "
                "instead of a write)")

class _Traced(Buffer):
  """The memory of a placeholder: there is none. Reading it (a realize or a host read of a graph that holds a
  placeholder) is something f did under vmap that needs values. Its bit is in state.no_values while it lives, so that
  a tensor f made and kept (in a closure, a list) is not computed before an assign that runs later (the random count's
  advance: it reads the count)."""
  @node_cached
  def handle(self) -> Any: raise VmapError(NEEDS_VALUES)
  def numpy(self) -> Any: raise VmapError(NEEDS_VALUES)

  @property
  def memory_bit(self) -> int:
    bit = super().memory_bit
    state.no_values |= bit
    return bit

  def __del__(self) -> None:
    state.no_values &= ~self._bit
    super().__del__()

_placeholder_ids = itertools.count()

def placeholder(shape: tuple[int, ...], dtype: DType, device: DeviceLike) -> UOp:
  """A node of `shape` standing for one example of a batched value while a function is traced (on a tuple of devices
  for a sharded one, so that what f builds on it lives there too)."""
  size = prod(shape)
  buf = UOp(Ops.BUFFER, dtype, (), (device, size, ("vmap", next(_placeholder_ids))))
  buffer_map[buf] = _Traced(Device.first(device), size, dtype)
  return buffer_view(buf, shape)

# ---- the rules ----

def broadcast(u: UOp, size: int) -> UOp:
  """An unbatched value with a batch dimension of `size` in front (a constant is made in the batched shape)."""
  if u.op is Ops.VIEW and u.src[0].op is Ops.CONST and const_uop(u.src[0].arg, u.dtype, u.device, u.shape) is u:
    return const_uop(u.src[0].arg, u.dtype, u.device, (size, *u.shape))
  return movement(movement(u, Ops.RESHAPE, (1, *u.shape)), Ops.EXPAND, (size, *u.shape))

@dataclass(frozen=True)
class _Batch:
  """A rule's context: the batch size and each source of the node with the batch dimension in front (None where the
  source does not depend on the batch)."""
  size: int
  srcs: tuple[UOp | None, ...]

  def src(self, x: UOp, i: int = 0) -> UOp:
    """Source i of x, batched (broadcast if it is not)."""
    b = self.srcs[i]
    return b if b is not None else broadcast(x.src[i], self.size)

  def all(self, x: UOp) -> tuple[UOp, ...]: return tuple(self.src(x, i) for i in range(len(x.src)))

  def move(self, x: UOp, arg: Any) -> UOp: return movement(self.src(x), x.op, arg)

def _reduce(ctx: _Batch, x: UOp) -> UOp:
  op, axes = x.arg
  return UOp(Ops.REDUCE_AXIS, x.dtype, (ctx.src(x),), (op, tuple(a + 1 for a in axes)))

def _multi(ctx: _Batch, x: UOp) -> UOp:
  axis, bounds = x.arg
  return UOp(Ops.MULTI, x.dtype, ctx.all(x), (None if axis is None else axis + 1, bounds))

def _custom_grad(ctx: _Batch, x: UOp) -> UOp:
  # a stated vector-Jacobian product is a function of one example's gradient and inputs: batched by tracing it, unless
  # it is written for sources of any shape (a mark's, a checkpoint's)
  wrap = x.arg is not None and not getattr(x.arg, "any_shape", False)
  return x.replace(src=ctx.all(x), arg=BatchedVJP(x.arg, ctx.size) if wrap else x.arg)

def _write_refused() -> VmapError:
  return VmapError("vmap: f writes in place into a batched tensor, or writes a batched value into a tensor (assign, "
                   "setitem, add_, ...); under vmap f must be functional: return the new value instead")

def _refuse_write(x: UOp) -> UOp: raise _write_refused()

pm_batch: PatternMatcher[UOp] = PatternMatcher([
  (UPat(GroupOp.Elementwise | {Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY}, name="x"),
   lambda ctx, x: x.replace(src=ctx.all(x))),                                     # f(a, b) -> f(a[B], b broadcast)
  (UPat(Ops.RESHAPE, name="x"), lambda ctx, x: ctx.move(x, (ctx.size, *x.arg))),  # the batch size stays first
  (UPat(Ops.EXPAND, name="x"), lambda ctx, x: ctx.move(x, (ctx.size, *x.arg))),
  (UPat(Ops.PERMUTE, name="x"), lambda ctx, x: ctx.move(x, (0, *(a + 1 for a in x.arg)))),
  (UPat(Ops.PAD, name="x"), lambda ctx, x: ctx.move(x, ((0, 0), *x.arg))),
  (UPat(Ops.SHRINK, name="x"), lambda ctx, x: ctx.move(x, ((0, ctx.size), *x.arg))),
  (UPat(Ops.FLIP, name="x"), lambda ctx, x: ctx.move(x, (False, *x.arg))),
  (UPat(Ops.REDUCE_AXIS, name="x"), _reduce),                                     # the axes move one up
  (UPat(Ops.MULTI, name="x"), _multi),                                            # the sharded axis moves one up
  (UPat(Ops.CUSTOM_GRAD, name="x"), _custom_grad),
  (UPat(Ops.ASSIGN, name="x"), _refuse_write),
])

def batch_graph(roots: Sequence[UOp], batched: dict[UOp, UOp], size: int) -> list[UOp | None]:
  """Each root rebuilt with a batch dimension of `size` in front, given the batched value of some of its nodes
  (`batched`: placeholders -> values); None for a root that does not depend on any of them."""
  done = dict(batched)
  for node in UOp(Ops.SINK, dtypes.void, tuple(roots)).toposort:
    if node in done or node.op is Ops.SINK or not any(s in done for s in node.src): continue
    new = pm_batch.rewrite(node, ctx=_Batch(size, tuple(done.get(s) for s in node.src)))
    if new is None: raise NotImplementedError(f"vmap: no batching rule for {node.op}")
    done[node] = new
  return [done.get(r) for r in roots]

@dataclass(frozen=True)
class BatchedVJP:
  """A CUSTOM_GRAD's vector-Jacobian product (its arg) for values with a batch dimension of `size` in front: `vjp`
  runs on one example's placeholders and what it builds is batched (an input the rule leaves without a gradient gets
  none)."""
  vjp: Callable[..., tuple[UOp | None, ...]]
  size: int

  def __call__(self, ctx: UOp, *inputs: UOp) -> tuple[UOp | None, ...]:
    one = {u: placeholder(u.shape[1:], u.dtype, u.device) for u in (ctx, *inputs)}
    grads = self.vjp(one[ctx], *(one[u] for u in inputs))
    present = [g for g in grads if g is not None]
    done = iter(batch_graph(present, {p: u for u, p in one.items()}, self.size))
    return tuple(None if g is None else _batched_or_broadcast(next(done), g, self.size) for g in grads)

def _batched_or_broadcast(b: UOp | None, g: UOp, size: int) -> UOp: return broadcast(g, size) if b is None else b

# ---- the trace of f ----

RANDOMNESS = ("error", "different", "same")
_DRAW = "_random_bits"  # the class method of the random mixin that every draw goes through

class Trace:
  """One vmap level while f runs: its placeholders and their batched values, the random draws it intercepts (every
  draw goes through the class method `_random_bits` of the random mixin, swapped for the block), and the check that f
  left no in-place write of batched values pending."""
  def __init__(self, tensor: type[Tensor], size: int, randomness: str) -> None:
    if randomness not in RANDOMNESS: raise ValueError(f"vmap: randomness={randomness!r}; expected one of {RANDOMNESS}")
    self.tensor, self.size, self.randomness = tensor, size, randomness
    self.batched: dict[UOp, UOp] = {}  # placeholder -> its batched value (batch dimension first)
    self.memory = 0  # the placeholders' bits in UOp.reads

  def stand_in(self, value: Tensor) -> Tensor:
    """A placeholder tensor for one example of `value` (batch dimension first)."""
    node = placeholder(value.shape[1:], value.dtype, value.device)
    self.batched[node] = value._graph_root()
    self.memory |= node.reads
    return self.tensor(node)

  def __enter__(self) -> Trace:
    self.start = live.serial()
    self.saved = self.tensor.__dict__.get(_DRAW)
    outer = self.tensor._random_bits  # an enclosing vmap's, or the random mixin's
    def draw(cls: type, n: int, device: DeviceLike | None) -> Tensor: return self._draw(outer, n, device)
    setattr(self.tensor, _DRAW, classmethod(draw))
    return self

  def __exit__(self, kind: type | None, *exc: object) -> None:
    if self.saved is None: delattr(self.tensor, _DRAW)
    else: setattr(self.tensor, _DRAW, self.saved)
    refused = [key for key, (_, node) in state.pending.items()
               if key > self.start and (node.reads | node.writes) & self.memory]
    # they cannot run (their memory or their values are placeholders'): each tensor written goes back to what it held
    for key in sorted(refused, reverse=True): _undo_write(key, self.tensor)
    if refused and kind is None: raise _write_refused()

  def _draw(self, outer: Callable[[int, DeviceLike | None], Tensor], n: int, device: DeviceLike | None) -> Tensor:
    if self.randomness == "error":
      raise VmapError("vmap: f draws random numbers (rand, randn, dropout, ...), which randomness='error' (the "
                      "default) refuses: pass randomness='different' for numbers of their own for each example, or "
                      "'same' for one draw that every example sees")
    if self.randomness == "same": return outer(n, device)
    return self.stand_in(outer(n * self.size, device).reshape(self.size, n))

def _undo_write(key: int, tensor: type[Tensor]) -> None:
  """Drop the pending write made at `key`: the tensor it was made on holds again its earlier pending write into the same
  memory, or the memory's contents."""
  ref, node = state.pending.pop(key)
  if not isinstance(holder := ref(), tensor) or holder.lazydata is not node: return
  earlier = [k for k, (r, _) in state.pending.items() if k < key and r() is holder]
  if earlier: holder.lazydata, holder._assigned_at = state.pending[max(earlier)][1], max(earlier)
  else: holder.lazydata, holder._assigned_at = node.src[0], None
