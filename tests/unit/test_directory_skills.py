"""DirectorySkillProvider on a temporary folder (spec §7.1, the R2SkillProvider rules for files).

Key = path relative to the folder without its extension; description from ``description:`` front
matter, else the first line; ``keys`` is an allow-list for ``get`` and ``load``; ``set`` writes
``<key>.md`` and ignores the allow-list; keys never reach outside the folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstream import DirectorySkillProvider
from memstream.context.skill_files import SkillFolder
from memstream.domain.errors import InvalidInputError

TAX = "---\ndescription: Tax workflows\n---\nFile the VAT return quarterly.\n"
BANK = "---\ndescription: Bank reconciliation\n---\nMatch statements to the ledger.\n"
HIDDEN = "Hidden skill body\n"


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _write(root: Path, relative: str, text: str) -> Path:
    file = root / relative
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(text, encoding="utf-8")
    return file


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    _write(root, "tax.md", TAX)
    _write(root, "bank-reconciliation.md", BANK)
    _write(root, "hidden.md", HIDDEN)
    return root


async def test_keys_are_relative_paths_without_extension(tmp_path: Path) -> None:
    # Given markdown, .markdown and .txt files (some nested) and files of other types
    root = tmp_path / "skills"
    _write(root, "pirate.md", "---\ndescription: Talk like a pirate\n---\nArr.\n")
    _write(root, "finance/tax.markdown", "# Tax workflows\n\nFile quarterly.\n")
    _write(root, "notes/todo.txt", "\n\n  Things to do  \n")
    _write(root, "script.py", "print('not a skill')\n")
    _write(root, "data.json", "{}")
    provider = DirectorySkillProvider(root)
    # When the listing is read
    listing = await provider.get()
    # Then each skill is one line "- key: description", keys by relative path, sorted; the
    # description comes from front matter or else the first non-empty line (heading marks gone)
    assert listing == (
        "- finance/tax: Tax workflows\n- notes/todo: Things to do\n- pirate: Talk like a pirate"
    )
    # And load returns the body without the front matter, addressed by the same keys
    assert await provider.load("pirate") == "Arr.\n"
    assert await provider.load("finance/tax") == "# Tax workflows\n\nFile quarterly.\n"
    assert await provider.load("notes/todo") == "\n\n  Things to do  \n"
    # And other file types and unknown keys are not skills
    assert await provider.load("script") is None
    assert await provider.load("data") is None
    assert await provider.load("nope") is None


async def test_empty_or_missing_folder_lists_nothing(tmp_path: Path) -> None:
    # Given an empty folder and a folder that does not exist
    (tmp_path / "empty").mkdir()
    # Then there is no listing (the block still renders, see the skills tests)
    assert await DirectorySkillProvider(tmp_path / "empty").get() is None
    assert await DirectorySkillProvider(tmp_path / "missing").get() is None
    assert await DirectorySkillProvider(tmp_path / "missing").load("x") is None


async def test_skill_without_description_lists_its_key_only(tmp_path: Path) -> None:
    # Given an empty file and a file whose front matter has no description
    root = tmp_path / "skills"
    _write(root, "blank.md", "")
    _write(root, "meta.md", "---\nauthor: someone\n---\n")
    # Then each is listed by key alone
    assert await DirectorySkillProvider(root).get() == "- blank\n- meta"


async def test_allow_list_filters_listing_and_load(skills_dir: Path) -> None:
    # Given an allow-list of two of the three skills
    provider = DirectorySkillProvider(skills_dir, keys=["tax", "bank-reconciliation"])
    # Then only they are listed
    assert (
        await provider.get() == "- bank-reconciliation: Bank reconciliation\n- tax: Tax workflows"
    )
    # And a disallowed key does not load although its file exists
    assert await provider.load("hidden") is None
    assert await provider.load("tax") == "File the VAT return quarterly.\n"


async def test_omitted_or_empty_allow_list_exposes_everything(skills_dir: Path) -> None:
    everything = (
        "- bank-reconciliation: Bank reconciliation\n"
        "- hidden: Hidden skill body\n"
        "- tax: Tax workflows"
    )
    assert await DirectorySkillProvider(skills_dir).get() == everything
    assert await DirectorySkillProvider(skills_dir, keys=[]).get() == everything
    assert await DirectorySkillProvider(skills_dir, keys=[]).load("hidden") == HIDDEN


async def test_set_writes_markdown_with_front_matter_and_ignores_allow_list(
    skills_dir: Path,
) -> None:
    # Given an allow-list that does not include the new key
    provider = DirectorySkillProvider(skills_dir, keys=["tax"])
    # When a skill is written with a description
    await provider.set("pirate-style", "Talk like a pirate.", "Pirate style")
    # Then <key>.md holds front matter with the description, then the content
    written = skills_dir / "pirate-style.md"
    assert written.read_text(encoding="utf-8") == (
        "---\ndescription: Pirate style\n---\nTalk like a pirate."
    )
    # And the allow-list still filters reads
    assert await provider.load("pirate-style") is None
    assert await provider.get() == "- tax: Tax workflows"
    # And without an allow-list the new skill lists and loads
    open_provider = DirectorySkillProvider(skills_dir)
    assert await open_provider.load("pirate-style") == "Talk like a pirate."
    assert "- pirate-style: Pirate style" in (await open_provider.get() or "")


async def test_set_without_description_nested_key_and_overwrite(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    provider = DirectorySkillProvider(root)
    # When a nested key is written without a description (the folder does not exist yet)
    await provider.set("team/review", "Check the tests first.")
    # Then the file holds the content alone and lists with its first line
    assert (root / "team" / "review.md").read_text(encoding="utf-8") == "Check the tests first."
    assert await provider.get() == "- team/review: Check the tests first."
    # When it is overwritten with a multi-line description
    await provider.set("team/review", "Read the diff.", "Code\nreview   steps")
    # Then the description is folded onto one line and the content replaced
    assert await provider.get() == "- team/review: Code review steps"
    assert await provider.load("team/review") == "Read the diff."


@pytest.mark.parametrize("key", ["../outside", "a/../../outside", "/etc/passwd", "..", ""])
async def test_keys_outside_the_folder_are_refused(tmp_path: Path, key: str) -> None:
    # Given a skills folder and a skill-like file next to it, outside the folder
    root = tmp_path / "skills"
    _write(root, "tax.md", TAX)
    _write(tmp_path, "outside.md", "secret")
    provider = DirectorySkillProvider(root)
    # Then loading a traversing key finds nothing
    assert await provider.load(key) is None
    # And writing one is refused, leaving the outside file untouched
    with pytest.raises(InvalidInputError):
        await provider.set(key, "overwritten")
    assert (tmp_path / "outside.md").read_text(encoding="utf-8") == "secret"
    assert _names(tmp_path) == ["outside.md", "skills"]


async def test_non_string_keys_load_nothing_and_bad_content_is_refused(tmp_path: Path) -> None:
    provider = DirectorySkillProvider(tmp_path)
    assert await provider.load(42) is None  # type: ignore[arg-type]
    assert await provider.load(None) is None  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await provider.set("ok", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        await provider.set(7, "content")  # type: ignore[arg-type]
    assert _names(tmp_path) == []


async def test_upper_case_extensions_list_and_load(tmp_path: Path) -> None:
    # Given a skill file with an upper-case extension
    root = tmp_path / "skills"
    _write(root, "Guide.MD", "---\ndescription: The guide\n---\nRead me.\n")
    provider = DirectorySkillProvider(root)
    # Then it is listed by its key, and that key loads it
    assert await provider.get() == "- Guide: The guide"
    assert await provider.load("Guide") == "Read me.\n"


async def test_listing_describes_the_file_that_load_returns(tmp_path: Path) -> None:
    # Given a skill kept as guide.markdown
    root = tmp_path / "skills"
    _write(root, "guide.markdown", "---\ndescription: Old guide\n---\nOld text.\n")
    provider = DirectorySkillProvider(root)
    assert await provider.get() == "- guide: Old guide"
    # When the skill is rewritten through set (which writes guide.md)
    await provider.set("guide", "New text.", "New guide")
    # Then the listing and load agree on one file: the one just written
    assert await provider.load("guide") == "New text."
    assert await provider.get() == "- guide: New guide"


async def test_a_refused_write_leaves_the_skill_as_it_was(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    provider = DirectorySkillProvider(root)
    await provider.set("greet", "Say hello.", "Greeting")
    before = (root / "greet.md").read_text(encoding="utf-8")
    # When a rewrite has a description, or content, that cannot be stored (a lone surrogate)
    with pytest.raises(InvalidInputError, match="description is not valid Unicode"):
        await provider.set("greet", "Say hello again.", "bad \ud800")
    with pytest.raises(InvalidInputError, match="content is not valid Unicode"):
        await provider.set("greet", "bad \udc00", "Greeting")
    # Then the file is untouched, and no new or temporary file is left behind
    assert (root / "greet.md").read_text(encoding="utf-8") == before
    with pytest.raises(InvalidInputError, match="description"):
        await provider.set("new-skill", "Body.", "bad \ud800")
    assert sorted(p.name for p in root.iterdir()) == ["greet.md"]
    assert await provider.get() == "- greet: Greeting"


async def test_bad_paths_and_keys_are_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="path must be a folder path, not NoneType"):
        DirectorySkillProvider(None)  # type: ignore[arg-type]
    provider = DirectorySkillProvider(tmp_path / "skills")
    with pytest.raises(InvalidInputError, match="NUL"):
        await provider.set("a\x00b", "v")
    assert not (tmp_path / "skills").exists()


# -- skills never leave their folder (issue 10, item 6) ----------------------------------------

PASSWD = "root:x:0:0:root:/root:/bin/bash\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the skills folder, standing in for the rest of the machine: a file like
    /etc/passwd and a folder of skill-like files."""
    folder = tmp_path / "outside"
    _write(folder, "passwd", PASSWD)
    _write(folder, "secrets/token.md", "---\ndescription: Secret\n---\nTOKEN-123\n")
    return folder


async def test_a_file_linked_to_outside_is_not_listed_loaded_or_written_through(
    skills_dir: Path, outside: Path
) -> None:
    # Given skill files that are symbolic links to a file outside the folder
    (skills_dir / "passwd.md").symlink_to(outside / "passwd")
    (skills_dir / "absolute.txt").symlink_to(str((outside / "passwd").resolve()))
    provider = DirectorySkillProvider(skills_dir)
    # Then the listing leaves them out
    listing = await provider.get() or ""
    assert "passwd" not in listing
    assert "absolute" not in listing
    assert "root:x" not in listing
    assert listing.splitlines() == [
        "- bank-reconciliation: Bank reconciliation",
        "- hidden: Hidden skill body",
        "- tax: Tax workflows",
    ]
    # And loading one is refused with a message naming the key and the folder
    for key in ("passwd", "absolute"):
        with pytest.raises(InvalidInputError, match=rf'skill "{key}" leads outside the skills'):
            await provider.load(key)
    # And writing the key is refused: the outside file is untouched, the link is still a link
    with pytest.raises(InvalidInputError, match=r"passwd\.md .* symbolic link"):
        await provider.set("passwd", "overwritten")
    assert (outside / "passwd").read_text(encoding="utf-8") == PASSWD
    assert (skills_dir / "passwd.md").is_symlink()


