#!/usr/bin/env bash
# scripts/shard_move_loss.sh [--op delete|update] [--mode block_writes|force_logical] [--docs N] [--moves K]
#
# The engine alone, no natural-key in the loop: on the running cluster (`scripts/db up --engine
# cluster`, NK_DB_STATE as for scripts/db), N documents are inserted into a collection
# hash-sharded on k, then each deleted (or given v: 1 by an update's $set), one statement each,
# through DocumentDB's own SQL API (documentdb_api.delete / documentdb_api.update, what FerretDB
# sends), while `scripts/db move` moves one of its shards K times. Every statement answers
# n = 1; a document still there (or without v: 1) afterwards is a write the engine acknowledged
# and lost. Prints "OP MODE: acknowledged A of N; L lost" and exits 1 if any is.
# force_logical needs wal_level = logical on every node.
#
# Seen on DocumentDB 0.106 / Citus 12.1.7 (2 workers, 8 shards, 3,000 deletes, 5 moves, this
# machine): block_writes 23 left, force_logical 11 left (docs/engines.md, "Shard moves").
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
op=delete mode=block_writes n=3000 moves=5
while [ $# -gt 0 ]; do
  case "$1" in
    --op) op=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --docs) n=$2; shift 2 ;;
    --moves) moves=$2; shift 2 ;;
    *) echo "usage: $0 [--op delete|update] [--mode block_writes|force_logical] [--docs N] [--moves K]" >&2; exit 2 ;;
  esac
done
state="${NK_DB_STATE:-/tmp/natural-key-db-$(id -u)}"
[ -f "$state/datadir" ] || { echo "$0: no cluster at $state (scripts/db up --engine cluster)" >&2; exit 2; }
run=$(cat "$state/datadir")
psql_coord() {
  if [ "$(id -u)" = 0 ]; then set -- runuser -u postgres -- "$@"; else set -- sudo -n -u postgres "$@"; fi
  "$@"
}
sql() {
  psql_coord /usr/lib/postgresql/15/bin/psql -h 127.0.0.1 -p "$(cat "$run/coord.port")" -U postgres \
    -d postgres -v ON_ERROR_STOP=1 -qAtX "$@"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

sql >/dev/null <<EOF
SET client_min_messages = warning;
SELECT documentdb_api.drop_database('nk_move_loss');
SELECT documentdb_api.create_collection('nk_move_loss', 'c');
SELECT documentdb_api.shard_collection('nk_move_loss', 'c', '{"k": "hashed"}', false);
SELECT count(*) FROM generate_series(1, $n) i,
  LATERAL documentdb_api.insert_one('nk_move_loss', 'c', format('{"_id": %s, "k": %s}', i, i)::documentdb_core.bson);
EOF
python3 - "$n" "$op" > "$work/writes.sql" <<'EOF'
import sys
n, op = int(sys.argv[1]), sys.argv[2]
print("SET client_min_messages = warning;")
for i in range(1, n + 1):
    if op == "delete":
        cmd = f'{{"delete": "c", "deletes": [{{"q": {{"_id": {i}, "k": {i}}}, "limit": 1}}]}}'
    else:
        cmd = f'{{"update": "c", "updates": [{{"q": {{"_id": {i}, "k": {i}}}, "u": {{"$set": {{"v": 1}}}}}}]}}'
    print(f"SELECT (documentdb_api.{op}('nk_move_loss', '{cmd}')).p_result::text;")
EOF
sql -f "$work/writes.sql" > "$work/replies" &
deleter=$!
for _ in $(seq "$moves"); do
  sleep 0.5
  kill -0 "$deleter" 2>/dev/null || break
  bash "$root/scripts/db" move --engine cluster nk_move_loss c --mode "$mode"
done
wait "$deleter"
# Each reply is BSON: { n: 1, ok: 1.0 } for a delete, { ok: 1.0, nModified: 1, n: 1 } for an
# update; 10 6e 00 01000000 is the field n, an int32 1.
acked=$(grep -c '106e0001000000' "$work/replies" || true)
if [ "$op" = delete ]; then
  lost=$(echo "SELECT count(*) FROM documentdb_api.collection('nk_move_loss', 'c');" | sql)
else
  lost=$(echo "SELECT count(*) FROM documentdb_api.collection('nk_move_loss', 'c')
    WHERE NOT documentdb_api_catalog.bson_dollar_eq(document, '{\"v\": 1}'::documentdb_core.bson);" | sql)
fi
echo "$op $mode: acknowledged $acked of $n; $lost lost"
sql -c "SELECT documentdb_api.drop_database('nk_move_loss')" >/dev/null
[ "$lost" = 0 ]
