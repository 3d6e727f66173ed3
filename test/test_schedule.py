"""Kernel counts that users can rely on (docs/architecture.md), and scheduling behaviour."""
import subprocess
import sys

import numpy as np
import pytest

from lazytensor import GlobalCounters, Tensor
from lazytensor.schedule.scheduler import create_schedule, realized_map
from lazytensor.uop.ops import Ops


def kernels(*ts: Tensor) -> int:
  items, _ = create_schedule([t.lazydata for t in ts])
  return sum(1 for it in items if it.ast.op is not None and it.ast.op.name == "SINK")

@pytest.fixture
def ab() -> tuple[Tensor, Tensor]:
  rng = np.random.default_rng(0)
  a, b = (Tensor(rng.random((16, 16), dtype=np.float32)).realize() for _ in range(2))
  return a, b

@pytest.mark.parametrize("name,fn,count", [
  ("chain", lambda a, b: (a + b) * 2 - 1, 1),
  ("mul_sum", lambda a, b: (a * b).sum(1), 1),
  ("sum_plus", lambda a, b: a.sum(1) + 1, 1),
  ("matmul", lambda a, b: a @ b, 1),
  ("matmul_relu", lambda a, b: (a @ b).relu(), 1),
  ("sub_max", lambda a, b: a - a.max(1, keepdim=True), 2),
  ("permute_contiguous", lambda a, b: a.permute(1, 0).contiguous(), 1),
  ("sum_keepdim_false_chain", lambda a, b: (a.sum(1) * 2).exp(), 1),
  ("two_reduces_same_axes", lambda a, b: a.sum(1) + b.max(1), 1),
])
def test_kernel_count(ab: tuple[Tensor, Tensor], name: str, fn, count: int) -> None:
  a, b = ab
  assert kernels(fn(a, b)) == count

def test_softmax_at_most_3(ab: tuple[Tensor, Tensor]) -> None:
  assert kernels(ab[0].softmax(1)) <= 3

def test_conv2d_one_kernel() -> None:
  x, w = Tensor.rand(2, 3, 8, 8).realize(), Tensor.rand(4, 3, 3, 3).realize()
  assert kernels(x.conv2d(w, padding=1)) == 1

def test_two_outputs_at_most_2(ab: tuple[Tensor, Tensor]) -> None:
  a, b = ab
  assert kernels((a + b).sum(), (a + b).max()) <= 2

def test_movement_on_realized_is_free(ab: tuple[Tensor, Tensor]) -> None:
  a, _ = ab
  moved = a.permute(1, 0).reshape(256).reshape(16, 16)[2:5][::-1]
  assert kernels(moved) == 0
  # flip, pad, roll and repeat are copies, as torch's: realizing one computes a buffer of its own
  assert kernels(moved.flip(0)) == kernels(a.pad((1, 1))) == kernels(a.roll(1, 0)) == kernels(a.repeat(1, 2)) == 1

def test_kernel_count_counter(ab: tuple[Tensor, Tensor]) -> None:
  a, b = ab
  GlobalCounters.reset()
  ((a + b) * 2).realize()
  assert GlobalCounters.kernel_count == 1
  assert GlobalCounters.global_mem > 0

def test_realized_once_is_not_recomputed(ab: tuple[Tensor, Tensor]) -> None:
  a, b = ab
  c = (a + b).sum(1)
  c.realize()
  d = c * 2
  assert kernels(d) == 1  # only the multiply: c is a buffer now

def test_a_value_computed_inside_one_realize_is_read_by_the_next(ab: tuple[Tensor, Tensor]) -> None:
  # h lies above a movement op, so the scheduler computes it as another node (views resolved): the buffer it got in
  # the realize of h + 1 stands for h's own node too, and h * 3 reads it (in a decode step, each layer's output was
  # computed again by every later layer's cache write and by the logits: kernels growing with the layers squared)
  a, b = ab
  h = (a.T.reshape(256) * b.reshape(256)).contiguous()
  (h + 1).realize()
  assert kernels(h * 3) == 1  # the multiply alone
  np.testing.assert_allclose((h * 3).numpy(), a.numpy().T.reshape(256) * b.numpy().reshape(256) * 3, rtol=1e-6)

