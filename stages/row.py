"""Stage row@ROW: what a row of the grid starts from, as content hashes, in data/rows/ROW.json.

Its method, its resolved knobs (and their digest, which every cell record of the row carries) and the sha256 of
each resource its method draws on: its upstream model, the CBOW vectors (methods that use them), its trained
generator; and the condition its cells run under (`condition`: how its upstream model's embeddings started before
pretraining, which upstream model and its recipe, the shared-token policy and the sides), which evaluate copies
into each cell record so that the report never makes a verdict of a comparison across conditions. The row's cells
depend on this file instead of on the resource folders, so a new upstream model, generator or CBOW run reruns only
the cells of the rows that use it; this stage reruns whenever any resource changes, which costs a few seconds of
hashing.
"""

from __future__ import annotations

from stages._grid import row_stage_args
from vocabridge import workspace as paths
from vocabridge.entry import run
from vocabridge.errors import InputError
from vocabridge.families import family
from vocabridge.fileio import sha256_file, write_json
from vocabridge.grid import knobs_digest
from vocabridge.rows import resources, row_condition
from vocabridge.transfer import get_method, knobs_for, resolved_knobs


def main(argv: list[str]) -> None:
    row, params = row_stage_args(__doc__, argv)
    method, knobs = get_method(row, params.rows), knobs_for(row, params.rows)
    files = resources(row, params)
    for key, path in files.items():
        if not path.is_file():
            raise InputError(f"{path}: missing ({key} of rows.{row}); run the stage that makes it (`dvc repro`)")
    resolved = resolved_knobs(row, params.rows)
    write_json(paths.row_file(row), {
        "row": row, "method": resolved["method"], "knobs": resolved, "knobs_digest": knobs_digest(resolved),
        "upstream": {"name": knobs.upstream, "sha256": family(method.family).sha256(files["upstream"])},
        "condition": row_condition(params, knobs, method.family),
        "resources": {key: {"path": str(path), "sha256": sha256_file(path)} for key, path in files.items()},
    })
    print(row, {key: str(path) for key, path in files.items()})


if __name__ == "__main__":
    run(main)
