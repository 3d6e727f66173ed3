"""The one IR of lazytensor: the interned UOp node (its opcodes in `uop/opcodes.py`), UPat patterns, PatternMatcher
and graph_rewrite.

The same node type describes three levels of the compiler:
  * the tensor graph (BUFFER, CONST, VIEW, ALU ops, REDUCE_AXIS, COPY, CONTIGUOUS, ASSIGN), built by Tensor;
  * the kernel AST (SINK of STOREs of ALU/REDUCE_AXIS trees over LOADs through VIEWs; GATHER and SCATTER read and
    write at an index the kernel computes), built by the scheduler;
  * the loop-level program (RANGE, SPECIAL, LOAD/STORE with index math, REDUCE, DEFINE_ACC, ...), built by the lowerer
    and put in order by the linearizer.
"""
from __future__ import annotations

import contextvars
import hashlib
import inspect
import itertools
import math
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from lazytensor.dtype import DType, PtrDType, dtypes, truncate
from lazytensor.helpers import DEBUG, DEBUGPASS, PASSES, colored
from lazytensor.uop.bounds import bounds
from lazytensor.uop.opcodes import GroupOp, Ops

# where a value lives: one device, or a tuple of devices for a value spread over several (sharded or replicated); on a
# mesh of devices (frontend/mixin/multi.DeviceMesh), a tuple of such tuples, one per slice along the first mesh axis
DeviceLike = str | tuple["DeviceLike", ...]

def identity_element(op: Ops, dt: DType) -> Any:
  """The value a reduction starts from: 0 for ADD, 1 for MUL, the lowest value of the dtype for MAX."""
  if op is Ops.ADD: return truncate(dt, 0)
  if op is Ops.MUL: return truncate(dt, 1)
  assert op is Ops.MAX, f"no identity for {op}"
  return dt.min()

# ---- the node ----

T = TypeVar("T")

class node_cached(Generic[T]):
  """functools.cached_property without its lock: Python 3.11 takes one at each first read, and an eager op reads the
  shape, device and toposort of each new node once. Nodes are immutable: two threads that compute a value agree."""
  def __init__(self, fn: Callable[[Any], T]) -> None: self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__
  def __get__(self, obj: Any, cls: Any = None) -> T:
    if obj is None: return self  # type: ignore[return-value]  # the descriptor itself, for help() and docs tools
    value = obj.__dict__[self.name] = self.fn(obj)
    return value

class _InternRef(weakref.ref):
  """The intern table's reference to a node, which knows its own key: one object per node, where a callback closing
  over the key would add a function and a cell for the garbage collector to track."""
  __slots__ = ("key",)
  key: tuple

def _forget(ref: _InternRef) -> None:
  # the entry goes with its node (one lookup of the key), unless a node of this structure made after this one died
  # holds it now
  if (entry := _uop_cache.pop(ref.key, None)) is not ref and entry is not None: _uop_cache[ref.key] = entry

# the intern table: structure -> weak reference; a node lives as long as something holds it
_uop_cache: dict[tuple, _InternRef] = {}
_ASSIGN = Ops.ASSIGN  # read at every node made: a module global, where an enum member is a class attribute lookup

