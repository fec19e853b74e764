"""The HTTP tokens' KV bucket (``herd_http_tokens``) deleted from outside a running
`herd up --auth`: the streams guard makes it again, the replica drops every token the
lost bucket held (a revocation sent meanwhile found nothing to revoke, so a token kept
from before would count for ever) and follows the new bucket, where the next token issued
by the real `herd creds operator --http` counts at once."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import aiohttp
import pytest

from herdbook.natsd.users import TOKENS_BUCKET, TOKENS_STREAM
from tests.integration.conftest import running_plane
from tests.integration.test_agent_and_control import eventually
from tests.integration.test_http_api import bearer, call, config, token, url


async def test_a_deleted_tokens_bucket_comes_back_and_what_it_held_counts_no_more(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    async with running_plane(config(tmp_path, auth=True)) as plane, \
            aiohttp.ClientSession() as session:
        status_url = url(plane, "/v1/status")

        async def answer(value: str) -> int:
            status, _ = await call(session, "GET", status_url, headers=bearer(value))
            return status

        kept = await token(tmp_path, "alice")
        assert await answer(kept) == 200
        js = plane.nc.jetstream()
        created = (await js.stream_info(TOKENS_STREAM)).created

        # when: the bucket is deleted from outside
        await js.delete_key_value(TOKENS_BUCKET)

        # then: it comes back (the guard, at once on the advisory), and the token it held
        # is refused (`herd creds revoke` finds nothing to revoke in the new bucket)
        async def back() -> bool:   # an exception (not found) is "not yet"
            return (await js.stream_info(TOKENS_STREAM)).created != created

        await eventually(back, timeout=10)
        deadline = time.monotonic() + 10
        while await answer(kept) != 401:
            assert time.monotonic() < deadline, "a token of the lost bucket still counts"
        # a token issued into the new bucket counts at once
        fresh = await token(tmp_path, "alice")
        assert await answer(fresh) == 200
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            and r.name == "herdbook.natsd.token_bucket"]
    assert len(said) == 1 and "issue each again" in said[0], said
