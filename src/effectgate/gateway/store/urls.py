"""Store URLs as they may be shown: a password never leaves the process in a log or an error."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

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
