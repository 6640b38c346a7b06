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

from dataclasses import asdict
from pathlib import Path

from stages._grid import row_stage_args
from vocabridge import workspace as paths
from vocabridge.config import abnet_settings
from vocabridge.entry import run
from vocabridge.errors import ConfigError, InputError
from vocabridge.fileio import sha256_file, write_json
from vocabridge.grid import knobs_digest
from vocabridge.transfer import generator_for, get_method, knobs_for, needs, resolved_knobs, start_method


def upstream_weights(name: str, family: str):
    """The weights file of an upstream model (a Marian model, or an AB-Net's trained part)."""
    folder = paths.upstream(name)
    return folder / ("adapters.safetensors" if family == "abnet" else "model.safetensors")


def condition(params, knobs, family: str) -> dict:
    """The condition a row's cells run under: `pretrain_init` (how its upstream model's embedding rows started:
    params.pretrain.init, which the base model and every `upstreams` entry share; `external model` for the user's
    model; an AB-Net's: its BERTs pretrained or random), the upstream model and its recipe (None for the base
    model; an AB-Net's `abnets` entry), the shared-token policy and the sides; for an AB-Net row also the abnet-wide
    settings it runs under where they are not the defaults (`abnet`: config.abnet_settings)."""
    name = knobs.upstream
    if family == "abnet":
        entry = params.abnets[name]
        berts = {True: "pretrained BERTs", False: "random", "encoder": "pretrained source BERT, random target",
                 "decoder": "random source, pretrained target BERT"}[entry.plms]
        if entry.decoder == "autoregressive":  # AB-Net-Enc: a decoder of its own, no target BERT
            berts = "pretrained source BERT" if entry.plms in (True, "encoder") else "random"
        init = f"abnet: {berts}" + (
            "" if entry.upstream else ", no upstream training")
        recipe = asdict(entry)
        settings = abnet_settings(params, name)
    else:
        init = "external model" if params.pretrain.external_model else params.pretrain.init
        recipe = asdict(params.upstreams[name]) if name != "base" else None
        settings = {}
    return {"pretrain_init": init, "upstream": name, "upstream_recipe": recipe, "shared": knobs.shared,
            "sides": knobs.sides, **({"abnet": settings} if settings else {})}


def resources(row: str, params) -> dict[str, Path]:
    """The files a row's method draws on, by role (`upstream`, `cbow.de`, `generator`), and why a row's config
    cannot run; read by this stage and by the flow, which starts a row once these exist, not once every upstream
    model does."""
    method, knobs = get_method(row, params.rows), knobs_for(row, params.rows)
    if method.family == "abnet" and knobs.upstream not in params.abnets:
        raise ConfigError(f"params.yaml: rows.{row}.upstream: '{knobs.upstream}' is not an AB-Net model; add "
                          f"abnets.{knobs.upstream} (AB-Net models: {', '.join(sorted(params.abnets)) or 'none'})")
    if method.family != "abnet" and knobs.upstream != "base" and knobs.upstream not in params.upstreams:
        known = ", ".join(["base", *sorted(params.upstreams)])
        raise ConfigError(f"params.yaml: rows.{row}.upstream: '{knobs.upstream}' is not an upstream model; add "
                          f"upstreams.{knobs.upstream} (upstream models: {known})")
    files = {"upstream": upstream_weights(knobs.upstream, method.family)}
    if "cbow" in needs(row, params.rows):
        files |= {f"cbow.{code}": paths.CBOW / f"{code}.bin" for code in (params.lang.src, params.lang.tgt)}
    if (variant := start_method(row, params.rows).generator):
        name = generator_for(variant, knobs.sides)
        if name not in params.generators:
            raise ConfigError(f"params.yaml: generators: rows.{row} needs the trained generator '{name}'; add it "
                              f"(generators: {params.generators})")
        files["generator"] = paths.GENERATORS / f"{name}.safetensors"
    if knobs.backtranslated and params.backtranslation.upstream not in params.upstreams:
        raise ConfigError(f"params.yaml: rows.{row}.backtranslated: the backtranslate stage needs its backward model "
                          f"upstreams.{params.backtranslation.upstream} (reverse: true)")
    return files


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
        "upstream": {"name": knobs.upstream, "sha256": paths.model_sha256(files["upstream"], method.family)},
        "condition": condition(params, knobs, method.family),
        "resources": {key: {"path": str(path), "sha256": sha256_file(path)} for key, path in files.items()},
    })
    print(row, {key: str(path) for key, path in files.items()})


if __name__ == "__main__":
    run(main)
