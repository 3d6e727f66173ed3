"""lazytensor.func: torch.func's function transformations, with its names and semantics, over lazytensor's graphs.

grad, grad_and_value, vjp: reverse mode (frontend/gradient.py's rules); jvp, linearize: forward mode (forward.py's
tangent rules); vmap: batching (batching.py's rules); jacrev, jacfwd, hessian: vmap over vjp or jvp with the rows of an
identity; checkpoint: rematerialization (checkpoint.py). Each maps graphs to graphs, so they compose in any order
(vmap(grad(f)) gives per-example gradients, jacfwd(jacrev(f)) a Hessian, vmap(vmap(f)) two batch dimensions), and
what they return is lazy and fuses with the rest of the computation like any other graph.

Arguments and results may be tensors or any nesting of tuples, lists and dicts of them (torch.func's pytrees).
Differentiation is with respect to marks of the arguments (marks.py): a tensor f closes over is a constant to it, as in
torch.func, and so is a gradient an enclosing transformation takes.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from lazytensor.frontend import live
from lazytensor.frontend.state import state
from lazytensor.frontend.tensor import Tensor, enable_grad
from lazytensor.func.batching import Trace, VmapError, batch_graph, broadcast
from lazytensor.func.checkpoint import checkpoint
from lazytensor.func.forward import compute_tangents
from lazytensor.func.marks import mark, needs_gradient, unmark
from lazytensor.func.tree import Spec, broadcast_prefix, flatten, unflatten
from lazytensor.uop.ops import UOp

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian", "vmap", "checkpoint",
           "VmapError"]

Argnums = int | tuple[int, ...]

# ---- shared pieces ----

def _results(nodes: Sequence[UOp]) -> list[Tensor]:
  """Tensors of `nodes`, needing gradients where their graphs hold a tensor that does. Each counts as made before the
  writes pending now, as a gradient does (live.as_old): a gradient computes the values of superseded writes from the
  memory (the random count's advances, in tensors drawn lazily), which the pending writes overwrite."""
  out = []
  for node, needs in zip(nodes, needs_gradient(nodes)):
    t = Tensor(node)
    if needs and node.dtype.is_float: t._requires_grad = True
    live.as_old(t)
    out.append(t)
  return out

def _tensors(leaves: Sequence[Any], what: str) -> list[Tensor]:
  for x in leaves:
    if not isinstance(x, Tensor): raise TypeError(f"{what} must be Tensors (or tuples, lists, dicts of them), got "
                                                  f"{type(x).__name__}")
  return list(leaves)

class _Marked:
  """Arguments as a transformation differentiates them: each tensor of the trees replaced by a mark of it."""
  def __init__(self, trees: Sequence[Any], name: str) -> None:
    leaves, self.spec = flatten(tuple(trees))
    self.originals = _tensors(leaves, f"{name}: the arguments it differentiates")
    for t in self.originals:
      if not t.dtype.is_float: raise TypeError(f"{name}: differentiates with respect to float tensors, got {t.dtype}")
    # an argument whose graph holds writes not run yet (a tensor drawn lazily holds the random count's advance) is
    # computed first, as torch.func's arguments are values: a gradient replaces superseded writes by their values,
    # rebuilding the graph above them, and an enclosing transformation's mark in it would be lost
    if due := [t for t in self.originals if t.lazydata.writes and not t.lazydata.reads & state.no_values]:
      Tensor.realize(*due)
    self.nodes = [mark(t._graph_root()) for t in self.originals]
    self.tensors = [Tensor(n) for n in self.nodes]
    for t in self.tensors: t._requires_grad = True  # so that what f realizes keeps its graph, as a weight's does
    self.trees: tuple[Any, ...] = unflatten(self.spec, self.tensors)

  def unmarked(self, tensors: Sequence[Tensor]) -> list[Tensor]:
    return _results(unmark([t._graph_root() for t in tensors], self.nodes))

def _argnums(argnums: Argnums, n: int, name: str) -> tuple[int, ...]:
  nums = argnums if isinstance(argnums, tuple) else (argnums,)
  if not nums: raise ValueError(f"{name}: argnums is an empty tuple; expected an int or a tuple of ints")
  for a in nums:
    if not isinstance(a, int) or isinstance(a, bool): raise TypeError(f"{name}: argnums must be ints, got {a!r}")
    if not -n <= a < n: raise ValueError(f"{name}: argnum {a} is out of range for a call with {n} arguments")
  nums = tuple(a % n for a in nums)
  if len(set(nums)) != len(nums): raise ValueError(f"{name}: argnums {argnums} repeats an argument")
  return nums

def _replaced(args: tuple[Any, ...], nums: tuple[int, ...], new: Sequence[Any]) -> tuple[Any, ...]:
  by_num = dict(zip(nums, new))
  return tuple(by_num.get(i, a) for i, a in enumerate(args))

def _split_aux(out: Any, has_aux: bool, name: str) -> tuple[Any, Any]:
  if not has_aux: return out, None
  if not isinstance(out, (tuple, list)) or len(out) != 2:
    raise ValueError(f"{name}: with has_aux=True the function must return a pair (output, aux), got "
                     f"{type(out).__name__}")
  return out[0], out[1]

def _unmark_tree(tree: Any, marked: _Marked) -> Any:
  """tree with its tensors unmarked (other leaves as they are)."""
  leaves, spec = flatten(tree)
  at = [i for i, x in enumerate(leaves) if isinstance(x, Tensor)]
  for i, t in zip(at, marked.unmarked([leaves[i] for i in at])): leaves[i] = t
  return unflatten(spec, leaves)

# ---- reverse mode ----

def grad_and_value(func: Callable[..., Any], argnums: Argnums = 0, has_aux: bool = False) -> Callable[..., Any]:
  """func and its gradient with respect to the arguments `argnums` names (an int, or a tuple of them), as torch.func's:
  a function that returns (gradient, value), or (gradient, (value, aux)) with has_aux. func returns a one-element
  float tensor (with aux: a pair of it and anything else); a tuple argnums gives a tuple of gradients; an argument may
  be a tuple, list or dict of tensors, and its gradient is one of the same shape.

  >>> from lazytensor import Tensor, func
  >>> g, v = func.grad_and_value(lambda x: (x * x).sum())(Tensor([1.0, 2.0]))
  >>> g.tolist(), v.item()
  ([2.0, 4.0], 5.0)
  """
  @functools.wraps(func)
  def wrapper(*args: Any, **kwargs: Any) -> Any:
    nums = _argnums(argnums, len(args), "grad")
    with enable_grad():
      marked = _Marked([args[i] for i in nums], "grad")
      value, aux = _split_aux(func(*_replaced(args, nums, marked.trees), **kwargs), has_aux, "grad")
      if not isinstance(value, Tensor) or value.numel() != 1 or not value.dtype.is_float:
        raise ValueError(f"grad: the function must return a one-element float Tensor, got "
                         f"{getattr(value, 'shape', type(value).__name__)}; for other outputs use vjp or jacrev")
      grads = value.gradient(*marked.tensors, create_graph=True)
    value, *grads = marked.unmarked([value, *grads])
    per_arg = unflatten(marked.spec, grads)
    g = per_arg if isinstance(argnums, tuple) else per_arg[0]
    return (g, (value, _unmark_tree(aux, marked))) if has_aux else (g, value)
  return wrapper

def grad(func: Callable[..., Any], argnums: Argnums = 0, has_aux: bool = False) -> Callable[..., Any]:
  """The gradient of func with respect to the arguments `argnums` names, as torch.func.grad: a function that returns
  it (with has_aux, the pair of it and func's aux). See grad_and_value.

  >>> from lazytensor import Tensor, func
  >>> func.grad(lambda x, w: (x * w).sum(), argnums=(0, 1))(Tensor([1.0, 2.0]), Tensor([3.0, 4.0]))[1].tolist()
  [1.0, 2.0]
  """
  both = grad_and_value(func, argnums, has_aux)
  @functools.wraps(func)
  def wrapper(*args: Any, **kwargs: Any) -> Any:
    g, value = both(*args, **kwargs)
    return (g, value[1]) if has_aux else g
  return wrapper

def vjp(func: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
  """func at `primals` and its vector-Jacobian product, as torch.func.vjp: (output, vjp_fn), or (output, vjp_fn, aux)
  with has_aux. vjp_fn(cotangents), cotangents shaped as the output, returns a tuple with the gradient of each primal.

  >>> from lazytensor import Tensor, func
  >>> out, vjp_fn = func.vjp(lambda x: x * x, Tensor([1.0, 2.0]))
  >>> vjp_fn(Tensor([1.0, 10.0]))[0].tolist()
  [2.0, 40.0]
  """
  with enable_grad():
    marked = _Marked(primals, "vjp")
    value, aux = _split_aux(func(*marked.trees), has_aux, "vjp")
  out_leaves, out_spec = flatten(value)
  outs = _tensors(out_leaves, "vjp: the function's outputs")

  def vjp_fn(cotangents: Any) -> tuple[Any, ...]:
    leaves, spec = flatten(cotangents)
    if spec != out_spec: raise ValueError(f"vjp_fn: the cotangents' structure {spec} is not the output's {out_spec}")
    total: list[Tensor | None] = [None] * len(marked.tensors)
    with enable_grad():
      for o, c in zip(outs, _tensors(leaves, "vjp_fn: the cotangents")):
        grads = o.gradient(*marked.tensors, gradient=c, create_graph=True)
        total = [g if t is None else t + g for t, g in zip(total, grads)]
    return unflatten(marked.spec, marked.unmarked([t for t in total if t is not None]))

  out = unflatten(out_spec, marked.unmarked(outs))
  return (out, vjp_fn, _unmark_tree(aux, marked)) if has_aux else (out, vjp_fn)

# ---- forward mode ----

def _linearized(func: Callable[..., Any], primals: tuple[Any, ...], has_aux: bool,
                name: str) -> tuple[Any, Any, Callable[..., Any]]:
  """func at `primals` (output, aux) and the function from the primals' tangents to the output's."""
  with enable_grad():
    marked = _Marked(primals, name)
    value, aux = _split_aux(func(*marked.trees), has_aux, name)
  out_leaves, out_spec = flatten(value)
  outs = _tensors(out_leaves, f"{name}: the function's outputs")

  def push(tangents: tuple[Any, ...]) -> Any:
    leaves, spec = flatten(tangents)
    if spec != marked.spec:
      raise ValueError(f"{name}: the tangents' structure {spec} is not the primals' {marked.spec}")
    seeds = {}
    for m, p, t in zip(marked.nodes, marked.originals, _tensors(leaves, f"{name}: the tangents")):
      if t.shape != p.shape: raise ValueError(f"{name}: a tangent of shape {t.shape} for a primal of shape {p.shape}")
      seeds[m] = t.cast(p.dtype)._graph_root()
    found = compute_tangents([o._graph_root() for o in outs], seeds)
    tangent_outs = [o.zeros_like() if t is None else Tensor(t) for o, t in zip(outs, found)]
    return unflatten(out_spec, marked.unmarked(tangent_outs))

  return unflatten(out_spec, marked.unmarked(outs)), _unmark_tree(aux, marked), push

def jvp(func: Callable[..., Any], primals: tuple[Any, ...], tangents: tuple[Any, ...],
        has_aux: bool = False) -> tuple[Any, ...]:
  """func at `primals` and its Jacobian-vector product with `tangents` (a tuple shaped as primals), as torch.func.jvp:
  (output, tangent of the output), or with has_aux (output, tangent, aux). Forward mode: the tangent is computed beside
  the output by a tangent rule per op (about one more forward, in the same kernels when realized together).

  >>> from lazytensor import Tensor, func
  >>> out, t = func.jvp(lambda x: x.sin(), (Tensor([0.0]),), (Tensor([2.0]),))
  >>> out.tolist(), t.tolist()
  ([0.0], [2.0])
  """
  if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
    raise TypeError(f"jvp: primals and tangents must be tuples, got {type(primals).__name__} and "
                    f"{type(tangents).__name__}")
  out, aux, push = _linearized(func, primals, has_aux, "jvp")
  return (out, push(tangents), aux) if has_aux else (out, push(tangents))

def linearize(func: Callable[..., Any], *primals: Any) -> tuple[Any, Callable[..., Any]]:
  """func at `primals` and its Jacobian-vector product as a function, as torch.func.linearize: (output, jvp_fn), where
  jvp_fn(*tangents) gives the output's tangent, computed from func's graph built once.

  >>> from lazytensor import Tensor, func
  >>> out, jvp_fn = func.linearize(lambda x: x * x, Tensor([3.0]))
  >>> jvp_fn(Tensor([1.0])).tolist(), jvp_fn(Tensor([2.0])).tolist()
  ([6.0], [12.0])
  """
  out, _, push = _linearized(func, primals, False, "linearize")
  return out, lambda *tangents: push(tangents)

# ---- batching ----

def vmap(func: Callable[..., Any], in_dims: Any = 0, out_dims: Any = 0,
         randomness: str = "error") -> Callable[..., Any]:
  """func over a batch dimension of its inputs, as torch.func.vmap: `in_dims` names, for each argument (an int or None
  for all of them, or a tuple with one entry per argument, each an int, None or a tree matching the argument), the
  dimension it is batched along (None: not batched); `out_dims` where each output gets the batch dimension (None: the
  output must not depend on the batch). `randomness`: 'error' (random ops raise), 'different' (each example draws its
  own) or 'same' (one draw for the batch). func runs once, building one example's graph, which is then batched (see
  batching.py): looking at values inside it (.item(), nonzero, x[i] = v) raises VmapError.

  >>> from lazytensor import Tensor, func
  >>> rows, w = Tensor([[1.0, 2.0], [3.0, 4.0]]), Tensor([1.0, 10.0])
  >>> func.vmap(lambda row, w: (row * w).sum(), in_dims=(0, None))(rows, w).tolist()
  [21.0, 43.0]
  """
  @functools.wraps(func)
  def wrapper(*args: Any) -> Any:
    leaves, spec = flatten(args)
    dims = broadcast_prefix(in_dims, spec, "vmap: in_dims")
    size = _batch_size(leaves, dims)
    trace = Trace(Tensor, size, randomness)
    inner = [x if d is None else trace.stand_in(x.movedim(d, 0)) for x, d in zip(leaves, dims)]
    with trace: out = func(*unflatten(spec, inner))
    return _batched_outputs(out, out_dims, trace)
  return wrapper

def _batch_size(leaves: Sequence[Any], dims: Sequence[Any]) -> int:
  sizes = {}
  for i, (x, d) in enumerate(zip(leaves, dims)):
    if d is None: continue
    if not isinstance(d, int) or isinstance(d, bool):
      raise TypeError(f"vmap: in_dims holds {d!r}; expected ints or None")
    if not isinstance(x, Tensor):
      raise TypeError(f"vmap: in_dim {d} for an argument of type {type(x).__name__}; only tensors are batched (give "
                      "it None)")
    if not -x.ndim <= d < x.ndim:
      raise IndexError(f"vmap: in_dim {d} is out of range for an input of shape {x.shape}")
    sizes[i] = x.shape[d]
  if not sizes: raise ValueError("vmap: no input is batched: at least one tensor argument needs an in_dim, not None")
  if len(set(sizes.values())) > 1:
    raise ValueError(f"vmap: the batched inputs have different sizes along their in_dims: "
                     f"{sorted(set(sizes.values()))}; expected one size")
  return next(iter(sizes.values()))

def _batched_outputs(out: Any, out_dims: Any, trace: Trace) -> Any:
  leaves, spec = flatten(out)
  dims = broadcast_prefix(out_dims, spec, "vmap: out_dims")
  outs = _tensors([x for x, d in zip(leaves, dims) if d is not None], "vmap: the function's outputs")
  batched = iter(batch_graph([o._graph_root() for o in outs], trace.batched, trace.size))
  result = []
  for x, d in zip(leaves, dims):
    b = None if d is None else next(batched)
    if d is None:
      if isinstance(x, Tensor) and batch_graph([x._graph_root()], trace.batched, trace.size)[0] is not None:
        raise ValueError("vmap: out_dims is None for an output that depends on the batch; give it a dimension")
      result.append(x)
      continue
    node = b if b is not None else broadcast(x._graph_root(), trace.size)
    result.append(_results([node])[0].movedim(0, d))
  return unflatten(spec, result)

# ---- Jacobians ----

def _basis(like: Sequence[Tensor]) -> tuple[int, list[Tensor]]:
  """The rows of an identity over all elements of `like`, cut into one batch of rows for each: rows[i] has shape
  (n, *like[i].shape), n the number of elements of them all."""
  sizes = [t.numel() for t in like]
  n = sum(sizes)
  eye = Tensor.eye(n, dtype=like[0].dtype, device=like[0].device)
  starts = [sum(sizes[:i]) for i in range(len(sizes))]
  return n, [eye[:, s:s + k].cast(t.dtype).reshape(n, *t.shape) for s, k, t in zip(starts, sizes, like)]

def _jacobian_tree(out_spec: Spec, outs: Sequence[Tensor], per_out: Sequence[list[Tensor]], arg_spec: Spec,
                   argnums: Argnums) -> Any:
  """The Jacobian blocks (per_out[i][j]: output leaf i by argument leaf j) in torch.func's layout: the output's tree,
  each leaf holding the arguments' tree (a tuple of them for a tuple argnums)."""
  per_arg = [unflatten(arg_spec, blocks) for blocks in per_out]
  return unflatten(out_spec, [p if isinstance(argnums, tuple) else p[0] for p in per_arg])

def jacrev(func: Callable[..., Any], argnums: Argnums = 0, has_aux: bool = False) -> Callable[..., Any]:
  """The Jacobian of func with respect to the arguments `argnums` names, by reverse mode, as torch.func.jacrev: vmap
  of the vector-Jacobian product over the rows of an identity (one backward, batched over the output's elements).
  Each block has the output's shape followed by the argument's.

  >>> from lazytensor import Tensor, func
  >>> func.jacrev(lambda x: x * x)(Tensor([1.0, 2.0])).tolist()
  [[2.0, 0.0], [0.0, 4.0]]
  """
  @functools.wraps(func)
  def wrapper(*args: Any) -> Any:
    nums = _argnums(argnums, len(args), "jacrev")
    def on_selected(*selected: Any) -> Any: return func(*_replaced(args, nums, selected))
    out, vjp_fn, *aux = vjp(on_selected, *(args[i] for i in nums), has_aux=has_aux)
    out_leaves, out_spec = flatten(out)
    n, rows = _basis(out_leaves)
    grads, arg_spec = flatten(vmap(vjp_fn)(unflatten(out_spec, rows)))
    starts = [sum(o.numel() for o in out_leaves[:i]) for i in range(len(out_leaves))]
    per_out = [[g[s:s + o.numel()].reshape(*o.shape, *g.shape[1:]) for g in grads]
               for s, o in zip(starts, out_leaves)]
    jac = _jacobian_tree(out_spec, out_leaves, per_out, arg_spec, argnums)
    return (jac, aux[0]) if has_aux else jac
  return wrapper

def jacfwd(func: Callable[..., Any], argnums: Argnums = 0, has_aux: bool = False,
           randomness: str = "error") -> Callable[..., Any]:
  """The Jacobian of func with respect to the arguments `argnums` names, by forward mode, as torch.func.jacfwd: vmap of
  the Jacobian-vector product over the rows of an identity (one forward of tangents, batched over the arguments'
  elements). Each block has the output's shape followed by the argument's.

  >>> from lazytensor import Tensor, func
  >>> func.jacfwd(lambda x: x.sum() * x)(Tensor([1.0, 2.0])).tolist()
  [[4.0, 1.0], [2.0, 5.0]]
  """
  @functools.wraps(func)
  def wrapper(*args: Any) -> Any:
    nums = _argnums(argnums, len(args), "jacfwd")
    primals = tuple(args[i] for i in nums)
    def on_selected(*selected: Any) -> Any: return func(*_replaced(args, nums, selected))
    leaves, arg_spec = flatten(primals)
    n, rows = _basis(_tensors(leaves, "jacfwd: the arguments it differentiates"))
    def push(tangents: tuple[Any, ...]) -> tuple[Any, Any]:
      out, tangent, *aux = jvp(on_selected, primals, tangents, has_aux=has_aux)
      return tangent, (aux[0] if has_aux else None)
    tangents, aux = vmap(push, out_dims=(0, None), randomness=randomness)(unflatten(arg_spec, rows))
    outs, out_spec = flatten(tangents)
    starts = [sum(x.numel() for x in leaves[:j]) for j in range(len(leaves))]
    per_out = [[t[s:s + x.numel()].movedim(0, -1).reshape(*t.shape[1:], *x.shape) for s, x in zip(starts, leaves)]
               for t in outs]
    jac = _jacobian_tree(out_spec, outs, per_out, arg_spec, argnums)
    return (jac, aux) if has_aux else jac
  return wrapper

def hessian(func: Callable[..., Any], argnums: Argnums = 0) -> Callable[..., Any]:
  """The Hessian of a function to a one-element tensor with respect to the arguments `argnums` names, as
  torch.func.hessian: jacfwd(jacrev(func)), forward over reverse.

  >>> from lazytensor import Tensor, func
  >>> func.hessian(lambda x: (x ** 3).sum())(Tensor([1.0, 2.0])).tolist()
  [[6.0, 0.0], [0.0, 12.0]]
  """
  return jacfwd(jacrev(func, argnums), argnums)
