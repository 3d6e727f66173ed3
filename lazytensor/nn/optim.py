"""Optimizers: SGD, LARS, Adam, AdamW, LAMB, Muon, and OptimizerGroup to step several as one. A step builds every
update lazily and realizes them in one schedule.

Step counters and learning rates live in tensors (one-element buffers updated with assign), so a TinyJit-captured
training step replays with the right bias corrections and picks up a changed learning rate.
"""
from __future__ import annotations

import math

import numpy as np

from lazytensor.dtype import DType, dtypes
from lazytensor.frontend.tensor import Tensor, no_grad
from lazytensor.runtime.device import Device
from lazytensor.uop.graph import shard_like
from lazytensor.uop.ops import DeviceLike, Ops


class Optimizer:
  """Holds the parameters that require gradients and a learning rate; subclasses define the update."""
  def __init__(self, params: list[Tensor], lr: float) -> None:
    unique: dict[int, Tensor] = {}
    for p in params: unique.setdefault(id(p), p)
    for p in unique.values():
      if p.requires_grad is None: p.requires_grad = True  # as tinygrad: a parameter handed to an optimizer trains
    self.params = [p for p in unique.values() if p.requires_grad]
    # tensors that train without gradients (batchnorm's running statistics): their pending updates realize with a step
    self.buffers = [p for p in unique.values() if not p.requires_grad]
    if not self.params: raise ValueError("optimizer got no parameters that require gradients")
    for p in self.params:
      if not p.dtype.is_float: raise TypeError(f"optimizer: a parameter of shape {p.shape} has dtype {p.dtype}")
    self.lr = Tensor([float(lr)], device=self.params[0].device, dtype=dtypes.float32).realize()

  def zero_grad(self) -> None:
    for p in self.params: p.grad = None

  def step(self) -> None:
    """Update every parameter (and the optimizer's state) from its .grad, in one schedule."""
    updated = self.schedule_step()
    updated[0].realize(*updated[1:])

  def schedule_step(self) -> list[Tensor]:
    """The tensors one step updates (parameters, the optimizer's state, buffers such as batchnorm's statistics), with
    the updates built but not run, as tinygrad's schedule_step: realizing them is the step (what step() does), and
    realizing them together with other tensors runs all of it as one schedule.

    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> opt = SGD([w], lr=0.5)
    >>> _ = (w * w).sum().backward()
    >>> loss = (w * 10).sum()
    >>> _ = Tensor.realize(*opt.schedule_step(), loss)
    >>> w.tolist(), loss.item()
    ([0.0, 0.0], 30.0)
    """
    with no_grad(): return self._step() + self.buffers

  def _grads(self) -> list[Tensor]:
    missing = [p.shape for p in self.params if p.grad is None]
    if missing: raise RuntimeError(f"optimizer step with no gradient for parameters of shapes {missing}; "
                                   "call backward() first")
    return [p.grad.detach() for p in self.params if p.grad is not None]

  def _lr_for(self, p: Tensor) -> Tensor:
    # most parameters have the learning rate's device and dtype: nothing to build (to() and cast() would return it too,
    # after a lookup of the device's name each)
    if p.device == self.lr.device and p.dtype == self.lr.dtype: return self.lr
    return self.lr.to(p.device).cast(p.dtype)

  def _step(self) -> list[Tensor]: raise NotImplementedError

def _zeros_like(p: Tensor) -> Tensor:
  """Zeros laid out as p is: the state of a sharded parameter is sharded with it (each device holds its slice's)."""
  if p.lazydata.op is not Ops.MULTI:
    return Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device).contiguous().realize()
  # from memory of its own (constants are interned: two states made of one would realize into one memory)
  zeros = Tensor(np.zeros(p.shape), device=Device.first(p.device), dtype=p.dtype).lazydata
  return Tensor(shard_like(zeros, p.lazydata)).contiguous().realize()

