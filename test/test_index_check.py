"""Integer tensor indices out of range raise IndexError at the realize that runs the kernel reading them, naming the op,
the index and the size (schedule/index_check.py), for every op that takes one, against torch's rules: negative indices
count from the end where the op wraps them (-n <= i < n), elsewhere 0 <= i < n. Inside fused expressions, in TinyJit
replays, through gradients, under BEAM, on CPU, EMU and CUDACPU; CHECK_INDICES=0 leaves the check out."""
from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, torch

from lazytensor import Context, Device, GlobalCounters, Tensor, TinyJit, dtypes, nn
from lazytensor.engine.realize import ExecItem, compile_kernel, index_flags, run_schedule
from lazytensor.opt import search_workers
from lazytensor.opt.kernel import Opt, OptOps
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="compares with torch, which is not installed")

X = np.arange(20, dtype=np.float32).reshape(5, 4) + 1  # 5 rows: dim 0 has size 5
SRC = np.full((2, 4), 7.0, dtype=np.float32)

@dataclass(frozen=True)
class Op:
  """An op taking the index [i, 2] (two entries: one under test, one always in range), as lazytensor and torch write
  it; `size` is the range its index counts in, `wraps` whether negative indices count from the end."""
  name: str
  size: int
  wraps: bool
  lazy: Callable[[Tensor, Tensor], Tensor]
  ref: Callable[[Any, Any], Any]
  torch_raises: bool = True  # torch checks it (take_along_dim reads out of bounds silently)

def _setitem(x: Any, i: Any) -> Any:
  y = x.clone() if HAVE_TORCH and isinstance(x, torch.Tensor) else x.contiguous()
  y[i] = 9.0
  return y

def _embedding(x: Tensor, i: Tensor) -> Tensor:
  emb = nn.Embedding(5, 4)
  emb.weight = x
  return emb(i)

def _rows(i: Any) -> Any: return i.reshape(2, 1).expand(2, 4)
def _src(x: Any) -> Any: return x[:2] * 0 + 7  # SRC, made by each library from its own x

OPS = [
  Op("x[index]", 5, True, lambda x, i: x[i], lambda x, i: x[i]),
  Op("x[index] = value", 5, True, _setitem, _setitem),
  Op("index_select", 5, True, lambda x, i: x.index_select(0, i), lambda x, i: x.index_select(0, i)),
  Op("take", 20, True, lambda x, i: x.take(i), lambda x, i: x.take(i)),
  Op("take_along_dim", 5, True, lambda x, i: x.take_along_dim(_rows(i), 0),
     lambda x, i: x.take_along_dim(_rows(i), 0), torch_raises=False),
  Op("gather", 5, False, lambda x, i: x.gather(0, _rows(i)), lambda x, i: x.gather(0, _rows(i))),
  Op("scatter", 5, False, lambda x, i: x.scatter(0, _rows(i), _src(x)), lambda x, i: x.scatter(0, _rows(i), _src(x))),
  Op("scatter_add", 5, False, lambda x, i: x.scatter_add(0, _rows(i), _src(x)),
     lambda x, i: x.scatter_add(0, _rows(i), _src(x))),
  Op("scatter_reduce", 5, False, lambda x, i: x.scatter_reduce(0, _rows(i), _src(x), "amax"),
     lambda x, i: x.scatter_reduce(0, _rows(i), _src(x), "amax")),
  Op("index_add", 5, False, lambda x, i: x.index_add(0, i, _src(x)), lambda x, i: x.index_add(0, i, _src(x))),
  Op("index_copy", 5, False, lambda x, i: x.index_copy(0, i, _src(x)), lambda x, i: x.index_copy(0, i, _src(x))),
  Op("index_reduce", 5, False, lambda x, i: x.index_reduce(0, i, _src(x), "amax"),
     lambda x, i: x.index_reduce(0, i, _src(x), "amax")),
  Op("index_fill", 5, True, lambda x, i: x.index_fill(0, i, 0.0), lambda x, i: x.index_fill(0, i, 0.0)),
  Op("index_put", 5, True, lambda x, i: x.index_put((i,), _src(x)), lambda x, i: x.index_put((i,), _src(x))),
  Op("put", 20, True, lambda x, i: x.put(i, x[0, :2]), lambda x, i: x.put(i, x[0, :2])),
  Op("nn.Embedding", 5, False, _embedding, lambda x, i: torch.nn.functional.embedding(i, x)),
  Op("cross_entropy", 4, False, lambda x, i: x[:2].cross_entropy(i),
     lambda x, i: torch.nn.functional.cross_entropy(x[:2], i)),
  Op("nll_loss", 4, False, lambda x, i: x[:2].nll_loss(i), lambda x, i: torch.nn.functional.nll_loss(x[:2], i)),
  Op("one_hot", 5, False, lambda x, i: i.one_hot(5), lambda x, i: torch.nn.functional.one_hot(i, 5)),
]

