"""Every environment knob, declared once; Context to override them; GlobalCounters; small utilities."""
from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import math
import operator
import os
import pathlib
import sqlite3
import sys
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Generic, NamedTuple, TypeVar

T = TypeVar("T")

class Allowed(NamedTuple):
  """The values a knob takes: a test of a parsed value, and how an error message says what it takes."""
  test: Callable[[Any], bool]
  text: str

def between(lo: float, hi: float = math.inf) -> Allowed:
  return Allowed(lambda v: lo <= v <= hi, f">= {lo}" if hi == math.inf else f"from {lo} to {hi}")

def above(lo: float) -> Allowed: return Allowed(lambda v: v > lo, f"> {lo}")

def one_of(*choices: Any) -> Allowed:
  return Allowed(lambda v: v in choices, "that is one of " + ", ".join(map(repr, choices)))

ANY = Allowed(lambda v: True, "")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

class ContextVar:
  """A knob: read once from the environment (its default otherwise, and for an empty value), overridable with
  `Context`. Every value it takes, from either, is checked against `allowed` (a bool takes 0/1, true/false, yes/no or
  on/off in any case): a bad one is a ValueError that names the knob. A knob declared with `code=True` changes the code
  rendered for a kernel with given opts: it is part of every program cache key."""
  registry: ClassVar[dict[str, ContextVar]] = {}
  version: ClassVar[int] = 0  # changes whenever a knob is declared or set: see knob_state()

  def __init__(self, key: str, default: Any, help: str, allowed: Allowed = ANY, code: bool = False) -> None:
    assert key not in ContextVar.registry, f"knob {key} declared twice"
    assert allowed is not ANY or isinstance(default, (bool, str)), f"knob {key}: a number needs its allowed range"
    self.key, self.default, self.help, self.allowed, self.code = key, default, help, allowed, code
    assert self.accept(default, f"the default {key}={default!r}") == default
    raw = os.environ.get(key)
    self.value = default if not raw else self.accept(raw, f"environment variable {key}={raw!r}")
    ContextVar.registry[key] = self
    ContextVar.version += 1

  @property
  def takes(self) -> str:
    """What the knob takes, in words."""
    kind = "a boolean (1/0, true/false, yes/no, on/off)" if isinstance(self.default, bool) else \
      "an integer" if isinstance(self.default, int) else "a number" if isinstance(self.default, float) else "a string"
    return f"{kind} {self.allowed.text}".rstrip()

  def accept(self, value: Any, where: str) -> Any:
    """`value` as the knob holds it (text is read as the environment's would be); a ValueError (TypeError for a value
    of another type) that says `where` the value came from (naming the knob and the value) and what the knob takes."""
    try: v = self._convert(value)
    except TypeError: raise TypeError(f"{where}: {self.key} takes {self.takes}, not {type(value).__name__}") from None
    except ValueError: v = None
    if v is None or not self.allowed.test(v): raise ValueError(f"{where}: {self.key} takes {self.takes}")
    return v

  def _convert(self, value: Any) -> Any:
    text = value.strip().lower() if isinstance(value, str) else None
    if isinstance(self.default, bool):
      if text is not None: return True if text in _TRUE else False if text in _FALSE else None
      return bool(value) if operator.index(value) in (0, 1) else None
    if isinstance(self.default, int): return int(text) if text is not None else operator.index(value)
    if isinstance(self.default, float):
      if isinstance(value, bool): raise TypeError
      return float(text if text is not None else value)
    if isinstance(value, (str, os.PathLike)): return os.fspath(value)
    raise TypeError

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
    self.kwargs = {k: ContextVar.registry[k].accept(v, f"Context({k}={v!r})") for k, v in kwargs.items()}
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

CPU_TARGETS = ("native", "x86-64-v2", "x86-64-v3", "x86-64-v4", "aarch64")

@functools.cache
def device_names() -> tuple[str, ...]:
  """The devices there are, one per file runtime/ops_<name>.py, upper-cased: adding a backend is adding its file."""
  runtime = pathlib.Path(__file__).resolve().parent / "runtime"
  return tuple(sorted(f.stem.removeprefix("ops_").upper() for f in runtime.glob("ops_*.py")))

