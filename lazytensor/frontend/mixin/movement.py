"""Movement: reshape, permute, expand, shrink, flip and zero padding, and the views that only change the shape or
select a part (squeeze, flatten, split, narrow, movedim, ...). The base of the chain of mixins: it declares the
primitives that every mixin relies on and that Tensor (frontend/tensor.py) implements. The views and copies that
rearrange elements (repeat, roll, windows, diagonals, einops' rearrange) are in rearrange.py, above it.

The primitive moves are views: each composes a ShapeTracker into the tensor's VIEW and copies nothing. The ops that
torch documents as returning a copy (flip; roll, repeat, tile, rot90 in rearrange.py; pad and cat in join.py) are built
from views too, but their result is a value of its own (`_copy_result`): writes into it never reach the tensor it was
made from, nor the other way round, as in torch. Slicing with a negative step (`x[::-1]`) is a view, as numpy's.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import numpy as np

from lazytensor.dtype import dtypes
from lazytensor.helpers import ArgumentError, make_tuple, prod
from lazytensor.uop.graph import movement, own_value
from lazytensor.uop.ops import DeviceLike, Ops, UOp
from lazytensor.uop.sint import shape_str, sint, sint_eq, sint_le, sint_prod, ssimplify

TensorT = TypeVar("TensorT", bound="MovementMixin")

if TYPE_CHECKING:
  from typing import Self, TypeGuard

  from lazytensor.dtype import DType

def _is_int(x: Any) -> bool: return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))

def is_sym_dim(x: Any) -> bool:
  """Whether x is a symbolic dimension: a Variable, bound or not, or an integer expression of them (uop/sint.py)."""
  return isinstance(x, UOp) and x.dtype.is_int

def as_dim(x: Any) -> sint:
  """A dimension or bound as the view math takes it: an int, or a symbolic expression folded to its canonical node."""
  return ssimplify(x) if is_sym_dim(x) else int(x)

def _as_uop(x: sint) -> UOp: return x if isinstance(x, UOp) else UOp.const(dtypes.index, x)

def _provable(name: str, x: bool | None, what: str) -> None:
  # a symbolic bound must hold for every value of its Variables: the kernel compiled for one serves them all
  if x is not True: raise ValueError(f"{name}: {what}" + ("" if x is False else " for every value of its Variables; "
                                                         "narrow their ranges or bind concrete values"))

def _dims(name: str, args: tuple[Any, ...], **keyword: Any) -> tuple[Any, ...]:
  """The sizes or axes a movement takes: given positionally (f(2, 3) or f((2, 3))) or as one keyword, by tinygrad's
  name or torch's (reshape(shape=...), permute(order=...) or permute(dims=...)), not both ways at once."""
  # loops, not comprehensions (a function call each on Python 3.11): every reshape, permute and expand comes here
  for value in keyword.values():
    if value is None: continue
    if args: raise TypeError(f"{name}: give the sizes positionally or as one of {', '.join(keyword)}=, not several")
    args = (value,)
  return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args

