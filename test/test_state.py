"""State dicts and safetensors files: round trips, interop with the safetensors package, and bad files."""
import os

import numpy as np
import pytest

from lazytensor import Tensor, dtypes
from lazytensor.nn.state import SafetensorsError, get_parameters, get_state_dict, load_state_dict, safe_load, safe_save

try:
  import safetensors.numpy as st_numpy
except ImportError:
  st_numpy = None

class Block:
  def __init__(self) -> None:
    self.weight = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    self.bias = Tensor(np.zeros(3, dtype=np.float32))

class Model:
  def __init__(self) -> None:
    self.blocks = [Block(), Block()]
    self.head = {"w": Tensor(np.ones((3, 1), dtype=np.float16))}
    self.step = Tensor(np.array([7], dtype=np.int64))
    self.alias = self.blocks[0].weight  # the same tensor reachable twice is one parameter

def test_state_dict_names_and_parameters() -> None:
  m = Model()
  names = get_state_dict(m)
  assert sorted(names) == ["alias", "blocks.0.bias", "blocks.0.weight", "blocks.1.bias", "blocks.1.weight", "head.w",
                           "step"]
  assert len(get_parameters(m)) == 6

def test_roundtrip_every_dtype(tmp_path) -> None:
  tensors = {dt.name: Tensor(np.arange(6).reshape(2, 3) % 2 == 0 if dt == dtypes.bool else np.arange(6).reshape(2, 3),
                             dtype=dt) for dt in dtypes.all()}
  path = tmp_path / "all.safetensors"
  safe_save(tensors, path, metadata={"format": "pt"})
  loaded = safe_load(path)
  for name, t in tensors.items():
    assert loaded[name].dtype == t.dtype and loaded[name].shape == t.shape
    np.testing.assert_array_equal(loaded[name].numpy(), t.numpy())

@pytest.mark.skipif(st_numpy is None, reason="the safetensors package is not installed")
def test_interop_with_the_safetensors_package(tmp_path) -> None:
  ours = tmp_path / "ours.safetensors"
  safe_save({"a": Tensor([[1.0, 2.0]]), "b": Tensor([1, 2, 3], dtype=dtypes.int32)}, ours)
  theirs = st_numpy.load_file(str(ours))
  np.testing.assert_array_equal(theirs["a"], [[1.0, 2.0]])
  assert theirs["b"].dtype == np.int32
  path = tmp_path / "theirs.safetensors"
  st_numpy.save_file({"x": np.arange(12, dtype=np.float16).reshape(3, 4), "y": np.array([True, False])}, str(path))
  back = safe_load(path)
  np.testing.assert_array_equal(back["x"].numpy(), np.arange(12, dtype=np.float16).reshape(3, 4))
  assert back["y"].tolist() == [True, False]

def test_load_state_dict_and_its_errors(tmp_path) -> None:
  m, other = Model(), Model()
  other.blocks[1].bias = Tensor(np.full(3, 5.0, dtype=np.float32))
  path = tmp_path / "m.safetensors"
  safe_save(get_state_dict(other), path)
  load_state_dict(m, safe_load(path))
  assert m.blocks[1].bias.tolist() == [5.0, 5.0, 5.0]
  bad = dict(get_state_dict(other))
  bad["blocks.0.bias"] = Tensor(np.zeros(4, dtype=np.float32))
  with pytest.raises(ValueError, match=r"blocks\.0\.bias.*\(3,\).*\(4,\)"): load_state_dict(m, bad)
  del bad["blocks.0.bias"]
  with pytest.raises(KeyError, match="blocks.0.bias"): load_state_dict(m, bad)
  load_state_dict(m, bad, strict=False)

def test_safe_save_names_the_entry_that_is_not_a_tensor(tmp_path) -> None:
  with pytest.raises(TypeError, match=r"safe_save: 'a' holds a list, not a Tensor"):
    safe_save({"a": [1, 2]}, tmp_path / "x.safetensors")  # type: ignore[dict-item]
  with pytest.raises(TypeError, match=r"tensor names are strings .* got 3"):
    safe_save({3: Tensor([1.0])}, tmp_path / "x.safetensors")  # type: ignore[dict-item]
  with pytest.raises(TypeError, match=r"expected a dict of name -> Tensor"):
    safe_save([Tensor([1.0])], tmp_path / "x.safetensors")  # type: ignore[arg-type]
  assert not (tmp_path / "x.safetensors").exists()

