"""func.checkpoint (the backward recomputes a region's forward from its inputs) and the memory statistics that measure
it (memory_allocated, max_memory_allocated, reset_peak_memory_stats): gradients the same as without checkpointing
(bit for bit) and as torch's, less peak memory in a training step, composition with the other transformations."""
from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from lazytensor import (
  Context,
  Device,
  Tensor,
  func,
  max_memory_allocated,
  memory_allocated,
  nn,
  reset_peak_memory_stats,
)
from lazytensor.nn.optim import SGD

# ---- memory statistics ----

DEV = "CPU:1"  # a device of its own: nothing else allocates there while a test counts

def test_memory_allocated_counts_live_buffers() -> None:
  gc.collect()
  before = memory_allocated(DEV)
  t = Tensor.arange(256, device=DEV).float().contiguous().realize()
  assert memory_allocated(DEV) - before == 256 * 4
  u = (t * 2).realize()
  assert memory_allocated(DEV) - before == 2 * 256 * 4
  del t, u
  gc.collect()
  # freed: back to what it was, though the allocator keeps the memory for the next buffer (BUFFER_CACHE)
  assert memory_allocated(DEV) == before and Device[DEV].allocator.cached_bytes >= 256 * 4
  again = Tensor.arange(256, device=DEV).float().contiguous().realize()
  assert memory_allocated(DEV) - before == 256 * 4 and again.numel() == 256

def test_max_memory_allocated_and_reset() -> None:
  gc.collect()
  reset_peak_memory_stats(DEV)
  base = memory_allocated(DEV)
  assert max_memory_allocated(DEV) == base
  a = Tensor.ones(1024, device=DEV).contiguous().realize()
  b = (a + 1).realize()
  del a, b
  gc.collect()
  assert memory_allocated(DEV) == base and max_memory_allocated(DEV) == base + 2 * 4096
  reset_peak_memory_stats(DEV)
  assert max_memory_allocated(DEV) == base
  # the intermediates of one schedule count while it runs: a chain of 3 materialized steps peaks above its output
  x = Tensor.ones(64, 64, device=DEV).contiguous().realize()
  reset_peak_memory_stats(DEV)
  y = (x @ x).relu().sum(0).realize()
  assert max_memory_allocated(DEV) > memory_allocated(DEV) and y.shape == (64,)

def test_memory_of_default_device() -> None:
  with Context(DEV=DEV): assert memory_allocated() == memory_allocated(DEV)
  with pytest.raises(ValueError, match="unknown device"): memory_allocated("TPU")

# ---- checkpointing ----

def _blocks(n: int, width: int = 16, hidden: int = 64) -> tuple[list[Callable[[Tensor], Tensor]], list[Tensor]]:
  pairs = [(nn.Linear(width, hidden), nn.Linear(hidden, width)) for _ in range(n)]
  def block(a: nn.Linear, b: nn.Linear) -> Callable[[Tensor], Tensor]: return lambda x: x + b(a(x).gelu())
  return [block(a, b) for a, b in pairs], [p for a, b in pairs for p in (a.weight, a.bias, b.weight, b.bias)]

def _loss(blocks: list[Callable[[Tensor], Tensor]], x: Tensor, checkpointed: bool) -> Tensor:
  for block in blocks: x = func.checkpoint(block)(x) if checkpointed else block(x)
  return (x * x).mean()

def _grads(checkpointed: bool, n: int = 4, batch: int = 8) -> list[np.ndarray]:
  Tensor.manual_seed(0)
  blocks, params = _blocks(n)
  for p in params: p.requires_grad = True
  x = Tensor(np.random.default_rng(0).standard_normal((batch, 16)).astype(np.float32), requires_grad=True)
  _loss(blocks, x, checkpointed).backward()
  return [t.grad.numpy() for t in [x, *params]]

def test_gradients_identical_to_without() -> None:
  for got, want in zip(_grads(True), _grads(False)): assert np.array_equal(got, want)

def test_gradients_as_torch_checkpoint() -> None:
  torch = pytest.importorskip("torch")
  from torch.utils.checkpoint import checkpoint as torch_checkpoint
  rng = np.random.default_rng(1)
  w1, w2, x = (rng.uniform(-0.5, 0.5, s).astype(np.float32) for s in ((16, 32), (32, 16), (4, 16)))
  tw1, tw2, tx = (torch.tensor(a, requires_grad=True) for a in (w1, w2, x))
  lw1, lw2, lx = (Tensor(a, requires_grad=True) for a in (w1, w2, x))
  def block(lib_gelu: Any, a: Any, b: Any) -> Any: return lambda h: h + lib_gelu(h @ a) @ b
  out = torch_checkpoint(block(torch.nn.functional.gelu, tw1, tw2), tx, use_reentrant=False)
  (out * out).sum().backward()
  ours = func.checkpoint(block(lambda t: t.gelu(approximate="none"), lw1, lw2))(lx)
  (ours * ours).sum().backward()
  for got, want in ((lx, tx), (lw1, tw1), (lw2, tw2)):
    np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-4, atol=1e-5)

