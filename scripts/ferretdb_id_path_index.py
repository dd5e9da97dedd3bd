#!/usr/bin/env python3
"""Adds the `_id` index FerretDB 1.19-1.24's SQLite backend lacks, for a measurement.

    scripts/ferretdb_id_path_index.py DATA_DIR DB    (DATA_DIR: `scripts/db up --data DATA_DIR`)

FerretDB 1.19 to 1.24 (SQLite backend) indexes `_id` as `_ferretdb_sjson->"_id"`, but looks it
up as `_ferretdb_sjson->'$._id'` (internal/backends/sqlite/metadata/registry.go and
metadata.go, v1.24.2). SQLite only uses an index on an expression that is written the same
way, so every lookup, `UPDATE` and `DELETE` by `_id` scans the table. This creates, in every
collection table of DB, an index on the expression the lookups use; SQLite then picks it up by
itself (`EXPLAIN QUERY PLAN`: SEARCH ... USING INDEX). FerretDB does not know of it:
`listIndexes` does not show it, and it goes with its table when the collection is dropped.

It is not part of natural-key: docs/performance.md uses it to show what the 1%-changed
re-ingest costs on FerretDB once an update by `_id` no longer scans. Prints each table it
indexed and the query plan of a lookup by `_id`.
"""
import sqlite3
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    data, db = sys.argv[1], sys.argv[2]
    con = sqlite3.connect(f"file:{data.rstrip('/')}/{db}.sqlite?mode=rw", uri=True, timeout=30)
    tables = [t for (t,) in con.execute("SELECT table_name FROM _ferretdb_collections")]
    for table in tables:
        # Table names are FerretDB's own (a prefix and a hash), quoted as identifiers.
        quoted = '"' + table.replace('"', '""') + '"'
        index = '"' + (table + "_nk_id_path").replace('"', '""') + '"'
        con.execute(f"CREATE INDEX IF NOT EXISTS {index} ON {quoted} (_ferretdb_sjson->'$._id')")
        plan = con.execute(
            f"EXPLAIN QUERY PLAN SELECT _ferretdb_sjson FROM {quoted} "
            "WHERE _ferretdb_sjson->'$._id' = ?",
            ('"x"',),
        ).fetchall()
        print(f"{table}: {plan[-1][-1]}")
    con.commit()
    con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
