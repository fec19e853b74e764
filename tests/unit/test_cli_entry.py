"""`herd node list` parsed without typer (``herdbook.cli.entry``): the options it takes as
written, and everything it leaves to the typer app (which prints help and errors)."""

from __future__ import annotations

import pytest

from herdbook.cli.entry import parse_list, parse_node_list


def test_takes_the_list_options_in_each_written_form() -> None:
    found = parse_node_list(["-s", "nats://h:1", "--user=u", "node", "list", "-o", "json",
                             "--wide", "--filter-state", "ready", "--filter-state=down",
                             "--selector", "a=b", "--order-by", "-state"])
    assert found == {"server": "nats://h:1", "user": "u", "output": "json", "wide": True,
                     "filter_approval": [], "filter_state": ["ready", "down"],
                     "labels": "a=b", "order_by": "-state"}
    assert parse_node_list(["node", "list"]) == {"filter_approval": [], "filter_state": [],
                                                 "wide": False}


@pytest.mark.parametrize("args", [
    [], ["node"], ["node", "describe", "x"], ["node", "list", "--help"], ["node", "list", "-h"],
    ["--help", "node", "list"], ["node", "list", "-ojson"], ["node", "list", "-o", "JSON"],
    ["node", "list", "-o"], ["node", "list", "--bogus"], ["node", "list", "extra"],
    ["node", "list", "--"], ["node", "--wide", "list"], ["--wide", "node", "list"],
    ["node", "list", "-s", "nats://h:1"], ["node", "list", "-o=json"], ["list", "node"],
    ["node", "list", "--wide=yes"],
])
def test_leaves_anything_else_to_the_typer_app(args: list[str]) -> None:
    assert parse_node_list(args) is None


def test_takes_gpu_list_and_its_options() -> None:
    assert parse_list(["-s", "nats://h:1", "gpu", "list", "--health", "critical",
                       "--health=fatal,unknown", "-l", "pool=a", "--node", "n1", "-o",
                       "json"]) == ("gpu", {
        "server": "nats://h:1", "health": ["critical", "fatal,unknown"], "labels": "pool=a",
        "node": "n1", "output": "json"})
    assert parse_list(["gpu", "list"]) == ("gpu", {"health": []})
    assert parse_list(["node", "list"]) == ("node", {"filter_approval": [],
                                                     "filter_state": [], "wide": False})


@pytest.mark.parametrize("args", [
    ["gpu"], ["gpu", "describe", "n1/0"], ["gpu", "list", "--help"], ["gpu", "list", "--wide"],
    ["gpu", "list", "--filter-state", "ready"], ["gpu", "list", "-o", "JSON"],
    ["gpu", "--node", "n1", "list"], ["gpu", "list", "x"], ["gpu", "list", "--health"],
])
def test_leaves_any_other_gpu_command_to_the_typer_app(args: list[str]) -> None:
    assert parse_list(args) is None
