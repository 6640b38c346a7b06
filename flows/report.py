"""The flow's result as Markdown: the `report` stage's table when the DAG has one, else the declared metrics."""

from __future__ import annotations

import json
from pathlib import Path

from flows.dag import Dag
from flows.dvcrun import StageRun, dvc_ok


def flatten(data: object, prefix: str = "") -> dict[str, object]:
    if isinstance(data, dict):
        out: dict[str, object] = {}
        for key, value in data.items():
            out |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    return {prefix: data}


def report_table(dag: Dag, workspace: Path) -> str | None:
    """The first Markdown file among the outputs of a stage named `report` (the table over every row and seed)."""
    stage = dag.stages.get("report")
    if stage is None:
        return None
    for out in stage.outs:
        path = workspace / out
        files = sorted(path.rglob("*.md")) if path.is_dir() else [path] if path.suffix == ".md" else []
        for file in files:
            if file.is_file():
                return file.read_text(encoding="utf-8").strip()
    return None


def metrics_table(workspace: Path, paths: list[str]) -> str:
    """`dvc metrics show --json` for the metrics files of the stages that ran, as one Markdown table."""
    if not paths:
        return "_no metrics declared by the stages that ran_"
    shown = json.loads(dvc_ok(["metrics", "show", "--json", *paths], workspace) or "{}")
    rows = ["| metrics file | metric | value |", "|---|---|---|"]
    for rev in shown.values():
        for path, entry in sorted(rev.get("data", {}).items()):
            for key, value in flatten(entry.get("data", {})).items():
                rows.append(f"| {path} | {key} | {value} |")
    return "\n".join(rows)


def stages_table(runs: list[StageRun], failed: dict[str, str], not_run: list[str]) -> str:
    rows = ["| stage | outcome | seconds |", "|---|---|---|"]
    rows += [f"| {r.stage} | {r.outcome} | {r.seconds:.1f} |" for r in runs]
    rows += [f"| {name} | failed: {message} |  |" for name, message in failed.items()]
    rows += [f"| {name} | not run (upstream failed) |  |" for name in not_run]
    return "\n".join(rows)


def markdown(dag: Dag, workspace: Path, runs: list[StageRun], title: str) -> str:
    table = report_table(dag, workspace)
    if table is None:
        reports = [p for s in dag.stages.values() for p in s.reports if (workspace / p).exists()]
        table = metrics_table(workspace, reports)
    return f"## {title}\n\n{table}\n\n### Stages\n\n{stages_table(runs, {}, [])}\n"