async def test_a_folder_linked_to_outside_is_not_listed_loaded_or_written_through(
    skills_dir: Path, outside: Path
) -> None:
    # Given a folder in the skills folder that is a link to a folder outside
    (skills_dir / "shared").symlink_to(outside / "secrets", target_is_directory=True)
    (skills_dir / "team").symlink_to(outside, target_is_directory=True)
    provider = DirectorySkillProvider(skills_dir)
    before = _tree(outside)
    # Then nothing under it is listed
    listing = await provider.get() or ""
    assert "token" not in listing
    assert "Secret" not in listing
    # And loading through it is refused
    with pytest.raises(InvalidInputError, match=r'skill "shared/token" leads outside'):
        await provider.load("shared/token")
    with pytest.raises(InvalidInputError, match=r'skill "team/secrets/token" leads outside'):
        await provider.load("team/secrets/token")
    # And writing through it is refused, for a file in it and for new folders under it
    for key in ("shared/token", "shared/new", "team/new/deeper/skill"):
        with pytest.raises(InvalidInputError, match="symbolic link"):
            await provider.set(key, "written through")
    # And nothing outside was written or created
    assert _tree(outside) == before
    assert (outside / "secrets" / "token.md").read_text(encoding="utf-8").endswith("TOKEN-123\n")


