"""`herd job ...` and `herd eval ...`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, Output, console, echo, render_object, render_rows
from herdbook.events.alloc import AllocStatus
from herdbook.events.evals import EvalStatus

job_app = typer.Typer(help="Jobs: what to run, how many, where.", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluations (Nomad's model): why and when scheduling happens.",
                       no_args_is_help=True)

EVAL_COLUMNS = [("ID", "id"), ("JOB", "job_id"), ("STATUS", "status"),
                ("TRIGGERED BY", "triggered_by"), ("PREVIOUS", "previous_eval"),
                ("NEXT", "next_eval"), ("BLOCKED", "blocked_eval")]
JOB_COLUMNS = [("ID", "id"), ("STATUS", "status"), ("VERSION", "version"), ("COUNT", "count"),
               ("PRIORITY", "priority"), ("ALLOCATIONS", "allocations")]
EVAL_STATUSES: tuple[str, ...] = tuple(EvalStatus)


def wanted_statuses(given: list[str] | None, allowed: tuple[str, ...], what: str) -> list[str]:
    """``--status a,b --status c`` -> ``["a", "b", "c"]`` (lower case); one that is not in
    ``allowed`` is a usage error of one line."""
    wanted = [s.lower() for item in given or [] for s in item.split(",") if s]
    bad = [s for s in wanted if s not in allowed]
    if bad:
        raise client.fail(f"unknown {what} status {bad[0]!r}; choose from "
                          + ", ".join(allowed), client.EXIT_USAGE)
    return wanted


@job_app.command("list")
def job_list(ctx: typer.Context, output: Output = Format.table,
             status_: Annotated[list[str] | None, typer.Option(
                 "--status", help="running or dead (stopped).")] = None) -> None:
    """Jobs by id, each with its allocations counted by status."""
    from herdbook.api.messages import JOB_STATUSES, JobSummary, ListJobs, Page
    wanted = wanted_statuses(status_, JOB_STATUSES, "job")
    result = client.call(str(ctx.obj["server"]), "job.list", ListJobs(status=wanted),
                         Page[JobSummary])
    render_rows(client.plain(result.items), JOB_COLUMNS, output)


@job_app.command("run")
def run(ctx: typer.Context, file: Annotated[Path, typer.Argument(help="A YAML job spec.")],
        output: Output = Format.table) -> None:
    """Register a job (id, count, priority, resources, constraints, command, requeue) and
    create its job-register evaluation."""

    from herdbook.api.messages import RegisterJob, RegisterResult
    spec = read_spec(file)
    result = client.call(str(ctx.obj["server"]), "job.register",
                         RegisterJob(spec=spec, actor=client.actor()),
                         RegisterResult)
    if output is Format.table:
        echo(f"Ok: job {spec.id} registered, evaluation {result.eval_id}")
    else:
        render_object(client.plain(result), output)


def read_spec(file: Path) -> Any:
    """The job spec in ``file``; a usage error of one line if it cannot be read."""
    from herdbook.events.job_events import JobSpecError, parse_job_spec
    try:
        return parse_job_spec(file.read_bytes(), str(file))
    except OSError as err:
        raise client.fail(f"{file}: {err.strerror}", client.EXIT_USAGE) from None
    except JobSpecError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None


def print_why(placement: dict[str, Any] | None) -> None:
    """The scheduler's reasons a slot does not fit, one per line."""
    if placement:
        console.print("\nwhy not placed:", markup=False)
        for line in placement.get("reasons", []):
            echo(f"  {line}")


@job_app.command("plan")
def plan(ctx: typer.Context, file: Annotated[Path, typer.Argument(help="A YAML job spec.")],
         output: Output = Format.table) -> None:
    """Dry-run a job spec: what the scheduler would place where, stop, and what would not
    fit and why, over the fleet as it is now. Nothing is registered. Exit 0 when every
    slot would be placed, 1 when some would not (as `nomad job plan` exits nonzero)."""
    from herdbook.api.explain_messages import JobPlan, PlanJob
    spec = read_spec(file)
    result = client.call(str(ctx.obj["server"]), "job.plan", PlanJob(spec=spec), JobPlan)
    if output is not Format.table:
        render_object(client.plain(result), output)
    else:
        echo(f"job {result.job_id} (version {result.version}): {len(result.place)} to place, "
             f"{len(result.stop)} to stop, {result.unplaced} would not be placed")
        if result.place:
            render_rows(client.plain(result.place), [
                ("#", "index"), ("NODE", "node_id"), ("REASON", "reason"),
                ("REPLACES", "previous_alloc")], output)
        if result.stop:
            console.print("\nstop:", markup=False)
            render_rows(client.plain(result.stop), [
                ("ALLOC", "alloc_id"), ("#", "index"), ("NODE", "node_id"),
                ("REASON", "reason")], output)
        print_why(result.placement)
    if result.unplaced:
        raise typer.Exit(client.EXIT_REFUSED)


