"""Where the gateway is and how to reach it: arguments first, then the environment.

EFFECTGATE_TARGET (host:port), EFFECTGATE_TOKEN (bearer token; empty in development mode),
EFFECTGATE_TLS_CA (PEM roots; set -> TLS), EFFECTGATE_TLS_CERT and EFFECTGATE_TLS_KEY (a client
certificate for mTLS), EFFECTGATE_TLS=1 (TLS with the system's roots).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import grpc

DEFAULT_TARGET = "127.0.0.1:50051"


class Connection(TypedDict, total=False):
    """The keyword arguments of Settings.resolve (and of both clients) that say how to connect."""

    token: str | None
    tls: bool | None
    ca_file: str | None
    cert_file: str | None
    key_file: str | None


@dataclass(frozen=True)
class Settings:
    target: str = DEFAULT_TARGET
    token: str = ""
    tls: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""

    @classmethod
    def resolve(
        cls,
        target: str | None = None,
        *,
        token: str | None = None,
        tls: bool | None = None,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Settings:
        env = os.environ if env is None else env
        ca = ca_file if ca_file is not None else env.get("EFFECTGATE_TLS_CA", "")
        cert = cert_file if cert_file is not None else env.get("EFFECTGATE_TLS_CERT", "")
        key = key_file if key_file is not None else env.get("EFFECTGATE_TLS_KEY", "")
        if bool(cert) != bool(key):
            raise ValueError("a client certificate needs both cert_file and key_file (EFFECTGATE_TLS_CERT/_KEY)")
        use_tls = tls if tls is not None else bool(ca or cert or env.get("EFFECTGATE_TLS", "") in ("1", "true"))
        if (ca or cert) and not use_tls:
            raise ValueError("TLS files given but tls=False")
        return cls(
            target=target or env.get("EFFECTGATE_TARGET", "") or DEFAULT_TARGET,
            token=token if token is not None else env.get("EFFECTGATE_TOKEN", ""),
            tls=use_tls,
            ca_file=ca,
            cert_file=cert,
            key_file=key,
        )

    def credentials(self) -> grpc.ChannelCredentials | None:
        """Channel credentials for TLS (None: plaintext). Files are read at each connect, so a
        rotated certificate is picked up by the next channel."""
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file),
            private_key=_read(self.key_file),
            certificate_chain=_read(self.cert_file),
        )

    @property
    def call_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


# Bigger than the gateway's default message limit, so a full page always fits.
# round_robin: with a name that resolves to several replicas (a headless Kubernetes Service) the
# calls spread over all of them; with one address it behaves as the default pick_first.
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", 8 << 20), ("grpc.lb_policy_name", "round_robin"))
