"""Token distillation for encoder-decoder models: fit the new rows so that the frozen pretrained model behaves under
the new segmentation as it does under the old one, on the same in-domain text.

After Dobler et al. 2025 (token distillation, arXiv 2505.20133), who fit the input rows of new tokens of a
decoder-only LM by matching hidden states of the old tokenization. Here both sides of a translation model:

- the teacher is the pretrained model reading the text in its own pieces; the student is the adapted model (its new
  rows as an initialiser made them, `init_from`) reading the same text in the new pieces;
- words are what the two segmentations share (SentencePiece never lets a piece cross a word boundary), so states
  are matched word by word: a word's state is the state at its last piece (`align: last`: in the decoder the
  only state that has read the whole word; in the encoder, whose attention reads both ways, a choice) or the mean
  over its pieces (`align: mean`); special tokens (`</s>`, language codes) are words of their own;
- encoder: each word's last-layer encoder state matches the teacher's; decoder: under teacher forcing on the
  target, each model reading the source through its own encoder, the decoder's last-layer state after each
  target word (the state that predicts the next word) and the start state match the teacher's;
- only the rows of tokens the pretrained vocabulary lacks train (shared tokens keep their pretrained rows, as
  `shared: copy`; specials and fillers are never touched); every other weight is frozen and dropout is off. The
  output layer is tied to the decoder's input rows in the pipeline's models and in NLLB/M2M100, so the output
  rows follow them; an untied output layer (some OPUS-MT models) keeps the initialiser's output rows, since the
  states matched here say nothing about the output rows, and the final_logits_bias stays as the initialiser left it.

The loss is the mean squared error per state dimension, encoder and decoder terms summed; Adam on the trainable
rows, one pass over the pairs an epoch, batches in a seeded order: the same seed gives the same rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from vocabridge.errors import InputError
from vocabridge.nmt.data import Parallel, collate, make_batches
from vocabridge.progress import progress
from vocabridge.transfer.plan import BOUNDARY

BATCH_TOKENS = 3000  # padded tokens of the longer segmentation per batch (the new one is shorter)
MAX_LEN = 256  # pairs with a side longer than this (or the models' positions) in either segmentation are left out
WATCHED_PAIRS = 1000  # the objective before and after is measured on the first pairs used, at most this many


class Vocabulary(Protocol):
    """What a Marian `Vocab` and an NLLB/M2M100 `SharedVocab` both offer."""

    tokens: list[str]
    sp: object

    def encode(self, lines: list[str]) -> list[np.ndarray]: ...

    @property
    def pad_id(self) -> int: ...


@dataclass
class Settings:
    align: str = "last"  # last | mean: a word's state is its last piece's, or the mean over its pieces
    epochs: int = 1
    lr: float = 1e-3
    pairs: int = 0  # the first N pairs of the text; 0: all
    output: float = 0.0  # weight of the output term: each target word's log-probability matched to the teacher's
    seed: int = 1


def piece_kinds(vocab: Vocabulary) -> np.ndarray:
    """Per id: 0 a token of its own (no SentencePiece piece: `</s>`, `<pad>`, a language code, a filler), 1 a piece
    inside a word (the unknown piece too), 2 a word-initial piece (it starts with U+2581)."""
    sp = vocab.sp
    unk = sp.unk_id()
    kinds = np.zeros(len(vocab.tokens), dtype=np.int8)
    for i, token in enumerate(vocab.tokens):
        piece = sp.piece_to_id(token)
        if token in ("<unk>", sp.id_to_piece(unk)):
            kinds[i] = 1
        elif piece != unk and not sp.is_control(piece):
            kinds[i] = 2 if token.startswith(BOUNDARY) else 1
    return kinds


def word_ids(ids: np.ndarray, kinds: np.ndarray) -> np.ndarray:
    """The word each position belongs to (0, 1, ...): a word-initial piece starts a word, a piece inside a word
    continues the one before it, and a token of its own is a word of its own (`kinds`: piece_kinds)."""
    out = np.empty(len(ids), dtype=np.int64)
    word, open_word = -1, False
    for pos, kind in enumerate(kinds[ids].tolist()):
        if kind == 0 or kind == 2 or not open_word:
            word += 1
        open_word = kind != 0
        out[pos] = word
    return out


def groups_of(ids: np.ndarray, kinds: np.ndarray) -> list[np.ndarray]:
    """The positions of each word, in order."""
    words = word_ids(ids, kinds)
    return [np.flatnonzero(words == w) for w in range(int(words.max()) + 1)] if len(words) else []


class Pooler:
    """The word pooling of one segmentation of the pairs: encoder states by source word, decoder states by target
    word, and the decoder's start state."""

    def __init__(self, data: Parallel, src_kinds: np.ndarray, tgt_kinds: np.ndarray, align: str):
        self.src_groups = [groups_of(ids, src_kinds) for ids in data.src]
        self.tgt_groups = [groups_of(ids, tgt_kinds) for ids in data.tgt]
        self.tgt_lengths = [len(ids) for ids in data.tgt]
        self.align = align

    def word_sums(self, idx: np.ndarray, tgt_len: int) -> torch.Tensor:
        """(batch, words, tgt_len) ones over each target word's labels: a word's log-probability is the sum of its
        pieces' (`</s>` and a language code are words of their own)."""
        sums = []
        for i in idx:
            rows = np.zeros((len(self.tgt_groups[i]), tgt_len), dtype=np.float32)
            for w, positions in enumerate(self.tgt_groups[i]):
                rows[w, positions] = 1.0
            sums.append(rows)
        return _stack(sums, tgt_len)

    def matrices(self, idx: np.ndarray, src_len: int, tgt_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        enc = [pooling(self.src_groups[i], src_len, self.align) for i in idx]
        start = [np.array([-1])]  # the start state: position 0 after the shift
        dec = [pooling(start + self.tgt_groups[i], tgt_len, self.align, shift=1, limit=self.tgt_lengths[i])
               for i in idx]
        return _stack(enc, src_len), _stack(dec, tgt_len)


def pooling(groups: list[np.ndarray], width: int, align: str, shift: int = 0, limit: int | None = None
            ) -> np.ndarray:
    """(words, width) weights that turn a sequence's states (padded to `width`) into one state per word; `shift`
    moves every position (the decoder's state after reading label i sits at i + 1), and positions from `limit` on
    (the sequence's own length) are left out: the last label, `</s>`, is never read, so its word has no state."""
    limit = width if limit is None else limit
    rows = []
    for positions in groups:
        positions = positions + shift
        positions = positions[positions < limit]
        if not len(positions):
            continue
        row = np.zeros(width, dtype=np.float32)
        if align == "last":
            row[positions[-1]] = 1.0
        else:
            row[positions] = 1.0 / len(positions)
        rows.append(row)
    return np.stack(rows) if rows else np.zeros((0, width), np.float32)


def _stack(mats: list[np.ndarray], length: int) -> torch.Tensor:
    words = max(m.shape[0] for m in mats)
    out = np.zeros((len(mats), words, length), dtype=np.float32)
    for row, m in enumerate(mats):
        out[row, : m.shape[0]] = m
    return torch.from_numpy(out)


def trainable_rows(old: Vocabulary, new: Vocabulary, new_kinds: np.ndarray) -> torch.Tensor:
    """Bool per new id: the pieces the pretrained vocabulary lacks."""
    known = set(old.tokens)
    return torch.tensor([bool(new_kinds[i]) and tok not in known for i, tok in enumerate(new.tokens)])


def states(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Last-layer encoder and decoder states under teacher forcing."""
    encoder = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    decoder = model.get_decoder()(input_ids=batch["decoder_input_ids"],
                                  encoder_hidden_states=encoder.last_hidden_state,
                                  encoder_attention_mask=batch["attention_mask"])
    return encoder.last_hidden_state, decoder.last_hidden_state


def label_logprobs(model, decoder_states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(batch, length) log-probability the model gives each label (0 on padding): its output layer, and Marian's
    final_logits_bias, over the decoder's states."""
    logits = model.get_output_embeddings()(decoder_states)
    bias = getattr(model, "final_logits_bias", None)
    if bias is not None:
        logits = logits + bias
    keep = labels != -100
    picked = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return picked * keep


def distill(teacher, old_src: Vocabulary, old_tgt: Vocabulary, student, new_src: Vocabulary, new_tgt: Vocabulary,
            src_lines: list[str], tgt_lines: list[str], settings: Settings, name: str = "distill",
            after_epoch: Callable[[int], None] | None = None) -> dict:
    """Fit the student's new rows in place (see the module docstring); returns what it did, with the objective
    before and after on the first WATCHED_PAIRS pairs it used. `after_epoch(k)` is called after each epoch k = 1,
    2, ... (a benchmark's measurement along the way)."""
    if settings.align not in ("last", "mean"):
        raise InputError(f"{name}: align must be last or mean, got {settings.align!r}")
    if settings.epochs < 0 or settings.lr <= 0 or settings.pairs < 0 or settings.output < 0:
        raise InputError(f"{name}: epochs >= 0, lr > 0, pairs >= 0 (0: all) and output >= 0, got {settings}")
    if len(src_lines) != len(tgt_lines):
        raise InputError(f"{name}: the source text has {len(src_lines)} lines, the target text {len(tgt_lines)}: "
                         f"token distillation reads parallel text, line by line")
    if settings.pairs:
        src_lines, tgt_lines = src_lines[: settings.pairs], tgt_lines[: settings.pairs]
    kinds = {"old_src": piece_kinds(old_src), "old_tgt": piece_kinds(old_tgt), "new_src": piece_kinds(new_src),
             "new_tgt": piece_kinds(new_tgt)}
    old_all = Parallel.encode(src_lines, tgt_lines, old_src, old_tgt, max_len=10**9)  # every line, in order
    new_all = Parallel.encode(src_lines, tgt_lines, new_src, new_tgt, max_len=10**9)
    limit = min(MAX_LEN, *(m.config.max_position_embeddings for m in (teacher, student)))  # the models' positions
    short = [i for i in range(len(src_lines)) if max(len(old_all.src[i]), len(old_all.tgt[i]), len(new_all.src[i]),
                                                     len(new_all.tgt[i])) <= limit]
    # a pair is matched only where both segmentations have as many words on each side (a text that one
    # SentencePiece model normalises and the other does not cannot be matched word by word)
    keep = [i for i in short if all(
        word_ids(a, kinds[f"old_{role}"])[-1] == word_ids(b, kinds[f"new_{role}"])[-1]
        for role, a, b in (("src", old_all.src[i], new_all.src[i]), ("tgt", old_all.tgt[i], new_all.tgt[i])))]
    if not keep:
        raise InputError(f"{name}: none of the {len(src_lines)} pairs can be matched word by word under both "
                         f"segmentations")
    old, new = _subset(old_all, keep), _subset(new_all, keep)
    pool_old = Pooler(old, kinds["old_src"], kinds["old_tgt"], settings.align)
    pool_new = Pooler(new, kinds["new_src"], kinds["new_tgt"], settings.align)

    params, masks = _trainable(student, {"encoder": trainable_rows(old_src, new_src, kinds["new_src"]),
                                         "decoder": trainable_rows(old_tgt, new_tgt, kinds["new_tgt"])})
    before = {id(p): p.detach().clone() for p in params}
    teacher.eval()
    student.eval()
    frozen = [p for p in student.parameters() if all(p is not q for q in params)]
    for p in frozen:
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)

    def batch_loss(idx: np.ndarray) -> tuple[torch.Tensor, dict[str, float]]:
        t_batch = collate(old, idx, old_src.pad_id, old_tgt.pad_id, teacher.config.decoder_start_token_id)
        s_batch = collate(new, idx, new_src.pad_id, new_tgt.pad_id, student.config.decoder_start_token_id)
        with torch.no_grad():
            t_enc, t_dec_states = states(teacher, t_batch)
            p_enc, p_dec = pool_old.matrices(idx, t_enc.shape[1], t_dec_states.shape[1])
            t_enc, t_dec = p_enc @ t_enc, p_dec @ t_dec_states
        s_enc, s_dec_states = states(student, s_batch)
        q_enc, q_dec = pool_new.matrices(idx, s_enc.shape[1], s_dec_states.shape[1])
        terms = {"encoder": _mse(q_enc @ s_enc, t_enc, q_enc.sum(-1) > 0),
                 "decoder": _mse(q_dec @ s_dec_states, t_dec, q_dec.sum(-1) > 0)}
        if settings.output:
            with torch.no_grad():
                t_words = pool_old.word_sums(idx, t_batch["labels"].shape[1]) @ label_logprobs(
                    teacher, t_dec_states, t_batch["labels"]).unsqueeze(-1)
            sums = pool_new.word_sums(idx, s_batch["labels"].shape[1])
            s_words = sums @ label_logprobs(student, s_dec_states, s_batch["labels"]).unsqueeze(-1)
            terms["output"] = _mse(s_words, t_words, sums.sum(-1) > 0)
        loss = terms["encoder"] + terms["decoder"] + settings.output * terms.get("output", 0.0)
        return loss, {k: float(v.detach()) for k, v in terms.items()}

    watched = np.arange(min(len(new), WATCHED_PAIRS))  # the objective before and after, on the same pairs

    def evaluate() -> dict[str, float]:
        total: dict[str, float] = {}
        with torch.no_grad():
            for first in range(0, len(watched), 64):
                idx = watched[first : first + 64]
                for k, v in batch_loss(idx)[1].items():
                    total[k] = total.get(k, 0.0) + v * len(idx)
        return {k: round(v / len(watched), 6) for k, v in total.items()}

    start = time.perf_counter()
    loss_before = evaluate()
    optimizer = torch.optim.Adam(params, lr=settings.lr)
    updates = 0
    with progress(total=settings.epochs * len(make_batches(new, BATCH_TOKENS, settings.seed, 0)),
                  desc=name, unit="upd") as bar:
        for epoch in range(settings.epochs):
            for idx in make_batches(new, BATCH_TOKENS, settings.seed, epoch):
                optimizer.zero_grad(set_to_none=True)
                loss, _ = batch_loss(idx)
                loss.backward()
                for p, mask in zip(params, masks, strict=True):
                    p.grad[~mask] = 0.0
                optimizer.step()
                updates += 1
                bar.update(1)
                bar.set_postfix(loss=f"{float(loss.detach()):.4f}")
            if after_epoch is not None:
                after_epoch(epoch + 1)
    with torch.no_grad():  # exactly the initialiser's rows wherever nothing was to train
        for p, mask in zip(params, masks, strict=True):
            p[~mask] = before[id(p)][~mask]
    loss_after = evaluate()
    for p in [*frozen, *params]:
        p.requires_grad_(True)
    return {"align": settings.align, "epochs": settings.epochs, "lr": settings.lr, "output": settings.output,
            "updates": updates,
            "pairs": len(keep), "pairs_given": len(src_lines),
            "pairs_too_long": len(src_lines) - len(short), "pairs_unaligned": len(short) - len(keep),
            "trainable_rows": {side: int(m.sum()) for side, m in _named_masks(student, masks).items()},
            "watched_pairs": len(watched), "loss_before": loss_before, "loss_after": loss_after,
            "seconds": round(time.perf_counter() - start, 1)}


def _subset(data: Parallel, rows: list[int]) -> Parallel:
    return Parallel([data.src[i] for i in rows], [data.tgt[i] for i in rows])


def _mse(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Mean squared error per dimension over the real (non-padding) word states."""
    diff = (pred - target)[valid]
    return (diff * diff).mean() if diff.numel() else pred.sum() * 0.0


def _trainable(model, masks: dict[str, torch.Tensor]) -> tuple[list[torch.nn.Parameter], list[torch.Tensor]]:
    """The embedding matrices with rows to train, each once (NLLB/M2M100 share one matrix between the encoder and
    the decoder: its mask is the union, the same vocabulary on both sides)."""
    params, out = [], []
    for side, module in (("encoder", model.get_encoder()), ("decoder", model.get_decoder())):
        weight = module.embed_tokens.weight
        for k, p in enumerate(params):
            if p is weight:
                out[k] = out[k] | masks[side]
                break
        else:
            params.append(weight)
            out.append(masks[side].clone())
    return params, out


def _named_masks(model, masks: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    enc, dec = model.get_encoder().embed_tokens.weight, model.get_decoder().embed_tokens.weight
    if enc is dec:
        return {"shared": masks[0]}
    return {"encoder": masks[0], "decoder": masks[1]}
