"""Stages pretrain and upstream@NAME: train an upstream (IT) model, or take the user's Marian/OPUS-MT model instead.

`pretrain` trains the base model every row starts from unless it names another: data/models/upstream/base.
With `pretrain.init: cbow` the embedding rows start from CBOW vectors of the upstream text in upstream pieces
(Sato et al. 2020, §4.2) instead of random ones. `upstream NAME` trains `upstreams.NAME` with the same recipe
(corpus, architecture, training, init) but its own vocabulary (the downstream one, or one trained on both domains'
text), sampled segmentations, or the downstream training pairs mixed in behind domain tags: the baselines that
adapt the vocabulary, or the whole model, before pretraining (ft-tgtv, joint-vocab, bpe-drop, mdl); or the
opposite direction (`reverse`), the backward model of back-translation. Writes the
model directory (data/models/upstream/NAME), data/plots/{pretrain,upstream/NAME}/*.csv and
data/metrics/{pretrain,upstream/NAME}.json. Interrupted runs resume from data/checkpoints/{pretrain,upstream/NAME}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from vocabridge import workspace as paths
from vocabridge.cbow import domain_text, initialise_embeddings
from vocabridge.checkpoint import resumable
from vocabridge.config import Lang, UpstreamModel, load_params
from vocabridge.corpora.sample import sample_pairs
from vocabridge.entry import run
from vocabridge.errors import ConfigError
from vocabridge.fileio import atomic_dir, sha256_file, write_json
from vocabridge.nmt.model import build_model, copy_model_dir, save_model
from vocabridge.nmt.train import State, fingerprint_of, fit, use_compute, write_logs
from vocabridge.nmt.vocab import domain_tag, pair_vocabs
from vocabridge.tokenizers import train_spm


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("name", nargs="?", default="base", help="an entry of params.yaml's `upstreams` (default: "
                        "the base model of the `pretrain` section)")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    cfg, name = params.pretrain, args.name
    if name != "base" and name not in params.upstreams:
        raise ConfigError(f"params.yaml: upstreams: no entry '{name}' (entries: {sorted(params.upstreams)})")
    spec = params.upstreams.get(name, UpstreamModel())
    lang = Lang(params.lang.tgt, params.lang.src) if spec.reverse else params.lang  # the backward model
    base = name == "base"
    out = paths.upstream(name)
    logs = paths.PLOTS / ("pretrain" if base else f"upstream/{name}")
    metrics = paths.METRICS / ("pretrain.json" if base else f"upstream/{name}.json")
    checkpoints = paths.CHECKPOINTS / ("pretrain" if base else f"upstream/{name}")
    if cfg.external_model:
        with atomic_dir(out) as tmp:
            copy_model_dir(Path(cfg.external_model), tmp)
        write_logs(State(), logs)
        write_json(metrics, {"external_model": cfg.external_model})
        return
    corpus, downstream = paths.CORPORA / "upstream", paths.CORPORA / "downstream"
    tags = (domain_tag("upstream"), domain_tag("downstream")) if spec.mix_downstream else ()
    src, tgt = pair_vocabs(*vocabularies(spec, params, lang, name), tgt_extra=tags)
    model = build_model(cfg.arch, src, tgt, cfg.train.seed)
    init = {"init": cfg.init, "vocab": spec.vocab, "sampling_alpha": spec.sampling_alpha,
            "mix_downstream": spec.mix_downstream}
    mixing = [sha256_file(downstream / "stats.json"), params.finetune.train_pairs] if spec.mix_downstream else []
    fingerprint = fingerprint_of("pretrain", asdict(lang), asdict(cfg), sha256_file(corpus / "stats.json"),
                                 src.to_json(), tgt.to_json(), *([] if base else [asdict(spec)]), *mixing)
    if cfg.init == "cbow":  # not again when resuming: the checkpoint holds the rows, init_rows.json their record
        record = checkpoints / "init_rows.json"
        if resumable(checkpoints, fingerprint) and record.is_file():
            init["init_rows"] = json.loads(record.read_text(encoding="utf-8"))
        else:
            shutil.rmtree(checkpoints, ignore_errors=True)  # another configuration's, which training would drop
            domains = (corpus, downstream) if spec.mix_downstream else (corpus,)  # MDL: CBOW on both (Sato et al.)
            texts = {role: [line for folder in domains for line in domain_text(folder, code)]
                     for role, code in (("src", lang.src), ("tgt", lang.tgt))}
            init["init_rows"] = initialise_embeddings(model, {"src": src, "tgt": tgt}, texts, cfg.cbow)
            write_json(record, init["init_rows"])
    model = model.to(use_compute(params.compute))
    with tempfile.TemporaryDirectory(prefix="vocabridge-pairs-") as tmp:
        mix_with = None
        if spec.mix_downstream:  # the pairs every fine-tuned row trains on
            pairs = params.finetune.train_pairs
            mix_with = sample_pairs(downstream, lang, pairs, Path(tmp), "finetune.train_pairs") if pairs \
                else downstream
        state, summary = fit(model, src, tgt, corpus, lang, cfg.train, checkpoints, fingerprint,
                             "pretrain" if base else f"upstream {name}", spec.sampling_alpha, mix_with)
    with atomic_dir(out) as tmp:
        save_model(model.cpu(), src, tgt, tmp)
    write_logs(state, logs)
    write_json(metrics, summary | init | {"parameters": sum(p.numel() for p in model.parameters())})
    print(summary)


def vocabularies(spec: UpstreamModel, params, lang: Lang, name: str) -> tuple[bytes | Path, bytes | Path]:
    """The SentencePiece models (source, target) the upstream model is trained with, in direction `lang`."""
    if spec.vocab in ("upstream", "downstream"):
        folder = paths.SPM / spec.vocab
        return folder / f"{lang.src}.model", folder / f"{lang.tgt}.model"
    # joint: one model per language on both domains' text (train + mono), at the upstream vocabulary's size
    models = []
    for code in (lang.src, lang.tgt):
        text = [line for domain in ("upstream", "downstream") for line in domain_text(paths.CORPORA / domain, code)]
        models.append(train_spm(text, getattr(params.spm.upstream, code), params.spm.seed, params.spm.threads,
                                f"upstreams.{name} ({code})"))
    return models[0], models[1]


if __name__ == "__main__":
    run(main)
