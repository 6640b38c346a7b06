"""Stage evaluate@METHOD: translate the downstream test set (beam search) and score it with sacrebleu.

Also the first `evaluate.upstream_sentences` pairs of the upstream test set, the same way: what adapting cost
on the original domain (forgetting). With `evaluate.latency_sentences` N, the first N test sentences once more,
one at a time: milliseconds a sentence, the latency Guo et al. compare.
Writes data/eval/METHOD/{hyp.txt,upstream_hyp.txt,metrics.json}.
Significance against the ft-srcv baseline is computed by the report stage, which sees every method's hypotheses
(so evaluate stages stay independent and parallel).
"""

from __future__ import annotations

from dataclasses import replace

from stages import _paths as paths
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.evaluate import score
from vocabridge.fileio import atomic_dir, write_json, write_lines
from vocabridge.nmt.precision import Precision
from vocabridge.nmt.train import threads_of, use_compute
from vocabridge.nmt.translate import ModelTranslator
from vocabridge.plm.abnet import load_abnet, model_kind
from vocabridge.plm.train import translate_abnet


def main(argv: list[str]) -> None:
    method, params = paths.method_stage_args(__doc__, argv)
    cfg, lang = params.evaluate, params.lang
    device = use_compute(params.compute)
    abnet = (paths.finetuned(method) / "abnet.json").is_file()  # an AB-Net row: Mask-Predict or AB-Net-Enc's search
    decoder = cfg.decoder
    if abnet:
        model, src, tgt = load_abnet(paths.finetuned(method), device)
        precision = Precision(False, "AB-Net decodes in fp32")
        decoder = {"abnet-enc": "transformers (AB-Net-Enc)", "plm-nmt": "beam search (PLM-sponsored)"}.get(
            model_kind(model), "mask-predict")
    else:
        translator = ModelTranslator(paths.finetuned(method), cfg.decoder, device, cfg.bf16,
                                     threads_of(params.compute.threads))
        src, tgt, precision = translator.src, translator.tgt, translator.precision
    corpus = paths.CORPORA / "downstream"
    sources, refs = read_text_lines(corpus / f"test.{lang.src}"), read_text_lines(corpus / f"test.{lang.tgt}")

    def decode(lines: list[str], one_at_a_time: bool = False) -> tuple[list[str], dict]:
        if abnet:
            decoding = replace(params.abnet.decoding, batch_sentences=1) if one_at_a_time else params.abnet.decoding
            return translate_abnet(model, src, tgt, lines, decoding, beam=cfg.beam, length_penalty=cfg.length_penalty)
        batch_tokens = 1 if one_at_a_time else cfg.batch_tokens  # a batch holds at least one sentence
        return translator(lines, beam=cfg.beam, length_penalty=cfg.length_penalty, batch_tokens=batch_tokens)

    hyps, speed = decode(sources)
    if cfg.latency_sentences:
        _, single = decode(sources[: cfg.latency_sentences], one_at_a_time=True)
        speed["latency_ms"] = round(1000 * single["seconds"] / max(1, min(len(sources), cfg.latency_sentences)), 1)
    metrics = {"method": method, "decoder": decoder, "test_sentences": len(sources),
               "beam": cfg.beam,
               "length_penalty": cfg.length_penalty, "vocab_size": {"src": len(src), "tgt": len(tgt)},
               **score(hyps, refs), **speed, **precision.as_metrics()}
    upstream_hyps = []
    if cfg.upstream_sentences:
        up = paths.CORPORA / "upstream"
        n = cfg.upstream_sentences
        up_sources = read_text_lines(up / f"test.{lang.src}")[:n]
        up_refs = read_text_lines(up / f"test.{lang.tgt}")[:n]
        upstream_hyps, _ = decode(up_sources)
        metrics["upstream"] = {"test_sentences": len(up_sources), **score(upstream_hyps, up_refs)}
    with atomic_dir(paths.evaluation(method)) as tmp:
        write_lines(tmp / "hyp.txt", hyps)
        if upstream_hyps:
            write_lines(tmp / "upstream_hyp.txt", upstream_hyps)
        write_json(tmp / "metrics.json", metrics)
    print({k: metrics[k] for k in ("method", "bleu", "chrf", "ter", "sentences_per_second")}
          | ({"upstream_bleu": metrics["upstream"]["bleu"]} if "upstream" in metrics else {}))


if __name__ == "__main__":
    run(main)
