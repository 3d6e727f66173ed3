"""VIZ: the recorder's model of a small program, the page served over HTTP on a loopback port, the page written by
VIZ=file.html, and that page drawn by headless Chromium (a node per kernel)."""
from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lazytensor import Context, Tensor, viz
from lazytensor.engine import realize
from lazytensor.opt import search
from lazytensor.schedule import scheduler
from lazytensor.uop import ops
from lazytensor.viz import page
from lazytensor.viz.layout import NODE_GAP, layered


@pytest.fixture(autouse=True)
def fresh_recorder() -> Iterator[None]:
  """Each test sees only what it runs: the recorder forgets, graphs are scheduled anew and kernels compiled anew (the
  caches would otherwise answer for kernels that earlier tests compiled), and VIZ is off again after it."""
  viz.recorder.clear()
  realize.forget_programs()
  with Context(SCHEDULE_CACHE=0): yield
  viz.switch()

def softmax_model(where: str, **knobs: Any) -> dict[str, Any]:
  x = Tensor(np.random.default_rng(0).standard_normal((6, 10)).astype(np.float32)).realize()
  with Context(VIZ=where, **knobs):
    y = x.softmax(1).realize()
  np.testing.assert_allclose(y.numpy().sum(1), 1.0, rtol=1e-5)
  return viz.recorder.model()

def kernel_nodes(model: dict[str, Any]) -> list[dict[str, Any]]:
  return [n for s in model["schedules"] for n in s["kernels"]["nodes"] if n["kind"] == "kernel"]

def page_model(html: str) -> dict[str, Any]:
  """The model a page embeds (what its script draws)."""
  found = re.search(r"const MODEL = (.*?);</script>", html, re.S)
  assert found is not None, "the page embeds no model"
  return json.loads(found.group(1))

def test_model_of_softmax(tmp_path: Path) -> None:
  model = softmax_model(str(tmp_path / "page.html"))
  assert len(model["schedules"]) == 1
  sched = model["schedules"][0]
  kernels = kernel_nodes(model)
  assert len(kernels) == sched["kernels"]["count"] == 3  # max, sum of exp, the division
  # why each kernel's value has a buffer: the two reduces are read through an expand, the last is the output
  assert [k["reason"] for k in kernels] == ["a reduce read through a view that is not a reshape"] * 2 + ["an output"]
  # buffers: the input and one value per kernel, each drawn once
  buffers = [n for n in sched["kernels"]["nodes"] if n["kind"] == "buffer"]
  assert sorted(b["label"] for b in buffers) == ["float32[60]", "float32[60]", "float32[6]", "float32[6]"]
  # every kernel of the schedule was compiled: shape and axis kinds in DEBUG's colors, opts, source, one run each
  compiled = [model["kernels"][model["kernel_of"][k["ast"]]] for k in kernels]
  assert [k["name"].split("_")[0] for k in compiled] == ["r", "r", "E"]
  for k in compiled:
    assert {a["kind"] for a in k["axes"]} <= {e["kind"] for e in model["legend"]}
    assert all(re.fullmatch(r"#[0-9a-f]{6}", a["color"]) for a in k["axes"])
    assert k["function"] in k["source"] and isinstance(k["opts"], list)
    assert model["runs"][k["ast"]] == 1
  assert any(a["kind"] == "reduce" for a in compiled[0]["axes"])
  # the tensor graph: every kernel computes some node of it, and the materialized nodes carry their reasons
  graph = sched["graph"]
  assert {i for n in graph["nodes"] for i in n["kernels"]} == {0, 1, 2}
  assert sorted(n["reason"] for n in graph["nodes"] if n["reason"]) == sorted(k["reason"] for k in kernels)
  assert all(graph["nodes"][a]["y"] < graph["nodes"][b]["y"] for a, b in graph["edges"])
  # named rewrite passes: the scheduler's, and each kernel's lowering with its graph before and after
  assert "resolve" in [p["name"] for p in sched["passes"]]
  changed = [p for k in compiled for p in k["passes"] if p["changed"]]
  assert changed and all(p["before"] != p["after"] for p in changed)

def test_beam_candidates_with_times(tmp_path: Path) -> None:
  model = softmax_model(str(tmp_path / "page.html"), BEAM=1, PARALLEL=0, IGNORE_BEAM_CACHE=1)
  timed = [c for k in model["kernels"] for c in k["candidates"]]
  assert timed, "BEAM timed no candidate"
  assert all(isinstance(c["opts"], list) and (c["time_us"] is None or c["time_us"] > 0) for c in timed)
  assert any(c["time_us"] is not None for c in timed)

