"""Layers against torch.nn with the same weights: forward values and gradients of input and parameters."""
import numpy as np
import pytest

from lazytensor import Tensor, nn
from lazytensor.nn.state import get_parameters

torch = pytest.importorskip("torch")
rng = np.random.default_rng(0)

def _copy_params(ours, theirs, names: list[str]) -> None:
  for name in names:
    t = getattr(theirs, name)
    if t is None: continue
    setattr(ours, name, Tensor(t.detach().numpy().copy()))

def _compare(ours, theirs, x_np: np.ndarray, names: list[str], rtol: float = 1e-4, atol: float = 1e-5) -> None:
  x, tx = Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
  for name in names:
    if getattr(ours, name, None) is not None: getattr(ours, name).requires_grad = True
  out, tout = ours(x), theirs(tx)
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol, atol=atol)
  cot = rng.standard_normal(tout.shape).astype(np.float32)
  (out * Tensor(cot)).sum().backward()
  (tout * torch.tensor(cot)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=atol)
  for name in names:
    if getattr(theirs, name, None) is None: continue
    np.testing.assert_allclose(getattr(ours, name).grad.numpy(), getattr(theirs, name).grad.numpy(), rtol=rtol,
                               atol=atol, err_msg=name)

def test_linear() -> None:
  ours, theirs = nn.Linear(5, 3), torch.nn.Linear(5, 3)
  _copy_params(ours, theirs, ["weight", "bias"])
  _compare(ours, theirs, rng.standard_normal((4, 5)).astype(np.float32), ["weight", "bias"])

@pytest.mark.parametrize("kw", [{}, {"stride": 2, "padding": 1}, {"groups": 2, "dilation": 2, "padding": 2}])
def test_conv2d(kw) -> None:
  ours, theirs = nn.Conv2d(4, 6, 3, **kw), torch.nn.Conv2d(4, 6, 3, **kw)
  _copy_params(ours, theirs, ["weight", "bias"])
  _compare(ours, theirs, rng.standard_normal((2, 4, 9, 9)).astype(np.float32), ["weight", "bias"], rtol=1e-3, atol=1e-4)

def test_conv1d() -> None:
  ours, theirs = nn.Conv1d(3, 4, 5, padding=2), torch.nn.Conv1d(3, 4, 5, padding=2)
  _copy_params(ours, theirs, ["weight", "bias"])
  _compare(ours, theirs, rng.standard_normal((2, 3, 11)).astype(np.float32), ["weight", "bias"], rtol=1e-3, atol=1e-4)

@pytest.mark.parametrize("cls,args,shape", [
  (("LayerNorm", "LayerNorm"), (6,), (3, 4, 6)),
  (("GroupNorm", "GroupNorm"), (2, 4), (3, 4, 5, 5)),
  (("InstanceNorm", "InstanceNorm2d"), (4,), (3, 4, 5, 5)),
])
def test_norms(cls, args, shape) -> None:
  ours, theirs = getattr(nn, cls[0])(*args), getattr(torch.nn, cls[1])(*args)
  names = [n for n in ("weight", "bias") if getattr(theirs, n, None) is not None]
  _copy_params(ours, theirs, names)
  _compare(ours, theirs, rng.standard_normal(shape).astype(np.float32), names, rtol=1e-3, atol=1e-4)

def test_rmsnorm() -> None:
  x = rng.standard_normal((3, 8)).astype(np.float32)
  ours = nn.RMSNorm(8)
  ref = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref, rtol=1e-5)

def test_batchnorm_train_and_eval_with_running_stats() -> None:
  ours, theirs = nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
  x_np = rng.standard_normal((5, 4, 3, 3)).astype(np.float32) * 2 + 1
  with Tensor.train():
    _compare(ours, theirs.train(), x_np, ["weight", "bias"], rtol=1e-3, atol=1e-4)
    Tensor.realize(ours.running_mean, ours.running_var)
  np.testing.assert_allclose(ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-5, atol=1e-6)
  theirs.eval()
  out = ours(Tensor(x_np)).numpy()
  np.testing.assert_allclose(out, theirs(torch.tensor(x_np)).detach().numpy(), rtol=1e-4, atol=1e-5)

