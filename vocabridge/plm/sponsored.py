"""The PLM-sponsored translation model of Duan & Zhao (2023): a source BERT as encoder, a target BERT as decoder
(its layers run causally: the decoder encodes the words predicted so far), and a randomly initialised
**coordinator** that takes over every cross-attention (§2.2).

Coordinator layer j (Eq. 2): r_all = concat(r^S, r^T, r_{j-1}); h_j = Attention(r_{j-1}, r_all, r_all) + r_{j-1};
r_j = LN(FFN(h_j) + h_j), with r_0 = r^T plus position embeddings. The attention mask (Eq. 3) is
M = concat(M_S, M_T, M_h), n x (m + 2n): nothing masked over the source, later positions masked over the two
target parts, so a target position never sees a later one.

Half-layer knowledge distillation (§2.3): the encoder's hidden state after its first M/2 layers is pulled towards
a frozen BERT's representation (mean squared error) and merged into the final representation by a gate and an FFN
(Eq. 6); the teacher is used in training only. The training loss is Eq. 9:
L = alpha L_NMT + (1 - alpha) L_kd + L_MLM + L_T, where L_MLM is the source BERT's masked-LM loss on a masked copy
of the source (the translation loss sees the original) and L_T (Eq. 8) the causal target BERT's next-word loss
without the source, on 10% of the words. Every term but L_NMT can be switched off (the paper's Table 3).
`weighting: released` weighs the terms as the authors' fairseq code does (`sponsored_loss`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from vocabridge.config import AbnetAdapters, Sponsored
from vocabridge.errors import InputError
from vocabridge.plm.bert import additive_mask
from vocabridge.plm.cross_entropy import cross_entropy

if TYPE_CHECKING:
    from transformers.models.bert.modeling_bert import BertForMaskedLM


def coordinator_mask(m: int, n: int) -> torch.Tensor:
    """Eq. 3 as a boolean [n, m + 2n] mask, True where attention is blocked: M_S (n x m) all open; M_T and M_h
    (n x n) block every later position (above the diagonal)."""
    later = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return torch.cat([torch.zeros(n, m, dtype=torch.bool), later, later], dim=1)


class CoordinatorLayer(nn.Module):
    """One layer of Eq. 2: attention from r_{j-1} over [r^S; r^T; r_{j-1}], residual; FFN, residual, LN."""

    def __init__(self, d: int, heads: int, ffn: int, dropout: float):
        super().__init__()
        self.attention = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(d, ffn), nn.ReLU(), nn.Linear(ffn, d))
        self.norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, previous: torch.Tensor, source: torch.Tensor, target: torch.Tensor, blocked: torch.Tensor | None,
                padding: torch.Tensor, last: int | None = None) -> torch.Tensor:
        """r_j at every position of `previous`, or at its `last` positions only (incremental decoding: those see
        everything given, so `blocked` is None)."""
        query = previous if last is None else previous[:, -last:]
        everything = torch.cat([source, target, previous], dim=1)
        attended, _ = self.attention(query, everything, everything, attn_mask=blocked, key_padding_mask=padding,
                                     need_weights=False)
        h = query + self.dropout(attended)
        return self.norm(h + self.dropout(self.ffn(h)))

    def keys_values(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention's key and value projections of `rows` ([B, L, d]), each [B, heads, L, d / heads]."""
        mha, d = self.attention, self.attention.embed_dim
        kv = F.linear(rows, mha.in_proj_weight[d:], mha.in_proj_bias[d:])
        k, v = kv.unflatten(-1, (2, mha.num_heads, d // mha.num_heads)).permute(2, 0, 3, 1, 4)
        return k, v

    def step(self, row: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, blocked: torch.Tensor,
             ) -> torch.Tensor:
        """`forward` at one new position ([B, 1, d]), from the projected keys and values of everything
        it sees (`keys_values`; `blocked`: [B, 1, 1, L] additive mask): each row is projected once, where
        `forward` projects the whole [r^S; r^T; r_{j-1}] again at every step."""
        mha, d = self.attention, self.attention.embed_dim
        q = F.linear(row, mha.in_proj_weight[:d], mha.in_proj_bias[:d]).unflatten(-1, (mha.num_heads, -1))
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=blocked,
                                                  dropout_p=mha.dropout if self.training else 0.0)
        h = row + self.dropout(mha.out_proj(attended.transpose(1, 2).flatten(2)))
        return self.norm(h + self.dropout(self.ffn(h)))


class Coordinator(nn.Module):
    """A stack of coordinator layers over the source and target representations (both [B, *, d])."""

    def __init__(self, d: int, layers: int, heads: int, ffn: int, dropout: float, max_positions: int):
        super().__init__()
        self.positions = nn.Embedding(max_positions, d)
        self.layers = nn.ModuleList(CoordinatorLayer(d, heads, ffn, dropout) for _ in range(layers))

    def forward(self, source: torch.Tensor, source_padding: torch.Tensor, target: torch.Tensor,
                target_padding: torch.Tensor) -> torch.Tensor:
        m, n = source.shape[1], target.shape[1]
        blocked = coordinator_mask(m, n).to(source.device)
        padding = torch.cat([source_padding, target_padding, target_padding], dim=1)
        r = target + self.positions(torch.arange(n, device=target.device))[None]
        for layer in self.layers:
            r = layer(r, source, target, blocked, padding)
        return r


class HalfLayerFusion(nn.Module):
    """Eq. 6: g = sigmoid([h_M; h_{M/2}] W), h = g h_M + (1 - g) h_{M/2}, r = LN(FFN(h) + h)."""

    def __init__(self, d: int, ffn: int, dropout: float):
        super().__init__()
        self.gate = nn.Linear(2 * d, d, bias=False)
        self.ffn = nn.Sequential(nn.Linear(d, ffn), nn.ReLU(), nn.Linear(ffn, d))
        self.norm = nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, last: torch.Tensor, half: torch.Tensor) -> torch.Tensor:
        g = torch.sigmoid(self.gate(torch.cat([last, half], dim=-1)))
        h = g * last + (1 - g) * half
        return self.norm(h + self.dropout(self.ffn(h)))


def bert_layers(bert: BertForMaskedLM, ids: torch.Tensor, keep: torch.Tensor, causal: bool = False,
                ) -> list[torch.Tensor]:
    """The hidden state after each of BERT's layers (its embeddings first); `causal`: each position sees itself
    and earlier ones only."""
    h = bert.bert.embeddings(input_ids=ids)
    mask = additive_mask(keep, h.dtype)
    if causal:
        later = torch.triu(torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool, device=ids.device), 1)
        mask = mask + later[None, None].to(h.dtype) * torch.finfo(h.dtype).min
    states = [h]
    for layer in bert.bert.encoder.layer:
        h = layer(h, attention_mask=mask)
        states.append(h)
    return states


class PlmSponsored(nn.Module):
    """Encoder: the source BERT and the half-layer fusion; decoder: the target BERT run causally; the coordinator;
    output: the target BERT's MLM head (its vocabulary). Everything trains; `teacher`, a frozen copy of the source
    BERT, gives the distillation target."""

    def __init__(self, source_bert: BertForMaskedLM, target_bert: BertForMaskedLM, teacher: BertForMaskedLM | None,
                 settings: Sponsored, size: AbnetAdapters | None = None):
        super().__init__()
        self.source_bert, self.target_bert, self.teacher = source_bert, target_bert, teacher
        self.settings, self.size = settings, size or AbnetAdapters()
        d = source_bert.config.hidden_size
        if target_bert.config.hidden_size != d:
            raise InputError(f"the PLM-sponsored model needs BERTs of one width (source {d}, target "
                             f"{target_bert.config.hidden_size})")
        self.fusion = HalfLayerFusion(d, settings.coordinator_ffn, settings.dropout) if settings.half_layer else None
        self.coordinator = Coordinator(d, settings.coordinator_layers, target_bert.config.num_attention_heads,
                                       settings.coordinator_ffn, settings.dropout,
                                       target_bert.config.max_position_embeddings)
        if teacher is not None:
            teacher.requires_grad_(False)

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """What a model directory holds beside its BERT directories: the coordinator and the fusion."""
        return {k: v for k, v in self.state_dict().items()
                if not k.startswith(("source_bert.", "target_bert.", "teacher."))}

    def encode(self, source: torch.Tensor, source_keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """r^S and the state that distillation pulls: the one after the first half of the layers, or with
        `half_layer` false the encoder's output (full-layer distillation, no gate)."""
        states = bert_layers(self.source_bert, source, source_keep)
        if self.fusion is None:
            return states[-1], states[-1]
        half = states[(len(states) - 1) // 2]
        return self.fusion(states[-1], half), half

    def target_states(self, target_in: torch.Tensor, target_keep: torch.Tensor) -> torch.Tensor:
        """r^T: the target BERT run causally over `target_in` ([CLS] y...)."""
        return bert_layers(self.target_bert, target_in, target_keep, causal=True)[-1]

    def coordinate(self, r_s: torch.Tensor, source_keep: torch.Tensor, r_t: torch.Tensor,
                   target_keep: torch.Tensor) -> torch.Tensor:
        """Logits over the target vocabulary for each target position."""
        return self.target_bert.cls(self.coordinator(r_s, source_keep == 0, r_t, target_keep == 0))

    def forward(self, source: torch.Tensor, source_keep: torch.Tensor, target_in: torch.Tensor,
                target_keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Logits for each position of `target_in`, the distilled state and r^T."""
        r_s, distilled = self.encode(source, source_keep)
        r_t = self.target_states(target_in, target_keep)
        return self.coordinate(r_s, source_keep, r_t, target_keep), distilled, r_t


def translation_loss(logits: torch.Tensor, target: torch.Tensor, target_keep: torch.Tensor,
                     label_smoothing: float = 0.0) -> torch.Tensor:
    """Eq. 7: the cross-entropy of y [SEP] given [CLS] y, a target piece."""
    labels = target[:, 1:].masked_fill(target_keep[:, 1:] == 0, -100)
    return cross_entropy(logits.flatten(0, 1), labels.flatten(), label_smoothing)


def auxiliary_labels(target: torch.Tensor, target_keep: torch.Tensor, fraction: float,
                     generator: torch.Generator) -> torch.Tensor:
    """L_T's labels: the next word at `fraction` of the target positions, -100 elsewhere."""
    labels = target[:, 1:].masked_fill(target_keep[:, 1:] == 0, -100)
    chosen = torch.rand(labels.shape, generator=generator) < fraction
    return labels.masked_fill(~chosen, -100)


def _predicted(head: nn.Module, states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of `head` at the labelled positions only (0 when none is labelled)."""
    chosen = labels != -100
    if not chosen.any():
        return states.sum() * 0.0
    return cross_entropy(head(states[chosen]), labels[chosen])


def sponsored_loss(model: PlmSponsored, batch: dict[str, torch.Tensor], label_smoothing: float = 0.1,
                   ) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. 9 on a batch of `source`, `source_keep`, `target`, `target_keep` and, for the terms that are on,
    `mlm_source` + `mlm_labels` (L_MLM: the masked copy of the source and its masked pieces) and `lm_labels` (L_T,
    from auxiliary_labels). L_kd: mean squared error between the distilled state and the frozen teacher's output;
    without a teacher, L_NMT counts in full. The parts are returned unweighted.

    `weighting: released`: the authors' code adds the masked-LM means to a translation loss summed over the target
    pieces and takes a squared error summed over hidden units and source positions, then divides the whole by the
    target pieces; per target piece, then, L_MLM and L_T weigh alpha / target pieces (1 / target pieces without
    a teacher) and L_kd hidden x source pieces / target pieces times its mean (pads left out here)."""
    source, source_keep, target, target_keep = (batch[k] for k in ("source", "source_keep", "target", "target_keep"))
    logits, distilled, r_t = model(source, source_keep, target[:, :-1], target_keep[:, :-1])
    nmt = translation_loss(logits, target, target_keep, label_smoothing)
    parts = {"nmt_loss": nmt}
    loss = nmt
    released = model.settings.weighting == "released"
    target_pieces = target_keep[:, 1:].sum() if released else None
    auxiliary = 1.0
    if model.teacher is not None and model.settings.distill:
        with torch.no_grad():
            taught = bert_layers(model.teacher, source, source_keep)[-1]
        keep = source_keep.bool()
        parts["kd_loss"] = F.mse_loss(distilled[keep].float(), taught[keep].float())
        kd = parts["kd_loss"] * (distilled.shape[-1] * keep.sum() / target_pieces if released else 1.0)
        loss = model.settings.alpha * nmt + (1 - model.settings.alpha) * kd
        auxiliary = model.settings.alpha
    auxiliary = auxiliary / target_pieces if released else 1.0
    if "mlm_labels" in batch:
        states = bert_layers(model.source_bert, batch["mlm_source"], source_keep)[-1]
        parts["mlm_loss"] = _predicted(model.source_bert.cls, states, batch["mlm_labels"])
        loss = loss + auxiliary * parts["mlm_loss"]
    if "lm_labels" in batch:
        parts["lm_loss"] = _predicted(model.target_bert.cls, r_t, batch["lm_labels"])
        loss = loss + auxiliary * parts["lm_loss"]
    return loss, {k: v.item() for k, v in parts.items()}


class Rows:
    """Tensors [rows, heads, positions, d] whose rows move together, without allocating: `gather` writes the kept
    rows' positions start:end into a second set (made at the first gather) that then takes the first's place.
    Allocating a fresh tensor at every reordering (page faults on its first write) cost 5-9x the copy itself."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.live, self.spare = tensors, None
        self.synced = False  # whether the spare's positions before a gather's `start` are the live ones

    def gather(self, rows: torch.Tensor, start: int, end: int) -> None:
        """Keep `rows` (any rows, any number of them: the second set is made again when it has too few);
        `start` > 0: positions before it stay with their row number (row i of the result had row i's there: beam
        search's reordering within a sentence), so only start:end move."""
        n = len(rows)
        if self.spare is None or len(self.spare[0]) < n:
            self.spare, self.synced = [t.new_empty(n, *t.shape[1:]) for t in self.live], False
        for live, spare in zip(self.live, self.spare, strict=True):
            if start and not self.synced:
                spare[:n, :, :start] = live[:, :, :start]
            torch.index_select(live[:, :, start:end], 0, rows, out=spare[:n, :, start:end])
        self.live, self.spare = [spare[:n] for spare in self.spare], self.live
        self.synced = start > 0

    def grow(self, positions: int) -> None:
        """Room for `positions` more."""
        self.live, self.spare, self.synced = [F.pad(t, (0, 0, 0, positions)) for t in self.live], None, False


@functools.cache
def _rows_layer() -> type:
    """A transformers cache layer that keeps one BERT layer's keys and values in `Rows` with room for `steps`
    positions: a step writes its position in place, where DynamicLayer concatenates the whole again, and a
    reordering gathers without allocating. Made once, on first use (transformers' cache module loads with it)."""
    from transformers.cache_utils import DynamicLayer

    class RowsLayer(DynamicLayer):
        def __init__(self, steps: int):
            super().__init__()
            self.steps, self.rows, self.length = steps, None, 0

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            new = key_states.shape[-2]
            if self.rows is None:
                self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True
                self.rows = Rows([x.new_empty(*x.shape[:2], max(self.steps, new), x.shape[-1])
                                  for x in (key_states, value_states)])
            room = self.rows.live[0].shape[2]
            if self.length + new > room:
                self.rows.grow(max(room, new))
            for buffer, states in zip(self.rows.live, (key_states, value_states), strict=True):
                buffer[:, :, self.length : self.length + new] = states
            self.length += new
            return self._views()

        def _views(self) -> tuple[torch.Tensor, torch.Tensor]:
            self.keys, self.values = (buffer[:, :, : self.length] for buffer in self.rows.live)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            if self.rows is not None:
                self.rows.gather(beam_idx, 0, self.length)
                self._views()

    return RowsLayer


class Prefixes:
    """A batch of decoder prefixes grown one piece a step, with what each step needs of the earlier positions: the
    target BERT's keys and values (a transformers Cache) and each coordinator layer's keys and values of the
    source, r^T and its inputs so far. No position sees a later one, so earlier states never change and a step
    runs and projects the new position only.

    Both keep their keys and values in buffers (`Rows`; the coordinator's: the source's first) with room for `steps`
    pieces: a step writes its new positions in place, and a reordering gathers into a second set of buffers made
    once; beam search's reordering within a sentence (`select(..., same_sources=True)`) moves the target part
    only. Concatenating and gathering the whole of them at every step was most of a batch's decoding."""

    def __init__(self, model: PlmSponsored, r_s: torch.Tensor, source_keep: torch.Tensor, steps: int = 64):
        from transformers.cache_utils import Cache

        layer = _rows_layer()
        self.model, self.length, self.start = model, 0, r_s.shape[1]
        self.cache = Cache(layers=[layer(steps) for _ in model.target_bert.bert.encoder.layer])
        buffers = []  # keys and values of layer j at 2j and 2j + 1
        for coordinator_layer in model.coordinator.layers:
            for projected in coordinator_layer.keys_values(r_s):
                buffer = projected.new_empty(*projected.shape[:2], self.start + 2 * steps, projected.shape[-1])
                buffer[:, :, : self.start] = projected
                buffers.append(buffer)
        self.rows = Rows(buffers)
        # [B, 1, 1, capacity]: the source's padding blocked, every target position seen once written
        self.blocked = F.pad(additive_mask(source_keep, r_s.dtype), (0, 2 * steps))

    @property
    def buffers(self) -> list[torch.Tensor]:
        return self.rows.live

    @property
    def end(self) -> int:
        """How many positions of each coordinator buffer are written."""
        return self.start + 2 * self.length

    def target_step(self, pieces: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """r^T at the new position ([B, 1, d]) from the target BERT's cache, and r_0 there (with its position)."""
        model, position = self.model, self.length
        h = model.target_bert.bert.embeddings(input_ids=pieces[:, None], past_key_values_length=position)
        for layer in model.target_bert.bert.encoder.layer:
            h = layer(h, attention_mask=None, past_key_values=self.cache)
        self.length += 1
        return h, h + model.coordinator.positions.weight[position][None, None]

    def extend(self, pieces: torch.Tensor) -> torch.Tensor:
        """Append one piece to each prefix ([B]); the logits of the piece after it ([B, V])."""
        h, r = self.target_step(pieces)
        end = self.end  # the two new rows of [r^T; r_{j-1}] sit at end - 2 and end - 1
        if end > self.buffers[0].shape[2]:  # out of room: twice as much
            grow = self.buffers[0].shape[2] - self.start
            self.rows.grow(grow)
            self.blocked = F.pad(self.blocked, (0, grow))
        blocked = self.blocked[..., :end]
        for j, layer in enumerate(self.model.coordinator.layers):
            keys, values = self.buffers[2 * j], self.buffers[2 * j + 1]
            keys[:, :, end - 2 : end], values[:, :, end - 2 : end] = layer.keys_values(torch.cat([h, r], dim=1))
            r = layer.step(r, keys[:, :, :end], values[:, :, :end], blocked)
        return self.model.target_bert.cls(r)[:, -1].float()

    def select(self, rows: torch.Tensor, same_sources: bool = False) -> None:
        """Keep the prefixes `rows` (any rows, any number of them); `same_sources`: row i of the result has the
        source row i had (beam search's survivors among one sentence's beam), so only the target parts move."""
        self.cache.reorder_cache(rows)
        self.rows.gather(rows, self.start if same_sources else 0, self.end)
        if not same_sources:
            self.blocked = self.blocked[rows]


def restrict(logits: torch.Tensor, special: dict[str, int], last: bool) -> torch.Tensor:
    """[CLS], [PAD] and [MASK] are never chosen; at the `last` position only [SEP] may follow."""
    logits[:, [special["cls"], special["pad"], special.get("mask", special["pad"])]] = -torch.inf
    if last:
        logits[:, [i for i in range(logits.shape[1]) if i != special["sep"]]] = -torch.inf
    return logits


@torch.inference_mode()
def greedy_search(model: PlmSponsored, source: torch.Tensor, source_keep: torch.Tensor, special: dict[str, int],
                  max_len: int) -> list[list[int]]:
    """Left-to-right greedy decoding from [CLS] until [SEP] (at most `max_len` pieces); pieces without
    [CLS]/[SEP]. A sentence leaves the batch once it has its [SEP]: the rest decode without it."""
    prefixes = Prefixes(model, model.encode(source, source_keep)[0], source_keep, max_len + 1)
    pieces: list[list[int]] = [[] for _ in range(len(source))]
    live = list(range(len(source)))  # the sentences still decoding, in the prefixes' row order
    last = torch.full((len(source),), special["cls"], dtype=torch.long, device=source.device)
    for step in range(max_len + 1):
        chosen = restrict(prefixes.extend(last), special, step == max_len).argmax(-1)
        ended = chosen == special["sep"]
        for sentence, piece, end in zip(live, chosen.tolist(), ended.tolist(), strict=True):
            if not end:
                pieces[sentence].append(piece)
        if ended.all():
            break
        if ended.any():
            going = (~ended).nonzero()[:, 0]
            prefixes.select(going)
            live = [live[i] for i in going.tolist()]
            chosen = chosen[going]
        last = chosen
    return pieces


def survivors(scores: list[float], index: list[int], vocab: int, beam: int, first_row: int, seqs: torch.Tensor,
              special: dict[str, int], length_penalty: float, finished: list[tuple[float, list[int]]],
              ) -> tuple[list[int], list[int], list[float]]:
    """One sentence's step of beam search from its best continuations (`scores`, best first; `index` into the
    beam x vocab continuations of its rows, from `first_row` of `seqs` on): the rows, next pieces and scores of at
    most `beam` live hypotheses. A continuation that ends ([SEP]) among the top `beam` joins `finished` (its `beam`
    best, best first), as transformers counts it."""
    rows, pieces, kept = [], [], []
    for rank, (score, i) in enumerate(zip(scores, index, strict=True)):
        if score == -torch.inf or len(rows) == beam:
            break
        parent, token = divmod(i, vocab)
        if token != special["sep"]:
            rows.append(first_row + parent)
            pieces.append(token)
            kept.append(score)
        elif rank < beam:
            ended = seqs[first_row + parent, 1:].tolist()
            finished[:] = sorted([*finished, (score / (len(ended) + 1) ** length_penalty, ended)],
                                 key=lambda hyp: -hyp[0])[:beam]
    return rows, pieces, kept


@torch.inference_mode()
def beam_search(model: PlmSponsored, source: torch.Tensor, source_keep: torch.Tensor, special: dict[str, int],
                beam: int, length_penalty: float = 1.0, max_len: int = 126) -> list[list[int]]:
    """Beam search from [CLS] (beam 1: greedy_search), as transformers runs it by default: a hypothesis ends with
    [SEP] and scores its summed log-probability over (pieces + 1) ** length_penalty; a sentence keeps its `beam`
    best finished hypotheses and stops once its best live one, scored at the current length, cannot beat the
    worst of them, or at `max_len` pieces (never more than the decoder has positions for). A sentence that stops
    leaves the batch: the others decode without its beam."""
    max_len = min(max_len, model.target_bert.config.max_position_embeddings - 2)
    if beam == 1:
        return greedy_search(model, source, source_keep, special, max_len)
    device = source.device
    r_s, _ = model.encode(source, source_keep)
    prefixes = Prefixes(model, r_s.repeat_interleave(beam, 0), source_keep.repeat_interleave(beam, 0), max_len + 1)
    live = list(range(len(source)))  # the sentences still searching; sentence live[b] owns rows b * beam ...
    seqs = torch.full((len(live) * beam, 1), special["cls"], dtype=torch.long, device=device)
    scores = torch.full((len(live), beam), -torch.inf, device=device)
    scores[:, 0] = 0.0  # one live hypothesis to start from
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in live]
    for step in range(max_len + 1):
        logits = restrict(prefixes.extend(seqs[:, -1]), special, step == max_len)
        vocab = logits.shape[1]
        candidates = (scores.reshape(-1, 1) + logits.log_softmax(-1)).reshape(len(live), beam * vocab)
        top, index = (t.cpu() for t in candidates.topk(2 * beam, dim=1))  # read in Python, entry by entry
        rows, tokens, kept, going = [], [], torch.full((len(live), beam), -torch.inf), []
        for b, sentence in enumerate(live):
            chosen, pieces, alive = survivors(top[b].tolist(), index[b].tolist(), vocab, beam, b * beam, seqs,
                                              special, length_penalty, finished[sentence])
            best_alive = (alive[0] if alive else -torch.inf) / (step + 1) ** length_penalty
            if len(finished[sentence]) == beam and best_alive <= finished[sentence][-1][0]:
                continue  # done: its beam leaves the batch
            going.append(b)
            kept[b, : len(alive)] = torch.tensor(alive)
            rows += chosen + [b * beam] * (beam - len(chosen))  # dead slots keep a placeholder that never wins
            tokens += pieces + [special["pad"]] * (beam - len(chosen))
        if not going or step == max_len:
            break
        selected = torch.tensor(rows, device=device)
        seqs = torch.cat([seqs[selected], torch.tensor(tokens, device=device)[:, None]], dim=1)
        prefixes.select(selected, same_sources=len(going) == len(live))
        live, scores = [live[b] for b in going], kept[going].to(device)
    return [f[0][1] if f else [] for f in finished]
