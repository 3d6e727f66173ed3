"""Tensor: a lazy, numpy-like array. Every operation builds UOps; realize() schedules, compiles and runs them.

This module holds the class itself: construction from data, properties, realization, autograd and the funnel
every op goes through (_apply_uop). The ops come from a chain of mixins, one module per area (frontend/mixin/: movement,
shapes, elementwise, join, create, unary, special, reduce, index, take_put, stats, random, nn, multi, aliases, linalg,
inplace, writes, grads), each building only on those below it and on the primitives that the chain's base declares and
this class implements; writes is how writes into a tensor's memory reach the views that share it, and grads, the top
one, is autograd. What the tensors share (the live ones, autograd's leaves and hooks, the pending writes) is in
frontend/state.py.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import weakref
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np

from lazytensor import viz
from lazytensor.dtype import DType, dtypes, from_storage, is_dtype_name, np_from_data, python_number_dtype, to_dtype
from lazytensor.engine.realize import capturing, paused_capture, run_schedule
from lazytensor.frontend import live
from lazytensor.frontend.mixin.grads import GradMixin
from lazytensor.frontend.mixin.multi import local_replica, open_devices
from lazytensor.frontend.mixin.writes import MAYBE_FOUND, REALIZED
from lazytensor.frontend.state import state
from lazytensor.frontend.views import (
  host_values,
  moves_between,
  moves_over,
  row_major,
)
from lazytensor.helpers import TRAINING, VIZ, ContextVar, prod
from lazytensor.runtime import remote
from lazytensor.runtime.device import Buffer, Device, buffer_map, new_buffer_uop
from lazytensor.schedule import pack_cache
from lazytensor.schedule.index_check import BadIndexError
from lazytensor.schedule.scheduler import MOVES, commit_realized, create_schedule
from lazytensor.shape.view import ShapeTracker
from lazytensor.uop.graph import buffer_view, const_uop, copy_to, multi_leaves
from lazytensor.uop.ops import DeviceLike, Ops, UOp
from lazytensor.uop.sint import not_a_value, shape_str, sym_infer

_contiguous_ids = itertools.count()
_lazydata = operator.attrgetter("lazydata")


class TensorFlag(contextlib.ContextDecorator):
  """Sets a Tensor class flag (training, no_grad) for a `with` block or a decorated function, and restores it after.
  Reentrant: nested and recursive uses restore what each one found."""
  def __init__(self, name: str, value: bool) -> None:
    self.name, self.value = name, value
    self._saved: list[bool] = []

  def __enter__(self) -> TensorFlag:
    self._saved.append(getattr(Tensor, self.name))
    setattr(Tensor, self.name, self.value)
    return self

  def __exit__(self, *exc: object) -> None: setattr(Tensor, self.name, self._saved.pop())

def no_grad() -> TensorFlag:
  """A context (or decorator) under which ops record no gradients: their results are constants to backward, as in
  torch.no_grad(). It sets the flag Tensor.no_grad for the block.

  >>> w = Tensor([2.0], requires_grad=True)
  >>> with no_grad():
  ...   y = w * 3
  >>> y.requires_grad is None, Tensor.no_grad
  (True, False)
  """
  return TensorFlag("no_grad", True)

def inference_mode(mode: bool = True) -> TensorFlag:
  """torch's inference_mode (and tinygrad's Tensor.inference_mode): no_grad for the block when mode is True; here
  the two are one flag, since a tensor made without gradients can be used with them later anyway.

  >>> w = Tensor([2.0], requires_grad=True)
  >>> with inference_mode():
  ...   (w * 3).requires_grad is None
  True
  """
  return TensorFlag("no_grad", mode)

def enable_grad() -> TensorFlag:
  """torch's enable_grad: gradients recorded again inside a no_grad block.

  >>> w = Tensor([2.0], requires_grad=True)
  >>> with no_grad(), enable_grad():
  ...   (w * 3).requires_grad
  True
  """
  return TensorFlag("no_grad", False)

def set_grad_enabled(mode: bool) -> TensorFlag:
  """torch's set_grad_enabled: records gradients or not (no_grad) for a block.

  >>> with set_grad_enabled(False):
  ...   Tensor.no_grad
  True
  """
  return TensorFlag("no_grad", not mode)

def is_grad_enabled() -> bool:
  """Whether ops record gradients now (torch's is_grad_enabled): False inside no_grad and inference_mode.

  >>> is_grad_enabled()
  True
  """
  return not Tensor.no_grad

class _TensorType(type):
  """Tensor's class: Tensor.training reads and sets the TRAINING knob, so that Tensor.train(), `Tensor.training = True`
  (tinygrad's form) and Context(TRAINING=1) are one switch."""
  @property
  def training(cls) -> bool: return bool(TRAINING.value)
  @training.setter
  def training(cls, value: bool) -> None:
    TRAINING.value = bool(value)
    ContextVar.version += 1  # as Context does: knob_state() reads the knobs again

def _contiguous_grad(ctx: UOp, x: UOp) -> tuple[UOp]:
  """contiguous_backward's derivative (a CUSTOM_GRAD's arg, frontend/gradient.py): the gradient, in a buffer of its
  own."""
  return (UOp(Ops.CONTIGUOUS, ctx.dtype, (ctx,), next(_contiguous_ids)),)

class _HostMemory:
  """A view of a buffer's host memory that holds the Buffer: numpy arrays made from it keep the memory from going back
  to the allocator (and to another buffer) while a DLPack reader uses it."""
  def __init__(self, array: np.ndarray, owner: Buffer) -> None:
    self.__array_interface__, self.owner, self.array = array.__array_interface__, owner, array

class Tensor(GradMixin, metaclass=_TensorType):
  """A lazy n-dimensional array.

  >>> Tensor([[1, 2], [3, 4]]).sum(axis=1).tolist()
  [3, 7]
  """
  __slots__ = ("lazydata", "__weakref__")  # and those of the mixins (writes: what writes change; grads: .grad)
  __array_priority__ = 1000  # numpy defers `ndarray + Tensor` to Tensor.__radd__
  no_grad: ClassVar[bool] = False

  def __init__(self, data: Any, device: DeviceLike | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None) -> None:
    if isinstance(device, (tuple, list)):  # made on the first device and replicated on the others
      self.__init__(data, Device.first(open_devices(device, "Tensor")), dtype, requires_grad)  # type: ignore[misc]
      self.lazydata = copy_to(self.lazydata, open_devices(device, "Tensor"))
      return
    if isinstance(data, UOp):  # what every op makes: the fast path
      if data.op is Ops.BIND or data.op is Ops.DEFINE_VAR: raise not_a_value(data)
      self.lazydata = data
      self._start()
      if requires_grad is not None: self.requires_grad = requires_grad
      return
    dt = to_dtype(dtype) if dtype is not None else None
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    if isinstance(data, Tensor): self.lazydata = data.lazydata if dt is None else data.cast(dt).lazydata
    elif isinstance(data, (list, tuple)) and data and all(isinstance(t, Tensor) for t in data):
      stacked = Tensor.stack(*data)  # a list of tensors stacks (lazily), as in torch.tensor and tinygrad
      stacked = stacked if dt is None else stacked.cast(dt)
      self.lazydata = (stacked if device is None else stacked.to(dev)).lazydata
    elif isinstance(data, (bool, int, float)) and not isinstance(data, np.generic):
      self.lazydata = const_uop(data, python_number_dtype(data, dt), dev, ())
    elif isinstance(data, (list, tuple, np.ndarray, np.generic)) or hasattr(data, "__dlpack__"):
      arr, dt = np_from_data(data, dt)
      buf = Buffer(dev, arr.size, dt)
      if remote.owns(dev): buf.copyin(arr.reshape(-1).data.cast("B"))  # across ranks: its rank's copy is the truth
      buf_uop = new_buffer_uop(dev, arr.size, buf.dtype, buf)
      self.lazydata = buffer_view(buf_uop, arr.shape)
    else: raise TypeError(f"cannot make a Tensor from {type(data).__name__}; expected a number, a (nested) list, "
                          "a numpy array or a Tensor")
    # registered once it has its graph: a tensor whose construction raised is never a live holder (a reference cycle
    # through the exception can keep it alive until the next garbage collection)
    self._start()
    if requires_grad is not None: self.requires_grad = requires_grad

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
  def device(self) -> DeviceLike:
    """The device that holds (or will hold) the data; for a tensor spread over several (shard), the tuple of them (on
    a DeviceMesh, nested: a tuple per slice along the first mesh axis).

    >>> Tensor([1]).device == Device.DEFAULT, Tensor([1]).to(("CPU:0", "CPU:1")).device
    (True, ('CPU', 'CPU:1'))
    """
    return self.lazydata.device

  def element_size(self) -> int:
    """The size of one element in bytes.

    >>> Tensor([1, 2], dtype='int16').element_size()
    2
    """
    return self.dtype.itemsize

  def nbytes(self) -> int:
    """The size of all the elements in bytes (what a dense buffer of them takes).

    >>> Tensor.zeros(2, 3).nbytes()
    24
    """
    return self.numel() * self.dtype.itemsize

  def __len__(self) -> int:
    """The size of the first dimension; a 0-d tensor has no len().

    >>> len(Tensor.zeros(4, 2))
    4
    """
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]

  def __iter__(self) -> Iterator[Tensor]:
    """The tensors along the first dimension, self[0], self[1], ... (lazy: nothing runs).

    >>> [row.tolist() for row in Tensor([[1, 2], [3, 4]])]
    [[1, 2], [3, 4]]
    """
    if not self.shape: raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(self.shape[0]))

  def __repr__(self) -> str:
    """The values with dtype and device, as numpy and torch print them (summarized when large), when they are known
    without computing anything: a realized tensor (one in a buffer, or a view of one) or a constant. A lazy tensor (a
    graph not computed yet) says so and stays lazy: `.realize()` computes it, `.numpy()` returns its values.

    >>> Tensor([[1.0, 2.0], [3.0, 4.0]])
    Tensor([[1., 2.],
            [3., 4.]], dtype=float32, device='...')
    >>> Tensor([1, 2]) + 1
    <Tensor (2,) int64 on ..., lazy: not computed yet; .realize() computes it, .numpy() returns its values>
    """
    grad = ", requires_grad=True" if self._requires_grad else ""
    if state.pending: self._run_pending_writes()  # an in-place op into its memory, written through a view
    if (values := host_values(self.lazydata)) is None:
      return (f"<Tensor {self.shape} {self.dtype.name} on {self.device}, lazy: not computed yet; .realize() computes "
              f"it, .numpy() returns its values{grad}>")
    return f"Tensor({np.array2string(values, separator=', ', prefix='Tensor(')}, dtype={self.dtype.name}, " \
           f"device={self.device!r}{grad})"

  def __hash__(self) -> int: return id(self)
  def __bool__(self) -> bool:
    if self.numel() != 1: raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous")
    return bool(self.item())

  def __float__(self) -> float:
    """float(t) of a one-element tensor (it reads the tensor now).

    >>> float(Tensor([[2.5]])), int(Tensor(3.9)), [10, 20, 30][Tensor(1)]
    (2.5, 3, 20)
    """
    if self.numel() != 1: raise ValueError(f"float() needs a tensor of one element, got shape {self.shape}")
    return float(self.item())

  def __int__(self) -> int:
    if self.numel() != 1: raise ValueError(f"int() needs a tensor of one element, got shape {self.shape}")
    return int(self.item())

  def __index__(self) -> int:
    # as torch: only an integer (or bool) tensor of one element stands for a Python index
    if self.dtype.is_float or self.numel() != 1:
      raise TypeError(f"only an integer tensor of one element can be an index, got {self.dtype} of shape {self.shape}")
    return int(self.item())

  # ---- realization ----

  def schedule(self, *others: Tensor) -> list:
    """The kernels that realizing these tensors would run, without running them.

    >>> len(Tensor([1.0]).add(1).schedule())
    1
    """
    tensors = (self,) + others
    return create_schedule([t.lazydata for t in tensors], functools.partial(live.read_elsewhere, tensors))[0]

  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor (and `others`) now; returns self.

    >>> Tensor([1, 2]).add(1).realize().tolist()
    [2, 3]
    """
    tensors = (self,) + others
    if state.pending: self._run_pending_writes(*others)
    # map rather than comprehensions, here and below: each of those is a function call on Python 3.11
    if all(map(Tensor._is_buffer_view, tensors)): return self  # nothing to compute
    writes = 0
    for t in tensors: writes |= t.lazydata.writes
    # only a graph that assigns overwrites memory that other values may read: an eager op's looks at no live tensor
    if writes: tensors += self._old_value_readers(tensors)
    # views of a lazy tensor realized into buffers of their own: what they view, for when that tensor gets a buffer
    for t in tensors:
      if t._viewed is not None and moves_over(t.lazydata, t._viewed.lazydata) and not t._viewed._is_buffer_view():
        t._own_moves = moves_between(t.lazydata, t._viewed.lazydata)
    # each its own memory, unless one is a view of another (two computed alike are one interned node); not looked for
    # where one value is computed into new memory (the eager path: a set and a dict lookup, no call)
    if len(tensors) > 1 or (ld := self.lazydata).op in MAYBE_FOUND or REALIZED in ld.__dict__:
      self._own_memory(tensors)
    if VIZ.value != viz.recording_for: viz.switch()  # VIZ changed: start or stop recording what runs
    # a TinyJit's capture packs every weight, so that its items hold each packing (its replays skip those of weights
    # nothing wrote since: engine/jit._weight_packs)
    items, becomes = create_schedule(list(map(_lazydata, tensors)), functools.partial(live.read_elsewhere, tensors),
                                     reuse_packs=not capturing())
    bad: BadIndexError | None = None
    # every kernel ran before an index out of range is raised: what they wrote is committed first (the bad entries left
    # out), so that the write is not pending any more and the next read does not raise it again
    try: run_schedule(items)
    except BadIndexError as e: bad = e
    pack_cache.keep_pending()
    commit_realized(becomes)
    plain = []  # gradients computed without create_graph: they keep what their graph reached, not the graph
    for t in tensors:
      new = becomes.get(t.lazydata, t.lazydata)
      # backward after realize() still walks the graph that computed t (leaves are found in it through realized_map)
      if new is not t.lazydata:
        if t._requires_grad and id(t) not in state.grad_leaves: t._graph = t.lazydata
        elif t._graph is t.lazydata: plain.append(t)
        # what its views taken while lazy were made over (_give_buffer); weakly: it must not keep the node alive
        # (it would be found again)
        if t._views is not None: t._lazy_before = weakref.ref(t.lazydata)
      if t._assigned_at is not None: state.pending.pop(t._assigned_at, None)  # done: its graph can go
      t.lazydata, t._assigned_at = new, None
    if plain: self._forget_graphs(plain)
    for t in tensors:
      if t._own_moves is not None: t._hand_memory_to_viewed()
    if bad is not None: raise bad
    return self

  def _old_value_readers(self, tensors: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """The live values that read what realizing `tensors` overwrites, realized first where they were made before a
    TinyJit's capture; the others, to realize with `tensors` (live.old_value_readers)."""
    # the moment of the last assign realized here: values computed after it read what it writes, as in torch
    assigned = [t._assigned_at for t in tensors if t._assigned_at is not None]
    if not (readers := live.old_value_readers(tensors, max(assigned) if assigned else None)): return ()
    # the holders are Tensors; one holding an assign is as old as the assign (the random count a captured program
    # advances is a tensor made before it, assigned in it)
    readers = [(n if t._assigned_at is None else t._assigned_at, t) for n, t in readers if isinstance(t, Tensor)]
    before, inside = ([t for t in part if isinstance(t, Tensor)] for part in live.split_by_program(readers))
    if before:
      with paused_capture(): before[0].realize(*before[1:])
    return tuple(inside)

  def _buffer(self) -> tuple[Buffer, ShapeTracker]:
    self.realize()
    ld = self.lazydata
    assert ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER, f"realized tensor is {ld.op}"
    return buffer_map[ld.src[0]], ld.arg

  def numpy(self) -> np.ndarray:
    """The tensor as a numpy array (a copy). numpy has no bfloat16: a bfloat16 tensor gives its values as float32.

    >>> Tensor([1, 2, 3]).numpy()
    array([1, 2, 3])
    """
    shape = self._bound_shape("numpy")
    size = prod(shape)
    if size == 0: return from_storage(np.zeros(shape, dtype=self.dtype.np), self.dtype)
    if isinstance(self.device, tuple):  # gathered on the first one (across ranks: a replica here, if each rank has one)
      return mine if (mine := local_replica(self)) is not None else self.to(Device.first(self.device)).numpy()
    self.realize()
    ld = self.lazydata
    if not (ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER and ld.arg.contiguous):
      ld = self.contiguous().realize().lazydata
      assert ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER, f"realized tensor is {ld.op}"
    return from_storage(remote.read(buffer_map[ld.src[0]])[:size].reshape(shape), ld.dtype)

  def _bound_shape(self, op: str) -> tuple[int, ...]:
    """The shape at the values its Variables are bound to (uop/sint.py); ValueError naming `op` where one is not."""
    if UOp not in map(type, shape := self.shape): return shape  # no Variable: the common case, without a call a dim
    try: return tuple(sym_infer(s, {}) for s in shape)
    except ValueError as e:
      raise ValueError(f"{op}: the shape {shape_str(self.shape)} has a Variable with no value; bind it (v.bind(n)) "
                       "where the shape is made") from e

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

  def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
    """The values as a numpy array (a copy), so that np.asarray(t) and numpy functions take a Tensor.

    >>> np.asarray(Tensor([1, 2]), dtype=np.float32)
    array([1., 2.], dtype=float32)
    """
    if copy is False: raise ValueError("a Tensor's values cannot be read into numpy without a copy; use copy=None")
    arr = self.numpy()
    return arr if dtype is None else arr.astype(dtype)

  def __dlpack__(self, **kwargs: Any) -> Any:
    """The values as a DLPack capsule, for torch.from_dlpack, np.from_dlpack and other DLPack readers. A realized dense
    tensor in host memory shares its memory (a write on either side is seen by the other, as between torch tensors
    made with from_dlpack); any other tensor is first computed into a buffer of its own, or copied to the CPU.

    >>> t = Tensor([1.0, 2.0]).realize()
    >>> a = np.from_dlpack(t)
    >>> a[0] = 5.0
    >>> t.tolist()
    [5.0, 2.0]
    """
    return self._exported_array().__dlpack__(**kwargs)

  def __dlpack_device__(self) -> tuple[int, int]:
    """Where __dlpack__'s memory lies: the host (DLPack's kDLCPU, device 0).

    >>> Tensor([1]).__dlpack_device__()
    (1, 0)
    """
    return (1, 0)

  def _exported_array(self) -> np.ndarray:
    """The tensor's memory as a numpy array that keeps the buffer alive (its memory must not be handed to another
    buffer while a reader holds it)."""
    if self.dtype == dtypes.bfloat16: raise TypeError("DLPack readers such as numpy take no bfloat16: .float() first")
    t = self.to("CPU") if isinstance(self.device, tuple) else self.realize()
    ld = t.lazydata
    if not (ld.op is Ops.VIEW and ld.src[0].op is Ops.BUFFER and ld.arg.contiguous): t = t.contiguous().realize()
    buf, _ = t._buffer()
    if not remote.owns(buf.device):
      raise ValueError(f"DLPack: the tensor lies on {buf.device}, another rank's device; .numpy() reads it on every "
                       "rank")
    if (host := buf.host_view()) is None: return t.to("CPU")._exported_array()
    return np.asarray(_HostMemory(host[:t.numel()].reshape(t.shape), buf))

  @classmethod
  def from_dlpack(cls, x: Any, device: DeviceLike | None = None) -> Tensor:
    """A tensor of the values of any object that exports DLPack (a torch tensor, a numpy array, ...), as Tensor(x).
    The values are copied in: a CPU buffer starts on a cache line and has room past its end that kernels may read,
    which memory made elsewhere does not promise. The other way (np.from_dlpack(t), torch.from_dlpack(t)) shares.

    >>> Tensor.from_dlpack(np.arange(3, dtype=np.int32)).tolist()
    [0, 1, 2]
    """
    return cls(x, device)

  def __array_function__(self, func: Callable[..., Any], types: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """numpy functions (np.sum, np.stack, ...) called with Tensors compute on their values, as numpy arrays.

    >>> np.sum(Tensor([[1, 2], [3, 4]]), axis=0)
    array([4, 6])
    """
    def to_numpy(x: Any) -> Any:
      if isinstance(x, Tensor): return x.numpy()
      return type(x)(to_numpy(v) for v in x) if isinstance(x, (list, tuple)) else x
    return func(*to_numpy(args), **{k: to_numpy(v) for k, v in kwargs.items()})

  def clone(self) -> Tensor:
    """A copy in a buffer of its own (one kernel when realized), which writes to either tensor leave the other alone;
    gradients flow through it, as through torch's clone.

    >>> a = Tensor([1.0, 2.0]).realize()
    >>> b = a.clone().realize()
    >>> b[0] = 5.0
    >>> a.tolist(), b.tolist()
    ([1.0, 2.0], [5.0, 2.0])
    """
    # an identity cast between them keeps the scheduler from folding the CONTIGUOUS of a buffer into that buffer
    # a node of its own (as contiguous() makes): two clones of one tensor never share a buffer
    return self._apply_uop(lambda x: UOp(Ops.CONTIGUOUS, x.dtype, (UOp(Ops.CAST, x.dtype, (x,)),),
                                         next(_contiguous_ids)))

  def contiguous_backward(self) -> Tensor:
    """The same value; in backward, the gradient that flows through it is first computed into a buffer of its own
    (made contiguous), as tinygrad's: a cut that keeps one large backward kernel from recomputing what it reads.

    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> _ = (w.contiguous_backward() * 3).sum().backward()
    >>> w.grad.tolist()
    [3.0, 3.0]
    """
    if not self._requires_grad: return self
    return self._apply_uop(lambda x: UOp(Ops.CUSTOM_GRAD, x.dtype, (x, x), _contiguous_grad))

  def contiguous(self) -> Tensor:
    """A copy laid out densely in its own buffer (one kernel), unless it already is one.

    >>> Tensor([[1, 2], [3, 4]]).T.contiguous().tolist()
    [[1, 3], [2, 4]]
    """
    # each call gets a node of its own, so two tensors made this way never share (and mutate) one buffer
    return self._apply_uop(lambda x: UOp(Ops.CONTIGUOUS, x.dtype, (x,), next(_contiguous_ids)))

  def to(self, *args: Any, device: DeviceLike | None = None, dtype: DType | str | None = None) -> Tensor:
    """The tensor on another device (a copy; the same tensor if it is there already), or in another dtype, or both, in
    torch's forms: to(device), to(dtype), to(device, dtype), to(other) (other's device and dtype) and keywords. A
    tuple of devices replicates it on each; a sharded tensor sent to one device is gathered there.

    >>> Tensor([1, 2]).to('CPU:1').device, Tensor([1, 2]).to(('CPU:1', 'CPU:2')).device
    ('CPU:1', ('CPU:1', 'CPU:2'))
    >>> t = Tensor([1.5]).to('CPU:1', dtypes.float16)
    >>> t.device, t.dtype, Tensor([1.5]).to(dtypes.int32).tolist()
    ('CPU:1', dtypes.float16, [1])
    """
    for a in args:
      if isinstance(a, Tensor): device, dtype = a.device, a.dtype
      elif isinstance(a, DType) or (isinstance(a, str) and is_dtype_name(a)): dtype = a
      else: device = a
    out = self if dtype is None else self.cast(dtype)
    return out if device is None else out._to_device(device)

  def _to_device(self, device: DeviceLike) -> Tensor:
    device = open_devices(device, "to") if isinstance(device, (tuple, list)) else Device.canonicalize(device)
    if device == self.device: return self
    if isinstance(device, tuple) and isinstance(self.device, tuple):  # gathered first: a copy between two tuples of
      return self.to(Device.first(self.device)).to(device)           # devices keeps the layout (schedule/multi.py)
    return self._apply_uop(lambda x: UOp(Ops.COPY, x.dtype, (x,), device))

  # ---- layout, and a view that shares the memory ----

  def is_contiguous(self) -> bool:
    """Whether the elements lie in row-major order in the memory they are (or will be) computed into, as torch's:
    False for views that permute, stride, expand or pad it (x.T, x[:, ::2]); True for what ops compute, for dense
    slices and for constants (zeros, full), which lazytensor never lays out in memory.

    >>> x = Tensor([[1, 2, 3], [4, 5, 6]])
    >>> x.is_contiguous(), x.T.is_contiguous(), x[1:].is_contiguous(), x[:, :2].is_contiguous()
    (True, False, True, False)
    """
    return all(map(row_major, multi_leaves(self.lazydata)))

  def detach(self) -> Tensor:
    """The same values, cut off from gradients. As torch's, a view that shares the memory: a write into either
    tensor (setitem, assign, add_, ...) is seen by the other, and records no gradient.

    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> d = w.detach()
    >>> d[0] = 5.0
    >>> w.tolist(), d.requires_grad
    ([5.0, 2.0], False)
    """
    out = Tensor._of(UOp(Ops.DETACH, self.dtype, (self.lazydata,)))
    out._requires_grad = False
    self._add_view(out)
    out._detached = True
    return out

  # ---- what every op goes through ----

  def _apply_uop(self, fn: Callable[..., UOp], *others: Tensor) -> Tensor:
    """Every op goes through here: a float result needs gradients when an input does. Under no_grad, such a result
    is cut off from its inputs' gradients (DETACH), as torch treats values computed under torch.no_grad()."""
    # a loop, not comprehensions: each of those is a function call on Python 3.11, at every op
    srcs, needs_grad = [], False
    for t in (self,) + others:
      # a realized input that needs gradients is used through the graph that computed it, so that gradients still
      # flow through it (the scheduler reads its buffer: nothing is computed twice)
      srcs.append(t.lazydata if t._graph is None else t._graph_root())
      if t._requires_grad: needs_grad = True
    out = fn(*srcs)
    if not needs_grad: ret = Tensor._of(out)
    elif Tensor.no_grad: ret = Tensor._of(UOp(Ops.DETACH, out.dtype, (out,)))
    else:
      ret = Tensor._of(out)
      if out.dtype.is_float: ret._requires_grad = True
    if not others and (out is srcs[0] or out.op in MOVES): self._add_view(ret)
    return ret


  @staticmethod
  def _of(uop: UOp) -> Tensor:
    """A new tensor holding `uop`, as Tensor(uop) makes it, without __init__'s dispatch on the kind of data (every
    op's result is made here)."""
    t = object.__new__(Tensor)
    t.lazydata = uop
    t._start()  # registered once it has its graph, as in __init__
    return t

  def _start(self) -> None:
    """The fields every tensor starts with, and its entry in the live registry (for __init__ and _of)."""
    self.grad: Tensor | None = None
    # the fields of the writes mixin (mixin/writes.py says what each is)
    self._requires_grad = None
    self._graph = None
    self._viewed = None
    self._views = None
    self._own_moves = None
    self._detached = False
    self._lazy_before = None
    self._assigned_at = None
    live.track(self)

  def to_(self, *args: Any, device: DeviceLike | None = None, dtype: DType | str | None = None) -> Tensor:
    """Move (or cast) this tensor in place, as tinygrad's to_: it becomes self.to(...) (see replace).

    >>> t = Tensor([1, 2])
    >>> t.to_('CPU:1').device
    'CPU:1'
    """
    return self.replace(self.to(*args, device=device, dtype=dtype))

  def replace(self, x: Tensor, allow_shape_mismatch: bool = False) -> Tensor:
    """Make this tensor hold x's value (its graph, and so its device and dtype) in place, as tinygrad's replace: to
    swap a model's weights for new ones without rebinding them. It stops being a view of what it viewed; tensors that
    viewed it keep viewing the old value; a tensor that requires_grad was set on stays a leaf. Returns self.

    >>> w = Tensor([1.0, 2.0])
    >>> w.replace(Tensor([3.0, 4.0])).tolist()
    [3.0, 4.0]
    """
    if not isinstance(x, Tensor): raise TypeError(f"replace: expected a Tensor, got {type(x).__name__}")
    if x.shape != self.shape and not allow_shape_mismatch:
      raise ValueError(f"replace: shape {x.shape} does not match {self.shape} (allow_shape_mismatch=True allows it)")
    if self._requires_grad and not x.dtype.is_float:
      raise TypeError(f"replace: this tensor requires gradients, so its value must be float, got {x.dtype}")
    self.lazydata, self._graph, self._detached, self._assigned_at = x.lazydata, x._graph, x._detached, x._assigned_at
    self._viewed = self._views = self._own_moves = self._lazy_before = None
    if id(self) not in state.grad_leaves: self._requires_grad = x._requires_grad  # a leaf stays one; a result is x's
    return self

  @staticmethod
  def train(mode: bool = True) -> TensorFlag:
    """A context (or decorator) that sets Tensor.training, which dropout and batchnorm read, for a block.

    >>> with Tensor.train():
    ...   Tensor.training
    True
    >>> Tensor.training
    False
    """
    return TensorFlag("training", mode)

  @staticmethod
  def inference_mode(mode: bool = True) -> TensorFlag:
    """tinygrad's spelling of inference_mode: a context (or decorator) under which ops record no gradients.

    >>> with Tensor.inference_mode():
    ...   Tensor.no_grad
    True
    """
    return inference_mode(mode)

  @staticmethod
  def test(mode: bool = False) -> TensorFlag:
    """A context (or decorator) that clears Tensor.training for a block: the same as Tensor.train(False).

    >>> with Tensor.train(), Tensor.test():
    ...   Tensor.training
    False
    """
    return TensorFlag("training", mode)
