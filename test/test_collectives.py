"""lazytensor.parallel.collectives named by mesh axis: on a 2x2 and a 2x2x2 DeviceMesh of CPU:0..7, each collective
runs inside each group of devices along the named axes (against numpy), keeps its copies inside those groups, and
refuses axes the mesh does not have."""
from __future__ import annotations

import numpy as np
import pytest

from lazytensor import DeviceMesh, GlobalCounters, Tensor
from lazytensor.parallel import collectives as c
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.graph import multi_leaves
from lazytensor.uop.ops import Ops

MESH2 = DeviceMesh(tuple(f"CPU:{i}" for i in range(4)), shape=(2, 2), names=("dp", "tp"))
MESH3 = DeviceMesh(tuple(f"CPU:{i}" for i in range(8)), shape=(2, 2, 2), names=("pp", "dp", "tp"))
CASES = [(MESH2, "tp"), (MESH2, "dp"), (MESH2, None), (MESH3, "dp"), (MESH3, ("pp", "tp")), (MESH3, None)]
IDS = ["2x2-tp", "2x2-dp", "2x2-all", "2x2x2-dp", "2x2x2-pp,tp", "2x2x2-all"]

def _stacked(mesh: DeviceMesh, rows: int = 6) -> tuple[Tensor, np.ndarray]:
  """A stack on mesh of a different (rows, 3) value per device, and the numpy array of shape (*mesh.shape, rows, 3)."""
  rng = np.random.default_rng(0)
  devices = [f"CPU:{i}" for i in range(int(np.prod(mesh.shape)))]
  arrays = [rng.standard_normal((rows, 3)).astype(np.float32) for _ in devices]
  return c.stack([Tensor(a, device=d) for a, d in zip(arrays, devices)], mesh), np.stack(arrays).reshape(
    *mesh.shape, rows, 3)

def _dims(mesh: DeviceMesh, axis: str | tuple[str, ...] | None) -> tuple[int, ...]:
  names = mesh.names if axis is None else (axis,) if isinstance(axis, str) else axis
  return tuple(mesh.names.index(n) for n in names)

def _left(mesh: DeviceMesh, dims: tuple[int, ...]) -> tuple[str | None, ...]:
  """The spec of the stack dimensions of the mesh axes that a collective over `dims` does not reduce away."""
  return tuple(n for i, n in enumerate(mesh.names) if i not in dims)

def _named(mesh: DeviceMesh, dims: tuple[int, ...]) -> str | tuple[str, ...]:
  names = tuple(mesh.names[i] for i in dims)
  return names[0] if len(names) == 1 else names

