"""schemathesis hooks for ``test_api_contract`` (loaded by SCHEMATHESIS_HOOKS).

A job the fuzzer registers may ask for up to 100 000 allocations, and a fuzzed fleet has
nodes that take them: the scheduler would spend the run's minutes placing them (a scale
that ``benchmarks/`` measures, not a contract question). So a valid ``count`` above 8 is
folded into 1..8; a count the document refuses (0, 100 001, a string) is left alone, and
every check still runs on every request."""

from __future__ import annotations

from typing import Any

import schemathesis

MAX_FUZZ_COUNT = 8


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    spec = case.body.get("spec") if isinstance(case.body, dict) else None
    count = spec.get("count") if isinstance(spec, dict) else None
    if (isinstance(count, int) and not isinstance(count, bool)
            and MAX_FUZZ_COUNT < count <= 100_000):
        spec["count"] = 1 + count % MAX_FUZZ_COUNT
    return case