def _two_tensor_file(path, header_edit) -> None:  # type: ignore[no-untyped-def]
  """A file of a (4 float32) and b (2 float32) whose JSON header is passed through `header_edit` first."""
  safe_save({"a": Tensor(np.arange(4, dtype=np.float32)), "b": Tensor(np.ones(2, dtype=np.float32))}, path)
  raw = path.read_bytes()
  n = int.from_bytes(raw[:8], "little")
  header = header_edit(raw[8:8 + n].decode().rstrip()).encode()
  header += b" " * (-len(header) % 8)
  path.write_bytes(len(header).to_bytes(8, "little") + header + raw[8 + n:])

HEADER_DAMAGES = {
  "overlapping data_offsets": (lambda h: h.replace("[16,24]", "[8,16]"), r"'b' starts at byte 8, inside 'a'"),
  "offsets past the data": (lambda h: h.replace("[16,24]", "[16,32]"), r"ends at byte 32 .* 24 bytes"),
  "size not shape x dtype": (lambda h: h.replace('"shape":[2]', '"shape":[3]'), r"needs 12 bytes, has 8"),
  "unknown dtype": (lambda h: h.replace('"F32","shape":[2]', '"F31","shape":[2]'), r"dtype 'F31'; supported"),
  "a boolean in the shape": (lambda h: h.replace('"shape":[2]', '"shape":[true,2]'), r"bad shape"),
  "a name twice": (lambda h: h.replace('"b":', '"a":'), r"names 'a' twice"),
  "metadata that is not strings": (lambda h: h[:-1] + ',"__metadata__":{"k":1}}', r"__metadata__ must map"),
}

@pytest.mark.parametrize("damage", HEADER_DAMAGES)
def test_safe_load_refuses_headers_that_do_not_add_up(tmp_path, damage: str) -> None:
  edit, message = HEADER_DAMAGES[damage]
  path = tmp_path / "x.safetensors"
  _two_tensor_file(path, edit)
  with pytest.raises(SafetensorsError, match=message): safe_load(path)

DAMAGES = ["truncate_data", "truncate_header", "garbage", "bad_json", "bad_dtype", "bad_offsets"]

@pytest.mark.parametrize("damage", DAMAGES)
def test_malformed_files_raise_clear_errors(tmp_path, damage: str) -> None:
  path = tmp_path / "x.safetensors"
  safe_save({"a": Tensor(np.arange(100, dtype=np.float32))}, path)
  raw = path.read_bytes()
  n = int.from_bytes(raw[:8], "little")
  header = raw[8:8 + n]
  damaged = {
    "truncate_data": raw[:-10], "truncate_header": raw[:12], "garbage": os.urandom(64),
    "bad_json": raw[:8] + b"{" + header[1:-1] + b"!" + raw[8 + n:],
    "bad_dtype": raw[:8] + header.replace(b'"F32"', b'"Q32"') + raw[8 + n:],
    "bad_offsets": raw[:8] + header.replace(b"[0,400]", b"[0,404]") + raw[8 + n:],
  }[damage]
  path.write_bytes(damaged)
  with pytest.raises(SafetensorsError): safe_load(path)

def test_loaded_parameters_train_as_leaves() -> None:
  # values that require grad (another model's parameters) are copied: the loaded model's parameters, handed to an
  # optimizer after the load, get gradients (they used to get none, the gradient flowing to the source's tensors)
  src = Tensor([1.0, 2.0], requires_grad=True)
  class M:
    def __init__(self) -> None: self.w = Tensor([0.0, 0.0])
  m = M()
  load_state_dict(m, {"w": src.contiguous().realize()})
  m.w.requires_grad = True
  (m.w * Tensor([3.0, 4.0])).sum().backward()
  assert m.w.grad is not None and m.w.grad.tolist() == [3.0, 4.0] and src.grad is None