def test_a_value_a_live_tensor_reads_keeps_its_buffer() -> None:
  # a decode step: each layer's output is contiguous and computed first inside the next layer's cache write, whose
  # later kernels got its buffer (nothing of that schedule read it any more): the layer's output then stood for no
  # buffer, and the next realize computed it again, every layer under it too (3 extra kernels per earlier layer)
  rng = np.random.default_rng(0)
  ws = [Tensor(rng.random((16, 16), dtype=np.float32)).realize() for _ in range(3)]
  caches = [Tensor.zeros(4, 16).contiguous().realize() for _ in range(3)]
  x = Tensor(rng.random((1, 16), dtype=np.float32)).realize()
  ref, counts = x.numpy(), []
  for w, cache in zip(ws, caches):
    GlobalCounters.reset()
    cache[0:1].assign(((x @ w).contiguous() @ w).contiguous() @ w).realize()
    counts.append(GlobalCounters.kernel_count)
    x = (x + (x @ w).relu() + cache.sum(0, keepdim=True)).contiguous()
    wn = w.numpy()
    ref = ref + np.maximum(ref @ wn, 0) + ((ref @ wn) @ wn) @ wn
  GlobalCounters.reset()
  out = (x * 2).realize()
  # the cache write's 3 kernels, after the 2 of the layer output under it (its matmul, then the rest)
  assert counts == [3, 5, 5] and GlobalCounters.kernel_count == 3
  np.testing.assert_allclose(out.numpy(), ref * 2, rtol=1e-5)

def test_a_value_nothing_alive_reads_lends_its_buffer() -> None:
  x = Tensor.rand(64, 64).realize()
  y, kept = x, []
  for i in range(5):
    y = (y * 0.5 + 1).contiguous()
    if i == 1: kept.append(y)  # a live tensor holds the second step's value: its buffer is its own
  items = y.schedule()
  outs = [it.bufs[0] for it in items]
  assert len({id(b) for b in outs}) == 4 and sum(b is outs[1] for b in outs) == 1
  del kept[:]
  outs = [it.bufs[0] for it in y.schedule()]
  assert len({id(b) for b in outs}) == 3

def test_shared_intermediate_seen_by_other_tensor(ab: tuple[Tensor, Tensor]) -> None:
  a, b = ab
  c = a @ b
  d = c + 1
  d.realize()
  e = c * 2  # c's node was never realized on its own: one kernel recomputes it fused
  np.testing.assert_allclose(e.numpy(), (a.numpy() @ b.numpy()) * 2, rtol=1e-5)

def test_schedule_does_not_run(ab: tuple[Tensor, Tensor]) -> None:
  a, b = ab
  GlobalCounters.reset()
  items = (a + b).schedule()
  assert len(items) == 1 and GlobalCounters.kernel_count == 0

def test_memory_planner_reuses_intermediates() -> None:
  x = Tensor.rand(64, 64).realize()
  y = x
  for _ in range(5): y = (y * 0.5 + 1).contiguous()  # each step's buffer is dead once the next has read it
  items, _ = create_schedule([y.lazydata])
  bufs = {id(b) for it in items for b in it.bufs[:1]}
  assert len(items) == 5 and len(bufs) == 3
  ref = x.numpy()
  for _ in range(5): ref = ref * 0.5 + 1
  np.testing.assert_allclose(y.numpy(), ref, rtol=1e-6)

