"""`herd job ...` and `herd eval ...`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, Output, console, echo, render_object, render_rows

job_app = typer.Typer(help="Jobs: what to run, how many, where.", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluations (Nomad's model): why and when scheduling happens.",
                       no_args_is_help=True)

EVAL_COLUMNS = [("ID", "id"), ("JOB", "job_id"), ("STATUS", "status"),
                ("TRIGGERED BY", "triggered_by"), ("PREVIOUS", "previous_eval"),
                ("NEXT", "next_eval"), ("BLOCKED", "blocked_eval")]
JOB_COLUMNS = [("ID", "id"), ("STATUS", "status"), ("VERSION", "version"), ("COUNT", "count"),
               ("PRIORITY", "priority"), ("ALLOCATIONS", "allocations")]
EVAL_STATUSES = ("pending", "blocked", "complete", "failed", "canceled", "scheduling",
                 "applying", "delayed", "deleted")


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
    from herdbook.events.jobs import JobSpecError, parse_job_spec
    try:
        spec = parse_job_spec(file.read_bytes(), str(file))
    except OSError as err:
        raise client.fail(f"{file}: {err.strerror}", client.EXIT_USAGE) from None
    except JobSpecError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    result = client.call(str(ctx.obj["server"]), "job.register",
                         RegisterJob(spec=spec, actor=client.actor()),
                         RegisterResult)
    if output is Format.table:
        echo(f"Ok: job {spec.id} registered, evaluation {result.eval_id}")
    else:
        render_object(client.plain(result), output)


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
    result["allocations"] = ", ".join(f"{k}={v}" for k, v in sorted(
        result["allocations"].items())) or "none"
    render_object(result, output)
    console.print("\nevaluations:", markup=False)
    render_rows(evals, EVAL_COLUMNS, output)


@job_app.command("stop")
def stop(ctx: typer.Context, job_id: Annotated[str, typer.Argument(help="Job id.")],
         message: Annotated[str, typer.Option("--message", "-m",
                                             help="Why (recorded in the event).")] = "",
        ) -> None:
    """Deregister a job (a job-deregister evaluation stops its allocations)."""
    from herdbook.api.messages import JobReply, StopJob
    client.check_id(job_id, "job id")
    client.call(str(ctx.obj["server"]), "job.stop",
                StopJob(id=job_id, reason=message, actor=client.actor()), JobReply)
    console.print("Ok")


@eval_app.command("list")
def eval_list(ctx: typer.Context, output: Output = Format.table,
              status_: Annotated[list[str] | None, typer.Option(
                  "--status", help="pending, blocked, complete, failed, canceled or a "
                  "quasi-status: scheduling, applying, delayed.")] = None,
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


@eval_app.command("retry")
def eval_retry(ctx: typer.Context, eval_id: Annotated[str, typer.Argument(
        help="A failed eval's id or a unique prefix.")],
        message: Annotated[str, typer.Option("--message", "-m",
                                             help="Why (recorded in the event).")] = "",
        ) -> None:
    """Hand a failed evaluation to the broker again (failed -> scheduling)."""
    from herdbook.api.messages import EvalReply, RetryEval
    client.check_id(eval_id, "eval id")
    result = client.call(str(ctx.obj["server"]), "eval.retry",
                         RetryEval(id=eval_id, reason=message, actor=client.actor()), EvalReply)
    echo(f"Ok: eval {result.id} is {result.status.value}")


alloc_app = typer.Typer(help="Allocations: one running copy of a job on a node.",
                        no_args_is_help=True)

ALLOC_COLUMNS = [("ID", "id"), ("JOB", "job_id"), ("#", "index"), ("NODE", "node_id"),
                 ("STATUS", "status"), ("DESIRED", "desired"), ("EXIT", "exit_code"),
                 ("REQUEUES", "requeue_count"), ("REASON", "status_reason")]
ALLOC_STATUSES = ("pending", "running", "stopping", "complete", "failed", "stopped", "lost")


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
