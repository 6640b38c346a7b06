"""Training a translation model (pretraining, fine-tuning): the Marian family of the one training loop.

Adam with inverse-square-root warm-up, label smoothing, gradient clipping, bf16 autocast where this machine
runs it faster than fp32 (nmt.precision). Checkpoint selection and early stopping use dev BLEU (greedy) or,
where BLEU is too small to be more than noise (tiny models), dev cross-entropy; a tie goes to the later update.
Checkpoints, resume and early stopping are the loop's (vocabridge.training).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import sacrebleu
import torch
import torch.nn.functional as F

from vocabridge.corpora.user import read_text_lines
from vocabridge.nmt.data import Parallel, collate, make_batches, padding_share
from vocabridge.nmt.forgetting import Keep, RowMask
from vocabridge.nmt.model import use_fast_attention
from vocabridge.nmt.precision import resolve_bf16, usable_cores
from vocabridge.nmt.translate import translate
from vocabridge.nmt.vocab import Vocab, domain_tag
from vocabridge.training import Cadence, LoopState, Loss, TrainingError, TrainLoop, gained

if TYPE_CHECKING:  # every stage imports this module for use_compute: transformers and pandas wait until used
    from transformers.models.marian.modeling_marian import MarianMTModel


@dataclass
class State(LoopState):
    best_bleu: float = -1.0
    best_loss: float = math.inf
    dev_bleu_seconds: float = 0.0  # of the loop's time: greedy decoding for dev BLEU (update 0's included)
    dev_loss_seconds: float = 0.0  # ... teacher-forced dev cross-entropy
    loss_log: list[dict] = field(default_factory=list)
    dev_log: list[dict] = field(default_factory=list)


def device_of(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def threads_of(threads: int = 0) -> int:
    """0 means $VOCABRIDGE_THREADS when set (the flow's share per stage), else every core we may use."""
    if threads > 0:
        return threads
    env = os.environ.get("VOCABRIDGE_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"VOCABRIDGE_THREADS: expected a positive integer, got {env!r}")
        return int(env)
    return usable_cores()


def use_compute(compute, threads: int = 0) -> torch.device:
    """Apply params.yaml's `compute` section to this process: torch's thread count (`threads`, a training's own
    fixed count where it has one, over compute.threads); returns the device."""
    torch.set_num_threads(threads_of(threads or compute.threads))
    return device_of(compute.device)


def dev_bleu(model: MarianMTModel, src: Vocab, tgt: Vocab, sources: list[str], refs: list[str], bf16: bool,
             decoder: Literal["transformers", "ctranslate2"] = "transformers") -> float:
    """Greedy dev BLEU. decoder ctranslate2 (on a CPU): the same outputs as transformers' in fp32, about 3x faster
    with the conversion counted; transformers decodes in the training's precision."""
    if decoder == "ctranslate2" and next(model.parameters()).device.type == "cpu":
        from vocabridge.ct2 import translate_model_ct2

        hyps = translate_model_ct2(model, src, tgt, sources, beam=1, threads=torch.get_num_threads())
    else:
        hyps, _ = translate(model, src, tgt, sources, beam=1, bf16=bf16, progress=False)
    return round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)


@torch.inference_mode()
def dev_loss(model: MarianMTModel, src: Vocab, tgt: Vocab, sources: list[str], refs: list[str],
             batch_size: int = 32, bf16: bool = False, tgt_prefix: int | None = None) -> float:
    """Mean cross-entropy per reference token (nats, no label smoothing), teacher-forced; the forward pass in the
    training's precision (`bf16`), the loss in fp32. `tgt_prefix`: the domain tag the model was trained to emit
    first (counted as a token of each reference)."""
    was_training = model.training
    model.eval()
    data = Parallel.encode(sources, refs, src, tgt, max_len=model.config.max_position_embeddings,
                           tgt_prefix=tgt_prefix)
    order = np.argsort([len(t) for t in data.tgt])
    device = next(model.parameters()).device
    loss, tokens = 0.0, 0
    for start in range(0, len(order), batch_size):
        batch = collate(data, order[start : start + batch_size], src.pad_id, tgt.pad_id,
                        model.config.decoder_start_token_id)
        batch = {k: v.to(device) for k, v in batch.items()}
        real = int((batch["labels"] != -100).sum())
        loss += training_loss(model, batch, 0.0, bf16).item() * real
        tokens += real
    model.train(was_training)
    return round(loss / max(tokens, 1), 4)


def training_loss(model: MarianMTModel, batch: dict[str, torch.Tensor], label_smoothing: float,
                  bf16: bool) -> torch.Tensor:
    """Label-smoothed cross-entropy of one batch (labels -100 on padding), the forward pass under bf16 autocast
    when `bf16`, the loss in fp32.

    The output layer runs on the real target positions only, and Marian's `final_logits_bias` (a buffer that no
    training changes, zeros in every model we build) is added only where it is not zero: on a CPU the padded
    rows and the mixed-precision bias add cost a sixth of an update (benchmarks/finetune_speed.py)."""
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    real = batch["labels"] != -100
    with torch.autocast(next(model.parameters()).device.type, dtype=torch.bfloat16, enabled=bf16):
        hidden = model.model(**inputs).last_hidden_state[real]
        logits = model.lm_head(hidden).float()
    bias = getattr(model, "final_logits_bias", None)  # NLLB and M2M100 have none
    if bias is not None and bias.any():
        logits = logits + bias[0]
    return F.cross_entropy(logits, batch["labels"][real], label_smoothing=label_smoothing)


def adam(params, lr: float) -> torch.optim.Adam:
    """Adam as in Vaswani et al. (betas 0.9/0.98, eps 1e-9), fused: one kernel for all parameters, which on a
    CPU is 5x faster than the per-tensor loop (a twentieth of an update of the default model)."""
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9, fused=True)


