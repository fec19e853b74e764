"""The console's files as the HTTP server serves them (no browser needed): the page, its
script and style from the package, nothing else from the file system, every event tag
the live stream can name, and the package data that ships them."""

from __future__ import annotations

import tomllib
import typing
from fnmatch import fnmatch
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from herdbook.events import codec
from herdbook.web import console

ROOT = Path(__file__).parents[2]


async def test_the_page_its_script_and_style_and_nothing_else() -> None:
    app = web.Application()
    console.add_routes(app)
    async with TestClient(TestServer(app)) as client:
        page = await client.get("/")
        assert page.status == 200 and page.content_type == "text/html"
        html = await page.text()
        assert '<script type="module" src="/console/app.js">' in html
        script = await client.get("/console/app.js")
        assert script.content_type == "text/javascript"
        assert "new EventSource" in await script.text()
        assert (await client.get("/console/style.css")).content_type == "text/css"
        for name in ("__init__.py", "..%2F..%2Fconfig.py", "missing.js"):
            assert (await client.get(f"/console/{name}")).status == 404, name
        tags = await (await client.get("/console/event-types.json")).json()
    assert set(tags) == {cls.__struct_config__.tag for cls in typing.get_args(codec.AnyEvent)}
    assert "node.degraded" in tags and "node.cordoned" in tags


def test_a_plain_install_ships_the_console() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["herdbook.web.console"]
    for name in console.FILES:
        assert (console.ROOT / name).is_file(), name
        assert any(fnmatch(name, pattern) for pattern in patterns), name
