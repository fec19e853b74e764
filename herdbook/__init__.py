"""herdbook: an event-sourced control plane for compute-node fleets over NATS JetStream."""

__version__ = "0.1.0"
