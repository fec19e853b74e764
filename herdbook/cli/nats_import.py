"""Importing nats-py for a CLI request without what the request does not use: a third
of `herd node list`'s start was nats-py pulling in aiohttp and its JetStream package."""

from __future__ import annotations

import sys
import types
from typing import Any


class _Deferred(types.ModuleType):
    """A package whose code runs when something first reads an attribute it lacks (its
    ``__path__`` included, so importing a submodule runs it too)."""

    def __getattr__(self, name: str) -> Any:
        spec = self.__spec__
        assert spec is not None and spec.loader is not None
        self.__class__ = types.ModuleType  # type: ignore[assignment]
        self.__path__ = list(spec.submodule_search_locations or [])
        self.__file__ = spec.origin
        spec.loader.exec_module(self)
        return getattr(self, name)


def import_nats(server: str) -> None:
    """Import nats-py without what a core request does not use: aiohttp (0.14 s, a third
    of `herd node list`), which it imports for its websocket transport alone, unless a URL
    of ``server`` is a websocket one; and its JetStream package (``nats.js``, 0.06 s of
    dataclasses), run when first used (``_Deferred``). A ``None`` in ``sys.modules``
    makes nats-py's ``import aiohttp`` fail as if absent; removed after, so a later
    ``import aiohttp`` in this process works."""
    if "nats" in sys.modules or "aiohttp" in sys.modules:
        return
    from importlib.machinery import PathFinder
    from importlib.util import find_spec
    package = find_spec("nats")
    spec = PathFinder.find_spec("nats.js", package.submodule_search_locations) if package else None
    deferred = None
    if spec is not None and spec.loader is not None:
        deferred = _Deferred("nats.js")
        deferred.__spec__, deferred.__loader__, deferred.__package__ = spec, spec.loader, "nats.js"
        sys.modules["nats.js"] = deferred
    websockets = "ws://" in server or "wss://" in server
    if not websockets:
        sys.modules["aiohttp"] = None  # type: ignore[assignment]
    try:
        import nats
    except BaseException:
        if sys.modules.get("nats.js") is deferred:
            del sys.modules["nats.js"]
        raise
    finally:
        if not websockets:
            del sys.modules["aiohttp"]
    if deferred is not None and "js" not in vars(nats):
        nats.js = deferred  # as an import would bind it
