"""The torch and tinygrad API that users reach for every day, added on top of the core ops: shape conveniences
(expand_as, tile, movedim, unbind, pixel_shuffle, ...), elementwise and special functions (nan_to_num, hypot, logit,
xlogy, glu, ...), reductions and products (amax, median, norm, diff, outer, bmm, cross, ...), isin, adaptive pooling,
distances and regression losses, and the layers and optimizers (Conv3d, ConvTranspose1d, LayerNorm2d, LARS,
OptimizerGroup). Each against torch (values, dtypes and gradients through check_op), plus the bad inputs users make.
"""
import collections
import math
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, check_op, named, torch
from test_errors import lazy, raises_at_build
from test_optim import W0, X, _run_ours, _run_torch

from lazytensor import GlobalCounters, Tensor, TinyJit, dtypes, nn
from lazytensor.nn import lr_scheduler as sched
from lazytensor.nn.optim import LARS, SGD, Adam, Muon, OptimizerGroup, newton_schulz

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="compares against torch")
F = torch.nn.functional if HAVE_TORCH else None
F16, F64 = dtypes.float16, dtypes.float64

SPECIAL = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5], [-2.5, 3e38, -3e38, 1e-30, np.nan, 7.0]], np.float32)
with np.errstate(over="ignore"): SPECIAL16 = SPECIAL.astype(np.float16)  # +-3e38 become +-inf

# ---- shape conveniences: views named after another tensor, tiles, moved dims, slices ----

MOVEMENT: list[tuple[str, list[Any], Callable[..., Any], Any]] = [
  ("expand_as", [(3, 1), (2, 3, 4)], lambda x, y: x.expand_as(y), None),
  ("reshape_as", [(2, 6), (3, 4)], lambda x, y: x.reshape_as(y), None),
  ("view_as", [(12,), (2, 2, 3)], lambda x, y: x.view_as(y), None),
  ("tile_fewer_dims", [(2, 3)], lambda x: x.tile(2), None),
  ("tile_more_dims", [(2, 3)], lambda x: x.tile(2, 1, 3), None),
  ("tile_tuple", [(2, 1, 3)], lambda x: x.tile((1, 2, 2)), None),
  ("movedim", [(2, 3, 4, 5)], lambda x: x.movedim(0, -1), None),
  ("movedim_several", [(2, 3, 4, 5)], lambda x: x.movedim((0, 3), (1, 0)), None),
  ("moveaxis", [(2, 3, 4)], lambda x: x.moveaxis(-1, 0), None),
  ("t", [(3, 4)], lambda x: x.t(), None),
  ("t_1d", [(3,)], lambda x: x.t(), None),
  ("rot90", [(3, 4)], lambda x: x.rot90(), None),
  ("rot90_k2", [(3, 4)], lambda x: x.rot90(2), None),
  ("rot90_k3_dims", [(2, 3, 4)], lambda x: x.rot90(3, (2, 0)), None),
  ("rot90_negative", [(2, 3, 4)], lambda x: x.rot90(-1, (1, 2)), None),
  ("rot90_k4", [(2, 3)], lambda x: x.rot90(4), None),
  ("narrow", [(4, 6)], lambda x: x.narrow(1, 2, 3), None),
  ("narrow_negative_start", [(5,)], lambda x: x.narrow(0, -3, 2), None),
  ("unbind", [(3, 4)], lambda x: x.unbind(1), None),
  ("unbind_0", [(2, 3, 2)], lambda x: x.unbind(), None),
  ("pixel_shuffle", [(2, 8, 3, 5)], lambda x: x.pixel_shuffle(2), lambda x: F.pixel_shuffle(x, 2)),
  ("pixel_shuffle_3d_input", [(9, 2, 2)], lambda x: x.pixel_shuffle(3), lambda x: F.pixel_shuffle(x, 3)),
  ("pixel_unshuffle", [(2, 3, 4, 6)], lambda x: x.pixel_unshuffle(2), lambda x: F.pixel_unshuffle(x, 2)),
  ("pixel_unshuffle_5d", [(2, 1, 2, 3, 3)], lambda x: x.pixel_unshuffle(3), lambda x: F.pixel_unshuffle(x, 3)),
]

@needs_torch
@pytest.mark.parametrize("name,shapes,fn,torch_fn", named(MOVEMENT))
def test_movement_matches_torch(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any) -> None:
  check_op(shapes, fn, torch_fn=torch_fn)

def test_pixel_shuffle_round_trip_is_views_only() -> None:
  x = Tensor(np.arange(2 * 12 * 2 * 3, dtype=np.float32).reshape(2, 12, 2, 3)).realize()
  GlobalCounters.reset()
  y = x.pixel_shuffle(2).pixel_unshuffle(2)
  assert y.shape == x.shape and GlobalCounters.kernel_count == 0
  np.testing.assert_array_equal(y.numpy(), x.numpy())

def test_movement_errors() -> None:
  raises_at_build(TypeError, lambda: lazy(2, 3).expand_as((2, 3)), "expand_as", "tuple")
  raises_at_build(ValueError, lambda: lazy(2, 3).expand_as(lazy(3, 3)), "expand")
  raises_at_build(ValueError, lambda: lazy(2, 3).reshape_as(lazy(4, 2)), "reshape")
  raises_at_build(ValueError, lambda: lazy(2, 3).movedim((0, 1), 0), "movedim", "(0, 1)")
  raises_at_build(ValueError, lambda: lazy(2, 3).movedim((0, 0), (0, 1)), "movedim", "repeat")
  raises_at_build(IndexError, lambda: lazy(2, 3).movedim(2, 0), "axis 2")
  raises_at_build(IndexError, lambda: lazy(2, 3).narrow(1, 4, 0), "narrow", "start 4")
  raises_at_build(ValueError, lambda: lazy(2, 3).narrow(1, 1, 3), "narrow", "length 3")
  raises_at_build(ValueError, lambda: Tensor(1.0).unbind(), "unbind", "0-d")
  raises_at_build(ValueError, lambda: Tensor(1.0).narrow(0, 0, 1), "narrow", "0-d")
  raises_at_build(ValueError, lambda: lazy(2, 3, 4).t(), "t:", "(2, 3, 4)")
  raises_at_build(ValueError, lambda: lazy(2, 3).rot90(1, (0, 0)), "rot90", "(0, 0)")
  raises_at_build(ValueError, lambda: lazy(2, 3).rot90(1, (0,)), "rot90", "2 dims")
  raises_at_build(TypeError, lambda: lazy(2, 3).rot90(1.5), "rot90", "1.5")
  raises_at_build(ValueError, lambda: lazy(1, 6, 2, 2).pixel_shuffle(2), "pixel_shuffle", "(1, 6, 2, 2)")
  raises_at_build(ValueError, lambda: lazy(1, 4, 2, 2).pixel_shuffle(0), "upscale_factor", "0")
  raises_at_build(ValueError, lambda: lazy(1, 1, 3, 4).pixel_unshuffle(2), "pixel_unshuffle", "(1, 1, 3, 4)")
  raises_at_build(ValueError, lambda: lazy(3, 4).pixel_unshuffle(2), "pixel_unshuffle")

# ---- elementwise and special functions ----

