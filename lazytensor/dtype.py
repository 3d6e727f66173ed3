"""DType, the dtypes namespace, torch-style type promotion and numpy conversion."""
from __future__ import annotations

import builtins
import functools
import math
import struct
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np


class IntLimit(int):
  """A dtype's integer bound (dtypes.int8.max is 127, tinygrad's value). Calling it gives the plain int, the spelling
  (dt.max()) that lazytensor's own code uses: both read the same number."""
  def __call__(self) -> int: return int(self)

class FloatLimit(float):
  """A float dtype's bound (-inf or inf), as IntLimit: a value that calling returns as a plain float."""
  def __call__(self) -> float: return float(self)

@dataclass(frozen=True, eq=True)
class DType:
  """A scalar or vector element type. `count` > 1 only appears inside lowered kernels (SIMD vectors)."""
  name: str
  itemsize: int
  kind: str         # "b" bool, "i" signed, "u" unsigned, "f" float
  fmt: str          # numpy type character
  count: int = 1

  # what equality compares, as one string: the intern key of every UOp holds it instead of the DType, since a str
  # hashes in C and a DType's __hash__ is a Python call (a sixth of the cost of building a node)
  ident: str = field(init=False, repr=False, compare=False)

  def __post_init__(self) -> None:  # dtypes key every interned UOp: hash once, not per lookup
    ident = (type(self).__name__, self.name, self.count, getattr(self, "local", False), getattr(self, "size", -1))
    object.__setattr__(self, "_hash", hash(ident))
    object.__setattr__(self, "ident", " ".join(map(str, ident)))
    # the limits once: every Python number a tensor is made of is checked against them
    bits = 8 * self.itemsize
    lo, hi = (-math.inf, math.inf) if self.kind == "f" else (0, 1) if self.kind == "b" else \
      (0, 2 ** bits - 1) if self.kind == "u" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    limit = FloatLimit if self.kind == "f" else IntLimit
    object.__setattr__(self, "_limits", (limit(lo), limit(hi)))
  def __hash__(self) -> int: return self._hash  # type: ignore[attr-defined]

  def vec(self, n: int) -> DType:
    assert self.count == 1, f"cannot vectorize {self}"
    return self if n == 1 else DType(self.name, self.itemsize, self.kind, self.fmt, n)

  def scalar(self) -> DType: return DType(self.name, self.itemsize, self.kind, self.fmt) if self.count > 1 else self
  def ptr(self, local: bool = False, size: int = -1) -> PtrDType:
    return PtrDType(self.name, self.itemsize, self.kind, self.fmt, 1, local, size)

  @property
  def is_float(self) -> bool: return self.kind == "f"
  @property
  def is_int(self) -> bool: return self.kind in "iu"
  @property
  def is_unsigned(self) -> bool: return self.kind == "u"
  @property
  def is_bool(self) -> bool: return self.kind == "b"
  @property
  def is_half(self) -> bool:
    """float16 or bfloat16: the frontend computes these in float32 where intermediates would overflow or lose bits."""
    return self.kind == "f" and self.itemsize == 2
  @functools.cached_property  # read a dozen times per Tensor made from data: np.dtype(name) once per DType
  def np(self) -> np.dtype:
    """The numpy dtype of a buffer of this type. numpy has no bfloat16: a bfloat16 buffer holds its values' bits as
    uint16 (`to_storage` and `from_storage` convert values)."""
    if self.name == "bfloat16": return np.dtype(np.uint16)
    # by name, not by struct character: np.dtype("q") is a longlong that numpy prints as "dtype=int64"
    return np.dtype(self.name if self.name in ALL_DTYPES else self.fmt)

  @property
  def min(self) -> IntLimit | FloatLimit:
    """The lowest value (-inf for floats), as tinygrad's dtypes.int8.min; dtypes.int8.min() gives it too."""
    return self._limits[0]  # type: ignore[attr-defined]

  @property
  def max(self) -> IntLimit | FloatLimit:
    """The highest value (inf for floats, 1 for bool), as tinygrad's dtypes.int8.max; dtypes.int8.max() gives it too."""
    return self._limits[1]  # type: ignore[attr-defined]

  def __repr__(self) -> str: return f"dtypes.{self.name}" + (f".vec({self.count})" if self.count > 1 else "")