@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm_train_backward_two_reduces_one_pass(affine: bool) -> None:
  # BatchNormGrad: the backward is sum(dy) and sum(dy * x_hat) over the batch and one elementwise pass for dx, the
  # relu's mask read with dy (the chain rule through the statistics made 4 reduces and an elementwise pass)
  from lazytensor.schedule.scheduler import create_schedule
  from lazytensor.uop.ops import Ops
  ours, theirs = nn.BatchNorm2d(6, affine=affine), torch.nn.BatchNorm2d(6, affine=affine)
  if affine:
    ours.weight, ours.bias = Tensor(rng.uniform(0.5, 2, 6).astype(np.float32)), Tensor(rng.standard_normal(6))
    _copy_params(ours, theirs, ["weight", "bias"])
  x_np, cot = (rng.standard_normal((4, 6, 5, 7)).astype(np.float32) * 3 + 1 for _ in range(2))
  x, tx = Tensor(x_np, requires_grad=True).realize(), torch.tensor(x_np, requires_grad=True)
  params = [ours.weight, ours.bias] if affine else []
  with Tensor.train():
    grads = (ours(x).relu() * Tensor(cot)).sum().gradient(x, *params)
  items, _ = create_schedule([g.lazydata for g in grads])
  reduces = [it for it in items if any(u.op is Ops.REDUCE_AXIS for u in it.ast.toposort)]
  assert (len(items), len(reduces)) == (4, 3)  # the mean, the variance, the two sums in one; dx
  (theirs.train()(tx).relu() * torch.tensor(cot)).sum().backward()
  tparams = [theirs.weight, theirs.bias] if affine else []
  for g, t in zip(grads, [tx, *tparams]):
    np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)

def test_embedding() -> None:
  ours, theirs = nn.Embedding(10, 4), torch.nn.Embedding(10, 4)
  ours.weight = Tensor(theirs.weight.detach().numpy().copy(), requires_grad=True)
  idx = np.array([[1, 2, 9], [0, 2, 2]])
  out, tout = ours(Tensor(idx)), theirs(torch.tensor(idx))
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy())
  out.sum().backward()
  tout.sum().backward()
  np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy())
  with pytest.raises(TypeError, match="integers"): ours(Tensor([1.0]))

def test_lstm_cell() -> None:
  ours, theirs = nn.LSTMCell(3, 5), torch.nn.LSTMCell(3, 5)
  names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
  _copy_params(ours, theirs, names)
  x = rng.standard_normal((2, 3)).astype(np.float32)
  h, c = rng.standard_normal((2, 5)).astype(np.float32), rng.standard_normal((2, 5)).astype(np.float32)
  oh, oc = ours(Tensor(x), (Tensor(h), Tensor(c)))
  th, tc = theirs(torch.tensor(x), (torch.tensor(h), torch.tensor(c)))
  np.testing.assert_allclose(oh.numpy(), th.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(oc.numpy(), tc.detach().numpy(), rtol=1e-5, atol=1e-6)

def test_default_inits_have_torch_scale() -> None:
  lin = nn.Linear(100, 50)
  w = lin.weight.numpy()
  assert np.abs(w).max() <= 0.1 and w.std() == pytest.approx(0.1 / np.sqrt(3), rel=0.1)
  assert len(get_parameters(nn.Conv2d(3, 4, 3))) == 2

def test_conv_transpose2d() -> None:
  ours = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1)
  theirs = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1)
  _copy_params(ours, theirs, ["weight", "bias"])
  _compare(ours, theirs, rng.standard_normal((2, 4, 5, 5)).astype(np.float32), ["weight", "bias"], rtol=1e-3, atol=1e-4)

