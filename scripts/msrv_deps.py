#!/usr/bin/env python3
"""Fails when a dependency of the published crates declares a newer rust-version than ours.

Reads `cargo metadata --locked --all-features` (the versions in Cargo.lock) on stdin and walks
the normal and build dependencies of every crate that is published (dev-dependencies are the
tests' business: they do not bind users). clippy's incompatible_msrv lint covers our own use of
std; this covers the dependencies. Neither proves language features: only a build with that
toolchain would.

    cargo metadata --locked --all-features --format-version 1 | python3 scripts/msrv_deps.py
"""
import json
import sys


def version(text):
    """`1.89` and `1.89.0` are one version."""
    parts = [int(x) for x in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    meta = json.load(sys.stdin)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    published = [
        packages[i]
        for i in meta["workspace_members"]
        if packages[i].get("publish") != []
    ]
    ours = {p["rust_version"] for p in published}
    if len(ours) != 1 or None in ours:
        sys.exit(f"msrv: the published crates declare rust-version {sorted(map(str, ours))}; declare one")
    msrv = version(ours.pop())
    seen, stack = set(), [p["id"] for p in published]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for dep in nodes[node]["deps"]:
            if any(k["kind"] in (None, "build") for k in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    newer = sorted(
        (version(packages[i]["rust_version"]), packages[i]["name"], packages[i]["version"])
        for i in seen
        if packages[i].get("rust_version") and version(packages[i]["rust_version"]) > msrv
    )
    shown = ".".join(map(str, msrv[:2]))
    if newer:
        for v, name, ver in newer:
            print(f"msrv: {name} {ver} needs Rust {'.'.join(map(str, v))} > our rust-version {shown}")
        sys.exit("msrv: raise rust-version in Cargo.toml, or lock older versions of these")
    print(f"msrv: {len(seen)} crates (ours and their dependencies) build with Rust {shown} or older")


if __name__ == "__main__":
    main()