@dataclass(frozen=True, eq=True)
class PtrDType(DType):
  """A pointer to global (or, with local=True, shared) memory, used by DEFINE_GLOBAL / DEFINE_LOCAL. `size`: the
  elements behind it where known (-1 if not), so that a kernel may read past a view where that stays in bounds."""
  local: bool = False
  size: int = -1
  def __repr__(self) -> str: return f"dtypes.{self.name}.ptr({'local' if self.local else ''})"

class dtypes:
  bool: Final[DType] = DType("bool", 1, "b", "?")
  int8: Final[DType] = DType("int8", 1, "i", "b")
  uint8: Final[DType] = DType("uint8", 1, "u", "B")
  int16: Final[DType] = DType("int16", 2, "i", "h")
  uint16: Final[DType] = DType("uint16", 2, "u", "H")
  int32: Final[DType] = DType("int32", 4, "i", "i")
  uint32: Final[DType] = DType("uint32", 4, "u", "I")
  int64: Final[DType] = DType("int64", 8, "i", "q")
  uint64: Final[DType] = DType("uint64", 8, "u", "Q")
  float16: Final[DType] = DType("float16", 2, "f", "e")
  float32: Final[DType] = DType("float32", 4, "f", "f")
  float64: Final[DType] = DType("float64", 8, "f", "d")
  # float32's exponent with 7 mantissa bits; computed in float32 and rounded after every op, on every device
  bfloat16: Final[DType] = DType("bfloat16", 2, "f", "H")
  # aliases, as torch names them
  half, float, double, bf16 = float16, float32, float64, bfloat16
  char, short, int, long = int8, int16, int32, int64
  uchar, ushort, uint, ulong = uint8, uint16, uint32, uint64
  default_float: DType = float32
  default_int: DType = int64
  # index arithmetic inside kernels while they are lowered: as wide as int64, so that bounds and folding never wrap.
  # Lowering ends by choosing int32 or int64 for it per kernel (codegen/lowerer.py: index_dtype); renderers never see it
  index: Final[DType] = DType("index", 8, "i", "q")
  void: Final[DType] = DType("void", 0, "v", "V")

  @staticmethod
  def all() -> list[DType]: return [v for v in ALL_DTYPES.values()]
  # tinygrad's spellings of DType's own queries: dtypes.max(dt), dtypes.is_float(dt), ...
  @staticmethod
  def min(dt: DType) -> builtins.int | builtins.float: return dt.min()
  @staticmethod
  def max(dt: DType) -> builtins.int | builtins.float: return dt.max()
  @staticmethod
  def is_float(dt: DType) -> builtins.bool: return dt.is_float
  @staticmethod
  def is_int(dt: DType) -> builtins.bool: return dt.is_int
  @staticmethod
  def is_unsigned(dt: DType) -> builtins.bool: return dt.is_unsigned

  @staticmethod
  def from_np(npdt: Any) -> DType:
    npdt = np.dtype(npdt)
    if (hit := _FROM_NP.get(npdt)) is not None: return hit
    for dt in ALL_DTYPES.values():  # a numpy dtype equal to one of ours that hashes apart
      if dt.np == npdt: return dt
    raise TypeError(f"numpy dtype {npdt} is not supported; supported: {', '.join(ALL_DTYPES)}")

  @staticmethod
  def from_py(x: Any) -> DType:
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int): return dtypes.default_int
    if isinstance(x, float): return dtypes.default_float
    raise TypeError(f"cannot infer a dtype from {type(x).__name__} {x!r}; expected bool, int or float")

ALL_DTYPES: dict[str, DType] = {dt.name: dt for dt in (
  dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16,
  dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64,
  dtypes.bfloat16)}
# numpy dtype -> ours, the first of ALL_DTYPES where two share one (uint16 before bfloat16, whose storage it is)
_FROM_NP: dict[np.dtype, DType] = {dt.np: dt for dt in reversed(ALL_DTYPES.values())}

class UnknownDTypeError(TypeError, AttributeError):
  """A dtype name that names none: a TypeError, and the AttributeError that tinygrad's getattr(dtypes, name) raises."""

def is_dtype_name(name: str) -> bool:
  """Whether `name` names a dtype ('float16', or an alias such as 'half'): what Tensor.to tells from a device by."""
  return name in ALL_DTYPES or isinstance(getattr(dtypes, name, None), DType)