def _is_device_name(name: str) -> bool:
  base, colon, num = name.upper().partition(":")
  return name == "" or (base in device_names() and (num.isdigit() or not colon))

DEBUG = ContextVar("DEBUG", 0,
                   "1 schedule summary; 2 one line per kernel; 3 opts and axis kinds; 4 source (lowered again, past "
                   "the program cache); 5 AST and the graph after every pass; 6 linear program; 7 asm", between(0, 7))
# the name of every pass (uop.ops.run_pass): graph rewrites of the tensor graph (multi, resolve) and codegen's pipeline
# in its order (codegen/program.py), which DEBUGPASS may name
PASSES = ("multi", "resolve", "lower", "renderer_rules", "symbolic", "index_dtype", "linearize", "alu_semantics")
DEBUGPASS = ContextVar("DEBUGPASS", "", "a pass name, or a comma list of them: the graph after each such pass is "
                       "printed (DEBUG=5 prints it after every pass)", Allowed(
                         lambda v: v == "" or all(n in PASSES for n in v.split(",")),
                         "that names a pass, or a comma list of them, of: " + ", ".join(PASSES)))
BEAM = ContextVar("BEAM", 0, "beam width for kernel search; 0 uses the hand-coded heuristics", between(0))
NOOPT = ContextVar("NOOPT", False, "apply no kernel optimizations at all")
DEV = ContextVar("DEV", "", f"default device: {', '.join(device_names())} (one per runtime/ops_<name>.py), or a "
                "numbered instance of one (CPU:1); empty picks CPU",
                Allowed(_is_device_name, f"that names a device ({', '.join(device_names())}; :N for an instance), or "
                                         "empty"))
JIT = ContextVar("JIT", 1, "0 disables TinyJit capture", between(0, 1))
RING = ContextVar("RING", 1 << 18, "all-reduces over 3 or more devices of at least this many bytes use a ring "
                  "(reduce-scatter + all-gather); smaller ones copy every partial result to every device", between(0))
CACHEDIR = ContextVar("CACHEDIR", _default_cache_dir(), "directory of the on-disk caches",
                      Allowed(bool, "that is not empty"))
CACHEDB = ContextVar("CACHEDB", "", "path of the sqlite cache (empty: CACHEDIR/cache.db)")
CACHEDB_MB = ContextVar("CACHEDB_MB", 256, "megabytes of entries the sqlite cache keeps; past it the least recently "
                        "used ones go", between(1))
CACHELEVEL = ContextVar("CACHELEVEL", 2, "0 no disk cache, 1 compiled programs only, 2 programs and searches",
                        between(0, 2))
PARALLEL = ContextVar("PARALLEL", os.cpu_count() or 1,
                      "worker processes that compile BEAM candidates (0: compile and time them in this process)",
                      between(0))
BEAM_UPCAST_MAX = ContextVar("BEAM_UPCAST_MAX", 256, "BEAM skips candidates with more register lanes (upcast x unroll)",
                             between(1))
BEAM_LOCAL_MAX = ContextVar("BEAM_LOCAL_MAX", 1024, "BEAM skips candidates with more local threads per block",
                            between(1))
BEAM_MIN_PROGRESS = ContextVar("BEAM_MIN_PROGRESS", 0.02,
                               "BEAM stops when a round makes the best kernel faster by less than this fraction",
                               between(0.0, 1.0))
BEAM_TIMEOUT_SEC = ContextVar("BEAM_TIMEOUT_SEC", 10.0,
                              "BEAM counts a candidate whose compile or timed run takes longer as infinitely slow",
                              above(0.0))
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", False, "search again even when the BEAM cache has a result")
BEAM_DEBUG = ContextVar("BEAM_DEBUG", 0, "1 prints each BEAM round's best opts and time; 2 also every candidate's",
                        between(0, 2))
THREADS = ContextVar("THREADS", os.cpu_count() or 1, "most CPU threads one kernel may use", between(1))
QUEUES = ContextVar("QUEUES", True, "a schedule over several CPU devices runs each device's kernels and copies on a "
                   "thread of its own, ordered by the buffers they share (engine/queues.py); 0 runs them in order")
