"""Order-preserving codes of keys (used by sort_network.py, select.py and scans.py): unsigned ints whose order is the
order that torch's sort gives the keys, so that sorting, selecting and running extremes compare integers."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeVar

from lazytensor.dtype import dtypes

if TYPE_CHECKING:
  from lazytensor.frontend.mixin.reduce import ReduceMixin
  TensorT = TypeVar("TensorT", bound=ReduceMixin)
else:
  TensorT = TypeVar("TensorT")

def order_code(x: TensorT, descending: bool) -> TensorT:
  """Codes of x whose unsigned order is the sort's: uint32 for keys of up to 32 bits, uint64 for wider ones. Floats
  by their bits with the sign bit set (negative ones all flipped), NaN as one NaN (the largest), -0.0 as 0.0 (they
  are equal: their order is by position); signed ints with the sign bit flipped. Descending inverts the code, so
  that positions still break ties ascending."""
  wide = x.dtype.itemsize > 4
  udt, top = (dtypes.uint64, 1 << 63) if wide else (dtypes.uint32, 1 << 31)
  if x.dtype.is_float:
    f = x if wide else x.cast(dtypes.float32)
    f = (f != f).where(math.nan, (f == 0).where(0.0, f))
    bits = f.bitcast(udt)
    code = (bits >= top).where(~bits, bits | top)
  elif x.dtype.is_unsigned or x.dtype.is_bool: code = x.cast(udt)
  else: code = x.cast(dtypes.int64 if wide else dtypes.int32).bitcast(udt) ^ top
  return ~code if descending else code
