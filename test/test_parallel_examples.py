"""The parallelism examples of extra/examples run a few steps and match one device (the difference they print)."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "extra" / "examples"
# mpiexec from the mpich wheel sits next to the Python of the environment it was installed in, which may not be on PATH
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and MPIEXEC is not None

def _largest_differences(out: str) -> tuple[float, float]:
  m = re.search(r"largest difference from one (?:device|process): loss ([0-9.e+-]+), weights ([0-9.e+-]+)", out)
  assert m is not None, out
  return float(m.group(1)), float(m.group(2))

def _run(cmd: list[str]) -> str:
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
  assert res.returncode == 0, res.stdout + res.stderr
  return res.stdout

@pytest.mark.parametrize("args", [["ddp_digits.py", "--devices", "3"], ["tensor_parallel.py"],
                                  ["pipeline_parallel.py", "--stages", "3"], ["zero_fsdp.py", "--mode", "zero1"],
                                  ["zero_fsdp.py", "--mode", "zero2"], ["zero_fsdp.py", "--mode", "fsdp"]],
                         ids=lambda a: "-".join(a).replace(".py", ""))
def test_example_matches_one_device(args: list[str]) -> None:
  out = _run([sys.executable, str(EXAMPLES / args[0]), *args[1:], "--steps", "2"])
  loss, weights = _largest_differences(out)
  assert loss < 1e-4 and weights < 1e-4, out

@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'")
def test_ddp_example_over_two_mpi_ranks() -> None:
  out = _run([str(MPIEXEC), "-n", "2", sys.executable, str(EXAMPLES / "ddp_digits.py"), "--steps", "2"])
  assert "over 2 MPI ranks" in out
  loss, weights = _largest_differences(out)
  assert loss < 1e-4 and weights < 1e-4, out

def test_mesh_zoo_runs_every_strategy_and_matches_one_device() -> None:
  out = _run([sys.executable, str(EXAMPLES / "mesh_zoo.py"), "--steps", "2", "--batch", "16"])
  rows = {line[:14].strip(): (int(m.group(1)), float(m.group(2))) for line in out.splitlines()
          if (m := re.search(r"(\d+) copies\s+[0-9.]+ KiB\s+diff ([0-9.e+-]+)", line))}
  assert set(rows) == {"ddp", "fsdp", "zero1", "zero2", "tp", "dp x tp", "pp gpipe", "pp 1f1b", "pp zb", "ep",
                       "cp (ring)"}, out
  assert all(copies > 0 and diff < 1e-5 for copies, diff in rows.values()), out
  assert "bubble 0.20" in out and "bubble 0.08" in out  # gpipe and 1f1b: (p-1)/(m+p-1); zb: (p-1)/(3m+p-1)
