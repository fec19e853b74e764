"""The view after HERD_EVENTS was lost and created again (``control/streams_guard.py``).

A row's ``version`` is the stream sequence of its aggregate's last event: the expected
version of the next decision on it (``Nats-Expected-Last-Subject-Sequence``). A stream
created again holds nothing before its ``first_seq``, so the server's last sequence of
every subject that had no event since is 0, and an append expecting the old version is
refused for ever ("kept changing"). Rebasing sets every version below ``first_seq`` to 0:
what the new stream says of those subjects. The rows themselves (states, labels, jobs,
allocations) are kept: the view is the only record left of what the lost events said.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from herdbook.projector.tables import ReadModel, Table


def rebase(model: ReadModel, first_seq: int) -> int:
    """Set every version below ``first_seq`` to 0 (rows marked for the next commit, no
    listener told: nothing happened to the aggregates); returns how many rows changed."""
    changed = 0
    for table in (model.nodes, model.allocs, model.evals, model.jobs, model.instances):
        changed += _rebase_rows(table, first_seq)
    versions = model.alloc_versions
    for key, seq in list(versions.rows.items()):
        if 0 < seq < first_seq:
            versions.put(key, 0)
            changed += 1
    return changed


def _rebase_rows(table: Table[Any, Any], first_seq: int) -> int:
    changed = 0
    for key, row in list(table.rows.items()):
        version = getattr(row, "version", 0)
        if 0 < version < first_seq:
            table.put(key, replace(row, version=0))
            changed += 1
    return changed
