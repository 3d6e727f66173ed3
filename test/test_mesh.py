"""Tensors on a 2x2 DeviceMesh of CPU:0..3 (data x tensor parallel): every op gives what it gives on one device, the
layouts are the ones the specs ask for, and collectives run along one mesh axis only."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from lazytensor import DeviceMesh, Tensor
from lazytensor.nn.optim import SGD
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops

D4 = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
MESH = DeviceMesh(D4, shape=(2, 2), names=("dp", "tp"))
ROWS = (("CPU", "CPU:1"), ("CPU:2", "CPU:3"))  # canonical names: CPU:0 is CPU
Spec = tuple[str | None, ...] | None

def check_mesh(fn: Callable[..., Tensor], shapes: Sequence[tuple[int, ...]], specs: Sequence[Spec],
               atol: float = 1e-5) -> Tensor:
  """fn on inputs laid out on MESH by `specs` equals fn on one device; returns the mesh result."""
  rng = np.random.default_rng(0)
  arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  want = fn(*[Tensor(a) for a in arrays])
  got = fn(*[Tensor(a).shard(MESH, spec) for a, spec in zip(arrays, specs)])
  assert got.shape == want.shape and got.device == ROWS
  np.testing.assert_allclose(got.numpy(), want.numpy(), atol=atol, rtol=1e-5)
  return got

def _copies(*ts: Tensor) -> list[tuple[str, str]]:
  """(from, to) of each copy between devices that computing ts takes."""
  items, _ = create_schedule([t.lazydata for t in ts])
  return [(str(i.bufs[1].device), str(i.bufs[0].device)) for i in items if i.ast.op is Ops.COPY]

def test_mesh_layout() -> None:
  assert MESH.devices == ROWS and MESH.shape == (2, 2) and MESH.axis_size("tp") == 2
  assert DeviceMesh(D4, names=("x",)).devices == ("CPU", "CPU:1", "CPU:2", "CPU:3")
  assert DeviceMesh(D4, shape=(2, 1, 2)).devices == ((("CPU", "CPU:1"),), (("CPU:2", "CPU:3"),))

SPECS = [("dp", "tp"), ("tp", "dp"), ("dp", None), (None, "tp"), (None, None), None]

@pytest.mark.parametrize("spec", SPECS)
def test_pieces_hold_their_blocks(spec: Spec) -> None:
  a = np.arange(42, dtype=np.float32).reshape(6, 7)
  x = Tensor(a).shard(MESH, spec).realize()
  assert x.device == ROWS and MESH.spec(x) == (spec or (None, None))
  _check_blocks(x, a, spec)
  np.testing.assert_equal(x.numpy(), a)

@pytest.mark.parametrize("spec", SPECS)
def test_shard_in_place_takes_memory_of_its_own(spec: Spec) -> None:
  # the piece on the source's device was the source's memory (issue 24): writes into either reached that piece only
  a = np.arange(42, dtype=np.float32).reshape(6, 7)
  src = Tensor(a).realize()
  x = src.detach().shard_(MESH, spec)
  src.assign(src * 10).realize()
  _check_blocks(x, a, spec)
  x.assign(x + 1).realize()
  _check_blocks(x, a + 1, spec)
  np.testing.assert_equal(src.numpy(), a * 10)

def _check_blocks(x: Tensor, a: np.ndarray, spec: Spec) -> None:
  """Each device's piece of x, laid out on MESH by spec, is its block of a."""
  for i, row in enumerate(x.lazydata.src):
    for j, piece in enumerate(row.src):
      assert piece.device == ROWS[i][j]
      block = a
      for dim, name in enumerate(spec or ()):
        if name is not None:
          k = i if name == "dp" else j
          block = np.split(block, [(block.shape[dim] + 1) // 2], axis=dim)[k]  # 7 over 2 devices: 4, 3
      np.testing.assert_equal(Tensor(piece).numpy(), block)

def test_three_axis_mesh() -> None:
  mesh = DeviceMesh(D4, shape=(2, 1, 2), names=("dp", "pp", "tp"))
  rng = np.random.default_rng(3)
  xa, wa = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)
  out = (Tensor(xa).shard(mesh, ("dp", "tp")) @ Tensor(wa).shard(mesh, ("tp", "pp"))).relu().sum(0)
  assert mesh.spec(out) == ("pp",)
  np.testing.assert_allclose(out.numpy(), np.maximum(xa @ wa, 0).sum(0), atol=1e-5, rtol=1e-5)

def test_one_axis_mesh_is_a_plain_shard() -> None:
  mesh = DeviceMesh(D4, names=("dp",))
  x = Tensor.arange(10).shard(mesh, ("dp",))
  assert x.device == Tensor.arange(10).shard(D4, 0).device and x.bounds == ((0, 3), (3, 6), (6, 9), (9, 10))

@pytest.mark.parametrize("rows", [8, 5], ids=["even", "uneven"])
class TestForward:
  def test_elementwise_and_resharding(self, rows: int) -> None:
    shapes = [(rows, 6), (rows, 6)]
    out = check_mesh(lambda a, b: (a * b).exp() + a, shapes, [("dp", "tp"), ("dp", "tp")])
    assert MESH.spec(out) == ("dp", "tp")
    check_mesh(lambda a, b: a - b, shapes, [("dp", None), (None, "tp")])
    check_mesh(lambda a, b: a * b, shapes, [("tp", "dp"), ("dp", "tp")])
    check_mesh(lambda a, b: a + b, [(rows, 6), (6,)], [("dp", "tp"), ("tp",)])  # a row broadcast over the batch

  def test_reductions_and_softmax(self, rows: int) -> None:
    for spec in [("dp", "tp"), ("dp", None), (None, "tp")]:
      for axis in (0, 1, None):
        check_mesh(lambda a, ax=axis: a.sum(ax), [(rows, 6)], [spec], atol=1e-4)
        check_mesh(lambda a, ax=axis: a.max(ax), [(rows, 6)], [spec])
    assert MESH.spec(check_mesh(lambda a: a.sum(1), [(rows, 6)], [("dp", "tp")], atol=1e-4)) == ("dp",)
    check_mesh(lambda a: a.softmax(1), [(rows, 6)], [("dp", "tp")])
    check_mesh(lambda a: a.log_softmax(0), [(rows, 6)], [("dp", "tp")])

  def test_matmuls(self, rows: int) -> None:
    shapes = [(rows, 6), (6, 10)]
    out = check_mesh(lambda x, w: x @ w, shapes, [("dp", None), (None, "tp")], atol=1e-4)  # batch x column parallel
    assert MESH.spec(out) == ("dp", "tp")
    out = check_mesh(lambda x, w: x @ w, shapes, [("dp", "tp"), ("tp", None)], atol=1e-4)  # batch x row parallel
    assert MESH.spec(out) == ("dp", None)
    check_mesh(lambda x, w: x @ w, shapes, [("tp", "dp"), ("dp", "tp")], atol=1e-4)

  def test_movement(self, rows: int) -> None:
    spec = [("dp", "tp", None)]
    check_mesh(lambda a: a.reshape(rows, 12) * 2, [(rows, 4, 3)], spec)
    check_mesh(lambda a: a.permute(2, 0, 1) + 1, [(rows, 4, 3)], spec)
    check_mesh(lambda a: a.pad(((1, 2), (0, 1), (0, 0))) + 1, [(rows, 4, 3)], spec)
    check_mesh(lambda a: a[1:, 1:3].flip(0) * 2, [(rows, 4, 3)], spec)
    check_mesh(lambda a: a.reshape(3, rows * 4) + 1, [(rows, 4, 3)], spec)  # crosses the slices: gathered

def test_reduce_runs_along_one_mesh_axis() -> None:
  x = Tensor.ones(4, 6).shard(MESH, ("dp", "tp")).realize()
  # summing over the "tp" dimension: an all-reduce in each row of the mesh, nothing crosses between rows
  assert sorted(_copies(x.sum(1))) == [("CPU", "CPU:1"), ("CPU:1", "CPU"), ("CPU:2", "CPU:3"), ("CPU:3", "CPU:2")]
  # over the "dp" dimension: between the devices at the same place of each row
  assert sorted(_copies(x.sum(0))) == [("CPU", "CPU:2"), ("CPU:1", "CPU:3"), ("CPU:2", "CPU"), ("CPU:3", "CPU:1")]
  assert x.sum(1).numpy().tolist() == [6.0] * 4 and x.sum(0).numpy().tolist() == [4.0] * 6

def test_gradients_follow_the_layout() -> None:
  rng = np.random.default_rng(2)
  xa, wa = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
  def grads(on_mesh: bool) -> list[np.ndarray]:
    x, w = Tensor(xa, requires_grad=True), Tensor(wa, requires_grad=True)
    if on_mesh: w.shard_(MESH, (None, "tp"))
    ((x.shard(MESH, ("dp", None)) if on_mesh else x) @ w).relu().square().mean().backward()
    assert x.grad is not None and w.grad is not None
    if on_mesh: assert w.grad.device == ROWS and MESH.spec(w.grad) == (None, "tp")
    return [x.grad.numpy(), w.grad.numpy()]
  for got, want in zip(grads(True), grads(False)): np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)

