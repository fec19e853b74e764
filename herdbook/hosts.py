"""What a host name says about who can reach it: one answer for the nats-server herd runs
(``natsd/``), the HTTP API (``web/``) and the CLI's listener checks."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 (bracketed or not) or "localhost": only processes on this machine
    can connect."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
