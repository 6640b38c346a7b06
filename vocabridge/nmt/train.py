"""The training loop shared by pretraining and fine-tuning.

Adam with inverse-square-root warm-up, label smoothing, gradient clipping, bf16 autocast where this machine
runs it faster than fp32 (nmt.precision). Checkpoint selection and early stopping use dev BLEU (greedy) or,
where BLEU is too small to be more than noise (tiny models), dev cross-entropy; a tie goes to the later update.
Checkpoints (safetensors + JSON, no pickle) are written atomically every N updates; a rerun with the same
fingerprint resumes exactly where the last checkpoint left off (same batches, same dropout masks).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import sacrebleu
import torch
import torch.nn.functional as F
from safetensors.torch import load_model, save_model

from vocabridge.corpora.user import read_text_lines
from vocabridge.errors import VocabridgeError
from vocabridge.fileio import atomic_dir, recover_dir
from vocabridge.nmt.checkpoint import load_checkpoint, save_checkpoint
from vocabridge.nmt.data import Parallel, collate, make_batches, padding_share
from vocabridge.nmt.model import use_fast_attention
from vocabridge.nmt.precision import resolve_bf16, usable_cores
from vocabridge.nmt.translate import translate
from vocabridge.nmt.vocab import Vocab, domain_tag
from vocabridge.progress import progress, write

if TYPE_CHECKING:  # every stage imports this module for use_compute: transformers and pandas wait until used
    from transformers.models.marian.modeling_marian import MarianMTModel


class TrainingError(VocabridgeError):
    """Training cannot go on (a loss that is not finite, a checkpoint that does not fit)."""


@dataclass
class State:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_bleu: float = -1.0
    best_loss: float = math.inf
    best_step: int = 0
    bad_evals: int = 0
    target_tokens: int = 0
    seconds: float = 0.0  # the training loop's wall time (updates, and the evaluations and checkpoints within)
    dev_bleu_seconds: float = 0.0  # of which greedy decoding for dev BLEU (update 0's included)
    dev_loss_seconds: float = 0.0  # ... teacher-forced dev cross-entropy
    checkpoint_seconds: float = 0.0  # ... writing `last` and `best`
    stopped: str = ""
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


def use_compute(compute) -> torch.device:
    """Apply params.yaml's `compute` section to this process: torch's thread count; returns the device."""
    torch.set_num_threads(threads_of(compute.threads))
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
    bias = model.final_logits_bias
    if bias.any():
        logits = logits + bias[0]
    return F.cross_entropy(logits, batch["labels"][real], label_smoothing=label_smoothing)


def adam(params, lr: float) -> torch.optim.Adam:
    """Adam as in Vaswani et al. (betas 0.9/0.98, eps 1e-9), fused: one kernel for all parameters, which on a
    CPU is 5x faster than the per-tensor loop (a twentieth of an update of the default model)."""
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9, fused=True)


def apply_gradients(loss: torch.Tensor, optimizer: torch.optim.Optimizer, params, clip_norm: float) -> None:
    """Backward, clip the gradients' global norm, one optimizer step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, clip_norm)
    optimizer.step()


