"""The GPU checks (marked `gpu`; `pytest -m gpu` runs them, extra/gpu/check.sh on a GPU machine): every op family
against torch (forward and gradients, through check_op), the engine's kernel counts, softmax, matmul in fp32, fp16,
bf16 and tf32 on tensor cores, conv2d, reductions split over a block (GROUP), scatters of atomic updates, the
multi-device paths, BEAM, and a few training steps.

They run on the GPU that the `gpu` fixture names: DEV when it names a CUDA device (CUDA, CUDA:1) or CUDACPU (the CUDA
source run on the CPU: `check.sh --dry-run`), else CUDA. Where that device cannot be opened (no pycuda, NVIDIA driver or
GPU: CUDAUnavailableError) every test skips, saying which is missing, as in the normal suite on a machine without one.
"""
from __future__ import annotations

import importlib.util
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, check_op, torch

from lazytensor import Context, Device, GlobalCounters, Tensor, dtypes, nn
from lazytensor.engine.realize import CompiledRunner, get_runner
from lazytensor.helpers import DEV
from lazytensor.nn.optim import AdamW
from lazytensor.nn.state import get_parameters
from lazytensor.runtime.ops_cuda import CudaDevice, CUDAUnavailableError
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops

pytestmark = pytest.mark.gpu
ROOT = pathlib.Path(__file__).resolve().parent.parent
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")

@pytest.fixture(scope="module")
def gpu_name() -> str:
  """The device under test (see the module's docstring), opened once; a skip where it cannot be."""
  dev = Device.canonicalize(DEV.value or "CPU")
  name = dev if dev.partition(":")[0] in ("CUDA", "CUDACPU") else "CUDA"
  try: Device[name]
  except CUDAUnavailableError as e: pytest.skip(str(e))
  return name

@pytest.fixture
def gpu(gpu_name: str) -> Iterator[str]:
  """The device under test, made the default device for the test."""
  with Context(DEV=gpu_name): yield gpu_name

def runners(t: Tensor) -> list[CompiledRunner]:
  """The compiled kernels that realizing `t` runs (on its device, with the knobs in force)."""
  items, _ = create_schedule([t.lazydata])
  return [get_runner(it.bufs[0].device, it.ast) for it in items if it.ast.op is Ops.SINK]

def sources(t: Tensor) -> list[str]: return [r.spec.source for r in runners(t)]

def kernel_count(fn: Callable[[], Tensor]) -> tuple[np.ndarray, int]:
  GlobalCounters.reset()
  out = fn().numpy()
  return out, GlobalCounters.kernel_count

# ---- every op family, against torch: forward values, dtypes and the gradients of float inputs ----

def _idx(high: int, *shape: int) -> np.ndarray:
  """Indices in [0, high), repeats included (a scatter's duplicates meet in one atomic target)."""
  return np.random.default_rng(1).integers(0, high, shape).astype(np.int64)

def _conv(x: Any, w: Any) -> Any: return torch.nn.functional.conv2d(x, w, padding=1, stride=2)

