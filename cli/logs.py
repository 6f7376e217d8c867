"""Log output of the long-running commands: text lines, or one JSON object per line
(``--log-format json`` / ``MEMSTREAM_LOG_FORMAT=json``) for log collectors."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from memstream.domain.errors import InvalidInputError
from memstream.domain.redaction import redact

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# A LogRecord's own attributes: anything else on a record is a field passed with ``extra``.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (ISO 8601 UTC), ``level``, ``logger``,
    ``message``, ``exception`` (its traceback, when there is one) and the record's extra
    fields. Plain text only (no terminal colour codes); secrets redacted as elsewhere."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(_plain(record.getMessage())),
        }
        if record.exc_info:
            entry["exception"] = redact(_plain(self.formatException(record.exc_info)))
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = (
                    value if isinstance(value, str | int | float | bool | None) else repr(value)
                )
        return json.dumps(entry, ensure_ascii=False)


def _plain(text: str) -> str:
    """``text`` without ANSI escape sequences (a library's coloured message)."""
    if "\x1b[" not in text:
        return text
    import re

    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)


def check_log_format(value: str) -> str:
    if value not in LOG_FORMATS:
        raise InvalidInputError(
            f"--log-format is {value!r}; it must be one of {', '.join(LOG_FORMATS)} "
            "(env MEMSTREAM_LOG_FORMAT)"
        )
    return value


def configure_logging(log_format: str = "text") -> None:
    """Log INFO and up to stderr in ``log_format``; libraries' own handlers (FastStream's
    coloured one) are routed through it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    if log_format == "json":
        for name in ("faststream", "faststream.access", "faststream.access.nats"):
            library = logging.getLogger(name)
            for old in list(library.handlers):
                library.removeHandler(old)
            library.propagate = True
