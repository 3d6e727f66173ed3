"""Tensor: a lazy, numpy-like array. Every operation builds UOps; realize() schedules, compiles and runs them.

This module holds the class itself: construction from data, properties, realization and the two funnels every op
goes through (_apply_uop, _broadcasted). The ops come from mixins, one module per area: tensor_create,
tensor_movement, tensor_elementwise, tensor_unary and tensor_reduce.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from lazytensor.device import Buffer, Device, buffer_map, new_buffer_uop
from lazytensor.dtype import DType, dtypes, promote_types, result_type_scalar, to_dtype
from lazytensor.engine.realize import run_schedule
from lazytensor.engine.schedule import commit_realized, create_schedule, substitute_realized
from lazytensor.gradient import compute_gradient
from lazytensor.graph import buffer_view, const_uop
from lazytensor.helpers import prod
from lazytensor.shape.view import ShapeTracker
from lazytensor.tensor_create import CreationMixin
from lazytensor.tensor_elementwise import ElementwiseMixin, broadcast_shape
from lazytensor.tensor_movement import MovementMixin
from lazytensor.tensor_reduce import ReduceMixin
from lazytensor.tensor_unary import UnaryMixin
from lazytensor.uop.ops import Ops, UOp

# ---- Python and numpy data to buffers ----

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

# tensors whose .grad backward() fills: the ones a user marked requires_grad=True (results of ops are not leaves)
_grad_leaves: weakref.WeakSet[Tensor] = weakref.WeakSet()

class Tensor(CreationMixin, MovementMixin, ElementwiseMixin, UnaryMixin, ReduceMixin):
  """A lazy n-dimensional array.

  >>> Tensor([[1, 2], [3, 4]]).sum(axis=1).tolist()
  [3, 7]
  """
  __slots__ = ("lazydata", "_requires_grad", "grad", "__weakref__")
  __array_priority__ = 1000  # numpy defers `ndarray + Tensor` to Tensor.__radd__
  training: ClassVar[bool] = False
  no_grad: ClassVar[bool] = False

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None) -> None:
    dt = to_dtype(dtype) if dtype is not None else None
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    self.grad: Tensor | None = None
    self._requires_grad: bool | None = None
    if requires_grad is not None: self.requires_grad = requires_grad
    if isinstance(data, UOp): self.lazydata = data
    elif isinstance(data, Tensor): self.lazydata = data.lazydata if dt is None else data.cast(dt).lazydata
    elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
      dt = dt or dtypes.from_py(data)
      self.lazydata = const_uop(data, dt, dev, ())
    elif isinstance(data, (list, tuple, np.ndarray, np.generic)):
      arr = _np_from_data(data, dt)
      buf = Buffer(dev, arr.size, dtypes.from_np(arr.dtype)).copyin(arr.reshape(-1).data.cast("B"))
      buf_uop = new_buffer_uop(dev, arr.size, buf.dtype, buf)
      self.lazydata = buffer_view(buf_uop, arr.shape)
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

  # ---- what every op goes through ----

  def _apply_uop(self, fn: Callable[..., UOp], *others: Tensor) -> Tensor:
    """Every op goes through here: the result needs gradients when an input does (and gradients are on)."""
    out = Tensor(fn(self.lazydata, *(o.lazydata for o in others)))
    if not Tensor.no_grad and any(t._requires_grad for t in (self,) + others): out._requires_grad = True
    return out

  # ---- autograd ----

  @property
  def requires_grad(self) -> bool | None:
    """Whether backward() fills this tensor's .grad; results of ops on such tensors need gradients too.

    >>> Tensor([1.0], requires_grad=True).requires_grad
    True
    """
    return self._requires_grad

  @requires_grad.setter
  def requires_grad(self, value: bool | None) -> None:
    self._requires_grad = value
    if value: _grad_leaves.add(self)
    else: _grad_leaves.discard(self)

  def _grads(self, targets: list[UOp], gradient: Tensor | None) -> tuple[UOp, dict[UOp, UOp]]:
    if gradient is None:
      if self.numel() != 1:
        raise ValueError(f"gradient of a tensor of shape {self.shape} needs an explicit gradient= of that shape; "
                         "only a one-element output has an implicit gradient of 1")
      seed = const_uop(1.0, self.dtype, self.device, self.shape)
    else:
      if gradient.shape != self.shape:
        raise ValueError(f"gradient shape {gradient.shape} does not match the output shape {self.shape}")
      seed = gradient.cast(self.dtype).lazydata
    # nodes realized since the graph was built are swapped for their buffers, which realized tensors now hold
    root, _ = substitute_realized(self.lazydata)
    return root, compute_gradient(root, seed, set(targets))

  def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
    """The gradients of this tensor with respect to each target (lazy tensors; nothing runs yet).

    >>> x = Tensor([1.0, 2.0, 3.0])
    >>> (x * x).sum().gradient(x)[0].tolist()
    [2.0, 4.0, 6.0]
    """
    if not self.dtype.is_float: raise TypeError(f"gradient of a {self.dtype} tensor; only float outputs have gradients")
    _, grads = self._grads([t.lazydata for t in targets], gradient)
    out = []
    for t in targets:
      if t.lazydata not in grads:
        raise ValueError(f"gradient: a target of shape {t.shape} is not used to compute this tensor")
      out.append(Tensor(grads[t.lazydata]))
    return out

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Accumulate d(self)/d(t) into t.grad for every tensor t with requires_grad=True that self depends on.

    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> _ = (w * 3).sum().backward()
    >>> w.grad.tolist()
    [3.0, 3.0]
    """
    if not self.dtype.is_float: raise TypeError(f"backward of a {self.dtype} tensor; only float outputs have gradients")
    root, _ = substitute_realized(self.lazydata)
    nodes = root.toposort
    leaves = [t for t in list(_grad_leaves) if t.lazydata in nodes]
    _, grads = self._grads([t.lazydata for t in leaves], gradient)
    for t in leaves:
      if (g := grads.get(t.lazydata)) is None: continue
      new = Tensor(g)
      t.grad = new if t.grad is None else t.grad + new
    return self

  def _broadcasted(self, y: Tensor | Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    """self and y (a Tensor, number, list or array) in their common dtype and broadcast shape; reverse swaps them."""
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
