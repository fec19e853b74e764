"""The base URL of `herd creds operator --http`'s curl example: the recorded one (a
wildcard bind shown as loopback), else the default port, said so."""

from __future__ import annotations

from pathlib import Path

from herdbook.cli.creds import _http_base
from herdbook.natsd.http_tokens import HttpTokens

SERVED = "the port herd up last served HTTP on"


def test_the_recorded_url_or_the_default_port_said_so(tmp_path: Path) -> None:
    tokens = HttpTokens(tmp_path)
    assert tokens.served_url() is None
    assert _http_base(tokens.served_url()) == (
        "http://127.0.0.1:8641", "the default port; herd up --http-port changes it")
    tokens.record_url("http://10.0.0.5:9000/")
    assert _http_base(tokens.served_url()) == ("http://10.0.0.5:9000", SERVED)
    assert _http_base("http://0.0.0.0:9001/") == ("http://127.0.0.1:9001", SERVED)
    assert _http_base("http://[::]:9002/") == ("http://127.0.0.1:9002", SERVED)
    assert _http_base("http://[fe80::1]:9003/") == ("http://[fe80::1]:9003", SERVED)
    for junk in ("", "not a url", "http://host:99999/", "http://host/"):
        assert _http_base(junk)[1].startswith("the default port"), junk
