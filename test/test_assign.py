"""Writing into realized tensors: assign (lazy, in place) and __setitem__ (now), with the hazards they bring."""
import contextlib
import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, torch

from lazytensor import GlobalCounters, Tensor, no_grad
from lazytensor.helpers import ArgumentError


def test_assign_writes_in_place_and_views_see_it() -> None:
  t = Tensor([1.0, 2.0, 3.0]).realize()
  view = t[1:]
  t.assign(t * 10).realize()
  assert t.tolist() == [10.0, 20.0, 30.0]
  assert view.tolist() == [20.0, 30.0]

def test_assign_is_one_kernel_into_the_same_buffer() -> None:
  t = Tensor([1.0, 2.0, 3.0]).realize()
  buf = t.lazydata.src[0]
  GlobalCounters.reset()
  t.assign(t + 1).realize()
  assert GlobalCounters.kernel_count == 1
  from lazytensor.runtime.device import buffer_map
  assert buffer_map[t.lazydata.src[0]] is buffer_map[buf]  # same memory, new node

def test_graphs_built_after_assign_see_new_values() -> None:
  t = Tensor([1.0, 2.0]).realize()
  (t + 1).realize()  # remembered: (t + 1) of the old contents
  t.assign(Tensor([5.0, 6.0])).realize()
  assert (t + 1).tolist() == [6.0, 7.0]

def test_readers_of_old_contents_run_before_the_assign() -> None:
  p = Tensor([1.0, 2.0, 3.0]).realize()
  q = p + 1  # built before the assign: p's old values
  p.assign(p * 2)
  Tensor.realize(p, q)
  assert q.tolist() == [2.0, 3.0, 4.0] and p.tolist() == [2.0, 4.0, 6.0]

def test_assign_reading_its_target_elsewhere_does_not_race() -> None:
  t = Tensor(np.arange(1000, dtype=np.float32)).realize()
  t.assign(t.flip(0)).realize()
  np.testing.assert_array_equal(t.numpy(), np.arange(1000, dtype=np.float32)[::-1])

def test_assign_checks_shape_and_casts_dtype() -> None:
  t = Tensor([1.0, 2.0]).realize()
  with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"): t.assign(Tensor([1.0, 2.0, 3.0]))
  assert t.assign(Tensor([3, 4])).realize().dtype == t.dtype and t.tolist() == [3.0, 4.0]
  assert t.assign(7.0).tolist() == [7.0, 7.0]

def test_assign_on_a_lazy_tensor_replaces_it() -> None:
  t = Tensor([1.0, 2.0]) * 2
  assert t.assign(Tensor([0.0, 1.0])).tolist() == [0.0, 1.0]

def test_assign_on_a_lazy_tensor_takes_the_value_not_the_memory() -> None:
  # it took the realized value's buffer (or the lazy value's node, realized into one buffer with it): a write into
  # either tensor reached the other (issue 24: a loaded, then replicated parameter kept a stale copy)
  src = Tensor([5.0, 6.0]).realize()
  t = Tensor([1.0, 2.0]) * 2
  t.assign(src.detach())
  t[0] = 9.0
  src.assign(src * 10).realize()
  assert t.tolist() == [9.0, 6.0] and src.tolist() == [50.0, 60.0]
  lazy = Tensor([5.0, 6.0]) * 1
  t = Tensor([1.0, 2.0]) * 2
  t.assign(lazy)
  Tensor.realize(t, lazy)
  t.add_(1)
  assert t.tolist() == [6.0, 7.0] and lazy.tolist() == [5.0, 6.0]

@pytest.mark.parametrize("index,value", [
  ((0,), 5.0), ((slice(1, None), 2), -1.0), ((Ellipsis, 0), [7.0, 8.0, 9.0]), ((slice(None, None, 2),), 3.0),
])
def test_setitem_matches_numpy(index, value) -> None:
  ref = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = Tensor(ref.copy()).realize()
  ref[index] = value
  t[index] = value
  np.testing.assert_array_equal(t.numpy(), ref)

def test_setitem_on_a_view_and_a_lazy_tensor() -> None:
  t = Tensor.arange(6).reshape(2, 3).float()  # lazy, and a reshape of a computed value
  t[1, 1] = 100.0
  assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 100.0, 5.0]]