class SGD(Optimizer):
  """Stochastic gradient descent with torch's momentum, nesterov and weight decay."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
               nesterov: bool = False) -> None:
    super().__init__(params, lr)
    if nesterov and momentum <= 0: raise ValueError("SGD: nesterov needs a momentum > 0")
    self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
    self.bufs = [_zeros_like(p) for p in self.params] if momentum else []

  def _step(self) -> list[Tensor]:
    out: list[Tensor] = []
    for i, (p, g) in enumerate(zip(self.params, self._grads())):
      if self.weight_decay: g = g + self.weight_decay * p.detach()
      if self.momentum:
        # torch starts the buffer at the first gradient; a zero buffer times momentum plus g is exactly that
        buf = self.bufs[i].assign(self.momentum * self.bufs[i] + g)
        g = g + self.momentum * buf if self.nesterov else buf
        out.append(buf)
      out.append(p.assign(p.detach() - self._lr_for(p) * g))
    return out

class LARS(Optimizer):
  """Layer-wise adaptive rate scaling (You et al., 2017): SGD whose step for each parameter tensor w is scaled by the
  trust ratio tcoef * |w| / (|g| + weight_decay * |w|) (1 where either norm is 0). With classic=True (as the paper
  and tinygrad) momentum accumulates steps already scaled by the learning rate and the ratio; with classic=False it
  accumulates gradients, as torch's SGD, and the scale comes after. tcoef=0 is SGD."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
               nesterov: bool = False, classic: bool = True, tcoef: float = 0.001) -> None:
    super().__init__(params, lr)
    if nesterov and momentum <= 0: raise ValueError("LARS: nesterov needs a momentum > 0")
    if tcoef < 0: raise ValueError(f"LARS: tcoef must be >= 0, got {tcoef}")
    self.momentum, self.weight_decay, self.nesterov, self.classic, self.tcoef = momentum, weight_decay, nesterov, \
      classic, tcoef
    self.bufs = [_zeros_like(p) for p in self.params] if momentum else []

  def _step(self) -> list[Tensor]:
    out: list[Tensor] = []
    for i, (p, g) in enumerate(zip(self.params, self._grads())):
      w = p.detach()
      scale = self._lr_for(p)
      if self.tcoef:
        w_norm, g_norm = w.square().sum().sqrt(), g.square().sum().sqrt()
        ratio = ((w_norm > 0) & (g_norm > 0)).where(self.tcoef * w_norm / (g_norm + self.weight_decay * w_norm), 1.0)
        scale = scale * ratio
      if self.weight_decay: g = g + self.weight_decay * w
      if self.classic: g = g * scale
      if self.momentum:
        buf = self.bufs[i].assign(self.momentum * self.bufs[i] + g)
        g = g + self.momentum * buf if self.nesterov else buf
        out.append(buf)
      if not self.classic: g = g * scale
      out.append(p.assign(w - g))
    return out

