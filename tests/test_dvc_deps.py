"""No stale results: every stage in dvc.yaml depends on every project module its command imports, transitively.

A stage `python -m stages.X ...` runs stages/X.py and whatever project modules (stages.*, vocabridge.*) that
imports, at module level or inside functions; an edit to any of them must make `dvc status` report the stage
changed. A dep covers a module when it is the module's file or a folder that contains it. A module that executes
nothing (a docstring at most, like most package __init__.py files here) cannot change a result and is not
required; once code is added to it, it is. Nor are the modules of `PROCESS_ONLY`, which choose how the process
runs (its memory allocator), not what it computes: a dep on them would make every stage stale at each edit.
"""

from __future__ import annotations

import ast
import copy
import shlex
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("stages", "vocabridge")
PROCESS_ONLY = {"stages/__init__.py", "vocabridge/allocator.py"}  # the restart on TCMalloc; outputs the same


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file of project module `name` (a package means its __init__.py), relative to root; None if not ours."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = Path(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


def _with_parents(name: str) -> list[str]:
    """`import a.b.c` runs a, a.b and a.b.c."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


@cache
def direct_imports(name: str, root: Path = ROOT) -> frozenset[str]:
    """Project modules that module `name` imports anywhere in its body (functions included; not what an
    `if TYPE_CHECKING:` block imports for annotations)."""
    path = module_file(name, root)
    tree = ast.parse((root / path).read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for guarded in [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]:
        guarded.body = []  # `if TYPE_CHECKING:` imports never run: annotations only
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.update(_with_parents(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module
            found.update(_with_parents(base))
            # `from vocabridge.corpora import bible` imports the submodule vocabridge.corpora.bible
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return frozenset(m for m in found if module_file(m, root) is not None)


def imported_modules(entry: str, root: Path = ROOT) -> set[str]:
    """The transitive closure of project modules that `python -m entry` runs (entry and its packages included)."""
    seen: set[str] = set()
    todo = [m for m in _with_parents(entry) if module_file(m, root) is not None]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(direct_imports(name, root) - seen)
    return seen


def imported_files(entry: str, root: Path = ROOT) -> set[str]:
    return {module_file(m, root).as_posix() for m in imported_modules(entry, root)}


def executes_nothing(path: Path) -> bool:
    """True for a module whose body is at most a docstring and `from __future__` imports."""
    def inert(node: ast.stmt) -> bool:
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
            and isinstance(node.value.value, str)
        return docstring or (isinstance(node, ast.ImportFrom) and node.module == "__future__")

    return all(map(inert, ast.parse(path.read_text(encoding="utf-8")).body))


def entry_module(cmd: str) -> str | None:
    """`python -m stages.X ...` -> stages.X; None for a command of another form."""
    args = shlex.split(cmd)
    if len(args) >= 3 and Path(args[0]).name.startswith("python") and args[1] == "-m":
        return args[2]
    return None


def _norm(path: str) -> str:
    return Path(path).as_posix().removeprefix("./").rstrip("/")


def covered(path: Path, deps: list[str]) -> bool:
    target = path.as_posix()
    return any(target == dep or target.startswith(dep + "/") for dep in map(_norm, deps))


def missing_deps(stages: dict[str, dict], root: Path = ROOT) -> dict[str, list[str]]:
    """{stage: [module files its command imports that no dep covers]} for every stage with a gap.

    `stages` is dvc.yaml's `stages` with foreach/matrix expanded (name -> definition with `cmd` and `deps`).
    A command that is not `python -m MODULE` is reported as such, since its imports cannot be checked.
    """
    gaps: dict[str, list[str]] = {}
    for stage, definition in stages.items():
        cmd = definition.get("cmd")
        cmd = " && ".join(cmd) if isinstance(cmd, list) else cmd
        entry = entry_module(cmd or "")
        if entry is None or module_file(entry, root) is None:
            gaps[stage] = [f"cannot check the command {cmd!r} (expected `python -m stages.NAME ...`)"]
            continue
        deps = definition.get("deps") or []
        files = {module_file(m, root) for m in imported_modules(entry, root)}
        missing = sorted(f.as_posix() for f in files if not covered(f, deps) and not executes_nothing(root / f)
                         and f.as_posix() not in PROCESS_ONLY)
        if missing:
            gaps[stage] = missing
    return gaps


def resolved_stages(root: Path = ROOT) -> dict[str, dict]:
    """dvc.yaml's stages as DVC resolves them: foreach/matrix expanded, ${...} interpolated from params.yaml."""
    from dvc.parsing import DataResolver
    from dvc.repo import Repo

    definition = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))
    with Repo(str(root)) as repo:
        return DataResolver(repo, str(root), definition).resolve()["stages"]