class UOp:
  """An immutable, interned node: constructing an equal node returns the existing object.

  `reads` and `writes` are bit masks of the memory a tensor graph reads (its BUFFER nodes) and assigns to (the targets
  of its ASSIGN nodes), one bit per device Buffer (Buffer.memory_bit, set on a BUFFER node when it is given its
  memory). They are ORed together as nodes are built, so whether a graph reads what an assign overwrites is one AND,
  not a walk of the graph."""
  __slots__ = ("op", "dtype", "src", "arg", "reads", "writes", "__weakref__", "__dict__")
  op: Ops
  dtype: DType
  src: tuple[UOp, ...]
  arg: Any
  reads: int
  writes: int

  def __new__(cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
    # 0.0 == -0.0 and nan != nan: floats are keyed by their text so that each constant interns to one node
    key = (op, dtype.ident, src, type(arg), repr(arg) if isinstance(arg, float) else arg)
    try: ref = _uop_cache.get(key)
    except TypeError as e: raise TypeError(f"UOp arg must be hashable, got {arg!r}") from e
    if ref is not None and (hit := ref()) is not None: return hit
    self = object.__new__(cls)
    _set_op(self, op)
    _set_dtype(self, dtype)
    _set_src(self, src)
    _set_arg(self, arg)
    reads = writes = 0
    for s in src:
      reads |= s.reads
      writes |= s.writes
    # an assign writes the memory its target reads
    _set_reads(self, reads)
    _set_writes(self, writes | src[0].reads if op is _ASSIGN else writes)
    ref = _uop_cache[key] = _InternRef(self, _forget)
    ref.key = key
    return self

  def __setattr__(self, name: str, value: Any) -> None:
    if name in ("op", "dtype", "src", "arg"): raise AttributeError("UOp is immutable; use replace()")
    object.__setattr__(self, name, value)

  def __reduce__(self) -> tuple:
    return (UOp, (self.op, self.dtype, self.src, self.arg))

  def replace(self, **kwargs: Any) -> UOp:
    new = (kwargs.pop("op", self.op), kwargs.pop("dtype", self.dtype), kwargs.pop("src", self.src),
           kwargs.pop("arg", self.arg))
    assert not kwargs, f"replace: unknown fields {list(kwargs)}"
    return UOp(*new)

  # ---- graph walking ----

  @property
  def toposort(self) -> dict[UOp, None]:
    """Every node this one depends on, itself last, each after its sources: a new dict on each read, as the node keeps
    only the nodes below it (one that held a dict holding itself would be in a reference cycle, and its graph, device
    buffers included, would outlive its last user until the garbage collector ran: 120-160 MiB a training step)."""
    out = self.below.copy()
    out[self] = None
    return out

  @node_cached
  def below(self) -> dict[UOp, None]:
    """Every node this one depends on, not itself, each after its sources (iterative: graphs get deep)."""
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(s, False) for s in reversed(self.src)]
    while stack:
      node, expanded = stack.pop()
      if node in out: continue
      if expanded:
        out[node] = None
        continue
      stack.append((node, True))
      for s in reversed(node.src):  # a loop, not a generator: a call per node (a backward walks every node)
        if s not in out: stack.append((s, False))
    return out

  def reaches(self, node: UOp) -> bool:
    """Whether `node` is in this node's graph (itself included), without building its toposort."""
    return node is self or node in self.below

  def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
    """Replace nodes by identity (no pattern matching), rebuilding everything above them."""
    done: dict[UOp, UOp] = {}
    for node in self.toposort:
      if node in mapping: done[node] = mapping[node]
      else:
        new_src = tuple(done[s] for s in node.src)
        done[node] = node if new_src == node.src else node.replace(src=new_src)
    return done[self]

  @node_cached
  def key(self) -> bytes:
    """A content hash that is stable across processes: the key of on-disk caches."""
    h = hashlib.sha256()
    h.update(repr((self.op, self.dtype, self.arg, tuple(s.key for s in self.src))).encode())
    return h.digest()

  # ---- tensor-graph properties ----

  @node_cached
  def shape(self) -> tuple[int, ...]:
    return _shape_rules.get(self.op, _shape_of_first_src)(self)

  @property
  def ndim(self) -> int: return len(self.shape)
  @property
  def size(self) -> int: return math.prod(self.shape)

  @node_cached
  def device(self) -> DeviceLike:
    """Where the value lives: a device name, or a tuple of them for a value spread over several (Ops.MULTI)."""
    if self.op is Ops.BUFFER: return self.arg[0]
    if self.op is Ops.MULTI: return tuple(s.device for s in self.src)
    if self.op in (Ops.DEVICE, Ops.COPY): return self.arg
    assert self.src, f"{self.op} has no device"
    return self.src[0].device

  @property
  def base(self) -> UOp: return self.src[0].base if self.op is Ops.VIEW or self.op in GroupOp.Movement else self
  @property
  def st(self) -> Any: return self.arg if self.op is Ops.VIEW else None

  # ---- building ----

  @staticmethod
  def const(dtype: DType, value: Any) -> UOp:
    if dtype.count > 1: return UOp(Ops.VECTORIZE, dtype, (UOp.const(dtype.scalar(), value),) * dtype.count)
    return UOp(Ops.CONST, dtype, (), truncate(dtype, value))

  def const_like(self, value: Any) -> UOp: return UOp.const(self.dtype, value)

  def alu(self, op: Ops, *srcs: UOp | int | float | bool) -> UOp:
    # a loop, not a comprehension (a function call on Python 3.11): every elementwise op of a Tensor comes here
    usrcs = [self]
    for s in srcs: usrcs.append(s if isinstance(s, UOp) else self.const_like(s))
    out_dtype = dtypes.bool.vec(self.dtype.count) if op in GroupOp.Comparison else usrcs[-1].dtype
    return UOp(op, out_dtype, tuple(usrcs))

  # `is` first: a DType's == is a Python call (a dataclass's), and most casts a tensor op asks for are to its own dtype
  def cast(self, dtype: DType) -> UOp:
    return self if self.dtype is dtype or self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.BITCAST, dtype, (self,))
  def where(self, a: UOp | int | float, b: UOp | int | float) -> UOp:
    av = a if isinstance(a, UOp) else (b.const_like(a) if isinstance(b, UOp) else UOp.const(dtypes.from_py(a), a))
    return UOp(Ops.WHERE, av.dtype, (self, av, b if isinstance(b, UOp) else av.const_like(b)))
  def lt(self, x: UOp | int | float) -> UOp: return self.alu(Ops.CMPLT, x)
  def ne(self, x: UOp | int | float) -> UOp: return self.alu(Ops.CMPNE, x)
  def eq(self, x: UOp | int | float) -> UOp: return self.ne(x).logical_not()
  def logical_not(self) -> UOp: return self.alu(Ops.CMPNE, True)
  def maximum(self, x: UOp | int | float) -> UOp: return self.alu(Ops.MAX, x)
  def minimum(self, x: UOp | int | float) -> UOp: return -((-self).maximum(-x if isinstance(x, UOp) else -x))

  def __neg__(self) -> UOp: return UOp(Ops.NEG, self.dtype, (self,))
  def __add__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.ADD, x)
  def __radd__(self, x: int | float) -> UOp: return self.const_like(x).alu(Ops.ADD, self)
  def __sub__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.SUB, x)
  def __rsub__(self, x: int | float) -> UOp: return self.const_like(x).alu(Ops.SUB, self)
  def __mul__(self, x: UOp | int | float) -> UOp: return self.alu(Ops.MUL, x)
  def __rmul__(self, x: int | float) -> UOp: return self.const_like(x).alu(Ops.MUL, self)
  def __floordiv__(self, x: UOp | int) -> UOp: return self.alu(Ops.IDIV, x)
  def __mod__(self, x: UOp | int) -> UOp: return self.alu(Ops.MOD, x)
  def __truediv__(self, x: UOp | float) -> UOp: return self.alu(Ops.FDIV, x)
  def __and__(self, x: UOp | int | bool) -> UOp: return self.alu(Ops.AND, x)
  def __or__(self, x: UOp | int | bool) -> UOp: return self.alu(Ops.OR, x)
  def __xor__(self, x: UOp | int | bool) -> UOp: return self.alu(Ops.XOR, x)
  def __lshift__(self, x: UOp | int) -> UOp: return self.alu(Ops.SHL, x)
  def __rshift__(self, x: UOp | int) -> UOp: return self.alu(Ops.SHR, x)
  def __lt__(self, x: UOp | int | float) -> UOp: return self.lt(x)
  def __gt__(self, x: UOp | int | float) -> UOp: return (x if isinstance(x, UOp) else self.const_like(x)).lt(self)
  def __ge__(self, x: UOp | int | float) -> UOp: return self.lt(x).logical_not()
  def __le__(self, x: UOp | int | float) -> UOp: return self.__gt__(x).logical_not()
  # identity is structural equality because nodes are interned; comparisons above build nodes, so keep hashing by id
  __hash__ = object.__hash__
  def __eq__(self, other: object) -> bool: return self is other
  def __bool__(self) -> bool:
    # a comparison that its Variables' ranges decide has that truth value (`if start_pos > 0:` for a start_pos in
    # [1, 127], as tinygrad's programs branch); one they do not decide would depend on the value bound at each call
    if self.dtype != dtypes.bool: raise TypeError(f"a UOp has no truth value: {self.op}")
    lo, hi = self.vmin_vmax
    if lo != hi:
      raise ValueError(f"the truth value of {render_index(self)} depends on the values its Variables are bound to "
                       "(their ranges do not decide it); compare their values, a bound Variable's .val")
    return bool(lo)

  def gep(self, i: int) -> UOp:
    if self.dtype.count == 1: return self
    if self.op is Ops.VECTORIZE: return self.src[i]
    return UOp(Ops.GEP, self.dtype.scalar(), (self,), i)

  # ---- Variables (uop/sint.py) ----

  def bind(self, value: int) -> UOp:
    """This Variable with its value for one call (a BIND node); ValueError for a value outside its range."""
    if self.op is not Ops.DEFINE_VAR or not isinstance(self.arg, tuple):
      raise TypeError(f"bind: only a Variable can be bound, not {self.op}")
    name, lo, hi = self.arg
    if isinstance(value, bool) or not isinstance(value, int) and not hasattr(value, "__index__"):
      raise TypeError(f"Variable {name!r}: bind takes an int, got {value!r}")
    if not lo <= (value := int(value)) <= hi:
      raise ValueError(f"Variable {name!r} bound to {value}: expected {lo} <= value <= {hi}")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, value)))

  def unbind(self) -> tuple[UOp, int]:
    """(the Variable, its value) of a BIND."""
    assert self.op is Ops.BIND, f"unbind of {self.op}"
    return self.src[0], int(self.src[1].arg)

  @property
  def val(self) -> int:
    """The value of a bound Variable (tinygrad's name: code branches on it, `if start_pos.val == 0`)."""
    if self.op is not Ops.BIND: raise TypeError(f"val: only a bound Variable (v.bind(n)) has a value, not {self.op}")
    return self.unbind()[1]

  # ---- symbolic bounds ----

  @node_cached
  def vmin_vmax(self) -> tuple[Any, Any]: return bounds(self)
  @property
  def vmin(self) -> Any: return self.vmin_vmax[0]
  @property
  def vmax(self) -> Any: return self.vmin_vmax[1]

  # ---- printing ----

  def __repr__(self) -> str:
    # a symbolic dimension prints as its expression, so that shapes read (1, 4, start_pos+1)
    if self.dtype is dtypes.index and self.op in _INDEX_EXPR and all(u.op in _INDEX_EXPR for u in self.toposort):
      return render_index(self)
    return pretty_print(self)

