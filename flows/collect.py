"""Collect finished experiments (sweeps, `-S` runs, `dvc exp run`) into one table and one plot.

    python -m flows.collect                       # every experiment of HEAD that has a report
    python -m flows.collect --experiments k-1 k-5 k-10 k-20

Each experiment's params come from `dvc exp show` (DVC's own record) and its results from the report stage's
`report.csv` as that experiment left it in the DVC cache (`dvc.api.open` at the experiment's revision), so
nothing is recomputed. The workspace itself comes first (`workspace`). Writes
data/reports/experiments/{experiments.csv,experiments.md,bleu.png}: one line per experiment and row of the grid
with the params in which the experiment differs from the workspace (`dvc exp run -S rows.va-llm.k=5` changes
`rows.va-llm.k`, and only va-llm's cells ran again in it; `-S 'seeds=[1,2,3,4]'` adds the fourth seed's cells).
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import pandas as pd

from flows.errors import FlowError
from vocabridge.workspace import REPORTS, RESULTS_REPORT

REPORT = (RESULTS_REPORT / "report.csv").as_posix()
OUT = REPORTS / "experiments"
RESULTS = ["bleu", "bleu_ci", "chrf", "delta_bleu", "p_value", "dev_bleu_auc", "zero_shot_dev_ppl"]
GRID = ("rows", "seeds", "generators")  # params keys an experiment may add to (a knob params.yaml leaves out)


def _params(entry: dict, known: set[str]) -> dict:
    """The params of an `exp_show` entry: its columns that name a key of params.yaml (DVC prefixes them with the
    file's name only where a name is ambiguous)."""
    out = {}
    for column, value in entry.items():
        key = column.split(":", 1)[1] if column.startswith("params.yaml:") else column
        if key in known or key.split(".", 1)[0] in GRID:
            out[key] = value
    return out


def _show(value) -> str:
    """A param value as params.yaml would say it (exp_show hands numbers back as floats: 50 -> 50.0)."""
    if value is None:  # a key the experiment lacks (a row its profile's rows do not have)
        return "-"
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _rows(report: pd.DataFrame) -> pd.DataFrame:
    """The report's lines of the grid's rows (not the published figures beside them), its row column as `row`
    (`method` in reports written before the grid)."""
    if "source" in report:
        report = report[report["source"] == "vocabridge"]
    if "row" not in report and "method" in report:
        report = report.rename(columns={"method": "row"})
    if "row" not in report:
        raise FlowError(f"{REPORT}: no row column (columns: {', '.join(report.columns)})")
    return report


def collect(workspace: Path, names: list[str] | None = None) -> pd.DataFrame:
    """One line per (experiment, row): what the experiment changed, and its report's results."""
    import dvc.api
    import yaml

    from vocabridge.config import flatten

    known = set(flatten(yaml.safe_load((workspace / "params.yaml").read_text(encoding="utf-8")) or {}))
    shown = dvc.api.exp_show(repo=str(workspace))
    base = next((r for r in shown if r.get("Experiment") in (None, "") and r.get("rev") == "workspace"), None)
    if base is None:
        raise FlowError(f"{workspace}: dvc exp show lists no workspace")
    experiments = {r["Experiment"] for r in shown if r.get("Experiment")}
    missing = sorted(set(names or []) - experiments)
    if missing:
        raise FlowError(f"no experiment named {', '.join(missing)} (known: {', '.join(sorted(experiments)) or 'none'})")
    frames = []
    for entry in [base, *[r for r in shown if r.get("Experiment") and (not names or r["Experiment"] in names)]]:
        name = entry.get("Experiment") or "workspace"
        rev = None if name == "workspace" else entry["rev"]
        try:
            with dvc.api.open(REPORT, repo=str(workspace), rev=rev, encoding="utf-8") as handle:
                report = pd.read_csv(io.StringIO(handle.read()))
        except Exception:  # an experiment that stopped before the report stage (e.g. --targets mismatch)
            continue
        params, before = _params(entry, known), _params(base, known)
        changed = {k: v for k, v in params.items() if v != before.get(k)} if rev else {}
        ours = _rows(report)
        frames.append(ours[["row", *[c for c in RESULTS if c in ours]]].assign(
            experiment=name, changed=", ".join(f"{k}={_show(v)}" for k, v in sorted(changed.items())) or "(workspace)"))
    if not frames:
        raise FlowError(f"{workspace}: no experiment has {REPORT}; run the whole DAG in them (not --targets)")
    table = pd.concat(frames, ignore_index=True)
    return table[["experiment", "changed", "row", *[c for c in RESULTS if c in table]]]


def write(table: pd.DataFrame, out: Path) -> None:
    """CSV, a Markdown pivot of BLEU (experiments x rows) and a grouped bar plot, written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vocabridge.fileio import atomic_dir
    from vocabridge.report import to_markdown

    label = table["experiment"] + ": " + table["changed"]
    pivot = table.assign(run=label).pivot_table(index="run", columns="row", values="bleu", sort=False)
    with atomic_dir(out) as tmp:
        table.to_csv(tmp / "experiments.csv", index=False)
        (tmp / "experiments.md").write_text("BLEU per experiment and row\n\n"
                                            + to_markdown(pivot.reset_index()), encoding="utf-8")
        fig, ax = plt.subplots(figsize=(max(6, 0.6 * pivot.size + 2), 4), dpi=120)
        pivot.T.plot.bar(ax=ax, rot=30)
        ax.set_ylabel("test BLEU")
        ax.set_title("Experiments")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(tmp / "bleu.png")
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.collect", description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default=".")
    parser.add_argument("--experiments", nargs="+", help="names (default: every experiment of HEAD)")
    parser.add_argument("--out", default=str(OUT), help="output folder, relative to the workspace")
    args = parser.parse_args(argv)
    ws = Path(args.workspace).resolve()
    try:
        table = collect(ws, args.experiments)
    except FlowError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    write(table, ws / args.out)
    from vocabridge.report import to_markdown

    print(to_markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
