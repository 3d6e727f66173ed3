"""Kernel + opts -> ProgramSpec -> binary -> loaded program: the one path from an optimized kernel to code a device
runs; and the one cache key for everything built from a kernel.

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

`compile_program` adds the binary, through the disk caches, and `build_program` loads it: realize, BEAM's packing
search and BEAM's workers (which compile, while the searching process loads) all go through them, and through
`program_key`, whose knobs (`knob_key`) also key the schedule cache.
"""
from __future__ import annotations

import functools
import hashlib
import json
import pathlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from lazytensor.codegen.alu import alu_semantics
from lazytensor.codegen.linearize import linearize
from lazytensor.codegen.lowerer import LOWER_PASSES
from lazytensor.codegen.passes import CodegenCtx, Pass, run_passes
from lazytensor.dtype import ALL_DTYPES, DType, PtrDType, dtypes
from lazytensor.helpers import BEAM, DEBUG, NOOPT, THREADS, ContextVar, colored, diskcache_get, diskcache_put
from lazytensor.opt.kernel import Kernel, Opt
from lazytensor.renderer import GRID_AXES, LaunchDims, Renderer, launch_dims
from lazytensor.runtime.device import Compiled, Program, compile_stats
from lazytensor.shape.view import ast_variables
from lazytensor.uop.ops import Ops, UOp


@dataclass(frozen=True)
class ProgramSpec:
  """A kernel ready to compile and launch: the function `name` in `source`, the element dtype of each buffer argument
  (in order, every buffer of the kernel, read or not), the dtype of each scalar argument (its DEFINE_VARs, passed
  after the buffers), its launch dims and the shared memory one block uses."""
  name: str
  source: str
  buffers: tuple[DType, ...]
  launch: LaunchDims
  shared_bytes: int = 0
  vars: tuple[DType, ...] = ()

  def to_json(self) -> str:
    fields = asdict(self) | {"buffers": [dt.name for dt in self.buffers], "vars": [dt.name for dt in self.vars]}
    return json.dumps(fields)

  def var_args(self, values: Sequence[Any] | None = None) -> tuple[np.generic, ...]:
    """The scalar arguments of a launch as numpy scalars of their dtypes, which every runtime passes; without values,
    1 of each (what BEAM times and checks a kernel with)."""
    if values is None: values = [1] * len(self.vars)
    assert len(values) == len(self.vars), f"{self.name} takes {len(self.vars)} scalar arguments, given {len(values)}"
    return tuple(dt.np.type(v) for dt, v in zip(self.vars, values))

  @staticmethod
  def from_json(text: str) -> ProgramSpec:
    """The spec `to_json` wrote; ValueError when the text is not one. Every field is checked (types, a launch of
    GRID_AXES sizes >= 1, a core count >= 1, known dtypes): a spec read from the disk cache is launched as it says."""
    try: d = json.loads(text)
    except ValueError as e: raise ValueError(f"not a ProgramSpec: {e}") from e
    if not isinstance(d, dict) or set(d) != {"name", "source", "buffers", "launch", "shared_bytes", "vars"} or \
       not isinstance(launch := d["launch"], dict) or set(launch) != {"global_size", "local_size", "core_count"}:
      raise ValueError(f"not a ProgramSpec: fields {sorted(d) if isinstance(d, dict) else type(d).__name__}")
    dims = [launch["global_size"], launch["local_size"]]
    checks = {"name": _is_str(d["name"]) and d["name"].isidentifier(), "source": _is_str(d["source"]),
              "buffers": isinstance(d["buffers"], list) and
                         all(_is_str(n) and n in ALL_DTYPES for n in d["buffers"]),
              "vars": isinstance(d["vars"], list) and all(_is_str(n) and n in ALL_DTYPES for n in d["vars"]),
              "launch sizes": all(isinstance(v, list) and len(v) == GRID_AXES and all(_is_int(x, 1) for x in v)
                                  for v in dims),
              "core_count": _is_int(launch["core_count"], 1), "shared_bytes": _is_int(d["shared_bytes"], 0)}
    if bad := [field for field, ok in checks.items() if not ok]: raise ValueError(f"not a ProgramSpec: bad {bad}")
    return ProgramSpec(d["name"], d["source"], tuple(ALL_DTYPES[n] for n in d["buffers"]),
                       LaunchDims(tuple(dims[0]), tuple(dims[1]), launch["core_count"]), d["shared_bytes"],
                       tuple(ALL_DTYPES[n] for n in d["vars"]))

def _is_str(x: Any) -> bool: return isinstance(x, str) and x != ""
def _is_int(x: Any, lo: int) -> bool: return type(x) is int and x >= lo

def _buffers(k: Kernel, uops: list[UOp]) -> tuple[DType, ...]:
  """The element dtype of each buffer argument of the program: every buffer of the kernel, in order, read or not."""
  want = {u.arg: u.dtype for u in k.ast.toposort if u.op is Ops.DEFINE_GLOBAL}
  have = {u.arg: u.dtype for u in uops if u.op is Ops.DEFINE_GLOBAL}
  # the program is called with all of the kernel's buffers: one missing would shift the arguments after it
  assert have == want and sorted(want) == list(range(len(want))), f"program arguments {have}, kernel buffers {want}"
  return tuple(ALL_DTYPES[want[i].name] for i in range(len(want)))

