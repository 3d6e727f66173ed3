"""Kernel + opts -> ProgramSpec: the one path from an optimized kernel to the source a compiler takes and what a
runtime needs to launch it; and the one cache key for everything built from a kernel.

`get_program` runs the kernel through PIPELINE, an ordered list of named passes, and renders the result:
  lower           kernel AST -> loop-level graph (codegen/lowerer.py)                    procedural
  renderer_rules  the renderer's own rules (a decomposition its target needs)            rules
  symbolic        index math simplified (uop/symbolic.py)                                rules
  index_dtype     index math in int32 where it fits, else int64                          procedural
  linearize       loop-level graph -> linear program: loops opened and closed            procedural
  alu_semantics   ALU edge cases given their meaning, for every renderer (codegen/alu.py) rules, op by op
Three stay written out in code, as they read better so: the lowering decides what an AST node becomes from the kernel's
axes and lanes, not from the node (a rule would take the whole kernel as its context and be the same code); index_dtype
retypes every node once, with nothing to match (and a walk is 4x as fast as a rewrite: see with_index_dtype);
linearize places each node in the loops it needs, a question about the whole graph (a tree of loops), not a node.
After linearize the graph is a SINK whose sources are the program in execution order. codegen/spec.py says which ops
each pass may leave. Every pass reports to uop.ops.rewrite_listeners: DEBUG=5 prints the graph after each, DEBUGPASS
after those it names.

realize (the runner cache and the disk program cache) and BEAM (its candidates and its cache of chosen opts) all go
through `get_program` and through `program_key`.
"""
from __future__ import annotations

import functools
import hashlib
import json
import pathlib
from dataclasses import asdict, dataclass
from typing import Any

from lazytensor.codegen.alu import alu_semantics
from lazytensor.codegen.linearize import linearize
from lazytensor.codegen.lowerer import LOWER_PASSES
from lazytensor.codegen.passes import CodegenCtx, Pass, run_passes
from lazytensor.dtype import ALL_DTYPES, DType, PtrDType, dtypes
from lazytensor.helpers import BEAM, DEBUG, NOOPT, THREADS, ContextVar, colored
from lazytensor.opt.kernel import Kernel, Opt
from lazytensor.renderer import Renderer
from lazytensor.uop.ops import Ops, UOp

GRID_AXES = 3

@dataclass(frozen=True)
class LaunchDims:
  """How many blocks (global_size) of how many threads (local_size) a GPU launch runs, and how many CPU cores a THREAD
  axis spreads over; every runtime's Program takes these as keyword arguments."""
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] = (1, 1, 1)
  core_count: int = 1

  def kwargs(self) -> dict[str, Any]: return {"global_size": self.global_size, "local_size": self.local_size,
                                              "core_count": self.core_count}

def launch_dims(uops: list[UOp]) -> LaunchDims:
  """The launch a linear program's SPECIALs ask for: gidx<i> blocks, lidx<i> threads, core ids."""
  sizes: dict[str, int] = {}
  for u in uops:
    if u.op is not Ops.SPECIAL: continue
    name, size = u.arg
    if sizes.setdefault(name, size) != size: raise ValueError(f"SPECIAL {name} is sized both {sizes[name]} and {size}")
  dims = [tuple(sizes.get(f"{prefix}{i}", 1) for i in range(GRID_AXES)) for prefix in ("gidx", "lidx")]
  cores = max([size for name, size in sizes.items() if name.startswith("core")], default=1)
  return LaunchDims(dims[0], dims[1], cores)

@dataclass(frozen=True)
class ProgramSpec:
  """A kernel ready to compile and launch: the function `name` in `source`, the element dtype of each buffer argument
  (in order; void for a slot the program does not touch), its launch dims and the shared memory one block uses."""
  name: str
  source: str
  buffers: tuple[DType, ...]
  launch: LaunchDims
  shared_bytes: int = 0

  def to_json(self) -> str:
    fields = asdict(self) | {"buffers": [dt.name for dt in self.buffers]}
    return json.dumps(fields)

  @staticmethod
  def from_json(text: str) -> ProgramSpec:
    """The spec `to_json` wrote; ValueError when the text is not one. Every field is checked (types, a launch of
    GRID_AXES sizes >= 1, a core count >= 1, known dtypes): a spec read from the disk cache is launched as it says."""
    try: d = json.loads(text)
    except ValueError as e: raise ValueError(f"not a ProgramSpec: {e}") from e
    if not isinstance(d, dict) or set(d) != {"name", "source", "buffers", "launch", "shared_bytes"} or \
       not isinstance(launch := d["launch"], dict) or set(launch) != {"global_size", "local_size", "core_count"}:
      raise ValueError(f"not a ProgramSpec: fields {sorted(d) if isinstance(d, dict) else type(d).__name__}")
    names = {**ALL_DTYPES, "void": dtypes.void}
    dims = [launch["global_size"], launch["local_size"]]
    checks = {"name": _is_str(d["name"]) and d["name"].isidentifier(), "source": _is_str(d["source"]),
              "buffers": isinstance(d["buffers"], list) and all(_is_str(n) and n in names for n in d["buffers"]),
              "launch sizes": all(isinstance(v, list) and len(v) == GRID_AXES and all(_is_int(x, 1) for x in v)
                                  for v in dims),
              "core_count": _is_int(launch["core_count"], 1), "shared_bytes": _is_int(d["shared_bytes"], 0)}
    if bad := [field for field, ok in checks.items() if not ok]: raise ValueError(f"not a ProgramSpec: bad {bad}")
    return ProgramSpec(d["name"], d["source"], tuple(names[n] for n in d["buffers"]),
                       LaunchDims(tuple(dims[0]), tuple(dims[1]), launch["core_count"]), d["shared_bytes"])

