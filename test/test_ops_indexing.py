"""Indexing and the ops built like it: advanced __getitem__ and __setitem__, gather/scatter/scatter_reduce, masks,
triangles and diagonals, roll, repeat_interleave, unfold, meshgrid, pad modes, rearrange, einsum, unflatten.

Every op is compared with torch (values, dtype and the gradients of float inputs, through check_op) and, for a
representative subset, with float64 finite differences (no torch needed). Kernel counts are asserted where the design
promises them (a gather is one kernel), and the bad inputs users make raise clear errors.
"""
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, check_grad_numeric, check_op, compare, named, torch

from lazytensor import Context, GlobalCounters, Tensor, dtypes

F16, F32, F64, I32, BOOL = dtypes.float16, dtypes.float32, dtypes.float64, dtypes.int32, dtypes.bool
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="compares with torch")

def ix(x: Any, values: Any, dtype: Any = None) -> Any:
  """An index tensor for whichever framework x belongs to: a Tensor for lazytensor, a torch tensor for torch."""
  if isinstance(x, Tensor): return Tensor(values, dtype=dtype)
  return torch.tensor(values, dtype=getattr(torch, dtype.name) if dtype is not None else None)

def ints(shape: tuple[int, ...], high: int, seed: int = 0, low: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(low, high, size=shape).astype(np.int64)

def unique_rows(shape: tuple[int, int], high: int, seed: int = 0) -> np.ndarray:
  """Per row, distinct indices in [0, high): a scatter without repeated targets, whose gradient torch defines."""
  rng = np.random.default_rng(seed)
  return np.stack([rng.permutation(high)[:shape[1]] for _ in range(shape[0])]).astype(np.int64)

def kernels(fn: Callable[[], Tensor]) -> int:
  """How many kernels realizing fn() runs (its inputs realized first)."""
  out = fn()
  GlobalCounters.reset()
  out.realize()
  return GlobalCounters.kernel_count

# ---- __getitem__ with tensors, lists, arrays and bools: (name, fn) on a (3, 4, 5) input ----

MASK = np.array([[True, False, False, True], [False, False, False, False], [True, True, False, False]])

GETITEM: list[tuple[str, Callable[[Any], Any]]] = [
  ("list", lambda x: x[[0, 2, 2]]),
  ("tensor", lambda x: x[ix(x, [2, 0, -1, 0])]),
  ("tensor_int32", lambda x: x[ix(x, [1, -3], dtypes.int32)]),
  ("tensor_2d", lambda x: x[ix(x, [[0, 1], [2, 2]])]),
  ("tensor_0d", lambda x: x[ix(x, 1)]),
  # a 0-d tensor index is an int to torch: it neither parts the other index dims nor places them
  ("tensor_0d_then_slice", lambda x: x[ix(x, 1), None, ix(x, [0, 2])]),
  ("tensor_0d_between", lambda x: x[ix(x, [0, 2]), ix(x, 1), ix(x, [4, 0])]),
  ("slice_tensor_0d_slice", lambda x: x[:, ix(x, -1), ix(x, [[1], [3]])]),
  ("int_then_tensor", lambda x: x[0, :, ix(x, [1, 3])]),
  ("separated", lambda x: x[ix(x, [0, 1]), :, ix(x, [1, 4])]),
  ("adjacent", lambda x: x[:, ix(x, [0, -1]), ix(x, [1, 2])]),
  ("broadcast", lambda x: x[..., ix(x, [[0], [3]]), ix(x, [1, 2, 4])]),
  ("none_between", lambda x: x[ix(x, [0, 1]), None, ix(x, [1, 2])]),
  ("slices_around", lambda x: x[1:, ix(x, [3, 1]), ::2]),
  ("three", lambda x: x[ix(x, [2, 0]), ix(x, [1, 1]), ix(x, [4, 0])]),
  ("bool_list", lambda x: x[[True, False, True]]),
  ("bool_scalar", lambda x: x[True, 1]),
  ("bool_false", lambda x: x[False]),
  ("bool_and_list", lambda x: x[True, [0, 2]]),
  ("numpy_mask_2d", lambda x: x[MASK]),
  ("numpy_ints", lambda x: x[:, np.array([3, 0])]),
  ("step_list_view", lambda x: x[:, [3, 1]]),
  ("empty_list", lambda x: x[[]]),
  ("chain", lambda x: (x * 2)[ix(x, [1, 0])][:, ix(x, [2, 2, 3])].sum(0)),
]

@needs_torch
@pytest.mark.parametrize("name,fn", named(GETITEM))
def test_getitem_vs_torch(name: str, fn: Callable[[Any], Any]) -> None:
  check_op([(3, 4, 5)], fn)

@needs_torch
@pytest.mark.parametrize("dtype", [BOOL, dtypes.int8, I32, F16, F64], ids=str)
def test_getitem_dtypes(dtype: Any) -> None:
  check_op([(3, 4, 5)], lambda x: x[ix(x, [2, 0]), :, ix(x, [1, -1])], dtype=dtype)

@pytest.mark.parametrize("name,fn", named([g for g in GETITEM if g[0] in ("tensor", "separated", "adjacent", "chain")]))
def test_getitem_numeric(name: str, fn: Callable[[Any], Any]) -> None:
  check_grad_numeric(fn, [np.random.default_rng(0).uniform(-2, 2, (3, 4, 5))])

def test_getitem_matches_numpy_where_torch_differs() -> None:
  # nested lists are index arrays (numpy; torch still reads them as tuples), and uint8 tensors are integers
  x = np.arange(60).reshape(3, 4, 5)
  np.testing.assert_array_equal(Tensor(x)[[[0, 1], [2, 0]]].numpy(), x[[[0, 1], [2, 0]]])
  np.testing.assert_array_equal(Tensor(x)[Tensor([2, 0], dtype=dtypes.uint8)].numpy(), x[[2, 0]])
  np.testing.assert_array_equal(Tensor(x)[(np.array([1]), slice(None), [0, 4])].numpy(), x[[1], :, [0, 4]])

@Context(CHECK_INDICES=0)  # unchecked (test_index_check.py: checked, it raises)
def test_getitem_out_of_range_tensor_reads_zero() -> None:
  # a tensor index is only read when the kernel runs: out of range entries match nothing (never read out of bounds)
  x = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
  got = Tensor(x)[Tensor([0, 3, -4, 2, 100])].numpy()
  np.testing.assert_array_equal(got, np.stack([x[0], 0 * x[0], 0 * x[0], x[2], 0 * x[0]]))
  assert Tensor(x)[1, Tensor([-1, 4, -5])].tolist() == [8.0, 0.0, 0.0]
  assert Tensor(x).gather(1, Tensor([[0, 5]] * 3)).tolist() == [[1.0, 0.0], [5.0, 0.0], [9.0, 0.0]]

def test_getitem_kernels() -> None:
  x = Tensor(np.arange(20, dtype=np.float32).reshape(4, 5)).realize()
  idx = Tensor([3, 1, 3]).realize()
  assert kernels(lambda: x[idx]) == 1
  assert kernels(lambda: (x * 2 + 1)[:, idx].exp()) == 1    # fused with what computes x and what follows
  assert kernels(lambda: x[idx, idx]) == 1
  assert kernels(lambda: x[1:3, None]) == 0 and kernels(lambda: x[[1, 2]][0]) == 0  # views of x: nothing to run
  w = Tensor(np.ones((4, 5), dtype=np.float32), requires_grad=True)
  g, = (w[idx] * Tensor([[1.0], [2.0], [3.0]])).sum().gradient(w)
  GlobalCounters.reset()
  assert g.tolist()[3] == [4.0] * 5 and g.tolist()[1] == [2.0] * 5 and g.tolist()[0] == [0.0] * 5
  assert GlobalCounters.kernel_count == 1  # the backward of a gather is one scatter-add kernel

# ---- __setitem__ ----

SETITEM: list[tuple[str, Callable[[Any], Any], Any]] = [
  ("list", lambda m: [2, 0], 7.0),
  ("tensor_rows", lambda m: m([1, -1]), np.array([[[1.0]], [[2.0]]])),
  ("int_and_tensor", lambda m: (0, m([3, 1]), slice(None)), np.arange(10.0).reshape(2, 5)),
  ("separated", lambda m: (m([0, 2]), slice(1, 3), m([1, 1])), np.arange(4.0).reshape(2, 2)),
  ("adjacent", lambda m: (slice(None), m([3, 0]), m([4, 2])), -3.0),
  ("numpy_mask", lambda m: MASK, np.arange(5.0)),
  ("repeated_last_wins", lambda m: m([1, 2, 1]), np.array([10.0, 20.0, 30.0]).reshape(3, 1, 1)),
  ("bool_tensor_mask", lambda m: Tensor(MASK) if m is Tensor else MASK, np.arange(5.0)),
  ("bool_tensor_mask_scalar", lambda m: (slice(None), slice(None), Tensor(MASK[0, :4].tolist() + [True]))
   if m is Tensor else (slice(None), slice(None), MASK[0, :4].tolist() + [True]), 9.0),
]

@pytest.mark.parametrize("name,index,value", named(SETITEM))
def test_setitem_matches_numpy(name: str, index: Callable[[Any], Any], value: Any) -> None:
  ref = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
  t = Tensor(ref.copy()).realize()
  ref[index(np.array)] = value
  t[index(Tensor)] = value
  np.testing.assert_array_equal(t.numpy(), ref)

def test_setitem_value_with_leading_ones() -> None:
  # torch and numpy drop a value's leading dims of size 1 beyond the target's: this was a ValueError
  ref = np.zeros((3, 4, 5), np.float32)
  t = Tensor(ref.copy()).realize()
  value = np.arange(5, dtype=np.float32).reshape(1, 1, 5)
  ref[1, 2] = value
  t[1, 2] = Tensor(value)
  ref[0, [1, 3]] = value
  t[0, Tensor([1, 3])] = Tensor(value)
  np.testing.assert_array_equal(t.numpy(), ref)
  with pytest.raises(ValueError, match=r"\(2, 1, 5\)"): t[0, 0] = Tensor.ones(2, 1, 5)

def test_setitem_empty_targets() -> None:
  t = Tensor(np.arange(6.0).reshape(3, 2)).realize()
  t[2:2] = 5.0
  t[[]] = Tensor.ones(0, 2)
  t[Tensor([], dtype=dtypes.int32), 1] = 7.0
  assert t.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]

