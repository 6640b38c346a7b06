"""A small reader for compiled gettext catalogues (.mo).

Python's gettext module rejects a few real catalogues (odd charsets, plural-form headers); this reader
only needs the two string tables, decodes with the header's charset, and falls back to UTF-8 then
Latin-1, which is what the catalogues in Debian need.
"""

from __future__ import annotations

import re
import struct

from vocabridge.errors import InputError

_MAGIC_LE = 0x950412DE
_CHARSET = re.compile(rb"charset=([A-Za-z0-9_.:-]+)", re.IGNORECASE)


def _decoder(header: bytes):
    match = _CHARSET.search(header)
    charsets = [match.group(1).decode("ascii")] if match else []
    charsets += ["utf-8", "latin-1"]

    def decode(raw: bytes) -> str:
        for charset in charsets:
            try:
                return raw.decode(charset)
            except (UnicodeDecodeError, LookupError):
                continue
        return raw.decode("latin-1")

    return decode


def read_mo(data: bytes, name: str = "<mo>") -> list[tuple[str, str]]:
    """Return (msgid, msgstr) pairs, English first; plural entries give singular and plural pairs.

    Message contexts (msgctxt) are dropped, untranslated entries skipped.
    """
    if len(data) < 28:
        raise InputError(f"{name}: not a gettext .mo file (too short)")
    (magic,) = struct.unpack("<I", data[:4])
    endian = "<" if magic == _MAGIC_LE else ">"
    if struct.unpack(endian + "I", data[:4])[0] != _MAGIC_LE:
        raise InputError(f"{name}: not a gettext .mo file (bad magic number)")
    _, count, orig_at, trans_at = struct.unpack(endian + "4I", data[4:20])

    def table(offset: int) -> list[bytes]:
        out = []
        for i in range(count):
            length, start = struct.unpack(endian + "2I", data[offset + 8 * i : offset + 8 * i + 8])
            if start + length > len(data):
                raise InputError(f"{name}: corrupt .mo file (string {i} runs past the end)")
            out.append(data[start : start + length])
        return out

    originals, translations = table(orig_at), table(trans_at)
    header = next((t for o, t in zip(originals, translations, strict=True) if o == b""), b"")
    decode = _decoder(header)
    pairs: list[tuple[str, str]] = []
    for orig, trans in zip(originals, translations, strict=True):
        if not orig or not trans:
            continue
        if b"\x04" in orig:
            orig = orig.split(b"\x04", 1)[1]
        ids = decode(orig).split("\x00")
        strs = decode(trans).split("\x00")
        for msgid, msgstr in zip(ids, strs, strict=False):
            if msgid and msgstr:
                pairs.append((msgid, msgstr))
    return pairs

