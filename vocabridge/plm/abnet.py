"""AB-Net (Guo et al. 2020): two frozen BERTs joined by adapters, trained as a conditional masked LM and decoded
by Mask-Predict (Ghazvininejad et al. 2019).

Encoder: the source BERT's layers, each followed by an encoder adapter (Eq. 4: LN, W1 without bias, ReLU, W2,
residual), a learned [LENGTH] vector in front of the source whose output predicts the target length. Decoder: the
target BERT's (bidirectional) layers, each followed by a decoder adapter (Appendix A: multi-head cross-attention
over the encoder output, residual, LN; FFN, residual, LN); its MLM head gives the output distribution. Only the
adapters, the [LENGTH] vector and the length classifier train (`freeze_bert`). The same module with randomly
initialised BERTs and nothing frozen is the Mask-Predict baseline without BERT: per layer self-attention and FFN,
then cross-attention and FFN, trained end to end.

AB-Net-Enc (ABNetEnc), the paper's autoregressive variant: the same adapted source BERT (no [LENGTH] vector)
and a Transformer decoder trained from scratch on the target BERT's vocabulary (a `BertLMHeadModel` with
cross-attention, the target BERT's sizes), decoded by beam search through transformers' `generate`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from vocabridge.config import AbnetAdapters
from vocabridge.errors import InputError
from vocabridge.fileio import atomic_dir, write_json
from vocabridge.plm.bert import additive_mask
from vocabridge.plm.cross_entropy import cross_entropy
from vocabridge.plm.sponsored import PlmSponsored

if TYPE_CHECKING:  # stages import this module to tell an AB-Net row apart; transformers loads with the model
    from transformers.models.bert.configuration_bert import BertConfig
    from transformers.models.bert.modeling_bert import BertForMaskedLM, BertLMHeadModel


class EncoderAdapter(nn.Module):
    """Eq. 4: H + W2 ReLU(W1 LN(H))."""

    def __init__(self, d: int, inner: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.w1 = nn.Linear(d, inner, bias=False)
        self.w2 = nn.Linear(inner, d, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.w2(F.relu(self.w1(self.norm(h))))


class DecoderAdapter(nn.Module):
    """Appendix A: Z = LN(ATTN(H, E, E) + H), out = LN(FFN(Z) + Z)."""

    def __init__(self, d: int, d_source: int, heads: int, ffn: int, dropout: float):
        super().__init__()
        self.attention = nn.MultiheadAttention(d, heads, dropout=dropout, kdim=d_source, vdim=d_source,
                                               batch_first=True)
        self.norm1 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, ffn), nn.ReLU(), nn.Linear(ffn, d))
        self.norm2 = nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor, encoded: torch.Tensor, source_padding: torch.Tensor) -> torch.Tensor:
        attended, _ = self.attention(h, encoded, encoded, key_padding_mask=source_padding, need_weights=False)
        z = self.norm1(h + self.dropout(attended))
        return self.norm2(z + self.dropout(self.ffn(z)))


def adapted_encoder(bert: BertForMaskedLM, adapters: nn.ModuleList, h: torch.Tensor,
                    keep: torch.Tensor) -> torch.Tensor:
    """The source BERT's layers on embedded input `h`, each followed by its encoder adapter."""
    mask = additive_mask(keep, h.dtype)
    for layer, adapter in zip(bert.bert.encoder.layer, adapters, strict=True):
        h = adapter(layer(h, attention_mask=mask))
    return h


