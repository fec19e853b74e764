"""The one refusal of an operator command: membership, intents, claims and the API's own
checks raise it, and the API answers it as a ``refused`` error (the CLI's exit code 1)."""

from __future__ import annotations


class CommandRefused(Exception):
    """The command is not allowed in its aggregate's current state; nothing was appended."""


class AlreadyDone(CommandRefused):
    """The command's goal already holds (a cordon of a cordoned node): nothing was
    appended, and the API answers it as a success whose ``unchanged`` names the state
    (``node gpu-1 already cordoned``), as kubectl does, exit 0. A ``CommandRefused`` for
    whoever catches only that (nothing appended either way)."""
