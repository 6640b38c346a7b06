"""How well a translation model's vocabulary fits a text: the first question before adapting it.

For one language side: the model's own segmentation of the text (pieces per word, `<unk>` rate), the same
figures under SentencePiece vocabularies trained on the text at a few sizes (tokenizers.mismatch, the code of
the pipeline's `mismatch` stage), the frequent words the model shatters most, optionally the share of the
text's pieces that the model barely saw in its own training corpus, and a recommended size with its reason.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import sentencepiece as spm

from vocabridge.config import SpmModel
from vocabridge.tokenizers import mismatch, train_spm

SIZES = (2000, 4000, 8000, 16000)
GAIN = 0.05  # a size is worth it while doubling it still cuts fertility by more than this share


@dataclass
class SideAudit:
    side: str  # src | tgt
    lines: int
    words: int
    model: dict  # fertility and <unk> rate under the model's own vocabulary
    sizes: list[dict] = field(default_factory=list)  # one row per trained vocabulary size
    shattered: list[dict] = field(default_factory=list)  # frequent words in the most pieces
    barely_seen: dict | None = None  # share of pieces seen fewer than `rare` times in the model's corpus
    recommendation: dict = field(default_factory=dict)
    ceiling: int | None = None  # the most pieces SentencePiece finds in the text, when a size asked for more
    beyond: list[int] = field(default_factory=list)  # sizes past the ceiling: not trained (the same vocabulary)


def shattered_words(sp: spm.SentencePieceProcessor, counts: Counter, top: int = 15, min_pieces: int = 3) -> list[dict]:
    """The most frequent words that the model splits into at least `min_pieces` pieces, with their pieces."""
    out = []
    for word, count in counts.most_common():
        pieces = sp.encode(word, out_type=str)
        if len(pieces) >= min_pieces:
            out.append({"word": word, "count": count, "pieces": pieces})
            if len(out) == top:
                break
    return out


def barely_seen(sp: spm.SentencePieceProcessor, text: list[str], corpus: list[str], rare: int) -> dict:
    """Share of the text's pieces (model's segmentation) that occur fewer than `rare` times in `corpus`, the text
    the model was trained on: rows that training barely moved."""
    seen = Counter(piece for ids in sp.encode(corpus) for piece in ids)
    pieces = [piece for ids in sp.encode(text) for piece in ids]
    rare_tokens = sum(seen[piece] < rare for piece in pieces)
    return {"rare_below": rare, "token_share": round(rare_tokens / max(len(pieces), 1), 4),
            "corpus_lines": len(corpus)}


def recommend(model_fertility: float, rows: list[dict], ceiling: int | None = None) -> dict:
    """The smallest trained vocabulary past which the next size cuts fertility by less than GAIN, named by the
    pieces it reached (what `adapt --vocab-size` then gives); keep the model's vocabulary when even the best trained
    one is within GAIN of it. `ceiling`: the most pieces the text gives, when a size asked for more."""
    rows = sorted(rows, key=lambda r: r["pieces"])
    best = min(r["fertility"] for r in rows)
    if model_fertility <= best * (1 + GAIN):
        return {"vocab_size": None, "reason": f"the model's vocabulary already segments this text about as finely as "
                f"one trained on it ({model_fertility:.2f} pieces/word against {best:.2f}): adapting gains little"}
    chosen, why = rows[-1], (f"SentencePiece finds no more than {ceiling} pieces in this text" if ceiling else
                             "it is the largest size tried (larger --sizes may cut more)")
    for row, bigger in zip(rows, rows[1:], strict=False):
        if row["fertility"] <= bigger["fertility"] * (1 + GAIN):
            chosen, why = row, f"{bigger['pieces']} pieces cut less than {GAIN:.0%} more"
            break
    cut = 1 - chosen["fertility"] / model_fertility
    return {"vocab_size": chosen["pieces"],
            "reason": f"{chosen['fertility']:.2f} pieces/word against {model_fertility:.2f} under the model's "
                      f"vocabulary ({cut:.0%} fewer); {why}, and {chosen['unseen_token_rate']:.0%} of its tokens are "
                      f"new rows to initialise"}


def audit_side(model_sp: spm.SentencePieceProcessor, text: list[str], side: str, sizes=SIZES, seed: int = 1,
               threads: int = 2, corpus: list[str] | None = None, rare: int = 10) -> SideAudit:
    """The audit of one side; sizes past the text's ceiling (a vocabulary that stopped short of its size) are not
    trained: SentencePiece would stop at the same pieces again, and the table would list that vocabulary twice."""
    counts = Counter(word for line in text for word in line.split())
    result = SideAudit(side, len(text), sum(counts.values()), {})
    for size in sorted(set(sizes)):
        if result.ceiling:
            result.beyond.append(size)
            continue
        new = spm.SentencePieceProcessor(model_proto=train_spm(text, SpmModel(vocab_size=size, hard_vocab_limit=False),
                                                               seed, threads, f"audit {side} {size}"))
        m = mismatch(model_sp, new, text)
        result.model = {"fertility": m["fertility"]["old"], "unk_rate": m["old_unk_rate"],
                        "vocab_size": m["vocab_size"]["old"]}
        result.sizes.append({"vocab_size": size, "pieces": m["vocab_size"]["new"], "fertility": m["fertility"]["new"],
                             "unseen_token_rate": m["unseen_token_rate"], "unseen_types": m["unseen_types"],
                             "shared_types": m["shared_types"]})
        if m["vocab_size"]["new"] < size:
            result.ceiling = m["vocab_size"]["new"]
    result.shattered = shattered_words(model_sp, counts)
    if corpus:
        result.barely_seen = barely_seen(model_sp, text, corpus, rare)
    result.recommendation = recommend(result.model["fertility"], result.sizes, result.ceiling)
    return result


def detect_side(src_sp: spm.SentencePieceProcessor, tgt_sp: spm.SentencePieceProcessor, text: list[str]) -> str:
    """The side whose vocabulary segments the text into fewer pieces (with fewer `<unk>`): its language."""
    def cost(sp: spm.SentencePieceProcessor) -> tuple[int, int]:
        ids = sp.encode(text[:2000])
        return sum(i.count(sp.unk_id()) for i in ids), sum(map(len, ids))

    return "src" if cost(src_sp) <= cost(tgt_sp) else "tgt"


def table_rows(audits: list[SideAudit]) -> list[dict]:
    rows = []
    for a in audits:
        rows.append({"side": a.side, "vocabulary": "model", "size": a.model["vocab_size"],
                     "fertility": a.model["fertility"], "unseen_token_rate": None, "unk_rate": a.model["unk_rate"]})
        rows += [{"side": a.side, "vocabulary": "trained on the text", "size": r["pieces"],
                  "fertility": r["fertility"], "unseen_token_rate": r["unseen_token_rate"], "unk_rate": None}
                 for r in a.sizes]
    return rows


def markdown(audits: list[SideAudit], model: str, plot_name: str | None) -> str:
    """The audit as a Markdown page (the plot beside it when drawn)."""
    import pandas as pd

    from vocabridge.report import to_markdown

    lines = [f"# Vocabulary audit of {model}", "",
             "Fertility: pieces per whitespace word. Unseen-token rate: share of the text's tokens, segmented by a "
             "vocabulary trained on the text, that the model's vocabulary lacks (rows an adaptation must invent).",
             "", to_markdown(pd.DataFrame(table_rows(audits))), ""]
    if plot_name:
        lines += [f"![fertility and unseen-token rate against vocabulary size]({plot_name})", ""]
    for a in audits:
        rec = a.recommendation
        size = rec["vocab_size"] or "keep the model's"
        lines += [f"## {a.side} side ({a.lines} lines, {a.words} words)", "",
                  f"**Recommended vocabulary size: {size}** ({rec['reason']}).", ""]
        if a.beyond:
            lines += [f"Sizes {', '.join(map(str, a.beyond))} not trained: the text gives at most {a.ceiling} "
                      "pieces.", ""]
        if a.barely_seen:
            lines += [f"{a.barely_seen['token_share']:.1%} of the text's pieces occur fewer than "
                      f"{a.barely_seen['rare_below']} times in the model's corpus.", ""]
        if a.shattered:
            lines += ["Most frequent words the model splits into three pieces or more:", "",
                      "| word | count | model's pieces |", "|---|---|---|"]
            lines += [f"| {w['word']} | {w['count']} | {' '.join(w['pieces'])} |" for w in a.shattered]
            lines.append("")
    return "\n".join(lines)


def plot(audits: list[SideAudit], path) -> None:
    """Fertility and unseen-token rate against vocabulary size, the model's fertility as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for a in audits:
        sizes = [r["pieces"] for r in a.sizes]
        (line,) = left.plot(sizes, [r["fertility"] for r in a.sizes], marker="o",
                            label=f"{a.side}: trained on the text")
        left.axhline(a.model["fertility"], linestyle="--", color=line.get_color(), label=f"{a.side}: the model's")
        right.plot(sizes, [r["unseen_token_rate"] for r in a.sizes], marker="o", label=a.side)
    left.set(xscale="log", xlabel="vocabulary size (pieces)", ylabel="pieces per word", title="fertility")
    right.set(xscale="log", xlabel="vocabulary size (pieces)", ylabel="share of tokens",
              title="tokens the model's vocabulary lacks")
    left.legend()
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
