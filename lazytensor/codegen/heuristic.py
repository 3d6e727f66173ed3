"""Hand-coded optimizations, used when BEAM=0: a few rules that get most of the speed on CPU and GPU-like devices.

  matmul-like kernels (a reduce over products where each input is broadcast along some output axis): a register tile
    (upcast both reused output axes; the contiguous one becomes SIMD vectors), threads (CPU) or a block of local
    threads (GPU);
  other reductions: unroll a contiguous reduce axis into independent vector accumulators (CPU), or GROUP the reduce
    across threads when there are few outputs (GPU);
  elementwise: SIMD vectors along the contiguous axis, then threads or local threads.
"""
from __future__ import annotations

from lazytensor.codegen.kernel import AxisKind, Kernel, KernelOptError, Opt, OptOps
from lazytensor.helpers import THREADS, prod
from lazytensor.uop.ops import Ops

MIN_THREADED_WORK = 1 << 16  # below this many operations a second CPU thread costs more than it saves

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply_opt(opt)
  except KernelOptError: return False
  return True

def _stride(k: Kernel, node_index: int, axis: int) -> int | None:
  return k.sts[node_index].real_strides()[axis]

def _buffers(k: Kernel) -> list[int]:
  return [i for i, n in enumerate(k.view_nodes) if n.op in (Ops.LOAD, Ops.STORE)]

def _output_contiguous_axis(k: Kernel) -> int | None:
  """The global axis along which the output is stored with stride 1 (where SIMD stores go)."""
  store = next(i for i, n in enumerate(k.view_nodes) if n.op is Ops.STORE)
  for a in reversed(k.axes_of(AxisKind.GLOBAL)):
    if _stride(k, store, a) == 1: return a
  return None

def _reused_axes(k: Kernel) -> list[int]:
  """Global axes along which some input is broadcast (stride 0): upcasting them reuses loaded values."""
  loads = [i for i in _buffers(k) if k.view_nodes[i].op is Ops.LOAD]
  return [a for a in k.axes_of(AxisKind.GLOBAL) if any(_stride(k, i, a) == 0 and k.sts[i].shape[a] > 1 for i in loads)]

def _is_matmul_like(k: Kernel) -> bool:
  return bool(k.reduce_axes) and any(u.op is Ops.MUL for u in k.ast.toposort) and len(_reused_axes(k)) >= 2

def _largest_divisor(size: int, choices: tuple[int, ...]) -> int | None:
  return next((c for c in choices if size % c == 0 and size >= c), None)

def _upcast(k: Kernel, axis: int | None, choices: tuple[int, ...]) -> None:
  if axis is None: return
  if (amt := _largest_divisor(k.full_shape[axis], choices)) is not None: _try(k, Opt(OptOps.UPCAST, axis, amt))

def _thread(k: Kernel, work: int) -> None:
  cores = int(THREADS.value)
  if cores < 2 or work < MIN_THREADED_WORK: return
  for a in k.axes_of(AxisKind.GLOBAL):
    if (amt := _largest_divisor(k.full_shape[a], tuple(range(cores, 1, -1)))) is not None:
      if _try(k, Opt(OptOps.THREAD, a, amt)): return

def _cpu(k: Kernel) -> None:
  work = prod(k.full_shape)
  if _is_matmul_like(k):
    vec_axis = _output_contiguous_axis(k)
    _upcast(k, vec_axis, (32, 16, 8, 4))
    other = next((a for a in _reused_axes(k) if a != vec_axis and k.kinds[a] is AxisKind.GLOBAL), None)
    _upcast(k, other, (8, 4, 2))
  elif k.reduce_axes:
    last = k.axes_of(AxisKind.REDUCE)[-1]
    loads = [i for i in _buffers(k) if k.view_nodes[i].op is Ops.LOAD]
    if any(_stride(k, i, last) == 1 for i in loads):
      amt = _largest_divisor(k.full_shape[last], (16, 8, 4))
      if amt is not None: _try(k, Opt(OptOps.UNROLL, last, amt))
  else: _upcast(k, _output_contiguous_axis(k), (16, 8, 4))
  _thread(k, work)

def _gpu(k: Kernel) -> None:
  r = k.renderer
  if r.tensor_cores and _try(k, Opt(OptOps.TC, 0, 0)): return
  if k.reduce_axes and prod(k.output_shape()) <= 2048 and r.has_shared:
    last = k.axes_of(AxisKind.REDUCE)[-1]
    amt = _largest_divisor(k.full_shape[last], (256, 128, 64, 32, 16))
    if amt is not None and _try(k, Opt(OptOps.GROUPTOP, last, amt)): return
  if _is_matmul_like(k):
    vec_axis = _output_contiguous_axis(k)
    other = next((a for a in _reused_axes(k) if a != vec_axis), None)
    for axis in (vec_axis, other):
      if axis is not None and (amt := _largest_divisor(k.full_shape[axis], (4, 2))) is not None:
        _try(k, Opt(OptOps.UPCAST, axis, amt))
  for a in reversed(k.axes_of(AxisKind.GLOBAL)):
    budget = 256 // max(1, k.local_size())
    if budget < 2: break
    if (amt := _largest_divisor(k.full_shape[a], tuple(c for c in (256, 128, 64, 32, 16, 8, 4, 2) if c <= budget))):
      _try(k, Opt(OptOps.LOCAL, a, amt))

def hand_coded_optimizations(k: Kernel) -> Kernel:
  """Apply the heuristics to a copy of `k`; the original is unchanged."""
  k = k.copy()
  if k.renderer.has_local: _gpu(k)
  else: _cpu(k)
  return k