def _good(op: Op) -> list[int]: return [0, op.size - 1, -1, -op.size] if op.wraps else [0, op.size - 1]
def _bad(op: Op) -> list[int]: return [op.size, -op.size - 1] if op.wraps else [op.size, -1]

def _torch(op: Op, i: list[int]) -> Any:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # index_reduce is "in beta"
    return op.ref(torch.from_numpy(X.copy()), torch.tensor(i))

@needs_torch
@pytest.mark.parametrize("device", ["CPU", "EMU"])
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_in_range_indices_match_torch(op: Op, device: str) -> None:
  # the boundaries n-1 and, where the op wraps, -1 and -n; torch is given them wrapped (index_select does not wrap)
  with Context(DEV=device):
    for v in _good(op):
      got = op.lazy(Tensor(X), Tensor([v, 2])).numpy()
      want = _torch(op, [v % op.size, 2]).detach().numpy()
      np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{op.name} {v}")

@needs_torch
@pytest.mark.parametrize("device", ["CPU", "EMU"])
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_out_of_range_indices_raise_as_torch_does(op: Op, device: str) -> None:
  with Context(DEV=device):
    for v in _bad(op):
      # raised by the realize that runs the kernel (x[i] = v realizes at once, as the write it is)
      with pytest.raises(IndexError, match=rf"^{re.escape(op.name)}: \w[\w ]* {v} is out of bounds for .*{op.size}"):
        op.lazy(Tensor(X), Tensor([v, 2])).numpy()
      if op.torch_raises:
        with pytest.raises((IndexError, RuntimeError)): _torch(op, [v, 2])
    # the flags were cleared: the same kernels with good indices run
    op.lazy(Tensor(X), Tensor([0, 2])).numpy()

@pytest.mark.parametrize("device", ["CUDACPU"])
def test_cudacpu_raises(device: str) -> None:
  try: Device[device]
  except Exception as e: pytest.skip(f"{device}: {e}")
  ops = [o for o in OPS if o.name in ("x[index]", "gather", "scatter_add", "nn.Embedding")]
  want = [op.lazy(Tensor(X), Tensor([0, 2])).numpy() for op in ops]  # on the CPU
  with Context(DEV=device):
    for op, w in zip(ops, want):
      with pytest.raises(IndexError, match=rf"^{re.escape(op.name)}: index {op.size} is out of bounds"):
        op.lazy(Tensor(X), Tensor([op.size, 2])).numpy()
      np.testing.assert_array_equal(op.lazy(Tensor(X), Tensor([0, 2])).numpy(), w)

def test_message_names_the_op_the_index_the_dim_and_the_size() -> None:
  x = Tensor.zeros(2, 3)
  with pytest.raises(IndexError, match=r"^x\[index\]: index 3 is out of bounds for dimension 1 with size 3; "
                                       r"expected -3 <= index < 3$"):
    x[Tensor([1]), Tensor([3])].numpy()
  with pytest.raises(IndexError, match=r"^gather: index -1 is out of bounds for dimension 1 with size 3; "
                                       r"expected 0 <= index < 3$"):
    x.gather(1, Tensor([[0, -1]])).numpy()
  with pytest.raises(IndexError, match=r"^one_hot: class value 3 is out of bounds for num_classes=3"):
    Tensor([3]).one_hot(3).numpy()
  with pytest.raises(IndexError, match=r"^cross_entropy: target 3 is out of bounds for the 3 classes of dimension 1; "
                                       r"expected 0 <= target < 3 or target == -100$"):
    x[:1].cross_entropy(Tensor([3])).numpy()

