"""What a renderer is: the capabilities it declares (checked by apply_opt) and render(name, linear program)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lazytensor.uop.ops import PatternMatcher, UOp

if TYPE_CHECKING:
  from lazytensor.codegen.renderer.cpu_target import CPUTarget


class Renderer:
  device: str = ""
  has_local: bool = False       # GPU threads within a block (LOCAL, GROUP)
  has_shared: bool = False      # shared memory for two-stage reduces (GROUP, GROUPTOP)
  has_threads: bool = False     # THREAD: split a global axis across CPU cores
  tensor_cores: tuple = ()      # TC shapes it can emit
  global_max: tuple[int, ...] | None = None
  local_max: tuple[int, ...] | None = None
  threads_max: int = 1024       # most threads in one block, whatever their shape
  shared_max: int = 0           # bytes of shared memory per block
  upcast_max: int = 256         # most elements one thread computes in registers
  vector_widths: tuple[int, ...] = ()  # widths of native vector loads/stores; () means none
  masked_vector_loads: bool = False    # a vector LOAD may take a vector of per-lane gates
  target: CPUTarget | None = None      # the CPU a CPU renderer compiles for: vector width, registers, caches
  # rules run on the loop-level graph before linearizing: decompositions the target needs
  extra_matcher: PatternMatcher[UOp] | None = None

  def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError
