"""Software localisation (IT) from Debian packages: gettext catalogues and LibreOffice help.

Packages are fetched with `apt-get download` (no root needed once apt has its lists) into a download
cache, and read straight from the .deb's data archive (`dpkg-deb --fsys-tarfile`), nothing unpacked.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from vocabridge.corpora.mo import read_mo
from vocabridge.errors import DownloadError, InputError
from vocabridge.progress import progress

LIBREOFFICE_HELP = {"de": "libreoffice-help-de", "en": "libreoffice-help-en-us"}
_GERMAN_LOCALES = ("de", "de_DE", "de_AT", "de_CH")  # in order of preference
_MO_PATH = re.compile(r"^\.?/?usr/share/locale/(de|de_DE|de_AT|de_CH)/LC_MESSAGES/([^/]+\.mo)$")
_NO_NETWORK = ("Could not resolve", "Temporary failure resolving", "Could not connect", "Failed to fetch",
               "Connection failed", "Unable to connect")


@dataclass(frozen=True)
class Deb:
    package: str
    version: str
    arch: str

    @property
    def filename(self) -> str:
        return f"{self.package}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


def resolve(packages: list[str], key: str) -> list[Deb]:
    """Candidate version and architecture of each package, from apt's lists."""
    proc = subprocess.run(["apt-cache", "show", "--no-all-versions", *packages],
                          capture_output=True, text=True, check=False)
    found: dict[str, Deb] = {}
    for block in proc.stdout.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and line[0] != " ")
        if "Package" in fields and fields["Package"] not in found:
            found[fields["Package"]] = Deb(fields["Package"], fields["Version"], fields["Architecture"])
    missing = [p for p in packages if p not in found]
    if missing and not found:
        raise DownloadError(f"{key}: apt knows none of the packages (first: '{missing[0]}'); "
                            "are apt's package lists there? (run `apt-get update` as root)")
    if missing:
        raise DownloadError(f"{key}: unknown Debian package '{missing[0]}'"
                            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    return [found[p] for p in packages]


def download(debs: list[Deb], dest: Path, key: str) -> list[Path]:
    """Fetch the .debs not yet in `dest`, a few per apt-get call, with a progress bar."""
    dest.mkdir(parents=True, exist_ok=True)
    todo = [d for d in debs if not (dest / d.filename).is_file()]
    with progress(total=len(debs), initial=len(debs) - len(todo), desc="download .deb", unit="pkg") as bar:
        for start in range(0, len(todo), 8):
            chunk = todo[start : start + 8]
            proc = subprocess.run(["apt-get", "download", *[f"{d.package}={d.version}" for d in chunk]],
                                  cwd=dest, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                err = next((ln for ln in proc.stderr.splitlines() if ln.startswith("E:")), proc.stderr.strip())
                if any(sign in proc.stderr for sign in _NO_NETWORK):
                    raise DownloadError(f"{key}: no network to the Debian package registry ({err})")
                raise DownloadError(f"{key}: apt-get download failed for {[d.package for d in chunk]}: {err}")
            bar.update(len(chunk))
    for d in debs:
        if not (dest / d.filename).is_file():
            raise DownloadError(f"{key}: apt-get did not deliver {d.filename}")
    return [dest / d.filename for d in debs]


def deb_members(path: Path, wanted) -> Iterator[tuple[str, bytes]]:
    """(member name, bytes) for regular files in a .deb's data archive for which `wanted(name)` holds."""
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                if member.isfile() and wanted(member.name):
                    yield member.name, tar.extractfile(member).read()
    except tarfile.TarError as err:
        raise InputError(f"{path}: not a readable .deb ({err})") from None
    finally:
        proc.stdout.close()
        proc.wait()
    if proc.returncode not in (0, None):
        raise InputError(f"{path}: dpkg-deb failed: {proc.stderr.read().decode(errors='replace').strip()}")


def catalogue_pairs(path: Path) -> tuple[list[tuple[str, str]], int]:
    """(English, German) pairs of a package's German catalogues, and how many catalogues were read.

    When a package ships one catalogue under several German locales, the first of de, de_DE, de_AT,
    de_CH wins.
    """
    by_name: dict[str, dict[str, bytes]] = {}
    for name, data in deb_members(path, lambda n: _MO_PATH.match(n) is not None):
        locale, mo_name = _MO_PATH.match(name).groups()
        by_name.setdefault(mo_name, {})[locale] = data
    pairs: list[tuple[str, str]] = []
    for mo_name in sorted(by_name):
        locale = next(loc for loc in _GERMAN_LOCALES if loc in by_name[mo_name])
        pairs.extend(read_mo(by_name[mo_name][locale], f"{path.name}:{mo_name}"))
    return pairs, len(by_name)


class _ParagraphParser(HTMLParser):
    """Collects the text of elements whose id starts with par_ or hd_ (LibreOffice help paragraphs)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.paragraphs: dict[str, str] = {}
        self._stack: list[tuple[str, str | None]] = []  # (tag, paragraph id opened by this tag)
        self._open: list[str] = []  # ids being collected (outermost first)
        self._text: dict[str, list[str]] = {}

    _VOID = {"br", "img", "meta", "link", "input", "hr", "wbr", "source", "col", "area", "base"}

    def handle_starttag(self, tag, attrs):
        if tag in self._VOID:
            if tag == "br":
                self.handle_data(" ")
            return
        pid = dict(attrs).get("id") or ""
        opened = pid if pid.startswith(("par_", "hd_")) and not self._open else None
        if opened:
            self._open.append(opened)
            self._text[opened] = []
        self._stack.append((tag, opened))

    def handle_endtag(self, tag):
        while self._stack:
            open_tag, opened = self._stack.pop()
            if opened:
                self._open.remove(opened)
                self.paragraphs.setdefault(opened, "".join(self._text.pop(opened)))
            if open_tag == tag:
                break

    def handle_data(self, data):
        for pid in self._open:
            self._text[pid].append(data)


def _help_pages(path: Path, lang_dir: str) -> dict[str, dict[str, str]]:
    prefix = re.compile(rf"^\.?/?usr/share/libreoffice/help/{re.escape(lang_dir)}/(text/.+\.html)$")
    pages = {}
    members = deb_members(path, lambda n: prefix.match(n) is not None)
    for name, data in progress(members, desc=f"read LibreOffice help ({lang_dir})", unit="page"):
        parser = _ParagraphParser()
        parser.feed(data.decode("utf-8", errors="replace"))
        pages[prefix.match(name).group(1)] = parser.paragraphs
    return pages


def help_pairs(en_deb: Path, de_deb: Path) -> list[tuple[str, str]]:
    """(English, German) paragraphs of LibreOffice help, aligned by page path and paragraph id."""
    en_pages, de_pages = _help_pages(en_deb, "en-US"), _help_pages(de_deb, "de")
    pairs = []
    for page in sorted(en_pages.keys() & de_pages.keys()):
        en, de = en_pages[page], de_pages[page]
        pairs.extend((en[pid], de[pid]) for pid in sorted(en.keys() & de.keys()))
    return pairs
