"""Model state: finding parameters in plain Python objects, state dicts, and weights on disk in safetensors format;
and reading the checkpoints PyTorch writes (torch_load).

safetensors (https://github.com/huggingface/safetensors, the format only): 8 bytes of little-endian header length,
a JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
little-endian data. No pickle there.

torch.save's format (since torch 1.6): a zip archive holding `<name>/data.pkl`, a pickle whose tensors refer to raw
storages stored as `<name>/data/<key>`. It is read by an unpickler that builds only tensors, dicts, lists, tuples and
numbers (as torch.load(weights_only=True)): any other class a pickle names is refused, never imported.
"""
from __future__ import annotations

import collections
import json
import os
import pickle
import struct
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from lazytensor.dtype import DType, dtypes, from_storage, to_storage
from lazytensor.frontend.tensor import Tensor

SAFETENSORS_DTYPES: dict[str, DType] = {
  "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "I16": dtypes.int16, "U16": dtypes.uint16,
  "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64,
  "F16": dtypes.float16, "F32": dtypes.float32, "F64": dtypes.float64, "BF16": dtypes.bfloat16,
}
_NAMES = {dt: name for name, dt in SAFETENSORS_DTYPES.items()}
MAX_HEADER_BYTES = 100 << 20  # the reference implementation refuses headers past 100 MB too

class SafetensorsError(ValueError):
  """A file that is not a well-formed safetensors file; the message says what is wrong."""

# ---- finding parameters ----

def get_state_dict(obj: Any, prefix: str = "", seen: set[int] | None = None) -> dict[str, Tensor]:
  """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, by dotted name.

  >>> class Net:
  ...   def __init__(self): self.w, self.layers = Tensor.ones(2), [Tensor.zeros(3)]
  >>> sorted(get_state_dict(Net()))
  ['layers.0', 'w']
  """
  seen = set() if seen is None else seen
  if isinstance(obj, Tensor): return {prefix.rstrip("."): obj}
  if id(obj) in seen: return {}
  seen.add(id(obj))
  items: Iterable[tuple[Any, Any]]
  if isinstance(obj, dict): items = obj.items()
  elif isinstance(obj, (list, tuple)): items = enumerate(obj)
  elif hasattr(obj, "__dict__"): items = vars(obj).items()
  else: return {}
  out: dict[str, Tensor] = {}
  for k, v in items: out.update(get_state_dict(v, f"{prefix}{k}.", seen))
  return out

def get_parameters(obj: Any) -> list[Tensor]:
  """Every Tensor reachable from `obj` (each once), as optimizers take them."""
  unique: dict[int, Tensor] = {}
  for t in get_state_dict(obj).values(): unique.setdefault(id(t), t)
  return list(unique.values())

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True) -> None:
  """Copy `state_dict` into the model's tensors (in place). Strict: every key must exist on both sides."""
  own = get_state_dict(model)
  missing = sorted(set(own) - set(state_dict))
  unexpected = sorted(set(state_dict) - set(own))
  if strict and (missing or unexpected):
    raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
  for name, target in own.items():
    if name not in state_dict: continue
    value = state_dict[name]
    if value.shape != target.shape:
      raise ValueError(f"load_state_dict: {name} has shape {target.shape} in the model but {value.shape} in the state")
    if value.dtype != target.dtype:
      raise ValueError(f"load_state_dict: {name} has dtype {target.dtype} in the model but {value.dtype} in the state")
    target.assign(value.detach().to(target.device))  # a copy of the values: the target stays a leaf of its own
  targets = list(own.values())
  if targets: targets[0].realize(*targets[1:])

# ---- safetensors ----

