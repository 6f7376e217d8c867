"""System prompt rendering (spec §6.6): the worked example byte for byte, and the header rules."""

from __future__ import annotations

from memstream.domain.system_prompt import SEPARATOR, ContextBlock, render_system_prompt


def test_worked_example_renders_byte_for_byte() -> None:
    # Given the reference's soul + memory blocks
    soul = ContextBlock("soul", "You are helpful.", description="Identity")
    memory = ContextBlock(
        "memory", "User likes coffee.", description="Learned facts", max_tokens=1100, writable=True
    )
    # When rendered
    prompt = render_system_prompt([soul, memory])
    # Then it is exactly the reference text (with the code's " [writable]" suffix)
    sep = "═" * 46
    assert prompt == (
        f"{sep}\nSOUL (Identity) [readonly]\n{sep}\nYou are helpful.\n\n"
        f"{sep}\nMEMORY (Learned facts) [0% — 5/1100 tokens] [writable]\n{sep}\nUser likes coffee."
    )
    assert "<context_block" not in prompt


def test_empty_readonly_blocks_vanish_but_empty_keyed_and_writable_blocks_render() -> None:
    blocks = [
        ContextBlock("gone", ""),
        ContextBlock("notes", "", writable=True),
        ContextBlock("skills", "", is_skill=True),
        ContextBlock("knowledge", "", description="Docs", is_searchable=True, is_skill=True),
    ]
    prompt = render_system_prompt(blocks)
    assert "GONE" not in prompt
    assert f"{SEPARATOR}\nNOTES [writable]\n{SEPARATOR}\n" in prompt
    assert "SKILLS [loadable]" in prompt
    assert "KNOWLEDGE (Docs) [searchable]" in prompt


def test_percentage_rounds_half_up_like_javascript() -> None:
    # 5 tokens of 8 is 62.5% → 63 (Python's round() would give 62)
    block = ContextBlock("m", "User likes coffee.", max_tokens=8, writable=True)
    assert "[63% — 5/8 tokens]" in render_system_prompt([block])


def test_no_blocks_render_an_empty_prompt() -> None:
    assert render_system_prompt([]) == ""
