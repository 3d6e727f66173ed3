"""The one compile path (kernel + opts -> ProgramSpec) and the one cache key that every cache of programs and searched
opts uses: each knob that changes the code must change the key."""
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor, dtypes
from lazytensor.codegen.program import (
  ProgramSpec,
  get_program,
  given_opts,
  opts_choice,
  program_key,
)
from lazytensor.engine import realize
from lazytensor.helpers import ContextVar
from lazytensor.opt.kernel import Kernel, Opt, OptOps
from lazytensor.opt.rules import apply_opt
from lazytensor.opt.search_cache import beam_cache_key
from lazytensor.renderer import LaunchDims
from lazytensor.renderer.cpu_target import cpu_target
from lazytensor.renderer.emu import EmuRenderer
from lazytensor.renderer.llvm import LLVMRenderer
from lazytensor.schedule.cache import schedule_stats
from lazytensor.schedule.scheduler import create_schedule


def exp_ast() -> Any:
  x = Tensor([0.5, 1.5]).realize()
  return create_schedule([x.exp().lazydata])[0][-1].ast

def key_now(how: tuple = ("heuristics",)) -> str:
  dev = Device["CPU"]
  return program_key(dev.renderer, dev.compiler.cache_key, exp_ast().key, how)

# two values each string knob with code=True takes (numbers and booleans are changed by 1)
STRING_VALUES = {"CPU_TARGET": ("x86-64-v2", "x86-64-v3")}

def another_value(var: ContextVar) -> Any:
  if isinstance(var.value, bool): return not var.value
  if isinstance(var.value, str): return next(v for v in STRING_VALUES[var.key] if v != var.value)
  return var.value + 1

def test_every_code_knob_is_in_the_key() -> None:
  code_knobs = [v for v in ContextVar.registry.values() if v.code]
  assert {"FASTMATH", "CPU_TARGET"} <= {v.key for v in code_knobs}
  base = key_now()
  for var in code_knobs:
    other = another_value(var)
    with Context(**{var.key: other}): assert key_now() != base, var.key
  assert key_now() == base

def test_every_code_knob_keys_the_schedule_cache() -> None:
  # a schedule's packing copies follow the code the device gets: its cache takes the knobs of program_key (knob_key)
  x = Tensor(np.ones((4, 4), np.float32)).realize()
  for var in [v for v in ContextVar.registry.values() if v.code]:
    (x + 1).realize()
    scheduled = schedule_stats["scheduled"]
    with Context(**{var.key: another_value(var)}): np.testing.assert_allclose((x + 1).numpy(), np.full((4, 4), 2.0))
    assert schedule_stats["scheduled"] == scheduled + 1, var.key

@pytest.mark.parametrize("knobs", [{"THREADS": 1}, {"THREADS": 3}, {"NOOPT": 1}, {"BEAM": 2}])
def test_opt_choosing_knobs_are_in_the_key(knobs: dict[str, Any]) -> None:
  base = key_now(opts_choice())
  with Context(**knobs): assert key_now(opts_choice()) != base

def test_the_key_names_the_renderer_compiler_opts_and_kernel() -> None:
  ast, dev = exp_ast(), Device["CPU"]
  base = program_key(dev.renderer, dev.compiler.cache_key, ast.key, given_opts([]))
  others = [program_key(LLVMRenderer(cpu_target("aarch64")), dev.compiler.cache_key, ast.key, given_opts([])),
            program_key(EmuRenderer(), dev.compiler.cache_key, ast.key, given_opts([])),
            program_key(EmuRenderer(tf32=True), dev.compiler.cache_key, ast.key, given_opts([])),
            program_key(dev.renderer, dev.compiler.cache_key + " v2", ast.key, given_opts([])),
            program_key(dev.renderer, dev.compiler.cache_key, ast.key, given_opts([Opt(OptOps.UPCAST, 0, 2)])),
            program_key(dev.renderer, dev.compiler.cache_key, b"another kernel", given_opts([]))]
  assert len({base, *others}) == 1 + len(others)

def test_beam_cache_key_follows_fastmath() -> None:
  dev, ast = Device["CPU"], exp_ast()
  key = beam_cache_key(dev, 2, ast.key)
  with Context(FASTMATH=0): assert beam_cache_key(dev, 2, ast.key) != key
  assert beam_cache_key(dev, 3, ast.key) != key

