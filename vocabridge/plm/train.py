"""Training and decoding AB-Net: the NMT trainer's loop (batches, schedule, dev selection, checkpoints, exact
resume) with the conditional masked-LM loss and Mask-Predict decoding for dev BLEU; AB-Net-Enc with the
teacher-forced loss and greedy dev BLEU; the PLM-sponsored model with Eq. 9's loss and greedy dev BLEU.

Every family's update runs under bf16 autocast where this machine runs it faster than fp32 (`bf16: auto`, as the
NMT fine-tune; 1.7-1.8x on AVX-512 bf16 cores, benchmarks/plm_precision.py); dev BLEU and dev loss stay in fp32.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import sacrebleu
import torch

from vocabridge.config import MaskPredict
from vocabridge.corpora.user import read_text_lines
from vocabridge.nmt.data import Parallel
from vocabridge.nmt.train import State, Trainer, TrainingError
from vocabridge.plm.abnet import (
    ABNet,
    ABNetEnc,
    beam_search,
    cmlm_loss,
    kind_of,
    mask_predict,
    mask_targets,
    model_kind,
    seq2seq_loss,
)
from vocabridge.plm.dropout import use_bits_dropout
from vocabridge.plm.sponsored import (
    PlmSponsored,
    auxiliary_labels,
    sponsored_loss,
    translation_loss,
)
from vocabridge.plm.sponsored import beam_search as sponsored_beam_search
from vocabridge.training import Loss


def special_ids(tokenizer) -> dict[str, int]:
    return {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id, "mask": tokenizer.mask_token_id,
            "pad": tokenizer.pad_token_id}


def encode_pairs(source_tokenizer, target_tokenizer, sources: list[str], targets: list[str],
                 max_len: int) -> Parallel:
    """Both sides as [CLS] pieces [SEP]; pairs with a side longer than max_len pieces (frame included) or an empty
    target are skipped."""
    s = source_tokenizer(sources, add_special_tokens=True)["input_ids"] if sources else []
    t = target_tokenizer(targets, add_special_tokens=True)["input_ids"] if targets else []
    keep = [i for i in range(len(s)) if len(s[i]) <= max_len and 2 < len(t[i]) <= max_len]
    return Parallel([np.array(s[i], dtype=np.int64) for i in keep], [np.array(t[i], dtype=np.int64) for i in keep])


def pad_sources(rows: list, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.as_tensor(r)
    return ids, (ids != pad_id).long()


@torch.inference_mode()
def translate_abnet(model: ABNet | ABNetEnc | PlmSponsored, source_tokenizer, target_tokenizer, sentences: list[str],
                    decoding: MaskPredict, beam: int = 1, length_penalty: float = 1.0) -> tuple[list[str], dict]:
    """Translations of `sentences` (batches of similar length, output in input order): Mask-Predict for AB-Net,
    beam search (`beam`, `length_penalty`) for AB-Net-Enc and the PLM-sponsored model; and the speed figures the
    evaluate stage reports for every row."""
    was_training, device, kind = model.training, next(model.parameters()).device, kind_of(model)
    model.eval()
    ids = source_tokenizer(sentences, add_special_tokens=True, truncation=True,
                           max_length=model.source_bert.config.max_position_embeddings - 1)["input_ids"]
    order = np.argsort([len(x) for x in ids], kind="stable")
    out: list[str] = [""] * len(sentences)
    iterations: list[int] = []
    lengths: list[int] = []
    started = time.perf_counter()
    for start in range(0, len(order), decoding.batch_sentences):
        chunk = order[start : start + decoding.batch_sentences]
        source, keep = (t.to(device) for t in pad_sources([ids[i] for i in chunk], source_tokenizer.pad_token_id))
        if kind.searched:
            search = beam_search if kind.kind == "abnet-enc" else sponsored_beam_search
            pieces = search(model, source, keep, special_ids(target_tokenizer), beam, length_penalty,
                            model.size.max_target_len)
            ran = [len(p) + 1 for p in pieces]  # one decoder step a piece and one for [SEP]
        else:
            pieces, ran = mask_predict(model, source, keep, special_ids(target_tokenizer),
                                       decoding.length_candidates, decoding.iterations)
        for i, p in zip(chunk, pieces, strict=True):
            out[i] = target_tokenizer.decode(p, skip_special_tokens=True).strip()
        iterations += ran
        lengths += [len(p) for p in pieces]
    seconds = time.perf_counter() - started
    model.train(was_training)
    return out, {"seconds": round(seconds, 2), "sentences_per_second": round(len(sentences) / max(seconds, 1e-9), 2),
                 "mean_output_tokens": round(float(np.mean(lengths)), 2) if lengths else 0.0,
                 "mean_iterations": round(float(np.mean(iterations)), 2) if iterations else 0.0}


class AbnetTrainer(Trainer):
    """Trainer with AB-Net's loss and dev figures; `src`/`tgt` are the two BERT tokenizers."""

    def __init__(self, model: ABNet, source_tokenizer, target_tokenizer, data: Parallel, dev, cfg, ckpt_dir: Path,
                 fingerprint: dict, name: str, decoding: MaskPredict, length_weight: float):
        self.decoding, self.length_weight = decoding, length_weight
        super().__init__(model, source_tokenizer, target_tokenizer, data, dev, cfg, ckpt_dir, fingerprint, name)
        self.dev_data = encode_pairs(source_tokenizer, target_tokenizer, self.dev_src, self.dev_ref, cfg.max_len)

    def _prepare(self) -> None:
        use_bits_dropout(self.model, self.device)  # the BERTs were loaded with eager attention (plm.bert)

    def loss(self, batch: dict[str, torch.Tensor]) -> Loss:
        """The family's `_loss` with its layers under bf16 autocast when the trainer computes in bf16 (the losses
        themselves score fp32 logits)."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return super().loss(batch)

    def _masked_batch(self, data: Parallel, idx, seed: int) -> dict[str, torch.Tensor]:
        source, keep = pad_sources([data.src[i] for i in idx], self.src.pad_token_id)
        batch = mask_targets([data.tgt[i].tolist() for i in idx], self.tgt.mask_token_id, self.tgt.pad_token_id,
                             torch.Generator().manual_seed(seed))
        return {"source": source, "source_keep": keep, **batch}

    def _collate(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        # the masks of update n depend on (seed, n) only: a resumed run masks the same pieces
        return self._masked_batch(self.data, idx, self.cfg.seed * 1_000_003 + self.state.step)

    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        loss, _ = cmlm_loss(self.model, batch["source"], batch["source_keep"], batch, self.cfg.label_smoothing,
                            self.length_weight)
        return loss

    def _dev_bleu(self) -> float:
        hyps, _ = translate_abnet(self.model, self.src, self.tgt, self.dev_src, self.decoding)
        return round(sacrebleu.corpus_bleu(hyps, [self.dev_ref]).score, 2)

    @torch.inference_mode()
    def _dev_loss(self) -> float:
        """The dev pairs' loss (no label smoothing) in batches of 32 by target length, each weighted as
        `_dev_batch` says."""
        was_training = self.model.training
        self.model.eval()
        total, weight = 0.0, 0
        order = np.argsort([len(t) for t in self.dev_data.tgt])
        for start in range(0, len(order), 32):
            loss, w = self._dev_batch(order[start : start + 32], start)
            total += loss * w
            weight += w
        self.model.train(was_training)
        return round(total / max(weight, 1), 4)

    def _dev_batch(self, idx: np.ndarray, start: int) -> tuple[float, int]:
        """The conditional masked-LM loss with fixed masks, weighted by sentences."""
        batch = {k: v.to(self.device) for k, v in self._masked_batch(self.dev_data, idx, 7919 + start).items()}
        loss, _ = cmlm_loss(self.model, batch["source"], batch["source_keep"], batch, 0.0, self.length_weight)
        return loss.item(), len(idx)


class AbnetEncTrainer(AbnetTrainer):
    """AB-Net-Enc: teacher-forced cross-entropy, greedy dev BLEU, teacher-forced dev loss."""

    def _collate(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        source, keep = pad_sources([self.data.src[i] for i in idx], self.src.pad_token_id)
        target, target_keep = pad_sources([self.data.tgt[i] for i in idx], self.tgt.pad_token_id)
        return {"source": source, "source_keep": keep, "target": target, "target_keep": target_keep}

    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return seq2seq_loss(self.model, batch["source"], batch["source_keep"], batch["target"], batch["target_keep"],
                            self.cfg.label_smoothing)

    def _dev_pieces_loss(self, source, keep, target, target_keep) -> torch.Tensor:
        return seq2seq_loss(self.model, source, keep, target, target_keep, 0.0)

    def _dev_batch(self, idx: np.ndarray, start: int) -> tuple[float, int]:
        """Teacher-forced cross-entropy a target piece, weighted by target pieces."""
        source, keep = pad_sources([self.dev_data.src[i] for i in idx], self.src.pad_token_id)
        target, target_keep = pad_sources([self.dev_data.tgt[i] for i in idx], self.tgt.pad_token_id)
        pieces = int(target_keep[:, 1:].sum())
        source, keep, target, target_keep = (t.to(self.device) for t in (source, keep, target, target_keep))
        return self._dev_pieces_loss(source, keep, target, target_keep).item(), pieces


class SponsoredTrainer(AbnetEncTrainer):
    """The PLM-sponsored model: Eq. 9's loss, greedy dev BLEU, teacher-forced translation loss on dev."""

    def _collate(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        # L_MLM's masks and L_T's words depend on (seed, update) only: a resumed run draws the same ones
        batch = super()._collate(idx)
        seed, settings = self.cfg.seed * 1_000_003 + self.state.step, self.model.settings
        if settings.mlm:
            from transformers.data.data_collator import DataCollatorForLanguageModeling

            masker = DataCollatorForLanguageModeling(self.src, mlm_probability=settings.mlm, seed=seed)
            masked = masker([{"input_ids": self.data.src[i].tolist()} for i in idx])
            batch |= {"mlm_source": masked["input_ids"], "mlm_labels": masked["labels"]}
        if settings.target_lm:
            batch["lm_labels"] = auxiliary_labels(batch["target"], batch["target_keep"], settings.target_lm,
                                                  torch.Generator().manual_seed(seed))
        return batch

    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return sponsored_loss(self.model, batch, self.cfg.label_smoothing)[0]

    def _dev_pieces_loss(self, source, keep, target, target_keep) -> torch.Tensor:
        logits, _, _ = self.model(source, keep, target[:, :-1], target_keep[:, :-1])
        return translation_loss(logits, target, target_keep)


TRAINERS = {"abnet": AbnetTrainer, "abnet-enc": AbnetEncTrainer, "plm-nmt": SponsoredTrainer}  # by model_kind


def fit_abnet(model: ABNet | ABNetEnc | PlmSponsored, source_tokenizer, target_tokenizer, corpus: Path, lang, cfg,
              ckpt_dir: Path, fingerprint: dict, name: str, decoding: MaskPredict,
              length_weight: float = 1.0) -> tuple[State, dict]:
    """Train a model of two BERTs (AB-Net, AB-Net-Enc, the PLM-sponsored model) on corpus/train.{src,tgt} with
    dev selection, on the device the model is on; leaves the best weights in `model`."""
    data = encode_pairs(source_tokenizer, target_tokenizer, read_text_lines(corpus / f"train.{lang.src}"),
                        read_text_lines(corpus / f"train.{lang.tgt}"), cfg.max_len)
    if not len(data):
        raise TrainingError(f"{corpus}: no training pair fits max_len={cfg.max_len}")
    dev = (read_text_lines(corpus / f"dev.{lang.src}"), read_text_lines(corpus / f"dev.{lang.tgt}"))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    trainer = TRAINERS[model_kind(model)](model, source_tokenizer, target_tokenizer, data, dev, cfg, ckpt_dir,
                                          fingerprint, name, decoding, length_weight)
    state = trainer.train()
    trainer.load_best()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    summary = {
        "updates": state.step, "best_update": state.best_step, "best_dev_bleu": state.best_bleu,
        "best_dev_loss": state.best_loss, "selected_by": f"dev {cfg.select_by}", "stopped": state.stopped,
        **state.ending(),
        "train_pairs": len(data), "target_tokens_seen": state.target_tokens, "train_seconds": round(state.seconds, 1),
        "target_tokens_per_s": round(state.target_tokens / max(state.seconds, 1e-9), 1),
        "trainable_parameters": trainable, "parameters": sum(p.numel() for p in model.parameters()),
        **trainer.precision.as_metrics(), "threads": torch.get_num_threads(), "device": str(trainer.device),
    }
    return state, summary