def test_copy_between_devices() -> None:
  a = Tensor([1.0, 2.0, 3.0], device="CPU")
  b = (a * 2).to("CPU:1")
  assert b.device == "CPU:1"
  assert b.tolist() == [2.0, 4.0, 6.0]
  items, _ = create_schedule([(a + 1).to("CPU:1").lazydata])
  assert [it.ast.op.name for it in items] == ["SINK", "COPY"]

# a constant copied to another device; constants that become a kernel argument there (the third value of one structure
# does); a constant replicated over devices, whose piece on its own device is the constant itself, realized
@pytest.mark.parametrize("devices, values", [("CPU:1", (0.0,)), ("CPU:1", (1.0, 2.0, 3.0)), (("CPU", "CPU:1"), (4.0,))],
                         ids=["copied", "argument", "replicated"])
def test_a_constant_realized_is_not_remembered(devices: str | tuple[str, ...], values: tuple[float, ...]) -> None:
  # the constant is realized into memory that must not stand for that (interned) constant afterwards: a contiguous() of
  # it was handed that memory, so two tensors made so were one buffer, the replicated tensor's too (SGD's momentum
  # buffers and a bias after a Pipeline moved the zero bias to its stage)
  want = [[values[-1]] * 3] * 5
  for v in values: moved = Tensor.full((5, 3), v).to(devices).realize()
  assert realized_map.get(Tensor.full((5, 3), values[-1]).lazydata) is None
  a, b = (Tensor.full((5, 3), values[-1]).contiguous().realize() for _ in range(2))
  a.assign(a + 1).realize()
  assert b.tolist() == want and moved.tolist() == want

def test_corrupt_compile_cache_is_recompiled(tmp_path) -> None:
  import sqlite3

  from lazytensor import Context
  from lazytensor.engine import realize
  from lazytensor.helpers import DISKCACHE_TABLE
  db = str(tmp_path / "cache.db")
  x = Tensor([1.0, 2.0, 3.0]).realize()
  with Context(CACHEDB=db):
    realize.forget_programs()
    assert (x * 3 + 0.25).tolist() == [3.25, 6.25, 9.25]
    conn = sqlite3.connect(db)
    conn.execute(f"UPDATE {DISKCACHE_TABLE} SET val = substr(val, 1, 40)")  # truncate every entry
    conn.commit()
    realize.forget_programs()
    assert (x * 3 + 0.5).tolist() == [3.5, 6.5, 9.5]
    assert (Tensor([1.0, 2.0, 3.0]) * 3 + 0.25).tolist() == [3.25, 6.25, 9.25]

def test_a_warm_process_loads_programs_without_lowering(tmp_path, monkeypatch) -> None:
  from lazytensor import Context, Device
  from lazytensor.codegen import program
  from lazytensor.engine import realize
  x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8)).realize()
  with Context(CACHEDB=str(tmp_path / "cache.db")):
    item = create_schedule([(x @ x.T + 1).lazydata])[0][-1]
    first = realize.compile_kernel(item.ast, Device["CPU"])
    realize.forget_programs()
    def no_lowering(k, name):
      raise AssertionError("lowered again")
    monkeypatch.setattr(program, "get_program", no_lowering)
    again = realize.compile_kernel(item.ast, Device["CPU"])
    assert again.launch == first.launch and again.kernel.applied_opts == first.kernel.applied_opts
    assert (x @ x.T + 1).tolist() == (x.numpy() @ x.numpy().T + 1).tolist()

def test_unusable_cache_db_is_not_fatal(tmp_path, capsys) -> None:
  from lazytensor import Context
  from lazytensor.engine import realize
  bad = tmp_path / "not_a_db"
  bad.write_bytes(b"this is not sqlite" * 100)
  with Context(CACHEDB=str(bad)):
    realize.forget_programs()
    assert (Tensor([1.0, 2.0]) * 5 - 1).tolist() == [4.0, 9.0]

