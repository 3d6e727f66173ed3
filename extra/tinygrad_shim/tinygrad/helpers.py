"""tinygrad.helpers names that tinygrad's tests and programs import, mapped onto lazytensor's knobs and helpers."""
from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from lazytensor.helpers import (
  DEBUG,
  JIT,
  NOOPT,
  Allowed,
  Context,
  all_same,
  dedup,
  ensure_cache_dir,
  flatten,
  prod,
)
from lazytensor.helpers import ContextVar as _Knob
from lazytensor.helpers import colored as _colored

__all__ = ["DEBUG", "JIT", "NOOPT", "Context", "ContextVar", "all_same", "dedup", "flatten", "prod", "getenv", "CI",
           "IMAGE", "TRANSCENDENTAL", "CPU_LLVM", "AMD_LLVM", "EMULATE", "OSX", "colored", "fetch", "get_child",
           "trange", "tqdm", "Timing"]

def getenv(key: str, default: object = 0) -> object:
  raw = os.environ.get(key)
  if raw is None: return default
  return type(default)(raw) if not isinstance(default, str) else raw

# backend switches of tinygrad's that have no counterpart here: off
CI, IMAGE, TRANSCENDENTAL, CPU_LLVM, AMD_LLVM, EMULATE, OSX = False, 0, 0, 0, 0, "", False

_TINYGRAD_RANGE = Allowed(lambda v: True, "(any: tinygrad declares no range)")

class ContextVar(_Knob):
  """tinygrad's ContextVar(key, default): a lazytensor knob whose help text says it was declared by tinygrad code.
  Declaring a key twice gives the knob declared first (lazytensor's own, for DEBUG and its other knobs), as
  tinygrad's does."""
  def __new__(cls, key: str, default: Any, help: str = "") -> Any:
    known = _Knob.registry.get(key)  # not `or`: a knob is falsy when its value is
    return known if known is not None else super().__new__(cls)

  def __init__(self, key: str, default: Any, help: str = "") -> None:
    # tinygrad declares no range: any value of the default's type is taken
    if key not in _Knob.registry:
      super().__init__(key, default, help or f"{key}: a knob declared by tinygrad code", _TINYGRAD_RANGE)

def colored(st: str, color: str | None, background: bool = False) -> str:
  """tinygrad's colored(st, color): ANSI colors on a terminal (background is drawn as the bright color)."""
  return _colored(st, color, bright=background)

def get_child(obj: Any, key: str) -> Any:
  """The object at a dotted path ("layers.0.weight"): numbers index sequences, names index dicts or read attributes."""
  for k in key.split("."):
    obj = obj[int(k)] if k.isnumeric() else obj[k] if isinstance(obj, dict) else getattr(obj, k)
  return obj

def fetch(url: str, name: str | pathlib.Path | None = None, subdir: str | None = None,
          allow_caching: bool = True) -> pathlib.Path:
  """The file at `url`, downloaded once into lazytensor's cache directory (CACHEDIR/downloads) and read from there
  after; an absolute `name` is where to put it. Without network access a file not cached yet raises URLError."""
  if isinstance(name, pathlib.Path) or (name is not None and os.path.isabs(name)): path = pathlib.Path(name)
  else:
    folder = ensure_cache_dir() / "downloads" / (subdir or "")
    path = folder / (name or hashlib.md5(url.encode()).hexdigest())
  if path.is_file() and allow_caching: return path
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".part")
  with urllib.request.urlopen(url, timeout=30) as response, open(tmp, "wb") as f: shutil.copyfileobj(response, f)
  tmp.replace(path)  # a whole file or none: an interrupted download leaves no truncated cache entry
  return path

def tqdm(iterable: Any = None, desc: str = "", total: int | None = None, disable: bool = False) -> Iterator[Any]:
  """tinygrad's tqdm, as a plain iteration: lazytensor draws no progress bars."""
  del desc, total, disable  # accepted for tinygrad's signature
  yield from iterable if iterable is not None else ()

def trange(n: int, **kwargs: Any) -> Iterator[int]:
  """tinygrad's trange(n): range(n) through tqdm."""
  return tqdm(range(n), total=n, **kwargs)

class Timing:
  """tinygrad's `with Timing("step "):` prints the block's wall time in ms (on_exit(ns) may add text to it)."""
  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True) -> None:
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled

  def __enter__(self) -> Timing:
    self.start = time.perf_counter_ns()
    return self

  def __exit__(self, *exc: object) -> None:
    self.elapsed = time.perf_counter_ns() - self.start
    extra = self.on_exit(self.elapsed) if self.on_exit else ""
    if self.enabled: print(f"{self.prefix}{self.elapsed * 1e-6:6.2f} ms{extra}")
