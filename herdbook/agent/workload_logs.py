"""A workload's output, served by its node's agent on ``herd.agent.<node>.logs`` (issue 31
item 2): the control plane asks on behalf of `herd alloc logs`; operators may ask
directly; no agent may (its NATS permissions name no ``herd.agent.*`` subject).

Bounded: one reply reads at most ``max_bytes`` (``LOGS_MAX_BYTES``) of the file, from the
end for a tail and from an offset for a follow, so a log of any size costs neither side
more than that. The file is the executor's (``<state dir>/allocs/<alloc id>.log``,
``executor.ALLOCS_DIR``), stdout and stderr together."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from herdbook.events.agent_requests import LogsReply, decode_request, logs_request_decoder

log = logging.getLogger(__name__)


class Piece(NamedTuple):
    data: bytes
    offset: int
    next_offset: int
    size: int
    truncated: bool


def read_log(path: Path, offset: int | None, tail: int, max_bytes: int) -> Piece:
    """Without ``offset``: the last ``tail`` lines within the last ``max_bytes``, from a
    line's start where the window holds one. With it: up to ``max_bytes`` from ``offset``,
    ending after the last whole line when the cap cuts one (a line longer than the cap is
    sent in pieces). Raises ``OSError`` (FileNotFoundError: no such log)."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if offset is None:
            window = max(0, size - max_bytes)
            f.seek(max(0, window - 1))   # the byte before: does the window start a line?
            before = f.read(1) if window else b"\n"
            chunk = f.read(size - window)
            start = _last_lines(chunk, tail, whole_first=before != b"\n")
            return Piece(chunk[start:], window + start, window + len(chunk), size,
                         window + start > 0)
        offset = min(offset, size)
        f.seek(offset)
        chunk = f.read(min(max_bytes, size - offset))
    end = len(chunk)
    if offset + end < size:
        newline = chunk.rfind(b"\n")
        end = newline + 1 if newline >= 0 else _utf8_boundary(chunk)
    return Piece(chunk[:end], offset, offset + end, size, offset + end < size)


def _last_lines(chunk: bytes, lines: int, *, whole_first: bool) -> int:
    """Where the last ``lines`` lines of ``chunk`` start (a final newline ends the last
    line, it does not start another); ``whole_first``: the chunk may begin mid-line, so
    never start before its first newline."""
    if lines == 0:
        return len(chunk)
    pos = len(chunk) - 1 if chunk.endswith(b"\n") else len(chunk)
    for _ in range(lines):
        pos = chunk.rfind(b"\n", 0, pos)
        if pos < 0:
            break
    if pos >= 0:
        return pos + 1
    if whole_first and b"\n" in chunk[:-1]:
        return chunk.index(b"\n") + 1
    return 0


def _utf8_boundary(chunk: bytes) -> int:
    """The length of ``chunk`` without a UTF-8 character cut at its end."""
    end = i = len(chunk)
    i -= 1
    while i >= 0 and end - i < 4 and chunk[i] & 0xC0 == 0x80:   # continuation bytes
        i -= 1
    if i < 0:
        return end
    lead = chunk[i]
    need = 2 if lead & 0xE0 == 0xC0 else 3 if lead & 0xF0 == 0xE0 else \
        4 if lead & 0xF8 == 0xF0 else 1
    return i if end - i < need else end


class LogServer:
    """Answers ``herd.agent.<node>.logs`` from the executor's allocation directory."""

    def __init__(self, node_id: str, alloc_dir: Path) -> None:
        self.node_id = node_id
        self.alloc_dir = alloc_dir

    async def on_request(self, msg: Any) -> None:
        try:
            request = decode_request(logs_request_decoder, msg.data)
        except ValueError as err:
            await msg.respond(msgspec.json.encode(LogsReply(ok=False, error=str(err))))
            return
        # the id is one subject token ([A-Za-z0-9_-]): the path stays in alloc_dir
        path = self.alloc_dir / f"{request.alloc_id}.log"
        try:
            piece = await asyncio.to_thread(read_log, path, request.offset, request.tail,
                                            request.max_bytes)
        except FileNotFoundError:
            reply = LogsReply(ok=False, missing=True, error=(
                f"node {self.node_id} has no output of allocation {request.alloc_id}"))
        except OSError as err:
            log.warning("%s: log cannot be read: %s", request.alloc_id, err)
            reply = LogsReply(ok=False, error=f"{path.name}: {err.strerror or err}")
        else:
            reply = LogsReply(ok=True, data=piece.data.decode("utf-8", "replace"),
                              offset=piece.offset, next_offset=piece.next_offset,
                              size=piece.size, truncated=piece.truncated)
        await msg.respond(msgspec.json.encode(reply))
