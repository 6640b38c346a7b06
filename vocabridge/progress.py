"""The one progress bar of every long loop (the trainers, decoding, corpus building).

In a terminal it is tqdm's bar, redrawn in place. Anywhere else (a stage under the Prefect flow, CI, a log file)
every redraw would become a line of the log: the tiny profile's flow wrote 2,231 lines, most of them a training
bar a tenth of a second apart. There the same bar prints a whole line every `PERCENT` percent of its total, or
after `SECONDS` seconds without one, whichever comes first, and a last line when it closes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable

from tqdm import tqdm

PERCENT = 5.0  # a line at every 5% mark of the total
SECONDS = 60.0  # ... or a minute after the last line (a slow loop, or one without a total)

write = tqdm.write  # a message between bars: `write(text, file=sys.stderr)`


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress(iterable: Iterable | None = None, *, file=None, percent: float = PERCENT, seconds: float = SECONDS,
             **kwargs) -> tqdm:
    """A tqdm bar (its arguments: total, initial, desc, unit, disable, ...) on `file` (default stderr): redrawn in
    place on a terminal, whole lines at `percent` marks or every `seconds` elsewhere."""
    kwargs.pop("dynamic_ncols", None)
    if is_terminal(sys.stderr if file is None else file):
        return tqdm(iterable, file=file, dynamic_ncols=True, **kwargs)
    return LineProgress(iterable, file=file, percent=percent, seconds=seconds, **kwargs)


class LineProgress(tqdm):
    """tqdm for a pipe or a file: no carriage returns, no redraws; one line per `percent` mark of the total or per
    `seconds` with progress, the first when it opens and the last (the overall rate) when it closes."""

    def __init__(self, *args, percent: float = PERCENT, seconds: float = SECONDS, **kwargs):
        self._percent, self._seconds = percent, seconds
        self._shown_n: float | None = None
        self._shown_t = 0.0
        self._closing = False
        # every update reaches display(), which decides cheaply whether a line is due
        super().__init__(*args, mininterval=0, miniters=1, **kwargs)

    def _mark(self, n: float) -> int:
        return int(n * 100 / (self.total * self._percent)) if self.total and self._percent > 0 else 0

    def _due(self, now: float) -> bool:
        if self._shown_n is None:
            return True
        if self.n == self._shown_n:
            return False
        return self._closing or now - self._shown_t >= self._seconds or self._mark(self.n) > self._mark(self._shown_n)

    def display(self, msg=None, pos=None):
        if msg is not None:  # tqdm clearing its line: there is no line to clear in a log
            return False
        now = time.monotonic()
        if not self._due(now):
            return False
        self.fp.write(self.__str__() + "\n")
        self.fp.flush()
        self._shown_n, self._shown_t = self.n, now
        return True

    def clear(self, nolock=False):
        """Nothing to clear (tqdm.write clears the bars before its message)."""

    def close(self):
        if self.disable:
            return
        self._closing = True
        self._ema_dt = lambda: None  # the last line: the overall rate, as tqdm's own last redraw
        with self._lock:
            self.display()
        self.leave = False  # tqdm's close would redraw once more
        super().close()
