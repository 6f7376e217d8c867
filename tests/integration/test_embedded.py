"""The embedded runtime: one nats-server per data dir, found by later processes, taken over."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.processes import wait_for_text

from memstream.client import open_memstream
from memstream.settings import Settings


async def test_second_client_uses_the_running_server_and_takes_over(tmp_path: Path) -> None:
    # Given an owner process on a data dir and a second client on the same data dir
    settings = Settings(data_dir=tmp_path / "data")
    owner = await open_memstream(settings)
    guest = await open_memstream(settings)
    try:
        assert owner.core.runtime is not None
        assert owner.core.runtime.owner
        assert guest.core.runtime is not None
        assert not guest.core.runtime.owner
        assert guest.core.runtime.url == owner.core.runtime.url
        # When the guest writes, the owner's projector serves the guest's read-your-writes
        await guest.session("s").append_message({"id": "m1", "role": "user", "content": "one"})
        assert [m["id"] for m in await guest.session("s").get_history()] == ["m1"]
        # When the owner exits
        await owner.close()
        # Then the guest takes ownership (of the server the owner left running for it), runs
        # the projector, and nothing acknowledged is lost
        async with asyncio.timeout(30):
            while True:
                if guest.core.runtime.owner and guest.core.workers.projector is not None:
                    break
                await asyncio.sleep(0.05)
            while True:
                try:
                    await guest.session("s").append_message(
                        {"id": "m2", "role": "user", "content": "two"}
                    )
                    break
                except Exception:  # the client reconnects to the restarted server meanwhile
                    await asyncio.sleep(0.1)
        history = await guest.session("s").get_history()
        assert [m["id"] for m in history] == ["m1", "m2"]
    finally:
        await guest.close()
        await owner.close()


async def test_an_owner_that_exits_leaves_the_server_to_its_guest(tmp_path: Path) -> None:
    # Given an owner and a guest on a data dir
    data_dir = tmp_path / "data"
    owner = await open_memstream(Settings(data_dir=data_dir))
    guest = await open_memstream(Settings(data_dir=data_dir))
    try:
        assert owner.core.runtime is not None
        assert guest.core.runtime is not None
        server_pid = owner.core.runtime.server_pid
        # When the owner exits
        await owner.close()
        # Then the server keeps running: the guest's next write succeeds at once, unretried
        await guest.session("s").append_message({"id": "m1", "role": "user", "content": "one"})
        # And the guest adopts that same server and runs the projector for its reads
        assert [m["id"] for m in await guest.session("s").get_history()] == ["m1"]
        assert guest.core.runtime.owner
        assert guest.core.runtime.server_pid == server_pid
        assert json.loads((data_dir / "runtime.json").read_text())["server_pid"] == server_pid
        assert _servers_of(data_dir) == [server_pid]
    finally:
        await guest.close()
        await owner.close()
    # And the last one out stopped it, and this process (its parent) reaped it: no zombie
    assert _servers_of(data_dir) == []
    assert not (data_dir / "runtime.json").exists()
    assert not _has_proc_entry(server_pid)


def _has_proc_entry(pid: int) -> bool:
    """Whether ``pid`` is a process or a zombie not reaped yet."""
    return Path(f"/proc/{pid}").exists()


CLIENT = Path(__file__).resolve().parents[1] / "support" / "embedded_client.py"
MEMSTREAM = str(Path(sys.executable).parent / "memstream")


def _client_env(data_dir: Path) -> dict[str, str]:
    """This environment without MEMSTREAM_* settings: the embedded server of ``data_dir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTREAM_")}
    env["MEMSTREAM_DATA_DIR"] = str(data_dir)
    return env


def _run_client(data_dir: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CLIENT), args[0], str(data_dir), *args[1:]],
        env=_client_env(data_dir),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_six_processes_connect_at_once_to_a_fresh_data_dir(tmp_path: Path) -> None:
    # Given a data dir nobody has used, and six processes that connect at the same moment
    data_dir = tmp_path / "fresh"
    start_at = time.time() + 3  # each has imported memstream by then
    clients = [_run_client(data_dir, "append", f"s{i}", str(start_at)) for i in range(6)]
    # When each appends a message to its own session and reads it back
    results = [client.communicate(timeout=120) for client in clients]
    # Then every one succeeds: one of them started the server and the others waited for it
    for client, (_, err) in zip(clients, results, strict=True):
        assert client.returncode == 0, err
        assert "Traceback" not in err
    assert [json.loads(out) for out, _ in results] == [[f"m-s{i}"] for i in range(6)]
    # And a seventh process, started after they exited, sees all six sessions
    out, err = _run_client(data_dir, "read").communicate(timeout=120)
    assert json.loads(out) == {f"s{i}": [f"m-s{i}"] for i in range(6)}, err
    # And the last of them stopped the server and left no owner behind
    assert not (data_dir / "runtime.json").exists()
    assert _servers_of(data_dir) == []


