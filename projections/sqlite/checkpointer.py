"""WAL checkpoints in a thread of their own, so that no commit of the projector waits for one.

By default SQLite checkpoints inside the COMMIT that grows the WAL past 1,000 pages: that
commit copies the WAL into the database file and syncs both, where another commit writes a few
pages. In an agent loop with the projector in the process, those stalls were most of the average
commit (bench/RESULTS.md, 'Figures moved from code comments'), and they are a reader's worst-case
wait for its own write.

The projector turns automatic checkpoints off on its connection (``PRAGMA wal_autocheckpoint =
0``) and a :class:`Checkpointer` runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its
own, in a daemon thread, a moment after commits (SQLite releases the GIL while it copies and
syncs). A passive checkpoint never blocks the writer or a reader; the WAL is rewound at the
next commit after a checkpoint that copied everything, and cut back to
:data:`JOURNAL_SIZE_LIMIT` bytes then. A checkpoint that fails is logged and tried again.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from pathlib import Path

logger = logging.getLogger(__name__)

# How long after a commit the thread checkpoints (commits in between share the checkpoint).
CHECKPOINT_DELAY = 0.05
# What the WAL file is cut back to when it is rewound (SQLite keeps it at its largest else).
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024


def defer_checkpoints(connection: sqlite3.Connection) -> None:
    """Stop ``connection``'s commits from checkpointing (a :class:`Checkpointer` does it)."""
    connection.execute("PRAGMA wal_autocheckpoint = 0")
    connection.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")


class Checkpointer:
    """Checkpoints the WAL database at ``path`` in a daemon thread, after :meth:`committed`."""

    def __init__(self, path: Path, delay: float = CHECKPOINT_DELAY) -> None:
        self.path = path
        self.delay = delay
        self.checkpoints = 0  # completed, for tests and status
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"memstream-checkpoint-{self.path.name}", daemon=True
            )
            self._thread.start()

    def committed(self) -> None:
        """A commit added to the WAL: checkpoint soon (cheap: sets an event, once)."""
        if not self._wake.is_set():
            self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (after the checkpoint under way, if any)."""
        self._stopping.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        connection: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                # Let the commits of a burst gather, then take them all at once.
                self._wake.clear()
                if self._stopping.is_set() or self._stopping.wait(self.delay):
                    return
                try:
                    if connection is None:
                        connection = self._connect()
                    connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                except sqlite3.Error as error:
                    logger.warning("checkpoint of %s failed: %s", self.path, error)
                    if connection is not None:
                        with contextlib.suppress(sqlite3.Error):
                            connection.close()
                        connection = None
        finally:
            if connection is not None:
                with contextlib.suppress(sqlite3.Error):
                    connection.close()

    def _connect(self) -> sqlite3.Connection:
        # mode=rw: never creates the file (it may have been moved aside meanwhile).
        connection = sqlite3.connect(
            f"{self.path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None, timeout=5.0
        )
        connection.execute("PRAGMA busy_timeout = 5000")
        return connection
