"""The Tensor API by area, one chain of mixins (see docs/architecture.md): each relies only on the mixins below it and
on the few primitives that the chain's base declares and Tensor (frontend/tensor.py) implements."""
