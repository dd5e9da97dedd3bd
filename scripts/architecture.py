#!/usr/bin/env python3
"""The layering of the runtime and the CLI, checked (docs/architecture.md):

1. no import cycle among the modules of one crate (runtime/src, cli/src): no file reaches,
   through `crate::`/`super::` paths outside its tests (doc comments excluded: a link is
   navigation, not a dependency), a file that reaches it back, directly or around a
   loop. A path through the crate root (`crate::Error`) counts as reaching the file that
   the root (lib.rs, main.rs) re-exports it from. A module's other paths to its own children
   (`use child::X`, `child::f()`) count too, as main.rs calling the module that calls it back
   is a cycle; its `mod` lines and its re-exports (`pub use child::...`) do not.
2. no function over MAX_LINES lines outside tests (runtime/src, derive/src, src, cli/src).

usage: scripts/architecture.py [--graph]   (exit 1 and a list of what is wrong)
"""
import pathlib
import re
import sys

MAX_LINES = 80
ROOT = pathlib.Path(__file__).resolve().parent.parent
# The crates whose modules are layered: a name for the messages, and the source folder.
LAYERED = [("runtime", ROOT / "runtime" / "src"), ("cli", ROOT / "cli" / "src")]
SIZED = [ROOT / "runtime" / "src", ROOT / "derive" / "src", ROOT / "src", ROOT / "cli" / "src"]


def strip_tests(text):
    """The text without `#[cfg(test)]` items (a test module or function)."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        j = text.find("{", m.end())
        semi = text.find(";", m.end())
        if semi != -1 and (j == -1 or semi < j):  # `#[cfg(test)] mod tests;` or a `use`
            i = semi + 1
            continue
        depth, k = 0, j
        while k < len(text):
            if text[k] == "{":
                depth += 1
            elif text[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1
    out.append(text[i:])
    return "".join(out)


def module_of(path, src):
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod" or parts in (["lib"], ["main"]):
        parts = parts[:-1]
    return tuple(parts)


def files(src):
    return {module_of(p, src): p for p in sorted(src.rglob("*.rs"))}


def root_reexports(text):
    """Name -> module for the crate root's `pub use module::...` lines."""
    names = {}
    for m in re.finditer(r"pub use ([a-z_:]+)::\{([^}]*)\}", text):
        for name in re.split(r"[,\s]+", m.group(2)):
            name = name.split(" as ")[-1].strip()
            if name:
                names[name] = tuple(m.group(1).split("::"))
    for m in re.finditer(r"pub use ([a-z_:]+)::(\w+);", text):
        names[m.group(2)] = tuple(m.group(1).split("::"))
    return names


def code(text):
    """The text without comments: a doc link is navigation, not a dependency."""
    return "\n".join(re.sub(r'"(?:\\.|[^"\\])*"', '""', line).split("//", 1)[0] for line in text.splitlines())


def paths(text):
    """Every `crate::...`/`super::...` path, braces expanded one level."""
    for m in re.finditer(r"\b(crate|super)((?:::\w+)+)?(?:::\{([^{}]*)\})?", text):
        if m.group(2) is None and m.group(3) is None:
            continue  # `pub(crate)`, or the word in prose
        head = [m.group(1)] + [p for p in (m.group(2) or "").split("::") if p]
        if m.group(3) is None:
            yield head
        else:
            for part in m.group(3).split(","):
                part = part.strip().split(" as ")[0]
                if part:
                    yield head + [p for p in part.split("::") if p and p != "self"]


REEXPORT = re.compile(r"\bpub(?:\([^)]*\))?\s+use\b[^;]*;")
CHILD = re.compile(r"(?<![\w:])(?:self::)?([a-z_]\w*)::")


def children(text, here, modules):
    """The children of `here` that its code names by a path of their own; a re-export is the
    crate's face, not a dependency."""
    for m in CHILD.finditer(REEXPORT.sub("", text)):
        child = here + (m.group(1),)
        if child in modules:
            yield child


def resolve(path, here, modules, reexports):
    if path[0] == "super":
        base = list(here[:-1])
        rest = path[1:]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
        full = base + rest
    else:
        full = path[1:]
    if full and full[0] in reexports and (full[0],) not in modules:
        full = list(reexports[full[0]]) + full[1:]
    for k in range(len(full), -1, -1):
        if tuple(full[:k]) in modules:
            return tuple(full[:k])
    return ()


def graph(src):
    modules = files(src)
    reexports = root_reexports(modules[()].read_text())
    edges = {}
    for mod, path in modules.items():
        text = code(strip_tests(path.read_text()))
        targets = set()
        for p in paths(text):
            to = resolve(p, mod, modules, reexports)
            if to != mod:
                targets.add(to)
        targets.update(children(text, mod, modules))
        edges[mod] = targets
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def long_functions():
    found = []
    for d in SIZED:
        for p in sorted(d.rglob("*.rs")):
            lines = strip_tests(p.read_text()).splitlines()
            i = 0
            while i < len(lines):
                m = FN.match(lines[i])
                if m:
                    depth, started, j = 0, False, i
                    while j < len(lines):
                        s = re.sub(r'"(?:\\.|[^"\\])*"', '""', lines[j]).split("//", 1)[0]
                        if not started and ";" in s and "{" not in s:
                            break
                        depth += s.count("{") - s.count("}")
                        started = started or "{" in s
                        if started and depth <= 0:
                            break
                        j += 1
                    if started and j - i + 1 > MAX_LINES:
                        found.append((j - i + 1, f"{p.relative_to(ROOT)}: fn {m.group(1)}"))
                i += 1
    return found


def name(mod):
    return "crate" if not mod else "::".join(mod)


def main():
    bad, counts = 0, []
    for crate, src in LAYERED:
        edges = graph(src)
        counts.append(f"{len(edges)} {crate} modules")
        if "--graph" in sys.argv:
            print(f"# {crate} ({src.relative_to(ROOT)})")
            for mod in sorted(edges):
                print(f"{name(mod)} -> {', '.join(sorted(name(t) for t in edges[mod]))}")
        for comp in cycles(edges):
            bad += 1
            members = set(comp)
            detail = "; ".join(
                f"{name(a)} -> {name(b)}" for a in comp for b in sorted(edges[a]) if b in members
            )
            print(f"import cycle in {crate}: {', '.join(name(m) for m in comp)} ({detail})")
    for n, where in sorted(long_functions(), reverse=True):
        bad += 1
        print(f"{n} lines (over {MAX_LINES}): {where}")
    if bad:
        sys.exit(1)
    print(f"architecture: {' and '.join(counts)}, no import cycle, no function over {MAX_LINES} lines")


if __name__ == "__main__":
    main()
