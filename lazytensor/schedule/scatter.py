"""Scatter-adds run as stores at a computed address: the transposed gather (schedule/gather.py).

The gradient of a gather (nn.Embedding, `x[idx]`, `gather`), `scatter_reduce`, `scatter_add`, `index_add` and
`scatter` are written with existing ops (frontend/mixin/index.py): every target o of the output reduces the entries n
whose index names it, `where(e[n] == arange(o), v[n], 0).sum(n)` (a max for amax/amin and for the position of the last
write to each target in scatter without a reduce, whose value is then a sum over `e[n] == arange(o) & n == last[o]`).
Run as written, each of the V*D targets scans all N entries: O(N*V*D) (nn.Embedding(32000, 256)'s backward over 4096
indices: 1.2 s).

`split_scatter` runs such a kernel as two, each O(its own data):
* a fill: the output gets what it holds before any entry arrives, the reduce's identity (or the term g of a store
  value `g + reduce`, the same for every entry: a gradient accumulated onto another);
* the scatter: a kernel over the entry axes (and the output's other axes, the embedding's D) whose store is a SCATTER,
  a STORE with a fourth source, the index e, and arg (op, entry axes, stride, n), the mirror of the GATHER: each
  entry combines its value into out[... + e * stride ...] in place (a read-modify-write). An entry whose index is
  outside [0, n) writes nothing, which is what the reduce computes (no target matches it).
Two kernels rather than one: the fill covers the whole output, which the scatter kernel does not walk (its target
axis became the computed address), so one kernel would need a loop nest of a second shape; as two, each is an
ordinary kernel the optimizer and the renderers already handle, and the in-order scatter needs nothing new from a
renderer.

Two entries may name one target. Where the renderer combines the op into memory atomically (its `atomics`: CUDA's
atomicAdd of float, double, half, bfloat16 and 32/64-bit ints, atomicMax of 32/64-bit ints, an atomicCAS loop for a
float max; so CUDA, CUDACPU, which compiles the same source, and EMU), the entry axes are parallel axes (GLOBAL,
split into LOCAL threads as any other) and each entry's update is one atomic read-modify-write: the lowerer emits a
STORE whose arg is the op, and the renderer writes it (`atomicAdd(data0+i, v);`). nn.Embedding(32000, 256)'s
backward over 4096 indices is then 4096 blocks of 256 threads, one update each, instead of 256 threads each looping
over all 4096 entries. Elsewhere (8- and 16-bit ints, which CUDA has no atomic add or max for; LLVM on the CPU,
where a 1-d scatter-add of 4M entries with `atomicrmw fadd` on 2 threads took 2-6x as long as the in-order loop on
one: extra/bench/cpu_atomics.py) the entry axes stay REDUCE axes of the kernel: loops that run in order within one
thread. Either way `Kernel.apply_opt` refuses every opt that would put two entries in the lanes of one thread
(UNROLL, GROUP/GROUPTOP without atomics; UPCAST of an entry axis with them: two lanes naming one target would be one
store) or pad them (PADTO: a padded entry would update target 0); the others (GLOBAL, THREAD, LOCAL, UPCAST of the
other axes) split the output's other axes, whose elements are different targets whatever the indices hold: a store
view maps distinct positions to distinct elements.

What the atomic kernels compute is what the in-order ones do: a sum of ints, a max and the positions of
`scatter`'s last write (an int max) are exact in any order, and so are the value of the last write (its value added to
zeros) and every sum whose terms add exactly; only a float sum that rounds (the gradient of an embedding) may round
differently from run to run, as torch's on a GPU does.

The graph a Tensor builds is unchanged, and so are its gradients: only the kernels differ. A scatter reduce inside a
bigger expression (scatter_reduce's `(count > 0).where(out, old)`) is found by `embedded_scatters`, and the scheduler
gives it a buffer of its own, so that it becomes such a pair of kernels.
"""
from __future__ import annotations

from dataclasses import dataclass

from lazytensor.dtype import dtypes
from lazytensor.helpers import prod
from lazytensor.schedule.gather import AxisFold, compared_with_arange, kept_values
from lazytensor.shape.view import ShapeTracker
from lazytensor.uop.ops import GroupOp, Ops, UOp, identity_element

SCATTER_OPS = (Ops.ADD, Ops.MAX)
# below this many candidate pairs (entries x targets x other elements) the reduce as written stays: one kernel that
# scans them all costs less than the fill and scatter kernels' launches. sort of 8 rows of 32 (DEBUG=2, one AVX2
# core): its rank scatters of 8192 pairs ran in the sort's 3 kernels; folded, they were 2 fills and 2 scatters of
# 4-9 us each (5 kernels)
SCATTER_MIN_WORK = 1 << 16

@dataclass(frozen=True)
class _Scatter:
  """A reduce that is a scatter: its values at entry position, the index of their target along `axis`, n targets."""
  axis: int
  e: UOp
  values: UOp
  n: int