class LAMB(Optimizer):
  """LAMB (layer-wise adaptive moments); with adam=True it is Adam, with decoupled weight decay AdamW."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False, decoupled: bool = False) -> None:
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.wd, self.adam, self.decoupled = b1, b2, eps, weight_decay, adam, decoupled
    self.t = Tensor([0.0], device=self.params[0].device, dtype=dtypes.float32).realize()
    self.m = [_zeros_like(p) for p in self.params]
    self.v = [_zeros_like(p) for p in self.params]

  def _step(self) -> list[Tensor]:
    t = self.t.assign(self.t + 1)
    out: list[Tensor] = [t]
    # the bias corrections 1 - b ** t, built once for each device and dtype of the parameters, not for each parameter:
    # a power of a tensor builds about 200 nodes (the MLP 784-256-10, 4 parameters: 7.6 -> 3.2 ms a step)
    corrections: dict[tuple[DeviceLike, DType], tuple[Tensor, Tensor]] = {}
    for p, g, m, v in zip(self.params, self._grads(), self.m, self.v):
      w = p.detach()
      if self.wd and self.adam and not self.decoupled: g = g + self.wd * w  # Adam's L2 penalty enters the moments
      m.assign(self.b1 * m + (1 - self.b1) * g)
      v.assign(self.b2 * v + (1 - self.b2) * (g * g))
      if (key := (p.device, p.dtype)) not in corrections:
        # in float64, rounded once, as torch's (Python floats): b2 = 0.999 rounded to float32 first made 1 - b2 ** 1
        # 1.3e-5 too small, the first step's update 6e-6 too large
        tp = t.to(p.device).cast(dtypes.float64)
        corrections[key] = ((1 - self.b1 ** tp).cast(p.dtype), (1 - self.b2 ** tp).cast(p.dtype))
      m_hat = m / corrections[key][0]
      v_hat = v / corrections[key][1]
      update = m_hat / (v_hat.sqrt() + self.eps)
      if self.wd and (self.decoupled or not self.adam): update = update + self.wd * w
      if not self.adam:
        w_norm, u_norm = (w * w).sum().sqrt(), (update * update).sum().sqrt()
        trust = ((w_norm > 0) & (u_norm > 0)).where(w_norm / u_norm, 1.0)
        update = update * trust
      out.extend([m, v, p.assign(w - self._lr_for(p) * update)])
    return out

def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         weight_decay: float = 0.0) -> LAMB:
  """Adam as torch defines it (weight decay as an L2 term in the gradient)."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 0.01) -> LAMB:
  """AdamW: Adam with decoupled weight decay, as torch defines it."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, decoupled=True)

MUON_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # Keller Jordan's quintic: the steepest slope at 0 that still converges

def newton_schulz(g: Tensor, coefficients: tuple[float, float, float] = MUON_COEFFICIENTS, steps: int = 5,
                  eps: float = 1e-7) -> Tensor:
  """An approximate orthogonalization of the matrix g (U V^T of its SVD, singular values pushed to about 1) by the
  odd-polynomial Newton-Schulz iteration X <- aX + (bA + cA^2)X with A = X X^T, started from g / |g| (at least eps);
  wide in the loop (a tall g is transposed), so that A is the smaller Gram matrix."""
  if g.ndim != 2: raise ValueError(f"newton_schulz: expected a matrix, got shape {g.shape}")
  tall = g.shape[0] > g.shape[1]
  x = g.T if tall else g
  x = x / x.square().sum().sqrt().maximum(eps)
  a, b, c = coefficients
  for _ in range(steps):
    gram = x @ x.T
    x = a * x + (b * gram + c * (gram @ gram)) @ x
  return x.T if tall else x

class Muon(Optimizer):
  """Muon (Keller Jordan, 2024), as torch.optim.Muon: SGD momentum (nesterov by default) whose update is
  orthogonalized by newton_schulz, scaled by sqrt(max(1, rows/cols)) ("original") or 0.2 sqrt(max(rows, cols))
  ("match_rms_adamw"), with decoupled weight decay. For 2-d parameters only (the hidden layers; embeddings, heads and
  biases go to an AdamW, the two joined by OptimizerGroup). torch orthogonalizes in bfloat16; this does it in the
  parameter's dtype."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, weight_decay: float = 0.1, momentum: float = 0.95,
               nesterov: bool = True, ns_coefficients: tuple[float, float, float] = MUON_COEFFICIENTS,
               eps: float = 1e-7, ns_steps: int = 5, adjust_lr_fn: str | None = None) -> None:
    super().__init__(params, lr)
    for p in self.params:
      if p.ndim != 2: raise ValueError(f"Muon: parameters must be 2-d matrices, got one of shape {p.shape}")
    if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
      raise ValueError(f"Muon: adjust_lr_fn {adjust_lr_fn!r} must be None, 'original' or 'match_rms_adamw'")
    if len(ns_coefficients) != 3: raise ValueError(f"Muon: ns_coefficients {ns_coefficients} must be 3 numbers")
    self.weight_decay, self.momentum, self.nesterov = weight_decay, momentum, nesterov
    self.ns_coefficients, self.eps, self.ns_steps, self.adjust_lr_fn = ns_coefficients, eps, ns_steps, adjust_lr_fn
    self.bufs = [_zeros_like(p) for p in self.params]

  def _scale(self, p: Tensor) -> float:
    rows, cols = p.shape
    if self.adjust_lr_fn == "match_rms_adamw": return 0.2 * math.sqrt(max(rows, cols))
    return math.sqrt(max(1, rows / cols))

  def _step(self) -> list[Tensor]:
    out: list[Tensor] = []
    for p, g, buf in zip(self.params, self._grads(), self.bufs):
      b = buf.assign(self.momentum * buf + g)
      update = newton_schulz(g + self.momentum * b if self.nesterov else b, self.ns_coefficients, self.ns_steps,
                             self.eps)
      lr, w = self._lr_for(p), p.detach()
      if self.weight_decay: w = w * (1 - lr * self.weight_decay)
      out.extend([b, p.assign(w - lr * self._scale(p) * update)])
    return out

class OptimizerGroup(Optimizer):
  """Several optimizers stepped as one, as tinygrad's OptimizerGroup (torch's parameter groups): zero_grad and step
  reach each of them, and one step realizes all their updates in one schedule. `group[i]` is the i-th optimizer."""
  def __init__(self, *optimizers: Optimizer) -> None:  # no Optimizer.__init__: the parts hold the state
    if not optimizers: raise ValueError("OptimizerGroup: needs at least one optimizer")
    for o in optimizers:
      if not isinstance(o, Optimizer): raise TypeError(f"OptimizerGroup: expected optimizers, got {type(o).__name__}")
    self.optimizers = optimizers
    self.params = [p for o in optimizers for p in o.params]
    self.buffers = [b for o in optimizers for b in o.buffers]
    if len({id(p) for p in self.params}) != len(self.params):
      raise ValueError("OptimizerGroup: a parameter belongs to more than one of the optimizers")

  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]

  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()

  def _step(self) -> list[Tensor]: return [t for o in self.optimizers for t in o._step()]