def test_setitem_out_of_range_tensor_writes_nothing_and_dtypes_cast() -> None:
  t = Tensor([1, 2, 3]).realize()
  with Context(CHECK_INDICES=0):  # unchecked (test_index_check.py: checked, it raises)
    t[Tensor([5, -1, -7])] = Tensor([9.7, 8.2, 7.0])
    assert t.tolist() == [1, 2, 8] and t.dtype == dtypes.int64
  b = Tensor([True, False, True]).realize()
  b[[0, 1]] = False
  assert b.tolist() == [False, False, True]

def test_setitem_mask_value_must_not_depend_on_the_count() -> None:
  t = Tensor.zeros(3, 4).contiguous().realize()
  with pytest.raises(ValueError, match="count of True values"): t[Tensor(MASK)] = Tensor([1.0, 2.0, 3.0])
  t[Tensor(MASK)] = Tensor([5.0])
  np.testing.assert_array_equal(t.numpy(), np.where(MASK, 5.0, 0.0))

@needs_torch
@pytest.mark.parametrize("index,value", [
  ((slice(None), [False] * 4), np.zeros((3, 0))), ([False] * 3, np.zeros((0, 4))), ([[False] * 4] * 3, np.zeros(0)),
  ([False] * 3, np.zeros((0, 1)))], ids=["dim1", "dim0", "2d", "broadcast"])
