"""The study's verdicts before and after, row by row: this folder's run (fixed 350 updates, the earlier seed test)
beside its rerun in ../study (fine-tuned to convergence, paired tests with Holm's correction, a second test set).

    python results/study-fixed-350/compare_verdicts.py [--new results/study] > comparison.md

One line per comparison that both reports make (row against reference), with each side's difference of mean test
BLEU, interval and verdict, the rerun's on the second test set (the dev books), and what changed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent


def kind(verdict: str, delta: float) -> str:
    """A verdict as one of: decisive +, decisive -, not decisive, not a finding."""
    if verdict in ("decisive", "better", "worse"):
        return "decisive +" if delta > 0 else "decisive -"
    if "not a finding" in verdict:
        return "not a finding"
    return "not decisive"


def change(old: str, new: str) -> str:
    if "not a finding" in (old, new):
        return "no finding on one side"
    if old == new:
        return "same"
    if old.startswith("decisive") and new.startswith("decisive"):
        return "reversed"
    return "now decisive" if new.startswith("decisive") else "no longer decisive"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new", type=Path, default=HERE.parent / "study")
    args = parser.parse_args()
    old = pd.read_csv(HERE / "seed_comparisons.csv").rename(columns={"group": "row"})
    new = pd.read_csv(args.new / "seed_comparisons.csv")
    rows = pd.read_csv(args.new / "rows.csv").set_index("row")
    both = old.merge(new, on=["row", "against"], suffixes=("_old", "_new"))
    print("| row | against | 350 updates: delta [95%] (seeds) verdict | to convergence: delta [95%] (seeds, form) "
          "p_holm verdict | dev books: delta, verdict | change |")
    print("|---|---|---|---|---|---|")
    counts: dict[str, int] = {}
    for line in both.itertuples(index=False):
        was, now = kind(line.verdict_old, line.delta_old), kind(line.verdict_new, line.delta_new)
        what = change(was, now)
        counts[what] = counts.get(what, 0) + 1
        dev = ""
        column = f"delta_vs_{line.against} (dev books)"
        if column in rows.columns and pd.notna(rows.at[line.row, column]):
            delta = float(rows.at[line.row, column])
            dev = f"{delta:+.2f}, {kind(str(rows.at[line.row, f'verdict_vs_{line.against} (dev books)']), delta)}"
        print(f"| {line.row} | {line.against} | {line.delta_old:+.2f} [{line.ci_low_old:.2f}, {line.ci_high_old:.2f}] "
              f"({line.seeds_old}/{line.reference_seeds_old}) {was} | {line.delta_new:+.2f} [{line.ci_low_new:.2f}, "
              f"{line.ci_high_new:.2f}] ({line.seeds_new}/{line.reference_seeds_new}, {line.form}) "
              f"{line.p_holm:.4g} {now} | {dev} | {what} |")
    print()
    print(", ".join(f"{what}: {n}" for what, n in sorted(counts.items())) + f" (of {len(both)} comparisons)")


if __name__ == "__main__":
    main()