CPU_TARGET = ContextVar("CPU_TARGET", "native", "the CPU that CPU kernels are compiled and optimized for: native, "
                        "x86-64-v2 (SSE4.2), x86-64-v3 (AVX2), x86-64-v4 (AVX-512) or aarch64 (NEON); a target "
                        "this host cannot run is for compiling only", one_of(*CPU_TARGETS), code=True)
NVCC_CHECK = ContextVar("NVCC_CHECK", False,
                        "CUDACPU also compiles every kernel with nvcc for sm_80 and sm_90; an nvcc error fails the run")
FASTMATH = ContextVar("FASTMATH", True, "vectorized exp2/log2/sin/fmod on the CPU instead of libm calls", code=True)
FTZ = ContextVar("FTZ", False, "CPU kernels flush denormal floats to zero, read and computed (x86: MXCSR's FTZ "
                "and DAZ, aarch64: FPCR.FZ, set for each kernel call only): no 100x slowdown once values fall below "
                "1e-38 (float32), but results there are 0 where numpy's are not", code=True)
SCHEDULE_CACHE = ContextVar("SCHEDULE_CACHE", 512, "schedules remembered by graph structure, buffers as parameters "
                            "(an eager step repeated with new buffers skips scheduling); 0 schedules every graph anew",
                            between(0))
SCALAR_ARGS = ContextVar("SCALAR_ARGS", True, "a constant that takes a second value where graphs of one structure had "
                         "another becomes a kernel argument: compiled once more, then one kernel serves every value "
                         "(schedule/cache.py); 0 compiles a kernel for each value")
PROGRAM_CACHE = ContextVar("PROGRAM_CACHE", 1024, "compiled kernels a process keeps loaded (with their object code); "
                           "past it the least recently used are freed, and built again from the disk cache if needed",
                           between(1))
BUFFER_CACHE = ContextVar("BUFFER_CACHE", 1 << 30, "bytes of freed memory a device keeps for the next allocation of "
                          "the same size (no page faults on fresh memory at every eager step), and more while the "
                          "memory in use and kept stays within the most in use at once; 0 frees at once",
                          between(0))
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
DIST_TIMEOUT = ContextVar("DIST_TIMEOUT", 300.0, "seconds a lazytensor.parallel.distributed collective waits for the "
                          "other ranks before it raises (a collective that some ranks never call would hang)",
                          above(0.0))
VIZ = ContextVar("VIZ", "0", "1 serves a page of what the run compiled (graphs, schedule, kernels, opts, passes, "
                 "source) on 127.0.0.1:VIZ_PORT; a path ending in .html writes that page there instead; read at each "
                 "realize", Allowed(lambda v: v in ("0", "1") or v.endswith(".html"), "that is 0, 1 or a path ending "
                                    "in .html"))
VIZ_PORT = ContextVar("VIZ_PORT", 8000, "the port of VIZ=1's page (0: any free port)", between(0, 65535))

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

# operator.mul, not a lambda: the product runs in C, where a lambda is a Python call per factor (every numel, every
# reshape's size check of a model's forward)
def prod(xs: Iterable[Any], start: Any = 1) -> Any: return functools.reduce(operator.mul, xs, start)
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

# ---- in-memory caches ----

K = TypeVar("K")
V = TypeVar("V")

class LRU(Generic[K, V]):
  """A cache that keeps at most `cap` entries (a knob, read at each insertion), dropping the least recently used: every
  cache of this process whose entries grow with the kernels and graphs it meets is one, so memory levels off. `get`
  marks an entry used; `put` inserts one."""
  def __init__(self, cap: ContextVar) -> None:
    self.cap = cap
    self.entries: OrderedDict[K, V] = OrderedDict()

  def get(self, key: K) -> V | None:
    if (hit := self.entries.get(key)) is not None: self.entries.move_to_end(key)
    return hit

  def put(self, key: K, value: V) -> V:
    self.entries[key] = value
    self.entries.move_to_end(key)
    while len(self.entries) > self.cap.value: self.entries.popitem(last=False)
    return value

  def clear(self) -> None: self.entries.clear()
  def __len__(self) -> int: return len(self.entries)
  def __contains__(self, key: object) -> bool: return key in self.entries