ELEMENTWISE: list[tuple[str, list[Any], Callable[..., Any], Any, dict[str, Any]]] = [
  ("type_as", [(2, 3), np.array([1, 2], np.int32)], lambda x, y: x.type_as(y), None, {"grad": False}),
  ("type_as_float", [np.array([1, 2], np.int64), (3,)], lambda x, y: x.type_as(y), None, {}),
  ("short", [(3, 4)], lambda x: x.short(), None, {"low": -300.0, "high": 300.0, "grad": False}),
  ("addcmul", [(3, 4), (3, 4), (4,)], lambda x, a, b: x.addcmul(a, b, value=0.5), None, {}),
  ("addcmul_broadcast_all", [(1, 4), (3, 1), (4,)], lambda x, a, b: x.addcmul(a, b), None, {}),
  ("addcdiv", [(3, 4), (3, 4), (3, 4)], lambda x, a, b: x.addcdiv(a, b, value=-2.0), None, {"low": 0.5}),
  ("clamp_min", [(3, 4)], lambda x: x.clamp_min(0.5), None, {}),
  ("clamp_max", [(3, 4)], lambda x: x.clamp_max(-0.25), None, {}),
  ("clamp_min_tensor", [(3, 4), (4,)], lambda x, m: x.clamp_min(m), None, {}),
  ("clamp_max_int", [np.array([-3, 0, 5, 9], np.int64)], lambda x: x.clamp_max(4), None, {}),
  ("nan_to_num", [SPECIAL], lambda x: x.nan_to_num(), None, {}),
  ("nan_to_num_values", [SPECIAL], lambda x: x.nan_to_num(1.0, 2.0, -3.0), None, {}),
  ("nan_to_num_only_nan", [SPECIAL], lambda x: x.nan_to_num(nan=-1.0), None, {}),
  ("nan_to_num_float16", [SPECIAL16], lambda x: x.nan_to_num(), None, {}),
  ("nan_to_num_float64", [SPECIAL.astype(np.float64)], lambda x: x.nan_to_num(posinf=1e300), None, {}),
  ("nan_to_num_int", [np.array([1, -2, 3], np.int32)], lambda x: x.nan_to_num(), None, {}),
  ("nan_to_num_grad", [(3, 4)], lambda x: (x / (x > 0)).nan_to_num(), None, {}),
  ("hypot", [(3, 4), (3, 4)], lambda x, y: x.hypot(y), None, {}),
  ("hypot_broadcast", [(3, 1), (4,)], lambda x, y: x.hypot(y), None, {}),
  ("hypot_huge_and_tiny", [np.array([3e30, 3e-30, 1e38, -2.0], np.float32), np.array([4e30, -4e-30, 1e38, 0.0],
                                                                                       np.float32)],
   lambda x, y: x.hypot(y), None, {}),
  ("hypot_special", [SPECIAL, SPECIAL[::-1].copy()], lambda x, y: x.hypot(y), None, {}),
  ("hypot_float16", [(3, 4), (3, 4)], lambda x, y: x.hypot(y), None, {"dtype": F16}),
  ("hypot_scalar", [(5,)], lambda x: x.hypot(2.0), lambda x: x.hypot(torch.tensor(2.0)), {}),
  ("logit", [(3, 4)], lambda x: x.logit(), None, {"low": 0.05, "high": 0.95}),
  ("logit_eps", [(3, 4)], lambda x: x.logit(eps=0.2), None, {"low": 0.0, "high": 1.0}),
  ("logit_edges", [np.array([0.0, 1.0, 0.5, 1e-6, 1 - 1e-6], np.float32)], lambda x: x.logit(), None, {}),
  # outside [0, 1] the value is NaN, and torch's gradient NaN by decree: only the values are compared
  ("logit_outside", [np.array([-0.5, 2.0, np.nan], np.float32)], lambda x: x.logit(), None, {"grad": False}),
  ("logit_float16", [(6,)], lambda x: x.logit(), None, {"low": 0.05, "high": 0.95, "dtype": F16}),
  ("xlogy", [(3, 4), (3, 4)], lambda x, y: x.xlogy(y), None, {"low": 0.1, "high": 3.0}),
  ("xlogy_broadcast", [(3, 1), (4,)], lambda x, y: x.xlogy(y), None, {"low": 0.1, "high": 3.0}),
  ("xlogy_zeros_and_nan", [np.array([0.0, 0.0, 0.0, 2.0, np.nan, 1.0], np.float32),
                           np.array([0.0, np.inf, np.nan, 0.0, 1.0, -1.0], np.float32)],
   lambda x, y: x.xlogy(y), None, {}),
  ("glu", [(3, 8)], lambda x: x.glu(), lambda x: F.glu(x), {}),
  ("glu_dim0", [(4, 3)], lambda x: x.glu(0), lambda x: F.glu(x, 0), {}),
]

@needs_torch
@pytest.mark.parametrize("name,shapes,fn,torch_fn,kw", named(ELEMENTWISE))
def test_elementwise_matches_torch(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any,
                                   kw: dict[str, Any]) -> None:
  check_op(shapes, fn, torch_fn=torch_fn, **kw)

@needs_torch
def test_bfloat16_rounds_as_torch() -> None:
  x = np.random.default_rng(3).uniform(-100, 100, 64).astype(np.float32)
  out = Tensor(x).bfloat16()
  assert out.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(out.numpy(), torch.from_numpy(x).bfloat16().float().numpy())

def test_nan_to_num_bfloat16_uses_its_largest_finite() -> None:
  out = Tensor([float("nan"), float("inf"), -float("inf")]).bfloat16().nan_to_num()
  assert out.dtype == dtypes.bfloat16 and out.tolist() == [0.0, 3.3895313892515355e38, -3.3895313892515355e38]

def test_hypot_of_ints_is_float() -> None:
  out = Tensor([3, 5]).hypot(Tensor([4, 12]))
  assert out.dtype == dtypes.float32 and out.tolist() == [5.0, 13.0]

def test_elementwise_errors() -> None:
  raises_at_build(TypeError, lambda: lazy(2).type_as(dtypes.int32), "type_as", "DType")
  raises_at_build(TypeError, lambda: lazy(2).nan_to_num(nan="0"), "nan_to_num", "nan")
  raises_at_build(TypeError, lambda: lazy(2).nan_to_num(posinf=True), "posinf")
  raises_at_build(TypeError, lambda: lazy(2).hypot("a"), "hypot")
  raises_at_build(ValueError, lambda: lazy(2).logit(eps=0.7), "logit", "0.7")
  raises_at_build(ValueError, lambda: lazy(3, 5).glu(), "glu", "(3, 5)")
  raises_at_build(ValueError, lambda: Tensor(1.0).glu(), "glu")

# ---- reductions and products ----

TIES = np.array([[1.0, 3.0, 3.0, -2.0, 3.0], [0.5, -1.0, 0.5, -1.0, 2.0]], np.float32)
MEDIAN_NAN = np.array([[1.0, np.nan, 2.0, np.nan], [3.0, 2.0, 1.0, 0.0], [5.0, 4.0, 6.0, np.nan]], np.float32)