def test_setitem_mask_that_selects_none_takes_a_value_with_no_entries(index: Any, value: Any) -> None:
  # refused before as a value that depends on the count of True values; torch takes it and writes nothing
  def run(fw: Any) -> np.ndarray:
    t = fw(np.array([[1.0, -0.0, 3.0, 4.0]] * 3, np.float32))
    if fw is Tensor: t.realize()
    idx = tuple(fw(np.array(i)) if isinstance(i, list) else i for i in index) if isinstance(index, tuple) else \
      fw(np.array(index))
    t[idx] = fw(value.astype(np.float32))
    return t.numpy()
  want = run(torch.from_numpy)
  np.testing.assert_array_equal(run(Tensor), want)
  assert np.signbit(run(Tensor)).tolist() == np.signbit(want).tolist()

def test_setitem_mask_that_selects_some_with_a_value_with_no_entries_is_an_index_error() -> None:
  # as torch (which raises at the write): the write is refused where it runs, the tensor unchanged
  t = Tensor([1.0, 2.0, 3.0]).realize()
  with pytest.raises(IndexError, match=r"x\[mask\] = value: mask entry 1 is out of bounds for a value with no entries"):
    t[Tensor([False, True, False])] = Tensor([])
  assert t.tolist() == [1.0, 2.0, 3.0]

# ---- gather, scatter, scatter_reduce ----

GATHER = [((3, 4, 5), 0, (2, 4, 5)), ((3, 4, 5), 1, (3, 6, 2)), ((3, 4, 5), -1, (1, 2, 7)), ((6,), 0, (9,))]

@needs_torch
@pytest.mark.parametrize("xs,dim,idx_shape", GATHER, ids=str)
def test_gather_vs_torch(xs: tuple[int, ...], dim: int, idx_shape: tuple[int, ...]) -> None:
  index = ints(idx_shape, xs[dim])
  check_op([xs, index], lambda x, i: x.gather(dim, i))

@needs_torch
@pytest.mark.parametrize("dtype", [BOOL, dtypes.uint8, I32, F16], ids=str)
def test_gather_dtypes(dtype: Any) -> None:
  check_op([(3, 4), ints((3, 5), 4)], lambda x, i: x.gather(1, i), dtype=[dtype, dtypes.int64])

def test_gather_numeric_and_kernels() -> None:
  check_grad_numeric(lambda x: x.gather(1, Tensor(ints((3, 6), 4))), [np.random.default_rng(1).uniform(-1, 1, (3, 4))])
  x, idx = Tensor.ones(64, 32).contiguous().realize(), Tensor(ints((64, 40), 32)).realize()
  assert kernels(lambda: x.gather(1, idx)) == 1 and kernels(lambda: (x + 1).gather(0, idx[:8, :16]) * 2) == 1

SCATTER: list[tuple[str, Callable[..., Any], list[Any]]] = [
  ("src", lambda x, i, s: x.scatter(1, i, s), [(3, 5), unique_rows((2, 3), 5), (2, 3)]),
  ("dim0", lambda x, i, s: x.scatter(0, i, s), [(4, 3), unique_rows((3, 2), 4).T.copy(), (2, 3)]),
  ("value", lambda x, i: x.scatter(1, i, 2.5), [(3, 5), unique_rows((3, 2), 5)]),
  ("add", lambda x, i: x.scatter(1, i, 2.5, reduce="add"), [(3, 5), ints((3, 4), 5)]),
  ("multiply", lambda x, i: x.scatter(1, i, -1.5, reduce="multiply"), [(3, 5), ints((3, 4), 5)]),
]

@needs_torch
@pytest.mark.parametrize("name,fn,inputs", named(SCATTER))
def test_scatter_vs_torch(name: str, fn: Callable[..., Any], inputs: list[Any]) -> None:
  # torch has no gradient for scatter with a reduce (scatter_reduce has one, checked below)
  check_op(inputs, fn, grad=name not in ("add", "multiply"))

def test_scatter_src_larger_than_index() -> None:
  # only src's leading part (the index's shape) is written
  out = Tensor.zeros(2, 3).scatter(1, Tensor([[2], [0]]), Tensor([[1.0, 9.0], [2.0, 9.0]]))
  assert out.tolist() == [[0.0, 0.0, 1.0], [2.0, 0.0, 0.0]]

def test_scatter_repeated_index_last_wins() -> None:
  out = Tensor.zeros(2, 4).scatter(1, Tensor([[1, 1, 3], [0, 0, 0]]), Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
  assert out.tolist() == [[0.0, 2.0, 0.0, 3.0], [6.0, 0.0, 0.0, 0.0]]

REDUCES = ["sum", "prod", "mean", "amax", "amin"]

@needs_torch
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_vs_torch(reduce: str, include_self: bool) -> None:
  # repeated targets, untouched targets, and an index narrower than self in the other dim
  index = np.array([[0, 2, 2, 0, 2], [1, 1, 1, 3, 0]])
  check_op([(3, 4), index, (2, 5)], lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self))

@needs_torch
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_ints(reduce: str, include_self: bool) -> None:
  # an int mean rounds down, as torch
  index = np.array([0, 0, 2, 0, 2, 2, 2])
  check_op([(4,), index, (7,)], lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self),
           dtype=[I32, dtypes.int64, I32], low=-9, high=9)

@needs_torch
def test_scatter_reduce_ties_share_the_gradient() -> None:
  # the maximum reached by self and two sources: each gets a third of the gradient, as in torch
  x, src = np.array([3.0, 0.0], dtype=np.float32), np.array([1.0, 3.0, 3.0], dtype=np.float32)
  check_op([x, np.zeros(3, dtype=np.int64), src], lambda a, i, s: a.scatter_reduce(0, i, s, "amax"))
  check_op([x, np.zeros(3, dtype=np.int64), src], lambda a, i, s: a.scatter_reduce(0, i, s, "amin", include_self=False))
  # a product with zeros among the sources
  check_op([x, np.zeros(3, dtype=np.int64), np.array([1.0, 0.0, 3.0], dtype=np.float32)],
           lambda a, i, s: a.scatter_reduce(0, i, s, "prod"))

