"""Tensor creation: constants, uninitialized buffers, ranges and the identity (random numbers: random.py)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from lazytensor.dtype import DType, DTypeOverflowError, dtypes, python_number_dtype, to_dtype
from lazytensor.frontend.mixin.join import JoinMixin
from lazytensor.frontend.mixin.movement import as_dim, is_sym_dim
from lazytensor.helpers import DTypeError
from lazytensor.runtime.device import Device, new_buffer_uop
from lazytensor.uop.graph import buffer_view, const_uop
from lazytensor.uop.ops import DeviceLike, Ops, UOp
from lazytensor.uop.sint import max_size, sint

if TYPE_CHECKING:
  from typing import Self

def _empty_uop(device: DeviceLike, shape: tuple[sint, ...], dtype: DType) -> UOp:
  """New memory of `shape` on a device, or on each of a tuple of them (replicated; nested on a mesh)."""
  # a symbolic size gets memory for its largest value: one allocation serves every value it is bound to
  if isinstance(device, str): return buffer_view(new_buffer_uop(device, max_size(shape), dtype), shape)
  return UOp(Ops.MULTI, dtype, tuple(_empty_uop(d, shape, dtype) for d in device), (None, None))

class CreationMixin(JoinMixin):
  """Tensor's constructors (classmethods) and *_like methods, but the random ones: on the elementwise mixin. It
  implements the primitive full."""
  __slots__ = ()

  @staticmethod
  def _parse_shape(shape: tuple[Any, ...]) -> tuple[sint, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    for s in shape:
      if not is_sym_dim(s) and (not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 0):
        raise ValueError(f"shape {shape}: every dimension must be a non-negative int, got {s!r}")
    return tuple(as_dim(s) for s in shape)

  @classmethod
  def full(cls, shape: tuple[sint, ...] | int, fill_value: Any, dtype: DType | str | None = None,
           device: DeviceLike | None = None, requires_grad: bool | None = None) -> Self:
    """A tensor of `shape` holding `fill_value` everywhere (a broadcast constant, no memory).

    >>> Tensor.full((2, 2), 7).tolist()
    [[7, 7], [7, 7]]
    """
    shp = cls._parse_shape((shape,) if isinstance(shape, int) else tuple(shape))
    dt = python_number_dtype(fill_value, to_dtype(dtype) if dtype is not None else None)
    dev = Device.canonicalize_any(device) if device is not None else Device.DEFAULT
    return cls(const_uop(fill_value, dt, dev, shp), requires_grad=requires_grad)

  @classmethod
  def zeros(cls, *shape: Any, **kwargs: Any) -> Self:
    """A tensor of zeros (float32 unless `dtype` says otherwise).

    >>> Tensor.zeros(2, 2).tolist()
    [[0.0, 0.0], [0.0, 0.0]]
    """
    return cls.full(cls._parse_shape(shape), 0.0 if "dtype" not in kwargs else 0, **kwargs)

  @classmethod
  def ones(cls, *shape: Any, **kwargs: Any) -> Self:
    """A tensor of ones (float32 unless `dtype` says otherwise).

    >>> Tensor.ones(3, dtype='int32').tolist()
    [1, 1, 1]
    """
    return cls.full(cls._parse_shape(shape), 1.0 if "dtype" not in kwargs else 1, **kwargs)

  @classmethod
  def empty(cls, *shape: Any, dtype: DType | str | None = None, device: DeviceLike | None = None,
            **kwargs: Any) -> Self:
    """Uninitialized memory of `shape` (it is allocated on first use).

    >>> Tensor.empty(2, 3).shape
    (2, 3)
    """
    shp = cls._parse_shape(shape)
    dt, dev = to_dtype(dtype or dtypes.default_float), Device.canonicalize_any(device or Device.DEFAULT)
    return cls(_empty_uop(dev, shp, dt), **kwargs)

  def full_like(self, fill_value: Any, dtype: DType | str | None = None, **kwargs: Any) -> Self:
    """A tensor of `fill_value` with this tensor's shape, dtype and device.

    >>> Tensor([1, 2]).full_like(7).tolist()
    [7, 7]
    """
    dev = kwargs.pop("device", self.device)
    return type(self).full(self.shape, fill_value, dtype=dtype or self.dtype, device=dev, **kwargs)

  def zeros_like(self, **kwargs: Any) -> Self:
    """Zeros with this tensor's shape, dtype and device.

    >>> Tensor([1.5, 2.5]).zeros_like().tolist()
    [0.0, 0.0]
    """
    return self.full_like(0, **kwargs)

  def ones_like(self, **kwargs: Any) -> Self:
    """Ones with this tensor's shape, dtype and device.

    >>> Tensor([1, 2]).ones_like().tolist()
    [1, 1]
    """
    return self.full_like(1, **kwargs)

  def empty_like(self, **kwargs: Any) -> Self:
    """Uninitialized memory with this tensor's shape, dtype and device.

    >>> Tensor([1, 2]).empty_like().shape
    (2,)
    """
    dt, dev = kwargs.pop("dtype", self.dtype), kwargs.pop("device", self.device)
    return type(self).empty(*self.shape, dtype=dt, device=dev, **kwargs)

  # ---- torch's new_*: a new tensor with this one's dtype and device unless told otherwise ----

  def _new_kwargs(self, dtype: DType | str | None, device: DeviceLike | None) -> dict[str, Any]:
    return {"dtype": self.dtype if dtype is None else dtype, "device": self.device if device is None else device}

  def new_full(self, size: Any, fill_value: Any, dtype: DType | str | None = None,
               device: DeviceLike | None = None) -> Self:
    """A tensor of `size` holding fill_value, with this tensor's dtype and device unless given, as torch's new_full.

    >>> Tensor([1, 2]).new_full((2, 2), 7).tolist()
    [[7, 7], [7, 7]]
    """
    return type(self).full(size, fill_value, **self._new_kwargs(dtype, device))

  def new_zeros(self, *size: Any, dtype: DType | str | None = None, device: DeviceLike | None = None) -> Self:
    """Zeros of `size` with this tensor's dtype and device unless given, as torch's new_zeros.

    >>> Tensor([1.5]).new_zeros(2, 3).tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    return self.new_full(self._parse_shape(size), 0, dtype, device)

  def new_ones(self, *size: Any, dtype: DType | str | None = None, device: DeviceLike | None = None) -> Self:
    """Ones of `size` with this tensor's dtype and device unless given, as torch's new_ones.

    >>> Tensor([1, 2]).new_ones(3).tolist()
    [1, 1, 1]
    """
    return self.new_full(self._parse_shape(size), 1, dtype, device)

  def new_empty(self, *size: Any, dtype: DType | str | None = None, device: DeviceLike | None = None) -> Self:
    """Uninitialized memory of `size` with this tensor's dtype and device unless given, as torch's new_empty.

    >>> Tensor([1, 2]).new_empty(2, 2).shape
    (2, 2)
    """
    return type(self).empty(*self._parse_shape(size), **self._new_kwargs(dtype, device))

  def new_tensor(self, data: Any, dtype: DType | str | None = None, device: DeviceLike | None = None) -> Self:
    """A tensor of `data` (a copy, never a view of a tensor given) with this tensor's dtype and device unless given,
    as torch's new_tensor.

    >>> Tensor([1.5]).new_tensor([1, 2]).tolist()
    [1.0, 2.0]
    """
    if self._is_tensor(data): return data.detach().cast(self.dtype if dtype is None else to_dtype(dtype)) \
      .to(self.device if device is None else device).contiguous()
    return type(self)(data, **self._new_kwargs(dtype, device))

  @classmethod
  def _iota(cls, n: int, device: DeviceLike | None = None) -> Self:
    dev = Device.canonicalize_any(device) if device is not None else Device.DEFAULT
    # int32 values while they fit: the cheaper index math, and the counters of random numbers are 32 bits anyway
    dt = dtypes.int32 if n - 1 <= dtypes.int32.max() else dtypes.int64
    return cls(UOp(Ops.IOTA, dt, (UOp(Ops.DEVICE, dtypes.void, (), dev),), n))

  @classmethod
  def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1,
             dtype: DType | str | None = None, device: DeviceLike | None = None,
             requires_grad: bool | None = None) -> Self:
    """Evenly spaced values in [start, stop), computed on the device. Ints are dtypes.default_int, or int64 where
    that cannot hold them; an int `dtype` that cannot hold them raises DTypeOverflowError (an OverflowError, as
    tinygrad's), where torch would wrap them around.

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
    if dt.is_int and n:
      lo, hi = sorted((math.trunc(start), math.trunc(start + (n - 1) * step)))
      if dtype is None and not dt.min <= lo <= hi <= dt.max: dt = dtypes.int64
      if not dt.min <= lo <= hi <= dt.max:
        raise DTypeOverflowError(f"arange: values from {lo} to {hi} do not fit {dt.name}, which holds [{dt.min}, "
                                 f"{dt.max}]")
    idx = cls._iota(n, device)
    ret = (idx.cast(dtypes.float64 if dt.is_float else dtypes.int64) * step + start).cast(dt)
    ret.requires_grad = requires_grad
    return ret

  @classmethod
  def linspace(cls, start: int | float, stop: int | float, steps: int, dtype: DType | str | None = None,
               device: DeviceLike | None = None) -> Self:
    """`steps` values from start to stop inclusive.

    >>> Tensor.linspace(0, 1, 3).tolist()
    [0.0, 0.5, 1.0]
    """
    if not isinstance(steps, int) or steps < 0:
      raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if dt.is_bool: raise DTypeError("linspace: a bool dtype cannot hold a range of values")
    if steps == 1: return cls.full((1,), start, dtype=dt, device=device)
    delta = (stop - start) / (steps - 1)
    return (cls._iota(steps, device).cast(dtypes.float64) * delta + start).cast(dt)

  @classmethod
  def eye(cls, n: int, m: int | None = None, dtype: DType | str | None = None,
          device: DeviceLike | None = None) -> Self:
    """The identity matrix.

    >>> Tensor.eye(2).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    m = n if m is None else m
    if n < 0 or m < 0: raise ValueError(f"eye: sizes must be non-negative, got n={n}, m={m}")
    rows, cols = cls.arange(n, device=device).reshape(n, 1), cls.arange(m, device=device).reshape(1, m)
    return (rows == cols).cast(to_dtype(dtype) if dtype is not None else dtypes.default_float)

  # ---- random numbers, generated on the device with counter-based Threefry-2x32 ----

  # ---- initializers, as tinygrad's: the fan-in is the product of all dims but the first ----
