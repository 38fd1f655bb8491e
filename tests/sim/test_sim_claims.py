"""Claims that real-process tests made on wall clocks, proven here by seed in the simulated world
(docs/testing.md, "Claims the simulator carries"): each replays the interleaving its wall-clock
test reached by luck of timing, and checks it reaches it (a seed that no longer does fails)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from effectgate.gateway.config import parse_config
from effectgate.gateway.store import clock
from tests.sim import config, replicas
from tests.sim.world import WHOLE, Outcome, World

# Seeds of the full world in which skewed replicas serve, take actions over and settle others'
# (seed 5 has its own test below: the defect it found).
SKEW_SEEDS = (1, 2, 3, 4, 6)
SKEW = 15.0  # as tests/test_clock_skew.py's libfaketime replica: 15 s ahead or behind


@pytest.fixture(autouse=True)
def _fresh_config() -> Iterator[None]:
    """`config.config` is parsed once per process (functools.cache): a test that changes it
    parses its own and leaves none behind for the next test in this worker."""
    config.config.cache_clear()
    yield
    config.config.cache_clear()


def _skewed(monkeypatch: pytest.MonkeyPatch, skews: dict[str, float], bound: str | None) -> None:
    """Replicas named in `skews` run with their host's wall clock that far off (a restarted
    replica is a new name, with a clock of its own); `bound` sets `gateway.max_clock_skew`."""
    init = replicas.SimReplica.__init__

    def skewed_init(self: replicas.SimReplica, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.skew = skews.get(self.name, self.skew)

    monkeypatch.setattr(replicas.SimReplica, "__init__", skewed_init)
    if bound is not None:

        def lifted(doc: dict[str, Any], **kwargs: Any) -> Any:
            return parse_config({**doc, "gateway": {**doc["gateway"], "max_clock_skew": bound}}, **kwargs)

        monkeypatch.setattr(config, "parse_config", lifted)


def _answers_on(outcome: Outcome, name: str) -> list[str]:
    return [line.rsplit(": ", 1)[1] for line in outcome.trace if " answer " in line and f" on {name}: " in line]


# -- clocks (tests/test_clock_skew.py) ------------------------------------------------------------


@pytest.mark.parametrize(
    "skews", [{"r1": SKEW}, {"r1": -SKEW}, {"r1": SKEW, "r2": -SKEW}], ids=["+15s", "-15s", "both"]
)
def test_replicas_whose_hosts_are_15s_off_share_the_store_clock_and_double_nothing(
    skews: dict[str, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the refusal bound lifted (max_clock_skew = 60 s), a replica whose host clock is 15 s
    ahead or behind serves, and reads every lease, window and limit on the store's clock: no
    takeover of a live lease, no absence proven early, no action lost. Before the store clock, a
    replica 15 s ahead took in-flight actions over and sent them again."""
    _skewed(monkeypatch, skews, "60s")
    served = 0
    for seed in SKEW_SEEDS:
        outcome = World(seed, WHOLE).run()
        assert outcome.violations == [], (seed, outcome.violations)
        served += sum(a.startswith("CONFIRMED replayed=False") for name in skews for a in _answers_on(outcome, name))
    assert served >= len(SKEW_SEEDS), served  # the skewed replicas did serve (not only crash)


def test_the_same_replicas_on_their_host_clocks_double_effects(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the same worlds with each replica's clock its host's (the store clock
    bypassed) break the protocol, so the seeds above reach what the store clock prevents."""
    _skewed(monkeypatch, {"r1": SKEW, "r2": -SKEW}, "60s")
    monkeypatch.setattr(clock.StoreClock, "__call__", lambda self: self._wall())
    broken = [seed for seed in SKEW_SEEDS if World(seed, WHOLE).run().violations]
    assert broken, "no seed breaks on host clocks: the seeds no longer reach a takeover"


def test_a_replica_15s_off_refuses_work_and_the_others_serve_it_exactly_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the bound derived from the lease (3 s here), the skewed replica refuses every call
    (CLOCK_SKEW, nothing stored or sent) and the others serve each action once."""
    _skewed(monkeypatch, {"r1": SKEW}, None)
    for seed in SKEW_SEEDS:
        outcome = World(seed, WHOLE).run()
        assert outcome.violations == [], (seed, outcome.violations)
        answers = _answers_on(outcome, "r1")
        assert "ClockSkewed" in answers, (seed, answers)
        assert set(answers) <= {"ClockSkewed", "deadline", "gone"}, (seed, answers)


def test_a_replica_whose_first_clock_probe_failed_takes_no_work_until_one_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by this file's skewed replicas (seed 5, r1 15 s ahead and r2 15 s behind, the bound
    lifted): r2's first probe of the store's clock met a store fault, so its clock had no anchor
    and `StoreClock` answered with the host's, which the watch never refused. r2 claimed an action
    with a lease that expired the moment it was written (its host 15 s behind), r1 took it over
    0.25 s later and proved it absent while r2's request was at the provider: a NOT_FOUND while it
    may still apply. Now a replica takes no work until a probe has answered in time
    (background/clock_watch.py, `UNREAD`)."""
    _skewed(monkeypatch, {"r1": SKEW, "r2": -SKEW}, "60s")
    outcome = World(5, WHOLE).run()
    assert outcome.violations == [], outcome.violations
