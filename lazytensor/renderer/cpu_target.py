"""The CPU a kernel is compiled for, described in one place: what LLVM needs to emit code for it (triple, cpu name,
feature string) and what the optimizer needs to choose a register tile for it (vector width, vector registers, FMA,
cache sizes). `CPU_TARGET` chooses it: `native` (the host), an x86-64 level (`x86-64-v2` SSE4.2, `x86-64-v3` AVX2,
`x86-64-v4` AVX-512) or `aarch64` (NEON). A target below the host's level runs on it, so the AVX2 path can be built,
tested and measured on an AVX-512 machine; any other target can only be compiled here."""
from __future__ import annotations

import functools
import pathlib
from dataclasses import dataclass

import llvmlite.binding as llvm

from lazytensor.helpers import CPU_TARGETS

# the features each x86-64 level adds to the one below (LLVM's names; psABI's micro-architecture levels)
_X86_LEVELS: dict[str, tuple[str, ...]] = {
  "x86-64-v2": ("cx16", "sahf", "popcnt", "sse4.1", "sse4.2", "ssse3"),
  "x86-64-v3": ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"),
  "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
# each level with every feature of the levels below it
_X86_IMPLIED = {lvl: frozenset(f for below in list(_X86_LEVELS)[:i + 1] for f in _X86_LEVELS[below])
                for i, lvl in enumerate(_X86_LEVELS)}
_X86_TRIPLE, _AARCH64_TRIPLE = "x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"
# caches assumed where the OS does not say (a target that is not this host's): a typical core of either ISA
_DEFAULT_CACHES = (32 << 10, 1 << 20, 32 << 20)
_CACHE_DIR = pathlib.Path("/sys/devices/system/cpu/cpu0/cache")
# the most L3 counted for each CPU that shares it. A VM is shown its host's whole L3 but shares it only among its own
# vCPUs: 480 MB for 2 vCPUs of a Xeon, where one thread kept ~24-32 MB of a stream in cache (the heuristics' L3 rules
# then never fired). No part gives a CPU more, but for EPYCs with one or two cores on each CCD (72F3: 32 MB a core,
# 16 per SMT thread; 9184X: 24 per thread, counted at 16 here); desktops (2-4 MB a CPU) and servers are not touched
L3_PER_CPU_MAX = 16 << 20

@dataclass(frozen=True)
class CPUTarget:
  """Everything about one CPU that changes the code lazytensor generates for it."""
  name: str               # the CPU_TARGET value that chose it
  triple: str
  cpu: str                # LLVM's cpu name (tuning, and the features it implies)
  features: str           # LLVM's feature string ("+avx2,+fma,..."); empty: the cpu's own
  vector_bits: int        # one SIMD register
  vector_registers: int   # SIMD registers the ISA names (x86: 16 ymm, 32 zmm; aarch64: 32 v)
  fma: bool               # fused multiply-add: a matmul's inner step is one instruction
  l1d_bytes: int
  l2_bytes: int           # per core
  l3_bytes: int           # one L3, shared: at most L3_PER_CPU_MAX for each CPU that shares it
  runs_on_host: bool      # this process can run what is compiled for it

  @property
  def vector_floats(self) -> int: return self.vector_bits // 32

  def has(self, feature: str) -> bool:
    """Whether code for this target may use an instruction set extension (LLVM's name: "avx512vnni", "avx2"): in
    its feature string, or implied by the x86-64 level it names."""
    return feature in _X86_IMPLIED.get(self.cpu, frozenset()) or feature in _feature_set(self.features)

  @property
  def key(self) -> str:
    """What distinguishes the code compiled for this target from another's (cache keys)."""
    return f"{self.triple} {self.cpu} {self.features} {self.vector_bits}"

  def describe(self) -> str:
    caches = "/".join(f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K" for b in (self.l1d_bytes, self.l2_bytes,
                                                                                 self.l3_bytes))
    level = f" ({x86_level(self)})" if self.triple.startswith("x86_64") and self.cpu not in _X86_LEVELS else ""
    return (f"{self.name}: {self.cpu}{level}, {self.vector_bits}-bit vectors x {self.vector_registers} registers"
            f"{', FMA' if self.fma else ''}, L1d/L2/L3 {caches}{'' if self.runs_on_host else ', compile only'}")

