"""bfloat16: numpy has none, so a bfloat16 buffer holds its values' bits (dtype.to_storage / from_storage) and
`numpy()` gives float32. Arithmetic is float32 rounded to bfloat16 after every op (codegen/alu.py) on CPU (LLVM), EMU
and CUDACPU alike; matmuls on the GPU-like devices run on the m16n8k16 bf16 -> f32 tensor core."""
from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
from helpers import HAVE_TORCH, torch

from lazytensor import Context, Tensor, dtypes
from lazytensor.dtype import from_storage, promote_types, to_storage, truncate

BF16, F32 = dtypes.bfloat16, dtypes.float32
DEVICES = ["CPU", "EMU", *(["CUDACPU"] if shutil.which("g++") else [])]
rng = np.random.default_rng(0)

def torch_bits(x: np.ndarray) -> np.ndarray:
  """float32 -> bfloat16 bits by torch (round to nearest even)."""
  return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)

def bf16_round(x: np.ndarray) -> np.ndarray: return from_storage(to_storage(x, BF16), BF16)

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference for bfloat16 rounding")
def test_rounding_matches_torch() -> None:
  specials = [0.0, -0.0, 1.0, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 3.3895e38, 3.4e38, -3.4e38, 1e-40, 9.2e-41,
              math.inf, -math.inf, 65504.0, 1 / 3]
  x = np.concatenate([np.array(specials, np.float32), rng.standard_normal(4096).astype(np.float32) * 1e3,
                      rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32)])
  finite = ~np.isnan(x)
  np.testing.assert_array_equal(to_storage(x, BF16)[finite], torch_bits(x)[finite])
  assert np.isnan(from_storage(to_storage(np.array([math.nan, -math.nan]), BF16), BF16)).all()  # NaN stays NaN
  assert truncate(BF16, 1 / 3) == 0.333984375 and truncate(BF16, 1e39) == math.inf

def test_tensor_io_and_dtype_rules() -> None:
  x = rng.standard_normal((3, 5)).astype(np.float32)
  t = Tensor(x, dtype="bfloat16")
  out = t.numpy()
  assert t.dtype == BF16 and out.dtype == np.float32 and out.shape == (3, 5)
  np.testing.assert_array_equal(out, bf16_round(x))
  assert Tensor([], dtype=BF16).numpy().dtype == np.float32 and Tensor(1.5, dtype=BF16).item() == 1.5
  assert promote_types(BF16, dtypes.float16) == F32 and promote_types(BF16, F32) == F32
  assert promote_types(BF16, dtypes.int8) == BF16 and promote_types(BF16, dtypes.float64) == dtypes.float64
  assert (t + 1).dtype == BF16 and (t + Tensor([1.0], dtype=dtypes.float16)).dtype == F32
  assert t.sum().dtype == BF16 and dtypes.bf16 == BF16

@pytest.mark.parametrize("device", DEVICES)
def test_ops_round_after_every_op(device: str) -> None:
  a, b = rng.standard_normal((2, 33, 17)).astype(np.float32)
  ta, tb = Tensor(a, device, BF16), Tensor(b, device, BF16)
  ra, rb = bf16_round(a), bf16_round(b)
  np.testing.assert_array_equal((ta * tb + ta).numpy(), bf16_round(bf16_round(ra * rb) + ra))
  np.testing.assert_array_equal(ta.maximum(tb).numpy(), np.maximum(ra, rb))
  np.testing.assert_array_equal((ta * 100).cast(dtypes.int32).numpy(), np.trunc(bf16_round(ra * 100)).astype(np.int32))
  np.testing.assert_array_equal(ta.cast(dtypes.float16).numpy(), ra.astype(np.float16))
  np.testing.assert_array_equal(ta.cast(dtypes.float64).cast(BF16).numpy(), ra)
  # a sum accumulates in float32 and rounds once; exp is computed in float32 (as for float16)
  np.testing.assert_allclose(ta.sum(1).numpy(), bf16_round(ra.sum(1)), rtol=1e-2, atol=1e-2)
  np.testing.assert_allclose(ta.exp().numpy(), bf16_round(np.exp(ra)), rtol=1e-2)
  np.testing.assert_array_equal((ta > tb).numpy(), ra > rb)

@pytest.mark.parametrize("device", DEVICES)
def test_value_widened_in_a_loop_and_after_it(device: str) -> None:
  # logsumexp widens its bfloat16 shift m to float32 inside the reduce loop (x - m) and again after it (+ m): the one
  # widened value must be placed before the loop (it was placed inside it, which LLVM rejects: "Instruction does not
  # dominate all uses")
  x = rng.standard_normal((3, 7)).astype(np.float32)
  t, r = Tensor(x, device, BF16), bf16_round(x).astype(np.float64)
  want = np.log(np.exp(r - r.max(1, keepdims=True)).sum(1)) + r.max(1)
  np.testing.assert_allclose(t.logsumexp(1).numpy(), want, rtol=2e-2)
  np.testing.assert_allclose(t.logcumsumexp(1).numpy()[:, -1], want, rtol=2e-2)

def _matmul(device: str, n: int, capsys: pytest.CaptureFixture[str]) -> tuple[np.ndarray, np.ndarray, str]:
  a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  with Context(DEBUG=4): out = (Tensor(a, device, BF16) @ Tensor(b, device, BF16)).numpy()
  ref = bf16_round(a).astype(np.float64) @ bf16_round(b).astype(np.float64)  # exact products, accumulated in f32
  return out, ref, capsys.readouterr().out

@pytest.mark.skipif(shutil.which("g++") is None, reason="CUDACPU needs g++")
def test_matmul_on_tensor_cores_cudacpu(capsys: pytest.CaptureFixture[str]) -> None:
  out, ref, source = _matmul("CUDACPU", 256, capsys)
  assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in source and "lt_mma_m16n8k16_bf16_f32(" in source
  np.testing.assert_allclose(out, ref, rtol=1e-2, atol=5e-2)  # the float32 result rounded once to bfloat16

def test_matmul_on_tensor_cores_emu(capsys: pytest.CaptureFixture[str]) -> None:
  out, ref, source = _matmul("EMU", 32, capsys)
  assert "WMMA" in source and "m16n8k16_bf16_f32" in source
  np.testing.assert_allclose(out, ref, rtol=1e-2, atol=5e-2)