def test_large_matmul_packs_its_operands_into_panels() -> None:
  a, b = Tensor.rand(512, 512).realize(), Tensor.rand(512, 1024).realize()
  items, _ = create_schedule([(a @ b).lazydata])
  assert len(items) == 3  # the panel copies of a and b, then the matmul reading them sequentially
  np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-4)

def test_transposed_a_is_packed_too() -> None:
  # x.T @ y (a weight gradient): both operands are copied into panels (test_search checks which is which)
  a, b = Tensor.rand(512, 512).realize(), Tensor.rand(512, 1024).realize()
  assert len(create_schedule([(a.T @ b).lazydata])[0]) == 3
  np.testing.assert_allclose((a.T @ b).numpy(), a.numpy().T @ b.numpy(), rtol=1e-4)

def test_transposed_b_is_packed_too() -> None:
  # x @ w.T (a Linear's forward): w's rows are copied into column panels, x into row panels
  a, b = Tensor.rand(512, 384).realize(), Tensor.rand(1024, 384).realize()
  assert len(create_schedule([(a @ b.T).lazydata])[0]) == 3
  np.testing.assert_allclose((a @ b.T).numpy(), a.numpy() @ b.numpy().T, rtol=1e-4)

@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("cols, panels", [(1000, 1008), (1009, 1024)])
def test_odd_columns_pack_b_in_whole_panels_and_read_them_unmasked(transposed: bool, cols: int, panels: int) -> None:
  # 1000 columns (1008 in panels of 16): the last panel is filled up with zeros, the kernel pads its column axis to
  # the panel and reads every panel with plain vector loads (a masked load of B at each step: 13 GFLOP/s, now ~60).
  # A prime count (a 50257-word vocabulary) gets its vectors along the columns too, once padded (7 -> 80 GFLOP/s).
  from lazytensor import Context, Device
  from lazytensor.codegen.lowerer import lower_kernel
  from lazytensor.opt.heuristic import hand_coded_optimizations
  from lazytensor.opt.kernel import AxisKind, Kernel
  a, b = Tensor.rand(64, 264).realize(), Tensor.rand(cols, 264).realize()
  bt = b.T if transposed else b.reshape(264, cols)
  with Context(CPU_TARGET="x86-64-v3"):
    items, _ = create_schedule([(a @ bt).lazydata])
    assert len(items) == 3 and 264 * panels in [it.bufs[0].size for it in items[:2]]
    k = hand_coded_optimizations(Kernel(items[-1].ast, Device["CPU"].renderer))
    assert 16 in [k.full_shape[a] for a in k.axes_of(AxisKind.UPCAST)], k.applied_opts
    loads = [u for u in lower_kernel(k).toposort if u.op.name == "LOAD"]
    assert loads and not any(len(u.src) > 2 for u in loads), k.applied_opts
    np.testing.assert_allclose((a @ bt).numpy(), a.numpy() @ bt.numpy(), rtol=1e-4)

def test_packing_a_slice_copies_the_slice() -> None:
  # a block of a larger matrix: the panels hold what the matmul reads, not the whole source buffer
  big, b = Tensor.rand(1024, 2048).realize(), Tensor.rand(512, 1024).realize()
  items, _ = create_schedule([(big[:512, 1024:1536] @ b).lazydata])
  # each copy holds the operand's elements, padded by at most 1/64 (the rows of A's panels to a multiple of the
  # register tile's rows, which the CPU target chooses: AVX2 pads 512 to 516)
  (a_panels, b_panels) = sorted(it.bufs[0].size for it in items[:2])
  assert len(items) == 3 and 512 * 512 <= a_panels <= 512 * 512 * 65 // 64 and b_panels == 512 * 1024
  np.testing.assert_allclose((big[:512, 1024:1536] @ b).numpy(), big.numpy()[:512, 1024:1536] @ b.numpy(), rtol=1e-4)