def test_static_page_has_the_model(tmp_path: Path) -> None:
  path = tmp_path / "page.html"
  model = softmax_model(str(path))
  html = path.read_text()  # written after the realize, without waiting for the exit
  assert "<script src" not in html and "http" not in html.split("const MODEL")[0]  # nothing to fetch: works offline
  written = page_model(html)
  assert len(kernel_nodes(written)) == 3 and [k["name"] for k in written["kernels"]] == \
    [k["name"] for k in model["kernels"]]

def test_listeners_only_while_viz_is_on(tmp_path: Path) -> None:
  lists = (scheduler.schedule_listeners, ops.rewrite_listeners, search.candidate_listeners,
           realize.kernel_listeners, realize.run_listeners)
  softmax_model(str(tmp_path / "page.html"))
  assert all(lists) and len(ops.rewrite_listeners) > 1
  Tensor([1.0, 2.0]).add(1).realize()  # VIZ is 0 again: this realize stops the recording
  assert not any(lists[2:]) and not scheduler.schedule_listeners
  assert ops.rewrite_listeners == [ops.show_pass]  # the DEBUG view of passes, always there

def test_knob_values() -> None:
  with pytest.raises(ValueError, match="VIZ takes a string that is 0, 1 or a path ending in .html"):
    Context(VIZ="page.txt")
  with pytest.raises(ValueError, match="VIZ_PORT"):
    Context(VIZ_PORT=70000)

def _get(url: str) -> tuple[str, str]:
  with urllib.request.urlopen(url, timeout=30) as r: return r.headers["Content-Type"], r.read().decode()

def test_server_on_a_loopback_port() -> None:
  model = softmax_model("1", VIZ_PORT=0)
  assert viz.server is not None
  host, port = viz.server.server_address[:2]
  assert host == "127.0.0.1"
  kind, html = _get(f"http://127.0.0.1:{port}/")
  assert kind.startswith("text/html") and "lazytensor VIZ" in html
  served = page_model(html)
  assert len(kernel_nodes(served)) == 3 and all(k["name"] in html for k in model["kernels"])
  kind, body = _get(f"http://127.0.0.1:{port}/model.json")
  assert kind.startswith("application/json") and json.loads(body)["kernel_of"] == model["kernel_of"]
  with pytest.raises(urllib.error.HTTPError, match="404"): _get(f"http://127.0.0.1:{port}/nothing")

def test_taken_port_is_said_not_raised(capsys: pytest.CaptureFixture[str]) -> None:
  with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    assert page.serve(port, viz.recorder.model) is None
  assert f"VIZ: cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err

def test_layered_layout() -> None:
  # a diamond over a chain: 0 -> 1, 0 -> 2, 1 -> 3, 2 -> 3, 3 -> 4, and 0 -> 4 skipping layers
  edges = [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (0, 4)]
  where, bends = layered(5, edges)
  assert all(where[a][1] < where[b][1] for a, b in edges)
  assert where[1][1] == where[2][1] and where[1][0] != where[2][0]  # one layer, side by side
  assert len({where[v][1] for v in range(5)}) == 4  # ranks by longest path: 4 goes below 3
  # 0 -> 4 crosses the layers of 1, 2 and 3 beside their boxes, one point in each, never under a box
  route = bends[edges.index((0, 4))]
  assert [y for _, y in route] == [where[1][1], where[3][1]] and all(bends[i] == [] for i in range(5))
  assert all(abs(x - where[v][0]) >= 0.5 * NODE_GAP for x, y in route for v in range(5) if where[v][1] == y)

def _chromium() -> str | None:
  return next((p for name in ("chromium", "chromium-browser") if (p := shutil.which(name))), None)

@pytest.mark.skipif(_chromium() is None, reason="no chromium or chromium-browser on the PATH (.ci/run installs the "
                                                "Debian package chromium when it runs as root)")
def test_page_draws_a_node_per_kernel_in_chromium(tmp_path: Path) -> None:
  path = tmp_path / "page.html"
  model = softmax_model(str(path))
  browser = _chromium()
  assert browser is not None
  # --no-sandbox: the sandbox cannot start as root (CI); the page is our own file
  dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
                       capture_output=True, text=True, timeout=120).stdout
  drawn = re.findall(r'data-kernel="([0-9.]+)"', dom)
  assert sorted(drawn) == [f"0.{j}" for j in range(len(kernel_nodes(model)))] == ["0.0", "0.1", "0.2"]
  assert all(f'href="#kernel-{i}"' in dom for i in range(len(model["kernels"])))
