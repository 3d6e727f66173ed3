"""What the parallelism examples share: batches of scikit-learn's digits, and the step-for-step check against one
device (each example trains the same model twice, on one device and in parallel, and prints the largest difference)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from sklearn.datasets import load_digits

from lazytensor import Tensor
from lazytensor.nn.optim import Optimizer
from lazytensor.nn.state import get_parameters


def batches(steps: int, batch: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
  """`steps` random batches of flattened 8x8 digits (float32 in [0, 1]) and their labels (int32)."""
  digits = load_digits()
  x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int32)
  rng = np.random.default_rng(seed)
  return [(x[idx], y[idx]) for idx in (rng.choice(len(x), batch, replace=False) for _ in range(steps))]

def largest_difference(a: object, b: object) -> float:
  """The largest difference between the weights of two models of the same kind (gathered from their devices)."""
  return max(float(np.abs(p.numpy() - q.numpy()).max()) for p, q in zip(get_parameters(a), get_parameters(b)))

def compare(name: str, one_device: Callable[[np.ndarray, np.ndarray], float],
            parallel: Callable[[np.ndarray, np.ndarray], float], ref_model: object, par_model: object,
            data: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
  """Run both training steps on every batch; print the losses now and then, and the largest differences at the end."""
  worst_loss = worst_weight = 0.0
  for i, (x, y) in enumerate(data):
    want, got = one_device(x, y), parallel(x, y)
    worst_loss = max(worst_loss, abs(got - want))
    worst_weight = max(worst_weight, largest_difference(par_model, ref_model))
    if i % 10 == 0 or i == len(data) - 1: print(f"step {i:3d}: loss {got:.4f} (one device: {want:.4f})")
  print(f"{name}, {len(data)} steps: largest difference from one device: loss {worst_loss:.2e}, "
        f"weights {worst_weight:.2e}")
  return worst_loss, worst_weight

def train_step(opt: Optimizer, loss_fn: Callable[[], Tensor]) -> float:
  """zero_grad, the loss, backward, step; returns the loss (of the weights before the step) as a number."""
  opt.zero_grad()
  loss = loss_fn().backward()
  opt.step()
  return loss.item()
