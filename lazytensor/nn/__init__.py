"""Layers. Optimizers live in lazytensor.nn.optim, model state and weights on disk in lazytensor.nn.state."""
