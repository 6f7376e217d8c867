"""Context blocks rendered into the system prompt, byte for byte as the reference does (§6.6)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memstream.domain.tokens import estimate_string_tokens, js_round

SEPARATOR = "═" * 46


@dataclass(frozen=True, slots=True)
class ContextBlock:
    """A loaded context block as the prompt and the tools see it."""

    label: str
    content: str
    description: str | None = None
    max_tokens: int | None = None
    writable: bool = False
    is_skill: bool = False
    is_searchable: bool = False

    @property
    def tokens(self) -> int:
        return estimate_string_tokens(self.content)


def render_header(block: ContextBlock) -> str:
    """``LABEL (description) [pct% — tokens/max tokens] [kind]``."""
    header = block.label.upper()
    if block.description:
        header += f" ({block.description})"
    if block.max_tokens:
        pct = js_round(block.tokens / block.max_tokens * 100)
        header += f" [{pct}% — {block.tokens}/{block.max_tokens} tokens]"
    if block.is_searchable:
        header += " [searchable]"
    elif block.is_skill:
        header += " [loadable]"
    elif not block.writable:
        header += " [readonly]"
    else:
        header += " [writable]"
    return header


def render_system_prompt(blocks: Iterable[ContextBlock]) -> str:
    """Blocks in order, separated by blank lines; empty read-only blocks vanish."""
    rendered = [
        f"{SEPARATOR}\n{render_header(b)}\n{SEPARATOR}\n{b.content}"
        for b in blocks
        if b.content or b.writable or b.is_searchable or b.is_skill
    ]
    return "\n\n".join(rendered)