def test_setitem_errors() -> None:
  t = Tensor.zeros(2, 3).contiguous().realize()
  with pytest.raises(ValueError, match="shape"): t[0] = Tensor([1.0, 2.0])
  with pytest.raises(IndexError): t[5] = 1.0

def test_two_assigns_before_realize() -> None:
  t = Tensor([1.0, 2.0]).realize()
  t.assign(t + 1)
  t.assign(t * 10)  # reads the first assign's result
  assert t.tolist() == [20.0, 30.0]
  t.assign(Tensor([0.0, 0.0]))
  t.assign(Tensor([4.0, 5.0]))  # a plain overwrite
  assert t.tolist() == [4.0, 5.0]

def test_values_built_before_an_assign_keep_the_old_contents() -> None:
  # as in an eager framework: a value computed from a buffer is the value of that moment, not of when it is read
  t = Tensor([1.0, 2.0, 3.0]).realize()
  doubled, total, view = t * 2, t.sum(), t[1:]
  t.assign(t + 10).realize()
  assert doubled.tolist() == [2.0, 4.0, 6.0] and total.item() == 6.0
  assert view.tolist() == [12.0, 13.0]  # a view is not a value of its own: it reads the buffer
  later = view * 1  # a value built from the view after the first assign: the second one must not change it
  t.assign(t * 0).realize()
  assert later.tolist() == [12.0, 13.0] and view.tolist() == [0.0, 0.0]

def test_setitem_keeps_values_built_before_it() -> None:
  a = Tensor([1.0, 2.0]).realize()
  b = a * 2
  a[0] = 5.0
  assert b.tolist() == [2.0, 4.0] and a.tolist() == [5.0, 2.0]

def test_readers_of_an_earlier_assign_run_before_a_later_one() -> None:
  # two assigns to one buffer in one schedule: whoever reads the first one's result reads it before the second
  t = Tensor([1.0, 2.0]).realize()
  first = t.assign(t + 1).lazydata
  reader = Tensor(first) * 10
  t.assign(t * 100)  # reads `first`: both assigns run in this schedule
  Tensor.realize(t, reader)
  assert reader.tolist() == [20.0, 30.0] and t.tolist() == [200.0, 300.0]

def test_readers_are_found_among_many_tensors_made_and_freed() -> None:
  # the registry of live tensors is pruned as tensors die: a reader made long before the assign is still found
  t = Tensor([1.0, 2.0]).realize()
  old = t * 3
  for _ in range(3000): (t + 1).realize()  # many tensors made and freed (more than a pruning round holds)
  t.assign(t * 0).realize()
  assert old.tolist() == [3.0, 6.0] and t.tolist() == [0.0, 0.0]

def test_memory_bits_go_back_with_their_buffers() -> None:
  # each buffer's bit in the read/write masks is given back when it is freed: masks stay as short as the live buffers
  bits = []
  for i in range(500):
    x = Tensor([float(i)]).realize()
    bits.append(x.lazydata.src[0].reads.bit_length())
    del x
  assert max(bits[100:]) <= max(bits[:100]) + 4

def test_an_assign_in_the_graph_of_a_reader_is_counted_as_its_write() -> None:
  # the value read by `reader` is an assign's result: realizing a second assign to that buffer computes it first
  a, b = Tensor([1.0, 2.0]).realize(), Tensor([10.0, 20.0]).realize()
  reader = Tensor(a.assign(b + 1).lazydata) * 2  # reads a's first new contents
  b.assign(b * 0)
  a.assign(Tensor([7.0, 7.0]))
  Tensor.realize(a, b)
  assert reader.tolist() == [22.0, 42.0] and a.tolist() == [7.0, 7.0] and b.tolist() == [0.0, 0.0]

def test_the_live_registry_forgets_tensors_as_they_die() -> None:
  from lazytensor.frontend.state import state
  t = Tensor([1.0, 2.0]).realize()
  gc.collect()  # tensors left in reference cycles by earlier tests would otherwise leave the registry mid-count
  gc.disable()
  try:
    before = len(state.live)
    kept = [t * i for i in range(100)]
    assert len(state.live) == before + 100
    del kept
    assert len(state.live) == before
  finally: gc.enable()

# ---- values that must not share memory, and writes through views (found by test/test_fuzz_compose.py) ----

