"""A private PostgreSQL server for failure tests: ``initdb`` in a temp dir, started and stopped
with ``pg_ctl`` (as the ``postgres`` user when the tests run as root, which PostgreSQL refuses
to run as)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest


def _binaries() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


class PrivatePostgres:
    """One cluster in ``root``, on a free port of 127.0.0.1, trust authentication."""

    def __init__(self) -> None:
        binaries = _binaries()
        if binaries is None:
            reason = "no initdb/pg_ctl on this machine for a private PostgreSQL server"
            if os.environ.get("MEMSTREAM_REQUIRE_POSTGRES") == "1":
                pytest.fail(f"MEMSTREAM_REQUIRE_POSTGRES=1 but {reason}")
            pytest.skip(reason)
        self.binaries = binaries
        # Its own directory under the system temp dir: as root, the server runs as "postgres",
        # which cannot traverse pytest's private temp dirs.
        self.root = root = Path(tempfile.mkdtemp(prefix="memstream-pg-"))
        self.data = root / "data"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        try:
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres")
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def url(self, password: str = "") -> str:
        secret = f":{password}" if password else ""
        return f"postgresql://postgres{secret}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.root / "log"),
            "start",
        )

    def stop(self, mode: str = "immediate") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def close(self) -> None:
        """Stop the server (if it runs) and remove its directory."""
        stop = [str(self.binaries / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]
        subprocess.run([*self._as, *stop], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [*self._as, str(self.binaries / program), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{program}: {done.stdout}{done.stderr}"
