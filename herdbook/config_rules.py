"""How a config section is declared, and why a config file is refused, in one line:
``file: key.path: reason``.

The rules are the types of the config Structs (``herdbook.config``): a ``Literal`` or an
enum for a word from a list, a msgspec ``Meta`` constraint (``ge``, ``le``, ``pattern``,
``min_length``) whose ``description`` says the rule in words, a ``__post_init__`` for a
rule across two fields of one section. msgspec refuses a bad value at decode; this module
only turns its message into what an operator reads: the key path with the names msgspec
leaves out (which pool: msgspec says ``pools[...]``), the allowed words of a list, the
rule's description instead of a regex."""

from __future__ import annotations

import enum
import re
import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

import msgspec

from herdbook.durations import Duration, parse_duration
from herdbook.events.decode_errors import error_path


class ConfigError(ValueError):
    pass


class Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A config section: a misspelt key is refused by name."""


class PositiveDuration(Duration):
    """A duration that must be more than 0 (``dec_hook`` refuses 0)."""


def dec_hook(typ: type, obj: Any) -> Any:
    if typ is Duration:
        return parse_duration(obj)
    if typ is PositiveDuration:
        seconds = parse_duration(obj)
        if seconds <= 0:
            raise ValueError("must be more than 0")
        return PositiveDuration(seconds)
    raise NotImplementedError(f"cannot decode {typ}")


_TOKEN = re.compile(r"\.([^.\[]+)|\[(\.\.\.|\d+)\]")
_ENUM_VALUE = re.compile(r"^Invalid enum value (.+)$")


def explain(message: str, root: type, document: Any, dec_hook: Callable[[type, Any], Any]) -> str:
    """``key.path: reason`` for msgspec's ``reason - at `$.key.path```, ``document`` being
    what was decoded (to name the pool a ``[...]`` stands for)."""
    reason, sep, where = message.rpartition(" - at `")
    if not sep:
        return error_path(message)
    in_key = where.startswith("key` in `")
    where = where.removeprefix("key` in `").rstrip("`").removeprefix("$")
    shown, kind, doc = _walk(root, document, where, dec_hook)
    if in_key:
        kind, bad_key = _key_type(kind), _bad_key(kind, doc)
        shown = f"{shown}.{bad_key}" if bad_key is not None else shown
    path = shown.lstrip(".") or "(top level)"
    if ", got `" in reason:   # the wrong type: msgspec's words say it best
        return f"{path}: {reason}"
    choices = _choices(kind)
    found = _ENUM_VALUE.match(reason)
    if choices and found:
        return f"{path}: {found.group(1)} is not one of {', '.join(choices)}"
    rule = _description(kind)
    return f"{path}: {rule or reason}"


def _walk(root: type, document: Any, where: str,
          dec_hook: Callable[[type, Any], Any]) -> tuple[str, Any, Any]:
    """Follow msgspec's path from ``root``: the path as shown, the type there, the
    document's value there."""
    shown, kind, doc = "", cast(Any, root), document
    for name, index in _TOKEN.findall(where):
        bare = _bare(kind)
        if name:
            field = _field(bare, name)
            if field is None:
                return shown + where[len(shown):], None, None
            kind = field
            doc = doc.get(name) if isinstance(doc, dict) else None
            shown += f".{name}"
        elif index == "...":   # a dict's value: find the entry that fails
            kind = get_args(bare)[1] if get_origin(bare) is dict else None
            key = _failing_entry(kind, doc, dec_hook)
            doc = doc.get(key) if isinstance(doc, dict) and key is not None else None
            shown += f".{key}" if key is not None else "[...]"
        else:
            kind = get_args(bare)[0] if get_origin(bare) is list else None
            doc = doc[int(index)] if isinstance(doc, list) and int(index) < len(doc) else None
            shown += f"[{index}]"
    return shown, kind, doc


def _bare(kind: Any) -> Any:
    """The type without ``Annotated`` and without ``| None``."""
    if get_origin(kind) is Annotated:
        return _bare(get_args(kind)[0])
    if get_origin(kind) in (Union, types.UnionType):
        arms = [a for a in get_args(kind) if a is not type(None)]
        if len(arms) == 1:
            return _bare(arms[0])
    return kind


def _field(struct: Any, name: str) -> Any:
    if not (isinstance(struct, type) and issubclass(struct, msgspec.Struct)):
        return None
    for field in msgspec.structs.fields(struct):
        if field.encode_name == name:
            return field.type
    return None


def _failing_entry(kind: Any, doc: Any, dec_hook: Callable[[type, Any], Any]) -> Any:
    if kind is None or not isinstance(doc, dict):
        return None
    for key, value in doc.items():
        try:
            msgspec.convert(value, kind, dec_hook=dec_hook)
        except msgspec.ValidationError:
            return key
    return None


def _key_type(kind: Any) -> Any:
    bare = _bare(kind)
    return get_args(bare)[0] if get_origin(bare) is dict else None


def _bad_key(kind: Any, doc: Any) -> Any:
    if kind is None or not isinstance(doc, dict):
        return None
    for key in doc:
        try:
            msgspec.convert(key, kind)
        except msgspec.ValidationError:
            return key
    return None


def _choices(kind: Any) -> list[str]:
    bare = _bare(kind)
    if get_origin(bare) is Literal:
        return [str(value) for value in get_args(bare)]
    if isinstance(bare, type) and issubclass(bare, enum.Enum):
        return [str(member.value) for member in bare]
    return []


def _description(kind: Any) -> str:
    if get_origin(kind) in (Union, types.UnionType):
        arms = [a for a in get_args(kind) if a is not type(None)]
        return _description(arms[0]) if len(arms) == 1 else ""
    if get_origin(kind) is not Annotated:
        return ""
    for meta in reversed(get_args(kind)[1:]):
        if isinstance(meta, msgspec.Meta) and meta.description:
            return meta.description
    return ""