def test_setitem_on_a_lazy_value_leaves_one_computed_alike_alone() -> None:
  # a and b are the same interned node: realizing a for the write used to give b the buffer too
  a, b = Tensor.arange(3), Tensor.arange(3)
  a[0] = 7
  assert a.tolist() == [7, 1, 2] and b.tolist() == [0, 1, 2]
  x = Tensor([1.0, 2.0]).realize()
  c, d = x * 3, x * 3
  c.realize()
  c[0] = 50.0  # d was built before c was realized: it is a value of its own, not a view of c's buffer
  assert c.tolist() == [50.0, 6.0] and d.tolist() == [3.0, 6.0]

def test_two_clones_have_buffers_of_their_own() -> None:
  x = Tensor([1.0, 2.0, 3.0]).realize()
  a, b = x.clone(), x.clone()
  a[0] = 70.0
  assert a.tolist() == [70.0, 2.0, 3.0] and b.tolist() == [1.0, 2.0, 3.0] and x.tolist() == [1.0, 2.0, 3.0]

def test_values_built_before_their_input_was_realized_and_assigned() -> None:
  # c reads a's lazy node, which a.realize() committed to a's buffer: the assign must not change c
  x = Tensor([1.0, 2.0, 3.0]).realize()
  a = x * 8
  c = a * 2
  a.realize()
  a.assign(Tensor([0.0, 0.0, 0.0])).realize()
  assert c.tolist() == [16.0, 32.0, 48.0] and a.tolist() == [0.0, 0.0, 0.0]

def test_views_of_a_lazy_value_see_writes_into_it() -> None:
  a = Tensor([1.0, 2.0, 3.0]).realize() * 4
  v = a[1:]  # taken before a has a buffer: a view of a all the same, as in torch
  a[0], a[2] = 50.0, 60.0
  assert a.tolist() == [50.0, 8.0, 60.0] and v.tolist() == [8.0, 60.0]

@pytest.mark.parametrize("write,want", [
  (lambda y: y.T.__setitem__(0, 5.0), [[5.0, 0.0, 0.0], [5.0, 0.0, 0.0]]),
  (lambda y: y[:, 1:].__setitem__(0, 3.0), [[0.0, 3.0, 3.0], [0.0, 0.0, 0.0]]),
  (lambda y: y[:, ::2].__setitem__(1, Tensor([7.0, 8.0])), [[0.0, 0.0, 0.0], [7.0, 0.0, 8.0]]),
  (lambda y: y.T.__setitem__((slice(None), 1), Tensor([1.0, 2.0, 3.0])), [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]),
  (lambda y: y.T.__setitem__(Tensor([0, 2]), -1.0), [[-1.0, 0.0, -1.0], [-1.0, 0.0, -1.0]]),
  (lambda y: y[1].__setitem__((), 4.0), [[0.0, 0.0, 0.0], [4.0, 4.0, 4.0]]),
  (lambda y: y.diagonal().__setitem__(1, 9.0), [[0.0, 0.0, 0.0], [0.0, 9.0, 0.0]]),
])
def test_setitem_through_a_strided_view_writes_the_base(write: Any, want: list[list[float]]) -> None:
  # as in torch: the write goes through the permuted or strided view into the buffer (it used to land in a copy)
  y = Tensor.zeros(2, 3).contiguous().realize()
  write(y)
  assert y.tolist() == want

def test_setitem_through_an_expanded_view_writes_a_copy() -> None:
  y = Tensor([1.0, 2.0]).realize()
  e = y.expand(2, 2)  # its elements share memory: the write goes to a copy of its own
  e[0, 0] = 9.0
  assert e.tolist() == [[9.0, 2.0], [1.0, 2.0]] and y.tolist() == [1.0, 2.0]

def test_chained_writes_reach_a_lazy_tensor() -> None:
  # y[1][2] = v writes y as in torch: y[1] is a view of y, which gets a buffer of its own first (the write used to
  # land in a buffer of the view's own)
  x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).realize()
  y = x.clone()
  y[1][2] = 0.0
  assert y.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]] and x.tolist()[1][2] == 6.0
  a = Tensor.arange(4)
  a.reshape(2, 2)[1, 1] = 9
  assert a.tolist() == [0, 1, 2, 9]
  z = x * 3
  w = z[1]  # taken before z is realized, written after
  z.realize()
  w[0] = 100.0
  assert z.tolist() == [[3.0, 6.0, 9.0], [100.0, 15.0, 18.0]] and w.tolist() == [100.0, 15.0, 18.0]