class ABNet(nn.Module):
    def __init__(self, source_bert: BertForMaskedLM, target_bert: BertForMaskedLM, size: AbnetAdapters,
                 freeze_bert: bool = True):
        super().__init__()
        longest = target_bert.config.max_position_embeddings - 2
        if size.max_target_len > longest:
            raise InputError(f"abnet max_target_len {size.max_target_len}: the target BERT holds {longest} pieces "
                             "between [CLS] and [SEP]")
        self.source_bert, self.target_bert, self.size = source_bert, target_bert, size
        d_src, d_tgt = source_bert.config.hidden_size, target_bert.config.hidden_size
        self.encoder_adapters = nn.ModuleList(
            EncoderAdapter(d_src, size.encoder_inner) for _ in range(source_bert.config.num_hidden_layers))
        self.decoder_adapters = nn.ModuleList(
            DecoderAdapter(d_tgt, d_src, target_bert.config.num_attention_heads, size.decoder_ffn, size.dropout)
            for _ in range(target_bert.config.num_hidden_layers))
        self.length_vector = nn.Parameter(torch.randn(d_src) * 0.02)  # the [LENGTH] token's input
        self.length_head = nn.Linear(d_src, size.max_target_len + 1)
        self.freeze_bert = freeze_bert
        for part in (source_bert, target_bert):
            part.requires_grad_(not freeze_bert)

    def encode(self, source: torch.Tensor, source_keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                                            torch.Tensor]:
        """Encoder states [B, 1+S, d] ([LENGTH] first), their padding mask (True = pad), length logits."""
        embedded = self.source_bert.bert.embeddings(input_ids=source)
        h = torch.cat([self.length_vector.expand(len(source), 1, -1).to(embedded.dtype), embedded], dim=1)
        keep = torch.cat([torch.ones_like(source_keep[:, :1]), source_keep], dim=1)
        h = adapted_encoder(self.source_bert, self.encoder_adapters, h, keep)
        return h, keep == 0, self.length_head(h[:, 0])

    def decode(self, target: torch.Tensor, target_keep: torch.Tensor, encoded: torch.Tensor,
               source_padding: torch.Tensor) -> torch.Tensor:
        """Decoder states [B, T, d] of a (partly masked) target."""
        h = self.target_bert.bert.embeddings(input_ids=target)
        mask = additive_mask(target_keep, h.dtype)
        for layer, adapter in zip(self.target_bert.bert.encoder.layer, self.decoder_adapters, strict=True):
            h = adapter(layer(h, attention_mask=mask), encoded, source_padding)
        return h

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.target_bert.cls(states)

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """Everything but the BERTs (adapters, [LENGTH] vector, length classifier): what AB-Net trains, and what a
        model directory holds beside the two BERT directories."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith(("source_bert.", "target_bert."))}


def autoregressive_decoder_config(target: BertConfig) -> BertConfig:
    """AB-Net-Enc's decoder: the target BERT's sizes and vocabulary, causal, with cross-attention; [CLS] starts a
    sentence and [SEP] ends it."""
    from transformers.models.bert.configuration_bert import BertConfig

    config = BertConfig(**{k: v for k, v in target.to_dict().items() if k in BertConfig().to_dict()})
    config.is_decoder, config.add_cross_attention = True, True
    config.architectures = ["BertLMHeadModel"]
    return config


class ABNetEnc(nn.Module):
    """AB-Net-Enc: the source BERT with encoder adapters (frozen BERT unless `freeze_bert` is false) and an
    autoregressive decoder from scratch; everything but the source BERT trains."""

    def __init__(self, source_bert: BertForMaskedLM, decoder: BertLMHeadModel, size: AbnetAdapters,
                 freeze_bert: bool = True):
        super().__init__()
        self.source_bert, self.decoder, self.size = source_bert, decoder, size
        d_src, d_tgt = source_bert.config.hidden_size, decoder.config.hidden_size
        self.encoder_adapters = nn.ModuleList(
            EncoderAdapter(d_src, size.encoder_inner) for _ in range(source_bert.config.num_hidden_layers))
        self.bridge = nn.Identity() if d_src == d_tgt else nn.Linear(d_src, d_tgt)  # to the decoder's width
        self.freeze_bert = freeze_bert
        source_bert.requires_grad_(not freeze_bert)

    def encode(self, source: torch.Tensor, source_keep: torch.Tensor) -> torch.Tensor:
        h = adapted_encoder(self.source_bert, self.encoder_adapters,
                            self.source_bert.bert.embeddings(input_ids=source), source_keep)
        return self.bridge(h)

    def adapter_state(self) -> dict[str, torch.Tensor]:
        """Everything but the source BERT: what trains, and what a model directory holds beside source/."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("source_bert.")}


def seq2seq_loss(model: ABNetEnc, source: torch.Tensor, source_keep: torch.Tensor, target: torch.Tensor,
                 target_keep: torch.Tensor, label_smoothing: float = 0.1) -> torch.Tensor:
    """Teacher-forced cross-entropy of [CLS] y [SEP]: the decoder reads [CLS] y and predicts y [SEP]."""
    states = model.decoder.bert(input_ids=target[:, :-1], attention_mask=target_keep[:, :-1],
                                encoder_hidden_states=model.encode(source, source_keep),
                                encoder_attention_mask=source_keep).last_hidden_state
    labels = target[:, 1:].masked_fill(target_keep[:, 1:] == 0, -100)
    scored = labels != -100
    return cross_entropy(model.decoder.cls(states[scored]), labels[scored], label_smoothing)


@torch.inference_mode()
def beam_search(model: ABNetEnc, source: torch.Tensor, source_keep: torch.Tensor, special: dict[str, int],
                beam: int, length_penalty: float = 1.0, max_len: int = 126) -> list[list[int]]:
    """AB-Net-Enc's translations by transformers' beam search (beam 1: greedy), pieces without [CLS]/[SEP]; at
    most `max_len` pieces and never more than the decoder has positions for."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    max_len = min(max_len, model.decoder.config.max_position_embeddings - 2)
    out = model.decoder.generate(
        input_ids=torch.full((len(source), 1), special["cls"], dtype=torch.long, device=source.device),
        encoder_hidden_states=model.encode(source, source_keep), encoder_attention_mask=source_keep,
        past_key_values=EncoderDecoderCache(DynamicCache(), DynamicCache()), num_beams=beam, do_sample=False,
        length_penalty=length_penalty, max_new_tokens=max_len + 1, eos_token_id=special["sep"],
        pad_token_id=special["pad"], bos_token_id=special["cls"])
    pieces = []
    for row in out[:, 1:].tolist():
        end = row.index(special["sep"]) if special["sep"] in row else len(row)
        pieces.append([p for p in row[:end] if p != special["pad"]][:max_len])
    return pieces


def mask_targets(targets: list[list[int]], mask_id: int, pad_id: int,
                 generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The conditional masked-LM batch: each target ([CLS] y [SEP]) gets n ~ U{1..|y|} of its pieces masked.

    Returns the decoder input, its keep mask, labels (-100 where nothing is predicted) and the lengths |y|."""
    width = max(len(t) for t in targets)
    decoder_input = torch.full((len(targets), width), pad_id, dtype=torch.long)
    labels = torch.full_like(decoder_input, -100)
    for row, target in enumerate(targets):
        y = torch.tensor(target)
        inner = len(target) - 2
        n = int(torch.randint(1, inner + 1, (1,), generator=generator)) if inner > 0 else 0
        positions = torch.randperm(inner, generator=generator)[:n] + 1
        decoder_input[row, : len(target)] = y
        decoder_input[row, positions] = mask_id
        labels[row, positions] = y[positions]
    lengths = torch.tensor([len(t) - 2 for t in targets])
    return {"target": decoder_input, "target_keep": (decoder_input != pad_id).long(), "labels": labels,
            "lengths": lengths}


def cmlm_loss(model: ABNet, source: torch.Tensor, source_keep: torch.Tensor, batch: dict[str, torch.Tensor],
              label_smoothing: float = 0.1, length_weight: float = 1.0) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. 3 (cross-entropy of the masked pieces given the rest and the source) plus the length loss; the
    output layer runs on the masked positions only."""
    encoded, source_padding, length_logits = model.encode(source, source_keep)
    states = model.decode(batch["target"], batch["target_keep"], encoded, source_padding)
    masked = batch["labels"] != -100
    token_loss = cross_entropy(model.logits(states[masked]), batch["labels"][masked], label_smoothing)
    lengths = batch["lengths"].clamp(max=model.size.max_target_len)
    length_loss = F.cross_entropy(length_logits.float(), lengths)
    return token_loss + length_weight * length_loss, {"token_loss": token_loss.item(),
                                                       "length_loss": length_loss.item()}


def masks_per_iteration(length: int, iterations: int) -> list[int]:
    """Mask-Predict's linear decay: all pieces at iteration 0, then floor(|y| (T - t) / T)."""
    return [length] + [length * (iterations - t) // iterations for t in range(1, iterations)]


@torch.inference_mode()
def mask_predict(model, source: torch.Tensor, source_keep: torch.Tensor, special: dict[str, int],
                 length_candidates: int = 4, iterations: int = 10) -> tuple[list[list[int]], list[int]]:
    """Mask-Predict decoding (Appendix B): the B most likely lengths, each decoded from all-[MASK] in at most T
    iterations, re-masking the least confident pieces; a candidate stops when its output no longer changes. The
    candidate with the best mean log-probability wins. `special`: ids of cls, sep, mask, pad. An iteration runs the
    decoder over the candidates that still have masked pieces, and the output layer at those pieces only.

    Returns the pieces of each sentence (no [CLS]/[SEP]) and the iterations each one ran."""
    cls_id, sep_id, mask_id, pad_id = (special[k] for k in ("cls", "sep", "mask", "pad"))
    encoded, source_padding, length_logits = model.encode(source, source_keep)
    length_logits[:, 0] = -torch.inf  # at least one piece
    k = min(length_candidates, length_logits.shape[1] - 1)
    lengths = length_logits.topk(k, dim=-1).indices.reshape(-1)  # [B*k]
    encoded = encoded.repeat_interleave(k, dim=0)
    source_padding = source_padding.repeat_interleave(k, dim=0)
    rows, width, device = len(lengths), int(lengths.max()) + 2, source.device
    positions = torch.arange(width, device=device)[None, :]
    inner = (positions >= 1) & (positions <= lengths[:, None])
    tokens = torch.full((rows, width), pad_id, dtype=torch.long, device=device)
    tokens[:, 0] = cls_id
    tokens[inner] = mask_id
    tokens[torch.arange(rows, device=device), lengths + 1] = sep_id
    keep = (tokens != pad_id).long()
    scores = torch.zeros(rows, width, device=device)
    active = torch.ones(rows, dtype=torch.bool, device=device)
    ran = torch.zeros(rows, dtype=torch.long, device=device)
    banned = [cls_id, sep_id, mask_id, pad_id]
    for t in range(iterations):
        if t == 0:
            masked = inner.clone()
        else:
            n = lengths * (iterations - t) // iterations
            confidence = scores.masked_fill(~inner, torch.inf)
            order = confidence.argsort(dim=1)
            rank = torch.empty_like(order).scatter_(1, order,
                                                    torch.arange(width, device=device).expand(rows, -1).contiguous())
            masked = (rank < n[:, None]) & inner & active[:, None]
            active &= n > 0
            if not masked.any():
                break
        before = tokens.clone()
        tokens[masked] = mask_id
        run = masked.any(1).nonzero()[:, 0]  # the candidates with pieces to predict; only those run the decoder
        states = model.decode(tokens[run], keep[run], encoded[run], source_padding[run])
        logits = model.logits(states[masked[run]]).float()  # the masked positions only, in `masked`'s order
        logits[:, banned] = -torch.inf
        best, predicted = logits.log_softmax(-1).max(-1)
        tokens[masked], scores[masked] = predicted, best
        ran += active.long()
        if t > 0:
            active &= (tokens != before).any(dim=1)  # unchanged: this candidate is done
        if not active.any():
            break
    mean = (scores * inner).sum(1) / lengths.clamp(min=1)
    choice = mean.view(-1, k).argmax(1)
    out, steps = [], []
    for sentence, c in enumerate(choice.tolist()):
        row = sentence * k + c
        out.append(tokens[row, 1 : int(lengths[row]) + 1].tolist())
        steps.append(int(ran[row]))
    return out, steps


def untied(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One name per shared tensor (AB-Net-Enc's decoder ties its input and output embeddings): loading the kept
    name fills the tied one too."""
    seen, out = set(), {}
    for name, value in state.items():
        key = (value.data_ptr(), value.shape)
        if key not in seen:
            seen.add(key)
            out[name] = value.contiguous()
    return out


@dataclass(frozen=True)
class Kind:
    """A kind of model on two BERTs (the AB-Net family of vocabridge.families): one registry (`KINDS`), as
    `vocabridge.transfer.METHODS` is for methods."""

    kind: str  # abnet.json's kind, the estimator's and the abnet rows' name
    decoder: str  # abnets.NAME.decoder, which builds it (build_abnet)
    decoding: str  # how the evaluate stage names its decoding
    target_bert: bool  # it keeps a target BERT (AB-Net-Enc decodes with a decoder of its own instead)
    searched: bool  # decoded left to right by beam search (else Mask-Predict)


KINDS = {kind.kind: kind for kind in (
    Kind("abnet", "mask-predict", "mask-predict", target_bert=True, searched=False),
    Kind("abnet-enc", "autoregressive", "transformers (AB-Net-Enc)", target_bert=False, searched=True),
    Kind("plm-nmt", "coordinator", "beam search (PLM-sponsored)", target_bert=True, searched=True))}
DECODERS = tuple(kind.decoder for kind in KINDS.values())  # abnets.NAME.decoder's values


def kind_for(decoder: str) -> Kind:
    for kind in KINDS.values():
        if kind.decoder == decoder:
            return kind
    raise InputError(f"abnets: decoder {decoder!r} is none of {', '.join(DECODERS)}")


def kind_of(model) -> Kind:
    """The kind of a built model (the one place that tells the classes apart)."""
    if isinstance(model, PlmSponsored):
        return KINDS["plm-nmt"]
    return KINDS["abnet-enc" if isinstance(model, ABNetEnc) else "abnet"]


def model_kind(model) -> str:
    """abnet | abnet-enc | plm-nmt: what abnet.json records, and how a model directory loads and decodes."""
    return kind_of(model).kind


def save_abnet(model, out: Path, source_tokenizer, target_tokenizer) -> None:
    """A model directory: source/ and target/ (Hugging Face BERT directories as the model holds them; AB-Net-Enc
    has no target BERT, its target/ holds the tokenizer only; the PLM-sponsored model adds its frozen teacher/),
    adapters.safetensors (everything else that trained) and abnet.json (kind and sizes)."""
    found = kind_of(model)
    kind = found.kind
    with atomic_dir(out) as tmp:
        model.source_bert.save_pretrained(tmp / "source", safe_serialization=True)
        source_tokenizer.save_pretrained(tmp / "source")
        if found.target_bert:
            model.target_bert.save_pretrained(tmp / "target", safe_serialization=True)
        target_tokenizer.save_pretrained(tmp / "target")
        if kind == "plm-nmt" and model.teacher is not None:
            model.teacher.save_pretrained(tmp / "teacher", safe_serialization=True)
            source_tokenizer.save_pretrained(tmp / "teacher")
        save_file(untied(model.adapter_state()), str(tmp / "adapters.safetensors"))
        meta = {"kind": kind, "size": asdict(model.size)}
        if kind == "plm-nmt":
            meta["sponsored"] = asdict(model.settings)
        else:
            meta["freeze_bert"] = model.freeze_bert
        if kind == "abnet-enc":
            meta["decoder"] = model.decoder.config.to_dict()
        write_json(tmp / "abnet.json", meta)


def load_abnet(path: Path, device: torch.device | str = "cpu"):
    """The model (ABNet, ABNetEnc or PlmSponsored) on `device` and both tokenizers of a save_abnet directory
    (safetensors only)."""
    from transformers.models.auto.tokenization_auto import AutoTokenizer
    from transformers.models.bert.configuration_bert import BertConfig
    from transformers.models.bert.modeling_bert import BertLMHeadModel

    from vocabridge.plm.bert import load_bert

    path = Path(path)
    if not (path / "abnet.json").is_file():
        raise InputError(f"{path}: not an AB-Net model directory (no abnet.json)")
    meta = json.loads((path / "abnet.json").read_text(encoding="utf-8"))
    source_bert, source_tokenizer = load_bert(path / "source")
    size = AbnetAdapters(**meta["size"])
    kind = meta.get("kind", "abnet")
    if kind not in KINDS:
        raise InputError(f"{path}/abnet.json: kind {kind!r} is none of {', '.join(KINDS)}")
    if kind == "plm-nmt":
        from vocabridge.config import Sponsored

        target_bert, target_tokenizer = load_bert(path / "target")
        teacher = load_bert(path / "teacher")[0] if (path / "teacher").is_dir() else None
        model = PlmSponsored(source_bert, target_bert, teacher, Sponsored(**meta["sponsored"]), size)
    elif kind == "abnet-enc":
        target_tokenizer = AutoTokenizer.from_pretrained(path / "target", local_files_only=True)
        decoder = BertLMHeadModel(BertConfig(**meta["decoder"]))
        decoder.set_attn_implementation("eager")
        model = ABNetEnc(source_bert, decoder, size, freeze_bert=meta["freeze_bert"])
    else:
        target_bert, target_tokenizer = load_bert(path / "target")
        model = ABNet(source_bert, target_bert, size, freeze_bert=meta["freeze_bert"])
    missing = model.load_state_dict(load_file(str(path / "adapters.safetensors")), strict=False)
    if missing.unexpected_keys:
        raise InputError(f"{path}/adapters.safetensors: unexpected tensors {missing.unexpected_keys[:3]}")
    return model.to(device), source_tokenizer, target_tokenizer


def build_abnet(source_bert: BertForMaskedLM, target_bert: BertForMaskedLM, adapters: AbnetAdapters, pretrained: bool,
                decoder: str = "mask-predict", sponsored=None, teacher: BertForMaskedLM | None = None,
                special: dict[str, int] | None = None):
    """The kind of model `decoder` names, on two BERTs (the one place that maps the name to a class):
    mask-predict: AB-Net (BERTs frozen when `pretrained`); autoregressive: AB-Net-Enc, a decoder from scratch with
    the target BERT's sizes and vocabulary (`special`: its cls/sep/pad ids); coordinator: the PLM-sponsored model
    (settings `sponsored`, its frozen `teacher` or None)."""
    from transformers.models.bert.modeling_bert import BertLMHeadModel

    kind = kind_for(decoder).kind
    if kind == "plm-nmt":
        return PlmSponsored(source_bert, target_bert, teacher, sponsored, adapters)
    if kind == "abnet-enc":
        config = autoregressive_decoder_config(target_bert.config)
        if special:
            config.bos_token_id, config.eos_token_id = special["cls"], special["sep"]
            config.pad_token_id = special["pad"]
        ar_decoder = BertLMHeadModel(config)
        ar_decoder.set_attn_implementation("eager")
        return ABNetEnc(source_bert, ar_decoder, adapters, freeze_bert=pretrained)
    return ABNet(source_bert, target_bert, adapters, freeze_bert=pretrained)


def plm_sides(plms: bool | str) -> tuple[bool, bool]:
    """Which BERTs keep their pretrained weights (source, target) for `abnets.NAME.plms`: true both, false neither,
    "encoder" / "decoder" that side only."""
    return plms in (True, "encoder"), plms in (True, "decoder")


def new_abnet(source_dir: Path, target_dir: Path, adapters: AbnetAdapters, pretrained: bool | str, seed: int,
              decoder: str = "mask-predict", sponsored=None):
    """An untrained model of the kind `decoder` names (build_abnet) on the BERT directories (model, source tokenizer,
    target tokenizer). `pretrained` false: the same layers re-initialised at random and all of them trained (the
    Mask-Predict baseline); "encoder" / "decoder": only that side's BERT keeps its weights (Duan & Zhao's Table
    4). The PLM-sponsored model's teacher is a frozen copy of the source BERT, where the source BERT is one."""
    from vocabridge.plm.bert import load_bert

    source_bert, source_tokenizer = load_bert(source_dir)
    target_bert, target_tokenizer = load_bert(target_dir)
    torch.manual_seed(seed)
    keep_source, keep_target = plm_sides(pretrained)
    if not keep_source:
        source_bert = type(source_bert)(source_bert.config)
        source_bert.set_attn_implementation("eager")
    if not keep_target:
        target_bert = type(target_bert)(target_bert.config)
        target_bert.set_attn_implementation("eager")
    sponsoring = kind_for(decoder).kind == "plm-nmt"
    teacher = load_bert(source_dir)[0] if sponsoring and keep_source and sponsored.distill else None
    special = {"cls": target_tokenizer.cls_token_id, "sep": target_tokenizer.sep_token_id,
               "pad": target_tokenizer.pad_token_id}
    model = build_abnet(source_bert, target_bert, adapters, pretrained is True, decoder, sponsored, teacher, special)
    return model, source_tokenizer, target_tokenizer
