"""The node commands, generated from the command table (``herdbook.api.commands.VERBS``):
`herd node approve|cordon|drain|...` and `herd admin node wipe`. A bulk verb takes
several ids or a selection by labels, state and approval; every verb gets its options,
its confirmation (``--yes``) and its --help from its entry. Registered on the node apps
by ``herdbook.cli.node`` and ``herdbook.cli.sensitive``."""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer

from herdbook.api.commands import VERBS, NodeVerb, Option
from herdbook.cli import client
from herdbook.cli.bulk import (
    ApprovalFilter,
    NodeIds,
    Selection,
    Selector,
    StateFilter,
    act,
    selection,
)
from herdbook.cli.node_args import NodeId, Reason, Yes, parse_labels

_KW = inspect.Parameter.KEYWORD_ONLY


def _parameter(option: Option) -> inspect.Parameter:
    """The typer parameter of ``option``, named as its request field."""
    flag = typer.Option(f"--{option.name}", help=option.help)
    if option.kind == "flag":
        return inspect.Parameter(option.field, _KW, annotation=Annotated[bool, flag],
                                 default=False)
    if option.kind == "text" and option.required:
        return inspect.Parameter(option.field, _KW, annotation=Annotated[str, flag])
    if option.kind == "text":
        return inspect.Parameter(option.field, _KW, annotation=Annotated[str, flag], default="")
    if option.kind == "class":
        return inspect.Parameter(option.field, _KW, annotation=Annotated[str, flag],
                                 default="standard")
    return inspect.Parameter(option.field, _KW, annotation=Annotated[str | None, flag],
                             default=None)


def _value(option: Option, given: Any) -> Any:
    """The request field's value from the option as typed; a bad one: exit 2."""
    if option.kind == "flag" and option.required and not given:
        reason = option.help.removeprefix("Required: ").rstrip(".")
        raise client.fail(f"{reason}: pass --{option.name}", client.EXIT_USAGE)
    if option.kind == "text" and option.required and not given.strip():
        raise client.fail(f"--{option.name} must not be empty", client.EXIT_USAGE)
    if option.kind == "duration" and given is not None:
        from herdbook.durations import parse_duration
        try:
            return float(parse_duration(given))
        except ValueError as err:
            raise client.fail(f"--{option.name}: {err}", client.EXIT_USAGE) from None
    if option.kind == "class":
        from herdbook.events.states import NodeClass
        choices = [c.value for c in NodeClass]
        if given not in choices:
            raise client.fail(f"invalid class {given!r}; choose from {', '.join(choices)}",
                              client.EXIT_USAGE)
        return NodeClass(given)
    if option.kind == "labels":
        return parse_labels(given)
    return given


def command(verb: NodeVerb) -> Any:
    """The typer command function of ``verb``: its signature built from the entry (typer
    reads ``__signature__``), its docstring the entry's help."""
    asks = verb.confirm is not None and verb.confirm.cli

    def run(ctx: typer.Context, **given: Any) -> None:
        extra = {o.field: _value(o, given[o.field]) for o in verb.options}
        ask = None
        if verb.confirm is not None and asks and (
                verb.confirm.when is None or extra.get(verb.confirm.when)):
            ask = verb.confirm.for_cli()
        if verb.bulk:
            chosen = selection(given["node_ids"], given["selector"], given["filter_state"],
                               given["filter_approval"])
        else:
            chosen = Selection([client.check_id(given["node_id"])], {}, [], [])
        act(ctx, verb.route, chosen, given["message"], kind=verb.request, ask=ask,
            yes=given.get("yes", False), **extra)

    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=typer.Context)]
    if verb.bulk:
        params.append(inspect.Parameter("node_ids", _KW, annotation=NodeIds, default=None))
    else:
        params.append(inspect.Parameter("node_id", _KW, annotation=NodeId))
    params.append(inspect.Parameter("message", _KW, annotation=Reason, default=""))
    params += [_parameter(o) for o in verb.options]
    if asks:
        params.append(inspect.Parameter("yes", _KW, annotation=Yes, default=False))
    if verb.bulk:
        params += [inspect.Parameter("selector", _KW, annotation=Selector, default=None),
                   inspect.Parameter("filter_state", _KW, annotation=StateFilter, default=None),
                   inspect.Parameter("filter_approval", _KW, annotation=ApprovalFilter,
                                     default=None)]
    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__name__ = run.__qualname__ = verb.name
    run.__doc__ = verb.help
    return run


def register(app: typer.Typer, where: tuple[str, ...]) -> None:
    """Every verb whose CLI command lives under ``where`` (``("node",)``), in table order."""
    for verb in VERBS:
        if verb.cli == where:
            app.command(verb.name)(command(verb))
