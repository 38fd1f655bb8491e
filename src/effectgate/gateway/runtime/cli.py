"""The `effectgate` command: `serve` runs the gateway, `check` validates a config without serving;
operator commands; plug-in commands such as `chaos` (installed by effectgate-lab) are found
through an entry-point group.

Every start-up failure is one line on stderr and exit status 2 (`--debug` adds the traceback):
people read it in a terminal or a container log, where a traceback hides the one thing to fix.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import traceback
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

from effectgate.adapters import plugins
from effectgate.client import cli as admin_cli
from effectgate.client.cli.parser import Parser
from effectgate.gateway.observability import LEVELS, setup_logging
from effectgate.gateway.runtime.commands.config_option import CONFIG_ENV, add_config_option, config_from_env
from effectgate.gateway.runtime.process import collector_paused

COMMANDS_GROUP = "effectgate.commands"
EXIT_STARTUP = 2
# The gateway's own commands load the gateway (config, store, server: most of a second of imports)
# when they run; an operator command (`effectgate actions`, ...) needs only the client's.
GATEWAY_COMMANDS = ("serve", "check", "migrate", "audit", "notify")


def plugin_names() -> set[str]:
    return set(plugins.installed(COMMANDS_GROUP))


def plugin_command(name: str) -> Callable[[list[str]], int] | None:
    """The `main(argv)` of an installed plug-in command, e.g. `chaos` from effectgate-lab."""
    ep = plugins.installed(COMMANDS_GROUP).get(name)
    if ep is None:
        return None
    with collector_paused():  # the plug-in's modules (runtime/process.py)
        command: Callable[[list[str]], int] = ep.load()
    return command


def plugin_summary(name: str) -> str:
    """What `effectgate --help` says of a plug-in command: the first line of its `main`'s
    docstring, read from the module's source where it can be (loading the lab's `chaos` or the
    MCP front door is seconds of imports), else from the loaded command."""
    ep = plugins.installed(COMMANDS_GROUP).get(name)
    doc = docstring_in_source(ep.value) if ep is not None else None
    if doc is None:
        try:
            command = plugin_command(name)
        except Exception as exc:  # a broken plug-in must not break the help
            return f"plug-in command ({COMMANDS_GROUP}); it failed to load: {type(exc).__name__}"
        doc = getattr(command, "__doc__", None) or ""
    doc = doc.strip()
    return doc.splitlines()[0] if doc else f"plug-in command ({COMMANDS_GROUP})"


def docstring_in_source(target: str) -> str | None:
    """The docstring of the function `target` ("package.module:function") names, read from its
    module's source file without importing the module or its packages; None when it is not a
    function defined in a source file on sys.path."""
    module, _, attr = target.partition(":")
    if not attr or "." in attr.strip():
        return None
    from importlib.machinery import PathFinder

    parts = module.split(".")
    path: list[str] | None = None  # None: sys.path, for the top-level package
    spec = None
    for depth in range(1, len(parts) + 1):
        spec = PathFinder.find_spec(".".join(parts[:depth]), path)
        if spec is None:
            return None
        if depth < len(parts):
            if not spec.submodule_search_locations:
                return None
            path = list(spec.submodule_search_locations)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    import ast

    try:
        with open(spec.origin, encoding="utf-8") as source:
            tree = ast.parse(source.read(), spec.origin)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr.strip():
            return ast.get_docstring(node) or ""
    return None


def top_level_help(argv: list[str], command_names: set[str]) -> bool:
    """Whether `effectgate --help` (or no argument at all) asks for the list of commands, whose
    plug-in summaries need their modules loaded; `effectgate serve --help` does not (loading the
    lab's `chaos` alone is seconds of imports)."""
    for token in argv:
        if token in ("-h", "--help"):
            return True
        if token in command_names:
            return False
    return not argv


LOG_DEFAULTS: dict[str, object] = {"log_level": "INFO", "debug": False, "log_format": "text"}


def global_options(parser: argparse.ArgumentParser, defaults: dict[str, object]) -> None:
    """The options every command takes, before or after its name."""
    parser.add_argument("--log-level", default=defaults["log_level"], help=f"one of {', '.join(LEVELS)} (default INFO)")
    parser.add_argument(
        "--debug", action="store_true", default=defaults["debug"], help="print the traceback of a start-up failure"
    )
    parser.add_argument(
        "--log-format", choices=("text", "json"), default=defaults["log_format"], help="json: one object a line"
    )


def completion(parser: argparse.ArgumentParser) -> None:
    """Shell completion (argcomplete): answers and exits only when the shell asks for completions.

    Enable it with `eval "$(register-python-argcomplete effectgate)"` (docs/operations.md)."""
    if "_ARGCOMPLETE" not in os.environ:  # argcomplete's own test: the shell is not asking
        return
    import argcomplete

    argcomplete.autocomplete(parser)


def version_line() -> str:
    """`effectgate --version`: the installed packages' versions (their metadata, from pyproject.toml)."""
    try:
        gateway = version("effectgate")
    except PackageNotFoundError:
        gateway = "unknown"
    return f"effectgate {gateway} (client {admin_cli.client_version()})"


def fatal(line: str, log_format: str) -> None:
    """The one line a refused start ends with: plain text on a terminal, an ERROR record under
    `--log-format json` (a collector filtering on severity must see the gateway did not start)."""
    if log_format == "json":
        logging.getLogger("effectgate").error("%s", line)
    else:
        print(line, file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    from effectgate.adapters.secrets import resolved_secrets
    from effectgate.gateway.observability import redact

    text = " ".join(str(exc).split()) or type(exc).__name__
    return redact(text, resolved_secrets())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    plugin = plugin_command(argv[0]) if argv else None
    if plugin is not None:
        # Plug-in commands (e.g. `chaos` from effectgate-lab) parse their own options.
        return int(plugin(argv[1:]))
    parser = Parser(prog="effectgate", description="exactly-once side effects for AI agents")
    parser.add_argument("--version", action="version", version=version_line())
    global_options(parser, LOG_DEFAULTS)
    # The same options after the command's name (`effectgate serve --log-format json ...`); there
    # they default to nothing, so that one given before the name is not overwritten.
    common = Parser(add_help=False)
    global_options(common, {name: argparse.SUPPRESS for name in LOG_DEFAULTS})
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="run the gateway", parents=[common])
    add_config_option(serve_cmd)
    serve_cmd.add_argument(
        "--workers", type=int, default=0, help="N gateway processes sharing the port (the parent binds it once)"
    )
    serve_cmd.add_argument("--worker-port", type=int, default=0, help=argparse.SUPPRESS)
    serve_cmd.add_argument("--worker-webhook-port", type=int, default=0, help=argparse.SUPPRESS)
    serve_cmd.add_argument(
        "--fail-fast",
        action="store_true",
        help="exit 2 when the store cannot be reached at start-up (default: wait for it, NOT_SERVING)",
    )
    check_cmd = commands.add_parser(
        "check", help="validate a config: secrets, adapters, store; then exit", parents=[common]
    )
    add_config_option(check_cmd)
    check_cmd.add_argument(
        "--probe", action="store_true", help="one harmless read per adapter: are its credentials and address right?"
    )
    check_cmd.add_argument(
        "--workers", type=int, default=0, help="as `serve --workers N` would start: what it refuses, refused here"
    )
    migrate_cmd = commands.add_parser(
        "migrate",
        help="apply the store's missing schema migrations (a role that may change the schema)",
        parents=[common],
    )
    add_config_option(migrate_cmd)
    audit_cmd = commands.add_parser(
        "audit", help="drift audit: the providers' records against the gateway's (`audit verify`: the event chain)"
    )
    # Not required here: `audit verify --config` may give it after the subcommand instead.
    audit_cmd.add_argument(
        "--config", default=config_from_env(), help=f"path of the TOML config (default: ${CONFIG_ENV})"
    )
    audit_cmd.add_argument("--since", default="24h", help="how far back to look (default 24h)")
    audit_cmd.add_argument(
        "-o", "--output", choices=("table", "wide", "json", "yaml"), default="table", help="as the other commands print"
    )
    audit_commands = audit_cmd.add_subparsers(dest="audit_command")
    verify_cmd = audit_commands.add_parser(
        "verify", help="walk the audit trail's hash chain; name the first broken row (exit 1)"
    )
    add_config_option(verify_cmd, inherited=True)
    verify_cmd.add_argument(
        "--since", dest="verify_since", default="", help="only rows from this long ago on (default: the whole chain)"
    )
    verify_cmd.add_argument("-o", "--output", dest="verify_output", choices=("table", "json", "yaml"), default="table")
    from effectgate.gateway.runtime.commands import notify as notify_cli

    notify_cli.add_command(commands, [common])
    plugins = plugin_names()
    # The operator commands are added after the plug-ins (the help lists them last) but are
    # commands all the same: `effectgate actions --help` loads no plug-in.
    help_wanted = top_level_help(argv, {*commands.choices, *plugins, *admin_cli.COMMANDS})
    for name in sorted(plugins):
        summary = plugin_summary(name) if help_wanted else f"plug-in command ({COMMANDS_GROUP})"
        commands.add_parser(name, help=summary, add_help=False)
    admin_cli.add_commands(commands, parents=[common])
    completion(parser)
    args = parser.parse_args(argv)
    if args.log_level.upper() not in LEVELS:
        print(f"effectgate: --log-level: {args.log_level!r} is not one of {', '.join(LEVELS)}", file=sys.stderr)
        return EXIT_STARTUP
    setup_logging(args.log_level, args.log_format)
    try:
        if args.command in GATEWAY_COMMANDS:
            return gateway_command(parser, args)
        return admin_cli.run_command(args)
    except KeyboardInterrupt:  # before the command's own handler: while its modules still load
        raise KeyboardInterrupt(args.command) from None  # entry.py ends it, naming the command


def gateway_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`serve`, `check`, `migrate`, `notify` and `audit`: a refused start is one line and exit 2."""
    from effectgate.gateway.config import ConfigError
    from effectgate.gateway.runtime.startup import ServeOptions, StartupFailed

    try:
        if args.command == "serve":
            # Each command loads its own modules: `check` never loads the server.
            with collector_paused():
                from effectgate.gateway.runtime.serve import run as run_serve

            options = ServeOptions(
                args.config,
                args.workers,
                args.worker_port,
                args.log_level,
                args.log_format,
                args.fail_fast,
                args.worker_webhook_port,
            )
            return run_serve(options)
        if args.command == "check":
            with collector_paused():
                from effectgate.gateway.runtime.commands.check import run_check

            return asyncio.run(run_check(args.config, args.probe, args.workers))
        if args.command == "migrate":
            from effectgate.gateway.runtime.commands.migrate import run_migrate

            return asyncio.run(run_migrate(args.config))
        if args.command == "notify":
            from effectgate.gateway.runtime.commands import notify as notify_cli

            return asyncio.run(notify_cli.run(args))
        if not args.config:
            parser.error(f"audit: the following arguments are required: --config (or ${CONFIG_ENV})")
        if args.audit_command == "verify":
            from effectgate.gateway.runtime.commands.chain_verify import run_verify

            return asyncio.run(run_verify(args.config, args.verify_since, args.verify_output))
        from effectgate.gateway.runtime.commands.audit import run_audit

        return asyncio.run(run_audit(args.config, args.since, args.output))
    except (ConfigError, StartupFailed) as exc:
        if args.debug:
            traceback.print_exc()
        fatal(f"effectgate: {_one_line(exc)}", args.log_format)
        return EXIT_STARTUP


if __name__ == "__main__":
    sys.exit(main())
