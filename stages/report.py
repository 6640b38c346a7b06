"""Stage report: one table of every evaluated method (CSV + Markdown) and a BLEU bar plot.

Paired bootstrap resampling (sacrebleu) of each method against the baseline (ft-srcv) happens here,
where all hypotheses are at hand.
"""

from __future__ import annotations

import json

from stages import _paths as paths
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.errors import InputError
from vocabridge.evaluate import paired_bootstrap
from vocabridge.fileio import atomic_dir
from vocabridge.report import bleu_plot, build_table, neighbours_markdown, to_markdown
from vocabridge.transfer import get_method


def _read(path, stage: str) -> dict:
    if not path.is_file():
        raise InputError(f"{path}: missing; run `dvc repro {stage}`")
    return json.loads(path.read_text(encoding="utf-8"))


def main(argv: list[str]) -> None:
    params = paths.stage_args(__doc__, argv)
    lang, cfg = params.lang, params.report
    refs = read_text_lines(paths.CORPORA / "downstream" / f"test.{lang.tgt}")
    mismatch = json.loads((paths.REPORTS / "mismatch.json").read_text())
    rows, hyps, diagnostics = [], {}, {}
    for method in params.methods:
        folder = paths.evaluation(method)
        if not (folder / "metrics.json").is_file():
            raise InputError(f"{folder}/metrics.json: missing; run `dvc repro evaluate@{method}`")
        metrics = json.loads((folder / "metrics.json").read_text())
        tuning = json.loads((paths.METRICS / "finetune" / f"{method}.json").read_text())
        hyps[method] = (folder / "hyp.txt").read_text(encoding="utf-8").split("\n")[:-1]  # lines may be empty
        adapted = get_method(method, params.transfer).vocabulary == "downstream"
        zero = _read(paths.METRICS / "transfer" / f"{method}.json", f"transfer@{method}")
        diagnostics[method] = _read(paths.DIAGNOSTICS / f"{method}.json", f"transfer@{method}")
        rows.append({
            "method": method, "bleu": metrics["bleu"], "chrf": metrics["chrf"], "ter": metrics["ter"],
            "src_vocab": metrics["vocab_size"]["src"], "tgt_vocab": metrics["vocab_size"]["tgt"],
            "unseen_token_rate": mismatch[lang.tgt]["unseen_token_rate"] if adapted else 0.0,
            "mean_output_tokens": metrics["mean_output_tokens"],
            "sentences_per_second": metrics["sentences_per_second"],
            "updates": tuning.get("updates"), "best_update": tuning.get("best_update"),
            "zero_shot_dev_bleu": zero["dev_bleu"], "zero_shot_dev_ppl": zero["dev_perplexity"],
            "loo_cos_src": zero.get("leave_one_out_cosine_encoder"),
            "loo_cos_tgt": zero.get("leave_one_out_cosine_decoder"),
        })
    baseline = cfg.baseline if cfg.baseline in hyps else params.methods[0]
    others = [(m, hyps[m]) for m in params.methods if m != baseline]
    tests = paired_bootstrap((baseline, hyps[baseline]), others, refs, cfg.bootstrap_samples, cfg.seed)
    for row in rows:
        row["bleu_ci"] = tests[row["method"]]["ci"]
        row["p_value"] = tests[row["method"]]["p_value"]
    table = build_table(rows, baseline)
    with atomic_dir(paths.REPORTS / "results") as tmp:
        table.to_csv(tmp / "report.csv", index=False)
        (tmp / "report.md").write_text(to_markdown(table) + neighbours_markdown(diagnostics), encoding="utf-8")
        bleu_plot(table, tmp / "bleu.png")
    print(to_markdown(table))


if __name__ == "__main__":
    run(main)
