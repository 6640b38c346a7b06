"""Pretraining an embedding generator (Liu et al. 2021, §3.3) on the upstream corpus, the Marian model frozen.

Each batch of the upstream corpus is re-segmented at random (`resegment`: long words split into pieces the
pretrained vocabulary lacks, pieces of a word merged), so that "unseen" tokens appear. For one step they are
appended to the model's vocabulary: row G(w) from the pretrained rows of their Sm(w) (morph.py), in the tied
decoder input/output embedding, and in final_logits_bias with the same weights over the members' entries
(as transfer applies a Plan). With `sides="both"` (the generator of rows that adapt both sides) the source side
is re-segmented too and the encoder embedding extended. Only the generator's parameters train (Adam); the
model stays in eval mode (no dropout), its parameters frozen. The loss is Eq. 5:

    L = Lp(s') + lambda * Ld(s, s'),

Lp the model's own (label-smoothed) cross-entropy on the re-segmented target s', Ld (Eq. 4) the Euclidean
distance between the final decoder hidden states of each target word under the original segmentation s and
under s', each averaged over the word's pieces (the positions where the word's pieces are the decoder's
input), averaged over the batch's words. lambda = 0 is patt-eg, 0.5 patt-eg-kd.

Marian scales embeddings by sqrt(d_model): transformers' MarianDecoder multiplies `inputs_embeds` by
embed_scale itself, MarianEncoder only when it looks the ids up; `forward_extended` therefore passes raw rows
to the decoder and scaled rows to the encoder, which reproduces the plain model exactly for seen tokens.

The one training loop (vocabridge.training) runs it: checkpoints every `checkpoint_every` steps; the
re-segmentation of step t draws from a generator seeded with (seed, t) and the model has no dropout, so a resumed
run is identical to an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from vocabridge.config import GeneratorTraining, Resegment
from vocabridge.errors import InputError
from vocabridge.nmt.data import Parallel, make_batches
from vocabridge.nmt.model import use_fast_attention
from vocabridge.nmt.vocab import Vocab
from vocabridge.training import Cadence, LoopState, Loss, TrainLoop
from vocabridge.transfer.generator import Generator
from vocabridge.transfer.morph import MorphIndex
from vocabridge.transfer.plan import BOUNDARY, SPECIALS, is_filler

if TYPE_CHECKING:
    from transformers.models.marian.modeling_marian import MarianMTModel

# --- re-segmentation ------------------------------------------------------------------------------------------


def words_of(pieces: list[str]) -> list[list[str]]:
    """Group pieces into words: a word starts at a piece with the boundary marker (or a special token)."""
    words: list[list[str]] = []
    for piece in pieces:
        special = piece in SPECIALS or is_filler(piece)
        if not words or piece.startswith(BOUNDARY) or special or _special_word(words[-1]):
            words.append([piece])
        else:
            words[-1].append(piece)
    return words


def _special_word(word: list[str]) -> bool:
    return word[0] in SPECIALS or is_filler(word[0])


def resegment_word(word: list[str], vocab: Collection[str], cfg: Resegment, rng: np.random.Generator) -> list[str]:
    """One word's new pieces: split (long words, with probability split_word) or merge its pieces."""
    if _special_word(word) or any(p not in vocab for p in word):
        return list(word)  # <unk> and friends stay as they are
    text = "".join(word)
    marker = text.startswith(BOUNDARY)
    body = text[1:] if marker else text
    head = BOUNDARY if marker else ""
    if len(body) > cfg.split_min_chars and rng.random() < cfg.split_word:
        cuts, start = [], 0
        for i in range(1, len(body)):
            p = cfg.split_cut_edge if i in (1, len(body) - 1) else cfg.split_cut
            left = (head if start == 0 else "") + body[start:i]
            if rng.random() < p and left not in vocab:
                cuts.append(left)
                start = i
        if not cuts:
            return list(word)  # no cut fired: the word keeps its segmentation
        return [*cuts, (head if start == 0 else "") + body[start:]]
    out = [word[0]]
    for piece in word[1:]:
        if rng.random() < cfg.merge:
            out[-1] += piece
        else:
            out.append(piece)
    return out


