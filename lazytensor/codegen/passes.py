"""A codegen pass: a name and a function of the graph; `run_passes` runs a list of them in order.

The passes themselves are listed where they are defined: the lowering in codegen/lowerer.py (LOWER_PASSES), the whole
pipeline in codegen/program.py (PIPELINE). Each reports through uop.ops.run_pass, so DEBUG=5, DEBUGPASS and every
listener of `rewrite_listeners` see it, whether it is a rewrite by rules or a walk written out in code.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lazytensor.opt.kernel import Kernel
from lazytensor.uop.ops import UOp, run_pass


@dataclass(frozen=True)
class CodegenCtx:
  """What a pass may read besides the graph: the optimized kernel (its axes, opts and renderer), and whether index
  math is int64 whatever its bounds (lower_kernel's index64)."""
  k: Kernel
  index64: bool = False

@dataclass(frozen=True)
class Pass:
  """A step of codegen: `run` maps the graph to the next one; `name` is one of helpers.PASSES."""
  name: str
  run: Callable[[UOp, CodegenCtx], UOp]

def run_passes(passes: Sequence[Pass], root: UOp, ctx: CodegenCtx) -> UOp:
  """`root` through each pass in order, each reported as itself (uop.ops.run_pass)."""
  for p in passes: root = run_pass(p.name, functools.partial(p.run, root, ctx), root)
  return root
