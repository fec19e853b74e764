"""XIDs from the kernel log: the ``NVRM: Xid (PCI:0000:3b:00): 79, ...`` lines the NVIDIA
driver writes to the kernel ring buffer, read from ``/dev/kmsg``, a file or FIFO, or
``journalctl -k -f``. It needs no NVML events; NVML (or the fake backend) only maps the
PCI bus id to the GPU index.

Reads never block: every source is polled (``KernelLog.follow``). ``/dev/kmsg`` is read
from its end at start (SEEK_END), so an earlier boot's lines are not reported again; a
record the ring buffer overwrote before it was read (EPIPE) is skipped. A regular file
is followed from its end (appended lines only); a FIFO from whatever is written to it.

NVSwitch errors come the same way: ``nvidia-nvswitch2: SXid (PCI:0000:87:00.0): 24007,
Fatal, Link 44 ...`` (``parse_sxid``). Each is a ``sxid`` health event of the node (GPU
-1), ``fatal`` as the driver says; the follow-up lines of one error (``Severity ...``,
``Data {...}``) are not errors of their own and are skipped.

The same XID is often seen twice, by NVML's event and by the kernel line: ``XidMerger``
reports an XID of one source and the same (GPU, XID) of the other within ``window``
seconds once, naming both sources (``GpuEvent.source``: ``nvml``, ``kmsg`` or
``nvml+kmsg``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from herdbook.clock import Clock
from herdbook.events.health_report import GpuEvent

log = logging.getLogger(__name__)

KMSG = "/dev/kmsg"
JOURNALCTL = ("journalctl", "-k", "-f", "-o", "short-monotonic", "-n", "0")
SOURCE_HELP = "/dev/kmsg (default), file:PATH (a file or FIFO), journalctl or off"

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}"
    r"(?:\.[0-7])?|[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.[0-7])\): (?P<xid>\d+)(?:,\s*(?P<rest>.*))?$")
_PID = re.compile(r"pid=(?P<pid>'?<unknown>'?|\d+),\s*")
_NAME = re.compile(r"name=(?P<name>[^,]*),\s*")


_SXID = re.compile(
    r"(?:(?P<dev>nvidia-nvswitch\d+):\s*)?SXid \((?:PCI:)?(?P<bus>[0-9a-fA-F:.]+)\): "
    r"(?P<code>\d+), (?P<sev>Fatal|Non-fatal|Nonfatal)\b,?\s*(?P<rest>.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class SwitchXid:
    """One NVSwitch SXid line of the kernel log (its first line, with the severity)."""

    switch: str            # nvidia-nvswitchN, or the bus id where the line has no name
    sxid: int
    fatal: bool
    message: str = ""


def parse_sxid(line: str) -> SwitchXid | None:
    """The SXid of one kernel log line, or None (not an SXid, or a follow-up line)."""
    if "SXid" not in line:
        return None
    match = _SXID.search(line.rstrip("\r\n"))
    if match is None:
        return None
    return SwitchXid(switch=match["dev"] or match["bus"].lower(), sxid=int(match["code"]),
                     fatal=match["sev"].lower() == "fatal", message=match["rest"].strip())


@dataclass(frozen=True)
class KernelXid:
    """One XID line of the kernel log."""

    bus_id: str            # normalised: dddd:bb:dd (``normalise_bus_id``)
    xid: int
    message: str = ""
    pid: int | None = None
    name: str = ""


def normalise_bus_id(text: str) -> str:
    """``dddd:bb:dd`` in lower case, whatever the form: NVML's ``00000000:3B:00.0``
    (8-hex domain, function), the kernel's ``0000:3b:00``, or ``3b:00.0`` (no domain).
    The function is dropped: a GPU is one PCI device. Raises ValueError on anything else."""
    text = text.strip().lower().removeprefix("pci:")
    device_part = text.rsplit(".", 1)[0] if "." in text else text
    parts = device_part.split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        raise ValueError(f"not a PCI bus id: {text!r}")
    domain, bus, device = (int(part, 16) for part in parts)
    if domain > 0xFFFFFFFF or bus > 0xFF or device > 0x1F:
        raise ValueError(f"not a PCI bus id: {text!r}")
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def parse_line(line: str) -> KernelXid | None:
    """The XID of one kernel log line (a /dev/kmsg record ``prio,seq,usec,flags;text``,
    a dmesg or journal line with its prefix, or the bare text), or None."""
    if "NVRM: Xid" not in line:
        return None
    match = _XID.search(line.rstrip("\r\n"))
    if match is None:
        return None
    try:
        bus_id = normalise_bus_id(match["bus"])
    except ValueError:
        return None
    rest = match["rest"] or ""
    pid: int | None = None
    name = ""
    if found := _PID.match(rest):
        pid = int(found["pid"]) if found["pid"].isdigit() else None
        rest = rest[found.end():]
    if found := _NAME.match(rest):
        name = "" if found["name"] == "<unknown>" else found["name"]
        rest = rest[found.end():]
    return KernelXid(bus_id=bus_id, xid=int(match["xid"]), message=rest.strip(), pid=pid,
                     name=name)


class LineSource(Protocol):
    def read_lines(self) -> list[str]:
        """What arrived since the last call; never blocks."""
        ...

    def close(self) -> None: ...


class _Lines:
    """Bytes read in chunks, split into whole lines."""

    def __init__(self) -> None:
        self._partial = b""

    def split(self, data: bytes) -> list[str]:
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        return [line.decode(errors="replace") for line in lines]


class KmsgSource:
    """``/dev/kmsg``: one record per read, from the end of the ring buffer at open."""

    def __init__(self, path: str = KMSG) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError:
            pass   # a FIFO or a file given as kmsg: read what comes

    def read_lines(self) -> list[str]:
        lines: list[str] = []
        for _ in range(10_000):
            try:
                record = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:
                continue     # records overwritten before we read them: go on with the next
            if not record:
                break
            lines.extend(record.decode(errors="replace").splitlines())
        return lines

    def close(self) -> None:
        os.close(self.fd)


def _read_available(fd: int, lines: _Lines) -> list[str]:
    """The whole lines a non-blocking fd holds now (end of file, or no writer on a FIFO
    for now, ends the read; a partial line waits in ``lines`` for its end)."""
    found: list[str] = []
    for _ in range(10_000):
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not data:
            break
        found.extend(lines.split(data))
    return found

class FileSource:
    """A file (followed from its end) or a FIFO (everything written to it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        if stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.lseek(self.fd, 0, os.SEEK_END)
        self._lines = _Lines()

    def read_lines(self) -> list[str]:
        return _read_available(self.fd, self._lines)

    def close(self) -> None:
        os.close(self.fd)


class JournalSource:
    """``journalctl -k -f -o short-monotonic -n 0`` as a subprocess (new lines only)."""

    def __init__(self, command: tuple[str, ...] = JOURNALCTL) -> None:
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        assert self.process.stdout is not None
        self.fd = self.process.stdout.fileno()
        os.set_blocking(self.fd, False)
        self._lines = _Lines()

    def read_lines(self) -> list[str]:
        return _read_available(self.fd, self._lines)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def check_source(spec: str) -> str:
    """``spec`` if it is a valid ``--kmsg-source``; ValueError (one line) otherwise."""
    if spec in ("off", "journalctl", KMSG) or (spec.startswith("file:") and spec[5:]):
        return spec
    if spec.startswith("/"):
        return spec          # another kmsg-like device
    raise ValueError(f"invalid --kmsg-source {spec!r}; use {SOURCE_HELP}")


def open_source(spec: str) -> LineSource | None:
    """The source ``spec`` names (``check_source``), or None when it is off or cannot be
    read: a one-line warning, and the agent goes on without it."""
    if spec == "off":
        return None
    try:
        if spec == "journalctl":
            return JournalSource()
        if spec.startswith("file:"):
            return FileSource(spec[5:])
        return KmsgSource(spec)
    except OSError as err:
        log.warning("kernel log monitor off: %s: %s", spec, err.strerror or err)
        return None


class XidMerger:
    """Reports an XID seen by NVML and by the kernel log once. An XID of one source is
    a duplicate when the same (GPU, XID) of the other source was reported less than
    ``window`` seconds before and was not matched yet: three XIDs from each source are
    three XIDs, not six."""

    def __init__(self, *, clock: Clock, window: float = 30.0) -> None:
        self.window = window
        self.clock = clock
        self._unmatched: list[tuple[float, int, int, str]] = []    # (at, gpu, xid, source)
        self.duplicates = 0

    def merge(self, nvml: list[GpuEvent], kernel: list[GpuEvent]) -> list[GpuEvent]:
        """Both sources' XIDs of one report, each reported once."""
        now = self.clock.monotonic()
        self._unmatched = [u for u in self._unmatched if now - u[0] < self.window]
        out: list[GpuEvent] = []
        for event in [*nvml, *kernel]:
            source = event.source or "nvml"
            match = next((i for i, (_, g, x, s) in enumerate(self._unmatched)
                          if (g, x) == (event.gpu, event.xid) and s != source), None)
            if match is None:
                self._unmatched.append((now, event.gpu, event.xid, source))
                out.append(event if event.source else _with_source(event, source))
                continue
            self.duplicates += 1
            del self._unmatched[match]
            # the same report: say both; an earlier report: already told
            for i, sent in enumerate(out):
                if (sent.gpu, sent.xid) == (event.gpu, event.xid) and "+" not in sent.source \
                        and sent.source != source:
                    out[i] = _with_source(sent, "nvml+kmsg", sent.message or event.message)
                    break
        return out


def _with_source(event: GpuEvent, source: str, message: str | None = None) -> GpuEvent:
    return GpuEvent(kind=event.kind, gpu=event.gpu, xid=event.xid, value=event.value,
                    message=event.message if message is None else message, source=source)


class KernelLog:
    """Follows one source: XID lines become ``xid`` health events of this node's GPUs
    (``gpu`` -1 when the bus id is not one of them), kept until the next health report
    takes them (``merge``, with NVML's); ``on_xid`` is called when some arrived, to report
    at once."""

    def __init__(self, source: LineSource, bus_ids: Callable[[], dict[str, int]],
                 merger: XidMerger, poll_interval: float = 0.25) -> None:
        self.source = source
        self.merger = merger
        self._bus_ids = bus_ids
        self._map: dict[str, int] | None = None
        self.poll_interval = poll_interval
        self.pending: list[GpuEvent] = []
        self.switch_pending: list[GpuEvent] = []
        """NVSwitch SXids since the last report (``switch_events``)."""
        self.lines = 0

    def gpu_index(self, bus_id: str) -> int:
        if self._map is None or bus_id not in self._map:
            try:
                self._map = self._bus_ids()
            except Exception as err:  # noqa: BLE001 - NVML failing: the XID still counts
                log.debug("PCI bus ids unavailable: %s", err)
                self._map = self._map or {}
        return self._map.get(bus_id, -1)

    def poll(self) -> list[GpuEvent]:
        """Read what arrived; the XIDs among it are added to ``pending`` and returned."""
        found = []
        for line in self.source.read_lines():
            self.lines += 1
            xid = parse_line(line)
            if xid is None:
                sxid = parse_sxid(line)
                if sxid is not None:
                    event = GpuEvent(kind="sxid", xid=sxid.sxid, fatal=sxid.fatal, value=1.0,
                                     message=f"{sxid.switch}: {sxid.message}".rstrip(": "),
                                     source="kmsg")
                    self.switch_pending.append(event)
                    found.append(event)
                continue
            message = xid.message + (f" (pid {xid.pid}, {xid.name})" if xid.pid and xid.name else "")
            found.append(GpuEvent(kind="xid", gpu=self.gpu_index(xid.bus_id), xid=xid.xid,
                                  message=message, source="kmsg"))
        self.pending.extend(e for e in found if e.kind == "xid")
        return found

    def drain(self) -> list[GpuEvent]:
        out, self.pending = self.pending, []
        return out

    def merge(self, nvml_xids: list[GpuEvent]) -> list[GpuEvent]:
        """NVML's XIDs and the kernel log's since the last report, each once."""
        return self.merger.merge(nvml_xids, self.drain())

    def switch_events(self) -> list[GpuEvent]:
        """The NVSwitch SXids since the last report (NVML does not see them: no merge)."""
        out, self.switch_pending = self.switch_pending, []
        return out

    async def follow(self, on_xid: Callable[[], Awaitable[object]]) -> None:
        try:
            while True:
                try:
                    found = self.poll()
                except OSError as err:
                    log.warning("kernel log monitor: %s", err)
                    found = []
                if found:
                    try:
                        await on_xid()
                    except Exception as err:  # noqa: BLE001 - the next health report takes them
                        log.warning("reporting kernel XIDs failed: %s", err)
                await asyncio.sleep(self.poll_interval)
        finally:
            self.source.close()
