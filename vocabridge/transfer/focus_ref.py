"""focus-ref: the FOCUS reference implementation (deepfocus, Dobler & de Melo 2023) run as it is.

Our `focus` configuration is our reading of FOCUS on our CBOW vectors; focus-ref runs the authors' code on the
same vocabularies, side by side with it, both sides (encoder: the source language, decoder: the target
language):

- tokenizers: MarianTokenizers written from the pretrained and the new vocabulary of the side, so that
  deepfocus's token ids are ours (fillers and specials included);
- auxiliary embeddings: deepfocus's own fastText CBOW (`fasttext-tokenlevel`), trained by deepfocus's own code
  on the downstream text of the side's language (train + mono, the text of the cbow stage) segmented by the new
  tokenizer, with deepfocus's defaults (3 epochs, dimension 100, min count 10) and one thread, so that the
  vectors are the same on every run. It is trained once per side and handed to `deepfocus.FOCUS` as its model
  file (the path FOCUS itself takes when given training text, without its cache in ~/.cache);
- overlapping tokens: exact matches only (`exact_match_all`; no symbol or fuzzy matching);
- rows: `deepfocus.FOCUS`'s. The plan copies the pretrained rows of the tokens FOCUS found overlapping (the
  same values, checked, so the output bias follows them as in the other methods) and gives every other row as
  FOCUS made it: `projected` (sparsemax over fastText cosine to the overlapping tokens), or `random` for the
  tokens fastText has no vector for (FOCUS's N(mean, std) of the pretrained rows, seeded). Specials are
  copied and `<unused_i>` fillers stay empty, as in every method.

One difference from our `focus` is FOCUS's own: its anchors are all overlapping tokens with a fastText vector,
specials included, and fastText's end-of-line token `</s>` matches Marian's `</s>`, so `</s>` is an anchor
(listed in the diagnostics as `special_anchors`); ours are the ordinary shared tokens only.

The language of a side is the name of its new SentencePiece model (`spm/downstream/de.model` -> de), its text
`train.de` and `mono.de` (if present) in `Resources.corpus`. deepfocus is imported only here, when the method
runs: it is optional (`pip install -e '.[focus]' && pip install --no-deps deepfocus==1.0.1`; pyproject.toml says why
in two steps).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
import torch

from vocabridge.corpora.user import read_text_lines
from vocabridge.errors import ConfigError, InputError
from vocabridge.transfer.plan import SPECIALS, Plan, PlanBuilder, Side, is_filler

if TYPE_CHECKING:
    from vocabridge.transfer import Built, Resources

MISSING = "focus-ref needs deepfocus: pip install -e '.[focus]' && pip install --no-deps deepfocus==1.0.1"
ROLES = {"encoder": "src", "decoder": "tgt"}
FASTTEXT = {"epochs": 3, "dim": 100, "min_count": 10}  # deepfocus.FOCUS's defaults


def load_deepfocus() -> SimpleNamespace:
    """deepfocus's modules, or the one-line error that names the extra."""
    try:
        focus = importlib.import_module("deepfocus.focus")
        fasttext_embs = importlib.import_module("deepfocus.fasttext_embs")
        datasets_config = importlib.import_module("datasets.config")
    except ImportError as err:
        raise ConfigError(MISSING) from err
    return SimpleNamespace(focus=focus, fasttext_embs=fasttext_embs, datasets_config=datasets_config,
                           version=importlib.metadata.version("deepfocus"))


def build(res: Resources) -> Built:
    """The focus-ref model: `adapt` with deepfocus.FOCUS as the initialiser of each adapted side."""
    from vocabridge.transfer import adapt  # here: this module is imported by vocabridge.transfer itself

    df = load_deepfocus()
    if res.corpus is None:
        raise ConfigError("focus-ref: no downstream corpus given (Resources.corpus); FOCUS trains its fastText "
                          "vectors on it")
    with tempfile.TemporaryDirectory(prefix="vocabridge-focus-ref-") as tmp, _caches_in(Path(tmp), df):
        return adapt(res, Reference(res, Path(tmp), df))


@contextlib.contextmanager
def _caches_in(work: Path, df: SimpleNamespace):
    """deepfocus's tokenized-text and fastText caches and the datasets cache inside `work`, not ~/.cache
    (a cache keyed by file name would serve stale vectors to a later run on changed text)."""
    saved = df.fasttext_embs.CACHE_DIR, df.datasets_config.HF_DATASETS_CACHE
    df.fasttext_embs.CACHE_DIR, df.datasets_config.HF_DATASETS_CACHE = work / "deepfocus", work / "datasets"
    try:
        yield
    finally:
        df.fasttext_embs.CACHE_DIR, df.datasets_config.HF_DATASETS_CACHE = saved


def marian_tokenizer(tokens: list[str], spm_bytes: bytes, folder: Path):
    """A MarianTokenizer whose ids are the positions in `tokens`, segmenting with the given SentencePiece model."""
    from transformers import MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spm.model").write_bytes(spm_bytes)
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False),
                                       encoding="utf-8")
    return MarianTokenizer(source_spm=str(folder / "spm.model"), target_spm=str(folder / "spm.model"),
                           vocab=str(folder / "vocab.json"))


def corpus_lines(corpus: Path, lang: str) -> list[str]:
    """The downstream text of one language: train + mono (never dev/test), as the cbow stage reads it."""
    train = Path(corpus) / f"train.{lang}"
    if not train.is_file():
        raise InputError(f"{train}: no such file (focus-ref trains FOCUS's fastText vectors on it)")
    lines = read_text_lines(train)
    if (Path(corpus) / f"mono.{lang}").is_file():
        lines += read_text_lines(Path(corpus) / f"mono.{lang}")
    return lines


class Reference:
    """The initialiser: (side, knobs, rng) -> Plan from deepfocus.FOCUS; fastText trained once per side."""

    def __init__(self, res: Resources, work: Path, df: SimpleNamespace):
        self.res, self.work, self.df = res, work, df
        self.targets: dict[str, tuple] = {}
        self.calls = 0

    def target(self, side: Side) -> tuple:
        """The new vocabulary's tokenizer, deepfocus's fastText model (object and file), lines trained on."""
        if side.name not in self.targets:
            spm_file = Path(self.res.downstream_spm[ROLES[side.name]])
            tokenizer = marian_tokenizer(side.new_tokens, spm_file.read_bytes(), self.work / f"{side.name}-new")
            lines = corpus_lines(self.res.corpus, spm_file.stem)
            text = self.work / f"{side.name}.txt"  # deepfocus reads .txt, .json and .jsonl files only
            text.write_text("\n".join(lines) + "\n", encoding="utf-8")
            model = self.df.fasttext_embs.load_target_token_embedding(
                target_tokenizer=tokenizer, target_training_data_path=str(text), processes=1, **FASTTEXT)
            path = self.work / f"{side.name}.fasttext.bin"
            model.save_model(str(path))
            self.targets[side.name] = (tokenizer, model, path, len(lines))
        return self.targets[side.name]

    def __call__(self, side: Side, knobs, rng: np.random.Generator) -> Plan:
        if knobs.shared != "copy":
            raise ConfigError(f"params.yaml: transfer.focus-ref.shared: FOCUS copies the overlapping tokens; "
                              f"'{knobs.shared}' is not available")
        if side.old_sp is None:
            raise InputError(f"{side.name}: focus-ref needs the pretrained model's SentencePiece model")
        tokenizer, fasttext_model, fasttext_file, lines = self.target(side)
        self.calls += 1
        source = marian_tokenizer(side.old_tokens, side.old_sp.serialized_model_proto(),
                                  self.work / f"{side.name}-old-{self.calls}")
        match = {"exact_match_all": True, "match_symbols": False, "fuzzy_match_all": False}
        rows = self.df.focus.FOCUS(
            target_tokenizer=tokenizer, source_tokenizer=source, source_embeddings=torch.from_numpy(side.emb),
            auxiliary_embedding_mode="fasttext-tokenlevel", fasttext_model_path=str(fasttext_file),
            processes=1, seed=self.res.seed, device="cpu", verbosity="silent", **match,
        ).float().numpy()
        overlap, _ = self.df.focus.get_overlapping_tokens(tokenizer, source, **match)
        builder = PlanBuilder(side, shared_policy="focus")  # FOCUS decides which tokens overlap
        rare = {t for t in side.new_tokens if self.df.focus.is_very_rare_token(t, fasttext_model)}
        copied, projected, random_rows = [], [], []
        for i, token in enumerate(side.new_tokens):
            if token in SPECIALS or is_filler(token):
                continue
            if token in overlap:
                copied.append((i, overlap[token].source[0].id))
            else:
                (random_rows if token in rare else projected).append(i)
        if copied:
            new_ids, old_ids = (np.array(c, dtype=np.int64) for c in zip(*copied, strict=True))
            if not np.array_equal(rows[new_ids], side.emb[old_ids]):
                raise RuntimeError(f"{side.name}: FOCUS's rows of overlapping tokens are not the pretrained rows")
            builder.copy(new_ids, old_ids)
        for ids, kind in ((projected, "projected"), (random_rows, "random")):
            ids = np.array(ids, dtype=np.int64)
            builder.vector(ids, rows[ids], kind=kind)
        # FOCUS's anchors: overlapping tokens with a fastText vector, specials included (fastText's own `</s>`,
        # the end of each line, matches Marian's `</s>`); our `focus` takes ordinary shared tokens only
        used = [t for t in overlap if t not in rare and not is_filler(t)]
        same = sum(side.new_tokens[i] == side.old_tokens[j] for i, j in copied)
        return builder.build(rng, deepfocus=self.df.version, overlapping=len(copied), overlapping_as_ours=same,
                             shared_exact=len(side.shared[0]), anchors=len(used),
                             special_anchors=sorted(t for t in used if t in SPECIALS), projected=len(projected),
                             random=len(random_rows),
                             fasttext=FASTTEXT | {"lines": lines, "words": len(fasttext_model.words)})
