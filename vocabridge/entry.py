"""How entry points report failure: one line on stderr naming the culprit, exit status 2."""

from __future__ import annotations

import sys
from collections.abc import Callable

from vocabridge.errors import VocabridgeError


def run(main: Callable[[list[str]], object], argv: list[str] | None = None) -> None:
    try:
        main(sys.argv[1:] if argv is None else argv)
    except VocabridgeError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