# ---- the on-disk cache: one sqlite file that processes share (BEAM workers, MPI ranks, test runners), one table of
# entries of every kind, each checksummed and compressed (zlib: a program's spec is mostly LLVM IR, which shrinks to
# a third), bounded by CACHEDB_MB (least recently used first); never fatal ----

DISKCACHE_TABLE = "entries_v2"
# when each entry was last used (ms since the epoch), apart from the entries: marking one used rewrites a few bytes,
# not its value
_USES_TABLE = "uses_v2"
# the tables of earlier versions (an entry per kind, no bound, object code stored twice): dropped when found
_OLD_TABLES = ("compile_v1", "program_v1", "beam_v1", "beam_shape_v1", "beam_pack_v1")
# how long a statement waits for another process's lock: writes hold it for milliseconds, so a longer wait means a
# stuck holder, and this process then goes on without the cache (_db_off) rather than wait at every kernel
_DB_BUSY_S = 2.0
# reads mark their entries used in batches: in the next write's transaction, at this many, or at exit
_TOUCH_BATCH = 256
# evicting goes down to this fraction of the bound, so that it runs once per tenth of the bound written, not per write
_EVICT_TO = 0.9

_db_conn: dict[tuple[str, int], sqlite3.Connection] = {}  # by path and process: a connection never crosses a fork
_db_off: set[str] = set()       # databases that failed once: this process goes on without them
_db_reported: set[tuple[str, str]] = set()
_touched: dict[tuple[str, int], list[int]] = {}  # by path and process: the entries read since the last write

def _db_failed(path: str, err: Exception) -> None:
  if path not in _db_off:
    _db_off.add(path)
    print(f"lazytensor: cache database {path} is unusable ({err}); this process goes on without it", file=sys.stderr)

def _db(path: str) -> sqlite3.Connection:
  if (conn := _db_conn.get((path, os.getpid()))) is not None: return conn
  if path != ":memory:": pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
  conn = sqlite3.connect(path, timeout=_DB_BUSY_S, isolation_level=None, check_same_thread=False)
  if path != ":memory:": os.chmod(path, 0o600)
  conn.execute("PRAGMA journal_mode=WAL")
  conn.execute("PRAGMA synchronous=NORMAL")  # with WAL a crash may lose the last entries, never the file
  conn.execute(f"CREATE TABLE IF NOT EXISTS {DISKCACHE_TABLE} (kind TEXT NOT NULL, key TEXT NOT NULL, "
               "val BLOB NOT NULL, digest BLOB NOT NULL, PRIMARY KEY (kind, key))")
  conn.execute(f"CREATE TABLE IF NOT EXISTS {_USES_TABLE} (id INTEGER PRIMARY KEY, used INTEGER NOT NULL)")
  conn.execute(f"CREATE INDEX IF NOT EXISTS {_USES_TABLE}_used ON {_USES_TABLE} (used)")
  tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
  for old in tables.intersection(_OLD_TABLES): conn.execute(f"DROP TABLE IF EXISTS {old}")
  _db_conn[(path, os.getpid())] = conn
  return conn

def _digest(kind: str, key: str, val: bytes) -> bytes:
  """The checksum of an entry, its kind and key included: a value moved under another key does not check out."""
  h = hashlib.blake2b(f"{kind}\0{key}\0".encode(), digest_size=16)
  h.update(val)
  return h.digest()

def _unpack(packed: bytes) -> bytes | None:
  try: return zlib.decompress(packed)
  except zlib.error: return None

def _write(conn: sqlite3.Connection, path: str, work: Callable[[], None]) -> None:
  """`work`, and the marks of the entries read since the last write, in one transaction (it takes the write lock at
  BEGIN, so two processes never both wait to upgrade a read lock)."""
  conn.execute("BEGIN IMMEDIATE")
  try:
    if touched := _touched.pop((path, os.getpid()), None):
      now = int(time.time() * 1000)
      conn.executemany(f"UPDATE {_USES_TABLE} SET used=? WHERE id=?", [(now, rowid) for rowid in touched])
    work()
    conn.execute("COMMIT")
  except BaseException:
    conn.execute("ROLLBACK")
    raise

