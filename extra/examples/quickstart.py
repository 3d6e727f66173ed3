"""A first look at lazytensor: lazy ops, fused kernels, and what ran.

Try `DEBUG=2 python extra/examples/quickstart.py` to see every kernel with its time.
"""
import numpy as np

from lazytensor import GlobalCounters, Tensor

Tensor.manual_seed(0)
a, b = Tensor.rand(256, 256), Tensor.rand(256, 256)

# nothing has run yet: c is a graph of UOps
c = ((a @ b).relu() + 1).sum(axis=1)
print("c is lazy:", c)

GlobalCounters.reset()
result = c.numpy()  # schedules, compiles (LLVM, cached on disk) and runs the kernels
print("first values:", result[:4])
print(f"ran {GlobalCounters.kernel_count} kernels")

# the same numbers from numpy
ref = ((a.numpy() @ b.numpy()).clip(0) + 1).sum(axis=1)
print("max difference from numpy:", float(np.abs(result - ref).max()))

# softmax fuses into a few kernels, exp included
x = Tensor.randn(4, 10)
print("softmax rows sum to:", x.softmax(axis=1).sum(axis=1).numpy())
