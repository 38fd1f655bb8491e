"""Text a store cannot hold, found in any message: refused at the edge, the same on every store.

PostgreSQL text cannot hold NUL (SQLite can); a value that one store keeps and another refuses
would make the same call succeed or fail by backend.
So every text field of every request (and of an Execute payload) is checked before anything is
read or stored, and each bad one is named in a field violation (INVALID_ARGUMENT).
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from effectgate.gateway.model import InvalidRequest

# NUL is the one character PostgreSQL text cannot hold that a protobuf string can carry (a
# parsed string is valid UTF-8: no lone surrogates); `in` is the fastest test of a str.
_NUL = "\x00"
_STRING, _MESSAGE = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE
_WHY = "contains a NUL (a character the store cannot keep as text)"


def unstorable(message: Message, prefix: str = "") -> list[tuple[str, str]]:
    """(field path, why) for each text value of `message`, nested ones included, that a store
    cannot hold. The contents of an `Any` are the owner's to check (its type is known later).
    Names are made only for a field found bad: this runs on every request."""
    found: list[tuple[str, str]] = []
    for field, value in message.ListFields():
        kind = field.type
        if kind == _STRING:
            if not field.is_repeated:
                if _NUL in value:
                    found.append((prefix + field.name, _WHY))
            else:
                found.extend((f"{prefix}{field.name}[{i}]", _WHY) for i, v in enumerate(value) if _NUL in v)
        elif kind == _MESSAGE:
            name = prefix + field.name
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                for key, item in value.items():
                    if isinstance(key, str) and _NUL in key:
                        found.append((f"{name}[key]", _WHY))
                    if isinstance(item, str) and _NUL in item:
                        found.append((f"{name}[{key!r}]", _WHY))
                    elif isinstance(item, Message):
                        found.extend(unstorable(item, f"{name}[{key!r}]."))
            elif field.is_repeated:
                for i, item in enumerate(value):
                    found.extend(unstorable(item, f"{name}[{i}]."))
            else:
                found.extend(unstorable(value, name + "."))
    return found


def refuse_unstorable(message: Message, prefix: str = "") -> None:
    """Raises InvalidRequest naming every text field of `message` a store cannot hold."""
    found = unstorable(message, prefix)
    if found:
        raise InvalidRequest(found)