def _as_scatter(red: UOp, shape: tuple[int, ...]) -> _Scatter | None:
  """The reduce `red` (of `shape`, its reduced axes 1) read as a scatter: entries (its reduced axes) whose values land
  on the target along a kept axis that their index names. None when it is not one, when it is too small to gain
  (SCATTER_MIN_WORK), or when its values hold another reduce (one kernel, one set of reduce axes)."""
  op, axes = red.arg
  if op not in SCATTER_OPS or red.dtype == dtypes.bool or (picked := kept_values(red)) is None: return None
  if max(prod(u.arg.shape) for u in red.toposort if u.op is Ops.VIEW) < SCATTER_MIN_WORK: return None
  cond, values = picked
  if any(u.op is Ops.REDUCE_AXIS for u in (cond, values) for u in u.toposort): return None
  for axis in range(len(shape)):
    if axis in axes or shape[axis] == 1 or (found := _target_of(cond, axis)) is None: continue
    (e, n), rest = found
    if rest is not None: values = rest.where(values, UOp.const(values.dtype, identity_element(op, values.dtype)))
    fold = AxisFold(axis, e, n)  # values seen at target 0; a value that varies along the targets is read at e
    if fold.e is not None and (v := fold.at(values)) is not None: return _Scatter(axis, fold.e, v, n)
  return None

def _target_of(cond: UOp, axis: int) -> tuple[tuple[UOp, int], UOp | None] | None:
  """((e, n), rest) where cond is `e == arange(n)` along `axis`, or that and a further condition `rest` (an entry that
  passes only at some targets: the last write to each target, in scatter without a reduce)."""
  if (found := compared_with_arange(cond, axis)) is not None: return found, None
  if cond.op is not Ops.AND: return None
  for hit, rest in (cond.src, cond.src[::-1]):
    if (found := compared_with_arange(hit, axis)) is not None: return found, rest
  return None

def _reduce_and_rest(value: UOp) -> tuple[UOp, UOp | None] | None:
  """(the reduce, the term g) of a store value that is `reduce` or `g <op> reduce` with the reduce's own op."""
  if value.op is Ops.REDUCE_AXIS: return value, None
  if value.op not in SCATTER_OPS: return None
  for red, g in (value.src, value.src[::-1]):
    if red.op is Ops.REDUCE_AXIS and red.arg[0] is value.op and not g.reaches(red): return red, g
  return None

def _store_view_along(store: UOp, axis: int) -> tuple[UOp, int] | None:
  """The store's VIEW with `axis` cut to its first index, and its stride along it; None for a view that is not one
  plain strided view (a mask, or a reshape of a permute, would need more than a stride)."""
  st = store.src[1].arg
  if len(st.views) != 1 or st.views[0].mask is not None: return None
  first = st.shrink(tuple((0, 1) if i == axis else (0, s) for i, s in enumerate(st.shape)))
  return store.src[1].replace(arg=first), st.views[0].strides[axis]

def split_scatter(ast: UOp) -> tuple[UOp, UOp] | None:
  """(fill, scatter): the kernel ASTs that compute `ast`'s output when it stores a scatter reduce (see the module's
  docstring); None when it does not, or when its entries' values or indices read the buffer it writes (the fill
  overwrites them before the scatter runs)."""
  if len(ast.src) != 1 or (store := ast.src[0]).op is not Ops.STORE: return None
  if (found := _reduce_and_rest(store.src[2])) is None: return None
  red, rest = found
  if (sc := _as_scatter(red, store.src[1].arg.shape)) is None: return None
  if (view := _store_view_along(store, sc.axis)) is None: return None
  buf = store.src[0]
  if any(u.op in GroupOp.Load and u.src[0] is buf for x in (sc.values, sc.e) for u in x.toposort): return None
  op, axes = red.arg
  if rest is None:
    everywhere = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker.from_shape(store.src[1].arg.shape))
    rest = UOp(Ops.CONST, red.dtype, (everywhere,), identity_element(op, red.dtype.scalar()))
  fill = ast.replace(src=(store.replace(src=(buf, store.src[1], rest)),))
  scatter = UOp(Ops.SCATTER, dtypes.void, (buf, view[0], sc.values.cast(red.dtype), sc.e), (op, axes, view[1], sc.n))
  return fill, UOp(Ops.SINK, dtypes.void, (scatter,))

def embedded_scatters(ast: UOp) -> list[UOp]:
  """The scatter reduces of a kernel that `split_scatter` cannot take whole, because each sits inside a bigger
  expression: given a buffer of their own, each becomes a fill and a scatter."""
  if split_scatter(ast) is not None: return []
  # a store of the reduce itself that split_scatter refused (its values read the output) gains nothing from a buffer
  stores = [s for s in ast.src if s.op in GroupOp.Store]
  top, shape = {s.src[2] for s in stores}, stores[0].src[1].arg.shape  # every store of a kernel has its shape
  return [u for u in ast.toposort if u.op is Ops.REDUCE_AXIS and u not in top and _as_scatter(u, shape) is not None]
