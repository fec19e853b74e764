"""The `herd` app: global options and one sub-app or command per noun (typer's layout);
each lives in its own module, imported when its command runs (``LAZY``): `herd node
list` imports the node commands and nothing of `herd up`, `herd sim` or rich."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from herdbook.cli import client
from herdbook.cli.creds import CredsOption, PasswordOption, TlsCa, TlsCert, TlsKey, UserOption
from herdbook.cli.output import Format, Output
from herdbook.cli.usage import PANELS, OneLineErrors, finish_help

if TYPE_CHECKING:
    from typer._click import Command

START, FLEET, JOBS, HISTORY, OPERATE = PANELS
LAZY: dict[str, tuple[str, str, str]] = {
    # name: (module, attribute: a Typer is a group, a function one command, panel)
    "up": ("herdbook.cli.up", "up", START),
    "top": ("herdbook.cli.top", "top", START),
    "sim": ("herdbook.cli.sim", "sim_command", OPERATE),
    "agent": ("herdbook.cli.agent", "agent_app", START),
    "node": ("herdbook.cli.node", "node_app", FLEET),
    "gpu": ("herdbook.cli.gpu", "gpu_app", FLEET),
    "pool": ("herdbook.cli.fleet", "pool_app", FLEET),
    "instance": ("herdbook.cli.fleet", "instance_app", FLEET),
    "fleet": ("herdbook.cli.repairs", "fleet_app", FLEET),
    "health": ("herdbook.cli.health", "health_app", FLEET),
    "breaker": ("herdbook.cli.breaker", "breaker_app", FLEET),
    "admin": ("herdbook.cli.sensitive", "admin_app", FLEET),
    "job": ("herdbook.cli.jobs", "job_app", JOBS),
    "eval": ("herdbook.cli.jobs", "eval_app", JOBS),
    "alloc": ("herdbook.cli.jobs", "alloc_app", JOBS),
    "events": ("herdbook.cli.events", "events_app", HISTORY),
    "audit": ("herdbook.cli.audit", "audit_app", HISTORY),
    "view": ("herdbook.cli.view", "view_app", HISTORY),
    "creds": ("herdbook.cli.creds", "creds_app", OPERATE),
    "nats": ("herdbook.cli.cluster", "nats_app", OPERATE),
    "context": ("herdbook.cli.context", "context_app", OPERATE),
}
"""Every command and sub-app but ``status`` and ``version``, in the order `herd --help`
lists them within a panel (typer's: the commands, then the groups)."""
ADDING = {"node": "herdbook.cli.sensitive", "alloc": "herdbook.cli.sensitive"}
"""The modules that add commands to another's sub-app (`herd node claim`)."""
_ORDER = ("up", "top", "sim", "status", "version")


def load(name: str) -> Command:
    """The click command of ``LAZY[name]``, built as ``app.command``/``app.add_typer``
    would build it."""
    import importlib
    module, attribute, panel = LAZY[name]
    target = getattr(importlib.import_module(module), attribute)
    if name in ADDING:
        importlib.import_module(ADDING[name])
    holder = typer.Typer(add_completion=False)
    holder.callback()(lambda: None)     # a group, even around one command
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name, rich_help_panel=panel)
    else:
        holder.command(name, rich_help_panel=panel)(target)
    command: Command = typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]
    return command


class LazyCommands(MutableMapping[str, "Command"]):
    """A group's ``commands``: those of ``LAZY`` are built on first access."""

    def __init__(self, built: dict[str, Command]) -> None:
        names = [*(n for n in _ORDER if n in built or n in LAZY), *built, *LAZY]
        self._names = list(dict.fromkeys(names))
        self._built = built

    def __getitem__(self, name: str) -> Command:
        if name not in self._built and name in LAZY and name in self._names:
            self._built[name] = load(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Command) -> None:
        self._built[name] = command
        if name not in self._names:
            self._names.append(name)

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


class Herd(OneLineErrors):
    """The root group: commands built when named (``LazyCommands``), and every command's
    help finished (``usage.finish_help``) only when some help is shown."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(dict(self.commands))
        self._help_finished = True      # OneLineErrors.main: not on every run

    def finish(self) -> None:
        if not getattr(self, "_finished", False):
            self._finished = True
            finish_help(self)


def _finishing(format_help: Any) -> Any:
    def wrapped(self: Any, ctx: Any, formatter: Any) -> Any:
        root = ctx.find_root().command
        if isinstance(root, Herd):
            root.finish()
        return format_help(self, ctx, formatter)
    wrapped.herd = True  # type: ignore[attr-defined]
    return wrapped


for _kind in (TyperGroup, TyperCommand):
    if not getattr(_kind.format_help, "herd", False):
        _kind.format_help = _finishing(_kind.format_help)  # type: ignore[method-assign]

app = typer.Typer(
    name="herd", no_args_is_help=True, pretty_exceptions_enable=False, cls=Herd,
    help="herdbook: an event-sourced control plane for GPU and CPU compute-node fleets.",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        import herdbook
        print(herdbook.__version__)
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    server: Annotated[str, typer.Option("--server", "-s", envvar="HERD_SERVER",
                                        help="NATS URL of the control plane.")] = client.DEFAULT_SERVER,
    creds: CredsOption = None, user: UserOption = None, password: PasswordOption = None,
    tls_ca: TlsCa = None, tls_cert: TlsCert = None, tls_key: TlsKey = None,
    context: Annotated[str | None, typer.Option(
        "--context", envvar="HERD_CONTEXT", help="Use this context of the CLI's config "
        "file (`herd context list`) instead of its current one.")] = None,
    show_version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_print_version,
        help="Print herdbook's version and exit (as `herd version`).")] = False,
) -> None:
    import os

    from herdbook.cli.contexts import CliContext, ContextError, in_use
    from herdbook.cli.creds import checked_auth
    from herdbook.credentials import NatsAuth
    source = ctx.get_parameter_source("server")
    default = source is None or source.name == "DEFAULT"
    # `herd context` edits the file: a bad current context must not stop it
    try:
        use = in_use(os.environ, context) if ctx.invoked_subcommand != "context" else CliContext()
    except ContextError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    # a flag or its environment variable first, then the context, then the default
    creds, tls_ca = creds or use.creds, tls_ca or use.tls_ca
    tls_cert, tls_key = tls_cert or use.tls_cert, tls_key or use.tls_key
    if default and use.server:
        server, default = use.server, False
    auth = NatsAuth(user, password, creds, tls_ca, tls_cert, tls_key)
    if creds:
        # The creds file names the server it was issued for: used unless --server says.
        server = checked_auth(auth, None if default else server) or server
    ctx.obj = {"server": client.Server(server, auth), "auth": auth,
               "server_default": default and not creds, "output": use.output}


@app.command(rich_help_panel=START)
def status(
    ctx: typer.Context,
    output: Output = Format.table,
) -> None:
    """The control plane answering: node count, projector position and lag, dead letters,
    dropped heartbeat replays, liveness detections, the fleet health score (0-100 and its
    breakdown) and whether the circuit breaker is open."""
    from herdbook.cli.output import render_object
    render_object(client.call(str(ctx.obj["server"]), "status", {}), output)


@app.command(rich_help_panel=OPERATE)
def version() -> None:
    """Print herdbook's version."""
    import herdbook
    from herdbook.cli.output import console
    console.print(herdbook.__version__)


def main() -> None:
    app()
