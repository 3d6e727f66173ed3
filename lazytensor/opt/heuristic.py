"""Hand-coded optimizations, used when BEAM=0: a few rules that get most of the speed on CPU and GPU-like devices.

  matmul-like kernels (a reduce over products where each input is broadcast along some output axis): a register tile
    (upcast both reused output axes; the contiguous one becomes SIMD vectors), threads (CPU) or a block of local
    threads (GPU);
  other reductions: unroll a contiguous reduce axis into independent vector accumulators (CPU), or GROUP the reduce
    across threads when there are few outputs (GPU);
  elementwise: SIMD vectors along the contiguous axis, then threads or local threads.

Which operands a large reduce over products reads from re-laid copies, made before its kernel runs, is packing.py's
choice, sized for the register tile decided here (tile_rows).
"""
from __future__ import annotations

from collections.abc import Iterable

from lazytensor.helpers import THREADS, prod
from lazytensor.opt.kernel import AxisKind, Kernel, KernelOptError, Opt, OptOps
from lazytensor.opt.optops import max_shares
from lazytensor.opt.rules import apply_opt, legal
from lazytensor.renderer.cpu_target import CPUTarget
from lazytensor.uop.ops import GroupOp, Ops

# below this much work a second CPU thread costs more than it saves: a launch posts a share to a spinning thread in
# ~3 us (runtime/cpu_threads.py; 256K-element elementwise: 56 us on one thread, 20 on two); work counts elements, or
# for matmul-like kernels multiply-adds / MATMUL_SPEEDUP (vector FMAs on cached operands do that many per element
# streamed)
MIN_THREADED_WORK = 1 << 17
MATMUL_SPEEDUP = 16
# a reduce over products that is no matmul (x @ W for one row of x) streams its matrix at 100 GB/s from L2 and ~25
# GB/s from memory on one thread: two threads only added their launch on AVX-512 (two shared cores, loaded: 256x768
# 7 -> 14 us, 768x3072 391 -> 414, 2048x2048 690 -> 710) and gained past that at times (4096x4096 3.4 -> 1.7-5.4 ms).
# Re-measure on an idle many-core machine: threads from MIN_THREADED_WORK * MATVEC_SPEEDUP elements (16 MB of float32)
MATVEC_SPEEDUP = 32

def _try(k: Kernel, opt: Opt) -> bool:
  try: apply_opt(k, opt)
  except KernelOptError: return False
  return True

def _stride(k: Kernel, node_index: int, axis: int) -> int | None:
  """How far one step along `axis` moves in the buffer; a padded (masked) axis still counts by its view's stride."""
  st = k.sts[node_index]
  return st.views[0].strides[axis] if len(st.views) == 1 else st.real_strides()[axis]

def _masked(k: Kernel, node_index: int) -> bool: return any(v.mask is not None for v in k.sts[node_index].views)

def _buffers(k: Kernel) -> list[int]:
  return [i for i, n in enumerate(k.view_nodes) if n.op in GroupOp.Load | GroupOp.Store]

def _output_contiguous_axis(k: Kernel) -> int | None:
  """The global axis along which the output is stored with stride 1 (where SIMD stores go)."""
  store = next(i for i, n in enumerate(k.view_nodes) if n.op in GroupOp.Store)
  for a in reversed(k.axes_of(AxisKind.GLOBAL)):
    if _stride(k, store, a) == 1: return a
  return None

def _reused_axes(k: Kernel) -> list[int]:
  """Global axes along which some input is broadcast (stride 0): upcasting them reuses loaded values."""
  loads = [i for i in _buffers(k) if k.view_nodes[i].op in GroupOp.Load]
  return [a for a in k.axes_of(AxisKind.GLOBAL) if any(_stride(k, i, a) == 0 and k.sts[i].shape[a] > 1 for i in loads)]

def _reused_product_axes(k: Kernel) -> int:
  """For a reduce over products, how many global axes some input is broadcast along (0 for any other kernel): 2 or more
  is a matmul, 1 a matrix-vector product (one row of x against W; the scores of one query)."""
  if not k.reduce_axes or not any(u.op in (Ops.MUL, Ops.DOT4) for u in k.ast.toposort): return 0
  return len(_reused_axes(k))

def _is_matmul_like(k: Kernel) -> bool: return _reused_product_axes(k) >= 2

def _largest_divisor(size: int, choices: tuple[int, ...]) -> int | None:
  return next((c for c in choices if size % c == 0 and size >= c), None)

def _upcast(k: Kernel, axis: int | None, choices: tuple[int, ...]) -> None:
  if axis is None: return
  if (amt := _largest_divisor(k.full_shape[axis], choices)) is not None: _try(k, Opt(OptOps.UPCAST, axis, amt))

# shares per thread of a THREAD axis: the threads claim them one at a time, so a thread that starts late or is held up
# by the OS leaves its shares to the others (runtime/cpu_threads.py has the figures)
SHARES_PER_THREAD = 4

def thread_shares(cores: int, size: int) -> int | None:
  """How many shares to split an axis of `size` into for `cores` threads: up to SHARES_PER_THREAD each, a multiple of
  the thread count where one divides the axis (equal work for every thread), else any divisor (7 rows: 4 + 3)."""
  most = cores * SHARES_PER_THREAD
  even = tuple(c for c in range(most, 1, -1) if c % cores == 0)
  return _largest_divisor(size, even) or _largest_divisor(size, tuple(range(most, 1, -1)))

def _thread(k: Kernel, work: int) -> None:
  cores = int(THREADS.value)
  if cores < 2 or work < MIN_THREADED_WORK: return
  for a in k.axes_of(AxisKind.GLOBAL):
    if (amt := thread_shares(cores, k.full_shape[a])) is not None and _try(k, Opt(OptOps.THREAD, a, amt)): return

# accumulators a register tile may hold: the target's vector registers less a few for the operands (a B vector or
# two and A's broadcast), and no more than 16, the best measured with 32 registers (AVX-512, Zen 4: 8 rows x 2
# <16 x float>). With 16 (AVX2, Zen 3) that leaves 12: 6 rows x 2 <8 x float> (_padded_rows); 8 rows spill.
OPERAND_REGISTERS = 4
MAX_ACCUMULATORS = 16
TILE_VECTORS = 2  # vectors across a register tile's row: two loads of B serve each broadcast of A

