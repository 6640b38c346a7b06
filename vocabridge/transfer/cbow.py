"""CBOW vectors of the new domain (gensim Word2Vec), in the new vocabulary's pieces (Sato et al. 2020 §3).

Stored in word2vec's binary format and read back as gensim KeyedVectors: no pickle is involved.
"""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

import numpy as np
import sentencepiece as spm
from gensim.models import KeyedVectors, Word2Vec
from gensim.models.callbacks import CallbackAny2Vec
from tqdm import tqdm

from vocabridge.errors import InputError


class _Progress(CallbackAny2Vec):
    def __init__(self, epochs: int, name: str):
        self.bar = tqdm(total=epochs, desc=f"cbow {name}", unit="epoch")

    def on_epoch_end(self, model):
        self.bar.update(1)

    def on_train_end(self, model):
        self.bar.close()


def _stable_hash(text: str) -> int:
    """gensim seeds each vector from hash(word + seed); Python's str hash changes per process."""
    return zlib.crc32(text.encode("utf-8"))


def train_cbow(lines: list[str], sp: spm.SentencePieceProcessor, dim: int, cfg, name: str = "") -> KeyedVectors:
    """CBOW (sg=0) on `lines` segmented by `sp`; dimension = the model's embedding dimension.

    With one thread (cfg.threads = 1) the vectors are the same on every run; more threads are faster but not.
    """
    sentences = [s for s in sp.encode(lines, out_type=str) if s]
    if not sentences:
        raise InputError(f"cbow {name}: no text to train on")
    logging.getLogger("gensim").setLevel(logging.WARNING)
    model = Word2Vec(vector_size=dim, window=cfg.window, min_count=cfg.min_count, sg=0, negative=cfg.negative,
                     workers=cfg.threads, seed=cfg.seed, hashfxn=_stable_hash)
    model.build_vocab(sentences)
    model.train(sentences, total_examples=len(sentences), epochs=cfg.epochs, callbacks=[_Progress(cfg.epochs, name)])
    return model.wv


def save_vectors(kv: KeyedVectors, path: Path) -> None:
    kv.save_word2vec_format(str(path), binary=True)


def load_vectors(path: Path, dim: int | None = None) -> KeyedVectors:
    """Read word2vec binary vectors; a dimension that differs from `dim` is an error naming the file."""
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
