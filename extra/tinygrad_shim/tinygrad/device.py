"""tinygrad.device: Device, and which dtypes the default device supports (all of lazytensor's)."""
from lazytensor import Device
from lazytensor.dtype import ALL_DTYPES, DType

__all__ = ["Device", "is_dtype_supported"]

def is_dtype_supported(dtype: DType, device: str | None = None) -> bool: return dtype.name in ALL_DTYPES
