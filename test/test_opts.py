"""Every legal optimization, and chains of them, computes what the unoptimized kernel computes; illegal ones raise."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import avx2_target
from hypothesis import given, settings
from hypothesis import strategies as st

from lazytensor import Context, Device, Tensor
from lazytensor.engine.realize import compile_kernel
from lazytensor.helpers import prod
from lazytensor.opt import heuristic, packing
from lazytensor.opt.heuristic import hand_coded_optimizations
from lazytensor.opt.kernel import AxisKind, Kernel, KernelOptError, Opt, OptOps
from lazytensor.opt.rules import apply_opt
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops

rng = np.random.default_rng(0)

@pytest.fixture(autouse=True)
def _same_inputs_in_any_order() -> None:
  # every test draws its inputs from a generator seeded afresh, so they do not depend on which tests ran before it in
  # this process (under pytest-xdist that changes from run to run)
  global rng
  rng = np.random.default_rng(0)

def _t(*shape: int) -> Tensor: return Tensor(rng.standard_normal(shape, dtype=np.float32)).realize()
def _h(*shape: int) -> Tensor: return Tensor(rng.standard_normal(shape).astype(np.float16)).realize()

def _assert_matmul_close(got: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
  """got is x @ y computed in float32 in some order of summation: within n * eps of sum |x_ik * y_kj| of the exact
  product, the bound of float32 rounding for every order (a value compared with numpy's float32 product and a fixed
  atol fails where a long sum cancels to near 0). A wrong or garbage term is off by about one |x_ik * y_kj|."""
  x64, y64 = x.astype(np.float64), y.astype(np.float64)
  bound = x.shape[-1] * np.finfo(np.float32).eps * (np.abs(x64) @ np.abs(y64))
  err = np.abs(got - x64 @ y64)
  assert (err <= bound).all(), f"{int((err > bound).sum())} elements off by up to {float(np.max(err - bound)):.3g}"

KERNELS = {
  "elementwise": lambda: (_t(16, 24) * 2 + _t(16, 24)).exp(),
  "elementwise_odd": lambda: _t(7, 5) + 1,
  "row_sum": lambda: _t(12, 32).sum(1),
  "full_sum": lambda: _t(64).sum(),
  # every value below -1: a padded position read as 0 would win the max
  "max_odd": lambda: (-1 - _t(6, 19).abs()).max(1),
  "matmul": lambda: _t(16, 8) @ _t(8, 32),
  "matmul_odd": lambda: _t(5, 7) @ _t(7, 3),
  "conv": lambda: _t(2, 3, 6, 6).conv2d(_t(4, 3, 3, 3), padding=1),
  "softmax_last": lambda: _t(8, 16).softmax(1),
  "matmul_half": lambda: _h(32, 16) @ _h(16, 16),
}

def _last_item(name: str, device: str = "CPU"):
  with Context(DEV=device): items, _ = create_schedule([KERNELS[name]().lazydata])
  for it in items[:-1]:
    from lazytensor.engine.realize import run_schedule
    run_schedule([it])
  return items[-1]

def _run(item, device: str, opts: list[Opt]) -> np.ndarray:
  runner = compile_kernel(item.ast, Device[device], opts)
  runner(item.bufs)
  return item.bufs[0].numpy().copy()

def _tolerance(name: str) -> dict[str, float]:
  # a tensor core multiplies exactly where the plain kernel rounds each product to float16 first
  return {"rtol": 2e-2, "atol": 2e-2} if name.endswith("half") else {"rtol": 1e-4, "atol": 1e-4}

def _candidate_opts(k: Kernel) -> list[Opt]:
  opts = []
  for axis in range(k.shape_len):
    for amt in (0, 2, 3, 4, 8, 16):
      for op in (OptOps.UPCAST, OptOps.UNROLL, OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.THREAD,
                 OptOps.UPCASTMID):
        opts.append(Opt(op, axis, amt))
    opts.append(Opt(OptOps.PADTO, axis, 8))
    opts.extend(Opt(OptOps.SWAP, axis, other) for other in range(k.shape_len))
  return opts + [Opt(OptOps.NOLOCALS), Opt(OptOps.TC, 0, 0)]

def _legal(k: Kernel, opt: Opt) -> bool:
  try: apply_opt(k.copy(), opt)
  except KernelOptError: return False
  return True

@pytest.mark.parametrize("device", ["CPU", "EMU"])
@pytest.mark.parametrize("name", list(KERNELS))
def test_every_single_legal_opt(name: str, device: str) -> None:
  item = _last_item(name, device)
  ref = _run(item, device, [])
  k = Kernel(item.ast, Device[device].renderer)
  legal = [o for o in _candidate_opts(k) if _legal(k, o)]
  assert legal, "every kernel has some legal optimization"
  for opt in legal:
    np.testing.assert_allclose(_run(item, device, [opt]), ref, err_msg=str(opt), **_tolerance(name))

@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(list(KERNELS)), picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=4),
       device=st.sampled_from(["CPU", "EMU"]))
def test_random_opt_chains(name: str, picks: list[int], device: str) -> None:
  item = _last_item(name, device)
  ref = _run(item, device, [])
  k = Kernel(item.ast, Device[device].renderer)
  chain: list[Opt] = []
  for p in picks:
    legal = [o for o in _candidate_opts(k) if _legal(k, o)]
    if not legal: break
    chain.append(legal[p % len(legal)])
    apply_opt(k, chain[-1])
  np.testing.assert_allclose(_run(item, device, chain), ref, err_msg=str(chain), **_tolerance(name))

@pytest.mark.parametrize("name,opt,why", [
  ("row_sum", Opt(OptOps.UPCAST, 1, 4), "REDUCE"),            # upcast of a reduce axis
  ("elementwise", Opt(OptOps.UNROLL, 0, 4), "GLOBAL"),        # unroll of a global axis
  ("elementwise", Opt(OptOps.LOCAL, 0, 4), "local"),          # LOCAL on the CPU
  ("matmul_odd", Opt(OptOps.UPCAST, 0, 2), "divide"),         # 2 does not divide 5 without PADTO
  ("matmul_half", Opt(OptOps.TC, 0, 0), "tensor cores"),      # TC on the CPU
  ("row_sum", Opt(OptOps.GROUP, 1, 4), "group"),              # GROUP needs shared memory
  ("elementwise", Opt(OptOps.UPCAST, 9, 2), "out of range"),  # no such axis
  ("elementwise", Opt(OptOps.THREAD, 0, 64), "THREADS"),      # more than 8 shares per thread allowed
  ("row_sum", Opt(OptOps.UPCASTMID, 0, 4), "shared memory"),  # UPCASTMID needs a GROUP, which needs shared memory
  ("row_sum", Opt(OptOps.PADTO, 0, 0), "whole axis"),         # PADTO's amount is a multiple, never the whole axis
])
def test_illegal_opts_raise_and_leave_kernel_unchanged(name: str, opt: Opt, why: str) -> None:
  item = _last_item(name)
  k = Kernel(item.ast, Device["CPU"].renderer)
  before = (k.full_shape, list(k.kinds), list(k.sts), list(k.applied_opts))
  with Context(THREADS=2), pytest.raises(KernelOptError, match=why): apply_opt(k, opt)
  assert (k.full_shape, list(k.kinds), list(k.sts), list(k.applied_opts)) == before

def test_swap_after_tc_is_illegal() -> None:
  # found by test_random_opt_chains: a SWAP after TC reordered the axes the tensor core's fragments are laid out on
  k = Kernel(_last_item("matmul_half", "EMU").ast, Device["EMU"].renderer)
  apply_opt(k, Opt(OptOps.TC, 0, 0))
  with pytest.raises(KernelOptError, match="SWAP cannot follow TC"): apply_opt(k, Opt(OptOps.SWAP, 0, 1))

def test_padto_lets_an_odd_axis_upcast() -> None:
  item = _last_item("elementwise_odd")
  ref = _run(item, "CPU", [])
  k = Kernel(item.ast, Device["CPU"].renderer)
  axis = k.shape_len - 1
  with pytest.raises(KernelOptError): apply_opt(k.copy(), Opt(OptOps.UPCAST, axis, 8))
  opts = [Opt(OptOps.PADTO, axis, 8), Opt(OptOps.UPCAST, axis, 8)]
  np.testing.assert_allclose(_run(item, "CPU", opts), ref, rtol=1e-6)

@pytest.mark.parametrize("device", ["CPU", "EMU"])
def test_padded_reduce_axis_stays_masked_once_split(device: str) -> None:
  # the positions PADTO adds to a reduce axis add the reduce's identity, also after the axis is unrolled or padded
  # again (they were tracked by axis number, which a split shifts: a max of negatives gave 0)
  item = _last_item("max_odd", device)
  ref = _run(item, device, [])
  pad, unroll = Opt(OptOps.PADTO, 1, 8), Opt(OptOps.UNROLL, 1, 8)
  pad4, unroll4 = Opt(OptOps.PADTO, 1, 4), Opt(OptOps.UNROLL, 1, 4)
  for chain in ([pad, unroll], [pad, Opt(OptOps.UNROLL, 1, 0)], [pad4, unroll4, pad]):
    np.testing.assert_array_equal(_run(item, device, chain), ref, err_msg=str(chain))

@pytest.mark.parametrize("device", ["CPU", "EMU"])
def test_padding_a_reduce_and_an_output_axis(device: str) -> None:
  # each padding's mask keeps the kernel's shape when the other kind of axis is padded after it (a found example of
  # test_random_opt_chains: the reduce's mask stayed 5 rows long)
  item = _last_item("matmul_odd", device)
  ref = _run(item, device, [])
  for chain in ([Opt(OptOps.PADTO, 2, 8), Opt(OptOps.PADTO, 0, 8)], [Opt(OptOps.PADTO, 0, 8), Opt(OptOps.PADTO, 2, 8)],
                [Opt(OptOps.PADTO, 2, 8), Opt(OptOps.PADTO, 0, 8), Opt(OptOps.UPCAST, 0, 8)],
                [Opt(OptOps.PADTO, 2, 8), Opt(OptOps.PADTO, 0, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 2, 4)]):
    np.testing.assert_allclose(_run(item, device, chain), ref, rtol=1e-5, atol=1e-5, err_msg=str(chain))

@pytest.mark.parametrize("device", ["CPU", "EMU"])
def test_padded_output_axis_reads_on_where_in_bounds(device: str) -> None:
  # PADTO on an output axis: its loads read on past their views at the padded positions (whose results are never
  # stored), unmasked where the address stays in the buffer (a slice of a wider matrix) or in the bytes the device keeps
  # readable past its end (the CPU's, not EMU's: the last row of a 20x30 B reads 2 floats on), masked where it could go
  # further (2 rows of 200 past A's 6). EMU raises on any access out of bounds.
  from lazytensor.codegen.lowerer import lower_kernel
  with Context(DEV=device):
    a, wide, narrow, long_rows, tall = _t(6, 20), _t(20, 32), _t(20, 30), _t(6, 200), _t(200, 32)
  cases = [(a, wide[:, :30], 30, 640, False), (a, narrow, 30, 600, device == "EMU"), (long_rows, tall, 6, 1200, True)]
  for x, y, padded, size, gated in cases:
    with Context(DEV=device): item = create_schedule([(x @ y).lazydata])[0][-1]
    k = Kernel(item.ast, Device[device].renderer)
    axis = k.full_shape.index(padded)
    opts = [Opt(OptOps.PADTO, axis, 8), Opt(OptOps.UPCAST, axis, 8)]
    for o in opts: apply_opt(k, o)
    loads = [u for u in lower_kernel(k).toposort if u.op is Ops.LOAD and getattr(u.src[0].dtype, "size", -1) == size]
    assert loads and any(len(u.src) > 2 for u in loads) == gated, loads
    _assert_matmul_close(_run(item, device, opts).reshape(x.shape[0], y.shape[1]), x.numpy(), y.numpy())

def test_conv_weight_gradient_tiles_output_and_input_channels() -> None:
  # the weights' gradient is a reduce of dot products along the rows (both operands contiguous there): its tile takes
  # output channels (the input is broadcast along them) and input channels (the gradient is), not the 3 taps of the
  # kernel that no tile amount divides (one output at a time: 8 GFLOP/s; 4x2: 30-40)
  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  x, w = _t(2, 8, 16, 16).requires_grad_(), _t(16, 8, 3, 3).requires_grad_()
  x.conv2d(w, padding=1).relu().sum().backward()
  assert w.grad is not None
  from lazytensor.engine.realize import run_schedule
  *before, item = create_schedule([w.grad.lazydata])[0]
  run_schedule(before)
  k = hand_coded_optimizations(Kernel(item.ast, LLVMRenderer(cpu_target("x86-64-v3"))))
  assert len(k.axes_of(AxisKind.UPCAST)) == 2 and OptOps.UNROLL in [o.op for o in k.applied_opts], k.applied_opts
  np.testing.assert_allclose(_run(item, "CPU", k.applied_opts).reshape(w.shape), w.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_heuristic_matmul_tiles_and_threads() -> None:
  item = _last_item("matmul")
  with Context(THREADS=2):
    k = hand_coded_optimizations(Kernel(item.ast, Device["CPU"].renderer))
  ops = [o.op for o in k.applied_opts]
  assert ops.count(OptOps.UPCAST) == 2, k.applied_opts
  assert AxisKind.UPCAST in k.kinds and k.upcast_size() >= 64

def test_heuristic_reduce_unrolls_contiguous_axis() -> None:
  item = _last_item("row_sum")
  k = hand_coded_optimizations(Kernel(item.ast, Device["CPU"].renderer))
  assert [o.op for o in k.applied_opts][:1] == [OptOps.UNROLL]
  assert k.full_shape[k.axes_of(AxisKind.UNROLL)[0]] == Device["CPU"].renderer.target.vector_floats  # one vector

def test_unrolled_reduce_of_a_constant_counts_every_lane() -> None:
  # the constant's reduce shares the kernel with a vectorized unrolled one: each lane adds it, not each iteration
  y = Tensor(np.arange(12, dtype=np.float32))
  assert (y.sum() / Tensor.ones(12).sum()).item() == 5.5
  assert (Tensor.ones(12).sum() + y.sum()).item() == 78.0

def test_thread_really_runs_on_several_threads() -> None:
  import threading
  item = _last_item("elementwise")
  ref = _run(item, "CPU", [])
  with Context(THREADS=2): runner = compile_kernel(item.ast, Device["CPU"], [Opt(OptOps.THREAD, 0, 2)])
  assert runner.launch["core_count"] == 2
  runner(item.bufs)
  np.testing.assert_allclose(item.bufs[0].numpy(), ref, rtol=1e-6)
  assert any(t.name.startswith("lazytensor-cpu") and t.is_alive() for t in threading.enumerate())

def test_tensor_core_on_emu_matches_and_excludes_other_opts() -> None:
  item = _last_item("matmul_half", "EMU")
  ref = _run(item, "EMU", [])
  np.testing.assert_allclose(_run(item, "EMU", [Opt(OptOps.TC, 0, 0)]), ref, rtol=1e-2, atol=1e-2)
  k = Kernel(item.ast, Device["EMU"].renderer)
  apply_opt(k, Opt(OptOps.TC, 0, 0))
  assert k.tensor_core is not None
  for later in (Opt(OptOps.GROUP, k.tensor_core.axis_k, 2), Opt(OptOps.PADTO, k.tensor_core.axis_m, 32)):
    with pytest.raises(KernelOptError, match="follow TC"): apply_opt(k, later)
  # the instruction's own axes are the layout of its fragments: no split of them (its tiles split: test_tc_staged.py)
  m_in, n_in, k_in = k.tensor_core.inner
  for later in (Opt(OptOps.UPCAST, m_in, 2), Opt(OptOps.LOCAL, n_in, 2), Opt(OptOps.UNROLL, k_in, 2)):
    with pytest.raises(KernelOptError, match="the tensor core's own"): apply_opt(k, later)

@pytest.mark.parametrize("x_shape,w_shape,padding", [((2, 16, 8, 16), (32, 16, 3, 3), 1),  # A: input, M: width
                                                     ((1, 32, 10, 10), (16, 32, 3, 3), 0),  # A: weights, M: channels
                                                     ((2, 16, 4, 8), (8, 16, 1, 1), 0)])
def test_half_conv_on_tensor_cores(x_shape: tuple[int, ...], w_shape: tuple[int, ...], padding: int) -> None:
  # K is the input channels, the window a loop around the mma; the heuristics choose TC for a half conv that fits
  with Context(DEV="EMU"):
    x, w = _h(*x_shape), _h(*w_shape)
    items, _ = create_schedule([x.conv2d(w, padding=padding).lazydata])
  (item,) = items
  k = hand_coded_optimizations(Kernel(item.ast, Device["EMU"].renderer))
  assert k.applied_opts[0] == Opt(OptOps.TC, 0, 0) and k.tensor_core is not None
  # its K tiles (maybe split into K-blocks and the steps of one) and the instruction's own K
  k_axes = (k.tensor_core.axis_k, k.tensor_core.inner[2], *k.axes_of(AxisKind.UNROLL))
  assert prod(k.full_shape[a] for a in k_axes) == w_shape[1]
  ref = _run(item, "EMU", [])
  np.testing.assert_allclose(_run(item, "EMU", k.applied_opts), ref, rtol=2e-2, atol=3e-2)

def test_tensor_core_needs_divisible_axes() -> None:
  # 12x12 outputs: neither 16 nor 8 divides a spatial axis, so there is no N (nor M) for the input's side
  with Context(DEV="EMU"): items, _ = create_schedule([_h(2, 16, 12, 12).conv2d(_h(32, 16, 3, 3), padding=1).lazydata])
  with pytest.raises(KernelOptError, match=r"no output axes M, N .* divisible by \(16, 8, 16\)"):
    apply_opt(Kernel(items[-1].ast, Device["EMU"].renderer), Opt(OptOps.TC, 0, 0))

def test_tf32_tensor_core_only_when_allowed(monkeypatch) -> None:
  # a float32 matmul runs on the m16n8k8 tf32 tensor core only where the renderer allows tf32 (torch's allow_tf32)
  item = _last_item("matmul", "EMU")
  emu = Device["EMU"].renderer
  with pytest.raises(KernelOptError, match="one of 2 tensor cores"): apply_opt(Kernel(item.ast, emu), Opt(OptOps.TC, 2))
  monkeypatch.setattr(emu, "tf32", True)
  assert [tc.name for tc in emu.tensor_cores] == ["m16n8k16_f16_f32", "m16n8k16_bf16_f32", "m16n8k8_tf32_f32"]
  opts = hand_coded_optimizations(Kernel(item.ast, emu)).applied_opts
  assert opts[0] == Opt(OptOps.TC, 2, 0)
  got = _run(item, "EMU", opts).reshape(16, 32)
  a, b = item.bufs[1].numpy().reshape(16, 8), item.bufs[2].numpy().reshape(8, 32)
  # the products of inputs rounded to 10 mantissa bits (cvt.rna.tf32.f32: to nearest, ties away from zero), summed in
  # float32; how far that lands from the float32 product depends on the draw, so the check is against the model
  tf32 = lambda v: ((v.view(np.uint32) + 0x1000) & 0xFFFFE000).view(np.float32)
  np.testing.assert_allclose(got, tf32(a) @ tf32(b), rtol=1e-5, atol=1e-5)
  assert not np.array_equal(got, _run(item, "EMU", []).reshape(16, 32))

@pytest.mark.parametrize("name", ["matmul", "elementwise", "row_sum"])
def test_tensor_core_needs_a_half_matmul(name: str) -> None:
  k = Kernel(_last_item(name, "EMU").ast, Device["EMU"].renderer)
  with pytest.raises(KernelOptError, match="multiply-accumulate"): apply_opt(k, Opt(OptOps.TC, 0, 0))

def test_group_then_tc_is_illegal() -> None:
  k = Kernel(_last_item("matmul_half", "EMU").ast, Device["EMU"].renderer)
  apply_opt(k, Opt(OptOps.GROUP, k.axes_of(AxisKind.REDUCE)[0], 4))
  with pytest.raises(KernelOptError, match="first"): apply_opt(k, Opt(OptOps.TC, 0, 0))

def test_heuristic_matmul_with_transposed_b_uses_dot_products() -> None:
  # x @ W.T (as Linear computes it): both operands are contiguous along K, so the vectors run along K
  x, w = _t(64, 128), _t(32, 128)
  item = create_schedule([(x @ w.T).lazydata])[0][-1]
  k = hand_coded_optimizations(Kernel(item.ast, Device["CPU"].renderer))
  floats = Device["CPU"].renderer.target.vector_floats
  assert any(o.op is OptOps.UNROLL and o.amt == floats for o in k.applied_opts), k.applied_opts
  assert sum(o.op is OptOps.UPCAST for o in k.applied_opts) == 2, k.applied_opts
  np.testing.assert_allclose(_run(item, "CPU", k.applied_opts).reshape(64, 32), x.numpy() @ w.numpy().T, rtol=1e-4,
                             atol=1e-4)

@pytest.mark.parametrize("shape, perm, dtype, line", [((64, 48), (1, 0), np.float32, 16), ((4, 6, 32, 48), (0, 3, 1, 2),
                                                       np.float32, 16), ((128, 96), (1, 0), np.uint8, 32)])
def test_heuristic_transpose_reads_whole_cache_lines(shape: tuple[int, ...], perm: tuple[int, ...], dtype: type,
                                                     line: int) -> None:
  # a cache line (64 bytes, or the largest power of two dividing the axis) of the input's contiguous axis by 4 of the
  # output's; vectors along the output alone would read the input one element, and one line, at a time
  x = Tensor(np.arange(np.prod(shape)).astype(dtype).reshape(shape)).realize()
  item = create_schedule([x.permute(*perm).contiguous().lazydata])[0][-1]
  k = hand_coded_optimizations(Kernel(item.ast, Device["CPU"].renderer))
  ups = [o for o in k.applied_opts if o.op is OptOps.UPCAST]
  assert [o.amt for o in ups] == [line, 4], k.applied_opts
  load = next(i for i, n in enumerate(k.view_nodes) if n.op is Ops.LOAD)
  assert heuristic._stride(k, load, k.axes_of(AxisKind.UPCAST)[0]) == 1, "the first upcast walks the input's lines"
  np.testing.assert_array_equal(_run(item, "CPU", k.applied_opts).reshape(x.permute(*perm).shape),
                                x.numpy().transpose(perm))

def test_transpose_that_computes_tiles_fewer_rows() -> None:
  # the gelu of a Linear's output fused into the copy that packs the next Linear's A in row panels: every value the
  # gelu computes is held for each lane of the tile, so it takes 2 of the output's rows, not a plain copy's 4
  x, w = _t(128, 768), _t(256, 768)
  items = create_schedule([x.gelu().linear(w.T).lazydata])[0]
  pack = next(it for it in items if any(u.op is Ops.LOAD for u in it.ast.toposort) and not
              any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort) and any(u.op is Ops.EXP2 for u in it.ast.toposort))
  k = hand_coded_optimizations(Kernel(pack.ast, Device["CPU"].renderer))
  assert [o.amt for o in k.applied_opts if o.op is OptOps.UPCAST][1:] == [2], k.applied_opts
  np.testing.assert_allclose(x.gelu().linear(w.T).numpy(), (x.gelu().numpy() @ w.numpy().T), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("target, vec", [("x86-64-v3", 8), ("x86-64-v4", 16)])
def test_row_reduce_keeps_several_accumulators(target: str, vec: int) -> None:
  # a row max vectorized along the row, then unrolled by 4 vectors: 4 independent accumulators (one alone waits out the
  # compare-or-select latency at every step); a NaN in any of them still reaches the result
  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  a = np.random.default_rng(3).standard_normal((8, 1024)).astype(np.float32)
  a[2, 7] = a[5, 1000] = np.nan
  item = create_schedule([Tensor(a).max(1).lazydata])[0][-1]
  k = hand_coded_optimizations(Kernel(item.ast, LLVMRenderer(cpu_target(target))))
  assert k.applied_opts == [Opt(OptOps.UNROLL, 1, vec), Opt(OptOps.UNROLL, 1, 4)], k.applied_opts
  got = _run(item, "CPU", k.applied_opts).reshape(8)
  np.testing.assert_array_equal(got, a.max(1))

def test_heuristic_sum_over_rows_vectorizes_across_outputs() -> None:
  x = _t(64, 256)
  item = create_schedule([x.sum(0).lazydata])[0][-1]
  k = hand_coded_optimizations(Kernel(item.ast, Device["CPU"].renderer))
  assert [o.op for o in k.applied_opts][:1] == [OptOps.UPCAST], k.applied_opts
  np.testing.assert_allclose(_run(item, "CPU", k.applied_opts), x.numpy().sum(0), rtol=1e-4, atol=1e-4)

def test_reduce_takes_a_short_axis_of_shared_reads_whole() -> None:
  # sum(x) and sum(x * x) as one reduce along a new axis of 2 (nn.BatchNormGrad's two sums): both outputs of a row in
  # one pass over it, each value loaded once (as a loop, x was read once per output)
  x = _t(64, 256)
  second = Tensor.arange(2).reshape(2, 1, 1) == 1
  item = create_schedule([(x * second.where(x, 1)).sum(2).lazydata])[0][-1]
  k = hand_coded_optimizations(Kernel(item.ast, Device["CPU"].renderer))
  assert Opt(OptOps.UPCAST, 0, 0) in k.applied_opts, k.applied_opts
  xn = x.numpy()
  np.testing.assert_allclose(_run(item, "CPU", k.applied_opts).reshape(2, 64), np.stack([xn.sum(1), (xn * xn).sum(1)]),
                             rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("target, rows", [("x86-64-v4", 16), ("x86-64-v3", 6)])
def test_odd_matmul_pads_its_columns_to_vectors(target: str, rows: int) -> None:
  # 197 columns (a ViT's tokens): no vector divides them; padded to 208, 16 lanes (224 for 32 would add more than
  # 1/8), the tile is vectors instead of scalar code. 197 rows are padded to rows of the tile (one row at a time
  # reloads B for each). 20 columns would need 60% more: left alone.
  pad, vectors = Opt(OptOps.PADTO, 2, 16), Opt(OptOps.UPCAST, 2, 16)
  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  a, b = _t(4, 197, 64), _t(4, 64, 197)
  item = create_schedule([(a @ b).lazydata])[0][-1]
  k = hand_coded_optimizations(Kernel(item.ast, LLVMRenderer(cpu_target(target))))
  assert pad in k.applied_opts and vectors in k.applied_opts, k.applied_opts
  assert Opt(OptOps.PADTO, 1, rows) in k.applied_opts and Opt(OptOps.UPCAST, 1, rows) in k.applied_opts
  np.testing.assert_allclose(_run(item, "CPU", k.applied_opts).reshape(4, 197, 197), a.numpy() @ b.numpy(), rtol=1e-4,
                             atol=1e-4)
  narrow = create_schedule([(_t(64, 64) @ _t(64, 20)).lazydata])[0][-1]
  k = hand_coded_optimizations(Kernel(narrow.ast, LLVMRenderer(cpu_target(target))))
  assert all(o.op is not OptOps.PADTO for o in k.applied_opts), k.applied_opts

@pytest.mark.parametrize("target, rows", [("x86-64-v4", 7), ("x86-64-v3", 4)])
def test_large_conv_packs_its_weight_and_vectorizes_over_output_channels(monkeypatch, target: str, rows: int) -> None:
  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  x, w = _t(4, 32, 28, 28), _t(32, 32, 3, 3)
  items = create_schedule([x.conv2d(w, padding=1).lazydata])[0]
  assert len(items) == 2  # the weight in blocks of 16 output channels, then the convolution
  k = hand_coded_optimizations(Kernel(items[-1].ast, LLVMRenderer(cpu_target(target))))
  # 16 output channels per tile row; rows along the output width: 7 (not 8: see heuristic._row_amount) where 14
  # accumulators fit (AVX-512), else 4 of 2 <8 x float> (AVX2's 12)
  assert k.applied_opts[:2] == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 3, rows)], k.applied_opts
  # a module constant is no knob: the schedule cache would give the schedule made before the patch
  with monkeypatch.context() as m, Context(SCHEDULE_CACHE=0):
    m.setattr(packing, "CHANNEL_MIN_WORK", 1 << 62)
    with Context(SCHEDULE_CACHE=0): assert len(create_schedule([x.conv2d(w, padding=1).lazydata])[0]) == 1
  torch = pytest.importorskip("torch")
  want = torch.nn.functional.conv2d(torch.from_numpy(x.numpy()), torch.from_numpy(w.numpy()), padding=1).numpy()
  np.testing.assert_allclose(x.conv2d(w, padding=1).numpy(), want, rtol=1e-4, atol=1e-4)

def _packed_conv_schedule(monkeypatch, x: Tensor, w: Tensor, **kw) -> tuple[list, list]:
  """The schedules of a conv's output and of its weights' gradient, with every conv large enough to pack."""
  monkeypatch.setattr(packing, "CHANNEL_MIN_WORK", 0)
  with Context(SCHEDULE_CACHE=0):
    out = create_schedule([x.conv2d(w, **kw).lazydata])[0]
    x.conv2d(w, **kw).relu().sum().backward()
    assert w.grad is not None
    return out, create_schedule([w.grad.lazydata])[0]

@pytest.mark.parametrize("target, tile", [("x86-64-v3", [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 3, 2),
                                                          Opt(OptOps.UPCAST, 0, 2)]),
                                          ("x86-64-v4", [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 3, 7),
                                                         Opt(OptOps.UPCAST, 1, 2)])])
def test_narrow_conv_takes_rows_from_two_images(monkeypatch, target: str, tile: list[Opt]) -> None:
  # 14-wide rows give 2 rows of the 6 that AVX2's 12 accumulators allow (16 channels = 2 vectors): a second axis of
  # rows, the batch (no window overlaps it, no padding's mask varies along it); AVX-512's 7 rows of one vector take a
  # second vector of channels instead (heuristic._second_vector)
  from lazytensor.engine.realize import run_schedule
  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  x, w = _t(4, 32, 14, 14).requires_grad_(), _t(32, 32, 3, 3).requires_grad_()
  items, _ = _packed_conv_schedule(monkeypatch, x, w, padding=1)
  k = hand_coded_optimizations(Kernel(items[-1].ast, LLVMRenderer(cpu_target(target))))
  upcasts = [o for o in k.applied_opts if o.op is OptOps.UPCAST]
  assert upcasts == tile and k.applied_opts[:len(tile)] == tile, k.applied_opts
  torch = pytest.importorskip("torch")
  run_schedule(items[:-1])
  want = torch.nn.functional.conv2d(torch.from_numpy(x.numpy()), torch.from_numpy(w.numpy()), padding=1).numpy()
  got = _run(items[-1], "CPU", tile).reshape(want.shape)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("target, tile", [("x86-64-v3", [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 16)]),
                                          ("x86-64-v4", [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 16)])])
def test_conv_weight_gradient_reads_its_output_gradient_in_channel_blocks(monkeypatch, target: str,
                                                                          tile: list[Opt]) -> None:
  # the weights' gradient ends in the kernel's 3 taps, too narrow for vectors: the output's gradient is copied in
  # blocks of 16 output channels and the tile is vectors of them by rows of input channels (not of the 3 taps), with
  # no dot products along the 14-wide rows (padded to 16, masked)
  from lazytensor.codegen.lowerer import lower_kernel
  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  x, w = _t(4, 32, 14, 14).requires_grad_(), _t(32, 32, 3, 3).requires_grad_()
  _, items = _packed_conv_schedule(monkeypatch, x, w, padding=1)
  monkeypatch.setattr(packing, "CHANNEL_MIN_WORK", 1 << 62)
  with Context(SCHEDULE_CACHE=0):
    w.grad = None
    x.conv2d(w, padding=1).relu().sum().backward()
    assert w.grad is not None
    # two copies in blocks: the forward's weights, and the output's gradient that the weights' gradient reads
    assert len(create_schedule([w.grad.lazydata])[0]) == len(items) - 2
  renderer = LLVMRenderer(cpu_target(target))
  k = hand_coded_optimizations(Kernel(items[-1].ast, renderer))
  assert k.applied_opts[:2] == tile and OptOps.UNROLL not in [o.op for o in k.applied_opts], k.applied_opts
  # the vectors run along the 16 channels (a lane axis that vectors divide), not along the 3 taps beside them
  vec = Kernel(items[-1].ast, renderer)
  for o in [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 3, 3)]: apply_opt(vec, o)
  assert any(u.op is Ops.LOAD and u.dtype.count > 1 for u in lower_kernel(vec).toposort)
  from lazytensor.engine.realize import run_schedule
  run_schedule(items[:-1])
  want = w.grad.numpy()
  for opts in (tile, vec.applied_opts):
    np.testing.assert_allclose(_run(items[-1], "CPU", opts).reshape(w.shape), want, rtol=1e-4, atol=1e-3)

def test_strided_conv_input_gradient_reads_its_weights_in_channel_blocks(monkeypatch) -> None:
  # a stride-2 3x3 conv's input gradient is one conv per parity of the input's pixels (gradient._phases), each with
  # the taps that reach it: every other tap, (2, 2) of them at strides (6, 2) in a 3x3 kernel. Those read each weight
  # once (their span is 9, the input channel's stride), so they are packed in blocks of 16 input channels like any
  # conv's: with 7-wide rows no vector divides, unpacked they got no tile at all (ResNet18's 512 -> 256 at 7x7: 150 ms
  # of a 1.2 s training step at 2.7 GFLOP/s)
  torch = pytest.importorskip("torch")
  xn, wn = rng.standard_normal((2, 32, 14, 14), dtype=np.float32), rng.standard_normal((32, 32, 3, 3), dtype=np.float32)
  gn = rng.standard_normal((2, 32, 7, 7), dtype=np.float32)
  monkeypatch.setattr(packing, "CHANNEL_MIN_WORK", 0)
  with Context(SCHEDULE_CACHE=0, CPU_TARGET="x86-64-v4"):
    x = Tensor(xn, requires_grad=True)
    x.conv2d(Tensor(wn), stride=2, padding=1).backward(Tensor(gn))
    assert x.grad is not None
    items = create_schedule([x.grad.lazydata])[0]
    convs = [Kernel(it.ast, Device["CPU"].renderer) for it in items
             if any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort)]
    assert len(convs) == 4, [k.full_shape for k in convs]
    for k in convs:  # vectors along the input channels (a single tap's parity is a 1x1 conv: 32 of them)
      opts = hand_coded_optimizations(k).applied_opts
      assert opts[:1] in ([Opt(OptOps.UPCAST, 1, 16)], [Opt(OptOps.UPCAST, 1, 32)]), (k.full_shape, opts)
    got = x.grad.numpy()
  tx = torch.from_numpy(xn).requires_grad_()
  torch.nn.functional.conv2d(tx, torch.from_numpy(wn), stride=2, padding=1).backward(torch.from_numpy(gn))
  assert tx.grad is not None
  np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_conv_input_gradient_keeps_its_tile_under_a_relu_mask(monkeypatch) -> None:
  # the relu's mask on a conv's input gradient (ResNet's conv -> batchnorm -> relu -> conv, backward) fused after the
  # reduce is read along the width, where the tile's vectors run along the channels: taken for an operand of the tile,
  # it left the kernel without one (ResNet18's 512-channel 7x7 input gradients: 13 ms -> 2.8 s each)
  h, w, g = _t(2, 64, 7, 7), _t(64, 64, 3, 3), _t(2, 64, 7, 7)
  monkeypatch.setattr(packing, "CHANNEL_MIN_WORK", 0)
  def upcasts(relu: bool) -> list[Opt]:
    x = Tensor(h.numpy(), requires_grad=True)
    dx = ((x.relu() if relu else x).conv2d(w, padding=1) * g).sum().gradient(x)[0]
    with Context(SCHEDULE_CACHE=0, CPU_TARGET="x86-64-v4"): items = create_schedule([dx.lazydata])[0]
    conv = [it for it in items if any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort)][-1]
    k = hand_coded_optimizations(Kernel(conv.ast, Device["CPU"].renderer))
    return [o for o in k.applied_opts if o.op is OptOps.UPCAST]
  plain = upcasts(False)
  assert plain and upcasts(True) == plain

@pytest.mark.parametrize("batch", [1, 8])
def test_1x1_conv_tiles_two_vectors_of_output_channels_by_7_pixels(monkeypatch, batch: int) -> None:
  # ResNet50's 1024x14x14 -> 256: the 196 pixels would need padding to 208 for vectors, the 256 channels (weights in
  # blocks of 16) need none: vectors along the channels, 7 pixels broadcast (odd: see heuristic._row_amount), and a
  # second vector of channels for each broadcast (9 loads per 14 FMAs; 16 x 16 pixels took 17 per 16)
  torch = pytest.importorskip("torch")
  x, w = _t(batch, 1024, 14, 14), _t(256, 1024, 1, 1)
  with Context(SCHEDULE_CACHE=0, CPU_TARGET="x86-64-v4"):
    items = create_schedule([x.conv2d(w).lazydata])[0]
    k = hand_coded_optimizations(Kernel(items[-1].ast, Device["CPU"].renderer))
    c = 0 if batch == 1 else 1  # the channels' axis (a batch of 1 has none)
    assert k.applied_opts[:3] == [Opt(OptOps.UPCAST, c, 16), Opt(OptOps.UPCAST, c + 1, 7), Opt(OptOps.UPCAST, c, 2)], \
      (k.full_shape, k.applied_opts)
    want = torch.nn.functional.conv2d(torch.from_numpy(x.numpy()), torch.from_numpy(w.numpy())).numpy()
    np.testing.assert_allclose(x.conv2d(w).numpy(), want, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("cin, cout, outside", [(1024, 256, True), (512, 256, False), (256, 1024, False)])
def test_1x1_conv_loops_pixels_outside_channel_blocks_where_an_image_outgrows_l2(cin: int, cout: int,
                                                                                 outside: bool) -> None:
  # ResNet50's 1024x14x14 -> 256 at batch 8 (AVX-512, 2 MB of L2): the 1 MB weight stays in L2 in either order, but
  # an 800 KB image, read in place, would not stay there across the 8 blocks of 32 output channels that sweep it: the
  # blocks of 7 pixels loop outside the channels' (heuristic._rows_outside_panels). A 400 or 200 KB image stays.
  import dataclasses

  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  x, w = _t(8, cin, 14, 14), _t(cout, cin, 1, 1)
  with Context(SCHEDULE_CACHE=0, CPU_TARGET="x86-64-v4"): items = create_schedule([x.conv2d(w).lazydata])[0]
  target = dataclasses.replace(cpu_target("x86-64-v4"), l2_bytes=2 << 20)
  with Context(THREADS=1): k = hand_coded_optimizations(Kernel(items[-1].ast, LLVMRenderer(target)))
  tile = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 2, 7), Opt(OptOps.UPCAST, 1, 2)]
  assert k.applied_opts == tile + ([Opt(OptOps.SWAP, 1, 2)] if outside else []), k.applied_opts
  if outside:
    from lazytensor.engine.realize import run_schedule
    run_schedule(items[:-1])
    want = np.einsum("oc,bchw->bohw", w.numpy().reshape(cout, cin), x.numpy())
    np.testing.assert_allclose(_run(items[-1], "CPU", k.applied_opts).reshape(want.shape), want, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v4"])
def test_strided_1x1_conv_reads_a_dense_copy_of_its_input(monkeypatch, target: str) -> None:
  # a stride-2 1x1 conv reads every other pixel of every other row: no axis of x is contiguous, so no vector load of it,
  # and a tile of pixels by vectors of output channels streamed all of x once per block of channels. A copy of the
  # pixels it reads (batch, channels, rows, columns, dense) makes it the matmul it is: vectors along the pixels (rows
  # and columns merged). A stride-1 conv reads x as it is.
  torch = pytest.importorskip("torch")
  x, w = _t(2, 32, 28, 28), _t(64, 32, 1, 1)
  monkeypatch.setattr(packing, "CHANNEL_MIN_WORK", 0)
  with Context(SCHEDULE_CACHE=0, CPU_TARGET=target):
    items = create_schedule([x.conv2d(w, stride=2).lazydata])[0]
    assert 2 * 32 * 14 * 14 in [it.bufs[0].size for it in items[:-1]], [it.bufs[0].size for it in items]
    k = hand_coded_optimizations(Kernel(items[-1].ast, Device["CPU"].renderer))
    # AVX-512: vectors of 16 output channels (the pixels would need padding), two of them by 7 pixels
    # (heuristic._second_vector); AVX2: vectors along the pixels
    tile = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 2, 7), Opt(OptOps.UPCAST, 1, 2)]
    assert (k.applied_opts[:3] == tile) if target == "x86-64-v4" else Opt(OptOps.UPCAST, 2, 16) in k.applied_opts, \
      (k.full_shape, k.applied_opts)
    assert len(create_schedule([x.conv2d(w).lazydata])[0]) == 1
    for xs, stride in [((2, 32, 28, 28), 2), ((1, 32, 9, 11), 2), ((3, 32, 10, 13), (3, 2))]:
      xi = _t(*xs)
      want = torch.nn.functional.conv2d(torch.from_numpy(xi.numpy()), torch.from_numpy(w.numpy()), stride=stride)
      np.testing.assert_allclose(xi.conv2d(w, stride=stride).numpy(), want.numpy(), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("op, xs, ws, kw", [
  ("conv2d", (2, 16, 14, 14), (32, 16, 3, 3), {"padding": 1}),
  ("conv2d", (3, 16, 9, 11), (16, 16, 3, 3), {"padding": 1, "stride": 2}),
  ("conv2d", (2, 32, 10, 10), (32, 16, 3, 3), {"padding": 2, "dilation": 2, "groups": 2}),
  ("conv2d", (2, 16, 7, 13), (16, 16, 3, 1), {"padding": (1, 0)}),
  ("conv2d", (1, 16, 12, 12), (48, 16, 5, 5), {"stride": 3, "padding": 2}),
  ("conv2d", (5, 16, 6, 6), (16, 16, 2, 2), {}),
  ("conv2d", (2, 16, 9, 11), (32, 16, 1, 1), {"stride": 2}),
  ("conv2d", (3, 16, 7, 10), (16, 16, 1, 1), {"stride": (2, 3)}),
  ("conv1d", (3, 16, 30), (32, 16, 3), {"padding": 1}),
  ("conv3d", (2, 16, 5, 6, 7), (16, 16, 3, 3, 3), {"padding": 1}),
  ("conv_transpose2d", (2, 32, 7, 9), (32, 16, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
], ids=str)
def test_packed_conv_training_matches_torch(monkeypatch, op: str, xs: tuple[int, ...], ws: tuple[int, ...],
                                            kw: dict) -> None:
  # every conv packed as a large one is (weights and the weights' gradient's output gradient in blocks of channels),
  # with the heuristics' tiles: odd sizes, strides, groups, dilation, non-square kernels, other ranks, transposed
  torch = pytest.importorskip("torch")
  monkeypatch.setattr(packing, "CHANNEL_MIN_WORK", 0)
  xn, wn = rng.standard_normal(xs, dtype=np.float32), rng.standard_normal(ws, dtype=np.float32)
  with Context(SCHEDULE_CACHE=0):
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    out = getattr(x, op)(w, **kw).relu()
    out.sum().backward()
    assert x.grad is not None and w.grad is not None
    got = [out.numpy(), x.grad.numpy(), w.grad.numpy()]
  tx, tw = torch.from_numpy(xn).requires_grad_(), torch.from_numpy(wn).requires_grad_()
  tout = getattr(torch.nn.functional, op)(tx, tw, **kw).relu()
  tout.sum().backward()
  for ours, theirs in zip(got, [tout.detach().numpy(), tx.grad.numpy(), tw.grad.numpy()]):
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("device", ["CPU", "EMU"])
def test_padded_dot_products_of_loads_need_no_select(device: str) -> None:
  # x @ W.T with K = 102: the dot tile pads K to 104, both loads read 0 there (gated), so the product is 0 and needs no
  # select between the multiply and the add (which keeps them one FMA); exp(x) is 1 there: it keeps the select
  from lazytensor.codegen.lowerer import lower_kernel
  with Context(DEV=device): x, w = _t(16, 102), _t(8, 102)
  pad, unroll = Opt(OptOps.PADTO, 2, 8), Opt(OptOps.UNROLL, 2, 8)
  for fn, selects, want in [(lambda a: a, False, x.numpy() @ w.numpy().T),
                            (lambda a: a.exp(), True, np.exp(x.numpy()) @ w.numpy().T)]:
    with Context(DEV=device): item = create_schedule([(fn(x) @ w.T).lazydata])[0][-1]
    k = Kernel(item.ast, Device[device].renderer)
    for o in (pad, unroll): apply_opt(k, o)
    assert any(u.op is Ops.WHERE and u.dtype.scalar() == x.dtype for u in lower_kernel(k).toposort) == selects
    np.testing.assert_allclose(_run(item, device, [pad, unroll]).reshape(16, 8), want, rtol=1e-4, atol=1e-4)

def test_flops_count_ops_after_a_reduce_once_per_output() -> None:
  # DEBUG=2's GFLOPS: a matmul is 2 ops per multiply-add; a relu on its result adds a few ops per output, not per
  # multiply-add (a conv's relu mask counted so showed 3.5x the speed it ran at)
  a, b = _t(16, 64), _t(64, 32)
  def flops(t: Tensor) -> int:
    return Kernel(create_schedule([t.lazydata])[0][-1].ast, Device["CPU"].renderer).flops_and_mem()[0]
  plain = flops(a @ b)
  assert plain == 2 * 16 * 64 * 32
  assert plain < flops((a @ b).relu()) <= plain + 8 * 16 * 32

@pytest.mark.parametrize("target, cols, rows", [("x86-64-v3", 16, 6), ("x86-64-v4", 32, 8), ("aarch64", 8, 8)])
def test_large_matmul_reads_operands_in_panels_of_the_tile(target: str, cols: int, rows: int) -> None:
  # the tensor graph has no copy; a CPU's schedule adds two (B as column panels two vectors wide, A as row panels as
  # tall as the register tile (AVX2: 6 rows of 2 <8 x float>, as 768 rows allow), both chosen for the CPU_TARGET),
  # and the heuristics' tile matches them; EMU's schedule adds none
  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  a, b = _t(96 * 8, 256), _t(256, 1024)
  assert not any(u.op.name == "CONTIGUOUS" for u in (a @ b).lazydata.toposort)
  with Context(CPU_TARGET=target): items = create_schedule([(a @ b).lazydata])[0]
  assert len(items) == 3 and sorted(it.bufs[0].size for it in items[:2]) == [96 * 8 * 256, 256 * 1024]
  k = hand_coded_optimizations(Kernel(items[-1].ast, LLVMRenderer(cpu_target(target))))
  # the rows outside the vectors (heuristic._register_tile: one broadcast of A live at a time)
  assert k.applied_opts[:2] == [Opt(OptOps.UPCAST, 0, rows), Opt(OptOps.UPCAST, 1, cols)], k.applied_opts
  with Context(DEV="EMU"):
    ea, eb = Tensor(a.numpy(), device="EMU"), Tensor(b.numpy(), device="EMU")
    assert len(create_schedule([(ea @ eb).lazydata])[0]) == 1
  np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("target, cols, rows", [("x86-64-v3", 16, 6), ("x86-64-v4", 32, 8)])
def test_weight_gradient_over_a_short_batch_reads_operands_in_panels(target: str, cols: int, rows: int) -> None:
  # the first Linear's weight gradient of an MLP 784-256 at batch 128 (dy.T @ x, K=128): dy read across its rows, in
  # place its neighbouring values became 8-wide vectors of 32 accumulators (636 us on one AVX-512 thread); packed like
  # a larger K's operands (267 us with both copies), the tile is rows of dy by two vectors along x's 784 columns
  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  dy, x = _t(128, 256), _t(128, 784)
  with Context(CPU_TARGET=target): items = create_schedule([(dy.T @ x).lazydata])[0]
  padded = lambda n, m: -(-n // m) * m  # noqa: E731
  assert len(items) == 3
  assert sorted(it.bufs[0].size for it in items[:2]) == [128 * padded(256, rows), 128 * padded(784, cols)]
  k = hand_coded_optimizations(Kernel(items[-1].ast, LLVMRenderer(cpu_target(target))))
  upcasts = [o for o in k.applied_opts if o.op is OptOps.UPCAST]
  assert upcasts[:2] == [Opt(OptOps.UPCAST, 0, rows), Opt(OptOps.UPCAST, 1, cols)], k.applied_opts
  np.testing.assert_allclose((dy.T @ x).numpy(), dy.numpy().T @ x.numpy(), rtol=1e-4, atol=1e-3)
  # not a batch of small ones (64 of 128x128.T @ 128x128): their copies cost more than the matmuls gain
  a, b = _t(64, 128, 128), _t(64, 128, 128)
  with Context(CPU_TARGET=target): assert len(create_schedule([(a.transpose(1, 2) @ b).lazydata])[0]) == 1

@pytest.mark.parametrize("sa, sb", [((2, 512, 256), (256, 1024)), ((2, 512, 256), (2, 256, 512)),
                                    ((510, 258), (258, 1024))])
def test_packed_matmuls_match_numpy(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
  # batches (B broadcast or not) and a row count that only 2, 3, 5 divide: the panels follow each view
  a, b = _t(*sa), _t(*sb)
  assert len(create_schedule([(a @ b).lazydata])[0]) == 3
  np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v4"])
def test_short_k_matmul_with_transposed_b_reads_it_in_panels(target: str) -> None:
  # attention's scores q @ k.T (12 heads of 128x64 @ 64x128, views of (128, 768) projections): too small a K and too
  # little work for packing a B read along its rows, but in place its only vectors are dot products along K=64, whose
  # sums across lanes cost as much as the FMAs. k is packed in column panels (and q in row panels: two copies), and the
  # heuristics' tile reads them: vectors of 2 registers by rows
  from lazytensor.renderer.cpu_target import cpu_target
  from lazytensor.renderer.llvm import LLVMRenderer
  q, k = _t(128, 768), _t(128, 768)
  heads = lambda x: x.reshape(1, 128, 12, 64).transpose(1, 2)  # noqa: E731
  scores = heads(q) @ heads(k).transpose(-1, -2)
  with Context(CPU_TARGET=target): items = create_schedule([scores.lazydata])[0]
  assert len(items) == 3, [it.ast.op for it in items]
  renderer = LLVMRenderer(cpu_target(target))
  kern = hand_coded_optimizations(Kernel(items[-1].ast, renderer))
  assert not kern.axes_of(AxisKind.UNROLL), kern.applied_opts
  assert any(o.op is OptOps.UPCAST and o.amt == 2 * renderer.target.vector_floats for o in kern.applied_opts)
  want = np.einsum("thd,shd->hts", q.numpy().reshape(128, 12, 64), k.numpy().reshape(128, 12, 64))
  np.testing.assert_allclose(scores.numpy()[0], want, rtol=1e-4, atol=1e-3)

def test_thread_shares_bounded_by_threads() -> None:
  # up to MAX_SHARES_PER_THREAD shares per thread (claimed one at a time at run time); none on one thread
  k = Kernel(_last_item("elementwise").ast, Device["CPU"].renderer)
  with Context(THREADS=2):
    threaded = k.copy()
    apply_opt(threaded, Opt(OptOps.THREAD, 0, 16))
    assert [threaded.full_shape[a] for a in threaded.axes_of(AxisKind.THREAD)] == [16]
    with pytest.raises(KernelOptError, match="shares"): apply_opt(k.copy(), Opt(OptOps.THREAD, 0, 32))
  with Context(THREADS=1):  # one thread runs the shares in order: blocks of the output (heuristic._cache_blocks)
    apply_opt(k.copy(), Opt(OptOps.THREAD, 0, 8))
    with pytest.raises(KernelOptError, match="shares"): apply_opt(k.copy(), Opt(OptOps.THREAD, 0, 16))

@pytest.mark.parametrize("epilogue", ["bias", "bias and residual"])
def test_matmul_loops_over_panels_of_b_outside_its_rows_whatever_follows(epilogue: str) -> None:
  # B (3 MB, more than half of the target's 1 MB L2) in column panels, each kept in L2 while every row tile of A uses
  # it: the panels' axis outside the rows (SWAP). A bias and a residual added after the reduce (GPT-2's MLP output) are
  # no operands of the tile: a residual read along the columns was taken for B, and the panels stayed inside
  from lazytensor.renderer.llvm import LLVMRenderer
  x, w, b, r = _t(128, 1024), _t(1024, 768), _t(768), _t(128, 768)
  out = x @ w + b if epilogue == "bias" else r + (x @ w + b)
  with Context(CPU_TARGET="x86-64-v3"): item = create_schedule([out.lazydata])[0][-1]
  k = hand_coded_optimizations(Kernel(item.ast, LLVMRenderer(avx2_target())))
  assert any(o.op is OptOps.SWAP for o in k.applied_opts), k.applied_opts
  want = x.numpy() @ w.numpy() + b.numpy() + (0 if epilogue == "bias" else r.numpy())
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)

def test_matmul_past_l2_takes_panels_of_b_in_shares_with_the_rows_outside() -> None:
  # B (1 MB) outgrows half of the target's 1 MB L2 and A (1.5 MB) all of it: B's column panels in THREAD shares of a
  # quarter of L2 (on one thread the shares run in order), the rows outside the panels of a share (no SWAP: that
  # streamed A at every panel). The kernel of that shape computes the product
  from lazytensor.engine.realize import run_schedule
  from lazytensor.renderer.llvm import LLVMRenderer
  a, b = _t(768, 512), _t(512, 512)
  with Context(CPU_TARGET="x86-64-v3", THREADS=1):
    items = create_schedule([(a @ b).lazydata])[0]
    k = hand_coded_optimizations(Kernel(items[-1].ast, LLVMRenderer(avx2_target())))
    assert [o for o in k.applied_opts if o.op in (OptOps.THREAD, OptOps.SWAP)] == [Opt(OptOps.THREAD, 1, 4)], \
      k.applied_opts
    run_schedule(items[:-1])
    got = _run(items[-1], "CPU", k.applied_opts)
  _assert_matmul_close(got[:768 * 512].reshape(768, 512), a.numpy(), b.numpy())

def test_matmul_tile_is_the_same_with_a_per_row_epilogue() -> None:
  # values of one per row fused after the reduce (a LayerNorm's mean and scale, in the next matmul's epilogue) are
  # contiguous along the rows: taken for the tile's operands, the rows counted as consecutive and the tile's vectors
  # went outside its rows (the order a convolution's output width wants)
  from lazytensor.renderer.llvm import LLVMRenderer
  x, w, m, s = _t(128, 256), _t(256, 768), _t(128, 1), _t(128, 1)
  def upcasts(out: Tensor) -> list[Opt]:
    with Context(CPU_TARGET="x86-64-v3"): item = create_schedule([out.lazydata])[0][-1]
    k = hand_coded_optimizations(Kernel(item.ast, LLVMRenderer(avx2_target())))
    return [o for o in k.applied_opts if o.op is OptOps.UPCAST]
  assert upcasts((x @ w - m) * s) == upcasts(x @ w)

@pytest.mark.parametrize("threads, shares", [(1, 8), (2, 8)])
def test_matmul_sweeping_more_than_l3_runs_in_blocks_of_rows(threads: int, shares: int) -> None:
  # a target whose L3 is twice A: A's rows in THREAD shares, each finished over every panel of B before the next, so
  # that A's block stays in cache (blocks of at most an eighth of L3: A's copy, its 2048 rows padded to 2064 for AVX2's
  # 6-row tile (heuristic._padded_rows), needs 5, and 8 divide its 344 tiles; two threads: their 8 shares)
  from lazytensor.engine.realize import run_schedule
  from lazytensor.renderer.llvm import LLVMRenderer
  a, b = _t(2048, 256), _t(256, 1024)
  avx2 = avx2_target()
  with Context(THREADS=threads, CPU_TARGET=avx2.name):
    items = create_schedule([(a @ b).lazydata])[0]
    k = hand_coded_optimizations(Kernel(items[-1].ast, LLVMRenderer(avx2_target(l3_bytes=2 * a.nbytes()))))
    (axis,) = k.axes_of(AxisKind.THREAD)
    assert k.full_shape[axis] == shares, k.applied_opts
    # the shares split the rows of A (and of the output), along which B (the panels of its 1024 columns) is broadcast
    rows = next(o.axis for o in k.applied_opts if o.op is OptOps.THREAD)
    loads = [i for i, n in enumerate(k.view_nodes) if n.op is Ops.LOAD]
    (b_load,) = [i for i in loads if k.sts[i].real_strides()[rows] == 0]
    assert k.sts[b_load].real_size() == b.numel() and len(loads) == 2
    if threads == 1:  # a typical 32M L3 holds this A: no blocks of its rows (B's panels may take shares, B 1 MB)
      typical = hand_coded_optimizations(Kernel(items[-1].ast, LLVMRenderer(avx2)))
      assert all(typical.sts[b_load].real_strides()[x] != 0 for x in typical.axes_of(AxisKind.THREAD)), \
        typical.applied_opts
    run_schedule(items[:-1])
    got = _run(items[-1], "CPU", k.applied_opts).reshape(2048, 1024)
  np.testing.assert_allclose(got, a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-3)

def test_matmul_needing_more_blocks_than_shares_takes_the_most_shares() -> None:
  # A 16 times an eighth of L3: 16 blocks wanted, 8 shares allowed on one thread; the blocks are 8 (not none)
  from lazytensor.renderer.llvm import LLVMRenderer
  a, b = _t(2048, 256), _t(256, 1024)
  with Context(THREADS=1, CPU_TARGET="x86-64-v3"):
    item = create_schedule([(a @ b).lazydata])[0][-1]
    k = hand_coded_optimizations(Kernel(item.ast, LLVMRenderer(avx2_target(l3_bytes=a.nbytes() // 2))))
  assert [k.full_shape[x] for x in k.axes_of(AxisKind.THREAD)] == [8], k.applied_opts

@pytest.mark.parametrize("cores, size, shares", [(2, 1024, 8), (2, 64, 8), (2, 6, 6), (2, 7, 7), (2, 3, 3), (4, 12, 12),
                                                 (2, 5 * 11, 5), (2, 1, None)])
def test_heuristic_thread_shares(cores: int, size: int, shares: int | None) -> None:
  # 4 shares per thread, a multiple of the thread count where one divides the axis, else any divisor
  assert heuristic.thread_shares(cores, size) == shares

# ---- UPCASTMID: in a GROUP kernel, part of an output axis is threads while the reduce runs and registers where the
# group's partials meet: one thread finishes the reduce for all of its outputs ----

MID_KERNELS = {
  "row_sum": lambda: _t(12, 32).sum(1),
  "max_odd": lambda: (-1 - _t(6, 19).abs()).max(1),             # 19: the whole axis as the group
  "col_sum": lambda: (_t(64, 8) * 3).sum(0).exp(),              # the output is contiguous along the MID axis
  "two_reduces": lambda: _t(8, 16).softmax(1).sum(1),
}

def _mid_item(name: str, device: str):
  with Context(DEV=device): items, _ = create_schedule([MID_KERNELS[name]().lazydata])
  from lazytensor.engine.realize import run_schedule
  run_schedule(items[:-1])
  return items[-1]

def _mid_opts(k: Kernel, amt: int, extra: tuple[OptOps, ...] = ()) -> list[Opt]:
  """GROUP the last reduce axis (by 4 where 4 divides it, else whole), then UPCASTMID the last output axis by amt."""
  red, out = k.axes_of(AxisKind.REDUCE)[-1], k.axes_of(AxisKind.GLOBAL)[-1]
  opts = [Opt(OptOps.GROUP, red, 4 if k.full_shape[red] % 4 == 0 else 0), Opt(OptOps.UPCASTMID, out, amt)]
  return opts + [Opt(op, 0, 2) for op in extra]

@pytest.mark.parametrize("device", ["EMU", "CUDACPU"])
@pytest.mark.parametrize("name,amt", [("row_sum", 4), ("row_sum", 3), ("max_odd", 2), ("col_sum", 4),
                                      ("two_reduces", 2)])
def test_upcastmid_computes_what_the_plain_kernel_does(name: str, amt: int, device: str) -> None:
  item = _mid_item(name, device)
  ref = _run(item, device, [])
  opts = _mid_opts(Kernel(item.ast, Device[device].renderer), amt)
  np.testing.assert_allclose(_run(item, device, opts), ref, rtol=1e-5, atol=1e-5, err_msg=str(opts))

@pytest.mark.parametrize("device", ["EMU", "CUDACPU"])
def test_upcastmid_with_locals_and_upcasts_around_it(device: str) -> None:
  item = _mid_item("col_sum", device)
  ref = _run(item, device, [])
  k = Kernel(item.ast, Device[device].renderer)
  out = k.axes_of(AxisKind.GLOBAL)[-1]
  opts = [Opt(OptOps.LOCAL, out, 2), Opt(OptOps.GROUPTOP, k.axes_of(AxisKind.REDUCE)[-1] + 1, 8),
          Opt(OptOps.UPCASTMID, out, 2), Opt(OptOps.UPCAST, out, 2)]
  np.testing.assert_allclose(_run(item, device, opts), ref, rtol=1e-5, atol=1e-5)

def test_upcastmid_one_thread_stores_all_of_its_outputs() -> None:
  from lazytensor.codegen.lowerer import lower_kernel
  k = Kernel(_mid_item("row_sum", "EMU").ast, Device["EMU"].renderer)
  for o in _mid_opts(k, 4): apply_opt(k, o)
  assert [kind.name for kind in k.kinds] == ["GLOBAL", "GROUP", "MID", "REDUCE"]
  stores = [u for u in lower_kernel(k).toposort if u.op is Ops.STORE and u.src[0].op is Ops.DEFINE_GLOBAL]
  assert len(stores) == 4, "a store per output the thread finished"
  # the threads of the MID axis each reduced a quarter of the outputs' partials; thread 0 of them stores all four
  specials = {u.arg[0] for s in stores for u in s.toposort if u.op is Ops.SPECIAL}
  assert {"lidx0", "lidx1"} <= specials

def test_upcastmid_needs_a_group_first() -> None:
  k = Kernel(_mid_item("row_sum", "EMU").ast, Device["EMU"].renderer)
  with pytest.raises(KernelOptError, match="needs a GROUP axis"): apply_opt(k, Opt(OptOps.UPCASTMID, 0, 4))
  apply_opt(k, Opt(OptOps.NOLOCALS))
  with pytest.raises(KernelOptError, match="NOLOCALS was applied"): apply_opt(k, Opt(OptOps.GROUP, 1, 4))

def test_beam_tries_upcastmid_where_a_kernel_is_grouped() -> None:
  from lazytensor.opt.search_actions import actions
  item = _mid_item("row_sum", "EMU")
  k = Kernel(item.ast, Device["EMU"].renderer)
  assert not any(o.op is OptOps.UPCASTMID and _legal(k, o) for o in actions(k))
  apply_opt(k, Opt(OptOps.GROUP, 1, 4))
  mids = [o for o in actions(k) if o.op is OptOps.UPCASTMID and _legal(k, o)]
  assert mids == [Opt(OptOps.UPCASTMID, 0, 2), Opt(OptOps.UPCASTMID, 0, 4)]
  assert not any(o.op is OptOps.UPCASTMID for o in actions(Kernel(_last_item("row_sum").ast, Device["CPU"].renderer)))

def test_every_optop_has_a_row_that_apply_opt_follows() -> None:
  from lazytensor.opt.rules import OPTOPS
  assert set(OPTOPS) == set(OptOps)
  # a split makes the row's kind, on the outer part of the axis for TOP rows
  k = Kernel(_mid_item("row_sum", "EMU").ast, Device["EMU"].renderer)
  for op in (OptOps.GROUPTOP, OptOps.UPCASTMID, OptOps.UNROLL, OptOps.UPCAST):
    row, before = OPTOPS[op], list(k.kinds)
    axis = next(a for a, kind in enumerate(k.kinds) if kind in row.kinds and k.full_shape[a] % 2 == 0)
    apply_opt(k, Opt(op, axis, 2))
    assert row.makes is not None and k.kinds.count(row.makes) == before.count(row.makes) + 1, op
  with pytest.raises(KernelOptError, match=r"axis 1 is GROUP, expected GLOBAL/LOCAL"):
    apply_opt(k, Opt(OptOps.UPCAST, 1, 2))

def test_architecture_doc_shows_every_row() -> None:
  from pathlib import Path

  from lazytensor.opt.rules import OPTOPS
  doc = (Path(__file__).parent.parent / "docs" / "architecture.md").read_text()
  section = doc[doc.index("## Kernels, axes and optimizations"):doc.index("## From an optimized kernel")]
  names = {n.strip() for line in section.splitlines() if line.startswith("| ") and not line.startswith("| OptOp")
           for n in line.split("|")[1].split(",")}
  assert names == {op.name for op in OPTOPS}
