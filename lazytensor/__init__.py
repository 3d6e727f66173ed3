"""lazytensor: a small lazy tensor framework whose kernels are generated, optimized and compiled on the fly."""
from lazytensor import func, nn
from lazytensor.dtype import DType, dtypes
from lazytensor.engine.jit import TinyJit
from lazytensor.frontend.autocast import autocast
from lazytensor.frontend.mixin.multi import DeviceMesh
from lazytensor.frontend.tensor import Tensor, enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from lazytensor.helpers import Context, GlobalCounters
from lazytensor.parallel.shard_map import shard_map
from lazytensor.runtime.device import Device, max_memory_allocated, memory_allocated, reset_peak_memory_stats
from lazytensor.uop.sint import Variable
from lazytensor.version import __version__

__all__ = ["Tensor", "DeviceMesh", "DType", "dtypes", "Device", "Context", "GlobalCounters", "no_grad", "Variable",
           "inference_mode", "enable_grad", "set_grad_enabled", "is_grad_enabled", "autocast", "TinyJit", "nn", "func",
           "shard_map", "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "__version__"]
