"""dtypes: promotion (as torch), weak Python scalars, numpy conversion both ways, casts and bitcasts."""
import itertools
from typing import Any

import numpy as np
import pytest
from helpers import HAVE_TORCH, SUPPORTED, check_op, named, torch, torch_dtype

from lazytensor import Tensor, dtypes
from lazytensor.dtype import DType, promote_types, to_dtype

B, I8, U8, I16, I32, I64, F16, F32, F64 = SUPPORTED

# torch.promote_types for the supported dtypes, written out so that the test means something without torch;
# row <= column, the table is symmetric
_PROMOTION_ROWS = """
      bool  int8  uint8 int16 int32 int64 f16   f32   f64
bool  bool  int8  uint8 int16 int32 int64 f16   f32   f64
int8  -     int8  int16 int16 int32 int64 f16   f32   f64
uint8 -     -     uint8 int16 int32 int64 f16   f32   f64
int16 -     -     -     int16 int32 int64 f16   f32   f64
int32 -     -     -     -     int32 int64 f16   f32   f64
int64 -     -     -     -     -     int64 f16   f32   f64
f16   -     -     -     -     -     -     f16   f32   f64
f32   -     -     -     -     -     -     -     f32   f64
f64   -     -     -     -     -     -     -     -     f64
"""

def _promotion_table() -> dict[tuple[DType, DType], DType]:
  names = {"f16": "float16", "f32": "float32", "f64": "float64"}
  rows = [line.split() for line in _PROMOTION_ROWS.strip().splitlines()]
  cols = [to_dtype(names.get(c, c)) for c in rows[0]]
  table: dict[tuple[DType, DType], DType] = {}
  for row in rows[1:]:
    a = to_dtype(names.get(row[0], row[0]))
    for b, cell in zip(cols, row[1:]):
      if cell != "-": table[(a, b)] = table[(b, a)] = to_dtype(names.get(cell, cell))
  return table

PROMOTION = _promotion_table()
PAIRS = list(itertools.product(SUPPORTED, SUPPORTED))

def test_promotion_table_is_torchs() -> None:
  if not HAVE_TORCH: pytest.skip("torch is not installed")
  for a, b in PAIRS:
    assert PROMOTION[(a, b)].name == str(torch.promote_types(torch_dtype(a), torch_dtype(b))).removeprefix("torch.")

@pytest.mark.parametrize("a,b", PAIRS, ids=str)
def test_promote_types(a: DType, b: DType) -> None:
  assert promote_types(a, b) == PROMOTION[(a, b)]
  ta, tb = Tensor(np.ones((2, 1), a.np)), Tensor(np.ones(3, b.np))
  for out in (ta * tb, tb * ta, ta.maximum(tb), ta.where(ta, tb)):
    assert out.dtype == PROMOTION[(a, b)], (a, b, out.dtype)

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
@pytest.mark.parametrize("a,b", PAIRS, ids=str)
def test_promotion_with_a_0d_tensor(a: DType, b: DType) -> None:
  # a 0-d tensor is weak against one with dims, as torch's: int8 (3,) + 0-d int32 is int8 (it was int32)
  ta, tb = Tensor(np.ones(3, a.np)), Tensor(np.ones((), b.np))
  ra, rb = torch.ones(3, dtype=torch_dtype(a)), torch.ones((), dtype=torch_dtype(b))
  for out, ref in ((ta * tb, ra * rb), (tb * ta, rb * ra), (ta.maximum(tb), torch.maximum(ra, rb)),
                   (Tensor([True, False, True]).where(tb, ta), torch.where(torch.tensor([True, False, True]), rb, ra))):
    assert out.dtype.name == str(ref.dtype).removeprefix("torch."), (a, b, out.dtype, ref.dtype)

@pytest.mark.skipif(not HAVE_TORCH, reason="torch is the reference")
def test_ops_computed_in_float_convert_each_operand() -> None:
  # int8 / 1000 is 0.1: each operand becomes float from its own value (1000 was wrapped to int8 first: -4.17)
  i8, u8 = np.array([100, -7], np.int8), np.array([6, 200], np.uint8)
  def args(lib: Any, pair: tuple[Any, Any]) -> list[Any]:
    return [(Tensor(v) if lib is Tensor else torch.from_numpy(v)) if isinstance(v, np.ndarray) else v for v in pair]
  for pair in ((i8, 1000), (u8, -300), (i8, np.array(1000, np.int32)), (u8, np.array(-300, np.int16)), (300, u8)):
    a, b = args(Tensor, pair)
    ta, tb = args(torch, pair)
    np.testing.assert_allclose((a / b).numpy(), (ta / tb).numpy(), rtol=1e-6)
    if isinstance(a, Tensor): np.testing.assert_array_equal(a.copysign(b).numpy(), torch.copysign(ta, tb).numpy())

@pytest.mark.parametrize("a,b", PAIRS, ids=str)
def test_mixed_dtype_values(a: DType, b: DType) -> None:
  # small non-negative values that every dtype holds: the kernel converts both inputs before adding
  check_op([(2, 1), (3,)], lambda x, y: x + y if not (a == b == B) else x | y, dtype=[a, b], low=0, high=3)

