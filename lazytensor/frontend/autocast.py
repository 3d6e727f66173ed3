"""autocast: mixed precision for a block, as torch.autocast. Matmuls and convolutions (and what is built on them:
linear, bmm, conv_transpose) take their float32 operands in a 16-bit float and give their results in it, with products
summed in float32 (on tensor cores where the device has them: the casts happen in registers as the fragments load);
sums, means, softmax and log_softmax of 16-bit floats give float32. Anything else keeps its usual dtype rules, so a
half result added to a float32 tensor is float32. Gradients follow the graph the block built, whenever backward runs.
"""
from __future__ import annotations

import contextlib
import contextvars

from lazytensor.dtype import DType, dtypes, to_dtype

_LOW: contextvars.ContextVar[DType | None] = contextvars.ContextVar("autocast", default=None)

class autocast(contextlib.ContextDecorator):
  """A context (or decorator) under which matmuls and convolutions run in `dtype` (float16 or bfloat16) with float32
  accumulation, and reductions and softmax of 16-bit floats give float32; `enabled=False` turns it off for an inner
  block.

  >>> from lazytensor import Tensor, autocast, dtypes
  >>> with autocast(dtypes.half):
  ...   y = Tensor.ones(2, 3) @ Tensor.ones(3, 2)
  ...   print(y.dtype, y.sum().dtype, y.tolist())
  dtypes.float16 dtypes.float32 [[3.0, 3.0], [3.0, 3.0]]
  """
  def __init__(self, dtype: DType | str = dtypes.float16, enabled: bool = True) -> None:
    dt = to_dtype(dtype)
    if dt not in (dtypes.float16, dtypes.bfloat16):
      raise ValueError(f"autocast: dtype {dt} is not a 16-bit float; expected dtypes.float16 or dtypes.bfloat16")
    self.dtype: DType | None = dt if enabled else None
    self._tokens: list[contextvars.Token[DType | None]] = []

  def __enter__(self) -> autocast:
    self._tokens.append(_LOW.set(self.dtype))
    return self

  def __exit__(self, *exc: object) -> None: _LOW.reset(self._tokens.pop())

def autocast_dtype() -> DType | None:
  """The 16-bit float that matmuls and convolutions run in now, or None outside autocast."""
  return _LOW.get()

def low_precision(dtype: DType) -> DType:
  """The dtype an operand of `dtype` takes in a matmul or convolution now: autocast's for float32 and 16-bit floats
  (float64 stays, as torch's autocast leaves it, and so do ints)."""
  low = _LOW.get()
  return low if low is not None and dtype.is_float and dtype.itemsize <= 4 else dtype

def widened(dtype: DType) -> DType:
  """The dtype a reduction or softmax of `dtype` gives now: float32 for 16-bit floats under autocast."""
  return dtypes.float32 if _LOW.get() is not None and dtype.is_half else dtype
