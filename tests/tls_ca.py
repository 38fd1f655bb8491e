"""A throw-away certificate authority (openssl) for TLS and mTLS tests: a server certificate
for 127.0.0.1/localhost and a client certificate, both signed by the test CA."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CertAuthority:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _signed(folder: Path, name: str, ca: Path, ca_key: Path, *extensions: str) -> tuple[Path, Path]:
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.crt"
    ext = folder / f"{name}.ext"
    ext.write_text("\n".join(extensions) + "\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(csr))
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
        "-days", "1", "-extfile", str(ext), "-out", str(cert),
    )  # fmt: skip
    return cert, key


def make_ca(folder: Path) -> CertAuthority:
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.crt", folder / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=effectgate test CA",
        "-keyout", str(ca_key), "-out", str(ca),
    )  # fmt: skip
    server = _signed(
        folder, "gateway", ca, ca_key, "subjectAltName=DNS:localhost,IP:127.0.0.1", "extendedKeyUsage=serverAuth"
    )
    client = _signed(folder, "operator", ca, ca_key, "extendedKeyUsage=clientAuth")
    return CertAuthority(ca, server[0], server[1], client[0], client[1])
