"""A throw-away certificate authority (Debian's openssl) for TLS and mTLS tests: a CA, a server
certificate for localhost/127.0.0.1 and a client certificate, all signed by the CA."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _issue(directory: Path, name: str, subject: str, extensions: str, ca: Path, ca_key: Path) -> tuple[Path, Path]:
    key, csr, cert, ext = (directory / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    ext.write_text(extensions)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(csr))
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-days", "1", "-extfile", str(ext), "-out", str(cert),
    )  # fmt: skip
    return cert, key


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=effectgate test CA",
        "-keyout", str(ca_key), "-out", str(ca),
    )  # fmt: skip
    server_cert, server_key = _issue(
        directory, "server", "/CN=localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n", ca, ca_key,
    )  # fmt: skip
    client_cert, client_key = _issue(
        directory, "client", "/CN=operator-laptop", "extendedKeyUsage=clientAuth\n", ca, ca_key
    )
    return Pki(ca, server_cert, server_key, client_cert, client_key)
