"""Running DVC as a subprocess (argument lists only) and reading what it says about a stage."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flows.errors import FlowError, StageError
from vocabridge.fileio import atomic_file

BUSY = re.compile(r"is busy, it is being blocked by|Unable to acquire lock")
# DVC rewrites dvc.lock in place: a run killed at that moment (a session's end, an out-of-memory kill) leaves
# it empty, and every finished stage looks new. The flow keeps the last readable copy after each stage.
LOCK_BACKUP = Path(".dvc/tmp/dvc.lock.last-good")


def readable_lock(path: Path) -> bool:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and isinstance(data.get("stages"), dict)


def keep_lock(workspace: Path) -> None:
    """Copy dvc.lock to LOCK_BACKUP (atomically) when it reads as a lock file.

    Stages finish at once in the flow's threads, so each copy goes through a temporary file of its own
    (atomic_file): one shared name let a stage move another's copy away before that one's own move."""
    lock, backup = workspace / "dvc.lock", workspace / LOCK_BACKUP
    if not readable_lock(lock):
        return
    with atomic_file(backup, "wb", encoding=None) as out:
        out.write(lock.read_bytes())


def restore_lock(workspace: Path, log: Callable[[str], None] | None = None) -> bool:
    """Put the last readable dvc.lock back when the current one is empty or unreadable; True when it did.

    Safe in one direction only, the right one: a stage that finished after the copy has no entry (or an older
    one) in it, so DVC runs that stage again; none is skipped that should run."""
    lock, backup = workspace / "dvc.lock", workspace / LOCK_BACKUP
    if not lock.exists() or readable_lock(lock):
        return False
    if not readable_lock(backup):
        raise FlowError(f"{lock}: empty or unreadable (a run killed while DVC wrote it?) and no earlier copy in "
                        f"{LOCK_BACKUP}; take it from git (`git checkout dvc.lock`) or record the finished stages "
                        f"again with `dvc commit -f STAGE`")
    os.replace(lock, lock.with_name("dvc.lock.unreadable"))
    lock.write_bytes(backup.read_bytes())
    if log:
        log(f"{lock}: empty or unreadable; restored the copy kept after the last finished stage ({LOCK_BACKUP}); "
            f"the unreadable one is dvc.lock.unreadable")
    return True


def dvc_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Stages run with the flow's own interpreter first on PATH (their commands say `python -m stages...`)."""
    env = dict(os.environ) | (extra or {})
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("DVC_NO_ANALYTICS", "1")
    return env


def dvc(args: list[str], cwd: Path, log: Callable[[str], None] | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `dvc ARGS` in `cwd`; stream its output lines to `log` (tqdm's carriage-return updates collapsed)."""
    cmd = [sys.executable, "-m", "dvc", *args]
    proc = subprocess.Popen(cmd, cwd=cwd, env=dvc_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", bufsize=1)
    lines = []
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip("\n").split("\r")[-1].rstrip()
        if line:
            lines.append(line)
            if log:
                log(line)
    proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, "\n".join(lines), "")


def dvc_ok(args: list[str], cwd: Path) -> str:
    """Run a DVC command that must succeed; its stdout, or a one-line FlowError with DVC's own message."""
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=cwd, env=dvc_env(), capture_output=True,
                          text=True)
    if proc.returncode:
        raise FlowError(f"dvc {' '.join(args)}: {error_line(proc.stdout + proc.stderr)}")
    return proc.stdout


def git(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        raise FlowError(f"git {' '.join(args)}: {error_line(proc.stderr + proc.stdout)}")
    return proc.stdout


def up_to_date(stage: str, workspace: Path) -> bool:
    """Whether `dvc status` finds nothing to do for the stage itself (its upstream stages are the flow's business);
    False when DVC cannot say (a process writing the stage's outputs makes status busy too)."""
    return stage in nothing_to_do([stage], workspace)


def nothing_to_do(stages: list[str], workspace: Path) -> set[str]:
    """The stages among `stages` for which one `dvc status` finds nothing to do (each for itself: `Dag.skippable`
    keeps those whose upstream stages have nothing to do either); none when DVC cannot say (busy, or an error)."""
    if not stages:
        return set()
    proc = subprocess.run([sys.executable, "-m", "dvc", "status", "--json", *stages], cwd=workspace,
                          env=dvc_env(), capture_output=True, text=True)
    try:
        changed = json.loads(proc.stdout) if proc.returncode == 0 else None
    except json.JSONDecodeError:
        changed = None
    return {s for s in stages if s not in changed} if isinstance(changed, dict) else set()


def error_line(output: str) -> str:
    """The most telling line: the stage's own `error:` line, else DVC's `ERROR:` line, else the last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for prefix in ("error:", "ERROR:"):
        found = [ln for ln in lines if ln.startswith(prefix)]
        if found:
            return found[-1]
    return lines[-1] if lines else "no output"


@dataclass
class StageRun:
    """What `dvc repro --single-item` did with one stage."""

    stage: str
    outcome: str  # ran | up-to-date | restored (from DVC's run cache)
    seconds: float
    started: float
    attempts_waiting_for_lock: int = 0


def outcome(output: str, stage: str) -> str:
    if f"Running stage '{stage}'" in output:
        return "ran"
    if "is cached - skipping run" in output:
        return "restored"
    return "up-to-date"


def repro_stage(stage: str, workspace: Path, log: Callable[[str], None] | None = None, force: bool = False,
                pull: bool = False, lock_timeout: float = 600.0, threads: int | None = None) -> StageRun:
    """`dvc repro --single-item STAGE`: DVC decides whether it runs, is restored, or is already up to date.

    DVC releases the repository lock while a stage's command runs and takes it back to record the result, giving
    up after 3 s: with stages beside it hashing their outputs, a finished stage then failed and ran again from
    the start. `--wait-for-lock` makes DVC wait for that lock instead. Another DVC process writing the same
    outputs makes DVC refuse at once ("is busy"); we wait for it (polling) up to `lock_timeout` seconds of
    waiting, then fail with DVC's message. So does one that only reads them: a long stage downstream (a BERT
    reading the corpora for hours, run by another flow) holds a read lock that `repro` meets even when the stage
    has nothing to do; `dvc status`, which only reads, then tells an up-to-date stage, and we move on.
    """
    args = ["--wait-for-lock", "repro", "--single-item", *(["--force"] if force else []),
            *(["--pull"] if pull else []), stage]
    started = time.time()
    waited, waited_s = 0, 0.0
    while True:
        attempt = time.time()
        proc = dvc(args, workspace, log, env={"VOCABRIDGE_THREADS": str(threads)} if threads else None)
        if proc.returncode == 0:
            keep_lock(workspace)
            return StageRun(stage, outcome(proc.stdout, stage), time.time() - started, started, waited)
        if BUSY.search(proc.stdout) and not force and up_to_date(stage, workspace):
            return StageRun(stage, "up-to-date", time.time() - started, started, waited)
        if BUSY.search(proc.stdout) and waited_s < lock_timeout:
            waited += 1
            if log:
                log(f"{stage}: another DVC process holds the workspace lock; waiting")
            time.sleep(min(2.0 * waited, 15.0))
            waited_s += time.time() - attempt
            continue
        line = error_line(proc.stdout)
        if BUSY.search(proc.stdout):
            line = f"workspace busy for {lock_timeout:.0f} s: {line}"
        raise StageError(f"stage '{stage}' failed: {line}")
