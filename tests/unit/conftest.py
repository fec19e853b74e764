"""A unit test starts nothing: no process (``subprocess``, ``asyncio``'s subprocesses,
``os.fork``, ``os.posix_spawn``) and no listening socket, whoever asks for it (the test
or herdbook's code under it: a notifier's exec hook, a journalctl source). One that does
fails, naming what it started; it belongs in tests/integration. The static side of the
rule (the imports, fixtures and calls a test module writes) is test_layout_rules.py."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest


class StartedSomething(RuntimeError):
    """Raised where a unit test would have started a process or served a socket."""


@pytest.fixture(autouse=True)
def starts_nothing(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the test tried to start (the test fails at its end if anything): the list is
    the fixture's value, so a test of this guard can clear it."""
    started: list[str] = []

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            started.append(what)
            raise StartedSomething(f"a unit test {what}: move it to tests/integration")
        return refused

    # Popen's own step that forks: __init__ still sets the object up, so a refused
    # Popen is collected without an error of its own.
    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("started a process"))
    monkeypatch.setattr(os, "fork", refuse("forked"))
    monkeypatch.setattr(os, "posix_spawn", refuse("spawned a process"))
    monkeypatch.setattr(os, "posix_spawnp", refuse("spawned a process"))
    monkeypatch.setattr(socket.socket, "listen", refuse("listened on a socket"))
    yield started
    if started:
        pytest.fail(f"this unit test {', '.join(sorted(set(started)))}: "
                    "move it to tests/integration", pytrace=False)