class Trainer(TrainLoop):
    """A translation model (Marian) on parallel data: label-smoothed cross-entropy, Adam with inverse-square-root
    warm-up, dev BLEU or dev cross-entropy to select the checkpoint. AB-Net's family overrides the hooks."""

    State = State
    replayed = ("patience", "patience_on")  # the dev log holds every evaluation: `replay` re-decides the stop

    def __init__(self, model: MarianMTModel, src: Vocab, tgt: Vocab, data: Parallel, dev: tuple[list[str], list[str]],
                 cfg, ckpt_dir: Path, fingerprint: dict, name: str, resample: Callable[[int], Parallel] | None = None,
                 dev_prefix: int | None = None, keep: Keep | None = None):
        from transformers.optimization import get_inverse_sqrt_schedule

        self.model, self.src, self.tgt, self.data, self.cfg = model, src, tgt, data, cfg
        self.dev_prefix = dev_prefix  # the dev set's domain tag (target-token mixing), for the dev loss
        self.resample = resample  # epoch -> that epoch's training data (subword regularisation); None: `data`
        self._data_epoch = 0  # the epoch `data` was sampled for (resample(0) is what fit passes)
        self.dev_src, self.dev_ref = dev[0][: cfg.dev_sentences], dev[1][: cfg.dev_sentences]
        device = next(model.parameters()).device
        self.device = device
        self._prepare()
        self.precision = resolve_bf16(cfg.bf16, device)
        self.bf16 = self.precision.bf16
        optimizer = adam([p for p in model.parameters() if p.requires_grad], cfg.lr)
        super().__init__(model, optimizer, get_inverse_sqrt_schedule(optimizer, num_warmup_steps=max(cfg.warmup, 1)),
                         Cadence(cfg.max_updates, cfg.log_every, cfg.checkpoint_every, cfg.eval_every, cfg.patience,
                                 cfg.clip_norm, cfg.seed), ckpt_dir, fingerprint, name, device)
        self.selection = f"dev {'loss' if cfg.select_by == 'loss' else 'BLEU'}" + (
            " or dev loss" if cfg.patience_on == "both" and cfg.select_by != "loss" else "")
        self.row_mask = RowMask(model, keep) if keep is not None else None  # what the fine-tune keeps

    # -- what a model family defines (AB-Net's trainer overrides these) ---------------------------------------
    def _prepare(self) -> None:
        use_fast_attention(self.model, self.device)

    def _collate(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        return collate(self.data, idx, self.src.pad_id, self.tgt.pad_id, self.tgt.pad_id)

    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return training_loss(self.model, batch, self.cfg.label_smoothing, self.bf16)

    def _dev_bleu(self) -> float:
        return dev_bleu(self.model, self.src, self.tgt, self.dev_src, self.dev_ref, self.bf16, self.cfg.dev_decoder)

    def _dev_loss(self) -> float:
        return dev_loss(self.model, self.src, self.tgt, self.dev_src, self.dev_ref, bf16=self.bf16,
                        tgt_prefix=self.dev_prefix)

    # -- the loop's hooks ---------------------------------------------------------------------------------------
    def plan(self, epoch: int) -> list[np.ndarray]:
        if self.resample is not None and epoch != self._data_epoch:
            self.data, self._data_epoch = self.resample(epoch), epoch
        return make_batches(self.data, self.cfg.batch_tokens, self.cfg.seed, epoch)

    def collate(self, item: np.ndarray, step: int) -> tuple[dict[str, torch.Tensor], int]:
        batch = {k: v.to(self.device) for k, v in self._collate(item).items()}
        return batch, int(sum(len(self.data.tgt[i]) for i in item))

    def loss(self, batch: dict[str, torch.Tensor]) -> Loss:
        return Loss(self._loss(batch))

    def validate(self) -> float:
        st = self.state
        started = time.perf_counter()
        bleu = self._dev_bleu()
        decoded = time.perf_counter()
        loss = self._dev_loss()
        st.dev_bleu_seconds += decoded - started
        st.dev_loss_seconds += time.perf_counter() - decoded
        st.dev_log.append({"step": st.step, "dev_bleu": bleu, "dev_loss": loss})
        self._last_dev = bleu, loss
        return -loss if self.cfg.select_by == "loss" else bleu

    def improved(self) -> None:
        self.state.best_bleu, self.state.best_loss = self._last_dev

    def best_score(self) -> float:
        return -self.state.best_loss if self.cfg.select_by == "loss" else self.state.best_bleu

    def replay(self, state: dict) -> tuple[int, int | None]:
        """A gain is a selection figure at least as good as every earlier one (training.gained) or, with
        `patience_on: both`, a dev loss below every earlier one."""
        best, lowest, bad = -math.inf, math.inf, 0
        for row in state.get("dev_log") or []:
            score = -row["dev_loss"] if self.cfg.select_by == "loss" else row["dev_bleu"]
            better_loss = self.cfg.patience_on == "both" and row["dev_loss"] < lowest
            bad = 0 if gained(score, best) or better_loss else bad + 1
            best, lowest = max(best, score), min(lowest, row["dev_loss"])
            if self.cfg.patience and bad >= self.cfg.patience:
                return bad, row["step"]
        return bad, None

    def logged(self, row: dict) -> None:
        self.state.loss_log.append({k: row[k] for k in ("step", "loss", "lr", "target_tokens_per_s")})

    def postfix(self, row: dict) -> dict:
        return {"loss": row["loss"], "tok_s": row["target_tokens_per_s"], "dev": self.state.best_bleu}

    def adjust_gradients(self) -> None:
        if self.row_mask is not None:
            self.row_mask.apply(self.state.step)

    def describe(self) -> str:
        return f"computing in {self.precision.name} ({self.precision.reason})"


def fingerprint_of(*parts) -> dict:
    """What a checkpoint belongs to: resuming is only allowed when this matches exactly."""
    return json.loads(json.dumps(parts, default=str))


def fit(model: MarianMTModel, src: Vocab, tgt: Vocab, corpus: Path, lang, cfg, ckpt_dir: Path, fingerprint: dict,
        name: str, sampling_alpha: float = 0.0, mix_with: Path | None = None,
        keep: Keep | None = None) -> tuple[State, dict]:
    """Train on corpus/train.{src,tgt} with dev selection (cfg.select_by); leaves the best weights in `model`.

    sampling_alpha > 0: each epoch trains on its own sampled segmentation of the text (subword regularisation),
    drawn from (seed, epoch), so that a resumed run sees the same pieces.
    mix_with: a second corpus folder (the new domain's) whose pairs join the training set, every target led by its
    domain's tag (`<domain:upstream>` for `corpus`, `<domain:downstream>` for `mix_with`, which `tgt` must hold):
    target-token mixing (Britz et al. 2017), Sato et al. 2020's MDL. The dev set is then `mix_with`'s.
    keep: the pretrained rows held (vocabridge.nmt.forgetting)."""
    parts = [(corpus, None)]
    if mix_with is not None:
        parts = [(corpus, tgt.id_of(domain_tag("upstream"))), (mix_with, tgt.id_of(domain_tag("downstream")))]
    lines = [(read_text_lines(folder / f"train.{lang.src}"), read_text_lines(folder / f"train.{lang.tgt}"), tag)
             for folder, tag in parts]

    def encode(alpha: float = 0.0, seed: int = 0) -> list[Parallel]:
        return [Parallel.encode(s, t, src, tgt, cfg.max_len, alpha, seed, tag) for s, t, tag in lines]

    resample = None
    if sampling_alpha:
        def resample(epoch: int) -> Parallel:
            return sum(encode(sampling_alpha, seed=2 * (cfg.seed * 1000 + epoch)), Parallel([], []))
    encoded = encode(sampling_alpha, seed=2 * cfg.seed * 1000) if sampling_alpha else encode()
    data = sum(encoded, Parallel([], []))
    if not len(data):
        raise TrainingError(f"{corpus}: no training pair fits max_len={cfg.max_len}")
    dev_folder, dev_tag = parts[-1]
    dev = (read_text_lines(dev_folder / f"dev.{lang.src}"), read_text_lines(dev_folder / f"dev.{lang.tgt}"))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    trainer = Trainer(model, src, tgt, data, dev, cfg, ckpt_dir, fingerprint, name, resample, dev_tag, keep)
    state = trainer.train()
    trainer.load_best()
    summary = {
        "updates": state.step, "best_update": state.best_step, "best_dev_bleu": state.best_bleu,
        "best_dev_loss": state.best_loss, "selected_by": f"dev {cfg.select_by}",
        "stopped": state.stopped, **state.ending(), "train_pairs": len(data),
        "target_tokens_seen": state.target_tokens,
        "train_seconds": round(state.seconds, 1),
        **{key: round(getattr(state, key), 1) for key in ("dev_bleu_seconds", "dev_loss_seconds",
                                                          "checkpoint_seconds")},
        "target_tokens_per_s": round(state.target_tokens / max(state.seconds, 1e-9), 1),
        "padding_share": round(padding_share(data, make_batches(data, cfg.batch_tokens, cfg.seed, 0)), 4),
        "bf16": trainer.bf16, **trainer.precision.as_metrics(), "device": str(trainer.device),
        "threads": torch.get_num_threads(),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if keep is not None:
        summary["keep"] = {"frozen": keep.frozen, "new_rows_first": keep.new_rows_first,
                           **{f"old_rows_{side}": len(ids) for side, ids in keep.old_rows.items()}}
    if mix_with is not None:
        summary["pairs_by_domain"] = {"upstream": len(encoded[0]), "downstream": len(encoded[1])}
    return state, summary


def write_logs(state: State, plots: Path) -> None:
    """The learning curves as CSV files that `dvc plots show` draws."""
    import pandas as pd

    plots.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(state.loss_log, columns=["step", "loss", "lr", "target_tokens_per_s"]).to_csv(
        plots / "train_loss.csv", index=False)
    dev = pd.DataFrame(state.dev_log, columns=["step", "dev_bleu", "dev_loss"])
    dev[["step", "dev_bleu"]].to_csv(plots / "dev_bleu.csv", index=False)
    dev[["step", "dev_loss"]].to_csv(plots / "dev_loss.csv", index=False)
