"""TensorStub: the base of Tensor's mixins, declaring for mypy what every mixin uses from Tensor itself.

The mixins (tensor_create.py, tensor_movement.py, ...) are only ever mixed into Tensor, so `self` is a Tensor; these
declarations say so once instead of in every mixin. Nothing here exists at run time.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
  from lazytensor.dtype import DType
  from lazytensor.tensor import Tensor
  from lazytensor.uop.ops import DeviceLike, UOp

class TensorStub:
  __slots__ = ()
  if TYPE_CHECKING:
    # cls(...) and type(self)(...) run Tensor.__init__ and so build a Tensor
    lazydata: UOp
    def __new__(cls, data: Any, device: DeviceLike | None = None, dtype: DType | str | None = None,
                requires_grad: bool | None = None) -> Tensor: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def dtype(self) -> DType: ...
    @property
    def device(self) -> DeviceLike: ...
    @property
    def ndim(self) -> int: ...
    def numel(self) -> int: ...
    def realize(self, *others: Tensor) -> Tensor: ...
    def _apply_uop(self, fn: Callable[..., UOp], *others: Tensor) -> Tensor: ...
    @classmethod
    def full(cls, shape: tuple[int, ...] | int, fill_value: Any, dtype: DType | str | None = None,
             device: DeviceLike | None = None, requires_grad: bool | None = None) -> Tensor: ...
