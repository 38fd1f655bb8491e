"""The generic HTTP adapter's template and postcondition language: nothing but `{name}`."""

from __future__ import annotations

import pytest

from effectgate.adapters import http_template as tpl
from effectgate.adapters.base import ConfigError
from effectgate.adapters.registry import build_adapter


def test_url_values_are_percent_encoded() -> None:
    url = tpl.fill("/customers/{customer}/activate", {"customer": "../admin?x=1&y"}, url=True)
    assert url == "/customers/..%2Fadmin%3Fx%3D1%26y/activate"


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


def test_http_adapter_config_is_checked() -> None:
    with pytest.raises(ConfigError, match="unknown settings"):
        build_adapter("x", {"kind": "http", "request": {"url": "/a"}, "verfiy": {}})
    with pytest.raises(ConfigError, match="needs at least one `expect`"):
        build_adapter("x", {"kind": "http", "request": {"url": "/a"}, "verify": {"url": "/a"}})
    with pytest.raises(ConfigError, match="needs an idempotency_header"):
        build_adapter("x", {"kind": "http", "request": {"url": "/a"}, "dedups_on_key": True})