SCALARS: list[Any] = [True, 2, -1, 2.5, np.float64(0.5), np.int32(3)]

@pytest.mark.parametrize("dtype", SUPPORTED, ids=str)
def test_python_scalars_are_weak(dtype: DType) -> None:
  t = Tensor(np.ones(2, dtype.np))
  for s in SCALARS:
    want = _weak_result(dtype, s)
    for out in (t * s, s * t, t + s, t.maximum(s) if not isinstance(s, np.generic) else t * s):
      assert out.dtype == want, (dtype, s, out.dtype, want)
    if HAVE_TORCH: assert want.name == str((torch.ones(2, dtype=torch_dtype(dtype)) * s).dtype).removeprefix("torch.")

def _weak_result(dtype: DType, s: Any) -> DType:
  """A scalar lifts the tensor's category (bool < int < float) to its default dtype, never widens within it."""
  s = s.item() if isinstance(s, np.generic) else s
  rank = {"b": 0, "i": 1, "u": 1, "f": 2}
  skind = "b" if isinstance(s, bool) else "i" if isinstance(s, int) else "f"
  if rank[skind] <= rank[dtype.kind]: return dtype
  return {"i": I64, "f": F32}[skind]

def ones(dt: DType) -> Tensor: return Tensor(np.ones(3, dt.np))

