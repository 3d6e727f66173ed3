"""ShapeTracker against numpy: any chain of movement ops must read the same buffer elements, and the same padding."""
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazytensor.dtype import dtypes
from lazytensor.shape.view import ShapeTracker, View
from lazytensor.uop.opcodes import Ops, exec_alu
from lazytensor.uop.ops import UOp

MAX_SIZE = 240  # positions a chain may reach: every position is evaluated in Python

# ---- evaluating index expressions without the compiler ----

def index_vars(shape: tuple[int, ...]) -> list[UOp]:
  return [UOp(Ops.SPECIAL, dtypes.index, (), (f"idx{d}", s)) for d, s in enumerate(shape)]

def evaluate(root: UOp, shape: tuple[int, ...]) -> np.ndarray:
  """`root` at every position of `shape`, the index variables taking that position's coordinates."""
  positions = list(np.ndindex(*shape))
  axis = {u: d for d, u in enumerate(index_vars(shape))}
  vals: dict[UOp, list[Any]] = {}
  for node in root.toposort:
    if node.op is Ops.CONST: vals[node] = [node.arg] * len(positions)
    elif node.op is Ops.SPECIAL: vals[node] = [p[axis[node]] for p in positions]
    else: vals[node] = [exec_alu(node.op, node.dtype, args) for args in zip(*(vals[s] for s in node.src))]
  return np.array(vals[root], dtype=np.int64).reshape(shape)

def evaluate_tracker(tracker: ShapeTracker) -> tuple[np.ndarray, np.ndarray]:
  idx, valid = tracker.to_indexed_uops(index_vars(tracker.shape))
  assert idx.dtype == dtypes.index and valid.dtype == dtypes.bool
  return evaluate(idx, tracker.shape), evaluate(valid, tracker.shape).astype(bool)

# ---- the numpy reference: an array of buffer indices, -1 where the position is padding ----

def apply_np(ref: np.ndarray, op: str, arg: Any) -> np.ndarray:
  if op == "reshape": return ref.reshape(arg)
  if op == "permute": return ref.transpose(arg)
  if op == "expand": return np.broadcast_to(ref, arg)
  if op == "pad": return np.pad(ref, arg, constant_values=-1) if arg else ref  # numpy cannot pad a 0-d array
  if op == "shrink": return ref[tuple(slice(b, e) for b, e in arg)]
  assert op == "flip"
  return ref[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]

def apply_chain(shape: tuple[int, ...], chain: list[tuple[str, Any]]) -> tuple[ShapeTracker, np.ndarray]:
  tracker, ref = ShapeTracker.from_shape(shape), np.arange(math.prod(shape)).reshape(shape)
  for op, arg in chain:
    tracker, ref = getattr(tracker, op)(arg), apply_np(ref, op, arg)
  return tracker, ref

def check_tracker(tracker: ShapeTracker, ref: np.ndarray) -> None:
  """Index and validity everywhere, real_size, real_strides and axis_is_masked, all against the reference."""
  assert tracker.shape == ref.shape and tracker.size == ref.size
  idx, valid = evaluate_tracker(tracker)
  np.testing.assert_array_equal(valid, ref >= 0)
  np.testing.assert_array_equal(idx[valid], ref[valid])
  # the host-side reading (printing a realized view) agrees: buffer values at the indices, 0 for padding
  values = np.arange(1, int(ref.max(initial=0)) + 2)
  np.testing.assert_array_equal(tracker.gather(values), np.where(ref >= 0, values[np.maximum(ref, 0)], 0))
  touched = int(ref.max()) + 1 if valid.any() else 0
  assert tracker.real_size() >= touched
  if len(tracker.views) == 1: assert tracker.real_size() == touched
  if ref.size == 0: return
  for axis, stride in enumerate(tracker.real_strides()):
    both = (np.delete(ref, -1, axis) >= 0) & (np.delete(ref, 0, axis) >= 0)
    if stride is not None: assert (np.diff(ref, axis=axis)[both] == stride).all(), f"axis {axis} stride {stride}"
    if not tracker.axis_is_masked(axis): assert (valid.all(axis) == valid.any(axis)).all(), f"axis {axis} is masked"

# ---- random chains of movement ops ----

def divisors(n: int) -> list[int]: return [d for d in range(2, n + 1) if n % d == 0]

@st.composite
def reshape_arg(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
  """Any shape of the same size: a fresh factorization, with size-1 dims sprinkled in."""
  n = math.prod(shape)
  if n == 0: return draw(st.permutations(shape))
  dims, left = [], n
  while left > 1:
    dims.append(draw(st.sampled_from(divisors(left))))
    left //= dims[-1]
  for _ in range(draw(st.integers(0, 2))): dims.insert(draw(st.integers(0, len(dims))), 1)
  return tuple(dims)

@st.composite
def op_arg(draw: st.DrawFn, op: str, shape: tuple[int, ...]) -> Any:
  if op == "reshape": return draw(reshape_arg(shape))
  if op == "permute": return tuple(draw(st.permutations(range(len(shape)))))
  if op == "expand": return tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape)
  if op == "pad": return tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
  if op == "flip": return tuple(draw(st.booleans()) for _ in shape)
  assert op == "shrink"
  bounds = [(draw(st.integers(0, s)), draw(st.integers(0, s))) for s in shape]
  return tuple((min(b, e), max(b, e)) for b, e in bounds)

