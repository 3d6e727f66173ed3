"""The GPU kit (extra/gpu/) in CI: `check.sh --dry-run` runs the script that a GPU machine runs, with CUDACPU in place
of CUDA and no wheels, so that the script, the tests it picks and the benchmark's JSON never rot between the rare runs
on a GPU. Not marked gpu: check.sh runs the tests marked gpu."""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHECK = ROOT / "extra" / "gpu" / "check.sh"

@pytest.mark.skipif(shutil.which("g++") is None, reason="CUDACPU needs g++")
def test_check_dry_run_runs_the_gpu_tests_and_writes_the_figures(tmp_path: pathlib.Path) -> None:
  # the environment passes CACHEDIR on: the dry run's kernels come from the suite's cache where it has them
  proc = subprocess.run(["bash", str(CHECK), "--dry-run"], env={**os.environ, "OUT": str(tmp_path)},
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
  assert (tmp_path / "check.log").read_text() == proc.stdout  # everything printed is in the log
  suite = ET.parse(tmp_path / "tests.xml").getroot().find("testsuite")
  assert suite is not None
  counts = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
  assert counts["tests"] >= 5 and counts["failures"] == counts["errors"] == counts["skipped"] == 0, counts
  figures = json.loads((tmp_path / "figures.json").read_text())
  assert figures["device"] == "CUDACPU" and figures["quick"] and figures["rows"]
  for row in figures["rows"]:
    assert row["name"] and row["unit"] in ("GB/s", "GFLOP/s") and row["lazytensor"]["BEAM=0"] > 0
    assert row["torch"] is None and row["ratio"] is None  # no GPU, no comparison

def test_check_rejects_unknown_arguments() -> None:
  proc = subprocess.run(["bash", str(CHECK), "--dryrun"], capture_output=True, text=True, timeout=60)
  assert proc.returncode == 2 and "usage: extra/gpu/check.sh [--dry-run]" in proc.stderr