def resegment(pieces: list[str], vocab: Collection[str], cfg: Resegment,
              rng: np.random.Generator) -> tuple[list[str], list[int], list[int]]:
    """New pieces for one sentence (no `</s>`), and the word index of every old and every new piece."""
    new, word_old, word_new = [], [], []
    for w, word in enumerate(words_of(pieces)):
        out = resegment_word(word, vocab, cfg, rng)
        new += out
        word_old += [w] * len(word)
        word_new += [w] * len(out)
    return new, word_old, word_new


# --- the model with a vocabulary extended for one step --------------------------------------------------------


def generated_rows(gen: Generator, emb: torch.Tensor, out: torch.Tensor | None, bias: torch.Tensor,
                   ids: torch.Tensor, rel: torch.Tensor, mask: torch.Tensor):
    """G(w) rows for the embedding, the output layer (None when tied) and the bias: one set of weights over
    Sm(w), computed from the embedding rows and applied to each matrix, as a transfer Plan does."""
    members = emb[ids]
    w = gen.weights(members, rel, mask)
    rows = (w.unsqueeze(-1) * members).sum(1)
    out_rows = None if out is None else (w.unsqueeze(-1) * out[ids]).sum(1)
    return rows, out_rows, (w * bias[ids]).sum(1)


def _output_matrix(model: MarianMTModel) -> torch.Tensor | None:
    """The output layer's weight when it is not tied to the decoder embedding, else None."""
    out = model.get_output_embeddings().weight
    return None if out is model.model.decoder.embed_tokens.weight else out


def forward_extended(model: MarianMTModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     decoder_input_ids: torch.Tensor, *, dec_rows: torch.Tensor | None = None,
                     out_rows: torch.Tensor | None = None, bias_rows: torch.Tensor | None = None,
                     enc_rows: torch.Tensor | None = None, encoder_hidden: torch.Tensor | None = None):
    """Logits over the vocabulary plus the extra rows, the decoder's final hidden states and the encoder's
    output. Ids at or above the vocabulary size index the extra rows. With no extra rows the logits are the
    plain model's (`model(input_ids, attention_mask, decoder_input_ids=...).logits`)."""
    core = model.model
    if encoder_hidden is None:
        enc_emb = core.encoder.embed_tokens.weight
        if enc_rows is not None:
            enc_emb = torch.cat([enc_emb, enc_rows])
        # the encoder scales only what it looks up itself
        embeds = F.embedding(input_ids, enc_emb) * core.encoder.embed_scale
        encoder_hidden = core.encoder(inputs_embeds=embeds, attention_mask=attention_mask).last_hidden_state
    dec_emb = core.decoder.embed_tokens.weight
    if dec_rows is not None:
        dec_emb = torch.cat([dec_emb, dec_rows])
    # the decoder multiplies inputs_embeds by embed_scale itself: pass the raw rows
    hidden = core.decoder(inputs_embeds=F.embedding(decoder_input_ids, dec_emb), encoder_hidden_states=encoder_hidden,
                          encoder_attention_mask=attention_mask, use_cache=False).last_hidden_state
    out = _output_matrix(model)
    out = dec_emb if out is None else (out if out_rows is None else torch.cat([out, out_rows]))
    bias = model.final_logits_bias[0]
    if bias_rows is not None:
        bias = torch.cat([bias, bias_rows])
    return F.linear(hidden, out) + bias, hidden, encoder_hidden


# --- batches --------------------------------------------------------------------------------------------------


