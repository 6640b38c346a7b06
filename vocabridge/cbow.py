"""CBOW vectors (gensim Word2Vec) in a vocabulary's pieces (Sato et al. 2020).

Two uses: the new domain's vectors, which the vocabulary-adaptation methods project into the model's space
(§3.2, the cbow stage), and the upstream domain's vectors, from which the upstream model's embedding rows
start before pretraining (§4.2, `pretrain.init: cbow`), so that the two spaces are alike to begin with.
Stored in word2vec's binary format and read back as gensim KeyedVectors: no pickle is involved.
"""

from __future__ import annotations

import logging
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import sentencepiece as spm

from vocabridge.corpora.user import read_text_lines
from vocabridge.errors import InputError
from vocabridge.progress import progress

if TYPE_CHECKING:  # gensim takes a second to import, torch more; the functions that need them import them
    from gensim.models import KeyedVectors


def _progress(epochs: int, name: str):
    """A progress bar over gensim's epochs (a gensim callback, so defined once gensim is imported)."""
    from gensim.models.callbacks import CallbackAny2Vec

    class Progress(CallbackAny2Vec):
        def __init__(self):
            self.bar = progress(total=epochs, desc=f"cbow {name}", unit="epoch")

        def on_epoch_end(self, model):
            self.bar.update(1)

        def on_train_end(self, model):
            self.bar.close()

    return Progress()


def stable_hash(text: str) -> int:
    """gensim seeds each vector from hash(word + seed); Python's str hash changes per process."""
    return zlib.crc32(text.encode("utf-8"))


def train_cbow(lines: list[str], sp: spm.SentencePieceProcessor, dim: int, cfg, name: str = "",
               fixed: dict[str, np.ndarray] | None = None) -> KeyedVectors:
    """CBOW (sg=0) on `lines` segmented by `sp`; dimension = the model's embedding dimension.

    `fixed`: pieces whose input vectors start at the given rows and stay there (gensim's per-vector lock), so
    that the others are learned around them, in their space. With one thread (cfg.threads = 1) the vectors are
    the same on every run; more threads are faster but not.
    """
    from gensim.models import Word2Vec

    sentences = [s for s in sp.encode(lines, out_type=str) if s]
    if not sentences:
        raise InputError(f"cbow {name}: no text to train on")
    logging.getLogger("gensim").setLevel(logging.WARNING)
    model = Word2Vec(vector_size=dim, window=cfg.window, min_count=cfg.min_count, sg=0, negative=cfg.negative,
                     workers=cfg.threads, seed=cfg.seed, hashfxn=stable_hash)
    model.build_vocab(sentences)
    if fixed:
        lock = np.ones(len(model.wv), dtype=np.float32)
        for piece, row in fixed.items():
            if piece in model.wv.key_to_index:
                k = model.wv.key_to_index[piece]
                model.wv.vectors[k], lock[k] = row, 0.0
        model.wv.vectors_lockf = lock
    model.train(sentences, total_examples=len(sentences), epochs=cfg.epochs, callbacks=[_progress(cfg.epochs, name)])
    return model.wv


def save_vectors(kv: KeyedVectors, path: Path) -> None:
    kv.save_word2vec_format(str(path), binary=True)


def load_vectors(path: Path, dim: int | None = None) -> KeyedVectors:
    """Read word2vec binary vectors; a dimension that differs from `dim` is an error naming the file."""
    from gensim.models import KeyedVectors

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such CBOW file")
    try:
        kv = KeyedVectors.load_word2vec_format(str(path), binary=True)
    except (ValueError, UnicodeDecodeError, EOFError) as err:
        raise InputError(f"{path}: not a word2vec binary file ({err})") from None
    if dim is not None and kv.vector_size != dim:
        raise InputError(f"{path}: vectors have dimension {kv.vector_size}, the model's embeddings {dim}")
    kv.vectors = kv.vectors.astype(np.float32)
    return kv


def domain_text(corpus: Path, lang: str) -> list[str]:
    """A domain's CBOW text in one language: its training side, and its monolingual text if it has any."""
    lines = read_text_lines(corpus / f"train.{lang}")
    if (corpus / f"mono.{lang}").is_file():
        lines += read_text_lines(corpus / f"mono.{lang}")
    return lines


def rows_from_vectors(kv: KeyedVectors, tokens: list[str], rows: np.ndarray) -> tuple[np.ndarray, int]:
    """`rows` with the row of every token that has a CBOW vector replaced by that vector; (rows, how many).

    The vectors are scaled as one, so that their mean norm is the mean norm of the rows they replace: CBOW
    gives the directions and the relative norms, the model's initialisation keeps its scale (training starts
    as stable as from random rows). Tokens without a vector (special tokens, fillers) keep their rows."""
    ids = [i for i, token in enumerate(tokens) if token in kv.key_to_index]
    out = rows.copy()
    if not ids:
        return out, 0
    vectors = kv.vectors[[kv.key_to_index[tokens[i]] for i in ids]].astype(np.float64)
    scale = np.linalg.norm(rows[ids], axis=1).mean() / max(np.linalg.norm(vectors, axis=1).mean(), 1e-12)
    out[ids] = (vectors * scale).astype(rows.dtype)
    return out, len(ids)


def initialise_embeddings(model, vocabs: dict[str, object], texts: dict[str, list[str]], cfg) -> dict:
    """Sato et al. §4.2: the Transformer's source and target embedding rows start from CBOW vectors trained on
    `texts` in the model's own pieces (the decoder's output layer is tied to its input rows and follows)."""
    import torch

    stats = {}
    for role, embedding in (("src", model.get_encoder().embed_tokens), ("tgt", model.get_decoder().embed_tokens)):
        vocab = vocabs[role]
        kv = train_cbow(texts[role], vocab.sp, embedding.weight.shape[1], cfg, f"{role} (init)")
        rows, covered = rows_from_vectors(kv, vocab.tokens, embedding.weight.detach().cpu().float().numpy())
        with torch.no_grad():
            embedding.weight.copy_(torch.from_numpy(rows))
        stats[role] = {"cbow_rows": covered, "rows": len(vocab.tokens), "lines": len(texts[role])}
    return stats
