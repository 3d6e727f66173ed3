"""torch's in-place ops: each an assign of the op's result (Tensor.assign), so it writes the tensor's memory when it is
realized, or before anything reads that memory. The top of the mixin chain: they use any op below."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazytensor.mixin.aliases import AliasMixin

if TYPE_CHECKING:
  from typing import Self

class InPlaceMixin(AliasMixin):
  """Tensor's in-place ops (add_, mul_, fill_, uniform_, copy_, ...): on the alias mixin and those below it."""
  __slots__ = ()

  def add_(self, x: Any) -> Self:
    """self += x in place (an assign); sub_, mul_ and div_ likewise. The operator `t += x` is not in place: Python
    makes it `t = t + x` (a new tensor, as in tinygrad), which views of t and other names for it do not see.

    >>> t = Tensor([1.0, 2.0]).realize()
    >>> t.add_(1).mul_(3).sub_(1).div_(2).tolist()
    [2.5, 4.0]
    """
    return self.assign(self + x)

  def sub_(self, x: Any) -> Self: return self.assign(self - x)
  def mul_(self, x: Any) -> Self: return self.assign(self * x)
  def div_(self, x: Any) -> Self: return self.assign(self / x)

  def clamp_(self, min: Any = None, max: Any = None) -> Self:
    """clamp in place (an assign).

    >>> Tensor([-1.0, 0.5, 2.0]).realize().clamp_(0, 1).tolist()
    [0.0, 0.5, 1.0]
    """
    return self.assign(self.clamp(min, max))

  def fill_(self, value: Any) -> Self:
    """Every element set to value, in place (an assign); zero_() sets them to 0.

    >>> t = Tensor([1, 2, 3]).realize()
    >>> t.fill_(7).tolist(), t.zero_().tolist()
    ([7, 7, 7], [0, 0, 0])
    """
    return self.assign(self.full_like(value))

  def zero_(self) -> Self: return self.fill_(0)

  def lerp_(self, end: Any, weight: Any) -> Self:
    """lerp in place (an assign): the step of an exponential moving average, `ema.lerp_(w, 1 - decay)`.

    >>> Tensor([0.0, 10.0]).realize().lerp_(Tensor([10.0, 0.0]), 0.25).tolist()
    [2.5, 7.5]
    """
    return self.assign(self.lerp(end, weight))

  def _random_fill(self, name: str) -> None:
    if not self.dtype.is_float: raise TypeError(f"{name}: fills float tensors, got {self.dtype}")

  def uniform_(self, low: float = 0.0, high: float = 1.0) -> Self:
    """Uniform random numbers in [low, high) written into this float tensor, in place (an assign), as torch's
    uniform_ (the initializers of torch.nn.init).

    >>> v = Tensor.zeros(1000).contiguous().realize().uniform_(-2.0, 2.0).numpy()
    >>> bool(-2 <= v.min() and v.max() < 2 and v.std() > 1)
    True
    """
    self._random_fill("uniform_")
    return self.assign(self.rand_like() * (high - low) + low)

  def normal_(self, mean: float = 0.0, std: float = 1.0) -> Self:
    """Normal random numbers with `mean` and `std` written into this float tensor, in place (an assign), as torch's
    normal_.

    >>> v = Tensor.zeros(1000).contiguous().realize().normal_(5.0, 0.5).numpy()
    >>> bool(4.9 < v.mean() < 5.1 and 0.4 < v.std() < 0.6)
    True
    """
    self._random_fill("normal_")
    return self.assign(self.randn_like() * std + mean)

  def copy_(self, src: Any) -> Self:
    """src's values (broadcast to this shape, cast to this dtype) written into this tensor, in place (an assign).

    >>> Tensor.zeros(2, 2).contiguous().realize().copy_(Tensor([1, 2])).tolist()
    [[1.0, 2.0], [1.0, 2.0]]
    """
    return self.assign(src)