def _pad(t: Any, pad: tuple[int, ...], mode: str = "constant") -> Any:
  return t.pad(pad, mode=mode) if isinstance(t, Tensor) else torch.nn.functional.pad(t, pad, mode=mode)

# ops that torch documents as returning a copy: (name, the op on a lazytensor or a torch tensor)
COPY_OPS: list[tuple[str, Callable[[Any], Any]]] = [
  ("flip", lambda t: t.flip(0)), ("flip both", lambda t: t.flip(0, 1)), ("roll", lambda t: t.roll(1, 0)),
  ("roll by the size", lambda t: t.roll(3, 1)), ("roll flat", lambda t: t.roll(2)),
  ("repeat", lambda t: t.repeat(1, 1)),
  ("tile", lambda t: t.tile(1)), ("rot90", lambda t: t.rot90()), ("rot90 0", lambda t: t.rot90(0)),
  ("repeat_interleave", lambda t: t.repeat_interleave(1, 0)), ("pad 0", lambda t: _pad(t, (0, 0))),
  ("pad crop", lambda t: _pad(t, (-1, 0))), ("pad", lambda t: _pad(t, (1, 1))),
  ("pad reflect", lambda t: _pad(t, (1, 1), "reflect")), ("pad circular", lambda t: _pad(t, (0, 1), "circular")),
  ("cat of one", lambda t: t.cat() if isinstance(t, Tensor) else torch.cat([t])),
]

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
@pytest.mark.parametrize("name,op", COPY_OPS, ids=[n for n, _ in COPY_OPS])
@pytest.mark.parametrize("realized", [True, False], ids=["realized", "lazy"])
def test_copy_ops_are_not_views(name: str, op: Callable[[Any], Any], realized: bool) -> None:
  # a write into the result does not reach the input, a write into the input does not reach the result, and a view of
  # the result sees writes into it (and writes into the result), as in torch; flip's writes used to reach its input
  def run(base: Any) -> list[Any]:
    out = op(base)
    view = out[0]
    out[0, 0] = 50.0
    view[1] = 60.0
    base[1, 2] = 70.0
    return [base.tolist(), out.tolist(), view.tolist()]
  start = np.arange(6, dtype=np.float32).reshape(2, 3)
  assert run(Tensor(start).realize() if realized else Tensor(start) * 1) == run(torch.from_numpy(start.copy()))

def test_negative_step_slices_are_views() -> None:
  # x[::-1] is a view, as numpy's (torch has no negative steps): writes through it reach x
  x = Tensor.arange(4).float().contiguous().realize()
  r = x[::-1]
  r[0] = 9.0
  assert x.tolist() == [0.0, 1.0, 2.0, 9.0]
  x[1] = 5.0
  assert r.tolist() == [9.0, 2.0, 5.0, 0.0]

# writes into tensors computed from ones that require gradients: (name, fn(x, b, framework) writing b into x in place,
# and returning what the loss is taken of); x = a * 2 with a (2, 3) and b (3,)
def _index(fw: Any, values: list[int]) -> Any:
  return Tensor(values) if fw is Tensor else torch.tensor(values)