@job_app.command("status")
def status(ctx: typer.Context, job_id: Annotated[str, typer.Argument(help="Job id.")],
           output: Output = Format.table) -> None:
    """A job, its spec, its allocations by status and its evaluations."""
    from herdbook.api.messages import ById, JobReply
    client.check_id(job_id, "job id")
    result = client.plain(client.call(str(ctx.obj["server"]), "job.status", ById(id=job_id),
                                      JobReply))
    if output is not Format.table:
        render_object(result, output)
        return
    evals = result.pop("evals")
    placement = result.pop("placement", None)
    result["allocations"] = ", ".join(f"{k}={v}" for k, v in sorted(
        result["allocations"].items())) or "none"
    render_object(result, output)
    print_why(placement)
    console.print("\nevaluations:", markup=False)
    render_rows(evals, EVAL_COLUMNS, output)


@job_app.command("stop")
def stop(ctx: typer.Context, job_id: Annotated[str, typer.Argument(help="Job id.")],
         message: Annotated[str, typer.Option("--message", "-m",
                                             help="Why (recorded in the event).")] = "",
        ) -> None:
    """Deregister a job (a job-deregister evaluation stops its allocations). A stopped
    job is left as it is: `Ok: job <id> already stopped`, exit 0."""
    from herdbook.api.messages import JobReply, StopJob
    client.check_id(job_id, "job id")
    result = client.call(str(ctx.obj["server"]), "job.stop",
                         StopJob(id=job_id, reason=message, actor=client.actor()), JobReply)
    echo(f"Ok: {result.unchanged}" if result.unchanged else "Ok")


@eval_app.command("list")
def eval_list(ctx: typer.Context, output: Output = Format.table,
              status_: Annotated[list[str] | None, typer.Option(
                  "--status", help=", ".join(EVAL_STATUSES) + " (scheduling, applying "
                  "and delayed: quasi-statuses the view shows).")] = None,
              job: Annotated[str, typer.Option("--job", help="Only this job.")] = "") -> None:
    """Evaluations, oldest first."""
    wanted = wanted_statuses(status_, EVAL_STATUSES, "eval")
    from herdbook.api.messages import EvalReply, ListEvals, Page
    result = client.call(str(ctx.obj["server"]), "eval.list",
                         ListEvals(status=wanted, job_id=job), Page[EvalReply])
    render_rows(client.plain(result.items), EVAL_COLUMNS, output)


@eval_app.command("status")
def eval_status(ctx: typer.Context, eval_id: Annotated[str, typer.Argument(
        help="Eval id or a unique prefix.")], output: Output = Format.table) -> None:
    """One evaluation and its chain (PreviousEval / NextEval / BlockedEval)."""
    from herdbook.api.messages import ById, EvalChain
    client.check_id(eval_id, "eval id")
    result = client.call(str(ctx.obj["server"]), "eval.status", ById(id=eval_id), EvalChain)
    if output is not Format.table:
        render_object(client.plain(result), output)
        return
    render_object(client.plain(result.eval), output)
    console.print("\nchain:", markup=False)
    render_rows(client.plain(result.chain), EVAL_COLUMNS, output)


@eval_app.command("describe")
def eval_describe(ctx: typer.Context, eval_id: Annotated[str, typer.Argument(
        help="Eval id or a unique prefix.")], output: Output = Format.table) -> None:
    """One evaluation: its status, what triggered it, its job, how many allocations it
    placed, and while the job has slots no node takes, why (per constraint and
    resource, from the fleet as it is now)."""
    from herdbook.api.explain_messages import EvalDescription
    from herdbook.api.messages import ById
    client.check_id(eval_id, "eval id")
    result = client.plain(client.call(str(ctx.obj["server"]), "eval.describe",
                                      ById(id=eval_id), EvalDescription))
    if output is not Format.table:
        render_object(result, output)
        return
    shown = {k: result["eval"][k] for k in ("id", "status", "triggered_by", "job_id",
                                            "priority", "status_reason", "previous_eval",
                                            "next_eval", "blocked_eval", "created_at")}
    shown.update(job_phase=result["job_phase"], placed=result["placed"],
                 unplaced=result["unplaced"])
    render_object(shown, output)
    print_why(result["placement"])


