"""Stage generator: pretrain the embedding generators (Liu et al. 2021, §3.3) that params.yaml's `generators` lists.

For each (att-eg rows use att, patt-eg patt, patt-eg-kd patt-kd; none by default) the pretrained model is frozen
and only the generator (params.yaml `generator.variants.VARIANT`: att or patt, kd_lambda) trains on the upstream
corpus, re-segmenting the sides its rows adapt: VARIANT for decoder rows (Liu et al.'s), VARIANT-both for rows with
`sides: both`. The list is explicit (not read off the rows) so that editing a row never retrains a generator. Writes
data/models/upstream/generators/NAME.safetensors, the learning curves data/plots/generator.csv and
data/metrics/generator.json. Interrupted runs resume from data/checkpoints/generator/NAME.
"""

from __future__ import annotations

from dataclasses import asdict

from stages._args import stage_args
from vocabridge import workspace as paths
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.errors import ConfigError, InputError
from vocabridge.fileio import atomic_dir, sha256_file, write_json
from vocabridge.nmt.data import Parallel
from vocabridge.nmt.model import load_model
from vocabridge.nmt.train import fingerprint_of, use_compute
from vocabridge.transfer.generator import Generator, save_generator
from vocabridge.transfer.generator_training import GeneratorTrainer, summary, write_curves


def main(argv: list[str]) -> None:
    params = stage_args(__doc__, argv)
    needed = list(params.generators)
    for name in needed:
        if name.removesuffix("-both") not in params.generator.variants:
            raise ConfigError(f"params.yaml: generator.variants: no variant '{name.removesuffix('-both')}' "
                              f"(known: {sorted(params.generator.variants)})")
    results, states = {}, {}
    with atomic_dir(paths.GENERATORS) as tmp:
        for name in needed:
            states[name], results[name] = train_variant(params, name, tmp / f"{name}.safetensors")
        write_json(tmp / "variants.json", {"trained": needed})
    write_curves(states, paths.PLOTS / "generator.csv")
    write_json(paths.METRICS / "generator.json", results)
    print(results or "params.yaml lists no generators")


def train_variant(params, name: str, out):
    cfg, lang = params.generator, params.lang
    base = name.removesuffix("-both")
    variant, sides = cfg.variants[base], "both" if name != base else "decoder"
    model, src, tgt = load_model(paths.PRETRAINED, str(use_compute(params.compute, cfg.train.threads)))
    corpus = paths.CORPORA / "upstream"
    data = Parallel.encode(read_text_lines(corpus / f"train.{lang.src}"), read_text_lines(corpus / f"train.{lang.tgt}"),
                           src, tgt, cfg.train.max_len)
    if not len(data):
        raise InputError(f"{corpus}: no training pair fits generator.train.max_len={cfg.train.max_len}")
    gen = Generator(variant.kind, model.config.d_model, cfg.train.patt_scale)
    fingerprint = fingerprint_of("generator", name, sides, asdict(lang), asdict(cfg.train), asdict(cfg.resegment),
                                 asdict(variant), sha256_file(paths.PRETRAINED / "model.safetensors"),
                                 sha256_file(corpus / "stats.json"))
    trainer = GeneratorTrainer(model, src, tgt, data, gen, variant.kd_lambda, cfg.train, cfg.resegment,
                               paths.CHECKPOINTS / "generator" / name, fingerprint, name=f"generator {name}",
                               sides=sides)
    state = trainer.train()
    save_generator(gen, out, model_sha256=sha256_file(paths.PRETRAINED / "model.safetensors"))
    return state, summary(state, trainer) | {"train_pairs": len(data)}


if __name__ == "__main__":
    run(main)