def test_batchnorm_statistics_are_not_parameters() -> None:
  from lazytensor.nn.optim import Adam
  bn = nn.BatchNorm2d(4)
  assert bn.running_mean.requires_grad is False and bn.num_batches_tracked.requires_grad is False
  opt = Adam(get_parameters(bn))
  assert len(opt.params) == 2 and len(opt.buffers) == 3

# ---- MultiheadAttention, against torch's with the same weights ----

def _mha_pair(embed_dim: int, num_heads: int, **kwargs):
  theirs = torch.nn.MultiheadAttention(embed_dim, num_heads, **kwargs).eval()  # dropout off, as Tensor.training
  ours = nn.MultiheadAttention(embed_dim, num_heads, **kwargs)
  for name, p in theirs.named_parameters():
    *path, last = name.split(".")
    owner = ours
    for part in path: owner = getattr(owner, part)
    setattr(owner, last, Tensor(p.detach().numpy().copy(), requires_grad=True))
  return ours, theirs

def _mask(kind: str, shape: tuple[int, ...]) -> np.ndarray:
  if kind == "causal": return np.triu(np.ones(shape, bool), 1)
  if kind == "padding": return np.arange(shape[-1]) >= np.array([[shape[-1] - 1], [shape[-1]]])  # (2, S)
  return rng.standard_normal(shape).astype(np.float32)

MHA_CASES = [
  ("plain", {}, {}), ("batch_first", {"batch_first": True}, {}), ("no_bias", {"bias": False}, {}),
  ("bias_kv", {"add_bias_kv": True}, {}), ("zero_attn", {"add_zero_attn": True}, {}),
  ("kdim_vdim", {"kdim": 6, "vdim": 4}, {}), ("bool_mask", {}, {"attn_mask": ("causal", (3, 5))}),
  ("float_mask_per_head", {}, {"attn_mask": ("float", (4, 3, 5))}),
  ("padding", {"add_bias_kv": True, "add_zero_attn": True},
   {"key_padding_mask": ("padding", (2, 5)), "attn_mask": ("causal", (3, 5))}),
  ("heads_weights", {}, {"key_padding_mask": ("padding", (2, 5)), "average_attn_weights": False}),
  ("no_weights", {"dropout": 0.5}, {"need_weights": False}),
]

@pytest.mark.parametrize("name,init,call", MHA_CASES, ids=[c[0] for c in MHA_CASES])
def test_multihead_attention_matches_torch(name: str, init: dict, call: dict) -> None:
  E, H, L, S, N = 8, 2, 3, 5, 2
  ours, theirs = _mha_pair(E, H, **init)
  kdim, vdim = init.get("kdim", E), init.get("vdim", E)
  layout = (lambda T, d: (N, T, d)) if init.get("batch_first") else (lambda T, d: (T, N, d))
  qkv = [rng.standard_normal(layout(T, d)).astype(np.float32) for T, d in ((L, E), (S, kdim), (S, vdim))]
  masks = {k: _mask(*v) if isinstance(v, tuple) else v for k, v in call.items()}
  args = [Tensor(a, requires_grad=True) for a in qkv]
  targs = [torch.tensor(a, requires_grad=True) for a in qkv]
  out, w = ours(*args, **{k: Tensor(v) if isinstance(v, np.ndarray) else v for k, v in masks.items()})
  tout, tw = theirs(*targs, **{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in masks.items()})
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
  assert (w is None) == (tw is None)
  if w is not None: np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
  cot = rng.standard_normal(tout.shape).astype(np.float32)
  (out * Tensor(cot)).sum().backward()
  (tout * torch.tensor(cot)).sum().backward()
  for a, ta in zip(args, targs): np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(ours.out_proj.weight.grad.numpy(), theirs.out_proj.weight.grad.numpy(), rtol=1e-4,
                             atol=1e-5)

