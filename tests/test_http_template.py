"""The generic HTTP adapter's template and postcondition language, and its config checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2

from effectgate.adapters.base import ConfigError, InvalidPayload
from effectgate.adapters.http import template as tpl
from effectgate.adapters.registry import build_adapter

GOOD: dict[str, Any] = {
    "kind": "http",
    "request": {"url": "/customers/{customer}/activate"},
    "verify": {"url": "/customers/{customer}"},
    "expect": [{"path": "status", "equals": "ACTIVE"}],
}


def test_url_values_are_percent_encoded() -> None:
    url = tpl.fill("/customers/{customer}/activate", {"customer": "../admin?x=1&y"}, url=True)
    assert url == "/customers/..%2Fadmin%3Fx%3D1%26y/activate"


@pytest.mark.parametrize("value", ["..", ".", ""])
def test_path_values_that_change_the_path_are_refused(value: str) -> None:
    with pytest.raises(tpl.UnsafeValue, match="customer"):
        tpl.fill("/customers/{customer}/activate", {"customer": value}, url=True)
    # In the query they are only data.
    assert tpl.fill("/customers?id={customer}", {"customer": value}, url=True) == f"/customers?id={value}"
    assert tpl.path_names("/a/{x}/b?q={y}") == {"x"}


def test_normalize_refuses_a_path_changing_payload_value() -> None:
    adapter = build_adapter("crm", GOOD)
    payload = struct_pb2.Struct()
    payload.update({"customer": ".."})
    with pytest.raises(InvalidPayload) as err:
        adapter.normalize(payload)
    assert err.value.field == "customer"
    payload.update({"customer": "cus_1"})
    assert adapter.normalize(payload) is payload


def test_values_are_not_templates_and_braces_escape() -> None:
    assert tpl.fill("{{lit}} {a}", {"a": "{b}", "b": "no"}) == "{lit} {b}"
    with pytest.raises(ConfigError, match="unmatched brace"):
        tpl.names("/x/{a.b}")


def test_whole_placeholder_keeps_json_type() -> None:
    body = {"id": "{id}", "amount": "{amount}", "note": "inv {id}", "tags": ["{flag}"]}
    values = {"id": "inv_1", "amount": 1250.0, "flag": True}
    assert tpl.fill_json(body, values) == {"id": "inv_1", "amount": 1250, "note": "inv inv_1", "tags": [True]}


def test_postconditions() -> None:
    conds = tpl.parse_all(
        "expect",
        [{"path": "amount", "equals": "{amount}"}, {"path": "rows.0.at", "present": True}],
    )
    values = {"amount": 1250.0}
    assert tpl.failures(conds, {"amount": 1250, "rows": [{"at": 1}]}, values) == []
    assert tpl.failures(conds, {"amount": True, "rows": [{"at": None}]}, values) == [
        "amount is True, expected 1250",
        "rows.0.at is missing",
    ]
    with pytest.raises(ConfigError):
        tpl.parse_all("expect", [{"path": "a", "equals": 1, "present": True}])
    with pytest.raises(ConfigError):
        tpl.parse_all("expect", [{"path": "a", "some": []}])


def test_list_postconditions_some_one_none_count() -> None:
    row = [{"path": "id", "equals": "{id}"}, {"path": "amount", "equals": "{amount}"}]
    some, one, none, empty = tpl.parse_all(
        "c",
        [
            {"path": "data", "some": row},
            {"path": "data", "one": row},
            {"path": "data", "none": row},
            {"path": "data", "count": 0},
        ],
    )
    values = {"id": "inv_1", "amount": 5.0}
    match, other = {"id": "inv_1", "amount": 5}, {"id": "inv_1", "amount": None}

    def holds(cond: tpl.Postcondition, rows: Any) -> bool:
        return not cond.failure({"data": rows}, values)

    assert [holds(c, []) for c in (some, one, none, empty)] == [False, False, True, True]
    assert [holds(c, [other]) for c in (some, one, none, empty)] == [False, False, True, False]
    assert [holds(c, [other, match]) for c in (some, one, none, empty)] == [True, True, False, False]
    assert [holds(c, [match, match]) for c in (some, one, none, empty)] == [True, False, False, False]
    assert one.failure({"data": [match, match]}, values) == "data: 2 rows match, expected exactly one"
    # Not a list (an error body, a mistyped path) proves nothing, not even "no rows".
    assert [holds(c, None) for c in (some, one, none, empty)] == [False] * 4
    assert empty.failure({"error": "x"}, values) == "data is missing"
    assert one.names() == {"id", "amount"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"verfiy": {}}, r"adapters\.x\.verfiy: unknown key \(did you mean verify\?\)"),
        (
            {"request": {"url": "/a", "metod": "POST"}},
            r"adapters\.x\.request\.metod: unknown key \(did you mean method",
        ),
        (
            {"expect": [{"pth": "a", "equals": 1}]},
            r"adapters\.x: .*expect\[0\]\.pth: unknown key \(did you mean path\?\)",
        ),
        ({"timeout": "abc"}, r"adapters\.x\.timeout: input should be a valid number.*\(got 'abc'\)"),
        ({"verify": {"method": "POST", "url": "/a"}}, r"adapters\.x\.verify: verify must be a GET or HEAD"),
        ({"verify": {"method": "DELETE", "url": "/a"}}, r"verify must be a GET or HEAD"),
        ({"verify": None, "expect": []}, None),
        ({"verify": {"url": "/a"}, "expect": []}, r"`verify` needs at least one `expect`"),
        ({"absent_statuses": [200]}, r"a success status cannot prove absence"),
        ({"dedups_on_key": True}, r"dedups_on_key needs an idempotency_header"),
        ({"request": {"url": "/x/{a"}}, r"adapters\.x\.request: template '/x/\{a': unmatched brace"),
    ],
)
def test_http_adapter_config_is_checked(change: dict[str, Any], message: str | None) -> None:
    table = {k: v for k, v in (GOOD | change).items() if v is not None}
    if message is None:
        build_adapter("x", table)  # no verify, no expect: a valid write-only tool
        return
    with pytest.raises(ConfigError, match=message):
        build_adapter("x", table)


@pytest.mark.parametrize("key", ["expect", "absent_when", "absent_statuses"])
def test_proof_rules_without_verify_are_config_errors(key: str) -> None:
    value: Any = [404] if key == "absent_statuses" else [{"path": "a", "present": True}]
    table = {"kind": "http", "request": {"url": "/a"}, key: value}
    with pytest.raises(ConfigError, match=f"{key} without `verify`"):
        build_adapter("x", table)


def test_a_named_but_missing_secret_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EG_TEST_UNSET_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=r"adapters\.x\.token_env: environment variable EG_TEST_UNSET_TOKEN"):
        build_adapter("x", GOOD | {"token_env": "EG_TEST_UNSET_TOKEN"})
    with pytest.raises(ConfigError, match=r"adapters\.x\.token_file: cannot read"):
        build_adapter("x", GOOD | {"token_file": str(tmp_path / "absent")})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match=r"adapters\.x\.token_file: .* is empty"):
        build_adapter("x", GOOD | {"token_file": str(tmp_path / "empty")})
