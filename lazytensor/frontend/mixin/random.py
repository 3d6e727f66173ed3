"""Random numbers, generated on the device with counter-based Threefry-2x32, and the initializers built on them."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from lazytensor.dtype import DType, dtypes, to_dtype
from lazytensor.frontend.mixin.stats import StatsMixin
from lazytensor.helpers import prod
from lazytensor.runtime.device import Device
from lazytensor.uop.ops import DeviceLike

if TYPE_CHECKING:
  from typing import Self

TensorT = TypeVar("TensorT", bound="RandomMixin")

def _threefry_bits(counter: TensorT, seed: TensorT, stream: TensorT) -> TensorT:
  """32 random bits per element of `counter` (uint32) from Threefry-2x32 with 20 rounds, keyed by (seed, stream)
  (one-element uint32 tensors, read by the kernel: a replayed kernel draws from the stream its buffer holds then)."""
  mask = 0xFFFFFFFF
  k0, k1 = seed, stream
  ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
  rotations = (13, 15, 26, 6, 17, 29, 16, 24)
  x0, x1 = counter + ks[0], counter.zeros_like() + ks[1]
  for block in range(5):
    for r in rotations[(block % 2) * 4:(block % 2) * 4 + 4]:
      x0 = x0 + x1
      x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0
    x0 = x0 + ks[(block + 1) % 3]
    x1 = x1 + ((ks[(block + 2) % 3] + block + 1) & mask)
  return x0 ^ x1

class RandomMixin(StatsMixin):
  """Tensor's random constructors (classmethods), the *_like ones, multinomial and the weight initializers: on the
  index mixin and those below it."""
  __slots__ = ()

  # the key of the random stream, per device, lives in two uint32 buffers: the seed, and how many random tensors were
  # drawn on the device since it was set. Each draw advances the count with an assign that its kernel reads, so a
  # TinyJit replay draws new numbers too.
  _seed: ClassVar[int] = 0
  _rng_keys: ClassVar[dict[str, tuple[Self, Self]]] = {}

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
  def _rng_key(cls, device: str | None) -> tuple[Self, Self]:
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    if dev not in cls._rng_keys:
      u32 = dtypes.uint32
      cls._rng_keys[dev] = (cls([cls._seed], device=dev, dtype=u32), cls([0], device=dev, dtype=u32))
    return cls._rng_keys[dev]

  @classmethod
  def _random_bits(cls, n: int, device: DeviceLike | None) -> Self:
    # on several devices: drawn on the first and replicated, so every device sees the numbers one device would
    if isinstance(device, (tuple, list)): return cls._random_bits(n, Device.canonicalize_any(device)[0]).to(device)
    seed, count = cls._rng_key(device)
    count.assign(count + 1)
    return _threefry_bits(cls._iota(n, device).cast(dtypes.uint32), seed, count)

  @classmethod
  def rand(cls, *shape: Any, dtype: DType | str | None = None, device: DeviceLike | None = None,
           **kwargs: Any) -> Self:
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
  def uniform(cls, *shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Self:
    """Uniform random numbers in [low, high).

    >>> Tensor.uniform(1000, low=-1.0, high=1.0).abs().max().item() < 1
    True
    """
    rg = kwargs.pop("requires_grad", None)
    ret = cls.rand(*shape, **kwargs) * (high - low) + low
    ret.requires_grad = rg
    return ret

  @classmethod
  def randn(cls, *shape: Any, dtype: DType | str | None = None, **kwargs: Any) -> Self:
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

  def rand_like(self, **kwargs: Any) -> Self:
    """Uniform random numbers in [0, 1) with this tensor's shape (and dtype, if it is a float).

    >>> Tensor.zeros(2, 3).rand_like().shape
    (2, 3)
    """
    return type(self).rand(*self.shape, dtype=kwargs.pop("dtype", self.dtype if self.dtype.is_float else None),
                           device=kwargs.pop("device", self.device), **kwargs)

  def randn_like(self, **kwargs: Any) -> Self:
    """Standard normal random numbers with this tensor's shape (and dtype, if it is a float).

    >>> Tensor.zeros(4).randn_like().shape
    (4,)
    """
    return type(self).randn(*self.shape, dtype=kwargs.pop("dtype", self.dtype if self.dtype.is_float else None),
                            device=kwargs.pop("device", self.device), **kwargs)

  @classmethod
  def normal(cls, *shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Self:
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
              device: DeviceLike | None = None) -> Self:
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
  def randperm(cls, n: int, device: DeviceLike | None = None, dtype: DType | str | None = None) -> Self:
    """A random permutation of 0..n-1 (dtypes.default_int unless `dtype` says otherwise): the argsort
    of n random numbers, so O(n^2) comparisons.

    >>> sorted(Tensor.randperm(5).tolist())
    [0, 1, 2, 3, 4]
    """
    if not isinstance(n, int) or n < 0: raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
    order = cls.rand(n, device=device).argsort()
    return order.cast(to_dtype(dtype) if dtype is not None else dtypes.default_int)

  def bernoulli(self, p: float | None = None) -> Self:
    """1 with probability p (each element's own value when p is None), else 0, in self's float dtype, as
    torch.bernoulli.

    >>> Tensor([0.0, 1.0, 1.0]).bernoulli().tolist(), Tensor.zeros(2).bernoulli(1.0).tolist()
    ([0.0, 1.0, 1.0], [1.0, 1.0])
    """
    if not self.dtype.is_float: raise TypeError(f"bernoulli: needs a float tensor of probabilities, got {self.dtype}")
    if p is not None and (not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1):
      raise ValueError(f"bernoulli: p must be a number in [0, 1] or None, got {p!r}")
    return (self.rand_like() < (self if p is None else p)).cast(self.dtype)

  def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Self:
    """Draw `num_samples` class indices (dtypes.default_int) from each row of non-negative weights (1-D or 2-D), as
    torch.multinomial. With replacement, each draw inverts the cumulative distribution; without, the rows' top
    weights after Gumbel noise (the same distribution as drawing one at a time and removing it).

    >>> Tensor([0.0, 1.0, 0.0]).multinomial(2, replacement=True).tolist()
    [1, 1]
    """
    x = self
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

  @classmethod
  def kaiming_uniform(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Self:
    """Uniform in +-sqrt(3) * gain / sqrt(fan_in), with the leaky-relu gain sqrt(2 / (1 + a^2)).

    >>> bool(Tensor.kaiming_uniform(64, 100).abs().max().item() <= 3 ** 0.5 * (2 / 1.0001) ** 0.5 / 10)
    True
    """
    shp = cls._parse_shape(shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shp[1:]))
    return cls.uniform(*shp, low=-bound, high=bound, **kwargs)

  @classmethod
  def kaiming_normal(cls, *shape: Any, a: float = 0.01, **kwargs: Any) -> Self:
    """Normal with std gain / sqrt(fan_in), with the leaky-relu gain sqrt(2 / (1 + a^2)).

    >>> Tensor.kaiming_normal(4, 3, 3).shape
    (4, 3, 3)
    """
    shp = cls._parse_shape(shape)
    return cls.normal(*shp, mean=0.0, std=math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shp[1:])), **kwargs)

  @classmethod
  def glorot_uniform(cls, *shape: Any, **kwargs: Any) -> Self:
    """Uniform in +-sqrt(6 / (fan_in + fan_out)), with fan_out the first dim (Xavier/Glorot).

    >>> bool(Tensor.glorot_uniform(30, 70).abs().max().item() <= (6 / 100) ** 0.5)
    True
    """
    shp = cls._parse_shape(shape)
    bound = math.sqrt(6 / (shp[0] + prod(shp[1:])))
    return cls.uniform(*shp, low=-bound, high=bound, **kwargs)

  @classmethod
  def scaled_uniform(cls, *shape: Any, **kwargs: Any) -> Self:
    """Uniform in +-1 / sqrt(number of elements).

    >>> bool(Tensor.scaled_uniform(10, 10).abs().max().item() <= 0.1)
    True
    """
    shp = cls._parse_shape(shape)
    bound = prod(shp) ** -0.5
    return cls.uniform(*shp, low=-bound, high=bound, **kwargs)
