"""Which token-distillation settings the `distill` row should run with, measured on a workspace's models.

    python benchmarks/distill_settings.py --workspace ../ws-study                       # the default grid below
    python benchmarks/distill_settings.py --workspace ../ws-study --init-from patt-eg-kd --sides both \
        --align last mean --epochs 0 1 3 --lr 0.001 --csv distill.csv

In a workspace whose `transfer` stage can run (the base model, the downstream vocabularies and CBOW vectors, the
generators its `init_from` needs: `dvc repro generator cbow`), builds the initial model of `--init-from` exactly as
the transfer stage does (seed 1, the row knobs given), then distils it under each setting of the grid (`--align` x
`--lr` x `--output`, the output term's weight) from that same start, and measures what the transfer stage reports
before any fine-tune: the objective before and after (its encoder, decoder and output terms on the first pairs),
zero-shot greedy dev BLEU and dev perplexity on the first `diagnostics.dev_sentences` dev verses, and the seconds
it took (at `--threads`; name the CPU beside the figures). Each setting trains once to the largest of `--epochs`
and is measured after each epoch the list names (its objective only at the end); epochs 0 is the starting
method's model itself. `--pairs N` distils on the first N training pairs only. Prints one line per measurement;
`--csv` rewrites the table after each.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, default=Path("."))
    parser.add_argument("--init-from", default="ft-tgtv-random")
    parser.add_argument("--sides", default="both", choices=("encoder", "decoder", "both"))
    parser.add_argument("--align", nargs="+", default=["last", "mean"])
    parser.add_argument("--epochs", type=int, nargs="+", default=[0, 1, 3])
    parser.add_argument("--lr", type=float, nargs="+", default=[1e-3])
    parser.add_argument("--output", type=float, nargs="+", default=[1.0], help="weights of the output term")
    parser.add_argument("--pairs", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--csv", type=Path, default=None)
    args = parser.parse_args(argv)
    os.chdir(args.workspace)  # its data/ folders; the code is this checkout's
    torch.set_num_threads(args.threads)

    from stages.transfer import resources
    from vocabridge import workspace as paths
    from vocabridge.config import TransferMethod, load_params
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.nmt.model import load_model
    from vocabridge.nmt.precision import describe_cpu
    from vocabridge.transfer import METHODS, knobs_for
    from vocabridge.transfer.diagnostics import zero_shot
    from vocabridge.transfer.distill import Settings, distill

    params = load_params(Path("params.yaml"))
    lang, corpus = params.lang, paths.CORPORA / "downstream"
    n = params.diagnostics.dev_sentences
    dev_src, dev_ref = (read_text_lines(corpus / f"dev.{code}")[:n] for code in (lang.src, lang.tgt))
    rows = {"start": TransferMethod(method=args.init_from, sides=args.sides)}
    knobs = knobs_for("start", rows)
    res = resources(params, knobs, 1)
    started = time.perf_counter()
    start, src, tgt, _ = METHODS[args.init_from].build(res)
    build_seconds = time.perf_counter() - started
    teacher, old_src, old_tgt = load_model(res.pretrained)
    pairs = [read_text_lines(corpus / f"train.{code}") for code in (lang.src, lang.tgt)]
    cpu = describe_cpu()
    print(f"# {args.init_from} ({args.sides}) built in {build_seconds:.1f} s; {cpu['cpu']}, {cpu['capability']}, "
          f"bf16 native {cpu['bf16_native']}, {args.threads} thread(s)", flush=True)
    lines = []

    def measure(model, align: str, lr: float | None, output: float | None, epochs: int, stats: dict,
                seconds: float) -> None:
        scores = zero_shot(model, src, tgt, dev_src, dev_ref)
        line = {"init_from": args.init_from, "sides": args.sides, "align": align, "epochs": epochs, "lr": lr,
                "output": output,
                "pairs": stats.get("pairs"), **{f"loss_before_{k}": v for k, v in stats.get("loss_before", {}).items()},
                **{f"loss_after_{k}": v for k, v in stats.get("loss_after", {}).items()},
                "zero_shot_dev_bleu": scores["dev_bleu"], "zero_shot_dev_ppl": scores["dev_perplexity"],
                "seconds": round(seconds, 1), "threads": args.threads, "cpu": cpu["capability"]}
        lines.append(line)
        print(line, flush=True)
        if args.csv:
            pd.DataFrame(lines).to_csv(args.csv, index=False)

    if 0 in args.epochs:
        measure(start, "", None, None, 0, {}, 0.0)
    last = max(args.epochs)
    for align in args.align:
        for lr in args.lr:
            for output in args.output:
                if not last:
                    continue
                model = copy.deepcopy(start)
                began = time.perf_counter()
                settings = Settings(align=align, epochs=last, lr=lr, pairs=args.pairs, output=output, seed=1)

                def after(epoch: int, model=model, align=align, lr=lr, output=output, began=began) -> None:
                    if epoch in args.epochs and epoch != last:  # the last one is measured with its objective
                        measure(model, align, lr, output, epoch, {}, time.perf_counter() - began)

                stats = distill(teacher, old_src, old_tgt, model, src, tgt, *pairs, settings, after_epoch=after)
                measure(model, align, lr, output, last, stats, stats["seconds"])
    print(pd.DataFrame(lines).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
