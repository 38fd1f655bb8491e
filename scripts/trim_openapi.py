"""Cuts a provider's published OpenAPI spec down to what effectgate's adapters and simulators use.

The subset keeps the listed operations whole (parameters, request bodies, every response) and the
`components` they reference, transitively; prose (`description`, `summary`) is dropped, everything
that validates is kept. It is written to tests/openapi/<provider>.json with an `x-effectgate-source`
block (repository, commit, file, spec version, license) and the provider's license beside it, and
tests/openapi/README.md lists the sources. Run it again to move to a newer spec:

    python3 scripts/trim_openapi.py stripe GIT_DIR COMMIT
    python3 scripts/trim_openapi.py square GIT_DIR COMMIT

GIT_DIR is a clone (bare is fine) of the provider's spec repository; the file is read with
`git show COMMIT:PATH`, so what is recorded is exactly what was cut.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

OUT = Path(__file__).resolve().parent.parent / "tests" / "openapi"


@dataclass(frozen=True)
class Source:
    repository: str
    path: str
    license_path: str
    license: str
    operations: tuple[tuple[str, str], ...]  # (path, method)


SOURCES = {
    "stripe": Source(
        repository="https://github.com/stripe/openapi",
        path="openapi/spec3.yaml",
        license_path="LICENSE",
        license="MIT",
        operations=(
            ("/v1/payment_intents", "post"),
            ("/v1/payment_intents", "get"),
            ("/v1/payment_intents/search", "get"),
            ("/v1/payment_intents/{intent}", "get"),
        ),
    ),
    "square": Source(
        repository="https://github.com/square/connect-api-specification",
        path="api.json",
        license_path="LICENSE.txt",
        license="Apache-2.0",
        operations=(
            ("/v2/payments", "post"),
            ("/v2/payments", "get"),
            ("/v2/payments/{payment_id}", "get"),
        ),
    ),
}
PROSE = frozenset({"description", "summary"})


def git_show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def without_prose(node: Any, *, in_properties: bool = False) -> Any:
    """The node without documentation strings (a property *named* description is kept)."""
    if isinstance(node, dict):
        return {
            k: without_prose(v, in_properties=k == "properties" and not in_properties)
            for k, v in node.items()
            if in_properties or not (k in PROSE and isinstance(v, str))
        }
    if isinstance(node, list):
        return [without_prose(v) for v in node]
    return node


def references(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        for value in node.values():
            found |= references(value)
        return found
    if isinstance(node, list):
        return set().union(*(references(v) for v in node)) if node else set()
    return set()


def resolve(spec: dict[str, Any], ref: str) -> Any:
    if not ref.startswith("#/"):
        raise ValueError(f"only local references are supported: {ref}")
    node: Any = spec
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def trim(spec: dict[str, Any], operations: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for path, method in operations:
        item = spec["paths"][path]
        kept = paths.setdefault(path, {k: v for k, v in item.items() if k == "parameters"})
        kept[method] = item[method]
    # The closure of the references, one component at a time.
    components: dict[str, dict[str, Any]] = {}
    pending = sorted(references(paths))
    seen: set[str] = set()
    while pending:
        ref = pending.pop()
        if ref in seen:
            continue
        seen.add(ref)
        _, _, kind, name = ref.split("/", 3)
        target = resolve(spec, ref)
        components.setdefault(kind, {})[name] = target
        pending.extend(sorted(references(target) - seen))
    trimmed: dict[str, Any] = {k: spec[k] for k in ("openapi", "info", "servers", "security") if k in spec}
    trimmed["paths"] = paths
    schemes = spec.get("components", {}).get("securitySchemes")
    if schemes:
        components["securitySchemes"] = schemes
    trimmed["components"] = {kind: dict(sorted(found.items())) for kind, found in sorted(components.items())}
    result: dict[str, Any] = without_prose(trimmed)
    return result


def api_version(spec: dict[str, Any]) -> str:
    """The dated API version the spec describes: Stripe's is `info.version`; Square's is the default
    of its `Square-Version` header (its `info.version` is the spec format's, "2.0")."""
    found = [str(spec["info"]["version"])]

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("name") == "Square-Version" and isinstance(node.get("schema"), dict):
                found.append(str(node["schema"].get("default", "")))
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(spec)
    return found[-1]


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in SOURCES:
        print(__doc__, file=sys.stderr)
        return 2
    provider, git_dir, commit = argv[1:]
    source = SOURCES[provider]
    commit = subprocess.run(
        ["git", "--git-dir", git_dir, "rev-parse", f"{commit}^{{commit}}"], check=True, capture_output=True, text=True
    ).stdout.strip()
    text = git_show(git_dir, commit, source.path)
    spec = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    trimmed = trim(spec, source.operations)
    trimmed["info"]["x-effectgate-source"] = {
        "repository": source.repository,
        "commit": commit,
        "file": source.path,
        "spec_version": spec["info"]["version"],
        "api_version": api_version(spec),
        "license": source.license,
        "license_file": f"LICENSE-{provider}.txt",
        "operations": [f"{m.upper()} {p}" for p, m in source.operations],
        "made_by": f"python3 scripts/trim_openapi.py {provider} GIT_DIR {commit}",
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{provider}.json").write_text(json.dumps(trimmed, indent=1, sort_keys=False) + "\n")
    (OUT / f"LICENSE-{provider}.txt").write_text(git_show(git_dir, commit, source.license_path))
    count = sum(len(v) for v in trimmed["components"].values())
    print(f"{provider}: {len(source.operations)} operations, {count} components, API version {api_version(spec)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
