"""Parallelism as a library on a DeviceMesh: data parallelism (replicate), fully sharded data parallelism
(fully_shard), ZeRO optimizer wrappers and tensor/sequence parallelism (parallelize_module), each over the mesh and
the collectives of parallel/collectives.py."""
from lazytensor.parallel.data import replicate
from lazytensor.parallel.fsdp import fully_shard
from lazytensor.parallel.tensor_parallel import (
  ColwiseParallel,
  ParallelStyle,
  Replicate,
  RowwiseParallel,
  SequenceParallel,
  Shard,
  parallelize_module,
)
from lazytensor.parallel.zero import ZeroRedundancyOptimizer

__all__ = ["replicate", "fully_shard", "ZeroRedundancyOptimizer", "parallelize_module", "ParallelStyle",
           "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "Shard", "Replicate"]
