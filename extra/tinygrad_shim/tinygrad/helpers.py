"""tinygrad.helpers names that tinygrad's tests import, mapped onto lazytensor's knobs."""
import os

from lazytensor.helpers import DEBUG, NOOPT, Context, ContextVar, all_same, dedup, flatten, prod

__all__ = ["DEBUG", "NOOPT", "Context", "ContextVar", "all_same", "dedup", "flatten", "prod", "getenv", "CI",
           "IMAGE", "TRANSCENDENTAL", "CPU_LLVM", "AMD_LLVM", "EMULATE", "OSX"]

def getenv(key: str, default: object = 0) -> object:
  raw = os.environ.get(key)
  if raw is None: return default
  return type(default)(raw) if not isinstance(default, str) else raw

# backend switches of tinygrad's that have no counterpart here: off
CI, IMAGE, TRANSCENDENTAL, CPU_LLVM, AMD_LLVM, EMULATE, OSX = False, 0, 0, 0, 0, "", False