def test_costly_elementwise_operand_of_a_matmul_is_stored_once() -> None:
  # fused into the matmul, (h > 0) * dh would be recomputed for every output column; stored once it is read instead:
  # here computed in the copy that packs it in row panels (x's copy in column panels is the second, the matmul third)
  rng = np.random.default_rng(1)
  h, dh, x = (Tensor(rng.standard_normal(s, dtype=np.float32)).realize() for s in [(128, 256), (128, 256), (128, 784)])
  masked = (h > 0).where(dh, 0)
  items = create_schedule([(masked.T @ x).lazydata])[0]
  assert len(items) == 3 and sum(any(u.op is Ops.CMPLT for u in it.ast.toposort) for it in items) == 1
  np.testing.assert_allclose((masked.T @ x).numpy(), np.where(h.numpy() > 0, dh.numpy(), 0).T @ x.numpy(), rtol=1e-4,
                             atol=1e-4)
  small = Tensor(rng.standard_normal((4, 5), dtype=np.float32)).realize()
  assert kernels((small * 2 + 1) @ small.T) == 1  # too little work to recompute for a kernel launch to pay
  assert kernels(small.cast("float16") @ small.T.cast("float16")) == 1  # a cast is cheaper to recompute than store
  idx = Tensor([3, 1, 0]).realize()
  big = Tensor(rng.standard_normal((4, 4096), dtype=np.float32)).realize()
  assert kernels(big[idx]) == 1  # the one-hot mask of a gather is never stored

def test_a_residual_stream_is_stored_once_not_recomputed_by_every_later_layer() -> None:
  # post-norm layers (BERT's): each layer's residual sum is read by its LayerNorm's two reduces and by the kernels
  # the normalized value feeds (a packed matmul operand, the next residual). Computed anew in each, every kernel of the
  # last layer read all earlier layers' matmul outputs: 21 buffers at 6 layers; stored, the matmul computes it
  rng = np.random.default_rng(2)
  x = Tensor(rng.standard_normal((128, 128), dtype=np.float32)).realize()
  b = Tensor(rng.standard_normal(128, dtype=np.float32)).realize()
  h, want = x, x.numpy()
  for _ in range(6):
    w = Tensor(rng.standard_normal((128, 128), dtype=np.float32) / 16).realize()
    h = (h + h @ w.T + b).layernorm()
    r = want + want @ w.numpy().T + b.numpy()
    want = (r - r.mean(1, keepdims=True)) / np.sqrt(r.var(1, keepdims=True) + 1e-5)
  items, _ = create_schedule([h.lazydata])
  assert max(len(it.bufs) for it in items) <= 7
  np.testing.assert_allclose(h.numpy(), want, rtol=1e-3, atol=1e-3)

def _exp_outputs(*ts: Tensor) -> list[int]:
  """The sizes of the outputs of the kernels that compute an exp, in the schedule that realizes ts."""
  items, _ = create_schedule([t.lazydata for t in ts])
  return [it.bufs[0].size for it in items if any(u.op.name == "EXP2" for u in it.ast.toposort)]

def test_log_softmax_backward_read_by_two_packing_copies_is_computed_once() -> None:
  # the gradient of the logits (softmax - one-hot) is read by two matmuls, each from a packing copy of its own: each
  # copy computed it again, reading the logits across their rows (GPT-2's output layer: 0.4-1.5 s of a 6 s step); now
  # one kernel stores it, logits-sized, and the copies read it
  from lazytensor import Context
  rng = np.random.default_rng(2)
  x = Tensor(rng.standard_normal((256, 256), dtype=np.float32), requires_grad=True).realize()
  w = Tensor(rng.standard_normal((2000, 256), dtype=np.float32) * 0.05, requires_grad=True).realize()
  y = Tensor(rng.integers(0, 2000, 256, dtype=np.int32)).realize()
  loss = (x @ w.T).cross_entropy(y)
  loss.backward()
  assert x.grad is not None and w.grad is not None
  with Context(CPU_TARGET="x86-64-v3"):
    assert [n for n in _exp_outputs(x.grad, w.grad) if n >= 256 * 2000] == [256 * 2000]
    logits = x.numpy() @ w.numpy().T
    p = np.exp(logits - logits.max(1, keepdims=True))
    dlogits = (p / p.sum(1, keepdims=True) - np.eye(2000, dtype=np.float32)[y.numpy()]) / 256
    np.testing.assert_allclose(x.grad.numpy(), dlogits @ w.numpy(), rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), dlogits.T @ x.numpy(), rtol=1e-3, atol=1e-6)

