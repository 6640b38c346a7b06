"""The interface every vocabulary-transfer method shares: a Side goes in, a Plan comes out.

A Side is one vocabulary of the pretrained model (encoder input, or the tied decoder input/output) with its
embedding rows, the vocabulary that replaces it, and the new domain's CBOW vectors. A Plan says, for every
new token, how its row is made: a weighted combination of pretrained rows (a copy is a one-hot combination),
a vector given directly (CBOW, mapped CBOW, random), or nothing (Marian's `<unused_i>` fillers). The same
plan maps any matrix or bias with one row per old token, so the output layer and final_logits_bias follow
the embeddings. The methods of the family differ only in how they fill the plan.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import sentencepiece as spm
import torch
from scipy import sparse

from vocabridge.errors import InputError
from vocabridge.nmt.vocab import EOS, PAD, UNK

if TYPE_CHECKING:  # vocabridge.cbow reads the vectors; gensim costs a second to import
    from gensim.models import KeyedVectors

SPECIALS = frozenset({EOS, UNK, PAD, "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})  # Marian's, BERT's
BOUNDARY = "\u2581"  # SentencePiece's word-boundary marker
KINDS = ("special", "copied", "projected", "random", "unused")


def is_filler(token: str) -> bool:
    return token.startswith("<unused_")


@dataclass
class Side:
    """One vocabulary of the pretrained model and the vocabulary that replaces it."""

    name: str  # encoder | decoder
    old_tokens: list[str]
    new_tokens: list[str]
    emb: np.ndarray  # (len(old_tokens), d): the model's rows, float32
    aux: KeyedVectors | None = None  # CBOW vectors of the new domain, keyed by new pieces
    old_sp: spm.SentencePieceProcessor | None = None  # the pretrained tokenizer (fvt, Sm(w), fwet)
    aux_file: str = "CBOW vectors"  # named in errors
    new_sp: spm.SentencePieceProcessor | None = None  # the new tokenizer (fwet)
    text: list[str] | None = None  # the new domain's training text in this side's language (fwet)

    @cached_property
    def old_index(self) -> dict[str, int]:
        return {tok: i for i, tok in enumerate(self.old_tokens)}

    @cached_property
    def shared(self) -> tuple[np.ndarray, np.ndarray]:
        """(new ids, old ids) of the ordinary tokens both vocabularies hold."""
        pairs = [(i, self.old_index[tok]) for i, tok in enumerate(self.new_tokens)
                 if tok not in SPECIALS and not is_filler(tok) and tok in self.old_index]
        return (np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64))

    def require_aux(self) -> KeyedVectors:
        if self.aux is None:
            raise InputError(f"{self.name}: this method needs CBOW vectors of the new domain")
        if self.aux.vector_size != self.emb.shape[1]:
            raise InputError(f"{self.aux_file}: vectors have dimension {self.aux.vector_size}, the model's "
                             f"embeddings {self.emb.shape[1]}")
        return self.aux

    def aux_rows(self, new_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The new ids that have a CBOW vector, and those vectors (float32)."""
        aux = self.require_aux()
        keep = np.array([aux.has_index_for(self.new_tokens[i]) for i in new_ids], dtype=bool)
        kept = new_ids[keep] if len(new_ids) else new_ids
        vectors = np.stack([aux[self.new_tokens[i]] for i in kept]) if len(kept) else np.zeros(
            (0, aux.vector_size), np.float32)
        return kept, vectors.astype(np.float32)

    def anchors(self, need: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Shared tokens that have a CBOW vector: (new ids, old ids, CBOW vectors); the anchors of a mapping."""
        new_ids, old_ids = self.shared
        kept, vectors = self.aux_rows(new_ids)
        if len(kept) < need:
            raise InputError(f"{self.name}: the new and the pretrained vocabulary have {len(new_ids)} shared tokens, "
                             f"{len(kept)} of them with CBOW vectors ({self.aux_file}); this method needs at least "
                             f"{need}" if len(new_ids) else f"{self.name}: no shared tokens between the new and the "
                             "pretrained vocabulary; this method maps through shared tokens")
        old_of = dict(zip(new_ids.tolist(), old_ids.tolist(), strict=True))
        return kept, np.array([old_of[i] for i in kept.tolist()], dtype=np.int64), vectors


@dataclass
class Plan:
    """How every new row is made; `apply` turns it into a matrix."""

    kind: list[str]
    weights: sparse.csr_matrix  # (new, old): combinations of old rows, copies included
    vectors: np.ndarray  # (new, d): rows given directly where `direct`
    direct: np.ndarray  # bool (new,)
    stats: dict = field(default_factory=dict)
    pooled: np.ndarray | None = None  # bool (new,): rows that are all one dense combination of old rows (`pool`),
    pool: np.ndarray | None = None  # (old,): its weights; kept apart because a dense row per new token is too big

    def apply(self, matrix: np.ndarray) -> np.ndarray:
        out = np.asarray(self.weights @ matrix, dtype=np.float32)
        if self.pool is not None:
            out[self.pooled] = self.pool @ matrix
        out[self.direct] = self.vectors[self.direct]
        return out

    def apply_bias(self, bias: np.ndarray) -> np.ndarray:
        """Bias entries follow the combinations; rows given directly get 0."""
        out = np.asarray(self.weights @ bias, dtype=np.float32)
        if self.pool is not None:
            out[self.pooled] = self.pool @ bias
        out[self.direct] = 0.0
        return out

    def shares(self) -> dict[str, float]:
        counts = Counter(k for k in self.kind if k != "unused")
        total = max(sum(counts.values()), 1)
        return {k: round(counts.get(k, 0) / total, 4) for k in KINDS if k != "unused"}


class PlanBuilder:
    """Fills a plan row by row kind; starts with special tokens and fillers done, and shared ones if copied."""

    def __init__(self, side: Side, shared_policy: str = "copy"):
        self.side = side
        n, d = len(side.new_tokens), side.emb.shape[1]
        self.kind = ["unused"] * n
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.vectors = np.zeros((n, d), np.float32)
        self.direct = np.zeros(n, dtype=bool)
        self.pooled = np.zeros(n, dtype=bool)
        self.pool: np.ndarray | None = None
        for i, tok in enumerate(side.new_tokens):
            if tok in SPECIALS and tok in side.old_index:
                self.copy([i], [side.old_index[tok]], kind="special")
        if shared_policy == "copy":
            self.copy(*side.shared)

    @property
    def todo(self) -> np.ndarray:
        """New ordinary tokens that have no row yet."""
        return np.array([i for i, (k, tok) in enumerate(zip(self.kind, self.side.new_tokens, strict=True))
                         if k == "unused" and not is_filler(tok) and tok not in SPECIALS], dtype=np.int64)

    def copy(self, new_ids, old_ids, kind: str = "copied") -> None:
        for i, j in zip(np.asarray(new_ids).tolist(), np.asarray(old_ids).tolist(), strict=True):
            self.kind[i] = kind
            self.rows.append(i)
            self.cols.append(j)
            self.vals.append(1.0)

    def combine(self, new_ids: np.ndarray, old_ids: np.ndarray, weights: np.ndarray) -> None:
        """Row i = sum_j weights[i, j] * old row old_ids[i, j] (zero weights are dropped)."""
        for i in new_ids.tolist():
            self.kind[i] = "projected"
        rows = np.repeat(np.asarray(new_ids), old_ids.shape[1])
        keep = weights.ravel() != 0.0
        self.rows.extend(rows[keep].tolist())
        self.cols.extend(old_ids.ravel()[keep].tolist())
        self.vals.extend(weights.ravel()[keep].astype(np.float64).tolist())

    def vector(self, new_ids: np.ndarray, vectors: np.ndarray, kind: str = "projected") -> None:
        for i in new_ids.tolist():
            self.kind[i] = kind
        self.vectors[new_ids] = vectors
        self.direct[new_ids] = True

    def pooled_rows(self, new_ids: np.ndarray, weights: np.ndarray) -> None:
        """Rows new_ids = weights . every old row (one dense combination shared by all of them, e.g. the mean)."""
        if self.pool is not None and not np.array_equal(self.pool, weights):
            raise ValueError("PlanBuilder: a plan holds one pooled combination")
        for i in new_ids.tolist():
            self.kind[i] = "projected"
        self.pool = np.asarray(weights, dtype=np.float64)
        self.pooled[new_ids] = True

    def random(self, new_ids: np.ndarray, rng: np.random.Generator) -> None:
        """Gaussian rows with the per-dimension mean and spread of the pretrained ordinary rows (Aji et al.)."""
        if not len(new_ids):
            return
        ordinary = [j for j, tok in enumerate(self.side.old_tokens) if tok not in SPECIALS and not is_filler(tok)]
        ref = self.side.emb[ordinary] if ordinary else self.side.emb
        rows = rng.normal(ref.mean(0), ref.std(0) + 1e-8, size=(len(new_ids), ref.shape[1]))
        self.vector(new_ids, rows.astype(np.float32), kind="random")

    def build(self, rng: np.random.Generator, **stats) -> Plan:
        """Finish: a shared token that re-projection left without a row (it has no CBOW vector) keeps its
        pretrained row, never a random one; whatever else has no row yet gets a random one (counted)."""
        left = set(self.todo.tolist())
        kept = [(i, j) for i, j in zip(*(ids.tolist() for ids in self.side.shared), strict=True) if i in left]
        if kept:
            self.copy([i for i, _ in kept], [j for _, j in kept])
            stats["shared_without_vector_copied"] = len(kept)
        self.random(self.todo, rng)
        n_old = len(self.side.old_tokens)
        weights = sparse.csr_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.kind), n_old),
                                    dtype=np.float32)
        return Plan(self.kind, weights, self.vectors, self.direct, stats,
                    self.pooled if self.pool is not None else None, self.pool)


# --- numerical pieces shared by the methods ------------------------------------------------------------------


def normalize(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def nearest(queries: np.ndarray, keys: np.ndarray, k: int, exclude: np.ndarray | None = None,
            chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest keys by cosine for each query (chunked matrix products); `exclude[i]` is a key index
    query i may not pick (itself), or -1."""
    q, kk = torch.from_numpy(normalize(queries)), torch.from_numpy(normalize(keys))
    idx, sims = [], []
    for start in range(0, len(q), chunk):
        s = q[start : start + chunk] @ kk.T
        if exclude is not None:
            ex = torch.from_numpy(exclude[start : start + chunk])
            rows = torch.nonzero(ex >= 0).flatten()
            s[rows, ex[rows]] = -torch.inf
        top = torch.topk(s, k, dim=1)
        idx.append(top.indices)
        sims.append(top.values)
    if not idx:
        return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    return torch.cat(idx).numpy(), torch.cat(sims).numpy()


def lle_weights(x: np.ndarray, neighbours: np.ndarray, reg: float,
                ill_condition: float = 1e10) -> tuple[np.ndarray, np.ndarray]:
    """Locally linear weights: argmin |x - sum_j w_j n_j|^2 subject to sum_j w_j = 1, in closed form
    w = C^-1 1 / (1^T C^-1 1) with C the Gram matrix of the differences n_j - x, solved in one batch.

    reg > 0 adds reg * trace(C) * I (standard LLE); reg = 0 is Sato et al.'s code (a pseudo-inverse where C is
    singular). Returns the weights (n, k) and which tokens' C was ill-conditioned (they needed the regulariser).
    """
    z = torch.from_numpy(neighbours).double() - torch.from_numpy(x).double()[:, None, :]
    c = z @ z.transpose(1, 2)
    k = c.shape[-1]
    eye = torch.eye(k, dtype=c.dtype)
    eig = torch.linalg.eigvalsh(c)  # ascending; C is symmetric positive semi-definite
    ill = ~(eig[:, -1] < ill_condition * eig[:, 0].clamp_min(0))  # condition number >= limit (or NaN)
    ones = torch.ones(c.shape[0], k, 1, dtype=c.dtype)
    if reg > 0:
        trace = c.diagonal(dim1=1, dim2=2).sum(-1).clamp_min(1e-12)
        w = torch.linalg.solve(c + reg * trace[:, None, None] * eye, ones)
    else:
        w = torch.linalg.pinv(c, hermitian=True) @ ones
    w = w.squeeze(-1)
    total = w.sum(1, keepdim=True)
    w = torch.where(total.abs() > 1e-12, w / total, torch.full_like(w, 1.0 / k))
    return w.float().numpy(), ill.numpy()


def procrustes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The orthogonal W minimising |xW - y| (Schoenemann): W = U V^T from the SVD of x^T y."""
    u, _, vt = np.linalg.svd(x.T.astype(np.float64) @ y.astype(np.float64))
    return (u @ vt).astype(np.float32)


def sparsemax(z: torch.Tensor) -> torch.Tensor:
    """Euclidean projection of each row onto the simplex (Martins & Astudillo 2016): sparse weights."""
    zs, _ = torch.sort(z, dim=1, descending=True)
    ks = torch.arange(1, z.shape[1] + 1, dtype=z.dtype)
    cums = zs.cumsum(1)
    support = (1 + ks * zs) > cums
    size = support.sum(1, keepdim=True).clamp_min(1)
    tau = (cums.gather(1, size - 1) - 1) / size
    return torch.clamp(z - tau, min=0)


def segment_like(token: str, sp: spm.SentencePieceProcessor, vocab: dict[str, int]) -> list[str]:
    """How the pretrained tokenizer splits a new token: pieces of the old vocabulary only.

    A token that starts a word (leading U+2581) is encoded as a word; a word-internal token must not gain
    the marker SentencePiece adds in front of every text, so it is matched greedily (longest old piece first).
    """
    if token.startswith(BOUNDARY):
        pieces = sp.encode_as_pieces(token.replace(BOUNDARY, " "))
        return [p for p in pieces if p in vocab and p not in SPECIALS]
    return greedy_pieces(token, vocab)


def greedy_pieces(text: str, vocab: dict[str, int]) -> list[str]:
    """Longest-match segmentation into vocabulary pieces; characters no piece covers are skipped."""
    out, pos = [], 0
    while pos < len(text):
        for end in range(len(text), pos, -1):
            if text[pos:end] in vocab:
                out.append(text[pos:end])
                pos = end
                break
        else:
            pos += 1
    return out
