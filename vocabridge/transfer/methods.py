"""The vocabulary-transfer initialisers: each fills a Plan for one Side (see plan.py).

- random (ft-tgtv-random, Aji et al. 2020): shared tokens copied, new ones random at the pretrained scale;
- mean: shared tokens copied, new ones at the pretrained rows' mean (transformers' `mean_resizing`);
- cbow (va-cbow, Sato et al. 2020): the new domain's CBOW vectors as they are;
- linear (va-linear): CBOW vectors mapped by the orthogonal Procrustes map fitted on shared tokens;
- anchors: each new token a weighted combination of pretrained rows of anchor tokens; the configurations are
  va-llm (k nearest shared tokens in CBOW space, locally linear weights), focus (all shared tokens, sparsemax
  over CBOW cosine, as FOCUS) and fvt (the token's pieces under the pretrained tokenizer, equal weights);
- generated (avg-eg, att-eg, patt-eg, patt-eg-kd; Liu et al. 2021): a generator's weights over Sm(w), the
  token's subwords and hyperwords in the pretrained vocabulary (morph.py, generator.py); avg needs no
  training, the others use the generator the generator stage pretrained (generator_training.py);
- fwet (Duan & Zhao 2023, Algorithm 1): weights from co-segmentation counts of the new domain's text under
  the new and the pretrained tokenizer;
- the other baselines of Liu et al.'s Table 2: word2vec (new rows learned by CBOW on the new domain's text
  with the shared tokens' vectors held at their pretrained rows, so the new ones land in the model's space),
  embedding_recon (Zhao et al. 2018: a bag-of-character-n-grams model fitted to reconstruct the pretrained
  rows, applied to the new tokens) and independent (a new embedding layer: every row random, nothing reused).

Knobs (`shared`, `k`, `reg`) come from params.yaml's `transfer.<method>`, with each method's defaults.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import numpy as np
import torch
from scipy import sparse

from vocabridge.cbow import train_cbow
from vocabridge.config import Cbow
from vocabridge.errors import ConfigError, InputError
from vocabridge.transfer.plan import (
    BOUNDARY,
    SPECIALS,
    Plan,
    PlanBuilder,
    Side,
    is_filler,
    lle_weights,
    nearest,
    normalize,
    procrustes,
    segment_like,
    sparsemax,
)


def random_init(side: Side, knobs, rng: np.random.Generator) -> Plan:
    builder = PlanBuilder(side, knobs.shared)
    return builder.build(rng)


def mean_init(side: Side, knobs, rng: np.random.Generator) -> Plan:
    """Every new row at the mean of the pretrained ordinary rows (specials and `<unused_i>` fillers left out, as
    for `random`), the baseline of transformers' `resize_token_embeddings(mean_resizing=True)`. transformers
    draws from N(mean, 1e-9 x covariance) (the mean itself where that is not positive definite): rows within
    about 3e-5 standard deviations of the mean. This takes the mean itself, the same rows up to that noise and
    no seed to depend on. As a combination of old rows it gives an untied output layer and the output bias their
    own rows' mean."""
    builder = PlanBuilder(side, knobs.shared)
    ordinary = np.array([j for j, tok in enumerate(side.old_tokens) if tok not in SPECIALS and not is_filler(tok)],
                        dtype=np.int64)
    if not len(ordinary):
        raise InputError(f"{side.name}: the pretrained vocabulary has no ordinary tokens to average")
    weights = np.zeros(len(side.old_tokens))
    weights[ordinary] = 1.0 / len(ordinary)
    builder.pooled_rows(builder.todo, weights)
    return builder.build(rng, mean_over=len(ordinary))


def norm_scale(side: Side, knobs, vectors: np.ndarray | None = None) -> float:
    """`scale: norm`: the factor that gives the CBOW vectors (or `vectors`) the mean norm of the pretrained rows
    (an orthogonal map keeps norms, and CBOW vectors are often an order of magnitude longer: a tied output
    layer then predicts the new tokens everywhere); 1 for `none` (the paper)."""
    if knobs.scale in (None, "none"):
        return 1.0
    if vectors is None:
        _, vectors = side.aux_rows(np.arange(len(side.new_tokens)))
    return float(np.linalg.norm(side.emb, axis=1).mean() / max(np.linalg.norm(vectors, axis=1).mean(), 1e-12))


