"""`effectgate audit verify` against rows edited by hand (issue 46): every column of one event row
edited in turn, on SQLite and on PostgreSQL, each edit named as the first broken row with what
was expected and what was found — by the walk, by the command's text and its `-o json`, exit 1,
never a traceback. SQLite keeps any value in any column (blobs, text that is not UTF-8, text
where a number belongs); PostgreSQL types its columns, so only values can be wrong there."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from effectgate.gateway.model import ChainBreak
from effectgate.gateway.runtime.commands.chain_verify import run_verify
from effectgate.gateway.store import verify_chain
from effectgate.gateway.store.trail.chain import canonical, link
from effectgate.v1 import gateway_pb2 as pb
from effectgate_lab.simulators.stripe_sim import StripeSimulator
from tests.store_backends import Backend, SqliteBackend
from tests.test_event_chain import chained_store, doc, run_cli, tamper, toml

HASH = "0" * 64


@dataclass(frozen=True)
class Edit:
    column: str
    value: str  # an SQL expression (the row's own columns may appear in it)
    problem: str  # "{n}": the edited row's position
    found: str = ""  # what the break reports as found, when the test can say it exactly


BOTH = [
    Edit("action_id", "'act_other'", "hash does not match the row"),
    Edit("at", "at + 1", "hash does not match the row"),
    Edit("kind", "'refund'", "hash does not match the row"),
    Edit("state", "'CONFIRMEX'", "state is not a state", 'text "CONFIRMEX"'),
    Edit("state", "'PLaNNED'", "state is not a state", 'text "PLaNNED"'),
    Edit("state", "''", "state is not a state", 'text ""'),
    Edit("principal", "'mallory'", "hash does not match the row"),
    Edit("note", "'edited'", "hash does not match the row"),
    # One byte: the closing brace of the JSON object.
    Edit("detail", "substr(detail, 1, length(detail) - 1) || ']'", "detail is not JSON"),
    Edit("detail", "'[1]'", "detail is not a JSON object", 'text "[1]"'),
    Edit("detail", """'{"amount":NaN}'""", "detail is not JSON"),
    Edit("tenant", "'globex'", "the row at position {n} is stored as another tenant's", "globex"),
    Edit("tenant", "'nobody'", "the row at position {n} is stored as another tenant's", "nobody"),
    Edit("tool", "'refund'", "hash does not match the row"),
    Edit("n", "n + 100", "the row at position {n} is stored at position {n+100}", "{n+100}"),
    Edit("n", "0", "the row at position {n} is stored at position 0", "0"),
    Edit("n", "n - 1", "a second row at position {n-1}", "{n-1}"),
    Edit("prev_hash", f"'{HASH}'", "prev_hash does not link", HASH),
    Edit("hash", f"'{HASH}'", "hash does not match the row", HASH),
]
SQLITE_ONLY = [
    Edit("action_id", "X'00ff'", "action_id is not text", "blob X'00ff'"),
    Edit("at", "'yesterday'", "at is not a time", 'text "yesterday"'),
    # A number in a TEXT column is kept as its text (SQLite's affinity): a blob is what is not text.
    Edit("kind", "X'00'", "kind is not text", "blob X'00'"),
    Edit("state", "CAST(X'ff' AS TEXT)", "state is not UTF-8 text", "text X'ff'"),
    Edit("principal", "CAST(X'c328' AS TEXT)", "principal is not UTF-8 text", "text X'c328'"),
    Edit("note", "X'6e6f7465'", "note is not text", "blob X'6e6f7465'"),
    Edit("detail", "X'7b7d'", "detail is not text", "blob X'7b7d'"),
    Edit("tenant", "X'61636d65'", "tenant is not text", "blob X'61636d65'"),
    Edit("tool", "CAST(X'e282' AS TEXT)", "tool is not UTF-8 text", "text X'e282'"),
    Edit("n", "'four'", "n is not a position", 'text "four"'),
    Edit("n", "n + 0.5", "n is not a position"),
    Edit("prev_hash", "X'07'", "prev_hash is not text", "blob X'07'"),
    Edit("hash", "CAST(X'80' AS TEXT)", "hash is not UTF-8 text", "text X'80'"),
]
POSTGRES_ONLY = [
    Edit("at", "'NaN'::float8", "at is not a time", "real nan"),
    Edit("at", "'Infinity'::float8", "at is not a time", "real inf"),
]
COLUMNS = {"seq", "action_id", "at", "kind", "state", "principal", "note", "detail", "tenant", "tool", "n"}
COLUMNS |= {"prev_hash", "hash"}


def state_name(event: pb.TrailEvent) -> str:
    return pb.EffectState.Name(event.event.state).removeprefix("EFFECT_STATE_")


def edits(backend: Backend) -> list[Edit]:
    return BOTH + (SQLITE_ONLY if isinstance(backend, SqliteBackend) else POSTGRES_ONLY)


def test_the_edits_cover_every_column_of_an_event_row() -> None:
    # seq, the row's storage id, is outside the hash (see test_an_edited_row_id_is_not_a_break).
    assert {e.column for e in BOTH} == COLUMNS - {"seq"}
    assert {e.column for e in SQLITE_ONLY} == COLUMNS - {"seq"}


def expected_text(template: str, n: int) -> str:
    return template.format(n=n, **{"n+100": n + 100, "n-1": n - 1})


async def restore(backend: Backend, seq: int) -> None:
    """Puts the edited row back as it was (kept in `verify_backup`), whatever was edited."""
    overriding = "" if isinstance(backend, SqliteBackend) else " OVERRIDING SYSTEM VALUE"
    await tamper(
        backend,
        (f"DELETE FROM action_events WHERE seq IN (SELECT seq FROM verify_backup) OR seq = {seq + 100000}", ()),
        (f"INSERT INTO action_events{overriding} SELECT * FROM verify_backup", ()),
    )


async def run_in_process(config: Path, output: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The command's own function, on its own store connection, as `effectgate audit verify` runs it."""
    capsys.readouterr()
    code = await run_verify(str(config), "", output)
    return code, capsys.readouterr().out


