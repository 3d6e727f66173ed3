"""The IR itself: interning, immutability, pattern matching, rewriting to a fixed point."""
import pytest

from lazytensor.dtype import dtypes
from lazytensor.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite


def test_interning_returns_the_same_object() -> None:
  a = UOp.const(dtypes.float32, 1.0)
  assert a is UOp.const(dtypes.float32, 1.0)
  x = UOp(Ops.SPECIAL, dtypes.int32, (), ("gidx0", 4))
  assert (x + 1) * 2 is (x + 1) * 2

def test_interning_distinguishes_what_differs() -> None:
  assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
  assert UOp.const(dtypes.float32, 1.0) is not UOp.const(dtypes.float64, 1.0)
  assert UOp.const(dtypes.int32, 1) is not UOp.const(dtypes.bool, True)

def test_immutable() -> None:
  a = UOp.const(dtypes.int32, 3)
  with pytest.raises(AttributeError): a.arg = 4  # type: ignore[misc]
  assert a.replace(arg=4) is UOp.const(dtypes.int32, 4)

def test_rewrite_to_fixed_point_and_commutative_patterns() -> None:
  x = UOp(Ops.SPECIAL, dtypes.int32, (), ("x", 8))
  pm = PatternMatcher([
    (UPat.var("x") * 1, lambda x: x),  # x*1 -> x
    (UPat.var("x") + 0, lambda x: x),  # x+0 -> x
  ])
  assert graph_rewrite((x * 1 + 0) * 1, pm, name="symbolic") is x
  assert graph_rewrite(UOp.const(dtypes.int32, 0) + x, pm, name="symbolic") is x  # 0+x matches x+0: ADD is commutative

def test_deep_graphs_do_not_recurse() -> None:
  x = UOp(Ops.SPECIAL, dtypes.int32, (), ("x", 8))
  y = x
  for _ in range(20000): y = y + 0
  assert graph_rewrite(y, PatternMatcher([(UPat.var("x") + 0, lambda x: x)]), name="symbolic") is x
  assert len(y.toposort) == 20002

def test_named_variables_must_bind_consistently() -> None:
  x, y = (UOp(Ops.SPECIAL, dtypes.int32, (), (n, 8)) for n in "xy")
  pm = PatternMatcher([(UPat.var("a") - UPat.var("a"), lambda a: UOp.const(dtypes.int32, 0))])  # a-a -> 0
  assert graph_rewrite(x - x, pm, name="symbolic") is UOp.const(dtypes.int32, 0)
  assert graph_rewrite(x - y, pm, name="symbolic") is x - y
