"""Draw what benchmarks/generator_steps.py measured: the generator's training loss (Lp, Ld and their sum) by step,
and the zero-shot dev BLEU and perplexity of the initial model it builds at each step count (and its
best dev BLEU after fine-tuning, where generator_steps.py measured it).

    python benchmarks/plot_generator_curve.py results/generator-convergence    # reads curve.csv, loss.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def plot(folder: Path) -> Path:
    """Write folder/curve.png from folder/curve.csv and folder/loss.csv; returns its path."""
    curve, loss = pd.read_csv(folder / "curve.csv"), pd.read_csv(folder / "loss.csv")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for column, label in (("loss", "loss (Lp + λ Ld)"), ("lp", "Lp (translation)"), ("ld", "Ld (distillation)")):
        left.plot(loss["step"], loss[column].rolling(8, min_periods=1).mean(), label=label)
    left.set(xlabel="generator steps", ylabel="training loss (mean of 8 logs)", title="Generator training")
    left.legend()
    right.plot(curve["steps"], curve["zero_shot_bleu"], "o-", color="tab:blue", label="zero-shot")
    if "finetuned_dev_bleu" in curve:  # generator_steps.py --finetune-seeds: Liu et al.'s Fig. 4
        right.plot(curve["steps"], curve["finetuned_dev_bleu"], "^-", color="tab:green", label="after fine-tuning")
        right.legend(loc="center right")
    top = curve[[c for c in ("zero_shot_bleu", "finetuned_dev_bleu") if c in curve]].max().max()
    right.set(xlabel="generator steps", ylabel="dev BLEU", title="Initial model built at each step count",
              ylim=(0, max(2.0, 1.2 * top)))  # from 0: a flat curve looks flat
    twin = right.twinx()
    twin.plot(curve["steps"], curve["zero_shot_ppl"], "s--", color="tab:red")
    twin.set_ylabel("zero-shot dev perplexity", color="tab:red")
    variant, device = curve["variant"].iloc[0], curve["device"].iloc[0]
    fig.suptitle(f"Embedding generator {variant} on {device}")
    fig.tight_layout()
    out = folder / "curve.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="where generator_steps.py wrote curve.csv and loss.csv")
    print(plot(parser.parse_args().folder))


if __name__ == "__main__":
    main()
