"""The demo target's work-item table in SQLite, searched on a custom field.

This imitates the seed story "a search over many work items is slow because
nobody indexed the custom field": ``work_items.area`` is searched by equality,
and the ``search.index`` knob creates or drops ``ix_work_items_area``. Without
the index every search is a full table scan (tens of ms on 200,000 rows); with
it the same search takes well under 2 ms and returns identical results.

SQLite calls block, so they run in worker threads (``asyncio.to_thread``) and
each thread keeps its own connection: sqlite3 connections must not be shared
between threads that use them at the same time, and opening one per query
would dominate the cost we want to show. The database is in WAL mode so that
searches keep running while the index is being built.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

AREAS = [f"Area {n:03d}" for n in range(1, 101)]
"""The ~100 distinct values of the custom field ``area``."""

INDEX_NAME = "ix_work_items_area"
SCHEMA_VERSION = "1"
PAGE_SIZE = 50

_STATES = ["New", "Active", "Resolved", "Closed", "Removed"]
_PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", ""]
_VERBS = ["Fix", "Add", "Remove", "Investigate", "Refactor", "Document", "Speed up"]
_NOUNS = [
    "login page",
    "export job",
    "search box",
    "billing report",
    "token cache",
    "upload form",
    "audit trail",
    "dashboard chart",
    "nightly backup",
    "mail queue",
]

_SEARCH_SQL = "SELECT id, title, state, assigned_to FROM work_items WHERE area = ? ORDER BY id LIMIT ?"
_COUNT_SQL = "SELECT count(*) FROM work_items WHERE area = ?"


def _mix(i: int) -> int:
    """A cheap deterministic integer hash, so row i always gets the same values."""
    i = (i * 2654435761) & 0xFFFFFFFF
    i ^= i >> 15
    return (i * 2246822519) & 0xFFFFFFFF


def _row(i: int) -> tuple:
    h = _mix(i)
    title = f"{_VERBS[h % 7]} the {_NOUNS[(h >> 3) % 10]} (#{i})"
    area = AREAS[(h >> 8) % len(AREAS)]
    state = _STATES[(h >> 16) % 5]
    assigned = _PEOPLE[(h >> 19) % len(_PEOPLE)]
    priority = 1 + (h >> 23) % 4
    created = f"2024-{1 + (h >> 5) % 12:02d}-{1 + (h >> 11) % 28:02d}"
    description = (
        f"Reported by {_PEOPLE[(h >> 26) % 8]}: the {_NOUNS[(h >> 3) % 10]} misbehaves "
        f"under load; see ticket {h % 100000} for the logs and steps to reproduce."
    )
    return (i, title, area, state, assigned, priority, created, description)


class WorkItems:
    """Access to the ``work_items`` table of one SQLite file."""

    def __init__(self, db_path: str | Path, items: int) -> None:
        self.db_path = Path(db_path)
        self.items = items
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    # -- connections ---------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # check_same_thread=False only so that close() may run on the loop's
            # thread at shutdown; each connection is otherwise used by one thread.
            conn = sqlite3.connect(self.db_path, timeout=60, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def connection(self) -> sqlite3.Connection:
        """This thread's connection, also used for the other tables of the file (documents)."""
        return self._conn()

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    # -- set-up --------------------------------------------------------------
    def ensure_populated(self) -> bool:
        """Create and fill the table unless the file already holds the same rows.

        Returns True if rows were (re)generated. ``BEGIN IMMEDIATE`` takes the
        write lock first, so several processes starting at once do the work once.
        """
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS demo_meta (key TEXT PRIMARY KEY, value TEXT)")
            meta = dict(conn.execute("SELECT key, value FROM demo_meta"))
            if meta.get("items") == str(self.items) and meta.get("schema") == SCHEMA_VERSION:
                conn.execute("COMMIT")
                return False
            conn.execute("DROP TABLE IF EXISTS work_items")
            conn.execute(
                "CREATE TABLE work_items (id INTEGER PRIMARY KEY, title TEXT NOT NULL,"
                " area TEXT NOT NULL, state TEXT NOT NULL, assigned_to TEXT NOT NULL,"
                " priority INTEGER NOT NULL, created TEXT NOT NULL, description TEXT NOT NULL)"
            )
            conn.executemany(
                "INSERT INTO work_items VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (_row(i) for i in range(1, self.items + 1)),
            )
            conn.executemany(
                "INSERT OR REPLACE INTO demo_meta VALUES (?, ?)",
                [("items", str(self.items)), ("schema", SCHEMA_VERSION)],
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return True

    def set_index(self, enabled: bool) -> None:
        """Create or drop the index on the custom field (the ``search.index`` knob)."""
        conn = self._conn()
        if enabled:
            conn.execute(f"CREATE INDEX IF NOT EXISTS {INDEX_NAME} ON work_items (area)")
        else:
            conn.execute(f"DROP INDEX IF EXISTS {INDEX_NAME}")
        conn.commit()

    def has_index(self) -> bool:
        row = (
            self._conn()
            .execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (INDEX_NAME,))
            .fetchone()
        )
        return row is not None

    # -- queries -------------------------------------------------------------
    def search(self, area: str, limit: int = PAGE_SIZE) -> tuple[int, list[tuple]]:
        """Return (number of matches, first ``limit`` rows by id) for one area."""
        conn = self._conn()
        rows = conn.execute(_SEARCH_SQL, (area, limit)).fetchall()
        (total,) = conn.execute(_COUNT_SQL, (area,)).fetchone()
        return total, rows

    def query_plan(self) -> list[str]:
        """``EXPLAIN QUERY PLAN`` details of the search and count statements."""
        conn = self._conn()
        plan = []
        for sql, params in ((_SEARCH_SQL, ("x", 1)), (_COUNT_SQL, ("x",))):
            plan += [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        return plan

    # -- async wrappers: keep the event loop free while SQLite works ----------
    async def asearch(self, area: str, limit: int = PAGE_SIZE) -> tuple[int, list[tuple]]:
        return await asyncio.to_thread(self.search, area, limit)
