"""What a renderer is: the capabilities it declares (checked by apply_opt, read by the lowerer and the heuristics) and
render(name, linear program), and the launch a linear program asks for (`launch_dims`). Tensor cores are declared as
data (`TensorCore`), so the lowerer, `apply_opt(TC)`, EMU and every renderer read one description of an instruction's
shape and fragment layout."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lazytensor.dtype import DType, dtypes
from lazytensor.uop.ops import Ops, PatternMatcher, UOp

if TYPE_CHECKING:
  from lazytensor.renderer.cpu_target import CPUTarget

Weights = tuple[tuple[int, int], ...]

@dataclass(frozen=True)
class Fragment:
  """Which elements of one matrix a lane holds in its registers. Element j of lane l sits at (row, col) = the sum of
  the weights of the bits set in l (`lane`, one (row, col) weight per bit of the lane id, lowest first) and in j
  (`elem`, one per bit of the register index). Every tensor-core layout of NVIDIA's mma.sync is of this form."""
  lane: Weights
  elem: Weights

  @property
  def threads(self) -> int: return 1 << len(self.lane)
  @property
  def size(self) -> int:
    """Registers per lane."""
    return 1 << len(self.elem)

  def coords(self, lane: int, elem: int) -> tuple[int, int]:
    """(row, col) of register `elem` of lane `lane`."""
    bits = [w for b, w in enumerate(self.lane) if lane >> b & 1] + [w for b, w in enumerate(self.elem) if elem >> b & 1]
    return sum(r for r, _ in bits), sum(c for _, c in bits)

@dataclass(frozen=True)
class TensorCore:
  """One warp-wide multiply-accumulate instruction: D (M x N, dtype_acc) = A (M x K, dtype_in) @ B (K x N) + C,
  computed together by `threads` lanes, each holding the fragments `a`, `b` and `c` (C and D share a layout).
  `name` is unique among the tensor cores a renderer declares; it is the arg of the WMMA op."""
  name: str
  dims: tuple[int, int, int]  # M, N, K
  dtype_in: DType
  dtype_acc: DType
  a: Fragment  # rows M, columns K
  b: Fragment  # rows K, columns N
  c: Fragment  # rows M, columns N

  @property
  def threads(self) -> int: return self.c.threads

  def __post_init__(self) -> None:
    m, n, k = self.dims
    for frag, shape in ((self.a, (m, k)), (self.b, (k, n)), (self.c, (m, n))):
      cells = sorted(frag.coords(lane, j) for lane in range(frag.threads) for j in range(frag.size))
      assert frag.threads == self.threads and cells == [(r, c) for r in range(shape[0]) for c in range(shape[1])], \
        f"tensor core {self.name}: a fragment does not cover its {shape} matrix exactly once"

# NVIDIA's mma.sync.aligned layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8"): a lane id is
# groupID (bits 2-4) * 4 + threadID_in_group (bits 0-1).
_G_ROWS: Weights = ((1, 0), (2, 0), (4, 0))  # groupID picks the row (of A, C) ...
_G_COLS: Weights = ((0, 1), (0, 2), (0, 4))  # ... or the column (of B)
# C/D of m16n8k*: c0,c1 at (groupID, 2*tig + {0,1}), c2,c3 eight rows below
_NV_C = Fragment(((0, 2), (0, 4), *_G_ROWS), ((0, 1), (8, 0)))
# A of m16n8k16: a0,a1 (groupID, 2*tig + {0,1}); a2,a3 eight rows below; a4..a7 the same eight columns right
# B of m16n8k16: b0,b1 (2*tig + {0,1}, groupID); b2,b3 eight rows below
_NV_K16 = (Fragment(((0, 2), (0, 4), *_G_ROWS), ((0, 1), (8, 0), (0, 8))),
           Fragment(((2, 0), (4, 0), *_G_COLS), ((1, 0), (8, 0))))
# A of m16n8k8 (tf32): a0 (groupID, tig), a1 eight rows below, a2,a3 four columns right; B: b0 (tig, groupID), b1 +4
_NV_K8 = (Fragment(((0, 1), (0, 2), *_G_ROWS), ((8, 0), (0, 4))),
          Fragment(((1, 0), (2, 0), *_G_COLS), ((4, 0),)))

TC_NV_F16 = TensorCore("m16n8k16_f16_f32", (16, 8, 16), dtypes.float16, dtypes.float32, *_NV_K16, _NV_C)
# bf16 x bf16 -> f32 has the fragment layout of f16 (sm_80 and later)
TC_NV_BF16 = TensorCore("m16n8k16_bf16_f32", (16, 8, 16), dtypes.bfloat16, dtypes.float32, *_NV_K16, _NV_C)
# float32 inputs rounded to tf32 (10 mantissa bits) by the instruction: only where the TF32 knob allows it
TC_NV_TF32 = TensorCore("m16n8k8_tf32_f32", (16, 8, 8), dtypes.float32, dtypes.float32, *_NV_K8, _NV_C)
NVIDIA_TENSOR_CORES: tuple[TensorCore, ...] = (TC_NV_F16, TC_NV_BF16, TC_NV_TF32)

