"""`herd health`: GPU health policies, checked offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, Output, console
from herdbook.cli.usage import readable_file

health_app = typer.Typer(help="GPU health policies: check one, try one on sample events.",
                         no_args_is_help=True)


@health_app.command("check-policy")
def check_policy(file: Annotated[Path, typer.Argument(
        help="A CEL policy YAML file: herdbook's format (version: 1) or Navarch's "
             "(version: v1).")]) -> None:
    """Compile every rule of a health policy and print a one-line summary; a bad rule is
    named with its CEL error (exit 1).

    Example: herd health check-policy examples/policy-navarch.yaml
    """
    from herdbook.health.policy import Policy, PolicyError
    readable_file(file, "FILE")
    try:
        policy = Policy.load(file)
    except PolicyError as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    console.print(f"Ok: {file}: {policy.summary()}", markup=False)



@health_app.command("test-policy")
def test_policy(
    file: Annotated[Path, typer.Argument(help="A CEL policy YAML file (as check-policy).")],
    event: Annotated[list[str], typer.Option(
        "--event", "-e", metavar="JSON", help="A sample event as JSON: a GPU health event "
        '(\'{"kind": "thermal", "gpu": 0, "value": 91}\') or a check result '
        '(\'{"kind": "check", "name": "gpu", "status": "unhealthy"}\'); repeat it for a '
        "report of several.")],
    threshold: Annotated[int, typer.Option(
        "--unhealthy-threshold", min=1, help="health.unhealthy_threshold: unhealthy "
        "reports in a row before a node is UNHEALTHY.")] = 2,
    output: Output = Format.table,
) -> None:
    """Show the verdict a report of these events would get: the rule each matched, the
    result, the recommended action and the health it leads to on a HEALTHY node, decided
    by the classifier's own code. A bad event is one line (exit 2); a bad policy as
    check-policy (exit 1)."""
    from herdbook.cli.output import render_object
    from herdbook.health.policy import Policy, PolicyError
    from herdbook.reactors.policy_trial import SampleError, sample_item, trial
    readable_file(file, "FILE")
    try:
        items = [sample_item(text) for text in event]
    except SampleError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    try:
        policy = Policy.load(file)
    except PolicyError as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    render_object(trial(policy, items, threshold), output)
