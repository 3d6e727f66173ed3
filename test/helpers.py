"""Test helpers: run one function on lazytensor and on references (torch when installed, numpy) and compare.

`check_op` is the entry point of the op tests. It compares forward values, shapes and dtypes and, against torch, the
gradient of every float input (`check_grads`). `check_grad_numeric` checks gradients against central finite
differences in float64 and needs no torch.
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from lazytensor import Tensor
from lazytensor.dtype import DType, dtypes, to_dtype

try:
  import torch
  HAVE_TORCH = True
except ImportError:  # the reference tests then run against numpy only
  torch = None  # type: ignore[assignment]
  HAVE_TORCH = False

# the dtypes of issue 2, the ones every sweep covers
SUPPORTED = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.int64,
             dtypes.float16, dtypes.float32, dtypes.float64]

# per-dtype default tolerances (atol, rtol): float16 keeps ~3 decimal digits, fast exp/log cost a few ulps in float32
TOLERANCES: dict[DType, tuple[float, float]] = {dtypes.float16: (1e-2, 1e-2), dtypes.float32: (1e-5, 1e-4),
                                                dtypes.float64: (1e-6, 1e-5)}

NUMERIC_GRAD_MAX_SIZE = 1 << 14  # largest input whose gradient the torch-less fallback checks by finite differences

Generator = Callable[[tuple[int, ...], DType, np.random.Generator], np.ndarray]
InputSpec = tuple[int, ...] | np.ndarray

def avx2_target(**caches: int) -> Any:
  """The x86-64-v3 (AVX2) CPU target with a typical core's caches (32K L1d, 1M L2, 32M L3) instead of the host's, so
  that a test of the heuristics' cache-sized choices gives the same answer on every machine; `caches` overrides."""
  import dataclasses

  from lazytensor.renderer.cpu_target import cpu_target
  typical = {"l1d_bytes": 32 << 10, "l2_bytes": 1 << 20, "l3_bytes": 32 << 20}
  return dataclasses.replace(cpu_target("x86-64-v3"), **(typical | caches))

def named(cases: list[tuple[Any, ...]]) -> list[Any]:
  """pytest.mark.parametrize cases whose first element is their name, with that name as the test id."""
  return [pytest.param(*c, id=c[0]) for c in cases]

def torch_dtype(dt: DType) -> Any:
  """The torch dtype of the same name (torch.float32 <-> dtypes.float32)."""
  assert HAVE_TORCH
  return getattr(torch, dt.name)

def from_torch_dtype(tdt: Any) -> DType:
  return to_dtype(str(tdt).removeprefix("torch."))

def random_array(shape: tuple[int, ...], dt: DType, rng: np.random.Generator, low: float = -2.0,
                 high: float = 2.0) -> np.ndarray:
  """Uniform values in [low, high): floats continuous, ints integral (clipped to the dtype's range), bools random."""
  if dt.is_bool: return rng.random(shape) < 0.5
  if dt.is_int:
    lo, hi = max(int(np.floor(low)), int(dt.min())), min(int(np.ceil(high)), int(dt.max()) + 1)
    return rng.integers(lo, max(hi, lo + 1), size=shape).astype(dt.np)
  return rng.uniform(low, high, size=shape).astype(dt.np)

def nonzero(shape: tuple[int, ...], dt: DType, rng: np.random.Generator) -> np.ndarray:
  """Values away from zero, for divisors and logs."""
  x = random_array(shape, dt, rng, 0.5, 3.0)
  sign = np.where(rng.random(shape) < 0.5, -1, 1) if not dt.is_unsigned else 1
  return (x * sign).astype(dt.np)

def positive(shape: tuple[int, ...], dt: DType, rng: np.random.Generator) -> np.ndarray:
  return random_array(shape, dt, rng, 0.25, 4.0)

@dataclass
class OpRun:
  """Everything one `check_op` call built: what a gradient check needs to run backward on both sides."""
  inputs: list[Tensor]
  ref_inputs: list[Any]
  out: Any
  ref_out: Any

def _as_numpy(x: Any) -> np.ndarray:
  if isinstance(x, Tensor): return x.numpy()
  if HAVE_TORCH and isinstance(x, torch.Tensor): return x.detach().numpy()
  return np.asarray(x)

def _outputs(x: Any) -> list[Any]:
  return list(x) if isinstance(x, (tuple, list)) else [x]