GRAD_WRITES: list[tuple[str, Callable[[Any, Any, Any], Any]]] = [
  ("int", lambda x, b, fw: (x.__setitem__(1, b), x)[1]),
  ("slice", lambda x, b, fw: (x.__setitem__((slice(None), slice(1, None)), b[:2]), x)[1]),
  ("scalar", lambda x, b, fw: (x.__setitem__((0, 2), 7.0), x)[1]),
  ("through a transpose", lambda x, b, fw: (x.T.__setitem__(1, b[:2]), x)[1]),
  ("into a view", lambda x, b, fw: (v := x[1], v.__setitem__(slice(0, 2), b[1:]), v + x[0])[2]),
  ("a view taken before", lambda x, b, fw: (v := x[:, 1:], x.__setitem__((1, 2), b[0]), v * 3)[2]),
  ("a realized tensor", lambda x, b, fw: (fw is Tensor and x.realize(), x.__setitem__(0, b * b), x)[2]),
  ("twice", lambda x, b, fw: (x.__setitem__(0, b), x.__setitem__((slice(None), 0), b[1:] * 3), x)[2]),
  ("int tensor", lambda x, b, fw: (x.__setitem__((slice(None), _index(fw, [2, 0])), b[:2].reshape(1, 2)), x)[1]),
  ("bool mask", lambda x, b, fw: (x.__setitem__(x > 3, b[0]), x)[1]),
  ("then read reversed", lambda x, b, fw: (x.__setitem__(0, b), x.exp().flip(1))[1]),
  # in-place ops on views: their writes were lost with the gradient
  ("mul_ on a strided view", lambda x, b, fw: (x[:, ::2].mul_(3), x)[1]),
  ("add_ on a transposed view", lambda x, b, fw: (x.T[1].add_(b[:2] * b[1:]), x * x)[1]),
]

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
@pytest.mark.parametrize("name,write", GRAD_WRITES, ids=[n for n, _ in GRAD_WRITES])
def test_setitem_gradients_match_torch(name: str, write: Callable[[Any, Any, Any], Any]) -> None:
  # gradients flow through the write, as through torch's: to the value where it was written, to the old values
  # elsewhere (they used to be dropped: None for both)
  rng = np.random.default_rng(0)
  a_np, b_np = rng.uniform(-2, 2, (2, 3)).astype(np.float32), rng.uniform(-2, 2, 3).astype(np.float32)
  def run(fw: Any) -> list[np.ndarray]:
    if fw is Tensor: a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
    else: a, b = (torch.from_numpy(v.copy()).requires_grad_() for v in (a_np, b_np))
    out = write(a * 2, b, fw)
    weight = rng_w.uniform(-1, 1, tuple(out.shape)).astype(np.float32)
    (out * (Tensor(weight) if fw is Tensor else torch.from_numpy(weight))).sum().backward()
    grads = [np.zeros(v.shape) if v.grad is None else v.grad.numpy() for v in (a, b)]
    return [out.detach().numpy() if fw is torch else out.numpy(), *grads]
  rng_w = np.random.default_rng(1)
  want = run(torch)
  rng_w = np.random.default_rng(1)
  for got, ref in zip(run(Tensor), want): np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)

def test_setitem_into_a_leaf_that_requires_grad() -> None:
  # as torch: an error, which no_grad lifts (an optimizer's update)
  w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  with pytest.raises(RuntimeError, match="leaf"): w[0] = 5.0
  with pytest.raises(RuntimeError, match="view of a tensor that requires grad"): w[1:][0] = 5.0
  with no_grad(): w[0] = 5.0
  assert w.tolist() == [5.0, 2.0, 3.0]

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
def test_setitem_with_gradients_through_a_view_realized_on_its_own() -> None:
  # the view realized while x was lazy still views x (it raised: the view no longer knew x's graph)
  def run(fw: Any) -> list[Any]:
    a = Tensor([1.0, 2.0], requires_grad=True) if fw is Tensor else torch.tensor([1.0, 2.0], requires_grad=True)
    x = a * 2
    v = x[1:]
    if fw is Tensor: v.realize()
    v[0] = 3.0
    (x * (Tensor if fw is Tensor else torch.tensor)([5.0, 7.0])).sum().backward()
    return [x.tolist(), v.tolist(), a.grad.tolist()]
  assert run(Tensor) == run(torch) == [[2.0, 3.0], [3.0], [10.0, 0.0]]

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
def test_inplace_ops_on_a_realized_tensor_keep_gradients() -> None:
  # x.add_(b) on a realized x computed from a: the assign's value carries the gradient (it was dropped: None)
  a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([5.0, 1.0], requires_grad=True)
  x = (a * 2).realize()
  x.add_(b).mul_(a)
  (x * x).sum().backward()
  ta, tb = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([5.0, 1.0], requires_grad=True)
  tx = ta * 2
  tx.add_(tb).mul_(ta)
  (tx * tx).sum().backward()
  assert a.grad is not None and b.grad is not None
  assert a.grad.tolist() == ta.grad.tolist() and b.grad.tolist() == tb.grad.tolist()

# ---- views of lazy tensors and detach, against numpy's views (found by extra/fuzz_views.py) ----

def _lazy_and_numpy() -> tuple[Tensor, np.ndarray]:
  a = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
  return Tensor(a) + 1, a + 1

