"""What the operator commands print: tables and descriptions (rich) for people, JSON and YAML for
scripts. Everything the gateway stores came from agents, so text for the terminal is escaped
(`printable`), and JSON and YAML escape control characters themselves.

Actions become plain dicts once (`action_dict`): the proto's field names (`action_id`, as in the
gateway's audit lines) and the short state names the text shows (`CONFIRMED`, never
`EFFECT_STATE_CONFIRMED`); JSON, YAML and the text views all read those dicts.
"""

from __future__ import annotations

import functools
import json
import sys
import time
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

import yaml
from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from effectgate.client.money_text.asks import ask_of, typed, typed_payload
from effectgate.client.money_text.money import exponent, terminal_locale
from effectgate.v1 import gateway_pb2 as pb

if TYPE_CHECKING:
    from babel import Locale

# Enum fields and the prefix their short names drop.
_ENUMS = {"state": "EFFECT_STATE_", "next_step": "NEXT_STEP_", "resolution": "EFFECT_STATE_"}
_OUTCOME = "OBSERVATION_OUTCOME_"


def printable(text: str) -> str:
    """Escapes control and format characters (ANSI escapes, CR, bidi overrides) so that text from
    agents cannot move the cursor, recolour or rewrite the operator's terminal. Spaces stay (the
    no-break spaces of money in many locales: "10,00 $")."""
    return "".join(
        c if c.isprintable() or unicodedata.category(c) == "Zs" else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def message_dict(message: Message) -> dict[str, Any]:
    """A message as JSON-ready data: proto field names, every field (empty ones too, so a script
    finds the same keys every time), short enum names, int64 as numbers."""
    data = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    shortened: dict[str, Any] = _shorten(data)
    return shortened


def _shorten(data: Any) -> Any:
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            prefix = _ENUMS.get(key) or (_OUTCOME if key == "outcome" else None)
            if prefix and isinstance(value, str):
                value = value.removeprefix(prefix)
            elif key == "generation" and isinstance(value, str):
                value = int(value)
            out[key] = _shorten(value)
        return out
    if isinstance(data, list):
        return [_shorten(v) for v in data]
    return data


def action_dict(action: pb.Action) -> dict[str, Any]:
    """`message_dict`, with the numbers of its Structs (payload, receipt result, evidence) typed:
    an integer stays an integer (a Struct carries doubles), and the payload's amount, an int64
    that proto JSON writes as a string, is an integer of minor units."""
    data: dict[str, Any] = typed(message_dict(action))
    if isinstance(data.get("payload"), dict):
        data["payload"] = typed_payload(data["payload"])
    return data


# -- JSON and YAML ---------------------------------------------------------------------------


def dump(data: Any, fmt: str, out: IO[str] | None = None) -> None:
    """One document: JSON (indented) or YAML. Both escape every control character."""
    stream = out or sys.stdout
    if fmt == "yaml":
        stream.write(yaml.safe_dump(data, sort_keys=False, allow_unicode=False))
    else:
        stream.write(json.dumps(data, indent=2) + "\n")


def dump_line(data: Any, fmt: str, out: IO[str] | None = None) -> None:
    """One item of a stream (--watch): a JSON line, or a YAML document after `---`."""
    stream = out or sys.stdout
    if fmt == "yaml":
        stream.write("---\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=False))
    else:
        stream.write(json.dumps(data) + "\n")
    stream.flush()


# -- tables ------------------------------------------------------------------------------------


def console(out: IO[str] | None = None) -> Console:
    """A console that never reads markup from what it prints, and, when the output is not a
    terminal (a pipe, a file), never folds a row: each action stays one line for grep."""
    stream = out or sys.stdout
    width = None if stream.isatty() else 1_000_000
    return Console(file=stream, width=width, markup=False, highlight=False, emoji=False, soft_wrap=False)


def show(renderable: RenderableType, out: IO[str] | None = None) -> None:
    """Prints a table or a description; to a pipe or a file without the padding rich adds to
    the end of each line."""
    stream = out or sys.stdout
    view = console(stream)
    if stream.isatty():
        view.print(renderable)
        return
    with view.capture() as captured:
        view.print(renderable)
    stream.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    stream.flush()


def age(stamp: str, now: float | None = None) -> str:
    """`5s`, `12m`, `3h`, `2d` since an RFC 3339 time, as kubectl shows ages; `-` when unset."""
    if not stamp:
        return "-"
    seconds = max(0, int((now if now is not None else time.time()) - parse_time(stamp)))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def parse_time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@functools.cache
def reader() -> Locale:
    """The terminal's locale for money (LC_ALL, LC_MONETARY, LANG), read once."""
    return terminal_locale()


def amount(action: Mapping[str, Any]) -> str:
    """The action's amount from the payload GetAction shows people: money ("€125.00") only where
    the payload names a currency this knows; else the number as given (a ledger entry's `25`, with
    its code when it has one), never money the payload did not say; "" without an amount."""
    money = ask_of(action.get("payload") or {}).money
    if money is None:
        return ""
    if exponent(money.currency) is None:
        return f"{money.minor} {money.currency}".strip()
    return money.text(reader())


def party(action: Mapping[str, Any]) -> str:
    return ask_of(action.get("payload") or {}).party


# column title -> what it shows of an action dict
_COLUMNS: dict[str, Any] = {
    "ACTION": lambda a: a["action_id"],
    "STATE": lambda a: a["state"],
    "TOOL": lambda a: a["tool"],
    "AMOUNT": amount,
    "TO": party,
    "SCOPE": lambda a: a["scope"],
    "RUN": lambda a: a.get("context", {}).get("run_id", ""),
    "STEP": lambda a: a.get("context", {}).get("step_id", ""),
    "AGENT": lambda a: a.get("context", {}).get("agent", ""),
    "ATTEMPTS": lambda a: str(a["attempts"]),
    "NEXT": lambda a: a["next_step"],
    "AGE": lambda a: age(a.get("created_at", "")),
    "UPDATED": lambda a: age(a.get("updated_at", "")),
    "RECEIPT": lambda a: a.get("receipt", {}).get("external_id", ""),
    "REASON": lambda a: a["reason"],
}
TABLE = ("ACTION", "STATE", "TOOL", "AMOUNT", "TO", "SCOPE", "RUN", "AGE", "RECEIPT", "REASON")
WIDE = (
    *("ACTION", "STATE", "TOOL", "AMOUNT", "TO", "SCOPE", "RUN", "STEP", "AGENT"),
    *("ATTEMPTS", "NEXT", "AGE", "UPDATED", "RECEIPT", "REASON"),
)


def table(actions: Iterable[Mapping[str, Any]], *, wide: bool = False, header: bool = True) -> Table:
    """Actions as rows under a header, one line each, kubectl-style (no borders)."""
    columns = WIDE if wide else TABLE
    grid = Table(box=None, pad_edge=False, show_header=header, header_style="bold", padding=(0, 2, 0, 0))
    for name in columns:
        grid.add_column(name, no_wrap=name != "REASON", min_width=17 if name == "STATE" else None)
    for action in actions:
        grid.add_row(*(Text(printable(str(_COLUMNS[name](action) or "-"))) for name in columns))
    return grid


# -- descriptions (show, describe, verify) -------------------------------------------------------


@dataclass
class Section:
    """A titled block of a description: label/value rows, then an optional nested document
    (a receipt's result, an observation's evidence) shown as YAML under its own label."""

    title: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    document: Any = None
    document_label: str = ""


def description(sections: Sequence[Section]) -> Table:
    """Sections one under the other, labels aligned, kubectl-describe style."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for section in sections:
        if section.title:
            grid.add_row(Text(section.title + ":", style="bold"), Text(""))
        indent = "  " if section.title else ""
        for label, value in section.rows:
            grid.add_row(Text(f"{indent}{label}:"), Text(printable(value) if value else "-"))
        if section.document not in (None, {}, []):
            text = yaml.safe_dump(section.document, sort_keys=False, allow_unicode=False).rstrip("\n")
            label = f"{indent}{section.document_label}:" if section.document_label else ""
            grid.add_row(Text(label), Text(text))  # YAML escaped every control character already
    return grid
