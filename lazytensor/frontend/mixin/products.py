"""Products of tensors as reduces over broadcast multiplies: numpy's matmul rules, and einsum's notation (terms,
labels, ellipses, the output) turned into contractions of two operands at a time."""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Protocol, Self, TypeVar

from lazytensor.dtype import DType, dtypes, promote_types
from lazytensor.frontend.autocast import low_precision
from lazytensor.helpers import ArgumentError

# the dims a reduction runs over: one, several or (None) all; methods take it as numpy's axis= or torch's dim=
Axis = int | Sequence[int] | None

class Operand(Protocol):
  """What a product needs of its operands: views, casts, products and sums. reduce.py's ReduceMixin, which builds
  matmul and einsum on this module, has all of it; naming the protocol instead keeps this module below reduce.py."""
  @property
  def shape(self) -> tuple[int, ...]: ...
  @property
  def ndim(self) -> int: ...
  @property
  def dtype(self) -> DType: ...
  def reshape(self, *sizes: Any, shape: Sequence[int | None] | int | None = None) -> Self: ...
  def permute(self, *axes: Any, order: Sequence[int] | None = None, dims: Sequence[int] | None = None) -> Self: ...
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Self: ...
  def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self: ...
  def cast(self, dtype: DType | str) -> Self: ...
  def __mul__(self, x: Any) -> Self: ...
  def sum(self, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None, *,
          dim: Axis = None) -> Self: ...
  def _sum_of_products(self, other: Self, axis: Axis, dtype: DType | None = None) -> Self: ...

TensorT = TypeVar("TensorT", bound=Operand)

# ---- einsum notation ----

def _einsum_term(term: str, formula: str) -> list[str]:
  """The subscripts of one operand: letters, and "..." as one entry."""
  out: list[str] = []
  rest = term
  while rest:
    if rest.startswith("..."):
      if "..." in out: raise ArgumentError(f"einsum: '...' appears twice in {term!r} of {formula!r}")
      out.append("...")
      rest = rest[3:]
    elif rest[0].isascii() and rest[0].isalpha():
      out.append(rest[0])
      rest = rest[1:]
    else: raise ValueError(f"einsum: {rest[0]!r} in {formula!r} is not a subscript; subscripts are letters a-z, A-Z "
                           "and '...'")
  return out

def _einsum_labels(t: TensorT, term: list[str], i: int, formula: str) -> tuple[TensorT, list[Any]]:
  """An operand with its dims labeled (letters; ints -k for the k-th dim from the end of its '...'), repeated
  letters replaced by their diagonal."""
  letters = [s for s in term if s != "..."]
  n_ell = t.ndim - len(letters)
  if n_ell < 0 or ("..." not in term and n_ell):
    raise ValueError(f"einsum: operand {i} of shape {t.shape} has {t.ndim} dims, but its subscripts "
                     f"{''.join(term)!r} in {formula!r} name {len(letters)}")
  labels: list[Any] = [lab for s in term for lab in (range(-n_ell, 0) if s == "..." else [s])]
  for dup in [s for s in dict.fromkeys(letters) if letters.count(s) > 1]:
    p = labels.index(dup)
    q = labels.index(dup, p + 1)
    if t.shape[p] != t.shape[q]:
      raise ValueError(f"einsum: subscript {dup} repeats in operand {i} with sizes {t.shape[p]} and {t.shape[q]}")
    t = t.diagonal(0, p, q)
    labels = [lab for j, lab in enumerate(labels) if j not in (p, q)] + [dup]
  return t, labels

def _einsum_output(rhs: str | None, terms: list[list[str]], n_ell: int, formula: str) -> list[Any]:
  ell = list(range(-n_ell, 0))
  letters = [s for term in terms for s in term if s != "..."]
  if rhs is None: return ell + sorted(s for s in set(letters) if letters.count(s) == 1)
  out = _einsum_term(rhs, formula)
  for s in out:
    if s != "..." and out.count(s) > 1: raise ValueError(f"einsum: output subscript {s} appears twice in {formula!r}")
    if s != "..." and s not in letters:
      raise ValueError(f"einsum: output subscript {s} of {formula!r} is in no operand")
  return [lab for s in out for lab in (ell if s == "..." else [s])]

