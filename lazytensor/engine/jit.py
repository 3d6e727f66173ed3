"""TinyJit: run a function normally, capture the kernels it runs, then replay them with new input buffers.

The first call runs (and compiles) everything; the second runs again while recording every kernel and copy with the
buffers it touched; from the third on, the recorded items run directly — no graph building, scheduling or lowering —
with the input tensors' buffers swapped in. Intermediate and output buffers are the ones recorded, so a replay
overwrites the previous call's outputs, as in tinygrad. Random numbers drawn inside the function are new at every
replay (the stream's counter is a buffer that the program advances). A lazy tensor made before the capture that has to
be computed during it (it reads weights the step overwrites) is computed once, outside the program.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lazytensor.device import Buffer, buffer_map, new_buffer_uop
from lazytensor.engine import realize
from lazytensor.graph import multi_leaves
from lazytensor.helpers import DEBUG, JIT
from lazytensor.tensor import Tensor, capturing_program
from lazytensor.uop.ops import DeviceLike, Ops, UOp

R = TypeVar("R")

@dataclass(frozen=True)
class InputSignature:
  """What a captured program assumes about one input: replaying with anything else would be wrong."""
  shape: tuple[int, ...]
  dtype: Any
  device: DeviceLike
  view: Any

class JitError(ValueError):
  """A jitted function was called with inputs its captured kernels cannot serve."""

def _tensors_in(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Tensor]:
  return [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]

def _outputs(ret: Any) -> list[Tensor]:
  if isinstance(ret, Tensor): return [ret]
  if isinstance(ret, (tuple, list)): return [r for r in ret if isinstance(r, Tensor)]
  if isinstance(ret, dict): return [r for r in ret.values() if isinstance(r, Tensor)]
  return []

class TinyJit(Generic[R]):
  """Wrap a function of Tensors whose kernels are the same on every call (a training step, a model's forward).

  >>> from lazytensor import Tensor
  >>> step = TinyJit(lambda x: (x * 2 + 1).realize())
  >>> [step(Tensor([float(i), 1.0])).tolist() for i in range(3)][-1]
  [5.0, 3.0]
  """
  def __init__(self, fn: Callable[..., R]) -> None:
    self.fn = fn
    self.calls = 0
    self.items: list[realize.ExecItem] = []
    self.signature: list[InputSignature] = []
    self.input_buffers: list[Buffer] = []  # every input's buffers in order (a buffer per device when spread)
    self.ret: R | None = None

  def reset(self) -> None:
    """Forget the captured kernels: the next call runs normally again."""
    self.calls, self.items, self.signature, self.input_buffers, self.ret = 0, [], [], [], None

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    inputs = _tensors_in(args, kwargs)
    for t in inputs: t.realize()
    if not JIT.value: return self.fn(*args, **kwargs)
    if self.calls == 0:
      self.calls = 1
      return self._run_and_realize(args, kwargs)
    if self.calls == 1: return self._capture(args, kwargs, inputs)
    return self._replay(inputs)

  def _run_and_realize(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    ret = self.fn(*args, **kwargs)
    outs = _outputs(ret)
    if outs: outs[0].realize(*outs[1:])
    return ret

  def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any], inputs: list[Tensor]) -> R:
    with realize.capture() as items, capturing_program():
      ret = self._run_and_realize(args, kwargs)
    if not items:  # everything was already computed (e.g. the same inputs twice): capture on the next call instead
      return ret
    self.items, self.ret, self.calls = items, ret, 2
    self.signature = [_signature(t) for t in inputs]
    self.input_buffers = [b for t in inputs for b in _buffers_of(t)]
    if DEBUG >= 1: print(f"TinyJit: captured {len(items)} items")
    return ret

  def _replay(self, inputs: list[Tensor]) -> R:
    sig = [_signature(t) for t in inputs]
    if sig != self.signature:
      raise JitError(_mismatch(self.signature, sig))
    swap = {id(old): new for old, new in zip(self.input_buffers, (b for t in inputs for b in _buffers_of(t)))}
    for item in self.items: item.run(tuple(swap.get(id(b), b) for b in item.bufs))
    assert self.ret is not None
    for t in _outputs(self.ret): t.lazydata = _renamed_buffers(t.lazydata)
    return self.ret

def _renamed_buffers(ld: UOp) -> UOp:
  """The same views of the same memory through new BUFFER nodes (as after an assign): a graph built on an output
  after a replay is new, so a result remembered from before (schedule.realized_map) is not taken for the new one."""
  if ld.op is Ops.BUFFER: return new_buffer_uop(ld.arg[0], ld.arg[1], ld.dtype, buffer_map[ld])
  return ld.replace(src=tuple(_renamed_buffers(s) for s in ld.src)) if ld.src else ld

def _layout(ld: UOp) -> Any:
  """How a realized tensor reads its buffers: the view, or for one spread over devices the slices and each view."""
  if ld.op is Ops.MULTI: return (ld.arg, tuple(_layout(p) for p in ld.src))
  return ld.arg if ld.op is Ops.VIEW else None

def _signature(t: Tensor) -> InputSignature:
  return InputSignature(t.shape, t.dtype, t.device, _layout(t.lazydata))

def _buffers_of(t: Tensor) -> list[Buffer]:
  leaves = multi_leaves(t.lazydata)
  assert all(v.op is Ops.VIEW and v.src[0].op is Ops.BUFFER for v in leaves), "a realized input is a view of a buffer"
  return [buffer_map[v.src[0]] for v in leaves]

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
