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
def check_policy(file: Annotated[Path, typer.Argument(help="A CEL policy YAML file.")]) -> None:
    """Compile every rule of a health policy; a bad rule is named with its CEL error."""
    from herdbook.health_policy import Policy, PolicyError
    readable_file(file, "FILE")
    try:
        policy = Policy.load(file)
    except PolicyError as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    console.print(f"Ok: {len(policy.rules)} rules", markup=False)

