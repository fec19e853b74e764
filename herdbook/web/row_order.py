"""Values of a node table in another order, without a lookup by id per node (the
``/v1/fleet`` reply's rows, ``web/fleet_rows.py``; issue 32 item 3)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import Any, TypeVar

V = TypeVar("V")


def picker(order: list[int]) -> Callable[[Sequence[float]], Sequence[float]]:
    """``itemgetter``'s pick for fewer than two items (it returns one item bare)."""
    return lambda times: tuple(times[i] for i in order)


class InRowOrder:
    """A table's values in the rows' order, read in the table's own order.

    Why (issue 32 item 3): looking each node up by id in the heartbeat and telemetry
    tables probes their hash indexes in random order and then follows each entry to its
    record, a few cache misses per node once 100k nodes' tables outgrow the CPU's
    caches (0.1 µs per node at 1k, 1.1 µs at 100k, measured). Walking a dict's keys and
    values is sequential; the permutation from the table's order to the rows' order is
    rebuilt only when the table's keys change (a node added or forgotten: rare), and
    applied in C (``itemgetter``), copying pointers without touching what they point to."""

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._ids: list[str] = []
        self._pick: Callable[[list[Any]], Sequence[Any]] = lambda values: ()

    def values(self, table: Mapping[str, Any], ids: list[str], missing: V,
               values: list[V]) -> Sequence[V]:
        """``values`` (the table's, in its order) picked in ``ids``' order; ``missing``
        for an id the table lacks."""
        keys = list(table)
        if keys != self._keys or ids is not self._ids:   # identical keys: no string compared
            self._keys, self._ids = keys, ids
            where = {k: i for i, k in enumerate(keys)}
            order = [where.get(k, len(keys)) for k in ids]   # past the end: ``missing``
            if len(order) == 1:
                only = order[0]
                self._pick = lambda values: (values[only],)
            elif order:
                self._pick = itemgetter(*order)
            else:
                self._pick = lambda values: ()
        values.append(missing)
        return self._pick(values)
