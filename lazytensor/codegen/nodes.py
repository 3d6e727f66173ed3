"""Small builders of loop-level nodes that the lowerer (codegen/lowerer.py) and the tensor-core lowering
(codegen/tensor_cores.py) share: index constants, grid and block indices, sums of bits, gated loads and stores."""
from __future__ import annotations

from lazytensor.dtype import DType, dtypes
from lazytensor.helpers import prod
from lazytensor.opt.kernel import AxisKind
from lazytensor.uop.ops import Ops, UOp
from lazytensor.uop.sint import sint
from lazytensor.uop.symbolic import simplify

LOOP_KINDS = (AxisKind.GLOBAL, AxisKind.REDUCE)  # the axes that are loops or grid indices, not lanes or threads

def index_const(v: sint) -> UOp: return v if isinstance(v, UOp) else UOp.const(dtypes.index, v)

def divisor(n: int, low_most: int, high_most: int) -> int | None:
  """The smallest divisor d of n with n // d <= low_most and d <= high_most, if any."""
  return next((d for d in range(-(-n // low_most), min(n, high_most) + 1) if n % d == 0), None)

def specials(prefix: str, axes: list[int], shape: tuple[int, ...], most: tuple[int, ...] | None = None,
              limit: int = 3) -> dict[int, UOp]:
  """Grid or block indices for some axes; the fastest-varying (last) axis gets index 0. Past `limit` dims,
  the leading axes share one index, split back with div/mod. A dim over its size limit in `most` (a grid of more
  than 2**31 - 1 blocks) takes a free dim for its high part when a divisor allows; else the renderer rejects it."""
  if not axes: return {}
  groups = [[a] for a in axes[-(limit - 1):]] if len(axes) >= limit else [[a] for a in axes]
  if len(axes) >= limit: groups = [axes[:len(axes) - (limit - 1)]] + groups
  out: dict[int, UOp] = {}
  free = len(groups)
  for dim, group in enumerate(reversed(groups)):
    sizes, total = [shape[a] for a in group], prod(shape[a] for a in group)
    if most is not None and total > most[dim] and free < limit and (high := divisor(total, most[dim], most[free])):
      special = UOp(Ops.SPECIAL, dtypes.index, (), (f"{prefix}{dim}", total // high)) + \
        UOp(Ops.SPECIAL, dtypes.index, (), (f"{prefix}{free}", high)) * (total // high)
      free += 1
    else: special = UOp(Ops.SPECIAL, dtypes.index, (), (f"{prefix}{dim}", total))
    for j, a in enumerate(group):
      inner = prod(sizes[j + 1:])
      idx = special // inner if inner > 1 else special
      out[a] = idx % sizes[j] if j > 0 else idx
  return out

def bits_sum(x: UOp, weights: list[int]) -> UOp:
  """The sum of weights[b] over the bits b set in x: each run of bits whose weights double is one (x // 2^b) % 2^n."""
  out, b = index_const(0), 0
  while b < len(weights):
    n = 1
    while b + n < len(weights) and weights[b + n] == weights[b] << n: n += 1
    if weights[b]: out = out + (x // (1 << b)) % (1 << n) * weights[b]
    b += n
  return simplify(out)

def gated_load(buf: UOp, dtype: DType, idx: UOp, valid: UOp) -> UOp:
  if valid.op is Ops.CONST and valid.arg is True: return UOp(Ops.LOAD, dtype, (buf, idx))
  return UOp(Ops.LOAD, dtype, (buf, idx, valid, UOp.const(dtype, 0)))

def gated_store(buf: UOp, idx: UOp, value: UOp, valid: UOp, atomic: Ops | None = None) -> UOp:
  """A store where valid holds; with `atomic` (an op), buf[idx] = buf[idx] atomic value as one atomic update."""
  if valid.op is Ops.CONST and valid.arg is True: return UOp(Ops.STORE, dtypes.void, (buf, idx, value), atomic)
  return UOp(Ops.STORE, dtypes.void, (buf, idx, value, valid), atomic)
