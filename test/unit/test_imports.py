"""The package's import graph, read from the source: no module imports one that imports it back, imports go only down
the layers that docs/architecture.md draws, and extra/ is never imported.

Every import counts, at the top of a module, inside a function or under TYPE_CHECKING: an import put in a function, or
kept for a type, still says that one module needs the other."""
from __future__ import annotations

import ast
import pathlib

import pytest

import lazytensor

ROOT = pathlib.Path(lazytensor.__file__).parent

# top to bottom: a module may import its own layer and the layers below it. A module belongs to the layer of the
# longest name that it is or lies under (opt.kernel is not opt); names are relative to lazytensor.
LAYERS: tuple[tuple[str, ...], ...] = (
  ("",),                                # lazytensor/__init__.py: the public face
  ("nn", "parallel", "func", "engine.jit"),  # on Tensor: layers, collectives, transformations, the JIT
  ("frontend",),                        # Tensor, its mixins, autograd, writes
  ("viz",),                             # records what the stages below did, for VIZ
  ("engine",),                          # realize: runs a schedule
  ("schedule",),
  ("opt",),                             # the heuristics and BEAM, which compiles and times candidates
  ("codegen",),
  ("opt.kernel", "opt.optops"),         # the Kernel, its axis kinds and opts, which codegen lowers
  ("runtime",),                         # a device: allocator, renderer, compiler
  ("renderer",),
  ("uop", "shape"),
  ("dtype", "helpers", "version"),
)

def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
  parts = (root.name, *path.relative_to(root).with_suffix("").parts)
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

def imported_modules(source: str, known: set[str], package: str = "lazytensor") -> set[str]:
  """The modules of `known` (and any name under `package`) that `source` imports anywhere in it: `from a.b import c`
  is the module a.b.c where that is a module, else a.b."""
  found: set[str] = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import): found.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names)
  return {m for m in found if m in known or m.split(".")[0] in (package, "extra")}

def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
  paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
  return {m: imported_modules(p.read_text(), set(paths), root.name) - {m} for m, p in paths.items()}

def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
  """A list of modules each importing the next, the last importing the first; None where there is none."""
  done: set[str] = set()
  def visit(m: str, path: list[str]) -> list[str] | None:
    if m in path: return path[path.index(m):]
    if m in done or m not in graph: return None
    for t in sorted(graph[m]):
      if (circle := visit(t, [*path, m])) is not None: return circle
    done.add(m)
    return None
  for m in sorted(graph):
    if (circle := visit(m, [])) is not None: return circle
  return None

def circles(graph: dict[str, set[str]]) -> list[set[str]]:
  """The sets of modules that import each other (each a strongly connected part of the graph), in name order."""
  def reach(m: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(m, ()))
    while todo:
      if (t := todo.pop()) not in seen:
        seen.add(t)
        todo.extend(graph.get(t, ()))
    return seen
  reached = {m: reach(m) for m in graph}
  parts = {frozenset({m} | {t for t in reached[m] if m in reached[t]}) for m in graph if m in reached[m]}
  return sorted((set(c) for c in parts), key=sorted)

def layer(module: str) -> int:
  name = module.removeprefix("lazytensor").removeprefix(".")
  matches = [(len(p), i) for i, names in enumerate(LAYERS) for p in names
             if name == p or (p and name.startswith(p + ".")) or (not p and not name)]
  if not matches: raise KeyError(f"{module} is in no layer of LAYERS")
  return max(matches)[1]

def upward_imports(graph: dict[str, set[str]]) -> list[str]:
  return sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                if t.startswith("lazytensor") and layer(t) < layer(m))

def test_no_import_circles() -> None:
  graph = import_graph()
  found = circles(graph)
  shown = [find_circle({m: graph[m] & part for m in part}) or [] for part in found]
  assert found == [], "import circles: " + "; ".join(" -> ".join([*c, c[0]]) for c in shown if c)

def test_imports_go_down_the_layers() -> None:
  assert upward_imports(import_graph()) == []

def test_extra_is_never_imported() -> None:
  graph = import_graph()
  assert sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts if t.split(".")[0] == "extra") == []

def test_every_module_has_a_layer() -> None:
  for m in import_graph(): layer(m)

def test_the_walk_sees_every_kind_of_import(tmp_path: pathlib.Path) -> None:
  pkg = tmp_path / "lazytensor"
  (pkg / "uop").mkdir(parents=True)
  (pkg / "__init__.py").write_text("")
  (pkg / "uop" / "__init__.py").write_text("")
  (pkg / "uop" / "ops.py").write_text("def f():\n  from lazytensor.uop.bounds import bounds\n  return bounds\n")
  (pkg / "uop" / "bounds.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                          "  from lazytensor.uop import ops\n")
  (pkg / "helpers.py").write_text("import extra.bench\nfrom lazytensor.frontend.tensor import Tensor\n")
  graph = import_graph(pkg)
  assert graph["lazytensor.uop.ops"] == {"lazytensor.uop.bounds"}
  assert graph["lazytensor.uop.bounds"] == {"lazytensor.uop.ops"}
  assert find_circle(graph) == ["lazytensor.uop.bounds", "lazytensor.uop.ops"]
  assert circles(graph) == [{"lazytensor.uop.bounds", "lazytensor.uop.ops"}]
  assert graph["lazytensor.helpers"] == {"extra.bench", "lazytensor.frontend.tensor"}
  assert upward_imports(graph) == ["lazytensor.helpers -> lazytensor.frontend.tensor"]

def test_a_module_takes_its_most_specific_layer() -> None:
  assert layer("lazytensor.opt.kernel") > layer("lazytensor.codegen.lowerer") > layer("lazytensor.opt.search")
  assert layer("lazytensor.engine.jit") < layer("lazytensor.frontend.tensor") < layer("lazytensor.engine.realize")
  assert layer("lazytensor") == 0
  with pytest.raises(KeyError): layer("lazytensor.optimizer")  # under opt/ means under the package, not its name
