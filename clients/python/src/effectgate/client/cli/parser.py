"""The command line's parser: on a usage error, one line saying what is wrong, a did-you-mean
when a command, a choice or an option was mistyped, and where the full usage is — instead of
argparse's whole usage block before every error."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import NoReturn

_CHOICE = re.compile(r"invalid choice: '(?P<given>[^']*)' \(choose from (?P<choices>.*)\)")
_UNKNOWN = re.compile(r"unrecognized arguments: (?P<given>.*)")


def _names(listed: str) -> list[str]:
    return [name.strip().strip("'\"") for name in listed.split(",") if name.strip()]


def suggestion(message: str, options: list[str]) -> str:
    """ " (did you mean 'x'?)" for a mistyped choice or option in argparse's `message`, else ""."""
    if found := _CHOICE.search(message):
        close = difflib.get_close_matches(found["given"], _names(found["choices"]), n=1, cutoff=0.5)
    elif found := _UNKNOWN.search(message):
        flags = [word for word in found["given"].split() if word.startswith("--")]
        close = difflib.get_close_matches(flags[0].split("=")[0], options, n=1, cutoff=0.6) if flags else []
    else:
        close = []
    return f" (did you mean {close[0]!r}?)" if close else ""


def long_options(parser: argparse.ArgumentParser) -> list[str]:
    """Every `--option` of `parser` and of its sub-commands (argparse reports an unknown option
    of a sub-command from the top parser, which does not know which command was meant)."""
    found: list[str] = []
    for action in parser._actions:
        found += [flag for flag in action.option_strings if flag.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += [flag for flag in long_options(sub) if flag not in found]
    return found


class Parser(argparse.ArgumentParser):
    """argparse with short errors (see the module's docstring); sub-commands inherit it."""

    def error(self, message: str) -> NoReturn:
        options = long_options(self)
        sys.stderr.write(f"{self.prog}: error: {message}{suggestion(message, options)}\n")
        sys.stderr.write(f"see '{self.prog} --help' for the usage\n")
        sys.exit(2)