def test_a_costly_value_two_kernels_read_is_stored_once_and_a_cheap_one_is_not() -> None:
  rng = np.random.default_rng(3)
  a, b = (Tensor(rng.standard_normal((512, 512), dtype=np.float32)).realize() for _ in range(2))
  costly = (a.exp() * b + a.sin() * b.cos()) / (a * a + 1)
  assert kernels(costly.sum(0), costly.sum(1)) == 3  # computed once, then each reduce reads it
  assert len(_exp_outputs(costly.sum(0), costly.sum(1))) == 1
  cheap = a * 2 + b
  assert kernels(cheap.sum(0), cheap.sum(1)) == 2  # each reduce computes it: cheaper than storing and loading it
  part = a.exp() * a.sin() / (a * a + 1)
  assert kernels((part * a).sum(0), (part + a).sum(1)) == 2  # both read a all the same: stored, it would spare no load
  small = a[:8, :8]
  assert kernels((small.exp() * small.sin()).sum(0), (small.exp() * small.sin()).sum(1)) == 2  # a launch costs more

def test_a_value_is_stored_once_enough_kernels_compute_it() -> None:
  # a softmax's exp over scores scaled and masked by a row (GPT-2's attention): recomputed, each kernel runs its ops
  # and loads the scores; stored, one kernel does and writes it, each loads it. Worth it for four kernels (its
  # forward's sum and output and the backward's two reads in GPT-2: 1365 -> 1362 kernels a training step), not two
  rng = np.random.default_rng(4)
  x, y = (Tensor(rng.standard_normal((512, 512), dtype=np.float32)).realize() for _ in range(2))
  mask = Tensor(rng.standard_normal((1, 512), dtype=np.float32)).realize()
  e = (x * 0.125 + mask - x.max(1, keepdim=True)).exp()
  assert len(_exp_outputs(e.sum(0), e.sum(1))) == 2
  four = (e.sum(0), e.sum(1), (e * y).sum(0), (e * y).sum(1))
  assert len(_exp_outputs(*four)) == 1
  Tensor.realize(*four)
  want = np.exp(x.numpy() * 0.125 + mask.numpy() - x.numpy().max(1, keepdims=True))
  for got, ref in zip(four, (want.sum(0), want.sum(1), (want * y.numpy()).sum(0), (want * y.numpy()).sum(1))):
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-3)

def test_reused_buffer_is_not_remembered_as_its_first_value() -> None:
  # x1's buffer is free after x2's kernel and holds x3 from then on: a later graph with x1 must not read it
  arr = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
  a = Tensor(arr)
  x1 = a.sum(1, keepdim=True)
  x2 = (a - x1).max(1, keepdim=True)
  x3 = (a * x2).sum(1, keepdim=True)
  (a + x3).sum(1).realize()
  np.testing.assert_allclose(a.sum(1, keepdim=True).numpy(), arr.sum(1, keepdims=True), atol=1e-4)

def test_reading_an_assign_to_a_slice_in_the_same_schedule() -> None:
  # the assign writes a[2:4]; a kernel of the same schedule that reads its result reads those positions
  from lazytensor.uop.ops import Ops, UOp
  a = Tensor([0.0, 1.0, 2.0, 3.0]).realize()
  v = a[2:4]
  out = Tensor(UOp(Ops.ASSIGN, v.dtype, (v.lazydata, (v + 10).lazydata))) * 2
  assert out.tolist() == [24.0, 26.0] and a.tolist() == [0.0, 1.0, 12.0, 13.0]

