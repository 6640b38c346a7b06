"""Compare one cell of two workspaces: its hypotheses, curve, initial and fine-tuned weights byte for byte, its
record without the fields that time or place a run."""
import json
import sys
from pathlib import Path

from compare_tiny import clean, sha  # the tiny DAG's comparison rules

a, b, row, seed = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
def diff(x, y, path=""):
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y)):
            yield from diff(x.get(k, "<absent>"), y.get(k, "<absent>"), f"{path}.{k}")
    elif x != y:
        yield f"{path}: {json.dumps(x)[:80]} -> {json.dumps(y)[:80]}"


folders = [f"data/cells/{row}/s{seed}", f"data/models/init/{row}/s{seed}", f"data/models/finetuned/{row}/s{seed}",
           f"data/diagnostics/{row}"]
for folder in folders:
    for pa in sorted((a / folder).rglob("*")):
        if not pa.is_file() or (folder.endswith(row) and not pa.name.startswith(f"s{seed}")):
            continue
        rel = pa.relative_to(a)
        pb = b / rel
        if not pb.is_file():
            print(f"missing after: {rel}")
            continue
        if pa.suffix == ".json":
            da, db = clean(json.loads(pa.read_text())), clean(json.loads(pb.read_text()))
            d = list(diff(da, db))
            print(f"{'same' if not d else 'DIFF'} {rel} (json without timings)", *d[:10], sep="\n  " if d else "")
        elif pa.suffix == ".csv":
            print(f"{'same' if sha(pa) == sha(pb) else 'DIFF'} {rel}")
        else:
            print(f"{'same' if sha(pa) == sha(pb) else 'DIFF'} {rel}")