def _mlp_steps(on_mesh: bool, steps: int) -> tuple[list[float], list[np.ndarray]]:
  """A Megatron MLP (column- then row-parallel) on a batch split along "dp", trained with SGD."""
  rng = np.random.default_rng(0)
  xa, ya = rng.standard_normal((10, 6)).astype(np.float32), rng.standard_normal((10, 3)).astype(np.float32)
  w1, w2 = (Tensor(rng.standard_normal(s).astype(np.float32) / 3, requires_grad=True) for s in ((6, 16), (16, 3)))
  x, y = Tensor(xa), Tensor(ya)
  if on_mesh:
    x, y = x.shard(MESH, ("dp", None)), y.shard(MESH, ("dp", None))
    w1.shard_(MESH, (None, "tp"))
    w2.shard_(MESH, ("tp", None))
  opt = SGD([w1, w2], lr=0.1, momentum=0.9)
  losses = []
  for _ in range(steps):
    opt.zero_grad()
    loss = ((x @ w1).relu() @ w2 - y).square().mean().backward()
    opt.step()
    losses.append(loss.item())
  if on_mesh: assert MESH.spec(w1) == (None, "tp") and MESH.spec(w2) == ("tp", None)
  return losses, [w1.numpy(), w2.numpy()]

def test_dp_x_tp_mlp_training_matches_one_device() -> None:
  (got_losses, got_w), (want_losses, want_w) = _mlp_steps(True, 3), _mlp_steps(False, 3)
  np.testing.assert_allclose(got_losses, want_losses, atol=1e-5, rtol=1e-5)
  for g, w in zip(got_w, want_w): np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)

