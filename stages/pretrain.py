"""Stage pretrain: train the upstream (IT) model, or take the user's Marian/OPUS-MT model instead.

With `pretrain.init: cbow` the embedding rows start from CBOW vectors of the upstream text in upstream pieces
(Sato et al. 2020, §4.2) instead of random ones. Writes data/models/pretrained (a Marian directory),
data/plots/pretrain/*.csv and data/metrics/pretrain.json.
Interrupted runs resume from data/checkpoints/pretrain.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from stages import _paths as paths
from vocabridge.cbow import domain_text, initialise_embeddings
from vocabridge.config import load_params
from vocabridge.entry import run
from vocabridge.fileio import atomic_dir, sha256_file, write_json
from vocabridge.nmt.model import build_model, copy_model_dir, save_model
from vocabridge.nmt.train import State, fingerprint_of, fit, use_compute, write_logs
from vocabridge.nmt.vocab import pair_vocabs


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    cfg, lang = params.pretrain, params.lang
    if cfg.external_model:
        with atomic_dir(paths.PRETRAINED) as tmp:
            copy_model_dir(Path(cfg.external_model), tmp)
        write_logs(State(), paths.PLOTS / "pretrain")
        write_json(paths.METRICS / "pretrain.json", {"external_model": cfg.external_model})
        return
    src, tgt = pair_vocabs(paths.SPM / "upstream" / f"{lang.src}.model", paths.SPM / "upstream" / f"{lang.tgt}.model")
    model = build_model(cfg.arch, src, tgt, cfg.train.seed)
    corpus = paths.CORPORA / "upstream"
    init = {"init": cfg.init}
    if cfg.init == "cbow":
        texts = {"src": domain_text(corpus, lang.src), "tgt": domain_text(corpus, lang.tgt)}
        init["init_rows"] = initialise_embeddings(model, {"src": src, "tgt": tgt}, texts, cfg.cbow)
    model = model.to(use_compute(params.compute))
    fingerprint = fingerprint_of("pretrain", asdict(lang), asdict(cfg),
                                 sha256_file(corpus / "stats.json"), src.to_json(), tgt.to_json())
    state, summary = fit(model, src, tgt, corpus, lang, cfg.train, paths.CHECKPOINTS / "pretrain", fingerprint,
                         "pretrain")
    with atomic_dir(paths.PRETRAINED) as tmp:
        save_model(model.cpu(), src, tgt, tmp)
    write_logs(state, paths.PLOTS / "pretrain")
    write_json(paths.METRICS / "pretrain.json",
               summary | init | {"parameters": sum(p.numel() for p in model.parameters())})
    print(summary)


if __name__ == "__main__":
    run(main)
