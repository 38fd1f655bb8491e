"""Names that wrap at their own seams: a run id, a scope or a customer id is one long word to a
browser, and a table cell holding one is at least as wide as the word. `wrappable` escapes the text
and offers a break (<wbr>) after each separator (`_ : . / @ -`) and inside any stretch of more than
16 characters without one, so no name can push a table wider than its page, and short names never
break in the middle."""

from __future__ import annotations

import re

from markupsafe import Markup, escape

_AFTER_SEPARATOR = re.compile(r"(?<=[_:./@-])")
_STRETCH = 16
_BREAK = Markup("<wbr>")


def wrappable(value: object) -> Markup:
    pieces = []
    for part in _AFTER_SEPARATOR.split(str(value)):
        chunks = [part[i : i + _STRETCH] for i in range(0, len(part), _STRETCH)]
        pieces.append(_BREAK.join(escape(chunk) for chunk in chunks))
    return _BREAK.join(pieces)
