"""A grid row as the workspace sees it: the files its method draws on, the condition its cells run under, and the
committed and workspace cells that pool under today's params.

Read by the row stage (its hashes), the flow (a row starts once its own resources exist; a study runs the cells
its results folder lacks) and the report stage (which cells it reads).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from vocabridge import workspace as paths
from vocabridge.config import abnet_settings
from vocabridge.errors import ConfigError
from vocabridge.grid import Gathered, condition_digest, decoding_digest, knobs_digest, read_cells, text_digest
from vocabridge.transfer import (
    finetune_training,
    generator_for,
    get_method,
    knobs_for,
    needs,
    resolved_knobs,
    start_method,
)


def upstream_weights(name: str, family: str):
    """The weights file of an upstream model (a Marian model, or an AB-Net's trained part)."""
    folder = paths.upstream(name)
    return folder / ("adapters.safetensors" if family == "abnet" else "model.safetensors")


def row_condition(params, knobs, family: str) -> dict:
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


def gather(params, folders: list[Path], refs: list[str] | None) -> Gathered:
    """The grid's cells found in `folders` (later ones win) that pool under today's params: the row's knobs, its
    fine-tune's condition, an AB-Net row's model settings and, given `refs`, the test set; the flow's `--missing`
    reads the same."""
    expected = {row: knobs_digest(resolved_knobs(row, params.rows)) for row in params.rows}
    stamped = {row: row_condition(params, knobs_for(row, params.rows), "abnet") for row in params.rows
               if get_method(row, params.rows).family == "abnet"}
    as_is = {row for row in params.rows if not get_method(row, params.rows).finetune}
    conditions = {row: cell_condition(params, row) for row in params.rows}
    return read_cells(folders, expected, test_digest=None if refs is None else text_digest(refs),
                      conditions=conditions, stamped=stamped, as_is=as_is)


def cell_condition(params, row: str) -> str:
    """The regime the row's cells must have run under to pool: today's fine-tune, sample and decoding; a row
    evaluated as it is (out-domain), its decoding alone."""
    if not get_method(row, params.rows).finetune:
        return decoding_digest(asdict(params.evaluate))
    pairs = knobs_for(row, params.rows).train_pairs
    training = finetune_training(row, params)
    return condition_digest(asdict(training), asdict(params.evaluate),
                            params.finetune.train_pairs if pairs is None else pairs)