def test_mlp_step_moves_only_what_it_must() -> None:
  x = Tensor.ones(4, 6).shard(MESH, ("dp", None)).realize()
  w1 = Tensor.ones(6, 8, requires_grad=True).shard_(MESH, (None, "tp"))
  w2 = Tensor.ones(8, 2, requires_grad=True).shard_(MESH, ("tp", None))
  out = (x @ w1).relu() @ w2
  # forward: one all-reduce of the row-parallel partial sums inside each "tp" pair, nothing between the rows
  assert sorted(_copies(out)) == [("CPU", "CPU:1"), ("CPU:1", "CPU"), ("CPU:2", "CPU:3"), ("CPU:3", "CPU:2")]
  out.sum().backward()
  assert w1.grad is not None and w2.grad is not None
  # backward: the weight gradients are summed over the batch between the "dp" pairs; the loss over both axes
  pairs = set(_copies(w1.grad, w2.grad))
  assert {("CPU", "CPU:2"), ("CPU:2", "CPU"), ("CPU:1", "CPU:3"), ("CPU:3", "CPU:1")} <= pairs
  assert not pairs & {("CPU", "CPU:3"), ("CPU:3", "CPU"), ("CPU:1", "CPU:2"), ("CPU:2", "CPU:1")}

def test_bad_input() -> None:
  with pytest.raises(ValueError, match=r"shape \(2, 3\) holds 6 devices, but 4"): DeviceMesh(D4, shape=(2, 3))
  with pytest.raises(ValueError, match="must be positive"): DeviceMesh(D4, shape=(4, 0))
  with pytest.raises(ValueError, match="2 distinct strings"): DeviceMesh(D4, shape=(2, 2), names=("dp", "dp"))
  with pytest.raises(ValueError, match="2 distinct strings"): DeviceMesh(D4, shape=(2, 2), names=("dp",))
  with pytest.raises(ValueError, match="more than once"): DeviceMesh(("CPU:0", "CPU:0"))
  with pytest.raises(ValueError, match="unknown device"): DeviceMesh(("CPU:0", "TPU:0"))
  with pytest.raises(TypeError, match="flat tuple"): DeviceMesh((("CPU:0", "CPU:1"), ("CPU:2", "CPU:3")))
  x = Tensor.ones(4, 6)
  with pytest.raises(ValueError, match="'pp' is not an axis of the mesh; its axes are \\('dp', 'tp'\\)"):
    x.shard(MESH, ("pp", None))
  with pytest.raises(ValueError, match="3 entries for a tensor of 2 dimensions"): x.shard(MESH, ("dp", None, None))
  with pytest.raises(ValueError, match="slices two dimensions along 'dp'"): x.shard(MESH, ("dp", "dp"))
  with pytest.raises(TypeError, match="spec of one mesh axis name"): x.shard(MESH, 0)
  with pytest.raises(TypeError, match="spec entry 1"): x.shard(MESH, (1, None))
  with pytest.raises(TypeError, match="axis must be an int"): x.shard(D4, ("dp", None))
  with pytest.raises(TypeError, match="use a DeviceMesh"): x.shard(ROWS, 0)
  with pytest.raises(ValueError, match="different devices"): x.shard(MESH, ("dp", None)) + x.shard(D4, 0)
  with pytest.raises(ValueError, match="different devices"): x.shard(MESH, ("dp", None)) + x
  with pytest.raises(ValueError, match="gather it first"): x.shard(MESH, ("dp", None)).shard(D4[:2], 0)
  with pytest.raises(ValueError, match="not on this mesh"): MESH.spec(x.shard(D4, 0))
  with pytest.raises(ValueError, match="not an axis"): MESH.axis_size("pp")

