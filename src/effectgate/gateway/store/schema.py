"""Versioned schema migrations, one folder of numbered SQL files per dialect.

Both backends record what they applied in one `schema_migrations` table of the same shape, and
apply the missing files in order inside one transaction under a lock (PostgreSQL: an advisory
lock; SQLite: `BEGIN IMMEDIATE`), so replicas or processes starting together apply each once.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

# One table of the same shape on both backends; only the timestamp's type and default differ.
SCHEMA_MIGRATIONS = {
    "postgres": """CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        applied_at TIMESTAMPTZ NOT NULL DEFAULT now())""",
    "sqlite": """CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)""",
}
RECORD = "INSERT INTO schema_migrations (version, name) VALUES (?, ?)"


@dataclass(frozen=True, order=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        """The file split into single statements (drivers that run one at a time need this)."""
        out: list[str] = []
        buffer = ""
        for line in self.sql.splitlines(keepends=True):
            buffer += line
            if sqlite3.complete_statement(buffer):
                if _strip_comments(buffer):
                    out.append(buffer.strip())
                buffer = ""
        if _strip_comments(buffer):
            out.append(buffer.strip())
        return out


def behind(missing: list[Migration]) -> str:
    """The refusal of a store that may not migrate (`[store] migrate = "never"`)."""
    names = missing[0].name if len(missing) == 1 else f"{missing[0].name} … {missing[-1].name}"
    return (
        f"the schema is behind: {len(missing)} migration(s) not applied ({names}) and [store] migrate = "
        '"never": run `effectgate migrate --config FILE` with a role that may change the schema'
    )


def no_ddl(detail: str) -> str:
    """The refusal of a role that may not apply the missing migrations."""
    return (
        f"the schema is behind and this role may not change it ({detail}): run `effectgate migrate "
        "--config FILE` with a role that may (docs/production.md, PostgreSQL roles)"
    )


def _strip_comments(sql: str) -> str:
    return "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--")).strip()


def load(dialect: str) -> list[Migration]:
    """The bundled migrations of `dialect` ("sqlite" or "postgres"), in order."""
    folder = resources.files("effectgate.gateway.store") / "migrations" / dialect
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)