def x86_level(t: CPUTarget) -> str:
  """The highest x86-64 level whose features the target has."""
  if t.name in _X86_LEVELS: return t.name
  have, level = _feature_set(t.features), "x86-64"
  for name, needs in _X86_LEVELS.items():
    if not set(needs) <= have: break
    level = name
  return level

def _feature_set(features: str) -> set[str]: return {f[1:] for f in features.split(",") if f.startswith("+")}

@functools.cache
def _init_llvm() -> None:
  # every target llvmlite was built with, so that a cross target (aarch64 on x86) can emit objects too
  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()

@functools.cache
def _host() -> tuple[str, str, str]:
  """The host's triple, cpu name and feature string."""
  _init_llvm()
  return llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()

def _cpu_count(cpu_list: str) -> int:
  """The CPUs a Linux cpu list names ("0-7,16-23": 16)."""
  ends = [part.split("-") for part in cpu_list.strip().split(",") if part]
  return sum(int(r[-1]) - int(r[0]) + 1 for r in ends)

def _os_caches(cache_dir: pathlib.Path = _CACHE_DIR) -> tuple[int, int, int] | None:
  """L1 data, L2 and L3 sizes of cpu0 as Linux reports them (`cache_dir`), the L3 at most L3_PER_CPU_MAX for each
  CPU that shares it; None where Linux does not say."""
  sizes: dict[int, int] = {}
  try:
    for d in cache_dir.glob("index*"):
      if (d / "type").read_text().strip() == "Instruction": continue
      size = (d / "size").read_text().strip()
      scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
      level, nbytes = int((d / "level").read_text()), int(size.rstrip("KM")) * scale
      if level == 3: nbytes = min(nbytes, _cpu_count((d / "shared_cpu_list").read_text()) * L3_PER_CPU_MAX)
      sizes[level] = nbytes
  except (OSError, ValueError): return None
  return (sizes[1], sizes[2], sizes.get(3, sizes[2])) if 1 in sizes and 2 in sizes else None

def _caches(on_host: bool) -> tuple[int, int, int]:
  """The caches code for a target will meet: the host's when it runs here, else typical ones."""
  return (_os_caches() or _DEFAULT_CACHES) if on_host else _DEFAULT_CACHES

def _x86_shape(features: set[str] | frozenset[str]) -> tuple[int, int]:
  """Vector bits and registers of an x86 cpu with these features."""
  if "avx512f" in features: return 512, 32
  return (256, 16) if "avx" in features else (128, 16)

def _native() -> CPUTarget:
  triple, cpu, features = _host()
  have = _feature_set(features)
  if triple.startswith("x86_64"): bits, regs = _x86_shape(have)
  else: bits, regs = 128, 32  # aarch64 NEON (SVE's width is not known when compiling)
  return CPUTarget("native", triple, cpu, features, bits, regs, "fma" in have or not triple.startswith("x86_64"),
                   *_caches(True), True)

def _x86(level: str) -> CPUTarget:
  triple, _, host_features = _host()
  needs = _X86_IMPLIED[level]
  bits, regs = _x86_shape(needs)
  runs = triple.startswith("x86_64") and needs <= _feature_set(host_features)
  return CPUTarget(level, triple if triple.startswith("x86_64") else _X86_TRIPLE, level, "", bits, regs,
                   "fma" in needs, *_caches(runs), runs)

def _aarch64() -> CPUTarget:
  triple = _host()[0]
  runs = triple.startswith("aarch64")
  return CPUTarget("aarch64", triple if runs else _AARCH64_TRIPLE, "generic", "+neon", 128, 32, True,
                   *_caches(runs), runs)

TARGETS = CPU_TARGETS  # declared with the knob, which takes these

@functools.cache
def cpu_target(name: str) -> CPUTarget:
  """The target a CPU_TARGET value names."""
  if name == "native": return _native()
  if name in _X86_LEVELS: return _x86(name)
  if name == "aarch64": return _aarch64()
  raise ValueError(f"CPU_TARGET={name!r}: expected one of {', '.join(TARGETS)}")

def target_machine(t: CPUTarget, jit: bool = False) -> llvm.TargetMachine:
  """An LLVM target machine that emits code for `t` (O3)."""
  _init_llvm()
  return llvm.Target.from_triple(t.triple).create_target_machine(cpu=t.cpu, features=t.features, opt=3, jit=jit)
