"""Check a workspace's params.yaml against its prepared corpora before anything trains.

The flow runs this once the prepare stages are done; with `dvc repro`, run it after `dvc repro prepare`:

    python -m flows.preflight            # exit 0: the settings fit; exit 2: every problem, in one message
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flows.errors import FlowError
from vocabridge import preflight as checks
from vocabridge import workspace as paths
from vocabridge.config import load_params
from vocabridge.errors import VocabridgeError


def preflight(workspace: Path) -> str:
    """What was checked (`vocabridge.preflight`); a FlowError naming every problem where params.yaml does not fit."""
    workspace = Path(workspace)
    try:
        checks.check(load_params(workspace / "params.yaml"), workspace / paths.CORPORA, workspace / paths.SPM)
    except VocabridgeError as err:
        raise FlowError(str(err)) from None
    return "params.yaml fits the prepared corpora (fine-tune samples, vocabulary sizes)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", default=".", type=Path)
    args = parser.parse_args(argv)
    try:
        print(preflight(args.workspace))
    except FlowError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