@Context(DEV=DEV)
def _step_peak(checkpointed: bool) -> tuple[int, float]:
  Tensor.manual_seed(0)
  blocks, params = _blocks(8, width=32, hidden=128)
  opt = SGD(params, lr=0.01)
  x = Tensor(np.random.default_rng(0).standard_normal((256, 32)).astype(np.float32)).realize()
  def step() -> float:
    opt.zero_grad()
    loss = _loss(blocks, x, checkpointed).backward()
    opt.step()
    return loss.item()
  step()  # compiled and scheduled once
  gc.collect()
  reset_peak_memory_stats(DEV)
  base = memory_allocated(DEV)
  loss = step()
  return max_memory_allocated(DEV) - base, loss

def test_checkpointed_step_peaks_lower() -> None:
  # a training step of 8 blocks whose activations fill the memory: without checkpointing every block's hidden values
  # live from the forward to the backward; with it, one block's at a time (the extra/bench/checkpoint.py figures)
  plain, plain_loss = _step_peak(False)
  checkpointed, loss = _step_peak(True)
  # the recomputed forward's kernels may fuse (and round) differently from the plain one's: the second step's loss
  # agrees to rounding, not bit for bit
  assert loss == pytest.approx(plain_loss, rel=1e-6)
  # about half: the blocks' hidden values (835 KB) saved of 1.64-1.67 MB; what both peaks share moves with the
  # scheduler's choices (one value recomputed instead of stored: both +32 KB, 0.49 -> 0.50 of the plain peak)
  assert checkpointed < 0.55 * plain and plain - checkpointed > 800_000, (checkpointed, plain)

def test_checkpoint_of_nn_blocks() -> None:
  # layers as blocks (a convolution's stated gradient and a layernorm inside the region), and torch's form of a call
  def run(checkpointed: bool) -> list[np.ndarray]:
    Tensor.manual_seed(0)
    conv, norm = nn.Conv2d(2, 3, 3, padding=1), nn.LayerNorm(5)
    for p in (conv.weight, conv.bias, norm.weight, norm.bias): p.requires_grad = True
    def block(x: Tensor, scale: float = 1.0) -> Tensor: return norm(conv(x).relu()) * scale
    x = Tensor(np.random.default_rng(0).standard_normal((2, 2, 5, 5)).astype(np.float32), requires_grad=True)
    y = func.checkpoint(block)(x, scale=2.0) if checkpointed else block(x, scale=2.0)
    (y * y).sum().backward()
    return [t.grad.numpy() for t in (x, conv.weight, conv.bias, norm.weight, norm.bias)]
  for got, want in zip(run(True), run(False)): np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

def test_checkpoint_arguments() -> None:
  w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  x, y = Tensor([[1.0, 1.0]], requires_grad=True), Tensor([[0.5, -1.0]], requires_grad=True)
  # tensors in a nested argument, and one used twice
  out = func.checkpoint(lambda pair, k: ((pair[0] + pair[1] * pair[0]) @ w) * k)((x, y), 3)
  out.sum().backward()
  row_sums = np.ones((1, 2), np.float32) @ w.numpy().T  # d(sum(h @ w))/dh
  np.testing.assert_allclose(x.grad.numpy(), 3 * (1 + y.numpy()) * row_sums, rtol=1e-6)
  np.testing.assert_allclose(y.grad.numpy(), 3 * x.numpy() * row_sums, rtol=1e-6)
  with pytest.raises(TypeError, match="one Tensor"): func.checkpoint(lambda a: (a, a))(x)
  # nothing to recompute: under no_grad, or for values that need no gradient, fn's own result
  plain = Tensor([1.0, 2.0])
  assert func.checkpoint(lambda a: a * 2)(plain).lazydata is (plain * 2).lazydata

def test_checkpoint_composes() -> None:
  torch = pytest.importorskip("torch")
  rng = np.random.default_rng(2)
  w, xs = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
  def loss(lib_checkpoint: Any) -> Callable[[Any, Any], Any]:
    return lambda w, x: (lib_checkpoint(lambda h: (h @ w).tanh())(x) ** 2).sum()
  def torch_checkpoint(fn: Any) -> Any: return fn  # torch.func transforms do not take torch's checkpoint
  got = func.vmap(func.grad(loss(func.checkpoint)), in_dims=(None, 0))(Tensor(w), Tensor(xs))
  want = torch.func.vmap(torch.func.grad(loss(torch_checkpoint)), in_dims=(None, 0))(torch.tensor(w), torch.tensor(xs))
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
  out, tangent = func.jvp(lambda x: func.checkpoint(lambda h: (h @ Tensor(w)).tanh())(x), (Tensor(xs),),
                          (Tensor(xs),))
  _, want_t = torch.func.jvp(lambda x: (x @ torch.tensor(w)).tanh(), (torch.tensor(xs),), (torch.tensor(xs),))
  np.testing.assert_allclose(tangent.numpy(), want_t.numpy(), rtol=1e-4, atol=1e-5)

def test_checkpointed_step_schedule_is_cached(capsys: pytest.CaptureFixture[str]) -> None:
  # equal regions of two steps are equal graphs: the second step's schedule comes from the cache
  Tensor.manual_seed(0)
  blocks, params = _blocks(2)
  opt = SGD(params, lr=0.01)
  x = Tensor(np.ones((4, 16), np.float32))
  Tensor.realize(*params)  # made lazily by the layers: the first step would compute them
  def step() -> None:
    opt.zero_grad()
    _loss(blocks, x, True).backward()
    opt.step()
  step()
  capsys.readouterr()
  with Context(DEBUG=1): step()
  assert "schedule cache hit" in capsys.readouterr().out