def test_output_slice_that_is_also_copied_keeps_its_buffer() -> None:
  # t[0:3] is made dense for its copy and is an output too: its buffer must not be reused for t[3:6]'s copy
  a = np.arange(42, dtype=np.float32).reshape(6, 7)
  t = Tensor(a).realize()
  u, c, v = t[0:3], t[0:3].to("CPU:1"), t[3:6].to("CPU:2")
  Tensor.realize(u, c, v)
  np.testing.assert_equal(u.numpy(), a[:3])
  np.testing.assert_equal(c.numpy(), a[:3])
  np.testing.assert_equal(v.numpy(), a[3:])

@pytest.mark.parametrize("make, expect", [
  (lambda: Tensor.arange(10**7)[-3:], np.arange(10**7)[-3:]),
  (lambda: (Tensor.arange(40).reshape(5, 8).float() * 0.1).exp()[1:3, ::3],
   np.exp(np.arange(40).reshape(5, 8).astype(np.float32) * np.float32(0.1))[1:3, ::3]),
  (lambda: Tensor.arange(10).pad(((2, 2),))[1:5], np.pad(np.arange(10), 2)[1:5]),
])
def test_a_part_of_a_computed_value_computes_that_part_alone(make, expect) -> None:  # type: ignore[no-untyped-def]
  t = make()
  items, _ = create_schedule([t.lazydata])
  assert [it.bufs[0].size for it in items] == [expect.size]
  np.testing.assert_allclose(t.numpy(), expect, rtol=1e-6)

def test_a_part_of_a_reduce_stays_a_view_of_its_buffer(ab: tuple[Tensor, Tensor]) -> None:
  out = ab[0].sum(1)[2:5]  # the reduce's kernel computes every row: slicing its buffer needs no second kernel
  items, _ = create_schedule([out.lazydata])
  assert [it.bufs[0].size for it in items] == [16]
  np.testing.assert_allclose(out.numpy(), ab[0].numpy().sum(1)[2:5], rtol=1e-5)

def test_two_parts_of_one_computed_value_realized_together_keep_their_own_buffers() -> None:
  x = Tensor.arange(12).reshape(2, 6) * 3
  left, right = x[:, :3], x[:, 3:]
  left.realize(right)
  np.testing.assert_equal(left.numpy(), (np.arange(12).reshape(2, 6) * 3)[:, :3])
  np.testing.assert_equal(right.numpy(), (np.arange(12).reshape(2, 6) * 3)[:, 3:])

def test_a_part_of_a_contiguous_or_of_an_output_is_a_view_of_its_buffer() -> None:
  x = Tensor.arange(12).float() * 2
  c = x.contiguous()
  part = c[:3]
  assert [it.bufs[0].size for it in create_schedule([part.lazydata])[0]] == [12]
  both, _ = create_schedule([x.lazydata, x[:3].lazydata])  # the whole value is asked for: its part needs no kernel
  assert [it.bufs[0].size for it in both] == [12]
  np.testing.assert_equal(part.numpy(), np.arange(3) * 2.0)

@pytest.mark.parametrize("fn", [lambda a: a.sum(2).shrink(((0, 0), None)) + 1,
                                lambda a: a.sum(2, keepdim=True)[1:1].contiguous(),
                                lambda a: (a @ Tensor.ones(3, 2))[:, 4:] * 2])
def test_empty_view_of_a_reduce(fn) -> None:
  # the kernel ran in the reduce's shape, which an empty view of it is no reshape of: an internal AssertionError
  out = fn(Tensor.ones(2, 4, 3)).realize()
  assert 0 in out.shape and out.numpy().size == 0

