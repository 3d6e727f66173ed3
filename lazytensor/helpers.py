"""Every environment knob, declared once; Context to override them; GlobalCounters; small utilities."""
from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import sys
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")

class ContextVar:
  """A knob: read once from the environment (its default otherwise), overridable with `Context`. A knob declared with
  `code=True` changes the code rendered for a kernel with given opts: it is part of every program cache key."""
  registry: ClassVar[dict[str, ContextVar]] = {}
  version: ClassVar[int] = 0  # changes whenever a knob is declared or set: see knob_state()

  def __init__(self, key: str, default: Any, help: str, code: bool = False) -> None:
    assert key not in ContextVar.registry, f"knob {key} declared twice"
    self.key, self.default, self.help, self.code = key, default, help, code
    raw = os.environ.get(key)
    self.value = default if raw is None else self._parse(raw)
    ContextVar.registry[key] = self
    ContextVar.version += 1

  def _parse(self, raw: str) -> Any:
    if isinstance(self.default, bool): return raw.lower() not in ("", "0", "false", "no")
    if isinstance(self.default, int):
      try: return int(raw)
      except ValueError: raise ValueError(f"environment variable {self.key}={raw!r}: expected an integer") from None
    if isinstance(self.default, float): return float(raw)
    return raw

  def __bool__(self) -> bool: return bool(self.value)
  def __int__(self) -> int: return int(self.value)
  def __ge__(self, x: int) -> bool: return self.value >= x
  def __gt__(self, x: int) -> bool: return self.value > x
  def __lt__(self, x: int) -> bool: return self.value < x
  def __le__(self, x: int) -> bool: return self.value <= x
  def __repr__(self) -> str: return f"{self.key}={self.value!r}"

class Context(contextlib.ContextDecorator):
  """`with Context(DEBUG=2, BEAM=1):` sets knobs for a block and restores them after."""
  def __init__(self, **kwargs: Any) -> None:
    for k in kwargs:
      if k not in ContextVar.registry:
        raise ValueError(f"Context: unknown knob {k!r}; known knobs: {sorted(ContextVar.registry)}")
    self.kwargs = kwargs
    self.old: dict[str, Any] = {}

  def __enter__(self) -> None:
    for k, v in self.kwargs.items():
      self.old[k] = ContextVar.registry[k].value
      ContextVar.registry[k].value = v
    ContextVar.version += 1

  def __exit__(self, *exc: object) -> None:
    for k, v in self.old.items(): ContextVar.registry[k].value = v
    ContextVar.version += 1

_knob_state: tuple[int, int] = (-1, 0)   # (ContextVar.version it was read at, its number)
_knob_states: dict[tuple[Any, ...], int] = {}

def knob_state() -> int:
  """A number for the value of every knob, the same whenever the knobs have the same values: a small key for caches
  that any knob may affect (each eager kernel launch looks one up). Read again only after a knob changed."""
  global _knob_state
  if _knob_state[0] != ContextVar.version:
    values = tuple(var.value for var in ContextVar.registry.values())
    _knob_state = (ContextVar.version, _knob_states.setdefault(values, len(_knob_states)))
  return _knob_state[1]

def _default_cache_dir() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "lazytensor")

DEBUG = ContextVar("DEBUG", 0,
                   "1 schedule summary; 2 one line per kernel; 3 opts and axis kinds; 4 source (lowered again, past "
                   "the program cache); 5 AST; 6 linear program; 7 asm")
BEAM = ContextVar("BEAM", 0, "beam width for kernel search; 0 uses the hand-coded heuristics")
NOOPT = ContextVar("NOOPT", False, "apply no kernel optimizations at all")
DEV = ContextVar("DEV", "", "default device: CPU, CUDA, CUDACPU or EMU (empty picks CPU)")
JIT = ContextVar("JIT", 1, "0 disables TinyJit capture")
RING = ContextVar("RING", 1 << 18, "all-reduces over 3 or more devices of at least this many bytes use a ring "
                  "(reduce-scatter + all-gather); smaller ones copy every partial result to every device")
CACHEDIR = ContextVar("CACHEDIR", _default_cache_dir(), "directory of the on-disk caches")
CACHEDB = ContextVar("CACHEDB", "", "path of the sqlite cache (empty: CACHEDIR/cache.db)")
CACHELEVEL = ContextVar("CACHELEVEL", 2, "0 no disk cache, 1 compiled programs only, 2 programs and searches")
PARALLEL = ContextVar("PARALLEL", os.cpu_count() or 1,
                      "worker processes that compile BEAM candidates (0: compile and time them in this process)")
