"""Stage backtranslate: the downstream monolingual text of the target language, translated into the source
language by the backward upstream model (Sennrich et al. 2016; Sato et al. 2020's +BT rows).

Runs when `backtranslation.upstream` names an entry of `upstreams` (the backward model, `reverse: true`), for the
rows with `backtranslated: true`; otherwise it writes an empty corpus (not reading the rows keeps a row's edit from
rerunning it). The backward model is decoded by beam search
with the evaluate stage's decoder and precision (`evaluate.decoder`: CTranslate2, or transformers' search, which
runs on a GPU too, in `evaluate.bf16`). Writes data/corpora/backtranslated/{train.SRC,train.TGT,stats.json}: the
machine-made sources beside the real target sentences; lines with an empty translation are left out.
"""

from __future__ import annotations

from stages._args import stage_args
from vocabridge import workspace as paths
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.errors import ConfigError
from vocabridge.fileio import atomic_dir, write_json, write_lines
from vocabridge.nmt.train import threads_of, use_compute
from vocabridge.nmt.translate import ModelTranslator


def main(argv: list[str]) -> None:
    params = stage_args(__doc__, argv)
    cfg, lang = params.backtranslation, params.lang
    pairs: tuple[list[str], list[str]] = ([], [])
    stats = {"pairs": 0}
    spec = params.upstreams.get(cfg.upstream)
    if spec is not None:
        if not spec.reverse:
            raise ConfigError(f"params.yaml: backtranslation.upstream: upstreams.{cfg.upstream} must have "
                              f"`reverse: true` (the backward model translates {lang.tgt}->{lang.src})")
        mono = paths.CORPORA / "downstream" / f"mono.{lang.tgt}"
        if not mono.is_file():
            raise ConfigError(f"{mono}: no downstream monolingual text in {lang.tgt} to back-translate")
        targets = read_text_lines(mono)
        targets = targets[: cfg.sentences] if cfg.sentences else targets
        translator = ModelTranslator(paths.upstream(cfg.upstream), params.evaluate.decoder,
                                     use_compute(params.compute), params.evaluate.bf16,
                                     threads_of(params.compute.threads))
        sources, speed = translator(targets, beam=cfg.beam, batch_tokens=cfg.batch_tokens)
        kept = [(s, t) for s, t in zip(sources, targets, strict=True) if s.strip()]
        pairs = ([s for s, _ in kept], [t for _, t in kept])
        stats |= {"pairs": len(kept), "monolingual_lines": len(targets), "backward_model": cfg.upstream,
                  "beam": cfg.beam, "decoder": params.evaluate.decoder, **translator.precision.as_metrics(),
                  **speed}
    with atomic_dir(paths.BACKTRANSLATED) as tmp:
        write_lines(tmp / f"train.{lang.src}", pairs[0])
        write_lines(tmp / f"train.{lang.tgt}", pairs[1])
        write_json(tmp / "stats.json", stats)
    print(stats)


if __name__ == "__main__":
    run(main)
