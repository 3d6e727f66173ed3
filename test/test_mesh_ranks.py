"""A DeviceMesh across MPI ranks (runtime/remote.py): test/mesh_worker.py under `mpiexec -n 2` (2 devices a rank),
skipped where mpi4py or mpiexec are missing. The same cases over 4 ranks of one device each, by hand (a 2-core CI
machine runs 4 ranks of the transformer too slowly):

  PYTHONPATH=. mpiexec -n 4 python test/mesh_worker.py basics
  PYTHONPATH=. mpiexec -n 4 python test/mesh_worker.py transformer dp fsdp
  PYTHONPATH=. mpiexec -n 4 python test/mesh_worker.py mismatch
  PYTHONPATH=. mpiexec -n 4 python test/mesh_worker.py small
"""
from __future__ import annotations

import pytest
from test_distributed import HAVE_MPI, ROOT, _mpiexec

from lazytensor.parallel import distributed as dist
from lazytensor.runtime import remote

WORKER = str(ROOT / "test" / "mesh_worker.py")
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'")

def test_alone_nothing_changes() -> None:
  dist.init(devices_per_rank=4)  # one process: every device is its own, and no mesh across ranks is joined
  assert remote.joined is None and remote.owns("CPU:3")
  with pytest.raises(ValueError, match="devices_per_rank 0: expected a positive int"): dist.init(devices_per_rank=0)

@needs_mpi
@pytest.mark.parametrize("queues", ["1", "0"], ids=["queued", "in-order"])
def test_mesh_over_two_ranks(queues: str) -> None:
  res = _mpiexec([WORKER, "basics"], QUEUES=queues)  # transfers on the devices' workers, or on the calling thread
  assert res.returncode == 0, res.stdout + res.stderr
  assert "rank 0 of 2: ok" in res.stdout and "rank 1 of 2: ok" in res.stdout, res.stdout + res.stderr

@needs_mpi
def test_dp_tp_transformer_over_two_ranks_equals_one_device() -> None:
  res = _mpiexec([WORKER, "transformer", "dp"], timeout=900)
  assert res.returncode == 0, res.stdout + res.stderr
  for r in range(2): assert f"rank {r} of 2: dp x tp equals one device" in res.stdout, res.stdout + res.stderr

@needs_mpi
def test_ranks_that_disagree_raise_one_error_on_every_rank() -> None:
  res = _mpiexec([WORKER, "mismatch"], DIST_TIMEOUT="30")
  assert res.returncode == 0, res.stdout + res.stderr
  lines = dict(line.split(": ", 1) for line in res.stdout.splitlines() if line.startswith("case "))
  # a digest of each kernel's code follows what it stores
  want = [("a kernel on CPU storing (2, 2) float32 (code ", ") on rank 0; a kernel on CPU storing (3, 2) float32"),
          ("a kernel on CPU storing (1, 2) float32 (code ", ") on rank 0; a kernel on CPU storing (1, 2) float16"),
          ("a read of 2 float32 on CPU:3 on rank 0; a kernel on CPU:3 storing (2,) float32 (code ", ") on rank 1")]
  for i, (rank0, rank1) in enumerate(want):
    assert lines[f"case {i} rank 0"] == lines[f"case {i} rank 1"], res.stdout
    said = lines[f"case {i} rank 0"]
    assert said.startswith(f"the ranks disagree at step 0 of what they run next: {rank0}"), res.stdout
    assert rank1 in said and "every rank of a mesh across ranks must run the same program" in said, res.stdout
  assert "rank 0: in step" in res.stdout and "rank 1: in step" in res.stdout, res.stdout + res.stderr

@needs_mpi
def test_small_all_reduces_across_ranks_are_one_exchange() -> None:
  # 8 all-reduces in one realize were 16 sends and 16 receives on each rank, each all-reduce a round trip with its sum
  # between; now one message each way, as in a TinyJit replay, and equal to one process's, bit for bit
  res = _mpiexec([WORKER, "small"])
  assert res.returncode == 0, res.stdout + res.stderr
  for r in range(2): assert f"rank {r} of 2: small all-reduces ok" in res.stdout, res.stdout + res.stderr
