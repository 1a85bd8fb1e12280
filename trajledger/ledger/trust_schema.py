"""The SQLite layout of a user's trust state of a log (`ledger.trust_state`).

Scope: the tables (`SCHEMA`): ``meta`` (the floor, the tree's right edge, counts, pins) and the
rows derived from the log's records (`TABLES`: entries, names, listings, references, unreadable
records, held-out datasets), with the secondary indexes of the derived tables (`INDEXES`, which
a long first use builds after its rows).
Non-scope: what goes in the rows (``trust_rows``), reading and writing them (``trust_state``),
the queries answered from them (``trust_index``).
"""

from __future__ import annotations

__all__ = ["INDEXES", "SCHEMA", "TABLES"]

TABLES = ("entries", "names", "listing", "refs", "unreadable", "held_out")
"""The derived tables: counted after each extension, compared by `TrustState.disagreements`."""
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    idx INTEGER PRIMARY KEY, kind TEXT NOT NULL, subject TEXT NOT NULL, raw BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS entries_subject ON entries (subject);
CREATE INDEX IF NOT EXISTS entries_kind ON entries (kind);
CREATE TABLE IF NOT EXISTS names (
    idx INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, version TEXT NOT NULL,
    subject TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS names_ref ON names (name, version);
CREATE INDEX IF NOT EXISTS names_subject ON names (subject);
CREATE INDEX IF NOT EXISTS names_folded ON names (lower(name));
CREATE TABLE IF NOT EXISTS listing (digest TEXT NOT NULL, idx INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS listing_digest ON listing (digest);
CREATE TABLE IF NOT EXISTS refs (dst TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS refs_dst ON refs (dst);
CREATE TABLE IF NOT EXISTS unreadable (idx INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS held_out (idx INTEGER PRIMARY KEY);
"""
INDEXES = {line.split()[5]: line for line in SCHEMA.splitlines()
           if line.startswith("CREATE INDEX")}
"""The secondary indexes of the derived tables: ``{name: CREATE statement}``."""