def describe(gaps: dict[str, list[str]]) -> str:
    """One line per stage, or per foreach group (transfer@*) whose stages miss the same modules."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for stage, paths in gaps.items():
        groups.setdefault((stage.partition("@")[0], tuple(paths)), []).append(stage)
    lines = []
    for (base, paths), names in sorted(groups.items()):
        name = names[0] if len(names) == 1 else f"{base}@* ({len(names)} stages)"
        lines.append(f"  {name}: {', '.join(paths)}")
    return "dvc.yaml: stages whose deps miss modules their command imports (add the file or its folder):\n" + \
        "\n".join(lines)


def test_every_stage_depends_on_the_modules_it_imports():
    stages = resolved_stages()
    assert {"prepare@upstream", "prepare@downstream", "pretrain", "report"} <= set(stages)
    gaps = missing_deps(stages)
    assert not gaps, describe(gaps)


def templates(root: Path = ROOT) -> dict[str, dict]:
    """dvc.yaml's stages as written: a foreach stage's `do`, a matrix stage as it is. Their commands name their
    modules and their deps list module files literally, so this covers the stages of every profile, those the
    default params resolve to nothing (plm, abnet, upstream, backtranslate) included."""
    stages = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return {name: stage.get("do", stage) for name, stage in stages.items()}


def test_every_stage_of_every_profile_depends_on_the_modules_it_imports():
    stages = templates()
    assert {"plm", "abnet", "upstream", "backtranslate", "transfer"} <= set(stages)
    gaps = missing_deps(stages)
    assert not gaps, describe(gaps)
    for name in ("plm", "abnet"):  # vocabridge.plm.bert imports the tokenizers inside a function
        stages[name]["deps"] = [d for d in stages[name]["deps"] if d != "vocabridge/tokenizers.py"]
    assert missing_deps(stages) == {"plm": ["vocabridge/tokenizers.py"], "abnet": ["vocabridge/tokenizers.py"]}


def test_the_check_reports_a_removed_dep():
    stages = copy.deepcopy(resolved_stages())
    assert "vocabridge/fileio.py" in imported_files("stages.cbow")
    stages["cbow"]["deps"] = [d for d in stages["cbow"]["deps"] if _norm(d) != "vocabridge/fileio.py"]
    assert missing_deps(stages) == {"cbow": ["vocabridge/fileio.py"]}
    # a folder dep stands for every module in it
    stages = copy.deepcopy(resolved_stages())
    stages["pretrain"]["deps"].remove("vocabridge/nmt")
    nmt = {f for f in imported_files("stages.pretrain") if f.startswith("vocabridge/nmt/")}
    assert missing_deps(stages) == {"pretrain": sorted(nmt - {"vocabridge/nmt/__init__.py"})}  # that one is inert
    assert "vocabridge/nmt/train.py" in nmt


def test_imports_are_followed_through_functions_and_submodules(tmp_path):
    (tmp_path / "stages").mkdir()
    (tmp_path / "vocabridge" / "pkg").mkdir(parents=True)
    (tmp_path / "stages" / "__init__.py").write_text('"""Entry points."""\n')
    (tmp_path / "vocabridge" / "__init__.py").write_text('"""Library."""\n')
    (tmp_path / "vocabridge" / "pkg" / "__init__.py").write_text("X = 1\n")
    (tmp_path / "vocabridge" / "pkg" / "sub.py").write_text("from . import leaf\n")
    (tmp_path / "vocabridge" / "pkg" / "leaf.py").write_text("import json\n")
    (tmp_path / "vocabridge" / "late.py").write_text("Y = 2\n")
    (tmp_path / "vocabridge" / "inert.py").write_text('"""Nothing runs here."""\n')
    (tmp_path / "stages" / "s.py").write_text(
        "from vocabridge.pkg import sub\n\ndef main():\n    import vocabridge.late\n    import vocabridge.inert\n")
    stages = {"s": {"cmd": "python -m stages.s", "deps": ["stages/s.py"]}}
    assert missing_deps(stages, tmp_path) == {"s": ["vocabridge/late.py", "vocabridge/pkg/__init__.py",
                                                    "vocabridge/pkg/leaf.py", "vocabridge/pkg/sub.py"]}
    stages["s"]["deps"] += ["vocabridge/pkg/", "./vocabridge/late.py"]
    assert missing_deps(stages, tmp_path) == {}
    assert missing_deps({"t": {"cmd": "bash run.sh", "deps": []}}, tmp_path) == {
        "t": ["cannot check the command 'bash run.sh' (expected `python -m stages.NAME ...`)"]}


def test_every_param_a_stage_names_is_in_params_yaml():
    """DVC refuses a stage whose `params:` key params.yaml lacks, so every section must be there with defaults."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    params = yaml.safe_load((root / "params.yaml").read_text())
    for name, stage in stages.items():
        stage = stage.get("do", stage)
        for key in stage.get("params", []):
            if isinstance(key, str) and "${" not in key:
                node = params
                for part in key.split("."):
                    assert isinstance(node, dict) and part in node, f"dvc.yaml: {name}: params.yaml lacks '{key}'"
                    node = node[part]


