"""FTZ: CPU kernels that flush denormal floats to zero (read as zero and computed as zero), against numpy, which keeps
them; the thread's float mode as it was after each kernel; kernels built for one setting never run for the other."""
import numpy as np
import pytest

from lazytensor import Context, Device, Tensor
from lazytensor.codegen.linearize import linearize
from lazytensor.codegen.lowerer import lower_kernel
from lazytensor.engine.realize import compile_kernel
from lazytensor.opt.kernel import Kernel, Opt, OptOps
from lazytensor.renderer.cpu_target import cpu_target
from lazytensor.renderer.llvm import LLVMRenderer, denormal_mode
from lazytensor.runtime.ops_cpu import LLVMCompiler

HOST_FLUSHES = denormal_mode(cpu_target("native")) is not None
needs_mode = pytest.mark.skipif(not HOST_FLUSHES, reason="no float mode register known for this host's ISA")

def _operands(dt: type) -> tuple[np.ndarray, np.ndarray]:
  """a * b: denormal inputs (DAZ reads them as 0), normal ones whose product is denormal (FTZ makes it 0), and one
  normal product, which stays."""
  tiny = np.finfo(dt).smallest_normal
  a = np.array([tiny / 4, -tiny / 3, tiny * 8, 1.5], dt)
  b = np.array([3.0, 2.0, 1 / 64, 2.0], dt)
  return a, b

@needs_mode
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_denormals_flush_to_zero_with_the_knob_and_stay_without(dt: type) -> None:
  a, b = _operands(dt)
  want = a * b
  assert np.count_nonzero(np.abs(want) < np.finfo(dt).smallest_normal) == 3  # numpy keeps the three denormals
  with Context(FTZ=True): flushed = (Tensor(a) * Tensor(b)).numpy()
  np.testing.assert_array_equal(flushed, np.where(np.abs(want) < np.finfo(dt).smallest_normal, 0, want))
  np.testing.assert_array_equal((Tensor(a) * Tensor(b)).numpy(), want)  # the program cache kept the two apart
  with Context(FTZ=True): np.testing.assert_array_equal((Tensor(a) * Tensor(b)).numpy(), flushed)

@needs_mode
def test_the_calling_threads_float_mode_is_restored() -> None:
  # a kernel that left FTZ/DAZ set would make numpy's next product on this thread 0
  a, b = _operands(np.float32)
  with Context(FTZ=True): (Tensor(a) * Tensor(b)).realize()
  np.testing.assert_array_equal(a * b, a.astype(np.float64) * b.astype(np.float64))
  assert np.count_nonzero(a * b) == 4

@needs_mode
def test_threaded_shares_flush_too() -> None:
  # a matmul's sum of denormal products, its rows split between the calling thread and a worker
  x, w = np.full((64, 32), 1e-20, np.float32), np.full((32, 16), 1e-20, np.float32)
  item = (Tensor(x) @ Tensor(w)).schedule()[-1]
  for buf in item.bufs: buf.ensure_allocated()
  for flush, want in ((True, np.zeros((64, 16), np.float32)), (False, x @ w)):
    with Context(FTZ=flush, THREADS=2):
      runner = compile_kernel(item.ast, Device["CPU"], [Opt(OptOps.THREAD, 0, 4)])
      assert runner.launch["core_count"] == 4
      runner(item.bufs, wait=True)
    np.testing.assert_array_equal(item.bufs[0].numpy().view(np.float32).reshape(64, 16), want)

@pytest.mark.parametrize("target, sets", [("x86-64-v3", "ldmxcsr"), ("aarch64", "msr\tFPCR")])
def test_each_isa_sets_and_restores_its_float_mode(target: str, sets: str) -> None:
  # compiled (not run) for either ISA: the mode set once on entry and restored once before the return
  t = cpu_target(target)
  uops = linearize(lower_kernel(Kernel((Tensor(np.ones(64, np.float32)).realize() * 3).schedule()[-1].ast,
                                       LLVMRenderer(t))))
  for flush in (True, False):
    with Context(FTZ=flush): asm = LLVMCompiler(t).assembly(LLVMRenderer(t).render("k", uops))
    assert asm.count(sets) == (2 if flush else 0), asm
