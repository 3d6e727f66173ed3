"""The code in README.md and docs/*.md works as written. Every ```python block runs (the blocks of one file in order,
sharing one namespace, as a reader would paste them). ```bash blocks are commands to type: each script they name
exists and compiles, and each `pip install -e ".[extra]"` names an extra that setup.py declares; the scripts are
not run here (the examples and benchmarks take seconds to minutes; quickstart.py, the first one a reader runs, is)."""
import ast
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

def blocks(path: Path, lang: str) -> list[tuple[int, str]]:
  """(first line number, code) of each ```lang block of a Markdown file."""
  text = path.read_text()
  return [(text[:m.start()].count("\n") + 2, m.group(1))
          for m in re.finditer(rf"^```{lang}\n(.*?)^```$", text, flags=re.M | re.S)]

def run_python_blocks(path: Path, tmp_path: Path) -> None:
  namespace: dict = {"__name__": "__doc_example__"}
  for line, code in blocks(path, "python"):
    code = code.replace("/tmp/", f"{tmp_path}/")  # files an example writes land in the test's folder
    try: exec(compile(code, f"{path.name}:{line}", "exec"), namespace)
    except Exception as e: raise AssertionError(f"{path.name}, the block at line {line}: {e!r}") from e

def setup_extras() -> set[str]:
  tree = ast.parse((ROOT / "setup.py").read_text())
  kw = next(k for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords if k.arg == "extras_require")
  return set(ast.literal_eval(kw.value))

def test_the_docs_are_found() -> None:
  names = {p.name for p in DOCS}
  assert {"README.md", "training.md", "multi-device.md", "kernels.md", "benchmarks.md"} <= names, names
  assert sum(len(blocks(p, "python")) for p in DOCS) >= 5
  assert setup_extras() >= {"test", "cuda", "mpi"}

@pytest.mark.parametrize("path", [p for p in DOCS if blocks(p, "python")], ids=lambda p: p.name)
def test_python_blocks_run(path: Path, tmp_path: Path) -> None:
  from lazytensor import Device
  if Device.DEFAULT != "CPU": pytest.skip(f"the docs' examples name CPU devices; this run's default: {Device.DEFAULT}")
  run_python_blocks(path, tmp_path)

@pytest.mark.parametrize("path", [p for p in DOCS if blocks(p, "bash")], ids=lambda p: p.name)
def test_bash_blocks_name_what_exists(path: Path) -> None:
  extras = setup_extras()
  for first, code in blocks(path, "bash"):
    for i, text in enumerate(code.splitlines()):
      words, where = shlex.split(text, comments=True), f"{path.name}:{first + i}: {text.strip()}"
      for w in words:
        if w.endswith(".py") and "/" in w:
          assert (ROOT / w).is_file(), f"{where}: no file {w}"
          compile((ROOT / w).read_text(), w, "exec")
        if w.startswith(".[") and w.endswith("]"):
          assert set(w[2:-1].split(",")) <= extras, f"{where}: setup.py's extras are {sorted(extras)}"

def test_a_failing_block_names_its_file_and_line(tmp_path: Path) -> None:
  doc = tmp_path / "bad.md"
  doc.write_text("text\n\n```python\nx = 1\n```\n\n```python\nassert x == 1\nraise ValueError('boom')\n```\n")
  assert [line for line, _ in blocks(doc, "python")] == [4, 8]
  with pytest.raises(AssertionError, match=r"bad.md, the block at line 8: ValueError\('boom'\)"):
    run_python_blocks(doc, tmp_path)

def test_quickstart_runs(tmp_path: Path) -> None:
  import subprocess
  import sys
  env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CACHEDIR": str(tmp_path), "HOME": str(tmp_path)}
  out = subprocess.run([sys.executable, str(ROOT / "extra" / "examples" / "quickstart.py")], capture_output=True,
                       text=True, env=env, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.strip(), "quickstart.py printed nothing"
