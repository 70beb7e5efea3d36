"""Keep broker passwords out of everything mqbed writes: run directories, reports, logs, errors.

One helper for every place that writes a URL or a text that may hold one: `redact_url` turns
``amqp://user:pass@host:5672/vhost`` into ``amqp://user:***@host:5672/vhost`` (user, host, port,
path and query stay readable), `redact_text` does the same for every URL inside a text and
replaces any extra secret strings it is given (a password known to the caller) by ``***``.
"""

from __future__ import annotations

__all__ = ["MASK", "redact_text", "redact_url", "redact_value", "url_passwords"]

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

MASK = "***"

# scheme://user:password@ — the userinfo ends at the last '@' before the first '/', '?', '#'
# or whitespace (RFC 3986 netloc); a password that is not percent-encoded may hold '@' or ':'.
_USERINFO = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:@/?#\s\"'<>]*):"
    r"(?P<password>[^/?#\s\"'<>]*)@(?=[^@/?#\s\"'<>]*(?:[/?#\s\"'<>]|$))"
)


def redact_url(url: str) -> str:
    """`url` with its password (if any) replaced by ``***``; anything else is kept as it is."""
    netloc = urlsplit(url).netloc if "://" in url else ""
    if "@" not in netloc:
        return url
    userinfo, _, hostport = netloc.rpartition("@")
    if ":" not in userinfo:
        return url  # a user without password: nothing to hide
    user = userinfo.split(":", 1)[0]
    return url.replace(netloc, f"{user}:{MASK}@{hostport}", 1)


def url_passwords(urls: Iterable[str]) -> list[str]:
    """The passwords in `urls`, as written and percent-decoded (secrets for `redact_text`)."""
    found: list[str] = []
    for url in urls:
        password = urlsplit(url).password if "://" in url else None
        if password:
            found += [password, unquote(password)]
    return found


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every URL's password and every string of `secrets` replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['head']}{m['user']}:{MASK}@", text)
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def redact_value(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON-like `value` with every string passed through `redact_text` and every
    ``password`` field masked (for documents such as ``environment.json``)."""
    known = tuple(secrets)
    if isinstance(value, str):
        return redact_text(value, known)
    if isinstance(value, dict):
        return {
            k: MASK if k == "password" and v else redact_value(v, known) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact_value(v, known) for v in value]
    return value
