"""The slow-first order (tests/slow_first.py): every collected test still runs once; the known-slow
ones head the workers' shares, longest first and balanced; a group stays in one share."""

from __future__ import annotations

from tests.slow_first import LIST, Slow, known_slow, shares, slow_first


def order(names: list[str], known: dict[str, Slow], workers: int) -> list[str]:
    return slow_first(names, {id(name): name for name in names}, known, workers)


def test_worksteal_shares_are_contiguous_and_cover_every_test() -> None:
    assert shares(11, 2) == [5, 6]
    assert shares(10, 3) == [3, 3, 4]
    assert sum(shares(1219, 2)) == 1219


def test_the_slow_tests_head_the_shares_longest_first_and_balanced() -> None:
    names = [f"t{i}" for i in range(10)]
    known = {"t9": Slow(100, "t9"), "t8": Slow(60, "t8"), "t7": Slow(50, "t7"), "t1": Slow(5, "t1")}
    ordered = order(names, known, workers=2)
    assert sorted(ordered) == sorted(names)  # the same tests, each once
    first, second = ordered[:5], ordered[5:]
    assert first[:2] == ["t9", "t1"] and second[:2] == ["t8", "t7"]
    # The others keep their collected order behind the heads.
    rest = [n for n in ordered if n not in known]
    assert rest == [n for n in names if n not in known]


def test_a_group_runs_in_one_share() -> None:
    names = [f"t{i}" for i in range(8)]
    known = {"t1": Slow(30, "wheels"), "t6": Slow(40, "wheels"), "t3": Slow(50, "t3"), "t4": Slow(20, "t4")}
    ordered = order(names, known, workers=2)
    assert sorted(ordered) == sorted(names)
    first, second = ordered[:4], ordered[4:]
    assert first[:2] == ["t6", "t1"]  # 70 s of the group, longest first
    assert second[:2] == ["t3", "t4"]


def test_without_workers_or_known_tests_the_order_is_kept() -> None:
    names = ["a", "b", "c"]
    assert order(names, {}, workers=2) == names
    assert order(names, {"b": Slow(9, "b")}, workers=1) == ["b", "a", "c"]


def test_the_committed_list_parses() -> None:
    known = known_slow(LIST.read_text())
    assert known and all(slow.seconds > 0 and "::" in nodeid for nodeid, slow in known.items())
    parsed = known_slow("# note\n\ntests/x.py::t[a b]  12.5\n")
    assert parsed == {"tests/x.py::t[a b]": Slow(12.5, "tests/x.py::t[a b]")}
