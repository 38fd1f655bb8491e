"""Judges HTTP exchanges by a provider's published OpenAPI spec (the trimmed copies in tests/openapi/,
made by scripts/trim_openapi.py), with openapi-schema-validator's OAS 3.0 validators: JSON Schema as
OpenAPI 3.0 defines it (`nullable`; `readOnly` fields judged in answers, `writeOnly` in requests).

A request is judged by its operation (method and path template): its path and query parameters,
its body (JSON, or Stripe's form encoding decoded by the spec's `deepObject` rules and typed by the
schema, as Stripe reads it). An answer is judged by the response its status documents (or the
operation's `default`). Square documents one response per operation, whose `errors` field carries
the failures: `errors_in_success=True` judges every answer by it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from openapi_schema_validator import OAS30ReadValidator, OAS30Validator, OAS30WriteValidator, oas30_format_checker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

SPECS = Path(__file__).resolve().parent / "openapi"
_INDEX = re.compile(r"\[([^\]]*)\]")
# Accepts null and nothing else, in the OAS 3.0 dialect (where a typed schema refuses null).
_NULL_ONLY = {
    "nullable": True,
    "not": {"anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean")]},
}


@dataclass(frozen=True)
class Exchange:
    """One request and its answer, as they crossed the wire."""

    method: str
    path: str
    query: list[tuple[str, str]]
    request_type: str
    request_body: bytes
    status: int
    response_type: str
    response_body: bytes

    @property
    def name(self) -> str:
        return f"{self.method} {self.path} -> {self.status}"


@dataclass
class Operation:
    template: str
    method: str
    spec: dict[str, Any]
    parameters: list[dict[str, Any]] = field(default_factory=list)


def _media(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def form_tree(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """`a[b][c]=v` as nested objects (`a[]=v` and `a[0]=v` as index keys, typed later by the schema)."""
    root: dict[str, Any] = {}
    for key, value in pairs:
        head = key.split("[", 1)[0]
        path = [head, *_INDEX.findall(key[len(head) :])]
        node = root
        for part in path[:-1]:
            child = node.setdefault(part or str(len(node)), {})
            if not isinstance(child, dict):
                raise ValueError(f"form key {key!r} nests under a plain value")
            node = child
        node[path[-1] or str(len(node))] = value
    return root


class Spec:
    def __init__(self, provider: str, *, errors_in_success: bool = False) -> None:
        self.provider = provider
        self.errors_in_success = errors_in_success
        self.uri = f"urn:effectgate:openapi:{provider}"
        self.doc: dict[str, Any] = self._absolute(json.loads((SPECS / f"{provider}.json").read_text()))
        self.source: dict[str, Any] = self.doc["info"]["x-effectgate-source"]
        self.registry: Registry[Any] = Registry().with_resource(
            self.uri, Resource.from_contents(self.doc, default_specification=DRAFT4)
        )
        self._templates = sorted(self.doc["paths"], key=lambda t: (t.count("{"), t))

    def _absolute(self, node: Any) -> Any:
        """Every `#/...` reference made absolute, so any subschema resolves through the registry; and
        `nullable: true` beside `anyOf` read as Stripe means it: null, or one of these (OpenAPI 3.0.3
        read to the letter ignores a `nullable` without a `type`, and would refuse every null)."""
        if isinstance(node, dict):
            prepared = {
                k: f"{self.uri}{v}" if k == "$ref" and isinstance(v, str) and v.startswith("#") else self._absolute(v)
                for k, v in node.items()
            }
            if prepared.get("nullable") is True and "type" not in prepared and "anyOf" in prepared:
                prepared["anyOf"] = [*prepared["anyOf"], _NULL_ONLY]
            return prepared
        if isinstance(node, list):
            return [self._absolute(v) for v in node]
        return node

    # -- schemas ------------------------------------------------------------------------------------

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            found: dict[str, Any] = self.registry.resolver().lookup(schema["$ref"]).contents
            schema = found
        return schema

    def errors(self, instance: Any, schema: dict[str, Any], kind: type[Validator] = OAS30Validator) -> list[str]:
        """What is wrong with the instance, one line each; of an `anyOf`, the closest option's fault."""
        validator = kind(schema, registry=self.registry, format_checker=oas30_format_checker)
        found: list[str] = []
        for error in validator.iter_errors(instance):
            chosen = (best_match(error.context) if error.context else None) or error
            where = "/".join(str(p) for p in chosen.absolute_path) or "(the body)"
            found.append(f"{where}: {chosen.message}")
        return found

    def coerce(self, value: Any, schema: dict[str, Any]) -> Any:
        """A form or query value (strings, index-keyed objects) typed as the schema reads it."""
        schema = self.resolve(schema)
        options = schema.get("anyOf") or schema.get("oneOf")
        if options:
            for option in options:
                candidate = self.coerce(value, option)
                if not self.errors(candidate, option):
                    return candidate
            return value
        kind = schema.get("type")
        if isinstance(value, str):
            if kind == "integer" and re.fullmatch(r"-?\d+", value):
                return int(value)
            if kind == "number" and re.fullmatch(r"-?\d+(\.\d+)?", value):
                return float(value)
            if kind == "boolean" and value in ("true", "false"):
                return value == "true"
            return value
        if isinstance(value, dict):
            if kind == "array" and all(k.isdigit() for k in value):
                items = schema.get("items", {})
                return [self.coerce(value[k], items) for k in sorted(value, key=int)]
            properties = schema.get("properties", {})
            extra = schema.get("additionalProperties")
            fallback = extra if isinstance(extra, dict) else {}
            return {k: self.coerce(v, properties.get(k, fallback)) for k, v in value.items()}
        if isinstance(value, list) and kind == "array":
            return [self.coerce(v, schema.get("items", {})) for v in value]
        return value

    # -- operations ---------------------------------------------------------------------------------

    def operation(self, method: str, path: str) -> tuple[Operation, dict[str, str]] | None:
        for template in self._templates:
            pattern = "^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)) + "$"
            matched = re.match(pattern, path)
            item = self.doc["paths"][template]
            if matched and method.lower() in item:
                spec = item[method.lower()]
                params = [self.resolve(p) for p in [*item.get("parameters", []), *spec.get("parameters", [])]]
                return Operation(template, method.upper(), spec, params), matched.groupdict()
        return None

    def template(self, exchange: Exchange) -> str:
        """`METHOD /path/{param} STATUS`: which documented answer the exchange was."""
        found = self.operation(exchange.method, exchange.path)
        where = found[0].template if found else exchange.path
        return f"{exchange.method} {where} {exchange.status}"

    def check_request(self, exchange: Exchange) -> list[str]:
        found = self.operation(exchange.method, exchange.path)
        if found is None:
            return [f"{exchange.method} {exchange.path}: no such operation in the spec"]
        operation, path_values = found
        problems: list[str] = []
        for parameter in operation.parameters:
            if parameter["in"] == "path":
                value = self.coerce(path_values.get(parameter["name"], ""), parameter["schema"])
                problems += [f"path {parameter['name']}: {e}" for e in self.errors(value, parameter["schema"])]
        problems += self._check_query(operation, exchange.query)
        problems += self._check_body(operation, exchange)
        return [f"request {exchange.method} {exchange.path}: {p}" for p in problems]

    def _check_query(self, operation: Operation, query: list[tuple[str, str]]) -> list[str]:
        declared = {p["name"]: p for p in operation.parameters if p["in"] == "query"}
        grouped: dict[str, list[tuple[str, str]]] = {}
        for key, value in query:
            grouped.setdefault(key.split("[", 1)[0], []).append((key, value))
        problems = [f"query parameter {name!r} is not in the spec" for name in grouped if name not in declared]
        for name, parameter in declared.items():
            pairs = grouped.get(name)
            if not pairs:
                if parameter.get("required"):
                    problems.append(f"query parameter {name!r} is required")
                continue
            schema = parameter["schema"]
            raw: Any = form_tree(pairs)[name] if any("[" in k for k, _ in pairs) else [v for _, v in pairs]
            if isinstance(raw, list) and self.resolve(schema).get("type") != "array":
                raw = raw[-1]
            problems += [f"query {name}: {e}" for e in self.errors(self.coerce(raw, schema), schema)]
        return problems

    def _check_body(self, operation: Operation, exchange: Exchange) -> list[str]:
        body_spec = operation.spec.get("requestBody")
        if not exchange.request_body:
            return ["a body is required"] if body_spec and body_spec.get("required") else []
        if body_spec is None:
            return ["a body was sent where the operation takes none"]
        media = _media(exchange.request_type)
        content = body_spec["content"].get(media)
        if content is None:
            return [f"content type {media!r} is not one of {sorted(body_spec['content'])}"]
        schema = content["schema"]
        if media == "application/json":
            instance = json.loads(exchange.request_body)
        else:
            tree = form_tree(parse_qsl(exchange.request_body.decode(), keep_blank_values=True))
            instance = self.coerce(tree, schema)
        return self.errors(instance, schema, OAS30WriteValidator)

    def check_response(self, exchange: Exchange) -> list[str]:
        found = self.operation(exchange.method, exchange.path)
        if found is None:
            return [f"{exchange.name}: no such operation in the spec"]
        responses = found[0].spec["responses"]
        answer = responses.get(str(exchange.status)) or responses.get("default")
        if answer is None and self.errors_in_success:
            answer = responses.get("200")
        if answer is None:
            return [f"{exchange.name}: the spec documents no answer with this status"]
        content = answer.get("content") or {}
        media = _media(exchange.response_type)
        if media not in content:
            return [f"{exchange.name}: content type {media!r} is not one of {sorted(content)}"]
        instance = json.loads(exchange.response_body)
        return [f"{exchange.name}: {e}" for e in self.errors(instance, content[media]["schema"], OAS30ReadValidator)]

    def check(self, exchange: Exchange) -> list[str]:
        return self.check_request(exchange) + self.check_response(exchange)
