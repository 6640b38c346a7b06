"""Embedding generators (Liu et al. 2021, §3.2): a new token's row from the rows of its Sm(w) members.

    avg   G(w) = mean of E(w')                                              (Eq. 1, nothing to train)
    att   G(w) = sum softmax(W . E(w')) E(w'),    W a learnable vector       (Eq. 2)
    patt  G(w) = 1/|Sm(w)| sum softmax(W_r . E(w')) E(w'),  W_r by relation (Eq. 3)

Eq. 3 has a 1/|Sm(w)| factor that Eq. 2 and the authors' code do not have: it shrinks every generated row by
the member count, so `patt_scale="code"` (default) leaves it out and "paper" keeps it. Zero-initialised
parameters give uniform attention, so an untrained att generator is avg.
The weights are what the Plan stores: G(w) is a combination of pretrained rows, so the output bias follows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file
from torch import nn

from vocabridge.errors import InputError
from vocabridge.transfer.morph import RELATIONS

Kind = Literal["avg", "att", "patt"]


class Generator(nn.Module):
    def __init__(self, kind: Kind, dim: int, patt_scale: Literal["paper", "code"] = "code"):
        super().__init__()
        self.kind, self.patt_scale = kind, patt_scale
        if kind == "att":
            self.w = nn.Parameter(torch.zeros(dim))
        elif kind == "patt":
            self.w = nn.Parameter(torch.zeros(RELATIONS, dim))
        elif kind != "avg":
            raise ValueError(f"unknown generator {kind!r}")

    def weights(self, members: torch.Tensor, relations: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(n, m) weights over the members' rows `members` (n, m, d); rows without members get zeros."""
        count = mask.sum(1, keepdim=True).clamp_min(1).to(members.dtype)
        if self.kind == "avg":
            return mask.to(members.dtype) / count
        scores = members @ self.w if self.kind == "att" else (members * self.w[relations]).sum(-1)
        weights = torch.softmax(scores.masked_fill(~mask, -torch.inf), dim=1).nan_to_num(0.0)
        if self.kind == "patt" and self.patt_scale == "paper":
            weights = weights / count
        return weights

    def forward(self, emb: torch.Tensor, ids: torch.Tensor, relations: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """G(w) for a batch of tokens given their Sm(w) as padded (ids, relations, mask)."""
        members = emb[ids]
        return (self.weights(members, relations, mask).unsqueeze(-1) * members).sum(1)


def save_generator(gen: Generator, path: Path, model_sha256: str = "") -> None:
    """safetensors with the kind, patt_scale and the sha256 of the model it was trained against (its
    model.safetensors) as metadata; written atomically."""
    from safetensors.torch import save

    from vocabridge.fileio import atomic_file

    tensors = {k: v.detach().cpu().contiguous() for k, v in gen.state_dict().items()}
    with atomic_file(path, "wb", encoding=None) as handle:
        handle.write(sorted_metadata(save(tensors, metadata={"kind": gen.kind, "patt_scale": gen.patt_scale,
                                                             "model_sha256": model_sha256})))


def sorted_metadata(blob: bytes) -> bytes:
    """A safetensors file with its metadata's keys in sorted order: safetensors writes them in a hash map's
    order, which differs from process to process, so the same generator would be other bytes on each run (and
    DVC would see a changed output, and the rows that hash it would rerun)."""
    import json

    size = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + size])
    header["__metadata__"] = dict(sorted(header.get("__metadata__", {}).items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if len(text) > size:
        raise ValueError("safetensors header grew when its metadata was sorted")
    return blob[:8] + text.ljust(size, b" ") + blob[8 + size :]


def load_generator(path: Path, dim: int, model_sha256: str | None = None) -> Generator:
    """A trained generator from safetensors (never pickle). With `model_sha256`, a generator trained against
    another model is an error: its weights only mean something for the embeddings it was trained with."""
    from safetensors import safe_open

    if not Path(path).is_file():
        raise InputError(f"{path}: no trained generator; run `dvc repro generator`")
    with safe_open(str(path), "pt") as handle:
        meta = handle.metadata() or {}
    if model_sha256 is not None and meta.get("model_sha256") != model_sha256:
        trained = (meta.get("model_sha256") or "unknown")[:12]
        raise InputError(f"{path}: generator trained against another model (model.safetensors sha256 {trained}..., "
                         f"this one {model_sha256[:12]}...); run `dvc repro generator`")
    gen = Generator(meta.get("kind", "avg"), dim, meta.get("patt_scale", "paper"))
    state = load_file(str(path))
    if gen.kind != "avg" and state["w"].shape[-1] != dim:
        raise InputError(f"{path}: generator of dimension {state['w'].shape[-1]}, the model's embeddings {dim}")
    gen.load_state_dict(state)
    return gen
