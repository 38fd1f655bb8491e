"""What providers said on their own, kept beside the actions (migration 0007): the webhook events
applied (each id once) and the read lags observed after confirmed writes.

`ProviderLog` is the port; `SqlProviderLog` implements it on the SQL core's statement hooks, so
both SQL backends share one copy of the statements.
"""

from __future__ import annotations

from collections.abc import Callable

from effectgate.gateway.store.sql_primitives import SqlHooks

# Observations kept per lag key: enough for a stable p99, bounded so the table stays small.
MAX_LAGS_PER_KEY = 2000


class ProviderLog:
    """The store's port for provider evidence. A store without it raises NotImplementedError."""

    async def claim_provider_event(self, source: str, event_id: str, action_id: str, kind: str, at: float) -> bool:
        """Records `event_id` of `source` as applied; False when it was applied before."""
        raise NotImplementedError(f"{type(self).__name__} keeps no provider events")

    async def forget_provider_event(self, source: str, event_id: str) -> None:
        """Drops a claim whose application failed, so that the provider's retry is applied."""
        raise NotImplementedError(f"{type(self).__name__} keeps no provider events")

    async def record_read_lag(self, lag_key: str, at: float, lag: float) -> None:
        raise NotImplementedError(f"{type(self).__name__} keeps no read lags")

    async def read_lags(self, lag_key: str, limit: int = MAX_LAGS_PER_KEY) -> list[float]:
        """The newest `limit` lags observed under `lag_key` (any order)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no read lags")


class _Statements:
    def __init__(self, render: Callable[[str], str]) -> None:
        d = _Render(render)
        self.claim = d.render(
            "INSERT INTO provider_events (source, event_id, action_id, kind, received_at) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT (source, event_id) DO NOTHING RETURNING event_id"
        )
        self.forget = d.render("DELETE FROM provider_events WHERE source = ? AND event_id = ?")
        self.lag = d.render("INSERT INTO read_lags (lag_key, observed_at, lag) VALUES (?, ?, ?)")
        self.lags = d.render("SELECT lag FROM read_lags WHERE lag_key = ? ORDER BY observed_at DESC LIMIT ?")


class _Render:
    def __init__(self, render: Callable[[str], str]) -> None:
        self.render = render


class SqlProviderLog(ProviderLog, SqlHooks):
    """`ProviderLog` on the SQL core's hooks (mixed into `SqlStore`)."""

    _evidence: _Statements | None = None

    @property
    def _q(self) -> _Statements:
        if self._evidence is None:
            self._evidence = _Statements(self._render)
        return self._evidence

    async def claim_provider_event(self, source: str, event_id: str, action_id: str, kind: str, at: float) -> bool:
        return bool(await self._write_rows(self._q.claim, (source, event_id, action_id, kind, at)))

    async def forget_provider_event(self, source: str, event_id: str) -> None:
        await self._write_count(self._q.forget, (source, event_id))

    async def record_read_lag(self, lag_key: str, at: float, lag: float) -> None:
        await self._write_count(self._q.lag, (lag_key, at, lag))

    async def read_lags(self, lag_key: str, limit: int = MAX_LAGS_PER_KEY) -> list[float]:
        return [float(row[0]) for row in await self._read(self._q.lags, (lag_key, limit))]