def diskcache_get(kind: str, key: str) -> bytes | None:
  """The cached value, or None when absent, damaged (dropped, so that the caller builds it again), disabled
  (CACHELEVEL=0) or the database is unusable."""
  if CACHELEVEL.value == 0 or (path := cache_db_path()) in _db_off: return None
  try:
    conn = _db(path)
    row = conn.execute(f"SELECT rowid, val, digest FROM {DISKCACHE_TABLE} WHERE kind=? AND key=?",
                       (kind, key)).fetchone()
    if row is None: return None
    rowid, val, digest = row[0], _unpack(row[1]), bytes(row[2])
    if val is None or digest != _digest(kind, key, val):
      _write(conn, path, lambda: _delete(conn, rowid))
      if (path, kind) not in _db_reported:
        _db_reported.add((path, kind))
        print(f"lazytensor: cache database {path}: dropped corrupt {kind!r} entries; they are built again",
              file=sys.stderr)
      return None
    (touched := _touched.setdefault((path, os.getpid()), [])).append(rowid)
    if len(touched) >= _TOUCH_BATCH: _write(conn, path, lambda: None)
    return val
  except (sqlite3.Error, OSError) as e:
    _db_failed(path, e)
    return None

def diskcache_put(kind: str, key: str, val: bytes) -> None:
  if CACHELEVEL.value == 0 or (path := cache_db_path()) in _db_off: return
  try:
    conn = _db(path)
    _write(conn, path, lambda: _insert(conn, kind, key, val))
  except (sqlite3.Error, OSError) as e: _db_failed(path, e)

def _insert(conn: sqlite3.Connection, kind: str, key: str, val: bytes) -> None:
  packed, digest = zlib.compress(val), _digest(kind, key, val)
  if (row := conn.execute(f"SELECT rowid FROM {DISKCACHE_TABLE} WHERE kind=? AND key=?", (kind, key)).fetchone()):
    conn.execute(f"UPDATE {DISKCACHE_TABLE} SET val=?, digest=? WHERE rowid=?", (packed, digest, rowid := row[0]))
  else:
    rowid = conn.execute(f"INSERT INTO {DISKCACHE_TABLE} (kind, key, val, digest) VALUES (?, ?, ?, ?)",
                         (kind, key, packed, digest)).lastrowid
  conn.execute(f"INSERT OR REPLACE INTO {_USES_TABLE} (id, used) VALUES (?, ?)", (rowid, int(time.time() * 1000)))
  _evict(conn, CACHEDB_MB.value << 20)

def _delete(conn: sqlite3.Connection, rowid: int) -> None:
  conn.execute(f"DELETE FROM {DISKCACHE_TABLE} WHERE rowid=?", (rowid,))
  conn.execute(f"DELETE FROM {_USES_TABLE} WHERE id=?", (rowid,))

def _evict(conn: sqlite3.Connection, limit: int) -> None:
  """Past `limit` bytes of pages in use, the least recently used entries go (an index walk over those alone). In the
  caller's transaction: another process sees all of it or none."""
  (page_size,), (pages,), (free,) = (conn.execute(f"PRAGMA {p}").fetchone() for p in ("page_size", "page_count",
                                                                                      "freelist_count"))
  if (used := (pages - free) * page_size) <= limit: return
  excess, doomed = used - int(limit * _EVICT_TO), []
  for rowid, size in conn.execute(f"SELECT u.id, length(e.val) + length(e.key) + 64 FROM {_USES_TABLE} u JOIN "
                                  f"{DISKCACHE_TABLE} e ON e.rowid = u.id ORDER BY u.used"):
    doomed.append(rowid)
    if (excess := excess - size) <= 0: break
  for rowid in doomed: _delete(conn, rowid)

@atexit.register
def _close_at_exit() -> None:
  """Mark the entries this process read, and close its connections: the last one to close folds the write-ahead log
  into the database and removes it."""
  for (path, pid), conn in list(_db_conn.items()):
    if pid != os.getpid(): continue
    with contextlib.suppress(sqlite3.Error, OSError):
      if _touched.get((path, pid)) and path not in _db_off: _write(conn, path, lambda: None)
      conn.close()
