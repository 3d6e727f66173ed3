"""BEAM search's disk cache (opt/search.py): the chosen opts of a kernel as JSON rows, under a key that names
everything the choice depends on (`beam_cache_key`), and the sibling key of its loop structure alone
(`shape_signature`). A corrupt row is reported once and searched again.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from lazytensor.codegen.program import program_key
from lazytensor.helpers import CACHELEVEL, diskcache_get, diskcache_put
from lazytensor.opt.kernel import Kernel, Opt, OptOps
from lazytensor.opt.search_actions import replay
from lazytensor.runtime.device import Compiled
from lazytensor.uop.ops import GroupOp


def beam_cache_key(device: Compiled, width: int, what: bytes) -> str:
  return program_key(device.renderer, device.compiler.cache_key, what, ("BEAM", width))

def shape_signature(k: Kernel) -> bytes:
  """The loop structure of a kernel without its arithmetic: shape, axis kinds, how each buffer is walked."""
  access = [(n.op.name, n.src[0].dtype.name, st.shape, st.real_strides()) for n, st in zip(k.view_nodes, k.sts)
            if n.op in GroupOp.Load | GroupOp.Store]
  return repr((k.full_shape, [kind.name for kind in k.kinds], access)).encode()

def encode_opts(opts: Sequence[Opt]) -> bytes: return json.dumps([[o.op.name, o.axis, o.amt] for o in opts]).encode()

def decode_opts(raw: bytes) -> list[Opt] | None:
  """The opts of a cache row, or None when the row is not what encode_opts writes."""
  try:
    rows = json.loads(raw)
    assert isinstance(rows, list) and all(isinstance(r, list) and len(r) == 3 for r in rows)
    assert all(isinstance(a, (int, type(None))) and isinstance(n, int) for _, a, n in rows)
    return [Opt(OptOps[name], axis, amt) for name, axis, amt in rows]
  except (ValueError, KeyError, TypeError, AssertionError): return None

_reported: set[str] = set()

def report_once(msg: str) -> None:
  if msg not in _reported:
    _reported.add(msg)
    print(f"lazytensor: {msg}", file=sys.stderr)

def cached_kernel(table: str, key: str, k: Kernel) -> Kernel | None:
  if CACHELEVEL.value < 2 or (raw := diskcache_get(table, key)) is None: return None
  if (opts := decode_opts(raw)) is None:
    report_once(f"BEAM cache: ignoring corrupt entries in table {table!r}; they are searched again")
    return None
  return replay(k, opts)

def cache_put(table: str, key: str, k: Kernel) -> None:
  if CACHELEVEL.value >= 2: diskcache_put(table, key, encode_opts(k.applied_opts))