BEAM_UPCAST_MAX = ContextVar("BEAM_UPCAST_MAX", 256, "BEAM skips candidates with more register lanes (upcast x unroll)")
BEAM_LOCAL_MAX = ContextVar("BEAM_LOCAL_MAX", 1024, "BEAM skips candidates with more local threads per block")
BEAM_MIN_PROGRESS = ContextVar("BEAM_MIN_PROGRESS", 0.02,
                               "BEAM stops when a round makes the best kernel faster by less than this fraction")
BEAM_TIMEOUT_SEC = ContextVar("BEAM_TIMEOUT_SEC", 10.0,
                              "BEAM counts a candidate whose compile or timed run takes longer as infinitely slow")
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", False, "search again even when the BEAM cache has a result")
BEAM_DEBUG = ContextVar("BEAM_DEBUG", 0, "1 prints each BEAM round's best opts and time; 2 also every candidate's")
THREADS = ContextVar("THREADS", os.cpu_count() or 1, "most CPU threads one kernel may use")
CPU_TARGET = ContextVar("CPU_TARGET", "native", "the CPU that CPU kernels are compiled and optimized for: native, "
                        "x86-64-v2 (SSE4.2), x86-64-v3 (AVX2), x86-64-v4 (AVX-512) or aarch64 (NEON); a target "
                        "this host cannot run is for compiling only")
NVCC_CHECK = ContextVar("NVCC_CHECK", False,
                        "CUDACPU also compiles every kernel with nvcc for sm_80 and sm_90; an nvcc error fails the run")
FASTMATH = ContextVar("FASTMATH", True, "vectorized exp2/log2/sin/fmod on the CPU instead of libm calls", code=True)
SCHEDULE_CACHE = ContextVar("SCHEDULE_CACHE", 512, "schedules remembered by graph structure, buffers as parameters "
                            "(an eager step repeated with new buffers skips scheduling); 0 schedules every graph anew")
BUFFER_CACHE = ContextVar("BUFFER_CACHE", 1 << 30, "bytes of freed memory a device keeps for the next allocation of "
                          "the same size (no page faults on fresh memory at every eager step); 0 frees at once")
TF32 = ContextVar("TF32", False, "float32 matmuls may use tf32 tensor cores on CUDA (10-bit mantissa products, like "
                  "torch's allow_tf32); off by default", code=True)
NO_COLOR = ContextVar("NO_COLOR", "", "any value turns off ANSI colors (no-color.org); they are also off when standard "
                     "output is not a terminal")
CHECK_INDICES = ContextVar("CHECK_INDICES", True, "integer tensor indices (x[idx], gather, scatter, index_*, one_hot, "
                           "nn.Embedding, class targets of the losses) are checked by the kernels that read them, and "
                           "the realize that runs one out of range raises IndexError; read when the op is built. 0 "
                           "builds no check: an out-of-range index then reads 0 and writes nothing")
TRAINING = ContextVar("TRAINING", False, "training mode, which Tensor.training reads and Tensor.train() sets: dropout "
                      "drops and batchnorm normalizes by the batch's statistics")
DIST_TIMEOUT = ContextVar("DIST_TIMEOUT", 300.0, "seconds a lazytensor.distributed collective waits for the other "
                          "ranks before it raises (a collective that some ranks never call would hang)")

def launched_ranks() -> int:
  """How many processes an MPI launcher (mpiexec of MPICH or Open MPI) started this one among; 1 when none did."""
  for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS"):
    if (raw := os.environ.get(var, "")).isdigit(): return int(raw)
  return 1

def cache_db_path() -> str: return CACHEDB.value or os.path.join(CACHEDIR.value, "cache.db")

class GlobalCounters:
  """What has run since the last reset: kernels, flops, bytes moved and kernel time."""
  kernel_count: ClassVar[int] = 0
  global_ops: ClassVar[int] = 0
  global_mem: ClassVar[int] = 0
  time_sum_s: ClassVar[float] = 0.0

  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem = 0, 0, 0
    GlobalCounters.time_sum_s = 0.0

# ---- errors: a bad argument is a ValueError (TypeError for a bad dtype), and also the RuntimeError that torch and
# tinygrad raise for it, so that code written against either catches it (as numpy's AxisError is both a ValueError
# and an IndexError) ----