# Settings a stage's module reads that its dvc.yaml `params:` may leave out, and why: `compute` chooses how a stage
# runs (threads, device), not what it computes; the others are read on a path another stage runs, or only stamped.
PARAMS_EXEMPT = {
    "*": {"compute": "how, not what (threads, device)"},
    "pretrain": {"upstreams": "stages.pretrain NAME: the upstream stage's path, which lists upstreams and spm",
                 "spm": "the same", "finetune.train_pairs": "the same (mix_downstream)"},
    "finetune": {"backtranslation.upstream": "named in an error message only"},
    "evaluate": {"finetune.train_pairs": "stamped into the record; the fine-tune it names is a dep",
                 "profile": "stamped: the study's name"},
}


def params_read(module: Path) -> set[str]:
    """The longest `params.a.b...` chains a stage module spells out (a dict's .get is its parent's)."""
    chains = set()
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        parts, value = [], node
        while isinstance(value, ast.Attribute):
            parts.append(value.attr)
            value = value.value
        if parts and isinstance(value, ast.Name) and value.id == "params":
            chains.add(".".join(part for part in reversed(parts) if part != "get"))
    return {c for c in chains if not any(other.startswith(c + ".") for other in chains)}


# Library modules that read settings on a stage's behalf (the stage hands them `params`): a stage that imports one
# reads what it reads.
PARAMS_READERS = {"vocabridge.family_models": "vocabridge/family_models.py"}


def readers_imported(module: Path) -> list[str]:
    """The PARAMS_READERS files a stage module imports."""
    found = []
    for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module in PARAMS_READERS:
            found.append(PARAMS_READERS[node.module])
    return found


def unlisted_params(stages: dict, root: Path = ROOT) -> dict[str, list[str]]:
    """{stage: [settings its module reads that none of its params keys covers]} (a key covers itself, what lies
    under it, and a section that holds it: passing `params.abnet` along to a stage listing abnet.x is not flagged)."""
    gaps = {}
    for stage, definition in stages.items():
        definition = definition.get("do", definition)
        entry = entry_module(definition.get("cmd") or "")
        if entry is None:
            continue
        keys = [str(key).replace("${key}", "*").replace("${item.row}", "*") for key in definition.get("params", [])]
        exempt = PARAMS_EXEMPT["*"] | PARAMS_EXEMPT.get(stage, {})
        module = root / module_file(entry, root)
        read = params_read(module).union(*(params_read(root / reader) for reader in readers_imported(module)))
        missing = sorted(chain for chain in read
                         if not any(chain == key or chain.startswith(key + ".") or key.startswith(chain + ".")
                                    or chain.startswith(key.removesuffix(".*") + ".") for key in keys)
                         and not any(chain == e or chain.startswith(e + ".") for e in exempt))
        if missing:
            gaps[stage] = missing
    return gaps


def test_every_stage_lists_the_settings_its_module_reads():
    """An edit to a setting a stage reads must make `dvc status` report it changed: a fine-tune that read
    abnet.dev_decoding (its dev BLEU, patience) while listing abnet.decoding (the test set's) was never rerun by the
    one and always by the other."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    assert unlisted_params(stages) == {}
    stages["finetune"]["params"] = [key for key in stages["finetune"]["params"] if key != "abnet.dev_decoding"]
    assert unlisted_params(stages) == {"finetune": ["abnet.dev_decoding"]}