def _vars(k: Kernel, uops: list[UOp]) -> tuple[DType, ...]:
  """The dtype of each scalar argument of the program: every DEFINE_VAR of the kernel, in order, read or not."""
  want = {u.arg: u.dtype for u in k.ast.toposort if u.op is Ops.DEFINE_VAR}
  have = {u.arg: u.dtype for u in uops if u.op is Ops.DEFINE_VAR}
  # then the Variables of its views, in the width of its index math (codegen/lowerer.number_variables)
  want.update({len(want) + i: have[len(want) + i] for i in range(len(ast_variables(k.ast)))})
  # as with buffers: an argument missing from the program would shift those after it
  assert have == want and sorted(want) == list(range(len(want))), f"program scalars {have}, kernel scalars {want}"
  return tuple(ALL_DTYPES[want[i].name] for i in range(len(want)))

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
  return ProgramSpec(name, k.renderer.render(name, uops), _buffers(k, uops), launch_dims(uops), _shared_bytes(uops),
                     _vars(k, uops))

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

def knob_key(threads: bool) -> tuple[tuple[str, Any], ...]:
  """The knobs' part of every key of what is built from kernels (programs, BEAM's choices, schedules): the value of
  every knob declared with code=True (CPU_TARGET, FASTMATH, ...), and with `threads` (renderers with CPU threads) of
  THREADS, which bounds THREAD opts and so changes which opts are chosen."""
  knobs = tuple((var.key, var.value) for var in _code_knobs(len(ContextVar.registry)))
  return knobs + ((THREADS.key, THREADS.value),) if threads else knobs

def program_key(renderer: Renderer, compiler_key: str, what: bytes, how: tuple[Any, ...]) -> str:
  """The one key of everything built from a kernel: programs in this process and on disk, and the opts BEAM chose.

  `what` names the kernel (its AST's key, or BEAM's loop-structure signature), `how` its opts (`given_opts`,
  `opts_choice()`, or a search: ("BEAM", width)). The rest is everything else that changes the code: the renderer and
  its target, the compiler (`Compiler.cache_key`), lazytensor's code and the knobs (`knob_key`). Never the kernel's
  name, which depends on the order a process meets kernels in (programs are compiled under `Kernel.function_name`)."""
  knobs = knob_key(renderer.has_threads)
  text = f"{what.hex()} {how!r} {_target_digest(renderer.cache_key, compiler_key)} {knobs!r}"
  return hashlib.sha256(text.encode()).hexdigest()

# ---- compile and load ----

CANDIDATE_NAME = "beam_candidate"  # every BEAM candidate renders under one name, so equal code is equal text

def compile_program(k: Kernel, device: Compiled, candidate: bool = False,
                    relower: bool = False) -> tuple[ProgramSpec, bytes]:
  """The spec and binary of an optimized kernel for `device`, compiled under `k.function_name`.

  A process that has built this kernel before (same program_key) finds the spec on disk without lowering it again,
  which for a large register tile is most of the set-up (a 16x7 conv tile: ~140 ms to lower, ~2 ms to load), and the
  binary under the spec's source (Compiler.binary: object code is stored once). DEBUG>=4 always lowers, to show the
  code, and so does `relower` (VIZ, to show the rewrite passes). A BEAM `candidate` is rendered under CANDIDATE_NAME and
  compiled now, past every cache: hundreds per kernel, each tried once."""
  if candidate:
    code = get_program(k, CANDIDATE_NAME)
    return code, device.compiler.compile(code.source)
  compiler, name = device.compiler, k.function_name
  key = None
  if compiler.cache_key and DEBUG < 4 and not relower:
    key = program_key(device.renderer, compiler.cache_key, k.ast.key, given_opts(k.applied_opts))
  if key is not None and (spec := _cached_spec(key, name)) is not None:
    lib, origin = compiler.binary(spec.source)
    compile_stats["compiled" if origin == "compiled" else "disk"] += 1
    return spec, lib
  spec = get_program(k, name)
  if DEBUG >= 4: print_listing(f"source of {k.name}", spec.source)
  lib = compiler.compile_cached(spec.source)
  if DEBUG >= 7: print_listing(f"assembly of {k.name}", compiler.disassemble(lib))
  if key is not None: diskcache_put("program", key, spec.to_json().encode())
  return spec, lib

def _cached_spec(key: str, name: str) -> ProgramSpec | None:
  """The spec of a program entry, if there is one that checks out (ProgramSpec.from_json checks every field)."""
  if (raw := diskcache_get("program", key)) is None: return None
  try:
    if (spec := ProgramSpec.from_json(raw.decode())).name == name: return spec
  except (ValueError, UnicodeDecodeError): pass
  if DEBUG >= 1: print("program cache: a corrupt entry was built again")
  return None

def build_program(k: Kernel, device: Compiled, relower: bool = False) -> tuple[ProgramSpec, Program]:
  """The spec of an optimized kernel and its program loaded on `device` (compile_program, then Compiled.load)."""
  spec, lib = compile_program(k, device, relower=relower)
  return spec, device.load(spec.name, lib)
