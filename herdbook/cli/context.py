"""`herd context`: list, show, set and use the CLI's contexts (``cli/contexts.py``)."""

from __future__ import annotations

import os
from typing import Annotated, Any

import msgspec
import typer

from herdbook.cli import client
from herdbook.cli.contexts import (
    CONTEXT_ENV,
    SETTINGS,
    CliConfig,
    CliContext,
    ContextError,
    config_file,
    load,
    pick,
    save,
)
from herdbook.cli.output import Format, Output, console, render_object, render_rows

context_app = typer.Typer(
    help="Named connection settings (server, creds, TLS files, output), as kubectl's "
         "contexts: kept in ~/.config/herd/cli.yaml ($XDG_CONFIG_HOME; HERD_CLI_CONFIG "
         "names another file).", no_args_is_help=True)
NameArgument = Annotated[str, typer.Argument(help="The context's name.")]


def _read() -> tuple[Any, CliConfig]:
    path = config_file(os.environ)
    try:
        return path, load(path)
    except ContextError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None


def _named(config: CliConfig, name: str, path: Any) -> CliContext:
    try:
        picked = pick(config, name, path)
    except ContextError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    assert picked is not None
    return picked[1]


@context_app.command("list")
def context_list(output: Output = Format.table) -> None:
    """The contexts of the CLI's config file; CURRENT marks the one in use."""
    path, config = _read()
    using = os.environ.get(CONTEXT_ENV) or config.current
    rows = [{"current": "*" if name == using else "", "name": name,
             **{key: getattr(context, key) or "" for key in SETTINGS}}
            for name, context in sorted(config.contexts.items())]
    if not rows and output is Format.table:
        console.print(f"no contexts in {path} (`herd context set NAME --server URL`)",
                      markup=False)
        return
    render_rows(rows, [("CURRENT", "current"), ("NAME", "name"),
                       *((key.upper(), key) for key in SETTINGS)], output)


@context_app.command("show")
def context_show(name: Annotated[str | None, typer.Argument(
        help="A context [default: the one in use].")] = None,
        output: Output = Format.table) -> None:
    """One context's settings (the one in use unless named) and the file it is in."""
    path, config = _read()
    chosen = name or os.environ.get(CONTEXT_ENV) or config.current
    if not chosen:
        raise client.fail(f"no context is in use: {path} has no current one (`herd context "
                          "use NAME`)", client.EXIT_REFUSED)
    context = _named(config, chosen, path)
    render_object({"name": chosen, "current": chosen == config.current, "file": str(path),
                   **{key: getattr(context, key) for key in SETTINGS}}, output)


@context_app.command("use")
def context_use(name: NameArgument) -> None:
    """Make NAME the current context: every command connects with its settings unless
    a flag or an environment variable says otherwise."""
    path, config = _read()
    _named(config, name, path)
    save(path, msgspec.structs.replace(config, current=name))
    console.print(f"Ok: the current context is {name} ({path})", markup=False)


@context_app.command("set")
def context_set(
    name: NameArgument,
    server: Annotated[str | None, typer.Option(
        "--server", "-s", help="NATS URL of the control plane ('': unset).")] = None,
    creds: Annotated[str | None, typer.Option(
        "--creds", help="A creds file from `herd creds` ('': unset).")] = None,
    tls_ca: Annotated[str | None, typer.Option("--tls-ca", help="CA file ('': unset).")] = None,
    tls_cert: Annotated[str | None, typer.Option(
        "--tls-cert", help="Client certificate file ('': unset).")] = None,
    tls_key: Annotated[str | None, typer.Option(
        "--tls-key", help="Client private key file ('': unset).")] = None,
    output: Annotated[Format | None, typer.Option(
        "--output", "-o", help="The output format of every command in this context.")] = None,
    use: Annotated[bool, typer.Option("--use", help="Also make it the current "
                                      "context.")] = False,
) -> None:
    """Create the context NAME, or change the settings given; the others stay. A file
    it names is made absolute, so the context works from any directory. The first
    context set becomes the current one."""
    from herdbook.events.subjects import InvalidIdError, validate_id
    try:
        validate_id(name, "context name")
    except InvalidIdError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    if server:
        client.check_server(server)
    files = {"creds": creds, "tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key}
    for option, value in files.items():
        if value and not os.path.isfile(os.path.expanduser(value)):
            raise client.fail(f"--{option.replace('_', '-')} {value}: no such file",
                              client.EXIT_USAGE)
    path, config = _read()
    given: dict[str, str | None] = {
        key: (os.path.abspath(os.path.expanduser(value)) if value else None)
        for key, value in files.items() if value is not None}
    if server is not None:
        given["server"] = server or None
    if output is not None:
        given["output"] = output.value
    context = msgspec.structs.replace(config.contexts.get(name, CliContext()), **given)
    current = name if use or not config.contexts else config.current
    save(path, CliConfig(current=current, contexts={**config.contexts, name: context}))
    made = "changed" if name in config.contexts else "created"
    now = "; it is the current context" if current == name else ""
    console.print(f"Ok: context {name} {made} in {path}{now}", markup=False)


@context_app.command("delete")
def context_delete(name: NameArgument) -> None:
    """Remove the context NAME (if it was the current one, none is current after)."""
    path, config = _read()
    _named(config, name, path)
    rest = {key: value for key, value in config.contexts.items() if key != name}
    save(path, CliConfig(current=None if config.current == name else config.current,
                         contexts=rest))
    console.print(f"Ok: context {name} deleted from {path}", markup=False)
