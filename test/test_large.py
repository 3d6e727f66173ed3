"""64-bit indexing: kernels over more than 2**31 and 2**32 elements compute the right elements, and every ordinary
kernel keeps int32 index math (the cheaper one)."""
import gc
import itertools
import shutil
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazytensor import Device, Tensor, dtypes
from lazytensor.codegen.lowerer import lower_kernel
from lazytensor.codegen.nodes import specials
from lazytensor.codegen.program import get_program
from lazytensor.dtype import DType
from lazytensor.engine.realize import CompiledRunner, ExecItem, optimize_kernel
from lazytensor.helpers import Context, prod
from lazytensor.nn import Conv2d
from lazytensor.opt.kernel import Kernel
from lazytensor.uop.ops import Ops, UOp
from lazytensor.uop.symbolic import simplify

# ---- which index dtype a kernel gets (nothing here runs or allocates: kernels are only lowered) ----

def index_dtypes(sink: UOp) -> set[DType]:
  """The dtypes of a lowered kernel's loop variables, launch ids and memory addresses."""
  out = {u.dtype for u in sink.toposort if u.op in (Ops.RANGE, Ops.SPECIAL)}
  return out | {u.src[1].dtype for u in sink.toposort if u.op in (Ops.LOAD, Ops.STORE) and
                u.src[0].op is Ops.DEFINE_GLOBAL}

def kernel_index_dtypes(t: Tensor) -> list[set[DType]]:
  """For each kernel that realizing t would run, with the heuristics' opts and with none, its index dtypes."""
  out = []
  for si in t.schedule():
    if si.ast.op is not Ops.SINK: continue  # a copy
    for noopt in (1, 0):
      with Context(NOOPT=noopt): out.append(index_dtypes(lower_kernel(optimize_kernel(si.ast, Device[t.device]))))
  return out

def _conv(x: Tensor) -> Tensor:
  Tensor.manual_seed(0)
  return Conv2d(8, 16, 3, padding=1)(x)

ORDINARY: dict[str, Callable[[], Tensor]] = {
  "add": lambda: Tensor.rand(64, 65) + Tensor.rand(64, 65),
  "broadcast": lambda: Tensor.rand(33, 1) * Tensor.rand(1, 47) - 1,
  "sum_axis": lambda: Tensor.rand(128, 77).sum(1),
  "max_all": lambda: Tensor.rand(1000, 999).max(),
  "matmul": lambda: Tensor.rand(256, 256) @ Tensor.rand(256, 256),
  "matmul_t": lambda: Tensor.rand(96, 200) @ Tensor.rand(64, 200).T,
  "conv2d": lambda: _conv(Tensor.rand(2, 8, 20, 20)),
  "pad_flip": lambda: Tensor.rand(17, 9).pad(((2, 3), (1, 0))).flip(0) * 2,
  "softmax": lambda: Tensor.rand(32, 100).softmax(-1),
  "arange": lambda: Tensor.arange(10_000) * 3,
  "one_hot": lambda: Tensor([3, 1, 4, 1]).one_hot(10),
  "gather": lambda: Tensor.rand(10, 12).gather(1, Tensor([[1, 2], [0, 11]] * 5)),
  # a scatter's fill and scatter kernels (schedule/scatter.py): the address at the index is clamped into the targets
  "scatter_add": lambda: Tensor.rand(300, 64).scatter_reduce(
    0, Tensor([[(7 * i + j) % 300 for j in range(64)] for i in range(40)]), Tensor.rand(40, 64), "sum"),
  "cumsum": lambda: Tensor.rand(50, 300).cumsum(1),
  "randn": lambda: Tensor.randn(4096),
  "strided": lambda: Tensor.rand(64, 64)[::3, 1::2].contiguous(),
  # the largest buffer int32 still indexes: its last element is 2**31 - 1
  "last_int32": lambda: Tensor.empty(2**31, dtype=dtypes.uint8)[-5:] + 1,
  "big_loop": lambda: Tensor.arange(2**30).max(),  # a loop of 2**30; 2**31 needs int64
}

@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_kernels_index_in_int32(name: str) -> None:
  found = kernel_index_dtypes(ORDINARY[name]())
  assert found and all(d == {dtypes.int32} for d in found), found

LARGE: dict[str, Callable[[], Tensor]] = {
  "read_past_2**31": lambda: Tensor.empty(2**31 + 8, dtype=dtypes.uint8)[-5:] + 1,
  "write_past_2**32": lambda: Tensor.empty(2**32 + 8, dtype=dtypes.uint8).flip(0) + 1,
  "loop_of_2**32": lambda: Tensor.arange(2**32 + 10).max(),
  "arange_past_2**31": lambda: Tensor.arange(2**31 + 10)[-3:],
  "reduce_rows_past_2**31": lambda: Tensor.empty(3, 2**30, dtype=dtypes.uint8).sum(0),
  "scatter_past_2**31": lambda: Tensor.empty(2**21 + 1, 1024, dtype=dtypes.uint8).scatter_reduce(
    0, Tensor.empty(4, 1024, dtype=dtypes.int32), Tensor.empty(4, 1024, dtype=dtypes.uint8), "sum"),
}