REDUCE: list[tuple[str, list[Any], Callable[..., Any], Any, dict[str, Any]]] = [
  ("amax", [(3, 4, 5)], lambda x: x.amax(), None, {}),
  ("amax_dims", [(3, 4, 5)], lambda x: x.amax(dim=(0, 2), keepdim=True), None, {}),
  ("amin_dim", [(3, 4, 5)], lambda x: x.amin(dim=1), None, {}),
  ("amax_ties_grad", [TIES], lambda x: x.amax(dim=1), None, {}),
  ("amin_ties_grad", [TIES], lambda x: x.amin(dim=0), None, {}),
  ("amax_int", [np.array([[1, 7], [9, -2]], np.int32)], lambda x: x.amax(1), None, {}),
  ("median_all", [(3, 5)], lambda x: x.median(), None, {}),
  ("median_even", [(4, 6)], lambda x: x.median(), None, {}),
  ("median_dim", [(4, 5)], lambda x: x.median(dim=1, return_indices=True), lambda x: tuple(x.median(dim=1)), {}),
  ("median_dim0_keepdim", [(6, 3)], lambda x: x.median(0, keepdim=True, return_indices=True),
   lambda x: tuple(x.median(0, keepdim=True)), {}),
  ("median_int", [np.array([[5, 1, 4, 2], [9, 9, 0, 3]], np.int64)], lambda x: x.median(1), lambda x: x.median(1)[0],
   {}),
  ("median_nan", [MEDIAN_NAN], lambda x: x.median(1, return_indices=True), lambda x: tuple(x.median(1)), {}),
  ("median_nan_all", [MEDIAN_NAN], lambda x: x.median(), None, {}),
  ("quantile", [(3, 7)], lambda x: x.quantile(0.3), None, {}),
  ("quantile_many_dim", [(4, 7)], lambda x: x.quantile([0.1, 0.5, 0.75], dim=1),
   lambda x: x.quantile(torch.tensor([0.1, 0.5, 0.75]), dim=1), {}),
  ("quantile_keepdim", [(5, 3)], lambda x: x.quantile(0.9, dim=0, keepdim=True), None, {}),
  ("quantile_all_keepdim", [(5, 3)], lambda x: x.quantile([0.2], keepdim=True),
   lambda x: x.quantile(torch.tensor([0.2]), keepdim=True), {}),
  ("quantile_nan", [MEDIAN_NAN], lambda x: x.quantile(0.5, dim=1), None, {}),
  ("quantile_float64", [(6,)], lambda x: x.quantile(0.25), None, {"dtype": F64}),
  ("quantile_lower", [(3, 6)], lambda x: x.quantile([0.0, 0.35, 1.0], dim=-1, interpolation="lower"),
   lambda x: x.quantile(torch.tensor([0.0, 0.35, 1.0]), dim=-1, interpolation="lower"), {}),
  ("quantile_higher", [(3, 6)], lambda x: x.quantile([0.0, 0.35, 1.0], dim=-1, interpolation="higher"),
   lambda x: x.quantile(torch.tensor([0.0, 0.35, 1.0]), dim=-1, interpolation="higher"), {}),
  ("quantile_nearest", [(3, 6)], lambda x: x.quantile([0.0, 0.35, 1.0], dim=-1, interpolation="nearest"),
   lambda x: x.quantile(torch.tensor([0.0, 0.35, 1.0]), dim=-1, interpolation="nearest"), {}),
  ("quantile_midpoint", [(3, 6)], lambda x: x.quantile([0.0, 0.35, 1.0], dim=-1, interpolation="midpoint"),
   lambda x: x.quantile(torch.tensor([0.0, 0.35, 1.0]), dim=-1, interpolation="midpoint"), {}),
  ("norm", [(3, 4)], lambda x: x.norm(), None, {}),
  ("norm_dim", [(3, 4, 5)], lambda x: x.norm(dim=1), None, {}),
  ("norm_dims_keepdim", [(3, 4, 5)], lambda x: x.norm(dim=(0, 2), keepdim=True), None, {}),
  ("norm_p1", [(3, 4)], lambda x: x.norm(1, dim=1), None, {}),
  ("norm_p3", [(3, 4)], lambda x: x.norm(3, dim=0), None, {}),
  ("norm_p_half", [(3, 4)], lambda x: x.norm(0.5, dim=1), None, {"low": 0.5, "high": 2.0}),
  ("norm_inf", [(3, 4)], lambda x: x.norm(math.inf, dim=1), None, {}),
  ("norm_neg_inf", [(3, 4)], lambda x: x.norm(-math.inf), None, {}),
  # a count: no gradient here, an all-zero one in torch
  ("norm_p0", [np.array([[0.0, 1.5, -2.0], [0.0, 0.0, 3.0]], np.float32)], lambda x: x.norm(0, dim=1), None,
   {"grad": False}),
  ("norm_fro", [(3, 4)], lambda x: x.norm("fro"), None, {}),
  ("norm_zero_vector_grad", [np.zeros((2, 3), np.float32)], lambda x: x.norm(dim=1), None, {}),
  ("norm_float16", [(4, 6)], lambda x: x.norm(dim=1), None, {"dtype": F16}),
  ("count_nonzero", [np.array([[0, 1, 2], [0, 0, 3]], np.int32)], lambda x: x.count_nonzero(), None, {}),
  ("count_nonzero_dim", [np.array([[0.0, 1.5, -0.0], [np.nan, 0.0, 3.0]], np.float32)],
   lambda x: x.count_nonzero(dim=0), None, {}),
  ("count_nonzero_dims", [np.array([[[True, False]], [[True, True]]])], lambda x: x.count_nonzero(dim=(1, 2)), None,
   {}),
  ("nansum", [MEDIAN_NAN], lambda x: x.nansum(), None, {}),
  ("nansum_dim", [MEDIAN_NAN], lambda x: x.nansum(dim=1, keepdim=True), None, {}),
  ("nansum_grad", [(3, 4)], lambda x: x.nansum(0), None, {}),
  ("nansum_int", [np.array([[1, 2], [3, 4]], np.int32)], lambda x: x.nansum(1), None, {}),
  ("nanmean", [MEDIAN_NAN], lambda x: x.nanmean(1), None, {}),
  ("nanmean_all_nan_row", [np.array([[np.nan, np.nan], [1.0, np.nan]], np.float32)], lambda x: x.nanmean(dim=1),
   None, {}),
  ("nanmean_grad", [(3, 4)], lambda x: x.nanmean((0, 1)), None, {}),
  ("diff", [(3, 6)], lambda x: x.diff(), None, {}),
  ("diff_n2_dim0", [(5, 3)], lambda x: x.diff(2, dim=0), None, {}),
  ("diff_n_past_size", [(3, 2)], lambda x: x.diff(3), None, {}),
  ("diff_prepend_append", [(2, 4), (2, 1), (2, 2)], lambda x, p, a: x.diff(prepend=p, append=a), None, {}),
  ("diff_int", [np.array([1, 4, 9, 16, 25], np.int64)], lambda x: x.diff(2), None, {}),
  ("diff_bool", [np.array([True, False, False, True, True])], lambda x: x.diff(), None, {}),
  ("kthvalue", [(4, 6)], lambda x: x.kthvalue(2), lambda x: tuple(x.kthvalue(2)), {}),
  ("kthvalue_dim0_keepdim", [(5, 3)], lambda x: x.kthvalue(5, 0, keepdim=True),
   lambda x: tuple(x.kthvalue(5, 0, keepdim=True)), {}),
  ("kthvalue_int", [np.array([[4, 1, 3], [7, 9, 8]], np.int64)], lambda x: x.kthvalue(1, 1),
   lambda x: tuple(x.kthvalue(1, 1)), {}),
  ("trace", [(3, 4)], lambda x: x.trace(), None, {}),
  ("trace_int", [np.array([[1, 2], [3, 4]], np.int32)], lambda x: x.trace(), None, {}),
  ("addmm", [(3, 5), (3, 4), (4, 5)], lambda x, a, b: x.addmm(a, b), None, {}),
  ("addmm_broadcast_scaled", [(5,), (3, 4), (4, 5)], lambda x, a, b: x.addmm(a, b, beta=0.5, alpha=-2.0), None, {}),
  ("addmm_beta0_ignores_nan", [np.full((2, 3), np.nan, np.float32), (2, 4), (4, 3)],
   lambda x, a, b: x.addmm(a, b, beta=0.0), None, {}),
  ("outer", [(3,), (4,)], lambda x, y: x.outer(y), None, {}),
  ("outer_int", [np.array([1, 2], np.int32), np.array([3, 4, 5], np.int64)], lambda x, y: x.outer(y), None, {}),
  ("mm", [(3, 4), (4, 5)], lambda x, y: x.mm(y), None, {}),
  ("bmm", [(2, 3, 4), (2, 4, 5)], lambda x, y: x.bmm(y), None, {}),
  ("mv", [(3, 4), (4,)], lambda x, y: x.mv(y), None, {}),
  ("cross", [(4, 3), (4, 3)], lambda x, y: x.cross(y), lambda x, y: torch.linalg.cross(x, y), {}),
  ("cross_dim0_broadcast", [(3, 5), (3, 1)], lambda x, y: x.cross(y, dim=0),
   lambda x, y: torch.linalg.cross(x, y, dim=0), {}),
  ("cross_int", [np.array([[1, 2, 3]], np.int64), np.array([[4, 5, 6]], np.int64)], lambda x, y: x.cross(y),
   lambda x, y: torch.linalg.cross(x, y), {}),
]

@needs_torch
@pytest.mark.parametrize("name,shapes,fn,torch_fn,kw", named(REDUCE))
def test_reductions_match_torch(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any,
                                kw: dict[str, Any]) -> None:
  check_op(shapes, fn, torch_fn=torch_fn, **kw)

def test_median_keepdim_without_axis_and_0d() -> None:
  x = Tensor([[4.0, 1.0], [3.0, 2.0]])
  assert x.median(keepdim=True).shape == (1, 1) and x.median(keepdim=True).item() == 2.0
  values, indices = Tensor(7.0).median(0, return_indices=True)
  assert values.item() == 7.0 and indices.item() == 0

def test_norm_and_median_take_numpy_axis() -> None:
  x = Tensor([[3.0, 4.0], [6.0, 8.0]])
  assert x.norm(2, 1).tolist() == [5.0, 10.0] and x.median(axis=0).tolist() == [3.0, 4.0]
  with pytest.raises(TypeError, match="median: got both"): x.median(0, dim=1)

def test_reduction_errors() -> None:
  raises_at_build(ValueError, lambda: lazy(3).norm("nuc"), "norm", "'nuc'")
  raises_at_build(TypeError, lambda: lazy(3, 4).median((0, 1)), "median", "(0, 1)")
  raises_at_build(ValueError, lambda: lazy(0, 4).median(0), "median", "zero-size")
  raises_at_build(TypeError, lambda: lazy(3).quantile(1.5), "quantile", "1.5")
  raises_at_build(TypeError, lambda: lazy(3).quantile(Tensor([0.5])), "quantile")
  raises_at_build(ValueError, lambda: lazy(3).quantile(0.5, interpolation="cubic"), "quantile", "'cubic'")
  raises_at_build(ValueError, lambda: lazy(3, 0).quantile(0.5, dim=1), "quantile", "zero-size")
  raises_at_build(ValueError, lambda: lazy(3, 4).kthvalue(0), "kthvalue", "k=0", "[1, 4]")
  raises_at_build(ValueError, lambda: lazy(3).kthvalue(4), "kthvalue", "k=4")
  raises_at_build(ValueError, lambda: lazy(2, 2, 2).trace(), "trace", "(2, 2, 2)")
  raises_at_build(ValueError, lambda: lazy(3).addmm(lazy(3), lazy(3, 3)), "addmm", "2-d")
  raises_at_build(TypeError, lambda: lazy(3).addmm([[1.0]], lazy(1, 3)), "addmm", "list")
  raises_at_build(ValueError, lambda: lazy(3).diff(-1), "diff", "-1")
  raises_at_build(ValueError, lambda: Tensor(2.0).diff(), "diff", "1-d")
  raises_at_build(TypeError, lambda: lazy(3).diff(prepend=[1.0]), "diff", "list")
  raises_at_build(ValueError, lambda: lazy(2, 3).outer(lazy(3)), "outer", "1-d", "(2, 3)")
  raises_at_build(TypeError, lambda: lazy(3).outer([1, 2]), "outer", "list")
  raises_at_build(ValueError, lambda: lazy(2, 3, 4).mm(lazy(4, 5)), "mm", "2-d")
  raises_at_build(ValueError, lambda: lazy(2, 3, 4).bmm(lazy(3, 4, 5)), "bmm", "batch")
  raises_at_build(ValueError, lambda: lazy(3, 4).bmm(lazy(4, 5)), "bmm", "3-d")
  raises_at_build(ValueError, lambda: lazy(3, 4).mv(lazy(4, 1)), "mv", "(4, 1)")
  raises_at_build(ValueError, lambda: lazy(2, 3).mm(lazy(4, 5)), "matmul")
  raises_at_build(ValueError, lambda: lazy(4, 2).cross(lazy(4, 2)), "cross", "size 3")
  raises_at_build(ValueError, lambda: lazy(4, 3).cross(lazy(4, 3), dim=0), "cross", "size 3")

