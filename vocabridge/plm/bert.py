"""Small BERTs of the pipeline's own, MLM-pretrained on the text it has, or a user's BERT directory.

No German BERT (and no BERT with an MLM head) ships offline, so AB-Net's pretrained language models are made
here: a unigram vocabulary of its own (train_plm_tokenizer) and a `BertForMaskedLM` trained
with BERT's masked-LM objective (15% of the pieces: 80% [MASK], 10% random, 10% kept; transformers'
DataCollatorForLanguageModeling). A model directory is what `save_pretrained` writes (config.json,
model.safetensors, vocab.txt, tokenizer files), so any Hugging Face BERT directory a user has loads the same
way. Weights are only ever read from safetensors.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from vocabridge.config import BertArch, MlmTraining
from vocabridge.errors import InputError
from vocabridge.fileio import atomic_dir
from vocabridge.nmt.precision import resolve_bf16
from vocabridge.training import Cadence, LoopState, Loss, TrainLoop

if TYPE_CHECKING:  # transformers' model code costs seconds to import: the functions that need it import it
    from transformers.models.bert.modeling_bert import BertForMaskedLM
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase
    from transformers.tokenization_utils_tokenizers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def additive_mask(keep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[B, S] with 1 where a position may be attended -> BERT's additive [B, 1, 1, S] mask."""
    return (1.0 - keep[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def train_plm_tokenizer(texts: list[str], vocab_size: int, out: Path) -> PreTrainedTokenizerFast:
    """A unigram vocabulary of `vocab_size` pieces (BERT's five special tokens included) fitted to `texts` by
    SentencePiece, as the NMT vocabularies (the same text gives the same pieces, scores and ids on every run; the
    `tokenizers` unigram trainer does not), as a BERT tokenizer: Metaspace pieces, so decoding gives back the text
    and BLEU is scored on the same detokenisation as the NMT rows', [CLS] ... [SEP] framing; saved to `out`."""
    import tempfile

    from vocabridge.config import SpmModel
    from vocabridge.tokenizers import SPECIAL, train_spm

    controls = sum(1 for key in ("unk_id", "bos_id", "eos_id", "pad_id") if SPECIAL[key] >= 0)
    cfg = SpmModel(vocab_size=vocab_size - len(SPECIAL_TOKENS) + controls, hard_vocab_limit=False)
    model = train_spm(texts, cfg, seed=1, threads=1, name=f"{out}: the BERT's vocabulary")
    with tempfile.TemporaryDirectory(prefix="vocabridge-plm-spm-") as tmp:
        (Path(tmp) / "unigram.model").write_bytes(model)
        return bert_tokenizer_from_spm(Path(tmp) / "unigram.model", out)


def bert_tokenizer_from_spm(model_file: Path, out: Path | None = None) -> PreTrainedTokenizerFast:
    """The pieces and scores of a SentencePiece unigram model (and its normaliser) as a BERT-style tokenizer:
    BERT's special tokens first, then the model's ordinary pieces in order, so it segments text as the
    SentencePiece model does. How a PLM decoder takes the downstream vocabulary (vocabridge.plm.vocabulary)."""
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import Regex, Tokenizer, models, normalizers

    proto = sentencepiece_model_pb2.ModelProto()
    try:
        proto.ParseFromString(Path(model_file).read_bytes())
    except (OSError, ValueError) as err:
        raise InputError(f"{model_file}: not a SentencePiece model ({err})") from None
    if proto.trainer_spec.model_type != proto.trainer_spec.UNIGRAM:
        raise InputError(f"{model_file}: a unigram SentencePiece model is needed")
    ordinary = [(p.piece, p.score) for p in proto.pieces if p.type == p.NORMAL]
    unigram = Tokenizer(models.Unigram([(t, 0.0) for t in SPECIAL_TOKENS] + ordinary, unk_id=1))
    charsmap = proto.normalizer_spec.precompiled_charsmap
    unigram.normalizer = normalizers.Sequence(([normalizers.Precompiled(charsmap)] if charsmap else [])
                                              + [normalizers.Replace(Regex(" {2,}"), " ")])
    unigram.add_special_tokens(SPECIAL_TOKENS)
    return _as_bert_tokenizer(unigram, out)


def _as_bert_tokenizer(unigram, out: Path | None) -> PreTrainedTokenizerFast:
    """Metaspace pieces, [CLS] ... [SEP] framing, BERT's special tokens; saved to `out` when given."""
    from tokenizers import decoders, pre_tokenizers, processors
    from transformers.tokenization_utils_tokenizers import PreTrainedTokenizerFast

    unigram.pre_tokenizer = pre_tokenizers.Metaspace()
    unigram.decoder = decoders.Metaspace()
    cls, sep = unigram.token_to_id("[CLS]"), unigram.token_to_id("[SEP]")
    unigram.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=unigram, unk_token="[UNK]", pad_token="[PAD]",
                                        cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                        model_max_length=512)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        tokenizer.save_pretrained(out)
    return tokenizer


def build_bert(size: BertArch, tokenizer: PreTrainedTokenizerBase, seed: int) -> BertForMaskedLM:
    """A freshly initialised BERT with an MLM head (output layer tied to the embeddings)."""
    from transformers.models.bert.configuration_bert import BertConfig
    from transformers.models.bert.modeling_bert import BertForMaskedLM

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=size.hidden, num_hidden_layers=size.layers,
                        num_attention_heads=size.heads, intermediate_size=size.ffn,
                        max_position_embeddings=size.max_positions, hidden_dropout_prob=size.dropout,
                        attention_probs_dropout_prob=size.dropout, pad_token_id=tokenizer.pad_token_id,
                        tie_word_embeddings=True)
    model = BertForMaskedLM(config)
    model.set_attn_implementation("eager")  # CPU: see nmt.model.use_fast_attention
    return model