def safe_save(tensors: dict[str, Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write tensors to `path` in safetensors format (written to a temporary file, then renamed into place)."""
  if not isinstance(tensors, dict):
    raise TypeError(f"safe_save: expected a dict of name -> Tensor, got {type(tensors).__name__}")
  header: dict[str, Any] = {}
  arrays: list[np.ndarray] = []
  offset = 0
  for name, t in tensors.items():
    if not isinstance(name, str) or name == "__metadata__":
      raise TypeError(f"safe_save: tensor names are strings other than '__metadata__', got {name!r}")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: {name!r} holds a {type(t).__name__}, not a Tensor")
    if t.dtype not in _NAMES: raise TypeError(f"safe_save: {name} has dtype {t.dtype}, which safetensors cannot store")
    arr = np.ascontiguousarray(to_storage(t.numpy(), t.dtype)).astype(t.dtype.np.newbyteorder("<"), copy=False)
    header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + arr.nbytes]}
    offset += arr.nbytes
    arrays.append(arr)
  if metadata: header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
  raw = json.dumps(header, separators=(",", ":")).encode()
  raw += b" " * (-len(raw) % 8)  # keep the data 8-byte aligned, as the reference writer does
  tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
  with open(tmp, "wb") as f:
    f.write(struct.pack("<Q", len(raw)))
    f.write(raw)
    for arr in arrays: f.write(arr.tobytes())
  os.replace(tmp, path)

def _read_header(data: memoryview, path: str) -> tuple[dict[str, Any], int]:
  if len(data) < 8: raise SafetensorsError(f"{path}: {len(data)} bytes is too short for a safetensors file")
  (n,) = struct.unpack("<Q", data[:8])
  if n > MAX_HEADER_BYTES or 8 + n > len(data):
    raise SafetensorsError(f"{path}: header length {n} does not fit in a file of {len(data)} bytes")
  try: header = json.loads(bytes(data[8:8 + n]).decode(), object_pairs_hook=_unique_keys)
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise SafetensorsError(f"{path}: header is not JSON: {e}") from None
  except KeyError as e: raise SafetensorsError(f"{path}: header names {e.args[0]!r} twice") from None
  if not isinstance(header, dict): raise SafetensorsError(f"{path}: header is not a JSON object")
  meta = header.get("__metadata__", {})
  if not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
    raise SafetensorsError(f"{path}: __metadata__ must map strings to strings, got {meta!r}")
  return header, 8 + n

def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  out: dict[str, Any] = {}
  for k, v in pairs:
    if k in out: raise KeyError(k)
    out[k] = v
  return out

def _check_entry(name: str, entry: Any, data_len: int, path: str) -> tuple[DType, tuple[int, ...], int, int]:
  if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
    raise SafetensorsError(f"{path}: entry {name!r} needs dtype, shape and data_offsets")
  if entry["dtype"] not in SAFETENSORS_DTYPES:
    raise SafetensorsError(f"{path}: {name!r} has dtype {entry['dtype']!r}; supported: {', '.join(SAFETENSORS_DTYPES)}")
  dt, shape, offs = SAFETENSORS_DTYPES[entry["dtype"]], entry["shape"], entry["data_offsets"]
  if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)):
    raise SafetensorsError(f"{path}: {name!r} has a bad shape {shape!r}")
  well_formed = isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)
  if not (well_formed and 0 <= offs[0] <= offs[1]):
    raise SafetensorsError(f"{path}: {name!r} has bad data_offsets {offs!r}")
  if offs[1] > data_len:
    raise SafetensorsError(f"{path}: {name!r} ends at byte {offs[1]} but the file has {data_len} bytes of data "
                           "(truncated?)")
  need = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
  if offs[1] - offs[0] != need:
    raise SafetensorsError(f"{path}: {name!r} of shape {tuple(shape)} {dt.name} needs {need} bytes, "
                           f"has {offs[1] - offs[0]}")
  return dt, tuple(shape), offs[0], offs[1]

def safe_load_metadata(path: str | os.PathLike) -> dict[str, str]:
  with open(path, "rb") as f: data = memoryview(f.read())
  header, _ = _read_header(data, os.fspath(path))
  return header.get("__metadata__", {})

def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
  """Read every tensor of a safetensors file; a truncated or malformed file raises SafetensorsError."""
  p = os.fspath(path)
  with open(p, "rb") as f: data = memoryview(f.read())
  header, start = _read_header(data, p)
  body = data[start:]
  entries = {name: _check_entry(name, entry, len(body), p) for name, entry in header.items() if name != "__metadata__"}
  _check_disjoint(entries, p)
  out: dict[str, Tensor] = {}
  for name, (dt, shape, begin, end) in entries.items():
    arr = np.frombuffer(body[begin:end], dtype=dt.np.newbyteorder("<")).reshape(shape)
    out[name] = Tensor(from_storage(arr.astype(dt.np, copy=True), dt), device=device, dtype=dt)
  return out

def _check_disjoint(entries: dict[str, tuple[DType, tuple[int, ...], int, int]], path: str) -> None:
  """No two tensors share bytes: a write to one loaded tensor must not be another's data on disk (and the reference
  reader refuses such files too)."""
  spans = sorted((begin, end, name) for name, (_, _, begin, end) in entries.items() if end > begin)
  for (_, end, name), (begin, _, other) in zip(spans, spans[1:]):
    if begin < end: raise SafetensorsError(f"{path}: {other!r} starts at byte {begin}, inside {name!r} (ends at {end})")

# ---- PyTorch checkpoints ----

TORCH_STORAGES: dict[str, DType] = {
  "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16,
  "BFloat16Storage": dtypes.bfloat16, "LongStorage": dtypes.int64, "IntStorage": dtypes.int32,
  "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8, "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
}

class TorchLoadError(ValueError):
  """A file that torch_load cannot read: not torch.save's zip format, damaged, or naming more than weights."""

@dataclass(frozen=True)
class _Storage:
  data: np.ndarray  # the storage's elements, as numpy holds the dtype (bfloat16 as its uint16 bits)
  dtype: DType

def _rebuild_parameter(data: Tensor, requires_grad: bool, backward_hooks: Any, *state: Any) -> Tensor: return data

class _TorchUnpickler(pickle.Unpickler):
  """Unpickles data.pkl: storages come from the archive, tensors are rebuilt from them, and nothing else is allowed
  to be constructed (find_class is the one way a pickle reaches code)."""
  def __init__(self, file: IO[bytes], archive: zipfile.ZipFile, prefix: str, path: str, device: str | None) -> None:
    super().__init__(file)
    self.archive, self.prefix, self.path, self.device = archive, prefix, path, device
    order = f"{prefix}/byteorder"
    self.big_endian = order in archive.namelist() and archive.read(order).strip() == b"big"
    self.storages: dict[str, _Storage] = {}

  def find_class(self, module: str, name: str) -> Any:
    if (module, name) == ("collections", "OrderedDict"): return collections.OrderedDict
    if module == "torch._utils" and name == "_rebuild_tensor_v2": return self._rebuild_tensor
    if module == "torch._utils" and name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
      return _rebuild_parameter
    if module == "torch" and name in TORCH_STORAGES: return TORCH_STORAGES[name]
    raise TorchLoadError(f"torch_load: {self.path} names {module}.{name}; only tensors, dicts, lists and numbers are "
                         "loaded (a checkpoint of weights, as torch.load(weights_only=True) reads)")

  def persistent_load(self, pid: Any) -> _Storage:
    if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], DType)):
      raise TorchLoadError(f"torch_load: {self.path} refers to {pid!r}, not a storage of a known dtype")
    _, dt, key, _, numel = pid
    if key not in self.storages:
      try: raw = self.archive.read(f"{self.prefix}/data/{key}")
      except KeyError: raise TorchLoadError(f"torch_load: {self.path} has no storage {key!r}") from None
      if len(raw) < numel * dt.itemsize:
        raise TorchLoadError(f"torch_load: storage {key!r} of {self.path} has {len(raw)} bytes, needs "
                             f"{numel * dt.itemsize} ({numel} {dt.name})")
      arr = np.frombuffer(raw, dtype=dt.np.newbyteorder(">" if self.big_endian else "<"), count=numel)
      self.storages[key] = _Storage(arr.astype(dt.np), dt)
    return self.storages[key]

  def _rebuild_tensor(self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                      *_: Any) -> Tensor:
    last = offset + sum((n - 1) * st for n, st in zip(size, stride)) if all(size) else offset - 1
    if offset < 0 or len(size) != len(stride) or min(stride, default=0) < 0 or last >= len(storage.data):
      raise TorchLoadError(f"torch_load: a tensor of {self.path} (size {size}, stride {stride}, offset {offset}) lies "
                           f"outside its storage of {len(storage.data)} elements")
    view = np.lib.stride_tricks.as_strided(storage.data[offset:], shape=size,
                                           strides=tuple(st * storage.data.itemsize for st in stride), writeable=False)
    return Tensor(from_storage(view.copy(), storage.dtype), device=self.device, dtype=storage.dtype)

