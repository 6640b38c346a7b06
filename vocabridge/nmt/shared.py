"""NLLB-200 and M2M100 models: one vocabulary for both sides, language-code tokens, tied embeddings.

The token layout is fairseq's, which both tokenizers assume: `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3, then the
SentencePiece model's pieces in its order (its own `<unk>`, `<s>`, `</s>` skipped), then the language codes
(and NLLB's `<mask>`): M2M100's tokenizer computes a code's id as len(vocab.json) + its index, NLLB's reads
them from tokenizer.json. A source sentence is `[src code] pieces </s>`, a target `[tgt code] pieces </s>`;
the decoder starts from `</s>` and generation forces the target code first (`forced_bos_token_id`).
SharedVocab offers what nmt.data, nmt.train and nmt.translate ask of a Marian Vocab (encode, decode, pad_id),
so the training loop and the beam search run these models unchanged. Weights are read from safetensors only.
"""

from __future__ import annotations

import dataclasses
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import sentencepiece as spm
import torch

from vocabridge.architectures import NLLB, SPM_FILE, Architecture, check_model_dir
from vocabridge.errors import InputError
from vocabridge.nmt.data import padding_share
from vocabridge.nmt.train import Trainer, dev_loss
from vocabridge.nmt.translate import translate
from vocabridge.nmt.vocab import spm_pieces

if TYPE_CHECKING:
    from transformers import M2M100ForConditionalGeneration

HEAD = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's specials, ids 0..3
BOS, PAD_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
FIRST_PIECE = 3  # SentencePiece ids 0..2 are its <unk>, <s>, </s> (how the tokenizers' models are trained)


@dataclass
class SharedVocab:
    """The one vocabulary of an NLLB/M2M100 model; `lang`: the code token this side's sentences start with."""

    tokens: list[str]  # by id; `<unused_i>` for rows the tokenizer names no token for
    sp: spm.SentencePieceProcessor
    spm_bytes: bytes
    architecture: Architecture
    lang: int | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def filler_ids(self) -> list[int]:
        return [i for i, tok in enumerate(self.tokens) if tok.startswith("<unused_")]

    @property
    def tail(self) -> list[str]:
        """Language codes (and `<mask>`): the tokens after the pieces, which keep their rows in an adapted model."""
        pieces = {self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())}
        return [t for t in self.tokens if t not in pieces and t not in HEAD and not t.startswith("<unused_")]

    def id_of(self, token: str) -> int:
        try:
            return self.tokens.index(token)
        except ValueError:
            raise KeyError(f"the vocabulary has no token {token!r}") from None

    def for_lang(self, code: str, model_dir: Path) -> SharedVocab:
        """This vocabulary for sentences of language `code`; an unknown code is the user's error."""
        token = self.architecture.lang_token(code)
        if token not in self.tail:
            raise InputError(f"{model_dir}: unknown language code '{code}' for this {self.architecture.label} model "
                             f"(codes look like '{self.architecture.lang_example}')")
        return dataclasses.replace(self, lang=self.tokens.index(token))

    def _lookup(self) -> np.ndarray:
        if not hasattr(self, "_ids"):
            index = {tok: i for i, tok in enumerate(self.tokens)}
            self._ids = np.array([index.get(self.sp.id_to_piece(i), UNK_ID) for i in range(self.sp.get_piece_size())],
                                 dtype=np.int64)
            self._ids[: FIRST_PIECE] = UNK_ID
        return self._ids

    def encode(self, lines: list[str], alpha: float = 0.0, seed: int = 0) -> list[np.ndarray]:
        """`[code] pieces </s>` per line, as the family's tokenizer encodes it (alpha > 0: sampled pieces)."""
        lookup = self._lookup()
        encoded = spm_pieces(self.sp, lines, alpha, seed)
        prefix = [] if self.lang is None else [self.lang]
        return [np.array([*prefix, *lookup[np.asarray(ids, dtype=np.int64)], EOS_ID], dtype=np.int64)
                for ids in encoded]

    def decode(self, ids) -> str:
        pieces = set(self._lookup()[FIRST_PIECE:].tolist())
        return self.sp.decode_pieces([self.tokens[i] for i in ids if i in pieces])


def vocab_tokens(sp_bytes: bytes, tail: list[str]) -> list[str]:
    """The fairseq layout of a SentencePiece model's pieces with the language codes after them."""
    sp = spm.SentencePieceProcessor(model_proto=sp_bytes)
    pieces = [sp.id_to_piece(i) for i in range(FIRST_PIECE, sp.get_piece_size())]
    return [*HEAD, *pieces, *tail]


