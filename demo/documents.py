"""Documents stored in the database or in a blob folder (the ``documents.storage`` knob).

This imitates the seed story of SQL Server Remote BLOB Storage (RBS) with
SharePoint 2010: by default every document body lives in the content database,
where it is written twice (transaction log, then data file) and read back page
by page; with RBS the bodies live in a file store and the database keeps only
their metadata, which made large uploads 15-50 % faster.

Here the ``documents`` table of the demo's SQLite file holds every document's
metadata and says where its body is (``storage``):

* ``database``: in the ``body`` column. It is written and read with SQLite's
  incremental blob I/O in ``PAGE_BYTES`` (8 KB, SQL Server's page size) pieces,
  and every page costs ``PAGE_SECONDS`` more (a ``time.sleep`` in the worker
  thread, which releases the GIL): the modelled cost of moving one page through
  the database's buffer pool and out to the web server. Writes also go through
  SQLite's write-ahead log and its commit, as SQL Server logs the whole BLOB.
  A 2 MB document is 256 pages, so at least 26 ms more per download or upload.
* ``blob``: in ``<db file name>-blobs/<id>.bin`` next to the database file, read and
  written in one piece (the file is written to a temporary name, then renamed).

Reads follow each row's own ``storage``, so a document is always readable;
switching the knob migrates every document to the new storage (run in a worker
thread, like the index knob), and new uploads go where the knob says.
Six documents of 50 KB to 2 MB are seeded (deterministic bytes). Uploads are
capped at ``MAX_UPLOAD_BYTES`` and only the latest ``MAX_UPLOADED`` uploads are
kept, so a long soak with uploads cannot fill the disk.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("demo")

STORAGES = ("database", "blob")
PAGE_BYTES = 8192
PAGE_SECONDS = 100e-6
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MAX_UPLOADED = 200
SEED_VERSION = "1"
SEEDED = [
    ("minutes-050k.bin", 50 * 1024),
    ("handbook-200k.bin", 200 * 1024),
    ("report-500k.bin", 500 * 1024),
    ("slides-1m.bin", 1024 * 1024),
    ("drawing-1500k.bin", 1536 * 1024),
    ("video-2m.bin", 2048 * 1024),
]
"""(name, size) of the seeded documents, ids 1..6 in this order."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS documents (id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
    " content_type TEXT NOT NULL, size INTEGER NOT NULL, seeded INTEGER NOT NULL,"
    " storage TEXT NOT NULL CHECK (storage IN ('database', 'blob')), body BLOB)"
)


@dataclass(frozen=True)
class DocumentInfo:
    id: int
    name: str
    content_type: str
    size: int
    storage: str


def seed_bytes(index: int, size: int) -> bytes:
    """The deterministic body of seeded document ``index`` (1-based)."""
    return random.Random(f"document-{index}").randbytes(size)


