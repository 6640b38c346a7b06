"""README, CONTRIBUTING and docs/ name only what the tree holds: every repository path they spell out exists, and
every file or folder README's Layout names is in the folder it is listed under."""

from __future__ import annotations

import re

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("vocabridge/", "stages/", "flows/", "benchmarks/", "tests/", "results/", "profiles/", "docs/", ".ci/",
       "corpora/")
# Paths the docs spell that are not files of the tree, and why.
NOT_FILES = {
    "vocabridge/full": "a Prefect deployment's name (flow/deployment)",
    "vocabridge/one-row": "a Prefect deployment's name",
    "corpora/downstream/": "a user's own files, named as an example of where they go",
    "corpora/DOMAIN/": "a placeholder",
    "results/size-all": "the size study's largest size, to be run (docs/profiles.md says so)",
}
PLACEHOLDER = re.compile(r"[A-Z]{3,}|\*")  # ROW, NAME, PROFILE, SEED, globs


def named_paths(text: str) -> list[str]:
    pattern = r"(?<![\w./-])((?:" + "|".join(re.escape(t) for t in TOP) + r")[\w./*-]*)"
    return [m.group(1).rstrip(".,;:)") for m in re.finditer(pattern, text)]


def test_every_path_the_docs_name_exists():
    missing = []
    for doc in DOCS:
        for path in named_paths(doc.read_text(encoding="utf-8")):
            if PLACEHOLDER.search(path) or any(path.startswith(p) for p in NOT_FILES):
                continue
            if not (ROOT / path).exists():
                missing.append(f"{doc.relative_to(ROOT)}: {path}")
    assert not missing, "\n".join(missing)


def test_the_layout_names_what_each_folder_holds():
    """README's Layout block: a line `folder/  what it holds: name.py (...), sub/ (...)` names files and folders
    of that folder (at any depth below it), or of the project's root (flows/'s prefect.yaml)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    missing, checked, folder = [], 0, None
    for line in block.splitlines():
        head = re.match(r"^([\w.]+/)\s", line)
        if head:
            folder = ROOT / head.group(1)
        if folder is None or not folder.is_dir():
            continue
        for name in re.findall(r"(?<![\w./`-])([a-z_][\w]*(?:\.py|\.yaml|/))(?=[\s,(:;)])", line[len(head.group(0))
                                                                                               if head else 0:]):
            found = name.rstrip("/")
            checked += 1
            if not (ROOT / found).exists() and not any(p.name == found for p in folder.rglob(found)):
                missing.append(f"{folder.relative_to(ROOT)}/: {name}")
    assert checked > 30  # the block was read
    assert not missing, "README's Layout names what its folder lacks:\n" + "\n".join(missing)