# the slots' own setters, past the immutability of __setattr__: half the time of object.__setattr__, which looks the
# name up in the class first (66 vs 152 ns; an eager op makes a few nodes, six fields each)
_set_op, _set_dtype, _set_src = UOp.op.__set__, UOp.dtype.__set__, UOp.src.__set__  # type: ignore[attr-defined]
_set_arg, _set_reads, _set_writes = UOp.arg.__set__, UOp.reads.__set__, UOp.writes.__set__  # type: ignore[attr-defined]

V = TypeVar("V")

class NodeMap(Generic[V]):
  """A map from nodes to values, kept on each node under `attr`: an entry lives as long as its node, as in a
  WeakKeyDictionary, but a lookup is a dict read where the WeakKeyDictionary builds a weak reference (an eager op looks
  up each node of its graph a few times)."""
  def __init__(self, attr: str) -> None: self.attr = attr
  def get(self, node: UOp) -> V | None: return node.__dict__.get(self.attr)
  def __getitem__(self, node: UOp) -> V: return node.__dict__[self.attr]
  def __setitem__(self, node: UOp, value: V) -> None: node.__dict__[self.attr] = value
  def __contains__(self, node: UOp) -> bool: return self.attr in node.__dict__

def _shape_of_first_src(u: UOp) -> tuple[int, ...]:
  for s in u.src:
    if s.op is not Ops.DEVICE: return s.shape
  return ()

