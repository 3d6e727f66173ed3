"""Writing into realized tensors: assign (lazy, in place) and __setitem__ (now), with the hazards they bring."""
import numpy as np
import pytest

from lazytensor import GlobalCounters, Tensor


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
  from lazytensor.device import buffer_map
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
  from lazytensor.engine import live
  t = Tensor([1.0, 2.0]).realize()
  before = len(live._live)
  kept = [t * i for i in range(100)]
  assert len(live._live) == before + 100
  del kept
  assert len(live._live) == before
