"""The projector's view file: opening it and loading every table, checking it against
the stream, moving one aside that is corrupt or stale, the fresh file a rebuild from
sequence 1 goes into and its install, and the commit of the dirty rows with the
checkpoint in one transaction (``schema.write_batch``).

A base of ``ProjectorRunner`` (``runner.py``), not a part of its own: it shares the
runner's fold position, pending count and commit lock, whose order is the crash-safety
argument. The runner's side (the feed, the folds, read-your-writes) stays in runner.py.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import Any

from herdbook.projector import fresh_view, integrity, schema
from herdbook.projector.tables import ReadModel
from herdbook.projector.waiters import Waiters

log = logging.getLogger("herdbook.projector.projection")   # one logger: the runner's


class ViewFile:
    """What ``ProjectorRunner`` sets up in its constructor, used here."""

    js: Any
    db_path: str
    stream: str
    model: ReadModel
    folded_seq: int
    committed_seq: int
    _pending: int
    _db: Any
    _fresh: bool
    _fresh_seq: int
    _lock: asyncio.Lock
    _waiters: Waiters

    def rebase(self, first_seq: int) -> None:
        raise NotImplementedError   # ProjectorRunner's

    async def _try_install(self, failing: str | None) -> str | None:
        """One try at installing a rebuilt view (``_install``), if there is one or no view
        is open: None once done, else its error (logged unless it is ``failing``)."""
        if not (self._fresh or self._db is None):
            return None
        try:
            await asyncio.shield(self._install())
        except (OSError, sqlite3.Error) as err:
            if str(err) != failing:
                log.error("installing the rebuilt view %s failed, retrying every second: %s",
                          self.db_path, err)
            return str(err)
        return None

    async def _open_fresh(self) -> None:
        await self._close_db()
        try:
            self._db = await fresh_view.open_fresh(self.db_path)
            await integrity.disagreement(self.js, self.stream, self._db, 0)  # the stream's identity
        except (OSError, sqlite3.Error) as err:
            await self._close_db()
            log.warning("cannot rebuild the view %s in a fresh file (%s): rebuilding it in place",
                        self.db_path, err)
            self._db = await schema.open_db(self.db_path)
            return
        self._fresh = True

    async def _install(self, *, reopen: bool = True) -> None:
        """Commit what is folded and rename the fresh file over the view (``fresh_view``);
        with ``reopen``, go on in it. Safe to call again after it raised: a file not yet
        renamed is opened again as it was, a view renamed but not opened is opened."""
        async with self._lock:
            if self._fresh and self._db is not None:
                await self._commit()
                db, self._db = self._db, None
                try:
                    await fresh_view.install(db, self.db_path)
                except BaseException:
                    self._db = await fresh_view.open_fresh(self.db_path, empty=False)
                    raise
                self._fresh = False
                if self._fresh_seq:   # the view at db_path holds it now
                    self.committed_seq, self._fresh_seq = self._fresh_seq, 0
                    self._waiters.release(self.committed_seq)
            if reopen and not self._fresh and self._db is None:
                self._db = await schema.open_db(self.db_path)

    async def load(self) -> None:
        """Open the view database and load every table and the checkpoint. A file that
        cannot be read is moved aside and the view starts empty (``start`` folds it
        again from sequence 1), with one log line saying why: never a crash."""
        try:
            await self._load()
        except integrity.CORRUPT_ERRORS as err:
            await self._close_db()
            await self._start_over(integrity.corrupt_reason(self.db_path, err), "corrupt")

    async def _check_stream(self) -> None:
        """A view that is not a view of the stream there now (``integrity``) starts over
        too: never a view that silently skips new events. One of a stream created again
        after a loss (``first_seq`` after what the view folded) is kept, rebased."""
        why = await integrity.disagreement(self.js, self.stream, self._db, self.committed_seq,
                                           on_continued=self.rebase)
        if why is not None:
            await self._close_db()
            await self._start_over(why, "stale")
            await integrity.disagreement(self.js, self.stream, self._db, self.committed_seq)

    async def _start_over(self, why: str, kind: str) -> None:
        try:
            aside = integrity.move_aside(self.db_path, kind)
        except OSError as err:
            raise integrity.ViewError(f"the view {self.db_path} {why}, and it cannot be moved "
                                      f"aside: {err.strerror or err}") from err
        log.error("view %s %s: moved it to %s and rebuilding it from sequence 1",
                  self.db_path, why, aside.name)
        await self._load()

    async def _load(self) -> None:
        self._db = await schema.open_db(self.db_path)
        nodes, self.committed_seq = await schema.load(self._db, self.stream)
        self.model.nodes.load(nodes)
        for table in (self.model.instances, self.model.evals, self.model.jobs,
                      self.model.allocs, self.model.alloc_versions):
            table.load(await schema.load_table(self._db, table.name,
                                               schema.DECODERS[table.name]))
        self.model.pool_sizes.load(await schema.load_pool_sizes(self._db))
        self.folded_seq = self.committed_seq

    async def _close_db(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    async def flush(self) -> None:
        async with self._lock:
            await self._commit()

    async def _commit(self) -> None:
        """What ``flush`` does, under its lock."""
        if self._pending == 0 or self._db is None:
            return
        seq = self.folded_seq
        self._pending = 0
        model = self.model
        tables = [(table, table.take_dirty()) for table in model.tables()]
        (_, nodes_changed), *others, (_, pools_changed) = tables
        try:
            await schema.write_batch(
                self._db, self.stream, model.nodes.rows, nodes_changed, seq,
                [(table.name, table.rows, dirty) for table, dirty in others],
                dict(model.pool_sizes.rows) if pools_changed else None)
        except BaseException:
            # Nothing was committed: the next flush writes these rows again.
            for table, dirty in tables:
                table.mark_dirty(dirty)
            self._pending += max(1, seq - self.committed_seq)
            raise
        if self._fresh:   # committed once the fresh file is the view (_install)
            self._fresh_seq = seq
            return
        self.committed_seq = seq
        self._waiters.release(seq)
