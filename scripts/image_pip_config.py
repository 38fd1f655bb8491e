"""The host's pip configuration, as the image's build reads it through two build secrets.

`python scripts/image_pip_config.py DIR` writes DIR/pip.conf and DIR/pip-cert: how this machine's
pip reaches its packages (index URLs, trusted hosts, a proxy, timeouts, and the CA bundle named by
`cert`, copied to DIR/pip-cert and named as the secret's mount point) merged from the files pip
reads and the PIP_* variables, in pip's order (later wins). What names a path on the host (a
`file://` index, local find-links, a constraint file) is left out: the build has its own pins and
cannot see the host's disk. `make image` passes both files as `--secret`, so they are mounted for
the installing RUNs alone and never stored in a layer. Standard library only.
"""

from __future__ import annotations

import configparser
import os
import shutil
import sys
from pathlib import Path

# Keys that say how to reach an index, with pip's environment variable for each.
NETWORK_KEYS = ("index-url", "extra-index-url", "trusted-host", "proxy", "cert", "timeout", "retries", "find-links")
ALIASES = {"default-timeout": "timeout"}
SECTIONS = ("global", "install", "download")
CERT_IN_BUILD = "/run/secrets/pip-cert"


def config_files() -> list[Path]:
    """The files pip reads, lowest precedence first (pip's own order: global, user, site, then
    PIP_CONFIG_FILE)."""
    xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    home = Path.home()
    xdg_home = Path(os.environ.get("XDG_CONFIG_HOME", home / ".config"))
    files = [*(Path(d) / "pip" / "pip.conf" for d in reversed(xdg_dirs)), Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", xdg_home / "pip" / "pip.conf", Path(sys.prefix) / "pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def settings(files: list[Path]) -> dict[str, str]:
    """The network keys' merged values (`files` in order, then PIP_* variables)."""
    found: dict[str, str] = {}
    for path in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        for section in SECTIONS:
            if parser.has_section(section):
                for key, value in parser.items(section):
                    key = ALIASES.get(key, key)
                    if key in NETWORK_KEYS:
                        found[key] = value.strip()
    for key in (*NETWORK_KEYS, *ALIASES):
        from_env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if from_env:
            found[ALIASES.get(key, key)] = from_env
    return found


def remote_only(value: str) -> str:
    """The URLs of a list that are not on the host's disk (file:// URLs and paths dropped)."""
    return " ".join(url for url in value.split() if url.startswith(("http://", "https://")))


def write(dest: Path, files: list[Path] | None = None) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    values = settings(config_files() if files is None else files)
    lines = ["[global]"]
    cert = values.pop("cert", "")
    (dest / "pip-cert").write_bytes(b"")
    if cert and Path(cert).is_file():
        shutil.copyfile(cert, dest / "pip-cert")
        lines.append(f"cert = {CERT_IN_BUILD}")
    for key, value in values.items():
        if key in ("index-url", "extra-index-url", "find-links"):
            value = remote_only(value)
        if value:
            lines.append(f"{key} = {value}")
    (dest / "pip.conf").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    write(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