def to_dtype(x: DType | str | Any) -> DType:
  """Accept a DType, its name ('float32'), or a numpy dtype/type; anything else is a TypeError."""
  if isinstance(x, DType): return x
  if isinstance(x, str):
    if x in ALL_DTYPES: return ALL_DTYPES[x]
    alias = getattr(dtypes, x, None)
    if isinstance(alias, DType): return alias
    raise UnknownDTypeError(f"unknown dtype {x!r}; expected one of {', '.join(ALL_DTYPES)}")
  try: return dtypes.from_np(x)
  except TypeError: raise
  except Exception:
    raise TypeError(f"cannot interpret {x!r} as a dtype; expected one of {', '.join(ALL_DTYPES)}") from None

_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}
_SIGNED_BY_SIZE = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}

def _promote_ints(a: DType, b: DType) -> DType:
  if a.is_unsigned == b.is_unsigned: return a if a.itemsize >= b.itemsize else b
  u, s = (a, b) if a.is_unsigned else (b, a)
  if s.itemsize > u.itemsize: return s
  return _SIGNED_BY_SIZE[min(8, u.itemsize * 2)]

def promote_types(a: DType, b: DType) -> DType:
  """The dtype of an op between two tensors, as torch computes it: the higher category wins, then the wider type."""
  if a is b or a == b: return a  # `is` first: == is a Python call
  ca, cb = _CATEGORY[a.kind], _CATEGORY[b.kind]
  if ca != cb: return a if ca > cb else b
  if a.is_float:
    if a.itemsize == b.itemsize: return dtypes.float32  # float16 and bfloat16: neither holds the other (torch's rule)
    return a if a.itemsize > b.itemsize else b
  return _promote_ints(a, b)

def promote_with_0d(t: DType, zero_dim: DType) -> DType:
  """The dtype of an op between a tensor of at least one dim and a 0-d tensor, as torch computes it: the 0-d tensor
  is weak, like a Python number, except that its own dtype (not the default one) counts where it lifts the category
  (int8 tensor + 0-d int32 -> int8, float16 + 0-d float64 -> float16, int32 + 0-d float64 -> float64)."""
  if t.is_float: return t
  if t.is_bool or zero_dim.is_float: return promote_types(t, zero_dim)
  return t

def result_type_scalar(t: DType, scalar: Any) -> DType:
  """A Python scalar is weak: it only lifts the tensor's category (int tensor + 0.5 -> float32, never float64)."""
  sdt = dtypes.from_py(scalar)
  if _CATEGORY[sdt.kind] <= _CATEGORY[t.kind]: return t
  return sdt

def least_upper_float(dt: DType) -> DType: return dt if dt.is_float else dtypes.default_float

def float_to_int_via(to: DType) -> DType:
  """The int a float -> `to` cast saturates to before wrapping to `to`: int32 for narrower targets (300.0 -> uint8 is
  44, -1.0 -> 255, as numpy's C casts give for values that fit int32), int64 for uint32, the target itself for int32
  and the 64-bit ints."""
  s = to.scalar()
  if s.itemsize == 8 or s == dtypes.int32: return s
  return dtypes.int64 if s.itemsize == 4 else dtypes.int32

# struct's formats for the float types it packs: it rounds as numpy's cast does (to nearest, ties to even) at a tenth
# of the cost of a numpy array and an errstate, and every scalar in a Tensor op is truncated
_STRUCT_FLOATS = {"float32": "f", "float16": "e"}

def truncate(dt: DType, x: Any) -> Any:
  """The Python value `x` as it would be stored in `dt` (wraps ints, rounds floats)."""
  if dt.count == 1 and (fmt := _STRUCT_FLOATS.get(dt.name)) is not None:
    try: return struct.unpack(fmt, struct.pack(fmt, x))[0]
    except (OverflowError, struct.error): pass  # beyond the range (numpy gives the infinity) or not a number
  if dt.is_bool: return bool(x)
  if dt.is_int:
    if isinstance(x, float) and not math.isfinite(x): return 0
    bits = 8 * dt.itemsize
    v = int(x) & ((1 << bits) - 1)
    return v - (1 << bits) if not dt.is_unsigned and v >= 1 << (bits - 1) else v
  if dt == dtypes.float64: return float(x)
  if dt == dtypes.bfloat16: return float(from_storage(to_storage(np.array(x, np.float64), dt), dt))
  with np.errstate(over="ignore"): return float(np.array(x, dtype=dt.np))

# ---- bfloat16 in numpy, as its bits ----

