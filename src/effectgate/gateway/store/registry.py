"""Finding store backends: each is an entry point in the `effectgate.stores` group, named after
the URL scheme it serves, like adapters are found by kind (adapters/registry.py).

A backend ships as its own package by declaring, in its pyproject.toml:

    [project.entry-points."effectgate.stores"]
    mydb = "my_package.store:MyStore"

where `MyStore` is a `Store` whose `from_url` builds it from `mydb://…`. The built-in ones are
`sqlite` and `postgresql` (alias `postgres`).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from effectgate.adapters import plugins
from effectgate.gateway.config import STORE_GROUP
from effectgate.gateway.store.base import Store

GROUP = STORE_GROUP

# The drivers of the built-in backends come with an extra of the effectgate package.
EXTRAS = {"asyncpg": "postgres"}


def installed() -> dict[str, EntryPoint]:
    """The store URL schemes installed now, by scheme (plugins.read: a backend installed meanwhile counts)."""
    return plugins.installed(GROUP)


STORES = plugins.Plugins[Store](
    GROUP,
    Store,
    label=lambda scheme: f"the {scheme!r} store",
    unknown=lambda scheme, names: (
        f"unsupported store URL scheme {scheme!r} (installed: {', '.join(names) or 'none'}): use sqlite:/// or "
        f"postgresql://, or install the package that declares {scheme!r} in the {GROUP!r} entry-point group"
    ),
    extras=EXTRAS,
)


def store_class(scheme: str) -> type[Store]:
    """The store class serving `scheme` (only its entry point is loaded); a ValueError names the
    installed schemes, or the extra that brings a missing driver."""
    try:
        return STORES.load(scheme)
    except plugins.PluginNotLoaded as exc:
        raise ValueError(str(exc)) from exc.__cause__


def open_store(url: str) -> Store:
    """Builds (does not open) the store for `url` (`sqlite:///…`, `postgresql://…`, or a plug-in's
    scheme) with its backend's `from_url`."""
    scheme = url.split(":", 1)[0].lower()
    return store_class(scheme).from_url(url)


# -- store URLs as they may be shown: a password never leaves the process in a log or an error.

MASK = "***"
# Query options that carry a secret (libpq's `password`, asyncpg's `sslpassword`).
_SECRET_OPTIONS = frozenset({"password", "sslpassword", "passfile"})


def redact_url(url: str) -> str:
    """`url` with the password in its user info and any secret query option masked."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        userinfo, at, host = netloc.rpartition("@")
        if at and ":" in userinfo:
            netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
        query = parse_qsl(parts.query, keep_blank_values=True)
        secret_query = any(k.lower() in _SECRET_OPTIONS for k, _ in query)
        if netloc == parts.netloc and not secret_query:
            return url  # nothing to mask (and urlunsplit would drop the "//" of sqlite:///x)
        if secret_query:
            masked = [(k, MASK if k.lower() in _SECRET_OPTIONS else v) for k, v in query]
            parts = parts._replace(query=urlencode(masked, safe="*"))
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        # Not even a URL: show nothing of it rather than risk a secret.
        return f"<unparsable store URL, {len(url)} characters>"
