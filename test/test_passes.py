"""Codegen as named passes: each reports (name, before, after) to uop.ops.rewrite_listeners, DEBUG=5 prints the graph
after every pass and DEBUGPASS after the ones it names."""
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor
from lazytensor.codegen.program import PIPELINE, get_program
from lazytensor.helpers import PASSES
from lazytensor.opt.kernel import Kernel
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import Ops, UOp, rewrite_listeners


def sum_kernel(device: str = "CPU") -> Kernel:
  a = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8)).realize()
  return Kernel(create_schedule([(a + 1).sum(1).lazydata])[0][-1].ast, Device[device].renderer)

@pytest.fixture
def seen() -> Iterator[list[tuple[str, UOp, UOp]]]:
  """Every pass reported while the test runs."""
  log: list[tuple[str, UOp, UOp]] = []
  def listen(name: str, before: UOp, after: UOp) -> None: log.append((name, before, after))
  rewrite_listeners.append(listen)
  yield log
  rewrite_listeners.remove(listen)

def test_every_codegen_pass_reports_in_order(seen: list[Any]) -> None:
  k = sum_kernel()
  seen.clear()  # the schedule's own pass
  get_program(k, "k")
  # the rewrites inside a pass (the lowerer's simplify of each index) are steps of it, not passes of their own
  assert [name for name, _, _ in seen] == [p.name for p in PIPELINE]
  assert seen[0][1] is k.ast and all(seen[i][2] is seen[i + 1][1] for i in range(len(seen) - 1))
  assert any(u.op is Ops.REDUCE for u in seen[0][2].toposort) and not any(u.op is Ops.REDUCE_AXIS
                                                                            for u in seen[0][2].toposort)
  linear = dict((name, after) for name, _, after in seen)["linearize"]
  program = list(linear.src)  # the program in order: each loop opened, then closed
  ends = [u for u in program if u.op is Ops.ENDRANGE]
  assert len(ends) == 2 and all(program.index(e.src[0]) < program.index(e) for e in ends)

def test_a_rewrite_outside_any_pass_reports_itself(seen: list[Any]) -> None:
  t = Tensor.ones(4).sum()
  create_schedule([t.lazydata])
  assert "resolve" in [name for name, _, _ in seen]

def test_debugpass_prints_the_graph_after_the_passes_it_names(capsys: pytest.CaptureFixture[str]) -> None:
  k = sum_kernel()
  with Context(DEBUGPASS="symbolic,linearize"): get_program(k, "k")
  out = capsys.readouterr().out
  assert "after pass symbolic:" in out and "after pass linearize:" in out and "after pass lower:" not in out
  listing = out.split("after pass linearize:")[1]
  # one line a node, sources by number: the loop, the load, the accumulator, the store
  for line in (r"= RANGE dtypes.int32 arg=\(\d+, 'reduce'\) \(%\d+, %\d+\)", r"= DEFINE_ACC", r"= STORE dtypes.void"):
    assert re.search(line, listing), line

def test_debug_5_prints_the_graph_after_every_pass(capsys: pytest.CaptureFixture[str]) -> None:
  k = sum_kernel()
  with Context(DEBUG=5): get_program(k, "k")
  out = capsys.readouterr().out
  assert [line.split()[2][:-1] for line in out.splitlines() if line.startswith("after pass")] == \
    [p.name for p in PIPELINE]

def test_debugpass_takes_known_pass_names_only() -> None:
  with pytest.raises(ValueError, match="DEBUGPASS takes .*lower, renderer_rules, symbolic"): Context(DEBUGPASS="lowr")
  with pytest.raises(ValueError, match="DEBUGPASS"): Context(DEBUGPASS="lower,")
  assert set(p.name for p in PIPELINE) <= set(PASSES)