class MovementMixin:
  """The base of Tensor's mixins: the primitives below, which Tensor implements, and the movement methods. Each mixin
  above it (rearrange, shapes, operands, ..., multi) builds on this one and those between, never on one above it."""
  __slots__ = ()

  # ---- the primitives: what a tensor is, and what only Tensor itself does (build graph nodes, realize, autograd) ----
  # Each raises here and is implemented by Tensor (full by CreationMixin); they are declared here so that every mixin,
  # checked by mypy, uses nothing but them and the methods of the mixins below it.

  training: ClassVar[bool]  # whether dropout and batchnorm train (Tensor.train())

  @property
  def lazydata(self) -> UOp:
    """The graph node that computes the tensor."""
    raise NotImplementedError("Tensor.lazydata")
  @lazydata.setter
  def lazydata(self, value: UOp) -> None: raise NotImplementedError("Tensor.lazydata")

  def __init__(self, data: Any, device: DeviceLike | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None) -> None:
    raise NotImplementedError("Tensor.__init__")

  @property
  def shape(self) -> tuple[int, ...]: raise NotImplementedError("Tensor.shape")
  @property
  def dtype(self) -> DType: raise NotImplementedError("Tensor.dtype")
  @property
  def device(self) -> DeviceLike: raise NotImplementedError("Tensor.device")
  @property
  def requires_grad(self) -> bool | None: raise NotImplementedError("Tensor.requires_grad")
  @requires_grad.setter
  def requires_grad(self, value: bool | None) -> None: raise NotImplementedError("Tensor.requires_grad")

  def _apply_uop(self, fn: Callable[..., UOp], *others: Self) -> Self:
    """A tensor computed by fn from the graph nodes of self and others: every op goes through here."""
    raise NotImplementedError("Tensor._apply_uop")

  @classmethod
  def full(cls, shape: tuple[sint, ...] | int, fill_value: Any, dtype: DType | str | None = None,
           device: DeviceLike | None = None, requires_grad: bool | None = None) -> Self:
    raise NotImplementedError("CreationMixin.full")

  def detach(self) -> Self: raise NotImplementedError("Tensor.detach")
  def contiguous(self) -> Self: raise NotImplementedError("Tensor.contiguous")
  def to(self, *args: Any, device: DeviceLike | None = None, dtype: DType | str | None = None) -> Self:
    raise NotImplementedError("Tensor.to")
  def assign(self, x: Any) -> Self: raise NotImplementedError("Tensor.assign")
  def realize(self, *others: Self) -> Self: raise NotImplementedError("Tensor.realize")
  def item(self) -> Any: raise NotImplementedError("Tensor.item")

  def _copy_result(self) -> Self:
    """This value as the result of an op that torch documents as returning a copy: the same lazy value (nothing is
    copied until it is realized), but not a view of the tensor it was made from (graph.own_value)."""
    return self._apply_uop(own_value)

  def _is_tensor(self, x: Any) -> TypeGuard[Self]:
    """Whether x is a tensor: Tensor is the one class that mixes these in, so any of them stands for it."""
    return isinstance(x, MovementMixin)

  # ---- shapes and axes ----

  def _resolve_axis(self, axis: int, ndim: int | None = None) -> int:
    """axis as an index in [0, ndim); ndim is self.ndim, or one more where an axis is being inserted."""
    n = max(self.ndim if ndim is None else ndim, 1)  # a 0-d tensor accepts axis 0 and -1, as torch
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
      raise TypeError(f"axis must be an int, got {axis!r}")
    if not -n <= axis < n:
      raise IndexError(f"axis {axis} is out of range for a tensor of shape {self.shape}: expected {-n} <= axis < {n}")
    return int(axis) % n

  @property
  def ndim(self) -> int:
    """The number of dimensions.

    >>> Tensor.zeros(2, 3).ndim
    2
    """
    return len(self.lazydata.shape)  # not self.shape: a property call fewer, at every op that resolves an axis

  def numel(self) -> int:
    """The number of elements.

    >>> Tensor.zeros(2, 3).numel()
    6
    """
    return prod(self.shape)

  def size(self, dim: int | None = None) -> int | tuple[int, ...]:
    """The shape, or the size of dimension `dim` (negative counts from the end), as torch's size().

    >>> Tensor.zeros(2, 3).size(), Tensor.zeros(2, 3).size(-1)
    ((2, 3), 3)
    """
    if dim is None: return self.shape
    if not self.shape: raise IndexError(f"size: a 0-d tensor has no dimension {dim}")
    return self.shape[self._resolve_axis(dim)]

  def reshape(self, *sizes: Any, shape: Sequence[int | None] | int | None = None) -> Self:
    """The same elements in a new shape (given as sizes, a sequence, or shape=); one dimension may be -1 (whatever is
    left), and None keeps the size of that dimension (as tinygrad).

    >>> Tensor.arange(6).reshape(2, -1).shape, Tensor.zeros(2, 3).reshape(None, 3, 1).shape
    ((2, 3), (2, 3, 1))
    >>> Tensor.arange(6).reshape(shape=(3, 2)).shape
    (3, 2)
    """
    dims = _dims("reshape", sizes, shape=shape)
    # plain sizes, the common case, need none of the resolving (None, -1, Variables): no call per dimension
    if not (set(map(type, dims)) <= {int} and min(dims, default=0) >= 0): dims = self._reshape_sizes(dims)
    # the products unsimplified (math.prod, in C): sint_eq simplifies their difference where one is symbolic
    if not sint_eq(math.prod(dims), math.prod(self.shape)):
      raise ValueError(f"reshape: cannot reshape {shape_str(self.shape)} into {shape_str(dims)}: the sizes differ")
    return self._reshaped(dims)

  def _reshaped(self, dims: tuple[sint, ...]) -> Self:
    """reshape to sizes known to hold self's elements (resolved and checked by reshape, or made from self's own shape
    by an op that only drops or adds dims of size 1): none of reshape's resolving and checks."""
    if dims == self.shape: return self
    return self._apply_uop(lambda x: movement(x, Ops.RESHAPE, dims))

  def _reshape_sizes(self, dims: tuple[Any, ...]) -> tuple[sint, ...]:
    """reshape's sizes resolved: None keeps a dimension, -1 takes what is left, a symbolic size is simplified."""
    # ints with one -1, of a shape of ints (a batchnorm's (1, -1, 1, 1) at every call): what is left is one division
    if set(map(type, dims)) <= {int} and set(map(type, self.shape)) <= {int} and dims.count(-1) == 1 and \
        min(dims) == -1 and (given := -math.prod(dims)) > 0 and (count := math.prod(self.shape)) % given == 0:
      sizes = list(dims)  # a list, not a generator: a function call per dimension on Python 3.11
      sizes[dims.index(-1)] = count // given
      return tuple(sizes)
    if any(s is None and i >= self.ndim for i, s in enumerate(dims)):
      raise ValueError(f"reshape: None keeps a dimension of {self.shape}, but {dims} has None beyond them")
    dims = tuple(self.shape[i] if s is None else s for i, s in enumerate(dims))
    if any(not is_sym_dim(s) and (not isinstance(s, (int, np.integer)) or s < -1) for s in dims):
      raise ValueError(f"reshape: bad shape {dims}; dimensions must be ints >= 0, or one -1")
    if list(dims).count(-1) > 1: raise ArgumentError(f"reshape: only one dimension can be -1, got {dims}")
    numel = sint_prod(self.shape)
    if -1 in dims:
      known = sint_prod(s for s in dims if s != -1)
      if known == 0: raise ValueError(f"reshape: cannot reshape {shape_str(self.shape)} into {dims}")
      rest = ssimplify(_as_uop(numel) // known if isinstance(known, UOp) else numel // known)
      if not sint_eq(ssimplify(rest * known), numel):
        raise ValueError(f"reshape: cannot reshape {shape_str(self.shape)} into {dims}")
      dims = tuple(rest if s == -1 else s for s in dims)
    return tuple(as_dim(s) for s in dims)

  def view(self, *sizes: Any, shape: Sequence[int] | int | None = None,
           size: Sequence[int] | int | None = None) -> Self:
    """The same as reshape; the keyword is shape= (tinygrad's) or size= (torch's).

    >>> Tensor.arange(6).view(3, 2).shape, Tensor.arange(6).view(size=(2, 3)).shape
    ((3, 2), (2, 3))
    """
    return self.reshape(_dims("view", sizes, shape=shape, size=size))

  def permute(self, *axes: Any, order: Sequence[int] | None = None, dims: Sequence[int] | None = None) -> Self:
    """Reorder the dimensions; the keyword is order= (tinygrad's) or dims= (torch's).

    >>> Tensor.zeros(2, 3, 4).permute(2, 0, 1).shape, Tensor.zeros(2, 3, 4).permute(order=(1, 2, 0)).shape
    ((4, 2, 3), (3, 4, 2))
    """
    order = _dims("permute", axes, order=order, dims=dims)
    resolved = tuple(self._resolve_axis(o) for o in order)
    if sorted(resolved) != list(range(self.ndim)):
      raise ArgumentError(f"permute: {order} is not a permutation of the {self.ndim} dimensions of {self.shape}")
    if resolved == tuple(range(self.ndim)): return self
    return self._apply_uop(lambda x: movement(x, Ops.PERMUTE, resolved))

  def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
    """Swap two dimensions.

    >>> Tensor.zeros(2, 3, 4).transpose(0, 2).shape
    (4, 3, 2)
    """
    order = list(range(self.ndim))
    a, b = self._resolve_axis(dim0), self._resolve_axis(dim1)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Self:
    """All dimensions in reverse order.

    >>> Tensor([[1, 2, 3]]).T.tolist()
    [[1], [2], [3]]
    """
    return self.permute(tuple(reversed(range(self.ndim))))

  def t(self) -> Self:
    """The transpose of a matrix, as torch's t(): a 0-d or 1-d tensor comes back as it is; more dims are an error.

    >>> Tensor([[1, 2, 3]]).t().shape, Tensor([1, 2]).t().shape
    ((3, 1), (2,))
    """
    if self.ndim > 2: raise ValueError(f"t: expects a tensor of at most 2 dims, got shape {self.shape}; use transpose")
    return self.permute(tuple(reversed(range(self.ndim))))

  def expand(self, *sizes: Any, shape: Sequence[int] | int | None = None,
             size: Sequence[int] | int | None = None) -> Self:
    """Broadcast size-1 dimensions to a larger size (-1 keeps a dimension); no memory is copied. The keyword is shape=
    (tinygrad's) or size= (torch's).

    >>> Tensor([[1], [2]]).expand(2, 3).tolist(), Tensor([[1], [2]]).expand(shape=(2, 2)).tolist()
    ([[1, 1, 1], [2, 2, 2]], [[1, 1], [2, 2]])
    """
    shape = _dims("expand", sizes, shape=shape, size=size)
    if len(shape) < self.ndim: raise ValueError(f"expand: cannot expand {self.shape} to fewer dimensions {shape}")
    if -1 in shape[:len(shape) - self.ndim]:
      raise ValueError(f"expand: -1 keeps a dimension's size, so it cannot stand for a new leading one: {self.shape} "
                       f"to {shape}")
    cur = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(c if s == -1 else s for c, s in zip(cur, shape))
    for c, s in zip(cur, new):
      if c != s and c != 1: raise ValueError(f"expand: cannot expand {self.shape} to {shape}")
    x = self.reshape(cur) if cur != self.shape else self
    if new == x.shape: return x
    return x._apply_uop(lambda u: movement(u, Ops.EXPAND, new))

  def _broadcast_to(self, shape: tuple[int, ...], dtype: DType | None = None) -> Self:
    """self (cast to `dtype`, if given) with 1s prepended to its shape and expanded to `shape`: the nodes of
    cast(dtype).reshape(...).expand(shape), built as one op (an operand of every broadcasting op passes here)."""
    mine = self.shape
    dt = self.dtype if dtype is None else dtype
    if mine == shape and (dt is self.dtype or dt == self.dtype): return self
    cur = (1,) * (len(shape) - len(mine)) + mine
    # a loop, not any() over a generator (a function call per dimension on Python 3.11)
    fits = len(cur) == len(shape)
    for c, s in zip(cur, shape):
      if c != s and c != 1: fits = False
    if not fits: raise ValueError(f"cannot broadcast {mine} to {shape}")
    return self._apply_uop(lambda x: movement(movement(UOp.cast(x, dt), Ops.RESHAPE, cur), Ops.EXPAND, shape))

  def _moves(self, steps: Sequence[tuple[Ops, tuple]]) -> Self:
    """Movements one after another, each arg as its method resolves it (sizes, (start, end) pairs, axes: all of them,
    none left to resolve), as one op: the graph nodes those methods make, without a tensor and its checks at each step
    (a convolution's windows in their layout: 13 views, one op)."""
    def moved(x: UOp) -> UOp:
      for op, arg in steps: x = movement(x, op, arg)
      return x
    return self._apply_uop(moved)

  def _pad_pairs(self, padding: Sequence[Any]) -> list[tuple[int, int]]:
    """(before, after) per dim, from pairs per dim or a flat torch-style list that starts at the last dim."""
    if padding and isinstance(padding[0], (int, np.integer)):
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise ValueError(f"pad: flat padding {padding} for {self.shape}: expected (before, after) from the last dim")
      from_last = [(padding[i], padding[i + 1]) for i in range(len(padding) - 2, -1, -2)]
      pairs = [(0, 0)] * (self.ndim - len(padding) // 2) + from_last
    else: pairs = [(0, 0) if p is None else tuple(p) for p in padding]
    if len(pairs) != self.ndim:
      raise ValueError(f"pad: {len(pairs)} (before, after) pairs for a {self.ndim}-d tensor {self.shape}")
    for p in pairs:
      if len(p) != 2 or not all(isinstance(v, (int, np.integer)) or is_sym_dim(v) for v in p):
        raise ValueError(f"pad: padding {padding} must hold (before, after) pairs of ints")
    # a symbolic amount is a UOp here, which only zero padding (_pad_zeros) takes
    return [(cast(int, as_dim(b)), cast(int, as_dim(a))) for b, a in pairs]

  def _pad_zeros(self, pairs: Sequence[tuple[sint, sint]]) -> Self:
    """Zeros before and after each dim, (before, after) per dim, as a view; negative amounts crop (symbolic amounts
    must be non-negative)."""
    for b, a in pairs:
      if is_sym_dim(b) or is_sym_dim(a): _provable("pad", sint_le(0, b) and sint_le(0, a), f"padding {(b, a)} < 0")
    if any(not is_sym_dim(x) and x < 0 for p in pairs for x in p):  # negative padding crops
      crop = tuple((max(0, -b), s - max(0, -a)) for (b, a), s in zip(pairs, self.shape))
      return self.shrink(crop)._pad_zeros([(max(0, b), max(0, a)) for b, a in pairs])
    arg = tuple(pairs)
    if all(p == (0, 0) for p in arg): return self
    return self._apply_uop(lambda x: movement(x, Ops.PAD, arg))

  def shrink_to(self, *shape: Any) -> Self:
    """Keep the start of each dim, up to `shape` (None keeps a dim), as a view.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).shrink_to(None, 2).tolist()
    [[1, 2], [4, 5]]
    """
    new = self._target_shape("shrink_to", shape)
    if any(ns > s for ns, s in zip(new, self.shape)):
      raise ValueError(f"shrink_to: cannot shrink {self.shape} to {shape}")
    return self.shrink([(0, ns) for ns in new])

  def _target_shape(self, name: str, shape: tuple[Any, ...]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if len(shape) != self.ndim: raise ValueError(f"{name}: shape {shape} has {len(shape)} dims, the tensor {self.ndim}")
    if any(ns is not None and (not isinstance(ns, (int, np.integer)) or ns < 0) for ns in shape):
      raise ValueError(f"{name}: shape {shape} must hold non-negative ints or None")
    return tuple(s if ns is None else int(ns) for ns, s in zip(shape, self.shape))

  def shrink(self, arg: Sequence[tuple[sint, sint] | None]) -> Self:
    """Keep [start, end) of each dimension (None keeps all).

    >>> Tensor([1, 2, 3, 4]).shrink(((1, 3),)).tolist()
    [2, 3]
    """
    if len(arg) != self.ndim: raise ValueError(f"shrink: {len(arg)} ranges for a {self.ndim}-d tensor {self.shape}")
    full = tuple((0, s) if a is None else (as_dim(a[0]), as_dim(a[1])) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(full, self.shape):
      # the message only when it is raised: formatting it at every in-bounds shrink was ~3% of a GPT-2 forward's build
      if (inside := sint_le(0, b) and sint_le(b, e) and sint_le(e, s)) is not True:
        _provable("shrink", inside, f"range ({shape_str((b, e))[1:-1]}) is out of bounds for a dimension of size "
                                    f"{shape_str((s,))[1:-2]}")
    if all(r == (0, s) for r, s in zip(full, self.shape)): return self
    return self._apply_uop(lambda x: movement(x, Ops.SHRINK, full))

  def flip(self, axis: int | Sequence[int], *more: int) -> Self:
    """Reverse the order of elements along the given axes (a sequence, or several ints); an axis named twice is an
    error, as in torch. A copy, as torch.flip: writes into it do not reach self (`x[::-1]` is the view).

    >>> Tensor([1, 2, 3]).flip(0).tolist(), Tensor([[1, 2], [3, 4]]).flip(0, 1).tolist()
    ([3, 2, 1], [[4, 3], [2, 1]])
    """
    named = make_tuple(axis, 1) + more
    axes = {self._resolve_axis(a) for a in named}
    if len(axes) != len(named): raise ArgumentError(f"flip: axes {named} name a dimension twice")
    return self._flip_view(axes)._copy_result()

  def _flip_view(self, axes: set[int]) -> Self:
    """The axes (resolved) reversed, as a view."""
    arg = tuple(i in axes for i in range(self.ndim))
    return self._apply_uop(lambda x: movement(x, Ops.FLIP, arg))

  def squeeze(self, dim: int | Sequence[int] | None = None) -> Self:
    """Remove the dimensions `dim` (an int or a sequence; negative counts from the end) whose size is 1, leaving
    the others; every size-1 dimension when `dim` is None. A 0-d tensor takes dim 0 or -1 and stays as it is.

    >>> x = Tensor.zeros(1, 3, 1)
    >>> x.squeeze().shape, x.squeeze(-1).shape, x.squeeze((0, 1)).shape, Tensor.zeros(0, 3).squeeze(0).shape
    ((3,), (1, 3), (3, 1), (0, 3))
    """
    dims = range(self.ndim) if dim is None else {self._resolve_axis(d) for d in make_tuple(dim, 1)}
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

  def unsqueeze(self, dim: int) -> Self:
    """Insert a dimension of size 1 at `dim`.

    >>> Tensor([1, 2]).unsqueeze(-1).shape
    (2, 1)
    """
    d = self._resolve_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
    """Merge dimensions start_dim..end_dim (all by default) into one.

    >>> Tensor.zeros(2, 3, 4).flatten(1).shape
    (2, 12)
    """
    if self.ndim == 0: return self.reshape(1)
    s, e = self._resolve_axis(start_dim), self._resolve_axis(end_dim)
    if s > e:
      raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} (shape {self.shape})")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Self, ...]:
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

  def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
    """Split into `chunks` pieces of equal size along `dim` (the last may be smaller, fewer pieces if too small).

    >>> [t.tolist() for t in Tensor([1, 2, 3, 4, 5]).chunk(2)]
    [[1, 2, 3], [4, 5]]
    """
    if chunks <= 0: raise ValueError(f"chunk: number of chunks must be positive, got {chunks}")
    d = self._resolve_axis(dim)
    return self.split(math.ceil(self.shape[d] / chunks) if self.shape[d] else 1, dim=d)

  def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
    """Split one dim into several of the given sizes (one may be -1).

    >>> Tensor.zeros(2, 6).unflatten(1, (3, -1)).shape
    (2, 3, 2)
    """
    d = self._resolve_axis(dim)
    sizes = tuple(sizes)
    if not sizes: raise ValueError("unflatten: sizes must not be empty")
    known = prod(s for s in sizes if s != -1)
    n = self.shape[d]
    if sizes.count(-1) > 1 or (-1 in sizes and (known == 0 or n % known)) or (-1 not in sizes and known != n):
      raise ValueError(f"unflatten: sizes {sizes} do not multiply to {n}, the size of dim {d} of {self.shape}")
    full = tuple(n // known if s == -1 else s for s in sizes)
    return self.reshape(self.shape[:d] + full + self.shape[d + 1:])

  # ---- torch's shape conveniences: views named after the tensor whose shape they take, tiles, moved dims ----

  def _shape_of(self, name: str, other: Any) -> tuple[int, ...]:
    if not self._is_tensor(other): raise TypeError(f"{name}: expected a Tensor, got {type(other).__name__}")
    return other.shape

  def expand_as(self, other: Self) -> Self:
    """expand to other's shape (a view), as torch's expand_as.

    >>> Tensor([[1], [2]]).expand_as(Tensor.zeros(2, 3)).tolist()
    [[1, 1, 1], [2, 2, 2]]
    """
    return self.expand(self._shape_of("expand_as", other))

  def reshape_as(self, other: Self) -> Self:
    """reshape to other's shape, as torch's reshape_as.

    >>> Tensor.arange(6).reshape_as(Tensor.zeros(3, 2)).tolist()
    [[0, 1], [2, 3], [4, 5]]
    """
    return self.reshape(self._shape_of("reshape_as", other))

  def view_as(self, other: Self) -> Self:
    """The same as reshape_as.

    >>> Tensor.arange(4).view_as(Tensor.zeros(2, 2)).shape
    (2, 2)
    """
    return self.reshape(self._shape_of("view_as", other))

  def movedim(self, source: int | Sequence[int], destination: int | Sequence[int]) -> Self:
    """Move the dims `source` to the positions `destination`, keeping the others in order, as torch.movedim.

    >>> Tensor.zeros(2, 3, 4).movedim(0, -1).shape, Tensor.zeros(2, 3, 4).movedim((0, 2), (1, 0)).shape
    ((3, 4, 2), (4, 2, 3))
    """
    src, dst = make_tuple(source, 1), make_tuple(destination, 1)
    if len(src) != len(dst):
      raise ValueError(f"movedim: source {source} and destination {destination} must name as many dims")
    src = tuple(self._resolve_axis(s) for s in src)
    dst = tuple(self._resolve_axis(d) for d in dst)
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
      raise ArgumentError(f"movedim: source {source} and destination {destination} must not repeat a dim")
    rest = iter(d for d in range(self.ndim) if d not in src)
    placed = dict(zip(dst, src))
    return self.permute(tuple(placed[i] if i in placed else next(rest) for i in range(self.ndim)))

  moveaxis = movedim

  def narrow(self, dim: int, start: int, length: int) -> Self:
    """`length` elements of `dim` from `start` on (negative counts from the end), as torch.narrow: a view.

    >>> Tensor([[1, 2, 3], [4, 5, 6]]).narrow(1, 1, 2).tolist()
    [[2, 3], [5, 6]]
    """
    if self.ndim == 0: raise ValueError("narrow: a 0-d tensor has no dim to narrow")
    d = self._resolve_axis(dim)
    n = self.shape[d]
    if not _is_int(start) or not _is_int(length) or not -n <= start <= n:
      raise IndexError(f"narrow: start {start!r} must be an int in [{-n}, {n}] for dim {d} of {self.shape}")
    begin = int(start) % n if n and start < 0 else int(start)
    if not 0 <= length <= n - begin:
      raise ValueError(f"narrow: length {length} from {begin} runs past dim {d} of size {n}")
    return self.shrink([(begin, begin + int(length)) if i == d else None for i in range(self.ndim)])

  def unbind(self, dim: int = 0) -> tuple[Self, ...]:
    """The slices along `dim`, each without that dim, as torch.unbind (views).

    >>> [t.tolist() for t in Tensor([[1, 2], [3, 4]]).unbind(1)]
    [[1, 3], [2, 4]]
    """
    if self.ndim == 0: raise ValueError("unbind: a 0-d tensor has no dim to unbind")
    d = self._resolve_axis(dim)
    return tuple(self.narrow(d, i, 1).squeeze(d) for i in range(self.shape[d]))
