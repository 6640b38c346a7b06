"""Helpers for the flow tests: a quiet Prefect home, project copies with flows/, a real Prefect server."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.conftest import ROOT, project_env

PREFECT_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "PREFECT_LOGGING_LEVEL": "INFO",
}


@functools.cache
def quiet_prefect_home() -> Path:
    """Point this process's Prefect at a fresh home (its SQLite database), once: conftest calls it before any test
    module is imported, because Prefect reads its home when it is first imported (test_estimate imports it through
    flows), and a flow test on the user's ~/.prefect shares its database with any flow the user is running."""
    home = Path(tempfile.mkdtemp(prefix="vocabridge-prefect-"))
    os.environ.update(PREFECT_ENV, PREFECT_HOME=str(home))
    os.environ.pop("PREFECT_API_URL", None)
    return home


def prefect_env(home: Path, api_url: str | None = None) -> dict[str, str]:
    env = project_env() | PREFECT_ENV | {"PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def add_flows(project: Path) -> Path:
    """Put this checkout's flows/ and prefect.yaml into a project copy and commit them (workers clone it)."""
    shutil.copytree(ROOT / "flows", project / "flows", ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    shutil.copy2(ROOT / "prefect.yaml", project / "prefect.yaml")
    for cmd in (["git", "add", "flows", "prefect.yaml"], ["git", "commit", "-qm", "flows"]):
        subprocess.run(cmd, cwd=project, check=True, env=project_env())
    return project


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """A background process in its own process group, its output in `log`."""
    handle = open(log, "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """Stop a process started by `start` and its children (its own process group only)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"prefect server not healthy after {timeout} s: {log.read_text()[-2000:]}")


def prefect_cli(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prefect", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def stage_table(markdown: str) -> dict[str, str]:
    """{stage: outcome} from the flow's Markdown result."""
    part = markdown.split("### Stages", 1)[1]
    rows = [ln.strip("|").split("|") for ln in part.splitlines() if ln.startswith("| ") and "---" not in ln]
    return {cells[0].strip(): cells[1].strip() for cells in rows[1:]}



def task_runs(state) -> dict:
    """The task runs of a finished flow run, by name (a stage's first run where the flow ran it again), as the
    Prefect server recorded them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import TaskRunSort

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[
            state.state_details.flow_run_id])), sort=TaskRunSort.EXPECTED_START_TIME_ASC, limit=200)
    first: dict = {}
    for r in runs:
        first.setdefault(r.name, r)
    return first


def flow_artifacts(flow_run_id) -> tuple[tuple[str, str, str], ...]:
    """The artifacts a flow run published, as the Prefect server recorded them: (key, type, data), oldest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
            any_=[flow_run_id])), sort=ArtifactSort.CREATED_DESC, limit=50)
    return tuple((a.key, a.type, a.data) for a in reversed(found))
