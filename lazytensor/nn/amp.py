"""Loss scaling for mixed-precision training (torch.amp.GradScaler's API): a float16 gradient smaller than 6e-8 is
zero, so the loss is multiplied by a large scale before backward and the float32 master weights' gradients are
divided by it before the step. A step whose gradients overflowed (inf or nan) is skipped and the scale halved; after
`growth_interval` good steps it doubles. bfloat16 has float32's range and needs none of this (enabled=False).
"""
from __future__ import annotations

from lazytensor.frontend.tensor import Tensor, no_grad
from lazytensor.nn.optim import Optimizer


class GradScaler:
  """Scales the loss, unscales the gradients, skips the steps that overflowed and adapts the scale.

  >>> from lazytensor.nn.optim import SGD
  >>> w = Tensor([1.0, 2.0], requires_grad=True)
  >>> opt, scaler = SGD([w], lr=0.5), GradScaler(init_scale=1024.0)
  >>> _ = scaler.scale((w * w).sum()).backward()
  >>> scaler.step(opt), w.tolist()
  (True, [0.0, 0.0])
  >>> scaler.update(); scaler.get_scale()
  1024.0
  """
  def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
               growth_interval: int = 2000, enabled: bool = True) -> None:
    if not init_scale > 0 or not growth_factor > 1 or not 0 < backoff_factor < 1 or growth_interval < 1:
      raise ValueError(f"GradScaler: init_scale {init_scale} must be > 0, growth_factor {growth_factor} > 1, "
                       f"backoff_factor {backoff_factor} in (0, 1) and growth_interval {growth_interval} >= 1")
    self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
    self.enabled = enabled
    self._scale = float(init_scale)
    self._good_steps = 0
    self._found_inf: bool | None = None  # whether this step's gradients overflowed; None until they are unscaled

  def get_scale(self) -> float: return self._scale if self.enabled else 1.0

  def scale(self, loss: Tensor) -> Tensor:
    """The loss times the scale (as float32, so that the product does not overflow a float16 loss)."""
    return loss.float() * self._scale if self.enabled else loss

  def unscale_(self, optimizer: Optimizer) -> None:
    """Divide the optimizer's gradients by the scale (once a step: before clipping them, say) and note whether any is
    inf or nan. It reads one flag back from the device."""
    if not self.enabled: return
    if self._found_inf is not None: raise RuntimeError("GradScaler: unscale_ was already called for this step")
    grads = optimizer._grads()
    with no_grad():
      for p, g in zip(optimizer.params, grads): p.grad = (g * (1.0 / self._scale)).cast(g.dtype)
      bad = [(~p.grad.isfinite()).any() for p in optimizer.params if p.grad is not None]
      self._found_inf = bool(Tensor.stack(*bad).any().item())

  def step(self, optimizer: Optimizer) -> bool:
    """optimizer.step() on the unscaled gradients unless they overflowed; returns whether it stepped."""
    if not self.enabled:
      optimizer.step()
      return True
    if self._found_inf is None: self.unscale_(optimizer)
    if self._found_inf: return False
    optimizer.step()
    return True

  def update(self) -> None:
    """After a step: back off the scale if its gradients overflowed, grow it after growth_interval good steps."""
    if not self.enabled: return
    if self._found_inf is None: raise RuntimeError("GradScaler: update() before step() or unscale_()")
    if self._found_inf: self._scale, self._good_steps = self._scale * self.backoff_factor, 0
    else:
      self._good_steps += 1
      if self._good_steps == self.growth_interval: self._scale, self._good_steps = self._scale * self.growth_factor, 0
    self._found_inf = None
