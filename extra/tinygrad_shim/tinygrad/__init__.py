"""lazytensor presented as `tinygrad` (see extra/tinygrad_shim/README.md)."""
import sys

from lazytensor import Context, Device, DType, GlobalCounters, Tensor, TinyJit, Variable, dtypes, nn
from lazytensor import uop as _uop

dtypes.default_int = dtypes.int32
# `import tinygrad.nn.state` and the like name modules: lazytensor's
sys.modules.update({"tinygrad.nn": nn, "tinygrad.nn.state": nn.state, "tinygrad.nn.optim": nn.optim,
                    "tinygrad.uop": _uop, "tinygrad.uop.ops": _uop.ops})

__all__ = ["Tensor", "Device", "DType", "dtypes", "Context", "GlobalCounters", "TinyJit", "Variable", "nn"]