@pytest.mark.parametrize("dtype,value,n", [(dtypes.int8, 127, 100), (dtypes.uint8, 255, 200), (dtypes.int64, 2**40, 9),
                                           (dtypes.uint32, 2**32 - 1, 9), (dtypes.int16, -301, 300)])
def test_index_dtypes(dtype: Any, value: int, n: int) -> None:
  # the range is compared in a dtype that holds its bounds (127 into 100 rows in int8; 255 past 200 in uint8), and the
  # message shows the index as its dtype reads it
  x = Tensor.arange(n)
  with pytest.raises(IndexError, match=rf"index {value} is out of bounds for dimension 0 with size {n}"):
    x[Tensor([value, 0], dtype=dtype)].numpy()
  assert x[Tensor([n - 1, 0], dtype=dtype)].tolist() == [n - 1, 0]

def test_losses_accept_their_ignored_targets() -> None:
  logits = Tensor(X[:2])
  assert np.isfinite(logits.cross_entropy(Tensor([-100, 1])).item())
  assert np.isfinite(logits.cross_entropy(Tensor([7, 1]), ignore_index=7).item())
  with pytest.raises(IndexError, match="cross_entropy: target -1"): logits.cross_entropy(Tensor([-1, 1])).item()
  # tinygrad's: a -1 target picks no class, without leaving the mean
  assert np.isfinite(logits.sparse_categorical_crossentropy(Tensor([-1, 1])).item())
  with pytest.raises(IndexError, match="sparse_categorical_crossentropy: target 4"):
    logits.sparse_categorical_crossentropy(Tensor([4, 1])).item()
  with pytest.raises(IndexError, match="nll_loss: target 4"): logits.nll_loss(Tensor([4, 1])).item()

def test_one_hot_of_a_value_past_num_classes() -> None:
  with pytest.raises(IndexError, match=r"one_hot: class value 5 .* num_classes=5"): Tensor([0, 5]).one_hot(5).numpy()
  with pytest.raises(IndexError, match=r"one_hot: class value -2 "): Tensor([0, -2]).one_hot().numpy()

def _kernels(fn: Callable[[], Tensor]) -> int:
  out = fn()
  GlobalCounters.reset()
  out.realize()
  return GlobalCounters.kernel_count

def test_a_bad_index_inside_a_fused_expression() -> None:
  x, idx = Tensor(X).realize(), Tensor([1, 3]).realize()
  def fused(d: int) -> Tensor: return (x * 2 + 1)[idx + d].exp()
  assert _kernels(lambda: fused(1)) == 1  # the check is in the kernel, not a kernel of its own
  with Context(CHECK_INDICES=0): unchecked = _kernels(lambda: fused(1).sum(0))
  assert _kernels(lambda: fused(1).sum(0)) == unchecked
  with pytest.raises(IndexError, match=r"x\[index\]: index 5 is out of bounds for dimension 0 with size 5"):
    fused(2).sum(0).realize()  # the index is computed in the kernel: 3 + 2

def test_the_checked_gather_and_scatter_still_fold() -> None:
  # the check rides along the index: the gather is still one load per output, the embedding's gradient a scatter
  x, idx = Tensor(np.random.default_rng(0).standard_normal((300, 32)).astype(np.float32)), Tensor([5, 299, -300] * 100)
  asts = [it.ast for it in create_schedule([x[idx].lazydata])[0]]
  assert not any(u.op is Ops.REDUCE_AXIS for a in asts for u in a.toposort)
  assert sum(u.op is Ops.CHECK for a in asts for u in a.toposort) == 1
  w = Tensor(x.numpy(), requires_grad=True)
  g, = (w[idx] * 2).sum().gradient(w)
  asts = [it.ast for it in create_schedule([g.lazydata])[0]]
  assert any(s.op is Ops.SCATTER for a in asts for s in a.src)  # a scatter kernel
  np.testing.assert_allclose(g.numpy().sum(), 2 * 300 * 32)

