"""Tensor: a lazy, numpy-like array. Every operation builds UOps; realize() schedules, compiles and runs them."""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from lazytensor.device import Buffer, Device, buffer_map, new_buffer_uop
from lazytensor.dtype import DType, dtypes, least_upper_float, promote_types, result_type_scalar, to_dtype
from lazytensor.engine.realize import run_schedule
from lazytensor.engine.schedule import commit_realized, create_schedule
from lazytensor.helpers import flatten, make_tuple, prod
from lazytensor.shape.view import ShapeTracker
from lazytensor.tensor_index import getitem
from lazytensor.tensor_math import conv, matmul, tensor_pow, threefry_bits
from lazytensor.uop.ops import Ops, UOp

# ---- tensor-graph construction helpers ----

def view_of(x: UOp, fn: Callable[[ShapeTracker], ShapeTracker]) -> UOp:
  """Apply a movement to x without copying: compose into x's VIEW, or start a VIEW over x."""
  if x.op is Ops.VIEW: return UOp(Ops.VIEW, x.dtype, (x.src[0],), fn(x.arg))
  return UOp(Ops.VIEW, x.dtype, (x,), fn(ShapeTracker.from_shape(x.shape)))

def const_uop(value: Any, dtype: DType, device: str, shape: tuple[int, ...]) -> UOp:
  c = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, dtypes.void, (), device),), dtype_value(dtype, value))
  return UOp(Ops.VIEW, dtype, (c,), ShapeTracker.from_shape(()).reshape((1,) * len(shape)).expand(shape))

def dtype_value(dtype: DType, value: Any) -> Any:
  from lazytensor.dtype import truncate
  return truncate(dtype, value)

def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  nd = max(len(s) for s in shapes)
  padded = [(1,) * (nd - len(s)) + s for s in shapes]
  out = []
  for dims in zip(*padded):
    non1 = {d for d in dims if d != 1}
    if len(non1) > 1: raise ValueError(f"shapes {' and '.join(str(s) for s in shapes)} cannot be broadcast together")
    out.append(non1.pop() if non1 else 1)
  return tuple(out)

def _np_from_data(data: Any, dtype: DType | None) -> np.ndarray:
  """data as a C-contiguous numpy array of `dtype`, by default numpy's own dtype for numpy data and torch's defaults
  (float32, int64) for Python numbers."""
  # a numpy array of boxed Python objects is read as the nested list it holds
  if isinstance(data, np.ndarray) and data.dtype == object: return _np_from_data(data.tolist(), dtype)
  try: arr = np.asarray(data)
  except ValueError as e: raise ValueError(f"cannot make a Tensor from a ragged nested list: {e}") from None
  if arr.dtype == object:
    kinds = sorted({type(v).__name__ for v in arr.reshape(-1)} - {"bool", "int", "float"})
    # numpy falls back to objects for Python ints beyond 64 bits
    if not kinds and arr.size: raise ValueError("cannot make a Tensor from integers outside the int64 range")
    raise TypeError(f"cannot make a Tensor from elements of type {', '.join(kinds) or 'object'}; "
                    "expected bool, int or float")
  if dtype is None: dtype = _default_dtype(arr, from_numpy=isinstance(data, (np.ndarray, np.generic)))
  # astype(order="C") rather than np.ascontiguousarray, which turns a 0-d array into shape (1,)
  return arr.astype(dtype.np, order="C", copy=False)

def _default_dtype(arr: np.ndarray, from_numpy: bool) -> DType:
  if arr.dtype.kind not in "biuf":
    raise TypeError(f"cannot make a Tensor from data of numpy dtype {arr.dtype}; expected bool, int or float")
  if from_numpy or arr.dtype.kind == "b": return dtypes.from_np(arr.dtype)
  if arr.dtype.kind == "f": return dtypes.default_float
  if arr.dtype == np.uint64 and arr.size and arr.max() > dtypes.int64.max():
    raise ValueError(f"cannot make a Tensor from {arr.max()}: outside the int64 range")
  return dtypes.default_int

