"""`herd creds operator --http` prints its curl example with the port the control plane
serves HTTP on (recorded beside the tokens once it serves), not a fixed 8641."""

from __future__ import annotations

import asyncio
from pathlib import Path

from herdbook.natsd.http_tokens import HttpTokens
from tests.conftest import herd
from tests.integration.conftest import running_plane
from tests.integration.test_http_api import config


async def test_the_curl_example_names_the_port_served(tmp_path: Path) -> None:
    async with running_plane(config(tmp_path, auth=True)) as plane:
        assert plane.web is not None and plane.web.serving
        port = plane.web.port
        assert HttpTokens(tmp_path / "d" / "nats").served_url() == plane.web.url
        issued = await asyncio.to_thread(herd, "creds", "operator", "--name", "dana", "--http",
                                         "--data-dir", str(tmp_path / "d"))
    assert issued.returncode == 0, issued.stderr
    assert f"http://127.0.0.1:{port}/v1/status   # the port herd up last served HTTP on" \
        in issued.stdout, issued.stdout
