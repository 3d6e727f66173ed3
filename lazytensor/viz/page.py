"""The page: one HTML template (page.html, its own CSS and JS, no external file) with the model embedded as JSON,
written to a file (VIZ=file.html) or served over HTTP on 127.0.0.1 (VIZ=1).

The template's script draws everything from the embedded JSON when the page loads, so the served page and the written
one are the same page, and a browser needs no network.
"""
from __future__ import annotations

import functools
import http.server
import json
import pathlib
import sys
import threading
from collections.abc import Callable
from typing import Any

MODEL_MARK = "/*MODEL*/null"  # where the template takes the model

@functools.cache
def template() -> str:
  return (pathlib.Path(__file__).parent / "page.html").read_text()

def model_json(model: dict[str, Any]) -> str:
  # "</" would end the <script> that holds it: JSON reads "<\/" as the same two characters
  return json.dumps(model, separators=(",", ":")).replace("</", "<\\/")

def render(model: dict[str, Any]) -> str:
  return template().replace(MODEL_MARK, model_json(model))

def write(path: str, model: dict[str, Any]) -> None:
  """Write the page to `path`; a path that cannot be written is said once on stderr, never raised: VIZ must not stop
  the run it watches."""
  try: pathlib.Path(path).write_text(render(model))
  except OSError as e:
    if path not in _failed_paths:
      _failed_paths.add(path)
      print(f"VIZ: cannot write the page to {path} ({e.strerror}); set VIZ to a writable path ending in .html",
            file=sys.stderr)

_failed_paths: set[str] = set()

def _handler(get_model: Callable[[], dict[str, Any]]) -> type[http.server.BaseHTTPRequestHandler]:
  class Handler(http.server.BaseHTTPRequestHandler):
    """GET / is the page of the run so far; GET /model.json its model."""
    def do_GET(self) -> None:
      path = self.path.split("?")[0]
      if path in ("/", "/index.html"): self._send(render(get_model()), "text/html")
      elif path == "/model.json": self._send(json.dumps(get_model()), "application/json")
      else: self.send_error(404, f"VIZ serves / and /model.json, not {path}")

    def _send(self, body: str, kind: str) -> None:
      data = body.encode()
      self.send_response(200)
      self.send_header("Content-Type", f"{kind}; charset=utf-8")
      self.send_header("Content-Length", str(len(data)))
      self.send_header("Cache-Control", "no-store")
      self.end_headers()
      self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None: pass  # the run's own output stays readable
  return Handler

def serve(port: int, get_model: Callable[[], dict[str, Any]]) -> http.server.ThreadingHTTPServer | None:
  """Serve the page on 127.0.0.1:port (0: a free port) from a daemon thread, which never keeps the process alive.
  A port that is taken is said on stderr, and the run goes on without a server."""
  try: server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _handler(get_model))
  except OSError as e:
    print(f"VIZ: cannot serve on 127.0.0.1:{port} ({e.strerror}); set VIZ_PORT to a free port (0 picks one) or "
          "VIZ to a path ending in .html", file=sys.stderr)
    return None
  server.daemon_threads = True
  threading.Thread(target=server.serve_forever, name="lazytensor-viz", daemon=True).start()
  print(f"VIZ: http://127.0.0.1:{server.server_address[1]}/ shows what this run compiled")
  return server