def compare(out: Any, ref: Any, atol: float | None = None, rtol: float | None = None, ref_dtype: DType | None = None,
            label: str = "") -> None:
  """Assert that a lazytensor Tensor matches a reference array: shape, dtype (if known) and values (NaN == NaN)."""
  assert isinstance(out, Tensor), f"{label}expected a Tensor, got {type(out).__name__}"
  if ref_dtype is not None: assert out.dtype == ref_dtype, f"{label}dtype {out.dtype} != reference {ref_dtype}"
  got, want = out.numpy(), _as_numpy(ref)
  assert got.shape == want.shape, f"{label}shape {got.shape} != reference {want.shape}"
  assert got.dtype == out.dtype.np, f"{label}numpy() gave {got.dtype} for a {out.dtype} tensor"
  if out.dtype.is_float or want.dtype.kind == "f":
    default_atol, default_rtol = TOLERANCES.get(out.dtype, TOLERANCES[dtypes.float32])
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), equal_nan=True, err_msg=label,
                               atol=default_atol if atol is None else atol, rtol=default_rtol if rtol is None else rtol)
  else: np.testing.assert_array_equal(got, want, err_msg=label)

def _run_reference(fn: Callable[..., Any], arrays: list[np.ndarray], on_torch: bool) -> tuple[list[Any], Any]:
  ins: list[Any] = [torch.from_numpy(a.copy()).requires_grad_(a.dtype.kind == "f") for a in arrays] if on_torch \
    else [a.copy() for a in arrays]
  # the references warn about what the tests do on purpose (x/0, mean of nothing)
  with np.errstate(all="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)
    return ins, fn(*ins)

def check_op(shapes: Sequence[InputSpec], fn: Callable[..., Any], np_fn: Callable[..., Any] | bool | None = None,
             torch_fn: Callable[..., Any] | None = None, dtype: DType | str | Sequence[DType | str] = dtypes.float32,
             atol: float | None = None, rtol: float | None = None, low: float = -2.0, high: float = 2.0,
             gen: Generator | None = None, use_torch: bool = True, out_dtype: DType | None = None,
             seed: int = 0, grad: bool = True, grad_atol: float | None = None,
             grad_rtol: float | None = None) -> OpRun:
  """Run `fn` on random lazytensor inputs and on the same values in references; compare shape, dtype and values,
  and (against torch, with `grad`) the gradients of the float inputs.

  shapes: one entry per input, a shape (random values) or a numpy array (used as given, its dtype wins).
  dtype: the input dtype, or one per input. Values come from `gen(shape, dtype, rng)`, else uniform in [low, high).
  References: torch (`torch_fn`, or `fn` itself) when torch is installed and `use_torch`; numpy when `np_fn` is given
  (True: `fn` itself computes the same on numpy arrays). Output dtypes are checked against torch's, and against
  `out_dtype` when given. `fn` may return a tuple of tensors (split, chunk).
  Gradients are compared with `grad_atol`/`grad_rtol` (default: `atol`/`rtol`); see `check_grads`. Where torch would
  be the reference but is not installed, the gradients of float32 and float64 inputs are checked against float64
  finite differences instead (`check_grad_numeric`); with nothing left to compare, the test is skipped.
  """
  refs: list[tuple[str, Callable[..., Any]]] = []
  if HAVE_TORCH and use_torch: refs.append(("torch", torch_fn or fn))
  if np_fn: refs.append(("numpy", fn if np_fn is True else np_fn))
  arrays = _make_inputs(shapes, dtype, gen or _uniform(low, high), seed)
  # given arrays are chosen points (ties, kinks, saturation) where finite differences say nothing; random ones are not
  numeric = grad and use_torch and not HAVE_TORCH and _numeric_grad_fits(arrays) and \
    not any(isinstance(s, np.ndarray) and a.dtype.kind == "f" for s, a in zip(shapes, arrays))
  if not refs and not numeric: pytest.skip("torch is not installed and this op has no numpy reference")
  # float inputs require gradients, so that every forward check also checks that requires_grad propagates harmlessly
  inputs = [Tensor(a, requires_grad=True if a.dtype.kind == "f" else None) for a in arrays]
  out = fn(*inputs)
  if out_dtype is not None:
    for o in _outputs(out): assert o.dtype == out_dtype, f"dtype {o.dtype} != expected {out_dtype}"
  if numeric: check_grad_numeric(fn, arrays, atol=1e-5, rtol=1e-4, seed=seed, fallback=True)
  if not refs: return OpRun(inputs, [], out, None)
  runs = [(name, *_run_reference(ref_fn, arrays, name == "torch")) for name, ref_fn in refs]
  for name, _, res in runs:
    got, want = _outputs(out), _outputs(res)
    assert len(got) == len(want), f"{name}: {len(got)} outputs != reference {len(want)}"
    for i, (o, r) in enumerate(zip(got, want)):
      rdt = from_torch_dtype(r.dtype) if name == "torch" else None
      compare(o, r, atol, rtol, rdt, label=f"{name} output {i}: ")
  run = OpRun(inputs, runs[0][1], out, runs[0][2])
  if grad and runs[0][0] == "torch" and all(np.isfinite(a).all() for a in arrays if a.dtype.kind == "f"):
    check_grads(run, atol if grad_atol is None else grad_atol, rtol if grad_rtol is None else grad_rtol, seed)
  return run

def _numeric_grad_fits(arrays: list[np.ndarray]) -> bool:
  """Whether finite differences can stand in for torch's gradients: float inputs of at least single precision (in
  half precision a difference quotient is noise), all finite, not empty and not large (where a sum over a million
  elements keeps a few within eps of a kink, its finite difference is off by more than a gradient may be)."""
  floats = [a for a in arrays if a.dtype.kind == "f"]
  return bool(floats) and all(a.dtype.itemsize >= 4 and 0 < a.size <= NUMERIC_GRAD_MAX_SIZE and np.isfinite(a).all()
                              for a in floats)

def _cotangents(outs: list[Any], seed: int) -> list[np.ndarray | None]:
  """A fixed random output gradient for each float output (None for the others)."""
  rng = np.random.default_rng(seed + 1)
  return [rng.uniform(-1, 1, size=tuple(o.shape)) if _is_float(o) else None for o in outs]

def _is_float(x: Any) -> bool:
  return x.dtype.is_float if isinstance(x, Tensor) else bool(x.dtype.is_floating_point)

def _realize_all(ts: list[Tensor]) -> None:
  """Realize tensors together: one schedule, shared work computed once."""
  if ts: ts[0].realize(*ts[1:])

def check_grads(run: OpRun, atol: float | None = None, rtol: float | None = None, seed: int = 0) -> None:
  """Backward on both sides of a `check_op` run whose reference is torch, and compare every float input's gradient.

  The loss is the sum of each float output times a fixed random cotangent, so every output element matters. An
  input that torch gives no gradient (not used, or only through non-differentiable ops) must get none or zeros. The
  gradient's dtype is the input's, as torch's. Inputs with inf or NaN are not checked (check_op skips them): both
  frameworks are free to give NaN or inf in different places there."""
  assert HAVE_TORCH
  outs, ref_outs = _outputs(run.out), _outputs(run.ref_out)
  pairs = [(x, r) for x, r in zip(run.inputs, run.ref_inputs) if x.dtype.is_float]
  if not pairs: return
  cots = _cotangents(ref_outs, seed)
  ref_terms = [(r * torch.from_numpy(c).to(r.dtype)).sum() for r, c in zip(ref_outs, cots)
               if c is not None and r.requires_grad]
  ref_grads: list[Any] = [None] * len(pairs)
  if ref_terms:
    ref_grads = list(torch.autograd.grad(sum(ref_terms), [r for _, r in pairs], allow_unused=True))
  terms = [(o * Tensor(c.astype(o.dtype.np), device=o.device)).sum() for o, c in zip(outs, cots) if c is not None]
  # requires_grad must have reached the output exactly when torch's did
  assert any(o.requires_grad for o in outs) == bool(ref_terms), "requires_grad did not propagate as in torch"
  for x, _ in pairs: x.grad = None
  if ref_terms: functools.reduce(lambda a, b: a + b, terms).backward()
  grads = [x.grad for x, _ in pairs]
  _realize_all([g for g in grads if g is not None])
  for i, ((x, _), g, rg) in enumerate(zip(pairs, grads, ref_grads)):
    label = f"gradient of input {i}: "
    if g is None and rg is None: continue
    if g is None: g = x.zeros_like()
    want = rg if rg is not None else np.zeros(x.shape, dtype=x.dtype.np)
    compare(g, want, atol, rtol, x.dtype, label=label)

def check_grad_numeric(fn: Callable[..., Any], inputs: Sequence[np.ndarray], directions: int = 3, eps: float = 1e-6,
                       atol: float = 1e-7, rtol: float = 1e-6, seed: int = 0, fallback: bool = False) -> None:
  """Check lazytensor's gradients of `fn` against central finite differences in float64 (no torch needed).

  The loss is the sum of fn's outputs times fixed random cotangents. Each check is along a random direction v of all
  the inputs together: (L(x + eps v) - L(x - eps v)) / 2 eps must equal the sum of <grad, v>. A random direction
  catches a wrong gradient in any element, and costs two forward passes however large the inputs are (one finite
  difference per element would cost two per element, each a realize). Float inputs are checked in float64; the others
  (indices, masks) are passed as they are; an input the loss does not use must get a zero gradient.

  `fallback`: standing in for torch on a function not written for this check, so it checks only what finite
  differences can tell: nothing when an output is not float64 (fn lowers the precision), and no direction along which
  the loss is not finite or not differentiable (a kink: the one-sided differences disagree)."""
  arrays = [np.asarray(a, dtype=np.float64) if np.asarray(a).dtype.kind == "f" else np.asarray(a) for a in inputs]
  is_float = [a.dtype.kind == "f" for a in arrays]
  xs = [Tensor(a) for a in arrays]
  outs = _outputs(fn(*xs))
  cots = _cotangents(outs, seed)
  if all(c is None for c in cots): return  # no float output: nothing has a gradient
  if fallback and any(o.dtype != dtypes.float64 for o, c in zip(outs, cots) if c is not None): return
  def loss(*ts: Tensor) -> Tensor:
    res = _outputs(fn(*ts))
    return functools.reduce(lambda a, b: a + b, [(o * Tensor(c)).sum() for o, c in zip(res, cots) if c is not None])
  grads = _gradients(loss(*xs), [x for x, f in zip(xs, is_float) if f])
  _realize_all(grads)
  rng = np.random.default_rng(seed + 2)
  vs = [[rng.standard_normal(a.shape) if f else np.zeros(a.shape) for a, f in zip(arrays, is_float)]
        for _ in range(directions)]
  # all the perturbed losses realize together: one schedule for the whole check
  ends = [loss(*[Tensor(a + sign * eps * v) if f else Tensor(a) for a, v, f in zip(arrays, dirs, is_float)])
          for dirs in vs for sign in (1, -1)] + [loss(*xs)]
  _realize_all(ends)
  mid = ends[-1].item()
  for k, dirs in enumerate(vs):
    plus, minus = ends[2 * k].item(), ends[2 * k + 1].item()
    right, left = (plus - mid) / eps, (mid - minus) / eps
    if fallback and not (np.isfinite([plus, minus, mid]).all() and abs(right - left) <= 1e-3 * (1 + abs(right))):
      continue
    numeric = (plus - minus) / (2 * eps)
    analytic = sum(float((g.numpy() * v).sum()) for g, v in zip(grads, [v for v, f in zip(dirs, is_float) if f]))
    assert abs(numeric - analytic) <= atol + rtol * abs(numeric), \
      f"direction {k}: finite differences give {numeric}, the gradient gives {analytic}"

def _gradients(loss: Tensor, targets: list[Tensor]) -> list[Tensor]:
  """loss's gradient for each target; zeros for a target that it does not reach through a differentiable path
  (which gradient() calls an error)."""
  try: return loss.gradient(*targets)
  except ValueError as e:
    if "is not used to compute" not in str(e): raise
  out = []
  for t in targets:
    try: out.append(loss.gradient(t)[0])
    except ValueError as e:
      if "is not used to compute" not in str(e): raise
      out.append(t.zeros_like())
  return out

def _make_inputs(shapes: Sequence[InputSpec], dtype: DType | str | Sequence[DType | str], gen: Generator,
                 seed: int) -> list[np.ndarray]:
  dts = [to_dtype(d) for d in dtype] if isinstance(dtype, (list, tuple)) else [to_dtype(dtype)] * len(shapes)
  rng = np.random.default_rng(seed)
  return [s if isinstance(s, np.ndarray) else gen(tuple(s), dt, rng) for s, dt in zip(shapes, dts)]

def _uniform(low: float, high: float) -> Generator:
  return lambda shape, dt, rng: random_array(shape, dt, rng, low, high)
