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

# below this much work a second CPU thread costs more than it saves: a launch posts a share to a spinning thread in
# ~3 us (runtime/cpu_threads.py; 256K-element elementwise: 56 us on one thread, 20 on two); work counts elements, or
# for matmul-like kernels multiply-adds / MATMUL_SPEEDUP (vector FMAs on cached operands do that many per element
# streamed)
MIN_THREADED_WORK = 1 << 17
MATMUL_SPEEDUP = 16

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply_opt(opt)
  except KernelOptError: return False
  return True

def _stride(k: Kernel, node_index: int, axis: int) -> int | None:
  """How far one step along `axis` moves in the buffer; a padded (masked) axis still counts by its view's stride."""
  st = k.sts[node_index]
  return st.views[0].strides[axis] if len(st.views) == 1 else st.real_strides()[axis]

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

VECTOR_REGISTERS = 16  # accumulators a register tile may hold (of 32 AVX-512 registers, leaving room for operands)
SIMD_WIDTH = 16        # floats in one vector register

def _vector_choice(k: Kernel, loads: list[int]) -> tuple[int, int] | None:
  """(axis, amount) for the SIMD vectors of a register tile: an output axis along which, once the vector is split off,
  every operand is contiguous or broadcast (one at least contiguous). The widest vector wins (up to a register), then
  the axis the output is contiguous along. None when no axis qualifies (x @ W.T: see _dot_tile)."""
  out_axis, options = _output_contiguous_axis(k), []
  for a in k.axes_of(AxisKind.GLOBAL):
    for amt in (32, 16, 8, 4):
      trial = k.copy()
      if k.full_shape[a] % amt or not _try(trial, Opt(OptOps.UPCAST, a, amt)): continue
      lane = trial.axes_of(AxisKind.UPCAST)[-1]
      strides = [_stride(trial, i, lane) for i in loads]
      if all(st in (0, 1) for st in strides) and 1 in strides:
        options.append((min(amt, SIMD_WIDTH), a == out_axis, a, amt))
        break
  if not options: return None
  _, _, axis, amt = max(options)
  return axis, amt

CONSECUTIVE_ROWS = 8

