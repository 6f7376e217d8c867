"""A separate OS process for PostgreSQL tests.

``python postgres_process.py migrate URL``: waits for ``go`` on stdin (so that several start
together), migrates, prints the version it found as JSON and exits.
``python postgres_process.py lock URL PROJECTION[,PROJECTION...]``: takes those projector
locks, prints ``locked`` (or the refusal as JSON) and holds them until killed or stdin closes.
"""

from __future__ import annotations

import json
import sys

from memstream.domain.errors import ProjectorRunningError
from memstream.projections.postgres.connection import connect
from memstream.projections.postgres.locks import PostgresProjectorLock
from memstream.projections.postgres.schema import migrate


def main(argv: list[str]) -> int:
    command, url = argv[0], argv[1]
    if command == "migrate":
        sys.stdin.readline()
        with connect(url) as connection:
            before = migrate(connection, url)
        print(json.dumps({"before": before}), flush=True)
        return 0
    if command == "lock":
        try:
            lock = PostgresProjectorLock.acquire(url, "copy", argv[2].split(","))
        except ProjectorRunningError as error:
            print(json.dumps({"refused": str(error)}), flush=True)
            return 3
        print("locked", flush=True)
        sys.stdin.read()  # until the test closes stdin (or kills this process)
        lock.release()
        return 0
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