@pytest.mark.parametrize("reduce", REDUCES)
def test_scatter_reduce_numeric(reduce: str) -> None:
  index = Tensor(np.array([[0, 2, 2, 0], [1, 1, 1, 3]]))
  rng = np.random.default_rng(2)
  check_grad_numeric(lambda x, s: x.scatter_reduce(1, index, s, reduce, include_self=reduce != "mean"),
                     [rng.uniform(0.5, 2, (2, 4)), rng.uniform(0.5, 2, (2, 4))])

def test_scatter_numeric() -> None:
  rng = np.random.default_rng(3)
  index = Tensor(unique_rows((3, 2), 4))
  check_grad_numeric(lambda x, s: x.scatter(1, index, s), [rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (3, 2))])

# ---- masks, triangles, diagonals ----

@needs_torch
@pytest.mark.parametrize("dtype", [F32, I32, BOOL], ids=str)
def test_masked_fill(dtype: Any) -> None:
  mask = np.random.default_rng(0).random((3, 4)) < 0.5
  check_op([(2, 3, 4), mask], lambda x, m: x.masked_fill(m, 1), dtype=[dtype, BOOL])
  check_op([(4,), mask], lambda x, m: x.masked_fill(m, -2.7), dtype=[dtype, BOOL])  # broadcasts, value cast

@needs_torch
def test_masked_fill_tensor_value_gets_gradient() -> None:
  mask = np.array([True, False, True])
  check_op([(2, 3), mask, ()], lambda x, m, v: x.masked_fill(m, v))

@needs_torch
def test_one_hot() -> None:
  f = torch.nn.functional.one_hot if HAVE_TORCH else None
  check_op([ints((2, 5), 4)], lambda x: x.one_hot(6), torch_fn=lambda x: f(x, 6))
  check_op([ints((7,), 4)], lambda x: x.one_hot(), torch_fn=lambda x: f(x))  # -1: the largest value plus one
  idx = Tensor(ints((5, 9), 7)).realize()
  assert kernels(lambda: idx.one_hot(7)) == 1
  with Context(CHECK_INDICES=0):  # unchecked, out of range gives zeros (test_index_check.py: checked, it raises)
    assert Tensor([1, -1, 3]).one_hot(3).tolist() == [[0, 1, 0], [0, 0, 0], [0, 0, 0]]

TRIANGLES = [((4, 4), 0), ((3, 5), 1), ((3, 5), -1), ((2, 3, 4), 2), ((4, 3), -5), ((4, 3), 7)]

@needs_torch
@pytest.mark.parametrize("shape,k", TRIANGLES, ids=str)
def test_tril_triu(shape: tuple[int, ...], k: int) -> None:
  check_op([shape], lambda x: x.tril(k) + x.triu(k) * 2)

@needs_torch
@pytest.mark.parametrize("dtype", [BOOL, I32, F16], ids=str)
def test_tril_triu_dtypes(dtype: Any) -> None:
  check_op([(3, 4)], lambda x: x.tril(1), dtype=dtype)
  check_op([(3, 4)], lambda x: x.triu(-1), dtype=dtype)

DIAGONALS = [((4, 4), 0, 0, 1), ((3, 5), 2, 0, 1), ((3, 5), -1, 0, 1), ((2, 3, 4), 1, -1, 0), ((2, 3, 4), 0, 2, 1),
             ((3, 4), 6, 0, 1), ((3, 4), -3, 1, 0)]

@needs_torch
@pytest.mark.parametrize("shape,offset,d1,d2", DIAGONALS, ids=str)
def test_diagonal(shape: tuple[int, ...], offset: int, d1: int, d2: int) -> None:
  check_op([shape], lambda x: x.diagonal(offset, d1, d2))

@needs_torch
@pytest.mark.parametrize("shape,k", [((4,), 0), ((3,), 2), ((3,), -1), ((1,), 0), ((3, 4), 1), ((3, 4), -2)], ids=str)
def test_diag(shape: tuple[int, ...], k: int) -> None:
  check_op([shape], lambda x: x.diag(k), torch_fn=lambda x: torch.diag(x, k))

def test_diag_diagonal_numeric_and_views() -> None:
  rng = np.random.default_rng(4)
  check_grad_numeric(lambda x: x.diagonal(1, 2, 0) * x.tril(-1).sum(), [rng.uniform(-1, 1, (3, 2, 4))])
  check_grad_numeric(lambda v: v.diag(-1) * 3, [rng.uniform(-1, 1, (4,))])
  x = Tensor.ones(6, 6).contiguous().realize()
  assert kernels(lambda: x.diagonal() + 1) == 1 and kernels(lambda: x[0].diag(2) * 2) == 1

# ---- unique, masked_select, nonzero: results whose size is read from the values ----

def kernels_of_call(fn: Callable[[], Tensor]) -> int:
  """How many kernels a call that reads values to learn its result's size runs, the result's included."""
  GlobalCounters.reset()
  fn().realize()
  return GlobalCounters.kernel_count

@pytest.mark.parametrize("values", [
  np.array([3, -128, 127, 3, 0, -128], np.int8), np.array([255, 0, 7, 7], np.uint8),
  np.array([-30000, 5, 5, 29000], np.int16), np.random.default_rng(0).integers(-50, 50, 4096).astype(np.int32),
  np.array([7], np.int64), np.array([True, False, True]), np.array([True, True]),
  np.array([2 ** 63 - 5, 2 ** 63 + 7, 2 ** 63 - 5], np.uint64)], ids=lambda v: f"{v.dtype}{v.shape}")
