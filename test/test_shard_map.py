"""shard_map on CPU:0..3: each collective against numpy on a 1-D and a 2-D mesh, tuple spec entries, gradients through
every collective and a Megatron MLP against one device, and the errors (check_rep, bad axis names, devices that call
different collectives)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import DeviceMesh, Tensor, shard_map
from lazytensor.parallel.shard_map import (
  all_gather,
  all_to_all,
  axis_index,
  pmax,
  pmean,
  pmin,
  ppermute,
  psum,
  psum_scatter,
)

D4 = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
LINE = DeviceMesh(D4, names=("i",))
GRID = DeviceMesh(D4, shape=(2, 2), names=("dp", "tp"))
RNG = np.random.default_rng(0)

def rand(*shape: int) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)

def blocks(a: np.ndarray, n: int, axis: int = 0) -> list[np.ndarray]: return np.split(a, n, axis)

# (f, in spec, out spec, input shape, what numpy says the result is)
LINE_CASES: dict[str, tuple[Callable[[Tensor], Tensor], object, object, tuple[int, ...], Callable]] = {
  "psum": (lambda x: psum(x, "i"), ("i",), None, (8, 3), lambda a: sum(blocks(a, 4))),
  "pmean": (lambda x: pmean(x, "i"), ("i",), None, (8, 3), lambda a: sum(blocks(a, 4)) / 4),
  "pmax": (lambda x: pmax(x, "i"), ("i",), None, (8, 3), lambda a: np.max(blocks(a, 4), 0)),
  "pmin": (lambda x: pmin(x, "i"), ("i",), None, (8, 3), lambda a: np.min(blocks(a, 4), 0)),
  "all_gather": (lambda x: all_gather(x, "i", axis=1), ("i",), ("i",), (8, 3),
                 lambda a: np.concatenate([np.stack(blocks(a, 4), 1)] * 4)),
  "all_gather_tiled": (lambda x: all_gather(x, "i", axis=1, tiled=True), ("i",), ("i",), (8, 3),
                       lambda a: np.concatenate([np.concatenate(blocks(a, 4), 1)] * 4)),
  "psum_scatter": (lambda x: psum_scatter(x, "i"), ("i",), ("i",), (16, 3),
                   lambda a: sum(blocks(a, 4)).reshape(12)),
  "psum_scatter_tiled": (lambda x: psum_scatter(x, "i", scatter_dimension=1, tiled=True), (None, "i"), (None, "i"),
                         (3, 32), lambda a: sum(blocks(a, 4, 1))),
  "all_to_all_tiled": (lambda x: all_to_all(x, "i", split_axis=1, concat_axis=0, tiled=True), ("i",), (None, "i"),
                       (8, 8), lambda a: a),
  "all_to_all": (lambda x: all_to_all(x, "i", split_axis=0, concat_axis=1), ("i",), ("i",), (16, 3),
                 lambda a: np.concatenate([np.stack([b[j] for b in blocks(a, 4)], 1) for j in range(4)])),
  "ppermute": (lambda x: ppermute(x, "i", [(k, (k + 1) % 4) for k in range(4)]), ("i",), ("i",), (8, 3),
               lambda a: np.roll(a, 2, 0)),
  "ppermute_partial": (lambda x: ppermute(x, "i", [(0, 3)]), ("i",), ("i",), (8, 3),
                       lambda a: np.concatenate([np.zeros((6, 3), np.float32), a[:2]])),
  "axis_index": (lambda x: x + axis_index("i"), ("i",), ("i",), (8, 3),
                 lambda a: a + np.repeat(np.arange(4), 2)[:, None]),
}

@pytest.mark.parametrize("name", list(LINE_CASES))
def test_collective_on_a_line(name: str) -> None:
  f, in_spec, out_spec, shape, want = LINE_CASES[name]
  a = rand(*shape)
  got = shard_map(f, LINE, in_specs=(in_spec,), out_specs=out_spec)(Tensor(a))
  np.testing.assert_allclose(got.numpy(), want(a), atol=1e-5)

def test_collectives_on_a_grid() -> None:
  a = rand(4, 6)
  rows = [blocks(r, 2, 1) for r in blocks(a, 2)]  # rows[dp][tp]
  def run(f: Callable[[Tensor], Tensor], out_spec: object) -> np.ndarray:
    return shard_map(f, GRID, in_specs=(("dp", "tp"),), out_specs=out_spec)(Tensor(a)).numpy()
  # along tp: within each row of the mesh only
  np.testing.assert_allclose(run(lambda x: psum(x, "tp"), ("dp",)), np.concatenate([r[0] + r[1] for r in rows]))
  # along dp: between the devices at the same place of each row
  np.testing.assert_allclose(run(lambda x: psum(x, "dp"), (None, "tp")), np.concatenate([rows[0][t] + rows[1][t]
                                                                                          for t in range(2)], 1))
  np.testing.assert_allclose(run(lambda x: psum(x, ("dp", "tp")), None), sum(b for r in rows for b in r))
  # all_gather's result varies along the axis it gathers over (JAX): out_specs names it; columns of a per tp device
  gathered = run(lambda x: all_gather(x, "dp", tiled=True), ("tp", "dp"))
  np.testing.assert_allclose(gathered, np.concatenate([np.concatenate([a[:, :3]] * 2, 1),
                                                       np.concatenate([a[:, 3:]] * 2, 1)]))
  index = run(lambda x: x * 0 + axis_index(("dp", "tp")), ("dp", "tp"))
  np.testing.assert_equal(index, np.repeat(np.repeat(np.arange(4).reshape(2, 2), 2, 0), 3, 1))
  # a tuple axis name, minor axis first: tp-major order
  index = run(lambda x: x * 0 + axis_index(("tp", "dp")), ("dp", "tp"))
  np.testing.assert_equal(index, np.repeat(np.repeat(np.array([[0, 2], [1, 3]]), 2, 0), 3, 1))

def test_tuple_spec_entries() -> None:
  a = np.arange(24, dtype=np.float32).reshape(8, 3)
  x = Tensor(a).shard(GRID, (("dp", "tp"), None)).realize()
  assert GRID.spec(x) == (("dp", "tp"), None)
  np.testing.assert_equal([p.numpy() for p in _leaves(x)], blocks(a, 4))  # dp-major, then tp
  np.testing.assert_allclose((x * 2).sum(0).numpy(), (a * 2).sum(0))
  f = shard_map(lambda b: b * 10 + axis_index(("dp", "tp")), GRID, in_specs=((("dp", "tp"),),),
                out_specs=(("dp", "tp"), None))
  np.testing.assert_allclose(f(Tensor(a)).numpy(), a * 10 + np.repeat(np.arange(4), 2)[:, None])
  with pytest.raises(ValueError, match=r"in the mesh's order \('dp', 'tp'\)"):
    Tensor(a).shard(GRID, (("tp", "dp"), None))

def _leaves(x: Tensor) -> list[Tensor]:
  from lazytensor.uop.graph import multi_leaves
  return [Tensor(u) for u in multi_leaves(x.lazydata)]

# values the same on every device meeting values that vary (a pvary): gradients summed over the devices, or not
LINE_CASES.update({
  "replicated_in_and_out": (lambda x: x * 2, None, None, (2, 3), lambda a: a * 2),
  "psum_of_replicated": (lambda x: psum(x, "i"), None, None, (2, 3), lambda a: a * 4),
  "replicated_meets_varying": (lambda x: x * (axis_index("i") + 1), None, ("i",), (2, 3),
                               lambda a: np.concatenate([a * k for k in range(1, 5)])),
  "gather_of_replicated": (lambda x: all_gather(x.exp(), "i", tiled=True).sum(0), None, ("i",), (2, 3),
                           lambda a: np.concatenate([np.exp(a).sum(0) * 4] * 4)),
})

def jacobian(fn: Callable[[np.ndarray], np.ndarray], a: np.ndarray) -> np.ndarray:
  """d fn(a) / d a by central differences in float64 (exact for the piecewise linear maps here)."""
  a64, eps = a.astype(np.float64), 1e-4
  cols = []
  for k in range(a.size):
    e = np.zeros(a.size)
    e[k] = eps
    cols.append((fn(a64 + e.reshape(a.shape)) - fn(a64 - e.reshape(a.shape))).ravel() / (2 * eps))
  return np.stack(cols, 1)

@pytest.mark.parametrize("name", list(LINE_CASES))
def test_gradient_through_collective(name: str) -> None:
  # each collective's transpose: the gradient of sum(f(x) * r) is J^T r
  f, in_spec, out_spec, shape, want = LINE_CASES[name]
  a = rand(*shape)
  x = Tensor(a, requires_grad=True)
  out = shard_map(f, LINE, in_specs=(in_spec,), out_specs=out_spec)(x)
  r = rand(*out.shape)
  (out * Tensor(r).to(out.device)).sum().backward()
  assert x.grad is not None
  np.testing.assert_allclose(x.grad.numpy().ravel(), jacobian(want, a).T @ r.ravel(), atol=1e-4)

def mlp(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, reduce: Callable[[Tensor], Tensor]) -> Tensor:
  return reduce((x @ w1 + b1).relu() @ w2) + b2

MEGATRON = (("dp", None), (None, "tp"), ("tp",), ("tp", None), None)

@pytest.mark.parametrize("mesh", [DeviceMesh(D4, shape=(1, 4), names=("dp", "tp")), GRID], ids=["tp4", "dp2xtp2"])
def test_megatron_mlp_equals_one_device(mesh: DeviceMesh) -> None:
  # column-parallel w1 (and b1), row-parallel w2 with one psum; x replicated along tp, so its gradient needs the sum
  # over tp of each device's share (Megatron's pending reduction), which the pvary's transpose makes
  arrays = [rand(8, 16), rand(16, 32), rand(32), rand(32, 4), rand(4)]
  def loss_and_grads(spmd: bool) -> list[np.ndarray]:
    ts = [Tensor(a, requires_grad=True) for a in arrays]
    if spmd:
      fn = shard_map(lambda *p: mlp(*p, reduce=lambda h: psum(h, "tp")), mesh, in_specs=MEGATRON,
                     out_specs=("dp", None))
      out = fn(*ts)
    else: out = mlp(*ts, reduce=lambda h: h)
    loss = out.square().mean()
    loss.backward()
    return [out.numpy(), loss.numpy()] + [t.grad.numpy() for t in ts if t.grad is not None]
  want, got = loss_and_grads(False), loss_and_grads(True)
  assert len(got) == len(want) == 7
  for g, w in zip(got, want): np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-5)

def test_check_rep() -> None:
  a = rand(8, 3)
  with pytest.raises(ValueError, match=r"varies along the mesh axes \('i',\).*psum over them"):
    shard_map(lambda x: x * 2, LINE, in_specs=(("i",),), out_specs=None)(Tensor(a))
  with pytest.raises(ValueError, match=r"varies along the mesh axes \('i',\)"):  # all_gather's result varies (JAX)
    shard_map(lambda x: all_gather(x, "i", tiled=True), LINE, in_specs=(("i",),), out_specs=None)(Tensor(a))
  with pytest.raises(ValueError, match=r"varies along the mesh axes \('dp',\)"):
    shard_map(lambda x: psum(x, "tp"), GRID, in_specs=(("dp", "tp"),), out_specs=None)(Tensor(rand(4, 4)))
  # unchecked, the device at index 0 along the axis stands for the others, for the value and for the gradient
  x = Tensor(a, requires_grad=True)
  out = shard_map(lambda b: b * 2, LINE, in_specs=(("i",),), out_specs=None, check_rep=False)(x)
  np.testing.assert_allclose(out.numpy(), a[:2] * 2)
  out.sum().backward()
  assert x.grad is not None
  np.testing.assert_allclose(x.grad.numpy(), np.concatenate([np.full((2, 3), 2.0), np.zeros((6, 3))]))

def test_bad_axis_names_and_specs() -> None:
  x = Tensor(rand(8, 3))
  with pytest.raises(ValueError, match=r"psum: 'j' is not an axis of the mesh; its axes are \('i',\)"):
    shard_map(lambda b: psum(b, "j"), LINE, in_specs=(("i",),), out_specs=None)(x)
  with pytest.raises(ValueError, match="'model' is not an axis of the mesh"):
    shard_map(lambda b: b, GRID, in_specs=(("model",),), out_specs=("model",))(x)
  with pytest.raises(ValueError, match=r"dimension 1 \(3\) of the shape \(8, 3\) does not split evenly over the 4"):
    shard_map(lambda b: b, LINE, in_specs=((None, "i"),), out_specs=(None, "i"))(x)
  with pytest.raises(ValueError, match="in_specs must hold one spec per argument"):
    shard_map(lambda b: b, LINE, in_specs=(("i",), None), out_specs=None)(x)
  with pytest.raises(TypeError, match="argument 0: expected a spec"):
    shard_map(lambda b: b, LINE, in_specs=("i",), out_specs=None)(x)
  with pytest.raises(ValueError, match="psum: called outside shard_map"):
    psum(x, "i")
  with pytest.raises(ValueError, match="must be 4"):
    shard_map(lambda b: psum_scatter(b, "i"), LINE, in_specs=(("i",),), out_specs=("i",))(x)
  with pytest.raises(ValueError, match="ppermute: perm"):
    shard_map(lambda b: ppermute(b, "i", [(0, 1), (2, 1)]), LINE, in_specs=(("i",),), out_specs=("i",))(x)

def test_devices_that_call_different_collectives() -> None:
  # f may read values, so it may branch on them; every device must still call the same collectives
  def f(b: Tensor) -> Tensor:
    return psum(b, "i") if axis_index("i").item() == 0 else all_gather(b, "i")
  with pytest.raises(ValueError, match=r"same collectives in the same order.*CPU: psum.*CPU:1: all_gather"):
    shard_map(f, LINE, in_specs=(("i",),), out_specs=None)(Tensor(rand(8, 3)))
  def g(b: Tensor) -> Tensor:
    if axis_index("i").item() == 2: raise KeyError("device 2 gives up")
    return psum(b, "i")
  with pytest.raises(KeyError, match="device 2 gives up"):
    shard_map(g, LINE, in_specs=(("i",),), out_specs=None)(Tensor(rand(8, 3)))

def test_megatron_moves_only_the_input_gradient() -> None:
  # forward: psum's all-reduce (each of 4 devices receives the 3 others' partials); backward: psum's transpose moves
  # nothing, and the only copies are the all-reduce of x's gradient (x is replicated, each device has a share)
  mesh = DeviceMesh(D4, names=("tp",))
  specs = (None, (None, "tp"), ("tp",), ("tp", None), None)
  ts = [Tensor(rand(*s), requires_grad=True) for s in [(8, 16), (16, 32), (32,), (32, 4), (4,)]]
  for t, spec in zip(ts, specs): t.shard_(mesh, spec)
  out = shard_map(lambda *p: mlp(*p, reduce=lambda h: psum(h, "tp")), mesh, in_specs=specs, out_specs=None)(*ts)
  assert len(_copies(out)) == 12
  out.realize()
  grads = out.square().mean().gradient(*ts)
  assert len(_copies(*grads)) == 12 and [g.device for g in grads] == [t.device for t in ts]

def _copies(*ts: Tensor) -> list[object]:
  from lazytensor.schedule.scheduler import create_schedule
  from lazytensor.uop.ops import Ops
  items, _ = create_schedule([t.lazydata for t in ts])
  return [i for i in items if i.ast.op is Ops.COPY]

def test_docstring_examples() -> None:
  import doctest

  import lazytensor.parallel.shard_map
  result = doctest.testmod(lazytensor.parallel.shard_map, optionflags=doctest.ELLIPSIS)
  assert result.failed == 0 and result.attempted >= 5, result