def test_multihead_attention_unbatched_and_causal() -> None:
  ours, theirs = _mha_pair(4, 2)
  x = rng.standard_normal((3, 4)).astype(np.float32)
  out, w = ours(Tensor(x), Tensor(x), Tensor(x), is_causal=True, average_attn_weights=False)
  mask = torch.tensor(np.triu(np.ones((3, 3), bool), 1))
  tout, tw = theirs(*(torch.tensor(x),) * 3, attn_mask=mask, is_causal=True, average_attn_weights=False)
  assert out.shape == (3, 4) and w.shape == (2, 3, 3)
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="divisible"): nn.MultiheadAttention(6, 4)
  assert {n for n, _ in theirs.named_parameters()} == \
    {"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}
  assert len(get_parameters(ours)) == 4

# ---- gradient clipping (nn.utils) and Optimizer.schedule_step ----

CLIP_CASES = [("l2", 2.0, 1.0), ("l1", 1.0, 0.5), ("inf", float("inf"), 0.3), ("l3_unclipped", 3.0, 100.0)]

@pytest.mark.parametrize("name,norm_type,max_norm", CLIP_CASES, ids=[c[0] for c in CLIP_CASES])
def test_clip_grad_norm_matches_torch(name: str, norm_type: float, max_norm: float) -> None:
  shapes = [(3, 4), (5,), (2, 2, 2)]
  values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  ours = [Tensor(v, requires_grad=True) for v in values]
  theirs = [torch.tensor(v, requires_grad=True) for v in values]
  frozen, tfrozen = Tensor([1.0], requires_grad=True), torch.tensor([1.0], requires_grad=True)  # no .grad: skipped
  sum((p * p * (i + 1)).sum() for i, p in enumerate(ours)).backward()
  sum((p * p * (i + 1)).sum() for i, p in enumerate(theirs)).backward()
  total = nn.utils.clip_grad_norm_(ours + [frozen], max_norm, norm_type=norm_type)
  ttotal = torch.nn.utils.clip_grad_norm_(theirs + [tfrozen], max_norm, norm_type=norm_type)
  np.testing.assert_allclose(total.numpy(), ttotal.numpy(), rtol=1e-5)
  for p, tp in zip(ours, theirs): np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)
  assert frozen.grad is None

def test_clip_grad_value_and_nonfinite_norms() -> None:
  v = rng.standard_normal((4, 3)).astype(np.float32) * 3
  w, tw = Tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
  (w * w).sum().backward()
  (tw * tw).sum().backward()
  nn.utils.clip_grad_value_(w, 1.25)
  torch.nn.utils.clip_grad_value_(tw, 1.25)
  np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
  bad = Tensor([1.0, float("inf")], requires_grad=True)
  (bad * bad).sum().backward()
  with pytest.raises(RuntimeError, match="non-finite"): nn.utils.clip_grad_norm_([bad], 1.0, error_if_nonfinite=True)
  assert nn.utils.clip_grad_norm_([Tensor([1.0], requires_grad=True)], 1.0).item() == 0.0  # no gradients at all

def test_schedule_step_returns_the_updates_unrun() -> None:
  from lazytensor.nn.optim import Adam
  w0 = rng.standard_normal((3,)).astype(np.float32)
  w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
  opt, topt = Adam([w], lr=0.1), torch.optim.Adam([tw], lr=0.1)
  (w * w).sum().backward()
  (tw * tw).sum().backward()
  from lazytensor import GlobalCounters
  loss = (w * 2).sum()  # built before the step: reads the weights it starts from, realized in the step's schedule
  GlobalCounters.reset()
  pending = opt.schedule_step()
  assert GlobalCounters.kernel_count == 0  # built, not run
  Tensor.realize(*pending, loss)
  assert GlobalCounters.kernel_count > 0
  topt.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5)
  np.testing.assert_allclose(loss.item(), 2 * w0.sum(), rtol=1e-6)

def test_nn_docstring_examples() -> None:
  import doctest

  import lazytensor.nn.optim
  import lazytensor.nn.utils
  results = [doctest.testmod(m, extraglobs={"Tensor": Tensor}, optionflags=doctest.ELLIPSIS)
             for m in (lazytensor.nn.utils, lazytensor.nn.optim)]
  assert sum(r.failed for r in results) == 0 and sum(r.attempted for r in results) >= 8, results
