"""torch's and numpy's other names for Tensor's ops: each is the op itself (help() shows the op's docstring), so that
code written for either runs unchanged. The top of the chain of mixins, above every op it names."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lazytensor.mixin.elementwise import ElementwiseMixin
from lazytensor.mixin.index import IndexMixin
from lazytensor.mixin.movement import MovementMixin
from lazytensor.mixin.multi import MultiMixin
from lazytensor.mixin.reduce import ReduceMixin
from lazytensor.mixin.special import SpecialMixin
from lazytensor.mixin.unary import UnaryMixin

if TYPE_CHECKING:
  from typing import Self

class AliasMixin(MultiMixin):
  """Tensor's other names for its ops: on the whole chain of mixins."""
  __slots__ = ()

  # comparisons
  less, greater = ElementwiseMixin.lt, ElementwiseMixin.gt
  less_equal, greater_equal = ElementwiseMixin.le, ElementwiseMixin.ge
  not_equal = ElementwiseMixin.ne
  # arithmetic and bits
  multiply, subtract = ElementwiseMixin.mul, ElementwiseMixin.sub
  divide = true_divide = ElementwiseMixin.div
  floor_divide = ElementwiseMixin.floordiv
  remainder = ElementwiseMixin.mod
  negative = ElementwiseMixin.neg
  absolute = ElementwiseMixin.abs
  fix = ElementwiseMixin.trunc
  bitwise_left_shift, bitwise_right_shift = ElementwiseMixin.lshift, ElementwiseMixin.rshift
  # inverse trigonometric and hyperbolic functions, numpy's spelling
  arcsin, arccos, arctan = UnaryMixin.asin, UnaryMixin.acos, UnaryMixin.atan
  arcsinh, arccosh, arctanh = UnaryMixin.asinh, UnaryMixin.acosh, UnaryMixin.atanh
  arctan2 = SpecialMixin.atan2
  # shapes
  broadcast_to = MovementMixin.expand
  ravel = MovementMixin.flatten
  swapaxes = swapdims = MovementMixin.transpose
  split_with_sizes = MovementMixin.split
  nelement = MovementMixin.numel
  # products and selections
  ger = ReduceMixin.outer
  argwhere = IndexMixin.nonzero

  def dim(self) -> int:
    """The number of dimensions, as torch's dim() (ndim is the property); also ndimension().

    >>> Tensor.zeros(2, 3).dim()
    2
    """
    return self.ndim

  ndimension = dim

  def positive(self) -> Self:
    """The tensor itself (unary `+`), as torch.positive: bool tensors are an error there, as here.

    >>> Tensor([-1, 2]).positive().tolist()
    [-1, 2]
    """
    if self.dtype.is_bool: raise TypeError("positive: not defined for bool tensors")
    return self

  __pos__ = positive
