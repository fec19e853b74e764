"""The docs an operator navigates: every relative link in README.md, docs/ and examples/
resolves (to a file, and to a heading where it names an anchor); every repository path
they quote exists; the configuration reference lists every config key with its
default; the examples load; the README's first two commands are the ones a user
copies and the one `.ci/run` runs."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect
import msgspec.yaml
import pytest

from herdbook.config import Config, parse_config
from herdbook.events.job_events import parse_job_spec

ROOT = Path(__file__).parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
# a repository path quoted in backticks: `tests/unit/test_x.py::test_y`, `herdbook/sim/scenarios/`
QUOTED_PATH = re.compile(r"`((?:herdbook|tests|benchmarks|docs|examples|\.ci)/[^`\s*<>{}]*)`")


def prose(text: str) -> str:
    """The page without its code blocks (a `# comment` there is no heading, a link no link)."""
    return FENCE.sub("", text)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", prose(page.read_text()), re.M)}


def links(page: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", prose(page.read_text()))
    return [target for target in LINK.findall(text)
            if not re.match(r"[a-z]+:", target)]   # http:, https:, mailto:


def test_there_are_pages_to_check() -> None:
    names = {p.name for p in PAGES}
    assert {"README.md", "configuration.md", "troubleshooting.md", "operating.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path_part, _, fragment = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif fragment and path.suffix == ".md" and fragment not in anchors(path):
            broken.append(f"{target}: no heading #{fragment} in {path.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_quoted_repository_path_exists(page: Path) -> None:
    missing = [quoted for quoted in QUOTED_PATH.findall(page.read_text())
               if not (ROOT / quoted.split("::")[0].rstrip(".,:;")).exists()]
    assert not missing, f"{page.relative_to(ROOT)} names files not in the repository: {missing}"


def test_the_link_checker_sees_a_broken_link_and_a_missing_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# There\n\n## Second part\n")
    page.write_text("[a](there.md) [b](missing.md) [c](there.md#second-part) [d](there.md#nope)\n"
                    "`[e](ignored.md)` [f](https://example.com)\n```\n[g](in-code.md)\n```\n")
    assert links(page) == ["there.md", "missing.md", "there.md#second-part", "there.md#nope"]
    assert anchors(tmp_path / "there.md") == {"there", "second-part"}


def config_keys(struct: type[msgspec.Struct], prefix: str = "") -> list[str]:
    """Every key of the config, dotted, walking the Structs (a dict of Structs, such as
    ``pools``, as ``pools.<name>.``)."""
    keys = []
    hints = typing.get_type_hints(struct)
    for field in msgspec.structs.fields(struct):
        key = prefix + field.encode_name
        keys.append(key)
        hint = hints[field.name]
        if typing.get_origin(hint) is dict:
            hint = typing.get_args(hint)[1]
            if not (isinstance(hint, type) and issubclass(hint, msgspec.Struct)):
                continue   # labels, headers: any names
            key += ".<name>"
            keys.append(key)
        for inner in (hint, *typing.get_args(hint)):   # X, or X | None
            if isinstance(inner, type) and issubclass(inner, msgspec.Struct):
                keys += config_keys(inner, key + ".")
    return keys


def reference_block() -> str:
    text = (ROOT / "docs" / "configuration.md").read_text()
    block = text[text.index("```yaml") + len("```yaml"):]
    return block[:block.index("```")]


def documented_keys(document: Any, prefix: str = "", under_names: bool = False) -> set[str]:
    keys: set[str] = set()
    if not isinstance(document, dict):
        return keys
    for name, value in document.items():
        key = prefix + ("<name>" if under_names else str(name))
        keys.add(key)
        keys |= documented_keys(value, key + ".", under_names=key == "pools")
    return keys


def test_the_walk_finds_nested_and_pool_keys() -> None:
    keys = config_keys(Config)
    assert {"nats.tls.ca", "lifecycle.grace_period.borrowed", "pools.<name>.class",
            "pools.<name>.health.auto_replace", "notifier.webhook.headers", "leader_ttl"} <= set(keys)


def test_every_config_key_is_in_the_configuration_reference() -> None:
    documented = documented_keys(msgspec.yaml.decode(reference_block()))
    missing = [key for key in config_keys(Config) if key not in documented]
    assert not missing, f"docs/configuration.md lacks {missing}"
    unknown = documented - set(config_keys(Config)) - {"pools.<name>.labels.team",
                                                       "notifier.webhook.headers.Authorization"}
    assert not unknown, f"docs/configuration.md documents keys the config does not have: {unknown}"


def test_the_reference_shows_the_defaults() -> None:
    """Where the reference gives a value it is the default (pools and notifier are
    examples: there are none by default)."""
    document = msgspec.yaml.decode(reference_block())
    document.pop("pools"), document.pop("notifier")
    assert parse_config(msgspec.json.encode(document), "reference") == Config()


def test_the_example_config_is_valid_and_its_values_are_the_defaults() -> None:
    assert parse_config((ROOT / "examples" / "config.yaml").read_bytes(), "example") == Config()


def test_the_example_job_is_a_valid_job_spec() -> None:
    spec = parse_job_spec((ROOT / "examples" / "job.yaml").read_bytes(), "example")
    assert spec.id == "hello" and spec.resources.gpus > 0


def test_every_example_file_has_a_line_in_the_examples_readme() -> None:
    readme = (ROOT / "examples" / "README.md").read_text()
    unlisted = [p.name for p in (ROOT / "examples").iterdir()
                if p.name != "README.md" and f"]({p.name})" not in readme]
    assert not unlisted, f"examples/README.md has no line for {unlisted}"


def fenced_blocks(text: str) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^```\w*\n(.*?)^```", text, re.M | re.S)]


def test_the_readme_starts_with_the_two_commands_and_ci_runs_the_second() -> None:
    readme = (ROOT / "README.md").read_text()
    first, second = fenced_blocks(readme)[:2]
    assert first == "pip install . && herd up --demo 20"
    assert second == "python3 -m pip install '.[test]' && python3 -m pytest"
    assert readme.index(first) < readme.index("## ")   # before any section
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == second


def test_the_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in (ROOT / "docs").glob("*.md") if f"](docs/{p.name})" not in readme]
    assert not unlinked, f"README.md's table of pages lacks {unlinked}"


def test_every_event_type_is_in_the_events_page() -> None:
    from herdbook.events.codec import EVENT_TYPES
    page = (ROOT / "docs" / "events.md").read_text()
    tags = [getattr(msgspec.inspect.type_info(event), "tag", None) for event in EVENT_TYPES]
    missing = [tag for tag in tags if f"`{tag}`" not in page]
    assert tags and not missing, f"docs/events.md lacks {missing}"
