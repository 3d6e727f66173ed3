"""tinygrad.dtype: DType and dtypes."""
from lazytensor.dtype import DType, dtypes

__all__ = ["DType", "dtypes"]
