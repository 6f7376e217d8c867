"""The context side of a session (spec §6, §7, §9): context blocks and their providers, the
system prompt, skills, and the AI tools over them.

Modules, from the top: :mod:`.session_context` sets a session's blocks up on first use;
:mod:`.tools` and :mod:`.state` (the cached prompt and loaded skills on the log) use
:mod:`.blocks`, which loads and writes through :mod:`.providers` (and :mod:`.skill_files`). The
package reaches the session and the client only through :mod:`.ports` (import-linter checks
both).
"""
