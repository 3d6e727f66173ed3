"""The rest of torch's Tensor API that users reach for: other names for ops (mixin/aliases.py), splits, selections,
matrix transposes and diagonal embeddings (mixin/shapes.py), take and the index_* family (mixin/take_put.py),
statistics (mixin/stats.py), kron and inner, and the autograd conveniences is_leaf, retain_grad, register_hook and
is_contiguous. Each against torch (values, dtypes and gradients through check_op), plus the bad inputs users make."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, check_op, named, torch
from test_errors import lazy, raises_at_build

from lazytensor import Tensor, dtypes
from lazytensor.helpers import NotSupportedError

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="compares against torch")
I64 = dtypes.int64
NAN_ROWS = np.array([[1.0, np.nan, 2.0, 5.0, np.nan], [3.0, 2.0, 1.0, 0.0, 4.0], [np.nan, 4.0, np.nan, 6.0, 7.0]],
                    np.float32)

# ---- other names: each is the op itself, and does what torch's method of that name does ----

ALIASES = [("less", "lt"), ("greater", "gt"), ("less_equal", "le"), ("greater_equal", "ge"), ("not_equal", "ne"),
           ("multiply", "mul"), ("subtract", "sub"), ("divide", "div"), ("true_divide", "div"),
           ("floor_divide", "floordiv"), ("remainder", "mod"), ("negative", "neg"), ("absolute", "abs"),
           ("fix", "trunc"), ("bitwise_left_shift", "lshift"), ("bitwise_right_shift", "rshift"), ("arcsin", "asin"),
           ("arccos", "acos"), ("arctan", "atan"), ("arcsinh", "asinh"), ("arccosh", "acosh"), ("arctanh", "atanh"),
           ("arctan2", "atan2"), ("broadcast_to", "expand"), ("ravel", "flatten"), ("swapaxes", "transpose"),
           ("swapdims", "transpose"), ("split_with_sizes", "split"), ("nelement", "numel"), ("ger", "outer"),
           ("argwhere", "nonzero"), ("ndimension", "dim"), ("__lt__", "lt"), ("__ge__", "ge"), ("__pos__", "positive"),
           ("mH", "mT")]

@pytest.mark.parametrize("alias,target", ALIASES)
def test_alias_is_the_op(alias: str, target: str) -> None:
  assert inspect.getattr_static(Tensor, alias) is inspect.getattr_static(Tensor, target)

BINARY_NAMES = ["lt", "gt", "le", "ge", "less", "greater", "less_equal", "greater_equal", "not_equal", "multiply",
                "subtract", "divide", "true_divide", "floor_divide", "remainder", "arctan2"]

@needs_torch
@pytest.mark.parametrize("name", BINARY_NAMES)
def test_binary_names_match_torch(name: str) -> None:
  check_op([(3, 4), (4,)], lambda x, y: getattr(x, name)(y), gen=lambda s, dt, rng: rng.uniform(0.5, 3, s).astype(
    dt.np) * rng.choice([-1, 1], s).astype(dt.np), grad=name not in ("floor_divide", "remainder"))

@needs_torch
@pytest.mark.parametrize("name,low,high", [("negative", -2, 2), ("absolute", -2, 2), ("positive", -2, 2),
                                           ("fix", -5, 5), ("arcsin", -0.9, 0.9), ("arccos", -0.9, 0.9),
                                           ("arctan", -5, 5), ("arcsinh", -5, 5), ("arccosh", 1.1, 5),
                                           ("arctanh", -0.9, 0.9), ("ravel", -2, 2)])
def test_unary_names_match_torch(name: str, low: float, high: float) -> None:
  check_op([(3, 4)], lambda x: getattr(x, name)(), low=low, high=high)

@needs_torch
def test_other_names_match_torch() -> None:
  check_op([np.array([1, 2, -8], np.int32), np.array([1, 3, 1], np.int32)], lambda x, s: x.bitwise_left_shift(s))
  check_op([np.array([1, 64, -8], np.int32), np.array([1, 3, 1], np.int32)], lambda x, s: x.bitwise_right_shift(s))
  check_op([(3, 1)], lambda x: x.broadcast_to((2, 3, 4)))
  check_op([(2, 3, 4)], lambda x: x.swapaxes(0, 2))
  check_op([(2, 3, 4)], lambda x: x.swapdims(2, 1))
  check_op([(7, 2)], lambda x: x.split_with_sizes([2, 5]))
  check_op([(3,), (4,)], lambda x, y: x.ger(y))
  check_op([np.array([[0, 3], [5, 0]], np.int64)], lambda x: x.argwhere())
  check_op([(7, 2)], lambda x: x.unsafe_split(3))
  check_op([(7, 2)], lambda x: x.unsafe_chunk(3, 1))
  check_op([np.array([0, 3, 0, 5], np.int64)], lambda x: x.nonzero_static(size=3))
  check_op([(3,)], lambda x: x.byte(), low=0, high=200)
  check_op([(3,)], lambda x: x.char(), low=-100, high=100)
  for name in ("conj", "resolve_conj", "resolve_neg", "conj_physical", "cpu"):
    check_op([(2, 3)], lambda x, name=name: getattr(x, name)())
  x = Tensor.zeros(2, 3, 4)
  assert (x.dim(), x.ndimension(), x.nelement()) == (3, 3, 24) and (+Tensor([1, -2])).tolist() == [1, -2]
  for dt in ("bool", "uint8", "int8", "int32", "int64", "float16", "float32", "float64"):
    assert Tensor([1], dtype=dt).is_signed() == torch.tensor([1], dtype=getattr(torch, dt)).is_signed(), dt
    assert Tensor([1], dtype=dt).is_complex() is False

# ---- splits, selections, transposes and diagonal embeddings ----

SHAPES: list[tuple[str, list[Any], Callable[..., Any], Any, dict[str, Any]]] = [
  ("tensor_split_sections", [(7, 3)], lambda x: x.tensor_split(3), None, {}),
  ("tensor_split_more_than_size", [(2, 3)], lambda x: x.tensor_split(4, dim=1), None, {}),
  ("tensor_split_indices", [(8,)], lambda x: x.tensor_split([2, 5]), None, {}),
  ("tensor_split_odd_indices", [(6, 2)], lambda x: x.tensor_split([-2, 1, 9]), None, {}),
  ("tensor_split_dim", [(2, 5, 3)], lambda x: x.tensor_split((1, 3), dim=-2), None, {}),
  ("hsplit", [(3, 6)], lambda x: x.hsplit(3), None, {}),
  ("hsplit_1d", [(6,)], lambda x: x.hsplit([1, 4]), None, {}),
  ("vsplit", [(4, 3)], lambda x: x.vsplit([1]), None, {}),
  ("dsplit", [(2, 2, 4)], lambda x: x.dsplit(2), None, {}),
  ("select", [(3, 4, 5)], lambda x: x.select(1, 2), None, {}),
  ("select_negative", [(3, 4)], lambda x: x.select(-1, -1), None, {}),
  ("fliplr", [(3, 4, 2)], lambda x: x.fliplr(), None, {}),
  ("flipud", [(3, 4)], lambda x: x.flipud(), None, {}),
  ("mT", [(2, 3, 4)], lambda x: x.mT, None, {}),
  ("mH", [(3, 4)], lambda x: x.mH, None, {}),
  ("H", [(3, 4)], lambda x: x.H, None, {}),
  ("adjoint", [(2, 3, 4)], lambda x: x.adjoint(), None, {}),
  ("diagflat", [(2, 3)], lambda x: x.diagflat(), None, {}),
  ("diagflat_offset", [(3,)], lambda x: x.diagflat(-2), None, {}),
  ("diag_embed", [(2, 3)], lambda x: x.diag_embed(), None, {}),
  ("diag_embed_offset", [(2, 3)], lambda x: x.diag_embed(2), None, {}),
  ("diag_embed_dims", [(2, 3, 4)], lambda x: x.diag_embed(-1, 0, 2), None, {}),
  ("diag_embed_dims_swapped", [(2, 3)], lambda x: x.diag_embed(1, 2, 0), None, {}),
  ("diag_embed_int", [np.array([[1, 2], [3, 4]], np.int32)], lambda x: x.diag_embed(), None, {}),
]

@needs_torch
@pytest.mark.parametrize("name,shapes,fn,torch_fn,kw", named(SHAPES))
def test_shapes_match_torch(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any,
                            kw: dict[str, Any]) -> None:
  check_op(shapes, fn, torch_fn=torch_fn, **kw)

def test_shapes_are_views() -> None:
  x = Tensor.arange(12).reshape(3, 4).contiguous().realize()
  sel, col = x.select(0, 1), x.tensor_split(2, dim=1)[1]
  x.assign(x * 10).realize()
  assert sel.tolist() == [40, 50, 60, 70] and col.tolist() == [[20, 30], [60, 70], [100, 110]]

# ---- take and the index_* family ----

IDX = np.array([[0, -1], [5, 2]], np.int64)
TAKE_PUT: list[tuple[str, list[Any], Callable[..., Any], Any, dict[str, Any]]] = [
  ("take", [(2, 3), IDX], lambda x, i: x.take(i), None, {}),
  ("take_along_dim", [(3, 4), np.array([[0, 3], [-1, 1], [2, 2]], np.int64)], lambda x, i: x.take_along_dim(i, 1),
   None, {}),
  ("take_along_dim_broadcast", [(3, 1, 4), np.array([[[0], [3]]], np.int64)], lambda x, i: x.take_along_dim(i, -1),
   None, {}),
  ("take_along_dim_flat", [(3, 4), np.array([[11, 0]], np.int64)], lambda x, i: x.take_along_dim(i), None, {}),
  ("index_fill", [(3, 4), np.array([0, -1], np.int64)], lambda x, i: x.index_fill(1, i, -2.5), None, {}),
  ("index_fill_tensor_value", [(3, 4), np.array([1], np.int64), np.array(7.0, np.float32)],
   lambda x, i, v: x.index_fill(0, i, v), None, {}),
  ("index_fill_0d_index", [(3, 4), np.array(2, np.int64)], lambda x, i: x.index_fill(0, i, 1.0), None, {}),
  ("index_copy", [(4, 3), np.array([3, 0], np.int64), (2, 3)], lambda x, i, s: x.index_copy(0, i, s), None, {}),
  ("index_copy_dim1", [(2, 5), np.array([4, 1, 2], np.int64), (2, 3)], lambda x, i, s: x.index_copy(1, i, s), None,
   {}),
  ("index_add", [(4, 3), np.array([3, 0, 3], np.int64), (3, 3)], lambda x, i, s: x.index_add(0, i, s, alpha=2.0),
   None, {}),
  ("index_put", [(3, 4), np.array([0, 2, -1], np.int64), np.array([1, 3, 0], np.int64), (3,)],
   lambda x, i, j, v: x.index_put((i, j), v), None, {}),
  ("index_put_accumulate", [(3, 4), np.array([0, 0, 2, 0], np.int64), np.array([1, 1, 3, 1], np.int64), (4,)],
   lambda x, i, j, v: x.index_put((i, j), v, accumulate=True), None, {}),
  ("index_put_rows_broadcast", [(4, 3), np.array([[1], [3]], np.int64), (3,)],
   lambda x, i, v: x.index_put((i,), v), None, {}),
  ("index_put_broadcast_indices", [(3, 4, 2), np.array([[0], [2]], np.int64), np.array([1, 3], np.int64), (2,)],
   lambda x, i, j, v: x.index_put([i, j], v, True), None, {}),
  ("put", [(3, 4), np.array([[0, -1], [5, 2]], np.int64), (2, 2)], lambda x, i, v: x.put(i, v), None, {}),
  ("put_accumulate", [(3, 4), np.array([0, 0, 11, -1], np.int64), (4,)], lambda x, i, v: x.put(i, v, True), None, {}),
  *[(f"index_reduce_{r}_{inc}", [(4, 3), np.array([3, 0, 3], np.int64), (3, 3)],
     lambda x, i, s, r=r, inc=inc: x.index_reduce(0, i, s, r, include_self=inc), None, {})
    for r in ("prod", "mean", "amax", "amin") for inc in (True, False)],
  ("index_reduce_dim1_int", [np.arange(8, dtype=np.int64).reshape(2, 4), np.array([1, 1, 3], np.int64),
                             np.array([[5, 2, 9], [1, 7, 0]], np.int64)],
   lambda x, i, s: x.index_reduce(1, i, s, "mean"), None, {}),
  ("select_scatter", [(3, 4), (3,)], lambda x, s: x.select_scatter(s, 1, -2), None, {}),
  ("slice_scatter", [(6, 2), (2, 2)], lambda x, s: x.slice_scatter(s, 0, 1, None, 3), None, {}),
  ("slice_scatter_dim1", [(2, 5), (2, 2)], lambda x, s: x.slice_scatter(s, dim=1, start=-2), None, {}),
  ("masked_scatter", [(3, 4), np.random.default_rng(1).random((3, 4)) < 0.5, (20,)],
   lambda x, m, s: x.masked_scatter(m, s), None, {}),
  ("masked_scatter_broadcast", [(3, 4), np.array([True, False, False, True]), (2, 4)],
   lambda x, m, s: x.masked_scatter(m, s), None, {}),
  ("masked_scatter_int", [np.arange(6, dtype=np.int32), np.array([False, True, True, False, True, False]),
                          np.array([7, 8, 9], np.int32)], lambda x, m, s: x.masked_scatter(m, s), None, {}),
]

@needs_torch
@pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta")
@pytest.mark.parametrize("name,shapes,fn,torch_fn,kw", named(TAKE_PUT))
def test_take_put_match_torch(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any,
                              kw: dict[str, Any]) -> None:
  check_op(shapes, fn, torch_fn=torch_fn, **kw)

# ---- statistics and products ----

STATS: list[tuple[str, list[Any], Callable[..., Any], Any, dict[str, Any]]] = [
  ("cov", [(3, 6)], lambda x: x.cov(), None, {}),
  ("cov_1d", [(6,)], lambda x: x.cov(), None, {}),
  ("cov_correction0", [(2, 5)], lambda x: x.cov(correction=0), None, {}),
  ("cov_weights", [(3, 5), np.array([1, 2, 1, 3, 1], np.int64), np.array([0.5, 1.0, 0.2, 0.7, 0.9], np.float32)],
   lambda x, f, a: x.cov(fweights=f, aweights=a), None, {"atol": 1e-4}),
  ("cov_int", [np.array([[1, 5, 2], [0, 3, 9]], np.int64)], lambda x: x.cov(), None, {}),
  ("cov_float64", [(2, 7)], lambda x: x.cov(), None, {"dtype": dtypes.float64}),
  ("corrcoef", [(3, 8)], lambda x: x.corrcoef(), None, {}),
  ("corrcoef_1d", [(5,)], lambda x: x.corrcoef(), None, {}),
  ("histc", [(50,)], lambda x: x.histc(bins=7), None, {"grad": False}),
  ("histc_range", [(4, 10)], lambda x: x.histc(bins=4, min=-1, max=1), None, {"grad": False}),
  ("histc_constant", [np.full(5, 2.0, np.float32)], lambda x: x.histc(bins=3), None, {"grad": False}),
  ("histc_float64", [(30,)], lambda x: x.histc(bins=5, min=-3, max=0.5), None, {"dtype": dtypes.float64,
                                                                               "grad": False}),
  ("histogram", [(40,)], lambda x: x.histogram(6), lambda x: tuple(torch.histogram(x, 6)), {"grad": False}),
  ("histogram_range_weight_density", [(5, 8), (5, 8)],
   lambda x, w: x.histogram(4, range=(-1.0, 1.5), weight=w.abs(), density=True),
   lambda x, w: tuple(torch.histogram(x, 4, range=(-1.0, 1.5), weight=w.abs(), density=True)), {"grad": False}),
  ("histogram_constant", [np.full(3, 2.0, np.float32)], lambda x: x.histogram(2),
   lambda x: tuple(torch.histogram(x, 2)), {"grad": False}),
  ("mode", [np.array([[1, 2, 2, 3, 3], [5, 5, 4, 4, 1], [7, 7, 7, 0, 0]], np.int64)], lambda x: x.mode(),
   lambda x: tuple(x.mode()), {}),
  ("mode_dim0_keepdim", [np.random.default_rng(2).integers(0, 3, (9, 4)).astype(np.float32)],
   lambda x: x.mode(0, keepdim=True), lambda x: tuple(x.mode(0, keepdim=True)), {}),
  ("nanmedian", [NAN_ROWS], lambda x: x.nanmedian(), None, {}),
  ("nanmedian_dim", [NAN_ROWS], lambda x: x.nanmedian(dim=1, return_indices=True), lambda x: tuple(x.nanmedian(1)),
   {}),
  ("nanmedian_keepdim", [(4, 5)], lambda x: x.nanmedian(0, keepdim=True), lambda x: x.nanmedian(0, True).values,
   {}),
  ("nanmedian_int", [np.array([[4, 1, 3], [2, 9, 9]], np.int32)], lambda x: x.nanmedian(1),
   lambda x: x.nanmedian(1).values, {}),
  ("nanquantile", [NAN_ROWS], lambda x: x.nanquantile(0.3, dim=1), None, {}),
  ("nanquantile_all", [NAN_ROWS], lambda x: x.nanquantile([0.0, 0.5, 1.0]),
   lambda x: x.nanquantile(torch.tensor([0.0, 0.5, 1.0])), {}),
  ("nanquantile_keepdim", [(3, 6)], lambda x: x.nanquantile(0.7, dim=0, keepdim=True), None, {}),
  *[(f"nanquantile_{m}", [NAN_ROWS], lambda x, m=m: x.nanquantile([0.2, 0.9], -1, interpolation=m),
     lambda x, m=m: x.nanquantile(torch.tensor([0.2, 0.9]), -1, interpolation=m), {})
    for m in ("lower", "higher", "nearest", "midpoint")],
  ("msort", [(4, 3)], lambda x: x.msort(), None, {}),
  ("aminmax", [(3, 4)], lambda x: x.aminmax(), lambda x: tuple(x.aminmax()), {"grad": False}),
  ("aminmax_dim", [(3, 4)], lambda x: x.aminmax(dim=1, keepdim=True), lambda x: tuple(x.aminmax(dim=1, keepdim=True)),
   {"grad": False}),
  ("unique_consecutive", [np.array([1, 1, 2, 2, 3, 1, 1, 2], np.int64)], lambda x: x.unique_consecutive(), None, {}),
  ("unique_consecutive_all", [np.array([[1, 1, 2], [2, 3, 3]], np.float32)],
   lambda x: x.unique_consecutive(return_inverse=True, return_counts=True),
   lambda x: tuple(x.unique_consecutive(return_inverse=True, return_counts=True)), {"grad": False}),
  ("kron", [(2, 3), (3, 2)], lambda a, b: a.kron(b), None, {}),
  ("kron_ranks", [(2,), (2, 3, 2)], lambda a, b: a.kron(b), None, {}),
  ("kron_int", [np.array([[1, 2]], np.int32), np.array([[1], [10]], np.int64)], lambda a, b: a.kron(b), None, {}),
  ("inner", [(2, 3, 4), (5, 4)], lambda a, b: a.inner(b), None, {}),
  ("inner_1d", [(4,), (4,)], lambda a, b: a.inner(b), None, {}),
  ("inner_0d", [(), (3,)], lambda a, b: a.inner(b), None, {}),
]

@needs_torch
@pytest.mark.parametrize("name,shapes,fn,torch_fn,kw", named(STATS))
def test_stats_match_torch(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any,
                           kw: dict[str, Any]) -> None:
  check_op(shapes, fn, torch_fn=torch_fn, **kw)

@needs_torch
def test_equal_matches_torch() -> None:
  pairs = [([1.0, 2.0], [1.0, 2.0]), ([1, 2], [1.0, 2.0]), ([1.0, float("nan")], [1.0, float("nan")]),
           ([1, 2], [[1, 2]]), ([1, 2], [1, 3]), ([], [])]
  for a, b in pairs: assert Tensor(a).equal(Tensor(b)) == torch.tensor(a).equal(torch.tensor(b)), (a, b)
  raises_at_build(TypeError, lambda: lazy(2).equal([1, 2]), "equal", "list")

def test_bernoulli() -> None:
  assert Tensor([0.0, 1.0, 0.0, 1.0]).bernoulli().tolist() == [0.0, 1.0, 0.0, 1.0]
  Tensor.manual_seed(0)
  draws = Tensor.full((20000,), 0.3).bernoulli()
  assert draws.dtype == dtypes.float32 and abs(draws.mean().item() - 0.3) < 0.015
  assert Tensor.zeros(4, dtype="float16").bernoulli(1.0).dtype == dtypes.float16
  assert set(Tensor.zeros(1000).bernoulli(0.5).numpy().tolist()) == {0.0, 1.0}
  raises_at_build(TypeError, lambda: Tensor([1, 0]).bernoulli(), "bernoulli", "int64")
  raises_at_build(ValueError, lambda: lazy(3).bernoulli(1.5), "bernoulli", "1.5")

def test_unique_consecutive_with_size_needs_no_sync() -> None:
  values, counts = Tensor([5, 5, 1, 1, 1, 5]).unique_consecutive(return_counts=True, size=5, fill_value=-1)
  assert values.tolist() == [5, 1, 5, -1, -1] and counts.tolist() == [2, 3, 1, 0, 0]
  assert Tensor([], dtype=I64).unique_consecutive(size=2).tolist() == [0, 0]

def test_histc_is_a_scatter() -> None:
  # bins computed and scattered: a fill and a scatter kernel after the bins, not a (n, bins) comparison
  from lazytensor import GlobalCounters
  x = Tensor(np.random.default_rng(0).uniform(0, 1, 4096).astype(np.float32)).realize()
  GlobalCounters.reset()
  out = x.histc(10, 0, 1).numpy()
  assert out.sum() == 4096 and GlobalCounters.kernel_count <= 3

STATS_ON_ANY_DEVICE: list[tuple[str, Callable[[Tensor], Any]]] = [
  ("cov", lambda t: t.cov()), ("histc", lambda t: t.histc(4, 0, 4)), ("histc of its range", lambda t: t.histc(4)),
  ("histc of nothing", lambda t: t[:0].histc(4)),
  ("mode", lambda t: t.mode(1)), ("unique_consecutive", lambda t: t[0].unique_consecutive(return_counts=True)),
  ("select_scatter", lambda t: t.select_scatter(t[0] * 2, 1, 1))]

@pytest.mark.parametrize("name,fn", STATS_ON_ANY_DEVICE, ids=[n for n, _ in STATS_ON_ANY_DEVICE])
def test_statistics_stay_on_the_inputs_device(name: str, fn: Callable[[Tensor], Any]) -> None:
  """The constants they make (counts, bounds, fills) go to the input's device, not the default one, which was a
  device mismatch for a tensor on CPU:1."""
  x = Tensor([[1.0, 1.0, 3.0], [2.0, 0.0, 2.0], [1.0, 3.0, 3.0]])
  want, got = fn(x), fn(x.to("CPU:1"))
  for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
    assert g.device == "CPU:1" and g.tolist() == w.tolist()

# ---- autograd conveniences and memory layout ----

@needs_torch
def test_hooks_and_retained_grads_match_torch() -> None:
  def run(make: Callable[[list[float]], Any]) -> list[Any]:
    w, seen = make([1.0, -2.0, 0.5]), []
    h = w * 2
    h.register_hook(lambda g: seen.append(g.tolist()) or g * 3)  # a non-leaf's hook changes what flows on
    h.retain_grad()
    y = h.exp()
    y.retain_grad()
    handle = w.register_hook(lambda g: g + 1)  # a leaf's hook changes its .grad
    (y * y).sum().backward()
    out = [w.grad.tolist(), h.grad.tolist(), y.grad.tolist(), seen, w.is_leaf, h.is_leaf, h.retains_grad]
    handle.remove()
    w.grad = None
    (w * 1).sum().backward()
    return [*out, w.grad.tolist()]
  ours, theirs = run(lambda v: Tensor(v, requires_grad=True)), run(lambda v: torch.tensor(v, requires_grad=True))
  for a, b in zip(ours, theirs): np.testing.assert_allclose(np.array(a, float), np.array(b, float), rtol=1e-5)

def test_hooks_apply_to_gradient_and_check_what_they_return() -> None:
  w = Tensor([1.0, 2.0], requires_grad=True)
  w.register_hook(lambda g: g.clamp(max=1.5))
  assert (w * w).sum().gradient(w)[0].tolist() == [1.5, 1.5]
  bad = Tensor([1.0, 2.0], requires_grad=True)
  bad.register_hook(lambda g: g.sum())
  with pytest.raises(ValueError, match=r"register_hook: a hook returned \(\); expected None or a Tensor of .*\(2,\)"):
    (bad * 2).sum().backward()

def test_is_leaf() -> None:
  w = Tensor([1.0], requires_grad=True)
  assert w.is_leaf and not (w * 2).is_leaf and Tensor([1.0]).is_leaf and (Tensor([1.0]) * 2).is_leaf
  assert not (w * 2).realize().is_leaf and w.detach().is_leaf

@needs_torch
def test_is_contiguous_matches_torch() -> None:
  cases: list[Callable[[Any], Any]] = [lambda x: x, lambda x: x.T, lambda x: x[1:], lambda x: x[:, :2],
                                       lambda x: x[:, ::2], lambda x: x[0], lambda x: x[:, 0], lambda x: x + 1,
                                       lambda x: (x + 1).T, lambda x: x.reshape(3, 2), lambda x: x.unsqueeze(0).expand(
                                         2, 2, 3), lambda x: x.flip(0), lambda x: x.T.contiguous()]
  for fn in cases:
    assert fn(Tensor([[1.0, 2, 3], [4, 5, 6]])).is_contiguous() == fn(torch.tensor([[1.0, 2, 3], [4, 5, 6]])) \
      .is_contiguous(), inspect.getsource(fn)

# ---- bad inputs ----

def test_errors() -> None:
  raises_at_build(ValueError, lambda: lazy(4).tensor_split(0), "tensor_split", "0")
  raises_at_build(TypeError, lambda: lazy(4).tensor_split(1.5), "tensor_split", "1.5")
  raises_at_build(ValueError, lambda: Tensor(1.0).tensor_split(1), "tensor_split", "0-d")
  raises_at_build(ValueError, lambda: lazy(3, 5).hsplit(2), "hsplit", "5", "2")
  raises_at_build(ValueError, lambda: lazy(4).vsplit(2), "vsplit", "(4,)")
  raises_at_build(ValueError, lambda: lazy(2, 4).dsplit(2), "dsplit", "(2, 4)")
  raises_at_build(IndexError, lambda: lazy(2, 3).select(1, 3), "select", "3", "size 3")
  raises_at_build(TypeError, lambda: lazy(2, 3).select(0, 0.5), "select", "0.5")
  raises_at_build(ValueError, lambda: lazy(3).fliplr(), "fliplr", "(3,)")
  raises_at_build(ValueError, lambda: lazy(3).mT, "mT", "(3,)")
  raises_at_build(ValueError, lambda: lazy(2, 2, 2).H, "H", "(2, 2, 2)")
  raises_at_build(ValueError, lambda: lazy(2, 3).diag_embed(0, 1, -2), "diag_embed", "dim 1")
  raises_at_build(TypeError, lambda: lazy(3).diagflat(0.5), "diagflat", "0.5")
  raises_at_build(TypeError, lambda: lazy(3).take(Tensor([0.5])), "take", "float32")
  raises_at_build(ValueError, lambda: lazy(3, 4).take_along_dim(Tensor([0]), 1), "take_along_dim", "(1,)", "(3, 4)")
  raises_at_build(ValueError, lambda: lazy(3, 4).index_copy(0, Tensor([0]), lazy(2, 4)), "index_copy", "(1, 4)")
  raises_at_build(ValueError, lambda: lazy(3, 4).index_fill(0, Tensor([[0]]), 1.0), "index_fill", "(1, 1)")
  raises_at_build(TypeError, lambda: lazy(3, 4).index_put((Tensor([0]),), Tensor([1])), "index_put", "int64")
  raises_at_build(TypeError, lambda: lazy(3, 4).index_put(Tensor([0]), 1.0), "index_put", "tuple")
  raises_at_build(ValueError, lambda: lazy(3, 4).index_put((Tensor([0, 1]),), lazy(3, 4)), "index_put", "(3, 4)",
                  "(2, 4)")
  raises_at_build(ValueError, lambda: lazy(3, 4).put(Tensor([0, 1]), lazy(3)), "put", "(2)", "(3,)")
  raises_at_build(ValueError, lambda: lazy(3).index_reduce(0, Tensor([0]), lazy(1), "sum"), "index_reduce", "sum")
  raises_at_build(IndexError, lambda: lazy(3, 4).select_scatter(lazy(3), 1, 4), "select_scatter", "4", "size 4")
  raises_at_build(ValueError, lambda: lazy(3, 4).select_scatter(lazy(4), 1, 0), "select_scatter", "(3,)", "(4,)")
  raises_at_build(ValueError, lambda: lazy(6).slice_scatter(lazy(2), 0, 0, 6, 2), "slice_scatter", "(3,)", "(2,)")
  raises_at_build(ValueError, lambda: lazy(6).slice_scatter(lazy(2), step=0), "slice_scatter", "step", "0")
  raises_at_build(ValueError, lambda: lazy(6).histogram(3, weight=lazy(5)), "histogram", "(6,)", "(5,)")
  raises_at_build(ValueError, lambda: lazy(6).histogram(3, range=(1.0,)), "histogram", "(1.0,)")
  raises_at_build(TypeError, lambda: lazy(3).masked_scatter(Tensor([1, 0, 1]), lazy(3)), "masked_scatter", "int64")
  raises_at_build(ValueError, lambda: lazy(3).masked_scatter(Tensor([True, False]), lazy(3)), "masked_scatter",
                  "(2,)", "(3,)")
  raises_at_build(ValueError, lambda: lazy(2, 2, 2).cov(), "cov", "(2, 2, 2)")
  raises_at_build(ValueError, lambda: lazy(2, 3).cov(fweights=Tensor([1.0, 2.0, 1.0])), "fweights", "float32")
  raises_at_build(ValueError, lambda: lazy(5).histc(bins=0), "histc", "0")
  raises_at_build(ValueError, lambda: lazy(5).histc(min=2, max=1), "histc", "(2, 1)")
  raises_at_build(TypeError, lambda: Tensor([1, 2]).histc(), "histc", "int64")
  raises_at_build(TypeError, lambda: lazy(5).nanquantile(1.5), "nanquantile", "1.5")
  raises_at_build(ValueError, lambda: lazy(5).nanquantile(0.5, interpolation="cubic"), "nanquantile", "cubic")
  raises_at_build(ValueError, lambda: lazy(0, 3).nanmedian(0), "nanmedian", "(0, 3)")
  raises_at_build(ValueError, lambda: lazy(2, 0).mode(), "mode", "(2, 0)")
  raises_at_build(NotSupportedError, lambda: lazy(4).unique_consecutive(dim=0), "unique_consecutive", "dim=0")
  raises_at_build(ValueError, lambda: lazy(2, 3).inner(lazy(4)), "inner", "3 != 4")
  raises_at_build(TypeError, lambda: lazy(2).kron([1, 2]), "kron", "list")
  raises_at_build(TypeError, lambda: Tensor([True]).positive(), "positive", "bool")
  raises_at_build(ValueError, lambda: Tensor([1.0]).retain_grad(), "retain_grad")
  raises_at_build(ValueError, lambda: Tensor([1.0]).register_hook(print), "register_hook")
  raises_at_build(TypeError, lambda: Tensor([1.0], requires_grad=True).register_hook(3), "register_hook", "int")
