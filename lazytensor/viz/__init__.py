"""VIZ: a page that shows what a run compiled to.

`VIZ=1` serves it on http://127.0.0.1:VIZ_PORT/ (8000; 0 picks a free port), `VIZ=file.html` writes it to that file
after every realize that recorded something new (and at exit). It shows, for the run so far: each graph scheduled
(the graph as the fusion rules see it, its nodes colored by the kernel that computes them, each materialized node with
the scheduler's reason), the kernels and buffers of each schedule, and each kernel: its shape with the axes in DEBUG's
colors, its opts, BEAM's candidates with their times, the named rewrite passes before and after, and the source.

The knob is read at each realize (`Tensor.realize` calls `switch` when it changed), so `with Context(VIZ="1"):`
records the realizes inside the block. Kernels compiled and graphs scheduled before it, which the caches hold, are
not seen again.
"""
from __future__ import annotations

import atexit
import http.server

from lazytensor.engine import realize
from lazytensor.helpers import VIZ, VIZ_PORT
from lazytensor.schedule.cache import ScheduleItem
from lazytensor.viz import page
from lazytensor.viz.record import Recorder

__all__ = ["Recorder", "recorder", "switch", "recording_for", "server"]

recorder = Recorder()
recording_for = "0"  # the value of VIZ that the recorder listens for ("0": it does not)
server: http.server.ThreadingHTTPServer | None = None  # started by the first switch to VIZ=1 of the process
_written: dict[str, int] = {}  # path of a page -> the recorder's version written there
_at_exit: set[str] = set()     # the pages written again at exit

def _write_if_new(path: str) -> None:
  if _written.get(path) != recorder.version:
    page.write(path, recorder.model())
    _written[path] = recorder.version

def _after_run(items: list[ScheduleItem]) -> None:
  if recording_for.endswith(".html"): _write_if_new(recording_for)

def switch() -> None:
  """Listen, serve or write as VIZ now says; a page that was being written gets what was recorded for it first."""
  global recording_for, server
  if recording_for.endswith(".html"): _write_if_new(recording_for)
  want = VIZ.value
  if want == "0":
    recorder.detach()
    if _after_run in realize.run_listeners: realize.run_listeners.remove(_after_run)
  else:
    recorder.attach()
    if _after_run not in realize.run_listeners: realize.run_listeners.append(_after_run)
    if want == "1" and server is None: server = page.serve(int(VIZ_PORT.value), recorder.model)
    # at exit too: what was recorded after the last realize (Tensor.schedule without a run)
    if want.endswith(".html") and want not in _at_exit:
      _at_exit.add(want)
      atexit.register(_write_if_new, want)
  recording_for = want