class Trainer:
    def __init__(self, model: MarianMTModel, src: Vocab, tgt: Vocab, data: Parallel, dev: tuple[list[str], list[str]],
                 cfg, ckpt_dir: Path, fingerprint: dict, name: str, resample: Callable[[int], Parallel] | None = None,
                 dev_prefix: int | None = None):
        self.model, self.src, self.tgt, self.data, self.cfg = model, src, tgt, data, cfg
        self.dev_prefix = dev_prefix  # the dev set's domain tag (target-token mixing), for the dev loss
        self.resample = resample  # epoch -> that epoch's training data (subword regularisation); None: `data`
        self._data_epoch = 0  # the epoch `data` was sampled for (resample(0) is what fit passes)
        self.dev_src, self.dev_ref = dev[0][: cfg.dev_sentences], dev[1][: cfg.dev_sentences]
        self.ckpt_dir, self.fingerprint, self.name = Path(ckpt_dir), fingerprint, name
        self.device = next(model.parameters()).device
        self._prepare()
        self.precision = resolve_bf16(cfg.bf16, self.device)
        self.bf16 = self.precision.bf16
        from transformers.optimization import get_inverse_sqrt_schedule

        self.optimizer = adam([p for p in model.parameters() if p.requires_grad], cfg.lr)
        self.scheduler = get_inverse_sqrt_schedule(self.optimizer, num_warmup_steps=max(cfg.warmup, 1))
        self.state = State()

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

    # -- checkpoints ------------------------------------------------------------------------------------------
    def _save(self, which: str) -> None:
        started = time.perf_counter()
        self._write(which)
        self.state.checkpoint_seconds += time.perf_counter() - started

    def _write(self, which: str) -> None:
        if which == "last":
            sched = {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"}
            save_checkpoint(self.ckpt_dir, self.model, self.optimizer,
                            {"state": asdict(self.state), "scheduler": sched, "fingerprint": self.fingerprint})
            return
        with atomic_dir(self.ckpt_dir / which) as tmp:
            save_model(self.model, str(tmp / "model.safetensors"))

    def _resume(self) -> bool:
        saved = load_checkpoint(self.ckpt_dir, self.fingerprint, self.model, self.optimizer, self.device)
        if saved is None:
            return False
        recover_dir(self.ckpt_dir / "best")  # the best weights that `last`'s state names, if a kill set them aside
        self.scheduler.load_state_dict(self.scheduler.state_dict() | saved["scheduler"])
        for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr(), strict=True):
            group["lr"] = lr
        self.state = State(**saved["state"])
        return True

    # -- the loop ---------------------------------------------------------------------------------------------
    def _step(self, batch: dict[str, torch.Tensor]) -> float:
        batch = {k: v.to(self.device) for k, v in batch.items()}
        loss = self._loss(batch)
        if not torch.isfinite(loss):
            where = self.ckpt_dir / "last"
            raise TrainingError(f"{self.name}: loss is {loss.item()} at update {self.state.step + 1}; stopped. "
                                f"The last good checkpoint is {where} (update {self._last_saved})")
        apply_gradients(loss, self.optimizer, self.model.parameters(), self.cfg.clip_norm)
        self.scheduler.step()
        return loss.item()

    def _evaluate(self) -> None:
        st = self.state
        started = time.perf_counter()
        bleu = self._dev_bleu()
        decoded = time.perf_counter()
        loss = self._dev_loss()
        st.dev_bleu_seconds += decoded - started
        st.dev_loss_seconds += time.perf_counter() - decoded
        self.model.train()
        st.dev_log.append({"step": st.step, "dev_bleu": bleu, "dev_loss": loss})
        by_loss = self.cfg.select_by == "loss"
        score, best = (-loss, -st.best_loss) if by_loss else (bleu, st.best_bleu)
        if score >= best:  # a tie goes to the later update: more training, never the untouched start
            st.bad_evals = 0 if score > best else st.bad_evals + 1
            st.best_bleu, st.best_loss, st.best_step = bleu, loss, st.step
            self._save("best")
        else:
            st.bad_evals += 1
        if self.cfg.patience and st.bad_evals >= self.cfg.patience:
            st.stopped = f"early stop: no dev {'loss' if by_loss else 'BLEU'} gain in {st.bad_evals} evaluations"

    def train(self) -> State:
        """Run to max_updates or early stop; the best weights end up in ckpt_dir/best."""
        cfg, st = self.cfg, self.state
        resumed = self._resume()
        st = self.state
        write(f"{self.name}: computing in {self.precision.name} ({self.precision.reason})", file=sys.stderr)
        if resumed:
            write(f"{self.name}: resuming from the checkpoint at update {st.step} ({self.ckpt_dir / 'last'})",
                  file=sys.stderr)
        self._last_saved = st.step
        self.model.train()
        if not resumed:
            torch.manual_seed(cfg.seed)  # dropout: the row's seed, not whatever seeded the process's generator
            self._evaluate()  # update 0: the starting point of the learning curve
            self._save("last")
        bar = progress(total=cfg.max_updates, initial=st.step, desc=self.name, unit="upd")
        window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
        while st.step < cfg.max_updates and not st.stopped:
            if self.resample is not None and st.epoch != self._data_epoch:
                self.data, self._data_epoch = self.resample(st.epoch), st.epoch
            batches = make_batches(self.data, cfg.batch_tokens, cfg.seed, st.epoch)
            while st.batch_in_epoch < len(batches) and st.step < cfg.max_updates and not st.stopped:
                idx = batches[st.batch_in_epoch]
                tokens = int(sum(len(self.data.tgt[i]) for i in idx))
                loss = self._step(self._collate(idx))
                st.step += 1
                st.batch_in_epoch += 1
                st.target_tokens += tokens
                window_loss += loss
                window_tokens += tokens
                bar.update(1)
                if st.step % cfg.log_every == 0 or st.step == cfg.max_updates:
                    elapsed = time.perf_counter() - window_start
                    st.seconds += elapsed
                    n = st.step % cfg.log_every or cfg.log_every
                    row = {"step": st.step, "loss": round(window_loss / n, 4),
                           "lr": float(f"{self.scheduler.get_last_lr()[0]:.6g}"),
                           "target_tokens_per_s": round(window_tokens / max(elapsed, 1e-9), 1)}
                    st.loss_log.append(row)
                    bar.set_postfix(loss=row["loss"], tok_s=row["target_tokens_per_s"], dev=st.best_bleu)
                    window_loss, window_tokens, window_start = 0.0, 0, time.perf_counter()
                if st.step % cfg.eval_every == 0 or st.step == cfg.max_updates:
                    self._evaluate()
                if st.step % cfg.checkpoint_every == 0 or st.step == cfg.max_updates or st.stopped:
                    self._save("last")
                    self._last_saved = st.step
            if st.batch_in_epoch >= len(batches):
                st.epoch += 1
                st.batch_in_epoch = 0
        bar.close()
        if not st.stopped:
            st.stopped = "max_updates reached" if cfg.max_updates else "no training (max_updates 0)"
            self._save("last")
        return st

    def load_best(self) -> None:
        load_model(self.model, str(self.ckpt_dir / "best" / "model.safetensors"), device=str(self.device))


