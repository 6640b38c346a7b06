"""A grid row as the workspace sees it: the files its method draws on, the condition its cells run under, and the
committed and workspace cells that pool under today's params.

Read by the row stage (its hashes), the flow (a row starts once its own resources exist; a study runs the cells
its results folder lacks) and the report stage (which cells it reads).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from vocabridge import workspace as paths
from vocabridge.errors import ConfigError
from vocabridge.families import family as get_family
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


def upstream_weights(name: str, family: str) -> Path:
    """The weights file of an upstream model of a family (a Marian model, or an AB-Net's trained part)."""
    return get_family(family).weights(paths.upstream(name))


def row_condition(params, knobs, family: str) -> dict:
    """The condition a row's cells run under: `pretrain_init` (how its upstream model's embedding rows started:
    params.pretrain.init, which the base model and every `upstreams` entry share; `external model` for the user's
    model; an AB-Net's: its BERTs pretrained or random), the upstream model and its recipe (None for the base
    model; an AB-Net's `abnets` entry), the shared-token policy and the sides; and the family-wide settings it runs
    under where they are not the defaults (an AB-Net row's `abnet`: config.abnet_settings)."""
    init, recipe, settings = get_family(family).pretrain_condition(params, knobs.upstream)
    return {"pretrain_init": init, "upstream": knobs.upstream, "upstream_recipe": recipe, "shared": knobs.shared,
            "sides": knobs.sides, **({"abnet": settings} if settings else {})}


def resources(row: str, params) -> dict[str, Path]:
    """The files a row's method draws on, by role (`upstream`, `cbow.de`, `generator`), and why a row's config
    cannot run; read by this stage and by the flow, which starts a row once these exist, not once every upstream
    model does."""
    method, knobs = get_method(row, params.rows), knobs_for(row, params.rows)
    get_family(method.family).check_upstream(row, knobs.upstream, params)
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
    stamped = {row: row_condition(params, knobs_for(row, params.rows), fam.name) for row in params.rows
               if (fam := get_family(get_method(row, params.rows).family)).stamps_condition}
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