async def test_a_linked_skills_folder_and_links_that_stay_inside_are_followed(
    tmp_path: Path, skills_dir: Path
) -> None:
    # Given a skills folder reached through a link, with a file and a folder linked inside it
    (skills_dir / "vat.md").symlink_to("tax.md")
    (skills_dir / "finance").mkdir()
    (skills_dir / "finance" / "bank.md").symlink_to("../bank-reconciliation.md")
    (skills_dir / "again").symlink_to(".", target_is_directory=True)  # a loop of links
    (tmp_path / "via-link").symlink_to(skills_dir, target_is_directory=True)
    provider = DirectorySkillProvider(tmp_path / "via-link")
    # Then links that stay inside list and load like files (and the loop ends)
    listing = (await provider.get() or "").splitlines()
    assert "- vat: Tax workflows" in listing
    assert "- finance/bank: Bank reconciliation" in listing
    assert await provider.load("vat") == "File the VAT return quarterly.\n"
    assert await provider.load("finance/bank") == "Match statements to the ledger.\n"
    # And set writes a plain file in the real folder, but never through a link, even inside
    await provider.set("new", "Body.")
    assert (skills_dir / "new.md").read_text(encoding="utf-8") == "Body."
    with pytest.raises(InvalidInputError, match="symbolic link"):
        await provider.set("vat", "overwritten")
    assert (skills_dir / "tax.md").read_text(encoding="utf-8") == TAX


async def test_a_link_swapped_in_after_the_check_is_not_followed(
    skills_dir: Path, outside: Path
) -> None:
    # Given a skill found inside the folder (its real path checked)
    folder = SkillFolder(skills_dir)
    _write(skills_dir, "team/guide.md", "Inside.\n")
    found = folder.find("team/guide")
    assert found is not None
    assert folder.read(found) == "Inside.\n"
    # When the file is swapped for a link to outside before it is opened
    (skills_dir / "team" / "guide.md").unlink()
    (skills_dir / "team" / "guide.md").symlink_to(outside / "passwd")
    # Then the open refuses it rather than following the link
    with pytest.raises(InvalidInputError, match="leads outside"):
        folder.read(found)
    # And likewise when a folder on its way is swapped for a link
    (skills_dir / "team" / "guide.md").unlink()
    _write(skills_dir, "team/guide.md", "Inside.\n")
    found = folder.find("team/guide")
    assert found is not None
    (skills_dir / "team").rename(skills_dir / "team-old")
    (skills_dir / "team").symlink_to(outside, target_is_directory=True)
    _write(outside, "guide.md", PASSWD)
    with pytest.raises(InvalidInputError, match="leads outside"):
        folder.read(found)


async def test_dot_dot_keys_stay_refused_with_links_around(skills_dir: Path, outside: Path) -> None:
    # Given a link out of the folder next to the keys tried
    (skills_dir / "out").symlink_to(outside, target_is_directory=True)
    provider = DirectorySkillProvider(skills_dir)
    for key in ("../outside/passwd", "out/../../outside/passwd", "out/..", "./tax"):
        # Then a traversing key loads nothing and writing it is refused
        assert await provider.load(key) is None
        with pytest.raises(InvalidInputError, match="must be a relative path inside the folder"):
            await provider.set(key, "x")
    assert (outside / "passwd").read_text(encoding="utf-8") == PASSWD
    assert not (outside / "passwd.md").exists()
