"""One settings parser for every adapter: pydantic models with `extra="forbid"`.

An adapter declares its `[adapters.NAME]` table as a subclass of `AdapterSettings` and reads it
with `parse_settings(Model, settings)`. Every mistake becomes one `ConfigError` naming the key
path and what is allowed, with a did-you-mean for a misspelt key:

    adapters.crm.timout: unknown key (did you mean timeout?)
    adapters.crm.timeout: input should be a valid number, unable to parse string as a number (got 'abc')

Secrets are never values of the table: a model has `<key>_env` / `<key>_file` fields and the
adapter resolves them with `secret(settings, key)` (see `secrets.read_secret`).
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from effectgate.adapters.base import ConfigError
from effectgate.adapters.secrets import read_secret

S = TypeVar("S", bound="AdapterSettings")


class AdapterSettings(BaseModel):
    """Base of every adapter's settings model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def secret(self, key: str, *, required: bool = True, register: bool = True) -> str:
        """The secret named by this table's `<key>_env` or `<key>_file` (registered for scrubbing)."""
        named = self.model_dump(include={f"{key}_env", f"{key}_file"})
        return read_secret(named, key, required=required, register=register)


def parse_settings(model: type[S], settings: Mapping[str, Any]) -> S:
    """`settings` validated against `model`; every problem in one ConfigError."""
    try:
        return model.model_validate(dict(settings))
    except ValidationError as exc:
        problems = [_describe(model, err) for err in exc.errors(include_url=False)]
        first_key = problems[0][0] if problems else ""
        if len(problems) == 1:
            raise ConfigError(problems[0][1], key=first_key) from None
        text = "; ".join(f"{key}: {why}" if key else why for key, why in problems)
        raise ConfigError(text) from None


def key_path(loc: Sequence[int | str]) -> str:
    """`("expect", 0, "path")` -> `expect[0].path`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _describe(model: type[BaseModel], err: Any) -> tuple[str, str]:
    loc = tuple(p for p in err["loc"] if not is_branch_tag(p))
    key = key_path(loc)
    if err["type"] == "extra_forbidden":
        known = _fields_at(model, loc[:-1])
        hint = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6) if known else []
        allowed = f"did you mean {hint[0]}?" if hint else f"allowed: {', '.join(sorted(known))}"
        return key, f"unknown key ({allowed})"
    if err["type"] == "missing":
        return key, "is required"
    message = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    message = message[:1].lower() + message[1:]
    if "input" in err and not isinstance(err["input"], dict | list):
        message += f" (got {err['input']!r})"
    return key, message


def is_branch_tag(part: int | str) -> bool:
    # pydantic names the union member or the validator in a location (`function-after[...]`).
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool"))


def _fields_at(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The field names of the (nested) model that `loc` leads to, for a did-you-mean."""
    current: Any = model
    for part in loc:
        current = _model_in(current)
        if current is None:
            return []
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return []
        current = field.annotation
    found = _model_in(current)
    return list(found.model_fields) if found is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model inside an annotation such as `Model`, `Model | None` or `list[Model]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType, list, tuple):
        for arg in get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def http_base_url(value: str) -> str:
    """A provider's base URL setting: http(s) only, without a trailing slash."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http(s) URL")
    return value.rstrip("/")