def result_shape(op: str, arg: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
  return apply_np(np.empty(shape), op, arg).shape

@st.composite
def chains(draw: st.DrawFn, ops: tuple[str, ...], start: tuple[int, ...] | None = None
           ) -> tuple[tuple[int, ...], list[tuple[str, Any]]]:
  shape = start if start is not None else tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
  chain, cur = [], shape
  for _ in range(draw(st.integers(1, 7))):
    op = draw(st.sampled_from(ops))
    arg = draw(op_arg(op, cur))
    if math.prod(result_shape(op, arg, cur)) > MAX_SIZE: continue
    chain.append((op, arg))
    cur = result_shape(op, arg, cur)
  return shape, chain

ALL_OPS = ("reshape", "permute", "expand", "pad", "shrink", "flip")
SINGLE_VIEW_OPS = ("permute", "expand", "pad", "shrink", "flip")

@settings(max_examples=250, deadline=None)
@given(chains(ALL_OPS))
def test_random_chains(case: tuple[tuple[int, ...], list[tuple[str, Any]]]) -> None:
  tracker, ref = apply_chain(*case)
  check_tracker(tracker, ref)
  simple = tracker.simplify()
  assert len(simple.views) <= len(tracker.views)
  check_tracker(simple, ref)

@settings(max_examples=100, deadline=None)
@given(chains(SINGLE_VIEW_OPS))
def test_chains_without_reshape_stay_one_view(case: tuple[tuple[int, ...], list[tuple[str, Any]]]) -> None:
  tracker, ref = apply_chain(*case)
  assert len(tracker.views) == 1
  check_tracker(tracker, ref)

@settings(max_examples=60, deadline=None)
@given(chains(("reshape",)))
def test_reshape_of_contiguous_stays_contiguous(case: tuple[tuple[int, ...], list[tuple[str, Any]]]) -> None:
  tracker, ref = apply_chain(*case)
  assert tracker.contiguous
  check_tracker(tracker, ref)

@settings(max_examples=60, deadline=None)
@given(st.data())
def test_compose(data: st.DataObject) -> None:
  inner, inner_ref = apply_chain(*data.draw(chains(ALL_OPS)))
  outer, outer_ref = apply_chain(*data.draw(chains(ALL_OPS, start=inner.shape)))
  composed = inner + outer
  assert len(composed.views) <= len(inner.views) + len(outer.views)
  flat = inner_ref.reshape(-1)
  ref = np.where(outer_ref >= 0, flat[np.clip(outer_ref, 0, None)] if flat.size else -1, -1)
  check_tracker(composed, ref)

# ---- specific cases ----

def test_create_canonicalizes() -> None:
  v = View.create((2, 1, 3))
  assert v.strides == (3, 0, 1) and v.contiguous
  assert View.create((2, 3), mask=((0, 2), (0, 3))) == View.create((2, 3))
  empty = View.create((2, 3), (3, 1), 5, ((1, 1), (0, 3)))
  assert empty == View.create((2, 3), (7, 7), 0, ((0, 2), (2, 1))) and empty.mask == ((0, 0), (0, 0))
  assert View.create((0, 3), (9, 9), 4) == View.create((0, 3)) and View.create((0, 3)).contiguous
  # one valid index along a dim is folded into the offset, so equal maps compare equal
  assert View.create((3, 4), (4, 1), 0, ((1, 2), (0, 4))) == View.create((3, 4), (0, 1), 4, ((1, 2), (0, 4)))

def test_pad_then_shrink_back_is_the_original() -> None:
  st0 = ShapeTracker.from_shape((3, 4))
  assert st0.pad(((1, 2), (0, 3))).shrink(((1, 4), (0, 4))) == st0

def test_reshape_splits_a_permuted_dim() -> None:
  tracker = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((2, 3, 4))
  assert tracker.views == (View.create((2, 3, 4), (3, 1, 6)),)

def test_reshape_merges_padded_rows() -> None:
  tracker = ShapeTracker.from_shape((3, 4)).pad(((1, 1), (0, 0))).reshape((20,))
  assert tracker.views == (View.create((20,), (1,), -4, ((4, 16),)),)

def test_unmergeable_reshape_pushes_and_reshaping_back_folds() -> None:
  permuted = ShapeTracker.from_shape((4, 6)).permute((1, 0))
  flat = permuted.reshape((24,))
  assert len(flat.views) == 2 and flat.real_strides() == (None,)
  check_tracker(flat, np.arange(24).reshape(4, 6).T.reshape(24))
  assert flat.reshape((6, 4)) == permuted

def test_row_of_a_transposed_view_merges() -> None:
  # a row of the flattening is a box of the transposed view even though the view itself does not flatten
  flat = ShapeTracker.from_shape((4, 3)).permute((1, 0)).reshape((12,))
  row = flat.shrink(((4, 8),))
  assert len(row.views) == 1
  check_tracker(row, np.arange(12).reshape(4, 3).T.reshape(12)[4:8])

@pytest.mark.parametrize("size, kernel, stride, dilation", [(10, 3, 1, 1), (10, 3, 2, 2), (9, 2, 3, 1)])
def test_pool_windows_fold_into_one_view(size: int, kernel: int, stride: int, dilation: int) -> None:
  # sliding windows built by repeating the input (expand + reshape), the way a frontend writes pooling: the repeat
  # needs a second view, but the finished windows are one affine view again, so kernels get no div/mod
  out = (size - dilation * (kernel - 1) - 1) // stride + 1
  repeats, window = math.ceil(kernel * (size + dilation) / size), size + dilation
  chain = [("reshape", (1, size)), ("expand", (repeats, size)), ("reshape", (repeats * size,)),
           ("shrink", ((0, kernel * window),)), ("reshape", (kernel, window)),
           ("shrink", ((0, kernel), (0, out * stride))), ("reshape", (kernel, out, stride)),
           ("shrink", ((0, kernel), (0, out), (0, 1))), ("reshape", (kernel, out)), ("permute", (1, 0))]
  tracker, ref = apply_chain((size,), chain)
  assert tracker.views == (View.create((out, kernel), (stride, dilation)),)
  check_tracker(tracker, ref)

def test_expression_size() -> None:
  i, j = index_vars((4, 5))
  idx, valid = ShapeTracker.from_shape((4, 5)).to_indexed_uops([i, j])
  assert idx is i * 5 + j and valid is UOp.const(dtypes.bool, True)
  k, m = index_vars((1, 4))
  idx, valid = ShapeTracker.from_shape((1, 4)).to_indexed_uops([k, m])
  assert idx is m and valid is UOp.const(dtypes.bool, True)
  idx, valid = ShapeTracker.from_shape((4,)).pad(((1, 0),)).to_indexed_uops([i])
  assert idx is i + -1 and valid is UOp.const(dtypes.index, 0).lt(i)

def test_zero_size() -> None:
  tracker = ShapeTracker.from_shape((0, 3))
  assert tracker.contiguous and tracker.size == 0 and tracker.real_size() == 0
  assert tracker.reshape((3, 0, 2)).shape == (3, 0, 2) and tracker.permute((1, 0)).shape == (3, 0)
  assert tracker.reshape((3, 1, 0)).expand((3, 4, 0)).contiguous
  padded = tracker.pad(((1, 1), (0, 0)))
  assert padded.shape == (2, 3) and padded.views[0].masked_out and padded.real_size() == 0
  check_tracker(padded, np.full((2, 3), -1))
  # a zero-size view collapses any stack of views below it
  assert len(ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,)).shrink(((3, 3),)).views) == 1

