"""lazytensor presented as `tinygrad` (see extra/tinygrad_shim/README.md)."""
from lazytensor import Context, Device, DType, GlobalCounters, Tensor, TinyJit, dtypes, nn

dtypes.default_int = dtypes.int32

__all__ = ["Tensor", "Device", "DType", "dtypes", "Context", "GlobalCounters", "TinyJit", "nn"]
