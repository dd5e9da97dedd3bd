#!/usr/bin/env python3
"""Every figure README.md quotes comes from docs/performance.md: same number, same unit.

What counts as a figure: a number (digits, optional thousands commas, optional decimals) written
with a unit right after it, optionally after one space:

    ratios        3.2×  0.86x          (× or an x attached to the number)
    percentages   1%  20 %
    durations     ns µs (μs, us) ms s min h, and seconds, minutes, hours spelled out
    sizes         B KB (kB) KiB MB MiB GB GiB
    rates         lines/s  docs/s  lines per second

A range such as `8–10×` or `2.7–3.4×` (en dash or hyphen) is two figures with the range's
unit, `8×` and `10×`; each must appear. A number that is part of a version (`4.4.2`, `v1.24`)
or of a word (`p10`, `sha256`) is not a figure, nor is a count (`10,000 posts`): counts carry
no unit. In README.md, fenced code blocks, inline code spans, HTML comments and link targets
are left out (commands, identifiers and addresses, not quoted results). docs/performance.md
is read whole, tables and code blocks included, with the same rules; a figure is found there
when the page writes the same number (compared as a decimal: 3.2 = 3.20, 10,000 = 10000) with
the same unit (× = x, µs = μs = us, s = seconds). A figure the page gives only under a unit in
a table's heading (`phase (s)`: `1.030`) is not found: quote what the page writes with its unit.

usage: scripts/readme_figures.py [--list] [--readme FILE] [--performance FILE]
exit 0 when every figure is found (--list prints each one), 1 with the list of those that are
not, 2 when the README quotes no figure at all (the check would be checking nothing).
"""
import argparse
import pathlib
import re
import sys
from decimal import Decimal

ROOT = pathlib.Path(__file__).resolve().parent.parent

NUM = r"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?"
# Longest spellings first; the canonical spelling of each unit on the right.
UNITS = {
    "lines per second": "lines/s",
    "lines/s": "lines/s",
    "docs/s": "docs/s",
    "seconds": "s",
    "second": "s",
    "minutes": "min",
    "minute": "min",
    "hours": "h",
    "hour": "h",
    "min": "min",
    "KiB": "KiB",
    "MiB": "MiB",
    "GiB": "GiB",
    "KB": "KB",
    "kB": "KB",
    "MB": "MB",
    "GB": "GB",
    "ns": "ns",
    "µs": "µs",  # micro sign
    "μs": "µs",  # Greek mu
    "us": "µs",
    "ms": "ms",
    "s": "s",
    "h": "h",
    "B": "B",
}
WORD_UNITS = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
SPACE = r"[ \u00a0\u202f]?"  # one space, no-break space or narrow no-break space
FIGURE = re.compile(
    rf"(?<![\w.,\-−^])(?P<a>{NUM})(?:{SPACE}[–-]{SPACE}(?P<b>{NUM}))?"
    rf"(?:{SPACE}(?P<sym>[×%])|(?P<x>x)(?![\w])|{SPACE}(?P<word>{WORD_UNITS})(?![\w/]))"
    rf"(?![0-9])"
)


def figures(text):
    """(value, unit, as written, offset) for every figure in `text`, ranges split."""
    out = []
    for m in FIGURE.finditer(text):
        # A version or a dotted number: `4.4.2 s` would match at `4.4` were it not for this.
        if re.match(r"\.[0-9]", text[m.end("b") if m.group("b") else m.end("a"):]):
            continue
        if m.group("sym"):
            unit = m.group("sym")
        elif m.group("x"):
            unit = "×"
        else:
            unit = UNITS[m.group("word")]
        for num in (m.group("a"), m.group("b")):
            if num is not None:
                out.append((Decimal(num.replace(",", "")), unit, m.group(0), m.start()))
    return out


def quoted_text(readme):
    """README.md with what is not a quoted result blanked out (offsets and lines kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))

    text = re.sub(r"(?ms)^[ \t]*```.*?^[ \t]*```[^\n]*$", blank, readme)  # fenced blocks
    text = re.sub(r"(?s)<!--.*?-->", blank, text)  # HTML comments
    text = re.sub(r"`[^`\n]*`", blank, text)  # inline code
    text = re.sub(r"\]\([^)\n]*\)", blank, text)  # link targets
    return text


def shown(path):
    """A path as the messages give it: from the repository's root where it is inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="print every figure found")
    ap.add_argument("--readme", type=pathlib.Path, default=ROOT / "README.md")
    ap.add_argument("--performance", type=pathlib.Path, default=ROOT / "docs" / "performance.md")
    args = ap.parse_args()
    name = {"readme": shown(args.readme), "performance": shown(args.performance)}

    readme = args.readme.read_text(encoding="utf-8")
    text = quoted_text(readme)
    known = {(v, u) for v, u, _, _ in figures(args.performance.read_text(encoding="utf-8"))}
    quoted = figures(text)
    if not quoted:
        print(f"{name['readme']}: no figure found; the check would check nothing", file=sys.stderr)
        return 2
    missing = []
    for value, unit, written, at in quoted:
        line = text.count("\n", 0, at) + 1
        found = (value, unit) in known
        if args.list:
            print(f"{name['readme']}:{line}: {written!r} -> {value}{unit} {'found' if found else 'NOT FOUND'}")
        if not found:
            missing.append(f"{name['readme']}:{line}: {value}{unit} (written {written!r})")
    if missing:
        print(f"figures in {name['readme']} that {name['performance']} does not give (same number, same unit):",
              file=sys.stderr)
        for m in missing:
            print(f"  {m}", file=sys.stderr)
        return 1
    print(f"{name['readme']}: {len(quoted)} figures, each in {name['performance']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