@pytest.mark.parametrize("name", LARGE)
def test_large_kernels_index_in_int64(name: str) -> None:
  found = kernel_index_dtypes(LARGE[name]())
  assert found and all(d == {dtypes.int64} for d in found), found

def _value(expr: UOp, at: dict[UOp, int]) -> int:
  return simplify(expr.substitute({u: UOp.const(dtypes.index, v) for u, v in at.items()})).arg

@pytest.mark.parametrize("sizes", [(7 * 5,), (4, 7 * 5), (2, 3 * 4)])
def test_a_grid_dim_over_its_limit_takes_a_free_dim(sizes: tuple[int, ...]) -> None:
  # the CUDA grid holds at most 2**31 - 1 blocks in x: here, small limits stand for it
  most = (10, 5, 5)
  idx = specials("gidx", list(range(len(sizes))), sizes, most)
  found = sorted({u for i in idx.values() for u in i.toposort if u.op is Ops.SPECIAL}, key=lambda u: u.arg)
  assert len(found) == len(sizes) + 1 and all(u.arg[1] <= most[int(u.arg[0][-1])] for u in found)
  seen = {tuple(_value(idx[a], dict(zip(found, ids))) for a in range(len(sizes)))
          for ids in itertools.product(*[range(u.arg[1]) for u in found])}
  assert len(seen) == prod(sizes) and seen == set(itertools.product(*[range(s) for s in sizes]))  # each once

@pytest.mark.parametrize("sizes", [(37,), (3, 2, 18)])  # no divisor fits; no free dim
def test_a_grid_dim_that_cannot_split_stays_for_the_renderer_to_reject(sizes: tuple[int, ...]) -> None:
  idx = specials("gidx", list(range(len(sizes))), sizes, (10, 5, 5))
  assert len({u for i in idx.values() for u in i.toposort if u.op is Ops.SPECIAL}) == len(sizes)

def realize_with_int64_index(t: Tensor) -> np.ndarray:
  """t computed with every kernel's index math forced to int64 (read from its buffer: t.numpy() would schedule it
  again, and move the random counter again)."""
  for si in (items := t.schedule()):
    if si.ast.op is Ops.SINK:
      dev = Device[si.bufs[0].device]
      spec = get_program(optimize_kernel(si.ast, dev), "k", index64=True)
      assert "i64" in spec.source and "i32 %r" not in spec.source  # int64 loop variables and addresses, no int32 ones
      step = ExecItem(CompiledRunner("k", dev.load(spec.name, dev.compiler.compile_cached(spec.source)),
                                     Kernel(si.ast, dev.renderer), 0, 0, spec), si.bufs)
    else: step = ExecItem(None, si.bufs)
    step.run()
  return items[-1].bufs[0].numpy().reshape(t.shape)

@pytest.mark.parametrize("name", ["conv2d", "pad_flip", "one_hot", "gather", "scatter_add", "cumsum", "strided"])
def test_int64_index_math_computes_the_same(name: str) -> None:
  Tensor.manual_seed(1)
  wide = realize_with_int64_index(ORDINARY[name]())
  Tensor.manual_seed(1)
  np.testing.assert_allclose(wide, ORDINARY[name]().numpy(), rtol=1e-6)

_MOVES = st.sampled_from(["permute", "flip", "pad", "shrink", "expand"])

@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 1 << 10), min_size=1, max_size=3), moves=st.lists(_MOVES, max_size=4),
       reduce=st.booleans(), data=st.data())
