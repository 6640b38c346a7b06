"""Checks of an adapted model before any fine-tuning.

- leave-one-out reconstruction: hide a share of the shared tokens from the pretrained vocabulary, let the
  method predict their rows as if they were new, and compare with the true rows (cosine);
- nearest neighbours of a few new tokens in CBOW space and, after mapping, among the pretrained rows
  (as Sato et al. Table 8);
- zero-shot greedy dev BLEU and dev perplexity of the whole adapted model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import sacrebleu
import torch

from vocabridge.nmt.train import dev_loss
from vocabridge.nmt.translate import translate
from vocabridge.nmt.vocab import Vocab
from vocabridge.transfer.plan import BOUNDARY, Plan, Side, normalize

if TYPE_CHECKING:
    from transformers.models.marian.modeling_marian import MarianMTModel


def leave_one_out(side: Side, initializer: Callable, knobs, share: float, seed: int) -> dict | None:
    """Mean cosine between the true rows of held-out shared tokens and the method's prediction for them."""
    new_ids, old_ids = side.shared
    if side.aux is not None:
        new_ids = np.array([i for i in new_ids.tolist() if side.aux.has_index_for(side.new_tokens[i])], np.int64)
        old_ids = np.array([side.old_index[side.new_tokens[i]] for i in new_ids.tolist()], np.int64)
    n = int(round(len(new_ids) * share))
    if n < 1:
        return None
    pick = np.sort(np.random.default_rng(seed).choice(len(new_ids), n, replace=False))
    hidden_old = old_ids[pick]
    old_tokens = list(side.old_tokens)
    for j in hidden_old.tolist():
        old_tokens[j] = f"\0held-out-{j}"  # no longer in the pretrained vocabulary, so the method must predict it
    held = dataclasses.replace(side, old_tokens=old_tokens)
    plan = initializer(held, dataclasses.replace(knobs, shared="copy"), np.random.default_rng(seed))
    predicted = plan.apply(side.emb)[new_ids[pick]]
    truth = side.emb[hidden_old]
    cos = (normalize(predicted) * normalize(truth)).sum(1)
    kinds = [plan.kind[i] for i in new_ids[pick].tolist()]
    return {"held_out": n, "mean_cosine": round(float(cos.mean()), 4),
            "predicted_share": round(sum(k == "projected" for k in kinds) / n, 4)}


def probe_tokens(side: Side, plan: Plan, count: int) -> list[int]:
    """Frequent new words (SentencePiece orders pieces by score) that the pretrained vocabulary lacks."""
    out = []
    for i, tok in enumerate(side.new_tokens):
        if tok not in side.old_index and tok.startswith(BOUNDARY) and len(tok) >= 5:
            out.append(i)
        if len(out) == count:
            break
    return out


def neighbours(side: Side, plan: Plan, rows: np.ndarray, count: int, top: int = 5) -> dict[str, dict]:
    """For each probe: nearest new tokens in CBOW space (before) and nearest pretrained tokens (after)."""
    ordinary = np.array([j for j, t in enumerate(side.old_tokens) if not t.startswith("<") and "\0" not in t])
    old = normalize(side.emb[ordinary])
    out = {}
    for i in probe_tokens(side, plan, count):
        tok = side.new_tokens[i]
        before = ([w for w, _ in side.aux.most_similar(tok, topn=top)]
                  if side.aux is not None and side.aux.has_index_for(tok) else [])
        sims = old @ normalize(rows[i : i + 1])[0]
        after = [side.old_tokens[ordinary[j]] for j in np.argsort(-sims)[:top]]
        out[tok] = {"kind": plan.kind[i], "cbow": before, "pretrained": after}
    return out


@torch.inference_mode()
def zero_shot(model: MarianMTModel, src: Vocab, tgt: Vocab, sources: list[str], refs: list[str]) -> dict:
    """Greedy dev BLEU and dev perplexity (per target token, no label smoothing) of a model as it is."""
    model.eval()
    hyps, _ = translate(model, src, tgt, sources, beam=1, progress=False)
    return {"dev_bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
            "dev_perplexity": round(math.exp(min(dev_loss(model, src, tgt, sources, refs), 50.0)), 2),
            "dev_sentences": len(sources)}