def _reduce_shape(u: UOp) -> tuple[int, ...]:
  axes = u.arg[1]
  return tuple(1 if i in axes else s for i, s in enumerate(u.src[0].shape))

def _multi_shape(u: UOp) -> tuple[int, ...]:
  axis, bounds = u.arg
  shape = u.src[0].shape
  return shape if axis is None else shape[:axis] + (sum(hi - lo for lo, hi in bounds),) + shape[axis + 1:]

# folds a symbolic dimension that shape rules compute ((v+1)-v -> 1): uop/sint.ssimplify, which registers itself here
# (it builds on the symbolic rules, which build on this module)
dim_folders: list[Callable[[Any], Any]] = []

def _dim(x: Any) -> Any: return x if not isinstance(x, UOp) or not dim_folders else dim_folders[0](x)

_shape_rules: dict[Ops, Callable[[UOp], tuple[int, ...]]] = {
  Ops.BUFFER: lambda u: (u.arg[1],), Ops.IOTA: lambda u: (u.arg,), Ops.CONST: lambda u: (), Ops.DEVICE: lambda u: (),
  Ops.DEFINE_VAR: lambda u: (), Ops.BIND: lambda u: (),
  Ops.VIEW: lambda u: u.arg.shape, Ops.REDUCE_AXIS: _reduce_shape, Ops.MULTI: _multi_shape,
  Ops.RESHAPE: lambda u: u.arg, Ops.EXPAND: lambda u: u.arg, Ops.FLIP: lambda u: u.src[0].shape,
  Ops.PERMUTE: lambda u: tuple(u.src[0].shape[i] for i in u.arg),
  Ops.PAD: lambda u: tuple(_dim(s + b + a) for s, (b, a) in zip(u.src[0].shape, u.arg)),
  Ops.SHRINK: lambda u: tuple(_dim(e - b) for b, e in u.arg),
}

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.CMPLT: "<"}