# the (op, dtype) read-modify-writes CUDA does atomically on sm_80 and later (which the tensor cores above need too):
# atomicAdd of float, double (sm_60), __half (sm_70), __nv_bfloat16 (sm_80), int, unsigned and unsigned long long (int64
# as well: two's complement adds the same bits); atomicMax of the 32- and 64-bit ints; float MAX as an atomicCAS loop
# (16 bits: sm_70). Each step rounds as the in-order kernel's does; only the order of the steps is not fixed. Not 8-
# and 16-bit ints: CUDA has no 8-bit atomics and no 16-bit integer add or max.
NVIDIA_ATOMICS: frozenset[tuple[Ops, DType]] = frozenset(
  (op, dt) for op in (Ops.ADD, Ops.MAX) for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
                                                   dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64))

# the arg of a STORE to shared memory whose value is a LOAD from global memory that the device copies asynchronously
# (PTX's cp.async.cg.shared.global, 16 bytes): the data is there only after a BARRIER of this arg, which first waits
# for the thread's copies (cp.async.wait_all) and then for the block. Lanes whose load is gated off get zeros.
ASYNC_COPY = "cp.async"

class Renderer:
  device: str = ""
  has_local: bool = False       # GPU threads within a block (LOCAL, GROUP)
  has_shared: bool = False      # shared memory for two-stage reduces (GROUP, GROUPTOP)
  has_threads: bool = False     # THREAD: split a global axis across CPU cores
  global_max: tuple[int, ...] | None = None
  local_max: tuple[int, ...] | None = None
  threads_max: int = 1024       # most threads in one block, whatever their shape
  shared_max: int = 0           # bytes of shared memory per block
  upcast_max: int = 256         # most elements one thread computes in registers
  multiprocessors: int = 0      # GPU: SMs, each running blocks of its own; a grid of fewer blocks leaves some idle
  vector_widths: tuple[int, ...] = ()  # widths of native vector loads/stores; () means none
  masked_vector_loads: bool = False    # a vector LOAD may take a vector of per-lane gates
  async_copy: bool = False             # STOREs of arg ASYNC_COPY: global -> shared copies that overlap the math
  target: CPUTarget | None = None      # the CPU a CPU renderer compiles for: vector width, registers, caches
  # (op, dtype) that a loop-level STORE with arg op combines into memory atomically (old op value, one step no other
  # thread splits): a scatter kernel of those runs its entries in parallel (schedule/scatter.py); () runs them in order
  atomics: frozenset[tuple[Ops, DType]] = frozenset()
  # rules run on the loop-level graph before linearizing: decompositions the target needs
  extra_matcher: PatternMatcher[UOp] | None = None

  @property
  def tensor_cores(self) -> tuple[TensorCore, ...]:
    """The tensor cores this renderer can emit now (TC's axis picks one); a property, since a knob may widen it."""
    return ()

  @property
  def cache_key(self) -> str:
    """Everything about this renderer that changes the code it writes for a given program (its class, and for a
    renderer with a target, the target). Part of every cache key of programs and of searched opts."""
    return type(self).__name__

  def readable_past(self, nbytes: int) -> int:
    """Bytes past the end of a buffer of `nbytes` that this device's allocator keeps readable: a kernel may read there
    what it then discards (the positions PADTO adds to an output axis: codegen/lowerer.py)."""
    return 0

  def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError

GRID_AXES = 3
# where a runtime passes a kernel's scalar arguments (its DEFINE_VARs) in memory, one block of this many bytes each, in
# order: the CPU (whose threads' launcher passes pointers only) and CUDACPU (whose launcher does the same)
VAR_SLOT = 8

@dataclass(frozen=True)
class LaunchDims:
  """How many blocks (global_size) of how many threads (local_size) a GPU launch runs, and how many CPU cores a THREAD
  axis spreads over; every runtime's Program takes these as keyword arguments."""
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] = (1, 1, 1)
  core_count: int = 1

  def kwargs(self) -> dict[str, Any]: return {"global_size": self.global_size, "local_size": self.local_size,
                                              "core_count": self.core_count}

def launch_dims(uops: list[UOp]) -> LaunchDims:
  """The launch a linear program's SPECIALs ask for: gidx<i> blocks, lidx<i> threads, core ids."""
  sizes: dict[str, int] = {}
  for u in uops:
    if u.op is not Ops.SPECIAL: continue
    name, size = u.arg
    if sizes.setdefault(name, size) != size: raise ValueError(f"SPECIAL {name} is sized both {sizes[name]} and {size}")
  dims = [tuple(sizes.get(f"{prefix}{i}", 1) for i in range(GRID_AXES)) for prefix in ("gidx", "lidx")]
  cores = max([size for name, size in sizes.items() if name.startswith("core")], default=1)
  return LaunchDims(dims[0], dims[1], cores)