def scale_stats(scale: float) -> dict[str, float]:
    """The plan's record of a `norm_scale` factor: nothing when the vectors went in as they are."""
    return {"scale": round(scale, 6)} if scale != 1.0 else {}


def cbow(side: Side, knobs, rng: np.random.Generator) -> Plan:
    builder = PlanBuilder(side, knobs.shared)
    ids, vectors = side.aux_rows(builder.todo)
    scale = norm_scale(side, knobs)
    builder.vector(ids, vectors * scale)
    return builder.build(rng, **scale_stats(scale))


def linear(side: Side, knobs, rng: np.random.Generator) -> Plan:
    builder = PlanBuilder(side, knobs.shared)
    _, old_ids, x = side.anchors(need=2)
    scale = norm_scale(side, knobs)
    x = x * scale
    w = procrustes(x, side.emb[old_ids])
    ids, vectors = side.aux_rows(builder.todo)
    builder.vector(ids, (vectors * scale) @ w)
    residual = float(np.linalg.norm(x @ w - side.emb[old_ids]) / max(np.linalg.norm(side.emb[old_ids]), 1e-12))
    return builder.build(rng, anchors=len(old_ids), fit_relative_residual=round(residual, 4),
                         **scale_stats(scale))


def anchors(side: Side, knobs, rng: np.random.Generator, *, select: Literal["knn", "all", "pieces"],
            weighting: Literal["lle", "sparsemax", "mean"]) -> Plan:
    """New row = weights . pretrained rows of anchor tokens; the weights are computed in CBOW space."""
    builder = PlanBuilder(side, knobs.shared)
    todo = builder.todo
    if select == "pieces":
        return _pieces(side, builder, todo, rng)
    anchor_new, anchor_old, anchor_vecs = side.anchors()
    ids, vecs = side.aux_rows(todo)
    position = {t: a for a, t in enumerate(anchor_new.tolist())}
    exclude = np.array([position.get(i, -1) for i in ids.tolist()], dtype=np.int64)  # a token is not its own anchor
    if select == "knn":
        if knobs.k > len(anchor_new) - (exclude >= 0).any():
            raise ConfigError(f"transfer: k={knobs.k} is larger than the {len(anchor_new)} shared tokens of the "
                              f"{side.name} vocabulary")
        nbr, _ = nearest(vecs, anchor_vecs, knobs.k, exclude)
        if weighting != "lle":
            raise ConfigError(f"transfer: weighting {weighting!r} is not defined for k nearest anchors")
        w, ill = np.zeros(nbr.shape, np.float32), np.zeros(len(nbr), bool)
        for start in range(0, len(nbr), 2048):  # chunks: the (n, k, d) neighbour tensor stays small
            part = slice(start, start + 2048)
            w[part], ill[part] = lle_weights(vecs[part], anchor_vecs[nbr[part]], knobs.reg)
        builder.combine(ids, anchor_old[nbr], w)
        return builder.build(rng, anchors=len(anchor_new), k=knobs.k, reg=knobs.reg, ill_conditioned=int(ill.sum()),
                             projected=len(ids))
    sims = torch.from_numpy(normalize(vecs)) @ torch.from_numpy(normalize(anchor_vecs)).T
    rows = torch.nonzero(torch.from_numpy(exclude) >= 0).flatten()
    sims[rows, torch.from_numpy(exclude)[rows]] = -torch.inf
    w = sparsemax(sims.clamp_min(-1e4)).numpy()  # -inf would poison the cumulative sums
    width = int((w > 0).sum(1).max()) if len(w) else 1
    top = np.argsort(-w, axis=1)[:, :width]
    builder.combine(ids, anchor_old[top], np.take_along_axis(w, top, 1))
    support = (w > 0).sum(1)
    return builder.build(rng, anchors=len(anchor_new), mean_support=round(float(support.mean()), 2) if len(w) else 0)


def _pieces(side: Side, builder: PlanBuilder, todo: np.ndarray, rng: np.random.Generator) -> Plan:
    """fvt: the mean of the token's pieces under the pretrained tokenizer (Gee et al. 2022)."""
    if side.old_sp is None:
        raise InputError(f"{side.name}: fvt needs the pretrained model's SentencePiece model")
    ids, cols, weights = [], [], []
    for i in todo.tolist():
        pieces = segment_like(side.new_tokens[i], side.old_sp, side.old_index)
        if pieces:
            ids.append(i)
            cols.append([side.old_index[p] for p in pieces])
    width = max((len(c) for c in cols), default=1)
    for c in cols:
        weights.append([1.0 / len(c)] * len(c) + [0.0] * (width - len(c)))
        c.extend([0] * (width - len(c)))
    if ids:
        builder.combine(np.array(ids), np.array(cols), np.array(weights, dtype=np.float32))
    return builder.build(rng, segmented=len(ids))


