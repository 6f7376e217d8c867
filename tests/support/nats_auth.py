"""nats-servers that require credentials, for the credential tests: a decentralized-auth server
(operator, account and user JWTs made here with nkeys, as ``nsc`` would) and a password one."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nacl.signing
import nkeys

from memstream.workers.runtime.nats_server import free_port, nats_server_binary, port_open

CREDS_TEMPLATE = """-----BEGIN NATS USER JWT-----
{jwt}
------END NATS USER JWT------

************************* IMPORTANT *************************
NKEY Seed printed below can be used to sign and prove identity.
NKEYs are sensitive and should be treated as secrets.

-----BEGIN USER NKEY SEED-----
{seed}
------END USER NKEY SEED------
"""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _keypair(prefix: int) -> tuple[nkeys.KeyPair, str]:
    seed = nkeys.encode_seed(bytes(nacl.signing.SigningKey.generate()), prefix)
    pair = nkeys.from_seed(seed)
    return pair, seed.decode()


def _jwt(issuer: nkeys.KeyPair, subject: str, name: str, nats: dict[str, Any]) -> str:
    """A NATS JWT (v2) signed by ``issuer``."""
    claims: dict[str, Any] = {
        "iat": int(time.time()),
        "iss": issuer.public_key.decode(),
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": 2},
    }
    claims["jti"] = (
        base64.b32encode(hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest())
        .decode()
        .rstrip("=")
    )
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = _b64(issuer.sign(f"{header}.{body}".encode()))
    return f"{header}.{body}.{signature}"


@dataclass(frozen=True)
class AuthServer:
    url: str
    creds: Path


@contextmanager
def server_with_creds(folder: Path) -> Iterator[AuthServer]:
    """A nats-server with JetStream in operator mode whose one account has one user; yields its
    URL and that user's creds file."""
    folder.mkdir(parents=True, exist_ok=True)
    operator, _ = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
    account, _ = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    system, _ = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)  # JetStream needs a system account
    system_pub = system.public_key.decode()
    user, user_seed = _keypair(nkeys.PREFIX_BYTE_USER)
    operator_pub = operator.public_key.decode()
    account_pub = account.public_key.decode()
    unlimited = {"subs": -1, "data": -1, "payload": -1}
    operator_jwt = _jwt(operator, operator_pub, "op", {"type": "operator"})
    account_jwt = _jwt(
        operator,
        account_pub,
        "acc",
        {
            "type": "account",
            "limits": {
                **unlimited,
                "imports": -1,
                "exports": -1,
                "wildcards": True,
                "conn": -1,
                "leaf": -1,
                # JetStream for the account: unlimited storage, streams and consumers
                "mem_storage": -1,
                "disk_storage": -1,
                "streams": -1,
                "consumer": -1,
            },
            "default_permissions": {"pub": {}, "sub": {}},
        },
    )
    system_jwt = _jwt(operator, system_pub, "SYS", {"type": "account"})
    user_jwt = _jwt(
        account,
        user.public_key.decode(),
        "user",
        {"type": "user", "pub": {}, "sub": {}, **unlimited},
    )
    creds = folder / "user.creds"
    creds.write_text(CREDS_TEMPLATE.format(jwt=user_jwt, seed=user_seed))
    config = (
        f'operator: "{operator_jwt}"\n'
        "resolver: MEMORY\n"
        f'jetstream: {{ store_dir: "{folder / "js-store"}" }}\n'
        f"system_account: {system_pub}\n"
        f'resolver_preload: {{\n  {account_pub}: "{account_jwt}"\n'
        f'  {system_pub}: "{system_jwt}"\n}}\n'
    )
    with _server(folder, config) as url:
        yield AuthServer(url, creds)


@contextmanager
def server_with_password(folder: Path, user: str, password: str) -> Iterator[str]:
    """A nats-server that admits only ``user`` with ``password``; yields its URL (no userinfo)."""
    config = f'authorization {{\n  user: "{user}"\n  password: "{password}"\n}}\n'
    with _server(folder, config) as url:
        yield url


@contextmanager
def _server(folder: Path, config: str) -> Iterator[str]:
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config_path = folder / "auth-server.conf"
    config_path.write_text(config)
    log = folder / "auth-server.log"
    process = subprocess.Popen(
        [
            nats_server_binary(),
            "-c",
            str(config_path),
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
            "-l",
            str(log),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while not port_open(port):
            if process.poll() is not None or time.monotonic() > deadline:
                text = log.read_text() if log.exists() else ""
                raise RuntimeError(f"nats-server with auth did not start: {text[-2000:]}")
            time.sleep(0.05)
        yield f"nats://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
