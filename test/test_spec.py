"""The IR spec (codegen/spec.py) checked after every pass of representative kernels on each renderer, and a pass that
leaves a wrong node failing with an error that names the pass, the node and the rule."""
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor, dtypes, nn
from lazytensor.codegen.lowerer import LOWER_PASSES
from lazytensor.codegen.passes import CodegenCtx, Pass, run_passes
from lazytensor.codegen.program import PIPELINE, get_program
from lazytensor.codegen.spec import SpecError, check_pass
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import Kernel, Opt, OptOps
from lazytensor.opt.rules import apply_opt
from lazytensor.renderer import Renderer
from lazytensor.renderer.cuda import CUDARenderer
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops, UOp, rewrite_listeners

rng = np.random.default_rng(0)

@pytest.fixture(autouse=True)
def spec_checked() -> Iterator[list[str]]:
  """Every pass run during the test is checked against its spec; yields the names of the passes checked."""
  checked: list[str] = []
  def listen(name: str, before: UOp, after: UOp) -> None:
    check_pass(name, before, after)
    checked.append(name)
  rewrite_listeners.append(listen)
  yield checked
  rewrite_listeners.remove(listen)

def f32(*shape: int) -> Tensor: return Tensor(rng.standard_normal(shape).astype(np.float32)).realize()

def asts(t: Tensor) -> list[UOp]: return [it.ast for it in create_schedule([t.lazydata])[0] if it.ast.op is Ops.SINK]

def elementwise() -> Tensor: return (f32(64, 64) + 1).exp2() * 3
def reduce() -> Tensor: return f32(64, 256).max(1) + f32(64, 256).sum(1)
def matmul() -> Tensor: return f32(64, 64) @ f32(64, 64)
def f16(*shape: int) -> Tensor: return Tensor(rng.standard_normal(shape).astype(np.float16)).realize()
def half_matmul() -> Tensor: return f16(64, 64) @ f16(64, 64)
def conv() -> Tensor: return f32(2, 8, 12, 12).conv2d(f32(16, 8, 3, 3), padding=1)
def gather() -> Tensor: return f32(300, 32)[Tensor(rng.integers(0, 300, 512).astype(np.int32))]
def scatter() -> Tensor:
  emb = nn.Embedding(300, 256)
  emb.weight.requires_grad_()
  (g,) = emb(Tensor(rng.integers(0, 300, 512).astype(np.int32))).sum().gradient(emb.weight)
  return g

GRAPHS: list[Callable[[], Tensor]] = [elementwise, reduce, matmul, half_matmul, conv, gather, scatter]
RENDERERS: dict[str, Callable[[], Renderer]] = {"CPU": lambda: Device["CPU"].renderer,
                                                 "EMU": lambda: Device["EMU"].renderer, "CUDA": CUDARenderer}

@pytest.mark.parametrize("renderer", RENDERERS)
@pytest.mark.parametrize("graph", GRAPHS, ids=lambda g: g.__name__)
def test_every_pass_of_the_heuristics_kernels_meets_the_spec(graph: Callable[[], Tensor], renderer: str,
                                                            spec_checked: list[str]) -> None:
  kernels = asts(graph())
  ops = {u.op for a in kernels for u in a.toposort}
  assert graph is not gather or Ops.GATHER in ops
  assert graph is not scatter or Ops.SCATTER in ops
  for ast in kernels:
    spec_checked.clear()
    get_program(hand_coded_optimizations(Kernel(ast, RENDERERS[renderer]())), "k")
    assert spec_checked == [p.name for p in PIPELINE]

@pytest.mark.parametrize("opts", [[Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 2, 4)],
                                  [Opt(OptOps.GROUPTOP, 2, 16), Opt(OptOps.LOCAL, 0, 8)],
                                  [Opt(OptOps.TC, 0, 0)]], ids=["registers", "shared memory", "tensor cores"])
def test_a_matmul_with_opts_meets_the_spec(opts: list[Opt], spec_checked: list[str]) -> None:
  (ast,) = asts(half_matmul())
  k = Kernel(ast, CUDARenderer())
  for o in opts: apply_opt(k, o)
  spec_checked.clear()  # the schedule's own pass
  source = get_program(k, "k").source
  assert spec_checked == [p.name for p in PIPELINE] and ("mma.sync" in source) == (opts[0].op is OptOps.TC)

def test_kernels_run_by_realize_meet_the_spec(spec_checked: list[str]) -> None:
  with Context(DEV="EMU"):
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="EMU")
    np.testing.assert_allclose(x[Tensor([2, 0], device="EMU")].sum(1).numpy(), [38, 6])
  assert "alu_semantics" in spec_checked

# ---- a pass that leaves a wrong node ----

def sum_kernel() -> Kernel:
  (ast,) = asts(f32(8, 8).sum(1))
  return Kernel(ast, Device["CPU"].renderer)

def test_an_op_that_a_pass_may_not_leave_names_the_pass_and_the_op() -> None:
  k = sum_kernel()
  # a "lower" that leaves the AST as it is: its VIEWs, LOADs through them and REDUCE_AXIS are no loop-level ops
  keep = Pass("lower", lambda ast, ctx: ast)
  with pytest.raises(SpecError, match=r"after pass lower: VIEW dtypes.void arg=ShapeTracker.*: no rule allows VIEW"):
    run_passes((keep,), k.ast, CodegenCtx(k))
  reduce = next(u for u in k.ast.toposort if u.op is Ops.REDUCE_AXIS)
  with pytest.raises(SpecError, match=r"after pass symbolic: REDUCE_AXIS .*: no rule allows REDUCE_AXIS"):
    check_pass("symbolic", k.ast, reduce.replace(src=(UOp.const(dtypes.float32, 1.0),)))

def test_a_node_with_the_wrong_sources_names_the_rule_it_breaks() -> None:
  k = sum_kernel()
  # an index_dtype pass that forgets to give index math a width
  forgetful = LOWER_PASSES[:3] + (Pass("index_dtype", lambda sink, ctx: sink),)
  with pytest.raises(SpecError, match=r"after pass index_dtype: \w+ dtypes.index .* breaks '.*index"):
    run_passes(forgetful, k.ast, CodegenCtx(k))
  # a float index: a LOAD's rule
  sink = run_passes(LOWER_PASSES, k.ast, CodegenCtx(k))
  load = next(u for u in sink.toposort if u.op is Ops.LOAD)
  bad = sink.substitute({load: load.replace(src=(load.src[0], UOp.const(dtypes.float32, 0.0)))})
  with pytest.raises(SpecError, match=r"after pass symbolic: LOAD dtypes.float32 arg=None with sources "
                                      r"\(DEFINE_GLOBAL dtypes.float32.ptr\(\), CONST dtypes.float32\) breaks "
                                      r"'LOAD\(buffer, index, \[bool gate, alt of its dtype\], \[BARRIER\]\)'"):
    check_pass("symbolic", k.ast, bad)

def test_a_float_max_left_after_alu_semantics_fails() -> None:
  k = sum_kernel()
  program = run_passes(PIPELINE, k.ast, CodegenCtx(k))
  x = next(u for u in program.src if u.op is Ops.LOAD and u.dtype == dtypes.float32)
  bad = UOp(Ops.SINK, dtypes.void, program.src + (x.maximum(x),))
  check_pass("linearize", k.ast, bad)  # a float MAX is fine until alu_semantics gives NaN its meaning
  with pytest.raises(SpecError, match="after pass alu_semantics: MAX dtypes.float32 .* no float MAX"):
    check_pass("alu_semantics", k.ast, bad)
