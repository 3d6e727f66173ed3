"""Caches that cannot grow without bound, stall or hand back a damaged entry: this process's caches of programs,
binaries and schedules keep at most PROGRAM_CACHE / SCHEDULE_CACHE entries and free what they drop; the disk cache
keeps CACHEDB_MB, gives up on a database another process holds locked after a short wait, stores object code once,
and rebuilds any entry that does not check out."""
from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
import weakref
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lazytensor import Context, Device, Tensor, helpers
from lazytensor.codegen import program
from lazytensor.codegen.program import ProgramSpec
from lazytensor.engine import realize
from lazytensor.helpers import DISKCACHE_TABLE, diskcache_get, diskcache_put
from lazytensor.opt.kernel import Kernel
from lazytensor.opt.search_cache import cached_kernel
from lazytensor.runtime.device import _compile_memo, compile_stats
from lazytensor.schedule import cache as schedule_cache
from lazytensor.schedule.scheduler import create_schedule

_consts = itertools.count(1)
x = np.arange(64, dtype=np.float32)

@pytest.fixture(autouse=True)
def kernel_per_constant() -> Iterator[None]:
  """fresh() makes a kernel never built by giving it a new constant: one that would otherwise become a kernel argument
  (SCALAR_ARGS) and reuse the kernel."""
  with Context(SCALAR_ARGS=0): yield

def fresh() -> tuple[Tensor, np.ndarray, float]:
  """An expression whose kernel this process has never built (its constant is new), its value and its constant."""
  c = 3.0 + next(_consts) / 1024
  return Tensor(x) * c, x * np.float32(c), c

def entries(db: Path, kind: str, packed: bool = False) -> dict[str, bytes]:
  """The values of a kind's entries (as stored, compressed, when `packed`)."""
  with contextlib.closing(sqlite3.connect(db)) as conn:
    rows = conn.execute(f"SELECT key, val FROM {DISKCACHE_TABLE} WHERE kind=?", (kind,)).fetchall()
  return {key: val if packed else zlib.decompress(val) for key, val in rows}

def in_use(db: Path) -> int:
  """Bytes of the database's pages that hold entries (freed pages are reused, not counted)."""
  with contextlib.closing(sqlite3.connect(db)) as conn:
    (size,), (pages,), (free,) = (conn.execute(f"PRAGMA {p}").fetchone() for p in ("page_size", "page_count",
                                                                                  "freelist_count"))
  return (pages - free) * size

def newest_program() -> weakref.ref:
  """A weak reference to the program this process loaded last."""
  return weakref.ref(realize._runners.entries[next(reversed(realize._runners.entries))].program)

@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
  """A cache database of the test's own, and connections and failures of its own."""
  monkeypatch.setattr(helpers, "_db_conn", {})
  monkeypatch.setattr(helpers, "_db_off", set())
  path = tmp_path / "cache.db"
  with Context(CACHEDB=str(path)): yield path

# ---- this process's caches ----

def test_in_memory_caches_keep_program_cache_entries_and_free_the_rest(db: Path) -> None:
  with Context(PROGRAM_CACHE=4, SCHEDULE_CACHE=4):
    t, want, _ = fresh()
    np.testing.assert_allclose(t.numpy(), want)
    first = newest_program()
    for _ in range(10):
      t, want, _ = fresh()
      np.testing.assert_allclose(t.numpy(), want)
    for cache in (realize._runners, _compile_memo, schedule_cache.templates, schedule_cache.structures):
      assert len(cache) <= 4
    assert realize._memo.cache_info().currsize <= 4  # type: ignore[attr-defined]
    gc.collect()
    assert first() is None, "a dropped program is freed (its MCJIT engine with it)"

def test_a_dropped_kernel_is_built_again_from_disk(db: Path) -> None:
  t0, want0, c0 = fresh()
  with Context(PROGRAM_CACHE=2):
    np.testing.assert_allclose(t0.numpy(), want0)
    for _ in range(4): fresh()[0].realize()
    stats = dict(compile_stats)
    np.testing.assert_allclose((Tensor(x) * c0).numpy(), want0)  # dropped from memory: read back, not compiled
  assert compile_stats["compiled"] == stats["compiled"] and compile_stats["disk"] == stats["disk"] + 1

