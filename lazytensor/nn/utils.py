"""torch.nn.utils' gradient clipping: clip_grad_norm_ and clip_grad_value_, lazily (no sync unless asked for one)."""
from __future__ import annotations

import math
from collections.abc import Iterable

from lazytensor.frontend.tensor import Tensor
from lazytensor.helpers import ArgumentError


def _with_grads(parameters: Tensor | Iterable[Tensor]) -> list[tuple[Tensor, Tensor]]:
  """The parameters that have a gradient, with it (torch skips those whose .grad is None)."""
  params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
  return [(p, p.grad) for p in params if p.grad is not None]

def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
  """Scale the parameters' gradients so that their total norm (the norm of all of them as one vector) is at most
  max_norm, as torch.nn.utils.clip_grad_norm_ (by max_norm / (total + 1e-6) where that is below 1). Returns the total
  norm before clipping. Each .grad becomes the clipped one, lazily: nothing runs until it is used (the optimizer's
  step), unless error_if_nonfinite asks to check the norm now.

  >>> w = Tensor([3.0, 4.0], requires_grad=True)
  >>> _ = (w * w).sum().backward()
  >>> round(clip_grad_norm_([w], max_norm=1.0).item(), 3), [round(g, 3) for g in w.grad.tolist()]
  (10.0, [0.6, 0.8])
  """
  grads = _with_grads(parameters)
  if not grads: return Tensor(0.0)
  norms = [g.float().norm(norm_type) for _, g in grads]
  total = Tensor.stack(*norms).norm(norm_type)
  if error_if_nonfinite and not math.isfinite(total.item()):
    raise ArgumentError(f"clip_grad_norm_: the total norm of order {norm_type} of the gradients is non-finite "
                        f"({total.item()}), so they cannot be clipped; error_if_nonfinite=False clips anyway")
  scale = (max_norm / (total + 1e-6)).minimum(1.0)
  for p, g in grads: p.grad = (g * scale).cast(g.dtype)
  return total

def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
  """Clamp every gradient into [-clip_value, clip_value], as torch.nn.utils.clip_grad_value_ (lazily).

  >>> w = Tensor([3.0, -4.0], requires_grad=True)
  >>> _ = (w * w).sum().backward()
  >>> clip_grad_value_(w, 1.5)
  >>> w.grad.tolist()
  [1.5, -1.5]
  """
  for p, g in _with_grads(parameters): p.grad = g.clamp(-clip_value, clip_value)