def generated(side: Side, knobs, rng: np.random.Generator, *, generator=None) -> Plan:
    """Liu et al.'s embedding generators: G(w) from Sm(w); without a trained generator, avg (Eq. 1)."""
    from vocabridge.transfer.generator import Generator
    from vocabridge.transfer.morph import MorphIndex

    if side.old_sp is None:
        raise InputError(f"{side.name}: the embedding generator needs the pretrained SentencePiece model")
    builder = PlanBuilder(side, knobs.shared)
    todo = builder.todo
    index = MorphIndex(side.old_tokens, side.old_sp, knobs.max_members)
    ids, rel, mask = index.batch([side.new_tokens[i] for i in todo.tolist()])
    gen = generator or Generator("avg", side.emb.shape[1], knobs.patt_scale)
    with torch.no_grad():
        members = torch.from_numpy(side.emb)[torch.from_numpy(ids)]
        w = gen.weights(members, torch.from_numpy(rel), torch.from_numpy(mask)).numpy()
    has = mask.any(1)
    builder.combine(todo[has], ids[has], w[has])
    sizes = mask.sum(1)
    return builder.build(rng, generator=gen.kind, with_members=int(has.sum()), without_members=int((~has).sum()),
                         mean_members=round(float(sizes[has].mean()), 2) if has.any() else 0.0)


def fwet_counts(side: Side) -> sparse.csr_matrix:
    """Algorithm 1 of Duan & Zhao (2023), word by word: equal leading/trailing pieces count 1 each; the
    remaining pieces of the new and the pretrained segmentation pair up with weight len(old) / len(new).
    Counts are (new token, old token), accumulated over every occurrence of every word of the text."""
    if side.text is None or side.new_sp is None or side.old_sp is None:
        raise InputError(f"{side.name}: fwet needs the new domain's text and both SentencePiece models")
    words = Counter(w for line in side.text for w in line.split())
    if not words:
        raise InputError(f"{side.name}: fwet found no text to count")
    unique = list(words)
    new_index = {tok: i for i, tok in enumerate(side.new_tokens)}
    counts: Counter = Counter()
    for word, new, old in zip(unique, side.new_sp.encode(unique, out_type=str),
                              side.old_sp.encode(unique, out_type=str), strict=True):
        freq = words[word]
        while new and old and new[0] == old[0]:
            counts[new.pop(0), old.pop(0)] += freq
        while new and old and new[-1] == old[-1]:
            counts[new.pop(), old.pop()] += freq
        if new and old:
            weight = freq * len(old) / len(new)
            for n in new:
                for o in old:
                    counts[n, o] += weight
    rows, cols, vals = [], [], []
    for (n, o), c in counts.items():
        if n in new_index and o in side.old_index:
            rows.append(new_index[n])
            cols.append(side.old_index[o])
            vals.append(c)
    return sparse.csr_matrix((vals, (rows, cols)), shape=(len(side.new_tokens), len(side.old_tokens)))


def fwet(side: Side, knobs, rng: np.random.Generator) -> Plan:
    """Each new token = softmax over its co-segmentation counts (paper: raw counts) . pretrained rows."""
    builder = PlanBuilder(side, knobs.shared)
    counts = fwet_counts(side)
    ids, cols, weights = [], [], []
    for i in builder.todo.tolist():
        row = counts.getrow(i)
        if not row.nnz:
            continue
        c = row.data.astype(np.float64)
        w = np.exp(c - c.max()) if knobs.fwet_weights == "softmax" else c
        ids.append(i)
        cols.append(row.indices)
        weights.append(w / w.sum())
    width = max((len(c) for c in cols), default=1)
    pad = [np.pad(c, (0, width - len(c))) for c in cols]
    padw = [np.pad(w, (0, width - len(w))) for w in weights]
    if ids:
        builder.combine(np.array(ids), np.array(pad), np.array(padw, dtype=np.float32))
    return builder.build(rng, counted=len(ids), weights=knobs.fwet_weights)


