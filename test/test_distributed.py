"""lazytensor.parallel.distributed: one process alone, and two under mpiexec (skipped where mpi4py or mpiexec are
missing)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lazytensor import Tensor
from lazytensor.parallel import distributed as dist

ROOT = Path(__file__).resolve().parent.parent
# mpiexec from the mpich wheel sits next to the Python of the environment it was installed in, which may not be on PATH
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and MPIEXEC is not None

def test_single_process() -> None:
  dist.init()
  assert dist.rank() == 0 and dist.world_size() == 1
  t = Tensor([[1.0, 2.0]])
  assert dist.all_reduce(t).tolist() == [[1.0, 2.0]]
  assert dist.all_gather(t).tolist() == [[1.0, 2.0]]
  assert dist.all_gather(Tensor(3.0)).tolist() == [3.0]
  assert dist.reduce_scatter(Tensor([1, 2])).tolist() == [1, 2]
  assert dist.broadcast(t, 0).tolist() == [[1.0, 2.0]]
  dist.barrier()

def test_docstring_examples() -> None:
  import doctest
  result = doctest.testmod(dist, extraglobs={"Tensor": Tensor}, optionflags=doctest.ELLIPSIS)
  assert result.failed == 0 and result.attempted > 10, result

def test_bad_input() -> None:
  with pytest.raises(ValueError, match="reduce op 'mean'"): dist.all_reduce(Tensor([1.0]), "mean")
  with pytest.raises(IndexError, match="src 3"): dist.broadcast(Tensor([1.0]), src=3)
  with pytest.raises(ValueError, match="must divide evenly"): dist.reduce_scatter(Tensor(1.0))

def test_unknown_backend(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(dist._World, "initialized", False)
  with pytest.raises(ValueError, match="backend 'nccl'"): dist.init("nccl")

def test_missing_mpi4py_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(dist._World, "initialized", False)
  monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now raises ImportError
  monkeypatch.setattr(dist, "launched_ranks", lambda: 2)
  with pytest.raises(ImportError, match="pip install mpi4py mpich"): dist.init()

def _mpiexec(args: list[str], timeout: float = 240, **env_vars: str) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": str(ROOT), **env_vars}
  return subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, *args], capture_output=True, text=True, env=env,
                        timeout=timeout, cwd=ROOT)

@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'")
def test_collectives_over_two_ranks() -> None:
  res = _mpiexec([str(ROOT / "test" / "dist_worker.py")])
  assert res.returncode == 0, res.stdout + res.stderr
  assert "rank 0 of 2: ok" in res.stdout and "rank 1 of 2: ok" in res.stdout

@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'")
def test_a_collective_some_ranks_skip_times_out() -> None:
  res = _mpiexec([str(ROOT / "test" / "dist_worker.py"), "timeout"], DIST_TIMEOUT="2")
  assert "rank 0: rank 0: all_reduce waited" in res.stdout and "every rank must call" in res.stdout, \
    res.stdout + res.stderr

@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'")
def test_ranks_that_disagree_raise_one_error_on_every_rank() -> None:
  # float32 against int64 reduced garbage; (4,) against (1M,) gave a wrong value on one rank and a timeout on the other
  res = _mpiexec([str(ROOT / "test" / "dist_worker.py"), "mismatch"], DIST_TIMEOUT="20")
  assert res.returncode == 0, res.stdout + res.stderr
  lines = dict(line.split(": ", 1) for line in res.stdout.splitlines() if line.startswith("case "))
  want = ["the dtype: float32 on rank 0, int64 on rank 1", "the shape: (4,) on rank 0, (1048576,) on rank 1",
          "the op: sum on rank 0, max on rank 1", "the op: sum on rank 0, mean on rank 1",
          "the shape: (2, 3) on rank 0, (2, 4) on rank 1", "the dtype: float32 on rank 0, float16 on rank 1",
          "the src: 0 on rank 0, 1 on rank 1", "the collective: all_reduce on rank 0, barrier on rank 1"]
  for i, what in enumerate(want):
    assert lines[f"case {i} rank 0"] == lines[f"case {i} rank 1"], res.stdout
    assert f"the ranks disagree on {what};" in lines[f"case {i} rank 0"], res.stdout
  assert "rank 0: in step" in res.stdout and "rank 1: in step" in res.stdout, res.stdout + res.stderr

@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'")
def test_a_small_collective_is_one_message_and_a_large_one_a_check_then_the_data_in_place() -> None:
  # a 4 KB call was a 16-byte all-reduce (the check) then MPI's collective: ~160 us where mpi4py took 2-20 (the check
  # was a 256-byte all-gather of each call's description before, and the input was copied before MPI read it)
  res = _mpiexec([str(ROOT / "test" / "dist_worker.py"), "calls"])
  assert "rank 0: calls ok" in res.stdout and "rank 1: calls ok" in res.stdout, res.stdout + res.stderr

@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'")
def test_every_collective_gives_the_bits_of_numpy_in_rank_order() -> None:
  res = _mpiexec([str(ROOT / "test" / "dist_worker.py"), "exact"])
  assert "rank 0: exact ok" in res.stdout and "rank 1: exact ok" in res.stdout, res.stdout + res.stderr

@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'")
def test_a_small_call_writes_into_its_last_result_only_once_nothing_holds_it() -> None:
  # each call made a new Buffer, two graph nodes and freed them: ~7 of a 1 KB all_reduce's ~15 us of CPU time
  res = _mpiexec([str(ROOT / "test" / "dist_worker.py"), "kept"])
  assert "rank 0: kept ok" in res.stdout and "rank 1: kept ok" in res.stdout, res.stdout + res.stderr