def train_shared_spm(lines: list[str], vocab_size: int, seed: int, threads: int) -> bytes:
    """A BPE SentencePiece model as the NLLB and M2M100 tokenizers use (`<unk>`, `<s>`, `</s>` = 0, 1, 2)."""
    if not lines:
        raise InputError("adapt: no text to train the shared vocabulary on")
    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=vocab_size,
            hard_vocab_limit=False, character_coverage=1.0, shuffle_input_sentence=True, num_threads=threads,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    except RuntimeError as err:
        raise InputError(f"adapt: SentencePiece training failed: {err}") from None
    return model.getvalue()


def load_vocab(path: Path) -> SharedVocab:
    """The tokenizer's vocabulary by id (the model's rows beyond it as `<unused_i>`) and its SentencePiece model."""
    from transformers import AutoTokenizer

    path = Path(path)
    arch = check_model_dir(path)
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    mapping = dict(tok.get_vocab()) | dict(getattr(tok, "lang_token_to_id", {}))  # M2M100 computes code ids
    rows = json.loads((path / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    tokens = [f"<unused_{i}>" for i in range(max(rows, max(mapping.values()) + 1))]
    for token, i in mapping.items():
        tokens[i] = token
    if tuple(tokens[:4]) != HEAD:
        raise InputError(f"{path}: the tokenizer's first ids are {tokens[:4]}, expected {list(HEAD)}")
    blob = (path / SPM_FILE).read_bytes()
    return SharedVocab(tokens, spm.SentencePieceProcessor(model_proto=blob), blob, arch)


def load_model(path: Path, device: str = "cpu") -> tuple[M2M100ForConditionalGeneration, SharedVocab]:
    from transformers import M2M100ForConditionalGeneration

    vocab = load_vocab(path)
    model = M2M100ForConditionalGeneration.from_pretrained(Path(path), use_safetensors=True, local_files_only=True)
    return model.to(device), vocab


def save_model(model: M2M100ForConditionalGeneration, vocab: SharedVocab, out: Path, like: Path,
               src_lang: str | None = None, tgt_lang: str | None = None) -> None:
    """Write a directory that AutoModelForSeq2SeqLM and AutoTokenizer load offline (use inside atomic_dir);
    `like`: the directory whose tokenizer settings carry over. With `tgt_lang`, plain `generate` translates into
    it (forced_bos_token_id)."""
    from transformers.generation.configuration_utils import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    forced = {"forced_bos_token_id": vocab.tokens.index(vocab.architecture.lang_token(tgt_lang))} if tgt_lang else {}
    model.generation_config = GenerationConfig(bos_token_id=BOS, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
                                               decoder_start_token_id=EOS_ID, **forced)
    model.save_pretrained(out, safe_serialization=True)
    (out / SPM_FILE).write_bytes(vocab.spm_bytes)
    settings = json.loads((Path(like) / "tokenizer_config.json").read_text(encoding="utf-8"))
    langs = {k: v for k, v in (("src_lang", src_lang), ("tgt_lang", tgt_lang)) if v}
    tok = (_nllb_tokenizer if vocab.architecture is NLLB else _m2m100_tokenizer)(vocab, out, settings, langs)
    tok.save_pretrained(out)
    _check_tokenizer(vocab, out)


def _nllb_tokenizer(vocab: SharedVocab, out: Path, settings: dict, langs: dict):
    from tokenizers.models import BPE
    from transformers import NllbTokenizer
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    extracted = SentencePieceExtractor(str(out / SPM_FILE)).extract(BPE)
    codes = [t for t in vocab.tail if t != "<mask>"]
    named = {t: i for i, t in enumerate(vocab.tokens) if not t.startswith("<unused_")}
    return NllbTokenizer(vocab=named, merges=extracted["merges"], additional_special_tokens=codes,
                         _spm_precompiled_charsmap=extracted["_spm_precompiled_charsmap"],
                         legacy_behaviour=settings.get("legacy_behaviour", False), **langs)


def _m2m100_tokenizer(vocab: SharedVocab, out: Path, settings: dict, langs: dict):
    from transformers import M2M100Tokenizer

    pieces = len(vocab.tokens) - len(vocab.tail) - len(vocab.filler_ids)
    (out / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab.tokens[:pieces])},
                                               ensure_ascii=False, indent=0), encoding="utf-8")
    return M2M100Tokenizer(vocab_file=str(out / "vocab.json"), spm_file=str(out / SPM_FILE),
                           language_codes=settings.get("language_codes", "m2m100"),
                           num_madeup_words=settings.get("num_madeup_words", 8), **langs)