# (name, fn(x, view of x, framework's setitem-free writes)): each writes into x or v after v = x[::-1] was taken from a
# lazy x; v (and x) must show what numpy's view shows
REVERSED_VIEW_WRITES: list[tuple[str, Callable[[Any, Any], None]]] = [
  ("assign into the lazy tensor", lambda x, v: x.assign(x * 2) if isinstance(x, Tensor) else x.__setitem__(..., x * 2)),
  ("realize, then setitem", lambda x, v: (x.realize() if isinstance(x, Tensor) else None, x.__setitem__(0, 5.0))),
  ("realize, then add_", lambda x, v: (x.realize().add_(1) if isinstance(x, Tensor) else x.__iadd__(1))),
  ("realize the view, the tensor, then write", lambda x, v: (
    (v.realize(), x.realize()) if isinstance(x, Tensor) else None, x.__setitem__(1, 7.0))),
  ("two assigns", lambda x, v: (x.assign(x * 2).assign(x + 1) if isinstance(x, Tensor) else
                                 x.__setitem__(..., x * 2 + 1))),
  ("through a view of the view", lambda x, v: (v[1:] if isinstance(x, Tensor) else v[1:]).__setitem__(0, 9.0)),
  ("add_ on the view, the tensor read", lambda x, v: v.add_(10) if isinstance(x, Tensor) else v.__iadd__(10)),
]

@pytest.mark.parametrize("name,write", REVERSED_VIEW_WRITES, ids=[n for n, _ in REVERSED_VIEW_WRITES])
def test_reversed_view_of_a_lazy_tensor_follows_writes(name: str, write: Callable[[Any, Any], None]) -> None:
  # x[::-1] of a lazy x kept x's old values after x was assigned, or realized and then written (the view went on
  # reading the lazy node, which the write no longer stood for)
  x, ref = _lazy_and_numpy()
  v, v_ref = x[::-1], ref[::-1]
  write(x, v)
  write(ref, v_ref)
  assert v.tolist() == v_ref.tolist() and x.tolist() == ref.tolist()

def test_strided_views_of_a_lazy_tensor_see_an_assign_and_a_later_write() -> None:
  x = Tensor.arange(12).reshape(3, 4) * 1
  ref = np.arange(12).reshape(3, 4)
  views = [lambda t: t[::-1, ::2], lambda t: t.T[1::2], lambda t: t.transpose(1, 0)[::-1][1]]
  vs, v_refs = [f(x) for f in views], [f(ref) for f in views]
  vs[0].realize()  # one realized on its own while x is lazy: it still views x
  x.assign(x * 10)
  ref *= 10
  vs[1][0, 0] = -1
  v_refs[1][0, 0] = -1
  for v, v_ref in zip(vs, v_refs): assert v.tolist() == v_ref.tolist()
  assert x.tolist() == ref.tolist()

def test_pending_assigns_through_views_run_in_order_before_reads() -> None:
  # an add_ through a view was not run when the base was read, and assigns of two views of one buffer ran out of order
  x = Tensor([1, 2, 3, 4]).realize()
  x.T.add_(1)
  assert x.tolist() == [2, 3, 4, 5]
  d, r = x.detach(), x.reshape(2, 2)
  r.assign(r * 3)
  x.fill_(-1)
  d.assign(d * 5)
  assert x.tolist() == [-5] * 4 and r.tolist() == [[-5, -5], [-5, -5]]
  y = x + 0  # made before the next assign: keeps the values it had
  x.add_(1).add_(2)
  z = x.reshape(4)  # a view taken of the pending assigns
  assert z.tolist() == [-2] * 4 and y.tolist() == [-5] * 4 and x.tolist() == [-2] * 4

def test_index_setitem_after_an_in_place_op_through_a_view() -> None:
  # fuzz_views seed 3046: a mul_ pending through t.permute(...), then t[int tensor] = v, which writes a value computed
  # from all of t: the rows it did not name lost the mul_ (it read t before the mul_ ran)
  t = Tensor(np.array([[2, 2], [-1, 2], [-2, -2], [-7, 1]], dtype=np.int32)).realize()
  view = t.permute(1, 0)
  view.mul_(2)
  t[Tensor([1, 2])] = Tensor([[0, 16], [24, 24]])
  assert t.tolist() == [[4, 4], [0, 16], [24, 24], [-14, 2]]
  assert view.tolist() == [[4, 0, 24, -14], [4, 16, 24, 2]]

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
@pytest.mark.parametrize("lazy", [False, True], ids=["realized", "lazy"])
def test_detach_shares_memory_as_torch(lazy: bool) -> None:
  # detach() was a copy for a lazy tensor, for in-place ops and for views: torch's shares the memory both ways
  def run(fw: Any) -> list[Any]:
    w = fw.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True) if fw is torch else \
      Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    b = (w * 2 if lazy else w)
    d = b.detach()
    d[0, 1] = 9.0
    d.T.mul_(3)
    b.detach()[1].add_(1)
    dt = b.T.detach()
    dt[0] = -1.0
    out = [b.tolist(), d.tolist(), dt.tolist(), d.requires_grad]
    (w * w).sum().backward()  # the gradient of the values w holds now
    return out + [w.grad.tolist()]
  assert run(Tensor) == run(torch)

