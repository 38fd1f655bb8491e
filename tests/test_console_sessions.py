"""The console's server-side session store: random ids, idle and total expiry, a bound."""

from __future__ import annotations

from effectgate.console.sessions import SessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_session_expires_when_idle_and_after_its_lifetime() -> None:
    clock = Clock()
    store = SessionStore(idle=10, lifetime=25, clock=clock)
    sid = store.open("token-1", "operator", "")
    assert len(sid) >= 40 and store.open("token-1", "operator", "") != sid  # random, never reused
    for t in (5, 14, 23):  # used within the idle time: kept
        clock.now = t
        found = store.get(sid)
        assert found is not None and found.token == "token-1"
    clock.now = 26  # past the lifetime, although used a moment ago
    assert store.get(sid) is None
    other = store.open("token-2", "observer", "")
    clock.now = 37  # idle for 11 s
    assert store.get(other) is None


def test_the_store_is_bounded_and_drops_the_least_recently_used() -> None:
    clock = Clock()
    store = SessionStore(limit=3, clock=clock)
    ids = [store.open(f"t{i}", "operator", "") for i in range(3)]
    assert store.get(ids[0]) is not None  # ids[0] is now the most recently used
    newest = store.open("t3", "operator", "")
    assert len(store) == 3
    assert store.get(ids[1]) is None  # the least recently used went
    assert all(store.get(s) is not None for s in (ids[0], ids[2], newest))


def test_closing_a_session_forgets_its_token() -> None:
    store = SessionStore()
    sid = store.open("secret-token", "operator", "")
    store.close(sid)
    assert store.get(sid) is None and len(store) == 0
    store.close(None)
    assert store.get("") is None and store.get(None) is None