def _row_amount(k: Kernel, axis: int, budget: int, consecutive: bool) -> int | None:
  """How many rows of vectors: the largest power of two within the budget. Rows read from consecutive addresses (a
  convolution's output width) avoid powers of two: LLVM's SLP vectorizer merges 8 such scalar loads into one vector load
  and 8 shuffles, which compete with the FMAs for a port (56-wide conv, 16 channels x 8 rows: 40 GFLOP/s; x 7: 120;
  x 14: 77), and stay within CONSECUTIVE_ROWS."""
  size = k.full_shape[axis]
  if consecutive:
    budget = min(budget, CONSECUTIVE_ROWS)
    odd = next((c for c in range(budget, max(budget // 2, 2) - 1, -1) if size % c == 0 and c & (c - 1)), None)
    if odd is not None: return odd
  return _largest_divisor(size, tuple(c for c in (16, 8, 4, 2) if c <= budget))

def _register_tile(k: Kernel) -> None:
  """Upcast an output axis into SIMD vectors and a second axis into rows of them. The second axis is one along which
  the vector operand is broadcast, so each vector load serves a whole column of the tile (matmul: B's row serves 8
  rows of A; conv with packed weights: 16 output channels' weights serve 7 output positions)."""
  loads = [i for i in _buffers(k) if k.view_nodes[i].op is Ops.LOAD]
  if (choice := _vector_choice(k, loads)) is None:
    # no axis without gathers: vector dot products along K if both operands are contiguous there, else the output's
    # contiguous axis anyway
    out_axis = _output_contiguous_axis(k)
    if _dot_tile(k, loads) or out_axis is None: return
    if (out_amt := _largest_divisor(k.full_shape[out_axis], (32, 16, 8, 4))) is None: return
    choice = (out_axis, out_amt)
  vec_axis, vec_amt = choice
  vec_loads = [i for i in loads if _stride(k, i, vec_axis) != 0]  # the operands that vary along the vectors
  if not _try(k, Opt(OptOps.UPCAST, vec_axis, vec_amt)): return
  rows_budget = VECTOR_REGISTERS // -(-vec_amt // SIMD_WIDTH)
  candidates = [a for a in k.axes_of(AxisKind.GLOBAL) if any(_stride(k, i, a) == 0 and k.sts[i].shape[a] > 1
                                                              for i in vec_loads)]
  other = candidates[-1] if candidates else next((a for a in _reused_axes(k) if k.kinds[a] is AxisKind.GLOBAL), None)
  if other is not None:
    consecutive = any(_stride(k, i, other) in (1, None) for i in loads)  # None: a masked (padded) view
    if (rows := _row_amount(k, other, rows_budget, consecutive)) is not None: _try(k, Opt(OptOps.UPCAST, other, rows))
  _panel_loop_outside(k, vec_loads)

DOT_TILE = 4  # outputs per reused axis in a tile of vector dot products: 16 accumulators

def _dot_tile(k: Kernel, loads: list[int]) -> bool:
  """A matmul whose operands are both contiguous along the reduce axis (x @ W.T, as Linear computes it): vectors along
  the reduce axis instead, so no operand is gathered. A 4x4 tile of outputs, each a vector of partial sums added up
  across its lanes at the end; every vector load of one operand serves 4 outputs. 128x784 by 784x256 on one thread:
  1.2 ms (vectors along the output, B gathered) -> 0.49 ms."""
  red = k.axes_of(AxisKind.REDUCE)
  if not red or not all(_stride(k, i, red[-1]) in (0, 1) for i in loads): return False
  amt = _largest_divisor(k.full_shape[red[-1]], (SIMD_WIDTH, 8))
  if amt is None or not _try(k, Opt(OptOps.UNROLL, red[-1], amt)): return False
  for a in _reused_axes(k)[-2:]: _upcast(k, a, (DOT_TILE, 2))
  return True

PANEL_REUSE_BYTES = 1 << 19  # vector operands larger than this no longer stay in L2 between uses

def _panel_loop_outside(k: Kernel, vec_loads: list[int]) -> None:
  """Loop over the vector operand's panels outermost (matmul: B's column panels outside A's row tiles), so that one
  panel stays in L2 while every row tile uses it; else each row tile streams all of B again.
  Measured at 1024: 96 -> 145 GFLOP/s on one thread."""
  if not vec_loads: return
  node = k.view_nodes[vec_loads[0]]
  if k.sts[vec_loads[0]].real_size() * node.src[0].dtype.itemsize <= PANEL_REUSE_BYTES: return
  globals_ = k.axes_of(AxisKind.GLOBAL)
  others = [i for i in _buffers(k) if k.view_nodes[i].op is Ops.LOAD and i not in vec_loads]
  panel = next((a for a in globals_ if any(_stride(k, i, a) == 0 for i in others) and k.full_shape[a] > 1), None)
  if panel is not None and globals_ and panel != globals_[0]: _try(k, Opt(OptOps.SWAP, globals_[0], panel))

def _cpu(k: Kernel) -> None:
  work = prod(k.full_shape)
  if _is_matmul_like(k):
    work //= MATMUL_SPEEDUP
    _register_tile(k)
  elif k.reduce_axes:
    last = k.axes_of(AxisKind.REDUCE)[-1]
    loads = [i for i in _buffers(k) if k.view_nodes[i].op is Ops.LOAD]
    if any(_stride(k, i, last) == 1 for i in loads):
      amt = _largest_divisor(k.full_shape[last], (16, 8, 4))
      if amt is not None: _try(k, Opt(OptOps.UNROLL, last, amt))
    else: _upcast(k, _output_contiguous_axis(k), (64, 32, 16, 8, 4))  # x.sum(0): vectors across neighbouring sums
  else: _upcast(k, _output_contiguous_axis(k), (16, 8, 4))
  _thread(k, work)

# threads a GPU block aims for: 8 warps hide memory latency, and a large grid still leaves several blocks per SM
GPU_BLOCK = 256
# a reduce this long is split across the threads of a block even when there are many outputs: one thread summing a
# row alone reads it with a stride between neighbouring threads (uncoalesced), and takes long to finish
GPU_GROUP_REDUCE = 1024
GPU_VECTOR = 4  # elements a thread loads at once along a contiguous axis: 16 bytes of float32 (ld.global.v4)

def _loads(k: Kernel) -> list[int]: return [i for i in _buffers(k) if k.view_nodes[i].op is Ops.LOAD]

def _gpu_group(k: Kernel) -> bool:
  """Split the last reduce axis across a block's threads: a vector per thread when the axis is contiguous, then the
  threads interleaved (GROUP takes the inner part), so that neighbouring threads read neighbouring vectors."""
  last = k.axes_of(AxisKind.REDUCE)[-1]
  if prod(k.output_shape()) > 2048 and k.full_shape[last] < GPU_GROUP_REDUCE: return False
  contiguous = any(_stride(k, i, last) == 1 for i in _loads(k))
  if contiguous and k.full_shape[last] % (GPU_VECTOR * 16) == 0: _try(k, Opt(OptOps.UNROLL, last, GPU_VECTOR))
  amt = _largest_divisor(k.full_shape[last], (GPU_BLOCK, 128, 64, 32, 16))
  return amt is not None and _try(k, Opt(OptOps.GROUP if contiguous else OptOps.GROUPTOP, last, amt))

def _gpu_vector(k: Kernel) -> None:
  """Vectors along the axis the output is contiguous along, if every input is contiguous or broadcast there (else a
  vector would be gathered lane by lane)."""
  axis = _output_contiguous_axis(k)
  if axis is None or k.full_shape[axis] % GPU_VECTOR: return
  if all(_stride(k, i, axis) in (0, 1) for i in _loads(k)): _try(k, Opt(OptOps.UPCAST, axis, GPU_VECTOR))

def _gpu(k: Kernel) -> None:
  r = k.renderer
  if any(_try(k, Opt(OptOps.TC, i, 0)) for i in range(len(r.tensor_cores))): return
  if _is_matmul_like(k):
    # a 4x4 register tile: each B vector serves 4 rows, each A value 4 columns
    vec_axis = _output_contiguous_axis(k)
    other = next((a for a in _reused_axes(k) if a != vec_axis), None)
    for axis in (vec_axis, other):
      if axis is not None and (amt := _largest_divisor(k.full_shape[axis], (4, 2))) is not None:
        _try(k, Opt(OptOps.UPCAST, axis, amt))
  elif k.reduce_axes and r.has_shared and _gpu_group(k): pass
  else: _gpu_vector(k)
  for a in reversed(k.axes_of(AxisKind.GLOBAL)):  # the innermost axis first: threadIdx.x walks it (coalesced)
    budget = GPU_BLOCK // max(1, k.local_size())
    if budget < 2: break
    if (amt := _largest_divisor(k.full_shape[a], tuple(c for c in (256, 128, 64, 32, 16, 8, 4, 2) if c <= budget))):
      _try(k, Opt(OptOps.LOCAL, a, amt))

def hand_coded_optimizations(k: Kernel) -> Kernel:
  """Apply the heuristics to a copy of `k`; the original is unchanged."""
  k = k.copy()
  if k.renderer.has_local: _gpu(k)
  else: _cpu(k)
  return k