class ArgumentError(ValueError, RuntimeError):
  """A bad argument value where torch raises RuntimeError (a repeated axis, an unknown mode, sizes that disagree)."""

class DTypeError(TypeError, RuntimeError):
  """An op given a dtype it does not take where torch raises RuntimeError (a bitwise op on floats)."""

class NotSupportedError(ValueError, NotImplementedError):
  """An argument this op does not implement where torch raises NotImplementedError (an unknown pad mode)."""

class IndexTypeError(TypeError, IndexError):
  """An index of a type that cannot index (a float tensor), which torch reports as an IndexError."""

# ---- small utilities ----

def dim_alias(name: str, axis: Any, dim: Any, default: Any) -> Any:
  """The axis a method was given as numpy's axis= or torch's dim= (one of them, not both)."""
  if dim is None: return axis
  if axis != default: raise TypeError(f"{name}: got both axis={axis!r} and dim={dim!r}; give one of them")
  return dim

def prod(xs: Iterable[Any], start: Any = 1) -> Any: return functools.reduce(lambda a, b: a * b, xs, start)
def all_same(xs: Sequence[Any]) -> bool: return all(x == xs[0] for x in xs)
def dedup(xs: Iterable[T]) -> list[T]: return list(dict.fromkeys(xs))
def flatten(xss: Iterable[Iterable[T]]) -> list[T]: return [x for xs in xss for x in xs]
def argsort(xs: Sequence[Any]) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)

def make_tuple(x: int | Sequence[int], n: int) -> tuple[int, ...]:
  return (x,) * n if isinstance(x, int) else tuple(x)

_COLORS = {"black": 30, "red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}

def use_color() -> bool:
  """Whether output may carry ANSI colors: on a terminal, unless NO_COLOR is set (logs and pipes get plain text)."""
  return not NO_COLOR.value and sys.stdout.isatty()

def colored(s: str, color: str | None, bright: bool = False) -> str:
  if color is None or not use_color(): return s
  return f"\u001b[{_COLORS[color] + (60 if bright else 0)}m{s}\u001b[0m"

def ansistrip(s: str) -> str:
  import re
  return re.sub(r"\x1b\[[0-9;]*m", "", s)

def ansilen(s: str) -> int: return len(ansistrip(s))

def to_function_name(s: str) -> str:
  return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in ansistrip(s))

def ensure_cache_dir() -> pathlib.Path:
  path = pathlib.Path(CACHEDIR.value)
  path.mkdir(parents=True, exist_ok=True, mode=0o700)
  return path

# ---- the on-disk cache: one sqlite file, a table per kind of entry, never fatal ----

_db_conn: dict[str, Any] = {}
_db_warned: set[str] = set()

def _warn_db_once(path: str, err: Exception) -> None:
  if path not in _db_warned:
    _db_warned.add(path)
    print(f"lazytensor: cache database {path} is unusable ({err}); continuing without it", file=sys.stderr)

def _db(path: str) -> Any:
  import sqlite3
  if path not in _db_conn:
    if path != ":memory:": pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    if path != ":memory:": os.chmod(path, 0o600)
    conn.execute("PRAGMA journal_mode=WAL")
    _db_conn[path] = conn
  return _db_conn[path]

def _table(table: str) -> str:
  assert table.isidentifier(), f"bad cache table name {table}"
  return f"{table}_v1"

def diskcache_get(table: str, key: str) -> bytes | None:
  """The cached value, or None when absent, disabled (CACHELEVEL=0) or the database is unusable."""
  if CACHELEVEL.value == 0: return None
  path = cache_db_path()
  try:
    cur = _db(path).execute(f"SELECT val FROM {_table(table)} WHERE key=?", (key,))
    row = cur.fetchone()
    return None if row is None else bytes(row[0])
  except Exception as e:
    if "no such table" not in str(e): _warn_db_once(path, e)
    return None

def diskcache_put(table: str, key: str, val: bytes) -> None:
  if CACHELEVEL.value == 0: return
  path = cache_db_path()
  try:
    conn = _db(path)
    conn.execute(f"CREATE TABLE IF NOT EXISTS {_table(table)} (key TEXT PRIMARY KEY, val BLOB)")
    conn.execute(f"INSERT OR REPLACE INTO {_table(table)} (key, val) VALUES (?, ?)", (key, val))
  except Exception as e: _warn_db_once(path, e)