# ---- isin ----

@needs_torch
@pytest.mark.parametrize("name,x,test,invert", named([
  ("ints", np.array([[1, 2], [3, 4]], np.int64), np.array([2, 3, 7], np.int64), False),
  ("invert", np.array([1, 5, 1, 7], np.int32), np.array([[1], [7]], np.int32), True),
  ("floats_with_nan", np.array([np.nan, 1.5, 2.0], np.float32), np.array([np.nan, 2.0], np.float32), False),
  ("mixed_dtypes", np.array([1.0, 2.5, 3.0], np.float32), np.array([3, 1], np.int64), False),
  ("scalar_input", np.array(4, np.int64), np.array([4], np.int64), False),
]))
def test_isin_matches_torch(name: str, x: np.ndarray, test: np.ndarray, invert: bool) -> None:
  got = Tensor(x).isin(Tensor(test), invert=invert)
  want = torch.isin(torch.from_numpy(x), torch.from_numpy(test), invert=invert).numpy()
  assert got.dtype == dtypes.bool
  np.testing.assert_array_equal(got.numpy(), want)

@needs_torch
@pytest.mark.parametrize("name,shape,dim,index", named([
  ("dim1", (4, 5), 1, np.array([3, 0, 3, 4], np.int64)),
  ("dim0_int32_index", (4, 5), 0, np.array([2], np.int32)),
  ("last_dim_3d", (2, 3, 4), -1, np.array([1, 1, 0], np.int64)),
  ("scalar_index", (3, 4), 0, np.array(2, np.int64)),
  ("empty_index", (3, 4), 1, np.zeros(0, np.int64)),
]))
def test_index_select_matches_torch(name: str, shape: tuple[int, ...], dim: int, index: np.ndarray) -> None:
  check_op([shape, index], lambda x, i: x.index_select(dim, i))

def test_index_select_negative_and_errors() -> None:
  assert Tensor([[1, 2, 3]]).index_select(1, Tensor([-1, 0])).tolist() == [[3, 1]]
  raises_at_build(IndexError, lambda: lazy(3, 4).index_select(0, Tensor([[0, 1]])), "index_select", "(1, 2)")
  raises_at_build(IndexError, lambda: lazy(3, 4).index_select(0, Tensor([0.0])), "index_select", "float32")
  raises_at_build(IndexError, lambda: lazy(3, 4).index_select(0, [0, 1]), "index_select", "list")
  raises_at_build(IndexError, lambda: lazy(3, 4).index_select(2, Tensor([0])), "axis 2")

SORTED = np.array([[1.0, 3.0, 3.0, 5.0], [-2.0, 0.0, 4.0, 8.0]], np.float32)
PROBES = np.array([[3.0, 6.0, 0.0], [4.0, -3.0, 8.0]], np.float32)

@needs_torch
@pytest.mark.parametrize("name,seq,values,right", named([
  ("1d_left", SORTED[0], PROBES, False),
  ("1d_right_ties", SORTED[0], PROBES, True),
  ("batched", SORTED, PROBES, False),
  ("batched_right", SORTED, PROBES, True),
  ("ints", np.array([1, 3, 5, 7], np.int64), np.array([[0, 3], [7, 9]], np.int64), False),
  ("scalar_value", SORTED[0], np.array(3.0, np.float32), True),
]))
def test_searchsorted_matches_torch(name: str, seq: np.ndarray, values: np.ndarray, right: bool) -> None:
  got = Tensor(seq).searchsorted(Tensor(values), right=right)
  want = torch.searchsorted(torch.from_numpy(seq), torch.from_numpy(values), right=right)
  assert got.dtype == dtypes.int64 and got.shape == tuple(want.shape)
  np.testing.assert_array_equal(got.numpy(), want.numpy())
  np.testing.assert_array_equal(Tensor(seq).searchsorted(Tensor(values), side="right" if right else "left").numpy(),
                                want.numpy())
  if seq.ndim == 1:
    np.testing.assert_array_equal(Tensor(values).bucketize(Tensor(seq), right=right).numpy(),
                                  torch.bucketize(torch.from_numpy(values), torch.from_numpy(seq), right=right).numpy())

@needs_torch
@pytest.mark.parametrize("name,x,weights,minlength", named([
  ("counts", np.array([1, 1, 3, 0, 3, 3], np.int64), None, 0),
  ("minlength", np.array([1, 2], np.int32), None, 6),
  ("float_weights", np.array([2, 0, 2], np.int64), np.array([0.5, 1.0, 2.0], np.float32), 0),
  ("double_weights", np.array([2, 0, 2], np.int64), np.array([0.5, 1.0, 2.0], np.float64), 1),
  ("int_weights", np.array([2, 0, 2], np.int64), np.array([3, 4, 5], np.int64), 0),
  ("empty", np.zeros(0, np.int64), None, 3),
]))
def test_bincount_matches_torch(name: str, x: np.ndarray, weights: np.ndarray | None, minlength: int) -> None:
  got = Tensor(x).bincount(None if weights is None else Tensor(weights), minlength=minlength)
  want = torch.bincount(torch.from_numpy(x), None if weights is None else torch.from_numpy(weights), minlength)
  assert got.dtype.name == str(want.dtype).removeprefix("torch.")
  np.testing.assert_allclose(got.numpy(), want.numpy())

def test_search_and_count_errors() -> None:
  raises_at_build(ValueError, lambda: lazy(2, 3).searchsorted(lazy(3, 2)), "searchsorted", "(3, 2)")
  raises_at_build(ValueError, lambda: Tensor(1.0).searchsorted(lazy(2)), "searchsorted", "0-d")
  raises_at_build(ValueError, lambda: lazy(3).searchsorted(lazy(2), side="middle"), "searchsorted", "'middle'")
  raises_at_build(ValueError, lambda: lazy(3).searchsorted(lazy(2), right=True, side="left"), "disagree")
  raises_at_build(ValueError, lambda: lazy(3).bucketize(lazy(2, 2)), "bucketize", "(2, 2)")
  raises_at_build(TypeError, lambda: lazy(3).bincount(), "bincount", "float32")
  raises_at_build(TypeError, lambda: Tensor([[1, 2]]).bincount(), "bincount", "(1, 2)")
  raises_at_build(ValueError, lambda: Tensor([1, 2]).bincount(minlength=-1), "minlength", "-1")
  raises_at_build(ValueError, lambda: Tensor([1, 2]).bincount(Tensor([1.0])), "weights", "(1,)")
  with pytest.raises(ValueError, match="bincount: the values must be non-negative, got -1"):
    Tensor([1, -1]).bincount()

def test_bincount_refuses_a_jit_capture() -> None:
  @TinyJit
  def counts(x: Tensor) -> Tensor: return x.bincount().realize()
  x = Tensor([0, 1, 1]).realize()
  assert counts(x).tolist() == [1, 2]  # the first call runs as it is
  with pytest.raises(ValueError, match="bincount inside a TinyJit function"): counts(x)

def test_isin_lists_numbers_and_nothing() -> None:
  x = Tensor([[1, 2], [3, 4]])
  assert x.isin([4, 1]).tolist() == [[True, False], [False, True]]
  assert x.isin(3).tolist() == [[False, False], [True, False]]
  assert x.isin([]).tolist() == [[False, False], [False, False]]
  assert x.isin([], invert=True).tolist() == [[True, True], [True, True]]

# ---- torch's new_* constructors and in-place fills ----