def test_cudacpu_programs_are_closed_when_dropped(db: Path) -> None:
  with Context(PROGRAM_CACHE=1, DEV="CUDACPU"):
    t, want, c = fresh()
    np.testing.assert_allclose(t.numpy(), want)
    first = newest_program()
    fresh()[0].realize()
    gc.collect()
    assert first() is None
    np.testing.assert_allclose((Tensor(x) * c).numpy(), want)  # opened again from the disk cache

# ---- the disk cache: bounded, least recently used first, shared by processes ----

def test_disk_cache_stays_within_cachedb_mb(db: Path) -> None:
  rng = np.random.default_rng(0)
  blobs = [rng.bytes(16 << 10) for _ in range(200)]  # 3.2 MB that do not compress
  with Context(CACHEDB_MB=1):
    for i, blob in enumerate(blobs): diskcache_put("test", f"k{i}", blob)
    assert in_use(db) <= 1 << 20
    kept = entries(db, "test")
    assert 20 <= len(kept) < 64 and all(kept[f"k{i}"] == blobs[i] for i in range(190, 200))

def test_least_recently_used_entries_go_first(db: Path) -> None:
  blob = np.random.default_rng(1).bytes(16 << 10)  # does not compress
  with Context(CACHEDB_MB=1):
    for i in range(40): diskcache_put("test", f"k{i}", blob)
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
      conn.execute(f"UPDATE uses_v2 SET used = used - 3600000 WHERE id IN (SELECT rowid FROM {DISKCACHE_TABLE} "
                   "WHERE key IN ('k0', 'k1'))")  # an hour ago
    assert diskcache_get("test", "k1") == blob  # read now: used again
    for i in range(40, 80): diskcache_put("test", f"k{i}", blob)
    kept = entries(db, "test")
  assert "k0" not in kept and "k2" not in kept and "k1" in kept and "k79" in kept

