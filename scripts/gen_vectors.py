#!/usr/bin/env python3
"""Independent implementation of docs/id-scheme.md, used to compute the golden vectors.

Writes tests/vectors/ids.json. This file is the frozen format: the Rust tests (and the Go
interop check) must reproduce every id in it. Re-running this script must produce the same
file; an entry is never edited, only appended.

    python3 scripts/gen_vectors.py > tests/vectors/ids.json
"""
import datetime
import hashlib
import json
import struct
import uuid

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
PREFIX = b"natural-key/v1\x00"


def ulid(ts_ms: int, digest: bytes) -> str:
    assert 0 <= ts_ms < 2**48
    n = (ts_ms << 80) | int.from_bytes(digest[:10], "big")
    return "".join(CROCKFORD[(n >> (5 * i)) & 31] for i in reversed(range(26)))


def nk_version(v) -> int:
    """The stored `_nk_version` of a version value (docs/id-scheme.md, "Versions and
    tombstones"): an int as it is, an instant (an aware datetime, or RFC 3339 text) in Unix
    milliseconds, floored; int64 or an error."""
    if isinstance(v, str):
        # Digits past the millisecond are dropped: adding a non-negative fraction to whole
        # seconds floors, before the epoch too.
        head, frac, rest = v[:19], "", v[19:]
        if rest.startswith("."):
            digits = len(rest) - len(rest[1:].lstrip("0123456789"))
            frac, rest = rest[1:digits], rest[digits:]
        secs = datetime.datetime.fromisoformat(head + rest.replace("z", "Z"))
        v = secs + datetime.timedelta(milliseconds=int((frac + "000")[:3]))
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            raise ValueError("an instant needs its offset")
        v = (v - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(milliseconds=1)
    if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
        raise ValueError(f"not an int64 version: {v!r}")
    return v


assert nk_version(7) == 7 and nk_version(-5) == -5
assert nk_version("2023-11-14T22:13:20Z") == 1700000000000
assert nk_version("2023-11-14T23:13:20.1239+01:00") == 1700000000123
assert nk_version("1969-12-31T23:59:59.9995Z") == -1  # floored, not truncated
assert nk_version(datetime.datetime(1969, 12, 31, 23, 59, 59, 998500, datetime.timezone.utc)) == -2


def payload(k):
    t, v = k["type"], k.get("value")
    if t == "none":
        return 0x00, b""
    if t == "str":
        return 0x01, v.encode("utf-8")
    if t == "int":
        return 0x02, v.to_bytes(16, "big", signed=True)
    if t == "bool":
        return 0x03, bytes([1 if v else 0])
    if t == "bytes":
        return 0x04, bytes.fromhex(v)
    if t == "uuid":
        return 0x05, uuid.UUID(v).bytes
    if t == "objectid":
        return 0x06, bytes.fromhex(v)
    raise ValueError(t)


def text(k):
    t, v = k["type"], k.get("value")
    if t == "none":
        return ""
    if t == "str":
        return v
    if t == "int":
        return str(v)
    if t == "bool":
        return "true" if v else "false"
    if t in ("bytes", "objectid"):
        return v.lower()
    if t == "uuid":
        return str(uuid.UUID(v))
    raise ValueError(t)


def identity(vec) -> bytes:
    if vec["scheme"] == "default":
        ns = vec["namespace"].encode("utf-8")
        m = PREFIX + struct.pack(">I", len(ns)) + ns
        for k in vec["keys"]:
            tag, b = payload(k)
            m += bytes([tag]) + struct.pack(">I", len(b)) + b
        return hashlib.sha256(m).digest()
    sep = vec["separator"]
    return hashlib.sha256(sep.join(text(k) for k in vec["keys"]).encode("utf-8")).digest()


def S(v):
    return {"type": "str", "value": v}


def I(v):
    return {"type": "int", "value": v}


T = 1700000000000
CASES = [
    # The seed's PostID(slug, lang, publishedAt), both schemes.
    ("seed post", "joined", "", ":", [S("hello-world"), S("en")], T),
    ("seed post", "default", "", None, [S("hello-world"), S("en")], T),
    ("ambiguous join a:b|c", "joined", "", ":", [S("a:b"), S("c")], T),
    ("ambiguous join a|b:c", "joined", "", ":", [S("a"), S("b:c")], T),
    ("unambiguous a:b|c", "default", "", None, [S("a:b"), S("c")], T),
    ("unambiguous a|b:c", "default", "", None, [S("a"), S("b:c")], T),
    ("CJK zh-TW", "default", "", None, [S("台北美食指南"), S("zh-TW")], 1672531200000),
    ("CJK zh-TW", "joined", "", ":", [S("台北美食指南"), S("zh-TW")], 1672531200000),
    ("CJK ja", "joined", "", ":", [S("東京の朝"), S("ja")], 1680307200123),
    ("CJK ko", "default", "", None, [S("서울-여행"), S("ko")], 1690000000999),
    ("namespace", "default", "blog.post", None, [S("hello-world"), S("en")], T),
    ("joined custom separator", "joined", "", "/", [S("hello-world"), S("en")], T),
    ("empty string key", "default", "", None, [S(""), S("en")], 0),
    ("timestamp zero", "joined", "", ":", [S("x")], 0),
    ("timestamp max", "default", "", None, [S("x")], 2**48 - 1),
    ("integers", "default", "", None, [I(42), I(-1), I(2**63 - 1)], T),
    ("integers", "joined", "", ":", [I(42), I(-1)], T),
    ("bool and none", "default", "", None, [{"type": "bool", "value": True}, {"type": "none"}], T),
    ("uuid", "default", "", None, [{"type": "uuid", "value": "67e55044-10b1-426f-9247-bb680e5fe0c8"}], T),
    ("uuid", "joined", "", ":", [{"type": "uuid", "value": "67e55044-10b1-426f-9247-bb680e5fe0c8"}], T),
    ("objectid", "default", "", None, [{"type": "objectid", "value": "507f1f77bcf86cd799439011"}], T),
    ("bytes", "default", "", None, [{"type": "bytes", "value": "00ff10"}], T),
    ("emoji and combining", "default", "", None, [S("caf\u00e9 \U0001F600"), S("cafe\u0301")], T),
]

out = []
for name, scheme, ns, sep, keys, ts in CASES:
    vec = {"name": name, "scheme": scheme, "keys": keys, "timestamp_ms": ts}
    if scheme == "default":
        vec["namespace"] = ns
    else:
        vec["separator"] = sep
    digest = identity(vec)
    vec["identity"] = digest.hex()
    vec["id"] = ulid(ts, digest)
    out.append(vec)

print(json.dumps({"format": "natural-key id vectors v1", "vectors": out}, ensure_ascii=False, indent=1))
