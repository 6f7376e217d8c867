"""The frameworks' own test suites, fetched at test time and run on memstream's adapters.

Each framework's published source distribution ships its tests: :func:`source` downloads the
one of the installed version (``pip download --no-binary :all: --no-deps``) once, and keeps
it unpacked under ``.memstream/framework-suites/`` (gitignored). :func:`run` runs the
:class:`Suite`'s tests there in a pytest subprocess that loads ``support.framework_plugin``
(which swaps the classes the tests construct for memstream's adapters), writing its junit
XML, log and memstream data dir into a folder of ours; nothing is written into their tree.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from support.framework_plugin import ADAPTERS_PROPERTY

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".memstream" / "framework-suites"
PLUGIN = "support.framework_plugin"
DOWNLOAD_TIMEOUT = 300.0


@dataclass(frozen=True)
class Suite:
    """A framework's tests to run: ``distribution`` (its installed version's sdist), the test
    files and test ids (relative to the unpacked sdist; ``optional`` ones only where the
    sdist has them) and pytest options of its own."""

    distribution: str
    tests: tuple[str, ...]
    optional: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


_SQLALCHEMY = "tests/extensions/memory/test_sqlalchemy_session.py::"
_REDIS = "tests/extensions/memory/test_redis_session.py::"

SUITES: dict[str, Suite] = {
    "openai-agents": Suite(
        distribution="openai-agents",
        tests=(
            "tests/memory/test_session.py",
            "tests/extensions/memory/test_async_sqlite_session.py",
            "tests/test_hitl_session_scenario.py",
            # the concurrency tests of its Redis and SQLAlchemy sessions
            _REDIS + "test_concurrent_access",
            _REDIS + "test_clear_rechecks_key_types_after_concurrent_replacement",
            _SQLALCHEMY + "test_concurrent_pop_item_returns_each_row_once",
            _SQLALCHEMY + "test_sqlite_fallback_reserves_writer_before_tail_claim",
            _SQLALCHEMY + "test_pop_item_retries_returning_claim_lost_to_concurrent_delete",
            _SQLALCHEMY + "test_add_items_concurrent_first_access_with_create_tables",
            _SQLALCHEMY + "test_add_items_concurrent_first_write_after_tables_exist",
            _SQLALCHEMY
            + "test_add_items_concurrent_first_access_across_sessions_with_shared_engine",
            _SQLALCHEMY + "test_add_items_concurrent_first_access_across_from_url_sessions",
            _SQLALCHEMY
            + "test_add_items_concurrent_first_access_across_from_url_sessions_cross_loop",
            _SQLALCHEMY + "test_add_items_concurrent_first_access_with_shared_session_cross_loop",
            _SQLALCHEMY + "test_add_items_cancelled_waiter_does_not_strand_table_init_lock",
        ),
        optional=("tests/memory/test_session_limit.py",),
    ),
    "langchain-core": Suite(
        distribution="langchain-core",
        tests=(
            "tests/unit_tests/chat_history/",
            "tests/unit_tests/runnables/test_history.py",
        ),
        # Their addopts less --snapshot-warn-unused (syrupy's: no snapshot test is selected)
        # and --durations.
        options=("-o", "addopts=--strict-markers --strict-config"),
    ),
}


class Unavailable(Exception):
    """The suite cannot be had here (the framework is not installed, or no download)."""


def installed_version(suite: Suite) -> str:
    try:
        return importlib.metadata.version(suite.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise Unavailable(f"{suite.distribution} is not installed (the dev extra)") from None


def source(suite: Suite, version: str, cache: Path = CACHE) -> Path:
    """The unpacked sdist of ``suite.distribution`` ``version``, downloaded on first use.

    Raises:
        Unavailable: the download failed (no network, no such release).
    """
    target = cache / f"{suite.distribution}-{version}"
    if (target / "tests").is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as scratch:
        download = Path(scratch) / "sdist"
        command = [
            sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
            "--no-binary", ":all:", "--no-deps", "--dest", str(download),
            f"{suite.distribution}=={version}",
        ]  # fmt: skip
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            raise Unavailable(
                f"pip download {suite.distribution}=={version} took over {DOWNLOAD_TIMEOUT:g} s"
            ) from None
        archives = sorted(download.glob("*.tar.gz")) if download.is_dir() else []
        if done.returncode != 0 or len(archives) != 1:
            lines = (done.stderr or done.stdout).strip().splitlines()
            tail = "\n".join(line[:300] for line in lines if not line.startswith("WARNING"))
            raise Unavailable(
                f"pip download of the {suite.distribution}=={version} sdist failed: {tail}"
            )
        unpacked = Path(scratch) / "unpacked"
        with tarfile.open(archives[0]) as archive:
            archive.extractall(unpacked, filter="data")
        (top,) = unpacked.iterdir()
        if not (top / "tests").is_dir():
            raise Unavailable(f"the {suite.distribution}=={version} sdist ships no tests/")
        with contextlib.suppress(OSError):  # another process unpacked it first: theirs stays
            top.rename(target)
    if not (target / "tests").is_dir():
        raise Unavailable(f"could not unpack the {suite.distribution} sdist into {target}")
    return target


@dataclass
class Case:
    """One test of the run's junit XML."""

    id: str
    outcome: str  # passed, failed, error or skipped
    message: str = ""
    adapters: int | None = None  # adapters it constructed (the plugin's count)


