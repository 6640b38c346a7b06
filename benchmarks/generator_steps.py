"""How many generator steps the default profile needs (Liu et al. 2021, Fig. 4, at this profile's scale).

    python benchmarks/generator_steps.py                          # patt-kd, steps 0 25 50 100 200 400 800
    python benchmarks/generator_steps.py --variant att --steps 0 100 200 --threads 1

Trains one generator variant of params.yaml (`generator.variants`) on the pipeline's upstream corpus exactly as
the generator stage does (same batches, re-segmentation and learning rate; run `dvc repro cbow` first so that
the pretrained model and the downstream vocabularies exist), and at each step count of `--steps` builds the
patt-eg-kd style initial model (decoder side generated, `transfer` knobs of the matching method) and measures
its zero-shot greedy dev BLEU and dev perplexity on the first `diagnostics.dev_sentences` dev verses, the
diagnostics the transfer stage reports. Step 0 is the untrained generator (equal weights: avg-eg). Prints one
row per step count: training seconds so far, target tokens/s, loss, zero-shot BLEU and perplexity.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vocabridge.config import load_params  # noqa: E402
from vocabridge.corpora.user import read_text_lines  # noqa: E402
from vocabridge.nmt.data import Parallel  # noqa: E402
from vocabridge.nmt.model import load_model  # noqa: E402
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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = load_params()
    lang, cfg = params.lang, params.generator
    variant = cfg.variants[args.variant]
    data_dir = Path("data")
    pretrained, corpus = data_dir / "models/upstream/base", data_dir / "corpora/upstream"
    model, src, tgt = load_model(pretrained, "cpu")
    data = Parallel.encode(read_text_lines(corpus / f"train.{lang.src}"), read_text_lines(corpus / f"train.{lang.tgt}"),
                           src, tgt, cfg.train.max_len)
    gen = Generator(variant.kind, model.config.d_model, cfg.train.patt_scale)
    method = METHOD_OF.get(args.variant, "patt-eg-kd")
    res = Resources(pretrained=pretrained,
                    downstream_spm={r: data_dir / "spm/downstream" / f"{c}.model"
                                    for r, c in (("src", lang.src), ("tgt", lang.tgt))},
                    seed=params.finetune.train.seed, knobs=knobs_for(method, params.transfer),
                    diagnostics=params.diagnostics)
    down = data_dir / "corpora/downstream"
    n = params.diagnostics.dev_sentences
    dev_src, dev_ref = read_text_lines(down / f"dev.{lang.src}")[:n], read_text_lines(down / f"dev.{lang.tgt}")[:n]
    print(f"variant {args.variant} ({variant.kind}, kd_lambda {variant.kd_lambda}), {len(data)} upstream pairs, "
          f"batch {cfg.train.batch_tokens} tokens, lr {cfg.train.lr}, {torch.get_num_threads()} threads; "
          f"zero-shot on {len(dev_src)} dev verses as {method} ({res.knobs.sides} side)")
    print("| steps | train s | target tok/s | loss | zero-shot BLEU | zero-shot ppl |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        trainer = GeneratorTrainer(model, src, tgt, data, gen, variant.kd_lambda, cfg.train, cfg.resegment,
                                   Path(tmp) / "ckpt", {"benchmark": args.variant}, name=f"generator {args.variant}")
        for steps in sorted(args.steps):
            trainer.cfg = dataclasses.replace(cfg.train, steps=steps)
            start = time.perf_counter()
            state = trainer.train() if steps else trainer.state
            wall = time.perf_counter() - start
            built, bsrc, btgt, _ = adapt(res, partial(generated, generator=gen), check_loo=False)
            scores = zero_shot(built, bsrc, btgt, dev_src, dev_ref)
            loss = state.log[-1]["loss"] if state.log else float("nan")
            tok_s = state.target_tokens / max(state.seconds, 1e-9) if steps else 0.0
            print(f"| {steps} | {state.seconds:.0f} | {tok_s:.0f} | {loss:.3f} | {scores['dev_bleu']:.2f} | "
                  f"{scores['dev_perplexity']:.1f} |  (this step range: {wall:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
