"""Users' own corpora: two aligned plain-text files or one TSV, checked line by line."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vocabridge.config import LANGS, FileSpec, Lang, UserFiles
from vocabridge.errors import ConfigError, InputError

# The user's own files for domain D live in corpora/D/, a dependency of prepare@D in dvc.yaml: DVC hashes the
# folder, so adding, changing or removing a file there makes `dvc status` report the stage and `dvc repro`
# rerun it (DVC cannot take a dependency list from params.yaml).
USER_CORPORA = Path("corpora")


def named_files(files: UserFiles, key: str) -> list[tuple[str, str]]:
    """(params key, path) of every file that `files` names."""
    out = []
    for split in ("train", "dev", "test", "second_test"):
        for i, spec in enumerate(getattr(files, split)):
            out.extend((f"{key}.files.{split}[{i}].{name}", path)
                       for name in ("src", "tgt", "tsv", "docs") if (path := getattr(spec, name)))
    for code, paths in files.mono.items():
        out.extend((f"{key}.files.mono.{code}[{i}]", path) for i, path in enumerate(paths))
    return out


def check_inside(files: UserFiles, folder: Path, key: str, stage: str) -> None:
    """Every file that `files` names must lie in `folder`, the stage's dependency, or its changes would go
    unnoticed."""
    root = os.path.abspath(folder)
    for name, path in named_files(files, key):
        if os.path.commonpath([os.path.abspath(path), root]) != root:
            raise ConfigError(f"{name}: {path} lies outside {folder.as_posix()}/, the folder {stage} depends on "
                              f"(dvc.yaml); move it there so that changing it reruns {stage}")


def read_text_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 file, without line ends; errors name the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    raw = path.read_bytes()
    if not raw.strip():
        raise InputError(f"{path}: file is empty")
    lines = raw.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    out = []
    for number, line in enumerate(lines, start=1):
        try:
            out.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as err:
            raise InputError(f"{path}:{number}: not UTF-8 (byte {line[err.start]:#04x} at column "
                             f"{err.start + 1})") from None
    return out


@dataclass
class UserPairs:
    """(de, en) pairs of one FileSpec, where each came from (`file:line`) and its document (None: none given)."""

    pairs: list[tuple[str, str]]
    origins: list[str]
    docs: list[str] | None = None


def read_pairs(spec: FileSpec, lang: Lang, key: str) -> list[tuple[str, str]]:
    """(de, en) pairs from aligned files (`src` in lang.src, `tgt` in lang.tgt) or a TSV."""
    return read_user_pairs(spec, lang, key).pairs


def read_user_pairs(spec: FileSpec, lang: Lang, key: str) -> UserPairs:
    """The pairs of `spec` with their origins and documents (a TSV's `doc` column, or the `docs` file)."""
    langs = LANGS
    docs = None
    if spec.tsv:
        columns = spec.columns or [lang.src, lang.tgt]
        if sorted(c for c in columns if c != "doc") != sorted(langs) or columns.count("doc") > 1:
            raise InputError(f"{key}.columns: expected the languages {list(langs)} (and at most one 'doc'), got "
                             f"{columns}")
        order = [columns.index(code) for code in langs]
        pairs, docs = [], [] if "doc" in columns else None
        for number, line in enumerate(read_text_lines(spec.tsv), start=1):
            cells = line.split("\t")
            if len(cells) != len(columns):
                raise InputError(f"{spec.tsv}:{number}: expected {len(columns)} tab-separated columns, found "
                                 f"{len(cells)}")
            pairs.append((cells[order[0]], cells[order[1]]))
            if docs is not None:
                docs.append(_doc_id(cells[columns.index("doc")], spec.tsv, number))
        origins = [f"{spec.tsv}:{n}" for n in range(1, len(pairs) + 1)]
    else:
        if not (spec.src and spec.tgt):
            raise InputError(f"{key}: give either 'tsv' or both 'src' and 'tgt'")
        src, tgt = read_text_lines(spec.src), read_text_lines(spec.tgt)
        if len(src) != len(tgt):
            shorter = spec.src if len(src) < len(tgt) else spec.tgt
            raise InputError(f"{shorter}:{min(len(src), len(tgt)) + 1}: aligned files differ in length "
                             f"({spec.src}: {len(src)} lines, {spec.tgt}: {len(tgt)} lines)")
        by_lang = {lang.src: src, lang.tgt: tgt}
        pairs = list(zip(by_lang[langs[0]], by_lang[langs[1]], strict=True))
        origins = [f"{spec.src}:{n}" for n in range(1, len(pairs) + 1)]
    if spec.docs:
        if docs is not None:
            raise InputError(f"{key}: documents given twice (a 'doc' column and 'docs'); keep one")
        lines = read_text_lines(spec.docs)
        if len(lines) != len(pairs):
            raise InputError(f"{spec.docs}:{min(len(lines), len(pairs)) + 1}: {len(lines)} document ids for "
                             f"{len(pairs)} pairs")
        docs = [_doc_id(line, spec.docs, n) for n, line in enumerate(lines, start=1)]
    return UserPairs(pairs, origins, docs)


def _doc_id(text: str, path: str, line: int) -> str:
    doc = text.strip()
    if not doc:
        raise InputError(f"{path}:{line}: empty document id")
    return doc