@pytest.mark.timeout(300)
async def test_every_column_edited_is_named(
    backend: Backend, sim: StripeSimulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live, events = await chained_store(backend, sim)
    config = tmp_path / "gateway.toml"
    config.write_text(toml(doc(backend.url, sim)))
    target = events[3]
    seq, n = target.event.seq, target.position
    assert 1 < n < len(events)
    await tamper(backend, (f"CREATE TABLE verify_backup AS SELECT * FROM action_events WHERE seq = {seq}", ()))
    try:
        assert (await verify_chain(live.gateway.store)).broken is None
        for edit in edits(backend):
            await tamper(backend, (f"UPDATE action_events SET {edit.column} = {edit.value} WHERE seq = ?", (seq,)))
            try:
                broken = (await verify_chain(live.gateway.store)).broken
                said = f"{edit}: {broken}"
                assert broken is not None, said
                assert (broken.tenant, broken.seq) == ("acme", seq), said
                assert broken.problem == expected_text(edit.problem, n), said
                assert broken.n == (n - 1 if edit.problem.startswith("a second row") else n), said
                if edit.found:
                    assert broken.found == expected_text(edit.found, n), said
                assert broken.expected and broken.found != broken.expected, said
                await the_command_names(config, broken, capsys)
            finally:
                await restore(backend, seq)
            assert (await verify_chain(live.gateway.store)).broken is None, edit
    finally:
        await tamper(backend, ("DROP TABLE verify_backup", ()))
        await live.close()


async def the_command_names(config: Path, broken: ChainBreak, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = await run_in_process(config, "json", capsys)
    assert code == 1, out
    report = json.loads(out)
    assert report["verified"] is False and report["broken"]["seq"] == broken.seq, out
    assert report["broken"]["problem"] == broken.problem and report["broken"]["found"] == broken.found, out
    code, out = await run_in_process(config, "table", capsys)
    assert code == 1 and f"chain BROKEN at row {broken.seq} (tenant acme, position {broken.n})" in out, out
    assert broken.problem in out and "Traceback" not in out, out


async def test_an_edited_row_id_is_not_a_break(tmp_path: Path, sim: StripeSimulator) -> None:
    """seq is the row's storage id, not a fact of the trail: the hash does not cover it, and a row
    that keeps its fields, position and links under another id still verifies. (PostgreSQL
    generates it ALWAYS: an UPDATE cannot change it.)"""
    backend = SqliteBackend(tmp_path)
    live, events = await chained_store(backend, sim)
    try:
        await tamper(backend, ("UPDATE action_events SET seq = seq + 100000 WHERE seq = ?", (events[3].event.seq,)))
        assert (await verify_chain(live.gateway.store)).broken is None
    finally:
        await live.close()


async def test_the_issue_s_edits_through_the_real_command(
    backend: Backend, sim: StripeSimulator, tmp_path: Path
) -> None:
    """The edits the issue found crashing the command, in a real process: a state that is not a
    state and a detail one byte from JSON, named in text and in JSON, exit 1, no traceback."""
    live, events = await chained_store(backend, sim)
    config = tmp_path / "gateway.toml"
    config.write_text(toml(doc(backend.url, sim)))
    try:
        target = events[2]
        value = "'CONFIRMEX'" if isinstance(backend, SqliteBackend) else "'PLaNNED'"
        await tamper(backend, (f"UPDATE action_events SET state = {value} WHERE seq = ?", (target.event.seq,)))
        code, out = await run_cli("audit", "verify", "--config", str(config))
        assert code == 1 and f"chain BROKEN at row {target.event.seq}" in out and "Traceback" not in out, out
        assert "state is not a state" in out and value.strip("'") in out, out
        await tamper(
            backend,
            ("UPDATE action_events SET state = ? WHERE seq = ?", (state_name(target), target.event.seq)),
            ("UPDATE action_events SET detail = substr(detail, 2) WHERE seq = ?", (events[1].event.seq,)),
        )
        code, out = await run_cli("audit", "verify", "--config", str(config), "-o", "json")
        assert code == 1 and "Traceback" not in out, out
        broken = json.loads(out)["broken"]
        assert (broken["seq"], broken["problem"]) == (events[1].event.seq, "detail is not JSON"), out
    finally:
        await live.close()


async def test_a_last_row_edited_and_rehashed_is_told_as_such(backend: Backend, sim: StripeSimulator) -> None:
    """The last row edited and its hash recomputed: the row holds, the head does not name it."""
    live, events = await chained_store(backend, sim)
    try:
        last = events[-1]
        values = (last.action_id, last.at_seconds, last.event.kind, state_name(last), "mallory", last.event.note)
        forged = link(last.prev_hash, canonical((*values, last.detail_json), last.tenant, last.tool))
        await tamper(
            backend,
            ("UPDATE action_events SET principal = ?, hash = ? WHERE seq = ?", ("mallory", forged, last.event.seq)),
        )
        broken = (await verify_chain(live.gateway.store)).broken
        assert broken is not None and (broken.seq, broken.n) == (last.event.seq, last.position)
        assert broken.problem == f"the last row (position {last.position}) is not the row its head recorded"
        assert (broken.expected, broken.found) == (last.hash, forged)
    finally:
        await live.close()


async def test_a_head_that_is_not_a_position_and_a_since_walk_are_named(tmp_path: Path, sim: StripeSimulator) -> None:
    """The chain's head (event_heads) edited into text, and `--since` starting at a broken row:
    named, never a decode error (SQLite, which keeps text in an INTEGER column)."""
    backend = SqliteBackend(tmp_path)
    live, events = await chained_store(backend, sim)
    try:
        await tamper(backend, ("UPDATE event_heads SET n = 'many' WHERE tenant = ?", ("acme",)))
        broken = (await verify_chain(live.gateway.store)).broken
        assert broken is not None and broken.tenant == "acme", broken
        assert (broken.problem, broken.expected, broken.found) == (
            "the chain's head n is not a position",
            "integer",
            'text "many"',
        )
        await tamper(backend, ("UPDATE event_heads SET n = ? WHERE tenant = ?", (events[-1].position, "acme")))
        assert (await verify_chain(live.gateway.store)).broken is None
        first = events[0]
        await tamper(backend, ("UPDATE action_events SET state = 'SENT' WHERE seq = ?", (first.event.seq,)))
        broken = (await verify_chain(live.gateway.store, since=1.0)).broken
        assert broken is not None and (broken.seq, broken.problem) == (first.event.seq, "state is not a state")
    finally:
        await live.close()
