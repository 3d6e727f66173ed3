"""Run by test_distributed.py under `mpiexec -n 2`: every collective of lazytensor.parallel.distributed against
numpy."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from lazytensor import Tensor
from lazytensor.parallel import distributed as dist


def only_rank_0_calls() -> None:
  """Rank 0 calls a collective that rank 1 never joins: rank 0 must raise, not hang."""
  dist.init()
  if dist.rank() == 0:
    try: dist.all_reduce(Tensor([1.0]))
    except TimeoutError as e: print(f"rank 0: {e}", flush=True)
  else: print("rank 1: skipped the collective", flush=True)

# calls that differ between the ranks: (rank 0's, rank 1's); each rank must raise the same error, and the ranks stay in
# step for the collectives after it
MISMATCHES: list[tuple[Callable[[], object], Callable[[], object]]] = [
  (lambda: dist.all_reduce(Tensor([1.0, 2.0])), lambda: dist.all_reduce(Tensor([1, 2]))),  # float32, int64
  (lambda: dist.all_reduce(Tensor.ones(4)), lambda: dist.all_reduce(Tensor.ones(1 << 20))),  # (4,), (1M,)
  (lambda: dist.all_reduce(Tensor.ones(4), "sum"), lambda: dist.all_reduce(Tensor.ones(4), "max")),
  (lambda: dist.all_reduce(Tensor.ones(4), "sum"), lambda: dist.all_reduce(Tensor.ones(4), "mean")),
  (lambda: dist.all_gather(Tensor.ones(2, 3)), lambda: dist.all_gather(Tensor.ones(2, 4))),
  (lambda: dist.reduce_scatter(Tensor.ones(4)), lambda: dist.reduce_scatter(Tensor.ones(4, dtype="float16"))),
  (lambda: dist.broadcast(Tensor.ones(4), src=0), lambda: dist.broadcast(Tensor.ones(4), src=1)),
  (lambda: dist.all_reduce(Tensor.ones(4)), dist.barrier),
]

def mismatches() -> None:
  """Each MISMATCHES call on its rank: print the error it raised (the test compares the ranks' lines)."""
  dist.init()
  r = dist.rank()
  for i, calls in enumerate(MISMATCHES):
    try: calls[r]()
    except ValueError as e: said = str(e)
    else: said = "no error"
    # one write of the whole line: the two ranks share the test's pipe, and print() writes the newline on its own
    sys.stdout.write(f"case {i} rank {r}: {said}\n")
    sys.stdout.flush()
  assert dist.all_reduce(Tensor([r + 1.0])).tolist() == [3.0]  # still in step
  print(f"rank {r}: in step", flush=True)

class Recorder:
  """The process's communicator, noting each MPI call made through it: its name and its first two arguments (the
  buffers sent and received)."""
  def __init__(self, comm: Any) -> None: self.comm, self.calls = comm, []
  def __getattr__(self, name: str) -> Any:
    fn = getattr(self.comm, name)
    if name.startswith("Get_"): return fn
    def call(*args: Any, **kwargs: Any) -> Any:
      self.calls.append((name, *args[:2]))
      return fn(*args, **kwargs)
    return call

def calls() -> None:
  """What MPI is asked to do for each collective of a realized dense tensor: at most SMALL_BYTES, one message to the
  other rank that carries the check and the values, and nothing else; larger, that message with the check alone, then
  MPI's collective straight from the tensor's buffer into the result's. The messages are persistent requests, made by
  the first call of a description (the receive by the first call of all): a call made again makes none."""
  dist.init()
  r = dist.rank()
  dist._World.comm = recorder = Recorder(dist._World.comm)
  receives = 0
  for n in (1024, dist.SMALL_BYTES // 4 + 2):
    t = Tensor(np.arange(n, dtype=np.float32) + r).realize()
    small = t.nbytes() <= dist.SMALL_BYTES
    for name, mpi_name in (("all_reduce", "Allreduce"), ("all_gather", "Allgather"),
                           ("reduce_scatter", "Reduce_scatter_block")):
      for again in (False, True):
        recorder.calls.clear()
        out = getattr(dist, name)(t)
        receives += sum(c[0] == "Recv_init" and c[2] == 1 - r for c in recorder.calls)
        made = [c for c in recorder.calls if c[0] == "Send_init"]
        data = [c for c in recorder.calls if c[0] not in ("Recv_init", "Send_init")]
        assert len(made) == (not again) and all(dest == 1 - r for _, _, dest in made), (name, again, recorder.calls)
        assert all(sent.nbytes == dist.HEADER_BYTES + small * t.nbytes() for _, sent, _ in made), (name, n, made)
        if small:
          assert not data, (name, data)
          continue
        assert [d[0] for d in data] == [mpi_name], (name, data)
        assert np.shares_memory(data[0][1], t._buffer()[0].host_view()), f"{name}: the input was copied"
        assert np.shares_memory(data[0][2], out._buffer()[0].host_view()), f"{name}: the result was copied"
  assert receives == 1, receives
  print(f"rank {r}: calls ok", flush=True)

# dtypes and sizes (elements) of exact_values: the small ones travel with the check (SMALL_BYTES), the last ones after
DTYPES = ["float32", "float64", "int32", "int64", "uint8", "float16"]

def exact_values() -> None:
  """Every collective, for each dtype and size, equal bit for bit to numpy's reduction in rank order (what each
  rank's result was before results were kept: MPI's own collective past SMALL_BYTES, whose order over more than two
  ranks is its own, within rounding), three calls of each in a row with new values (the calls after the first write
  into the result the first made, once nothing holds it)."""
  import functools
  dist.init()
  r, n = dist.rank(), dist.world_size()
  close = functools.partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-3)
  for dtype in DTYPES:
    itemsize = np.dtype(dtype).itemsize
    for size in (n, 7 * n, 1024 // itemsize, 4096 // itemsize, dist.SMALL_BYTES // itemsize, dist.SMALL_BYTES // 4 + n):
      size -= size % n
      for step in range(3):
        gen = [np.random.default_rng((k, size, step)) for k in range(n)]
        every = [(g.standard_normal(size) * 100 if dtype.startswith("float") else g.integers(0, 100, size))
                 .astype(dtype) for g in gen]
        exact = size * itemsize <= dist.SMALL_BYTES or n == 2
        check = np.testing.assert_array_equal if exact else close
        mine = Tensor(every[r])
        wide = [e.astype(np.float32) if dtype == "float16" else e for e in every]  # reduced in float32, as MPI
        for op, fn in (("sum", np.add), ("max", np.maximum), ("prod", np.multiply)):
          with np.errstate(over="ignore"):
            want = functools.reduce(fn, wide).astype(dtype)
            check(dist.all_reduce(mine, op).numpy(), want, err_msg=f"all_reduce {op} {dtype} {size}")
            part = want.reshape(n, -1)[r]
            check(dist.reduce_scatter(mine, op).numpy(), part, err_msg=f"reduce_scatter {op} {dtype} {size}")
        np.testing.assert_array_equal(dist.all_gather(mine).numpy(), np.concatenate(every), f"{dtype} {size}")
        np.testing.assert_array_equal(dist.broadcast(mine, src=n - 1).numpy(), every[-1], f"{dtype} {size}")
  print(f"rank {r}: exact ok", flush=True)

def kept_results() -> None:
  """A small call writes its values into the last result of its description only once nothing holds that: a result
  still held, a lazy value computed from it, a realized view of it (which holds its buffer's node, not its own) and a
  numpy array that reads it through DLPack (which holds the Buffer) keep their values through the calls after them; a
  result let go gives its memory to the next call."""
  dist.init()
  r, n = dist.rank(), dist.world_size()
  def summed(value: float, device: str = "CPU") -> Tensor:
    return dist.all_reduce(Tensor(np.full(4, value + r, np.float32), device=device))
  total = lambda value: n * value + n * (n - 1) / 2  # noqa: E731  # the sum over the ranks of value + rank
  def serial(t: Tensor) -> int: return t._buffer()[0].serial
  # each holder holds the last result when the next call comes (the one that call would write into)
  held = summed(1.0)
  again = summed(2.0)
  assert held.tolist() == [total(1.0)] * 4 and serial(again) != serial(held), (held.tolist(), serial(held))
  lazy = again + 1
  del held, again
  summed(3.0)
  view = summed(4.0)[1:3].realize() + 0  # reads a VIEW of its own over the result's BUFFER node
  summed(5.0)
  exported = np.from_dlpack(summed(6.0))
  summed(7.0)
  assert lazy.tolist() == [total(2.0) + 1] * 4, lazy.tolist()
  assert view.tolist() == [total(4.0)] * 2, view.tolist()
  assert exported.tolist() == [total(6.0)] * 4, exported.tolist()
  dropped = serial(summed(8.0))
  reused = summed(9.0)
  assert serial(reused) == dropped and reused.tolist() == [total(9.0)] * 4, (serial(reused), dropped)
  elsewhere = summed(10.0, "CPU:1")  # the same description on another device: a result of its own, there
  assert elsewhere.device == "CPU:1" and elsewhere.tolist() == [total(10.0)] * 4, elsewhere.tolist()
  assert reused.tolist() == [total(9.0)] * 4, reused.tolist()
  disagreed(r, summed, serial)
  print(f"rank {r}: kept ok", flush=True)

def disagreed(r: int, summed: Callable[[float], Tensor], serial: Callable[[Tensor], int]) -> None:
  """A call makes its result while the messages that check it travel, before the ranks are known to agree: on a
  disagreement it has written nothing into it (here the last result of its description, let go), and the next call
  that agrees writes its own values there."""
  dropped = serial(summed(11.0))
  world = dist._World.messages
  assert world is not None and world.last is not None and (kept := world.last.kept) is not None
  before = kept.host.copy()
  try: dist.all_reduce(Tensor(np.full(4, -1.0, np.float32)), "sum" if r == 0 else "max")  # rank 0's: summed's call
  except ValueError as e: assert "the op: sum on rank 0, max on rank" in str(e), e
  else: raise AssertionError("calls that differ in their op gave no error")
  np.testing.assert_array_equal(kept.host, before)
  again = summed(12.0)
  n = dist.world_size()
  assert serial(again) == dropped and again.tolist() == [n * 12.0 + n * (n - 1) / 2] * 4, (serial(again), dropped)

def main() -> None:
  dist.init()
  r, n = dist.rank(), dist.world_size()
  assert n == 2, n
  mine = np.arange(6, dtype=np.float32).reshape(3, 2) + 10 * r
  every = [np.arange(6, dtype=np.float32).reshape(3, 2) + 10 * k for k in range(n)]
  np.testing.assert_allclose(dist.all_reduce(Tensor(mine)).numpy(), sum(every))
  np.testing.assert_allclose(dist.all_reduce(Tensor(mine), "max").numpy(), np.max(every, 0))
  np.testing.assert_allclose(dist.all_reduce(Tensor(mine), "min").numpy(), np.min(every, 0))
  np.testing.assert_equal(dist.all_gather(Tensor(mine)).numpy(), np.concatenate(every))
  rs = dist.reduce_scatter(Tensor(np.stack(every).reshape(6, 2) * (r + 1)))
  np.testing.assert_allclose(rs.numpy(), (np.stack(every).reshape(6, 2) * 3)[3 * r:3 * r + 3])
  b = dist.broadcast(Tensor(mine), src=1)
  np.testing.assert_equal(b.numpy(), every[1])
  ints = dist.all_reduce(Tensor([r + 1, 5]))
  assert ints.tolist() == [3, 10] and ints.dtype == Tensor([1]).dtype
  half = dist.all_reduce(Tensor([1.5], dtype="float16"))
  assert half.tolist() == [3.0] and half.dtype == Tensor([1.0], dtype="float16").dtype
  # MPI reads a CPU tensor's buffer where it lies and writes the result into a new one: the input stays as it was,
  # views and unrealized values are made dense first, and the result lives on the input's device
  t = Tensor(mine, device="CPU:1").realize()
  s = dist.all_reduce(t)
  np.testing.assert_equal(t.numpy(), mine)
  assert s.device == "CPU:1" and (s + 1).tolist() == (sum(every) + 1).tolist()
  np.testing.assert_allclose(dist.all_reduce(Tensor(mine).T * 2).numpy(), sum(every).T * 2)
  assert dist.all_gather(Tensor(float(r))).tolist() == [0.0, 1.0]
  spread = dist.all_reduce(Tensor(mine).shard(("CPU:0", "CPU:1"), 0))
  assert spread.device == ("CPU", "CPU:1") and spread.tolist() == sum(every).tolist()
  try: dist.reduce_scatter(Tensor.ones(3))  # the ranks agree, then each raises: its result was never made
  except ValueError as e: assert "dim 0 of a tensor of shape (3,) must divide evenly among 2 ranks" in str(e), e
  else: raise AssertionError("reduce_scatter of 3 over 2 ranks gave no error")
  large(r, n)
  dist.barrier()
  print(f"rank {r} of {n}: ok", flush=True)

def large(r: int, n: int) -> None:
  """Tensors past SMALL_BYTES, whose values MPI's collectives move after the check (smaller ones travel with it)."""
  size = dist.SMALL_BYTES // 4 + 2 * n
  every = [np.arange(size, dtype=np.float32) * (k + 1) for k in range(n)]
  mine = Tensor(every[r])
  np.testing.assert_allclose(dist.all_reduce(mine).numpy(), sum(every))
  np.testing.assert_allclose(dist.all_reduce(mine, "max").numpy(), np.max(every, 0))
  np.testing.assert_equal(dist.all_gather(mine).numpy(), np.concatenate(every))
  np.testing.assert_allclose(dist.reduce_scatter(mine).numpy(), sum(every).reshape(n, -1)[r])
  np.testing.assert_equal(dist.broadcast(mine, src=1).numpy(), every[1])

if __name__ == "__main__":
  modes = {"timeout": only_rank_0_calls, "mismatch": mismatches, "calls": calls, "exact": exact_values,
           "kept": kept_results}
  modes.get(sys.argv[1] if sys.argv[1:] else "", main)()
