"""Stage mismatch: how the pretrained (upstream) vocabulary fits the downstream domain's test set.

Writes data/reports/mismatch.json (a DVC metrics file): unseen pieces, unseen-token rate, fertility.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from vocabridge import workspace as paths
from vocabridge.config import LANGS
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.fileio import write_json
from vocabridge.tokenizers import load_spm, mismatch


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=paths.REPORTS / "mismatch.json")
    args = parser.parse_args(argv)
    report = {}
    for code in LANGS:
        old = load_spm(paths.SPM / "upstream" / f"{code}.model")
        new = load_spm(paths.SPM / "downstream" / f"{code}.model")
        report[code] = mismatch(old, new, read_text_lines(paths.CORPORA / "downstream" / f"test.{code}"))
    write_json(args.out, report)
    table = pd.json_normalize([{"lang": c, **r} for c, r in report.items()]).set_index("lang").T
    print(table.astype(object).to_string())


if __name__ == "__main__":
    run(main)