def test_new_constructors_take_dtype_and_device_from_self() -> None:
  x = Tensor([1, 2], dtype=dtypes.int16, device="CPU:1")
  for t, shape, value in ((x.new_zeros(2, 3), (2, 3), 0), (x.new_ones((3,)), (3,), 1), (x.new_full((2,), 7), (2,), 7)):
    assert (t.shape, t.dtype, t.device) == (shape, dtypes.int16, "CPU:1") and set(t.numpy().ravel()) == {value}
  e = x.new_empty(4, 1)
  assert (e.shape, e.dtype, e.device) == ((4, 1), dtypes.int16, "CPU:1")
  f = x.new_zeros(2, dtype=dtypes.float64, device="CPU")
  assert (f.dtype, f.device, f.tolist()) == (dtypes.float64, "CPU", [0.0, 0.0])
  n = x.new_tensor([[1.5, 2.5]])
  assert (n.dtype, n.device, n.tolist()) == (dtypes.int16, "CPU:1", [[1, 2]])

def test_new_tensor_copies_a_tensor_without_its_gradient() -> None:
  src = Tensor([1.0, 2.0], requires_grad=True)
  out = Tensor([0], dtype=dtypes.float64).new_tensor(src)
  assert out.dtype == dtypes.float64 and not out.requires_grad and out.tolist() == [1.0, 2.0]
  with pytest.raises(ValueError, match="non-negative int"): Tensor([1]).new_zeros(2, -1)

def test_uniform_and_normal_fill_in_place() -> None:
  t = Tensor.zeros(4000).contiguous().realize()
  view = t[:10]
  Tensor.manual_seed(5)
  out = t.uniform_(-3.0, 1.0)
  v = t.numpy()
  assert out is t and v.min() >= -3.0 and v.max() < 1.0
  assert abs(v.mean() + 1.0) < 0.1 and abs(v.std() - 4 / 12 ** 0.5) < 0.1
  np.testing.assert_array_equal(view.numpy(), v[:10])  # the buffer itself was written
  v = t.normal_(2.0, 3.0).numpy()
  assert abs(v.mean() - 2.0) < 0.2 and abs(v.std() - 3.0) < 0.2
  h = Tensor.zeros(100, dtype=dtypes.float16).contiguous().realize().normal_()
  assert h.dtype == dtypes.float16 and h.numpy().std() > 0.5
  with pytest.raises(TypeError, match="uniform_: fills float tensors, got dtypes.int64"): Tensor([1, 2]).uniform_()
  with pytest.raises(TypeError, match="normal_: fills float tensors, got dtypes.bool"): Tensor([True]).normal_()

@needs_torch
def test_lerp_in_place_is_an_ema_step() -> None:
  ema, w = Tensor([0.0, 4.0, -2.0]).realize(), Tensor([1.0, 0.0, 2.0])
  ref = torch.tensor([0.0, 4.0, -2.0])
  for _ in range(3):
    ema.lerp_(w, 0.1)
    ref.lerp_(torch.tensor([1.0, 0.0, 2.0]), 0.1)
  np.testing.assert_allclose(ema.numpy(), ref.numpy(), rtol=1e-6)

# ---- neural-network functions: adaptive pooling, distances, losses, sequential ----

NN: list[tuple[str, list[Any], Callable[..., Any], Any, dict[str, Any]]] = [
  ("adaptive_avg_even", [(2, 3, 8, 6)], lambda x: x.adaptive_avg_pool2d((4, 3)),
   lambda x: F.adaptive_avg_pool2d(x, (4, 3)), {}),
  ("adaptive_avg_uneven", [(2, 3, 7, 10)], lambda x: x.adaptive_avg_pool2d((3, 4)),
   lambda x: F.adaptive_avg_pool2d(x, (3, 4)), {}),
  ("adaptive_avg_global", [(2, 5, 7, 7)], lambda x: x.adaptive_avg_pool2d(1), lambda x: F.adaptive_avg_pool2d(x, 1),
   {}),
  ("adaptive_avg_upsample", [(1, 2, 3, 2)], lambda x: x.adaptive_avg_pool2d((5, 4)),
   lambda x: F.adaptive_avg_pool2d(x, (5, 4)), {}),
  ("adaptive_avg_none_3d_input", [(3, 7, 5)], lambda x: x.adaptive_avg_pool2d((None, 2)),
   lambda x: F.adaptive_avg_pool2d(x, (None, 2)), {}),
  ("adaptive_avg_1d", [(2, 3, 10)], lambda x: x.adaptive_avg_pool2d((4,)), lambda x: F.adaptive_avg_pool1d(x, 4), {}),
  ("adaptive_avg_float16", [(1, 2, 7, 5)], lambda x: x.adaptive_avg_pool2d(3), lambda x: F.adaptive_avg_pool2d(x, 3),
   {"dtype": F16}),
  ("adaptive_max_even", [(2, 3, 8, 6)], lambda x: x.adaptive_max_pool2d((2, 3)),
   lambda x: F.adaptive_max_pool2d(x, (2, 3)), {}),
  ("adaptive_max_uneven", [(2, 3, 7, 10)], lambda x: x.adaptive_max_pool2d((3, 4)),
   lambda x: F.adaptive_max_pool2d(x, (3, 4)), {}),
  ("adaptive_max_global", [(2, 4, 5, 5)], lambda x: x.adaptive_max_pool2d(1), lambda x: F.adaptive_max_pool2d(x, 1),
   {}),
  ("max_pool1d", [(2, 3, 9)], lambda x: x.max_pool1d(3), lambda x: F.max_pool1d(x, 3), {}),
  ("max_pool1d_all_options", [(2, 3, 10)], lambda x: x.max_pool1d(3, 2, dilation=2, padding=1, ceil_mode=True,
                                                                  return_indices=True),
   lambda x: tuple(F.max_pool1d(x, 3, 2, padding=1, dilation=2, ceil_mode=True, return_indices=True)), {}),
  ("avg_pool1d", [(2, 3, 9)], lambda x: x.avg_pool1d(2), lambda x: F.avg_pool1d(x, 2), {}),
  ("avg_pool1d_options", [(2, 3, 10)], lambda x: x.avg_pool1d(4, 3, padding=2, ceil_mode=True,
                                                              count_include_pad=False),
   lambda x: F.avg_pool1d(x, 4, 3, padding=2, ceil_mode=True, count_include_pad=False), {}),
  ("cosine_similarity", [(4, 5), (4, 5)], lambda x, y: x.cosine_similarity(y), lambda x, y: F.cosine_similarity(x, y),
   {}),
  ("cosine_similarity_broadcast_dim", [(3, 1, 6), (4, 6)], lambda x, y: x.cosine_similarity(y, dim=-1),
   lambda x, y: F.cosine_similarity(x, y, dim=-1), {}),
  ("cosine_similarity_zero_vector", [np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]], np.float32), (2, 3)],
   lambda x, y: x.cosine_similarity(y), lambda x, y: F.cosine_similarity(x, y), {}),
  ("pairwise_distance", [(4, 5), (4, 5)], lambda x, y: x.pairwise_distance(y),
   lambda x, y: F.pairwise_distance(x, y), {}),
  ("pairwise_distance_p1_keepdim", [(4, 5), (1, 5)], lambda x, y: x.pairwise_distance(y, p=1.0, keepdim=True),
   lambda x, y: F.pairwise_distance(x, y, p=1.0, keepdim=True), {}),
  ("cdist", [(4, 3), (5, 3)], lambda x, y: x.cdist(y), lambda x, y: torch.cdist(x, y), {}),
  ("cdist_batched_p1", [(2, 4, 3), (2, 5, 3)], lambda x, y: x.cdist(y, p=1.0), lambda x, y: torch.cdist(x, y, p=1.0),
   {}),
  ("cdist_inf", [(3, 2), (4, 2)], lambda x, y: x.cdist(y, p=math.inf), lambda x, y: torch.cdist(x, y, p=math.inf), {}),
]

LOSSES = [("mse_loss", {}), ("l1_loss", {}), ("smooth_l1_loss", {}), ("smooth_l1_loss", {"beta": 0.5}),
          ("smooth_l1_loss", {"beta": 0.0}), ("huber_loss", {}), ("huber_loss", {"delta": 0.3})]
for _name, _kw in LOSSES:
  for _red in ("mean", "sum", "none"):
    NN.append((f"{_name}_{_red}_{_kw}", [(3, 5), (3, 5)],
               lambda x, y, n=_name, r=_red, k=_kw: getattr(x, n)(y, reduction=r, **k),
               lambda x, y, n=_name, r=_red, k=_kw: getattr(F, n)(x, y, reduction=r, **k), {}))
