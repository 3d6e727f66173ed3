"""Layers (filled in by the nn work of issue 4); optimizers live in lazytensor.nn.optim, state in lazytensor.nn.state."""