def _servers_of(data_dir: Path) -> list[int]:
    """Pids of live nats-servers started for ``data_dir`` (found by their config path)."""
    config = str((data_dir / "nats-server.conf").resolve()).encode()
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if config in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def _wait_for_line(process: subprocess.Popen[str], timeout: float = 60) -> str:
    """The next stdout line of ``process`` (bounded: a stuck process fails the test)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no output within {timeout} s"
    line = process.stdout.readline()
    assert line, process.stderr.read() if process.stderr else "exited"
    return line


def test_the_owner_restarts_a_killed_nats_server_and_writes_resume(tmp_path: Path) -> None:
    # Given `memstream up` owning a data dir and a guest process that has appended 20 messages
    data_dir = tmp_path / "data"
    log = tmp_path / "up.log"
    with log.open("w") as sink:
        env = _client_env(data_dir)
        up = subprocess.Popen([MEMSTREAM, "up"], env=env, stdout=sink, stderr=sink, text=True)
    guest: subprocess.Popen[str] | None = None
    try:
        wait_for_text(log, "memstream is up", up, timeout=60)
        guest = _run_client(data_dir, "writer", "chat", "20")
        assert _wait_for_line(guest) == "ready\n"
        before = json.loads((data_dir / "runtime.json").read_text())
        # When the nats-server child is killed
        os.kill(before["server_pid"], signal.SIGKILL)
        # Then the guest's next write succeeds within seconds, on its own reconnected client
        assert guest.stdin is not None
        guest.stdin.write("go after-kill\n")
        guest.stdin.flush()
        resumed = json.loads(_wait_for_line(guest))
        # (a write lost with the dead connection is sent again on reconnect: no timeout)
        assert resumed["attempts"] == 1, resumed
        assert resumed["seconds"] < 5, resumed  # the client's write timeout
        # And a new process writes too, to the server restarted on the same port
        started = time.monotonic()
        fresh = _run_client(data_dir, "append", "fresh", "0")
        out, err = fresh.communicate(timeout=120)
        assert fresh.returncode == 0, err
        assert json.loads(out) == ["m-fresh"]
        assert time.monotonic() - started < 15
        after = json.loads((data_dir / "runtime.json").read_text())
        assert after["port"] == before["port"]
        assert after["server_pid"] != before["server_pid"]
        # And nothing acknowledged before the kill is lost
        out, err = guest.communicate(timeout=60)  # end of its input: it prints its history
        assert guest.returncode == 0, err
        assert json.loads(out) == [f"before-{i}" for i in range(20)] + ["after-kill"]
        # And the owner said what happened, with the exit code, and that it restarted the server
        text = log.read_text()
        assert (
            f"the embedded nats-server (pid {before['server_pid']}, port {before['port']}) "
            "exited with code -9 (SIGKILL); restarting it on the same port and store"
        ) in text
        assert f"restarted the embedded nats-server on port {before['port']}" in text
    finally:
        if guest is not None:
            if guest.poll() is None:
                guest.kill()
            guest.communicate(timeout=60)  # and closes its pipes
        up.send_signal(signal.SIGTERM)
        code = up.wait(timeout=60)
    assert code == 0, log.read_text()
    assert not (data_dir / "runtime.json").exists()
    assert _servers_of(data_dir) == []
    print(f"write resumed {resumed['seconds']:.2f} s after the kill ({resumed['attempts']} tries)")


def test_a_worker_process_owns_the_embedded_server_and_cli_commands_use_it(tmp_path: Path) -> None:
    # Given `memstream worker projector` on a fresh data dir: it starts the embedded server
    data_dir = tmp_path / "data"
    env = _client_env(data_dir)
    log = tmp_path / "worker.log"
    with log.open("w") as sink:
        command = [MEMSTREAM, "worker", "projector"]
        worker = subprocess.Popen(command, env=env, stdout=sink, stderr=sink, text=True)
    try:
        wait_for_text(log, "FastStream app started", worker, timeout=60)
        # When CLI commands append and read (each a process of its own, with the data dir's
        # token, as the worker's FastStream broker has)
        commands = (["append", "s", "--id", "a", "--text", "hi"], ["sessions", "history", "s"])
        for args in commands:
            result = subprocess.run(
                [MEMSTREAM, *args, "--json"], env=env, capture_output=True, text=True, timeout=120
            )
            assert result.returncode == 0, result.stderr
        # Then the worker projected the message
        assert [m["id"] for m in json.loads(result.stdout)] == ["a"]
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    assert code == 0, log.read_text()
    assert not (data_dir / "runtime.json").exists()
    assert _servers_of(data_dir) == []


CRASH_BEFORE_CLOSE = """
import asyncio, sys
from pathlib import Path
from memstream.client import open_memstream
from memstream.settings import Settings

async def main() -> None:
    ms = await open_memstream(Settings(data_dir=Path(sys.argv[1])))
    print(ms.core.runtime.server_pid, flush=True)
    raise RuntimeError("crashed before close")

asyncio.run(main())
"""


def test_an_owner_that_ends_on_an_exception_before_closing_stops_its_server(
    tmp_path: Path,
) -> None:
    # Given a process that owns a data dir's server and ends on an exception, never closing
    data_dir = tmp_path / "data"
    result = subprocess.run(
        [sys.executable, "-c", CRASH_BEFORE_CLOSE, str(data_dir)],
        env=_client_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "crashed before close" in result.stderr
    assert int(result.stdout) > 0
    # Then its server did not outlive it, and no owner is recorded
    assert _servers_of(data_dir) == []
    assert not (data_dir / "runtime.json").exists()
