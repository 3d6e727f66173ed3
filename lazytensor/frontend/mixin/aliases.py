"""torch's and numpy's other names for Tensor's ops: each is the op itself (help() shows the op's docstring), so that
code written for either runs unchanged; and torch's small call forms around them (dim(), byte(), cpu(), conj(), ...).
The top of the chain of mixins, above every op it names."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lazytensor.dtype import dtypes
from lazytensor.frontend.mixin.elementwise import ElementwiseMixin
from lazytensor.frontend.mixin.index import IndexMixin
from lazytensor.frontend.mixin.movement import MovementMixin
from lazytensor.frontend.mixin.multi import MultiMixin
from lazytensor.frontend.mixin.reduce import ReduceMixin
from lazytensor.frontend.mixin.special import SpecialMixin
from lazytensor.frontend.mixin.unary import UnaryMixin

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
  sgn = ElementwiseMixin.sign  # torch's sign for complex numbers too; the same op for real ones
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
  unsafe_split, unsafe_chunk = MovementMixin.split, MovementMixin.chunk
  # products and selections
  ger = ReduceMixin.outer
  argwhere = IndexMixin.nonzero

  def nonzero_static(self, *, size: int, fill_value: int = -1) -> Self:
    """nonzero with a fixed number of rows, as torch.nonzero_static (fill_value -1 by default).

    >>> Tensor([0, 3, 5]).nonzero_static(size=3).tolist()
    [[1], [2], [-1]]
    """
    return self.nonzero(size, fill_value)

  # casts and devices
  def byte(self) -> Self:
    """Cast to uint8, as torch's byte().

    >>> Tensor([1.7, 255.0]).byte().tolist()
    [1, 255]
    """
    return self.cast(dtypes.uint8)

  def char(self) -> Self:
    """Cast to int8, as torch's char().

    >>> Tensor([1.7, -3.0]).char().tolist()
    [1, -3]
    """
    return self.cast(dtypes.int8)

  def cpu(self) -> Self:
    """The tensor on the CPU: to("CPU"), the same tensor if it is there already.

    >>> Tensor([1, 2]).cpu().tolist()
    [1, 2]
    """
    return self.to("CPU")

  def cuda(self) -> Self:
    """The tensor on the (first) CUDA GPU: to("CUDA"); an error where there is none.

    >>> Tensor([1.0]).cuda().device  # doctest: +SKIP
    'CUDA'
    """
    return self.to("CUDA")

  # questions about the shape and the values
  def is_same_size(self, other: Self) -> bool:
    """Whether other has this tensor's shape, as torch's is_same_size.

    >>> Tensor.zeros(2, 3).is_same_size(Tensor.ones(2, 3)), Tensor.zeros(2, 3).is_same_size(Tensor.ones(3, 2))
    (True, False)
    """
    return self.shape == other.shape

  def is_nonzero(self) -> bool:
    """Whether the one element of this tensor is not zero (reads it), as torch's is_nonzero; a ValueError for a
    tensor of another number of elements.

    >>> Tensor([0.0]).is_nonzero(), Tensor([[3]]).is_nonzero()
    (False, True)
    """
    if self.numel() != 1:
      raise ValueError(f"is_nonzero: needs a tensor of one element, got shape {self.shape} ({self.numel()} elements)")
    return bool(self.item() != 0)

  @property
  def itemsize(self) -> int:
    """The size of one element in bytes, as torch's (and numpy's) itemsize; element_size() is the method.

    >>> Tensor([1.0]).itemsize, Tensor([1], dtype="int8").itemsize
    (4, 1)
    """
    return self.dtype.itemsize

  def sum_to_size(self, *size: Any) -> Self:
    """The sum over the dims that broadcasting `size` to this shape would expand (leading dims, and dims of size 1
    in `size`), as torch's sum_to_size: the gradient of a broadcast, reduced back.

    >>> Tensor.ones(2, 3, 4).sum_to_size(3, 1).tolist()
    [[8.0], [8.0], [8.0]]
    """
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    lead = self.ndim - len(shape)
    if lead < 0 or any(s not in (1, t) for s, t in zip(shape, self.shape[lead:])):
      raise ValueError(f"sum_to_size: size {shape} does not expand to this tensor's shape {self.shape}")
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and self.shape[lead + i] != 1)
    return (self.sum(axes, keepdim=True) if axes else self).reshape(shape)

  # questions about the dtype, and the identities that complex numbers would need
  def is_signed(self) -> bool:
    """Whether the dtype holds negative values (the floats and signed ints), as torch's is_signed().

    >>> Tensor([1]).is_signed(), Tensor([1], dtype="uint8").is_signed(), Tensor([True]).is_signed()
    (True, False, False)
    """
    return self.dtype.is_float or (self.dtype.is_int and not self.dtype.is_unsigned)

  def is_complex(self) -> bool:
    """False: lazytensor has no complex dtypes.

    >>> Tensor([1.0]).is_complex()
    False
    """
    return False

  def conj(self) -> Self:
    """The complex conjugate: the tensor itself, for lazytensor's real dtypes (as resolve_conj, resolve_neg and
    conj_physical).

    >>> Tensor([1.0, -2.0]).conj().tolist()
    [1.0, -2.0]
    """
    return self

  resolve_conj = resolve_neg = conj_physical = conj

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
