"""Mixed precision: tensor cores for 16-bit casts of float32 operands (EMU's WMMA; test_cuda_renderer.py runs the same
on CUDACPU with nvcc), `autocast` (which dtypes ops take inside it, values against numpy), and a mixed-precision
training loop with loss scaling (nn.amp.GradScaler) against the same loop in float32, on EMU and CUDACPU."""
from __future__ import annotations

import shutil
from collections.abc import Callable

import numpy as np
import pytest

from lazytensor import Context, Tensor, autocast, dtypes, nn
from lazytensor.dtype import DType
from lazytensor.engine.realize import compile_kernel
from lazytensor.nn.amp import GradScaler
from lazytensor.nn.optim import SGD
from lazytensor.nn.state import get_parameters
from lazytensor.opt.kernel import Kernel
from lazytensor.runtime.device import Device
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import GroupOp, Ops, UOp

RNG = np.random.default_rng(0)
A, B = RNG.standard_normal((64, 32)).astype(np.float32), RNG.standard_normal((32, 48)).astype(np.float32)

def emu_kernels(out: Tensor) -> list[tuple[Kernel, str]]:
  """The kernels that compute `out` on EMU as the heuristics optimize them, each with its program's text."""
  items, _ = create_schedule([out.lazydata])
  runners = [compile_kernel(it.ast, Device["EMU"]) for it in items if it.ast.op is Ops.SINK]
  return [(r.kernel, r.spec.source) for r in runners]

def rounded(x: np.ndarray, dt: DType) -> np.ndarray:
  """x rounded to dt (float16 by numpy; bfloat16 to nearest even by its bits) and back to float64."""
  if dt == dtypes.float16: return x.astype(np.float16).astype(np.float64)
  bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
  bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
  return bits.astype(np.uint32).view(np.float32).astype(np.float64)

def _cast_matmul(dt: DType) -> Callable[[Tensor, Tensor], Tensor]: return lambda a, b: a.cast(dt) @ b.cast(dt)

def _autocast_matmul(dt: DType) -> Callable[[Tensor, Tensor], Tensor]:
  def f(a: Tensor, b: Tensor) -> Tensor:
    with autocast(dt): return a @ b
  return f

@pytest.mark.parametrize("dt,f", [(dtypes.float16, _cast_matmul(dtypes.float16)),
                                  (dtypes.bfloat16, _cast_matmul(dtypes.bfloat16)),
                                  (dtypes.float16, _autocast_matmul(dtypes.float16)),
                                  (dtypes.bfloat16, _autocast_matmul(dtypes.bfloat16))],
                         ids=["half", "bfloat16", "autocast_half", "autocast_bfloat16"])
def test_16_bit_casts_of_float32_run_on_tensor_cores(dt: DType, f: Callable[[Tensor, Tensor], Tensor]) -> None:
  # one kernel: float32 loads rounded in registers into the fragments of the mma, products summed in float32
  out = f(Tensor(A, device="EMU"), Tensor(B, device="EMU"))
  [(k, src)] = emu_kernels(out)
  assert k.tensor_core is not None and k.tensor_core.tc.dtype_in == dt and " WMMA " in src
  assert out.dtype == dt
  want = rounded(A, dt) @ rounded(B, dt)
  np.testing.assert_allclose(out.float().numpy(), rounded(want, dt), rtol=1e-2 if dt == dtypes.float16 else 1e-1,
                             atol=1e-2)

def test_float32_matmul_on_tf32_tensor_cores_with_the_knob() -> None:
  a, b = Tensor(A, device="EMU"), Tensor(B, device="EMU")
  [(k, _)] = emu_kernels(a @ b)
  assert k.tensor_core is None  # float32 stays float32 unless asked
  with Context(TF32=1):
    [(k, src)] = emu_kernels(a @ b)
    got = (a @ b).numpy()
  assert k.tensor_core is not None and k.tensor_core.tc.name == "m16n8k8_tf32_f32" and " WMMA " in src
  np.testing.assert_allclose(got, A.astype(np.float64) @ B, rtol=1e-2, atol=1e-2)

# ---- autocast: the dtypes ops take inside it ----

