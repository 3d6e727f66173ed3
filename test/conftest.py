"""Set-up of the whole run: when torch, the reference of many tests, is not installed, a line at the start says how
many tests it skips and how to install it, and a line at the end gives the exact count."""
from __future__ import annotations

import re

import pytest
from helpers import HAVE_TORCH

# tests that skip without torch, measured with torch hidden from the run (`python -m pytest -q -rs test`); the rest
# fall back to numpy references and float64 finite differences. The end of the run gives the exact number.
SKIPPED_WITHOUT_TORCH = 600
INSTALL_TORCH = "pip install torch==2.13.0"
# the skip reasons of tests that run only with torch (others name torch too: "torch has no int kernel for it")
NEEDS_TORCH = re.compile(r"torch is not installed|could not import 'torch'|compares with torch|reference is torch|"
                         r"torch is the reference")

def _is_controller(config: pytest.Config) -> bool:
  return not hasattr(config, "workerinput")  # pytest-xdist workers report through the controller

def pytest_sessionstart(session: pytest.Session) -> None:
  reporter = session.config.pluginmanager.get_plugin("terminalreporter")
  if HAVE_TORCH or reporter is None or not _is_controller(session.config): return
  reporter.write_line(f"torch is not installed: about {SKIPPED_WITHOUT_TORCH} reference tests that need it are "
                      f"skipped; `{INSTALL_TORCH}` runs them", yellow=True)

def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
  if HAVE_TORCH or not _is_controller(terminalreporter.config): return
  skipped = [r for r in terminalreporter.stats.get("skipped", []) if NEEDS_TORCH.search(str(r.longrepr))]
  terminalreporter.write_line(f"{len(skipped)} tests skipped for want of torch (`{INSTALL_TORCH}` runs them)",
                              yellow=True)