def _einsum(formula: str, operands: list[TensorT]) -> TensorT:
  eq = formula.replace(" ", "")
  if eq.count("->") > 1: raise ValueError(f"einsum: {formula!r} has more than one '->'")
  lhs, rhs = eq.split("->") if "->" in eq else (eq, None)
  terms = [_einsum_term(term, formula) for term in lhs.split(",")]
  if len(terms) != len(operands):
    raise ValueError(f"einsum: {formula!r} has {len(terms)} operands, but {len(operands)} tensors were given")
  labeled = [_einsum_labels(t, term, i, formula) for i, (t, term) in enumerate(zip(operands, terms))]
  seen: dict[Any, int] = {}
  for t, labels in labeled:
    for lab, n in zip(labels, t.shape):
      if seen.get(lab, 1) != 1 and n not in (1, seen[lab]):
        name = lab if isinstance(lab, str) else "..."
        raise ArgumentError(f"einsum: subscript {name} has sizes {seen[lab]} and {n}, which do not broadcast, in "
                            f"{formula!r}")
      if n != 1 or lab not in seen: seen[lab] = n
  n_ell = max(sum(isinstance(lab, int) for lab in labels) for _, labels in labeled)
  output = _einsum_output(rhs, terms, n_ell, formula)
  dt = functools.reduce(promote_types, [t.dtype for t in operands])
  dt = dtypes.default_int if dt.is_bool else dt  # bools are counted, as torch sums them
  acc, acc_labels = labeled[0][0].cast(dt), labeled[0][1]
  for k in range(len(labeled)):
    # what later steps need, the output's labels first: after the last step the result is in the output's order
    needed = list(dict.fromkeys(output + [lab for _, labels in labeled[k + 1:] for lab in labels]))
    if k: acc, acc_labels = _contract(acc, acc_labels, labeled[k][0].cast(dt), labeled[k][1], needed)
    else: acc, acc_labels = _contract(acc, acc_labels, None, [], needed)
  return acc

def _contract(a: TensorT, a_labels: list[Any], b: TensorT | None, b_labels: list[Any],
              needed: list[Any]) -> tuple[TensorT, list[Any]]:
  """a times b (broadcast by label), summed over the labels not needed later: one kernel. The kept labels come in the
  order of `needed`, the summed ones last, as in matmul, so that the reduce reads along them."""
  union = a_labels + [lab for lab in b_labels if lab not in a_labels]
  keep = [lab for lab in needed if lab in union]
  summed = [lab for lab in union if lab not in needed]
  order = keep + summed
  def aligned(t: TensorT, labels: list[Any]) -> TensorT:
    mine = [lab for lab in order if lab in labels]
    moved = t.permute([labels.index(lab) for lab in mine])
    return moved.reshape([t.shape[labels.index(lab)] if lab in labels else 1 for lab in order])
  if b is None: return aligned(a, a_labels).sum(tuple(range(len(keep), len(order))), dtype=a.dtype), keep
  if not summed: return aligned(a, a_labels) * aligned(b, b_labels), keep
  return aligned(a, a_labels)._sum_of_products(aligned(b, b_labels), tuple(range(len(keep), len(order)))), keep

# ---- matmul ----

def _matmul(x: TensorT, w: TensorT, dtype: DType | None = None) -> TensorT:
  """numpy matmul: 1-D operands gain and then lose a dimension, batch dimensions broadcast; the result in `dtype`
  (by default the operands' promoted dtype)."""
  if not isinstance(w, type(x)): raise TypeError(f"matmul: expected a Tensor, got {type(w).__name__}")
  if x.ndim == 0 or w.ndim == 0:
    raise ArgumentError(f"matmul: both operands need at least 1 dimension, got {x.shape} and {w.shape}")
  a = x.reshape(1, x.shape[0]) if x.ndim == 1 else x
  b = w.reshape(w.shape[0], 1) if w.ndim == 1 else w
  if a.shape[-1] != b.shape[-2]:
    raise ArgumentError(f"matmul: shapes {x.shape} and {w.shape} do not align: {a.shape[-1]} != {b.shape[-2]}")
  batch_a, batch_b = a.shape[:-2], b.shape[:-2]
  nb = max(len(batch_a), len(batch_b))
  for da, db in zip((1,) * (nb - len(batch_a)) + batch_a, (1,) * (nb - len(batch_b)) + batch_b):
    if da != db and 1 not in (da, db):
      raise ArgumentError(f"matmul: shapes {x.shape} and {w.shape} have batch dimensions {batch_a} and {batch_b} "
                          "that do not broadcast")
  k, m = a.shape[-1], b.shape[-1]
  a, b = a.cast(low_precision(a.dtype)), b.cast(low_precision(b.dtype))  # autocast: float32 operands in half
  # (..., n, 1, k) * (..., 1, m, k) summed over k: one reduce kernel; the scheduler may read B from a re-laid copy
  # where the device's heuristics ask for one (engine/schedule.pack_operands)
  out = a.reshape(*a.shape[:-1], 1, k)._sum_of_products(b.transpose(-1, -2).reshape(*b.shape[:-2], 1, m, k), -1, dtype)
  if x.ndim == 1: out = out.reshape(*out.shape[:-2], m)
  if w.ndim == 1: out = out.reshape(*out.shape[:-1])
  return out