def _groups(mesh: DeviceMesh, dims: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
  """The group of each device (by name) along the mesh axes `dims`: devices that agree on every other axis."""
  out = {}
  for i, d in enumerate(("CPU", *(f"CPU:{j}" for j in range(1, int(np.prod(mesh.shape)))))):
    coords = c.unravel(mesh.shape, i)
    out[d] = tuple(x for k, x in enumerate(coords) if k not in dims)
  return out

def _copies_stay_in_groups(t: Tensor, mesh: DeviceMesh, dims: tuple[int, ...]) -> None:
  items, _ = create_schedule([t.lazydata])
  copies = [(str(i.bufs[1].device), str(i.bufs[0].device)) for i in items if i.ast.op is Ops.COPY]
  group = _groups(mesh, dims)
  assert copies and all(group[a] == group[b] for a, b in copies), copies

@pytest.mark.parametrize("mesh,axis", CASES, ids=IDS)
def test_all_reduce(mesh: DeviceMesh, axis: str | tuple[str, ...] | None) -> None:
  dims = _dims(mesh, axis)
  t, a = _stacked(mesh)
  _copies_stay_in_groups(c.all_reduce(t, mesh=mesh, axis=axis), mesh, dims)
  for op, ref in (("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)):
    r = c.all_reduce(t, op, mesh=mesh, axis=axis)
    np.testing.assert_allclose(r.numpy(), ref(a, axis=dims), rtol=1e-5, atol=1e-5)
    assert r.device == mesh.devices and mesh.spec(r) == (*_left(mesh, dims), None, None)
  # each device holds its own group's sum: device i at coords (.., x, ..) holds the sum at its unreduced coords
  r = c.all_reduce(t, mesh=mesh, axis=axis).realize()
  for i, leaf in enumerate(multi_leaves(r.lazydata)):
    at = tuple(x for k, x in enumerate(c.unravel(mesh.shape, i)) if k not in dims)
    np.testing.assert_allclose(Tensor(leaf).numpy().reshape(6, 3), a.sum(dims)[at], rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("mesh,axis", CASES, ids=IDS)
def test_all_gather_and_all_to_all(mesh: DeviceMesh, axis: str | tuple[str, ...] | None) -> None:
  dims = _dims(mesh, axis)
  t, a = _stacked(mesh)
  k = len(mesh.shape)
  g = c.all_gather(t, mesh=mesh, axis=axis)
  np.testing.assert_equal(g.numpy(), a)
  assert mesh.spec(g) == (*(None if i in dims else n for i, n in enumerate(mesh.names)), None, None)
  x = c.all_to_all(t, mesh=mesh, axis=axis)
  _copies_stay_in_groups(x, mesh, dims)
  np.testing.assert_equal(x.numpy(), a)
  assert mesh.spec(x)[:k + 1] == (*(None if i in dims else n for i, n in enumerate(mesh.names)), _named(mesh, dims))

@pytest.mark.parametrize("mesh,axis", CASES, ids=IDS)
@pytest.mark.parametrize("rows", [8, 5], ids=["even", "uneven"])
def test_reduce_scatter(mesh: DeviceMesh, axis: str | tuple[str, ...] | None, rows: int) -> None:
  dims = _dims(mesh, axis)
  t, a = _stacked(mesh, rows)
  r = c.reduce_scatter(t, mesh=mesh, axis=axis)
  _copies_stay_in_groups(r, mesh, dims)
  np.testing.assert_allclose(r.numpy(), a.sum(dims), rtol=1e-5, atol=1e-5)
  assert mesh.spec(r) == (*_left(mesh, dims), _named(mesh, dims), None)
  np.testing.assert_allclose(c.reduce_scatter(t, "max", mesh=mesh, axis=axis).numpy(), a.max(dims))

@pytest.mark.parametrize("mesh,axis", CASES, ids=IDS)
def test_broadcast(mesh: DeviceMesh, axis: str | tuple[str, ...] | None) -> None:
  dims = _dims(mesh, axis)
  t, a = _stacked(mesh)
  n = int(np.prod([mesh.shape[i] for i in dims]))
  for src in (0, n - 1):
    b = c.broadcast(t, src, mesh=mesh, axis=axis)
    at = dict(zip(dims, c.unravel([mesh.shape[i] for i in dims], src)))
    np.testing.assert_equal(b.numpy(), a[tuple(at.get(i, slice(None)) for i in range(len(mesh.shape)))])
    assert b.device == mesh.devices and mesh.spec(b) == (*_left(mesh, dims), None, None)

@pytest.mark.parametrize("mesh", [MESH2, MESH3], ids=["2x2", "2x2x2"])
def test_stack_and_unstack(mesh: DeviceMesh) -> None:
  t, a = _stacked(mesh)
  assert t.shape == (*mesh.shape, 6, 3) and mesh.spec(t) == (*mesh.names, None, None)
  for i, v in enumerate(c.unstack(t, mesh)):
    assert v.device == ("CPU" if i == 0 else f"CPU:{i}")
    np.testing.assert_equal(v.numpy(), a.reshape(-1, 6, 3)[i])

def test_gradient_of_an_all_reduce_over_one_axis() -> None:
  leaves = [Tensor([float(i)], device=f"CPU:{i}", requires_grad=True) for i in range(4)]
  r = c.all_reduce(c.stack(leaves, MESH2), mesh=MESH2, axis="tp")  # (dp, 1): row 0 = x0 + x1, row 1 = x2 + x3
  (r * Tensor([[1.0], [10.0]]).shard(MESH2, ("dp", None))).sum().backward()
  assert [leaf.grad.numpy().tolist() for leaf in leaves if leaf.grad is not None] == [[1.0], [1.0], [10.0], [10.0]]

def test_flat_and_mesh_forms_agree_on_the_whole_mesh() -> None:
  t, a = _stacked(MESH2)
  flat = c.stack(c.unstack(t, MESH2))
  np.testing.assert_allclose(c.all_reduce(flat).numpy(), c.all_reduce(t, mesh=MESH2).numpy(), rtol=1e-6)
  np.testing.assert_allclose(c.reduce_scatter(flat).numpy(), a.sum((0, 1)), rtol=1e-5, atol=1e-5)

def test_bad_mesh_collectives() -> None:
  t, _ = _stacked(MESH2)
  with pytest.raises(ValueError, match=r"'ep' is not an axis of the mesh; its axes are \('dp', 'tp'\)"):
    c.all_reduce(t, mesh=MESH2, axis="ep")
  with pytest.raises(ValueError, match=r"'x' is not an axis of the mesh; its axes are \('pp', 'dp', 'tp'\)"):
    c.all_gather(_stacked(MESH3)[0], mesh=MESH3, axis=("dp", "x"))
  with pytest.raises(TypeError, match="needs the mesh"): c.all_reduce(t, axis="tp")
  with pytest.raises(ValueError, match="stack on the mesh"):
    c.all_reduce(Tensor.ones(2, 2, 3).shard(MESH2, ("dp", None, "tp")), mesh=MESH2, axis="tp")
  with pytest.raises(ValueError, match="stack on the mesh"): c.all_reduce(t, mesh=MESH3, axis="tp")
  with pytest.raises(IndexError, match="src 2"): c.broadcast(t, 2, mesh=MESH2, axis="tp")
  scalars = c.stack([Tensor(1.0, device=f"CPU:{i}") for i in range(4)], MESH2)
  with pytest.raises(ValueError, match="no axis to scatter"): c.reduce_scatter(scalars, mesh=MESH2, axis="tp")
  with pytest.raises(ValueError, match="one value per device of the mesh"): c.stack([Tensor([1.0])], MESH2)

def test_collectives_of_a_lazy_value_on_a_mesh_run_nothing_until_realized() -> None:
  # the check that a value is a stack on the mesh reads its layout from its graph after the multi pass: it realized
  # the value at every call before (a schedule and its kernels, and the value kept from fusing with the collective)
  t, a = _stacked(MESH2)
  lazy = t * 2 + 1
  for fn in (c.all_reduce, c.all_gather, c.reduce_scatter, c.broadcast, c.all_to_all):
    GlobalCounters.reset()
    fn(lazy, mesh=MESH2, axis="tp")
    assert GlobalCounters.kernel_count == 0 and lazy.lazydata.op is not Ops.MULTI, fn.__name__
  r = c.all_reduce(lazy, mesh=MESH2, axis="tp").realize()
  kernels = GlobalCounters.kernel_count
  GlobalCounters.reset()
  (_stacked(MESH2)[0] * 2 + 1).sum(1).realize()  # the same reduce written out, on new memory
  assert kernels == GlobalCounters.kernel_count, (kernels, GlobalCounters.kernel_count)
  np.testing.assert_allclose(r.numpy(), (a * 2 + 1).sum(1), rtol=1e-5)