def test_what_stays_a_reduce_is_checked_too() -> None:
  # below SCATTER_MIN_WORK a scatter stays the compare-and-sum reduce, one kernel: the check is in it all the same
  out = Tensor.zeros(5, 4).scatter_add(0, Tensor([[0, 5, 1, 2], [1, 1, 1, 1], [2, 2, 2, 2]]), Tensor.ones(3, 4))
  asts = [it.ast for it in create_schedule([out.lazydata])[0]]
  assert len(asts) == 1 and any(u.op is Ops.REDUCE_AXIS for u in asts[0].toposort)
  with pytest.raises(IndexError, match=r"scatter_add: index 5 is out of bounds for dimension 0 with size 5"):
    out.numpy()

def test_bad_indices_inside_a_jit_replay() -> None:
  x = Tensor(X).realize()
  @TinyJit
  def f(idx: Tensor) -> Tensor: return (x[idx] * 2).realize()
  for v in (0, 4, -5):  # runs, captures, replays
    assert f(Tensor([v, 2])).numpy()[0].tolist() == (X[v] * 2).tolist()
  assert f.calls == 2
  with pytest.raises(IndexError, match="x\\[index\\]: index 5 is out"): f(Tensor([5, 2]))
  assert f(Tensor([1, 2])).numpy()[0].tolist() == (X[1] * 2).tolist()  # the flags were cleared
  with pytest.raises(IndexError, match="index -6 is out"): f(Tensor([-6, 2]))

def test_a_bad_index_while_the_jit_captures() -> None:
  f = TinyJit(lambda idx: Tensor(X)[idx].realize())
  f(Tensor([0, 1]))
  with pytest.raises(IndexError, match="index 7 is out"): f(Tensor([7, 1]))
  for v in (3, 4, 1): assert f(Tensor([v, 1])).numpy()[0].tolist() == X[v].tolist()

def test_through_the_gradient_of_an_embedding() -> None:
  emb = nn.Embedding(5, 4)
  emb.weight.requires_grad_()
  g, = (emb(Tensor([[1, 5]])) * 3).sum().gradient(emb.weight)  # the forward is never realized on its own
  with pytest.raises(IndexError, match=r"nn.Embedding: index 5 is out of bounds for dimension 0 with size 5"):
    g.numpy()
  g, = (emb(Tensor([[1, 4]])) * 3).sum().gradient(emb.weight)
  assert g.numpy()[[1, 4]].tolist() == [[3.0] * 4] * 2

def test_every_flag_is_cleared_when_one_raises() -> None:
  # two bad kernels in one schedule: the first raises, and the second's flag does not blame the next run of its kernel
  x, y = Tensor(X).realize(), Tensor(X.T.copy()).realize()
  a, b = x[Tensor([9, 0])] + 1, y.gather(0, Tensor([[7, 0, 0, 0, 0]]))
  with pytest.raises(IndexError): a.realize(b)
  a, b = x[Tensor([4, 0])] + 1, y.gather(0, Tensor([[3, 0, 0, 0, 0]]))
  a.realize(b)
  assert b.tolist() == [[X[0, 3], X[1, 0], X[2, 0], X[3, 0], X[4, 0]]]

def test_a_failed_write_raises_once() -> None:
  # every kernel has run when the error is raised: the write is committed (its bad entry left out), not left pending to
  # raise again at every later read of the tensor
  w = Tensor([1.0, 2.0, 3.0]).realize()
  w.assign(w.scatter(0, Tensor([5, 1]), Tensor([1.0, 7.0])))
  with pytest.raises(IndexError, match="scatter: index 5"): w.numpy()
  assert w.tolist() == [1.0, 7.0, 3.0] and (w + 1).tolist() == [2.0, 8.0, 4.0]

def test_values_outside_a_pads_mask_are_no_indices() -> None:
  # a padded view of a checked index computes it from the zeros loaded outside the mask: (0 - 1) is no index there
  idx = Tensor([1, 2]).realize()
  got = (idx - 1).one_hot(3).pad(((1, 1), (0, 0))).numpy()
  assert got.tolist() == [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 0]]

