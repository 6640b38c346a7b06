"""Stage generator@VARIANT: pretrain an embedding generator (Liu et al. 2021, §3.3) on the upstream corpus.

The pretrained model is frozen; only the generator (params.yaml `generator.variants.VARIANT`: att or patt,
kd_lambda) trains. Writes data/models/generator/VARIANT.safetensors, the learning curve
data/plots/generator/VARIANT/train_loss.csv and data/metrics/generator/VARIANT.json. Interrupted runs resume
from data/checkpoints/generator/VARIANT.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

import torch

from stages import _paths as paths
from vocabridge.config import load_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.errors import ConfigError, InputError
from vocabridge.fileio import sha256_file, write_json
from vocabridge.nmt.data import Parallel
from vocabridge.nmt.model import load_model
from vocabridge.nmt.train import device_of, fingerprint_of
from vocabridge.transfer.generator import Generator, save_generator
from vocabridge.transfer.generator_training import GeneratorTrainer, summary, write_curve


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("variant", help="a key of params.yaml's generator.variants")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    cfg, lang = params.generator, params.lang
    if args.variant not in cfg.variants:
        raise ConfigError(f"params.yaml: generator.variants: no variant '{args.variant}' "
                          f"(known: {sorted(cfg.variants)})")
    variant = cfg.variants[args.variant]
    torch.set_num_threads(cfg.train.threads)
    model, src, tgt = load_model(paths.PRETRAINED, str(device_of(cfg.train.device)))
    corpus = paths.CORPORA / "upstream"
    data = Parallel.encode(read_text_lines(corpus / f"train.{lang.src}"), read_text_lines(corpus / f"train.{lang.tgt}"),
                           src, tgt, cfg.train.max_len)
    if not len(data):
        raise InputError(f"{corpus}: no training pair fits generator.train.max_len={cfg.train.max_len}")
    gen = Generator(variant.kind, model.config.d_model, cfg.train.patt_scale)
    fingerprint = fingerprint_of("generator", args.variant, asdict(lang), asdict(cfg.train), asdict(cfg.resegment),
                                 asdict(variant), sha256_file(paths.PRETRAINED / "model.safetensors"),
                                 sha256_file(corpus / "stats.json"))
    trainer = GeneratorTrainer(model, src, tgt, data, gen, variant.kd_lambda, cfg.train, cfg.resegment,
                               paths.CHECKPOINTS / "generator" / args.variant, fingerprint,
                               name=f"generator@{args.variant}")
    state = trainer.train()
    save_generator(gen, paths.GENERATORS / f"{args.variant}.safetensors")
    write_curve(state, paths.PLOTS / "generator" / args.variant / "train_loss.csv")
    result = summary(state, trainer) | {"train_pairs": len(data)}
    write_json(paths.METRICS / "generator" / f"{args.variant}.json", result)
    print(result)


if __name__ == "__main__":
    run(main)
