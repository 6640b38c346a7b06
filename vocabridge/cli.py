"""The `vocabridge` command: helpers around the pipeline that are not DVC stages."""

from __future__ import annotations

import argparse
from pathlib import Path

from ruamel.yaml import YAML

from vocabridge.config import apply_profile, flatten, read_yaml
from vocabridge.entry import run
from vocabridge.errors import ConfigError


def set_profile(name: str, params: Path = Path("params.yaml"), profiles: Path = Path("profiles")) -> list[str]:
    """Merge profiles/NAME.yaml into params.yaml in place (comments kept); returns the changed keys."""
    overlay_path = profiles / f"{name}.yaml"
    if not overlay_path.is_file():
        known = sorted(p.stem for p in profiles.glob("*.yaml"))
        raise ConfigError(f"{overlay_path}: no such profile (known: {known})")
    apply_profile(params, overlay_path)  # validates the merged result before anything is written
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 110
    doc = yaml.load(params.read_text(encoding="utf-8"))
    changed = []
    for dotted, value in flatten(read_yaml(overlay_path) | {"profile": name}).items():
        node = doc
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        if node.get(leaf) != value:
            node[leaf] = value
            changed.append(dotted)
    tmp = params.with_name(f".{params.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        yaml.dump(doc, handle)
    tmp.replace(params)
    return changed


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="vocabridge", description="Vocabulary adaptation for NMT.")
    sub = parser.add_subparsers(dest="command", required=True)
    prof = sub.add_parser("profile", help="merge profiles/NAME.yaml into params.yaml (e.g. tiny, paper)")
    prof.add_argument("name")
    prof.add_argument("--params", type=Path, default=Path("params.yaml"))
    prof.add_argument("--profiles", type=Path, default=Path("profiles"))
    args = parser.parse_args(argv)
    if args.command == "profile":
        changed = set_profile(args.name, args.params, args.profiles)
        print(f"{args.params}: profile '{args.name}' applied, {len(changed)} keys changed")


def entry() -> None:
    run(main)


if __name__ == "__main__":
    entry()
