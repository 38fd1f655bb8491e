"""A caller queued behind another caller's slow session opening (a reconciler's read-back, another
action) is told "not sent" within its own connect timeout: the wait for the opening counts too.

Before, the wait for the lock did not count, and a queued caller's NotSent could come after the
driver's attempt timeout, which then cut the call and could only say "may have been sent" (an
UNKNOWN for a request never made; a pair run of the suite on a loaded machine saw it). Run on the
simulator's virtual loop, so the times are exact and no wall clock is involved; the upstream is
an in-process transport that accepts every request and never answers (a hung server).
"""

from __future__ import annotations

import asyncio

import httpx2
import pytest

from effectgate.adapters.mcp.connection import NotSent, Session
from effectgate.testing.sim import loop as virtual


class Silent(httpx2.AsyncBaseTransport):
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await asyncio.Event().wait()  # never set: the request hangs until cancelled
        raise AssertionError("unreachable")


def test_a_caller_queued_behind_a_slow_opening_is_answered_within_its_connect_timeout() -> None:
    async def main() -> list[tuple[float, str]]:
        session = Session(url="http://upstream.test/mcp", connect_timeout=1.0, http_transport=Silent())
        loop = asyncio.get_running_loop()

        async def caller(starts_at: float) -> tuple[float, str]:
            await asyncio.sleep(starts_at)
            asked = loop.time()
            with pytest.raises(NotSent) as refused:
                await session.client()
            return loop.time() - asked, str(refused.value)

        try:
            # The second caller asks while the first one's opening holds the lock.
            return list(await asyncio.gather(caller(0.0), caller(0.5)))
        finally:
            await session.close()

    answered = virtual.run(main)
    assert answered == [(pytest.approx(1.0), "the upstream is unreachable (no session in 1s)")] * 2