def to_storage(values: np.ndarray, dt: DType) -> np.ndarray:
  """Values as a buffer of `dt` holds them: numpy's cast, except that bfloat16 becomes its bits (uint16), rounded to
  nearest even from float32 (a float64 goes through float32 first, as CUDA's conversions and every device here do)."""
  if dt.name != "bfloat16": return values.astype(dt.np, order="C", copy=False)
  with np.errstate(over="ignore", invalid="ignore"):
    bits = np.asarray(values).astype(np.float32, order="C").view(np.uint32).astype(np.uint64)
  rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round half to even on the 16 bits dropped
  nan = (bits & 0x7FFFFFFF) > 0x7F800000
  return np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)  # NaN stays a (quiet) NaN

def from_storage(stored: np.ndarray, dt: DType) -> np.ndarray:
  """The values of a buffer of `dt`: bfloat16 bits widened to float32 (exact), anything else as it is."""
  if dt.name != "bfloat16": return stored
  return (np.asarray(stored, np.uint16).astype(np.uint32) << 16).view(np.float32)

# ---- Python and numpy data to buffers ----

class DTypeOverflowError(ValueError, OverflowError, RuntimeError):
  """A Python number, or a range of them, that the dtype asked for cannot hold: torch raises RuntimeError for it ("value
  cannot be converted to type int8 without overflow") and tinygrad OverflowError, so code written for either catches
  it."""

def cast_array(values: np.ndarray, to: DType) -> np.ndarray:
  """`values` as a buffer of `to` holds them, by the rule Tensor.cast follows on every device (codegen/alu.py): float
  -> int truncates toward zero, NaN gives 0, values out of range saturate to `float_to_int_via(to)` and then wrap to
  `to`; everything else converts as numpy's astype does (ints wrap, floats round)."""
  # the common case, data already of the buffer's type: nothing to convert, no error state to set up
  if values.dtype == to.np and to.name != "bfloat16" and values.flags.c_contiguous: return values
  if values.dtype.kind != "f" or not to.is_int:
    with np.errstate(over="ignore", invalid="ignore"): return to_storage(values, to)
  wide = float_to_int_via(to)
  x = values.astype(np.float64, copy=False)
  # exact in float64 for every wide int: lo - 1 and hi + 1 are powers of two, or within 2^53 of zero. Two reductions
  # and no temporaries find the common case, where every value truncates into range and astype alone is right (a
  # NaN makes min and max NaN, which compare false)
  if x.size and wide.min - 1 < x.min() and x.max() < wide.max + 1: return x.astype(wide.np).astype(to.np, copy=False)
  inside = (x > wide.min - 1) & (x < wide.max + 1)
  lo, hi = wide.np.type(wide.min()), wide.np.type(wide.max())
  edge = np.where(np.isnan(x), wide.np.type(0), np.where(x < 0, lo, hi))
  return np.where(inside, np.where(inside, x, 0).astype(wide.np), edge).astype(to.np, copy=False)

def _check_python_values(arr: np.ndarray, dtype: DType) -> None:
  """Python numbers for an integer dtype must fit it, as torch.tensor requires: a float before it is truncated toward
  zero (127.9 does not fit int8), an int as it is, or, negative, wrapped into an unsigned type (-1 -> 255 for uint8,
  as torch allows)."""
  if not dtype.is_int or not arr.size or arr.dtype.kind == "b": return
  hi = dtype.max()
  lo = -hi if dtype.is_unsigned and arr.dtype.kind != "f" else dtype.min()
  with np.errstate(invalid="ignore"):
    # float64 holds hi exactly below 2^53; above, hi + 1 is a power of two it holds (int64's, uint64's)
    below = arr <= hi if arr.dtype.kind != "f" or hi < 2 ** 53 else arr < hi + 1
    bad = ~((arr >= lo) & below)  # NaN and the infinities fail both
  if bad.any():
    raise DTypeOverflowError(f"value {arr[bad].reshape(-1)[0].item()!r} cannot be converted to {dtype.name} without "
                             f"overflow: {dtype.name} holds [{dtype.min()}, {hi}] (.cast() converts with wrap-around)")

