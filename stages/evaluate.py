"""Stage evaluate@METHOD: translate the downstream test set (beam search) and score it with sacrebleu.

Writes data/eval/METHOD/{hyp.txt,metrics.json}. Significance against the ft-srcv baseline is computed by
the report stage, which sees every method's hypotheses (so evaluate stages stay independent and parallel).
"""

from __future__ import annotations

from stages import _paths as paths
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.evaluate import score
from vocabridge.fileio import atomic_dir, write_json, write_lines
from vocabridge.nmt.model import load_model
from vocabridge.nmt.precision import Precision, resolve_bf16
from vocabridge.nmt.train import threads_of, use_compute
from vocabridge.nmt.translate import translate


def main(argv: list[str]) -> None:
    method, params = paths.method_stage_args(__doc__, argv)
    cfg, lang = params.evaluate, params.lang
    device = use_compute(params.compute)
    model, src, tgt = load_model(paths.finetuned(method), str(device))
    corpus = paths.CORPORA / "downstream"
    sources, refs = read_text_lines(corpus / f"test.{lang.src}"), read_text_lines(corpus / f"test.{lang.tgt}")
    precision = Precision(False, "ctranslate2 (its own default compute type)")
    if cfg.decoder == "ctranslate2":
        from vocabridge.ct2 import translate_ct2

        hyps, speed = translate_ct2(paths.finetuned(method), sources, beam=cfg.beam, length_penalty=cfg.length_penalty,
                                    batch_tokens=cfg.batch_tokens, threads=threads_of(params.compute.threads),
                                    device=device.type)
    else:
        precision = resolve_bf16(cfg.bf16, device)
        hyps, speed = translate(model, src, tgt, sources, beam=cfg.beam, length_penalty=cfg.length_penalty,
                                batch_tokens=cfg.batch_tokens, bf16=precision.bf16)
    metrics = {"method": method, "decoder": cfg.decoder, "test_sentences": len(sources), "beam": cfg.beam,
               "length_penalty": cfg.length_penalty, "vocab_size": {"src": len(src), "tgt": len(tgt)},
               **score(hyps, refs), **speed, **precision.as_metrics()}
    with atomic_dir(paths.evaluation(method)) as tmp:
        write_lines(tmp / "hyp.txt", hyps)
        write_json(tmp / "metrics.json", metrics)
    print({k: metrics[k] for k in ("method", "bleu", "chrf", "ter", "sentences_per_second")})


if __name__ == "__main__":
    run(main)