def _reduce_operands(t: Tensor) -> list[UOp]:
  """What the one sum of products in t's graph multiplies, under the cast to its accumulator."""
  [r] = [u for u in t.lazydata.toposort if u.op is Ops.REDUCE_AXIS]
  assert r.dtype == dtypes.float32 and r.src[0].op is Ops.MUL
  out = []
  for s in r.src[0].src:
    while s.op in GroupOp.Movement: s = s.src[0]
    out.append(s)
  return out

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_autocast_matmul_and_conv_in_low_precision_with_float32_accumulation(dt: DType) -> None:
  # from data, not Tensor.randn: a later draw realizes the earlier draws' readers (they share the generator's state)
  x, w, bias, a, b = (Tensor(RNG.standard_normal(s).astype(np.float32)) for s in [(2, 3, 8, 8), (4, 3, 3, 3), (4,),
                                                                                   (4, 5), (5, 6)])
  with autocast(dt): mm, conv, lin = a @ b, x.conv2d(w, bias), a.linear(b, bias[:, None].expand(4, 6)[0])
  assert (mm.dtype, conv.dtype, lin.dtype) == (dt, dt, dt)
  for t in (mm, conv):  # each operand a float32 cast of a value rounded to dt
    assert all(s.op is Ops.CAST and s.src[0].dtype == dt for s in _reduce_operands(t))

def test_autocast_reductions_and_softmax_in_float32() -> None:
  h = Tensor.randn(4, 8).half()
  with autocast(dtypes.half):
    assert h.sum().dtype == h.mean(1).dtype == h.softmax(1).dtype == h.log_softmax(1).dtype == dtypes.float32
    assert h.max().dtype == dtypes.half and h.sum(dtype=dtypes.half).dtype == dtypes.half  # asked for: as asked
    with autocast(dtypes.half, enabled=False): assert h.sum().dtype == (h @ h.T).dtype == dtypes.half
    f64 = Tensor.randn(3, 3, dtype=dtypes.float64)
    assert (f64 @ f64).dtype == dtypes.float64  # as torch's autocast: float64 is left alone
  assert h.sum().dtype == h.softmax(1).dtype == dtypes.half and (Tensor.ones(2, 2) @ Tensor.ones(2, 2)).dtype == \
    dtypes.float32

def test_autocast_wants_a_16_bit_float() -> None:
  with pytest.raises(ValueError, match="float32 is not a 16-bit float"): autocast(dtypes.float32)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_autocast_values_against_numpy(dt: DType) -> None:
  x, w = RNG.standard_normal((2, 16, 6, 6)).astype(np.float32), RNG.standard_normal((8, 16, 3, 3)).astype(np.float32)
  with autocast(dt):
    conv = Tensor(x, device="EMU").conv2d(Tensor(w, device="EMU"))
    probs = (Tensor(A, device="EMU") @ Tensor(B, device="EMU")).softmax(1)
  xw = np.lib.stride_tricks.sliding_window_view(rounded(x, dt), (3, 3), axis=(2, 3))  # (2, 16, 4, 4, 3, 3)
  want_conv = np.einsum("bchwij,ocij->bohw", xw, rounded(w, dt))
  tol = 2e-2 if dt == dtypes.float16 else 1e-1
  np.testing.assert_allclose(conv.float().numpy(), want_conv, rtol=tol, atol=tol)
  logits = rounded(rounded(A, dt) @ rounded(B, dt), dt)
  want = np.exp(logits - logits.max(1, keepdims=True))
  np.testing.assert_allclose(probs.numpy(), want / want.sum(1, keepdims=True), rtol=tol, atol=1e-3)

# ---- training: float32 master weights, autocast forward, loss scaling ----

def _train(device: str, dt: DType | None, steps: int = 8) -> tuple[list[float], list[np.ndarray]]:
  """A two-layer MLP trained with SGD on a fixed regression; with `dt`, its forward in autocast(dt) and its loss
  scaled (float16: a GradScaler; bfloat16 has float32's range and needs none). Returns the losses and the weights."""
  rng = np.random.default_rng(1)
  x, y = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((64, 16)).astype(np.float32)
  l1, l2 = nn.Linear(32, 64), nn.Linear(64, 16)
  for layer in (l1, l2):
    layer.weight, layer.bias = (Tensor(rng.standard_normal(p.shape).astype(np.float32) * 0.1, device=device)
                                for p in (layer.weight, layer.bias))
  params = get_parameters([l1, l2])
  opt = SGD(params, lr=0.02)
  scaler = GradScaler(init_scale=2.0 ** 12, enabled=dt == dtypes.float16)
  xt, yt = Tensor(x, device=device), Tensor(y, device=device)
  losses = []
  for _ in range(steps):
    opt.zero_grad()
    with autocast(dt or dtypes.half, enabled=dt is not None):
      h = l1(xt).relu()
      loss = (l2(h).float() - yt).square().sum(1).mean()
    assert h.dtype == (dt or dtypes.float32)
    scaler.scale(loss).backward()
    assert scaler.step(opt)
    scaler.update()
    losses.append(loss.item())
  assert all(p.dtype == dtypes.float32 for p in params)  # master weights stay float32
  return losses, [p.numpy() for p in params]

