"""InfiniBand ports from sysfs: ``<root>/<device>/ports/<n>/state`` (``4: ACTIVE``),
``phys_state`` (``5: LinkUp``) and ``counters/link_downed`` (how often the link went down),
as the kernel's ib_core writes them under ``/sys/class/infiniband``.

``IbWatch`` finds two health events (``gpu`` -1: a port is the node's):

- ``ib_port_down``: a port that was ACTIVE at some check since the agent started is not
  ACTIVE now, or is gone. Only ports seen ACTIVE count: a node's unused or unplugged
  ports (a second port nobody cabled) must not make it unhealthy;
- ``ib_flap``: a port's ``link_downed`` counter went up since the previous check (the link
  went down and came back between two checks): an occurrence, held like the other
  counters (``health.fault_hold``).

A root that does not exist turns the check off (a node without InfiniBand); a file that
cannot be read leaves that port's reading out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from herdbook.events.health_report import GpuEvent

SYSFS = "/sys/class/infiniband"


@dataclass(frozen=True)
class Port:
    state: str                 # ACTIVE, DOWN, INIT, ARMED, ... ("4: ACTIVE" -> "ACTIVE")
    phys_state: str = ""       # LinkUp, Polling, Disabled, ...
    link_downed: int | None = None


def _word(text: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE``; a bare word stays."""
    return text.strip().split(":", 1)[-1].strip()


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def read_ports(root: Path) -> dict[str, Port]:
    """Every port under ``root``, by ``<device> port <n>``."""
    ports: dict[str, Port] = {}
    try:
        devices = sorted(p for p in root.iterdir() if (p / "ports").is_dir())
    except OSError:
        return ports
    for device in devices:
        try:
            numbers = sorted((p for p in (device / "ports").iterdir() if p.name.isdigit()),
                             key=lambda p: int(p.name))
        except OSError:
            continue
        for port in numbers:
            state = _read(port / "state")
            if state is None:
                continue
            phys = _read(port / "phys_state")
            downed = _read(port / "counters" / "link_downed")
            try:
                count = None if downed is None else int(downed.strip())
            except ValueError:
                count = None
            ports[f"{device.name} port {port.name}"] = Port(
                _word(state), "" if phys is None else _word(phys), count)
    return ports


class IbWatch:
    def __init__(self, root: str | Path = SYSFS) -> None:
        self.root = Path(root)
        self._watched: set[str] = set()         # seen ACTIVE since start
        self._downed: dict[str, int] = {}

    @property
    def present(self) -> bool:
        return self.root.is_dir()

    def check(self) -> list[GpuEvent]:
        return self.observe(read_ports(self.root))

    def observe(self, ports: dict[str, Port]) -> list[GpuEvent]:
        events: list[GpuEvent] = []
        for name, port in ports.items():
            if port.state == "ACTIVE":
                self._watched.add(name)
            elif name in self._watched:
                phys = f", {port.phys_state}" if port.phys_state else ""
                events.append(GpuEvent(kind="ib_port_down", value=1.0,
                                       message=f"InfiniBand {name} {port.state}{phys}"))
            if port.link_downed is not None:
                before = self._downed.get(name)
                self._downed[name] = port.link_downed
                if before is not None and port.link_downed > before:
                    times = port.link_downed - before
                    events.append(GpuEvent(
                        kind="ib_flap", value=float(times),
                        message=f"InfiniBand {name} link went down {times} time"
                                f"{'s' if times > 1 else ''}"))
        for name in sorted(self._watched - ports.keys()):
            events.append(GpuEvent(kind="ib_port_down", value=1.0,
                                   message=f"InfiniBand {name} gone"))
        return events