# writes that autograd does not see, into a result of ops (lazy or realized): (name, under no_grad, the write)
UNSEEN_WRITES: list[tuple[str, bool, Callable[[Any], Any]]] = [
  ("detach add_", False, lambda y: y.detach().add_(1)),
  ("detach view add_", False, lambda y: y.detach()[0:1].add_(1)),
  ("detach setitem", False, lambda y: y.detach().__setitem__(0, 9.0)),
  ("no_grad add_", True, lambda y: y.add_(1)),
  ("no_grad mul_", True, lambda y: y.mul_(3)),
  ("no_grad view add_", True, lambda y: y[1:].add_(1)),
  ("no_grad transposed view add_", True, lambda y: y.T[0].add_(1)),
  ("no_grad setitem", True, lambda y: y.__setitem__(0, 9.0)),
]

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
@pytest.mark.parametrize("read", [False, True], ids=["", "read"])
@pytest.mark.parametrize("realized", [False, True], ids=["lazy", "realized"])
@pytest.mark.parametrize("name,under_no_grad,write", UNSEEN_WRITES, ids=[n for n, _, _ in UNSEEN_WRITES])
def test_write_autograd_does_not_see_keeps_the_gradient_of_a_computed_tensor(
    name: str, under_no_grad: bool, write: Callable[[Any], Any], realized: bool, read: bool) -> None:
  # y (computed from w) lost its gradient: a write through a detached view read back before backward (its graph was
  # registered for the new contents before the write ran, which dropped it), or any in-place write under no_grad (the
  # value written, a constant to autograd, became y's graph). As torch: the write is invisible to autograd, y's
  # gradient is the old graph's, and values computed from y after it read the new contents
  def run(fw: Any) -> list[Any]:
    w = fw.tensor([[-0.5, 1.0], [2.0, 3.0]], requires_grad=True) if fw is torch else \
      Tensor([[-0.5, 1.0], [2.0, 3.0]], requires_grad=True)
    y = w * 2
    if realized and fw is Tensor: y.realize()
    with (no_grad() if fw is Tensor else torch.no_grad()) if under_no_grad else contextlib.nullcontext():
      write(y)
    if read: y.tolist()
    out = y * y
    out.sum().backward()
    return [out.tolist() if fw is Tensor else out.detach().tolist(), None if w.grad is None else w.grad.tolist()]
  assert run(Tensor) == run(torch)

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
@pytest.mark.parametrize("op", ["add_", "mul_", "copy_"])
def test_view_of_an_in_place_result_read_before_backward(op: str) -> None:
  # the view (realized with the pending write it views) lost its graph: the write's commit, after the view's in the
  # same schedule, dropped what the view's node stood for; x.grad and w.grad were None
  def run(fw: Any) -> list[Any]:
    x, w = (fw(np.full((2, 4), v, np.float32)).requires_grad_() for v in (1.0, 3.0))
    y = x * 1
    if fw is Tensor: y.realize()
    getattr(y, op)(w)
    v = y.transpose(0, 1)
    v.numpy() if fw is Tensor else v.detach().numpy()
    (v * 2).sum().backward()
    # (torch's copy_ passes zeros to x, where lazytensor's backward leaves a gradient it does not reach as None)
    return [np.zeros((2, 4)).tolist() if t.grad is None else t.grad.tolist() for t in (x, w)]
  assert run(Tensor) == run(lambda a: torch.from_numpy(a))

def test_repr_shows_an_in_place_op_written_through_a_view() -> None:
  x = Tensor([[1.0, 2.0]]).realize()
  x.T.add_(1)  # a pending write through a view made for it: repr read the buffer before it ran
  assert "[[2., 3.]]" in repr(x)