def _is_str(x: Any) -> bool: return isinstance(x, str) and x != ""
def _is_int(x: Any, lo: int) -> bool: return type(x) is int and x >= lo

def _buffers(uops: list[UOp]) -> tuple[DType, ...]:
  args = {u.arg: u.dtype for u in uops if u.op is Ops.DEFINE_GLOBAL}
  return tuple(ALL_DTYPES[args[i].name] if i in args else dtypes.void for i in range(max(args, default=-1) + 1))

def _shared_bytes(uops: list[UOp]) -> int:
  return sum(u.arg[1] * u.dtype.itemsize for u in uops if u.op is Ops.DEFINE_LOCAL and isinstance(u.dtype, PtrDType))

def print_listing(title: str, body: str) -> None:
  print(colored(title, "cyan"))
  print(body)

def _linearize(sink: UOp, ctx: CodegenCtx) -> UOp: return UOp(Ops.SINK, dtypes.void, tuple(linearize(sink)))
def _alu_semantics(program: UOp, ctx: CodegenCtx) -> UOp:
  return UOp(Ops.SINK, dtypes.void, tuple(alu_semantics(list(program.src))))

PIPELINE = LOWER_PASSES + (Pass("linearize", _linearize), Pass("alu_semantics", _alu_semantics))

def get_program(k: Kernel, name: str, index64: bool = False) -> ProgramSpec:
  """The program of an optimized kernel: run through PIPELINE (index64: see lower_kernel) and rendered as `name`."""
  uops = list(run_passes(PIPELINE, k.ast, CodegenCtx(k, index64)).src)
  if DEBUG >= 6:
    print_listing(f"linear program of {k.name}", "\n".join(f"{i:4d} {u.op.name:12s} {u.dtype} {u.arg!r}"
                                                          for i, u in enumerate(uops)))
  return ProgramSpec(name, k.renderer.render(name, uops), _buffers(uops), launch_dims(uops), _shared_bytes(uops))

# ---- the cache key ----

@functools.cache
def code_version() -> str:
  """A hash of lazytensor's own source: what was built from a kernel (a program, searched opts) is only valid for the
  code that built it."""
  root = pathlib.Path(__file__).resolve().parent.parent
  h = hashlib.sha256()
  for f in sorted(root.rglob("*.py")): h.update(f.relative_to(root).as_posix().encode() + f.read_bytes())
  return h.hexdigest()

def opts_choice() -> tuple[Any, ...]:
  """How the knobs choose a kernel's opts when none are given."""
  if NOOPT: return ("NOOPT",)
  return ("BEAM", int(BEAM.value)) if BEAM >= 1 else ("heuristics",)

def given_opts(opts: list[Opt]) -> tuple[Any, ...]:
  """Opts given explicitly, as `program_key` takes them."""
  return ("opts", tuple((o.op.name, o.axis, o.amt) for o in opts))

@functools.lru_cache(maxsize=64)
def _target_digest(renderer_key: str, compiler_key: str) -> str:
  # the renderer's and compiler's keys hold the host's whole feature list: hashed once, not per kernel launch
  return hashlib.sha256(repr((renderer_key, compiler_key, code_version())).encode()).hexdigest()

@functools.lru_cache(maxsize=4)
def _code_knobs(declared: int) -> tuple[ContextVar, ...]:
  """The knobs declared with code=True, once `declared` knobs exist (a module imported later may declare more)."""
  return tuple(var for var in ContextVar.registry.values() if var.code)

def program_key(renderer: Renderer, compiler_key: str, what: bytes, how: tuple[Any, ...]) -> str:
  """The one key of everything built from a kernel: programs in this process and on disk, and the opts BEAM chose.

  `what` names the kernel (its AST's key, or BEAM's loop-structure signature), `how` its opts (`given_opts`,
  `opts_choice()`, or a search: ("BEAM", width)). The rest is everything else that changes the code: the renderer and
  its target, the compiler (`Compiler.cache_key`), lazytensor's code, every knob declared with code=True (FASTMATH,
  ...), and THREADS on renderers with CPU threads (it bounds THREAD opts, so it changes which opts are chosen)."""
  knobs = [(var.key, var.value) for var in _code_knobs(len(ContextVar.registry))]
  threads = THREADS.value if renderer.has_threads else 0
  text = f"{what.hex()} {how!r} {_target_digest(renderer.cache_key, compiler_key)} {knobs!r} {threads}"
  return hashlib.sha256(text.encode()).hexdigest()
