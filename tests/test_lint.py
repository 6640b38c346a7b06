import subprocess
import sys

from tests.conftest import ROOT


def test_code_is_ruff_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "vocabridge", "stages", "tests"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