def test_positions_padto_adds_are_no_indices() -> None:
  # PADTO on the classes (300 -> 320) computes at positions past the shape from masked loads and constants, never
  # stored: the bounds there read 0, so a check would see every index out of range
  item = create_schedule([Tensor(np.arange(64) % 300).one_hot(300).lazydata])[0][-1]
  runner = compile_kernel(item.ast, Device["CPU"], [Opt(OptOps.PADTO, 1, 32)])
  assert runner.kernel.out_pad is not None
  runner(item.bufs)
  flags = index_flags([ExecItem(runner, item.bufs)])
  assert flags and all(f.take() is None for f in flags)

@pytest.mark.parametrize("device", ["CPU", "EMU"])
def test_junk_indices_are_recorded_and_never_read_out_of_bounds(device: str) -> None:
  # what BEAM gives a kernel: random bits as indices. The checked gather stays in bounds (EMU raises on any access
  # outside a buffer) and records the largest bad one; the rows of the good ones are read
  table = np.arange(50 * 8, dtype=np.float32).reshape(50, 8)
  junk = np.array([2**31 - 1, -2**31, 49, 0, 12345678, -50, -51, 7], dtype=np.int32)
  with Context(DEV=device):
    items = create_schedule([Tensor(table)[Tensor(np.zeros(8, np.int32))].lazydata])[0]
    run_schedule(items[:-1])
    item = items[-1]
    next(b for b in item.bufs if b.dtype == dtypes.int32).copyin(memoryview(junk.view(np.uint8)))
    runner = compile_kernel(item.ast, Device[device])
    runner(item.bufs)
    (flags,) = index_flags([ExecItem(runner, item.bufs)])
    assert flags.take() == 2**31 - 1 and flags.take() is None  # taken: cleared
    got = item.bufs[0].numpy().reshape(8, 8)
  ok = (junk >= -50) & (junk < 50)
  np.testing.assert_array_equal(got[ok], table[junk[ok]])

def test_check_indices_off_builds_no_check() -> None:
  with Context(CHECK_INDICES=0):
    out = Tensor(X)[Tensor([7, 1])]
    assert not any(u.op is Ops.CHECK for u in out.lazydata.toposort)
    assert out.numpy().tolist() == [[0.0] * 4, X[1].tolist()]  # out of range matches nothing: zeros
    assert Tensor.zeros(3).scatter_add(0, Tensor([3, 0]), Tensor([1.0, 2.0])).tolist() == [2.0, 0.0, 0.0]

def test_sharded_index() -> None:
  devices = ("CPU:0", "CPU:1")
  w = Tensor(X).shard(devices, 0)
  assert w[Tensor([4, -5]).shard(devices, None)].numpy().tolist() == [X[4].tolist(), X[0].tolist()]
  with pytest.raises(IndexError, match="index 5 is out"): w[Tensor([5, 0]).shard(devices, None)].numpy()

def test_masked_scatter_past_the_source() -> None:
  x, mask = Tensor([1, 2, 3, 4]), Tensor([True, False, True, True])
  assert x.masked_scatter(mask, Tensor([10, 20, 30])).tolist() == [10, 2, 20, 30]
  with pytest.raises(IndexError, match=r"masked_scatter: source index 2 is out of bounds for source, which has 2"):
    x.masked_scatter(mask, Tensor([10, 20])).numpy()

def test_beam_search_with_the_checks(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
  # candidates are timed on random index data, mostly out of range: their flags are scratch, never compared, and
  # the output check against the unoptimized kernel passes
  from lazytensor.opt import search
  monkeypatch.setattr(search, "MIN_SEARCH_S", 0.0)  # search these small kernels too
  idx = np.random.default_rng(1).integers(0, 300, 256).astype(np.int32)
  with Context(BEAM=1, CACHEDB=str(tmp_path / "beam.db"), BEAM_TIMEOUT_SEC=5.0, PARALLEL=0, IGNORE_BEAM_CACHE=1):
    emb = nn.Embedding(300, 16)
    emb.weight.requires_grad_()
    g, = emb(Tensor(idx)).sum().gradient(emb.weight)
    got = g.numpy()
    with pytest.raises(IndexError, match="nn.Embedding: index 300"): emb(Tensor([300, 1])).numpy()
  search_workers.close_pool()
  np.testing.assert_array_equal(got[:, 0], np.bincount(idx, minlength=300))
