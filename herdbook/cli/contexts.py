"""The CLI's contexts, as kubectl's and nomad's: named sets of connection settings
(server, creds, TLS files, output format) in ``~/.config/herd/cli.yaml``
(``$XDG_CONFIG_HOME/herd/cli.yaml``; ``HERD_CLI_CONFIG`` names another file), one of
them current. A setting comes from, first to last: its flag, its environment variable
(``HERD_SERVER``, ``HERD_CREDS``, ...), the context (``--context``, ``HERD_CONTEXT``,
else the file's ``current``), the default. No typer here: `herd node list`
(``cli/entry.py``) reads the context without it, and the file is read only when it
exists, so a user without contexts pays nothing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import msgspec

CLI_CONFIG_ENV = "HERD_CLI_CONFIG"
CONTEXT_ENV = "HERD_CONTEXT"
OutputName = Literal["table", "json", "yaml", "csv"]
SETTINGS = ("server", "creds", "tls_ca", "tls_cert", "tls_key", "output")
"""What a context holds; the global options of the same names (``output``: each
command's ``--output``). No password: a creds file keeps it out of this file."""


class ContextError(ValueError):
    """A context that cannot be used: the one line to print (exit 2)."""


class CliContext(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    server: str | None = None
    creds: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    output: OutputName | None = None


class CliConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    current: str | None = None
    contexts: dict[str, CliContext] = msgspec.field(default_factory=dict)


def config_file(environ: Mapping[str, str]) -> Path:
    """``HERD_CLI_CONFIG``, else ``cli.yaml`` under the XDG config home (a relative
    ``XDG_CONFIG_HOME`` is ignored, as the XDG spec says)."""
    if environ.get(CLI_CONFIG_ENV):
        return Path(environ[CLI_CONFIG_ENV]).expanduser()
    xdg = environ.get("XDG_CONFIG_HOME", "")
    home = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return home / "herd" / "cli.yaml"


def load(path: Path) -> CliConfig:
    """The file's contexts; none where it does not exist."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return CliConfig()
    except OSError as err:
        raise ContextError(f"{path}: {err.strerror}") from None
    import msgspec.yaml
    try:
        config = msgspec.yaml.decode(raw or b"{}", type=CliConfig | None)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise ContextError(f"{path}: {' '.join(str(err).split())}") from None
    return config or CliConfig()


def save(path: Path, config: CliConfig) -> None:
    """Written whole to a file beside it, then moved over it: a reader never sees half.
    Owner-only, as kubectl's: it names credential files."""
    import msgspec.yaml
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(msgspec.yaml.encode(config))
    os.replace(temporary, path)


def pick(config: CliConfig, name: str | None, path: Path) -> tuple[str, CliContext] | None:
    """The context in use: ``name`` (``--context``/``HERD_CONTEXT``), else the current
    one, else none. A name the file does not have is refused, never ignored: the
    command would go to another fleet than the one meant."""
    chosen = name or config.current
    if not chosen:
        return None
    if chosen not in config.contexts:
        there = ", ".join(sorted(config.contexts)) or "none"
        what = "" if name else "the current "
        raise ContextError(f"no {what}context {chosen!r} in {path} (there are: {there}; "
                           "`herd context list`)")
    return chosen, config.contexts[chosen]


def in_use(environ: Mapping[str, str], name: str | None = None) -> CliContext:
    """The settings of the context in use (empty if none), read from the environment's
    file; ``name``: ``--context``, else ``HERD_CONTEXT``."""
    path = config_file(environ)
    picked = pick(load(path), name or environ.get(CONTEXT_ENV) or None, path)
    return CliContext() if picked is None else picked[1]
