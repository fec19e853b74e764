"""`herd fleet repairs`: every fault episode of the fleet, from the first sign to back in
service, with each step's time and actor, its percentiles and the fleet's availability
(``fleet.repairs``; docs/remediation.md#repairs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, Output, echo, render_object, render_rows

fleet_app = typer.Typer(help="The fleet as a whole: repair episodes and availability.",
                        no_args_is_help=True)

REPAIR_COLUMNS = [("EPISODE", "id"), ("POOL", "pool"), ("KIND", "kind"),
                  ("DETECTED", "detected_at"), ("TO-QUARANTINE", "to_quarantine"),
                  ("TO-DRAIN", "to_drain"), ("REMEDIATION", "remediation"),
                  ("VALIDATED", "validated"), ("BACK", "back_at"), ("MTTR", "mttr"),
                  ("OUTCOME", "outcome")]
STEP_COLUMNS = [("EPISODE", "episode"), ("TIME", "at"), ("STEP", "step"),
                ("ACTOR", "actor"), ("DETAIL", "detail")]
SUMMARY = (("time to quarantine", "time_to_quarantine"), ("time to drain", "time_to_drain"),
           ("time in repair", "time_in_repair"), ("MTTR", "mttr"))


def _ago(seconds: float | None) -> str:
    from herdbook.durations import format_duration
    return "-" if seconds is None else format_duration(round(seconds, 1))


def _row(item: dict[str, Any]) -> dict[str, Any]:
    durations = item["durations"]
    remedy = item.get("remediation") or "-"
    if item.get("replaced_by"):
        remedy = f"{remedy} by {item['replaced_by']}"
    return {**item, "to_quarantine": _ago(durations["time_to_quarantine"]),
            "to_drain": _ago(durations["time_to_drain"]), "mttr": _ago(durations["mttr"]),
            "remediation": remedy, "validated": "yes" if item.get("validated_at") else "-",
            "back_at": item.get("back_at") or "-"}


def _percentiles(row: dict[str, Any]) -> str:
    if not row["count"]:
        return "-"
    return f"p50 {_ago(row['p50'])}, p90 {_ago(row['p90'])}, p99 {_ago(row['p99'])}"


@fleet_app.command("repairs")
def repairs(
    ctx: typer.Context,
    since: Annotated[str, typer.Option("--since", help="Episodes open, or detected or back "
                                       "in service since this time (ISO-8601, or ago: "
                                       "12h, 7d).")] = "7d",
    pool: Annotated[str, typer.Option("--pool", help="Only this pool.")] = "",
    kind: Annotated[str, typer.Option("--kind", help="Only this fault kind (xid, ecc_dbe, "
                                      "health, down, ...).")] = "",
    node: Annotated[str, typer.Option("--node", help="Only this node.")] = "",
    steps: Annotated[bool, typer.Option("--steps", help="Every step of each episode, "
                                        "with its time and actor.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000,
                                       help="The newest N episodes listed.")] = 1000,
    output: Output = Format.table,
) -> None:
    """Fault episodes: detected, quarantined, drained, remediated (reboot, restart,
    replace, operator), validated, back in service; percentiles of time to quarantine,
    time to drain, time in repair and MTTR, and the fleet's availability (GPU-hours in
    service / owned) over the same window. From the control plane's repair fold of the
    event log: no log read per call."""
    from herdbook.api.repair_messages import ListRepairs, RepairsReply
    from herdbook.history.times import parse_time
    try:
        start = parse_time(since, datetime.now(UTC))
    except ValueError as err:
        raise client.fail(f"--since: {err}", client.EXIT_USAGE) from None
    request = ListRepairs(since=start, pool=pool, kind=kind, limit=limit,
                          node_id=client.check_id(node) if node else "")
    result = client.plain(client.call(str(ctx.obj["server"]), "fleet.repairs", request,
                                      RepairsReply))
    if output in (Format.json, Format.yaml):
        render_object(result, output)
        return
    if steps:
        render_rows([{"episode": item["id"], **step} for item in result["items"]
                     for step in item["steps"]], STEP_COLUMNS, output)
    else:
        render_rows([_row(item) for item in result["items"]], REPAIR_COLUMNS, output)
    if output is Format.table:
        summary, avail = result["summary"], result["availability"]
        echo(f"\n{summary['episodes']} back in service, {summary['open']} open, since "
             f"{result['since']}" + (f" ({result['omitted']} older not listed)"
                                     if result.get("omitted") else ""))
        for label, key in SUMMARY:
            echo(f"{label + ':':<20} {_percentiles(summary['fleet'][key])}")
        share = avail["availability"]
        echo(f"{'availability:':<20} " + ("-" if share is None else
             f"{share:.2%} ({avail['gpu_hours_in_service']:g} of "
             f"{avail['gpu_hours_owned']:g} GPU-hours in service)"))
