"""`effectgate console`: the operator console in the browser (docs/console.md). A client of the
gateway over gRPC (the Python client), never a part of the gateway process."""

from effectgate.console.app import build_app
from effectgate.console.settings import ConsoleSettings

__all__ = ["ConsoleSettings", "build_app"]
