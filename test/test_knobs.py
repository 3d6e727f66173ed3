"""The knobs of README's table do what it says: DEBUG levels, colors, BEAM's progress bar, caches, NOOPT, PARALLEL; and
what a test run without torch says."""
from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lazytensor import Context, Tensor
from lazytensor.engine import realize
from lazytensor.helpers import (
  BEAM,
  BEAM_TIMEOUT_SEC,
  CACHEDB,
  DISKCACHE_TABLE,
  FASTMATH,
  NOOPT,
  ContextVar,
)
from lazytensor.opt import search, search_workers
from lazytensor.runtime.device import compile_stats

_consts = itertools.count(1)

@pytest.fixture(autouse=True)
def kernel_per_constant() -> Iterator[None]:
  """fresh() makes a kernel never built by giving it a new constant: one that would otherwise become a kernel argument
  (SCALAR_ARGS) and reuse the kernel."""
  with Context(SCALAR_ARGS=0): yield

def fresh(n: int = 64, reduce: bool = False) -> tuple[Tensor, np.ndarray]:
  """An expression whose kernel this process has never built (its constant is new), and its value."""
  c = 1.0 + next(_consts) / 1024
  x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
  t = Tensor(x) * c
  return (t.sum(1), (x * np.float32(c)).sum(1)) if reduce else (t, x * np.float32(c))

def run_with(capsys: pytest.CaptureFixture[str], reduce: bool = False, **knobs: object) -> str:
  """Realize a fresh kernel with these knobs, check its value, return what it printed."""
  t, want = fresh(reduce=reduce)
  capsys.readouterr()
  with Context(**knobs): np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
  return capsys.readouterr().out

class Terminal(io.StringIO):
  """Output that says it is a terminal, as sys.stdout is in an interactive shell."""
  def isatty(self) -> bool: return True

def kinds(db: Path) -> dict[str, int]:
  """The entries of each kind in a cache database."""
  with contextlib.closing(sqlite3.connect(db)) as conn:
    return dict(conn.execute(f"SELECT kind, COUNT(*) FROM {DISKCACHE_TABLE} GROUP BY kind").fetchall())

# ---- DEBUG ----

def test_debug_1_summarizes_schedules(capsys: pytest.CaptureFixture[str]) -> None:
  out = run_with(capsys, DEBUG=1)
  assert re.search(r"scheduled 1 items from \d+ nodes", out) and "ran 1 items; programs: " in out
  assert "***" not in out

def test_debug_2_prints_one_line_per_kernel(capsys: pytest.CaptureFixture[str]) -> None:
  out = run_with(capsys, reduce=True, DEBUG=2)
  lines = [line for line in out.splitlines() if line.startswith("*** ")]
  assert len(lines) == 1 and re.search(r"\*\*\* CPU\s+\d+ r_\S+\s+arg  2 mem .* GB tm .*us/ .*ms", lines[0]), out
  assert "source of" not in out

def test_debug_3_writes_axis_kinds_out_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
  out = run_with(capsys, reduce=True, DEBUG=3)
  assert "\x1b[" not in out and "axis colors" not in out
  assert re.search(r"r_\S+: \[Opt\(op=OptOps\.\w+.*\]  axes: \d+ global, .*\d+ (reduce|unroll)", out), out