def test_a_value_made_between_two_pending_assigns_sees_the_first() -> None:
  # y was computed before both (the two ran as one chain, after y), where it must see the first write only
  x = Tensor([1, 2]).realize()
  v = x[::-1]
  v.mul_(2)
  y = x + 1
  v.add_(10)
  assert y.tolist() == [3, 5] and x.tolist() == [12, 14] and v.tolist() == [14, 12]

def test_write_through_a_view_of_a_pending_assign() -> None:
  # t2 views d's pending mul_: its add_ was an assign into the mul's graph, which the scheduler could not place
  t0 = Tensor([6.0, 5.0, 0.0]).realize()
  d = t0.detach()
  d.mul_(2)
  t2 = d[1]
  t2.add_(-31)
  assert t0.tolist() == [12.0, -21.0, 0.0] and t2.item() == -21.0

def test_in_place_op_into_an_expanded_view_raises_as_in_torch() -> None:
  x = Tensor([1.0, 2.0, 3.0]).realize()
  with pytest.raises(ArgumentError, match=r"expanded view of shape \(2, 3\)"): x.expand(2, 3).add_(1)
  with pytest.raises(ArgumentError, match="expanded view"): (Tensor([1.0, 2.0]) + 1).reshape(2, 1).expand(2, 4).mul_(2)
  assert x.tolist() == [1.0, 2.0, 3.0]  # nothing written
  # views whose elements are each one element of memory still write through
  z = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
  z[:, 0].add_(1)
  z.T.mul_(2)
  z.reshape(4)[1:].add_(1)
  assert z.tolist() == [[4.0, 5.0], [9.0, 9.0]]

@pytest.mark.parametrize("dtype", [np.int32, np.float32])
@pytest.mark.parametrize("op", ["cumsum", "rowsum", "flip"])
def test_assign_into_a_view_of_a_value_that_reads_the_view_elsewhere(dtype: type, op: str) -> None:
  # the assign's kernel reads its target through a scan's windows (or a reduce, a flip): fused, it read elements of the
  # row it had already written (the int32 cumsum into a transposed view gave [35, 43, 51] for [30, 34, 38])
  fns: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "cumsum": (lambda v: v.cumsum(1), lambda r: r.cumsum(1)),
    "rowsum": (lambda v: v - v.sum(1, keepdim=True), lambda r: r - r.sum(1, keepdims=True)),
    "flip": (lambda v: v.flip(1) + 1, lambda r: r[:, ::-1] + 1)}
  a = np.arange(20).reshape(4, 5).astype(dtype)
  base = Tensor(a.copy()).realize()
  v = base.T[:3]
  v.assign(fns[op][0](v).cast(base.dtype))
  ref = a.copy()
  ref.T[:3] = fns[op][1](ref.T[:3].copy()).astype(dtype)
  np.testing.assert_array_equal(base.numpy(), ref)

def test_a_read_after_a_write_through_a_view_sees_it() -> None:
  # what is read of a tensor after a write through its view is made is a new graph: the same reduce realized before
  # the write (one interned node) was found again, stale, as in a decode loop that writes cache[pos] and sums cache
  cache = Tensor.zeros(8, 4).contiguous().realize()
  before = cache[:5].sum(0).realize()
  for value in (1.0, 2.0, 3.0):
    cache[3:4].assign(Tensor.full((1, 4), value) * 1.0)
    assert cache[:5].sum(0).tolist() == [value] * 4
  assert before.tolist() == [0.0] * 4

def test_a_kept_reduce_is_not_computed_again_when_its_input_is_written() -> None:
  # x.sum(1) is a reduce and a reshape view of it: realized, the reduce takes the view's memory, where it stayed lazy
  # and a write into x computed it again as a value of x's old contents, one kernel more in each step of a loop
  cache = Tensor.zeros(16, 4).contiguous().realize()
  outs = []
  for i in range(4):
    GlobalCounters.reset()
    cache[i:i + 1].assign(Tensor.full((1, 4), i + 1.0) * 1.0).realize()
    outs.append(cache[:i + 2].sum(0).realize())
    assert GlobalCounters.kernel_count == 2
  assert [o.tolist() for o in outs] == [[sum(range(1, i + 2))] * 4 for i in range(4)]
