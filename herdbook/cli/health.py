"""`herd health`: GPU health policies, checked offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.output import console
from herdbook.cli.usage import readable_file

health_app = typer.Typer(help="GPU health policies.", no_args_is_help=True)


@health_app.command("check-policy")
def check_policy(file: Annotated[Path, typer.Argument(
        help="A CEL policy YAML file: herdbook's format (version: 1) or Navarch's "
             "(version: v1).")]) -> None:
    """Compile every rule of a health policy and print a one-line summary; a bad rule is
    named with its CEL error (exit 1).

    Example: herd health check-policy examples/policy-navarch.yaml
    """
    from herdbook.health_policy import Policy, PolicyError
    readable_file(file, "FILE")
    try:
        policy = Policy.load(file)
    except PolicyError as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    console.print(f"Ok: {file}: {policy.summary()}", markup=False)