# name -> (input shapes or arrays, the function, check_op's other arguments)
OPS: dict[str, tuple[list[Any], Callable[..., Any], dict[str, Any]]] = {
  "elementwise_chain": ([(33, 65), (33, 65)], lambda a, b: ((a * b + a - b).sin() * a.tanh()).sigmoid() + b.relu(), {}),
  "elementwise_unary": ([(7, 129)], lambda x: x.exp() + x.abs().log() * x.abs().sqrt() - x.cos() * x.reciprocal(),
                        {"low": 0.5, "high": 2.0}),
  "elementwise_broadcast": ([(4, 1, 8), (3, 1)], lambda a, b: (a * b + a).maximum(a / (b.abs() + 1)), {}),
  "elementwise_half": ([(16, 64), (16, 64)], lambda a, b: (a * b + a).exp() - b, {"dtype": dtypes.float16,
                                                                                "atol": 1e-2, "rtol": 1e-2}),
  "elementwise_int": ([(16, 64), (16, 64)], lambda a, b: a * b + (a - b).abs() - a.maximum(b), {"dtype": dtypes.int32}),
  "casts": ([(8, 32)], lambda x: x.half().float() * 3 + x.int().float(), {}),
  "reduce_axes": ([(9, 33, 17)], lambda x: x.sum(1) + x.amax(0).mean() - x.amin(2, keepdim=True).sum(1), {}),
  "reduce_stats": ([(12, 100)], lambda x: x.var(1) + x.std(0).sum() + x.logsumexp(1), {}),
  "argmax": ([(12, 40)], lambda x: x.argmax(1), {"grad": False}),
  "prod": ([(12, 10)], lambda x: (x.abs() + 0.5).prod(1), {}),
  "cumsum": ([(6, 300)], lambda x: x.cumsum(1), {}),
  "movement": ([(6, 20)], lambda x: x.reshape(4, 30).transpose(0, 1).flip(0)[2:25:3].unsqueeze(0).expand(2, 8, 4)
                                    .contiguous() * 2, {}),
  "movement_repeat_pad": ([(5, 7)], lambda x: x.repeat(2, 3)[1:, :-2] + 1, {}),
  "getitem_tensor": ([(50, 16), _idx(50, 30)], lambda x, i: x[i] * 2, {}),
  "gather": ([(20, 30), _idx(30, 20, 12)], lambda x, i: x.gather(1, i), {}),
  "masked_fill": ([(20, 30)], lambda x: x.masked_fill(x > 0.5, 0.0) + x, {}),
  "scatter_index_add": ([(40, 16), _idx(40, 300), (300, 16)], lambda t, i, s: t.index_add(0, i, s), {}),
  "scatter_reduce_amax": ([(40, 16), _idx(40, 300, 16), (300, 16)],
                          lambda t, i, s: t.scatter_reduce(0, i, s, "amax"), {"grad": False}),
  "softmax": ([(33, 1000)], lambda x: x.softmax(-1), {}),
  "log_softmax": ([(8, 4096)], lambda x: x.log_softmax(1), {}),
  "matmul_fp32": ([(64, 80), (80, 48)], lambda a, b: (a @ b).relu(), {"atol": 1e-4, "rtol": 1e-4}),
  "conv2d": ([(2, 3, 17, 17), (8, 3, 3, 3)], lambda x, w: x.conv2d(w, padding=1, stride=2),
             {"torch_fn": _conv, "atol": 1e-4, "rtol": 1e-4}),
}

@needs_torch
@pytest.mark.parametrize("name", list(OPS))
def test_op_family(gpu: str, name: str) -> None:
  shapes, fn, kwargs = OPS[name]
  check_op(shapes, fn, **kwargs)

# ---- the engine: kernels fused as DESIGN.md promises ----

def test_kernel_counts(gpu: str) -> None:
  rng = np.random.default_rng(2)
  a, b = rng.standard_normal((33, 65), np.float32), rng.standard_normal((33, 65), np.float32)
  w = rng.standard_normal((65, 24), np.float32)
  cases: list[tuple[Callable[[], Tensor], np.ndarray, int]] = [
    (lambda: (Tensor(a) + Tensor(b)) * 2 - 1, (a + b) * 2 - 1, 1),
    (lambda: (Tensor(a) * Tensor(b)).sum(1), (a * b).sum(1), 1),
    (lambda: Tensor(a).sum(1) + 1, a.sum(1) + 1, 1),
    (lambda: (Tensor(a) @ Tensor(w)).relu(), np.maximum(a @ w, 0), 1),
  ]
  for fn, want, kernels in cases:
    out, n = kernel_count(fn)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    assert n == kernels, f"{n} kernels, expected {kernels}"
  e = np.exp(a - a.max(1, keepdims=True))
  out, n = kernel_count(lambda: Tensor(a).softmax(1))
  np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
  assert n <= 3
  GlobalCounters.reset()
  s = Tensor(a) + Tensor(b)
  total, top = s.sum(), s.max()
  Tensor.realize(total, top)
  assert GlobalCounters.kernel_count <= 2
  np.testing.assert_allclose([total.item(), top.item()], [(a + b).sum(), (a + b).max()], rtol=1e-4)

