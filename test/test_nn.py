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
