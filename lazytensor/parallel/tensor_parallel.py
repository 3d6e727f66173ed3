"""Tensor and sequence parallelism (Megatron-LM; torch's parallelize_module and its styles) on a DeviceMesh.

`parallelize_module(module, mesh, plan)` lays out the parameters of the submodules the plan names (by their dotted
names, `*` matching any one name) along the mesh axis "tp" and routes their calls through their style:

* ColwiseParallel: a Linear's weight (out, in) and bias sliced on the output features; the input is replicated, the
  output sliced on its last dimension. No communication forward; backward, the input's gradient is summed over the
  devices (one all-reduce), which the multi pass works out from the layouts.
* RowwiseParallel: the weight sliced on the input features, the bias replicated; the input sliced on its last
  dimension (a ColwiseParallel's output), the partial products summed over the devices (one all-reduce forward).
* SequenceParallel: a LayerNorm's (or dropout's) input sliced along the sequence dimension, so that it runs on a slice
  of the tokens per device. Next to it, ColwiseParallel(input_layouts=Shard(1)) all-gathers its input's sequence and
  RowwiseParallel(output_layouts=Shard(1)) reduce-scatters its output onto sequence slices (shard_map's all_gather and
  psum_scatter, whose transposes are each other's).

Inside a data-parallel replica (replicate, fully_shard) each style lays its values out on the replica's devices, the
row of "tp" devices, so that the two compose on a ("dp", "tp") mesh.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lazytensor.frontend.mixin.multi import DeviceMesh, SpecEntry
from lazytensor.frontend.tensor import Tensor
from lazytensor.nn.state import get_parameters
from lazytensor.parallel.data import check_even, local_mesh, wrap
from lazytensor.parallel.shard_map import all_gather, psum_scatter, shard_map


@dataclass(frozen=True)
class Shard:
  """A value sliced along the tensor-parallel axis on dimension `dim` (negative counts from the end)."""
  dim: int

@dataclass(frozen=True)
class Replicate:
  """A value held whole by every device of the tensor-parallel axis."""

Layout = Shard | Replicate

def _spec(axis: str, ndim: int, layout: Layout) -> tuple[SpecEntry, ...]:
  spec: list[SpecEntry] = [None] * ndim
  if isinstance(layout, Shard): spec[layout.dim % ndim] = axis
  return tuple(spec)

def _here(mesh: DeviceMesh, axis: str) -> DeviceMesh:
  """The devices this forward lays its values out on: the mesh, or inside a data-parallel replica its row."""
  local = local_mesh(mesh)
  if isinstance(local, str): raise ValueError(f"tensor parallel: no {axis!r} axis left on {local}")
  return local

def _on(x: Tensor, mesh: DeviceMesh, axis: str, layout: Layout) -> Tensor:
  """x laid out on `mesh` by `layout`."""
  return x.shard(mesh, _spec(axis, x.ndim, layout))

class ParallelStyle:
  """How a submodule is parallelized: its parameters laid out by `apply`, its calls run by `forward` (on `mesh`, the
  devices of this forward, along `axis`)."""
  def apply(self, module: Any, mesh: DeviceMesh, axis: str) -> None: raise NotImplementedError
  def forward(self, module: Any, call: Callable[..., Any], x: Tensor, mesh: DeviceMesh, axis: str) -> Tensor:
    raise NotImplementedError

@dataclass
class _Styled:
  """A parallelized module's state (parallel/data.py's wrap): its style, on `mesh` along `axis`."""
  module: Any
  style: ParallelStyle
  mesh: DeviceMesh
  axis: str

  def forward(self, call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) != 1 or kwargs or not isinstance(args[0], Tensor):
      raise TypeError(f"{type(self.style).__name__}: expected one Tensor argument, got {len(args)} positional and "
                      f"{sorted(kwargs)} keyword arguments")
    return self.style.forward(self.module, call, args[0], _here(self.mesh, self.axis), self.axis)

def _linear(module: Any, what: str) -> tuple[Tensor, Tensor | None]:
  w, b = getattr(module, "weight", None), getattr(module, "bias", None)
  if not isinstance(w, Tensor) or w.ndim != 2 or not (b is None or isinstance(b, Tensor) and b.ndim == 1):
    raise TypeError(f"{what}: expected a Linear (a 2-d weight (out, in), a 1-d bias or None), got "
                    f"{type(module).__name__}")
  return w, b

def _lay_param(p: Tensor, mesh: DeviceMesh, axis: str, dim: int | None, what: str) -> None:
  spec = _spec(axis, p.ndim, Replicate() if dim is None else Shard(dim))
  if isinstance(p.device, tuple): raise ValueError(f"{what}: a parameter of shape {p.shape} is already on {p.device}")
  check_even(mesh, p.shape, mesh.dims_of(spec, p.ndim), what)
  p.shard_(mesh, spec)

class _Linear(ParallelStyle):
  """A Linear sliced along the tp axis: on the output features (column-wise) or the input features (row-wise)."""
  weight_dim = 0

  def __init__(self, input_layouts: Layout, output_layouts: Layout) -> None:
    self.input_layouts, self.output_layouts = input_layouts, output_layouts

  def apply(self, module: Any, mesh: DeviceMesh, axis: str) -> None:
    w, b = _linear(module, type(self).__name__)
    _lay_param(w, mesh, axis, self.weight_dim, type(self).__name__)
    if b is not None: _lay_param(b, mesh, axis, 0 if self.weight_dim == 0 else None, type(self).__name__)

class ColwiseParallel(_Linear):
  """A Linear sliced on its output features: input replicated (or, with input_layouts=Shard(d), sliced on dimension
  d and all-gathered first: sequence parallelism), output sliced on its last dimension.

  >>> from lazytensor import DeviceMesh, Tensor, nn
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("tp",))
  >>> lin = parallelize_module(nn.Linear(4, 6), mesh, ColwiseParallel())
  >>> lin.weight.bounds, lin(Tensor.ones(2, 4)).shape
  (((0, 3), (3, 6)), (2, 6))
  """
  def __init__(self, input_layouts: Layout = Replicate(), output_layouts: Layout = Shard(-1)) -> None:
    super().__init__(input_layouts, output_layouts)

  def forward(self, module: Any, call: Callable[..., Any], x: Tensor, mesh: DeviceMesh, axis: str) -> Tensor:
    if isinstance(self.input_layouts, Shard):  # sequence parallel: all-gather the sequence, then the local matmul
      w, b = _linear(module, "ColwiseParallel")
      d = self.input_layouts.dim % x.ndim
      def f(x: Tensor, w: Tensor, *b: Tensor) -> Tensor: return all_gather(x, axis, d, tiled=True).linear(w.T, *b)
      run = shard_map(f, mesh, in_specs=(_spec(axis, x.ndim, self.input_layouts), (axis, None),
                                         *[(axis,)] * (b is not None)), out_specs=_spec(axis, x.ndim, Shard(-1)))
      out = run(_on(x, mesh, axis, self.input_layouts), w, *([b] if b is not None else []))
    else: out = call(_on(x, mesh, axis, Replicate()))
    return out if self.output_layouts == Shard(-1) else _on(out, mesh, axis, self.output_layouts)

class RowwiseParallel(_Linear):
  """A Linear sliced on its input features: input sliced on its last dimension, partial products summed over the
  devices, output replicated (or, with output_layouts=Shard(d), reduce-scattered onto slices of dimension d: sequence
  parallelism).

  >>> from lazytensor import DeviceMesh, Tensor, nn
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("tp",))
  >>> lin = parallelize_module(nn.Linear(4, 6), mesh, RowwiseParallel())
  >>> lin.weight.bounds, lin(Tensor.ones(2, 4)).shard_axis
  (((0, 2), (2, 4)), None)
  """
  weight_dim = 1

  def __init__(self, input_layouts: Layout = Shard(-1), output_layouts: Layout = Replicate()) -> None:
    super().__init__(input_layouts, output_layouts)

  def forward(self, module: Any, call: Callable[..., Any], x: Tensor, mesh: DeviceMesh, axis: str) -> Tensor:
    x = _on(x, mesh, axis, self.input_layouts)
    if not isinstance(self.output_layouts, Shard): return call(x)
    w, b = _linear(module, "RowwiseParallel")
    d = self.output_layouts.dim % x.ndim
    def f(x: Tensor, w: Tensor, *b: Tensor) -> Tensor:
      y = psum_scatter(x @ w.T, axis, d, tiled=True)
      return y + b[0] if b else y
    specs = (_spec(axis, x.ndim, self.input_layouts), (None, axis), *[None] * (b is not None))
    run = shard_map(f, mesh, in_specs=specs, out_specs=_spec(axis, x.ndim, self.output_layouts))
    return run(x, w, *([b] if b is not None else []))

class SequenceParallel(ParallelStyle):
  """A module that works on each token apart (LayerNorm, RMSNorm, dropout) run on slices of the sequence dimension
  `sequence_dim` of its input; its parameters replicated (their gradients summed over the devices).

  >>> from lazytensor import DeviceMesh, Tensor, nn
  >>> mesh = DeviceMesh(("CPU:0", "CPU:1"), names=("tp",))
  >>> ln = parallelize_module(nn.LayerNorm(4), mesh, SequenceParallel())
  >>> ln(Tensor.ones(2, 6, 4)).bounds
  ((0, 3), (3, 6))
  """
  def __init__(self, sequence_dim: int = 1) -> None:
    self.sequence_dim = sequence_dim

  def apply(self, module: Any, mesh: DeviceMesh, axis: str) -> None:
    for name in ("weight", "bias"):
      if isinstance(p := getattr(module, name, None), Tensor): _lay_param(p, mesh, axis, None, "SequenceParallel")

  def forward(self, module: Any, call: Callable[..., Any], x: Tensor, mesh: DeviceMesh, axis: str) -> Tensor:
    return call(_on(x, mesh, axis, Shard(self.sequence_dim)))

def _named_modules(root: Any) -> dict[str, Any]:
  """Every object reachable from root through attributes, lists and dicts that is not a Tensor, by dotted name."""
  out: dict[str, Any] = {}
  seen: set[int] = set()
  def walk(obj: Any, name: str) -> None:
    if isinstance(obj, Tensor) or id(obj) in seen: return
    seen.add(id(obj))
    if isinstance(obj, dict): items: Any = obj.items()
    elif isinstance(obj, (list, tuple)): items = enumerate(obj)
    elif hasattr(obj, "__dict__"):
      out[name] = obj
      items = vars(obj).items()
    else: return
    for k, v in list(items): walk(v, f"{name}.{k}" if name else str(k))
  walk(root, "")
  return out

def parallelize_module(module: Any, mesh: DeviceMesh, plan: ParallelStyle | dict[str, ParallelStyle],
                       axis: str = "tp") -> Any:
  """Tensor parallelism in place (torch's parallelize_module): `plan` maps submodule names (dotted, as
  get_state_dict's; `*` matches one name) to their ParallelStyle, or is one style for the module itself. Each named
  submodule's parameters are laid out along the mesh axis `axis`, and its calls run through its style; the module's
  other parameters are replicated on the mesh. Apply it before replicate or fully_shard. Returns the module."""
  if not isinstance(mesh, DeviceMesh): raise TypeError(f"parallelize_module: expected a DeviceMesh, got {mesh!r}")
  if axis not in mesh.names:
    raise ValueError(f"parallelize_module: {axis!r} is not an axis of the mesh; its axes are {mesh.names}")
  styles = {"": plan} if isinstance(plan, ParallelStyle) else plan
  if not isinstance(styles, dict): raise TypeError(f"parallelize_module: expected a style or a dict, got {plan!r}")
  modules = _named_modules(module)
  for pattern, style in styles.items():
    if not isinstance(style, ParallelStyle):
      raise TypeError(f"parallelize_module: plan[{pattern!r}] is a {type(style).__name__}, not a ParallelStyle")
    names = [n for n in modules if fnmatch.fnmatchcase(n, pattern) and n.count(".") == pattern.count(".")]
    if not names:
      raise ValueError(f"parallelize_module: no submodule is named {pattern!r}; the names are "
                       f"{sorted(n for n in modules if n)[:12]}...")
    for name in names:
      style.apply(modules[name], mesh, axis)
      wrap(modules[name], _Styled(modules[name], style, mesh, axis), "parallelize_module")
  for p in get_parameters(module):  # the rest replicated, so that the whole module runs on the mesh
    if not isinstance(p.device, tuple): p.shard_(mesh, None)
  return module
