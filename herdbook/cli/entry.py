"""The `herd` executable. `herd node list`, the command scripts run in a loop, and `herd
gpu list`, a fleet's GPUs against a 1 s target, are parsed here without typer (0.1-0.2 s
of imports and command building per run): the global options and the list's own, each
as ``--name value``, ``--name=value`` or ``-x value``. Anything else it does not take as
written (``--help``, an unknown option, a bad choice, a value missing, ``--``,
``-ojson``) goes to the typer app (``herdbook.cli.main``), which prints what it always
does; both paths run ``node_list.list_nodes`` (``gpu_list.list_gpus``)."""

from __future__ import annotations

import os
import sys
from typing import Any

GLOBAL_OPTIONS = {"--server": "server", "-s": "server", "--creds": "creds", "--user": "user",
                  "--password": "password", "--tls-ca": "tls_ca", "--tls-cert": "tls_cert",
                  "--tls-key": "tls_key", "--context": "context"}
ENV = {"server": "HERD_SERVER", "creds": "HERD_CREDS", "user": "HERD_USER",
       "password": "HERD_PASSWORD", "tls_ca": "HERD_TLS_CA", "tls_cert": "HERD_TLS_CERT",
       "tls_key": "HERD_TLS_KEY", "context": "HERD_CONTEXT"}
"""Each global option's environment variable, read when the option is not given."""
LIST_OPTIONS = {"--output": "output", "-o": "output", "--filter-approval": "filter_approval",
                "--filter-state": "filter_state", "--labels": "labels", "--selector": "labels",
                "-l": "labels", "--order-by": "order_by", "--at": "at"}
GPU_LIST_OPTIONS = {"--output": "output", "-o": "output", "--labels": "labels",
                    "--selector": "labels", "-l": "labels", "--health": "health",
                    "--node": "node"}
REPEATED = ("filter_approval", "filter_state", "health")
COMMANDS = {"node": LIST_OPTIONS, "gpu": GPU_LIST_OPTIONS}
"""The commands parsed here (``<word> list``), each with its options."""
FORMATS = ("table", "json", "yaml", "csv")


class TyperSays(Exception):
    """An option the typer app refuses with its own message: it parses the command."""


def parse_node_list(args: list[str]) -> dict[str, Any] | None:
    """`herd node list`'s options from ``args`` (argv without the program), or None where
    the typer app should parse them."""
    parsed = parse_list(args)
    return parsed[1] if parsed is not None and parsed[0] == "node" else None


def parse_list(args: list[str]) -> tuple[str, dict[str, Any]] | None:
    """``node`` or ``gpu`` and its list's options from ``args`` (argv without the
    program), or None where the typer app should parse them."""
    words: list[str] = []
    found: dict[str, Any] = {}
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        if not arg.startswith("-"):
            words.append(arg)
            if len(words) == 1 and arg in COMMANDS:
                found.update({key: [] for key in REPEATED if key in COMMANDS[arg].values()})
                if arg == "node":
                    found["wide"] = False
            elif words[1:] != ["list"] or words[0] not in COMMANDS:
                return None
            continue
        if arg == "--wide" and words == ["node", "list"]:
            found["wide"] = True
            continue
        name, equals, value = arg.partition("=")
        known = GLOBAL_OPTIONS if not words else COMMANDS[words[0]] if len(words) == 2 else {}
        key = known.get(name)
        if key is None or (equals and not name.startswith("--")):
            return None
        if not equals:
            if position == len(args):
                return None
            value = args[position]
            position += 1
        if key in REPEATED:
            found[key].append(value)
        else:
            found[key] = value
    if len(words) != 2 or found.get("output", "table") not in FORMATS:
        return None
    return words[0], found


def node_list_fast(found: dict[str, Any]) -> None:
    """What the typer app's callback and `node list` do with these options."""
    from herdbook.cli import node_list
    from herdbook.cli.output import Format
    server, output = _connect_as(found)
    node_list.list_nodes(server, Format(output), found["wide"],
                         found["filter_approval"] or None,
                         found["filter_state"] or None, found.get("labels"),
                         found.get("order_by", "id"), found.get("at"))


def gpu_list_fast(found: dict[str, Any]) -> None:
    """What the typer app's callback and `gpu list` do with these options."""
    from herdbook.cli import gpu_list
    from herdbook.cli.output import Format
    server, output = _connect_as(found)
    gpu_list.list_gpus(server, Format(output), found.get("labels"),
                       found["health"] or None, found.get("node"))


def _connect_as(found: dict[str, Any]) -> tuple[str, str]:
    """The typer app's callback: the global options (or their environment variables),
    then the context (``cli/contexts.py``), give the server to connect to with its
    credentials; and the output format, ``--output`` else the context's."""
    from herdbook.cli import client
    from herdbook.cli.contexts import ContextError, in_use
    from herdbook.credentials import CredentialsError, NatsAuth
    given = {key: found[key] if key in found else os.environ.get(env) or None
             for key, env in ENV.items()}
    try:
        use = in_use(os.environ, given.pop("context"))
    except ContextError:
        raise TyperSays from None           # the typer app says what is wrong
    for key in ("creds", "tls_ca", "tls_cert", "tls_key"):
        given[key] = given[key] or getattr(use, key)
    server = given.pop("server")
    server = use.server if server is None else server       # `--server ''` is refused
    auth = NatsAuth(**given)
    if auth.creds:
        try:
            server = auth.resolve(server)[0] or server
        except CredentialsError:
            raise TyperSays from None       # the typer app says what is wrong
    url = client.DEFAULT_SERVER if server is None else server
    return client.Server(url, auth), found.get("output") or use.output or "table"


def main() -> None:
    parsed = parse_list(sys.argv[1:])
    if parsed is not None:
        command, found = parsed
        try:
            (node_list_fast if command == "node" else gpu_list_fast)(found)
        except TyperSays:
            pass
        except KeyboardInterrupt:
            sys.stderr.write("\n")
            sys.exit(_one_line("aborted"))
        except OSError as err:          # as ``usage.OneLineErrors``
            import errno
            if err.errno == errno.EPIPE:
                sys.stderr.close()
                os._exit(1)
            where = f": {err.filename}" if err.filename is not None else ""
            sys.exit(_one_line(f"{err.strerror or err}{where}"))
        except Exception as err:
            from typer import Exit
            if isinstance(err, Exit):
                sys.exit(err.exit_code)
            raise
        else:
            sys.exit(0)
    from herdbook.cli.main import main as typer_main
    typer_main()


def _one_line(message: str) -> int:
    from herdbook.cli import client
    client.fail(message, client.EXIT_REFUSED)
    return client.EXIT_REFUSED
