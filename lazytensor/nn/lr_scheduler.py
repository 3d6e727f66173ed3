"""Learning-rate schedules, as torch.optim.lr_scheduler: each sets its optimizer's learning rate (a one-element
tensor, so a TinyJit-captured step sees the new value) from the number of times step() was called.

    opt = SGD(params, lr=0.1)
    sched = CosineAnnealingLR(opt, T_max=100)
    for _ in range(100):
      train_step()        # opt.step() inside
      sched.step()        # after the optimizer's step, as in torch

Each schedule is the closed form of torch's (the same values, up to rounding): the learning rate at epoch e is a
function of e and of base_lr (the optimizer's learning rate when the schedule is made, as its float32 tensor holds
it), and the constructor sets the one for epoch 0.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

from lazytensor.frontend.tensor import Tensor
from lazytensor.nn.optim import Optimizer, OptimizerGroup


class LRScheduler:
  """The base: subclasses give the learning rate of an epoch (lr_at); step() moves to the next epoch and sets it."""
  def __init__(self, optimizer: Optimizer) -> None:
    if isinstance(optimizer, OptimizerGroup):
      raise TypeError("LRScheduler: an OptimizerGroup has no learning rate of its own; schedule each optimizer in it")
    if not isinstance(optimizer, Optimizer): raise TypeError(f"LRScheduler: expected an Optimizer, got "
                                                             f"{type(optimizer).__name__}")
    # the learning rate before any schedule touched it (torch's initial_lr), so that several schedules of one
    # optimizer (SequentialLR's parts) all start from it, not from what the one made before them set
    self.base_lr: float = optimizer.__dict__.setdefault("initial_lr", float(optimizer.lr.item()))
    self.optimizer, self.last_epoch = optimizer, 0
    self._set(self.lr_at(0))

  def lr_at(self, epoch: int) -> float: raise NotImplementedError

  def _set(self, lr: float) -> None:
    self.optimizer.lr.assign(Tensor([lr], device=self.optimizer.lr.device, dtype=self.optimizer.lr.dtype)).realize()

  def step(self) -> None:
    """Move to the next epoch and set its learning rate."""
    self.last_epoch += 1
    self._set(self.lr_at(self.last_epoch))

  def get_last_lr(self) -> float:
    """The learning rate set last (a Python float), as torch's get_last_lr()[0]."""
    return self.lr_at(self.last_epoch)

class LambdaLR(LRScheduler):
  """base_lr * lr_lambda(epoch): warmups and any other schedule written as a function."""
  def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float]) -> None:
    self.lr_lambda = lr_lambda
    super().__init__(optimizer)

  def lr_at(self, epoch: int) -> float: return self.base_lr * self.lr_lambda(epoch)

def _check_positive(name: str, **values: float) -> None:
  for k, v in values.items():
    if not v > 0: raise ValueError(f"{name}: {k} must be > 0, got {v}")

class StepLR(LRScheduler):
  """base_lr * gamma ** (epoch // step_size): the rate falls by gamma every step_size epochs."""
  def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1) -> None:
    _check_positive("StepLR", step_size=step_size)
    self.step_size, self.gamma = step_size, gamma
    super().__init__(optimizer)

  def lr_at(self, epoch: int) -> float: return self.base_lr * self.gamma ** (epoch // self.step_size)

class MultiStepLR(LRScheduler):
  """base_lr * gamma ** (the number of milestones reached): the rate falls by gamma at each milestone epoch."""
  def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1) -> None:
    self.milestones, self.gamma = sorted(milestones), gamma
    super().__init__(optimizer)

  def lr_at(self, epoch: int) -> float: return self.base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)

class ExponentialLR(LRScheduler):
  """base_lr * gamma ** epoch."""
  def __init__(self, optimizer: Optimizer, gamma: float) -> None:
    self.gamma = gamma
    super().__init__(optimizer)

  def lr_at(self, epoch: int) -> float: return self.base_lr * self.gamma ** epoch

class LinearLR(LRScheduler):
  """base_lr times a factor going linearly from start_factor to end_factor over total_iters epochs, then staying
  there (a linear warmup with the defaults of torch)."""
  def __init__(self, optimizer: Optimizer, start_factor: float = 1 / 3, end_factor: float = 1.0,
               total_iters: int = 5) -> None:
    if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
      raise ValueError(f"LinearLR: start_factor {start_factor} must be in (0, 1] and end_factor {end_factor} in [0, 1]")
    _check_positive("LinearLR", total_iters=total_iters)
    self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
    super().__init__(optimizer)

  def lr_at(self, epoch: int) -> float:
    done = min(epoch, self.total_iters) / self.total_iters
    return self.base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)

class CosineAnnealingLR(LRScheduler):
  """eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2: half a cosine from base_lr down to eta_min
  over T_max epochs (and back up after, as torch's)."""
  def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0) -> None:
    _check_positive("CosineAnnealingLR", T_max=T_max)
    self.T_max, self.eta_min = T_max, eta_min
    super().__init__(optimizer)

  def lr_at(self, epoch: int) -> float:
    return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2

class SequentialLR(LRScheduler):
  """One schedule after another: schedulers[i] runs from milestones[i - 1] on, counting its epochs from 0 there, as
  torch's SequentialLR (a warmup, then a decay: SequentialLR(opt, [LinearLR(opt, 0.01, total_iters=w),
  CosineAnnealingLR(opt, T_max=n - w)], milestones=[w]))."""
  def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int]) -> None:
    if not schedulers or len(milestones) != len(schedulers) - 1:
      raise ValueError(f"SequentialLR: {len(schedulers)} schedulers need {max(len(schedulers) - 1, 0)} milestones, got "
                       f"{list(milestones)}")
    if any(s.optimizer is not optimizer for s in schedulers):
      raise ValueError("SequentialLR: every scheduler must schedule the optimizer given to SequentialLR")
    if list(milestones) != sorted(milestones): raise ValueError(f"SequentialLR: milestones {milestones} must increase")
    self.schedulers, self.milestones = list(schedulers), list(milestones)
    super().__init__(optimizer)

  def lr_at(self, epoch: int) -> float:
    i = bisect.bisect_right(self.milestones, epoch)
    return self.schedulers[i].lr_at(epoch - (self.milestones[i - 1] if i else 0))
