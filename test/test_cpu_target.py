"""CPU targets: what each CPU_TARGET describes, the register tile the heuristics choose for it, code that compiles for
every target (x86 levels and aarch64) and runs where the host can run it."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor
from lazytensor.codegen.linearize import linearize
from lazytensor.codegen.lowerer import lower_kernel
from lazytensor.opt.heuristic import accumulators, hand_coded_optimizations
from lazytensor.opt.kernel import AxisKind, Kernel
from lazytensor.renderer.cpu_target import L3_PER_CPU_MAX, TARGETS, CPUTarget, _os_caches, cpu_target, x86_level
from lazytensor.renderer.llvm import LLVMRenderer
from lazytensor.runtime.ops_cpu import LLVMCompiler, unpack_object
from lazytensor.schedule.scheduler import create_schedule
from lazytensor.uop.ops import UOp

X86 = ("x86-64-v2", "x86-64-v3", "x86-64-v4")
rng = np.random.default_rng(0)

def _t(*shape: int) -> Tensor: return Tensor(rng.standard_normal(shape, dtype=np.float32)).realize()

@pytest.mark.parametrize("name, bits, registers, fma", [("x86-64-v2", 128, 16, False), ("x86-64-v3", 256, 16, True),
                                                       ("x86-64-v4", 512, 32, True), ("aarch64", 128, 32, True)])
def test_named_targets(name: str, bits: int, registers: int, fma: bool) -> None:
  t = cpu_target(name)
  assert (t.vector_bits, t.vector_floats, t.vector_registers, t.fma) == (bits, bits // 32, registers, fma)
  assert t.triple.startswith("aarch64" if name == "aarch64" else "x86_64")
  assert t.l1d_bytes > 0 and t.l2_bytes > t.l1d_bytes and t.l3_bytes >= t.l2_bytes

def test_native_is_the_host() -> None:
  t = cpu_target("native")
  assert t.runs_on_host and t.cpu and t.features
  if t.triple.startswith("x86_64"):
    level = x86_level(t)
    assert cpu_target(level).vector_bits == t.vector_bits and cpu_target(level).runs_on_host
    assert all(cpu_target(lv).runs_on_host for lv in X86[:X86.index(level) + 1])  # every level below the host's
  assert t.name in t.describe()

def test_unknown_target_names_the_choices() -> None:
  with pytest.raises(ValueError, match=r"CPU_TARGET='x86-64-v9'.*x86-64-v3"): cpu_target("x86-64-v9")
  with pytest.raises(ValueError, match="CPU_TARGET"), Context(CPU_TARGET="pentium"): _ = Device["CPU"].renderer.target

def _matmul_kernel(target: CPUTarget, n: int = 1024) -> Kernel:
  with Context(CPU_TARGET=target.name): item = create_schedule([(_t(n, n) @ _t(n, n)).lazydata])[0][-1]
  return hand_coded_optimizations(Kernel(item.ast, LLVMRenderer(target)))

def _tile(k: Kernel) -> tuple[int, int]:
  """(columns, rows) of a matmul's register tile. The rows are the outer upcast axis and the SIMD vectors the inner
  one, so the code takes a row at a time with one broadcast live (heuristic._register_tile)."""
  ups = [k.full_shape[a] for a in k.axes_of(AxisKind.UPCAST)]
  assert len(ups) == 2, k.applied_opts
  return ups[1], ups[0]

@pytest.mark.parametrize("name, tile", [("x86-64-v2", (8, 6)), ("x86-64-v3", (16, 6)), ("x86-64-v4", (32, 8)),
                                        ("aarch64", (8, 8))])
def test_matmul_register_tile_fits_the_target(name: str, tile: tuple[int, int]) -> None:
  # two vectors across, as many rows as the accumulator registers allow: AVX2 12 of 16 (6 rows, 256 padded to 258),
  # AVX-512 16 of 32 (8 rows of 2 <16 x float>)
  t = cpu_target(name)
  k = _matmul_kernel(t, 256)
  cols, rows = _tile(k)
  assert (cols, rows) == tile and cols == 2 * t.vector_floats and 2 * rows <= accumulators(t)

def test_avx2_tile_takes_six_rows_where_they_divide() -> None:
  cols, rows = _tile(_matmul_kernel(cpu_target("x86-64-v3"), 96))
  assert (cols, rows) == (16, 6)  # 12 accumulators of AVX2's 16 registers

@pytest.mark.parametrize("size, budget, want", [(1024, 6, (6, 24)), (2048, 6, (6, 48)), (512, 6, (6, 12)),
                                                (197, 6, (6, 6)), (96, 6, (6, 6)), (2048, 8, (8, 8)), (56, 8, (8, 8))])
def test_tile_rows_pad_to_the_budget_by_little(size: int, budget: int, want: tuple[int, int]) -> None:
  # AVX2's 6 rows where powers of two give 4: padded by at most 1/64 (or 1/8 where a divisor gives under half the
  # budget: 197 tokens), to a multiple of 8, 4 or 2 tiles where that costs as little (blocks and threads divide it)
  from lazytensor.opt.heuristic import MAX_PAD_FRACTION, ROW_PAD_FRACTION, _padded_rows
  rows, multiple = _padded_rows(size, budget)
  assert (rows, multiple) == want and multiple % rows == 0
  assert -size % multiple <= size // (MAX_PAD_FRACTION if size == 197 else ROW_PAD_FRACTION)

def _compile(k: Kernel, target: CPUTarget) -> tuple[str, bytes]:
  src = LLVMRenderer(target).render("k", linearize(lower_kernel(k)))
  compiler = LLVMCompiler(target)
  return compiler.assembly(src), unpack_object(compiler.compile(src))

@pytest.mark.parametrize("name, n, fmas", [("x86-64-v3", 96, 12), ("x86-64-v3", 1024, 8), ("x86-64-v4", 1024, 16),
                                           ("x86-64-v2", 256, 0), ("aarch64", 256, 16)])
def test_register_tile_keeps_its_accumulators_in_registers(name: str, n: int, fmas: int) -> None:
  # e.g. 12 accumulators, 2 B vectors and one broadcast of A fit AVX2's 16 registers only when the code takes a row at
  # a time (rows the outer upcast); with the vectors outside, every row's broadcast stays live and accumulators spill
  # to the stack inside the K loop (66 instead of 96 GFLOP/s on Zen 3). Checked in the assembly for each target, so
  # that a target this host cannot run (AVX-512, NEON) is held to it too. The K loop is the innermost loop with the
  # multiply-adds: around it, the accumulators of the next level of a long sum (lowerer.REDUCE_FIRST_BLOCK) may
  # live on the stack, added to once per block of K
  t = cpu_target(name)
  asm, _ = _compile(_matmul_kernel(t, n), t)
  fma = "fmla" if name == "aarch64" else "vfmadd231ps"
  assert asm.count(fma) >= fmas
  k_loops = [body for body in _innermost_loops(asm) if any(fma in line for line in body)]
  assert k_loops or not fmas
  assert not any("(%rsp)" in line or "[sp" in line for body in k_loops for line in body), "the register tile spills"

def _innermost_loops(asm: str) -> list[list[str]]:
  """The lines of each innermost loop of an assembly listing: from a label to the branch back to it, with no other
  loop inside."""
  lines = asm.splitlines()
  labels = {line.strip()[:-1]: i for i, line in enumerate(lines) if re.fullmatch(r"\.?L\w+:", line.strip())}
  loops = [(labels[m.group(1)], i) for i, line in enumerate(lines)
           if (m := re.search(r"\s(\.?L\w+)\s*$", line)) and labels.get(m.group(1), i) < i]
  return [lines[s:e + 1] for s, e in loops if not any(s < s2 and e2 <= e for s2, e2 in loops)]

@pytest.mark.parametrize("name, register, wider", [("x86-64-v2", "xmm", "ymm"), ("x86-64-v3", "ymm", "zmm"),
                                                   ("x86-64-v4", "zmm", None)])
def test_x86_levels_compile_to_their_vectors(name: str, register: str, wider: str | None) -> None:
  t = cpu_target(name)
  asm, obj = _compile(_matmul_kernel(t, 64), t)
  assert obj[:4] == b"\x7fELF" and register in asm and (wider is None or wider not in asm)
  assert ("vfmadd" in asm) == t.fma

def test_aarch64_neon_kernel_compiles_to_an_object() -> None:
  t = cpu_target("aarch64")
  asm, obj = _compile(_matmul_kernel(t, 64), t)
  assert obj[:4] == b"\x7fELF" and int.from_bytes(obj[18:20], "little") == 183  # e_machine EM_AARCH64
  assert "fmla" in asm and ".4s" in asm  # NEON fused multiply-adds on 4 floats

@pytest.mark.parametrize("name", TARGETS)
def test_runs_where_the_host_can(name: str) -> None:
  a, b = _t(96, 64), _t(64, 48)
  with Context(CPU_TARGET=name):
    if not cpu_target(name).runs_on_host:
      with pytest.raises(RuntimeError, match=f"CPU_TARGET={name}.*cannot run on this host"): (a @ b + 1).numpy()
      return
    got = (a @ b + 1).numpy()
  np.testing.assert_allclose(got, a.numpy() @ b.numpy() + 1, rtol=1e-4, atol=1e-4)

def test_function_attributes_name_the_target() -> None:
  for name in X86:
    t = cpu_target(name)
    attrs = LLVMRenderer(t)._attributes()
    assert f'"prefer-vector-width"="{t.vector_bits}"' in attrs and f'"target-cpu"="{name}"' in attrs

def test_schedule_follows_the_target() -> None:
  # the packing copies are chosen for the target, so a schedule cached for one target is never reused for another
  a, b = _t(512, 256), _t(256, 1024)
  def asts(name: str) -> list[UOp]:
    with Context(CPU_TARGET=name): return [it.ast for it in create_schedule([(a @ b).lazydata])[0]]
  avx2 = asts("x86-64-v3")
  assert asts("x86-64-v4") != avx2 and asts("x86-64-v3") == avx2

# a VEX move of the sign bits of a vector names only xmm0-15: from xmm16-31 LLVM 22.1 reads another vector's signs
_VEX_SIGN_MASK_OF_XMM16_31 = re.compile(r"(?:vmovmskp[sd]|vpmovmskb)\s+%[xy]mm(?:1[6-9]|2\d|3[01])\b")

def test_no_sign_mask_from_an_evex_only_register() -> None:
  # the orderable keys of cummin/sort, vectorized by SLP, took vmovmskps %xmm16 (encoded as xmm0): every value of a
  # cummin of exp came out wrong on AVX-512 (runtime/ops_cpu.py _SIGN_TEST). Checked in x86-64-v4's assembly, so that
  # a host without AVX-512 holds it too
  t = cpu_target("x86-64-v4")
  values, indices = Tensor(np.zeros((3, 2), np.float32)).exp().cummin(0)
  for item in create_schedule([values.lazydata, indices.lazydata])[0]:
    src = LLVMRenderer(t).render("k", linearize(lower_kernel(Kernel(item.ast, LLVMRenderer(t)))))
    assert not _VEX_SIGN_MASK_OF_XMM16_31.search(asm := LLVMCompiler(t).assembly(src)), asm

def _sys_cache_tree(root: pathlib.Path, caches: list[tuple[int, str, str, str]]) -> pathlib.Path:
  """A /sys/devices/system/cpu/cpu0/cache of (level, type, size, shared_cpu_list) entries, as Linux writes it."""
  for i, (level, kind, size, shared) in enumerate(caches):
    d = root / f"index{i}"
    d.mkdir(parents=True)
    for name, text in (("level", str(level)), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
      (d / name).write_text(text + "\n")
  return root

_CORE = [(1, "Data", "48K", "0"), (1, "Instruction", "64K", "0"), (2, "Unified", "2048K", "0")]

@pytest.mark.parametrize("l3, want", [
  ((3, "Unified", "491520K", "0-1"), 32 << 20),  # a 2-vCPU VM shown its host's 480 MB: 16 MB for each vCPU
  ((3, "Unified", "491520K", "0-7"), 128 << 20),  # 8 vCPUs of the same host
  ((3, "Unified", "32768K", "0-7,16-23"), 32 << 20),  # a 16-thread desktop's (Zen 3) 32 MB: all of it
  ((3, "Unified", "30M", "0-19"), 30 << 20),  # a 20-thread Intel desktop's
  ((3, "Unified", "98304K", "0,8"), 32 << 20),  # one core's (2 SMT threads) 96 MB of an EPYC 9184X CCD: capped
])
def test_l3_counts_at_most_a_share_for_each_cpu_that_shares_it(tmp_path: pathlib.Path, l3: tuple, want: int) -> None:
  assert L3_PER_CPU_MAX == 16 << 20
  assert _os_caches(_sys_cache_tree(tmp_path, [*_CORE, l3])) == (48 << 10, 2 << 20, want)

def test_caches_without_l3_or_without_a_tree(tmp_path: pathlib.Path) -> None:
  assert _os_caches(_sys_cache_tree(tmp_path / "no_l3", _CORE)) == (48 << 10, 2 << 20, 2 << 20)  # the L2 stands in
  assert _os_caches(tmp_path / "missing") is None