def test_views_below_2_31_index_in_int32(shape: list[int], moves: list[str], reduce: bool,
                                          data: st.DataObject) -> None:
  """Any chain of movement ops over a buffer, with or without a reduce, where the buffer and every shape on the way
  stay below 2**31 elements, keeps int32 indexing."""
  t = Tensor.empty(*shape, dtype=dtypes.uint8)
  for m in moves:
    if m == "permute": t = t.permute(*data.draw(st.permutations(range(t.ndim))))
    elif m == "flip": t = t.flip(data.draw(st.integers(0, t.ndim - 1)))
    elif m == "pad": t = t.pad([(data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in t.shape])
    elif m == "shrink":
      t = t.shrink([(b, data.draw(st.integers(b + 1, s))) for s in t.shape for b in [data.draw(st.integers(0, s - 1))]])
    elif prod(t.shape) < 1 << 20: t = t.unsqueeze(0).expand(data.draw(st.integers(1, 1 << 10)), *t.shape)
  t = t.sum(data.draw(st.integers(0, t.ndim - 1))) if reduce and t.ndim > 1 else t + 1
  assert all(d == {dtypes.int32} for d in kernel_index_dtypes(t))

# ---- running kernels over more than 2**31 and 2**32 elements ----

def _available_gb() -> float:
  try:
    with open("/proc/meminfo") as f: info = dict(line.split(":", 1) for line in f)
  except OSError: return 0.0
  return int(info.get("MemAvailable", "0 kB").split()[0]) / 2**20

NEEDS_GB = 12  # the largest test holds a 2 GiB tensor and reads it, and CI runs two test workers at once

@pytest.fixture
def big_memory() -> Iterator[None]:
  if (gb := _available_gb()) < NEEDS_GB:
    pytest.skip(f"needs {NEEDS_GB} GB of available memory (MemAvailable in /proc/meminfo), has {gb:.1f} GB")
  if Device.DEFAULT != "CPU": pytest.skip(f"runs on the CPU device only, not {Device.DEFAULT}")
  yield
  gc.collect()  # the GBs go back before the next test

def test_sums_with_more_than_2_31_and_2_32_terms() -> None:
  # a sum of a constant is the constant times the count: exact in integers, rounded once in floats (float32 has no
  # 2**31 + 10; adding 1 in a loop would stop at 2**24 per accumulator)
  total = Tensor.ones(2**16, 2**16, dtype=dtypes.int32).sum()
  assert (total.dtype, total.item()) == (dtypes.int64, 2**32)
  assert Tensor.ones(2**31 + 10).sum().item() == float(np.float32(2**31 + 10)) == 2**31
  assert Tensor.ones(2**31 + 10).sum(dtype=dtypes.float64).item() == 2**31 + 10
  # loops past int32 (no memory: the values are computed); LLVM turns the sum into its closed form
  n = 2**31 + 10
  assert Tensor.arange(n).sum().item() == n * (n - 1) // 2
  assert Tensor.arange(n).max().item() == n - 1

@pytest.mark.parametrize("device", ["CPU", "EMU", "CUDACPU"])
def test_shrink_of_arange_computes_only_its_elements(device: str) -> None:
  # on CUDACPU the CUDA source with `long long` index math runs
  if device == "CUDACPU" and shutil.which("g++") is None: pytest.skip("CUDACPU needs g++")
  t = Tensor.arange(2**31 + 10, device=device)[-3:]
  (item,) = t.schedule()
  assert prod(Kernel(item.ast, Device[device].renderer).full_shape) == 3
  assert [b.size for b in item.bufs] == [3]
  assert t.tolist() == [2**31 + 7, 2**31 + 8, 2**31 + 9]
  corner = Tensor.arange(2**32, device=device).reshape(2**16, 2**16)[-2:, -3:]
  assert corner.tolist() == [[2**32 - 3 + i + 2**16 * r for i in range(3)] for r in (-1, 0)]
  assert (Tensor.arange(10**7, device=device)[-3:] * 2).tolist() == [2 * (10**7 - 3), 2 * (10**7 - 2), 2 * (10**7 - 1)]

def test_uint8_past_2_31(big_memory: None) -> None:
  n = 2**31 + 64
  x = Tensor.zeros(n, dtype=dtypes.uint8).contiguous().realize()
  x[n - 1] = 7
  x[2**31 + 1] = 3
  assert (x[2**31 + 1].item(), x[n - 1].item(), x[1].item()) == (3, 7, 0)
  assert x.sum().item() == 10
  assert x[2**31:2**31 + 4].tolist() == [0, 3, 0, 0]
  assert x.flip(0)[:2].tolist() == [7, 0]
  del x

def test_scatter_past_2_31(big_memory: None) -> None:
  # the scatter kernel's address (row index * 1024) passes 2**31 for the last row: int64 index math
  v, d = 2**21 + 1, 1024
  idx = Tensor([[v - 1] * d, [0] * d, [v - 1] * d, [-1] * d], dtype=dtypes.int32)  # -1: no target, writes nothing
  with Context(CHECK_INDICES=0):  # unchecked: checked, the -1 raises (test_index_check.py)
    out = Tensor.zeros(v, d, dtype=dtypes.uint8).scatter_reduce(0, idx, Tensor.ones(4, d, dtype=dtypes.uint8), "sum")
  out.realize()
  assert out[v - 1, -3:].tolist() == [2, 2, 2] and out[0, :2].tolist() == [1, 1] and out[v - 2, :2].tolist() == [0, 0]
  del out

def test_uint8_past_2_32(big_memory: None) -> None:
  # only the elements written are touched: the pages of the rest are never faulted in
  n = 2**32 + 64
  x = Tensor.empty(n, dtype=dtypes.uint8)
  x[5] = 1
  x[2**32:] = 1
  x[2**32 + 5] = 2
  x[n - 1] = 7
  assert (x[5].item(), x[2**32 + 5].item(), x[n - 1].item()) == (1, 2, 7)
  assert x[2**32:2**32 + 8].tolist() == [1, 1, 1, 1, 1, 2, 1, 1]
  assert x[2**32:].sum().item() == 64 + 1 + 6
  assert Tensor.ones(n, dtype=dtypes.uint8).sum().item() == n
  del x
