"""Stage finetune@ROW-SEED: fine-tune a cell's initial model on the downstream training set.

The optimizer and schedule start afresh (Sato et al. 2020, section 4.2); the cell's seed draws the batch order and
dropout. Methods that are evaluated as they are (out-domain) are copied unchanged. Rows train on
`finetune.train_pairs` pairs of the training set (0: all; otherwise a fixed sample, the same for every row and
seed: the low-resource regime); a row with its own `train_pairs` (rows.ROW) trains on that many; a row with
`backtranslated: true` trains on the back-translated pairs of the backtranslate stage as well (after its sample).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from stages._grid import cell_stage_args
from vocabridge import workspace as paths
from vocabridge.corpora.sample import add_pairs, sample_pairs
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.errors import ConfigError
from vocabridge.families import family
from vocabridge.family_models import models_of
from vocabridge.fileio import atomic_dir, sha256_file, write_json
from vocabridge.nmt.forgetting import Keep, read_old_rows
from vocabridge.nmt.model import copy_model_dir
from vocabridge.nmt.train import State, fingerprint_of, use_compute, write_logs
from vocabridge.transfer import finetune_training, get_method, knobs_for


def main(argv: list[str]) -> None:
    cell, params = cell_stage_args(__doc__, argv)
    name = cell.row
    lang = params.lang
    init, out = paths.init_model(cell), paths.finetuned(cell)
    plots, metrics = paths.per_cell(paths.PLOTS / "finetune", cell), paths.per_cell(paths.METRICS / "finetune", cell,
                                                                                     ".json")
    method, knobs = get_method(name, params.rows), knobs_for(name, params.rows)
    if not method.finetune:  # out-domain, mdl: Marian models
        with atomic_dir(out) as tmp:
            copy_model_dir(init, tmp)
        write_logs(State(), plots)
        write_json(metrics, {"updates": 0, "best_update": 0, "seed": cell.seed})
        return
    fam = family(method.family)  # its budget (finetune_training) and what identifies its model
    models = models_of(fam)  # its loader, trainer and writer
    cfg = finetune_training(name, params, cell.seed)
    device = use_compute(params.compute)
    model, src, tgt = models.load(init, device)
    weights = fam.weights(init)
    corpus = paths.CORPORA / "downstream"
    backtranslated = [sha256_file(paths.BACKTRANSLATED / "stats.json")] if knobs.backtranslated else []
    if knobs.backtranslated and not json.loads((paths.BACKTRANSLATED / "stats.json").read_text())["pairs"]:
        raise ConfigError(f"params.yaml: rows.{name}.backtranslated: {paths.BACKTRANSLATED} has no pairs; the "
                          f"backtranslate stage needs upstreams.{params.backtranslation.upstream} (reverse: true)")
    row = {key: value for key, value in (("train_pairs", knobs.train_pairs),
                                         ("backtranslated", knobs.backtranslated or None),
                                         ("freeze_old_rows", knobs.freeze_old_rows or None),
                                         ("new_rows_first", knobs.new_rows_first or None),
                                         ("mix_upstream", knobs.mix_upstream or None)) if value is not None}
    keep = None
    if knobs.freeze_old_rows or knobs.new_rows_first:
        keep = Keep(read_old_rows(init), bool(knobs.freeze_old_rows), knobs.new_rows_first or 0)
    fingerprint = fingerprint_of("finetune", cell.name, asdict(lang), asdict(cfg), sha256_file(corpus / "stats.json"),
                                 fam.sha256(weights), *([row] if row else []), *backtranslated,
                                 *models.fingerprint_settings(params))
    key, pairs = ((f"rows.{name}.train_pairs", knobs.train_pairs) if knobs.train_pairs is not None
                  else ("finetune.train_pairs", params.finetune.train_pairs))
    with tempfile.TemporaryDirectory(prefix="vocabridge-pairs-") as tmp:
        if pairs or (corpus / f"extra.{lang.src}").is_file():  # 0 with extra pairs: all of them too
            corpus = sample_pairs(corpus, lang, pairs, Path(tmp) / "sample", key)
        if knobs.backtranslated:  # the sample's pairs, then the back-translated ones
            corpus = add_pairs(corpus, lang, paths.BACKTRANSLATED, Path(tmp) / "with-bt")
        if knobs.mix_upstream:  # and a fixed sample of original-domain pairs, their share of the whole
            corpus = mix_upstream(corpus, lang, knobs.mix_upstream, Path(tmp), f"rows.{name}.mix_upstream")
        checkpoints = paths.per_cell(paths.CHECKPOINTS / "finetune", cell)
        state, summary = models.fit(model, src, tgt, corpus, cfg, checkpoints, fingerprint, f"finetune {cell.name}",
                                 params, keep=keep)
    summary |= {"seed": cfg.seed, **({"sampled_pairs": pairs} if pairs else {})}
    if backtranslated:
        summary["backtranslated_pairs"] = json.loads((paths.BACKTRANSLATED / "stats.json").read_text())["pairs"]
    models.save(model, src, tgt, out)
    write_logs(state, plots)
    write_json(metrics, summary)
    print(summary)


def mix_upstream(corpus: Path, lang, share: float, tmp: Path, key: str) -> Path:
    """`corpus`'s training pairs and as many upstream pairs as make `share` of the whole (a fixed sample)."""
    pairs = len(read_text_lines(corpus / f"train.{lang.src}"))
    extra = sample_pairs(paths.CORPORA / "upstream", lang, max(1, round(share / (1 - share) * pairs)),
                         tmp / "upstream-sample", key)
    return add_pairs(corpus, lang, extra, tmp / "with-upstream")


if __name__ == "__main__":
    run(main)