def test_fastmath_after_a_run_gives_a_new_program(tmp_path) -> None:
  x = Tensor([0.5, 1.5]).realize()
  with Context(CACHEDB=str(tmp_path / "cache.db")):
    fast = realize.get_runner("CPU", exp_ast())
    with Context(FASTMATH=0):
      libm = realize.get_runner("CPU", exp_ast())
      np.testing.assert_allclose(x.exp().numpy(), np.exp([0.5, 1.5]), rtol=1e-6)
    assert libm is not fast and libm.spec.source != fast.spec.source
    assert "llvm.exp2" in libm.spec.source and "llvm.exp2" not in fast.spec.source
    assert realize.get_runner("CPU", exp_ast()) is fast

def test_cpu_target_after_a_run_gives_a_new_program(tmp_path) -> None:
  # a program compiled for one CPU target is never run for another, neither from this process's runners nor from disk
  a, b = Tensor(np.ones((64, 48), np.float32)).realize(), Tensor(np.ones((48, 32), np.float32)).realize()
  ast = create_schedule([(a @ b).lazydata])[0][-1].ast
  with Context(CACHEDB=str(tmp_path / "cache.db")):
    runners = {}
    for name in ("x86-64-v2", "x86-64-v3"):
      with Context(CPU_TARGET=name):
        runners[name] = realize.get_runner("CPU", ast)
        assert f'"target-cpu"="{name}"' in runners[name].spec.source
        np.testing.assert_allclose((a @ b).numpy(), np.full((64, 32), 48.0))
    assert runners["x86-64-v2"] is not runners["x86-64-v3"]
    realize.forget_programs()
    disk = realize.compile_stats["disk"]
    with Context(CPU_TARGET="x86-64-v2"): from_disk = realize.get_runner("CPU", ast)
    assert realize.compile_stats["disk"] == disk + 1 and from_disk.spec == runners["x86-64-v2"].spec
    with Context(CPU_TARGET="x86-64-v3"): assert realize.get_runner("CPU", ast).spec == runners["x86-64-v3"].spec

@pytest.mark.parametrize("device", ["CPU", "EMU", "CUDACPU"])
def test_unread_buffer_keeps_its_argument(device: str) -> None:
  # x*0 folds the load of x away, yet the kernel is launched with x's buffer: its program must keep the argument
  x = Tensor(np.arange(64, dtype=np.int64), device=device).realize()
  item = create_schedule([(x * 0).lazydata])[0][-1]
  spec = get_program(Kernel(item.ast, Device[device].renderer), "f")
  assert spec.buffers == tuple(b.dtype for b in item.bufs) == (dtypes.int64, dtypes.int64)

def test_threaded_kernel_with_an_unread_buffer_runs() -> None:
  # without its argument the CPU's core id received x's address and the threads stored far out of bounds (a
  # segfault), so the kernel runs in a process of its own
  code = ("import numpy as np; from lazytensor import Context, Tensor\n"
          "with Context(THREADS=2): print(int((Tensor(np.arange(1 << 20)).realize() * 0 + 1).numpy().sum()))")
  run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert run.returncode == 0 and run.stdout.split() == [str(1 << 20)], run.stderr[-2000:]

def test_program_spec() -> None:
  a = Tensor(np.ones((16, 64), np.float32)).realize()
  ast = create_schedule([(a * 2).sum(1).lazydata])[0][-1].ast
  k = Kernel(ast, Device["EMU"].renderer)
  for o in (Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUPTOP, 2, 16)): apply_opt(k, o)
  spec = get_program(k, "prog")
  assert spec.name == "prog" and spec.buffers == (dtypes.float32, dtypes.float32)
  assert spec.launch == LaunchDims((4, 1, 1), (16, 4, 1), 1) and spec.shared_bytes == 4 * 4 * 16
  assert ProgramSpec.from_json(spec.to_json()) == spec
  with pytest.raises(ValueError, match="not a ProgramSpec"): ProgramSpec.from_json('{"name": "x"}')
  with Context(THREADS=2):
    k = Kernel(ast, Device["CPU"].renderer)
    apply_opt(k, Opt(OptOps.THREAD, 0, 2))
    assert get_program(k, "f").launch == LaunchDims(core_count=2)
