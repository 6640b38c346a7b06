"""Users' own corpora: two aligned plain-text files or one TSV, checked line by line."""

from __future__ import annotations

from pathlib import Path

from vocabridge.config import LANGS, FileSpec, Lang
from vocabridge.errors import InputError


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


def read_pairs(spec: FileSpec, lang: Lang, key: str) -> list[tuple[str, str]]:
    """(de, en) pairs from aligned files (`src` in lang.src, `tgt` in lang.tgt) or a TSV."""
    langs = LANGS
    if spec.tsv:
        columns = spec.columns or [lang.src, lang.tgt]
        if sorted(columns) != sorted(langs):
            raise InputError(f"{key}.columns: expected the languages {list(langs)}, got {columns}")
        order = [columns.index(code) for code in langs]
        pairs = []
        for number, line in enumerate(read_text_lines(spec.tsv), start=1):
            cells = line.split("\t")
            if len(cells) != 2:
                raise InputError(f"{spec.tsv}:{number}: expected 2 tab-separated columns, found {len(cells)}")
            pairs.append((cells[order[0]], cells[order[1]]))
        return pairs
    if not (spec.src and spec.tgt):
        raise InputError(f"{key}: give either 'tsv' or both 'src' and 'tgt'")
    src, tgt = read_text_lines(spec.src), read_text_lines(spec.tgt)
    if len(src) != len(tgt):
        shorter = spec.src if len(src) < len(tgt) else spec.tgt
        raise InputError(f"{shorter}:{min(len(src), len(tgt)) + 1}: aligned files differ in length "
                         f"({spec.src}: {len(src)} lines, {spec.tgt}: {len(tgt)} lines)")
    by_lang = {lang.src: src, lang.tgt: tgt}
    return list(zip(by_lang[langs[0]], by_lang[langs[1]], strict=True))
