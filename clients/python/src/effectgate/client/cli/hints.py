"""What to do next, after a refusal or a failure the operator commands print: the flag and the
environment variable that fix a connection or a token, and how to allow what a policy refused."""

from __future__ import annotations

import argparse
import os

import grpc

from effectgate.client.errors import EffectGateError, RecordTooNew
from effectgate.client.settings import DEFAULT_TARGET


def target_of(args: argparse.Namespace) -> str:
    """The gateway the command spoke to, as the client resolved it."""
    return str(args.target or os.environ.get("EFFECTGATE_TARGET", "") or DEFAULT_TARGET)


def hint(exc: EffectGateError, args: argparse.Namespace) -> str:
    """One sentence to print under the error, or "" when the error says it all."""
    code, reason = exc.code(), exc.reason
    target = target_of(args)
    if code == grpc.StatusCode.UNAVAILABLE and not reason:  # a transport failure, not the gateway's answer
        return (
            f"hint: is a gateway running at {target}? Start one with `make run`, or point the command "
            "at yours with --target host:port or EFFECTGATE_TARGET (TLS: --tls-ca / EFFECTGATE_TLS_CA)."
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return (
            f"hint: {target} did not answer within {args.timeout:g}s: is it the gateway's gRPC port "
            "(not its metrics or webhook port)? Wait longer with --timeout, e.g. --timeout 60s."
        )
    if code == grpc.StatusCode.UNAUTHENTICATED:
        variable = args.token_env
        where = "is empty" if not os.environ.get(variable) else "holds a token the gateway does not know"
        return (
            f"hint: ${variable} {where}: export {variable}=<your operator token>, or name another "
            "variable with --token-env NAME."
        )
    if isinstance(exc, RecordTooNew):
        return (
            f"hint: a newer gateway release stored this action (record version {exc.stored_version}; the gateway at "
            f"{target} reads up to {exc.readable_version}): ask a replica of the newer release, or finish the "
            "rolling upgrade (docs/deploy.md). Nothing was changed."
        )
    return ""
