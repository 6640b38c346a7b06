"""Segment cleaning and pair filtering, shared by every recipe.

`clean_segment` normalises one string; `PairFilter` decides, pair by pair, whether to keep it and counts
every drop by reason so that stats.json can say where the data went.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator

from vocabridge.config import Cleaning

_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9:_-]*(\s[^<>]*)?/?>")
_WS = re.compile(r"\s+")
_ENTITY = re.compile(r"&(#\d+|#x[0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")
# printf (%s, %d, %-5.2f, %1$s, %(name)s), Qt (%1), Python/.NET/ICU ({0}, {name}), shell (${name})
PLACEHOLDER = re.compile(
    r"%(\(\w+\)|\d+\$)?[-+#0']*(\d+|\*)?(\.(\d+|\*))?(hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcsaAp]"
    r"|%\d+|\{\w*\}|\$\{\w+\}"
)
# gettext message contexts written into the msgid: "Menu|File", "@title:window|Settings"
_CONTEXT_PREFIX = re.compile(r"^@?[A-Za-z][\w:@ .-]{0,30}\|(?=\S)")


def strip_accelerator(text: str) -> str:
    """Remove a single keyboard-accelerator marker: '_File', '&File', '~File', 'Ö_ffnen'."""
    for marker in "_&~":
        if text.count(marker) != 1:
            continue
        pos = text.index(marker)
        if marker == "&" and _ENTITY.match(text, pos):
            continue
        if pos + 1 < len(text) and text[pos + 1].isalnum():
            return text[:pos] + text[pos + 1 :]
    return text


def strip_context(text: str) -> str:
    return _CONTEXT_PREFIX.sub("", text, count=1)


def clean_segment(text: str, *, markup: bool = True, accelerators: bool = False) -> str:
    """NFC, markup removed, entities decoded, whitespace collapsed to single spaces."""
    text = unicodedata.normalize("NFC", text)
    if accelerators:
        text = strip_accelerator(text)
    if markup:
        text = _TAG.sub(" ", text)
        text = html.unescape(text)
    text = text.replace("\u00ad", "").replace("\u200b", "")  # soft hyphen, zero-width space
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch for ch in text)
    return _WS.sub(" ", text).strip()


def has_placeholder(text: str) -> bool:
    return bool(PLACEHOLDER.search(text))


class PairFilter:
    """Length, ratio, placeholder, untranslated and duplicate filters with per-reason counts."""

    def __init__(self, cfg: Cleaning):
        self.cfg = cfg
        self.dropped: Counter[str] = Counter()
        self.kept = 0
        self._seen: set[tuple[str, str]] = set()

    def reason(self, a: str, b: str) -> str | None:
        """Why (a, b) must go, or None to keep it."""
        cfg = self.cfg
        if not a or not b:
            return "empty"
        if cfg.placeholders == "drop" and (has_placeholder(a) or has_placeholder(b)):
            return "placeholder"
        wa, wb = len(a.split()), len(b.split())
        if min(wa, wb) < cfg.min_words:
            return "too_short"
        if max(wa, wb) > cfg.max_words or max(len(a), len(b)) > cfg.max_chars:
            return "too_long"
        la, lb = len(a) + 10, len(b) + 10
        if max(la, lb) / min(la, lb) > cfg.max_ratio:
            return "ratio"
        if a == b and wa > 1:
            return "untranslated"
        if (a, b) in self._seen:
            return "duplicate"
        return None

    def accept(self, a: str, b: str) -> bool:
        """Keep (a, b)? Counts the decision either way."""
        why = self.reason(a, b)
        if why is not None:
            self.dropped[why] += 1
            return False
        self._seen.add((a, b))
        self.kept += 1
        return True

    def __call__(self, pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str]]:
        return (pair for pair in pairs if self.accept(*pair))


# Held-out sets are filtered for emptiness and duplicates only: a test set keeps its long and odd lines.
HELD_OUT = Cleaning(placeholders="keep", min_words=1, max_words=10**6, max_ratio=1e9, max_chars=10**9)