# ---- tensor cores, convolution, reductions over a block ----

TENSOR_CORES = {  # dtype of the inputs -> (the PTX instruction of its tensor core, tolerance of the product)
  "float16": ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 5e-2),
  "bfloat16": ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 2e-1),
  "tf32": ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", 5e-2),
}

@pytest.mark.parametrize("kind", list(TENSOR_CORES))
def test_matmul_on_tensor_cores(gpu: str, kind: str) -> None:
  ptx, tol = TENSOR_CORES[kind]
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((256, 192), np.float32), rng.standard_normal((192, 128), np.float32)
  dt = dtypes.float32 if kind == "tf32" else getattr(dtypes, kind)
  with Context(TF32=kind == "tf32"):
    out = Tensor(a, dtype=dt) @ Tensor(b, dtype=dt)
    assert any(ptx in src for src in sources(out)), f"no {ptx} in the kernels"
    got = out.float().numpy()
  # the reference rounds the inputs as the tensor cores read them (tf32: 10 mantissa bits, as bfloat16 has 7)
  ra, rb = (Tensor(a, dtype=dt).float().numpy(), Tensor(b, dtype=dt).float().numpy()) if kind != "tf32" else (a, b)
  np.testing.assert_allclose(got, ra.astype(np.float64) @ rb, rtol=tol, atol=tol)

@needs_torch
def test_conv2d_half_on_tensor_cores(gpu: str) -> None:
  rng = np.random.default_rng(4)
  # 16x16 images: the heuristics put the tensor cores' 16-wide tiles on the pixels only where they divide them
  x, w = rng.standard_normal((4, 32, 16, 16)).astype(np.float16), rng.standard_normal((32, 32, 3, 3)).astype(np.float16)
  out = Tensor(x).conv2d(Tensor(w), padding=1)
  assert any("mma.sync" in src for src in sources(out))
  want = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float32), torch.tensor(w, dtype=torch.float32),
                                    padding=1).numpy()
  np.testing.assert_allclose(out.numpy().astype(np.float32), want, rtol=2e-2, atol=1e-1)

@pytest.mark.parametrize("shape,axis", [((1 << 22,), None), ((4, 100_000), 1)], ids=["all_4M", "rows_100k"])
def test_long_reductions_use_groups(gpu: str, shape: tuple[int, ...], axis: int | None) -> None:
  x = np.random.default_rng(5).random(shape, dtype=np.float32)
  t = Tensor(x).sum(axis)
  assert any("__shared__" in src and "__syncthreads();" in src for src in sources(t)), "no GROUP in the kernels"
  np.testing.assert_allclose(t.numpy(), x.astype(np.float64).sum(axis), rtol=1e-5)

# ---- scatters: every entry a thread, an atomic update of its target ----

def test_scatters_are_atomic_updates(gpu: str) -> None:
  rng = np.random.default_rng(6)
  idx, rows = _idx(1000, 4096), rng.standard_normal((4096, 64), np.float32)
  out = Tensor.zeros(1000, 64).index_add(0, Tensor(idx), Tensor(rows))
  assert any("atomicAdd(" in src for src in sources(out))
  want = np.zeros((1000, 64), np.float32)
  np.add.at(want, idx, rows)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)
  emb = nn.Embedding(1000, 64)
  emb.weight.requires_grad_()
  emb(Tensor(idx.reshape(64, 64))).sum().backward()
  assert emb.weight.grad is not None
  np.testing.assert_array_equal(emb.weight.grad.numpy()[:, 0], np.bincount(idx, minlength=1000))

