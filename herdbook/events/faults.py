"""The GPU faults the fake NVML backend injects (``agent.fake_nvml.FakeNvml.inject``): asked for
by ``herd agent inject``, a scenario's ``inject:`` step and ``herd sim chaos``, carried on
the wire by ``agent_requests.InjectRequest``.

A fault is spelled with underscores, as the health event kind it makes the agent report
is (``ecc_dbe``). Releases before issue 30 spelled four of them with a hyphen
(``ecc-dbe``, ``ecc-sbe``, ``nvlink-down``, ``remap-failed``, ``gpu-missing``) while the
event kinds had underscores; the hyphenated spelling is still read everywhere a fault
is (``Fault("ecc-dbe")`` is ``Fault.ECC_DBE``, and so is msgspec's decode), and never
written."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:   # a type only: `herd --help` (the CLI's help lists faults) stays light
    from herdbook.events.health_report import HealthEventKind


class Fault(StrEnum):
    XID = "xid"
    THERMAL = "thermal"
    ECC_DBE = "ecc_dbe"
    ECC_SBE = "ecc_sbe"
    NVLINK = "nvlink"
    PCIE = "pcie"
    DRIVER = "driver"
    CLEAR = "clear"
    NVLINK_DOWN = "nvlink_down"
    REMAP_FAILED = "remap_failed"
    THROTTLE = "throttle"
    GPU_MISSING = "gpu_missing"

    @classmethod
    def _missing_(cls, value: object) -> Fault | None:
        # The spelling before issue 30: read, never written.
        if isinstance(value, str) and "-" in value:
            return cls._value2member_map_.get(value.replace("-", "_"))  # type: ignore[return-value]
        return None

    @property
    def event_kind(self) -> HealthEventKind | None:
        """The health event kind the agent reports after this fault; None for ``driver``
        (a conformance change) and ``clear``."""
        if self is Fault.GPU_MISSING:
            return "gpu_count"
        if self in (Fault.DRIVER, Fault.CLEAR):
            return None
        return cast("HealthEventKind", self.value)   # the same word (test_vocabularies)


FAULTS: tuple[Fault, ...] = tuple(Fault)


def fault_named(word: str) -> Fault:
    """The fault ``word`` names (either spelling); ``ValueError`` with the choices."""
    try:
        return Fault(word)
    except ValueError:
        raise ValueError(f"unknown fault {word!r}; choose from {', '.join(FAULTS)}") from None
