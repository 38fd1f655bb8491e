"""The base of every config table, and the TLS table the listeners share."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _readable(path: str) -> str:
    try:
        with open(path, "rb"):
            return path
    except OSError as exc:
        raise ValueError(f"cannot read {path!r}: {exc.strerror}") from None


class TlsConfig(_Table):
    cert_file: str
    key_file: str
    # Set: clients must present a certificate signed by this CA (mTLS).
    client_ca_file: str = ""

    @field_validator("cert_file", "key_file", "client_ca_file")
    @classmethod
    def _exists(cls, value: str) -> str:
        return _readable(value) if value else value