class Tensor:
  """A lazy n-dimensional array.

  >>> Tensor([[1, 2], [3, 4]]).sum(axis=1).tolist()
  [3, 7]
  """
  __slots__ = ("lazydata", "requires_grad", "grad", "__weakref__")
  __array_priority__ = 1000  # numpy defers `ndarray + Tensor` to Tensor.__radd__
  training: ClassVar[bool] = False
  no_grad: ClassVar[bool] = False
  _seed: ClassVar[int] = 0
  _rng_counter: ClassVar[int] = 0

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None) -> None:
    dt = to_dtype(dtype) if dtype is not None else None
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    self.grad: Tensor | None = None
    self.requires_grad: bool | None = requires_grad
    if isinstance(data, UOp): self.lazydata = data
    elif isinstance(data, Tensor): self.lazydata = data.lazydata if dt is None else data.cast(dt).lazydata
    elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
      dt = dt or dtypes.from_py(data)
      self.lazydata = const_uop(data, dt, dev, ())
    elif isinstance(data, (list, tuple, np.ndarray, np.generic)):
      arr = _np_from_data(data, dt)
      buf = Buffer(dev, arr.size, dtypes.from_np(arr.dtype)).copyin(arr.reshape(-1).data.cast("B"))
      buf_uop = new_buffer_uop(dev, arr.size, buf.dtype, buf)
      self.lazydata = view_of(buf_uop, lambda _: ShapeTracker.from_shape(arr.shape))
    else: raise TypeError(f"cannot make a Tensor from {type(data).__name__}; expected a number, a (nested) list, "
                          "a numpy array or a Tensor")

  # ---- properties ----

  @property
  def shape(self) -> tuple[int, ...]:
    """The size of each dimension.

    >>> Tensor.zeros(2, 3).shape
    (2, 3)
    """
    return self.lazydata.shape

  @property
  def dtype(self) -> DType:
    """The element type.

    >>> Tensor([1.5]).dtype
    dtypes.float32
    """
    return self.lazydata.dtype

  @property
  def device(self) -> str:
    """The device that holds (or will hold) the data.

    >>> Tensor([1]).device == Device.DEFAULT
    True
    """
    return self.lazydata.device

  @property
  def ndim(self) -> int:
    """The number of dimensions.

    >>> Tensor.zeros(2, 3).ndim
    2
    """
    return len(self.shape)

  def numel(self) -> int:
    """The number of elements.

    >>> Tensor.zeros(2, 3).numel()
    6
    """
    return prod(self.shape)

  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  def __repr__(self) -> str: return f"<Tensor {self.shape} {self.dtype} on {self.device}>"
  def __hash__(self) -> int: return id(self)
  def __bool__(self) -> bool:
    if self.numel() != 1: raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
    return bool(self.item())

  # ---- realization ----

  def schedule(self, *others: Tensor) -> list:
    """The kernels that realizing these tensors would run, without running them.

    >>> len(Tensor([1.0]).add(1).schedule())
    1
    """
    return create_schedule([t.lazydata for t in (self,) + others])[0]

  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor (and `others`) now; returns self.

    >>> Tensor([1, 2]).add(1).realize().tolist()
    [2, 3]
    """
    tensors = (self,) + others
    items, becomes = create_schedule([t.lazydata for t in tensors])
    run_schedule(items)
    commit_realized(becomes)
    for t in tensors: t.lazydata = becomes.get(t.lazydata, t.lazydata)
    return self

  def _buffer(self) -> tuple[Buffer, ShapeTracker]:
    self.realize()
    ld = self.lazydata
    assert ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER, f"realized tensor is {ld.op}"
    return buffer_map[ld.src[0]], ld.arg

  def numpy(self) -> np.ndarray:
    """The tensor as a numpy array (a copy).

    >>> Tensor([1, 2, 3]).numpy()
    array([1, 2, 3])
    """
    if self.numel() == 0: return np.zeros(self.shape, dtype=self.dtype.np)
    self.realize()
    ld = self.lazydata
    dense = ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER and ld.arg.contiguous
    buf, _ = (self if dense else self.contiguous())._buffer()
    return buf.numpy()[:self.numel()].reshape(self.shape)

  def item(self) -> Any:
    """The value of a one-element tensor as a Python number.

    >>> Tensor([[2.5]]).item()
    2.5
    """
    if self.numel() != 1: raise ValueError(f"item() needs a tensor of one element, got shape {self.shape}")
    return self.numpy().reshape(()).item()

  def tolist(self) -> Any:
    """The values as (nested) Python lists.

    >>> Tensor([[1, 2], [3, 4]]).tolist()
    [[1, 2], [3, 4]]
    """
    return self.numpy().tolist()

  def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
    arr = self.numpy()
    return arr if dtype is None else arr.astype(dtype)

  def contiguous(self) -> Tensor:
    """A copy laid out densely in its own buffer (one kernel), unless it already is one.

    >>> Tensor([[1, 2], [3, 4]]).T.contiguous().tolist()
    [[1, 3], [2, 4]]
    """
    return self._apply_uop(lambda x: UOp(Ops.CONTIGUOUS, x.dtype, (x,)))

  def to(self, device: str) -> Tensor:
    """The tensor on another device (a copy; the same tensor if it is there already).

    >>> Tensor([1, 2]).to('CPU:1').device
    'CPU:1'
    """
    device = Device.canonicalize(device)
    if device == self.device: return self
    return self._apply_uop(lambda x: UOp(Ops.COPY, x.dtype, (x,), device))

  def detach(self) -> Tensor:
    """The same values, cut off from gradients.

    >>> Tensor([1.0]).detach().tolist()
    [1.0]
    """
    return Tensor(UOp(Ops.DETACH, self.dtype, (self.lazydata,)), requires_grad=False)

  def _apply_uop(self, fn: Callable[..., UOp], *others: Tensor) -> Tensor:
    """Every op goes through here so that autograd can see it."""
    out = Tensor(fn(self.lazydata, *(o.lazydata for o in others)))
    if any(t.requires_grad for t in (self,) + others) and not Tensor.no_grad: out.requires_grad = True
    return out

  # ---- creation ----

  @staticmethod
  def _parse_shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    for s in shape:
      if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 0:
        raise ValueError(f"shape {shape}: every dimension must be a non-negative int, got {s!r}")
    return tuple(int(s) for s in shape)

  @staticmethod
  def full(shape: tuple[int, ...] | int, fill_value: Any, dtype: DType | str | None = None, device: str | None = None,
           requires_grad: bool | None = None) -> Tensor:
    """A tensor of `shape` holding `fill_value` everywhere (a broadcast constant, no memory).

    >>> Tensor.full((2, 2), 7).tolist()
    [[7, 7], [7, 7]]
    """
    shp = Tensor._parse_shape((shape,) if isinstance(shape, int) else tuple(shape))
    dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    return Tensor(const_uop(fill_value, dt, dev, shp), requires_grad=requires_grad)

  @staticmethod
  def zeros(*shape: Any, **kwargs: Any) -> Tensor:
    """A tensor of zeros (float32 unless `dtype` says otherwise).

    >>> Tensor.zeros(2, 2).tolist()
    [[0.0, 0.0], [0.0, 0.0]]
    """
    return Tensor.full(Tensor._parse_shape(shape), 0.0 if "dtype" not in kwargs else 0, **kwargs)

  @staticmethod
  def ones(*shape: Any, **kwargs: Any) -> Tensor:
    """A tensor of ones (float32 unless `dtype` says otherwise).

    >>> Tensor.ones(3, dtype='int32').tolist()
    [1, 1, 1]
    """
    return Tensor.full(Tensor._parse_shape(shape), 1.0 if "dtype" not in kwargs else 1, **kwargs)

  @staticmethod
  def empty(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kwargs: Any) -> Tensor:
    """Uninitialized memory of `shape` (it is allocated on first use).

    >>> Tensor.empty(2, 3).shape
    (2, 3)
    """
    shp = Tensor._parse_shape(shape)
    dt, dev = to_dtype(dtype or dtypes.default_float), Device.canonicalize(device or Device.DEFAULT)
    buf = new_buffer_uop(dev, prod(shp), dt)
    return Tensor(view_of(buf, lambda _: ShapeTracker.from_shape(shp)), **kwargs)

  def full_like(self, fill_value: Any, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """A tensor of `fill_value` with this tensor's shape, dtype and device.

    >>> Tensor([1, 2]).full_like(7).tolist()
    [7, 7]
    """
    dev = kwargs.pop("device", self.device)
    return Tensor.full(self.shape, fill_value, dtype=dtype or self.dtype, device=dev, **kwargs)

  def zeros_like(self, **kwargs: Any) -> Tensor:
    """Zeros with this tensor's shape, dtype and device.

    >>> Tensor([1.5, 2.5]).zeros_like().tolist()
    [0.0, 0.0]
    """
    return self.full_like(0, **kwargs)

  def ones_like(self, **kwargs: Any) -> Tensor:
    """Ones with this tensor's shape, dtype and device.

    >>> Tensor([1, 2]).ones_like().tolist()
    [1, 1]
    """
    return self.full_like(1, **kwargs)

  def empty_like(self, **kwargs: Any) -> Tensor:
    """Uninitialized memory with this tensor's shape, dtype and device.

    >>> Tensor([1, 2]).empty_like().shape
    (2,)
    """
    dt, dev = kwargs.pop("dtype", self.dtype), kwargs.pop("device", self.device)
    return Tensor.empty(*self.shape, dtype=dt, device=dev, **kwargs)

  @staticmethod
  def _iota(n: int, device: str | None = None) -> Tensor:
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    return Tensor(UOp(Ops.IOTA, dtypes.int32, (UOp(Ops.DEVICE, dtypes.void, (), dev),), n))

  @staticmethod
  def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
             dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """Evenly spaced values in [start, stop), computed on the device.

    >>> Tensor.arange(1, 7, 2).tolist()
    [1, 3, 5]
    """
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange: step must not be zero")
    if not all(math.isfinite(v) for v in (start, stop, step)):
      raise ValueError(f"arange: start, stop and step must be finite, got {start}, {stop}, {step}")
    n = max(0, math.ceil((stop - start) / step))
    any_float = any(isinstance(v, float) for v in (start, stop, step))
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float if any_float else dtypes.default_int
    idx = Tensor._iota(n, device)
    ret = (idx.cast(dtypes.float64 if dt.is_float else dtypes.int64) * step + start).cast(dt)
    ret.requires_grad = requires_grad
    return ret

  @staticmethod
  def linspace(start: int | float, stop: int | float, steps: int, dtype: DType | str | None = None,
               device: str | None = None) -> Tensor:
    """`steps` values from start to stop inclusive.

    >>> Tensor.linspace(0, 1, 3).tolist()
    [0.0, 0.5, 1.0]
    """
    if not isinstance(steps, int) or steps < 0:
      raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if steps == 1: return Tensor.full((1,), start, dtype=dt, device=device)
    delta = (stop - start) / (steps - 1)
    return (Tensor._iota(steps, device).cast(dtypes.float64) * delta + start).cast(dt)

  @staticmethod
  def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: str | None = None) -> Tensor:
    """The identity matrix.

    >>> Tensor.eye(2).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    m = n if m is None else m
    if n < 0 or m < 0: raise ValueError(f"eye: sizes must be non-negative, got n={n}, m={m}")
    rows, cols = Tensor.arange(n, device=device).reshape(n, 1), Tensor.arange(m, device=device).reshape(1, m)
    return (rows == cols).cast(to_dtype(dtype) if dtype is not None else dtypes.default_float)

  # ---- random numbers, generated on the device with counter-based Threefry-2x32 ----

  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Make the random functions reproducible.

    >>> Tensor.manual_seed(3)
    >>> a = Tensor.rand(2).tolist()
    >>> Tensor.manual_seed(3)
    >>> a == Tensor.rand(2).tolist()
    True
    """
    Tensor._seed, Tensor._rng_counter = int(seed), 0

  @staticmethod
  def _random_bits(n: int, device: str | None) -> Tensor:
    Tensor._rng_counter += 1
    return threefry_bits(Tensor._iota(n, device).cast(dtypes.uint32), Tensor._seed, Tensor._rng_counter)

  @staticmethod
  def rand(*shape: Any, dtype: DType | str | None = None, device: str | None = None, **kwargs: Any) -> Tensor:
    """Uniform random numbers in [0, 1).

    >>> Tensor.rand(2, 3).shape
    (2, 3)
    """
    shp = Tensor._parse_shape(shape)
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dt.is_float: raise TypeError(f"rand: dtype must be a float dtype, got {dt}")
    bits = Tensor._random_bits(prod(shp), device)
    # as many random bits as the dtype has mantissa bits, scaled by a power of two: exact, so never rounds up to 1.0
    mant = {2: 11, 4: 24}.get(dt.itemsize, 32)
    unit = (bits >> (32 - mant)).cast(dt) * (2.0 ** -mant)
    # materialized: a random tensor is read many times (e.g. by a matmul) and must not be regenerated per read
    ret = unit.reshape(shp).contiguous()
    ret.requires_grad = kwargs.get("requires_grad")
    return ret

  @staticmethod
  def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
    """Uniform random numbers in [low, high).

    >>> Tensor.uniform(1000, low=-1.0, high=1.0).abs().max().item() < 1
    True
    """
    rg = kwargs.pop("requires_grad", None)
    ret = Tensor.rand(*shape, **kwargs) * (high - low) + low
    ret.requires_grad = rg
    return ret

  @staticmethod
  def randn(*shape: Any, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """Standard normal random numbers (Box-Muller).

    >>> Tensor.randn(4).shape
    (4,)
    """
    rg = kwargs.pop("requires_grad", None)
    shp = Tensor._parse_shape(shape)
    u = Tensor.rand(2, *shp, **kwargs)
    ret = ((1.0 - u[0]).log() * -2.0).sqrt() * (u[1] * (2 * math.pi)).cos()
    ret = ret.cast(to_dtype(dtype) if dtype is not None else dtypes.default_float)
    ret.requires_grad = rg
    return ret

  def rand_like(self, **kwargs: Any) -> Tensor:
    """Uniform random numbers in [0, 1) with this tensor's shape (and dtype, if it is a float).

    >>> Tensor.zeros(2, 3).rand_like().shape
    (2, 3)
    """
    return Tensor.rand(*self.shape, dtype=kwargs.pop("dtype", self.dtype if self.dtype.is_float else None),
                       device=kwargs.pop("device", self.device), **kwargs)
  def randn_like(self, **kwargs: Any) -> Tensor:
    """Standard normal random numbers with this tensor's shape (and dtype, if it is a float).

    >>> Tensor.zeros(4).randn_like().shape
    (4,)
    """
    return Tensor.randn(*self.shape, dtype=kwargs.pop("dtype", self.dtype if self.dtype.is_float else None),
                        device=kwargs.pop("device", self.device), **kwargs)

  # ---- movement (views: no copies) ----

  def _resolve_axis(self, axis: int, ndim: int | None = None) -> int:
    """axis as an index in [0, ndim); ndim is self.ndim, or one more where an axis is being inserted."""
    n = max(self.ndim if ndim is None else ndim, 1)  # a 0-d tensor accepts axis 0 and -1, as torch
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
      raise TypeError(f"axis must be an int, got {axis!r}")
    if not -n <= axis < n:
      raise IndexError(f"axis {axis} is out of range for a tensor of shape {self.shape}: expected {-n} <= axis < {n}")
    return int(axis) % n

  def reshape(self, *shape: Any) -> Tensor:
    """The same elements in a new shape; one dimension may be -1.

    >>> Tensor.arange(6).reshape(2, -1).shape
    (2, 3)
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if any(not isinstance(s, (int, np.integer)) or s < -1 for s in shape):
      raise ValueError(f"reshape: bad shape {shape}; dimensions must be ints >= 0, or one -1")
    if list(shape).count(-1) > 1: raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
    if -1 in shape:
      known = prod(s for s in shape if s != -1)
      if known == 0 or self.numel() % known: raise ValueError(f"reshape: cannot reshape {self.shape} into {shape}")
      shape = tuple(self.numel() // known if s == -1 else s for s in shape)
    shape = tuple(int(s) for s in shape)
    if prod(shape) != self.numel(): raise ValueError(f"reshape: cannot reshape {self.shape} into {shape}: "
                                                     f"{self.numel()} != {prod(shape)} elements")
    if shape == self.shape: return self
    return self._apply_uop(lambda x: view_of(x, lambda st: st.reshape(shape)))

  def view(self, *shape: Any) -> Tensor:
    """The same as reshape.

    >>> Tensor.arange(6).view(3, 2).shape
    (3, 2)
    """
    return self.reshape(*shape)

  def permute(self, *order: Any) -> Tensor:
    """Reorder the dimensions.

    >>> Tensor.zeros(2, 3, 4).permute(2, 0, 1).shape
    (4, 2, 3)
    """
    if len(order) == 1 and isinstance(order[0], (tuple, list)): order = tuple(order[0])
    resolved = tuple(self._resolve_axis(o) for o in order)
    if sorted(resolved) != list(range(self.ndim)):
      raise ValueError(f"permute: {order} is not a permutation of the {self.ndim} dimensions of {self.shape}")
    if resolved == tuple(range(self.ndim)): return self
    return self._apply_uop(lambda x: view_of(x, lambda st: st.permute(resolved)))

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    """Swap two dimensions.

    >>> Tensor.zeros(2, 3, 4).transpose(0, 2).shape
    (4, 3, 2)
    """
    order = list(range(self.ndim))
    a, b = self._resolve_axis(dim0), self._resolve_axis(dim1)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Tensor:
    """All dimensions in reverse order.

    >>> Tensor([[1, 2, 3]]).T.tolist()
    [[1], [2], [3]]
    """
    return self.permute(tuple(reversed(range(self.ndim))))

  def expand(self, *shape: Any) -> Tensor:
    """Broadcast size-1 dimensions to a larger size (-1 keeps a dimension); no memory is copied.

    >>> Tensor([[1], [2]]).expand(2, 3).tolist()
    [[1, 1, 1], [2, 2, 2]]
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if len(shape) < self.ndim: raise ValueError(f"expand: cannot expand {self.shape} to fewer dimensions {shape}")
    cur = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(c if s == -1 else s for c, s in zip(cur, shape))
    for c, s in zip(cur, new):
      if c != s and c != 1: raise ValueError(f"expand: cannot expand {self.shape} to {shape}")
    x = self.reshape(cur) if cur != self.shape else self
    if new == x.shape: return x
    return x._apply_uop(lambda u: view_of(u, lambda st: st.expand(new)))

  def pad(self, padding: Sequence[Any], value: float = 0.0) -> Tensor:
    """Pad with `value`: `padding` holds (before, after) per dimension, or a flat torch-style list from the last dim.

    >>> Tensor([1, 2]).pad(((1, 2),)).tolist()
    [0, 1, 2, 0, 0]
    """
    if padding and isinstance(padding[0], (int, np.integer)):
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise ValueError(f"pad: flat padding {padding} for {self.shape}: expected (before, after) from the last dim")
      from_last = [(padding[i], padding[i + 1]) for i in range(len(padding) - 2, -1, -2)]
      pairs = [(0, 0)] * (self.ndim - len(padding) // 2) + from_last
    else: pairs = [(0, 0) if p is None else tuple(p) for p in padding]
    if len(pairs) != self.ndim:
      raise ValueError(f"pad: {len(pairs)} (before, after) pairs for a {self.ndim}-d tensor {self.shape}")
    if any(b < 0 or a < 0 for b, a in pairs):  # negative padding crops
      crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, self.shape))
      return self.shrink(crop).pad([(max(0, b), max(0, a)) for b, a in pairs], value)
    arg = tuple((int(b), int(a)) for b, a in pairs)
    if all(p == (0, 0) for p in arg): return self
    ret = self._apply_uop(lambda x: view_of(x, lambda st: st.pad(arg)))
    if value == 0: return ret
    mask = Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device).pad(arg)
    return mask.where(ret, ret.full_like(value))  # the fill takes the tensor's dtype, as torch

  def shrink(self, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    """Keep [start, end) of each dimension (None keeps all).

    >>> Tensor([1, 2, 3, 4]).shrink(((1, 3),)).tolist()
    [2, 3]
    """
    if len(arg) != self.ndim: raise ValueError(f"shrink: {len(arg)} ranges for a {self.ndim}-d tensor {self.shape}")
    full = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(full, self.shape):
      if not 0 <= b <= e <= s:
        raise ValueError(f"shrink: range ({b}, {e}) is out of bounds for a dimension of size {s}")
    if all(r == (0, s) for r, s in zip(full, self.shape)): return self
    return self._apply_uop(lambda x: view_of(x, lambda st: st.shrink(full)))

  def flip(self, axis: int | Sequence[int]) -> Tensor:
    """Reverse the order of elements along the given axes.

    >>> Tensor([1, 2, 3]).flip(0).tolist()
    [3, 2, 1]
    """
    axes = {self._resolve_axis(a) for a in make_tuple(axis, 1)}
    arg = tuple(i in axes for i in range(self.ndim))
    return self._apply_uop(lambda x: view_of(x, lambda st: st.flip(arg)))

  def squeeze(self, dim: int | None = None) -> Tensor:
    """Remove dimension `dim` if its size is 1, or every size-1 dimension when `dim` is None.

    >>> Tensor.zeros(1, 3, 1).squeeze().shape
    (3,)
    """
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    d = self._resolve_axis(dim)
    return self if self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1:])

  def unsqueeze(self, dim: int) -> Tensor:
    """Insert a dimension of size 1 at `dim`.

    >>> Tensor([1, 2]).unsqueeze(-1).shape
    (2, 1)
    """
    d = self._resolve_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dimensions start_dim..end_dim (all by default) into one.

    >>> Tensor.zeros(2, 3, 4).flatten(1).shape
    (2, 12)
    """
    if self.ndim == 0: return self.reshape(1)
    s, e = self._resolve_axis(start_dim), self._resolve_axis(end_dim)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def repeat(self, *repeats: Any) -> Tensor:
    """Tile the tensor `repeats[i]` times along each dimension.

    >>> Tensor([1, 2]).repeat(2).tolist()
    [1, 2, 1, 2]
    """
    if len(repeats) == 1 and isinstance(repeats[0], (tuple, list)): repeats = tuple(repeats[0])
    if len(repeats) < self.ndim: raise ValueError(f"repeat: {len(repeats)} repeats for a {self.ndim}-d tensor")
    if any(not isinstance(r, (int, np.integer)) or r < 0 for r in repeats):
      raise ValueError(f"repeat: repeats must be non-negative ints, got {repeats}")
    base = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    new_shape = tuple(r * s for r, s in zip(repeats, base.shape))
    interleaved = base.reshape(flatten((1, s) for s in base.shape))
    expanded = interleaved.expand(flatten((r, s) for r, s in zip(repeats, base.shape)))
    return expanded.reshape(new_shape)

  def cat(self: Any, *others: Tensor, dim: int = 0) -> Tensor:
    """Join tensors along an existing dimension (each is padded into place, then summed: one fused kernel).
    Called as `a.cat(b, c)`, `Tensor.cat(a, b, c)` or `Tensor.cat([a, b, c])`.

    >>> Tensor([1]).cat(Tensor([2, 3])).tolist()
    [1, 2, 3]
    """
    ts: tuple[Tensor, ...] = (*self, *others) if isinstance(self, (list, tuple)) else (self, *others)
    if not ts: raise ValueError("cat: needs at least one tensor")
    for t in ts:
      if not isinstance(t, Tensor): raise TypeError(f"cat: expected Tensors, got {type(t).__name__}")
    first = ts[0]
    if first.ndim == 0: raise ValueError("cat: 0-d tensors have no dimension to join along; use stack")
    d = first._resolve_axis(dim)
    for t in ts[1:]:
      if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d):
        raise ValueError(f"cat: shapes {first.shape} and {t.shape} differ outside dimension {d}")
    dt = first.dtype
    for t in ts[1:]: dt = promote_types(dt, t.dtype)
    offsets = list(itertools.accumulate([t.shape[d] for t in ts], initial=0))
    total = offsets[-1]
    parts = [t.cast(dt).pad([(offsets[i], total - offsets[i + 1]) if j == d else (0, 0) for j in range(first.ndim)])
             for i, t in enumerate(ts)]
    out = parts[0]
    for p in parts[1:]: out = out._merge_disjoint(p)
    return out

  def _merge_disjoint(self, other: Tensor) -> Tensor:
    # padded parts never overlap, so OR for bools and ADD otherwise puts each value in place exactly
    return self | other if self.dtype.is_bool else self + other

  @staticmethod
  def stack(*tensors: Tensor | Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along a new dimension.

    >>> Tensor.stack(Tensor([1, 2]), Tensor([3, 4])).tolist()
    [[1, 2], [3, 4]]
    """
    ts: list[Any] = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)) else list(tensors)
    if not ts: raise ValueError("stack: needs at least one tensor")
    for t in ts:
      if not isinstance(t, Tensor): raise TypeError(f"stack: expected Tensors, got {type(t).__name__}")
    d = ts[0]._resolve_axis(dim, ts[0].ndim + 1)
    for t in ts[1:]:
      if t.shape != ts[0].shape: raise ValueError(f"stack: shapes {ts[0].shape} and {t.shape} differ")
    return Tensor.cat(*[t.unsqueeze(d) for t in ts], dim=d)

  def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Split into chunks of `sizes` (an int: equal chunks, the last may be smaller) along `dim`.

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).split(2)]
    [[1, 2], [3, 4], [5]]
    """
    d = self._resolve_axis(dim)
    n = self.shape[d]
    if isinstance(sizes, int):
      if sizes <= 0: raise ValueError(f"split: chunk size must be positive, got {sizes}")
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    if any(not isinstance(sz, (int, np.integer)) or sz < 0 for sz in sizes):
      raise ValueError(f"split: sizes {list(sizes)} must be non-negative ints")
    if sum(sizes) != n:
      raise ValueError(f"split: sizes {list(sizes)} do not add up to {n} (dimension {d} of {self.shape})")
    offs = list(itertools.accumulate(sizes, initial=0))
    return tuple(self.shrink([(offs[i], offs[i + 1]) if j == d else None for j in range(self.ndim)])
                 for i in range(len(sizes)))

  def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into `chunks` pieces of equal size along `dim` (the last may be smaller, fewer pieces if too small).

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).chunk(2)]
    [[1, 2, 3], [4, 5]]
    """
    if chunks <= 0: raise ValueError(f"chunk: number of chunks must be positive, got {chunks}")
    d = self._resolve_axis(dim)
    return self.split(math.ceil(self.shape[d] / chunks) if self.shape[d] else 1, dim=d)

  def __getitem__(self, indices: Any) -> Tensor:
    """Basic indexing as numpy: ints, slices with any step, None and ...; the result is a view.

    >>> Tensor([[1, 2, 3], [4, 5, 6]])[:, ::-2].tolist()
    [[3, 1], [6, 4]]
    """
    return getitem(self, indices)

  # ---- elementwise ----

  def _unary(self, op: Ops) -> Tensor: return self._apply_uop(lambda x: UOp(op, x.dtype, (x,)))

  def cast(self, dtype: DType | str) -> Tensor:
    """Convert to another dtype (floats to ints truncate toward zero).

    >>> Tensor([-1.7, 2.7]).cast('int32').tolist()
    [-1, 2]
    """
    dt = to_dtype(dtype)
    return self if dt == self.dtype else self._apply_uop(lambda x: UOp(Ops.CAST, dt, (x,)))

  def bitcast(self, dtype: DType | str) -> Tensor:
    """Reinterpret the bits as another dtype of the same size.

    >>> Tensor([1.0]).bitcast('int32').item()
    1065353216
    """
    dt = to_dtype(dtype)
    if dt.itemsize != self.dtype.itemsize: raise TypeError(f"bitcast: {self.dtype} and {dt} differ in size")
    # a bool is one bit in registers and a 0/1 byte in memory: its byte reinterpretation is a value cast
    if self.dtype.is_bool or dt.is_bool: return self.cast(dt)
    return self if dt == self.dtype else self._apply_uop(lambda x: UOp(Ops.BITCAST, dt, (x,)))

  def _to_float(self) -> Tensor: return self.cast(least_upper_float(self.dtype))

  def _broadcasted(self, y: Tensor | Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    if isinstance(y, Tensor): dt = promote_types(self.dtype, y.dtype)
    elif isinstance(y, (bool, int, float, np.generic)):
      y = y.item() if isinstance(y, np.generic) else y
      dt = result_type_scalar(self.dtype, y)
      y = Tensor.full((), y, dtype=dt, device=self.device)
    elif isinstance(y, (list, np.ndarray)):
      y = Tensor(y, device=self.device)
      dt = promote_types(self.dtype, y.dtype)
    else: raise TypeError(f"unsupported operand type {type(y).__name__} for a Tensor op")
    if y.device != self.device: raise ValueError(f"tensors are on different devices: {self.device} and {y.device}")
    x = self
    if reverse: x, y = y, x
    out_shape = broadcast_shape(x.shape, y.shape)
    return x.cast(dt)._broadcast_to(out_shape), y.cast(dt)._broadcast_to(out_shape)

  def _broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
    return self if self.shape == shape else self.reshape((1,) * (len(shape) - self.ndim) + self.shape).expand(shape)

  def _binop(self, op: Ops, y: Tensor | Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    return a._apply_uop(lambda p, q: p.alu(op, q), b)

  def add(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Elementwise sum (`+`), with broadcasting and torch's type promotion.

    >>> (Tensor([1, 2]) + Tensor([[10], [20]])).tolist()
    [[11, 12], [21, 22]]
    """
    return self._binop(Ops.ADD, x, reverse)

  def sub(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Elementwise difference (`-`); bool operands are an error, as in torch.

    >>> (Tensor([5, 7]) - 2).tolist()
    [3, 5]
    """
    a, b = self._broadcasted(x, reverse)
    if self.dtype.is_bool or a.dtype.is_bool or isinstance(x, bool) or (isinstance(x, Tensor) and x.dtype.is_bool):
      raise TypeError("subtraction with a bool operand is not supported (as in torch); use logical_xor, ^ or ~")
    return a._apply_uop(lambda p, q: p.alu(Ops.SUB, q), b)

  def mul(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Elementwise product (`*`).

    >>> (Tensor([1, 2]) * 1.5).tolist()
    [1.5, 3.0]
    """
    return self._binop(Ops.MUL, x, reverse)

  def div(self, x: Tensor | Any, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (ints become float); rounding_mode "trunc" or "floor" rounds like torch.

    >>> (Tensor([7, -7]) / 2).tolist()
    [3.5, -3.5]
    """
    if rounding_mode == "floor": return self.floordiv(x, reverse)
    a, b = self._broadcasted(x, reverse)
    if rounding_mode == "trunc": return a._idiv_trunc(b) if a.dtype.is_int else a.div(b).trunc()
    if rounding_mode is not None:
      raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = a._to_float(), b._to_float()
    return a._apply_uop(lambda p, q: p.alu(Ops.FDIV, q), b)

  def _idiv_trunc(self, b: Tensor) -> Tensor:
    # C division traps on x/0 and INT_MIN/-1: divide by a safe divisor and patch those lanes as numpy does (0, -x)
    safe = (b == 0) | (b == -1) if not self.dtype.is_unsigned else (b == 0)
    q = self._apply_uop(lambda p, q: p.alu(Ops.IDIV, q), safe.where(1, b))
    if self.dtype.is_unsigned: return (b == 0).where(0, q)
    return (b == 0).where(0, (b == -1).where(-self, q))

  def floordiv(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Division rounding toward negative infinity, as Python's //; an int divided by zero gives 0, as numpy.

    >>> (Tensor([7, -7, 7]) // Tensor([2, 2, 0])).tolist()
    [3, -4, 0]
    """
    a, b = self._broadcasted(x, reverse)
    if a.dtype.is_bool: raise TypeError("floor division of bool tensors is not supported")
    if a.dtype.is_float: return (a / b).floor()
    return a._int_floordiv_mod(b)[0]

  def mod(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Remainder with the sign of the divisor, as Python's %; an int modulo zero gives 0, as numpy.

    >>> (Tensor([7, -7, 7]) % Tensor([3, 3, 0])).tolist()
    [1, 2, 0]
    """
    a, b = self._broadcasted(x, reverse)
    if a.dtype.is_bool: raise TypeError("modulo of bool tensors is not supported")
    if not a.dtype.is_float: return a._int_floordiv_mod(b)[1]
    r = a - (a / b).trunc() * b
    return (r.ne(0) & ((r < 0) ^ (b < 0))).where(r + b, r)

  def _int_floordiv_mod(self, b: Tensor) -> tuple[Tensor, Tensor]:
    # truncating division, then one step down where the signs differ and it was inexact; x//0 and x%0 are 0
    q = self._idiv_trunc(b)
    r = self - q * b
    if not self.dtype.is_unsigned:
      step = r.ne(0) & ((r < 0) ^ (b < 0)) & b.ne(0)
      q, r = step.where(q - 1, q), step.where(r + b, r)
    return q, b.eq(0).where(0, r)

  def pow(self, x: Tensor | Any, reverse: bool = False) -> Tensor:
    """Elementwise power; int ** int stays an int, negative bases with integer exponents keep their sign.
    An int tensor to a negative Python int is a ValueError (as numpy); with a tensor exponent it rounds (2 ** -1 -> 0).

    >>> (Tensor([-2, 3]) ** 3).tolist()
    [-8, 27]
    """
    return tensor_pow(self, x, reverse)

  def maximum(self, x: Tensor | Any) -> Tensor:
    """The elementwise larger of two tensors (NaN propagates).

    >>> Tensor([1, 5]).maximum(Tensor([3, 2])).tolist()
    [3, 5]
    """
    return self._binop(Ops.MAX, x)

  def minimum(self, x: Tensor | Any) -> Tensor:
    """The elementwise smaller of two tensors (NaN propagates).

    >>> Tensor([1, 5]).minimum(3).tolist()
    [1, 3]
    """
    a, b = self._broadcasted(x)
    return -((-a).maximum(-b)) if a.dtype.is_float else ~((~a).maximum(~b))

  def where(self, x: Tensor | Any, y: Tensor | Any) -> Tensor:
    """Choose x where self is true, y elsewhere.

    >>> Tensor([True, False]).where(1, 2).tolist()
    [1, 2]
    """
    cond = self if self.dtype.is_bool else self.ne(0)
    if isinstance(x, Tensor): a, b = x._broadcasted(y)
    elif isinstance(y, Tensor): b, a = y._broadcasted(x)
    else: a, b = Tensor.full((), x, device=self.device)._broadcasted(y)
    shape = broadcast_shape(cond.shape, a.shape)
    c, a, b = cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)
    return c._apply_uop(lambda p, q, r: UOp(Ops.WHERE, q.dtype, (p, q, r)), a, b)

  def _cmp(self, op: Ops, y: Tensor | Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    return a._apply_uop(lambda p, q: p.alu(op, q), b)

  def __lt__(self, x: Tensor | Any) -> Tensor: return self._cmp(Ops.CMPLT, x)
  def __gt__(self, x: Tensor | Any) -> Tensor: return self._cmp(Ops.CMPLT, x, reverse=True)
  def __ge__(self, x: Tensor | Any) -> Tensor: return self._cmp_or_equal(x, reverse=False)
  def __le__(self, x: Tensor | Any) -> Tensor: return self._cmp_or_equal(x, reverse=True)
  def ne(self, x: Tensor | Any) -> Tensor:
    """Elementwise `!=` (bool).

    >>> Tensor([1, 2]).ne(2).tolist()
    [True, False]
    """
    return self._cmp(Ops.CMPNE, x)

  def eq(self, x: Tensor | Any) -> Tensor:
    """Elementwise `==` (bool).

    >>> Tensor([1, 2]).eq(2).tolist()
    [False, True]
    """
    return self.ne(x).logical_not()

  def __eq__(self, x: Tensor | Any) -> Tensor: return self.eq(x)  # type: ignore[override]
  def __ne__(self, x: Tensor | Any) -> Tensor: return self.ne(x)  # type: ignore[override]

  def _cmp_or_equal(self, x: Tensor | Any, reverse: bool) -> Tensor:
    # not(a < b) would call NaN >= 1 true; floats need "greater or equal" spelled out
    a, b = self._broadcasted(x, reverse)
    if not a.dtype.is_float: return (a < b).logical_not()
    return (b < a) | a.eq(b)

  def _truth(self) -> Tensor: return self if self.dtype.is_bool else self.ne(0)

  def _logical_operand(self, x: Tensor | Any) -> Tensor:
    return (x if isinstance(x, Tensor) else Tensor(x, device=self.device))._truth()

  def logical_not(self) -> Tensor:
    """True where the tensor is zero (or False).

    >>> Tensor([0, 2]).logical_not().tolist()
    [True, False]
    """
    return self._truth().ne(True)

  def logical_and(self, x: Tensor | Any) -> Tensor:
    """Elementwise `and` of the truth values (non-zero is true); the result is bool.

    >>> Tensor([1, 0, 3]).logical_and(Tensor([True, True, False])).tolist()
    [True, False, False]
    """
    return self._truth()._binop(Ops.AND, self._logical_operand(x))

  def logical_or(self, x: Tensor | Any) -> Tensor:
    """Elementwise `or` of the truth values (non-zero is true); the result is bool.

    >>> Tensor([1, 0, 0]).logical_or(0.5).tolist()
    [True, True, True]
    """
    return self._truth()._binop(Ops.OR, self._logical_operand(x))

  def logical_xor(self, x: Tensor | Any) -> Tensor:
    """Elementwise `xor` of the truth values (non-zero is true); the result is bool.

    >>> Tensor([1, 0]).logical_xor(Tensor([1, 1])).tolist()
    [False, True]
    """
    return self._truth().ne(self._logical_operand(x))

  def _bitwise(self, op: Ops, x: Tensor | Any, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if a.dtype.is_float: raise TypeError(f"bitwise {op.name.lower()} needs int or bool tensors, got {a.dtype}")
    return a._apply_uop(lambda p, q: p.alu(op, q), b)

  def bitwise_and(self, x: Tensor | Any) -> Tensor:
    """Elementwise `&` of int or bool tensors.

    >>> Tensor([12, 10]).bitwise_and(6).tolist()
    [4, 2]
    """
    return self._bitwise(Ops.AND, x)

  def bitwise_or(self, x: Tensor | Any) -> Tensor:
    """Elementwise `|` of int or bool tensors.

    >>> Tensor([12, 10]).bitwise_or(1).tolist()
    [13, 11]
    """
    return self._bitwise(Ops.OR, x)

  def bitwise_xor(self, x: Tensor | Any) -> Tensor:
    """Elementwise `^` of int or bool tensors.

    >>> Tensor([12, 10]).bitwise_xor(6).tolist()
    [10, 12]
    """
    return self._bitwise(Ops.XOR, x)

  def bitwise_not(self) -> Tensor:
    """Elementwise `~`: flips every bit of an int, negates a bool.

    >>> Tensor([0, 5]).bitwise_not().tolist()
    [-1, -6]
    """
    if self.dtype.is_float: raise TypeError(f"bitwise_not needs an int or bool tensor, got {self.dtype}")
    if self.dtype.is_bool: return self.logical_not()
    return self._bitwise(Ops.XOR, self.dtype.max() if self.dtype.is_unsigned else -1)

  def lshift(self, x: int) -> Tensor:
    """Shift the bits of an int tensor left (`<<`).

    >>> Tensor([1, 3]).lshift(2).tolist()
    [4, 12]
    """
    return self._bitwise(Ops.SHL, x)

  def rshift(self, x: int) -> Tensor:
    """Shift the bits of an int tensor right (`>>`), keeping the sign of signed ints.

    >>> Tensor([-8, 8]).rshift(2).tolist()
    [-2, 2]
    """
    return self._bitwise(Ops.SHR, x)

  def neg(self) -> Tensor:
    """Elementwise negation (`-x`).

    >>> (-Tensor([1, -2])).tolist()
    [-1, 2]
    """
    if self.dtype.is_bool: raise TypeError("negation of a bool tensor is not supported; use logical_not or ~")
    return self._unary(Ops.NEG)

  def reciprocal(self) -> Tensor:
    """1 / x (ints become float).

    >>> Tensor([2, 4]).reciprocal().tolist()
    [0.5, 0.25]
    """
    return self._to_float()._unary(Ops.RECIP)

  def sqrt(self) -> Tensor:
    """The square root (ints become float; negative values give NaN).

    >>> Tensor([4.0, 9.0]).sqrt().tolist()
    [2.0, 3.0]
    """
    return self._to_float()._unary(Ops.SQRT)

  def rsqrt(self) -> Tensor:
    """1 / sqrt(x).

    >>> Tensor([4.0]).rsqrt().tolist()
    [0.5]
    """
    return self.sqrt().reciprocal()

  def exp2(self) -> Tensor:
    """2 ** x, elementwise.

    >>> Tensor([3.0, -1.0]).exp2().tolist()
    [8.0, 0.5]
    """
    return self._to_float()._unary(Ops.EXP2)

  def log2(self) -> Tensor:
    """The base-2 logarithm.

    >>> Tensor([8.0, 0.5]).log2().tolist()
    [3.0, -1.0]
    """
    return self._to_float()._unary(Ops.LOG2)

  def exp(self) -> Tensor:
    """e ** x, elementwise.

    >>> round(Tensor([1.0]).exp().item(), 5)
    2.71828
    """
    return (self._to_float() * (1 / math.log(2))).exp2()

  def log(self) -> Tensor:
    """The natural logarithm.

    >>> round(Tensor([2.718281828]).log().item(), 5)
    1.0
    """
    return self.log2() * math.log(2)

  def sin(self) -> Tensor:
    """The sine (radians).

    >>> Tensor([0.0]).sin().tolist()
    [0.0]
    """
    return self._to_float()._unary(Ops.SIN)

  def cos(self) -> Tensor:
    """Cosine, from the half angle (cos x = 1 - 2 sin(x/2)^2): x/2 is exact, pi/2 - x loses all digits for large x.

    >>> Tensor([0.0]).cos().tolist()
    [1.0]
    """
    s = (self._to_float() * 0.5).sin()
    return 1 - 2 * s * s

  def trunc(self) -> Tensor:
    """Round toward zero.

    >>> Tensor([-1.5, 1.5]).trunc().tolist()
    [-1.0, 1.0]
    """
    return self if not self.dtype.is_float else self._unary(Ops.TRUNC)

  def floor(self) -> Tensor:
    """Round toward negative infinity.

    >>> Tensor([-1.5, 1.5]).floor().tolist()
    [-2.0, 1.0]
    """
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)

  def ceil(self) -> Tensor:
    """Round toward positive infinity.

    >>> Tensor([-1.5, 1.5]).ceil().tolist()
    [-1.0, 2.0]
    """
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)

  def round(self) -> Tensor:
    """Round to the nearest integer, halves to even (as torch and numpy).

    >>> Tensor([0.5, 1.5, 2.5, -0.5]).round().tolist()
    [0.0, 2.0, 2.0, -0.0]
    """
    if not self.dtype.is_float: return self
    # from trunc and the exact fraction x - trunc(x): x + 0.5 would round before the floor for large or near-half x
    t = self.trunc()
    frac = (self - t).abs()
    t_odd = ((t * 0.5).trunc() * 2).ne(t)
    away = (frac > 0.5) | ((frac == 0.5) & t_odd)
    return away.where(t + (self > 0).where(1.0, -1.0).cast(self.dtype), t)

  def relu(self) -> Tensor:
    """max(x, 0).

    >>> Tensor([-1.0, 2.0]).relu().tolist()
    [0.0, 2.0]
    """
    return self.maximum(0)

  def sigmoid(self) -> Tensor:
    """1 / (1 + exp(-x)).

    >>> Tensor([0.0]).sigmoid().tolist()
    [0.5]
    """
    return (1 + (-self._to_float()).exp()).reciprocal()

  def tanh(self) -> Tensor:
    """The hyperbolic tangent.

    >>> Tensor([0.0]).tanh().tolist()
    [0.0]
    """
    return 2.0 * (2.0 * self._to_float()).sigmoid() - 1.0

  def abs(self) -> Tensor:
    """The absolute value.

    >>> Tensor([-2, 3]).abs().tolist()
    [2, 3]
    """
    return self if self.dtype.is_bool or self.dtype.is_unsigned else self.maximum(-self)

  def sign(self) -> Tensor:
    """-1, 0 or 1 by the sign of each element; NaN stays NaN (as numpy; torch gives 0).

    >>> Tensor([-2.5, 0.0, 3.0]).sign().tolist()
    [-1.0, 0.0, 1.0]
    """
    if self.dtype.is_bool: return self
    s = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
    return self.ne(self).where(self, s) if self.dtype.is_float else s

  def square(self) -> Tensor:
    """x * x.

    >>> Tensor([-3, 2]).square().tolist()
    [9, 4]
    """
    return self * self

  __neg__ = neg
  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __add__(self, x: Any) -> Tensor: return self.add(x)
  def __radd__(self, x: Any) -> Tensor: return self.add(x, True)
  def __sub__(self, x: Any) -> Tensor: return self.sub(x)
  def __rsub__(self, x: Any) -> Tensor: return self.sub(x, True)
  def __mul__(self, x: Any) -> Tensor: return self.mul(x)
  def __rmul__(self, x: Any) -> Tensor: return self.mul(x, True)
  def __truediv__(self, x: Any) -> Tensor: return self.div(x)
  def __rtruediv__(self, x: Any) -> Tensor: return self.div(x, True)
  def __floordiv__(self, x: Any) -> Tensor: return self.floordiv(x)
  def __rfloordiv__(self, x: Any) -> Tensor: return self.floordiv(x, True)
  def __mod__(self, x: Any) -> Tensor: return self.mod(x)
  def __rmod__(self, x: Any) -> Tensor: return self.mod(x, True)
  def __pow__(self, x: Any) -> Tensor: return self.pow(x)
  def __rpow__(self, x: Any) -> Tensor: return self.pow(x, True)
  def __and__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x)
  def __rand__(self, x: Any) -> Tensor: return self._bitwise(Ops.AND, x, True)
  def __or__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x)
  def __ror__(self, x: Any) -> Tensor: return self._bitwise(Ops.OR, x, True)
  def __xor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x)
  def __rxor__(self, x: Any) -> Tensor: return self._bitwise(Ops.XOR, x, True)
  def __lshift__(self, x: int) -> Tensor: return self.lshift(x)
  def __rshift__(self, x: int) -> Tensor: return self.rshift(x)
  def __matmul__(self, x: Tensor) -> Tensor: return self.matmul(x)
  def __rmatmul__(self, x: Tensor) -> Tensor: return (x if isinstance(x, Tensor) else Tensor(x)).matmul(self)

  # ---- reductions ----

  def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    if not isinstance(axis, (int, np.integer, tuple, list)):
      raise TypeError(f"axis must be an int, a sequence of ints or None, got {axis!r}")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    resolved = tuple(self._resolve_axis(a) for a in axes)
    if len(set(resolved)) != len(resolved): raise ValueError(f"axis {axis} repeats a dimension")
    return tuple(sorted(resolved)) if self.ndim else ()  # a 0-d tensor takes axis 0 or -1, and has nothing to reduce

  def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
    all_axes = self._axes(axis)
    axes = tuple(a for a in all_axes if self.shape[a] != 1)
    ret = self if not axes else self._apply_uop(lambda x: UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (op, axes)))
    if keepdim: return ret
    return ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in all_axes))

  def _sum_dtype(self) -> DType:
    if self.dtype.is_bool or (self.dtype.is_int and not self.dtype.is_unsigned): return dtypes.int64
    if self.dtype.is_unsigned: return dtypes.uint64 if self.dtype.itemsize == 8 else dtypes.int64
    return self.dtype

  def _acc_dtype(self, out: DType) -> DType: return dtypes.float32 if out == dtypes.float16 else out

  def _accumulate(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool, dtype: DType | str | None) -> Tensor:
    """sum and prod: torch's result dtype, a wider accumulator for float16, the identity for empty inputs."""
    out = to_dtype(dtype) if dtype is not None else self._sum_dtype()
    if self.numel() == 0 and self.ndim: return self._empty_reduce(0 if op is Ops.ADD else 1, axis, keepdim, out)
    return self.cast(self._acc_dtype(out))._reduce(op, axis, keepdim).cast(out)

  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
          dtype: DType | str | None = None) -> Tensor:
    """Sum over `axis` (all by default); ints and bools sum as int64, float16 accumulates in float32.

    >>> Tensor([[1, 2], [3, 4]]).sum(0).tolist()
    [4, 6]
    """
    return self._accumulate(Ops.ADD, axis, keepdim, dtype)

  def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
           dtype: DType | str | None = None) -> Tensor:
    """The product over `axis` (all by default); ints and bools multiply as int64.

    >>> Tensor([[1, 2], [3, 4]]).prod(1).tolist()
    [2, 12]
    """
    return self._accumulate(Ops.MUL, axis, keepdim, dtype)

  def _empty_reduce(self, value: Any, axis: int | Sequence[int] | None, keepdim: bool, dtype: DType) -> Tensor:
    axes = self._axes(axis)
    shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape)) if keepdim else \
      tuple(s for i, s in enumerate(self.shape) if i not in axes)
    return Tensor.full(shape, value, dtype=dtype, device=self.device)

  def _check_nonempty(self, name: str, axis: int | Sequence[int] | None) -> None:
    if any(self.shape[a] == 0 for a in self._axes(axis)):
      raise ValueError(f"{name}: cannot reduce over a zero-size dimension of {self.shape}")

  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """The largest value over `axis` (NaN propagates).

    >>> Tensor([[1, 5], [3, 4]]).max(1).tolist()
    [5, 4]
    """
    self._check_nonempty("max", axis)
    return self._reduce(Ops.MAX, axis, keepdim)

  def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """The smallest value over `axis` (NaN propagates).

    >>> Tensor([[1, 5], [3, 4]]).min(0).tolist()
    [1, 4]
    """
    self._check_nonempty("min", axis)
    if self.dtype.is_bool: return self.logical_not().max(axis, keepdim).logical_not()
    if self.dtype.is_float: return -((-self).max(axis, keepdim))
    return ~((~self).max(axis, keepdim))

  def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """The average over `axis`; ints become float.

    >>> Tensor([[1.0, 2.0], [3.0, 4.0]]).mean().item()
    2.5
    """
    x = self._to_float()
    acc = self._acc_dtype(x.dtype)  # float16 sums overflow long before their mean does
    total = x.sum(axis, keepdim, dtype=acc)
    count = prod(self.shape[a] for a in self._axes(axis))
    return (total * (1 / count) if count else total / 0).cast(x.dtype)

  def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """The variance over `axis`, dividing by (count - correction); ints become float.

    >>> Tensor([1.0, 2.0, 3.0, 4.0]).var().item()
    1.6666666269302368
    """
    x = self._to_float()
    xa = x.cast(self._acc_dtype(x.dtype))
    count = prod(self.shape[a] for a in self._axes(axis))
    sq = (xa - xa.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return (sq / max(0, count - correction)).cast(x.dtype)

  def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """The standard deviation over `axis`: the square root of var.

    >>> Tensor([1.0, 3.0]).std().item()
    1.4142135381698608
    """
    return self.var(axis, keepdim, correction).sqrt()

  def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Whether any element over `axis` is non-zero (bool).

    >>> Tensor([[0, 1], [0, 0]]).any(1).tolist()
    [True, False]
    """
    if self.numel() == 0: return self._empty_reduce(False, axis, keepdim, dtypes.bool)
    return self.cast(dtypes.bool).max(axis, keepdim)

  def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Whether every element over `axis` is non-zero (bool).

    >>> Tensor([[1, 1], [0, 1]]).all(1).tolist()
    [True, False]
    """
    if self.numel() == 0: return self._empty_reduce(True, axis, keepdim, dtypes.bool)
    return self.logical_not().any(axis, keepdim).logical_not()

  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the first largest value (int64); with axis None, into the flattened tensor.

    >>> Tensor([1, 3, 2]).argmax().item()
    1
    """
    if axis is None:
      flat = self.flatten()
      ret = flat.argmax(0)
      return ret.reshape((1,) * self.ndim) if keepdim else ret
    d = self._resolve_axis(axis)
    if self.ndim == 0: return Tensor.zeros((), dtype=dtypes.int64, device=self.device)
    self._check_nonempty("argmax", d)
    n = self.shape[d]
    is_max = (self == self.max(d, keepdim=True))
    if self.dtype.is_float: is_max = is_max | self.ne(self)  # NaN counts as the maximum, as in torch
    count_down = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - d - 1))
    return (n - (is_max * count_down).max(d, keepdim)).cast(dtypes.int64)

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """The index of the first smallest value (int64); with axis None, into the flattened tensor.

    >>> Tensor([3, 1, 1]).argmin().item()
    1
    """
    if self.dtype.is_bool: return self.logical_not().argmax(axis, keepdim)
    return (-self if self.dtype.is_float else ~self).argmax(axis, keepdim)

  def softmax(self, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, computed stably.

    >>> round(Tensor([0.0, 0.0]).softmax().tolist()[0], 3)
    0.5
    """
    x = self._to_float()
    if x.numel() == 0: return x._check_axis(axis)
    e = (x - x.max(axis, keepdim=True)).exp()
    return e / e.sum(axis, keepdim=True)

  def log_softmax(self, axis: int = -1) -> Tensor:
    """log(softmax(x)) along `axis`, computed without taking the log of a rounded-off zero.

    >>> [round(v, 4) for v in Tensor([0.0, 0.0]).log_softmax().tolist()]
    [-0.6931, -0.6931]
    """
    x = self._to_float()
    if x.numel() == 0: return x._check_axis(axis)
    shifted = x - x.max(axis, keepdim=True)
    return shifted - shifted.exp().sum(axis, keepdim=True).log()

  def logsumexp(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over `axis`, stable for large values; a row of -inf (or an empty one) gives -inf.

    >>> round(Tensor([1000.0, 1000.0]).logsumexp().item(), 2)
    1000.69
    """
    x = self._to_float()
    if x.numel() == 0: return x._empty_reduce(-math.inf, axis, keepdim, x.dtype)
    m = x.max(axis, keepdim=True)
    m = (m.abs() == float("inf")).where(0, m)  # all -inf rows give -inf, not nan
    ret = (x - m).exp().sum(axis, keepdim=True).log() + m
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in self._axes(axis)))

  def _check_axis(self, axis: int | Sequence[int] | None) -> Tensor:
    self._axes(axis)  # raises for a bad axis
    return self

  # ---- matmul and convolution ----

  def dot(self, w: Tensor) -> Tensor:
    """Matrix product with numpy's rules for 1-D operands and broadcast batch dimensions.

    >>> (Tensor([[1, 2], [3, 4]]) @ Tensor([[1], [1]])).tolist()
    [[3], [7]]
    """
    return matmul(self, w)

  def matmul(self, w: Tensor) -> Tensor:
    """The matrix product (`@`): the same as dot.

    >>> (Tensor([[1, 2]]) @ Tensor([[3], [4]])).tolist()
    [[11]]
    """
    return self.dot(w)

  def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0) -> Tensor:
    """Convolution (cross-correlation, as torch) over the trailing dims: views plus one reduce, no im2col buffer.

    >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    return conv(self, weight, bias, groups, stride, dilation, padding)

  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight + bias.

    >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0], [1.0]]), Tensor([0.5])).tolist()
    [[3.5]]
    """
    x = self @ weight
    return x + bias if bias is not None else x

  # ---- dtype shortcuts, defined last: in the class body `int`, `bool` and `float` would shadow the builtins in
  # every annotation that follows them ----

  def float(self) -> Tensor:
    """Cast to float32.

    >>> Tensor([1, 2]).float().tolist()
    [1.0, 2.0]
    """
    return self.cast(dtypes.float32)

  def half(self) -> Tensor:
    """Cast to float16.

    >>> Tensor([1, 2]).half().dtype
    dtypes.float16
    """
    return self.cast(dtypes.float16)

  def double(self) -> Tensor:
    """Cast to float64.

    >>> Tensor([1, 2]).double().dtype
    dtypes.float64
    """
    return self.cast(dtypes.float64)

  def int(self) -> Tensor:
    """Cast to int32 (floats truncate toward zero).

    >>> Tensor([1.7, -1.7]).int().tolist()
    [1, -1]
    """
    return self.cast(dtypes.int32)

  def long(self) -> Tensor:
    """Cast to int64 (floats truncate toward zero).

    >>> Tensor([2.5]).long().dtype
    dtypes.int64
    """
    return self.cast(dtypes.int64)

  def bool(self) -> Tensor:
    """Cast to bool (non-zero is True).

    >>> Tensor([0, 2]).bool().tolist()
    [False, True]
    """
    return self.cast(dtypes.bool)
