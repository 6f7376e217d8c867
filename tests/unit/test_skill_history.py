"""Skills in history (§7.2, §7.3): restoring loads from tool parts, and reclaiming an unload."""

from __future__ import annotations

from typing import Any

from memstream.context.state import reclaimed, skills_in_history


def tool_part(
    tool: str, label: str, key: str, output: Any = "content", state: str = "output-available"
) -> dict[str, Any]:
    return {
        "type": "dynamic-tool",
        "toolName": tool,
        "toolCallId": f"call-{tool}-{key}",
        "state": state,
        "input": {"label": label, "key": key},
        "output": output,
    }


def assistant(message_id: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"id": message_id, "role": "assistant", "parts": list(parts)}


def test_loads_in_history_are_restored_and_unloads_remove_them() -> None:
    history = [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "talk like a pirate"}]},
        assistant("a1", tool_part("load_context", "skills", "pirate")),
        assistant("a2", tool_part("load_context", "skills", "tax")),
        assistant("a3", tool_part("load_context", "skills", "old", output="[skill unloaded: old]")),
        assistant("a4", tool_part("unload_context", "skills", "tax", output="Unloaded")),
        # not counted: pending output, a user message, a tool part without label/key
        assistant("a5", tool_part("load_context", "skills", "pending", state="input-available")),
        {"id": "u2", "role": "user", "parts": [tool_part("load_context", "skills", "user")]},
        assistant(
            "a6",
            {
                "type": "dynamic-tool",
                "toolName": "load_context",
                "state": "output-available",
                "input": {},
            },
        ),
    ]
    assert skills_in_history(history) == ["skills:pirate"]
    assert skills_in_history([]) == []


def test_unload_rewrites_the_newest_matching_load_output_only() -> None:
    first = assistant("a1", tool_part("load_context", "skills", "pirate", output="Arr v1"))
    second = assistant(
        "a2",
        {"type": "text", "text": "loading"},
        tool_part("load_context", "skills", "pirate", output="Arr v2"),
    )
    other = assistant("a3", tool_part("load_context", "other", "pirate"))
    rewritten = reclaimed([first, second, other], "skills", "pirate")
    assert rewritten is not None
    assert rewritten["id"] == "a2"
    assert rewritten["parts"][1]["output"] == "[skill unloaded: pirate]"
    assert rewritten["parts"][0] == {"type": "text", "text": "loading"}
    # the history itself is not mutated
    assert second["parts"][1]["output"] == "Arr v2"
    assert reclaimed([first, second], "skills", "nope") is None
