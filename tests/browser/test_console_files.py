"""The console's files as the HTTP server serves them (no browser needed): the page, its
script and style from the package, nothing else from the file system, every event tag
the live stream can name, and the package data that ships them."""

from __future__ import annotations

import re
import tomllib
import typing
from fnmatch import fnmatch
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from herdbook.events import codec
from herdbook.events.states import STATE_ORDER
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


# -- what the console draws and ships: nothing missing, nothing dead ------------------------
def _code(name: str) -> str:
    """A console file without its comments (a name in a comment is not a use)."""
    text = re.sub(r"/\*.*?\*/", "", (console.ROOT / name).read_text(), flags=re.S)
    return re.sub(r"(?m)(^|\s)//.*$", r"\1", text)


def _uses(name: str, text: str) -> int:
    return len(re.findall(r"(?<![\w$])(?<![\w$]\.)" + re.escape(name) + r"(?![\w$])", text))


def test_every_state_has_its_glyph_and_colour() -> None:
    fleet, app, charts = _code("fleet.js"), _code("app.js"), _code("charts.js")
    style = (console.ROOT / "style.css").read_text()
    glyphs = dict(re.findall(r'([A-Z]+): "([^"]*)"', fleet[fleet.index("GLYPH = {"):]
                             .split("};")[0]))
    listed = re.findall(r'"([A-Z]+)"', app[app.index("STATES = ["):].split("];")[0])
    colours = charts[charts.index("STATE_COLORS = {"):].split("};")[0]
    for state in STATE_ORDER:
        assert state in listed, state                         # the legend, the counts
        assert state in glyphs, state                         # never by colour alone
        assert f"--{state}:" in style, state
        assert state == "UNKNOWN" or f".st[data-state={state}] i" in style, state  # .st i's
        assert f"{state}:" in colours, state                  # the states-over-time chart
    marks = [g for g in glyphs.values() if g]
    assert len(marks) == len(set(marks)), glyphs              # one glyph, one state


def test_every_top_level_name_of_the_console_is_used() -> None:
    scripts = {name: _code(name) for name in console.FILES
               if name.endswith(".js") and not name.startswith("vendor/")}
    declared = re.compile(r"(?m)^(?:export\s+)?(?:async\s+)?(?:function\s*|const\s+|let\s+|"
                          r"class\s+)([A-Za-z_$][\w$]*)")
    unused = []
    for name, text in scripts.items():
        for found in declared.finditer(text):
            word = found.group(1)
            imported = any(re.search(r"import\s*\{[^}]*\b" + re.escape(word) + r"\b[^}]*\}\s*"
                                     r'from\s*"\./' + re.escape(name) + '"', other)
                           for key, other in scripts.items() if key != name)
            if _uses(word, text) <= 1 and not imported:
                unused.append(f"{name}: {word}")
    assert unused == []


# Classes a page sets from the data: `class="mark ${kind}"`, /v1/fleet/history's marks.
FROM_DATA = {"detection", "recovery"}


def test_every_class_of_the_style_is_one_a_page_sets() -> None:
    drawn = "\n".join(_code(name) for name in console.FILES
                      if name.endswith((".js", ".html")) and not name.startswith("vendor/"))
    used = set(FROM_DATA)
    for attribute in re.findall(r'class="([^"]*)"', drawn):
        used |= set(re.findall(r"[\w-]+(?:\$\{)?", attribute))     # z${zoom}: z1, z2, ...
    for argument in re.findall(r'class(?:Name\s*=\s*|List\.\w+\()\s*["`]([^"`]*)["`]', drawn):
        used |= set(argument.split())
    dead = []
    for sheet in ("style.css", "detail.css"):
        text = re.sub(r"/\*.*?\*/", "", (console.ROOT / sheet).read_text(), flags=re.S)
        selectors = " ".join(re.findall(r"(?m)^([^{}@]+)\{", text))
        for word in sorted(set(re.findall(r"\.([A-Za-z_][\w-]*)", selectors))):
            built = re.fullmatch(r"([a-z]+)\d+", word)
            if word not in used and not (built and built.group(1) + "${" in used):
                dead.append(f"{sheet}: .{word}")
    assert dead == []


def test_every_screenshot_in_the_docs_is_one_the_script_writes() -> None:
    from benchmarks.console_screenshots import SHOTS
    script = (ROOT / "benchmarks" / "console_screenshots.py").read_text()
    written = set(re.findall(r'shoot\(driver, out, "([^"]+\.png)"', script))
    assert written == set(SHOTS)
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
    shown = set(re.findall(r"\((?:docs/)?(console-[\w-]+\.png)\)", docs))
    assert shown == written, shown ^ written
    assert {p.name for p in (ROOT / "docs").glob("console-*.png")} == shown