@eval_app.command("retry")
def eval_retry(ctx: typer.Context, eval_id: Annotated[str, typer.Argument(
        help="A failed eval's id or a unique prefix.")],
        message: Annotated[str, typer.Option("--message", "-m",
                                             help="Why (recorded in the event).")] = "",
        ) -> None:
    """Hand a failed evaluation to the broker again (failed -> scheduling). One the
    broker holds already (pending, scheduling: a retry sent twice) is left as it is,
    exit 0."""
    from herdbook.api.messages import EvalReply, RetryEval
    client.check_id(eval_id, "eval id")
    result = client.call(str(ctx.obj["server"]), "eval.retry",
                         RetryEval(id=eval_id, reason=message, actor=client.actor()), EvalReply)
    echo(f"Ok: {result.unchanged}" if result.unchanged
         else f"Ok: eval {result.id} is {result.status.value}")


alloc_app = typer.Typer(help="Allocations: one running copy of a job on a node.",
                        no_args_is_help=True)

ALLOC_COLUMNS = [("ID", "id"), ("JOB", "job_id"), ("#", "index"), ("NODE", "node_id"),
                 ("STATUS", "status"), ("DESIRED", "desired"), ("EXIT", "exit_code"),
                 ("REQUEUES", "requeue_count"), ("REASON", "status_reason")]
ALLOC_STATUSES: tuple[str, ...] = tuple(AllocStatus)


@alloc_app.command("list")
def alloc_list(ctx: typer.Context, output: Output = Format.table,
               node: Annotated[str, typer.Option("--node", help="Only on this node.")] = "",
               job: Annotated[str, typer.Option("--job", help="Only of this job.")] = "",
               status_: Annotated[list[str] | None, typer.Option(
                   "--status", help=", ".join(ALLOC_STATUSES))] = None) -> None:
    """Allocations, by job and slot."""
    for value, what in ((node, "node id"), (job, "job id")):
        if value:
            client.check_id(value, what)
    wanted = wanted_statuses(status_, ALLOC_STATUSES, "allocation")
    from herdbook.api.messages import AllocReply, ListAllocs, Page
    result = client.call(str(ctx.obj["server"]), "alloc.list",
                         ListAllocs(node_id=node, job_id=job, status=wanted), Page[AllocReply])
    render_rows(client.plain(result.items), ALLOC_COLUMNS, output)


@alloc_app.command("status")
def alloc_status(ctx: typer.Context, alloc_id: Annotated[str, typer.Argument(
        help="Allocation id or a unique prefix.")], output: Output = Format.table) -> None:
    """One allocation: where, what, its exit code and why."""
    from herdbook.api.messages import AllocReply, ById
    client.check_id(alloc_id, "allocation id")
    render_object(client.plain(client.call(str(ctx.obj["server"]), "alloc.status",
                                           ById(id=alloc_id), AllocReply)), output)


@alloc_app.command("logs")
def alloc_logs(ctx: typer.Context, alloc_id: Annotated[str, typer.Argument(
        help="Allocation id or a unique prefix.")],
        follow: Annotated[bool, typer.Option("--follow", "-f", help=(
            "Keep printing new output (polling) until the allocation ends or Ctrl-C."))
        ] = False,
        tail: Annotated[int | None, typer.Option("--tail", "-n", min=0, max=10_000, help=(
            "Only the last N lines (at most 128 KiB of them)."))] = None,
        interval: Annotated[float, typer.Option("--interval", min=0.05, hidden=True,
                                                help="Seconds between polls with -f.")
                            ] = 1.0) -> None:
    """A workload's output (stdout and stderr together), read from its node's agent
    through the control plane, at most 128 KiB per request: the whole log in pieces, or
    its last N lines. Control characters are escaped on a terminal, written as they are
    to a pipe or file."""
    import asyncio
    import sys

    from herdbook.api.explain_messages import AllocLogs, AllocLogsReply
    from herdbook.cli.output import safe
    client.check_id(alloc_id, "allocation id")
    raw = not sys.stdout.isatty()

    def write(text: str) -> None:
        if raw:
            sys.stdout.write(text)
        else:
            sys.stdout.write("\n".join(safe(line) for line in text.split("\n")))
        sys.stdout.flush()

    async def read(nc: Any) -> None:
        offset = 0 if tail is None else None
        while True:
            piece = await client.request(nc, "alloc.logs", AllocLogs(
                id=alloc_id, offset=offset, tail=tail or 0), AllocLogsReply)
            write(piece.data)
            offset = piece.next_offset
            if offset < piece.size:
                continue          # a capped piece: the next one at once
            if not follow or not piece.running:
                return
            await asyncio.sleep(interval)
            # a follow ends after the allocation does, with what it wrote last

    try:
        client.run(str(ctx.obj["server"]), read)
    except KeyboardInterrupt:
        pass