for _red in ("mean", "sum", "none", "batchmean"):
  for _log_target in (False, True):
    NN.append((f"kl_div_{_red}_{_log_target}", [(4, 5), (4, 5)],
               lambda x, y, r=_red, lt=_log_target: x.log_softmax(1).kl_div(y.softmax(1).log() if lt else y.softmax(1),
                                                                             reduction=r, log_target=lt),
               lambda x, y, r=_red, lt=_log_target: F.kl_div(x.log_softmax(1), y.softmax(1).log() if lt else
                                                             y.softmax(1), reduction=r, log_target=lt), {}))

@needs_torch
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name,shapes,fn,torch_fn,kw", named(NN))
def test_nn_functions_match_torch(name: str, shapes: list[Any], fn: Callable[..., Any], torch_fn: Any,
                                  kw: dict[str, Any]) -> None:
  check_op(shapes, fn, torch_fn=torch_fn, **kw)

@needs_torch
def test_kl_div_with_zero_targets() -> None:
  lp = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.1, 0.8]], np.float32))
  t = np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], np.float32)
  # the target is data here: its gradient at 0 is -inf (torch: NaN), so only the input's gradient is compared
  check_op([lp], lambda x: x.kl_div(Tensor(t), reduction="batchmean"),
           torch_fn=lambda x: F.kl_div(x, torch.from_numpy(t), reduction="batchmean"))

def test_adaptive_pool_even_windows_are_one_kernel() -> None:
  x = Tensor(np.random.default_rng(0).uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)).realize()
  GlobalCounters.reset()
  x.adaptive_avg_pool2d(1).realize()
  assert GlobalCounters.kernel_count == 1

def test_adaptive_max_pool_of_ints() -> None:
  x = Tensor(np.arange(30, dtype=np.int32).reshape(1, 5, 6))
  out = x.adaptive_max_pool2d((2, 4))
  # rows 5 -> 2: [0, 3) and [2, 5); columns 6 -> 4: [0, 2), [1, 3), [3, 5), [4, 6)
  assert out.dtype == dtypes.int32 and out.tolist() == [[[13, 14, 16, 17], [25, 26, 28, 29]]]

def test_sequential_runs_layers_in_order() -> None:
  x = Tensor([[1.0, -2.0]])
  layer = nn.Linear(2, 3)
  out = x.sequential([layer, Tensor.relu, lambda t: t.sum(1)])
  np.testing.assert_allclose(out.numpy(), np.maximum(x.numpy() @ layer.weight.numpy().T + layer.bias.numpy(), 0).sum(1),
                             rtol=1e-6)
  assert x.sequential([]) is x

def test_nn_function_errors() -> None:
  raises_at_build(ValueError, lambda: lazy(2, 3).adaptive_avg_pool2d((2, 2)), "adaptive_avg_pool2d", "(2, 3)")
  raises_at_build(ValueError, lambda: lazy(1, 4, 4).adaptive_max_pool2d(0), "adaptive_max_pool2d", "0")
  raises_at_build(ValueError, lambda: lazy(1, 4, 4).adaptive_avg_pool2d((2, 1.5)), "output_size", "1.5")
  raises_at_build(ValueError, lambda: lazy(1, 0, 4).adaptive_avg_pool2d(2), "zero-size", "(1, 0, 4)")
  raises_at_build(ValueError, lambda: lazy(2, 3).cosine_similarity(lazy(4, 3)), "broadcast")
  raises_at_build(ValueError, lambda: lazy(3).cdist(lazy(3)), "cdist", "(..., P, M)")
  raises_at_build(ValueError, lambda: lazy(2, 3).cdist(lazy(2, 4)), "cdist", "(2, 4)")
  raises_at_build(ValueError, lambda: lazy(2, 3).mse_loss(lazy(3)), "mse_loss", "(3,)")
  raises_at_build(ValueError, lambda: lazy(2, 3).l1_loss(lazy(2, 3), reduction="avg"), "l1_loss", "'avg'")
  raises_at_build(ValueError, lambda: lazy(2).smooth_l1_loss(lazy(2), beta=-1.0), "smooth_l1_loss", "-1.0")
  raises_at_build(ValueError, lambda: lazy(2).huber_loss(lazy(2), delta=0.0), "huber_loss", "0.0")
  raises_at_build(ValueError, lambda: lazy(2, 3).kl_div(lazy(2, 3), reduction="batch"), "kl_div", "'batch'")
  raises_at_build(ValueError, lambda: lazy(2, 3).kl_div(lazy(3, 2)), "kl_div", "(3, 2)")

# ---- layers ----

def _copy_params(ours: Any, theirs: Any) -> None:
  for name in ("weight", "bias"):
    setattr(theirs, name, torch.nn.Parameter(torch.from_numpy(getattr(ours, name).numpy().copy())))

@needs_torch
@pytest.mark.parametrize("name,ours,theirs,shape", named([
  ("conv3d", lambda: nn.Conv3d(2, 4, (2, 3, 2), stride=1, padding=1),
   lambda: torch.nn.Conv3d(2, 4, (2, 3, 2), stride=1, padding=1), (2, 2, 4, 5, 3)),
  ("conv3d_groups", lambda: nn.Conv3d(4, 2, 2, groups=2, bias=False),
   lambda: torch.nn.Conv3d(4, 2, 2, groups=2, bias=False), (1, 4, 3, 3, 3)),
  ("conv_transpose1d", lambda: nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1),
   lambda: torch.nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1), (2, 3, 5)),
  ("conv_transpose1d_groups_dilation", lambda: nn.ConvTranspose1d(4, 6, 2, dilation=2, groups=2),
   lambda: torch.nn.ConvTranspose1d(4, 6, 2, dilation=2, groups=2), (1, 4, 6)),
]))
def test_layers_match_torch(name: str, ours: Callable[[], Any], theirs: Callable[[], Any],
                            shape: tuple[int, ...]) -> None:
  layer, ref = ours(), theirs()
  _copy_params(layer, ref) if layer.bias is not None else \
    setattr(ref, "weight", torch.nn.Parameter(torch.from_numpy(layer.weight.numpy().copy())))
  x = np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5,
                             rtol=1e-5)

@needs_torch
@pytest.mark.parametrize("bias", [True, False])
def test_grucell_matches_torch(bias: bool) -> None:
  cell, ref = nn.GRUCell(3, 5, bias=bias), torch.nn.GRUCell(3, 5, bias=bias)
  for name in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if bias else ()):
    setattr(ref, name, torch.nn.Parameter(torch.from_numpy(getattr(cell, name).numpy().copy())))
  for p in nn.state.get_parameters(cell): p.requires_grad_()
  x = np.random.default_rng(6).uniform(-1, 1, (4, 3)).astype(np.float32)
  h = cell(Tensor(x))
  th = ref(torch.from_numpy(x))
  h, th = cell(Tensor(x), h), ref(torch.from_numpy(x), th)  # a second step, from the first step's state
  np.testing.assert_allclose(h.numpy(), th.detach().numpy(), atol=1e-6, rtol=1e-5)
  h.sum().backward()
  th.sum().backward()
  np.testing.assert_allclose(cell.weight_hh.grad.numpy(), ref.weight_hh.grad.numpy(), atol=1e-5, rtol=1e-4)

@needs_torch
def test_layernorm2d_is_channel_layernorm_at_each_pixel() -> None:
  layer = nn.LayerNorm2d(3, eps=1e-6)
  layer.weight, layer.bias = Tensor([1.0, 2.0, 0.5]), Tensor([0.0, -1.0, 3.0])
  x = np.random.default_rng(2).uniform(-2, 2, (2, 3, 4, 5)).astype(np.float32)
  tx = torch.from_numpy(x).permute(0, 2, 3, 1)
  want = F.layer_norm(tx, (3,), torch.tensor([1.0, 2.0, 0.5]), torch.tensor([0.0, -1.0, 3.0]), eps=1e-6)
  np.testing.assert_allclose(layer(Tensor(x)).numpy(), want.permute(0, 3, 1, 2).numpy(), atol=1e-5, rtol=1e-5)
  assert {k for k in nn.state.get_state_dict(layer)} == {"weight", "bias"}
  with pytest.raises(ValueError, match=r"LayerNorm2d: expected \(batch, channels, height, width\)"):
    layer(Tensor.ones(3, 4, 5))

# ---- optimizers ----

@needs_torch
@pytest.mark.parametrize("name,ours,theirs", named([
  # without the trust ratio (tcoef=0) LARS is SGD; classic momentum accumulates lr * g, which is the same at a fixed lr
  ("lars_as_sgd", lambda p: LARS(p, lr=0.05, momentum=0.9, weight_decay=0.01, tcoef=0.0),
   lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01)),
  ("lars_as_sgd_not_classic_nesterov", lambda p: LARS(p, lr=0.05, momentum=0.8, weight_decay=0.0, nesterov=True,
                                                      classic=False, tcoef=0.0),
   lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True)),
  ("lars_no_momentum", lambda p: LARS(p, lr=0.1, momentum=0.0, weight_decay=0.0, tcoef=0.0),
   lambda p: torch.optim.SGD(p, lr=0.1)),
]))
def test_lars_without_trust_ratio_is_torch_sgd(name: str, ours: Any, theirs: Any) -> None:
  for steps in (1, 4):
    np.testing.assert_allclose(_run_ours(ours, steps), _run_torch(theirs, steps), rtol=1e-4, atol=1e-5)