def _check_tokenizer(vocab: SharedVocab, out: Path) -> None:
    """The saved tokenizer, reloaded as a user loads it, must give every named token the model's row."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    named = [t for t in vocab.tokens if not t.startswith("<unused_")]
    ids = tok.convert_tokens_to_ids(named)
    wrong = [t for t, i in zip(named, ids, strict=True) if vocab.tokens[i] != t]
    if wrong:
        raise ValueError(f"{out}: the written tokenizer gives other ids to {wrong[:5]}")


class SharedTrainer(Trainer):
    """nmt.train's Trainer for NLLB/M2M100: decoder inputs start from the config's decoder_start_token_id
    (`</s>`, not Marian's pad), and dev BLEU decodes with transformers (forced target code)."""

    def _collate(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        from vocabridge.nmt.data import collate

        return collate(self.data, idx, PAD_ID, PAD_ID, self.model.config.decoder_start_token_id)

    def _dev_bleu(self) -> float:
        import sacrebleu

        hyps, _ = translate(self.model, self.src, self.tgt, self.dev_src, beam=1, bf16=self.bf16, progress=False)
        return round(sacrebleu.corpus_bleu(hyps, [self.dev_ref]).score, 2)

    def _dev_loss(self) -> float:
        return dev_loss(self.model, self.src, self.tgt, self.dev_src, self.dev_ref, bf16=self.bf16)


def fit(model: M2M100ForConditionalGeneration, src: SharedVocab, tgt: SharedVocab, files: dict[str, Path], cfg,
        ckpt_dir: Path, fingerprint: dict, name: str) -> tuple:
    """nmt.train.fit for these models: train on files' train pairs, select on its dev pairs; the best weights stay
    in `model`. Returns the loop's state and the summary `vocabridge finetune` reports."""
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.nmt.data import Parallel, make_batches
    from vocabridge.training import TrainingError

    lines = {k: read_text_lines(v) for k, v in files.items()}
    data = Parallel.encode(lines["train.src"], lines["train.tgt"], src, tgt, cfg.max_len)
    if not len(data):
        raise TrainingError(f"{files['train.src']}: no training pair fits max_len={cfg.max_len}")
    model.generation_config.forced_bos_token_id = tgt.lang  # dev BLEU's search writes the target language
    trainer = SharedTrainer(model, src, tgt, data, (lines["dev.src"], lines["dev.tgt"]), cfg, ckpt_dir, fingerprint,
                            name)
    state = trainer.train()
    trainer.load_best()
    return state, {
        "updates": state.step, "best_update": state.best_step, "best_dev_bleu": state.best_bleu,
        "best_dev_loss": state.best_loss, "selected_by": f"dev {cfg.select_by}", "stopped": state.stopped,
        **state.ending(),
        "train_pairs": len(data), "target_tokens_seen": state.target_tokens, "train_seconds": round(state.seconds, 1),
        "padding_share": round(padding_share(data, make_batches(data, cfg.batch_tokens, cfg.seed, 0)), 4),
        "bf16": trainer.bf16, "device": str(trainer.device), "threads": torch.get_num_threads()}


def translate_lines(model_dir: Path, lines: list[str], src_lang: str, tgt_lang: str, device: torch.device,
                    **search) -> tuple[list[str], dict]:
    """Beam search from `src_lang` into `tgt_lang` with transformers (nmt.translate), in input order."""
    model, vocab = load_model(model_dir, str(device))
    src, tgt = vocab.for_lang(src_lang, model_dir), vocab.for_lang(tgt_lang, model_dir)
    model.generation_config.forced_bos_token_id = tgt.lang
    return translate(model, src, tgt, lines, **search)


def translate_lines_ct2(model_dir: Path, lines: list[str], src_lang: str, tgt_lang: str, *, beam: int = 5,
                         length_penalty: float = 1.0, batch_tokens: int = 4000, patience: float = 2.0,
                         threads: int = 2, device: str = "cpu",
                         compute_type: str = "default") -> tuple[list[str], dict]:
    """`translate_lines` by CTranslate2 (vocabridge.ct2): the directory converted in memory, `src_lang` into
    `tgt_lang` (the architecture's codes); outputs as transformers' (greedy: the same; beam: nearly)."""
    from vocabridge.ct2 import m2m100_spec, translate_converted, write_spec

    model, vocab = load_model(Path(model_dir))  # checks the directory; weights from safetensors only
    src, tgt = vocab.for_lang(src_lang, model_dir), vocab.for_lang(tgt_lang, model_dir)
    limit = model.config.max_position_embeddings
    forced_eos = getattr(model.generation_config, "forced_eos_token_id", None) is not None
    with tempfile.TemporaryDirectory(prefix="vocabridge-ct2-") as tmp:
        ct2_dir = write_spec(m2m100_spec(model, vocab), Path(tmp) / "ct2")
        del model
        return translate_converted(ct2_dir, src, tgt, limit, lines, beam=beam, length_penalty=length_penalty,
                                   batch_tokens=batch_tokens, patience=patience, threads=threads, device=device,
                                   compute_type=compute_type, prefix=[tgt.tokens[tgt.lang]], forced_eos=forced_eos)