def test_real_strides() -> None:
  base = ShapeTracker.from_shape((4, 6))
  assert base.real_strides() == (6, 1) and base.unit_stride_axes() == [1]
  assert base.permute((1, 0)).real_strides() == (1, 6)
  assert base.reshape((4, 1, 6)).expand((4, 5, 6)).real_strides() == (6, 0, 1)
  assert base.pad(((1, 0), (0, 0))).real_strides() == (None, 1)
  assert base.flip((True, False)).real_strides() == (-6, 1)
  # through two views: the outer dim still moves one coordinate of the view below, the merged one does not
  two = ShapeTracker.from_shape((5, 2, 3)).permute((0, 2, 1)).reshape((5, 6))
  assert len(two.views) == 2 and two.real_strides() == (6, None)

def test_axis_is_masked() -> None:
  padded = ShapeTracker.from_shape((4, 6)).pad(((1, 0), (0, 0)))
  assert padded.axis_is_masked(0) and not padded.axis_is_masked(1)
  two = ShapeTracker.from_shape((5, 2, 3)).pad(((1, 0), (0, 0), (0, 0))).permute((0, 2, 1)).reshape((6, 6))
  assert len(two.views) == 2 and two.axis_is_masked(0) and two.axis_is_masked(1)

def test_real_size() -> None:
  assert ShapeTracker.from_shape((10,)).shrink(((2, 5),)).real_size() == 5
  assert ShapeTracker.from_shape((10,)).flip((True,)).real_size() == 10
  assert ShapeTracker.from_shape((10,)).pad(((3, 3),)).real_size() == 10
  assert ShapeTracker.from_shape((3, 1)).expand((3, 7)).real_size() == 3

@pytest.mark.parametrize("shape, new_shape", [((2, 3), (3, 2)), ((6,), (2, 3)), ((2, 3, 4), (4, 6)), ((1, 1), (1,)),
                                              ((), (1, 1))])
def test_reshape_of_flipped(shape: tuple[int, ...], new_shape: tuple[int, ...]) -> None:
  flip_all = tuple(True for _ in shape)
  tracker = ShapeTracker.from_shape(shape).flip(flip_all).reshape(new_shape)
  assert len(tracker.views) == 1
  check_tracker(tracker, apply_np(np.arange(math.prod(shape)).reshape(shape), "flip", flip_all).reshape(new_shape))