def torch_load(path: str | os.PathLike, device: str | None = None) -> Any:
  """Read a file written by torch.save (a state dict, or any nesting of dicts, lists and tensors) without torch:
  every torch tensor becomes a Tensor on `device` (views of one storage become separate copies). A pickle that
  names any other class raises TorchLoadError, and so does the legacy (pre-1.6, non-zip) format.

  >>> import torch, tempfile, os
  >>> f = os.path.join(tempfile.mkdtemp(), "w.pt")
  >>> torch.save({"w": torch.arange(6.0).reshape(2, 3)}, f)
  >>> torch_load(f)["w"].tolist()
  [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
  """
  p = os.fspath(path)
  if not zipfile.is_zipfile(p):
    raise TorchLoadError(f"torch_load: {p} is not a zip archive: only torch.save's format since torch 1.6 is read "
                         "(re-save it with torch.save in a recent torch)")
  with zipfile.ZipFile(p) as archive:
    pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pickles) != 1: raise TorchLoadError(f"torch_load: {p} holds {len(pickles)} data.pkl files, expected one")
    prefix = pickles[0].rsplit("/", 1)[0]
    with archive.open(pickles[0]) as f:
      try: return _TorchUnpickler(f, archive, prefix, p, device).load()
      except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
        if isinstance(e, TorchLoadError): raise
        raise TorchLoadError(f"torch_load: {p} has a damaged data.pkl: {e}") from None
