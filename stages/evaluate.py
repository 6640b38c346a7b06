"""Stage evaluate@ROW-SEED: translate the downstream test set (beam search), score it with sacrebleu, and write
the cell's record.

Also the first `evaluate.upstream_sentences` pairs of the upstream test set, the same way: what adapting cost
on the original domain (forgetting); not for an AB-Net row whose model never trained upstream (`abnets.NAME.upstream:
false`): it had no upstream translation to forget, and they cost half the test set's decoding again. With
`evaluate.latency_sentences` N, the first N test sentences once more, one at a time: milliseconds a sentence, the
latency Guo et al. compare.
Also the dev verses of the books no checkpoint selection read (`evaluate.heldout_dev`): a second test set.
Writes data/cells/ROW/sSEED/: record.json (what the report needs of the cell: its metrics, the fine-tune's summary
and learning curve, the transfer diagnostics, the row's knobs and upstream model hash, the test set's digest, the
machine and the code commit), hyp.txt, upstream_hyp.txt and curve.csv. The record is small text, to be committed
(`vocabridge results --cells`), so that the cells of several sessions and machines add up to one study.
Significance is computed by the report stage, which sees every cell's hypotheses.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace

from stages._grid import cell_stage_args
from vocabridge import workspace as paths
from vocabridge.corpora.user import read_text_lines
from vocabridge.decoding import RowDecoder
from vocabridge.entry import run
from vocabridge.evaluate import score, second_test_set
from vocabridge.families import ModelFamily
from vocabridge.fileio import atomic_dir, write_json, write_lines
from vocabridge.grid import VERSION, Cell, code_commit, condition_digest, machine, text_digest
from vocabridge.nmt.train import threads_of, use_compute


def main(argv: list[str]) -> None:
    cell, params = cell_stage_args(__doc__, argv)
    cfg, lang, method = params.evaluate, params.lang, cell.row
    device = use_compute(params.compute)
    decode = RowDecoder(paths.finetuned(cell), cfg, params.abnet.decoding, device, threads_of(params.compute.threads))
    decoder, src, tgt, precision = decode.name, decode.src, decode.tgt, decode.precision
    family = decode.family  # which fine-tune budget the model trained under
    stamp = json.loads(paths.row_file(cell.row).read_text(encoding="utf-8"))  # the row's knobs (stage row@ROW)
    corpus = paths.CORPORA / "downstream"
    sources, refs = read_text_lines(corpus / f"test.{lang.src}"), read_text_lines(corpus / f"test.{lang.tgt}")
    hyps, speed = decode(sources)
    if cfg.latency_sentences:
        _, single = decode(sources[: cfg.latency_sentences], one_at_a_time=True)
        speed["latency_ms"] = round(1000 * single["seconds"] / max(1, min(len(sources), cfg.latency_sentences)), 1)
    metrics = {"method": method, "decoder": decoder, "test_sentences": len(sources),
               "beam": cfg.beam,
               "length_penalty": cfg.length_penalty, "vocab_size": {"src": len(src), "tgt": len(tgt)},
               **score(hyps, refs), **speed, **precision.as_metrics()}
    upstream_hyps, up_refs = [], []
    if cfg.upstream_sentences and family.translated_upstream(params, stamp["knobs"].get("upstream")):
        up = paths.CORPORA / "upstream"
        n = cfg.upstream_sentences
        up_sources = read_text_lines(up / f"test.{lang.src}")[:n]
        up_refs = read_text_lines(up / f"test.{lang.tgt}")[:n]
        upstream_hyps, _ = decode(up_sources)
        metrics["upstream"] = {"test_sentences": len(up_sources), **score(upstream_hyps, up_refs)}
    dev_sources, dev_refs, dev_books = heldout_dev(params, family) if cfg.heldout_dev else ([], [], [])
    dev_hyps = []
    if dev_sources:
        dev_hyps, _ = decode(dev_sources)
        metrics["heldout_dev"] = {"test_sentences": len(dev_sources), "books": dev_books,
                                  **score(dev_hyps, dev_refs)}
    record = cell_record(cell, stamp, params, metrics, refs, up_refs, family)
    if dev_refs:
        record["heldout_dev_test"] = {"sentences": len(dev_refs), "digest": text_digest(dev_refs), "books": dev_books}
    with atomic_dir(paths.cell_record(cell)) as tmp:
        write_lines(tmp / "hyp.txt", hyps)
        if upstream_hyps:
            write_lines(tmp / "upstream_hyp.txt", upstream_hyps)
        if dev_hyps:
            write_lines(tmp / "dev_hyp.txt", dev_hyps)
        curve(paths.per_cell(paths.PLOTS / "finetune", cell)).to_csv(tmp / "curve.csv", index=False)
        write_json(tmp / "record.json", record)
    print({k: metrics[k] for k in ("method", "bleu", "chrf", "ter", "sentences_per_second")}
          | ({"upstream_bleu": metrics["upstream"]["bleu"]} if "upstream" in metrics else {}))


def cell_record(cell: Cell, stamp: dict, params, metrics: dict, refs: list[str], up_refs: list[str],
                family: ModelFamily) -> dict:
    """Everything the report reads of a cell, from this stage's scores, the row's stamp and the earlier stages'
    files."""

    def read(path):
        return json.loads(path.read_text(encoding="utf-8"))

    train_pairs = stamp["knobs"].get("train_pairs")
    train_pairs = params.finetune.train_pairs if train_pairs is None else train_pairs
    # the row's budget (vocabridge.transfer.finetune_training, from the stamp's knobs) and the cell's seed
    training = asdict(replace(family.training(params, stamp["knobs"].get("max_updates")), seed=cell.seed))
    return {
        "version": VERSION, "study": params.profile, "row": cell.row, "seed": cell.seed, "cell": cell.name,
        "method": stamp["method"], "knobs": stamp["knobs"], "knobs_digest": stamp["knobs_digest"],
        "upstream": stamp["upstream"], "condition": stamp.get("condition"),
        "condition_digest": condition_digest(training, asdict(params.evaluate), train_pairs),
        "test": {"sentences": len(refs), "digest": text_digest(refs)},
        "upstream_test": {"sentences": len(up_refs), "digest": text_digest(up_refs)} if up_refs else None,
        "metrics": metrics,
        "finetune": read(paths.per_cell(paths.METRICS / "finetune", cell, ".json")),
        "transfer": read(paths.per_cell(paths.METRICS / "transfer", cell, ".json")),
        "diagnostics": read(paths.per_cell(paths.DIAGNOSTICS, cell, ".json")),
        "params": {"lang": asdict(params.lang), "finetune": training, "evaluate": asdict(params.evaluate),
                   "train_pairs": train_pairs},
        "machine": machine(), "commit": code_commit(), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def heldout_dev(params, family: ModelFamily) -> tuple[list[str], list[str], list[str]]:
    """The second test set (`vocabridge.evaluate.second_test_set`: a user's second test file, or the dev pairs of
    the books that no checkpoint selection read, which reads the first dev_sentences dev pairs): sources,
    references and the distinct books or documents."""
    sources, refs, books = second_test_set(paths.CORPORA / "downstream", params.lang,
                                           family.training(params).dev_sentences)
    return sources, refs, sorted(set(books))


def curve(plots):
    """The fine-tune's learning curve on dev: step, dev_bleu, dev_loss (empty for rows evaluated as they are)."""
    import pandas as pd

    frames = [pd.read_csv(plots / f"{name}.csv") for name in ("dev_bleu", "dev_loss")
              if (plots / f"{name}.csv").is_file()]
    if not frames:
        return pd.DataFrame(columns=["step", "dev_bleu", "dev_loss"])
    out = frames[0]
    for frame in frames[1:]:
        out = out.merge(frame, on="step", how="outer")
    return out


if __name__ == "__main__":
    run(main)