def _lars_numpy(w: np.ndarray, grad: Callable[[np.ndarray], np.ndarray], steps: int, lr: float, momentum: float,
                wd: float, tcoef: float, classic: bool) -> np.ndarray:
  w, buf = w.astype(np.float64), np.zeros(w.shape)
  for _ in range(steps):
    g = grad(w)
    wn, gn = np.linalg.norm(w), np.linalg.norm(g)
    scale = lr * (tcoef * wn / (gn + wd * wn) if wn > 0 and gn > 0 else 1.0)
    g = g + wd * w
    if classic: g = g * scale
    buf = momentum * buf + g
    w = w - (buf if classic else buf * scale)
  return w

@pytest.mark.parametrize("classic", [True, False])
def test_lars_trust_ratio_against_numpy(classic: bool) -> None:
  w = Tensor(W0.copy(), requires_grad=True)
  opt = LARS([w], lr=0.5, momentum=0.9, weight_decay=0.01, tcoef=0.02, classic=classic)
  for _ in range(3):
    opt.zero_grad()
    (w * w * w).sum().backward()
    opt.step()
  want = _lars_numpy(W0, lambda v: 3 * v * v, 3, 0.5, 0.9, 0.01, 0.02, classic)
  np.testing.assert_allclose(w.numpy(), want, rtol=1e-5, atol=1e-6)

def test_lars_zero_weights_take_the_plain_step() -> None:
  w = Tensor.zeros(3).contiguous().realize().requires_grad_()
  opt = LARS([w], lr=0.1, momentum=0.0, weight_decay=0.0)
  (w * Tensor([1.0, 2.0, 3.0])).sum().backward()
  opt.step()
  np.testing.assert_allclose(w.numpy(), [-0.1, -0.2, -0.3], rtol=1e-6)

def test_optimizer_group_steps_each_optimizer_in_one_schedule() -> None:
  w1, w2 = Tensor(W0.copy(), requires_grad=True), Tensor(W0.copy(), requires_grad=True)
  group = OptimizerGroup(SGD([w1], lr=0.1), Adam([w2], lr=0.01))
  ref1, ref2 = Tensor(W0.copy(), requires_grad=True), Tensor(W0.copy(), requires_grad=True)
  sgd, adam = SGD([ref1], lr=0.1), Adam([ref2], lr=0.01)
  x = Tensor(X)
  for _ in range(2):
    group.zero_grad()
    assert w1.grad is None and w2.grad is None
    ((x @ w1).tanh() * (x @ w2)).sum().backward()
    GlobalCounters.reset()
    group.step()
    kernels = GlobalCounters.kernel_count
    sgd.zero_grad()
    adam.zero_grad()
    ((x @ ref1).tanh() * (x @ ref2)).sum().backward()
    sgd.step()
    adam.step()
  np.testing.assert_allclose(w1.numpy(), ref1.numpy(), rtol=1e-6)
  np.testing.assert_allclose(w2.numpy(), ref2.numpy(), rtol=1e-6)
  # one schedule: the shared forward and backward run once, then every update (w1; t, m, v and w2 of Adam)
  assert kernels <= 12, kernels
  assert group[0].params == [w1] and group[1].params == [w2] and group.params == [w1, w2]

def test_optimizer_group_errors() -> None:
  w = Tensor([1.0], requires_grad=True)
  with pytest.raises(ValueError, match="at least one"): OptimizerGroup()
  with pytest.raises(TypeError, match="expected optimizers, got list"): OptimizerGroup([SGD([w])])  # type: ignore[arg-type]
  with pytest.raises(ValueError, match="more than one"): OptimizerGroup(SGD([w]), Adam([w]))
  with pytest.raises(ValueError, match="nesterov"): LARS([w], momentum=0.0, nesterov=True)
  with pytest.raises(ValueError, match="tcoef"): LARS([w], tcoef=-1.0)

# ---- reading PyTorch checkpoints ----

@needs_torch
def test_torch_load_reads_dtypes_views_and_nesting(tmp_path: Any) -> None:
  base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
  sd = collections.OrderedDict([
    ("f32", torch.randn(3, 4)), ("f64", torch.randn(2, dtype=torch.float64)), ("f16", torch.randn(5).half()),
    ("bf16", torch.randn(4).bfloat16()), ("i64", torch.tensor([1, -2, 3])),
    ("i32", torch.tensor([7], dtype=torch.int32)),
    ("i16", torch.tensor([-3], dtype=torch.int16)), ("i8", torch.tensor([-4], dtype=torch.int8)),
    ("u8", torch.tensor([250], dtype=torch.uint8)), ("bool", torch.tensor([True, False])),
    ("transposed", base.t()), ("slice", base[1:3, 2:5]), ("strided", base[:, ::2]), ("scalar", torch.tensor(2.5)),
    ("empty", torch.zeros(0, 3)), ("param", torch.nn.Parameter(torch.ones(2, 2))),
  ])
  path = tmp_path / "ckpt.pt"
  torch.save({"model": sd, "epoch": 3, "lr": [0.1, 0.01], "name": "run"}, path)
  got = nn.state.torch_load(path)
  assert got["epoch"] == 3 and got["lr"] == [0.1, 0.01] and got["name"] == "run"
  assert list(got["model"]) == list(sd)
  for name, want in sd.items():
    t = got["model"][name]
    assert isinstance(t, Tensor) and t.shape == tuple(want.shape), name
    assert t.dtype.name == str(want.dtype).removeprefix("torch."), name
    values = want.detach().float() if want.dtype == torch.bfloat16 else want.detach()  # numpy has no bfloat16
    np.testing.assert_array_equal(t.numpy(), values.numpy(), err_msg=name)

@needs_torch
def test_torch_load_into_a_model(tmp_path: Any) -> None:
  ref = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
  torch.save(ref.state_dict(), tmp_path / "m.pt")
  model = {"0": nn.Linear(3, 4), "2": nn.Linear(4, 2)}
  nn.state.load_state_dict(model, nn.state.torch_load(tmp_path / "m.pt", device="CPU:1"))
  x = np.random.default_rng(4).uniform(-1, 1, (5, 3)).astype(np.float32)
  out = Tensor(x).sequential([model["0"], Tensor.relu, model["2"]])
  np.testing.assert_allclose(out.numpy(), ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
  assert model["0"].weight.device == "CPU"  # load_state_dict copies into the model's own tensors

class _Opaque:
  pass

@needs_torch
def test_torch_load_refuses_what_is_not_weights(tmp_path: Any) -> None:
  torch.save({"w": torch.ones(2), "obj": _Opaque()}, tmp_path / "obj.pt")
  with pytest.raises(nn.state.TorchLoadError, match=r"names test_api_extra\._Opaque; only tensors"):
    nn.state.torch_load(tmp_path / "obj.pt")
  torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
  with pytest.raises(nn.state.TorchLoadError, match="not a zip archive"): nn.state.torch_load(tmp_path / "legacy.pt")

@needs_torch
def test_torch_load_damaged_files(tmp_path: Any) -> None:
  torch.save({"w": torch.arange(8.0)}, tmp_path / "ok.pt")
  with zipfile.ZipFile(tmp_path / "ok.pt") as src, zipfile.ZipFile(tmp_path / "short.pt", "w") as dst:
    for item in src.namelist():
      data = src.read(item)
      dst.writestr(item, data[:12] if item.endswith("/data/0") else data)
  with pytest.raises(nn.state.TorchLoadError, match="has 12 bytes, needs 32"):
    nn.state.torch_load(tmp_path / "short.pt")
  with zipfile.ZipFile(tmp_path / "ok.pt") as src, zipfile.ZipFile(tmp_path / "nostorage.pt", "w") as dst:
    for item in src.namelist():
      if not item.endswith("/data/0"): dst.writestr(item, src.read(item))
  with pytest.raises(nn.state.TorchLoadError, match="no storage '0'"): nn.state.torch_load(tmp_path / "nostorage.pt")

@needs_torch
def test_torch_load_big_endian_archive(tmp_path: Any) -> None:
  # torch.save on a big-endian machine writes "big" in byteorder and its storages' bytes in that order
  w = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
  torch.save({"w": torch.from_numpy(w.copy())}, tmp_path / "little.pt")
  with zipfile.ZipFile(tmp_path / "little.pt") as src, zipfile.ZipFile(tmp_path / "big.pt", "w") as dst:
    for item in src.namelist():
      data = src.read(item)
      if item.endswith("/byteorder"): data = b"big"
      if item.endswith("/data/0"): data = np.frombuffer(data, "<f4").astype(">f4").tobytes()
      dst.writestr(item, data)
  np.testing.assert_array_equal(nn.state.torch_load(tmp_path / "big.pt")["w"].numpy(), w)

@needs_torch
def test_state_docstring_examples() -> None:
  import doctest

  import lazytensor.nn.state
  result = doctest.testmod(lazytensor.nn.state, extraglobs={"Tensor": Tensor}, optionflags=doctest.ELLIPSIS)
  assert result.failed == 0 and result.attempted >= 5, result

# ---- learning-rate schedules ----

SCHEDULES = [
  ("step", lambda o: sched.StepLR(o, step_size=3, gamma=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5)),
  ("multistep", lambda o: sched.MultiStepLR(o, [5, 2, 8], gamma=0.3),
   lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [2, 5, 8], gamma=0.3)),
  ("exponential", lambda o: sched.ExponentialLR(o, 0.9), lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.9)),
  ("linear_warmup", lambda o: sched.LinearLR(o), lambda o: torch.optim.lr_scheduler.LinearLR(o)),
  ("linear_decay", lambda o: sched.LinearLR(o, 1.0, 0.1, total_iters=7),
   lambda o: torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.1, total_iters=7)),
  ("cosine", lambda o: sched.CosineAnnealingLR(o, T_max=8, eta_min=0.01),
   lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=8, eta_min=0.01)),
  ("lambda_warmup", lambda o: sched.LambdaLR(o, lambda e: min(1.0, (e + 1) / 4)),
   lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: min(1.0, (e + 1) / 4))),
  ("sequential_warmup_cosine_step",
   lambda o: sched.SequentialLR(o, [sched.LinearLR(o, 0.1, total_iters=3), sched.CosineAnnealingLR(o, T_max=5),
                                    sched.StepLR(o, 2, gamma=0.5)], milestones=[3, 8]),
   lambda o: torch.optim.lr_scheduler.SequentialLR(o, [torch.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=3),
                                                       torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5),
                                                       torch.optim.lr_scheduler.StepLR(o, 2, gamma=0.5)], [3, 8])),
]

