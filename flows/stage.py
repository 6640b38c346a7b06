"""One DVC stage in a workspace of its own, for a worker of another work pool (another process or machine).

The worker clones the project's commit, takes the coordinator's params.yaml and dvc.lock, pulls the stage's
inputs from the DVC remote (`dvc repro --pull`), runs the stage, and pushes its outputs and run-cache entry.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict
from pathlib import Path

from prefect import flow, get_run_logger

from flows.dvcrun import dvc_ok, git, repro_stage
from flows.errors import FlowError


@flow(name="vocabridge-stage")
def stage_elsewhere(stage: str, git_url: str, rev: str, files: dict[str, str], remote_url: str,
                    workdir: str | None = None) -> dict:
    """Run `stage` of commit `rev` with the coordinator's `files` (params.yaml, dvc.lock) in a fresh clone."""
    logger = get_run_logger()
    with tempfile.TemporaryDirectory(prefix="vocabridge-stage-", dir=workdir) as tmp:
        ws = Path(tmp) / "workspace"
        git(["clone", "--quiet", git_url, str(ws)], Path(tmp))
        git(["checkout", "--quiet", "--detach", rev], ws)
        for name, text in files.items():
            if Path(name).name != name:
                raise FlowError(f"files: {name!r} must be a file name at the project's root")
            (ws / name).write_text(text, encoding="utf-8")
        dvc_ok(["remote", "add", "--local", "--default", "--force", "flows", remote_url], ws)
        run = repro_stage(stage, ws, log=logger.info, pull=True)
        dvc_ok(["push", "--run-cache", stage], ws)
        logger.info("%s: %s in %.1f s, outputs pushed to %s", stage, run.outcome, run.seconds, remote_url)
        return asdict(run)
