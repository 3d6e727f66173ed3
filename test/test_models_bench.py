"""extra/bench/models.py on its tiny configurations (three of its cases, to keep it short): each runs in lazytensor
(as written and through TinyJit) and in torch with the same weights, and the outputs agree."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("torch")

def test_models_bench_quick() -> None:
  res = subprocess.run([sys.executable, str(ROOT / "extra" / "bench" / "models.py"), "--quick", "--threads", "1",
                        "--runs", "1", "--cases", "bert,gpt2-prefill,gpt2-decode"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert res.returncode == 0, res.stdout + res.stderr
  rows = {line[:24].strip(): line[24:].split() for line in res.stdout.splitlines()
          if re.match(r"(bert|gpt2)\S* ", line)}
  assert sorted(rows) == ["bert b1", "gpt2-decode (ms/token)", "gpt2-prefill"], res.stdout
  for name, fields in rows.items():
    line = " ".join(fields)
    if (diff := re.search(r"max diff (\S+)", line)) is not None: assert float(diff.group(1)) < 1e-4, line
    # the milliseconds of lazytensor as written, through TinyJit, torch eager and torch.compile (not asked for)
    ours, jit, theirs, compiled = fields[1:5]
    assert (ours == "-") == name.startswith("gpt2-decode") and jit != "-" and theirs != "-" and compiled == "-", line
  assert "8/8 greedy tokens equal" in " ".join(rows["gpt2-decode (ms/token)"])
