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


def project_imports() -> dict[str, set[str]]:
    """Each module of vocabridge/, flows/ and stages/ and the project modules it imports, at any depth (inside
    functions too, where a circle hides; not under `if TYPE_CHECKING:`). A submodule's import of its own package
    (`vocabridge.transfer.focus_ref` -> `vocabridge.transfer`) is the package's layout, not a circle, and left out."""
    import ast

    modules = {}
    for package in ("vocabridge", "flows", "stages"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(node.test) for sub in ast.walk(node)}
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
                full = ".".join(p for p in (base, node.module or "") if p)
                names = [full, *(f"{full}.{a.name}" for a in node.names)]
            else:
                continue
            found |= {m for n in names if (m := known(n)) and m != module and not module.startswith(m + ".")}
        graph[module] = found
    return graph


def test_no_import_circle():
    """No two modules import each other, directly or round a loop (an import inside a function counts: it only
    hides the circle)."""
    import networkx as nx

    graph = nx.DiGraph([(a, b) for a, targets in project_imports().items() for b in targets])
    circles = [" -> ".join([*c, c[0]]) for c in nx.simple_cycles(graph)]
    assert not circles, "\n".join(circles)


def test_the_training_loop_imports_no_model_family():
    """vocabridge/training.py serves translation, masked-LM and generator training: it imports none of them."""
    families = ("vocabridge.nmt", "vocabridge.plm", "vocabridge.transfer", "vocabridge.family_models",
                "vocabridge.architectures")
    found = sorted(m for m in project_imports()["vocabridge.training"] if m.startswith(families))
    assert not found, found


def test_every_data_path_is_spelled_in_one_module():
    """The workspace's layout (data/...) is written in vocabridge/workspace.py only (and in dvc.yaml, which
    tests/test_dvc_deps.py holds to it): no other module of the library, the stages or the flows spells one, as a
    string or as a path joined from `"data"` (the package's own vocabridge/data, beside `__file__`, is not it)."""
    import ast

    found = []
    for package in ("vocabridge", "flows", "stages"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "vocabridge" / "workspace.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                spelt = isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.startswith("data/")
                joined = isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and \
                    isinstance(node.right, ast.Constant) and node.right.value == "data" and \
                    "__file__" not in ast.unparse(node.left)
                if spelt or joined:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)
