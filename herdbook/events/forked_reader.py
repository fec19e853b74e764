"""Reading a large backlog on the other core: a forked child reads, the parent folds.

A rebuild's one thread spends about a third of its time reading (socket reads, buffer
copies, cutting frames: ``backlog_reader``) and two thirds deciding and folding. For a
backlog of at least ``FORK_MIN`` messages, on a machine with ``MIN_CPUS`` or more (on
fewer the child only competes with the parent and nats-server for the same cores),
the projector forks a child that does the
reading with its own NATS connection (``BacklogReader``, unchanged) and sends each run of
messages through a pipe as one msgpack frame ``(sequences, subjects, bodies)``; the parent
decodes a run in one C call and folds it. The fork costs milliseconds (the child is the
parent's memory, nothing imported again), which is why it is a fork and not a new
interpreter (~0.2-0.3 s here, the whole gain at 200k events).

Narrow, like the reader it wraps:
- Only for catching up; the parent follows the stream live itself.
- The child never touches what it inherited (the parent's event loop, connections,
  files): it runs a new loop, its signals back to the defaults, dies with the parent
  (``PR_SET_PDEATHSIG`` on Linux), and leaves by ``os._exit``.
- Anything wrong with the child (it cannot connect, it dies, it is killed) ends
  ``run`` with the last sequence the parent folded; the caller reads the rest in
  process. An error of the fold is raised, and the child is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import signal
import sys
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats

from herdbook.events.backlog_reader import BacklogReader, Frames

log = logging.getLogger(__name__)

FORK_MIN = 50_000
"""Messages in a backlog from which it is read in a forked child (below, forking and
connecting cost more than they save)."""

STALL = 10.0
"""Seconds without a word from the child (its server gone, its connection lost) after
which it is killed and the rest is read in the parent."""

OnFrames = Callable[[Frames], Awaitable[None] | None]
_HEAD = 8
_run_decoder = msgspec.msgpack.Decoder(tuple[list[int], list[bytes], list[bytes]])


MIN_CPUS = 4
"""CPUs this process may use from which the child is worth it: with 2, the child, the
parent and nats-server contend for them and a 200k-event rebuild measured 92-106k
events/s forked against 96-113k read in process (benchmarks/view_rebuild.py)."""


def available() -> bool:
    return sys.platform == "linux" and hasattr(os, "fork")


def worthwhile() -> bool:
    """Whether a large backlog should be read by a child here (``available`` and CPUs)."""
    return available() and len(os.sched_getaffinity(0)) >= MIN_CPUS


class ForkedBacklog:
    def __init__(self, connect: dict[str, Any], stream: str, subject: str | None, start_seq: int,
                 end_seq: int, on_frames: OnFrames, *, batch: int) -> None:
        """``connect``: ``nats.connect`` keyword arguments for the child's connection (the
        parent's servers and credentials)."""
        self.connect = connect
        self.stream = stream
        self.subject = subject
        self.start_seq = start_seq
        self.end_seq = end_seq
        self.on_frames = on_frames
        self.batch = batch
        self.last_seq = start_seq - 1
        self.pid = 0
        """The child's, once forked."""

    async def run(self) -> int:
        """Fold what the child reads; return the last sequence folded (``end_seq``, or
        less if the child stopped early)."""
        read_fd, write_fd = os.pipe()
        with contextlib.suppress(OSError):   # fewer, larger reads (Linux: F_SETPIPE_SZ)
            fcntl.fcntl(write_fd, 1031, 1 << 20)
        parent = os.getpid()
        with warnings.catch_warnings():   # 3.12+ warns of forking with threads: see above
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        self.pid = pid
        if pid == 0:   # the child: never returns
            os.close(read_fd)
            _child(write_fd, parent, self.connect, self.stream, self.subject, self.start_seq,
                   self.end_seq, self.batch)
        os.close(write_fd)
        log.info("backlog of %s: reading sequences %d-%d in a forked child (pid %d)",
                 self.stream, self.start_seq, self.end_seq, pid)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 24, loop=loop)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(read_fd, "rb", 0))
        transport.max_size = 1 << 20   # type: ignore[attr-defined]  # a read per pipe-full
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readexactly(_HEAD), STALL)
                    size = int.from_bytes(head, "little")
                    if size == 0:
                        break   # the child read to the end
                    payload = await asyncio.wait_for(reader.readexactly(size), STALL)
                    seqs, subjects, bodies = _run_decoder.decode(payload)
                except (asyncio.IncompleteReadError, msgspec.DecodeError, TimeoutError) as err:
                    why = "stalled" if isinstance(err, TimeoutError) else "stopped"
                    log.info("backlog of %s: the reading child %s after %d; reading the rest "
                             "here", self.stream, why, self.last_seq)
                    break
                more = self.on_frames(list(zip(subjects, seqs, bodies, strict=True)))
                if more is not None:
                    await more
                self.last_seq = seqs[-1]
        finally:
            transport.close()
            await _reap(pid)
        return self.last_seq


async def _reap(pid: int) -> None:
    """Kill the child (done, or still reading after a failure) and collect it, on a
    thread: a cancel of the caller does not leave a zombie behind."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    await asyncio.to_thread(_collect, pid)


def _collect(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _child(write_fd: int, parent: int, connect: dict[str, Any], stream: str, subject: str | None,
           start_seq: int, end_seq: int, batch: int) -> None:
    code = 1
    try:
        _die_with(parent)
        signal.set_wakeup_fd(-1)   # the parent's: a signal here must not wake the parent
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        asyncio.events._set_running_loop(None)   # forked inside the parent's running loop
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.run_until_complete(_read(write_fd, connect, stream, subject, start_seq, end_seq,
                                      batch))
        code = 0
    except BaseException:  # noqa: BLE001 - the parent sees the pipe close early
        pass
    finally:
        os._exit(code)


def _die_with(parent: int) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    if os.getppid() != parent:   # the parent died before that
        os._exit(1)


async def _read(write_fd: int, connect: dict[str, Any], stream: str, subject: str | None,
                start_seq: int, end_seq: int, batch: int) -> None:
    nc = await nats.connect(**connect)
    encoder = msgspec.msgpack.Encoder()

    def send(frames: Frames) -> None:
        payload = encoder.encode(([seq for _, seq, _ in frames],
                                  [subject for subject, _, _ in frames],
                                  [data for _, _, data in frames]))
        _write_all(write_fd, len(payload).to_bytes(_HEAD, "little") + payload)

    def one(subject: str, data: bytes, seq: int) -> None:
        send([(subject.encode(), seq, data)])

    try:
        await BacklogReader(nc, stream, subject, start_seq, end_seq, one, batch=batch,
                            on_batch=send).run()
        _write_all(write_fd, bytes(_HEAD))
    finally:
        await nc.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