def check_bert_dir(path: Path) -> None:
    """A clear one-line error for a folder that is not a BERT directory we can read safely and offline."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: no such BERT directory")
    if not (path / "config.json").is_file():
        raise InputError(f"{path}: not a Hugging Face model directory (no config.json)")
    model_type = json.loads((path / "config.json").read_text(encoding="utf-8")).get("model_type")
    if model_type != "bert":
        raise InputError(f"{path}/config.json: model_type is {model_type!r}, expected 'bert'")
    if not (path / "model.safetensors").is_file():
        pickle = [p.name for p in path.glob("*.bin")]
        hint = f" (only {pickle[0]}, a pickle: convert it to model.safetensors first)" if pickle else ""
        raise InputError(f"{path}: no model.safetensors{hint}")
    if not any((path / name).is_file() for name in ("vocab.txt", "tokenizer.json")):
        raise InputError(f"{path}: no tokenizer (vocab.txt or tokenizer.json)")


def load_bert(path: Path) -> tuple[BertForMaskedLM, PreTrainedTokenizerBase]:
    """A BERT directory's model (with its MLM head; safetensors only) and tokenizer, offline."""
    from transformers.models.auto.tokenization_auto import AutoTokenizer
    from transformers.models.bert.modeling_bert import BertForMaskedLM

    check_bert_dir(path)
    model = BertForMaskedLM.from_pretrained(path, use_safetensors=True, local_files_only=True)
    model.set_attn_implementation("eager")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer


@dataclass
class MlmState(LoopState):
    curve: list[dict] = field(default_factory=list)  # step, train_loss, held_out_loss, held_out_accuracy
    best_accuracy: float = -1.0  # the best held-out accuracy so far (cfg.patience > 0 selects by it)


def encode_sentences(tokenizer: PreTrainedTokenizerBase, texts: list[str], max_len: int) -> list[list[int]]:
    """[CLS] pieces [SEP], cut to max_len; empty lines dropped."""
    texts = [t for t in texts if t.strip()]
    return tokenizer(texts, truncation=True, max_length=max_len)["input_ids"] if texts else []


def _batches(n: int, size: int, seed: int, epoch: int) -> list[list[int]]:
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch)).tolist()
    return [order[i : i + size] for i in range(0, n, size)]


class MlmTrainer(TrainLoop):
    """Masked-LM pretraining with a held-out learning curve (the one training loop's masked-LM family); with
    `patience`, trained until the held-out masked-piece accuracy stops rising, the most accurate update kept."""

    State = MlmState
    selection = "held-out accuracy"

    def __init__(self, model: BertForMaskedLM, tokenizer: PreTrainedTokenizerBase | None, train: list[list[int]],
                 held_out: list[list[int]], cfg: MlmTraining, ckpt_dir: Path, fingerprint: dict, name: str,
                 device: torch.device | str = "cpu"):
        if not train:
            raise InputError(f"{name}: no training text")
        device = torch.device(device)
        model.to(device)  # before the optimizer is made, so that its state lives there too
        self.model, self.tokenizer, self.train_ids, self.cfg = model, tokenizer, train, cfg
        self.held_out = held_out[: cfg.held_out_sentences]
        self.precision = resolve_bf16(cfg.bf16, device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
        warmup = max(cfg.warmup, 1)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min((step + 1) / warmup, math.sqrt(warmup / (step + 1))))
        super().__init__(model, optimizer, scheduler, Cadence(cfg.max_updates, cfg.log_every, cfg.checkpoint_every,
                                                              cfg.eval_every, cfg.patience, clip_norm=1.0,
                                                              seed=cfg.seed),
                         ckpt_dir, fingerprint, name, device)
        self._since_eval: list[float] = []
        self._collator = None
        self._bar_figures: dict = {}  # the last held-out figures, for the progress bar

    def _batch(self, ids: list[list[int]], generator_seed: int | None = None) -> dict[str, torch.Tensor]:
        if self._collator is None:  # made when first needed: timing an update (vocabridge.estimate) needs none
            from transformers.data.data_collator import DataCollatorForLanguageModeling

            self._collator = DataCollatorForLanguageModeling(self.tokenizer, mlm_probability=self.cfg.mask_prob,
                                                             return_tensors="pt")
        collate = self._collator
        features = [{"input_ids": x} for x in ids]
        if generator_seed is None:
            batch = collate(features)
        else:
            rng = torch.get_rng_state()  # the held-out masks are the same at every evaluation
            torch.manual_seed(generator_seed)
            try:
                batch = collate(features)
            finally:
                torch.set_rng_state(rng)
        return {k: v.to(self.device) for k, v in batch.items()}

    @torch.inference_mode()
    def evaluate(self) -> tuple[float, float]:
        """Held-out masked-LM loss (nats per masked piece) and masked-piece accuracy."""
        self.model.eval()
        loss, correct, total = 0.0, 0, 0
        for i in range(0, len(self.held_out), self.cfg.batch_sentences):
            batch = self._batch(self.held_out[i : i + self.cfg.batch_sentences], generator_seed=12345 + i)
            logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            masked = batch["labels"] != -100
            gold = batch["labels"][masked]
            loss += torch.nn.functional.cross_entropy(logits[masked].float(), gold, reduction="sum").item()
            correct += int((logits[masked].argmax(-1) == gold).sum())
            total += int(masked.sum())
        self.model.train()
        return round(loss / max(total, 1), 4), round(correct / max(total, 1), 4)

    # -- the loop's hooks ---------------------------------------------------------------------------------------
    def plan(self, epoch: int) -> list[list[int]]:
        n, size = len(self.train_ids), self.cfg.batch_sentences
        order = torch.randperm(n, generator=torch.Generator().manual_seed(self.cfg.seed * 1000 + epoch)).tolist()
        return [order[i : i + size] for i in range(0, n, size)]

    def collate(self, item: list[int], step: int) -> tuple[dict[str, torch.Tensor], int]:
        return self._batch([self.train_ids[i] for i in item]), 0

    def loss(self, batch: dict[str, torch.Tensor]) -> Loss:
        """BERT's masked-LM loss, the layers under bf16 autocast where this machine runs it faster, the output
        layer on the masked pieces only (the other 85% of its logits are never scored) and the loss in fp32."""
        masked = batch["labels"] != -100
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision.bf16):
            hidden = self.model.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0]
            logits = self.model.cls(hidden[masked]).float()
        loss = torch.nn.functional.cross_entropy(logits, batch["labels"][masked])
        self._since_eval.append(loss.item())
        return Loss(loss)

    def describe(self) -> str:
        return f"computing in {self.precision.name} ({self.precision.reason})"

    def validate(self) -> None:
        held_loss, accuracy = self.evaluate()
        window, self._since_eval = self._since_eval, []
        self.state.curve.append({"step": self.state.step,
                                 "train_loss": round(sum(window) / len(window), 4) if window else None,
                                 "held_out_loss": held_loss, "held_out_accuracy": accuracy})
        self._bar_figures = {"loss": held_loss, "acc": accuracy}
        return accuracy if self.cfg.patience else None

    def improved(self) -> None:
        self.state.best_accuracy = self.state.curve[-1]["held_out_accuracy"]

    def best_score(self) -> float:
        return self.state.best_accuracy

    def postfix(self, row: dict) -> dict:
        return self._bar_figures or {"loss": row["loss"]}


def save_bert(model: BertForMaskedLM, tokenizer: PreTrainedTokenizerBase, out: Path) -> None:
    """Write a Hugging Face BERT directory atomically (safetensors weights, tokenizer files)."""
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