_INDEX_EXPR = {Ops.DEFINE_VAR, Ops.BIND, Ops.CONST, *GroupOp.ALU}

def render_index(x: UOp) -> str:
  """An index expression in its Variables' names (`start_pos+1`): how a symbolic dimension prints."""
  if x.op is Ops.CONST: return str(x.arg)
  if x.op is Ops.DEFINE_VAR: return str(x.arg[0]) if isinstance(x.arg, tuple) else f"var{x.arg}"
  if x.op is Ops.BIND: return render_index(x.src[0])
  if x.op is Ops.MUL and x.src[1].op is Ops.CONST and x.src[1].arg == -1: return f"-{_paren(x.src[0])}"
  if x.op is Ops.ADD and x.src[1].op is Ops.CONST and x.src[1].arg < 0:
    return f"{render_index(x.src[0])}-{-x.src[1].arg}"
  if x.op in _INFIX: return f"{_paren(x.src[0]) if x.op is not Ops.ADD else render_index(x.src[0])}{_INFIX[x.op]}" \
                            f"{_paren(x.src[1]) if x.op is not Ops.ADD else render_index(x.src[1])}"
  return f"{x.op.name.lower()}({', '.join(render_index(s) for s in x.src)})"

def _paren(x: UOp) -> str:
  s = render_index(x)
  return f"({s})" if x.op in _INFIX else s

def pretty_print(root: UOp, max_nodes: int = 400) -> str:
  """One line a node, shared nodes printed once and referred to by number."""
  nodes = list(root.toposort)
  if len(nodes) > max_nodes: return f"<UOp {root.op} {root.dtype} ({len(nodes)} nodes)>"
  names = {n: i for i, n in enumerate(nodes)}
  lines = []
  for n in nodes:
    srcs = ", ".join(f"%{names[s]}" for s in n.src)
    arg = "" if n.arg is None else f" arg={n.arg!r}"
    lines.append(f"%{names[n]} = {n.op.name} {n.dtype}{arg} ({srcs})")
  return "\n".join(lines)

# ---- patterns ----

_ANY = object()

