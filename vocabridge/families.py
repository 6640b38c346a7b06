"""The families of translation model a pipeline row fine-tunes, and what differs between them, in one object per
family that the stages ask instead of comparing names:

- `nmt`: the Marian models the pipeline trains (transformers' MarianMTModel: Sato et al., Liu et al., FWET);
- `abnet`: the models on two BERTs that the abnet stage builds (AB-Net and Mask-Predict, AB-Net-Enc, the
  PLM-sponsored model: `vocabridge.plm`), each of a kind (`vocabridge.plm.abnet.KINDS`).

A row's method names its family (`vocabridge.transfer.Method.family`); `family(name)` gives the object; a model
directory says which it holds (`of_model_dir`). This module describes a family and imports no model code (the
transfer methods, the row stage and the report read it); how its models are loaded, trained and saved is
`vocabridge.family_models`. A new family is one more subclass in each, its builder in `vocabridge.transfer` and
its price in the estimator (`flows/estimate.py`). Not to be confused with the architectures of
a practitioner's own model (Marian, NLLB-200, M2M100: `vocabridge.architectures`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, replace
from pathlib import Path

from vocabridge.errors import ConfigError


class ModelFamily(ABC):
    """What the pipeline needs to know of a row's model: where its weights are and what identifies it, its
    fine-tune's budget, which upstream models it can start from and the condition its cells pool under."""

    name: str
    weights_name: str  # the file a model is identified by (what cells pair by, what a checkpoint belongs to)
    upstream_table: str  # params.yaml's table of the upstream models a row of the family can start from
    upstream_label: str  # what those are called in messages
    stamps_condition: bool = False  # its cells pool only under the condition their records carry (model settings
    #                                 that no params digest covers: vocabridge.grid.read_cells' `stamped`)
    forgetting_knobs: bool = False  # the fine-tune's freeze_old_rows, new_rows_first, mix_upstream apply

    def weights(self, folder: Path) -> Path:
        return Path(folder) / self.weights_name

    def sha256(self, weights: Path) -> str:
        """A model's identity: its weights file's sha256."""
        from vocabridge.fileio import sha256_file

        return sha256_file(weights)

    def training(self, params, max_updates: int | None = None):
        """The config a fine-tune of the family runs under, a row's own `max_updates` over it."""
        training = self._training(params)
        return training if max_updates is None else replace(training, max_updates=max_updates)

    @abstractmethod
    def _training(self, params): ...

    @abstractmethod
    def upstream_names(self, params) -> list[str]:
        """The upstream models a row of the family may name (`rows.ROW.upstream`)."""

    def check_upstream(self, row: str, name: str, params) -> None:
        known = self.upstream_names(params)
        if name not in known:
            raise ConfigError(f"params.yaml: rows.{row}.upstream: '{name}' is not an {self.upstream_label}; add "
                              f"{self.upstream_table}.{name} ({self.upstream_label}s: {', '.join(known) or 'none'})")

    def translated_upstream(self, params, upstream: str | None) -> bool:
        """Whether a row's model learned to translate the upstream domain before its fine-tune: every NMT row's
        upstream model did (in-domain, which starts from nothing, keeps the forgetting figure as its floor); an
        AB-Net row's did when its `abnets` entry `upstream` trained upstream. A model that never did has no
        zero-shot dev BLEU to decode (it writes every verse to the length limit) and no upstream translation to
        forget."""
        return True

    @abstractmethod
    def pretrain_condition(self, params, upstream: str) -> tuple[str, dict | None, dict]:
        """How a row's upstream model came to be, for the condition its cells pool under: how its rows started,
        its recipe, and family-wide settings that differ from the defaults."""

    def __repr__(self) -> str:
        return f"<model family {self.name}>"


class Nmt(ModelFamily):
    name, weights_name = "nmt", "model.safetensors"
    upstream_table, upstream_label = "upstreams", "upstream model"
    forgetting_knobs = True

    def _training(self, params):
        return params.finetune.train

    def upstream_names(self, params) -> list[str]:
        return ["base", *sorted(params.upstreams)]

    def pretrain_condition(self, params, upstream: str) -> tuple[str, dict | None, dict]:
        init = "external model" if params.pretrain.external_model else params.pretrain.init
        return init, (asdict(params.upstreams[upstream]) if upstream != "base" else None), {}


class Abnet(ModelFamily):
    name, weights_name = "abnet", "adapters.safetensors"
    upstream_table, upstream_label = "abnets", "AB-Net model"
    stamps_condition = True  # a model that learns from the downstream pairs alone starts alike whatever they say

    def sha256(self, weights: Path) -> str:
        """The whole directory's: a model built alike on other BERTs has the same adapters file."""
        from vocabridge.fileio import sha256_tree

        return sha256_tree(Path(weights).parent)

    def _training(self, params):
        return params.abnet.finetune

    def upstream_names(self, params) -> list[str]:
        return sorted(params.abnets)

    def translated_upstream(self, params, upstream: str | None) -> bool:
        return bool(params.abnets[upstream].upstream)

    def pretrain_condition(self, params, upstream: str) -> tuple[str, dict | None, dict]:
        from vocabridge.config import abnet_settings

        entry = params.abnets[upstream]
        berts = {True: "pretrained BERTs", False: "random", "encoder": "pretrained source BERT, random target",
                 "decoder": "random source, pretrained target BERT"}[entry.plms]
        if entry.decoder == "autoregressive":  # AB-Net-Enc: a decoder of its own, no target BERT
            berts = "pretrained source BERT" if entry.plms in (True, "encoder") else "random"
        init = f"abnet: {berts}" + ("" if entry.upstream else ", no upstream training")
        return init, asdict(entry), abnet_settings(params, upstream)


NMT, ABNET = Nmt(), Abnet()
FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (NMT, ABNET)}
MARKERS = {"abnet.json": ABNET}  # a file only that family's model directories hold


def family(name: str) -> ModelFamily:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r} (known: {', '.join(FAMILIES)})") from None


def of_model_dir(folder: Path) -> ModelFamily:
    """The family of a model directory the pipeline wrote."""
    return next((fam for marker, fam in MARKERS.items() if (Path(folder) / marker).is_file()), NMT)
