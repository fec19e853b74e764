"""How a control plane refuses to start or gives up, in one line for the operator."""

from __future__ import annotations


class StartupError(RuntimeError):
    """Startup refused, with a message for the operator."""


class ControlPlaneFailed(RuntimeError):
    """A running control plane could not go on (its embedded nats-server kept dying);
    one line for the operator, and a non-zero exit so that a supervisor restarts it."""
