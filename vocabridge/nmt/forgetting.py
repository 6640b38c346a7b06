"""Fine-tuning that keeps what the pretrained model knew: its rows of the adapted embeddings frozen, the new rows
trained alone first, or original-domain pairs mixed into the batches.

Fine-tuning on the new domain forgets the old one (the pretrained model's original-domain BLEU falls to a tenth in
a few hundred updates). Three remedies, each a knob of a fine-tune (`rows.ROW.*` in the pipeline):

- `freeze_old_rows`: the rows of tokens the pretrained vocabulary has (copied by the transfer) never change, as
  when one adds tokens to a model and trains their embeddings only;
- `new_rows_first: N`: for the first N updates only the new rows train (everything else held), then everything,
  so that the new rows have settled before the rest of the network adapts to them;
- `mix_upstream: s`: a share `s` of the fine-tune's pairs is drawn from the original domain's corpus (mixed
  fine-tuning, Chu et al. 2017).

An adapted model directory says which of its rows are the pretrained model's: `old_rows.json`, the ids of the
tokens its pretrained model's vocabulary has, per side (written by the transfer stage and `vocabridge adapt`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from vocabridge.errors import InputError
from vocabridge.fileio import write_json

OLD_ROWS = "old_rows.json"


def _tokens(model_dir: Path, side: str) -> list[str]:
    """A Marian directory's tokens in id order (vocab.json: source; target_vocab.json, where there is one: target)."""
    path = model_dir / ("target_vocab.json" if side == "target" else "vocab.json")
    if side == "target" and not path.is_file():
        path = model_dir / "vocab.json"  # one vocabulary for both sides
    ids = json.loads(path.read_text(encoding="utf-8"))
    return sorted(ids, key=ids.get)


def write_old_rows(adapted: Path, pretrained: Path) -> dict[str, list[int]]:
    """adapted/old_rows.json: the ids of `adapted`'s tokens that `pretrained`'s vocabulary has, per side."""
    rows = {}
    for side in ("source", "target"):
        known = set(_tokens(pretrained, side))
        rows[side] = [i for i, token in enumerate(_tokens(adapted, side)) if token in known]
    write_json(adapted / OLD_ROWS, rows)
    return rows


def read_old_rows(model_dir: Path) -> dict[str, list[int]]:
    path = Path(model_dir) / OLD_ROWS
    if not path.is_file():
        raise InputError(f"{path}: missing: keeping the pretrained rows needs a model that vocabridge adapted "
                         f"(the transfer stage or `vocabridge adapt` writes it)")
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass
class Keep:
    """What a fine-tune keeps of the pretrained model: which rows are old, and how they are kept."""

    old_rows: dict[str, list[int]] = field(default_factory=dict)  # side -> row ids (read_old_rows)
    frozen: bool = False  # the old rows never train
    new_rows_first: int = 0  # the first N updates train the new rows only

    def holds(self, update: int) -> tuple[bool, bool]:
        """At `update` (from 0): whether the old rows are held, and whether everything but the rows is."""
        staged = update < self.new_rows_first
        return self.frozen or staged, staged


class RowMask:
    """Zeroes the gradients that a `Keep` holds, on a Marian model's embedding matrices (tied ones once)."""

    def __init__(self, model, keep: Keep):
        self.keep = keep
        sides = [(model.model.encoder.embed_tokens.weight, "source"),
                 (model.model.decoder.embed_tokens.weight, "target"), (model.lm_head.weight, "target")]
        rows: dict[int, tuple[torch.nn.Parameter, set[int]]] = {}
        for param, side in sides:
            entry = rows.setdefault(id(param), (param, set()))
            entry[1].update(keep.old_rows.get(side, []))
        self.embeddings = [(param, torch.tensor(sorted(ids), dtype=torch.long, device=param.device))
                           for param, ids in rows.values()]
        self.others = [p for p in model.parameters() if id(p) not in rows]

    def apply(self, update: int) -> None:
        old_held, rest_held = self.keep.holds(update)
        if old_held:
            for param, ids in self.embeddings:
                if param.grad is not None and len(ids):
                    param.grad[ids] = 0
        if rest_held:
            for param in self.others:
                param.grad = None  # Adam skips a parameter without a gradient: it stays as it is
