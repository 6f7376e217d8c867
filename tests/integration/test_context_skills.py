"""Skills through real sessions (spec §7, §9.2; §12.4): DirectorySkillProvider and user skill
providers, load/unload tracking recorded on the log, restore in a new session object, a new
client and after a rebuild, and the rewrite of a ``load_context`` output in history on unload.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from support.messages import ids, msg
from support.providers import MemorySkills, ReadonlyProvider, ReadonlySkills, content_of
from support.read_models import drop_projection

from memstream import DirectorySkillProvider, Session, StaticContext
from memstream.client import Memstream, open_memstream
from memstream.settings import Settings
from memstream.workers.admin.rebuild import rebuild

# Every behaviour here holds on both read-model backends (issue 14).
pytestmark = pytest.mark.both_backends

SEP = "═" * 46
PIRATE = "Arr, matey. Speak like a pirate.\n"
UNLOAD_BASE = (
    "Unload a previously loaded skill to free context space. The skill remains available for "
    "re-loading."
)


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    root.mkdir()
    (root / "pirate.md").write_text(
        f"---\ndescription: Talk like a pirate\n---\n{PIRATE}", encoding="utf-8"
    )
    (root / "code-review.md").write_text("# Code review\nCheck the tests first.\n", "utf-8")
    return root


def skill_session(ms: Memstream, session_id: str, skills_dir: Path) -> Session:
    return (
        ms.session(session_id)
        .with_context("soul", provider=StaticContext("You are helpful."))
        .with_context("skills", description="Skills", provider=DirectorySkillProvider(skills_dir))
    )


async def loaded_on_log(ms: Memstream, session_id: str) -> list[str]:
    await ms.wait_for("context")
    return ms.core.reads.context_queries.loaded_skills(ms.namespace, session_id)


def load_part(label: str, key: str, output: str, call_id: str) -> dict[str, Any]:
    """A completed load_context tool call as the AI SDK stores it in an assistant message."""
    return {
        "type": "dynamic-tool",
        "toolName": "load_context",
        "toolCallId": call_id,
        "state": "output-available",
        "input": {"label": label, "key": key},
        "output": output,
    }


def assistant(message_id: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"id": message_id, "role": "assistant", "parts": list(parts)}


class _Writable:
    """A writable plain block (get/set)."""

    def __init__(self) -> None:
        self.text: str | None = None

    def get(self) -> str | None:
        return self.text

    def set(self, content: str) -> None:
        self.text = content


# -- prompt and tools ------------------------------------------------------------------------------


async def test_skill_block_lists_skills_and_offers_load_tools(
    ms: Memstream, skills_dir: Path
) -> None:
    session = skill_session(ms, "listing", skills_dir)
    # When the prompt is frozen
    prompt = await session.freeze_system_prompt()
    # Then the skill block lists keys and descriptions under a [loadable] header
    assert prompt == (
        f"{SEP}\nSOUL [readonly]\n{SEP}\nYou are helpful.\n\n"
        f"{SEP}\nSKILLS (Skills) [loadable]\n{SEP}\n"
        "- code-review: Code review\n- pirate: Talk like a pirate"
    )
    # And the writable folder gives set_context, load_context and unload_context
    tools = await session.tools()
    assert list(tools) == ["set_context", "load_context", "unload_context"]
    assert tools["load_context"].description == (
        'Load a document from a skill block by key. Available skill blocks: "skills". '
        "Check the system prompt for available keys."
    )
    assert tools["unload_context"].description == UNLOAD_BASE + " No skills currently loaded."
    assert (
        '- "skills" (skill collection, keyed entries): Skills' in tools["set_context"].description
    )


async def test_empty_skill_folder_still_renders(ms: Memstream, tmp_path: Path) -> None:
    # Given an empty skills folder
    (tmp_path / "none").mkdir()
    session = ms.session("empty").with_context(
        "skills", provider=DirectorySkillProvider(tmp_path / "none")
    )
    # Then the block renders with an empty body, so load_context stays discoverable
    assert await session.freeze_system_prompt() == f"{SEP}\nSKILLS [loadable]\n{SEP}\n"
    assert "load_context" in await session.tools()


async def test_provider_detection_by_methods(ms: Memstream) -> None:
    # Given a read-only block, a writable one, a read-only skill provider and a writable one
    readonly_only = ms.session("ro").with_context("soul", provider=ReadonlyProvider("x"))
    readonly_skills = ms.session("ro-skills").with_context(
        "library", provider=ReadonlySkills({"tax": "File quarterly."})
    )
    writable_skills = ms.session("rw-skills").with_context("skills", provider=MemorySkills())
    mixed = ms.session("mixed").with_context("soul", provider=ReadonlyProvider("x"))
    mixed.with_context("memory", provider=_Writable())
    # Then tools follow the methods each provider has
    assert await readonly_only.tools() == {}
    assert list(await readonly_skills.tools()) == ["load_context", "unload_context"]
    assert list(await writable_skills.tools()) == ["set_context", "load_context", "unload_context"]
    assert list(await mixed.tools()) == ["set_context"]
    # And the header says read-only only for get-only plain blocks
    assert "SOUL [readonly]" in await mixed.freeze_system_prompt()
    assert "MEMORY [writable]" in await mixed.freeze_system_prompt()
    assert await readonly_skills.freeze_system_prompt() == (
        f"{SEP}\nLIBRARY [loadable]\n{SEP}\n- tax"
    )
    # And no skill block means no load_context / unload_context
    assert "load_context" not in await mixed.tools()
    assert "unload_context" not in await mixed.tools()


async def test_a_provider_that_loads_and_searches_renders_searchable_and_writes_as_skill(
    ms: Memstream,
) -> None:
    # Given a provider with get, load, search and set
    class Both(MemorySkills):
        def search(self, query: str) -> str | None:
            return None

    provider = Both({"pirate": (PIRATE, "Pirate")})
    session = ms.session("both").with_context("kb", provider=provider)
    # Then it renders as searchable and offers every tool
    assert (
        await session.freeze_system_prompt() == f"{SEP}\nKB [searchable]\n{SEP}\n- pirate: Pirate"
    )
    tools = await session.tools()
    assert list(tools) == ["set_context", "load_context", "unload_context", "search_context"]
    # And set_context writes it as a skill, with the title as description
    reply = await tools["set_context"].execute(
        {"label": "kb", "content": "Be brief.", "metadata": {"title": "Brevity"}}
    )
    assert reply == 'Indexed "brevity" in kb.'
    assert provider.skills["brevity"] == ("Be brief.", "Brevity")


async def test_a_link_out_of_the_skills_folder_never_reaches_the_model(
    ms: Memstream, skills_dir: Path, tmp_path: Path
) -> None:
    # Given a skill file and a skill folder that are links to files outside (a stand-in for
    # /etc/passwd and a folder of secrets)
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n", encoding="utf-8")
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.md").write_text("SECRET-KEY\n", encoding="utf-8")
    (skills_dir / "passwd.md").symlink_to(passwd)
    (skills_dir / "vault").symlink_to(tmp_path / "secrets", target_is_directory=True)
    session = skill_session(ms, "links", skills_dir)
    # When the prompt is frozen, Then it lists only the skills inside the folder
    prompt = await session.freeze_system_prompt()
    assert prompt.endswith("- code-review: Code review\n- pirate: Talk like a pirate")
    assert "root:x" not in prompt
    assert "passwd" not in prompt
    assert "SECRET" not in prompt
    # And the model's load_context gets an error line, and nothing is recorded as loaded
    tools = await session.tools()
    for key in ("passwd", "vault/key"):
        reply = await tools["load_context"].execute({"label": "skills", "key": key})
        assert reply == (
            f'Error: skill "{key}" leads outside the skills folder {skills_dir} '
            "(a symbolic link); refused"
        )
    assert session.get_loaded_skill_keys() == set()
    # And set_context cannot write through the linked file (its titles make flat keys)
    reply = await tools["set_context"].execute(
        {"label": "skills", "content": "pwned", "metadata": {"title": "passwd"}}
    )
    assert reply.startswith('Error: skill "passwd": passwd.md in ')
    assert passwd.read_text(encoding="utf-8") == "root:x:0:0:root:/root:/bin/bash\n"


# -- load_context ----------------------------------------------------------------------------------


async def test_load_context_returns_exact_content_and_records_the_load(
    ms: Memstream, skills_dir: Path
) -> None:
    session = skill_session(ms, "loading", skills_dir)
    tools = await session.tools()
    load = tools["load_context"]
    # When a skill is loaded
    content = await load.execute({"label": "skills", "key": "pirate"})
    # Then its body comes back exactly (front matter removed), and it is tracked, on the log too
    assert content == PIRATE
    assert session.get_loaded_skill_keys() == {"skills:pirate"}
    assert await loaded_on_log(ms, "loading") == ["skills:pirate"]
    # When it is loaded again, it is still tracked once
    assert await load.execute({"label": "skills", "key": "pirate"}) == PIRATE
    assert await loaded_on_log(ms, "loading") == ["skills:pirate"]
    # When an unknown key is loaded, Then "Not found" and nothing is tracked
    assert await load.execute({"label": "skills", "key": "nope"}) == "Not found: nope"
    assert await load.execute({"label": "skills", "key": "../pirate"}) == "Not found: ../pirate"
    assert session.get_loaded_skill_keys() == {"skills:pirate"}
    # And bad labels and keys are error strings
    assert await load.execute({"label": "soul", "key": "pirate"}) == (
        'Error: "soul" is not a skill block. Skill blocks: skills'
    )
    assert await load.execute({"label": 3, "key": "pirate"}) == (
        'Error: "3" is not a skill block. Skill blocks: skills'
    )
    assert (await load.execute({"label": "skills", "key": 3})).startswith("Error: ")
    assert (await load.execute({"label": "skills"})).startswith("Error: ")
    assert (await load.execute(["skills", "pirate"])).startswith("Error: ")  # type: ignore[arg-type]
    assert await loaded_on_log(ms, "loading") == ["skills:pirate"]


async def test_allow_list_limits_what_the_model_sees_and_loads(
    ms: Memstream, skills_dir: Path
) -> None:
    # Given a folder provider that only allows "pirate"
    provider = DirectorySkillProvider(skills_dir, keys=["pirate"])
    session = ms.session("allow").with_context("skills", provider=provider)
    # Then only that skill is listed and loadable
    assert (await session.freeze_system_prompt()).endswith("\n- pirate: Talk like a pirate")
    assert await session.execute_tool(
        "load_context", {"label": "skills", "key": "code-review"}
    ) == ("Not found: code-review")
    assert session.get_loaded_skill_keys() == set()


# -- set_context on skill blocks -------------------------------------------------------------------


async def test_set_context_writes_skill_files_by_title(ms: Memstream, skills_dir: Path) -> None:
    session = skill_session(ms, "writing", skills_dir)
    frozen = await session.freeze_system_prompt()
    set_context = (await session.tools())["set_context"]
    # When a skill is written with a title
    reply = await set_context.execute(
        {"label": "skills", "content": "Say arr a lot.", "metadata": {"title": "Pirate style"}}
    )
    # Then its key is the title's slug, and the title becomes its description
    assert reply == 'Indexed "pirate-style" in skills.'
    assert (skills_dir / "pirate-style.md").read_text(encoding="utf-8") == (
        "---\ndescription: Pirate style\n---\nSay arr a lot."
    )
    # And the block's listing is refreshed, while the frozen prompt is not
    block = session.get_context_block("skills")
    assert block is not None
    assert sorted(block.content.splitlines()) == [
        "- code-review: Code review",
        "- pirate-style: Pirate style",
        "- pirate: Talk like a pirate",
    ]
    assert await session.freeze_system_prompt() == frozen
    # When the same title is written again with a description
    reply = await set_context.execute(
        {
            "label": "skills",
            "content": "Say arr less.",
            "metadata": {"title": "Pirate style", "description": "Milder pirate"},
        }
    )
    # Then the same entry is updated
    assert reply == 'Indexed "pirate-style" in skills.'
    assert await session.execute_tool(
        "load_context", {"label": "skills", "key": "pirate-style"}
    ) == ("Say arr less.")
    assert "- pirate-style: Milder pirate" in content_of(session, "skills")


async def test_set_context_derives_keys_without_a_title(ms: Memstream) -> None:
    # Given a writable user skill provider
    provider = MemorySkills()
    session = ms.session("keys").with_context("skills", provider=provider)
    set_context = (await session.tools())["set_context"]
    long_a = "x" * 60 + " first ending"
    long_b = "x" * 60 + " second ending"
    # When entries are written without titles (or a blank one)
    replies = [
        await set_context.execute({"label": "skills", "content": "no key"}),
        await set_context.execute({"label": "skills", "content": "Just content, no desc"}),
        await set_context.execute({"label": "skills", "content": "用户喜欢咖啡"}),
        await set_context.execute(
            {"label": "skills", "content": "abc", "metadata": {"title": "  "}}
        ),
        await set_context.execute(
            {"label": "skills", "content": "日本語", "metadata": {"title": "日本"}}
        ),
        await set_context.execute({"label": "skills", "content": long_a}),
        await set_context.execute({"label": "skills", "content": long_b}),
    ]
    # Then each key comes from the content (slug + hash), non-Latin text gets entry-<hash>,
    # and contents sharing a 60-character prefix do not collide
    keys = [r.removeprefix('Indexed "').removesuffix('" in skills.') for r in replies]
    assert keys[:5] == [
        "no-key-1nprufp",
        "just-content-no-desc-cgko96",
        "entry-2mzjev",
        "abc-7aigaz",
        "entry-qmsg4k",
    ]
    assert keys[5] != keys[6]
    # And every entry accumulated in the provider, without descriptions unless titled
    assert list(provider.skills) == keys
    assert provider.skills["no-key-1nprufp"] == ("no key", None)
    assert provider.skills["entry-qmsg4k"] == ("日本語", "日本")
    block = session.get_context_block("skills")
    assert block is not None
    assert block.content.splitlines()[0] == "- no-key-1nprufp"
    assert len(block.content.splitlines()) == 7


async def test_set_context_on_a_read_only_skill_provider_is_an_error(ms: Memstream) -> None:
    # Given a read-only skill provider next to a writable block
    session = (
        ms.session("ro-skill-write")
        .with_context("library", provider=ReadonlySkills({"tax": "File quarterly."}))
        .with_context("memory", provider=_Writable())
    )
    set_context = (await session.tools())["set_context"]
    # Then the library is not offered, and writing to it is an error string
    assert set_context.parameters["properties"]["label"]["enum"] == ["memory"]
    reply = await set_context.execute({"label": "library", "content": "x"})
    assert reply == 'Error: Block "library" does not support writes'
    # And metadata that is not an object is an error string for keyed blocks
    writable = ms.session("bad-meta").with_context("skills", provider=MemorySkills())
    reply = await writable.execute_tool(
        "set_context", {"label": "skills", "content": "x", "metadata": "Pirate"}
    )
    assert reply == "Error: metadata must be an object, not str"


# -- unload_context --------------------------------------------------------------------------------


async def test_unload_then_reload(ms: Memstream, skills_dir: Path) -> None:
    session = skill_session(ms, "unloading", skills_dir)
    await session.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    # Then unload_context's description (taken when the tools are built) lists the loaded skill
    tools = await session.tools()
    assert tools["unload_context"].description == (
        UNLOAD_BASE + " Currently loaded: skills:pirate."
    )
    # When it is unloaded
    reply = await tools["unload_context"].execute({"label": "skills", "key": "pirate"})
    # Then it is no longer tracked, here or on the log
    assert reply == 'Unloaded "pirate" from skills. Context reclaimed.'
    assert session.get_loaded_skill_keys() == set()
    assert await loaded_on_log(ms, "unloading") == []
    # And unloading it again, or a skill never loaded, says so
    assert await tools["unload_context"].execute({"label": "skills", "key": "pirate"}) == (
        'Skill "pirate" is not currently loaded in "skills".'
    )
    assert await tools["unload_context"].execute({"label": "skills", "key": "code-review"}) == (
        'Skill "code-review" is not currently loaded in "skills".'
    )
    assert await tools["unload_context"].execute({"label": "soul", "key": "pirate"}) == (
        'Error: "soul" is not a skill block. Skill blocks: skills'
    )
    # When it is loaded again, Then it is tracked again
    assert await session.execute_tool("load_context", {"label": "skills", "key": "pirate"}) == (
        PIRATE
    )
    assert session.get_loaded_skill_keys() == {"skills:pirate"}
    assert await loaded_on_log(ms, "unloading") == ["skills:pirate"]


async def test_unload_rewrites_the_newest_load_output_in_history(
    ms: Memstream, skills_dir: Path
) -> None:
    session = skill_session(ms, "reclaim", skills_dir)
    # Given a conversation that loaded pirate twice and code-review once
    older = assistant("a1", load_part("skills", "pirate", PIRATE, "c1"))
    newer = assistant(
        "a2",
        {"type": "text", "text": "Loading two skills"},
        load_part("skills", "code-review", "Check the tests first.\n", "c2"),
        load_part("skills", "pirate", PIRATE, "c3"),
    )
    await session.append_message(msg("u1", "talk like a pirate"))
    await session.append_message(older)
    await session.append_message(newer)
    await session.append_message(msg("u2", "thanks"))
    # And the skills were loaded through the tool
    for key in ("pirate", "code-review"):
        await session.execute_tool("load_context", {"label": "skills", "key": key})
    # When pirate is unloaded
    reply = await session.execute_tool("unload_context", {"label": "skills", "key": "pirate"})
    assert reply == 'Unloaded "pirate" from skills. Context reclaimed.'
    # Then the newest load of pirate reads "[skill unloaded: pirate]" and nothing else changed
    expected = copy.deepcopy(newer)
    expected["parts"][2]["output"] = "[skill unloaded: pirate]"
    assert await session.get_message("a2") == expected
    assert await session.get_message("a1") == older
    assert ids(await session.get_history()) == ["u1", "a1", "a2", "u2"]
    assert session.get_loaded_skill_keys() == {"skills:code-review"}


async def test_unload_without_a_load_in_history_changes_no_message(
    ms: Memstream, skills_dir: Path
) -> None:
    session = skill_session(ms, "no-trace", skills_dir)
    await session.append_message(msg("u1"))
    # A pending (not yet output-available) load_context part is not rewritten either
    pending = load_part("skills", "pirate", PIRATE, "c1")
    pending["state"] = "input-available"
    await session.append_message(assistant("a1", pending))
    await session.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    assert await session.execute_tool("unload_context", {"label": "skills", "key": "pirate"}) == (
        'Unloaded "pirate" from skills. Context reclaimed.'
    )
    assert await session.get_history() == [msg("u1"), assistant("a1", pending)]


# -- restore ---------------------------------------------------------------------------------------


async def test_loaded_skills_are_restored_in_a_new_session_object_and_client(
    ms: Memstream, settings: Settings, skills_dir: Path
) -> None:
    # Given a session that loaded two skills and unloaded one
    session = skill_session(ms, "restore", skills_dir)
    await session.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    await session.execute_tool("load_context", {"label": "skills", "key": "code-review"})
    await session.execute_tool("unload_context", {"label": "skills", "key": "code-review"})
    # When a new session object with the same id is first used
    again = skill_session(ms, "restore", skills_dir)
    tools = await again.tools()
    # Then it knows what is loaded, and so does unload_context
    assert again.get_loaded_skill_keys() == {"skills:pirate"}
    assert tools["unload_context"].description == UNLOAD_BASE + " Currently loaded: skills:pirate."
    # And another client (another process) restores the same (the first client's wait
    # guarantees the other client's read)
    await ms.wait_for("context")
    other = await open_memstream(settings, workers=False)
    try:
        theirs = skill_session(other, "restore", skills_dir)
        await theirs.freeze_system_prompt()
        assert theirs.get_loaded_skill_keys() == {"skills:pirate"}
        # And it can unload what the first process loaded
        assert await theirs.execute_tool(
            "unload_context", {"label": "skills", "key": "pirate"}
        ) == ('Unloaded "pirate" from skills. Context reclaimed.')
        await other.wait_for("context")
    finally:
        await other.close()
    final = skill_session(ms, "restore", skills_dir)
    await final.tools()
    assert final.get_loaded_skill_keys() == set()
    assert await loaded_on_log(ms, "restore") == []
    # But another session id never had any
    elsewhere = skill_session(ms, "restore-other", skills_dir)
    await elsewhere.tools()
    assert elsewhere.get_loaded_skill_keys() == set()


async def test_any_first_call_restores_loaded_skills(ms: Memstream, skills_dir: Path) -> None:
    # Given a session that loaded a skill
    await skill_session(ms, "first-call", skills_dir).execute_tool(
        "load_context", {"label": "skills", "key": "pirate"}
    )
    # When a new session object of it is first used to read its history
    again = skill_session(ms, "first-call", skills_dir)
    assert await again.get_history() == []
    # Then the loaded skills were restored by that first call (§2.2: every async method
    # awaits the restore first)
    assert again.get_loaded_skill_keys() == {"skills:pirate"}


async def test_skills_loaded_by_the_app_are_restored_from_history(
    ms: Memstream, skills_dir: Path
) -> None:
    # Given an app that ran load_context itself and stored the tool call in history
    session = ms.session("app-loads")
    await session.append_message(msg("u1", "be a pirate"))
    await session.append_message(assistant("a1", load_part("skills", "pirate", PIRATE, "c1")))
    # When a session object with the skill block is first used
    restored = skill_session(ms, "app-loads", skills_dir)
    tools = await restored.tools()
    # Then the skill counts as loaded
    assert restored.get_loaded_skill_keys() == {"skills:pirate"}
    assert tools["unload_context"].description.endswith(" Currently loaded: skills:pirate.")
    # When the app later stores an unload_context call
    unload = load_part("skills", "pirate", 'Unloaded "pirate" from skills.', "c2")
    unload["toolName"] = "unload_context"
    await session.append_message(assistant("a2", unload))
    # Then a new session object no longer counts it
    after = skill_session(ms, "app-loads", skills_dir)
    await after.tools()
    assert after.get_loaded_skill_keys() == set()


async def test_restore_reads_raw_rows_of_the_active_path_only(
    ms: Memstream, skills_dir: Path
) -> None:
    # Given a load stored in history and then hidden inside a compacted range (§7.3: raw rows)
    session = ms.session("raw-rows")
    await session.append_message(msg("u1", "be a pirate"))
    await session.append_message(assistant("a1", load_part("skills", "pirate", PIRATE, "c1")))
    await session.append_message(msg("u2", "thanks"))
    await session.add_compaction("the user asked for a pirate", "u1", "u2")
    (overlay,) = await session.get_history()
    assert overlay["id"].startswith("compaction_")
    # And a load on a branch that is not the active path, and a user message naming the tool
    await session.append_message(assistant("b1", load_part("skills", "tax", "taxes", "c2")), "u1")
    await session.append_message(msg("u3", 'I typed "load_context" myself'), "u2")
    # When a session object with the skill block is first used
    restored = skill_session(ms, "raw-rows", skills_dir)
    await restored.get_latest_leaf()
    # Then only the load on the active path counts, though an overlay hides it
    assert restored.get_loaded_skill_keys() == {"skills:pirate"}


async def test_a_skill_block_added_later_restores_loaded_skills(
    ms: Memstream, skills_dir: Path
) -> None:
    # Given a session that loaded a skill
    await skill_session(ms, "late", skills_dir).execute_tool(
        "load_context", {"label": "skills", "key": "pirate"}
    )
    # And a new session object of it configured without any skill block
    later = ms.session("late").with_context("soul", provider=StaticContext("x"))
    await later.freeze_system_prompt()
    assert later.get_loaded_skill_keys() == set()
    # When the skill block is added
    await later.add_context("skills", provider=DirectorySkillProvider(skills_dir))
    # Then the loaded skill is restored
    assert later.get_loaded_skill_keys() == {"skills:pirate"}
    tools = await later.tools()
    assert tools["unload_context"].description.endswith(" Currently loaded: skills:pirate.")


async def test_clear_messages_forgets_loaded_skills(ms: Memstream, skills_dir: Path) -> None:
    # Given a loaded skill
    session = skill_session(ms, "forget", skills_dir)
    await session.append_message(msg("u1"))
    await session.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    # And another session that loaded it too
    neighbour = skill_session(ms, "forget-not", skills_dir)
    await neighbour.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    # When the messages are cleared
    await session.clear_messages()
    # Then no skill is loaded, here, on the log, or in a new session object
    assert session.get_loaded_skill_keys() == set()
    assert await loaded_on_log(ms, "forget") == []
    again = skill_session(ms, "forget", skills_dir)
    await again.tools()
    assert again.get_loaded_skill_keys() == set()
    assert (await again.tools())["unload_context"].description.endswith(
        " No skills currently loaded."
    )
    # But the other session keeps its skill
    assert await loaded_on_log(ms, "forget-not") == ["skills:pirate"]


async def test_remove_context_drops_its_skills_without_touching_history(
    ms: Memstream, skills_dir: Path
) -> None:
    session = skill_session(ms, "remove", skills_dir)
    loaded = assistant("a1", load_part("skills", "pirate", PIRATE, "c1"))
    await session.append_message(loaded)
    await session.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    # When the skill block is removed
    assert session.remove_context("skills") is True
    # Then its skills are no longer tracked, and the load output in history stays as it was
    assert session.get_loaded_skill_keys() == set()
    assert await session.get_message("a1") == loaded
    assert "load_context" not in await session.tools()


async def test_loaded_skills_come_back_after_a_rebuild(ms: Memstream, skills_dir: Path) -> None:
    # Given loads and unloads in two sessions
    first = skill_session(ms, "replay-a", skills_dir)
    second = skill_session(ms, "replay-b", skills_dir)
    await first.execute_tool("load_context", {"label": "skills", "key": "code-review"})
    await first.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    await second.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    await second.execute_tool("unload_context", {"label": "skills", "key": "pirate"})
    third = skill_session(ms, "replay-c", skills_dir)
    await third.execute_tool("load_context", {"label": "skills", "key": "pirate"})
    await third.clear_messages()
    assert await loaded_on_log(ms, "replay-a") == ["skills:code-review", "skills:pirate"]
    # When the context read model is dropped and rebuilt from the log
    drop_projection(ms.core.reads.copy, "context")
    assert ms.core.reads.context_queries.loaded_skills(ms.namespace, "replay-a") == []
    await rebuild(ms.core.log, ms.core.reads.copy, ["context"])
    # Then the loaded skills are back, in load order
    assert ms.core.reads.context_queries.loaded_skills(ms.namespace, "replay-a") == [
        "skills:code-review",
        "skills:pirate",
    ]
    assert ms.core.reads.context_queries.loaded_skills(ms.namespace, "replay-b") == []
    assert ms.core.reads.context_queries.loaded_skills(ms.namespace, "replay-c") == []
    # And new session objects restore them
    fresh = skill_session(ms, "replay-a", skills_dir)
    await fresh.tools()
    assert fresh.get_loaded_skill_keys() == {"skills:code-review", "skills:pirate"}
