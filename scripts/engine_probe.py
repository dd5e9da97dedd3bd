#!/usr/bin/env python3
"""What an engine does where natural-key's workarounds depend on it (docs/engines.md).

    python3 scripts/engine_probe.py MONGODB_URI     # needs pymongo (pip install pymongo)

Prints, for the engine behind the URI: how long an `update` of N statements takes (FerretDB 1.x
stalls near 100), whether an update re-checks its filter against a concurrent writer (many
compare-and-set rounds by 8 threads: exactly one may win each), and what a guard read costs by
`$in` and by `_id` range at several sizes. Uses the database `nk_probe`, dropped first and last.
"""
import sys
import threading
import time

import pymongo
from pymongo import UpdateOne

uri = sys.argv[1]
client = pymongo.MongoClient(uri, retryWrites=False, serverSelectionTimeoutMS=5000)
db = client["nk_probe"]
client.drop_database("nk_probe")
info = client.admin.command("buildInfo")
print("engine:", info.get("version"), info.get("ferretdb") or info.get("ferretdbVersion"))


def timed(f):
    t = time.perf_counter()
    r = f()
    return time.perf_counter() - t, r


# 1. Statements per update command.
c = db["statements"]
c.insert_many([{"_id": f"{i:06d}", "h": 0, "body": "x" * 450} for i in range(10_000)])
for n in (16, 100, 1000, 10_000):
    updates = [{"q": {"_id": f"{i:06d}", "h": 0}, "u": {"$set": {"h": 0, "b": n}}} for i in range(n)]
    dt, r = timed(lambda: db.command({"update": "statements", "updates": updates, "ordered": False}))
    print(f"update of {n} statements by {{_id, h}}: {dt:.3f} s, n={r['n']}")

# 2. Does an update re-check its filter as it writes? 8 threads race a compare-and-set on one
# document per round; the filter names the version read, the update sets the next one.
c = db["cas"]
rounds, threads, double = 300, 8, 0
for r in range(rounds):
    c.insert_one({"_id": r, "v": 0})
won = [0] * rounds
lock = threading.Lock()


def racer(r, barrier):
    barrier.wait()
    res = c.update_one({"_id": r, "v": 0}, {"$set": {"v": 1}, "$inc": {"winners": 1}})
    with lock:
        won[r] += res.modified_count


for r in range(rounds):
    b = threading.Barrier(threads)
    ts = [threading.Thread(target=racer, args=(r, b)) for _ in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
winners = [d.get("winners", 0) for d in c.find({}, {"winners": 1})]
print(
    f"compare-and-set, {rounds} rounds x {threads} writers: rounds with more than one winner "
    f"by the replies {sum(1 for w in won if w > 1)}, by the stored counters {sum(1 for w in winners if w > 1)}"
)

# 3. Guard reads: $in of n _ids, and one _id range, over 10,000 stored documents.
ids = [f"{i:06d}" for i in range(10_000)]
for n in (16, 100, 1000, 4096, 10_000):
    want = ids[:: max(1, 10_000 // n)][:n]
    best = min(timed(lambda: list(db["statements"].find({"_id": {"$in": want}}, {"_id": 1, "h": 1})))[0] for _ in range(3))
    span = min(timed(lambda: list(db["statements"].find({"_id": {"$gte": ids[0], "$lte": ids[n - 1]}}, {"_id": 1, "h": 1}).limit(2 * n)))[0] for _ in range(3))
    print(f"read of {n}: $in {best * 1e3:.1f} ms ({best / n * 1e6:.1f} us each), span {span * 1e3:.1f} ms")

client.drop_database("nk_probe")
