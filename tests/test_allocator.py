"""Training processes restart on TCMalloc where it is installed (glibc's heap grows without bound under the
varying batch shapes of masked-LM pretraining), once, with their arguments; `$VOCABRIDGE_ALLOCATOR` chooses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vocabridge.allocator import find_tcmalloc

ROOT = Path(__file__).resolve().parents[1]
PROBE = ("from vocabridge import allocator; allocator.reexec(); import os; "
         "print(allocator.current(), os.environ.get('VOCABRIDGE_ALLOCATOR_STARTED'))")
needs_tcmalloc = pytest.mark.skipif(find_tcmalloc() is None or not sys.platform.startswith("linux"),
                                    reason="TCMalloc not installed (Debian: libtcmalloc-minimal4)")


def run(args: list[str], allocator: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VOCABRIDGE_ALLOCATOR")}
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**environ, "VOCABRIDGE_ALLOCATOR": allocator, **env})


@needs_tcmalloc
def test_auto_restarts_the_process_once_on_tcmalloc():
    done = run(["-c", PROBE], "auto")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tcmalloc", "1"]


def test_system_keeps_the_c_library_allocator():
    done = run(["-c", PROBE], "system")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["system", "None"]


def test_a_missing_library_is_a_one_line_error():
    done = run(["-c", PROBE], "/no/such/libmalloc.so")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: $VOCABRIDGE_ALLOCATOR: /no/such/libmalloc.so is not a file (auto, system, or a malloc library's path)"]


@needs_tcmalloc
@pytest.mark.parametrize("command", [["-m", "stages.row", "--help"], ["-m", "vocabridge.cli", "--help"]],
                         ids=["stage", "cli"])
@pytest.mark.slow
def test_stages_and_the_command_line_start_on_tcmalloc_with_their_arguments(command):
    done = run(command, "auto", LD_DEBUG="files")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
    assert "libtcmalloc" in done.stderr  # the dynamic loader's record of what it loaded
    assert "libtcmalloc" not in run(command, "system", LD_DEBUG="files").stderr


def test_a_failing_stage_keeps_its_exit_status_and_message_after_the_restart(tmp_path):
    done = run(["-m", "stages.row", "no-such-row", "--params", str(tmp_path / "params.yaml")], "auto")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("error:")
