"""How many generator steps the default profile needs (Liu et al. 2021, Fig. 4, at this profile's scale).

    python benchmarks/generator_steps.py                          # patt-kd, steps 0 25 50 100 200 400 800
    python benchmarks/generator_steps.py --variant att --steps 0 100 200 --threads 1
    python benchmarks/generator_steps.py --device cuda --steps 0 1000 2000 4000 8000 16000 --budget-s 400 \
        --csv curve.csv --log-csv loss.csv                        # towards convergence on a GPU

Trains one generator variant of params.yaml (`generator.variants`) on the pipeline's upstream corpus exactly as
the generator stage does (same batches, re-segmentation and learning rate; run `dvc repro cbow` first so that
the pretrained model and the downstream vocabularies exist), and at each step count of `--steps` builds the
patt-eg-kd style initial model (decoder side generated, the `rows` knobs of the matching method) and measures
its zero-shot greedy dev BLEU and dev perplexity on the first `diagnostics.dev_sentences` dev verses, the
diagnostics the transfer stage reports. Step 0 is the untrained generator (equal weights: avg-eg). Prints one
row per step count: training seconds so far, target tokens/s, loss, zero-shot BLEU and perplexity. The generator
trains on `--device` (the frozen model beside it, fp32 as in the stage); the initial model is built on the CPU as
the transfer stage builds it and scored on `--device`. `--budget-s` skips the step counts whose training would
not end within that many seconds at the rate measured so far; `--csv` and `--log-csv` rewrite the table and the
training loss curve (every `log_every` steps) after each step count, so a run stopped early keeps what it measured.
`--finetune-seeds 1 2 3` also fine-tunes each initial model as the finetune stage does (`finetune.train`, on
`finetune.train_pairs` pairs, at `--threads` on `--device`), once per seed, and reports its best greedy dev BLEU:
Liu et al.'s Fig. 4 plots BLEU after fine-tuning, which the zero-shot scores only approximate (the budget check
counts the generator's training only).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vocabridge.config import load_params  # noqa: E402
from vocabridge.corpora.sample import sample_pairs  # noqa: E402
from vocabridge.corpora.user import read_text_lines  # noqa: E402
from vocabridge.nmt.data import Parallel  # noqa: E402
from vocabridge.nmt.model import load_model  # noqa: E402
from vocabridge.nmt.train import fit  # noqa: E402
from vocabridge.transfer import Resources, adapt, knobs_for  # noqa: E402
from vocabridge.transfer.diagnostics import zero_shot  # noqa: E402
from vocabridge.transfer.generator import Generator  # noqa: E402
from vocabridge.transfer.generator_training import GeneratorTrainer  # noqa: E402
from vocabridge.transfer.methods import generated  # noqa: E402

METHOD_OF = {"att": "att-eg", "patt": "patt-eg", "patt-kd": "patt-eg-kd"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="patt-kd", help="a key of generator.variants in params.yaml")
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 25, 50, 100, 200, 400, 800])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="where the generator trains and the initial models are "
                        "scored: cpu, cuda, cuda:N")
    parser.add_argument("--budget-s", type=float, default=None, help="skip step counts that would not finish "
                        "training within this many seconds at the measured rate")
    parser.add_argument("--csv", type=Path, help="write the table here after each step count")
    parser.add_argument("--log-csv", type=Path, help="write the training loss curve here after each step count")
    parser.add_argument("--finetune-seeds", type=int, nargs="*", default=[], help="fine-tune each initial model "
                        "with these seeds and report the mean best dev BLEU (Liu et al.'s Fig. 4)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_params()
    lang, cfg = params.lang, params.generator
    variant = cfg.variants[args.variant]
    data_dir = Path("data")
    pretrained, corpus = data_dir / "models/upstream/base", data_dir / "corpora/upstream"
    device = torch.device(args.device)
    model, src, tgt = load_model(pretrained, device)
    data = Parallel.encode(read_text_lines(corpus / f"train.{lang.src}"), read_text_lines(corpus / f"train.{lang.tgt}"),
                           src, tgt, cfg.train.max_len)
    gen = Generator(variant.kind, model.config.d_model, cfg.train.patt_scale)
    method = METHOD_OF.get(args.variant, "patt-eg-kd")
    res = Resources(pretrained=pretrained,
                    downstream_spm={r: data_dir / "spm/downstream" / f"{c}.model"
                                    for r, c in (("src", lang.src), ("tgt", lang.tgt))},
                    seed=params.seeds[0], knobs=knobs_for(method, params.rows),
                    diagnostics=params.diagnostics)
    down = data_dir / "corpora/downstream"
    n = params.diagnostics.dev_sentences
    dev_src, dev_ref = read_text_lines(down / f"dev.{lang.src}")[:n], read_text_lines(down / f"dev.{lang.tgt}")[:n]
    print(f"variant {args.variant} ({variant.kind}, kd_lambda {variant.kd_lambda}), {len(data)} upstream pairs, "
          f"batch {cfg.train.batch_tokens} tokens, lr {cfg.train.lr}, {torch.get_num_threads()} threads, {device}; "
          f"zero-shot on {len(dev_src)} dev verses as {method} ({res.knobs.sides} side)")
    print("| steps | train s | target tok/s | loss | zero-shot BLEU | zero-shot ppl |")
    print("|---|---|---|---|---|---|")
    rows: list[dict] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        pairs = params.finetune.train_pairs
        finetune_corpus = (sample_pairs(down, lang, pairs, Path(tmp) / "sample", "finetune.train_pairs") if pairs
                           else down)
        trainer = GeneratorTrainer(model, src, tgt, data, gen, variant.kd_lambda, cfg.train, cfg.resegment,
                                   Path(tmp) / "ckpt", {"benchmark": args.variant}, name=f"generator {args.variant}")
        for steps in sorted(args.steps):
            state = trainer.state
            if args.budget_s is not None and steps > state.step:
                rate = state.seconds / state.step if state.step else 0.0
                if time.perf_counter() - started + rate * (steps - state.step) > args.budget_s:
                    print(f"stopped before {steps} steps: over the {args.budget_s:.0f} s budget at "
                          f"{rate:.3f} s/step", flush=True)
                    break
            trainer.cfg = dataclasses.replace(cfg.train, steps=steps)
            trainer.cadence = dataclasses.replace(trainer.cadence, max_updates=steps)  # the loop goes on from here
            start = time.perf_counter()
            state = trainer.train() if steps else trainer.state
            wall = time.perf_counter() - start
            on_cpu = copy.deepcopy(gen).cpu()
            built, bsrc, btgt, _ = adapt(res, partial(generated, generator=on_cpu), check_loo=False)
            scores = zero_shot(built.to(device), bsrc, btgt, dev_src, dev_ref)
            tuned = {}
            for seed in args.finetune_seeds:  # the finetune stage's training, from a copy of the initial model
                ft_cfg = dataclasses.replace(params.finetune.train, seed=seed, threads=args.threads)
                _, summary = fit(copy.deepcopy(built).to(device), bsrc, btgt, finetune_corpus, lang, ft_cfg,
                                 Path(tmp) / f"finetune-{steps}-{seed}", {"benchmark": args.variant, "steps": steps},
                                 f"finetune after {steps} steps, seed {seed}")
                tuned[f"finetuned_dev_bleu_s{seed}"] = summary["best_dev_bleu"]
                shutil.rmtree(Path(tmp) / f"finetune-{steps}-{seed}")  # its checkpoints
            if tuned:
                scores["finetuned_dev_bleu"] = round(sum(tuned.values()) / len(tuned), 2)
                print(f"fine-tuned after {steps} steps: best dev BLEU {tuned} (mean {scores['finetuned_dev_bleu']})",
                      flush=True)
            loss = state.log[-1]["loss"] if state.log else float("nan")
            tok_s = state.target_tokens / max(state.seconds, 1e-9) if steps else 0.0
            print(f"| {steps} | {state.seconds:.0f} | {tok_s:.0f} | {loss:.3f} | {scores['dev_bleu']:.2f} | "
                  f"{scores['dev_perplexity']:.1f} |  (this step range: {wall:.0f} s)", flush=True)
            rows.append({"variant": args.variant, "steps": steps, "train_s": round(state.seconds, 1),
                         "target_tok_s": round(tok_s), "loss": loss, "zero_shot_bleu": scores["dev_bleu"],
                         "zero_shot_ppl": scores["dev_perplexity"], "device": str(device),
                         **({"finetuned_dev_bleu": scores["finetuned_dev_bleu"], **tuned} if tuned else {})})
            if args.csv:
                pd.DataFrame(rows).to_csv(args.csv, index=False)
            if args.log_csv:
                pd.DataFrame(state.log, columns=["step", "loss", "lp", "ld"]).to_csv(args.log_csv, index=False)

if __name__ == "__main__":
    main()
