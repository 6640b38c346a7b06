import subprocess
import sys

from tests.conftest import ROOT


def test_code_is_ruff_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "vocabridge", "stages", "tests"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def imports_of(folder: str, banned: tuple[str, ...]) -> list[str]:
    """Every import (at any depth, inside functions too) under `folder` of a top-level package in `banned`."""
    import ast

    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names
                      if name.split(".")[0] in banned]
    return found


def test_the_library_imports_no_pipeline():
    """vocabridge/ is the library: no DVC or Prefect inside, and none of the pipeline's flows/ or stages/ (README's
    layout); the workspace's commands that need them (`estimate`, `results`) run flows/workspace.py."""
    found = imports_of("vocabridge", ("flows", "stages", "dvc", "prefect"))
    assert not found, "\n".join(found)


def test_the_flows_use_no_stage_module():
    """flows/ runs the stages as processes (`dvc repro`) and reads the workspace through the library
    (vocabridge.workspace, vocabridge.rows), never a stage's module."""
    found = imports_of("flows", ("stages",))
    assert not found, "\n".join(found)
