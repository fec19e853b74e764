"""The compute-node agent: protocol, executor, GPU backends, state dir."""
