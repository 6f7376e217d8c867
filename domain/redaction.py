"""Credentials out of error and log text: ``nats://alice:secret@host`` -> ``nats://alice:***@host``.

Every URL that reaches an error message or a log line goes through :func:`redact_url`; text that
may quote a URL or a secret (a driver's exception, say) goes through :func:`redact`, and a driver
exception chained under ours through :func:`redacted_exception`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from memstream.domain.errors import RedactedError

MASK = "***"
# scheme://userinfo@ : the userinfo runs to the last "@" before the host's end ("/", "?", "#",
# whitespace or a quote), as urllib reads it, so a password with an unescaped "@" is masked whole.
_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s'\"<>]*)@"
)
# key=value secrets in DSNs and query strings: password=..., token=...
_KEY_VALUE = re.compile(
    r"(?P<key>\b(?:password|passwd|pass|pwd|token|auth_token|secret)=)(?P<value>[^&\s'\"]+)",
    re.IGNORECASE,
)


def _mask_userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match["userinfo"].partition(":")
    # user:password keeps the user; a lone token (nats://token@host) is all secret
    masked = f"{user}:{MASK}" if colon else MASK
    return f"{match['scheme']}{masked}@"


def redact_url(url: str) -> str:
    """``url`` with its password or token masked, the user and host kept.

    ``nats://alice:s3cret@host:4222`` -> ``nats://alice:***@host:4222``; ``nats://tok@host`` ->
    ``nats://***@host``; ``postgresql://u:pw@h/db?password=x`` -> ``postgresql://u:***@h/db?password=***``.
    A URL without a scheme (``alice:pw@host``, as nats-py accepts it) is read as ``nats://``.
    """
    if "://" not in url and "@" in url.split("/", 1)[0]:
        return redact(f"nats://{url}")[len("nats://") :]
    return redact(url)


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with the userinfo of every URL in it, ``password=``-style values and each of
    ``secrets`` (passwords, tokens given apart from a URL) masked."""
    text = _URL_USERINFO.sub(_mask_userinfo, text)
    text = _KEY_VALUE.sub(lambda m: f"{m['key']}{MASK}", text)
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def url_secrets(url: str | None) -> list[str]:
    """The password or token inside ``url``'s userinfo (to mask wherever else it shows up)."""
    found = []
    for match in _URL_USERINFO.finditer(url or ""):
        user, colon, password = match["userinfo"].partition(":")
        found.append(password if colon else user)
    return [s for s in found if s]


def redacted_exception(error: BaseException, secrets: Iterable[str | None]) -> BaseException:
    """``error`` itself if neither it nor its causes mention a secret; else a
    :class:`RedactedError` with its type and masked text (and its traceback), its causes
    likewise, so ``raise ... from redacted_exception(e, ...)`` prints no secret."""
    keep = [s for s in secrets if s]
    if not _mentions(error, keep):
        return error
    stand_in = RedactedError(f"{type(error).__name__}: {redact(str(error), keep)}")
    stand_in.__traceback__ = error.__traceback__
    cause = error.__cause__ if error.__cause__ is not None else error.__context__
    if cause is not None and not (error.__cause__ is None and error.__suppress_context__):
        stand_in.__cause__ = redacted_exception(cause, keep)
    stand_in.__suppress_context__ = True
    return stand_in


def _mentions(error: BaseException, secrets: list[str], depth: int = 0) -> bool:
    text = f"{error!s} {error!r}"
    if redact(text, secrets) != text:
        return True
    cause = error.__cause__ if error.__cause__ is not None else error.__context__
    return cause is not None and depth < 20 and _mentions(cause, secrets, depth + 1)