def independent(side: Side, knobs, rng: np.random.Generator) -> Plan:
    """A new embedding layer (Liu et al.'s Independent Encoder): every ordinary row random at the pretrained
    scale, shared tokens too; only the special tokens keep their rows."""
    builder = PlanBuilder(side, "reproject")
    builder.random(builder.todo, rng)
    return builder.build(rng)


def word2vec(side: Side, knobs, rng: np.random.Generator, cfg=None) -> Plan:
    """New rows from CBOW on the new domain's text in the new pieces, the shared tokens' input vectors fixed
    at their pretrained rows (gensim's per-vector lock), so that the new vectors are learned in the model's
    space; shared tokens then keep their pretrained rows (Liu et al.'s Word2Vec row)."""
    cfg = cfg or Cbow()
    if not side.text or side.new_sp is None:
        raise InputError(f"word2vec ({side.name}): needs the new domain's text and tokenizer")
    new_ids, old_ids = side.shared
    fixed = {side.new_tokens[i]: side.emb[j] for i, j in zip(new_ids.tolist(), old_ids.tolist(), strict=True)}
    kv = train_cbow(side.text, side.new_sp, side.emb.shape[1], cfg, f"{side.name} (word2vec)", fixed)
    builder = PlanBuilder(side, "copy")
    todo = [i for i in builder.todo.tolist() if side.new_tokens[i] in kv.key_to_index]
    scale = 1.0
    if todo:
        vectors = np.stack([kv[side.new_tokens[i]] for i in todo]).astype(np.float32)
        scale = norm_scale(side, knobs, vectors)  # fixed neighbours do not fix the learned rows' length
        builder.vector(np.array(todo), vectors * scale)
    return builder.build(rng, anchors=sum(token in kv.key_to_index for token in fixed), learned=len(todo),
                         **scale_stats(scale))


def char_ngrams(token: str, sizes: range = range(3, 7)) -> list[str]:
    """Character n-grams of a piece (Zhao et al. 2018): `<` marks a word start (SentencePiece's marker); a
    piece shorter than the smallest n is one n-gram of itself."""
    text = ("<" + token[1:]) if token.startswith(BOUNDARY) else token
    grams = [text[i:i + n] for n in sizes for i in range(len(text) - n + 1)]
    return grams or [text]


def embedding_recon(side: Side, knobs, rng: np.random.Generator, steps: int = 300, lr: float = 0.05) -> Plan:
    """Zhao et al. 2018 (Liu et al.'s Embedding Recon): a row is the mean of its character n-grams' vectors,
    fitted by Adam to reconstruct the pretrained ordinary rows (squared error); new tokens get the mean of
    the vectors of their n-grams seen in training (none seen: a counted random row)."""
    ordinary = [j for j, tok in enumerate(side.old_tokens) if tok not in SPECIALS and not is_filler(tok)]
    vocab: dict[str, int] = {}
    old_grams = [[vocab.setdefault(g, len(vocab)) for g in char_ngrams(side.old_tokens[j])] for j in ordinary]
    generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
    table = torch.nn.EmbeddingBag(len(vocab), side.emb.shape[1], mode="mean")
    torch.nn.init.normal_(table.weight, std=float(side.emb[ordinary].std()), generator=generator)
    flat = torch.tensor([g for grams in old_grams for g in grams])
    offsets = torch.tensor([0, *np.cumsum([len(g) for g in old_grams])[:-1].tolist()])
    target = torch.from_numpy(side.emb[ordinary]).float()
    optimizer = torch.optim.Adam(table.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = ((table(flat, offsets) - target) ** 2).sum(1).mean()
        loss.backward()
        optimizer.step()
    builder = PlanBuilder(side, knobs.shared)
    ids, rows = [], []
    with torch.no_grad():
        for i in builder.todo.tolist():
            known = [vocab[g] for g in char_ngrams(side.new_tokens[i]) if g in vocab]
            if known:
                ids.append(i)
                rows.append(table.weight[known].mean(0).numpy())
    if ids:
        builder.vector(np.array(ids), np.stack(rows).astype(np.float32))
    relative = float(loss.detach().sqrt() / max(float((target**2).sum(1).mean().sqrt()), 1e-12))
    return builder.build(rng, ngrams=len(vocab), reconstructed=len(ids), fit_relative_error=round(relative, 4))