# ---- several devices with one GPU ----

@pytest.fixture
def pair(gpu: str) -> tuple[str, str]:
  """Two devices for the multi-device paths: two GPUs where there are; with one, the GPU and the CPU (a tuple names a
  device once, and CUDA:1 does not exist), which runs the same sharding, collectives and copies, through the host."""
  dev = Device[gpu]
  if isinstance(dev, CudaDevice) and dev.drv.Device.count() > 1 and gpu == "CUDA": return ("CUDA", "CUDA:1")
  return (gpu, "CPU")

def test_sharded_ops_and_collectives(pair: tuple[str, str]) -> None:
  rng = np.random.default_rng(7)
  x, w = rng.standard_normal((15, 40), np.float32), rng.standard_normal((40, 24), np.float32)
  xs = Tensor(x).shard(pair, axis=0)
  assert xs.bounds == ((0, 8), (8, 15))
  np.testing.assert_allclose(((xs * 2 + 1).relu()).to(pair[0]).numpy(), np.maximum(x * 2 + 1, 0), rtol=1e-6)
  np.testing.assert_allclose(xs.sum(0).to(pair[0]).numpy(), x.sum(0), rtol=1e-5, atol=1e-5)  # an all-reduce
  out = xs @ Tensor(w).shard(pair, axis=None)
  np.testing.assert_allclose(out.to(pair[0]).numpy(), x @ w, rtol=1e-4, atol=1e-4)
  cols = Tensor(x).shard(pair, axis=1)  # a reduce over the sharded axis: partial sums, then an all-reduce
  np.testing.assert_allclose((cols * cols).sum(1).to(pair[1]).numpy(), (x * x).sum(1), rtol=1e-5)
  back = Tensor(x, device=pair[1]).to(pair[0]).exp().to(pair[1])  # copies both ways
  np.testing.assert_allclose(back.numpy(), np.exp(x), rtol=1e-5)

# ---- BEAM: candidates compiled and timed in worker processes ----

BEAM_KERNELS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
  "exp_sum": lambda x, w: (x.exp() * 2).sum(1),
  "matmul": lambda x, w: x @ w,
  "softmax": lambda x, w: x.softmax(1),
}

@pytest.mark.parametrize("name", list(BEAM_KERNELS))
def test_beam_search(gpu: str, name: str, tmp_path: pathlib.Path) -> None:
  rng = np.random.default_rng(8)
  x, w = rng.standard_normal((64, 128), np.float32), rng.standard_normal((128, 64), np.float32)
  want = BEAM_KERNELS[name](Tensor(x, device="CPU"), Tensor(w, device="CPU")).numpy()
  with Context(BEAM=2, PARALLEL=2, IGNORE_BEAM_CACHE=1, CACHEDB=str(tmp_path / "beam.db")):
    out = BEAM_KERNELS[name](Tensor(x), Tensor(w))
    assert any(r.kernel.applied_opts for r in runners(out)), "the search chose no opts"
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)

# ---- training ----

@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="the example's digits come with scikit-learn")
def test_training_steps(gpu: str) -> None:
  spec = importlib.util.spec_from_file_location("train_digits", ROOT / "extra" / "examples" / "train_digits.py")
  assert spec is not None and spec.loader is not None
  example = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(example)
  x_train, y_train, x_test, y_test = example.load_split()
  Tensor.manual_seed(0)
  model = example.MODELS["mlp"].make()
  step = example.make_step(model, AdamW(get_parameters(model), lr=3e-3))
  losses = [step(Tensor(x_train[i * 64:(i + 1) * 64]), Tensor(y_train[i * 64:(i + 1) * 64])).item() for i in range(20)]
  assert losses[-1] < 0.5 * losses[0], losses
  assert example.accuracy(model, x_test, y_test) > 0.7
