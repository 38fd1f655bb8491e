"""Running the operator commands through EffectGateClient; their exit codes are `exits`."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from effectgate.client.cli import events, hints, limits, render, views
from effectgate.client.cli.exits import EXIT_GATEWAY, EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE
from effectgate.client.cli.render import action_dict, dump, dump_line, message_dict, parse_time, printable
from effectgate.client.client import EffectGateClient
from effectgate.client.errors import EffectGateError, from_rpc_error
from effectgate.client.states import State
from effectgate.v1 import gateway_pb2 as pb

Row = dict[str, Any]


def client_for(args: argparse.Namespace) -> EffectGateClient:
    return EffectGateClient(
        args.target,
        token=os.environ.get(args.token_env, ""),
        tls=args.tls,
        ca_file=args.tls_ca,
        cert_file=args.tls_cert,
        key_file=args.tls_key,
        timeout=args.timeout,
    )


# -- actions -----------------------------------------------------------------------------------


async def newest(client: EffectGateClient, args: argparse.Namespace) -> list[Row]:
    """The newest `--limit` matching actions (all with 0), newest first. ListActions answers
    oldest first and has no time filter, so this reads every page and keeps the last N (a
    bounded deque); `--since` is applied here too."""
    state = State.value(args.state) if args.state else State.UNSPECIFIED
    kept: deque[Row] = deque(maxlen=args.limit or None)
    pages = client.list(state=state, run_id=args.run, tool=args.tool, page_size=args.chunk_size or 500)
    async for action in pages:
        row = action_dict(action)
        created = row.get("created_at", "")
        if args.since is None or not created or parse_time(created) >= args.since:
            kept.append(row)
    return sorted(kept, key=lambda r: (r.get("created_at", ""), r["action_id"]), reverse=True)


def _version(row: Row) -> tuple[str, str]:
    return row["state"], row.get("updated_at", "")


async def polls(client: EffectGateClient, args: argparse.Namespace) -> AsyncIterator[list[Row]]:
    """--watch: the first listing, then every `--interval` the actions that are new or changed
    since the poll before (oldest change first), until Ctrl-C or `--watch-count` polls."""
    seen: dict[str, tuple[str, str]] = {}
    done = 0
    while True:
        rows = await newest(client, args)
        changed = [r for r in rows if seen.get(r["action_id"]) != _version(r)]
        seen = {r["action_id"]: _version(r) for r in rows}  # bounded by --limit
        yield changed if done == 0 else sorted(changed, key=lambda r: (r.get("updated_at", ""), r["action_id"]))
        done += 1
        if args.watch_count and done > args.watch_count:
            return
        await asyncio.sleep(args.interval)


async def streamed(client: EffectGateClient, args: argparse.Namespace) -> AsyncGenerator[list[Row], None]:
    """--watch on a gateway that serves WatchActions: the watch is opened first and its start
    cursor taken, then the listing is read and printed, then every change after that cursor
    (each action once per version: a change the listing already showed is skipped). Falls back
    to `polls` when the gateway does not serve WatchActions (UNIMPLEMENTED)."""
    state = State.value(args.state) if args.state else State.UNSPECIFIED
    stream = client.watch(state=state, tool=args.tool, run_id=args.run)
    try:
        try:
            await anext(stream)  # the start: only a cursor
        except grpc.aio.AioRpcError as raw:
            if raw.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise from_rpc_error(raw) from None
            async for rows in polls(client, args):
                yield rows
            return
        rows = await newest(client, args)
        shown = {r["action_id"]: _version(r) for r in rows}  # bounded by --limit
        yield rows
        try:
            async for message in stream:
                row = action_dict(message.action)
                if shown.pop(row["action_id"], None) == _version(row):
                    continue
                created = row.get("created_at", "")
                if args.since is None or not created or parse_time(created) >= args.since:
                    yield [row]
        except grpc.aio.AioRpcError as raw:
            raise from_rpc_error(raw) from None
    finally:
        await stream.aclose()


async def watched(client: EffectGateClient, args: argparse.Namespace) -> AsyncIterator[list[Row]]:
    """`streamed`, ended after `--watch-count` intervals when it is set (tests)."""
    if not args.watch_count:
        async for rows in streamed(client, args):
            yield rows
        return
    stream = streamed(client, args)
    deadline = asyncio.get_running_loop().time() + args.watch_count * args.interval
    try:
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                yield await asyncio.wait_for(anext(stream), timeout=max(left, 0.0))
            except (TimeoutError, StopAsyncIteration):
                return
    finally:
        await stream.aclose()


READERS = 8  # GetAction calls at once for a table's amounts


async def with_payloads(client: EffectGateClient, rows: list[Row]) -> list[Row]:
    """The rows with the payload GetAction shows people (a table's AMOUNT and TO: ListActions
    carries no payload). An agent's token gets none, an action purged since keeps its row."""
    gate = asyncio.Semaphore(READERS)

    async def one(row: Row) -> Row:
        async with gate:
            try:
                found = await client.get(row["action_id"])
            except EffectGateError:
                return row
        return {**row, "payload": action_dict(found).get("payload")} if found.HasField("payload") else row

    return list(await asyncio.gather(*(one(r) for r in rows)))


