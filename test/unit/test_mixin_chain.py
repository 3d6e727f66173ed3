"""The Tensor API is one chain of mixins (lazytensor/frontend/mixin/, docs/architecture.md): each mixin derives from the
one below it, its module imports only the modules below it, and its code calls no method that only a mixin above it
defines. mypy checks the last point through the Self types; this test checks it without mypy, from the source."""
from __future__ import annotations

import ast
import importlib
import inspect

from lazytensor import Tensor
from lazytensor.frontend.mixin.movement import MovementMixin

CHAIN = ["movement", "rearrange", "shapes", "operands", "compare", "elementwise", "join", "create", "unary", "special",
         "reduce", "order", "index", "take_put", "stats", "random", "nn", "multi", "aliases", "linalg",
         "inplace", "writes", "grads"]
# modules whose attributes share names with Tensor methods (np.arange, math.floor, dtypes.float32, ...)
NOT_TENSORS = {"np", "math", "dtypes", "functools", "itertools", "re", "Device", "Ops", "UOp"}

def _names_a_non_tensor(node: ast.expr) -> bool:
  """Whether node is a module, a dtype (x.dtype.max(), dtypes.int32.min()) or something reached from one."""
  while isinstance(node, ast.Attribute):
    if node.attr == "dtype": return True
    node = node.value
  return isinstance(node, ast.Name) and (node.id in NOT_TENSORS or node.id == "dt")

def _module(name: str) -> object: return importlib.import_module(f"lazytensor.frontend.mixin.{name}")

def _mixin(name: str) -> type:
  return next(c for c in vars(_module(name)).values() if inspect.isclass(c) and c.__module__.endswith(f".{name}") and
              c.__name__.endswith("Mixin"))

def test_tensor_is_the_top_of_one_chain() -> None:
  assert Tensor.__mro__ == (Tensor, *[_mixin(n) for n in reversed(CHAIN)], object)

def test_mixin_modules_import_only_the_ones_below() -> None:
  for i, name in enumerate(CHAIN):
    tree = ast.parse(inspect.getsource(_module(name)))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "lazytensor.frontend.tensor" not in imported, name
    above = {f"lazytensor.frontend.mixin.{m}" for m in CHAIN[i:]}
    assert not imported & above, (name, imported & above)

def test_mixins_call_nothing_from_above() -> None:
  primitives = {n for n, v in vars(MovementMixin).items() if not n.startswith("__") and inspect.getsource(
    v.fget if isinstance(v, property) else v.__func__ if isinstance(v, classmethod) else v).count("NotImplementedError")
    if callable(v) or isinstance(v, (property, classmethod))}
  assert {"shape", "dtype", "_apply_uop", "full", "realize"} <= primitives
  for i, name in enumerate(CHAIN):
    below = set().union(*(vars(_mixin(m)) for m in CHAIN[:i + 1]))
    only_above = set().union(*(vars(_mixin(m)) for m in CHAIN[i + 1:])) - below - primitives
    tree = ast.parse(inspect.getsource(_module(name)))
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and not _names_a_non_tensor(n.value)}
    assert not used & only_above, (name, sorted(used & only_above))
