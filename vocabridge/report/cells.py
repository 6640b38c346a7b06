"""One cell's line in the report: its record, its learning curve, the machine it ran on."""

from __future__ import annotations

import pandas as pd

from vocabridge.grid import CellRecord
from vocabridge.report.tables import curve_summary


def unseen_rate(diagnostics: dict, mismatch: dict | None, adapted: bool) -> float | None:
    """The target side's unseen-token rate of a row's vocabulary: the adapted vocabulary's against the pretrained
    one, a PLM row's against its BERT's, 0 for rows that keep their model's vocabulary (None: not measured)."""
    if "vocabulary_fit" in diagnostics:
        return diagnostics["vocabulary_fit"]["tgt"]["unseen_token_rate"]
    if mismatch is None:
        return None
    return mismatch["unseen_token_rate"] if adapted else 0.0



def machine_name(machine: dict) -> str:
    """A machine as the report names it: CPU, its capability and native bf16, and the GPU where there was one."""
    bf16 = {True: "bf16 yes", False: "bf16 no"}.get(machine.get("bf16_native"), "bf16 ?")
    gpu = f", GPU {machine['gpu']}" if machine.get("gpu") else ""
    return f"{machine.get('cpu') or '?'} ({machine.get('capability') or '?'}, {bf16}{gpu})"



def read_curve(record: CellRecord) -> pd.DataFrame:
    """A cell's learning curve (curve.csv: step, dev_bleu, dev_loss); empty for a cell that was not fine-tuned."""
    path = record.folder / "curve.csv"
    return pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=["step", "dev_bleu"])



def cell_line(record: CellRecord, curve: pd.DataFrame, threshold: float | None, unseen: float | None) -> dict:
    """One cell's figures (a line of cells.csv): scores, fine-tuning, zero-shot diagnostics, and where it ran."""
    data = record.data
    metrics, tuning = data.get("metrics") or {}, data.get("finetune") or {}
    zero, machine, upstream = data.get("transfer") or {}, data.get("machine") or {}, data.get("upstream") or {}
    vocab = metrics.get("vocab_size") or {}
    updates, best = tuning.get("updates"), tuning.get("best_update")
    budget = ((data.get("params") or {}).get("finetune") or {}).get("max_updates") or 0  # the row's budget
    # training.LoopState.ending's figures; an older record's from its updates (the same definitions)
    best_at_end = tuning.get("best_at_end", bool(updates) and best == updates)
    stopped_by = tuning.get("stopped_by", "cap" if updates and updates >= budget else None)
    return {"row": record.row, "seed": record.seed, "cell": record.cell.name, "method": data.get("method"),
            "bleu": metrics.get("bleu"), "chrf": metrics.get("chrf"), "ter": metrics.get("ter"),
            "upstream_bleu": (metrics.get("upstream") or {}).get("bleu"), "updates": updates, "best_update": best,
            "best_at_end": bool(best_at_end), "budget_stop": stopped_by == "cap",
            "trained_parameters": tuning.get("trainable_parameters"), "train_seconds": tuning.get("train_seconds"),
            "device": tuning.get("device"), "threads": tuning.get("threads"), "precision": tuning.get("precision"),
            **curve_summary(curve, threshold),
            "zero_shot_dev_bleu": zero.get("dev_bleu"), "zero_shot_dev_ppl": zero.get("dev_perplexity"),
            "loo_cos_src": zero.get("leave_one_out_cosine_encoder"),
            "loo_cos_tgt": zero.get("leave_one_out_cosine_decoder"),
            "src_vocab": vocab.get("src"), "tgt_vocab": vocab.get("tgt"), "unseen_token_rate": unseen,
            "mean_output_tokens": metrics.get("mean_output_tokens"),
            "sentences_per_second": metrics.get("sentences_per_second"), "latency_ms": metrics.get("latency_ms"),
            "decoder": metrics.get("decoder"), "upstream": upstream.get("name"),
            "upstream_sha256": upstream.get("sha256"),
            "machine": machine_name(machine), "capability": machine.get("capability"),
            "bf16_native": machine.get("bf16_native"), "gpu": machine.get("gpu"), "commit": data.get("commit"),
            "finished": data.get("finished"), "cells_folder": record.source}