def test_unique_of_ints_counts_into_bins(values: np.ndarray) -> None:
  t = Tensor(values).realize()
  got = t.unique()
  assert got.dtype == t.dtype and got.tolist() == np.unique(values).tolist()
  # a range this narrow is counted into bins: no sort, whose bitonic network alone is ~80 kernels for 4096 values
  assert kernels_of_call(t.unique) <= 12

@pytest.mark.parametrize("values", [np.array([0, 2 ** 40, 5, 0], np.int64),
                                    np.array([-2 ** 63, 2 ** 63 - 1, 0, -2 ** 63], np.int64),
                                    np.array([2 ** 31 - 1, -2 ** 31, 1], np.int32)], ids=str)
def test_unique_of_a_wide_range_sorts(values: np.ndarray) -> None:
  # more bins than UNIQUE_BINS_PER_ELEMENT per value (and ranges past int64: hi - lo is taken in Python): the sort
  assert Tensor(values).unique().tolist() == np.unique(values).tolist()

def test_unique_sorts_once() -> None:
  # the sort runs once: the values and the running count of the first of each run are computed in the same schedule
  # as the count that is read (computing the count alone, then the values, sorted twice)
  x = Tensor(np.random.default_rng(1).standard_normal(2048).astype(np.float32).round(1)).realize()
  sort_kernels = kernels_of_call(lambda: x.sort()[0])
  assert sort_kernels > 30 and kernels_of_call(x.unique) <= sort_kernels + 15  # the scan, scatter and gather
  np.testing.assert_array_equal(x.unique().numpy(), np.unique(x.numpy()))
  edges = np.array([np.nan, 1.0, -0.0, 0.0, np.inf, np.nan, -np.inf, 1.0], np.float32)
  if HAVE_TORCH: np.testing.assert_array_equal(Tensor(edges).unique().numpy(), torch.tensor(edges).unique().numpy())

def test_unique_with_size_reads_nothing() -> None:
  # with size the result's shape is known: the bins (which need the range) are not used, nothing is read
  t = Tensor(np.array([5, 1, 5, 3], np.int32))
  out = t.unique(size=4, fill_value=-1)
  assert out.shape == (4,) and out.tolist() == [1, 3, 5, -1]
  assert Tensor(np.array([], np.int32)).unique().shape == (0,)

