"""Set-up of the whole run: when torch, the reference of many tests, is not installed, a line before the tests run
says so and how to install it (with how many tests are marked to skip, where this process collects them: not under
pytest-xdist), and a line at the end gives the exact count, with the tests that find out only as they run that they
have no reference without torch."""
from __future__ import annotations

import re

import pytest
from helpers import HAVE_TORCH

# without torch most tests fall back to numpy references and float64 finite differences; the others skip
INSTALL_TORCH = "pip install torch==2.13.0"
# the skip reasons of tests that run only with torch (others name torch too: "torch has no int kernel for it")
NEEDS_TORCH = re.compile(r"torch is not installed|could not import 'torch'|compares (with|against) torch|"
                         r"reference is torch|torch is the reference")

def _is_controller(config: pytest.Config) -> bool:
  return not hasattr(config, "workerinput")  # pytest-xdist workers report through the controller

def _marked_for_torch(item: pytest.Item) -> bool:
  return any(m.args and m.args[0] is True and NEEDS_TORCH.search(str(m.kwargs.get("reason", "")))
             for m in item.iter_markers("skipif"))

def _distributed(config: pytest.Config) -> bool:
  return bool(getattr(config.option, "numprocesses", None))  # pytest-xdist: the workers collect, not the controller

def pytest_sessionstart(session: pytest.Session) -> None:
  reporter = session.config.pluginmanager.get_plugin("terminalreporter")
  if HAVE_TORCH or reporter is None or not _is_controller(session.config) or not _distributed(session.config): return
  reporter.write_line(f"torch is not installed: the tests that need it as their reference skip (the end of the run "
                      f"counts them); `{INSTALL_TORCH}` runs them", yellow=True)

def pytest_collection_finish(session: pytest.Session) -> None:
  reporter = session.config.pluginmanager.get_plugin("terminalreporter")
  if HAVE_TORCH or reporter is None or not _is_controller(session.config) or _distributed(session.config): return
  marked = sum(_marked_for_torch(item) for item in session.items)
  reporter.write_line(f"torch is not installed: {marked} of the {len(session.items)} tests collected are marked to "
                      f"skip without it, and more skip as they run (the end of the run counts them); "
                      f"`{INSTALL_TORCH}` runs them", yellow=True)

def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
  if HAVE_TORCH or not _is_controller(terminalreporter.config): return
  skipped = [r for r in terminalreporter.stats.get("skipped", []) if NEEDS_TORCH.search(str(r.longrepr))]
  terminalreporter.write_line(f"{len(skipped)} tests skipped for want of torch (`{INSTALL_TORCH}` runs them)",
                              yellow=True)
