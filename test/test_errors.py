"""User errors (issue 2, item 10): raised where the op is built, as ValueError / TypeError / IndexError whose message
names the bad value and what was expected; no bad input crashes the process or reads out of bounds."""
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import named

from lazytensor import GlobalCounters, Tensor, dtypes


def lazy(*shape: int) -> Tensor:
  """An unrealized tensor: an error must come from building the op, before anything is scheduled."""
  return Tensor.ones(*shape) * 2

def raises_at_build(exc: type[Exception], fn: Callable[[], Any], *must_name: Any) -> str:
  """fn() raises exc without running a kernel, and the message mentions every item of must_name."""
  GlobalCounters.reset()
  with pytest.raises(exc) as info: fn()
  assert GlobalCounters.kernel_count == 0, "the error came from realizing, not from building the op"
  msg = str(info.value)
  for item in must_name: assert str(item) in msg, f"{item} not named in {msg!r}"
  return msg

# ---- shape mismatches name both shapes ----

@pytest.mark.parametrize("name,fn,a,b", named([
  ("add", lambda a, b: a + b, (3, 4), (5,)), ("mul_rank", lambda a, b: a * b, (2, 3, 4), (3, 1, 5)),
  ("compare", lambda a, b: a < b, (4,), (3,)), ("maximum", lambda a, b: a.maximum(b), (2, 2), (3, 2)),
  ("where", lambda a, b: (a > 0).where(a, b), (2,), (3,)), ("pow", lambda a, b: a ** b, (2,), (4,)),
  ("floordiv", lambda a, b: a // b, (1, 3), (2, 2))]))
def test_broadcast_mismatch(name: str, fn: Callable[[Tensor, Tensor], Tensor], a: tuple[int, ...],
                            b: tuple[int, ...]) -> None:
  raises_at_build(ValueError, lambda: fn(lazy(*a), lazy(*b)), a, b)

@pytest.mark.parametrize("a,b", [((3, 4), (5, 6)), ((3,), (4,)), ((2, 3), (2,)), ((4,), (3, 2)), ((2, 3, 4), (3, 4, 5)),
                                 ((2, 2, 3), (4, 3, 1))], ids=str)
def test_matmul_mismatch(a: tuple[int, ...], b: tuple[int, ...]) -> None:
  raises_at_build(ValueError, lambda: lazy(*a) @ lazy(*b), a, b)
  raises_at_build(ValueError, lambda: lazy(*a).dot(lazy(*b)), a, b)

def test_matmul_bad_operands() -> None:
  raises_at_build(ValueError, lambda: Tensor(2.0) @ lazy(2, 2), "()", (2, 2))
  raises_at_build(TypeError, lambda: lazy(2, 2).matmul("x"), "str")  # type: ignore[arg-type]

@pytest.mark.parametrize("shape,new", [((2, 3), (4, 2)), ((2, 3), (-1, 4)), ((6,), (-1, -1)), ((2, 3), (-2, 3)),
                                       ((2, 3), (2.0, 3)), ((0, 3), (-1, 0))], ids=str)
def test_reshape_mismatch(shape: tuple[int, ...], new: tuple[Any, ...]) -> None:
  raises_at_build(ValueError, lambda: lazy(*shape).reshape(new), new)

def test_reshape_names_both_shapes() -> None:
  raises_at_build(ValueError, lambda: lazy(2, 3).reshape(4, 2), (2, 3), (4, 2))

@pytest.mark.parametrize("fn,names", [
  (lambda: lazy(2, 3).cat(lazy(2, 4)), [(2, 3), (2, 4)]), (lambda: lazy(2, 3).cat(lazy(3)), [(2, 3), (3,)]),
  (lambda: Tensor.cat(lazy(2, 3), lazy(1, 3), lazy(1, 4), dim=0), [(2, 3), (1, 4)]),
  (lambda: Tensor.stack(lazy(2, 3), lazy(3, 2)), [(2, 3), (3, 2)]), (lambda: Tensor.stack([]), []),
  (lambda: Tensor.cat([]), []),
  (lambda: lazy(3, 1).expand(3, 4, 2), [(3, 1), (3, 4, 2)]), (lambda: lazy(3, 2).expand(2), [(3, 2)]),
  (lambda: lazy(3, 2).expand(-1, 3, 2), [-1, (3, 2)]), (lambda: lazy(2, 3, 4).flatten(2, 1), ["start_dim 2"]),
  (lambda: lazy(2, 3, 4).flatten(-1, 0), ["start_dim -1", (2, 3, 4)]),
  (lambda: lazy(2, 3).permute(0, 0), [(0, 0)]), (lambda: lazy(2, 3).shrink(((0, 5), None)), [(0, 5)]),
  (lambda: lazy(2, 3).pad(((1, 1),)), [(2, 3)]), (lambda: lazy(2, 3).split([1, 2]), ["[1, 2]"]),
  (lambda: lazy(4).chunk(0), [0]), (lambda: lazy(2, 3).repeat(2), [2]), (lambda: lazy(2, 3).repeat(-1, 1), [-1]),
  (lambda: lazy(1, 3, 5, 5).conv2d(lazy(2, 2, 3, 3)), [3, (2, 2, 3, 3)]),
  (lambda: lazy(1, 1, 2, 2).conv2d(lazy(1, 1, 3, 3)), [(3, 3), (2, 2)]),
  (lambda: lazy(1, 1, 5, 5).conv2d(lazy(2, 1, 3, 3), lazy(3)), [(3,), (2, 1, 3, 3)]),
  (lambda: lazy(1, 1, 5, 5).conv2d(lazy(2, 1, 3, 3), stride=0), ["stride 0"]),
  (lambda: lazy(1, 5, 5).conv2d(lazy(2, 1, 3, 3)), [(1, 5, 5), (2, 1, 3, 3)])])
def test_movement_and_layout_errors(fn: Callable[[], Any], names: list[Any]) -> None:
  raises_at_build(ValueError, fn, *names)

# ---- bad axes are IndexErrors that name the axis ----

@pytest.mark.parametrize("name,fn,axis", named([
  ("sum", lambda t: t.sum(2), 2), ("sum_neg", lambda t: t.sum(-3), -3), ("sum_tuple", lambda t: t.sum((0, 5)), 5),
  ("max", lambda t: t.max(axis=2), 2), ("min", lambda t: t.min(-3), -3), ("mean", lambda t: t.mean(7), 7),
  ("var", lambda t: t.var(2), 2), ("any", lambda t: t.any(3), 3), ("argmax", lambda t: t.argmax(2), 2),
  ("argmin", lambda t: t.argmin(-3), -3), ("softmax", lambda t: t.softmax(2), 2),
  ("log_softmax", lambda t: t.log_softmax(-3), -3),
  ("logsumexp", lambda t: t.logsumexp(2), 2), ("permute", lambda t: t.permute(0, 2), 2),
  ("transpose", lambda t: t.transpose(0, 5), 5), ("flip", lambda t: t.flip(2), 2),
  ("squeeze", lambda t: t.squeeze(4), 4),
  ("unsqueeze", lambda t: t.unsqueeze(3), 3), ("unsqueeze_neg", lambda t: t.unsqueeze(-4), -4),
  ("flatten", lambda t: t.flatten(3), 3), ("cat", lambda t: t.cat(t, dim=2), 2),
  ("stack", lambda t: Tensor.stack(t, t, dim=4), 4), ("split", lambda t: t.split(1, dim=2), 2),
  ("chunk", lambda t: t.chunk(2, dim=-3), -3)]))
def test_bad_axis(name: str, fn: Callable[[Tensor], Any], axis: int) -> None:
  msg = raises_at_build(IndexError, lambda: fn(lazy(2, 3)), axis)
  assert re.search(rf"axis {axis}\b", msg), msg

# where torch and tinygrad raise RuntimeError (or NotImplementedError, IndexError), the ValueError or TypeError is also
# one of those, so code written against them catches it
@pytest.mark.parametrize("fn,kinds,names", [
  (lambda: lazy(3, 4).flip((1, -1)), (ValueError, RuntimeError), ["twice"]),
  (lambda: lazy(3, 4).permute(0, 2), (IndexError,), ["axis 2"]),
  (lambda: lazy(3, 4).reshape(-1, -1, 2), (ValueError, RuntimeError), ["one dimension can be -1"]),
  (lambda: lazy(2, 4) @ lazy(1, 3), (ValueError, RuntimeError), [(2, 4), (1, 3)]),
  (lambda: lazy(3).clip(None, None), (ValueError, RuntimeError), ["min and max"]),
  (lambda: lazy(3).div(lazy(3), rounding_mode="typo"), (ValueError, RuntimeError), ["typo"]),
  (lambda: lazy(3).pad((3, 0), mode="typo"), (ValueError, NotImplementedError), ["typo"]),
  (lambda: lazy(1, 5).pad((3, -5), mode="circular"), (ValueError, NotImplementedError), ["(3, -5)", "nothing"]),
  (lambda: lazy(1, 5).pad((-2, 4), mode="circular"), (ValueError, RuntimeError), ["(-2, 4)", "size 3 after"]),
  (lambda: lazy(3).bitwise_and(lazy(3)), (TypeError, RuntimeError), ["float32"]),
  (lambda: lazy(3)[Tensor(1.1)], (TypeError, IndexError), ["float32"]),
  (lambda: Tensor(1.0).cat(Tensor(2.0)), (IndexError,), ["0-d"]),
  (lambda: lazy(8).unfold(0, 1, -1), (ValueError, RuntimeError), ["-1"]),
  (lambda: Tensor.linspace(1, 2, 3, dtype="bool"), (TypeError, RuntimeError), ["bool"]),
  (lambda: Tensor([1.0]).sum(dtype=""), (TypeError, AttributeError), ["unknown dtype ''"])])
def test_errors_are_also_what_torch_raises(fn: Callable[[], Any], kinds: tuple[type, ...], names: list[Any]) -> None:
  for kind in kinds: raises_at_build(kind, fn, *names)

@pytest.mark.parametrize("fn", [lambda t: t.sum(1.5), lambda t: t.argmax((0, 1)), lambda t: t.permute(0, "1"),
                                lambda t: t.max(axis="0")])
def test_axis_of_wrong_type(fn: Callable[[Tensor], Any]) -> None:
  raises_at_build(TypeError, lambda: fn(lazy(2, 3)))

def test_repeated_axis() -> None:
  raises_at_build(ValueError, lambda: lazy(2, 3).sum((1, -1)), (1, -1))

# ---- creation: ragged lists, unsupported dtypes, bad shapes ----

@pytest.mark.parametrize("data", [[[1, 2], [3]], [1, [2]], [[[1], [2, 3]]], [[1, 2], 3], [[], [1]]], ids=str)
def test_ragged_nested_list(data: Any) -> None:
  raises_at_build(ValueError, lambda: Tensor(data), "ragged")

@pytest.mark.parametrize("data", [[2 ** 63], [2 ** 64], [1, -(2 ** 70)]], ids=str)
def test_int_out_of_range(data: Any) -> None:
  raises_at_build(ValueError, lambda: Tensor(data), "int64")

@pytest.mark.parametrize("data,name", [
  (np.array([1 + 2j]), "complex"), (np.array(["a"]), "<U1"), (["a", "b"], "<U1"),
  (np.array([None], dtype=object), "NoneType"),
  (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64"), ([None], "NoneType"), (1 + 2j, "complex"),
  ("abc", "str"), ({1: 2}, "dict"), (np.array([1, "a"], dtype=object), "<U")], ids=str)
def test_unsupported_data(data: Any, name: str) -> None:
  raises_at_build(TypeError, lambda: Tensor(data), name)

@pytest.mark.parametrize("dtype", ["float8", "complex64", "str", np.complex64, np.dtype("U3"), object, 3], ids=str)
def test_unsupported_dtype_name(dtype: Any) -> None:
  raises_at_build(TypeError, lambda: Tensor([1, 2], dtype=dtype))
  raises_at_build(TypeError, lambda: Tensor.zeros(2, dtype=dtype))
  raises_at_build(TypeError, lambda: lazy(2).cast(dtype))

@pytest.mark.parametrize("fn,exc", [
  (lambda: Tensor.zeros(2.5), ValueError), (lambda: Tensor.rand(-1), ValueError),
  (lambda: Tensor.ones(2, -3), ValueError), (lambda: Tensor.empty(-1), ValueError),
  (lambda: Tensor.full((2,), [1, 2]), TypeError), (lambda: Tensor.full((2,), "a"), TypeError),
  (lambda: Tensor.arange(0, 5, 0), ValueError), (lambda: Tensor.arange(0, float("inf")), ValueError),
  (lambda: Tensor.linspace(0, 1, -1), ValueError), (lambda: Tensor.eye(-1), ValueError),
  (lambda: Tensor.rand(2, dtype=dtypes.int32), TypeError), (lambda: Tensor([1], device="FOO:1"), ValueError),
  (lambda: lazy(2).to("TPU"), ValueError)])
def test_bad_creation_arguments(fn: Callable[[], Any], exc: type[Exception]) -> None:
  raises_at_build(exc, fn)

# ---- operands and dtypes that an op does not take ----

@pytest.mark.parametrize("fn,exc", [
  (lambda: lazy(2) + "a", TypeError), (lambda: lazy(2) + None, TypeError), (lambda: lazy(2) & lazy(2), TypeError),
  (lambda: lazy(2) << 1, TypeError), (lambda: -Tensor([True]), TypeError),
  (lambda: Tensor([True]) - Tensor([False]), TypeError), (lambda: Tensor([True]) // Tensor([True]), TypeError),
  (lambda: Tensor([1, 2]) ** -1, ValueError), (lambda: lazy(2).bitcast(dtypes.int16), TypeError),
  (lambda: lazy(2).div(lazy(2), rounding_mode="round"), ValueError), (lambda: lazy(2).bitwise_not(), TypeError),
  (lambda: Tensor([1.0]).cat([1.0]), TypeError),  # type: ignore[arg-type]
])
def test_bad_operands(fn: Callable[[], Any], exc: type[Exception]) -> None:
  raises_at_build(exc, fn)

# ---- indexing: out-of-range indices are IndexErrors, never out-of-bounds reads ----

@pytest.mark.parametrize("index,name", [(3, 3), (-4, -4), ((0, 5), 5), ((0, -6), -6), ((slice(None), 5), 5),
                                        ((0, 0, 0), "too many"),
                                        ((Ellipsis, 0, Ellipsis), "ellipsis"), ((None, 0, 0, 0), "too many")], ids=str)
def test_index_out_of_range(index: Any, name: Any) -> None:
  raises_at_build(IndexError, lambda: lazy(3, 5)[index], name)
  raises_at_build(IndexError, lambda: Tensor(np.arange(15).reshape(3, 5))[index], name)

# bools, lists and integer arrays are indices now (masks and advanced indexing); floats and strings never are
@pytest.mark.parametrize("index", [1.0, "a", (0, 1.5)], ids=str)
def test_index_of_unsupported_type(index: Any) -> None:
  raises_at_build(TypeError, lambda: lazy(3, 5)[index], type(index[-1] if isinstance(index, tuple) else index).__name__)

def test_index_errors_on_small_tensors() -> None:
  raises_at_build(IndexError, lambda: Tensor(1.0)[0], "too many")
  raises_at_build(IndexError, lambda: Tensor.zeros(0, 3)[0], 0)
  raises_at_build(ValueError, lambda: lazy(3)[::0], "zero")

def test_out_of_range_slices_are_clamped() -> None:
  # like numpy: slices never read outside the tensor, they are cut to it
  x = Tensor(np.arange(5))
  assert x[3:100].tolist() == [3, 4] and x[-100:2].tolist() == [0, 1] and x[100:].tolist() == []
  assert x[::-100].tolist() == [4] and x[10:-10:-1].tolist() == [4, 3, 2, 1, 0]

# ---- reading values ----

@pytest.mark.parametrize("fn,exc", [
  (lambda: lazy(2, 3).item(), ValueError), (lambda: len(Tensor(1)), TypeError), (lambda: bool(lazy(2, 3)), ValueError),
  (lambda: Tensor.ones(0, 3).max(0), ValueError), (lambda: Tensor.ones(0, 3).argmax(), ValueError),
  (lambda: Tensor.ones(0).min(), ValueError)])
def test_bad_reads(fn: Callable[[], Any], exc: type[Exception]) -> None:
  raises_at_build(exc, fn)

def test_errors_leave_the_framework_usable() -> None:
  x = Tensor([[1.0, 2.0], [3.0, 4.0]])
  for bad in (lambda: x + Tensor([1.0, 2.0, 3.0]), lambda: x[5], lambda: x.sum(3), lambda: x.reshape(3)):
    with pytest.raises((ValueError, IndexError)): bad()
  assert (x @ x).tolist() == [[7.0, 10.0], [15.0, 22.0]]