@pytest.mark.parametrize("name,make,want", named([
  ("int32 + 0.5", lambda: ones(I32) + 0.5, F32), ("float16 * 2.0", lambda: ones(F16) * 2.0, F16),
  ("bool + 1", lambda: ones(B) + 1, I64), ("uint8 + int8", lambda: ones(U8) + ones(I8), I16),
  ("int8 + 1000", lambda: ones(I8) + 1000, I8), ("uint8 - 1", lambda: ones(U8) - 1, U8),
  ("bool * 2.5", lambda: ones(B) * 2.5, F32), ("int64 / 2", lambda: ones(I64) / 2, F32),
  ("int32 // 2", lambda: ones(I32) // 2, I32), ("float64 + 1", lambda: ones(F64) + 1, F64),
  ("float16 + int64", lambda: ones(F16) + ones(I64), F16), ("uint8 * bool", lambda: ones(U8) * ones(B), U8),
  ("int32 ** 2", lambda: ones(I32) ** 2, I32), ("int32 ** 0.5", lambda: ones(I32) ** 0.5, F32),
  ("bool & True", lambda: ones(B) & True, B), ("2.0 ** int32", lambda: 2.0 ** ones(I32), F32)]))
def test_promotion_examples(name: str, make: Any, want: DType) -> None:
  out = make()
  assert out.dtype == want
  assert out.numpy().dtype == want.np

# ---- numpy conversion ----

# numpy has no bfloat16 (test_bfloat16.py covers it)
@pytest.mark.parametrize("dtype", [dt for dt in dtypes.all() if dt != dtypes.bfloat16], ids=str)
def test_numpy_roundtrip_every_dtype(dtype: DType) -> None:
  assert dtypes.from_np(dtype.np) == dtype and to_dtype(dtype.np) == dtype and to_dtype(dtype.name) == dtype
  info = np.finfo(dtype.np) if dtype.is_float else np.iinfo(dtype.np) if dtype.is_int else None
  arr = np.array([0, 1, 1] + ([info.min, info.max] if info is not None else []), dtype=dtype.np)
  for a in (arr, arr[::-1], arr.reshape(1, -1)[:, 1:], np.asarray(arr[1]), arr[:0]):
    t = Tensor(a)
    assert t.dtype == dtype and t.shape == a.shape
    out = t.numpy()
    assert out.dtype == a.dtype and out.shape == a.shape
    np.testing.assert_array_equal(out, a)

@pytest.mark.parametrize("dtype", SUPPORTED, ids=str)
def test_numpy_of_computed_every_dtype(dtype: DType) -> None:
  # a kernel's output buffer of each dtype, read back
  x = Tensor(np.array([[0, 1], [2, 3]]).astype(dtype.np))
  out = x.T.contiguous().numpy()
  assert out.dtype == dtype.np
  np.testing.assert_array_equal(out, np.array([[0, 2], [1, 3]]).astype(dtype.np))

@pytest.mark.parametrize("name,want", [("float", F32), ("half", F16), ("double", F64), ("long", I64), ("int", I32),
                                       ("short", I16), ("char", I8), ("bool", B), ("uint8", U8)])
def test_dtype_names_and_aliases(name: str, want: DType) -> None:
  assert to_dtype(name) == want and getattr(dtypes, name) == want
  assert Tensor([1, 2], dtype=name).dtype == want

def test_dtype_properties() -> None:
  assert F16.is_float and not F16.is_int and U8.is_unsigned and U8.is_int and B.is_bool and not B.is_int
  assert (I8.min(), I8.max(), U8.min(), U8.max()) == (-128, 127, 0, 255)
  assert I64.max() == 2 ** 63 - 1 and F32.itemsize == 4 and dtypes.default_float == F32 and dtypes.default_int == I64
  assert repr(F32) == "dtypes.float32" and len({*dtypes.all()}) == len(dtypes.all())

# ---- casts ----

CAST_VALUES = [0, 1, 3, 100, 127]  # held exactly by every supported dtype (bool: non-zero is True)

@pytest.mark.parametrize("src", SUPPORTED, ids=str)
def test_cast_matrix(src: DType) -> None:
  x = np.array(CAST_VALUES).astype(src.np)
  for dst in SUPPORTED:
    out = Tensor(x).cast(dst)
    assert out.dtype == dst
    np.testing.assert_array_equal(out.numpy(), x.astype(dst.np), err_msg=f"{src} -> {dst}")

@pytest.mark.parametrize("dst", [I8, I16, I32, I64], ids=str)
def test_float_to_int_truncates(dst: DType) -> None:
  x = np.array([-2.7, -2.5, -0.9, -0.0, 0.4, 0.5, 2.5, 2.7, 99.99, -100.5], np.float32)
  check_op([x], lambda t: t.cast(dst) if isinstance(t, Tensor) else t.to(torch_dtype(dst)),
           np_fn=lambda a: a.astype(dst.np), out_dtype=dst)

def test_float_to_unsigned_in_range() -> None:
  # negative floats to unsigned ints are undefined in C (and differ between numpy and torch): only in-range values
  x = np.array([0.0, 0.9, 1.5, 200.7, 255.0], np.float32)
  check_op([x], lambda t: t.cast(U8), np_fn=lambda a: a.astype(np.uint8), use_torch=False, out_dtype=U8)

@pytest.mark.parametrize("src", [F32, F16, F64, I32, U8, I64], ids=str)
def test_cast_to_bool(src: DType) -> None:
  vals = [0, 1, -1, 2, 0.5, -0.0, np.inf, np.nan] if src.is_float else [0, 1, 2, 255 if src == U8 else -1]
  x = np.array(vals).astype(src.np)
  check_op([x], lambda t: t.cast(B) if isinstance(t, Tensor) else t.to(torch.bool), np_fn=lambda a: a.astype(bool),
           out_dtype=B)

@pytest.mark.parametrize("dst", [F32, F16, I32, U8, I64], ids=str)
def test_cast_from_bool(dst: DType) -> None:
  check_op([np.array([True, False, True])], lambda t: t.cast(dst) if isinstance(t, Tensor) else t.to(torch_dtype(dst)),
           np_fn=lambda a: a.astype(dst.np), out_dtype=dst)

@pytest.mark.parametrize("src,dst,vals", [
  (I32, U8, [300, -1, 255, 256]), (I64, I32, [2 ** 40 + 5, -(2 ** 33), 7]), (U8, I8, [200, 128, 127]),
  (I16, I8, [-129, 1000]), (I32, F16, [70000, -70000, 2049]), (F64, F32, [1e40, -1e40, 1e-50, 0.1]),
  (F32, F16, [65520.0, 1e-8, 0.1, -3.0e5]), (I64, F32, [2 ** 24 + 1, -(2 ** 40) - 1])], ids=str)
def test_narrowing_casts(src: DType, dst: DType, vals: list[Any]) -> None:
  x = np.array(vals).astype(src.np)
  with np.errstate(all="ignore"): want = x.astype(dst.np)
  out = Tensor(x).cast(dst)
  assert out.dtype == dst
  np.testing.assert_array_equal(out.numpy(), want)

@pytest.mark.parametrize("src", [F32, F16, F64], ids=str)
@pytest.mark.parametrize("dst", [I32, I64, U8, I8, B], ids=str)
def test_nan_inf_to_int_does_not_crash(src: DType, dst: DType) -> None:
  with np.errstate(over="ignore"): x = Tensor(np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 1.0]).astype(src.np))
  out = x.cast(dst).numpy()  # the values are unspecified (as in C, numpy and torch); only the finite one is checked
  assert out.dtype == dst.np and out.shape == (6,) and out[-1] == 1

@pytest.mark.parametrize("src,dst",
                         [(F32, I32), (I32, F32), (F32, "uint32"), (F16, I16), (I16, F16), (U8, I8), (F64, I64),
                                     (B, U8)], ids=str)
def test_bitcast(src: DType, dst: Any) -> None:
  x = np.array([0, 1, 3, 100]).astype(src.np)
  dst = to_dtype(dst)
  out = Tensor(x).bitcast(dst)
  assert out.dtype == dst
  np.testing.assert_array_equal(out.numpy(), x.view(dst.np))
  computed = Tensor(x).maximum(Tensor(x))  # a kernel's value rather than a buffer's
  np.testing.assert_array_equal(computed.bitcast(dst).numpy(), x.view(dst.np))

def test_cast_methods() -> None:
  t = Tensor([1.5, -2.5])
  assert (t.int().dtype, t.long().dtype, t.half().dtype, t.double().dtype, t.bool().dtype) == (I32, I64, F16, F64, B)
  assert t.int().float().tolist() == [1.0, -2.0] and t.cast("float32") is t
  assert Tensor(np.ones(2, np.int16), dtype=F32).dtype == F32 and Tensor(Tensor([1, 2]), dtype=U8).dtype == U8