@needs_torch
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name,ours,theirs", named(SCHEDULES))
def test_lr_schedules_match_torch_and_drive_the_step(name: str, ours: Any, theirs: Any) -> None:
  w = Tensor(W0.copy(), requires_grad=True)
  opt = SGD([w], lr=0.2, momentum=0.5)
  s = ours(opt)
  tw = torch.tensor(W0.copy(), requires_grad=True)
  topt = torch.optim.SGD([tw], lr=0.2, momentum=0.5)
  ts = theirs(topt)
  x, tx = Tensor(X), torch.tensor(X)
  for epoch in range(12):
    assert s.get_last_lr() == pytest.approx(ts.get_last_lr()[0], rel=1e-6, abs=1e-12), epoch  # base_lr is float32
    assert opt.lr.item() == pytest.approx(ts.get_last_lr()[0], rel=1e-6), epoch
    opt.zero_grad()
    ((x @ w).tanh() ** 2).sum().backward()
    opt.step()
    topt.zero_grad()
    ((tx @ tw).tanh() ** 2).sum().backward()
    topt.step()
    s.step()
    ts.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-4, atol=1e-5)

def test_lr_schedule_reaches_a_jitted_step() -> None:
  w = Tensor([1.0], requires_grad=True)
  opt = SGD([w], lr=1.0)
  s = sched.StepLR(opt, step_size=1, gamma=0.5)

  @TinyJit
  def step() -> None:
    opt.zero_grad()
    w.sum().backward()  # the gradient is 1: each step subtracts the learning rate
    opt.step()

  for _ in range(4):
    step()
    s.step()
  assert w.item() == pytest.approx(1.0 - (1.0 + 0.5 + 0.25 + 0.125))

def test_lr_scheduler_errors() -> None:
  w = Tensor([1.0], requires_grad=True)
  with pytest.raises(TypeError, match="OptimizerGroup"): sched.StepLR(OptimizerGroup(SGD([w])), 2)
  with pytest.raises(TypeError, match="expected an Optimizer, got list"): sched.StepLR([w], 2)  # type: ignore[arg-type]
  with pytest.raises(ValueError, match="step_size must be > 0, got 0"): sched.StepLR(SGD([w]), 0)
  with pytest.raises(ValueError, match="T_max must be > 0"): sched.CosineAnnealingLR(SGD([w]), 0)
  with pytest.raises(ValueError, match="start_factor 0"): sched.LinearLR(SGD([w]), start_factor=0)
  opt, other = SGD([w]), SGD([w])
  warm = sched.LinearLR(opt)
  with pytest.raises(ValueError, match=r"2 schedulers need 1 milestones, got \[\]"):
    sched.SequentialLR(opt, [warm, sched.StepLR(opt, 2)], [])
  with pytest.raises(ValueError, match="must schedule the optimizer"):
    sched.SequentialLR(opt, [warm, sched.StepLR(other, 2)], [3])
  with pytest.raises(ValueError, match="must increase"):
    sched.SequentialLR(opt, [warm, sched.StepLR(opt, 2), sched.StepLR(opt, 3)], [4, 2])

def test_schedules_of_one_optimizer_start_from_its_first_learning_rate() -> None:
  opt = SGD([Tensor([1.0], requires_grad=True)], lr=0.4)
  warm = sched.LinearLR(opt, start_factor=0.5)  # sets the rate to 0.2
  decay = sched.StepLR(opt, 1, gamma=0.5)
  assert warm.base_lr == decay.base_lr == pytest.approx(0.4) and opt.lr.item() == pytest.approx(0.4)

# ---- Muon ----

def _newton_schulz_numpy(g: np.ndarray, steps: int = 5) -> np.ndarray:
  a, b, c = 3.4445, -4.7750, 2.0315
  x = g.T if g.shape[0] > g.shape[1] else g
  x = x / max(np.linalg.norm(x), 1e-7)
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * gram @ gram) @ x
  return x.T if g.shape[0] > g.shape[1] else x

@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (6, 6)])
def test_newton_schulz_against_numpy(shape: tuple[int, int]) -> None:
  g = np.random.default_rng(5).standard_normal(shape)
  out = newton_schulz(Tensor(g))
  np.testing.assert_allclose(out.numpy(), _newton_schulz_numpy(g), rtol=1e-10, atol=1e-12)
  # what it is for: singular values pushed into roughly [0.5, 1.5]
  singular = np.linalg.svd(out.numpy(), compute_uv=False)
  assert np.all((singular > 0.5) & (singular < 1.5)), singular

MUON_CASES = named([
  ("default", {}), ("no_nesterov_no_wd", {"nesterov": False, "weight_decay": 0.0}),
  ("match_rms_adamw", {"adjust_lr_fn": "match_rms_adamw", "momentum": 0.9}),
])

@needs_torch
@pytest.mark.parametrize("name,kw", MUON_CASES)
def test_muon_matches_torch_in_float32(name: str, kw: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
  # torch orthogonalizes a bfloat16 copy of the update; with that copy kept in float32 the two agree to float32
  monkeypatch.setattr(torch.Tensor, "bfloat16", lambda self: self.clone())
  for steps in (1, 3):
    ours = _run_ours(lambda p: Muon(p, lr=0.1, **kw), steps)
    np.testing.assert_allclose(ours, _run_torch(lambda p: torch.optim.Muon(p, lr=0.1, **kw), steps), atol=2e-5)
    assert np.abs(ours - W0).max() > 0.03

@needs_torch
@pytest.mark.parametrize("name,kw", MUON_CASES)
def test_muon_near_torch_in_bfloat16(name: str, kw: dict[str, Any]) -> None:
  # torch as it is: bfloat16's 8-bit mantissa puts a few percent of each step between the two
  ours = _run_ours(lambda p: Muon(p, lr=0.1, **kw), 3)
  theirs = _run_torch(lambda p: torch.optim.Muon(p, lr=0.1, **kw), 3)
  assert np.abs(ours - theirs).max() < 0.05 * np.abs(ours - W0).max()

def test_muon_errors() -> None:
  with pytest.raises(ValueError, match=r"Muon: parameters must be 2-d matrices, got one of shape \(3,\)"):
    Muon([Tensor([1.0, 2.0, 3.0], requires_grad=True)])
  w = Tensor.ones(2, 2).contiguous().requires_grad_()
  with pytest.raises(ValueError, match="adjust_lr_fn 'rms'"): Muon([w], adjust_lr_fn="rms")
  with pytest.raises(ValueError, match="newton_schulz: expected a matrix"): newton_schulz(Tensor.ones(2, 2, 2))