def test_debug_3_colors_axes_with_one_legend_on_a_terminal(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(realize, "_legend_shown", False)
  term = Terminal()
  with contextlib.redirect_stdout(term):
    for _ in range(2): run_with(capsys, reduce=True, DEBUG=3)
  out = term.getvalue()
  legend = ("axis colors: \x1b[34mglobal\x1b[0m \x1b[94mthread\x1b[0m \x1b[36mlocal\x1b[0m \x1b[32mgroup\x1b[0m "
            "\x1b[37mmid\x1b[0m \x1b[31mreduce\x1b[0m \x1b[35munroll\x1b[0m \x1b[33mupcast\x1b[0m")
  assert out.count("axis colors") == 1 and f"\n{legend}\n" in out, out
  assert out.count("r_\x1b[34m") == 4  # each kernel's name, in the DEBUG=3 line and the DEBUG=2 line
  with contextlib.redirect_stdout(term := Terminal()): run_with(capsys, reduce=True, DEBUG=3, NO_COLOR="1")
  assert "\x1b[" not in term.getvalue() and "axes: " in term.getvalue()


def test_debug_4_prints_the_source_and_bypasses_the_program_cache(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
  db = str(tmp_path / "c.db")
  arr = np.arange(256, dtype=np.float32)
  c = 2.0 + next(_consts) / 1024
  with Context(CACHEDB=db): (Tensor(arr) * c).realize()  # the program goes to the disk cache
  realize.forget_programs()  # as in a new process: only the disk cache knows the program
  stats = dict(compile_stats)
  capsys.readouterr()
  with Context(CACHEDB=db, DEBUG=4): np.testing.assert_allclose((Tensor(arr) * c).numpy(), arr * np.float32(c))
  out = capsys.readouterr().out
  # lowered again to show the code (the source is printed where the program is lowered), not read from the program
  # cache; its binary is read back, not compiled
  assert "source of E_" in out and "define void @\"E_" in out and "fmul" in out
  assert compile_stats["compiled"] == stats["compiled"]
  realize.forget_programs()
  stats = dict(compile_stats)
  with Context(CACHEDB=db): (Tensor(arr) * c).realize()
  assert compile_stats["disk"] == stats["disk"] + 1 and "source of" not in capsys.readouterr().out

def test_debug_5_prints_the_kernel_ast(capsys: pytest.CaptureFixture[str]) -> None:
  out = run_with(capsys, reduce=True, DEBUG=5)
  assert "AST of r_" in out and "REDUCE_AXIS" in out and "SINK" in out and "STORE" in out
  assert "linear program of" not in out

def test_debug_6_prints_the_linear_program(capsys: pytest.CaptureFixture[str]) -> None:
  out = run_with(capsys, reduce=True, DEBUG=6)
  assert "linear program of r_" in out and re.search(r"\s+\d+ RANGE", out) and re.search(r"\s+\d+ ENDRANGE", out)
  assert "assembly of" not in out

def test_debug_7_prints_the_assembly(capsys: pytest.CaptureFixture[str]) -> None:
  out = run_with(capsys, DEBUG=7)
  assembly = out.split("assembly of E_", 1)[1]
  if shutil.which("llvm-objdump") or shutil.which("objdump"): assert re.search(r"\bret", assembly), assembly
  else: assert "no objdump on PATH" in assembly

# ---- every knob checks its values, from the environment and from Context ----

BAD_VALUES = [("DIST_TIMEOUT", "abc"), ("BEAM_TIMEOUT_SEC", "abc"), ("BEAM", "abc"), ("THREADS", "0"),
              ("THREADS", "-3"), ("PARALLEL", "-2"), ("CACHELEVEL", "7"), ("BUFFER_CACHE", "-5"),
              ("SCHEDULE_CACHE", "-1"), ("BEAM", "-1"), ("FASTMATH", "maybe"), ("DEBUG", "8"), ("DEV", "GPU"),
              ("DEV", "CPU:x"), ("CPU_TARGET", "pentium"), ("BEAM_MIN_PROGRESS", "nan"), ("PROGRAM_CACHE", "0"),
              ("CACHEDB_MB", "0"), ("JIT", "2")]

@pytest.mark.parametrize("knob,value", BAD_VALUES)
def test_a_bad_value_names_the_knob_and_what_it_takes(knob: str, value: str) -> None:
  var = ContextVar.registry[knob]
  takes = re.escape(var.takes)
  with pytest.raises(ValueError, match=rf"^Context\({knob}='{re.escape(value)}'\): {knob} takes {takes}$"):
    Context(**{knob: value})
  with pytest.raises(ValueError, match=rf"environment variable {knob}='{re.escape(value)}': {knob} takes"):
    var.accept(value, f"environment variable {knob}={value!r}")

def test_a_bad_environment_value_fails_the_import_with_the_knob_named() -> None:
  env = {**os.environ, "DIST_TIMEOUT": "abc", "PYTHONPATH": str(Path(__file__).parents[1])}
  res = subprocess.run([sys.executable, "-c", "import lazytensor"], env=env, capture_output=True, text=True)
  assert res.returncode != 0
  assert res.stderr.strip().splitlines()[-1] == \
    "ValueError: environment variable DIST_TIMEOUT='abc': DIST_TIMEOUT takes a number > 0.0", res.stderr

@pytest.mark.parametrize("text,value", [("1", True), ("ON", True), ("Yes", True), ("true", True), ("0", False),
                                        ("off", False), ("NO", False), ("False", False)])
def test_booleans_take_the_usual_spellings(text: str, value: bool) -> None:
  with Context(FASTMATH=text): assert FASTMATH.value is value

def test_context_values_are_held_as_the_knob_types() -> None:
  with Context(BEAM="2", BEAM_TIMEOUT_SEC=3, NOOPT=1, CACHEDB=Path("/tmp/x.db")):
    assert BEAM.value == 2 and BEAM_TIMEOUT_SEC.value == 3.0 and NOOPT.value is True and CACHEDB.value == "/tmp/x.db"
  with pytest.raises(TypeError, match=r"Context\(BEAM=2\.5\): BEAM takes an integer >= 0, not float"):
    Context(BEAM=2.5)

def test_every_numeric_knob_has_a_range() -> None:
  for var in ContextVar.registry.values():
    if isinstance(var.default, bool) or not isinstance(var.default, (int, float)): continue
    for value in (-10**9, float("nan")):
      with pytest.raises((ValueError, TypeError)): var.accept(value, "test")

# ---- caches ----

def test_cachelevel_0_writes_nothing(tmp_path: Path) -> None:
  with Context(CACHELEVEL=0, CACHEDB=str(tmp_path / "c.db")):
    t, want = fresh()
    np.testing.assert_allclose(t.numpy(), want)
  assert not (tmp_path / "c.db").exists()

@pytest.mark.parametrize("level", [1, 2])
def test_cachelevel_1_keeps_programs_and_2_searches_too(tmp_path: Path, level: int) -> None:
  db = tmp_path / "c.db"
  # a kernel too short to search still caches its BEAM result (the heuristics' opts)
  with Context(CACHELEVEL=level, CACHEDB=str(db), BEAM=1, PARALLEL=0):
    t, want = fresh(n=2)
    np.testing.assert_allclose(t.numpy(), want)
  rows = kinds(db)
  assert rows.get("program", 0) >= 1 and rows.get("compile", 0) >= 1
  assert (rows.get("beam", 0) >= 1) == (level == 2), rows

def test_cachedir_holds_the_cache_database(tmp_path: Path) -> None:
  with Context(CACHEDIR=str(tmp_path / "dir"), CACHEDB=""):
    t, want = fresh()
    np.testing.assert_allclose(t.numpy(), want)
  assert kinds(tmp_path / "dir" / "cache.db").get("program", 0) >= 1

# ---- NOOPT ----

def test_noopt_applies_no_optimizations(capsys: pytest.CaptureFixture[str]) -> None:
  assert re.search(r"r_\S+: \[Opt", run_with(capsys, reduce=True, DEBUG=3))  # the heuristics' opts otherwise
  out = run_with(capsys, reduce=True, DEBUG=3, NOOPT=1)
  assert re.search(r"r_64_4: \[\]  axes: 64 global, 4 reduce", out), out

# ---- BEAM: PARALLEL=0 and the progress bar ----

def _search_big_kernel(**knobs: object) -> None:
  # searched however fast the host runs it (a Zen 4 ran it under MIN_SEARCH_S, which times the heuristics' kernel only)
  a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
  c = 1.0 + next(_consts) / 1024
  with Context(BEAM=1, IGNORE_BEAM_CACHE=1, **knobs), pytest.MonkeyPatch.context() as mp:
    mp.setattr(search, "MIN_SEARCH_S", 0.0)
    np.testing.assert_allclose((Tensor(a) * c + 1).exp2().numpy(), np.exp2(a * np.float32(c) + 1), rtol=1e-5)

def test_parallel_0_searches_in_this_process_with_a_progress_bar(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
  for key in search.beam_stats: search.beam_stats[key] = 0
  search_workers.close_pool()
  monkeypatch.setattr(search_workers, "_Worker", None)  # starting a worker process would raise
  term = Terminal()
  with contextlib.redirect_stderr(term): _search_big_kernel(PARALLEL=0, CACHEDB=str(tmp_path / "c.db"))
  assert search.beam_stats["searches"] == 1 and search.beam_stats["timed"] >= 2
  out = term.getvalue()
  states = re.findall(r"E_\S*: .*?(\d+)/(\d+) \[.*?round (\d+), (\d+) compiled, (\d+) timed, best ([\d.]+ us|inf)", out)
  assert len(states) >= 3, out
  done, total, rounds, compiled, timed = (np.array([int(s[i]) for s in states]) for i in range(5))
  # one bar for the whole search: its counts only grow, up to every candidate the search compiled and timed
  for counts in (done, total, rounds, compiled, timed): assert (np.diff(counts) >= 0).all(), counts
  assert done[-1] == total[-1] and rounds[-1] >= 1 and 2 <= compiled[-1] <= search.beam_stats["compiled"]
  assert timed[-1] <= search.beam_stats["timed"]
  assert re.search(r"best \d+\.\d us", out)

def test_no_progress_bar_when_stderr_is_not_a_terminal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
  _search_big_kernel(PARALLEL=0, CACHEDB=str(tmp_path / "c.db"))
  assert capsys.readouterr().err == ""

def test_a_run_without_torch_says_what_it_skips(tmp_path: Path) -> None:
  # a `torch` that fails to import, ahead of the real one: the run counts the tests marked to skip, and at the end
  # every test skipped for want of torch
  (tmp_path / "torch").mkdir()
  (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('torch is hidden from this run')\n")
  root = Path(__file__).resolve().parent.parent
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(root)])}
  tests = str(root / "test" / "test_api_parity.py")
  res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", tests, "-k",
                        "squeeze_matches_torch or stack_and_cat or pow_second"], capture_output=True, text=True,
                       env=env, cwd=root)
  assert "torch is not installed: 9 of the 11 tests collected are marked to skip" in res.stdout, res.stdout
  assert "9 tests skipped for want of torch (`pip install torch==2.13.0` runs them)" in res.stdout, res.stdout
