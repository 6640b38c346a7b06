"""Every difference with its interval that README.md and docs/ quote (`+0.60 [0.20, 0.99]`) is one that a
committed report holds (a results/ folder's CSVs or report.md, the sign flipped where the prose says `A < B by`):
figures typed by hand from an older report fail here instead of going stale."""

import re
from functools import cache

import pytest

from tests.conftest import ROOT

INTERVAL = re.compile(r"([+\-−]?\d+\.\d+) \[([\-−]?\d+\.\d+), ([\-−]?\d+\.\d+)\]")


def _triples(text: str) -> set[tuple[float, float, float]]:
    out = set()
    for match in INTERVAL.finditer(text):
        delta, low, high = (round(float(x.replace("−", "-")), 2) for x in match.groups())
        out |= {(delta, low, high), (-delta, -high, -low)}
    return out


@cache
def committed() -> frozenset[tuple[float, float, float]]:
    """Every (difference, low, high) the committed reports hold: their CSV columns delta/ci_low/ci_high (and the
    second test set's) and every interval written out in their CSV cells and report.md."""
    import pandas as pd

    found: set[tuple[float, float, float]] = set()
    for path in sorted((ROOT / "results").rglob("*.csv")):
        if "cells" in path.relative_to(ROOT / "results").parts[1:-1]:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        found |= _triples(text)
        try:
            table = pd.read_csv(path)
        except (ValueError, UnicodeDecodeError):
            continue
        for suffix in ("", " (dev books)"):
            cols = [f"delta{suffix}", f"ci_low{suffix}", f"ci_high{suffix}"]
            if set(cols) <= set(table.columns):
                for row in table[cols].dropna().itertuples(index=False):
                    found |= _triples(f"{row[0]} [{row[1]}, {row[2]}]")
    for path in sorted((ROOT / "results").rglob("*.md")):
        found |= _triples(path.read_text(encoding="utf-8"))
    return frozenset(found)


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.relative_to(ROOT).as_posix()
                                                     for p in (ROOT / "docs").glob("*.md"))])
def test_every_quoted_interval_is_a_committed_report_s(doc):
    held = committed()
    quoted = []
    for number, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), start=1):
        quoted += [(number, m.group(0), t) for m in INTERVAL.finditer(line) for t in list(_triples(m.group(0)))[:1]]
    missing = [f"{doc}:{number}: {text}" for number, text, triple in quoted if triple not in held]
    assert not missing, "quoted but in no committed report:\n" + "\n".join(missing)
