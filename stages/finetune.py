"""Stage finetune@METHOD: fine-tune the method's initial model on the downstream training set.

The optimizer and schedule start afresh (Sato et al. 2020, section 4.2). Methods that are evaluated as they
are (out-domain) are copied unchanged. Rows train on `finetune.train_pairs` pairs of the training set (0: all;
otherwise a fixed sample, the same for every row and seed: the low-resource regime). A row with its own `seed`
or `train_pairs` (params.yaml `transfer.ROW`, recorded by the transfer stage in the model's diagnostics.json)
trains with that seed, or on that many pairs; a row with `backtranslated: true` trains on the back-translated
pairs of the backtranslate stage as well (after its own sample).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

from stages import _paths as paths
from vocabridge.corpora.sample import add_pairs, sample_pairs
from vocabridge.entry import run
from vocabridge.fileio import atomic_dir, sha256_file, write_json
from vocabridge.nmt.model import copy_model_dir, load_model, save_model
from vocabridge.nmt.train import State, fingerprint_of, fit, use_compute, write_logs
from vocabridge.plm.abnet import load_abnet, save_abnet
from vocabridge.plm.train import fit_abnet
from vocabridge.transfer import get_method


def main(argv: list[str]) -> None:
    name, params = paths.method_stage_args(__doc__, argv)
    cfg, lang = params.finetune.train, params.lang
    init, out, plots = paths.init_model(name), paths.finetuned(name), paths.PLOTS / "finetune" / name
    if not get_method(name, params.transfer).finetune:  # out-domain, mdl: Marian models
        with atomic_dir(out) as tmp:
            copy_model_dir(init, tmp)
        write_logs(State(), plots)
        write_json(paths.METRICS / "finetune" / f"{name}.json", {"updates": 0, "best_update": 0})
        return
    method = get_method(name, params.transfer)
    abnet = method.family == "abnet"  # an AB-Net row: its own trainer and budget (abnet.finetune)
    cfg = params.abnet.finetune if abnet else cfg
    device = use_compute(params.compute)
    if abnet:
        model, src, tgt = load_abnet(init, device)
        weights = init / "adapters.safetensors"
    else:
        model, src, tgt = load_model(init, str(device))
        weights = init / "model.safetensors"
    row = json.loads((init / "diagnostics.json").read_text(encoding="utf-8")).get("row", {})
    cfg = replace(cfg, seed=row.get("seed", cfg.seed))
    corpus = paths.CORPORA / "downstream"
    backtranslated = [sha256_file(paths.BACKTRANSLATED / "stats.json")] if row.get("backtranslated") else []
    fingerprint = fingerprint_of("finetune", name, asdict(lang), asdict(cfg), sha256_file(corpus / "stats.json"),
                                 sha256_file(weights), *([row] if row else []), *backtranslated,
                                 *([asdict(params.abnet.decoding), params.abnet.length_weight] if abnet else []))
    key, pairs = ((f"transfer.{name}.train_pairs", row["train_pairs"]) if "train_pairs" in row
                  else ("finetune.train_pairs", params.finetune.train_pairs))
    with tempfile.TemporaryDirectory(prefix="vocabridge-pairs-") as tmp:
        if pairs:
            corpus = sample_pairs(corpus, lang, pairs, Path(tmp) / "sample", key)
        if row.get("backtranslated"):  # the sample's pairs, then the back-translated ones
            corpus = add_pairs(corpus, lang, paths.BACKTRANSLATED, Path(tmp) / "with-bt")
        checkpoints = paths.CHECKPOINTS / "finetune" / name
        if abnet:
            state, summary = fit_abnet(model, src, tgt, corpus, lang, cfg, checkpoints, fingerprint, f"finetune {name}",
                                       params.abnet.decoding, params.abnet.length_weight)
        else:
            state, summary = fit(model, src, tgt, corpus, lang, cfg, checkpoints, fingerprint, f"finetune {name}")
    summary |= {"seed": cfg.seed, **({"sampled_pairs": pairs} if pairs else {})}
    if backtranslated:
        summary["backtranslated_pairs"] = json.loads((paths.BACKTRANSLATED / "stats.json").read_text())["pairs"]
    if abnet:
        save_abnet(model, out, src, tgt)
    else:
        with atomic_dir(out) as tmp:
            save_model(model.cpu(), src, tgt, tmp)
    write_logs(state, plots)
    write_json(paths.METRICS / "finetune" / f"{name}.json", summary)
    print(summary)


if __name__ == "__main__":
    run(main)