class UPat:
  """A pattern over UOps. `src` as a tuple matches in order, as a list in any order, as a single UPat every source."""
  __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "custom_early_reject")

  def __init__(self, op: Ops | tuple[Ops, ...] | set[Ops] | None = None, dtype: DType | tuple[DType, ...] | None = None,
               src: UPat | tuple[UPat, ...] | list[UPat] | None = None, arg: Any = _ANY, name: str | None = None,
               allow_any_len: bool = False) -> None:
    self.op: tuple[Ops, ...] | None = (op,) if isinstance(op, Ops) else (tuple(op) if op is not None else None)
    self.dtype: tuple[DType, ...] | None = (dtype,) if isinstance(dtype, DType) else dtype
    self.arg, self.name, self.allow_any_len = arg, name, allow_any_len
    self.src: list[tuple[UPat, ...]] | UPat | None
    if isinstance(src, list): self.src = [tuple(p) for p in itertools.permutations(src)]
    elif isinstance(src, tuple): self.src = [src]
    else: self.src = src

  @staticmethod
  def var(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
    return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | tuple[DType, ...] | None = None) -> UPat:
    return UPat(Ops.CONST, dtype, name=name)
  @staticmethod
  def const(dtype: DType | tuple[DType, ...] | None, value: Any) -> UPat: return UPat(Ops.CONST, dtype, arg=value)

  def _alu(self, op: Ops, *others: UPat | int | float | bool) -> UPat:
    pats = [self] + [o if isinstance(o, UPat) else UPat(Ops.CONST, arg=o) for o in others]
    return UPat(op, src=pats if op in GroupOp.Commutative else tuple(pats))
  def __add__(self, x: UPat | int | float) -> UPat: return self._alu(Ops.ADD, x)
  def __mul__(self, x: UPat | int | float) -> UPat: return self._alu(Ops.MUL, x)
  def __sub__(self, x: UPat | int | float) -> UPat: return self._alu(Ops.SUB, x)
  def __floordiv__(self, x: UPat | int) -> UPat: return self._alu(Ops.IDIV, x)
  def __mod__(self, x: UPat | int) -> UPat: return self._alu(Ops.MOD, x)
  def __truediv__(self, x: UPat | float) -> UPat: return self._alu(Ops.FDIV, x)
  def __and__(self, x: UPat | int | bool) -> UPat: return self._alu(Ops.AND, x)
  def __or__(self, x: UPat | int | bool) -> UPat: return self._alu(Ops.OR, x)
  def __neg__(self) -> UPat: return UPat(Ops.NEG, src=(self,))
  def lt(self, x: UPat | int | float) -> UPat: return self._alu(Ops.CMPLT, x)
  def ne(self, x: UPat | int | float) -> UPat: return self._alu(Ops.CMPNE, x)
  def maximum(self, x: UPat | int | float) -> UPat: return self._alu(Ops.MAX, x)
  def where(self, a: UPat | int | float, b: UPat | int | float) -> UPat: return self._alu(Ops.WHERE, a, b)
  def cast(self, dtype: DType | None = None) -> UPat: return UPat(Ops.CAST, dtype, (self,))

  def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    if self.op is not None and uop.op not in self.op: return []
    if self.dtype is not None and uop.dtype not in self.dtype and uop.dtype.scalar() not in self.dtype: return []
    if self.arg is not _ANY and uop.arg != self.arg: return []
    if self.name is not None:
      if (bound := store.get(self.name)) is not None:
        if bound is not uop: return []
      else: store = {**store, self.name: uop}
    if self.src is None: return [store]
    if isinstance(self.src, UPat):
      stores = [store]
      for s in uop.src: stores = [st2 for st in stores for st2 in self.src.match(s, st)]
      return stores
    out: list[dict[str, UOp]] = []
    for variant in self.src:
      if len(variant) != len(uop.src) and not (self.allow_any_len and len(uop.src) >= len(variant)): continue
      stores = [store]
      for p, s in zip(variant, uop.src):
        stores = [st2 for st in stores for st2 in p.match(s, st)]
        if not stores: break
      out.extend(stores)
    return out

  def __repr__(self) -> str:
    return f"UPat({self.op}, name={self.name}, arg={'*' if self.arg is _ANY else self.arg})"

R = TypeVar("R")

class PatternMatcher(Generic[R]):
  """A table of (pattern, rewrite) rules. A rule returns a replacement node, or None to pass."""
  def __init__(self, rules: list[tuple[UPat, Callable[..., R | None]]]) -> None:
    self.rules = rules
    self.by_op: dict[Ops, list[tuple[UPat, Callable[..., R | None], bool]]] = {}
    self.any_op: list[tuple[UPat, Callable[..., R | None], bool]] = []
    for pat, fn in rules:
      entry = (pat, fn, "ctx" in inspect.signature(fn).parameters)
      if pat.op is None: self.any_op.append(entry)
      else:
        for op in pat.op: self.by_op.setdefault(op, []).append(entry)
    # keep the table order for ops that also have wildcard rules
    for entries in self.by_op.values():
      entries.extend(self.any_op)
      entries.sort(key=lambda e: next(i for i, r in enumerate(rules) if r[0] is e[0]))

    self.memo: weakref.WeakKeyDictionary[UOp, Any] = weakref.WeakKeyDictionary()  # graph_rewrite's results

  def __add__(self, other: PatternMatcher[R]) -> PatternMatcher[R]: return PatternMatcher(self.rules + other.rules)

  def rewritten(self, node: UOp) -> UOp | None:
    """What graph_rewrite without a ctx made of `node` with these rules (node itself where none applied), while it is
    remembered; None for a node it has not rewritten."""
    hit = self.memo.get(node)
    return node if hit is _SAME else hit

  def rewrite(self, uop: UOp, ctx: Any = None) -> R | None:
    for pat, fn, wants_ctx in self.by_op.get(uop.op, self.any_op):
      for bindings in pat.match(uop, {}):
        ret = fn(ctx=ctx, **bindings) if wants_ctx else fn(**bindings)
        if ret is not None and ret is not uop: return ret
    return None

