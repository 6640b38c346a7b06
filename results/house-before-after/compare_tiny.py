"""Compare two finished tiny workspaces: hypotheses and model weights byte for byte, cell records without the
fields that time or place a run (seconds, speeds, machine, commit, finish time)."""
import hashlib
import json
import sys
from pathlib import Path

TIMING = ("second", "per_s", "tok_s", "latency", "machine", "commit", "finished", "sentences_per_second")


def clean(x):
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items() if not any(t in k for t in TIMING)}
    if isinstance(x, list):
        return [clean(v) for v in x]
    return x


def sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main(a: Path, b: Path) -> None:
    files = sorted(p.relative_to(a) for p in (a / "data").rglob("*") if p.is_file())
    same = differ = 0
    diffs = []
    for rel in files:
        pa, pb = a / rel, b / rel
        if not pb.is_file():
            diffs.append(f"missing after: {rel}")
            continue
        if rel.suffix in (".txt", ".safetensors") or rel.name.endswith(".spm"):
            ok = sha(pa) == sha(pb)
        elif rel.name == "record.json":
            ok = clean(json.loads(pa.read_text())) == clean(json.loads(pb.read_text()))
        else:
            continue
        same += ok
        differ += not ok
        if not ok:
            diffs.append(f"differs: {rel}")
    cells = sorted(p.parent.relative_to(a / "data/cells") for p in (a / "data/cells").rglob("record.json"))
    print(f"compared {same + differ} files ({len(cells)} cells: hyp.txt, dev_hyp.txt, upstream_hyp.txt, record.json "
          f"without timings; every .safetensors and .spm): {same} identical, {differ} differ")
    print("\n".join(diffs[:40]))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