def _on(device: str) -> str:
  if device == "CUDACPU" and shutil.which("g++") is None: pytest.skip("CUDACPU needs g++")
  return device

@pytest.mark.parametrize("device", ["EMU", "CUDACPU"])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_mixed_precision_training_matches_float32(device: str, dt: DType) -> None:
  ref_losses, ref_params = _train("CPU", None)
  losses, params = _train(_on(device), dt)
  assert losses[-1] < 0.9 * losses[0]
  tol = 1e-2 if dt == dtypes.float16 else 5e-2  # 11 and 8 bits of mantissa in the forward and backward products
  np.testing.assert_allclose(losses, ref_losses, rtol=tol)
  for p, ref in zip(params, ref_params): np.testing.assert_allclose(p, ref, rtol=tol, atol=tol * np.abs(ref).max())

# ---- GradScaler ----

def test_grad_scaler_skips_an_overflowing_step_and_adapts_its_scale() -> None:
  w = Tensor([1.0, 2.0], requires_grad=True)
  opt, scaler = SGD([w], lr=0.1), GradScaler(init_scale=2.0 ** 14, growth_interval=2)
  # (w * 1e4).half() overflows float16 once scaled: the step is skipped, the weights kept, the scale halved
  scaler.scale(((w * 1e4).half() * 8.0).sum()).backward()
  assert not scaler.step(opt) and w.tolist() == [1.0, 2.0]
  scaler.update()
  assert scaler.get_scale() == 2.0 ** 13
  for _ in range(2):  # good steps: the gradient unscaled (2w), and after growth_interval of them the scale doubles
    opt.zero_grad()
    scaler.scale((w * w).sum()).backward()
    before = w.numpy()
    assert scaler.step(opt)
    np.testing.assert_allclose(w.numpy(), before - 0.1 * 2 * before, rtol=1e-6)
    scaler.update()
  assert scaler.get_scale() == 2.0 ** 14

def test_grad_scaler_errors() -> None:
  with pytest.raises(ValueError, match="backoff_factor 2"): GradScaler(backoff_factor=2)
  w = Tensor([1.0], requires_grad=True)
  opt, scaler = SGD([w], lr=0.1), GradScaler()
  with pytest.raises(RuntimeError, match=r"update\(\) before step"): scaler.update()
  scaler.scale(w.sum()).backward()
  scaler.unscale_(opt)
  with pytest.raises(RuntimeError, match="already called"): scaler.unscale_(opt)

def test_docstring_examples() -> None:
  import doctest

  import lazytensor.frontend.autocast
  import lazytensor.nn.amp
  modules = (lazytensor.frontend.autocast, lazytensor.nn.amp)
  results = [doctest.testmod(m, optionflags=doctest.ELLIPSIS) for m in modules]
  assert sum(r.failed for r in results) == 0 and sum(r.attempted for r in results) >= 8, results

# ---- accuracy: half attention ----

def test_half_attention_rounds_its_probabilities_once() -> None:
  # scores kept in float32 through the scale and the softmax: rounded to half as products and again when scaled, this
  # attention was 2.6e-3 from float32 (the inputs' own rounding to half alone gives 9.6e-4)
  q, k, v = (RNG.standard_normal((1, 8, 256, 40)).astype(np.float32) * 3 for _ in range(3))
  want = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v)).numpy().astype(np.float64)
  got = Tensor(q).half().scaled_dot_product_attention(Tensor(k).half(), Tensor(v).half())
  assert got.dtype == dtypes.half
  assert np.linalg.norm(got.float().numpy() - want) / np.linalg.norm(want) < 1.3e-3
  with autocast(dtypes.half): assert Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v)).dtype == dtypes.half