def _target(k: Kernel) -> CPUTarget:
  assert k.renderer.target is not None, f"{type(k.renderer).__name__}: the CPU heuristics need a CPU target"
  return k.renderer.target

def accumulators(t: CPUTarget) -> int: return min(t.vector_registers - OPERAND_REGISTERS, MAX_ACCUMULATORS)

def vector_amounts(t: CPUTarget, vectors: int = 1) -> tuple[int, ...]:
  """Upcast amounts from `vectors` of the target's vectors down to 4 floats, widest first."""
  top = vectors * t.vector_floats
  return tuple(top >> i for i in range(top.bit_length()) if top >> i >= 4)

# an output axis no vector divides (197 tokens, a 50257-word vocabulary) is padded to one vector when that adds at
# most 1/MAX_PAD_FRACTION of the work: its loads read on past the row where that stays in the buffer (a mask that does
# not change along the reduce where it does not), the stores get a gate. 32 matmuls of 197x64x197 on one AVX2 thread:
# 8 -> 24 GFLOP/s (scalar code without), 45-49 with the rows padded too (_pad_for_rows); divisible 192: 76
MAX_PAD_FRACTION = 8

def pads_little(size: int, amt: int, fraction: int = MAX_PAD_FRACTION) -> bool:
  """Whether padding `size` up to a multiple of `amt` adds at most 1/fraction of it."""
  return -size % amt <= size // fraction

def _pad_to(k: Kernel, axis: int, amounts: Iterable[int], fraction: int = MAX_PAD_FRACTION) -> int | None:
  """PADTO `axis` to a multiple of the first of `amounts` that adds at most 1/fraction of it (and applies); that
  amount, or None."""
  size = k.full_shape[axis]
  return next((a for a in amounts if pads_little(size, a, fraction) and _try(k, Opt(OptOps.PADTO, axis, a))), None)

def _vector_choice(k: Kernel, loads: list[int]) -> tuple[int, int] | None:
  """(axis, amount) for the SIMD vectors of a register tile, applied (with a PADTO first where the amount does not
  divide the axis, within the padding limit): an output axis along which, once the vector is split off, every operand
  is contiguous or broadcast (one at least contiguous). The widest vector wins (up to a register), then the axis that
  needs no padding, then the axis the output is contiguous along (a 1x1 conv's 196 pixels padded to 208 lost to its
  256 output channels, weights in blocks of 16: 6% of padded work and 17 loads per 16 FMAs, see _second_vector).
  None when no axis qualifies (x @ W.T: see _dot_tile).
  (B packed in panels padded past an odd column count is contiguous along the columns only once they are padded.)"""
  out_axis, options, floats = _output_contiguous_axis(k), [], _target(k).vector_floats
  for a in k.axes_of(AxisKind.GLOBAL):
    for amt in vector_amounts(_target(k), TILE_VECTORS):
      trial, size = k.copy(), k.full_shape[a]
      if size % amt and _pad_to(trial, a, (amt,)) is None: continue
      if not _try(trial, Opt(OptOps.UPCAST, a, amt)): continue
      lane = trial.axes_of(AxisKind.UPCAST)[-1]
      strides = [_stride(trial, i, lane) for i in loads]
      if all(st in (0, 1) for st in strides) and 1 in strides:
        options.append((min(amt, floats), size % amt == 0, a == out_axis, a, amt))
        break
  if not options: return None
  *_, axis, amt = max(options)
  if k.full_shape[axis] % amt: _try(k, Opt(OptOps.PADTO, axis, amt))
  return axis, amt

def _pad_for_vectors(k: Kernel, axis: int) -> None:
  """PADTO `axis` up to the widest vector within the padding limit, if no vector divides it."""
  amts = vector_amounts(_target(k), TILE_VECTORS)
  if all(k.full_shape[axis] % amt for amt in amts): _pad_to(k, axis, amts)

CONSECUTIVE_ROWS = 8

