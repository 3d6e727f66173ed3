"""Python numbers that change between calls of one graph are kernel arguments after their second value
(schedule/cache.py, Positions): a loop over values compiles twice, not once a value."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from lazytensor import Context, Tensor, dtypes, nn
from lazytensor.codegen.program import ProgramSpec
from lazytensor.engine.jit import TinyJit
from lazytensor.nn.lr_scheduler import CosineAnnealingLR
from lazytensor.runtime.device import compile_stats
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops

DEVICES = ["CPU", "EMU", "CUDACPU"]

def built() -> int:
  """Programs this process has built so far: compiled, or read from the disk cache."""
  return compile_stats["compiled"] + compile_stats["disk"]

@pytest.fixture
def count() -> Iterator[Callable[[], int]]:
  """The programs built since the test began."""
  start = built()
  yield lambda: built() - start

def test_distinct_constants_compile_two_kernels(count: Callable[[], int]) -> None:
  # the first value compiles a kernel with the number in it, the second one with an argument, reused by every later one
  for i in range(1000):
    out = Tensor.full((1021,), float(i)).contiguous().realize()
    if i % 250 == 3: np.testing.assert_array_equal(out.numpy(), np.full(1021, i, np.float32))
  assert count() <= 2

def test_without_scalar_args_each_value_compiles(count: Callable[[], int]) -> None:
  with Context(SCALAR_ARGS=0):
    for i in range(4): Tensor.full((1019,), float(i)).contiguous().realize()
  assert count() == 4

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.int64, dtypes.float64])
def test_x_times_i_in_a_loop(device: str, dtype: dtypes, count: Callable[[], int]) -> None:
  xn = np.arange(-5, 12).astype(dtype.np)
  x = Tensor(xn, device=device).realize()
  for i in range(12):
    k = i if dtype.is_int else i * 0.75
    np.testing.assert_array_equal((x * k - 1000).numpy(), xn * dtype.np.type(k) - dtype.np.type(1000))
  assert count() <= 2

def test_a_value_equal_to_another_constant_is_another_structure(count: Callable[[], int]) -> None:
  # x * 3 - 3 holds one node for both 3s: a graph of another structure, which compiles its own kernel once
  xn = np.arange(5, dtype=np.float32)
  x = Tensor(xn).realize()
  for k in (1.0, 2.0, 3.0, 4.0, 5.0, 3.0):
    np.testing.assert_array_equal((x * k - 3).numpy(), xn * np.float32(k) - 3)
  assert count() <= 3

@pytest.mark.parametrize("device", DEVICES)
def test_several_numbers_of_one_kernel_and_of_several(device: str, count: Callable[[], int]) -> None:
  # two numbers change in one kernel, a third in a reduce's kernel after it: each takes its own argument
  xn = np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8)
  x = Tensor(xn, device=device).realize()
  for a, b, c in [(0.5, 1.5, 2.0), (0.25, -2.0, 3.0), (4.0, 0.125, -1.0), (-3.0, 7.0, 0.5)]:
    y = (x * a + b).clamp(-c, c)
    out = (y - y.max(1, keepdim=True) * c).numpy()
    yn = np.clip(xn * np.float32(a) + np.float32(b), -c, c)
    np.testing.assert_allclose(out, yn - yn.max(1, keepdims=True) * np.float32(c), rtol=1e-6, atol=1e-6)
  assert count() <= 4  # two kernels, each specialized once and then with arguments

def test_the_first_value_specializes_and_the_second_is_an_argument() -> None:
  x = Tensor(np.arange(8, dtype=np.float32)).realize()
  def kernel(c: float) -> tuple[list[Ops], list[object], tuple[object, ...]]:
    (item,), _ = create_schedule([(x * c + 1).lazydata])
    nodes = list(item.ast.toposort)
    return [u.op for u in nodes], [u.arg for u in nodes if u.op is Ops.CONST], item.vals
  ops, consts, vals = kernel(0.0)
  assert Ops.DEFINE_VAR not in ops and 0.0 in consts and vals == ()  # 0 is in the kernel: x*0 folds when lowered
  ops, consts, vals = kernel(2.5)
  assert Ops.DEFINE_VAR in ops and 2.5 not in consts and vals == (2.5,)
  assert kernel(0.0)[2] == (0.0,)  # the position is an argument for good: 0 too goes through it
  assert kernel(7.0)[1:] == (consts, (7.0,))

def test_a_number_in_index_math_stays_right() -> None:
  # an offset into a gather's index becomes an argument too: the index is computed (and checked) at run time
  xn = np.arange(10, dtype=np.float32) * 3
  x = Tensor(xn).realize()
  for i in range(5):
    idx = Tensor.arange(4) + i
    np.testing.assert_array_equal(x[idx].numpy(), xn[np.arange(4) + i])

def test_lr_scheduler_over_1000_steps_compiles_nothing_after_the_first(count: Callable[[], int]) -> None:
  # the learning rate is a tensor that the schedule assigns: no step compiles after the first few
  rng = np.random.default_rng(0)
  model = nn.Linear(4, 3)
  opt = nn.optim.SGD(nn.state.get_parameters(model), lr=0.1, momentum=0.9)
  sched = CosineAnnealingLR(opt, T_max=1000)
  x, y = Tensor(rng.standard_normal((8, 4), dtype=np.float32)), Tensor(rng.standard_normal((8, 3), dtype=np.float32))
  def step() -> None:
    with Tensor.train():
      opt.zero_grad()
      ((model(x) - y) ** 2).mean().backward()
      opt.step()
    sched.step()
  for _ in range(3): step()
  first = count()
  for _ in range(997): step()
  assert count() == first
  assert opt.lr.item() == pytest.approx(sched.get_last_lr(), rel=1e-6)

def test_tinyjit_replays_with_the_values_it_captured(count: Callable[[], int]) -> None:
  # a changed float argument captures again (TinyJit keys on non-Tensor arguments): with its argument kernel, no compile
  @TinyJit
  def f(x: Tensor, s: float) -> Tensor: return (x * s + 1).realize()
  xn = np.arange(6, dtype=np.float32)
  for s in (2.0, 2.0, 2.0, 3.5, 3.5, 3.5, -1.25, -1.25, 5.0, 2.0, 2.0):
    np.testing.assert_array_equal(f(Tensor(xn), s).numpy(), xn * np.float32(s) + 1)
  assert count() <= 2

def test_program_spec_carries_the_argument_dtypes() -> None:
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  for c in (1.5, 2.5):
    (item,), _ = create_schedule([(x * c).lazydata])
  from lazytensor.engine.realize import get_runner
  spec = get_runner("CPU", item.ast).spec
  assert spec.vars == (dtypes.float32,) and ProgramSpec.from_json(spec.to_json()) == spec
  bad = json.loads(spec.to_json()) | {"vars": ["float33"]}
  with pytest.raises(ValueError, match="vars"): ProgramSpec.from_json(json.dumps(bad))

def test_memory_stays_flat_over_3000_distinct_constants() -> None:
  # each compile leaks ~80 KB in llvmlite: 3000 of them grew RSS by ~240 MB; two kernels leave it flat
  script = textwrap.dedent("""
    import resource
    from lazytensor import Tensor
    from lazytensor.runtime.device import compile_stats
    def rss() -> int: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for i in range(3000):
      Tensor.full((1024,), float(i)).contiguous().realize()
      if i == 300: early = rss()
    print(rss() - early, compile_stats["compiled"] + compile_stats["disk"])
  """)
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
  grown_kb, programs = int(out[0]), int(out[1])
  assert programs <= 2 and grown_kb < 20_000, (grown_kb, programs)
