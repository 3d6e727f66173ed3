"""Nested containers of tensors (torch.func's pytrees): tuples, lists and dicts of Tensors and other values, flattened
into their leaves in order and rebuilt from new ones, so that the transformations take and return any such structure.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# a tree's shape without its leaves: None for a leaf, else (container type, keys of a dict or None, the children)
Spec = tuple[type, tuple[Any, ...] | None, tuple["Spec | None", ...]] | None

def flatten(tree: Any) -> tuple[list[Any], Spec]:
  """The leaves of `tree` in order (depth first; a dict's in key order) and its spec, for unflatten."""
  if isinstance(tree, dict):
    keys = tuple(tree)
    parts = [flatten(tree[k]) for k in keys]
    return [leaf for leaves, _ in parts for leaf in leaves], (dict, keys, tuple(spec for _, spec in parts))
  if isinstance(tree, (tuple, list)):
    parts = [flatten(x) for x in tree]
    return [leaf for leaves, _ in parts for leaf in leaves], (type(tree), None, tuple(spec for _, spec in parts))
  return [tree], None

def unflatten(spec: Spec, leaves: Sequence[Any]) -> Any:
  """The tree of `spec` with `leaves` in place of its own, in order."""
  it = iter(leaves)
  def build(s: Spec) -> Any:
    if s is None: return next(it)
    kind, keys, children = s
    values = [build(c) for c in children]
    if kind is dict: return dict(zip(keys or (), values))
    return kind(values) if kind in (tuple, list) else kind(*values)  # a namedtuple takes its fields
  return build(spec)

def num_leaves(spec: Spec) -> int: return 1 if spec is None else sum(num_leaves(c) for c in spec[2])

def broadcast_prefix(prefix: Any, spec: Spec, name: str) -> list[Any]:
  """`prefix`, one value for a whole subtree or a tree of the same containers down to some depth (torch.func's in_dims
  and out_dims), spread over the leaves of the tree that `spec` describes: one value per leaf."""
  if spec is None or not isinstance(prefix, (tuple, list, dict)): return [prefix] * num_leaves(spec)
  kind, keys, children = spec
  if isinstance(prefix, dict):
    if kind is not dict or set(prefix) != set(keys or ()):
      raise ValueError(f"{name}: {prefix!r} does not match the structure of the values ({_describe(spec)})")
    return [v for k, c in zip(keys or (), children) for v in broadcast_prefix(prefix[k], c, name)]
  if kind is dict or len(prefix) != len(children):
    raise ValueError(f"{name}: {prefix!r} does not match the structure of the values ({_describe(spec)}): expected "
                     f"one entry per element")
  return [v for p, c in zip(prefix, children) for v in broadcast_prefix(p, c, name)]

def _describe(spec: Spec) -> str:
  if spec is None: return "a value"
  kind, keys, children = spec
  return f"a dict with keys {list(keys or ())}" if kind is dict else f"a {kind.__name__} of {len(children)}"

def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
  leaves, spec = flatten(tree)
  return unflatten(spec, [fn(x) for x in leaves])