@dataclass
class Outcome:
    returncode: int
    log: Path
    cases: list[Case] = field(default_factory=list)

    def having(self, *outcomes: str) -> list[Case]:
        return [case for case in self.cases if case.outcome in outcomes]

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def command(suite: Suite, tree: Path, junit: Path, *, test_timeout: float) -> list[str]:
    tests = [*suite.tests, *(t for t in suite.optional if (tree / t).exists())]
    return [
        sys.executable, "-m", "pytest", *tests,
        "-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:xdist",
        "-c", str(tree / "pyproject.toml"), "--rootdir", str(tree),
        *suite.options,
        "-o", "junit_family=xunit1",  # keeps each test's properties (the adapters' count)
        f"--junitxml={junit}", f"--timeout={test_timeout:g}",
        "-q", "-rfEs",
    ]  # fmt: skip


def environment(data_dir: Path, client: str) -> dict[str, str]:
    """This environment less pytest's and memstream's own settings, with our plugin on the
    path and no bytecode written into their tree."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "MEMSTREAM_")) and k != "PYTHONPATH"
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["HF_HUB_OFFLINE"] = "1"
    env["MEMSTREAM_SUITE_DATA_DIR"] = str(data_dir)
    env["MEMSTREAM_SUITE_CLIENT"] = client
    return env


def run(
    suite: Suite,
    tree: Path,
    workdir: Path,
    *,
    timeout: float,
    test_timeout: float = 120.0,
    client: str = "sync",
) -> Outcome:
    """Run ``suite``'s tests in ``tree`` on memstream; its junit XML, log and data dir go in
    ``workdir``.

    Raises:
        TimeoutError: the run took over ``timeout`` seconds (its processes are killed).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    junit = workdir / "junit.xml"
    log = workdir / "pytest.log"
    argv = command(suite, tree, junit, test_timeout=test_timeout)
    env = environment(workdir / "memstream-data", client)
    with log.open("w") as output:
        process = subprocess.Popen(
            argv,
            cwd=tree,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its group: the embedded nats-server too, on a timeout
        )
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise TimeoutError(
                f"the {suite.distribution} suite took over {timeout:g} s; its log: {log}"
            ) from None
    outcome = Outcome(returncode, log)
    if junit.exists():
        outcome.cases = parse_junit(junit)
    return outcome


def parse_junit(path: Path) -> list[Case]:
    cases = []
    for element in ET.parse(path).getroot().iter("testcase"):
        module = element.get("classname", "")
        name = element.get("name", "")
        file = element.get("file")
        test_id = f"{file or module.replace('.', '/') + '.py'}::{name}"
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = element.find(kind)
            if found is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                message = found.get("message") or (found.text or "").strip()
                break
        adapters = None
        for prop in element.iter("property"):
            if prop.get("name") == ADAPTERS_PROPERTY:
                adapters = int(prop.get("value", "0"))
        cases.append(Case(test_id, outcome, " ".join(message.split()), adapters))
    return cases


def clear_cache(cache: Path = CACHE) -> None:
    shutil.rmtree(cache, ignore_errors=True)
