"""The one base of every domain event: envelope fields kept apart from the payload."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import ClassVar

import msgspec


def new_id() -> str:
    """128 random bits as 32 hex digits (what ``uuid4().hex`` gave, at a quarter of the
    cost: every event takes one, and a plan takes thousands)."""
    return os.urandom(16).hex()


def utcnow() -> datetime:
    return datetime.now(UTC)


_EVENT_NAMES: dict[type, str] = {}


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Envelope of every event. Subclasses add the payload and a tag like ``node.approved``.

    ``event_id`` doubles as the JetStream ``Nats-Msg-Id``, so a resent append is
    deduplicated by the server. Shipped events only grow fields with defaults.
    """

    aggregate: ClassVar[str] = ""

    event_id: str = msgspec.field(default_factory=new_id)
    at: datetime = msgspec.field(default_factory=utcnow)
    actor: str = "system"
    causation_id: str | None = None
    correlation_id: str | None = None
    schema: int = 1

    @property
    def aggregate_id(self) -> str:
        raise NotImplementedError

    @property
    def event_name(self) -> str:
        cls = type(self)
        name = _EVENT_NAMES.get(cls)
        if name is None:   # once per type: the fold asks for it on every event
            tag = cls.__struct_config__.tag
            assert isinstance(tag, str)
            name = _EVENT_NAMES[cls] = tag.split(".", 1)[1]
        return name
