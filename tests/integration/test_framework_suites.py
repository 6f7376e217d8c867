"""The frameworks' own tests of their sessions and chat histories, run on memstream's adapters
(issue 36, item 5).

The OpenAI Agents SDK's session tests and langchain-core's chat-history tests come from the
source distribution of the installed version (fetched at test time into
``.memstream/framework-suites/``, nothing of theirs is committed here) and run in a pytest
subprocess whose plugin (``tests/support/framework_plugin.py``) only swaps the classes they
construct for memstream's adapters on one embedded platform: once with a
:func:`memstream.connect_sync` client, once with an async client called from the tests' own
event loops. Every test that runs must pass; those that look inside the replaced backend are
skipped by the plugin, each with its reason.

Without the download (no network) the tests skip, saying why, unless
``MEMSTREAM_REQUIRE_FRAMEWORK_SUITES=1`` (CI sets it): then they fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.framework_plugin import SKIP_PREFIX
from support.framework_suites import SUITES, Unavailable, installed_version, run
from support.framework_suites import source as suite_source

# The whole subprocess run (each of its tests has 120 s of its own).
RUN_TIMEOUT = 600.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_TIMEOUT + 60)]


def _unavailable(reason: str) -> None:
    if os.environ.get("MEMSTREAM_REQUIRE_FRAMEWORK_SUITES") == "1":
        pytest.fail(f"MEMSTREAM_REQUIRE_FRAMEWORK_SUITES=1 but {reason}")
    pytest.skip(reason)


@pytest.mark.parametrize("client", ["sync", "async"])
@pytest.mark.parametrize("name", sorted(SUITES))
def test_framework_suite_passes_on_memstream(name: str, client: str, tmp_path: Path) -> None:
    suite = SUITES[name]
    try:
        version = installed_version(suite)
        tree = suite_source(suite, version)
    except Unavailable as error:
        _unavailable(str(error))
        return

    outcome = run(suite, tree, tmp_path, timeout=RUN_TIMEOUT, client=client)

    where = f"the {name} {version} suite on memstream ({client} client)"
    assert outcome.cases, (
        f"{where} ran no test (pytest exit {outcome.returncode}); its log ends:\n"
        + outcome.log_tail()
    )
    failed = outcome.having("failed", "error")
    assert not failed, f"{len(failed)} tests of {where} failed:\n" + "\n".join(
        f"  {case.id} ({case.outcome}): {case.message[:600]}" for case in failed
    )
    assert outcome.returncode == 0, (
        f"pytest exited {outcome.returncode} for {where}; its log ends:\n" + outcome.log_tail()
    )
    # Every skip is one of the plugin's: a skip of the suite's own (a missing test-time
    # dependency, say) would hide tests.
    foreign = [c for c in outcome.having("skipped") if not c.message.startswith(SKIP_PREFIX)]
    assert not foreign, f"{where} skipped tests the plugin did not:\n" + "\n".join(
        f"  {case.id}: {case.message}" for case in foreign
    )
    on_memstream = [case for case in outcome.having("passed") if case.adapters]
    assert len(on_memstream) >= len(outcome.having("passed")) // 2, (
        f"only {len(on_memstream)} of the passing tests of {where} built a memstream adapter"
    )