def fingerprint_of(*parts) -> dict:
    """What a checkpoint belongs to: resuming is only allowed when this matches exactly."""
    return json.loads(json.dumps(parts, default=str))


def fit(model: MarianMTModel, src: Vocab, tgt: Vocab, corpus: Path, lang, cfg, ckpt_dir: Path, fingerprint: dict,
        name: str, sampling_alpha: float = 0.0, mix_with: Path | None = None) -> tuple[State, dict]:
    """Train on corpus/train.{src,tgt} with dev selection (cfg.select_by); leaves the best weights in `model`.

    sampling_alpha > 0: each epoch trains on its own sampled segmentation of the text (subword regularisation),
    drawn from (seed, epoch), so that a resumed run sees the same pieces.
    mix_with: a second corpus folder (the new domain's) whose pairs join the training set, every target led by its
    domain's tag (`<domain:upstream>` for `corpus`, `<domain:downstream>` for `mix_with`, which `tgt` must hold):
    target-token mixing (Britz et al. 2017), Sato et al. 2020's MDL. The dev set is then `mix_with`'s."""
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
    trainer = Trainer(model, src, tgt, data, dev, cfg, ckpt_dir, fingerprint, name, resample, dev_tag)
    state = trainer.train()
    trainer.load_best()
    summary = {
        "updates": state.step, "best_update": state.best_step, "best_dev_bleu": state.best_bleu,
        "best_dev_loss": state.best_loss, "selected_by": f"dev {cfg.select_by}",
        "stopped": state.stopped, "train_pairs": len(data), "target_tokens_seen": state.target_tokens,
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