def _row_amount(k: Kernel, axis: int, budget: int, consecutive: bool) -> int | None:
  """How many rows of vectors: the largest divisor within the budget. Rows read from consecutive addresses (a
  convolution's output width) avoid powers of two: LLVM's SLP vectorizer merges 8 such scalar loads into one vector load
  and 8 shuffles, which compete with the FMAs for a port (56-wide conv, 16 channels x 8 rows: 40 GFLOP/s; x 7: 120;
  x 14: 77), and stay within CONSECUTIVE_ROWS."""
  size = k.full_shape[axis]
  if consecutive:
    budget = min(budget, CONSECUTIVE_ROWS)
    odd = next((c for c in range(budget, max(budget // 2, 2) - 1, -1) if size % c == 0 and c & (c - 1)), None)
    if odd is not None: return odd
  return _rows_within(size, budget)

def _pad_for_rows(k: Kernel, axis: int, budget: int, rows: int | None) -> int | None:
  """Rows of a tile along an axis whose divisors fall short of the budget, after a PADTO (_padded_rows): each B vector
  then serves that many rows (32 x 197x64x197 on one AVX2 thread, one row at a time: 22 GFLOP/s). The padded rows'
  loads of A read on past them, or are masked at the end of the buffer."""
  want, multiple = _padded_rows(k.full_shape[axis], budget)
  return want if want != rows and _try(k, Opt(OptOps.PADTO, axis, multiple)) else rows

def _rows_within(size: int, budget: int) -> int | None:
  return _largest_divisor(size, tuple(range(min(budget, 16), 1, -1)))

# padding for more rows: at most 1/MAX_PAD_FRACTION of the axis where its divisors give less than half the budget
# (197 tokens), at most 1/ROW_PAD_FRACTION where they give more (128 rows stay 4 on AVX2; 512 rows become 516)
ROW_PAD_FRACTION = 64
ROW_BLOCKS = 8  # padded rows make a multiple of 8, 4 or 2 tiles where that pads little: blocks and threads divide them

def _padded_rows(size: int, budget: int) -> tuple[int | None, int]:
  """(rows of a register tile along an axis of `size`, the multiple to pad the axis to): the most rows within the
  budget that a little padding allows, else its largest divisor within it. AVX2's 12 accumulators take 6 rows of 2
  vectors, where powers of two allow only 4, and 4 x 2 vectors do not hide the FMA's latency on two pipes: matmul on
  one Zen 4 thread compiled for x86-64-v3, 4 -> 6 rows, end to end: 1024 97 -> 103-105 GFLOP/s, 2048 100 -> 105-108,
  512 and bmm 64x128^3 unchanged. The padded axis is a multiple of up to ROW_BLOCKS tiles where that pads very little,
  so that the cache blocks (_cache_blocks) and threads that split the rows still divide it (2048 -> 2064: 344 tiles,
  not 2052's 342)."""
  rows = _rows_within(size, budget)
  fraction = MAX_PAD_FRACTION if 2 * (rows or 1) < budget else ROW_PAD_FRACTION
  for a in range(min(budget, 16), rows or 1, -1):
    blocks = next((b for b in (ROW_BLOCKS, ROW_BLOCKS // 2, 2) if pads_little(size, a * b, ROW_PAD_FRACTION)), 1)
    if pads_little(size, a * blocks, fraction): return a, a * blocks
  return rows, rows or 1

def tile_rows(t: CPUTarget, size: int) -> tuple[int | None, int]:
  """(rows of a matmul register tile two vectors wide (_register_tile), the multiple the tile pads them to) for an
  axis of `size` rows: A's packed row panels are as tall, padded with zeros as far."""
  return _padded_rows(size, accumulators(t) // TILE_VECTORS)

def _register_tile(k: Kernel) -> None:
  """Upcast an output axis into SIMD vectors and a second axis into rows of them. The second axis is one along which
  the vector operand is broadcast, so each vector load serves a whole column of the tile (matmul: B's row serves 8
  rows of A; conv with packed weights: 16 output channels' weights serve 7 output positions)."""
  # the vectors by the reduce's operands alone: a value read once per output after it (a relu's mask on a conv's input
  # gradient, read along its width where the tile's vectors run along the channels) is no reason to give up the tile
  loads = [i for i in _buffers(k) if k.view_nodes[i].op in GroupOp.Load]
  if (choice := _vector_choice(k, _reduce_loads(k))) is None:
    # no axis without gathers: vector dot products along K if both operands are contiguous there, else the output's
    # contiguous axis anyway
    out_axis = _output_contiguous_axis(k)
    if _dot_tile(k, loads) or out_axis is None: return
    _pad_for_vectors(k, out_axis)
    if (out_amt := _largest_divisor(k.full_shape[out_axis], vector_amounts(_target(k), TILE_VECTORS))) is None:
      return
    choice = (out_axis, out_amt)
  vec_axis, vec_amt = choice
  # the operands of the products that vary along the vectors (a matmul's B; not a bias or residual added after)
  vec_loads = [i for i in _reduce_loads(k) if _stride(k, i, vec_axis) != 0]
  rows_budget = accumulators(_target(k)) // -(-vec_amt // _target(k).vector_floats)
  candidates, other = _row_axis(k, vec_axis, vec_loads, rows_budget)
  rows, consecutive = None, False
  if other is not None:
    # None with a mask: a padded view (a conv's input); without one, rows packed in panels (schedule.pack_operands)
    consecutive = any(_stride(k, i, other) == 1 or (_stride(k, i, other) is None and _masked(k, i))
                      for i in _reduce_loads(k))
    rows = _row_amount(k, other, rows_budget, consecutive)
    if not consecutive: rows = _pad_for_rows(k, other, rows_budget, rows)
  # the upcast applied first is the outer one. Rows outside vectors: the code takes one row at a time (broadcast its
  # value, an FMA into each vector of the row), one broadcast live; vectors outside rows keep every row's broadcast
  # live across the vectors. Matmul, AVX2, one thread: 4x16 at 2048 86 -> 93 GFLOP/s, 6x16 66 -> 96 (it spilled
  # accumulators). Rows of consecutive values (a conv's output width) are the exception: LLVM loads them as one
  # vector and shuffles, and that code is faster with the vectors outside (4x16: 66 vs 63 GFLOP/s).
  tile = [(vec_axis, vec_amt), (other, rows)]
  if not consecutive: tile.reverse()
  # rows of consecutive values stay within CONSECUTIVE_ROWS in all (AVX-512's 7 output positions are not doubled:
  # 14 of them were slower than 7); the room left takes a second vector where the tile is one register wide
  room = min(rows_budget, CONSECUTIVE_ROWS if consecutive else rows_budget) // (rows or 1)
  second = _second_vector(k, vec_axis, vec_amt, rows) if consecutive else (None, None)
  tile.append(second if second[0] is not None else _more_rows(k, candidates, other, room))
  for axis, amt in tile:
    if axis is None or amt is None: continue
    if not _try(k, Opt(OptOps.UPCAST, axis, amt)) and axis == vec_axis: return  # no vectors: no tile
  _panel_loop_outside(k, vec_loads, other)

def _second_vector(k: Kernel, axis: int, amt: int, rows: int | None) -> tuple[int | None, int | None]:
  """A second register of vectors along `axis` for a tile one register wide whose rows are consecutive values (at most
  CONSECUTIVE_ROWS of them, so most of the accumulators are left): each broadcast then feeds two FMAs. A 1x1 conv's
  pixels broadcast against vectors of 16 output channels, 7 pixels: 8 loads per 7 FMAs; 2 x 16 channels: 9 per 14
  (1x1024x14x14 by 256x1024x1x1 on one AVX-512 thread: 112 -> 144 GFLOP/s, torch 172)."""
  t = _target(k)
  if amt != t.vector_floats or 2 * (rows or 1) > accumulators(t) or k.full_shape[axis] % (2 * amt): return None, None
  return axis, 2

def _reduce_loads(k: Kernel) -> list[int]:
  """The loads the reduce reads (a matmul's A and B), not those of the ops after it (a bias, a residual): a residual
  read first made the tile's B (128x3072 @ 3072x768 + b + x, GPT-2's MLP output on one AVX-512 thread: its panels
  not looped outside the rows, 5.9 ms, not 3.4)."""
  inside = {u for r in k.ast.toposort if r.op is Ops.REDUCE_AXIS for u in r.toposort}
  return [i for i in _loads(k) if k.view_nodes[i] in inside]

def _row_axis(k: Kernel, vec_axis: int, vec_loads: list[int], budget: int) -> tuple[list[int], int | None]:
  """The axes along which the vector operand is broadcast (each of its loads serves a row of the tile along any of
  them), and the one for the rows: the last, of those at least as long as the budget where there are some. A shorter
  one (a conv weight gradient's 3 taps) caps the rows at its length, and a second axis of rows beside it spilled (16
  output channels x 3 taps x 2 input channels, AVX2: 53 ms where 16 x 4 input channels took 27-30)."""
  candidates = [a for a in k.axes_of(AxisKind.GLOBAL) if any(_stride(k, i, a) == 0 and k.sts[i].shape[a] > 1
                                                              for i in vec_loads)]
  if not candidates: return [], next((a for a in _reused_axes(k) if a != vec_axis), None)
  return candidates, ([a for a in candidates if k.full_shape[a] >= budget] or candidates)[-1]

def _more_rows(k: Kernel, candidates: list[int], other: int | None, room: int) -> tuple[int | None, int | None]:
  """A second axis of rows, innermost, where the first leaves room for at least twice its rows: the outermost other axis
  along which the vector operand is broadcast (a convolution's batch: whole images apart, no window overlaps it and
  no padding's mask varies along it). A 14-wide conv on AVX2 has rows of 2 of the 6 that 12 accumulators allow: 16
  output channels x 2 positions x 2 images, 32x128x14x14 by 128x3x3 on one thread: 40 -> 25 ms (torch 26); 2 rows of
  the output height instead: 58 ms (its rows' padding masks differ)."""
  axis = next((a for a in candidates if a != other and k.full_shape[a] > 1), None)
  if room < 2 or axis is None: return None, None
  return axis, _rows_within(k.full_shape[axis], room)

DOT_TILE = 4  # outputs per reused axis in a tile of vector dot products: 16 accumulators where the target has them
DOT_PAD_FRACTION = 4  # a reduce axis no vector divides is padded by at most a quarter of it for the dot tile

def _dot_axes(k: Kernel, loads: list[int]) -> list[int]:
  """The two output axes of a dot-product tile, in order: for each operand, one along which it is broadcast, so that
  every vector load of either serves several outputs (a conv's weight gradient: output channels for the input,
  input channels rather than the 3 taps for the gradient: 8 -> 30 GFLOP/s); even sizes first, then the innermost."""
  reused, picks = _reused_axes(k), []
  for i in loads:
    own = [a for a in reused if _stride(k, i, a) == 0 and a not in picks]
    if own: picks.append(max(own, key=lambda a: (k.full_shape[a] % 2 == 0, a)))
  return sorted(picks[:2])

def _dot_tile(k: Kernel, loads: list[int]) -> bool:
  """A matmul whose operands are both contiguous along the reduce axis (x @ W.T, as Linear computes it): vectors along
  the reduce axis instead, so no operand is gathered. A 4x4 tile of outputs, each a vector of partial sums added up
  across its lanes at the end; every vector load of one operand serves 4 outputs. 128x784 by 784x256 on one thread:
  1.2 ms (vectors along the output, B gathered) -> 0.49 ms."""
  red = k.axes_of(AxisKind.REDUCE)
  if not red or not all(_stride(k, i, red[-1]) in (0, 1) for i in loads): return False
  size, amts = k.full_shape[red[-1]], vector_amounts(_target(k))[:2]
  if (amt := _largest_divisor(size, amts)) is None:
    # rows no vector divides (a conv's weight gradient over 14-wide rows): padded, each padded product masked to 0
    # (one output at a time, scalar: 0.4 GFLOP/s; padded 14 -> 16: 5-11)
    amt = _pad_to(k, red[-1], amts, DOT_PAD_FRACTION)
  if amt is None or not _try(k, Opt(OptOps.UNROLL, red[-1], amt)): return False
  room, streamed = accumulators(_target(k)), max(loads, key=lambda i: _operand_bytes(k, i))
  for i, a in enumerate(_dot_axes(k, loads)):
    # the first axis leaves room for at least 2 outputs along the second. A few rows of x against a large W (decoding
    # a batch) are taken whole where they fit: W is streamed once, not once per DOT_TILE rows (8x1024 @
    # (1024x1024).T on one AVX-512 thread, 8 rows x 2 outputs: 12.5 -> 19.8 GB/s of W)
    whole = (k.full_shape[a],) if _stride(k, streamed, a) == 0 else ()
    _upcast(k, a, tuple(c for c in (*whole, DOT_TILE, 2) if c <= (room // 2 if i == 0 else room)))
    room = accumulators(_target(k)) // (k.upcast_size() // amt)
  return True


def _panel_loop_outside(k: Kernel, vec_loads: list[int], tile_rows: int | None) -> None:
  """Loop over the vector operand's panels outside the rows that reuse them (matmul: B's column panels outside A's
  row tiles), so that one panel stays in L2 while every row tile uses it; else each row tile streams all of B again.
  Measured at 1024: 96 -> 145 GFLOP/s on one thread. Axes along which B varies too (a batch) stay outside: each of
  their steps reads another B (64 matmuls of 128^3 on one AVX2 thread, the batch inside the panels: 37 -> 60
  GFLOP/s, torch 64). A B that stays in L2 whatever the order may take the tile's rows (`tile_rows`) outside
  instead (_rows_outside_panels)."""
  if not vec_loads: return
  vec, globals_ = vec_loads[0], k.axes_of(AxisKind.GLOBAL)
  rows = next((a for a in globals_ if _stride(k, vec, a) == 0 and k.full_shape[a] > 1), None)
  if rows is None: return
  others = [i for i in _reduce_loads(k) if i not in vec_loads]
  panel = next((a for a in globals_ if any(_stride(k, i, a) == 0 for i in others) and k.full_shape[a] > 1), None)
  # B's part that one step of the outer axes reads, up to half of L2, stays there between uses alongside the rest
  outer = prod(k.full_shape[a] for a in globals_[:globals_.index(rows)])
  if _operand_bytes(k, vec) // outer <= _target(k).l2_bytes // 2:
    if panel is not None and tile_rows is not None: _rows_outside_panels(k, others, panel, tile_rows)
    return
  if panel is None or _panel_shares(k, vec, others, (rows, panel), outer): return
  # panels outside stream the other operands once per panel; rows outside stream B once per step along the rows: the
  # order that streams less. 8 images of a stride-2 1x1 conv 512x28x28 -> 1024 (B its 2 MB of weights, rows the
  # images): panels outside streamed the 3.2 MB input 32 times, 112 GFLOP/s on one AVX-512 thread; images outside 138
  if sum(_operand_bytes(k, i) for i in others) * k.full_shape[panel] >= _operand_bytes(k, vec) * k.full_shape[rows]:
    return
  if globals_.index(panel) > globals_.index(rows): _try(k, Opt(OptOps.SWAP, rows, panel))
  _cache_blocks(k, vec_loads, others)

# B's column panels in THREAD shares of at most this fraction of L2 (_panel_shares): the rest holds A's rows of a tile
# on their way to L1, the output and what the hardware's replacement leaves
PANEL_SHARE_L2_FRACTION = 4

def _panel_shares_may_pay(k: Kernel, vec: int, others: list[int], outer: int) -> bool:
  """Whether, per step of the axes outside (`outer` steps), B (`vec`) outgrows half of L2 and the operands it is
  multiplied with (`others`, A) all of it: neither stays there whatever order the loops take. (An A that about fills
  half of L2 beside a larger B, 128x1024 @ 1024x768, stays there across B's panels looped outside its rows.) A must
  stay in L3 though: a larger one is cut into blocks of its rows instead (_cache_blocks)."""
  t, swept = _target(k), sum(_operand_bytes(k, i) for i in others) // outer
  return _operand_bytes(k, vec) // outer > t.l2_bytes // 2 and t.l2_bytes < swept <= t.l3_bytes // SWEPT_L3_FRACTION

def _panel_shares(k: Kernel, vec: int, others: list[int], axes: tuple[int, int], outer: int) -> bool:
  """Split B's column panels (`axes`: the tile rows' axis and the panels') into THREAD shares of at most
  1/PANEL_SHARE_L2_FRACTION of L2 each, the rows left outside the panels of a share, where neither B nor A stays in
  L2 (_panel_shares_may_pay; on one thread the shares run in order, as cache blocks do): a share's part of B stays in
  L2 across every row tile, and a tile's rows of A stay in L1 across the share's panels, so A is streamed once per
  share. Panels outside the rows instead stream A from L3 at every panel. 1024 matmul on one AVX-512 thread (B 4 MB
  in 8 shares of 512 KB, a tile's rows of A 32 KB), the kernel alone: 195 -> 202 GFLOP/s; at 2048 8 shares are 2 MB
  each, too large (163 -> 133): panels outside. False (nothing applied) where the rows are not outside the panels, or
  no share count up to max_shares() divides the panels (a multiple of the thread count where there are threads)."""
  rows, panel = axes
  globals_ = k.axes_of(AxisKind.GLOBAL)
  if globals_.index(rows) > globals_.index(panel) or not _panel_shares_may_pay(k, vec, others, outer): return False
  size, cores = k.full_shape[panel], max(1, int(THREADS.value))
  need = -(-(_operand_bytes(k, vec) // outer) // (_target(k).l2_bytes // PANEL_SHARE_L2_FRACTION))
  shares = next((c for c in range(need, max_shares() + 1) if size % c == 0 and c % cores == 0), None)
  return shares is not None and _try(k, Opt(OptOps.THREAD, panel, shares))

# the part of the other operands that each of B's panels sweeps in turn (a conv's image) stays in L2 across the panels
# up to this fraction of it, beside the panel, the output and what the hardware's replacement leaves
SWEPT_L2_FRACTION = 4

def _rows_outside_panels(k: Kernel, others: list[int], panel: int, rows: int) -> None:
  """Loop the tile's rows outside B's panels where B stays in L2 but the part of the other operands the panels sweep
  in turn, per step of the axes outside (an image of a conv's batch), is too large to stay there across them: B is
  then swept from L2 at every block of rows, whose part of A stays in the nearer caches across B's panels. A 1x1
  conv's tile of 7 pixels by 32 output channels, its input read in place (a new line each input channel), on one
  AVX-512 thread: 8x1024x14x14 -> 256 (an image 800 KB, the weight 1 MB) 0.83-0.89x -> 0.95-1.05x torch, 8x512x14x14
  -> 256 (400 KB) 1.04 -> 1.08x; 8x256x14x14 -> 1024 (200 KB) 1.07 -> 1.03x with them outside: they stay. Not
  through a mask (a padded conv's shifted windows: 8x64x56x56 by 64x3x3, 171 -> 169 GFLOP/s, 8x256x14x14 by 256x3x3
  186 -> 182 with the rows outside)."""
  globals_ = k.axes_of(AxisKind.GLOBAL)
  if rows not in globals_ or globals_.index(rows) < globals_.index(panel) or any(_masked(k, i) for i in others): return
  outer = prod(k.full_shape[a] for a in globals_[:globals_.index(panel)])
  if sum(_operand_bytes(k, i) for i in others) // outer > _target(k).l2_bytes // SWEPT_L2_FRACTION:
    _try(k, Opt(OptOps.SWAP, panel, rows))

# the operand that every panel sweeps (a matmul's A, read once per column panel of B) comes from L3 while it is at
# most this fraction of it (the rest holds the panels, the output and what other cores use); a larger one is cut into
# blocks of its rows that fit SWEPT_BLOCK_FRACTION of L3. Matmul 2048, AVX2, one thread, A 16 MB of a 32 MB L3:
# 87 -> 96 GFLOP/s in 4 blocks (2 and 8: the same); two threads, 8 blocks: 174 -> 184. One that needs more blocks
# than the shares allow takes the most there are: 4096 (A 64 MB, 17 blocks wanted) on one Zen 4 thread in 8 blocks,
# x86-64-v3 54 -> 105 GFLOP/s, AVX-512 90 -> 106 (each panel of B streamed all of A from memory)
SWEPT_L3_FRACTION = 4
SWEPT_BLOCK_FRACTION = 8

def _operand_bytes(k: Kernel, node_index: int) -> int:
  return k.sts[node_index].real_size() * k.view_nodes[node_index].src[0].dtype.itemsize

def blocks_may_pay(k: Kernel) -> bool:
  """Whether splitting `k` into cache blocks (THREAD shares on one thread) can pay: a reduce re-reads its operands,
  and one of them is too large to stay in L3 between uses (as _cache_blocks judges it), or it is a matmul whose
  operands do not stay in L2 (_panel_shares). BEAM on one thread tries THREAD only then: elsewhere the shares
  only add launches, and each action costs search time."""
  if not k.reduce_axes or k.renderer.target is None: return False
  l3 = k.renderer.target.l3_bytes
  if any(_operand_bytes(k, i) > l3 // SWEPT_L3_FRACTION for i in _loads(k)): return True
  ops = _reduce_loads(k)
  return _is_matmul_like(k) and len(ops) == 2 and any(_panel_shares_may_pay(k, b, [a], 1) for b, a in (ops, ops[::-1]))

def _cache_blocks(k: Kernel, vec_loads: list[int], others: list[int]) -> None:
  """Split the swept operand's row axis into THREAD shares: each share runs every panel over its block of rows
  before the next share starts (on one thread they run in order), so the block is read from cache at every panel
  instead of from memory. With threads the blocks are also the threads' shares."""
  if len(others) != 1: return
  swept = others[0]
  size, l3 = _operand_bytes(k, swept), _target(k).l3_bytes
  if size <= l3 // SWEPT_L3_FRACTION: return
  rows = next((a for a in k.axes_of(AxisKind.GLOBAL) if _stride(k, swept, a) != 0 and k.full_shape[a] > 1 and
               all(_stride(k, i, a) == 0 for i in vec_loads)), None)
  if rows is None: return
  cores, need, most = max(1, int(THREADS.value)), -(-size // (l3 // SWEPT_BLOCK_FRACTION)), max_shares()
  threaded = thread_shares(cores, k.full_shape[rows]) if cores > 1 else None
  shares = threaded if threaded is not None and threaded >= need else \
    next((c for c in range(min(need, most), most + 1) if k.full_shape[rows] % c == 0), None)
  if shares is not None: _try(k, Opt(OptOps.THREAD, rows, shares))

def _cpu(k: Kernel) -> None:
  work = prod(k.full_shape)
  # a scatter's entries run in order (schedule/scatter.py): vectors along the targets of one entry
  if k.scatter is not None: _upcast(k, _output_contiguous_axis(k), vector_amounts(_target(k)))
  elif _is_matmul_like(k):
    work //= MATMUL_SPEEDUP
    _register_tile(k)
  elif k.reduce_axes:
    if _reused_product_axes(k) == 1: work //= MATVEC_SPEEDUP
    _shared_outputs(k)
    _reduce_vectors(k)
  elif not _transpose_tile(k): _upcast(k, _output_contiguous_axis(k), vector_amounts(_target(k)))
  _thread(k, work)

def _reduce_vectors(k: Kernel) -> None:
  """Vectors for a reduce that is no matmul, along the axis its largest operand is contiguous along: the reduce (a row
  sum; x @ W.T, W (N, K) as Linear stores it: vector partial sums added across lanes at the end), or the output's
  (x.sum(0); x @ W with W (K, N): neighbouring sums, each step one broadcast of x and FMAs into 4 vectors). A
  matrix-vector product streams its matrix, the other operand stays in cache: deciding by any operand vectorized
  x @ W along K, W gathered a float at a time (1x1024 @ 1024x1024 on one AVX-512 thread: 0.6 -> 24 GB/s, torch 24)."""
  last, out_axis = k.axes_of(AxisKind.REDUCE)[-1], _output_contiguous_axis(k)
  # an odd K or N of a matrix-vector product is padded to vectors (no scalar loop; masked lanes). Not other reduces:
  # logsumexp over 64x50257 padded to 50272 ran its masked exp-sum 3-5x slower (4.5 -> 14-25 ms on AVX-512)
  pad = _reused_product_axes(k) == 1
  for i in sorted(_loads(k), key=lambda i: -_operand_bytes(k, i)):
    if _stride(k, i, last) == 1:
      if _vectors_of(k, last, vector_amounts(_target(k)), OptOps.UNROLL, pad) is not None: _reduce_chains(k, last)
      return
    if out_axis is not None and _stride(k, i, out_axis) == 1: break
  if out_axis is not None: _vectors_of(k, out_axis, vector_amounts(_target(k), 4), OptOps.UPCAST, pad)

# a reduce whose outputs along a short axis all read the same values (batchnorm's backward sums dy and dy * x_hat along
# a new axis of 2: nn.BatchNormGrad): that axis whole in registers, so that each value is loaded once for all of them.
# As a loop each was read twice: for 8x64x112x112, 2.85 -> 1.95 ms on one AVX-512 thread
SHARED_OUTPUTS = 4

def _shared_outputs(k: Kernel) -> None:
  loads = _loads(k)
  for a in k.axes_of(AxisKind.GLOBAL):
    if 1 < k.full_shape[a] <= SHARED_OUTPUTS and loads and all(_stride(k, i, a) == 0 for i in loads):
      _try(k, Opt(OptOps.UPCAST, a, 0))

def _vectors_of(k: Kernel, axis: int, amounts: tuple[int, ...], op: OptOps, pad: bool) -> int | None:
  """Split `axis` by the first of `amounts` that divides it, else (with `pad`) by one it is padded to within
  DOT_PAD_FRACTION, as `op`; the amount, or None."""
  amt = _largest_divisor(k.full_shape[axis], amounts)
  if amt is None and pad: amt = _pad_to(k, axis, amounts, DOT_PAD_FRACTION)
  return amt if amt is not None and _try(k, Opt(op, axis, amt)) else None

# a reduce along a contiguous axis keeps several vector accumulators, the axis unrolled by vectors: one alone waits out
# the latency of its op at every step (a float max's compare, or and select: ~5 cycles), where the loads and the ops'
# pipes allow several at once; its lanes are read in one sequential stream. 1024x1024 float32 on one Zen 4 thread, one
# accumulator -> 4: max(1) 143 -> 70-79 us, sum(1) 69 -> 58-61, max() of all 139 -> 62-70; 4096x256 sum(1) 191 ->
# 153-167, 256x4096 max(1) 194 -> 151. 8 were slower than 4 in all of these; so were 8 rows at once, each its own
# accumulator (4096x256 sum(1) 191 -> 255-434 us: eight short streams the prefetchers follow worse than one).
REDUCE_CHAINS = (4, 2)
REDUCE_CHAIN_MIN_STEPS = 4  # a loop this long at least after the vectors: shorter ones barely wait

def _reduce_chains(k: Kernel, axis: int) -> None:
  """Independent accumulators for a reduce vectorized along its contiguous `axis`: several vectors of it at once."""
  if k.full_shape[axis] < REDUCE_CHAIN_MIN_STEPS: return
  if (amt := _largest_divisor(k.full_shape[axis], REDUCE_CHAINS)) is not None: _try(k, Opt(OptOps.UNROLL, axis, amt))

# a transpose (an input read along another axis than the one the output is contiguous along) in tiles: a cache line of
# the input's contiguous axis by TRANSPOSE_ROWS of the output's, so that every line read is read whole and every
# store writes TRANSPOSE_ROWS neighbours. Vectors along the output alone gather the input a float at a time, a new
# line (at a large stride a new page) for each: 2048x2048 .T.contiguous() on one AVX2 thread 1.0 -> 8-9 GB/s, 512x512
# 3 -> 27 (a plain copy: 16 and 59)
CACHE_LINE = 64
TRANSPOSE_ROWS = 4
# ... and 2 where the kernel computes on the way (a gelu fused into the copy that packs the next matmul's A in row
# panels): each value in between is held for every lane of the tile, and 4 rows of a cache line spill them. 128x3072
# packed in rows of 8 on one AVX-512 thread, 4 rows -> 2: erf gelu 920 -> 422 us, tanh gelu 617 -> 318, exp 328 -> 162,
# silu 486 -> 251, relu 107 -> 103, a copy 101 -> 101; 512x512 .T: exp 167 -> 128, a copy 67 -> 85
TRANSPOSE_COMPUTED_ROWS = 2

def _transpose_tile(k: Kernel) -> bool:
  """Upcast the input's contiguous axis by a cache line, then the output's by TRANSPOSE_ROWS, or
  TRANSPOSE_COMPUTED_ROWS where the kernel computes (the inner one, which becomes the stored vectors); False where no
  input is transposed."""
  if (out_axis := _output_contiguous_axis(k)) is None: return False
  for i in _loads(k):
    if _stride(k, i, out_axis) in (0, 1): continue
    in_axis = next((a for a in k.axes_of(AxisKind.GLOBAL) if _stride(k, i, a) == 1 and k.full_shape[a] > 1), None)
    if in_axis is None: continue
    line = CACHE_LINE // k.view_nodes[i].src[0].dtype.itemsize
    in_amt = _largest_divisor(k.full_shape[in_axis], tuple(line >> j for j in range(line.bit_length() - 1)))
    computes = any(u.op in GroupOp.ALU for u in k.ast.toposort)
    out_amt = _largest_divisor(k.full_shape[out_axis], (TRANSPOSE_COMPUTED_ROWS if computes else TRANSPOSE_ROWS, 2))
    if in_amt is None or out_amt is None: continue
    # a split keeps the global axes where they are: out_axis still names the output's contiguous axis
    return _try(k, Opt(OptOps.UPCAST, in_axis, in_amt)) and _try(k, Opt(OptOps.UPCAST, out_axis, out_amt))
  return False

# threads a GPU block aims for: 8 warps hide memory latency, and a large grid still leaves several blocks per SM
GPU_BLOCK = 256
# a reduce this long is split across the threads of a block even when there are many outputs: one thread summing a
# row alone reads it with a stride between neighbouring threads (uncoalesced), and takes long to finish
GPU_GROUP_REDUCE = 1024
GPU_GROUP_AMTS = (GPU_BLOCK, 128, 64, 32, 16)  # threads a GROUP may split a reduce across, the most first
GPU_VECTOR_BYTES = 16  # what a thread loads at once along a contiguous axis: ld.global.v4.b32 (4 floats, 8 halves)

def _loads(k: Kernel) -> list[int]: return [i for i in _buffers(k) if k.view_nodes[i].op in GroupOp.Load]

def _gpu_vector_amt(k: Kernel) -> int:
  """Elements a vector holds: GPU_VECTOR_BYTES of the kernel's widest element type (so that no access is wider), at
  most the renderer's widest vector."""
  widest = max(k.view_nodes[i].src[0].dtype.itemsize for i in _buffers(k))
  return max((w for w in k.renderer.vector_widths if w * widest <= GPU_VECTOR_BYTES), default=1)

def _gpu_group(k: Kernel) -> bool:
  """Split the last reduce axis across a block's threads: a vector per thread when the axis is contiguous, then the
  threads interleaved (GROUP takes the inner part), so that neighbouring threads read neighbouring vectors."""
  last = k.axes_of(AxisKind.REDUCE)[-1]
  if prod(k.output_shape()) > 2048 and k.full_shape[last] < GPU_GROUP_REDUCE: return False
  # no UNROLL for a group that cannot be (a scatter's entries run in order; a renderer without shared memory)
  if not any(legal(k, Opt(OptOps.GROUP, last, amt)) for amt in GPU_GROUP_AMTS): return False
  contiguous, vec = any(_stride(k, i, last) == 1 for i in _loads(k)), _gpu_vector_amt(k)
  if contiguous and vec > 1 and k.full_shape[last] % (vec * 16) == 0: _try(k, Opt(OptOps.UNROLL, last, vec))
  amt = _largest_divisor(k.full_shape[last], GPU_GROUP_AMTS)
  return amt is not None and _try(k, Opt(OptOps.GROUP if contiguous else OptOps.GROUPTOP, last, amt))

def _gpu_vector(k: Kernel) -> None:
  """Vectors along the axis the output is contiguous along, if every input is contiguous or broadcast there (else a
  vector would be gathered lane by lane)."""
  axis, vec = _output_contiguous_axis(k), _gpu_vector_amt(k)
  if axis is None or vec < 2 or k.full_shape[axis] % vec: return
  if all(_stride(k, i, axis) in (0, 1) for i in _loads(k)): _try(k, Opt(OptOps.UPCAST, axis, vec))

_LOCAL_AMTS = (256, 128, 64, 32, 16, 8, 4, 2)

def _gpu_atomic_scatter(k: Kernel) -> None:
  """A scatter whose entries run in parallel as atomic updates: blocks of GPU_BLOCK threads, threadIdx.x along the axis
  the output is contiguous along (the embedding's D: neighbouring threads read neighbouring values and update
  neighbouring targets), else along one the values are read contiguously along; the rest of the block along the
  entries. No vectors: every lane's update is an atomic of its own. Embedding(32000, 256)'s backward over 4096
  indices: 4096 blocks of 256 threads, one update each, where in order 256 threads looped over all 4096 entries."""
  if not (globals_ := k.axes_of(AxisKind.GLOBAL)): return
  inner = _output_contiguous_axis(k)
  if inner is None:
    inner = next((a for a in reversed(globals_) if any(_stride(k, i, a) == 1 for i in _loads(k))), globals_[-1])
  inner_amt = _largest_divisor(k.full_shape[inner], _LOCAL_AMTS) or 1
  # split first, so that it lands before inner's threads: the last LOCAL axis is threadIdx.x (lowerer._specials)
  outer = next((a for a in reversed(k.entry_axes()) if a != inner), None)
  fits = tuple(c for c in _LOCAL_AMTS if c <= GPU_BLOCK // inner_amt)
  if outer is not None and (amt := _largest_divisor(k.full_shape[outer], fits)): _try(k, Opt(OptOps.LOCAL, outer, amt))
  if inner_amt > 1: _try(k, Opt(OptOps.LOCAL, inner, inner_amt))

# a tensor-core kernel's block: TC_WARPS warps (along M, N), each holding TC_TILES mma tiles (along M, N) in registers.
# With m16n8 instructions that is a 128x128 output tile, so each element of A and B copied into shared memory serves
# 128 outputs: an fp16 matmul loads M*N*K/32 bytes from global memory (512^3: 4 MiB, where one warp a tile with no
# shared memory loaded 48), in 8 warps of 64x32 outputs (16 mma tiles: 64 accumulators a thread, each fragment of A
# used 4 times, of B 4 times). K comes in blocks of TC_K_BYTES a row of A (32 halves: 2 k16 steps; 16 floats: 2 tf32
# k8 steps), two stages of both tiles in 37 KiB of the 48 KiB a block has.
TC_TILES = (4, 4)
TC_WARPS = (2, 4)
TC_K_BYTES = 64

def _halvings(n: int) -> tuple[int, ...]: return tuple(n >> i for i in range(n.bit_length()) if n >> i >= 2)

def _gpu_tensor_cores(k: Kernel) -> bool:
  """TC where a tensor core takes the kernel, then the block above: the most tiles per warp, then warps, then K steps
  per block that divide the axes and fit (in registers, threads and shared memory), fewer where they do not."""
  if not any(_try(k, Opt(OptOps.TC, i, 0)) for i in range(len(k.renderer.tensor_cores))): return False
  assert k.tensor_core is not None
  for op, amounts in ((OptOps.UPCAST, TC_TILES), (OptOps.LOCAL, TC_WARPS)):
    for name, most in zip(("axis_m", "axis_n"), amounts):
      axis = getattr(k.tensor_core, name)
      next((a for a in _halvings(most) if k.full_shape[axis] % a == 0 and _try(k, Opt(op, axis, a))), None)
  tc, axis = k.tensor_core.tc, k.tensor_core.axis_k
  steps = TC_K_BYTES // (tc.dims[2] * tc.dtype_in.itemsize)
  next((a for a in _halvings(steps) if k.full_shape[axis] % a == 0 and _try(k, Opt(OptOps.UNROLL, axis, a))), None)
  return True

# fewer threads than this in a block waste the SMs: at most 32 blocks run on one at a time, so blocks of 16 threads
# fill a quarter of its 2048 threads, and half of each warp's lanes
GPU_MIN_THREADS = 64

def _gpu_pad_for_threads(k: Kernel, axis: int) -> None:
  """Pad the first axis threads walk to a multiple of GPU_BLOCK where its size has no power-of-two divisor of at least
  GPU_MIN_THREADS (1000x1000 floats in vectors of 4: 250000 = 16 x 15625; a prime size: 1): the padded threads are
  masked off, one block's worth at most."""
  size = k.full_shape[axis]
  if k.local_size() > 1 or not isinstance(size, int) or size < GPU_BLOCK: return
  if (_largest_divisor(size, _LOCAL_AMTS) or 1) < GPU_MIN_THREADS: _try(k, Opt(OptOps.PADTO, axis, GPU_BLOCK))

def _gpu(k: Kernel) -> None:
  if k.atomic: return _gpu_atomic_scatter(k)
  if _gpu_tensor_cores(k): return
  if _is_matmul_like(k):
    # a 4x4 register tile: each B vector serves 4 rows, each A value 4 columns
    vec_axis = _output_contiguous_axis(k)
    other = next((a for a in _reused_axes(k) if a != vec_axis), None)
    for axis in (vec_axis, other):
      if axis is not None and (amt := _largest_divisor(k.full_shape[axis], (4, 2))) is not None:
        _try(k, Opt(OptOps.UPCAST, axis, amt))
  elif k.reduce_axes and _gpu_group(k): pass
  else: _gpu_vector(k)
  for a in reversed(k.axes_of(AxisKind.GLOBAL)):  # the innermost axis first: threadIdx.x walks it (coalesced)
    budget = GPU_BLOCK // max(1, k.local_size())
    if budget < 2: break
    _gpu_pad_for_threads(k, a)
    if (amt := _largest_divisor(k.full_shape[a], tuple(c for c in _LOCAL_AMTS if c <= budget))):
      _try(k, Opt(OptOps.LOCAL, a, amt))

def hand_coded_optimizations(k: Kernel) -> Kernel:
  """Apply the heuristics to a copy of `k`; the original is unchanged."""
  k = k.copy()
  if k.renderer.has_local: _gpu(k)
  else: _cpu(k)
  return k
