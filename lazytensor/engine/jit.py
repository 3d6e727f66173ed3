"""TinyJit: run a function normally, capture the kernels it runs, then replay them with new input buffers.

The first call runs (and compiles) everything; the second runs again while recording every kernel and copy with the
buffers it touched; from the third on, the recorded items run directly — no graph building, scheduling or lowering —
with the input tensors' buffers swapped in.

What a capture is keyed on: the Tensor arguments' shapes, dtypes, devices and views (anything else raises JitError),
and the value of every other argument (Python numbers, strings, tuples, lists and dicts by value, numpy arrays by
contents, any other object by identity). A changed non-Tensor argument captures again, on that call: what the
function computed from it (`x * s`, `x * Tensor([s])`) is part of the captured kernels and buffers.

A bound Variable (uop/sint.py) is the exception: as an argument, or in an input's shape (a batch dimension that
changes), the capture is keyed on the Variable alone, and each replay passes the call's values to the kernels that
read it (one program serves its whole range; buffers of a symbolic size hold its largest value).

Outputs stay valid: every replay writes the tensors it returns into buffers of their own (allocated at each call; the
cost of an allocation, no copy), so a result kept from one call is not overwritten by the next. Intermediate buffers
are the ones recorded. Returned tensors that the function did not compute (a weight it updated, one of its inputs)
are returned as they are; non-Tensor return values are those of the capture.

Random numbers drawn inside the function are new at every replay (the stream's counter is a buffer that the program
advances). A lazy tensor made before the capture that has to be computed during it (it reads weights the step
overwrites) is computed once, outside the program.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from lazytensor.engine import realize
from lazytensor.frontend.live import capturing_program
from lazytensor.frontend.tensor import Tensor
from lazytensor.helpers import DEBUG, JIT
from lazytensor.runtime import remote
from lazytensor.runtime.device import Buffer, buffer_map, new_buffer_uop
from lazytensor.schedule import pack_cache
from lazytensor.schedule.cache import bind_values
from lazytensor.schedule.index_check import IndexFlags, bad_index
from lazytensor.shape.view import ast_variables
from lazytensor.uop.graph import multi_leaves
from lazytensor.uop.ops import DeviceLike, Ops, UOp
from lazytensor.uop.sint import unbind

R = TypeVar("R")
Path = tuple[int | str, ...]

@dataclass(frozen=True)
class InputSignature:
  """What a captured program assumes about one input: replaying with anything else would be wrong."""
  shape: tuple[int, ...]
  dtype: Any
  device: DeviceLike
  view: Any

class JitError(ValueError):
  """A jitted function was called with inputs its captured kernels cannot serve."""

class _Same:
  """An argument compared by identity (a model, an optimizer, a function): the capture holds it, so its id stays."""
  def __init__(self, obj: object) -> None: self.obj = obj
  def __eq__(self, other: object) -> bool: return isinstance(other, _Same) and other.obj is self.obj
  def __hash__(self) -> int: return id(self.obj)
  def __repr__(self) -> str: return f"<{type(self.obj).__name__} object>"

def _value_key(x: Any) -> Hashable:
  """A non-Tensor argument as the capture compares it: by type and value (2 and 2.0 make different dtypes; the hex
  of a float tells -0.0 from 0.0 and makes nan equal to itself), numpy data by contents, anything else by identity."""
  if isinstance(x, float): return (float, x.hex())
  if x is None or isinstance(x, (bool, int, complex, str, bytes)): return (type(x), x)
  if isinstance(x, (np.ndarray, np.generic)): return (np.ndarray, x.dtype.str, np.shape(x), np.asarray(x).tobytes())
  return _Same(x)

def _flatten(x: Any, path: Path, tensors: list[Tensor], key: dict[Path, Hashable], var_vals: dict[UOp, int]) -> None:
  """The Tensors in an argument (in tuples, lists and dicts too), and the key of every other value, by position; a
  bound Variable is keyed by the Variable, its value put in var_vals."""
  if isinstance(x, Tensor): tensors.append(x)
  elif isinstance(x, (tuple, list)):
    for i, v in enumerate(x): _flatten(v, path + (i,), tensors, key, var_vals)
  elif isinstance(x, dict):
    for k, v in x.items(): _flatten(v, path + (k,), tensors, key, var_vals)
  elif isinstance(x, UOp) and x.op is Ops.BIND:
    var, val = x.unbind()
    bind_values(var_vals, {var: val})
    key[path] = (Ops.BIND, var)
  else: key[path] = _value_key(x)

def _where(path: Path) -> str:
  return f"argument {path[0]}" + "".join(f"[{p!r}]" for p in path[1:])

def _map_tensors(x: Any, fn: Callable[[Tensor], Tensor]) -> Any:
  """x with every Tensor in it (in tuples, lists and dicts too) replaced by fn(tensor)."""
  if isinstance(x, Tensor): return fn(x)
  if isinstance(x, tuple) and hasattr(x, "_fields"): return type(x)(*(_map_tensors(v, fn) for v in x))  # namedtuple
  if isinstance(x, (tuple, list)): return type(x)(_map_tensors(v, fn) for v in x)
  if isinstance(x, dict): return {k: _map_tensors(v, fn) for k, v in x.items()}
  return x

def _outputs(ret: Any) -> list[Tensor]:
  found: list[Tensor] = []
  def collect(t: Tensor) -> Tensor:
    found.append(t)
    return t
  _map_tensors(ret, collect)
  return found

class TinyJit(Generic[R]):
  """Wrap a function of Tensors whose kernels are the same on every call (a training step, a model's forward).

  The capture is keyed on the values of the non-Tensor arguments: calling with another one captures again. Each call
  returns tensors of its own, which later calls leave alone.

  >>> from lazytensor import Tensor
  >>> step = TinyJit(lambda x, s: (x * s + 1).realize())
  >>> outs = [step(Tensor([float(i), 1.0]), 2.0) for i in range(4)]
  >>> outs[2].tolist(), outs[3].tolist(), step(Tensor([1.0, 1.0]), 10.0).tolist()
  ([5.0, 3.0], [7.0, 3.0], [11.0, 11.0])
  """
  def __init__(self, fn: Callable[..., R]) -> None:
    self.fn = fn
    self.reset()

  def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., R]:
    """A TinyJit on a method, read from an instance: the jitted function with the instance as its first argument (as
    Python binds a plain function). The capture is keyed on the instance as on any object argument, by identity:
    calling it on another instance captures again.

    >>> class Scale:
    ...   def __init__(self, s: float) -> None: self.s = s
    ...   @TinyJit
    ...   def __call__(self, x: Tensor) -> Tensor: return (x * self.s).realize()
    >>> f = Scale(3.0)
    >>> [f(Tensor([float(i)])).item() for i in range(4)]
    [0.0, 3.0, 6.0, 9.0]
    """
    return self if obj is None else functools.partial(self.__call__, obj)

  def reset(self) -> None:
    """Forget the captured kernels: the next call runs normally again."""
    self.calls = 0
    self.items: list[realize.ExecItem] = []
    self.key: dict[Path, Hashable] = {}
    self.signature: list[InputSignature] = []
    self.input_buffers: list[Buffer] = []  # every input's buffers in order (a buffer per device when spread)
    self.fresh: list[Buffer] = []  # the outputs' buffers that the program made: new ones at every replay
    self.flags: list[IndexFlags] = []  # the flags of the program's index checks, read after every replay
    self.written: list[Buffer] = []  # the buffers its kernels write (a weight it updates among them)
    # the items that pack a weight it neither writes nor takes as an input -> [the weight, its writes when last packed]
    self.weight_packs: dict[int, list[Any]] = {}
    self.var_items: list[tuple[int, int, list[UOp]]] = []  # (item, scalar args before its Variables, the Variables)
    self.ret: Any = None

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    inputs: list[Tensor] = []
    key: dict[Path, Hashable] = {}
    var_vals: dict[UOp, int] = {}
    for i, a in enumerate(args): _flatten(a, (i,), inputs, key, var_vals)
    for name, a in kwargs.items(): _flatten(a, (name,), inputs, key, var_vals)
    for t in inputs: t.realize()
    if not JIT.value: return self.fn(*args, **kwargs)
    if self.calls == 2 and key != self.key:
      if DEBUG >= 1: print(f"TinyJit: {self._changed(key)} changed: capturing again")
      self.reset()
      self.calls = 1
    if self.calls == 0:
      self.calls = 1
      return self._run_and_realize(args, kwargs)
    if self.calls == 1: return self._capture(args, kwargs, inputs, key)
    return self._replay(inputs, var_vals)

  def _changed(self, key: dict[Path, Hashable]) -> str:
    path = next(p for p in sorted({*key, *self.key}, key=str) if key.get(p) != self.key.get(p))
    return f"non-Tensor {_where(path)} ({self.key.get(path)!r} -> {key.get(path)!r})"

  def _run_and_realize(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    ret = self.fn(*args, **kwargs)
    outs = _outputs(ret)
    if outs: outs[0].realize(*outs[1:])
    return ret

  def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[Tensor],
               key: dict[Path, Hashable]) -> R:
    first_new = next(Buffer.serials)  # buffers numbered from here on are made by the capture
    with realize.capture() as items, capturing_program():
      ret = self._run_and_realize(args, kwargs)
    if not items:  # everything was already computed (e.g. the same inputs twice): capture on the next call instead
      return ret
    self.items, self.ret, self.key, self.calls = items, ret, key, 2
    self.flags = realize.index_flags(items)
    self.signature = [_signature(t, {}) for t in inputs]
    # the kernels whose last arguments are Variables' values, with how many come before them
    self.var_items = [(i, len(it.vals) - len(vs), vs) for i, it in enumerate(items)
                      if isinstance(it.runner, realize.CompiledRunner) and (vs := ast_variables(it.runner.kernel.ast))]
    self.input_buffers = [b for t in inputs for b in _buffers_of(t)]
    written = {id(b): b for item in items for b in item.written}
    self.written = list(written.values())
    self.weight_packs = _weight_packs(items, set(written) | {id(b) for b in self.input_buffers})
    returned = {id(b): b for t in _outputs(ret) for b in _buffers(t)}
    # another rank's kernels are not among the items (runtime/remote.py): their outputs are new at every replay too,
    # as on the rank that runs them, so that every rank's graphs after a replay stay alike
    self.fresh = [b for i, b in returned.items()
                  if (i in written or not remote.owns(b.device)) and b.serial > first_new]
    if DEBUG >= 1: print(f"TinyJit: captured {len(items)} items")
    return ret

  def _replay(self, inputs: list[Tensor], var_vals: dict[UOp, int]) -> R:
    sig = [_signature(t, var_vals) for t in inputs]
    if sig != self.signature:
      raise JitError(_mismatch(self.signature, sig))
    swap = {id(old): new for old, new in zip(self.input_buffers, (b for t in inputs for b in _buffers_of(t)))}
    swap |= {id(b): Buffer(b.device, b.size, b.dtype) for b in self.fresh}
    vals: list[tuple[Any, ...] | None] = [None] * len(self.items)
    for i, fixed, vs in self.var_items:
      if missing := [v.arg[0] for v in vs if v not in var_vals]:
        raise JitError(f"TinyJit: the captured kernels read the Variables {missing}, which this call binds nowhere")
      vals[i] = self.items[i].vals[:fixed] + tuple(var_vals[v] for v in vs)
    for b in self.written: pack_cache.forget(b)  # it writes them without naming them anew: their packed copies go stale
    queues = realize.steps_queues([item.bufs for item in self.items], DEBUG.value)
    try:
      for i, (item, v) in enumerate(zip(self.items, vals)):
        if (pack := self.weight_packs.get(i)) is not None:  # a weight's copy: packed again only after a write
          if pack_cache.writes(pack[0]) == pack[1]: continue
          pack[1] = pack_cache.writes(pack[0])
        item.run(tuple(swap.get(id(b), b) for b in item.bufs), v, queues)
      if queues is not None: queues.finish()
    except BaseException:
      if queues is not None: queues.finish_quietly()
      bad_index(self.flags)  # cleared: the next replay must not be blamed for this one's indices
      raise
    # as after a schedule: an index out of range raises at the call that read it (schedule/index_check.py)
    if self.flags and (err := bad_index(self.flags)) is not None: raise err
    return _map_tensors(self.ret, lambda t: _renewed(t, swap, var_vals))

def _weight_packs(items: list[realize.ExecItem], changing: set[int]) -> dict[int, list[Any]]:
  """The items that pack a weight (schedule/pack_cache.py) whose buffer is not among the ids `changing` (those the
  items write, the inputs'), each -> [the weight, its writes now]: the replays skip them while it is not written."""
  packs: dict[int, list[Any]] = {}
  for i, it in enumerate(items):
    if not isinstance(it.runner, realize.CompiledRunner) or len(it.bufs) != 2 or id(weight := it.bufs[1]) in changing:
      continue
    if pack_cache.packs(it.bufs[0], weight): packs[i] = [weight, pack_cache.writes(weight)]
  return packs

def _layout(ld: UOp) -> Any:
  """How a realized tensor reads its buffers: the view, or for one spread over devices the slices and each view."""
  if ld.op is Ops.MULTI: return (ld.arg, tuple(_layout(p) for p in ld.src))
  return ld.arg.unbind()[0] if ld.op is Ops.VIEW else None

def _signature(t: Tensor, var_vals: dict[UOp, int]) -> InputSignature:
  """An input as the capture compares it: its shape and view with their Variables unbound (their values put in
  var_vals)."""
  shape: list[Any] = []
  for dim in t.shape:
    unbound, found = unbind(dim)
    bind_values(var_vals, found)
    shape.append(unbound)
  return InputSignature(tuple(shape), t.dtype, t.device, _layout(t.lazydata))

def _buffers_of(t: Tensor) -> list[Buffer]:
  leaves = multi_leaves(t.lazydata)
  assert all(v.op is Ops.VIEW and v.src[0].op is Ops.BUFFER for v in leaves), "a realized input is a view of a buffer"
  return [buffer_map[v.src[0]] for v in leaves]

def _buffers(t: Tensor) -> list[Buffer]:
  return [buffer_map[u] for u in t.lazydata.toposort if u.op is Ops.BUFFER]

def _renewed(t: Tensor, swap: dict[int, Buffer], var_vals: dict[UOp, int]) -> Tensor:
  """A returned tensor of the capture as this replay's. Every BUFFER node is renamed (as after an assign: a graph built
  on the result after a replay is new, so a value remembered from before (schedule.realized_map) is not taken for the
  new one), and its views bound to this call's Variables' values. A tensor whose buffers the replay replaced (an
  output it made, an input) is a new tensor on the new buffers; one it did not make (a weight it updated) keeps its
  identity."""
  new_uops: dict[UOp, UOp] = {}
  replaced = False
  for u in t.lazydata.toposort:
    if u.op is Ops.BUFFER:
      buf = swap.get(id(old := buffer_map[u]), old)
      replaced |= buf is not old
      new_uops[u] = new_buffer_uop(buf.device, buf.size, buf.dtype, buf)
  ld = t.lazydata.substitute(new_uops)
  if var_vals:
    ld = ld.substitute({u: u.replace(arg=u.arg.unbind()[0].bind(var_vals)) for u in ld.toposort
                        if u.op is Ops.VIEW and u.arg.symbolic})
  if replaced: return Tensor(ld)
  t.lazydata = ld
  return t

def _mismatch(expected: list[InputSignature], got: list[InputSignature]) -> str:
  if len(expected) != len(got):
    return f"TinyJit: captured with {len(expected)} tensor inputs, called with {len(got)}; call reset() to recapture"
  for i, (e, g) in enumerate(zip(expected, got)):
    if e != g:
      what = "a different view of its buffer" if (e.shape, e.dtype, e.device) == (g.shape, g.dtype, g.device) else \
        f"shape {g.shape} {g.dtype} on {g.device}"
      return (f"TinyJit: input {i} was captured as shape {e.shape} {e.dtype} on {e.device} and is now {what}; "
              "call reset() to recapture for the new inputs")
  return "TinyJit: inputs changed"
