"""A fake NATS server that speaks just enough of the protocol for a client to connect: the INFO
greeting with a chosen version, then PONG for every PING (CONNECT and anything else ignored)."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        info = {
            "server_id": "FAKE",
            "server_name": "fake",
            "version": self.server.version,
            "proto": 1,
            "go": "go1.19.8",
            "host": "127.0.0.1",
            "port": self.server.server_address[1],
            "headers": True,
            "max_payload": 1048576,
            "jetstream": True,
            "client_id": 1,
        }
        self.wfile.write(f"INFO {json.dumps(info)}\r\n".encode())
        for line in self.rfile:
            if line.strip().upper() == b"PING":
                self.wfile.write(b"PONG\r\n")
            self.server.received.append(line.split(b" ", 1)[0].strip().decode(errors="replace"))


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, version: str) -> None:
        self.version = version
        self.received: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)


@contextmanager
def fake_nats_server(version: str) -> Iterator[tuple[str, list[str]]]:
    """Serve on a free port; yields the URL and the protocol verbs received (CONNECT, PING, PUB,
    ...), to check that a client wrote nothing."""
    server = _Server(version)
    thread = threading.Thread(target=server.serve_forever, name="fake-nats", daemon=True)
    thread.start()
    try:
        yield f"nats://127.0.0.1:{server.server_address[1]}", server.received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def reachable(host: str, port: int) -> bool:
    """True if something accepts TCP connections at ``host:port`` right now."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