@dataclass
class Side:
    """One vocabulary's pieces and its Sm(w) index, and the unseen tokens of the current batch."""

    vocab: Vocab
    index: MorphIndex
    lookup: dict[str, int]
    cache: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @classmethod
    def of(cls, vocab: Vocab, max_members: int) -> Side:
        return cls(vocab, MorphIndex(vocab.tokens, vocab.sp, max_members), {t: i for i, t in enumerate(vocab.tokens)})

    def members(self, tokens: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        m = self.index.max_members
        ids, rel, mask = np.zeros((len(tokens), m), np.int64), np.zeros((len(tokens), m), np.int64), np.zeros(
            (len(tokens), m), bool)
        for row, tok in enumerate(tokens):
            if tok not in self.cache:
                self.cache[tok] = self.index.members(tok)
            for col, (old, relation) in enumerate(self.cache[tok]):
                ids[row, col], rel[row, col], mask[row, col] = old, relation, True
        return torch.from_numpy(ids), torch.from_numpy(rel), torch.from_numpy(mask)


@dataclass
class Batch:
    """Both segmentations of one batch, padded; extra ids (>= vocabulary size) name the `unseen` tokens."""

    input_ids: torch.Tensor  # original source
    attention_mask: torch.Tensor
    decoder_input_ids: torch.Tensor  # original target, shifted right
    word: torch.Tensor  # word index (global over the batch) of each original decoder input position, -1 none
    new_input_ids: torch.Tensor
    new_attention_mask: torch.Tensor
    new_decoder_input_ids: torch.Tensor
    new_labels: torch.Tensor  # -100 on padding
    new_word: torch.Tensor
    words: int
    unseen: dict[str, list[str]]  # side -> unseen tokens, in the order of their extra ids
    target_tokens: int  # of the re-segmented target, `</s>` included


def _pad(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)


def _encode(pieces: list[str], side: Side, unseen: dict[str, int]) -> list[int]:
    size = len(side.vocab)
    out = []
    for p in pieces:
        if p in side.lookup:
            out.append(side.lookup[p])
        else:
            out.append(size + unseen.setdefault(p, len(unseen)))
    return [*out, 0]  # </s>


def make_batch(data: Parallel, idx: np.ndarray, src: Side, tgt: Side, cfg: Resegment, sides: str,
               rng: np.random.Generator, max_positions: int = 1 << 30) -> Batch:
    """Re-segment the target (and with sides=both the source) of the pairs `idx`, and collate both versions.
    A side that would grow past `max_positions` keeps its original segmentation."""
    pad, start = tgt.vocab.pad_id, tgt.vocab.pad_id
    new_src, new_dec, new_lab, word_old, word_new = [], [], [], [], []
    unseen: dict[str, dict[str, int]] = {"encoder": {}, "decoder": {}}
    offset = 0
    for i in idx:
        old_src = data.src[i].tolist()
        if sides == "both":
            pieces = [src.vocab.tokens[t] for t in old_src[:-1]]
            new = resegment(pieces, src.lookup, cfg, rng)[0]
            new_src.append(_encode(new, src, unseen["encoder"]) if len(new) < max_positions else old_src)
        else:
            new_src.append(old_src)
        pieces = [tgt.vocab.tokens[t] for t in data.tgt[i][:-1].tolist()]
        new, w_old, w_new = resegment(pieces, tgt.lookup, cfg, rng)
        if len(new) >= max_positions:
            new, w_new = pieces, w_old
        labels = _encode(new, tgt, unseen["decoder"])
        new_lab.append(labels)
        new_dec.append([start, *labels[:-1]])
        # decoder input position t holds label t-1: the start token and `</s>` belong to no word
        word_old.append([-1, *[w + offset for w in w_old]])
        word_new.append([-1, *[w + offset for w in w_new]])
        offset += (max(w_old) + 1) if w_old else 0
    old_src = [data.src[i].tolist() for i in idx]
    old_tgt = [data.tgt[i].tolist() for i in idx]
    input_ids, new_input_ids = _pad(old_src, pad), _pad(new_src, pad)
    return Batch(
        input_ids=input_ids, attention_mask=(input_ids != pad).long(),
        decoder_input_ids=_pad([[start, *t[:-1]] for t in old_tgt], pad), word=_pad(word_old, -1),
        new_input_ids=new_input_ids, new_attention_mask=(new_input_ids != pad).long(),
        new_decoder_input_ids=_pad(new_dec, pad), new_labels=_pad(new_lab, -100), new_word=_pad(word_new, -1),
        words=offset, unseen={side: list(tokens) for side, tokens in unseen.items()},
        target_tokens=sum(map(len, new_lab)))


def word_means(hidden: torch.Tensor, word: torch.Tensor, words: int) -> torch.Tensor:
    """(words, d): the mean hidden state over each word's positions."""
    d = hidden.shape[-1]
    flat, index = hidden.reshape(-1, d), word.reshape(-1)
    keep = index >= 0
    sums = torch.zeros(words, d, dtype=hidden.dtype, device=hidden.device).index_add_(0, index[keep], flat[keep])
    counts = torch.zeros(words, dtype=hidden.dtype, device=hidden.device).index_add_(
        0, index[keep], torch.ones_like(index[keep], dtype=hidden.dtype))
    return sums / counts.clamp_min(1).unsqueeze(-1)


# --- the training loop ----------------------------------------------------------------------------------------


@dataclass
class State(LoopState):
    unseen: int = 0  # unseen target tokens over all steps (types per batch, summed)
    unseen_without_members: int = 0  # of those, tokens whose Sm(w) is empty (their row is zero)
    log: list[dict] = field(default_factory=list)


class GeneratorTrainer(TrainLoop):
    """The one training loop's generator family: only G trains (Adam, no clipping, no schedule, no dev set)."""

    State = State
    unit = "step"

    def __init__(self, model: MarianMTModel, src: Vocab, tgt: Vocab, data: Parallel, gen: Generator,
                 kd_lambda: float, cfg: GeneratorTraining, reseg: Resegment, ckpt_dir: Path, fingerprint: dict,
                 name: str = "generator", sides: str = "decoder"):
        if gen.kind == "avg":
            raise InputError("the avg generator has nothing to train")
        self.model, self.data, self.gen, self.kd_lambda, self.sides = model, data, gen, kd_lambda, sides
        self.cfg, self.reseg = cfg, reseg
        device = next(model.parameters()).device
        use_fast_attention(model, device)
        model.eval()  # no dropout
        for p in model.parameters():
            p.requires_grad_(False)
        self.gen.to(device)
        self.src, self.tgt = Side.of(src, cfg.max_members), Side.of(tgt, cfg.max_members)
        super().__init__(gen, torch.optim.Adam(gen.parameters(), lr=cfg.lr), None,
                         Cadence(cfg.steps, cfg.log_every, cfg.checkpoint_every), ckpt_dir, fingerprint, name, device)

    # -- one step ---------------------------------------------------------------------------------------------
    def _rows(self, side: Side, tokens: list[str], name: str):
        emb = (self.model.model.decoder if name == "decoder" else self.model.model.encoder).embed_tokens.weight
        ids, rel, mask = (t.to(self.device) for t in side.members(tokens))
        if name == "encoder":
            zero = torch.zeros(emb.shape[0], device=self.device)
            return generated_rows(self.gen, emb, None, zero, ids, rel, mask)[0], mask
        rows, out_rows, bias_rows = generated_rows(self.gen, emb, _output_matrix(self.model),
                                                   self.model.final_logits_bias[0], ids, rel, mask)
        return (rows, out_rows, bias_rows), mask

    def losses(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(L, Lp, Ld) of one batch."""
        dev = self.device
        b = {f.name: getattr(batch, f.name).to(dev) for f in fields(batch)
             if isinstance(getattr(batch, f.name), torch.Tensor)}
        enc_rows = None
        if self.sides == "both" and batch.unseen["encoder"]:
            enc_rows, _ = self._rows(self.src, batch.unseen["encoder"], "encoder")
        dec = (None, None, None)
        if batch.unseen["decoder"]:
            dec, mask = self._rows(self.tgt, batch.unseen["decoder"], "decoder")
            self._without = int((~mask.any(1)).sum())
        with torch.no_grad():
            _, h_old, enc_old = forward_extended(self.model, b["input_ids"], b["attention_mask"],
                                                 b["decoder_input_ids"])
        logits, h_new, _ = forward_extended(
            self.model, b["new_input_ids"], b["new_attention_mask"], b["new_decoder_input_ids"], dec_rows=dec[0],
            out_rows=dec[1], bias_rows=dec[2], enc_rows=enc_rows,
            encoder_hidden=enc_old if self.sides == "decoder" else None)
        lp = F.cross_entropy(logits.reshape(-1, logits.size(-1)), b["new_labels"].reshape(-1), ignore_index=-100,
                             label_smoothing=self.cfg.label_smoothing)
        diff = word_means(h_old, b["word"], batch.words) - word_means(h_new, b["new_word"], batch.words)
        ld = diff.norm(dim=-1).mean() if batch.words else torch.zeros((), device=dev)
        return lp + self.kd_lambda * ld, lp, ld

    def batch(self, idx: np.ndarray, step: int) -> Batch:
        rng = np.random.default_rng([self.cfg.seed, step])  # the re-segmentation of step `step`, whenever it runs
        return make_batch(self.data, idx, self.src, self.tgt, self.reseg, self.sides, rng,
                          self.model.config.max_position_embeddings)

    # -- the loop's hooks ---------------------------------------------------------------------------------------
    def plan(self, epoch: int) -> list[np.ndarray]:
        return make_batches(self.data, self.cfg.batch_tokens, self.cfg.seed, epoch)

    def collate(self, item: np.ndarray, step: int) -> tuple[Batch, int]:
        batch = self.batch(item, step)
        self.state.unseen += len(batch.unseen["decoder"])
        return batch, batch.target_tokens

    def loss(self, batch: Batch) -> Loss:
        self._without = 0
        loss, lp, ld = self.losses(batch)
        self.state.unseen_without_members += self._without
        return Loss(loss, {"lp": lp, "ld": ld})

    def logged(self, row: dict) -> None:
        self.state.log.append({k: row[k] for k in ("step", "loss", "lp", "ld")})

    def postfix(self, row: dict) -> dict:
        return {k: row[k] for k in ("loss", "lp", "ld")} | {"tok_s": row["target_tokens_per_s"]}


def summary(state: State, trainer: GeneratorTrainer) -> dict:
    last = state.log[-1] if state.log else {}
    return {
        "steps": state.step, "loss": last.get("loss"), "lp": last.get("lp"), "ld": last.get("ld"),
        "kind": trainer.gen.kind, "kd_lambda": trainer.kd_lambda, "sides": trainer.sides,
        "target_tokens_seen": state.target_tokens, "train_seconds": round(state.seconds, 1),
        "target_tokens_per_s": round(state.target_tokens / max(state.seconds, 1e-9), 1),
        "unseen_per_step": round(state.unseen / max(state.step, 1), 1),
        "unseen_without_members_share": round(state.unseen_without_members / max(state.unseen, 1), 4),
        "device": str(trainer.device), "threads": torch.get_num_threads(), "precision": "fp32",
        "generator_norm": round(math.sqrt(sum(float(p.detach().pow(2).sum()) for p in trainer.gen.parameters())), 4),
    }


def write_curves(states: dict[str, State], path: Path) -> None:
    """The learning curves of all variants as one CSV (variant, step, loss, lp, ld) for `dvc plots show`;
    a header only when no variant was trained."""
    import pandas as pd

    frames = [pd.DataFrame(state.log, columns=["step", "loss", "lp", "ld"]).assign(variant=name)
              for name, state in states.items()]
    columns = ["variant", "step", "loss", "lp", "ld"]
    table = pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    table.to_csv(tmp, index=False)
    tmp.replace(path)