def python_number_dtype(value: bool | int | float, dtype: DType | None) -> DType:
  """The dtype of a tensor made of the Python number `value`: `dtype`, which must hold it (DTypeOverflowError if not,
  as torch.tensor and torch.full raise), or by default the type's default dtype, widened to int64 for an int the
  default int cannot hold (where dtypes.default_int is int32, as tinygrad's). Plain Python comparisons, which are
  exact between ints and floats: this is on the path of every Tensor(3.0) and Tensor.full."""
  if not isinstance(value, (bool, int, float)): return dtype or dtypes.from_py(value)  # TypeError for what is none
  if isinstance(value, bool) or (dtype is not None and not dtype.is_int): return dtype or dtypes.bool
  if dtype is None:
    if isinstance(value, float): return dtypes.default_float
    if dtypes.default_int.min <= value <= dtypes.default_int.max: return dtypes.default_int
    if dtypes.int64.min <= value <= dtypes.int64.max: return dtypes.int64
    raise DTypeOverflowError(f"value {value} is outside the int64 range")
  lo = -dtype.max if dtype.is_unsigned and isinstance(value, int) else dtype.min
  if not lo <= value <= dtype.max:  # NaN compares false
    raise DTypeOverflowError(f"value {value!r} cannot be converted to {dtype.name} without overflow: {dtype.name} "
                             f"holds [{dtype.min()}, {dtype.max()}] (.cast() converts with wrap-around)")
  return dtype

def np_from_data(data: Any, dtype: DType | None) -> tuple[np.ndarray, DType]:
  """data as a C-contiguous numpy array as a buffer of `dtype` holds it, and that dtype: by default numpy's own dtype
  for numpy data and torch's defaults (float32, int64) for Python numbers. Python numbers must fit an integer `dtype`
  (as in torch.tensor); numpy data is converted as .cast() converts, as a cast of an existing array."""
  # a numpy array of boxed Python objects is read as the nested list it holds
  if isinstance(data, np.ndarray) and data.dtype == object: return np_from_data(data.tolist(), dtype)
  if not isinstance(data, (np.ndarray, np.generic, list, tuple)): data = _dlpack_array(data)
  from_numpy = isinstance(data, (np.ndarray, np.generic))
  try: arr = np.asarray(data)
  except ValueError as e: raise ValueError(f"cannot make a Tensor from a ragged nested list: {e}") from None
  if arr.dtype == object:
    kinds = sorted({type(v).__name__ for v in arr.reshape(-1)} - {"bool", "int", "float"})
    # numpy falls back to objects for Python ints beyond 64 bits
    if not kinds and arr.size: raise DTypeOverflowError("cannot make a Tensor from integers outside the int64 range")
    raise TypeError(f"cannot make a Tensor from elements of type {', '.join(kinds) or 'object'}; "
                    "expected bool, int or float")
  if dtype is None: dtype = _default_dtype(arr, from_numpy)
  elif not from_numpy: _check_python_values(arr, dtype)
  # astype(order="C") rather than np.ascontiguousarray, which turns a 0-d array into shape (1,)
  return cast_array(arr, dtype), dtype

def _dlpack_array(data: Any) -> np.ndarray:
  """The memory of an object that exports DLPack (a torch tensor, a jax array) as a numpy array, without a copy."""
  if getattr(data, "requires_grad", False): data = data.detach()  # torch exports no tensor that records gradients
  try: return np.from_dlpack(data)
  except (BufferError, RuntimeError, TypeError, ValueError) as e:
    kind = f"{type(data).__module__}.{type(data).__name__}"
    raise TypeError(f"cannot read a {kind} through DLPack ({e}); it must be in host memory, of a dtype numpy has (no "
                    "bfloat16: .float() it first)") from None

def _default_dtype(arr: np.ndarray, from_numpy: bool) -> DType:
  if arr.dtype.kind not in "biuf":
    raise TypeError(f"cannot make a Tensor from data of numpy dtype {arr.dtype}; expected bool, int or float")
  if from_numpy or arr.dtype.kind == "b": return dtypes.from_np(arr.dtype)
  if arr.dtype.kind == "f": return dtypes.default_float
  if not arr.size: return dtypes.default_int
  lo, hi = arr.min(), arr.max()
  if hi > dtypes.int64.max: raise DTypeOverflowError(f"cannot make a Tensor from {hi}: outside the int64 range")
  # the default int (int32 where it is tinygrad's) widens to int64 for values it cannot hold, never wraps them
  fits = dtypes.default_int.min <= lo and hi <= dtypes.default_int.max
  return dtypes.default_int if fits else dtypes.int64