@pytest.mark.parametrize("n", [1, 31, 32, 33, 64, 1000, 5000])
@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_masked_select_and_nonzero_across_packed_words(n: int, density: float) -> None:
  # the mask's running count is taken from words of 32 bits: sizes at and around a word, all False and all True
  rng = np.random.default_rng(n)
  x, mask = rng.standard_normal(n).astype(np.float32), rng.random(n) < density
  np.testing.assert_array_equal(Tensor(x).masked_select(Tensor(mask)).numpy(), x[mask])
  np.testing.assert_array_equal(Tensor(mask).nonzero().numpy(), np.argwhere(mask))
  k = int(mask.sum())
  got = Tensor(x).masked_select(Tensor(mask), size=k // 2 + 3, fill_value=-7.0).numpy()
  np.testing.assert_array_equal(got, np.concatenate([x[mask], np.full(3, -7.0, np.float32)])[:k // 2 + 3])

def test_compaction_is_one_scatter_of_every_entry() -> None:
  # the first `size` selected positions are a scatter kernel (a STORE at an index), not every slot scanning every
  # entry; every entry stores (False ones after the True ones), so the kernel's in-range test never mispredicts
  from lazytensor.helpers import prod
  from lazytensor.schedule.scheduler import create_schedule
  from lazytensor.uop.ops import Ops
  mask = Tensor(np.random.default_rng(3).random(4096) < 0.5).realize()
  items, _ = create_schedule([mask.nonzero(size=3000).lazydata])
  stores = [u for it in items if it.ast.op is Ops.SINK for u in it.ast.src]
  assert sum(u.op is Ops.SCATTER for u in stores) == 1
  work = max(prod(s.arg.shape) for it in items for s in it.ast.toposort if s.op is Ops.VIEW)
  assert work <= 4096, work  # O(numel): no kernel of 3000 slots x 4096 entries

def test_running_count_of_packed_words() -> None:
  from lazytensor.frontend.mixin.compact import WORD_BITS, packed_counts, running_count
  m = np.random.default_rng(5).random(3 * WORD_BITS + 7) < 0.5
  words, upto = packed_counts(Tensor(m))
  assert words.dtype == dtypes.uint32 and words.shape == (4,)  # numel / 32 words: the scan is 32x shorter
  np.testing.assert_array_equal(running_count(words, upto, m.size).numpy(), np.cumsum(m))

# ---- roll, repeat_interleave, unfold, meshgrid, unflatten ----

MOVES: list[tuple[str, tuple[int, ...], Callable[[Any], Any], Any]] = [
  ("roll_dim", (3, 4), lambda x: x.roll(1, 1), None),
  ("roll_negative", (3, 4), lambda x: x.roll(-5, 0), None),
  ("roll_many", (2, 3, 4), lambda x: x.roll((2, -1), (2, 0)), None),
  ("roll_flat", (3, 4), lambda x: x.roll(5), None),
  ("repeat_interleave_int", (2, 3), lambda x: x.repeat_interleave(2, dim=1), None),
  ("repeat_interleave_flat", (2, 3), lambda x: x.repeat_interleave(3), None),
  ("repeat_interleave_list", (2, 3), lambda x: x.repeat_interleave([1, 0, 3], dim=1),
   lambda x: x.repeat_interleave(torch.tensor([1, 0, 3]), dim=1)),
  ("unfold", (3, 7), lambda x: x.unfold(1, 3, 2), None),
  ("unfold_step_gt_size", (9, 2), lambda x: x.unfold(0, 2, 3), None),
  ("unfold_full", (2, 5, 3), lambda x: x.unfold(1, 5, 1), None),
  ("unfold_zero", (2, 4), lambda x: x.unfold(-1, 0, 2), None),
  ("unflatten", (2, 12), lambda x: x.unflatten(1, (3, -1, 2)), None),
]

@needs_torch
@pytest.mark.parametrize("name,shape,fn,torch_fn", named(MOVES))
def test_moves_vs_torch(name: str, shape: tuple[int, ...], fn: Callable[[Any], Any], torch_fn: Any) -> None:
  check_op([shape], fn, torch_fn=torch_fn)

@pytest.mark.parametrize("name,shape,fn,torch_fn", named([m for m in MOVES if m[0] in
                                                           ("roll_many", "repeat_interleave_list", "unfold")]))
def test_moves_numeric(name: str, shape: tuple[int, ...], fn: Callable[[Any], Any], torch_fn: Any) -> None:
  check_grad_numeric(fn, [np.random.default_rng(5).uniform(-1, 1, shape)])

def test_moves_are_views() -> None:
  x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).realize()
  for fn in (lambda: x.roll(2, 1) + 1, lambda: x.unfold(1, 3, 2) + 1, lambda: x.repeat_interleave(2, 0) + 1,
             lambda: x.pad((2, 1, 1, 0), mode="reflect") + 1, lambda: x.pad((1, 3), mode="circular") * 2):
    assert kernels(fn) == 1

@needs_torch
@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(indexing: str) -> None:
  check_op([(2,), (3,), (4,)], lambda a, b, c: a.meshgrid(b, c, indexing=indexing),
           torch_fn=lambda a, b, c: torch.meshgrid(a, b, c, indexing=indexing))
  check_op([(3,), ()], lambda a, b: Tensor.meshgrid([a, b], indexing=indexing),
           torch_fn=lambda a, b: torch.meshgrid(a, b, indexing=indexing))

# ---- pad modes, pad_to, shrink_to ----

PADS = [((1, 3, 5), (2, 1)), ((1, 3, 5), (0, 4)), ((2, 3, 4, 5), (1, 2, 2, 1)), ((1, 3, 5), (-1, 2)),
        ((1, 2, 3, 4, 3), (1, 1, 0, 2, 2, 0)), ((2, 4), (3, 3))]

@needs_torch
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pads", PADS, ids=str)
def test_pad_modes(shape: tuple[int, ...], pads: tuple[int, ...], mode: str) -> None:
  if mode == "reflect" and max(pads) >= min(shape[-len(pads) // 2:]): pytest.skip("too large for reflect")
  check_op([shape], lambda x: x.pad(pads, mode=mode), torch_fn=lambda x: torch.nn.functional.pad(x, pads, mode=mode))

@needs_torch
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("dtype", [I32, BOOL, F16], ids=str)
def test_pad_modes_dtypes(dtype: Any, mode: str) -> None:
  check_op([(2, 4)], lambda x: x.pad(((0, 0), (2, 3)), mode=mode), dtype=dtype,
           torch_fn=lambda x: torch.nn.functional.pad(x.float(), (2, 3), mode=mode).to(x.dtype))

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_numeric(mode: str) -> None:
  check_grad_numeric(lambda x: x.pad((2, 1, 1, 3), mode=mode), [np.random.default_rng(6).uniform(-1, 1, (4, 5))])

def test_pad_to_shrink_to() -> None:
  x = np.arange(6.0).reshape(2, 3)
  compare(Tensor(x).pad_to(3, None), np.pad(x, ((0, 1), (0, 0))))
  compare(Tensor(x).pad_to((4, 5)), np.pad(x, ((0, 2), (0, 2))))
  compare(Tensor(x).shrink_to(1, 2), x[:1, :2])
  compare(Tensor(x).shrink_to((None, 0)), x[:, :0])
  check_grad_numeric(lambda t: t.pad_to(3, 4).shrink_to(2, 2), [x])

# ---- rearrange and einsum ----

REARRANGE: list[tuple[str, tuple[int, ...], Callable[[Any], Any], Callable[[Any], Any]]] = [
  ("permute", (2, 3, 4), lambda x: x.rearrange("a b c -> c a b"), lambda x: x.permute(2, 0, 1)),
  ("split", (2, 6, 4), lambda x: x.rearrange("b (h w) c -> b h w c", h=2), lambda x: x.reshape(2, 2, 3, 4)),
  ("merge", (2, 3, 4), lambda x: x.rearrange("a b c -> (c a) b"), lambda x: x.permute(2, 0, 1).reshape(8, 3)),
  ("split_merge", (2, 6, 4), lambda x: x.rearrange("b (h w) c -> (b w) (c h)", w=3),
   lambda x: x.reshape(2, 2, 3, 4).permute(0, 2, 3, 1).reshape(6, 8)),
  ("ellipsis", (2, 3, 4, 5), lambda x: x.rearrange("b ... c -> c b ..."), lambda x: x.permute(3, 0, 1, 2)),
  ("ellipsis_merged", (2, 3, 4, 5), lambda x: x.rearrange("b ... -> b (...)"), lambda x: x.reshape(2, 60)),
  ("units", (2, 1, 3), lambda x: x.rearrange("a 1 b -> b () a 1"), lambda x: x.permute(2, 1, 0).reshape(3, 1, 2, 1)),
  ("unit_in_group", (6, 1), lambda x: x.rearrange("(a 1 b) () -> b a", b=2), lambda x: x.reshape(3, 2).T),
]

@needs_torch
@pytest.mark.parametrize("name,shape,fn,torch_fn", named(REARRANGE))
def test_rearrange(name: str, shape: tuple[int, ...], fn: Callable[[Any], Any], torch_fn: Any) -> None:
  check_op([shape], fn, torch_fn=torch_fn)

def test_rearrange_numeric_and_view() -> None:
  check_grad_numeric(lambda x: x.rearrange("b (h w) c -> (b w) (c h)", w=3),
                     [np.random.default_rng(7).uniform(-1, 1, (2, 6, 4))])
  x = Tensor.ones(2, 6, 4).contiguous().realize()
  assert kernels(lambda: x.rearrange("b (h w) c -> c w (b h)", h=3) * 2) == 1

EINSUM: list[tuple[str, str, list[tuple[int, ...]]]] = [
  ("matmul", "ij,jk->ik", [(3, 4), (4, 5)]),
  ("matmul_implicit", "ij,jk", [(3, 4), (4, 5)]),
  ("transpose", "ij->ji", [(3, 4)]),
  ("implicit_order", "bA", [(3, 4)]),
  ("trace", "ii", [(4, 4)]),
  ("diagonal", "ii->i", [(4, 4)]),
  ("diag_3d", "iji->ji", [(3, 2, 3)]),
  ("sum", "ijk->", [(2, 3, 4)]),
  ("outer", "i,j->ij", [(3,), (4,)]),
  ("dot", "i,i", [(5,), (5,)]),
  ("batched", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
  ("ellipsis_broadcast", "...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
  ("ellipsis_sum", "...i->i", [(2, 3, 4)]),
  ("size1_broadcast", "ij,ij->ij", [(3, 1), (3, 4)]),
  ("chain", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
  ("bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
  ("spaces", "i j , j k -> k i", [(3, 4), (4, 2)]),
  ("scalar", "->", [()]),
]

@needs_torch
@pytest.mark.parametrize("name,formula,shapes", named(EINSUM))
def test_einsum(name: str, formula: str, shapes: list[tuple[int, ...]]) -> None:
  check_op(shapes, lambda *xs: Tensor.einsum(formula, *xs), torch_fn=lambda *xs: torch.einsum(formula, *xs), atol=1e-4)

@needs_torch
def test_einsum_dtypes_and_list_operands() -> None:
  check_op([(3, 4), (4, 2)], lambda a, b: Tensor.einsum("ij,jk->ki", [a, b]), dtype=I32,
           torch_fn=lambda a, b: torch.einsum("ij,jk->ki", [a, b]))
  check_op([(3, 4), (4, 2)], lambda a, b: Tensor.einsum("ij,jk", a, b), dtype=F16,
           torch_fn=lambda a, b: torch.einsum("ij,jk", a, b))

@pytest.mark.parametrize("name,formula,shapes",
                         named([e for e in EINSUM if e[0] in ("chain", "trace", "ellipsis_broadcast")]))
def test_einsum_numeric(name: str, formula: str, shapes: list[tuple[int, ...]]) -> None:
  rng = np.random.default_rng(8)
  check_grad_numeric(lambda *xs: Tensor.einsum(formula, *xs), [rng.uniform(-1, 1, s) for s in shapes])

def test_einsum_kernels() -> None:
  a, b = Tensor.ones(8, 16).contiguous().realize(), Tensor.ones(16, 4).contiguous().realize()
  assert kernels(lambda: Tensor.einsum("ij,jk->ik", a, b)) == 1
  assert kernels(lambda: Tensor.einsum("ij,jk,kl->il", a * 2, b, b.T)) == 2  # contracted two at a time

# ---- the bad inputs users make ----

def raises(exc: type[Exception], fn: Callable[[], Any], *must_name: str) -> None:
  """fn() raises exc at build time (no kernel runs) with a message naming each of must_name."""
  GlobalCounters.reset()
  with pytest.raises(exc) as info: fn()
  assert GlobalCounters.kernel_count == 0, "the error came from running a kernel, not from building the op"
  for item in must_name: assert item in str(info.value), f"{item!r} not in {str(info.value)!r}"

X = Tensor.ones(3, 4) * 2  # lazy

@pytest.mark.parametrize("name,fn,exc,names", named([
  ("index1", lambda: X[[0, 3]], IndexError, ["3", "dimension 0", "size 3"]),
  ("index2", lambda: X[:, [-5]], IndexError, ["-5", "dimension 1"]),
  ("index3", lambda: X[np.array([True, False])], IndexError, ["(2,)", "(3,)"]),
  ("index4", lambda: X[Tensor([0.0, 1.0])], TypeError, ["float32"]),
  ("index5", lambda: X[[0.5]], TypeError, ["float64"]),
  ("index6", lambda: X[[0, 1], [0, 1, 2]], IndexError, ["(2,)", "(3,)", "broadcast"]),
  ("index7", lambda: X[X > 1], ValueError, ["boolean Tensor", "x[mask.numpy()]"]),
  ("index8", lambda: X[[[0, 1], [2]]], TypeError, ["ragged"]),
  ("index9", lambda: X["a"], TypeError, ["str"]),
  ("index10", lambda: X[:Tensor([1]), 1], TypeError, ["slice bounds", "int(t)"]),  # as tinygrad
]))
def test_index_errors(name: str, fn: Callable[[], Any], exc: type[Exception], names: list[str]) -> None:
  raises(exc, fn, *names)

@pytest.mark.parametrize("name,fn,exc,names", named([
  ("op1", lambda: X.gather(1, Tensor([0, 1])), ValueError, ["(2,)", "(3, 4)"]),
  ("op2", lambda: X.gather(1, Tensor([[0.0]])), TypeError, ["float32"]),
  ("op3", lambda: X.gather(0, Tensor([[0] * 5])), ValueError, ["(1, 5)", "dim 1"]),
  ("op4", lambda: X.gather(2, Tensor([[0]])), IndexError, ["2"]),
  ("op5", lambda: X.scatter(1, Tensor([[0, 1]]), Tensor([[1.0]])), ValueError, ["(1, 2)", "(1, 1)"]),
  ("op6", lambda: X.scatter(1, Tensor([[0]]), "a"), TypeError, ["str"]),
  ("op7", lambda: X.scatter(1, Tensor([[0]]), 1.0, reduce="max"), ValueError, ["'max'"]),
  ("op7b", lambda: X.scatter(1, Tensor([[0]]), X, reduce="add"), TypeError, ["number src", "scatter_reduce"]),
  ("op8", lambda: X.scatter_reduce(1, Tensor([[0]]), X, "max"), ValueError, ["'max'", "amax"]),
  ("op9", lambda: X.masked_fill(Tensor([1, 0, 0, 1]), 0.0), TypeError, ["bool", "int64"]),
  ("op10", lambda: X.masked_fill(X > 1, Tensor([1.0, 2.0])), ValueError, ["(2,)"]),
  ("op11", lambda: Tensor([1.0]).one_hot(3), TypeError, ["float32"]),
  ("op12", lambda: Tensor([1]).one_hot(-2), ValueError, ["-2"]),
  ("op13", lambda: Tensor([1, 2]).tril(), ValueError, ["(2,)"]),
  ("op14", lambda: X.diagonal(0, 1, -1), ValueError, ["dim 1"]),
  ("op15", lambda: Tensor.ones(2, 2, 2).diag(), ValueError, ["(2, 2, 2)"]),
  ("op16", lambda: X.roll((1, 2), 0), ValueError, ["(1, 2)", "(0,)"]),
  ("op17", lambda: X.repeat_interleave(Tensor([1, 2, 1])), ValueError, ["tolist"]),
  ("op18", lambda: X.repeat_interleave([1, 2], dim=1), ValueError, ["[1, 2]", "4"]),
  ("op19", lambda: X.repeat_interleave(-1), ValueError, ["-1"]),
  ("op20", lambda: X.unfold(1, 5, 1), ValueError, ["5", "4"]),
  ("op21", lambda: X.unfold(1, 2, 0), ValueError, ["step", "0"]),
  ("op22", lambda: X.meshgrid(X), ValueError, ["(3, 4)"]),
  ("op23", lambda: Tensor([1]).meshgrid(Tensor([2]), indexing="ji"), ValueError, ["'ji'"]),
  ("op24", lambda: X.unflatten(1, (3, -1)), ValueError, ["(3, -1)", "4"]),
  ("op25", lambda: X.unflatten(1, ()), ValueError, ["empty"]),
  ("op26", lambda: X.pad((4, 0), mode="reflect"), ValueError, ["reflect", "(4, 0)", "size 4"]),
  ("op27", lambda: X.pad((5, 0), mode="circular"), ValueError, ["circular", "(5, 0)"]),
  ("op28", lambda: X.pad((1, 1), mode="wrap"), ValueError, ["'wrap'"]),
  ("op29", lambda: X.pad((1, 1), mode="reflect", value=2.0), ValueError, ["value"]),
  ("op30", lambda: Tensor.ones(3, 0).pad((1, 1), mode="replicate"), ValueError, ["size 0"]),
  ("op31", lambda: X.pad_to(2, 4), ValueError, ["(3, 4)", "(2, 4)"]),
  ("op32", lambda: X.shrink_to(3, 5), ValueError, ["(3, 4)", "(3, 5)"]),
  ("op33", lambda: X.shrink_to(3), ValueError, ["(3,)"]),
]))
def test_op_errors(name: str, fn: Callable[[], Any], exc: type[Exception], names: list[str]) -> None:
  raises(exc, fn, *names)

@pytest.mark.parametrize("formula,shapes,names", [
  ("ij,jk", [(3, 4)], ["2 operands", "1 tensors"]),
  ("ij->ii", [(2, 2)], ["output subscript i", "twice"]),
  ("ij->k", [(2, 2)], ["output subscript k", "in no operand"]),
  ("ij", [(2, 2, 2)], ["(2, 2, 2)", "'ij'"]),
  ("ii", [(2, 3)], ["subscript i", "sizes 2 and 3"]),
  ("i1", [(2, 2)], ["'1'", "not a subscript"]),
  ("i.j", [(2, 2)], ["'.'"]),
  ("i->i->i", [(2,)], ["more than one '->'"]),
  ("i,i->", [(2,), (3,)], ["subscript i", "2 and 3", "broadcast"]),
  ("......i", [(2,)], ["'...' appears twice"]),
], ids=str)
def test_einsum_errors(formula: str, shapes: list[tuple[int, ...]], names: list[str]) -> None:
  raises(ValueError, lambda: Tensor.einsum(formula, *[Tensor.ones(*s) for s in shapes]), *names)
  if HAVE_TORCH:  # torch rejects the same formulas
    with pytest.raises(RuntimeError): torch.einsum(formula, *[torch.ones(*s) for s in shapes])

@pytest.mark.parametrize("formula,sizes,names", [
  ("a b -> a c", {}, ["['c']", "unknown axis"]),
  ("a b -> b", {}, ["['a']", "missing on the right"]),
  ("a b c -> a b c", {}, ["3 dims", "(2, 6)"]),
  ("a (b c) -> a b c", {}, ["['b', 'c']", "keywords"]),
  ("a (b c) -> a b c", {"b": 4}, ["size 6", "(b c)"]),
  ("a b -> a b", {"z": 2}, ["['z']"]),
  ("a a -> a", {}, ["'a' appears twice"]),
  ("a (b -> a b", {}, ["unbalanced"]),
  ("a ((b)) -> a b", {}, ["nested"]),
  ("a 2 -> a", {}, ["'2'", "number 1"]),
  ("a b", {}, ["'->'"]),
  ("... a -> a", {}, ["'...'"]),
  ("(a ...) -> a ...", {}, ["'...'", "parentheses"]),
], ids=str)
def test_rearrange_errors(formula: str, sizes: dict[str, int], names: list[str]) -> None:
  raises(ValueError, lambda: (Tensor.ones(2, 6) * 1).rearrange(formula, **sizes), *names)

# ---- the docstring examples of the indexing module run ----

def test_docstring_examples() -> None:
  import doctest

  import lazytensor.frontend.mixin.index
  result = doctest.testmod(lazytensor.frontend.mixin.index, extraglobs={"Tensor": Tensor}, optionflags=doctest.ELLIPSIS)
  assert result.failed == 0 and result.attempted > 10, result