class Documents:
    """Documents of one SQLite file (through per-thread connections) and its blob folder.

    Every method blocks: call it in a worker thread.
    """

    def __init__(self, connection: Callable[[], sqlite3.Connection], db_path: str | Path) -> None:
        self._conn = connection
        db_path = Path(db_path)
        self.blob_dir = db_path.with_name(db_path.name + "-blobs")  # as SQLite names its "-wal" file

    def blob_path(self, doc_id: int) -> Path:
        return self.blob_dir / f"{doc_id}.bin"

    # -- set-up --------------------------------------------------------------
    def ensure_seeded(self) -> bool:
        """Create the table and the seeded documents (in the database) unless present."""
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(_SCHEMA)
            conn.execute("CREATE TABLE IF NOT EXISTS demo_meta (key TEXT PRIMARY KEY, value TEXT)")
            row = conn.execute("SELECT value FROM demo_meta WHERE key = 'documents'").fetchone()
            if row == (SEED_VERSION,):
                conn.execute("COMMIT")
                return False
            conn.execute("DELETE FROM documents WHERE id <= ?", (len(SEEDED),))
            conn.executemany(
                "INSERT INTO documents VALUES (?, ?, 'application/octet-stream', ?, 1, 'database', ?)",
                [(i, name, size, seed_bytes(i, size)) for i, (name, size) in enumerate(SEEDED, 1)],
            )
            conn.execute("INSERT OR REPLACE INTO demo_meta VALUES ('documents', ?)", (SEED_VERSION,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        for i in range(1, len(SEEDED) + 1):
            self.blob_path(i).unlink(missing_ok=True)
        return True

    # -- reading -------------------------------------------------------------
    def listing(self) -> list[DocumentInfo]:
        rows = self._conn().execute("SELECT id, name, content_type, size, storage FROM documents ORDER BY id")
        return [DocumentInfo(*row) for row in rows]

    def info(self, doc_id: int) -> DocumentInfo | None:
        row = (
            self._conn()
            .execute("SELECT id, name, content_type, size, storage FROM documents WHERE id = ?", (doc_id,))
            .fetchone()
        )
        return DocumentInfo(*row) if row else None

    def read(self, doc_id: int) -> tuple[DocumentInfo, bytes] | None:
        """The document and its body, or None if there is no such document."""
        for _ in range(3):  # a migration may move the body between our two reads
            info = self.info(doc_id)
            if info is None:
                return None
            try:
                if info.storage == "database":
                    return info, self._read_pages(doc_id)
                return info, self.blob_path(doc_id).read_bytes()
            except (FileNotFoundError, sqlite3.OperationalError):
                continue
        raise RuntimeError(f"document {doc_id} kept moving while being read")

    def _read_pages(self, doc_id: int) -> bytes:
        parts = []
        with self._conn().blobopen("documents", "body", doc_id, readonly=True) as blob:
            while page := blob.read(PAGE_BYTES):
                parts.append(page)
                time.sleep(PAGE_SECONDS)
        return b"".join(parts)

    # -- writing -------------------------------------------------------------
    def create(self, name: str, content_type: str, body: bytes, storage: str) -> DocumentInfo:
        """Store an uploaded document where ``storage`` says; forget the oldest uploads beyond the limit."""
        conn = self._conn()
        size = len(body)
        with conn:  # one transaction: committed on success, rolled back on error
            if storage == "database":
                cur = conn.execute(
                    "INSERT INTO documents (name, content_type, size, seeded, storage, body)"
                    " VALUES (?, ?, ?, 0, 'database', zeroblob(?))",
                    (name, content_type, size, size),
                )
                doc_id = cur.lastrowid
                with conn.blobopen("documents", "body", doc_id) as blob:
                    for offset in range(0, size, PAGE_BYTES):
                        blob.write(body[offset : offset + PAGE_BYTES])
                        time.sleep(PAGE_SECONDS)
            else:
                cur = conn.execute(
                    "INSERT INTO documents (name, content_type, size, seeded, storage, body)"
                    " VALUES (?, ?, ?, 0, 'blob', NULL)",
                    (name, content_type, size),
                )
                doc_id = cur.lastrowid
                self._write_file(doc_id, body)
            old = [
                row[0]
                for row in conn.execute(
                    "SELECT id FROM documents WHERE seeded = 0 ORDER BY id DESC LIMIT -1 OFFSET ?", (MAX_UPLOADED,)
                )
            ]
            conn.executemany("DELETE FROM documents WHERE id = ?", [(i,) for i in old])
        for i in old:
            self.blob_path(i).unlink(missing_ok=True)
        return DocumentInfo(doc_id, name, content_type, size, storage)

    def _write_file(self, doc_id: int, body: bytes) -> None:
        path = self.blob_path(doc_id)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(body)
        os.replace(tmp, path)

    def migrate(self, storage: str) -> int:
        """Move every document to ``storage``; return how many moved."""
        conn = self._conn()
        started = time.perf_counter()
        ids = [row[0] for row in conn.execute("SELECT id FROM documents WHERE storage != ? ORDER BY id", (storage,))]
        moved = 0
        for doc_id in ids:
            with conn:
                row = conn.execute("SELECT storage, body FROM documents WHERE id = ?", (doc_id,)).fetchone()
                if row is None or row[0] == storage:
                    continue  # deleted or moved meanwhile
                if storage == "blob":
                    self._write_file(doc_id, row[1])
                    conn.execute("UPDATE documents SET storage = 'blob', body = NULL WHERE id = ?", (doc_id,))
                else:
                    body = self.blob_path(doc_id).read_bytes()
                    conn.execute("UPDATE documents SET storage = 'database', body = ? WHERE id = ?", (body, doc_id))
            if storage == "database":
                self.blob_path(doc_id).unlink(missing_ok=True)
            moved += 1
        if moved:
            log.info("moved %d documents to %s storage (%.2fs)", moved, storage, time.perf_counter() - started)
        return moved
