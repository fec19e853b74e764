"""The `herd` executable. `herd node list`, the command scripts run in a loop, is parsed
here without typer (0.1 s of imports and command building per run): the global options
and the list's own, each as ``--name value``, ``--name=value`` or ``-x value``. Anything
else it does not take as written (``--help``, an unknown option, a bad choice, a value
missing, ``--``, ``-ojson``) goes to the typer app (``herdbook.cli.main``), which prints
what it always does; both paths run ``node_list.list_nodes``."""

from __future__ import annotations

import os
import sys
from typing import Any

GLOBAL_OPTIONS = {"--server": "server", "-s": "server", "--creds": "creds", "--user": "user",
                  "--password": "password", "--tls-ca": "tls_ca", "--tls-cert": "tls_cert",
                  "--tls-key": "tls_key"}
ENV = {"server": "HERD_SERVER", "creds": "HERD_CREDS", "user": "HERD_USER",
       "password": "HERD_PASSWORD", "tls_ca": "HERD_TLS_CA", "tls_cert": "HERD_TLS_CERT",
       "tls_key": "HERD_TLS_KEY"}
"""Each global option's environment variable, read when the option is not given."""
LIST_OPTIONS = {"--output": "output", "-o": "output", "--filter-approval": "filter_approval",
                "--filter-state": "filter_state", "--labels": "labels", "--selector": "labels",
                "-l": "labels", "--order-by": "order_by", "--at": "at"}
REPEATED = ("filter_approval", "filter_state")
FORMATS = ("table", "json", "yaml", "csv")


class TyperSays(Exception):
    """An option the typer app refuses with its own message: it parses the command."""


def parse_node_list(args: list[str]) -> dict[str, Any] | None:
    """`herd node list`'s options from ``args`` (argv without the program), or None where
    the typer app should parse them."""
    found: dict[str, Any] = {"filter_approval": [], "filter_state": [], "wide": False}
    words: list[str] = []
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        if not arg.startswith("-"):
            words.append(arg)
            if words != ["node", "list"][:len(words)]:
                return None
            continue
        if arg == "--wide" and len(words) == 2:
            found["wide"] = True
            continue
        name, equals, value = arg.partition("=")
        known = GLOBAL_OPTIONS if not words else LIST_OPTIONS if len(words) == 2 else {}
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
    if words != ["node", "list"] or found.get("output", "table") not in FORMATS:
        return None
    return found


def node_list_fast(found: dict[str, Any]) -> None:
    """What the typer app's callback and `node list` do with these options."""
    from herdbook.cli import client, node_list
    from herdbook.cli.output import Format
    from herdbook.credentials import CredentialsError, NatsAuth
    given = {key: found[key] if key in found else os.environ.get(env) or None
             for key, env in ENV.items()}
    server = given.pop("server")
    auth = NatsAuth(**given)
    if auth.creds:
        try:
            server = auth.resolve(server)[0] or server
        except CredentialsError:
            raise TyperSays from None       # the typer app says what is wrong
    client.set_auth(auth)
    node_list.list_nodes(client.DEFAULT_SERVER if server is None else server,
                         Format(found.get("output", "table")), found["wide"],
                         found["filter_approval"] or None,
                         found["filter_state"] or None, found.get("labels"),
                         found.get("order_by", "id"), found.get("at"))


def main() -> None:
    found = parse_node_list(sys.argv[1:])
    if found is not None:
        try:
            node_list_fast(found)
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
