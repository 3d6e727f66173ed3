"""Tensor creation: constants, uninitialized buffers, ranges, the identity, and random numbers."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np

from lazytensor.device import Device, new_buffer_uop
from lazytensor.dtype import DType, dtypes, to_dtype
from lazytensor.graph import buffer_view, const_uop
from lazytensor.helpers import DTypeError, prod
from lazytensor.mixin.math_ops import threefry_bits
from lazytensor.mixin.stub import TensorStub
from lazytensor.uop.ops import DeviceLike, Ops, UOp

if TYPE_CHECKING:
  from lazytensor.tensor import Tensor

def _empty_uop(device: DeviceLike, shape: tuple[int, ...], dtype: DType) -> UOp:
  """New memory of `shape` on a device, or on each of a tuple of them (replicated; nested on a mesh)."""
  if isinstance(device, str): return buffer_view(new_buffer_uop(device, prod(shape), dtype), shape)
  return UOp(Ops.MULTI, dtype, tuple(_empty_uop(d, shape, dtype) for d in device), (None, None))

class CreationMixin(TensorStub):
  """Tensor's constructors (classmethods) and *_like methods. Its only subclass is Tensor
  (tensor.py), so every CreationMixin is a Tensor."""
  __slots__ = ()

  @staticmethod
  def _parse_shape(shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    for s in shape:
      if not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 0:
        raise ValueError(f"shape {shape}: every dimension must be a non-negative int, got {s!r}")
    return tuple(int(s) for s in shape)

  @classmethod
  def full(cls, shape: tuple[int, ...] | int, fill_value: Any, dtype: DType | str | None = None,
           device: DeviceLike | None = None, requires_grad: bool | None = None) -> Tensor:
    """A tensor of `shape` holding `fill_value` everywhere (a broadcast constant, no memory).

    >>> Tensor.full((2, 2), 7).tolist()
    [[7, 7], [7, 7]]
    """
    shp = cls._parse_shape((shape,) if isinstance(shape, int) else tuple(shape))
    dt = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill_value)
    dev = Device.canonicalize_any(device) if device is not None else Device.DEFAULT
    return cls(const_uop(fill_value, dt, dev, shp), requires_grad=requires_grad)

  @classmethod
  def zeros(cls, *shape: Any, **kwargs: Any) -> Tensor:
    """A tensor of zeros (float32 unless `dtype` says otherwise).

    >>> Tensor.zeros(2, 2).tolist()
    [[0.0, 0.0], [0.0, 0.0]]
    """
    return cls.full(cls._parse_shape(shape), 0.0 if "dtype" not in kwargs else 0, **kwargs)

  @classmethod
  def ones(cls, *shape: Any, **kwargs: Any) -> Tensor:
    """A tensor of ones (float32 unless `dtype` says otherwise).

    >>> Tensor.ones(3, dtype='int32').tolist()
    [1, 1, 1]
    """
    return cls.full(cls._parse_shape(shape), 1.0 if "dtype" not in kwargs else 1, **kwargs)

  @classmethod
  def empty(cls, *shape: Any, dtype: DType | str | None = None, device: DeviceLike | None = None,
            **kwargs: Any) -> Tensor:
    """Uninitialized memory of `shape` (it is allocated on first use).

    >>> Tensor.empty(2, 3).shape
    (2, 3)
    """
    shp = cls._parse_shape(shape)
    dt, dev = to_dtype(dtype or dtypes.default_float), Device.canonicalize_any(device or Device.DEFAULT)
    return cls(_empty_uop(dev, shp, dt), **kwargs)

  def full_like(self, fill_value: Any, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """A tensor of `fill_value` with this tensor's shape, dtype and device.

    >>> Tensor([1, 2]).full_like(7).tolist()
    [7, 7]
    """
    dev = kwargs.pop("device", self.device)
    return type(self).full(self.shape, fill_value, dtype=dtype or self.dtype, device=dev, **kwargs)

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
    return type(self).empty(*self.shape, dtype=dt, device=dev, **kwargs)

  @classmethod
  def _iota(cls, n: int, device: DeviceLike | None = None) -> Tensor:
    dev = Device.canonicalize_any(device) if device is not None else Device.DEFAULT
    # int32 values while they fit: the cheaper index math, and the counters of random numbers are 32 bits anyway
    dt = dtypes.int32 if n - 1 <= dtypes.int32.max() else dtypes.int64
    return cls(UOp(Ops.IOTA, dt, (UOp(Ops.DEVICE, dtypes.void, (), dev),), n))

  @classmethod
  def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1,
             dtype: DType | str | None = None, device: DeviceLike | None = None,
             requires_grad: bool | None = None) -> Tensor:
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
    idx = cls._iota(n, device)
    ret = (idx.cast(dtypes.float64 if dt.is_float else dtypes.int64) * step + start).cast(dt)
    ret.requires_grad = requires_grad
    return ret

  @classmethod
  def linspace(cls, start: int | float, stop: int | float, steps: int, dtype: DType | str | None = None,
               device: DeviceLike | None = None) -> Tensor:
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
          device: DeviceLike | None = None) -> Tensor:
    """The identity matrix.

    >>> Tensor.eye(2).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    m = n if m is None else m
    if n < 0 or m < 0: raise ValueError(f"eye: sizes must be non-negative, got n={n}, m={m}")
    rows, cols = cls.arange(n, device=device).reshape(n, 1), cls.arange(m, device=device).reshape(1, m)
    return (rows == cols).cast(to_dtype(dtype) if dtype is not None else dtypes.default_float)

  # ---- random numbers, generated on the device with counter-based Threefry-2x32 ----

  # the key of the random stream, per device, lives in two uint32 buffers: the seed, and how many random tensors were
  # drawn on the device since it was set. Each draw advances the count with an assign that its kernel reads, so a
  # TinyJit replay draws new numbers too.
  _seed: ClassVar[int] = 0
  _rng_keys: ClassVar[dict[str, tuple[Tensor, Tensor]]] = {}

  @classmethod
  def manual_seed(cls, seed: int = 0) -> None:
    """Make the random functions reproducible (the seed is taken modulo 2**32).

    >>> Tensor.manual_seed(3)
    >>> a = Tensor.rand(2).tolist()
    >>> Tensor.manual_seed(3)
    >>> a == Tensor.rand(2).tolist()
    True
    """
    cls._seed = int(seed) & 0xFFFFFFFF
    if cls._rng_keys:
      resets = [t.assign(cls([v], device=t.device, dtype=dtypes.uint32))
                for key, count in cls._rng_keys.values() for t, v in ((key, cls._seed), (count, 0))]
      resets[0].realize(*resets[1:])

  @classmethod
  def _rng_key(cls, device: str | None) -> tuple[Tensor, Tensor]:
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    if dev not in cls._rng_keys:
      u32 = dtypes.uint32
      cls._rng_keys[dev] = (cls([cls._seed], device=dev, dtype=u32), cls([0], device=dev, dtype=u32))
    return cls._rng_keys[dev]

  @classmethod
  def _random_bits(cls, n: int, device: DeviceLike | None) -> Tensor:
    # on several devices: drawn on the first and replicated, so every device sees the numbers one device would
    if isinstance(device, (tuple, list)): return cls._random_bits(n, Device.canonicalize_any(device)[0]).to(device)
    seed, count = cls._rng_key(device)
    count.assign(count + 1)
    return threefry_bits(cls._iota(n, device).cast(dtypes.uint32), seed, count)

  @classmethod
  def rand(cls, *shape: Any, dtype: DType | str | None = None, device: DeviceLike | None = None,
           **kwargs: Any) -> Tensor:
    """Uniform random numbers in [0, 1).

    >>> Tensor.rand(2, 3).shape
    (2, 3)
    """
    shp = cls._parse_shape(shape)
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dt.is_float: raise TypeError(f"rand: dtype must be a float dtype, got {dt}")
    bits = cls._random_bits(prod(shp), device)
    # as many random bits as the dtype has mantissa bits, scaled by a power of two: exact, so never rounds up to 1.0
    mant = {2: 11, 4: 24}.get(dt.itemsize, 32)
    unit = (bits >> (32 - mant)).cast(dt) * (2.0 ** -mant)
    # materialized: a random tensor is read many times (e.g. by a matmul) and must not be regenerated per read
    ret = unit.reshape(shp).contiguous()
    ret.requires_grad = kwargs.get("requires_grad")
    return ret

  @classmethod
  def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
    """Uniform random numbers in [low, high).

    >>> Tensor.uniform(1000, low=-1.0, high=1.0).abs().max().item() < 1
    True
    """
    rg = kwargs.pop("requires_grad", None)
    ret = cls.rand(*shape, **kwargs) * (high - low) + low
    ret.requires_grad = rg
    return ret

  @classmethod
  def randn(cls, *shape: Any, dtype: DType | str | None = None, **kwargs: Any) -> Tensor:
    """Standard normal random numbers (Box-Muller).

    >>> Tensor.randn(4).shape
    (4,)
    """
    rg = kwargs.pop("requires_grad", None)
    shp = cls._parse_shape(shape)
    u = cls.rand(2, *shp, **kwargs)
    ret = ((1.0 - u[0]).log() * -2.0).sqrt() * (u[1] * (2 * math.pi)).cos()
    ret = ret.cast(to_dtype(dtype) if dtype is not None else dtypes.default_float)
    ret.requires_grad = rg
    return ret

  def rand_like(self, **kwargs: Any) -> Tensor:
    """Uniform random numbers in [0, 1) with this tensor's shape (and dtype, if it is a float).

    >>> Tensor.zeros(2, 3).rand_like().shape
    (2, 3)
    """
    return type(self).rand(*self.shape, dtype=kwargs.pop("dtype", self.dtype if self.dtype.is_float else None),
                           device=kwargs.pop("device", self.device), **kwargs)

  def randn_like(self, **kwargs: Any) -> Tensor:
    """Standard normal random numbers with this tensor's shape (and dtype, if it is a float).

    >>> Tensor.zeros(4).randn_like().shape
    (4,)
    """
    return type(self).randn(*self.shape, dtype=kwargs.pop("dtype", self.dtype if self.dtype.is_float else None),
                            device=kwargs.pop("device", self.device), **kwargs)

  @classmethod
  def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Tensor:
    """Normal random numbers with the given mean and standard deviation.

    >>> Tensor.normal(2, 3, mean=5.0, std=0.0).tolist()
    [[5.0, 5.0, 5.0], [5.0, 5.0, 5.0]]
    """
    rg = kwargs.pop("requires_grad", None)
    ret = cls.randn(*shape, **kwargs) * std + mean
    ret.requires_grad = rg
    return ret

  @classmethod
  def randint(cls, *shape: Any, low: int = 0, high: int = 10, dtype: DType | str | None = None,
              device: DeviceLike | None = None) -> Tensor:
    """Uniform random integers in [low, high) (dtypes.default_int unless `dtype` says otherwise);
    high - low up to 2**32.

    >>> sorted(set(Tensor.randint(1000, low=-2, high=3).tolist()))
    [-2, -1, 0, 1, 2]
    """
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_int
    if not dt.is_int: raise TypeError(f"randint: dtype must be an int dtype, got {dt}")
    if not all(isinstance(v, int) for v in (low, high)) or not 0 < high - low <= 2 ** 32:
      raise ValueError(f"randint: need ints with low < high and high - low <= 2**32, got low={low!r}, high={high!r}")
    shp = cls._parse_shape(shape)
    # 32 random bits scaled to the range by a multiply and a shift: no modulo bias beyond (high - low) / 2**32
    bits = cls._random_bits(prod(shp), device).cast(dtypes.uint64)
    return (((bits * (high - low)) >> 32).cast(dtypes.int64) + low).cast(dt).reshape(shp).contiguous()

  @classmethod
  def randperm(cls, n: int, device: DeviceLike | None = None, dtype: DType | str | None = None) -> Tensor:
    """A random permutation of 0..n-1 (dtypes.default_int unless `dtype` says otherwise): the argsort
    of n random numbers, so O(n^2) comparisons.

    >>> sorted(Tensor.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """
    if not isinstance(n, int) or n < 0: raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
    order = cls.rand(n, device=device).argsort()
    return order.cast(to_dtype(dtype) if dtype is not None else dtypes.default_int)

  def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """Draw `num_samples` class indices (dtypes.default_int) from each row of non-negative weights (1-D or 2-D), as
    torch.multinomial. With replacement, each draw inverts the cumulative distribution; without, the rows' top
    weights after Gumbel noise (the same distribution as drawing one at a time and removing it).

    >>> Tensor([0.0, 1.0, 0.0]).multinomial(2, replacement=True).tolist()
    [1, 1]
    """
    x = cast("Tensor", self)
    if x.ndim not in (1, 2) or not x.numel() or not isinstance(num_samples, int) or num_samples <= 0:
      raise ValueError(f"multinomial: needs 1-D or 2-D weights (got {x.shape}) and num_samples >= 1 "
                       f"(got {num_samples!r})")
    if not replacement and num_samples > x.shape[-1]:
      raise ValueError(f"multinomial: cannot draw {num_samples} samples without replacement from {x.shape[-1]} classes")
    w = (x.reshape(1, -1) if x.ndim == 1 else x)._to_float()
    rows, classes = w.shape
    u = type(x).rand(rows, num_samples if replacement else classes, device=x.device)
    if replacement:
      cdf = w.cumsum(1) / w.sum(1, keepdim=True)
      # the number of classes whose cumulative weight is <= u is the class u falls into
      out = (u.unsqueeze(-1) >= cdf.unsqueeze(1)).sum(-1).minimum(classes - 1)
    else: out = (w.log() - (-(1.0 - u).log()).log()).topk(num_samples, dim=-1)[1]
    return (out.reshape(num_samples) if x.ndim == 1 else out).cast(dtypes.default_int)

  # ---- initializers, as tinygrad's: the fan-in is the product of all dims but the first ----

  @classmethod
  def kaiming_uniform(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    """Uniform in +-sqrt(3) * gain / sqrt(fan_in), with the leaky-relu gain sqrt(2 / (1 + a^2)).

    >>> bool(Tensor.kaiming_uniform(64, 100).abs().max().item() <= 3 ** 0.5 * (2 / 1.0001) ** 0.5 / 10)
    True
    """
    shp = cls._parse_shape(shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shp[1:]))
    return cls.uniform(*shp, low=-bound, high=bound, **kwargs)

  @classmethod
  def kaiming_normal(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    """Normal with std gain / sqrt(fan_in), with the leaky-relu gain sqrt(2 / (1 + a^2)).

    >>> Tensor.kaiming_normal(4, 3, 3).shape
    (4, 3, 3)
    """
    shp = cls._parse_shape(shape)
    return cls.normal(*shp, mean=0.0, std=math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shp[1:])), **kwargs)

  @classmethod
  def glorot_uniform(cls, *shape: Any, **kwargs: Any) -> Tensor:
    """Uniform in +-sqrt(6 / (fan_in + fan_out)), with fan_out the first dim (Xavier/Glorot).

    >>> bool(Tensor.glorot_uniform(30, 70).abs().max().item() <= (6 / 100) ** 0.5)
    True
    """
    shp = cls._parse_shape(shape)
    bound = math.sqrt(6 / (shp[0] + prod(shp[1:])))
    return cls.uniform(*shp, low=-bound, high=bound, **kwargs)

  @classmethod
  def scaled_uniform(cls, *shape: Any, **kwargs: Any) -> Tensor:
    """Uniform in +-1 / sqrt(number of elements).

    >>> bool(Tensor.scaled_uniform(10, 10).abs().max().item() <= 0.1)
    True
    """
    shp = cls._parse_shape(shape)
    bound = prod(shp) ** -0.5
    return cls.uniform(*shp, low=-bound, high=bound, **kwargs)