def test_reshard_and_gather() -> None:
  a = np.arange(24, dtype=np.float32).reshape(4, 6)
  x = Tensor(a).shard(MESH, ("dp", "tp"))
  for spec in [("tp", "dp"), (None, None), ("dp", None)]:
    y = x.shard(MESH, spec)
    assert MESH.spec(y) == spec
    np.testing.assert_equal(y.numpy(), a)
  np.testing.assert_equal(x.shard(D4, 1).numpy(), a)
  np.testing.assert_equal(x.to("CPU:3").numpy(), a)
  r = x.to(D4)
  assert r.device == ("CPU", "CPU:1", "CPU:2", "CPU:3") and r.shard_axis is None
  np.testing.assert_equal(r.numpy(), a)

def test_jit_replays_a_mesh_step() -> None:
  from lazytensor import TinyJit
  step = TinyJit(lambda x, w: (x @ w).sum(1).realize())
  rng = np.random.default_rng(6)
  for _ in range(4):
    xa, wa = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32)
    out = step(Tensor(xa).shard(MESH, ("dp", None)).realize(), Tensor(wa).shard(MESH, (None, "tp")).realize())
    assert MESH.spec(out) == ("dp",)
    np.testing.assert_allclose(out.numpy(), (xa @ wa).sum(1), atol=1e-5, rtol=1e-5)
  assert step.calls == 2