_SAME = object()  # a node that no rule changes, in a PatternMatcher's memo (a value holding its key would never die)

# called after each pass with (the pass's name, the root before it, the root after it): the DEBUG view below, VIZ
rewrite_listeners: list[Callable[[str, UOp, UOp], None]] = []
# whether a pass is running: a rewrite inside a pass (the lowerer's simplify of each index, alu_semantics' rewrite of
# each op) is a step of that pass, not one of its own. Per thread: a thread may lower while another schedules
_in_pass: contextvars.ContextVar[bool] = contextvars.ContextVar("_in_pass", default=False)

def run_pass(name: str, fn: Callable[[], UOp], before: UOp) -> UOp:
  """`fn()`, a pass named `name` (one of helpers.PASSES) from `before` to its result. Outside any other pass, every
  listener in `rewrite_listeners` is then called with (name, before, result); inside one it is a step of that one."""
  assert name in PASSES, f"pass {name!r} is not in helpers.PASSES"
  if _in_pass.get(): return fn()
  token = _in_pass.set(True)
  try: after = fn()
  finally: _in_pass.reset(token)
  for listener in rewrite_listeners: listener(name, before, after)
  return after

def show_pass(name: str, before: UOp, after: UOp) -> None:
  """The DEBUG view of passes: the graph after every pass with DEBUG>=5, after the passes DEBUGPASS names otherwise."""
  if DEBUG >= 5 or name in DEBUGPASS.value.split(","):
    print(colored(f"after pass {name}:", "cyan"))
    print(pretty_print(after, max_nodes=SHOW_NODES_MAX))

# the most nodes the DEBUG view prints of one graph: a conv's register tile lowers to about 600
SHOW_NODES_MAX = 5000
rewrite_listeners.append(show_pass)

def graph_rewrite(root: UOp, pm: PatternMatcher[UOp], ctx: Any = None, *, name: str) -> UOp:
  """Rewrite bottom-up until no rule applies anywhere (a fixed point), as the pass `name` (run_pass). Iterative, so
  deep graphs are fine.

  Without a ctx a rewrite depends only on the (interned, immutable) node and the rules, so results are remembered per
  matcher across calls, weakly (an entry lives as long as its node): lowering rewrites the same index expressions for
  many lanes and views (a conv's 16x7 register tile: 143 -> 82 ms)."""
  return run_pass(name, lambda: _rewrite(root, pm, ctx), root)

def _rewrite(root: UOp, pm: PatternMatcher[UOp], ctx: Any) -> UOp:
  memo = pm.memo if ctx is None else None
  done: dict[UOp, UOp] = {}
  stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
  while stack:
    node, stage, rewritten = stack.pop()
    if node in done: continue
    if stage == 0:
      if memo is not None and (hit := memo.get(node)) is not None:
        done[node] = node if hit is _SAME else hit
        continue
      stack.append((node, 1, None))
      stack.extend((s, 0, None) for s in reversed(node.src) if s not in done)
    elif stage == 1:
      new_src = tuple(done[s] for s in node.src)
      new = node if new_src == node.src else node.replace(src=new_src)
      ret = pm.rewrite(new, ctx)
      if ret is None:
        done[node] = done[new] = new
      elif ret in done: done[node] = done[ret]
      else:
        stack.append((node, 2, ret))
        stack.append((ret, 0, None))
    else:
      assert rewritten is not None
      done[node] = done[rewritten]
  if memo is not None:
    for k, v in done.items(): memo[k] = _SAME if v is k else v
  return done[root]

def ops_iter(root: UOp, op: Ops) -> Iterator[UOp]: return (u for u in root.toposort if u.op is op)

def ptr(dt: DType, local: bool = False) -> PtrDType: return dt.ptr(local)