async def list_actions(client: EffectGateClient, args: argparse.Namespace) -> None:
    fmt = args.output
    if not args.watch:
        rows = await newest(client, args)
        if fmt in ("json", "yaml"):
            dump(rows, fmt)
        else:
            render.show(render.table(await with_payloads(client, rows), wide=fmt == "wide"))
        return
    header = True
    async for rows in watched(client, args):
        if fmt in ("json", "yaml"):
            for row in rows:
                dump_line(row, fmt)
        elif rows or header:
            render.show(render.table(await with_payloads(client, rows), wide=fmt == "wide", header=header))
            header = False


# -- one action --------------------------------------------------------------------------------


def _one(document: Any, sections: list[render.Section], fmt: str) -> None:
    if fmt in ("json", "yaml"):
        dump(document, fmt)
    else:
        render.show(render.description(sections))


async def _row(client: EffectGateClient, action: Row, fmt: str) -> None:
    """An operator act's answer: the action as it is now, in the columns `actions` prints (its
    AMOUNT and TO read from the payload GetAction shows, as there)."""
    if fmt in ("json", "yaml"):
        dump(action, fmt)
    else:
        render.show(render.table(await with_payloads(client, [action]), wide=fmt == "wide"))


# The operator acts that take a note and answer with the action.
ACTS: dict[str, Callable[[EffectGateClient, argparse.Namespace], Awaitable[pb.Action]]] = {
    "approve": lambda client, args: client.approve(
        args.action_id, note=args.note, fingerprint=args.fingerprint, policy_version=args.policy_version
    ),
    "deny": lambda client, args: client.deny(args.action_id, note=args.note),
    "grant-bypass": lambda client, args: client.grant_bypass(args.action_id, note=args.note),
}


async def _run(args: argparse.Namespace) -> None:
    fmt = args.output
    async with client_for(args) as client:
        if args.command == "actions":
            await list_actions(client, args)
        elif args.command == "events":
            await events.list_events(client, args)
        elif args.command == "show":
            fields = action_dict(await client.get(args.action_id))
            _one(fields, views.action_sections(fields), fmt)
        elif args.command == "describe":
            document, sections = await views.describe(client, args.action_id)
            _one(document, sections, fmt)
        elif args.command == "verify":
            answer = await client.verify(args.action_id)
            fields, seen = action_dict(answer.action), message_dict(answer.observation)
            _one({"action": fields, "observation": seen}, views.verify_sections(fields, seen), fmt)
        elif args.command in ACTS:
            await _row(client, action_dict(await ACTS[args.command](client, args)), fmt)
        elif args.command == "reconcile":
            action = await client.reconcile(
                args.action_id, resolution=args.resolution, note=args.note, external_id=args.external_id
            )
            await _row(client, action_dict(action), fmt)
        elif args.command == "limits":
            tools = limits.limits_rows(await client.limits(args.tool, run_id=args.run))
            if fmt in ("json", "yaml"):
                dump(tools, fmt)
            else:
                render.show(limits.limits_table(tools))
        elif args.command == "grant-limit":
            grant = message_dict(await client.grant_limit(args.action_id, note=args.note))
            _one(grant, limits.grant_sections(grant), fmt)
        else:  # pragma: no cover - argparse refuses other names
            raise ValueError(f"unknown command {args.command!r}")


def run_command(args: argparse.Namespace) -> int:
    """Runs one parsed operator command; the exit code (the module's docstring lists them)."""
    try:
        asyncio.run(_run(args))
    except EffectGateError as exc:
        print(printable(f"effectgate {args.command}: {exc}"), file=sys.stderr)
        if advice := hints.hint(exc, args):
            print(printable(advice), file=sys.stderr)
        return EXIT_NOT_FOUND if exc.code() == grpc.StatusCode.NOT_FOUND else EXIT_GATEWAY
    except (OSError, ValueError) as exc:  # unreadable TLS files, half a client certificate
        print(printable(f"effectgate {args.command}: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        if getattr(args, "watch", False):
            return EXIT_OK
        print(f"effectgate {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK
