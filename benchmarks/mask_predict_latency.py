"""Guo et al.'s speed claim on this machine: Mask-Predict (AB-Net, the Mask-Predict baseline) beside the
autoregressive rows, in one script, on the same sentences, the rows taking turns.

    python benchmarks/mask_predict_latency.py [--workspace .] [--rows ft-srcv,mask-predict,abnet,abnet-enc]
                                              [--seed 1] [--sentences 100] [--batched 0] [--repeat 3] [--threads N]

Each row's fine-tuned model of seed S, as the flow leaves it in the workspace (data/models/finetuned/ROW/sS; a row
written ROW:S takes seed S, for a workspace whose rows have different seeds at hand),
decodes the first N downstream test sentences one at a time (milliseconds a sentence: the paper's latency) and the
first `--batched` test sentences (0: all of them) in the evaluate stage's batches (sentences a second), with the
evaluate stage's own code and the workspace's `evaluate` and `abnet.decoding` params. `--repeat` rounds, every
row once a round, so that background load meets every row alike; the fastest round counts. Prints per row its
decoding, ms a sentence, sentences/s, mean output pieces, mean iterations (Mask-Predict's; the searched AB-Net
family's decoder steps), and both speeds relative to the first row (list an autoregressive row first).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from vocabridge.config import load_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.decoding import RowDecoder
from vocabridge.grid import Cell
from vocabridge.nmt.train import threads_of, use_compute


def timed(decode: RowDecoder, lines: list[str], one_at_a_time: bool = False) -> dict:
    """The decoder's figures, with its wall time measured here (the decoders round theirs)."""
    started = time.perf_counter()
    _, speed = decode(lines, one_at_a_time=one_at_a_time)
    return speed | {"seconds": time.perf_counter() - started}


def fastest(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, default=Path("."))
    parser.add_argument("--rows", default="ft-srcv,mask-predict,abnet,abnet-enc",
                        help="comma-separated rows; the first is the reference of the ratios")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=100, help="decoded one at a time (latency)")
    parser.add_argument("--batched", type=int, default=0, help="decoded in batches (throughput); 0: the test set")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch threads (default: compute.threads)")
    args = parser.parse_args()
    os.chdir(args.workspace)
    params = load_params()
    if args.threads:
        params.compute.threads = args.threads
    device = use_compute(params.compute)
    cells = {}
    for spec in (r.strip() for r in args.rows.split(",") if r.strip()):
        row, _, seed = spec.partition(":")
        if seed and not seed.isdigit():
            parser.error(f"--rows: '{spec}' is not ROW or ROW:SEED")
        cells[row] = Cell(row, int(seed) if seed else args.seed)
    rows = list(cells)
    missing = [c.name for c in cells.values() if not (Path("data/models/finetuned") / c.path).is_dir()]
    if missing:
        parser.error(f"no fine-tuned model of {', '.join(missing)} under "
                     f"{args.workspace / 'data/models/finetuned'} (run the cells' finetune stages first)")
    corpus, lang = Path("data/corpora/downstream"), params.lang
    test = read_text_lines(corpus / f"test.{lang.src}")
    single, batched = test[: args.sentences], test[: args.batched or len(test)]
    decoders = {r: RowDecoder(Path("data/models/finetuned") / cells[r].path, params.evaluate,
                              params.abnet.decoding, device, threads_of(params.compute.threads)) for r in rows}
    runs: dict[str, dict[str, list[dict]]] = {r: {"single": [], "batched": []} for r in rows}
    for _ in range(max(1, args.repeat)):
        for row, decode in decoders.items():
            runs[row]["single"].append(timed(decode, single, one_at_a_time=True))
            runs[row]["batched"].append(timed(decode, batched))
    print(f"{len(single)} sentences one at a time, {len(batched)} batched, of {args.workspace / corpus}/test."
          f"{lang.src}; cells {', '.join(c.name for c in cells.values())}; {device}, "
          f"{threads_of(params.compute.threads)} threads; beam "
          f"{params.evaluate.beam}; Mask-Predict {params.abnet.decoding.length_candidates} lengths x at most "
          f"{params.abnet.decoding.iterations} iterations; fastest of {max(1, args.repeat)} rounds")
    print(f"{'row':<22}{'decoding':<34}{'ms/sentence':>12}{'sent/s':>9}{'pieces':>8}{'iters':>7}"
          f"{'latency x':>11}{'thru x':>8}")
    ref = None
    for row in rows:
        one, many = fastest(runs[row]["single"]), fastest(runs[row]["batched"])
        ms = 1000 * one["seconds"] / max(1, len(single))
        per_s = len(batched) / max(many["seconds"], 1e-9)
        ref = ref or (ms, per_s)
        iters = f"{many['mean_iterations']:.2f}" if "mean_iterations" in many else "-"
        print(f"{row:<22}{decoders[row].name:<34}{ms:12.1f}{per_s:9.1f}{many['mean_output_tokens']:8.1f}"
              f"{iters:>7}{ref[0] / ms:10.2f}x{per_s / ref[1]:7.2f}x")
    print("latency x: the first row's ms a sentence over this row's (above 1: faster one at a time); thru x: this "
          "row's sentences/s over the first row's")


if __name__ == "__main__":
    main()