@pytest.mark.parametrize("fn,want", [
  (lambda a: a.sum(2)[:1] + 1, lambda a: a.sum(2)[:1] + 1),
  (lambda a: a.sum(2)[:2].contiguous(), lambda a: a.sum(2)[:2]),
  (lambda a: (a.reshape(56, 3) @ Tensor.ones(3, 5))[:3] * 2, lambda a: (a.reshape(56, 3) @ np.ones((3, 5)))[:3] * 2),
  (lambda a: a.sum(2).reshape(7, 1, 8).diagonal(0, 1, 0).contiguous(), lambda a: a.sum(2)[:1].T)])
def test_prefix_view_of_a_reduce(fn, want) -> None:
  # a view that reads the first elements of a reduce is contiguous, but no reshape of it: the kernel ran in the
  # reduce's shape and failed with an internal AssertionError (reshape changes the size)
  x = np.arange(7 * 8 * 3, dtype=np.float32).reshape(7, 8, 3)
  np.testing.assert_allclose(fn(Tensor(x)).numpy(), want(x))

# each of these made the scheduler loop forever: the contiguous or assign walked into its value although that value
# was materialized itself, took its reduce as its own, and the reduce's own kernel then asked for it to be materialized
# again (already was), round after round; so they run in a process of their own, with a time limit
_MATERIALIZED_VALUE_OF_A_COPY = """
import numpy as np
from lazytensor import Tensor
from lazytensor.schedule.scheduler import create_schedule
a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
a[0:1].assign(a.sum(0, keepdim=True))
print(a.tolist())
s = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).sum(0, keepdim=True)
items, _ = create_schedule([s.lazydata, s.contiguous().lazydata])
print([sum(u.op.name == "REDUCE_AXIS" for u in it.ast.toposort) for it in items])
t1 = (Tensor(np.array([[1, 2, 3], [4, 5, 6]], np.int32)) * 2).unsqueeze(1)
t1.assign(t1 * 3)
t5 = t1[[0, 0]]
t5.fill_(6)
print(t5.tolist(), t1.tolist())
"""

def test_a_copy_of_a_materialized_value_is_scheduled() -> None:
  run = subprocess.run([sys.executable, "-c", _MATERIALIZED_VALUE_OF_A_COPY], capture_output=True, text=True,
                       timeout=60)
  assert run.returncode == 0, run.stderr[-2000:]
  # the contiguous of a reduce realized beside it copies the reduce's buffer: one kernel reduces, not two
  assert run.stdout.splitlines() == ["[[3.0, 5.0, 7.0], [3.0, 4.0, 5.0]]", "[1, 0]",
                                     "[[[6, 6, 6]], [[6, 6, 6]]] [[[6, 12, 18]], [[24, 30, 36]]]"]

def test_finding_what_to_materialize_walks_each_kernel_a_few_times_not_once_per_node_found(monkeypatch) -> None:
  # each node found to be materialized changes only the kernels that reach it: the walks go on from the first of
  # those. Every kernel walked again for each node made GPT-2's training step quadratic (64 s for its 1362 kernels);
  # here 8 layers, forward and backward: 1563 walks for 81 kernels before, 390 now, the same kernels
  from lazytensor import Context
  from lazytensor.schedule import materialize
  walks = [0]
  def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
    walks[0] += 1
    return walk(*args, **kwargs)
  walk = materialize._walk_kernel
  monkeypatch.setattr(materialize, "_walk_kernel", counted)
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((32, 64), dtype=np.float32)).realize()
  ws = [Tensor(rng.standard_normal((64, 64), dtype=np.float32) / 8, requires_grad=True).realize() for _ in range(8)]
  h = x
  for w in ws: h = (h + (h @ w).gelu()).layernorm()
  loss = h.softmax(1).sum().backward()
  with Context(SCHEDULE_CACHE=0): items, _ = create_schedule([t.lazydata for t in (loss, *(w.grad for w in ws))])
  assert len(items) == 81 and walks[0] <= 6 * len(items)
