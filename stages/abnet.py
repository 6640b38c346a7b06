"""Stage abnet@NAME: an AB-Net (Guo et al. 2020) trained on the upstream corpus, the upstream model of AB-Net rows.

The BERTs of the plm stage (lang.src as encoder, lang.tgt as decoder), frozen, joined by new adapters and trained
as a conditional masked LM on the upstream pairs (`abnet.train`, dev selection on the upstream dev set); with
`abnets.NAME.plms: false` the same layers start from random weights and all of them train (the Mask-Predict
baseline without BERT); `decoder: autoregressive` gives AB-Net-Enc (the adapted source BERT, a decoder from
scratch) and `decoder: coordinator` Duan & Zhao's PLM-sponsored model (abnet.sponsored with the entry's own
`sponsored` keys); with `upstream: false` nothing trains here and the rows learn from the downstream data alone.
Writes data/models/upstream/NAME (an AB-Net directory), data/plots/abnet/NAME/*.csv and
data/metrics/abnet/NAME.json; interrupted runs resume from data/checkpoints/abnet/NAME.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from vocabridge import workspace as paths
from vocabridge.config import load_params, sponsored_settings
from vocabridge.entry import run
from vocabridge.errors import ConfigError
from vocabridge.fileio import sha256_file, write_json
from vocabridge.nmt.train import State, fingerprint_of, use_compute, write_logs
from vocabridge.plm.abnet import model_kind, new_abnet, save_abnet
from vocabridge.plm.train import fit_abnet


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("name", help="an entry of params.yaml's `abnets`")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    name, cfg, lang = args.name, params.abnet, params.lang
    if name not in params.abnets:
        raise ConfigError(f"params.yaml: abnets: no entry '{name}' (entries: {sorted(params.abnets)})")
    spec, sponsored = params.abnets[name], sponsored_settings(params, name)
    device = use_compute(params.compute)
    model, source_tokenizer, target_tokenizer = new_abnet(paths.PLMS / lang.src, paths.PLMS / lang.tgt, cfg.adapters,
                                                          spec.plms, cfg.train.seed, spec.decoder, sponsored)
    model.to(device)  # made on the CPU (the same initial weights everywhere), trained on compute.device
    plots, metrics = paths.abnet_outputs(name)
    summary: dict = {"updates": 0, "stopped": "no upstream training (abnets.NAME.upstream: false)"}
    state = State()
    if spec.upstream:
        corpus = paths.CORPORA / "upstream"
        fingerprint = fingerprint_of("abnet", name, asdict(lang), asdict(spec), asdict(cfg.adapters), cfg.length_weight,
                                     *([asdict(sponsored)] if model_kind(model) == "plm-nmt" else []),
                                     asdict(cfg.train), sha256_file(corpus / "stats.json"),
                                     *(sha256_file(paths.PLMS / code / "model.safetensors")
                                       for code in (lang.src, lang.tgt)))
        state, summary = fit_abnet(model, source_tokenizer, target_tokenizer, corpus, lang, cfg.train,
                                   paths.CHECKPOINTS / "abnet" / name, fingerprint, f"abnet {name}", cfg.dev_decoding,
                                   cfg.length_weight)
    save_abnet(model, paths.upstream(name), source_tokenizer, target_tokenizer)
    write_logs(state, plots)
    write_json(metrics, summary | {"plms": spec.plms})
    print(summary)


if __name__ == "__main__":
    run(main)
