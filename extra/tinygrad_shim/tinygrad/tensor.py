"""tinygrad.tensor: the Tensor, and the dtype -> numpy dtype helper tinygrad's tests use."""
import numpy as np

from lazytensor import Tensor
from lazytensor.dtype import DType

__all__ = ["Tensor", "_to_np_dtype"]

def _to_np_dtype(dtype: DType) -> type | None: return np.dtype(dtype.np).type
