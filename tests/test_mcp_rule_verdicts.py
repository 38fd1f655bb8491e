"""The `mcp` adapter's CEL rules remember their verdicts (adapters/mcp/rules.py): the same
activation is judged once, a different one (another value, another key order, another type) is
judged on its own, what strict JSON cannot write (NaN) is judged every time, and the memory is bounded."""

from __future__ import annotations

from typing import Any

import pytest

from effectgate.adapters.mcp import rules

MATCH = 'result.status == "sent" && result.id == action.provider_key'


def _activation(status: str = "sent", ident: str = "k1", **result: Any) -> dict[str, Any]:
    return {"result": {"status": status, "id": ident, **result}, "action": {"provider_key": "k1"}}


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> tuple[rules.Rule, list[dict[str, Any]]]:
    """A compiled rule whose real evaluations are recorded."""
    rule = rules.Rule(MATCH)
    seen: list[dict[str, Any]] = []
    judge = rule._judge

    def recorded(activation: Any) -> bool:
        seen.append(activation)
        return judge(activation)

    monkeypatch.setattr(rule, "_judge", recorded)
    return rule, seen


def test_the_same_activation_is_judged_once(judged: tuple[rules.Rule, list[dict[str, Any]]]) -> None:
    rule, seen = judged
    assert [rule.holds(_activation()) for _ in range(5)] == [True] * 5
    assert len(seen) == 1


def test_a_different_activation_gets_its_own_verdict(judged: tuple[rules.Rule, list[dict[str, Any]]]) -> None:
    rule, seen = judged
    assert rule.holds(_activation()) is True
    assert rule.holds(_activation(ident="k2")) is False
    assert rule.holds(_activation(status="queued")) is False
    # A missing field is a run-time error: the rule does not hold, and that too is remembered.
    missing = {"result": {"status": "sent"}, "action": {"provider_key": "k1"}}
    assert rule.holds(missing) is False
    assert rule.holds(missing) is False
    assert len(seen) == 4


def test_types_and_key_order_are_part_of_what_is_remembered() -> None:
    rule = rules.Rule("result.n == 1")
    values: list[Any] = [1, "1", 1.0, True, None, [1]]
    verdicts = [rule.holds({"result": {"n": n}}) for n in values]
    # Each is what cel-python says of that value itself, never another value's remembered verdict.
    assert verdicts == [rules.Rule("result.n == 1")._judge({"result": {"n": n}}) for n in values]
    assert verdicts[:2] == [True, False]
    assert len(rule._verdicts) == len(values)
    sized = rules.Rule("size(result) == 2")
    assert sized.holds({"result": {"a": 1, "b": 2}}) is True
    assert sized.holds({"result": {"b": 2, "a": 1}}) is True
    assert len(sized._verdicts) == 2  # each key order judged on its own


def test_what_json_cannot_write_is_judged_every_time(judged: tuple[rules.Rule, list[dict[str, Any]]]) -> None:
    rule, seen = judged
    odd = {"result": {"status": "sent", "id": "k1", "ratio": float("nan")}, "action": {"provider_key": "k1"}}
    assert rule.holds(odd) is True
    assert rule.holds(odd) is True
    assert len(seen) == 2
    assert not rule._verdicts


def test_the_memory_is_bounded_and_keeps_the_most_recent() -> None:
    rule = rules.Rule(MATCH)
    for i in range(rules.REMEMBERED + 50):
        rule.holds(_activation(ident=f"k{i}"))
    assert len(rule._verdicts) == rules.REMEMBERED
    assert rule.holds(_activation(ident="k1")) is True  # evicted long ago: judged again, right
