"""Token estimates, identical to the reference (UTF-16 length, JS whitespace, IEEE doubles)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

# JavaScript's \s: ECMAScript WhiteSpace and LineTerminator code points.
_JS_WHITESPACE = re.compile(
    "[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+"
)
MESSAGE_OVERHEAD = 4


def utf16_length(text: str) -> int:
    """JavaScript's ``string.length``: UTF-16 code units (an emoji counts 2)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def js_round(value: float) -> int:
    """JavaScript's ``Math.round``: halves round up (Python's ``round`` rounds to even)."""
    return math.floor(value + 0.5)


def estimate_string_tokens(text: str) -> int:
    """``ceil(max(utf16_len / 4, words * 1.3))``; 0 for ``""``."""
    if not text:
        return 0
    words = sum(1 for piece in _JS_WHITESPACE.split(text) if piece)
    return math.ceil(max(utf16_length(text) / 4, words * 1.3))


def compact_json(value: object) -> str:
    """``JSON.stringify(value)``: compact JSON, non-ASCII kept; ``str(value)`` if not JSON."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _estimate_value(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return estimate_string_tokens(value)
    return estimate_string_tokens(compact_json(value))


def is_tool_type(part_type: object) -> bool:
    """True for a tool part's ``type``: ``tool-*`` or ``dynamic-tool`` (spec §1.1)."""
    return isinstance(part_type, str) and (
        part_type.startswith("tool-") or part_type == "dynamic-tool"
    )


def estimate_message_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Sum over messages of 4 plus the estimate of each part (text, reasoning, tool I/O)."""
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD
        for part in message.get("parts") or []:
            if not isinstance(part, Mapping):
                continue
            kind = part.get("type")
            if kind in ("text", "reasoning"):
                text = part.get("text")
                total += _estimate_value(text if text is not None else part.get("reasoning"))
            elif is_tool_type(kind):
                output = part.get("output")
                total += _estimate_value(part.get("input"))
                total += _estimate_value(output if output is not None else part.get("result"))
            elif "text" in part:
                total += _estimate_value(part["text"])
            elif "result" in part:
                total += _estimate_value(part["result"])
    return total
