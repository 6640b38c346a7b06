"""Stage plm@LANG: the pretrained language model of one language (a BERT with its MLM head), for AB-Net.

No German BERT ships offline, so by default the pipeline makes its own: a unigram vocabulary of
`plms.LANG.vocab_size` pieces and a `plm.arch` BERT, masked-LM pretrained (`plm.train`) on the LANG text the
pipeline has: the upstream and downstream training and monolingual text, never dev or test. Its learning curve
(masked-LM loss and masked-piece accuracy on the first `plm.train.held_out_sentences` lines of the downstream dev
text, which it never trains on) goes to data/plots/plm/LANG/curve.csv. With `plms.LANG.model: DIR` the user's
Hugging Face BERT directory is checked and taken instead (offline, weights from model.safetensors only). Writes
data/models/plm/LANG and data/metrics/plm/LANG.json; interrupted runs resume from data/checkpoints/plm/LANG.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import asdict
from pathlib import Path

import torch

from vocabridge import workspace as paths
from vocabridge.cbow import domain_text
from vocabridge.config import load_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.errors import ConfigError
from vocabridge.fileio import atomic_file, sha256_file, write_json
from vocabridge.nmt.train import fingerprint_of, use_compute
from vocabridge.plm.bert import MlmTrainer, build_bert, encode_sentences, load_bert, save_bert, train_plm_tokenizer

CURVE_COLUMNS = ["step", "train_loss", "held_out_loss", "held_out_accuracy"]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("lang", help="a language of params.yaml's `plms`")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    code, cfg = args.lang, params.plm
    if code not in params.plms:
        raise ConfigError(f"params.yaml: plms: no entry '{code}' (entries: {sorted(params.plms)})")
    spec = params.plms[code]
    out, (curve, metrics) = paths.PLMS / code, paths.plm_outputs(code)
    device = use_compute(params.compute, cfg.train.threads)  # the BERT's bits depend on it
    if spec.model:
        model, tokenizer = load_bert(Path(spec.model))
        save_bert(model, tokenizer, out)
        write_curve([], curve)
        write_json(metrics, {"external_model": spec.model, "vocab_size": len(tokenizer),
                             "parameters": sum(p.numel() for p in model.parameters())})
        return
    text = [line for domain in ("upstream", "downstream") for line in domain_text(paths.CORPORA / domain, code)]
    held_out = read_text_lines(paths.CORPORA / "downstream" / f"dev.{code}")
    checkpoints = paths.CHECKPOINTS / "plm" / code
    sources = [sha256_file(paths.CORPORA / d / "stats.json") for d in ("upstream", "downstream")]
    tokenizer = vocabulary(text, spec.vocab_size, checkpoints / "tokenizer", fingerprint_of(code, spec.vocab_size,
                                                                                              *sources))
    fingerprint = fingerprint_of("plm", code, asdict(cfg), *sources,
                                 sha256_file(checkpoints / "tokenizer" / "tokenizer.json"))
    model = build_bert(cfg.arch, tokenizer, cfg.train.seed)
    ids = encode_sentences(tokenizer, text, cfg.train.max_len)
    trainer = MlmTrainer(model, tokenizer, ids, encode_sentences(tokenizer, held_out, cfg.train.max_len), cfg.train,
                         checkpoints, fingerprint, f"plm {code}", device)
    state = trainer.train()
    if cfg.train.patience:
        trainer.load_best()  # the most accurate update, not the last
    save_bert(model, tokenizer, out)
    write_curve(state.curve, curve)
    kept = next(row for row in state.curve if row["step"] == state.best_step) if cfg.train.patience \
        else state.curve[-1]
    summary = {"updates": state.step, "best_update": kept["step"], "stopped": state.stopped or "max_updates",
               "train_sentences": len(ids), "vocab_size": len(tokenizer),
               "held_out_sentences": len(trainer.held_out), "held_out_loss": kept["held_out_loss"],
               "held_out_accuracy": kept["held_out_accuracy"], "train_seconds": round(state.seconds, 1),
               "parameters": sum(p.numel() for p in model.parameters()), **trainer.precision.as_metrics(),
               "threads": torch.get_num_threads(), "device": str(device)}
    write_json(metrics, summary)
    print(summary)


def vocabulary(text: list[str], size: int, folder: Path, fingerprint: dict):
    """The BERT's tokenizer: trained once per text and size, then reused when training resumes (the
    checkpoint's fingerprint names the tokenizer file, so that a retrained one starts training afresh)."""
    from transformers.models.auto.tokenization_auto import AutoTokenizer

    record = folder / "fingerprint.json"
    if record.is_file() and json.loads(record.read_text(encoding="utf-8")) == fingerprint:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    shutil.rmtree(folder, ignore_errors=True)
    tokenizer = train_plm_tokenizer(text, size, folder)
    write_json(record, fingerprint)
    return tokenizer


def write_curve(rows: list[dict], path: Path) -> None:
    """The masked-LM learning curve as a CSV file that `dvc plots show` draws."""
    import pandas as pd

    with atomic_file(path) as f:
        pd.DataFrame(rows, columns=CURVE_COLUMNS).to_csv(f, index=False)


if __name__ == "__main__":
    run(main)