def test_processes_share_a_bounded_cache(db: Path) -> None:
  script = textwrap.dedent(f"""
    import os, sys
    from lazytensor import Context
    from lazytensor.helpers import diskcache_get, diskcache_put
    with Context(CACHEDB={str(db)!r}, CACHEDB_MB=1):
      for i in range(150):
        diskcache_put("test", f"{{sys.argv[1]}}{{i}}", os.urandom(16 << 10))
        assert diskcache_get("test", f"{{sys.argv[1]}}{{i}}") is not None
    print("ok")
  """)
  env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
  procs = [subprocess.Popen([sys.executable, "-c", script, name], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for name in "ab"]
  for p in procs:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and out.strip() == "ok" and "unusable" not in err, err
  assert in_use(db) <= 1 << 20

def test_processes_that_meet_kernels_in_another_order_share_programs(db: Path) -> None:
  # three kernels of one shape, named E_16, E_16n1 and E_16n2 in the order a process meets them: the names differ
  # between the two processes, their programs' keys and code must not
  script = textwrap.dedent(f"""
    import json, sys
    import numpy as np
    from lazytensor import Context, Tensor
    from lazytensor.engine import realize
    from lazytensor.runtime.device import compile_stats
    x = np.arange(16, dtype=np.float32)
    exprs = [(lambda t: t * 3, x * 3), (lambda t: t + 5, x + 5), (lambda t: t * t - 1, x * x - 1)]
    names = {{}}
    with Context(CACHEDB={str(db)!r}):
      for i in map(int, sys.argv[1]):
        build, want = exprs[i]
        np.testing.assert_allclose(build(Tensor(x)).numpy(), want)
        names[i] = list(realize._runners.entries.values())[-1].display_name
    print(json.dumps({{"names": names, "compiled": compile_stats["compiled"]}}))
  """)
  env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
  runs = []
  for order in ("012", "210"):
    done = subprocess.run([sys.executable, "-c", script, order], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    runs.append(json.loads(done.stdout))
  first, second = runs
  assert first["names"] != second["names"] and len(set(first["names"].values())) == 3
  assert first["compiled"] == 3 and second["compiled"] == 0

@pytest.mark.parametrize("when", ["before this process opens it", "after this process opened it"])
def test_a_locked_cache_costs_seconds_not_minutes(db: Path, when: str, capsys: pytest.CaptureFixture[str]) -> None:
  if when.startswith("after"): fresh()[0].realize()
  holder = sqlite3.connect(db, isolation_level=None)  # another process's connection would lock it alike
  holder.execute("BEGIN EXCLUSIVE")
  try:
    start = time.perf_counter()
    for _ in range(3):
      t, want, _ = fresh()
      np.testing.assert_allclose(t.numpy(), want)
    assert time.perf_counter() - start < 5.0
  finally: holder.close()
  assert capsys.readouterr().err.count("unusable") == 1

# ---- entries stored once, and checked ----

def test_object_code_is_stored_once(db: Path) -> None:
  fresh()[0].realize()
  [lib] = entries(db, "compile").values()
  [program] = entries(db, "program").values()
  assert lib not in program and ProgramSpec.from_json(program.decode()).source

def _lowered_again(monkeypatch: pytest.MonkeyPatch) -> list[str]:
  lowered: list[str] = []
  real = program.get_program
  def counting(k: Kernel, name: str) -> ProgramSpec:
    lowered.append(name)
    return real(k, name)
  monkeypatch.setattr(program, "get_program", counting)
  return lowered

@pytest.mark.parametrize("damage", [{"core_count": 0}, {"core_count": -1}, {"core_count": "2"},
                                    {"global_size": [0, 1, 1]}, {"local_size": [1, 1]}])
def test_a_program_entry_out_of_range_is_built_again(db: Path, damage: dict, monkeypatch: pytest.MonkeyPatch) -> None:
  t, want, c = fresh()
  np.testing.assert_allclose(t.numpy(), want)
  [(key, raw)] = entries(db, "program").items()
  spec = json.loads(raw)
  spec["launch"].update(damage)
  diskcache_put("program", key, json.dumps(spec).encode())  # its checksum is right: its fields are checked
  realize.forget_programs()
  lowered = _lowered_again(monkeypatch)
  np.testing.assert_allclose((Tensor(x) * c).numpy(), want)
  assert len(lowered) == 1

@pytest.mark.parametrize("kind", ["program", "compile"])
def test_a_damaged_entry_is_dropped_and_built_again(db: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
  t, want, c = fresh()
  np.testing.assert_allclose(t.numpy(), want)
  [(key, val)] = entries(db, kind, packed=True).items()
  with contextlib.closing(sqlite3.connect(db)) as conn, conn:  # one bit flipped, the checksum left as it was
    conn.execute(f"UPDATE {DISKCACHE_TABLE} SET val=? WHERE kind=? AND key=?",
                 (val[:40] + bytes([val[40] ^ 1]) + val[41:], kind, key))
  realize.forget_programs()
  np.testing.assert_allclose((Tensor(x) * c).numpy(), want)
  assert f"dropped corrupt {kind!r} entries" in capsys.readouterr().err
  assert len(entries(db, kind)) == 1  # the dropped entry is stored again

@pytest.mark.parametrize("text", ['{"name": "E_1"}', '[1, 2]', "not json", '{"name": 3}'])
def test_program_specs_are_checked_field_by_field(text: str) -> None:
  with pytest.raises(ValueError, match="not a ProgramSpec"): ProgramSpec.from_json(text)

@pytest.mark.parametrize("raw", [b'[["NOPE", 0, 2]]', b'[["UPCAST", 0, 999]]', b'[["UPCAST", "0", 2]]', b"{}"])
def test_beam_entries_that_do_not_replay_are_searched_again(db: Path, raw: bytes) -> None:
  a = Tensor(np.ones((16, 16), np.float32)).realize()
  k = Kernel(create_schedule([a.sum(1).lazydata])[0][-1].ast, Device["CPU"].renderer)
  diskcache_put("beam", "key", raw)
  assert cached_kernel("beam", "key", k) is None
