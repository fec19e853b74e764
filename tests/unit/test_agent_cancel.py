"""An agent stops even when one of its tasks loses its cancel: on Python 3.11
``asyncio.wait_for`` swallows a cancel that lands as what it waits for completes, and
a loop around it runs on (an agent that never stopped under load)."""

from __future__ import annotations

import asyncio

from herdbook.agent.task_loops import cancel_until_done


async def swallowing_loop(ticks: list[int]) -> None:
    """Loses its first cancel (as ``wait_for`` does on 3.11), then loops like ``every``."""
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        pass   # the lost cancel
    while True:
        ticks.append(1)
        await asyncio.sleep(0.05)


async def test_a_task_that_loses_its_cancel_is_cancelled_again() -> None:
    ticks: list[int] = []
    plain = asyncio.create_task(asyncio.sleep(60))
    losing = asyncio.create_task(swallowing_loop(ticks))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_until_done([plain, losing], again=0.1), 5)
    assert plain.cancelled() and losing.cancelled() and ticks   # it did run on, then stopped


async def test_one_cancel_is_not_enough_for_such_a_task() -> None:
    """What the helper is for: cancel once and wait, and the loop never ends."""
    task = asyncio.create_task(swallowing_loop([]))
    await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=0.5)
    assert not done
    await cancel_until_done([task], again=0.1)
