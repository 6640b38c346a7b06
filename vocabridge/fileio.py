"""Atomic outputs: write under a temporary name next to the target, then rename.

A killed stage therefore leaves either the old artifact or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path


def _set_aside(target: Path) -> Path:
    return target.with_name(f".{target.name}.old-{os.getpid()}")


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory that replaces `target` only if the block succeeds.

    A directory cannot be swapped in one rename: the old `target` is moved aside first. A kill between the two
    renames leaves no `target` but the set-aside copy, which `recover_dir` puts back (resume calls it)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            old = _set_aside(target)
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def recover_dir(target: str | os.PathLike) -> bool:
    """Put back the copy of `target` that an interrupted `atomic_dir` moved aside, when `target` is missing.

    Returns whether `target` exists now. Of several set-aside copies (several kills), the one moved aside last
    is the newest complete version; the others are removed."""
    target = Path(target)
    if target.exists():
        return True
    copies = sorted(target.parent.glob(f".{target.name}.old-*"), key=lambda p: p.stat().st_ctime_ns)
    if not copies:
        return False
    os.replace(copies[-1], target)  # a rename sets the moved directory's ctime: the last one moved aside
    for stale in copies[:-1]:
        shutil.rmtree(stale, ignore_errors=True)
    return True


@contextlib.contextmanager
def atomic_file(target: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator:
    """Open a temporary file that is renamed to `target` when the block succeeds."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
    os.close(fd)
    try:
        kwargs = {"encoding": encoding, "newline": "\n"} if "b" not in mode else {}
        with open(tmp, mode, **kwargs) as handle:
            yield handle
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """Write one segment per line, '\\n'-terminated (the format of every corpus file)."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for line in lines:
            handle.write(line)
            handle.write("\n")


def write_json(path: str | os.PathLike, obj) -> None:
    """Deterministic JSON (sorted keys, fixed indent) so that re-runs are byte-identical; atomic."""
    with atomic_file(path) as handle:
        json.dump(obj, handle, indent=2, sort_keys=True, ensure_ascii=False)
        handle.write("\n")


def sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_tree(folder: str | os.PathLike, pattern: str = "*.safetensors") -> str:
    """One sha256 over the files below `folder` that match `pattern`, their paths relative to it and their
    contents: the identity of a model kept in several weights files."""
    root = Path(folder)
    lines = [f"{path.relative_to(root).as_posix()} {sha256_file(path)}" for path in sorted(root.rglob(pattern))]
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
