"""How each model family's models are loaded, fine-tuned and saved (the families themselves are described in
`vocabridge.families`, which imports no model code): the Marian models by the one training loop's translation
trainer (`vocabridge.nmt.train.fit`), the AB-Net family by its own (`vocabridge.plm.train.fit_abnet`). The
finetune stage asks `models_of(family)` and never which family it holds."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict
from pathlib import Path
from typing import Any

from vocabridge.errors import ConfigError
from vocabridge.families import ABNET, NMT, ModelFamily
from vocabridge.fileio import atomic_dir
from vocabridge.nmt.model import load_model, save_model
from vocabridge.nmt.train import fit
from vocabridge.plm.abnet import load_abnet, save_abnet
from vocabridge.plm.train import fit_abnet


class FamilyModels(ABC):
    family: ModelFamily

    @abstractmethod
    def load(self, folder: Path, device) -> tuple[Any, Any, Any]:
        """(model on `device`, source vocabulary or tokenizer, target's)."""

    @abstractmethod
    def save(self, model, src, tgt, out: Path) -> None:
        """Written whole or not at all."""

    @abstractmethod
    def fit(self, model, src, tgt, corpus: Path, cfg, checkpoints: Path, fingerprint: str, desc: str, params,
            keep=None) -> tuple[Any, dict]:
        """The fine-tune, resumable from `checkpoints`: (its state, its summary)."""

    def fingerprint_settings(self, params) -> list:
        """Family-wide settings a fine-tune's checkpoints must agree on besides its training config."""
        return []


class MarianModels(FamilyModels):
    family = NMT

    def load(self, folder: Path, device):
        return load_model(folder, str(device))

    def save(self, model, src, tgt, out: Path) -> None:
        with atomic_dir(out) as tmp:
            save_model(model.cpu(), src, tgt, tmp)

    def fit(self, model, src, tgt, corpus, cfg, checkpoints, fingerprint, desc, params, keep=None):
        return fit(model, src, tgt, corpus, params.lang, cfg, checkpoints, fingerprint, desc, keep=keep)


class AbnetModels(FamilyModels):
    family = ABNET

    def load(self, folder: Path, device):
        return load_abnet(folder, device)

    def save(self, model, src, tgt, out: Path) -> None:
        save_abnet(model, out, src, tgt)

    def fit(self, model, src, tgt, corpus, cfg, checkpoints, fingerprint, desc, params, keep=None):
        if keep is not None:
            raise ConfigError("params.yaml: freeze_old_rows and new_rows_first are for translation-model rows")
        return fit_abnet(model, src, tgt, corpus, params.lang, cfg, checkpoints, fingerprint, desc,
                         params.abnet.dev_decoding, params.abnet.length_weight)

    def fingerprint_settings(self, params) -> list:
        return [asdict(params.abnet.dev_decoding), params.abnet.length_weight]


MODELS: dict[str, FamilyModels] = {m.family.name: m for m in (MarianModels(), AbnetModels())}


def models_of(family: ModelFamily | str) -> FamilyModels:
    return MODELS[family if isinstance(family, str) else family.name]
