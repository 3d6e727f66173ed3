"""The chain fuzzer (extra/fuzz_compose.py) on fixed seeds in every mode: random chains of views, indexing, gathers,
writes into views, elementwise ops, casts, reductions, scans, sorts, matmul and conv against torch, and their
gradients every third seed; on the CPU, with BEAM=1 searching every kernel, on EMU, on CUDACPU and sharded over
CPU:0..3. More seeds, by hand: `python extra/fuzz_compose.py --cases 2000 --devices cpu,emu,cudacpu,shard,beam`.

A failure prints the chain as a program that runs on its own (test_program_reproduces_the_chain checks that it does).
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")

def _load() -> ModuleType:
  spec = importlib.util.spec_from_file_location("fuzz_compose", ROOT / "extra" / "fuzz_compose.py")
  assert spec is not None and spec.loader is not None
  module = sys.modules["fuzz_compose"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
  spec.loader.exec_module(module)
  return module

fuzz: Any = _load() if HAVE_TORCH else None

# seeds per mode, for about 30 s of two cores in all (a case takes ~0.1 s on the CPU, ~0.3 s sharded, ~1 s on
# CUDACPU, which compiles each kernel with g++, and ~5 s with BEAM=1, which searches each)
BUDGET = {"cpu": 75, "shard": 30, "emu": 40, "cudacpu": 12, "beam": 4}

# failures known, and being fixed elsewhere: (mode, what the failure says, why); such a case is an expected failure
KNOWN = [("emu", r"stores to data\d+\[0\], out of bounds: data\d+ has 0 elements", "EMU's zero-size kernels")]

@pytest.mark.parametrize("mode,seed", [(m, s) for m, n in BUDGET.items() for s in range(n)])
def test_chain(mode: str, seed: int) -> None:
  if mode == "cudacpu" and shutil.which("g++") is None: pytest.skip("CUDACPU needs g++")
  try: fuzz.run_case(seed, fuzz.MODES[mode])
  except fuzz.Mismatch as e:
    for known_mode, says, why in KNOWN:
      if known_mode == mode and re.search(says, str(e)): pytest.xfail(why)
    raise

# seeds that failed at scale, each a bug fixed or a comparison the fuzzer got wrong: shard 1040, 1067, 1124 (a write
# with gradients through a view of a sharded realized tensor), 1063, 1106, 1116 (writes through views that merge the
# sharded axis), 60332 (a write through a detached view of a sharded clone), 60663 (torch's float32 cosh(89)
# overflowed); cpu 20606 (a continuous value called exact), 22365 and 23946 (inf written into an int tensor);
# cudacpu 40014, 40057 (`a - -2.5f` rendered as a decrement); emu 31355 (a circular padding that wraps more than once);
# shard and cpu 61940 (maximum's gradient was inf * 0), cpu 21464 (clip with one tensor as both bounds), 21254 (a
# write with gradients placed a realized value, a constant), 23363 (an assign's commit dropped a view realized with it),
# 102218 and 102602 (an index check's record read a reduce's range outside the reduce loop: LLVM refused the module),
# emu 130748 (softplus's gradient of inf was NaN: inf - inf through its two terms), shard 111503, 111680 and 111962
# (a write through a detached view of a replicated tensor dropped the graph it wrote into); cpu 200527 (the fuzzer took
# equal infinities for distinct values and compared which of them topk returned), shard 261165 (torch's float32 fmod of
# 3e38 by 0.5 is NaN, its float64 shadow and lazytensor 0), cpu 300241 (a float16 std took the root of its variance
# rounded to float16: inf where the variance passed 65504, torch's root of the float32 variance 7.94e3)
FIXED = [("shard", s) for s in (1040, 1063, 1067, 1106, 1116, 1124, 60332, 60663, 61940, 111503, 111680, 111962,
                                261165)] + \
  [("cpu", s) for s in (20606, 21254, 21464, 22365, 23363, 23946, 61940, 102218, 102602, 200527,
                                300241)] + \
  [("cudacpu", s) for s in (40014, 40057)] + \
  [("emu", s) for s in (31355, 130748)]

@pytest.mark.parametrize("mode,seed", FIXED)
def test_seed_found_at_scale(mode: str, seed: int) -> None:
  fuzz.run_case(seed, fuzz.MODES[mode])

def checked_chain(mode: str, grad: bool) -> Any:
  """The first chain of this kind that passes and has index tensors, writes (statements after a value's line) and,
  for gradients, a gradient."""
  for seed in (s for s in range(300) if fuzz.is_gradient_case(s) == grad):
    f = fuzz.Fuzz(seed, fuzz.MODES[mode], frozenset())
    try:
      with fuzz.running_in(f.mode):
        fuzz.build(f)
        fuzz.check_values(f)
        if grad: fuzz.check_gradients(f)
    except AssertionError: continue
    writes = any(line.startswith("v") and " = " not in line or line.startswith("w") for line in f.lines)
    grads = any(v.lt.grad is not None for v in f.leaves)
    if any(line.startswith("i") for line in f.lines) and writes and grads == grad: return f
  raise AssertionError(f"no chain in {mode} has index tensors and writes")

@pytest.mark.parametrize("mode,grad", [("cpu", False), ("cpu", True), ("shard", False), ("shard", True),
                                       ("emu", False)])
def test_program_reproduces_the_chain(mode: str, grad: bool) -> None:
  """The program a failure prints computes the chain's values, and the gradients, on its own."""
  f = checked_chain(mode, grad)
  names: dict[str, Any] = {}
  exec(f.program(), names)
  for v in f.vals:
    np.testing.assert_array_equal(names[v.name].numpy(), v.lt.numpy(), err_msg=v.name)
    if v.lt.grad is not None: np.testing.assert_array_equal(names[v.name].grad.numpy(), v.lt.grad.numpy())

def test_a_nan_torch_gives_where_its_shadow_has_a_value_is_compared_with_the_shadow() -> None:
  want, shadow = np.array([np.nan, 1.0], np.float32), np.array([0.0, 1.0])
  assert fuzz.compare_values(np.array([0.0, 1.0], np.float32), want, shadow, False, (1e-6, 1e-6)) is None
  assert fuzz.compare_values(np.array([5.0, 1.0], np.float32), want, shadow, False, (1e-6, 1e-6)) is not None
  assert fuzz.compare_values(np.array([0.0, 1.0], np.float32), want, np.array([np.nan, 1.0]), False, (1e-6, 1e-6)) \
    is not None  # NaN in the shadow too: lazytensor must give NaN
