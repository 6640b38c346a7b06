"""Decoding the PLM-sponsored model one piece a step (`Prefixes`: the target BERT's key/value cache and each
coordinator layer's keys and values so far) against two peers, side by side: the coordinator projecting its whole
[r^S; r^T; r_{j-1}] again at every step (the target BERT still cached), and rerunning the decoder over the whole
prefix every step.

    python benchmarks/sponsored_decoding.py [--sentences 32] [--max-len 60] [--repeat 2]

The model has the default profile's sizes (plm.arch: two 4x256 BERTs, the default coordinator, an 8,000-piece
vocabulary) with random weights, trained on nothing, so that every hypothesis runs to `--max-len` pieces: the
per-step cost is what is compared. Prints sentences/s of each greedy search, the ratios, whether all chose the same
pieces, and the CPU (torch's capability, native bf16).
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import BertConfig, BertForMaskedLM

from vocabridge.config import BertArch, Sponsored
from vocabridge.nmt.precision import describe_cpu
from vocabridge.plm.sponsored import PlmSponsored, Prefixes, greedy_search, restrict


def bert(size: BertArch, vocab: int, seed: int) -> BertForMaskedLM:
    torch.manual_seed(seed)
    return BertForMaskedLM(BertConfig(vocab_size=vocab, hidden_size=size.hidden, num_hidden_layers=size.layers,
                                      num_attention_heads=size.heads, intermediate_size=size.ffn,
                                      max_position_embeddings=size.max_positions)).eval()


@torch.inference_mode()
def whole_prefix_greedy(model: PlmSponsored, source: torch.Tensor, keep: torch.Tensor, special: dict[str, int],
                        max_len: int) -> list[list[int]]:
    """The peer: every step runs the target BERT and the coordinator over the whole prefix (no cache)."""
    r_s, _ = model.encode(source, keep)
    out = torch.full((len(source), 1), special["cls"], dtype=torch.long)
    for step in range(max_len + 1):
        ones = torch.ones_like(out)
        logits = model.coordinate(r_s, keep, model.target_states(out, ones), ones)[:, -1].float()
        out = torch.cat([out, restrict(logits, special, step == max_len).argmax(-1)[:, None]], dim=1)
        if (out == special["sep"]).any(1).all():
            break
    return [row[1:row.index(special["sep"])] if special["sep"] in row else row[1:] for row in out.tolist()]


class Reprojecting(Prefixes):
    """The peer that keeps the coordinator's inputs, not their projections: each step, every layer projects the
    source, r^T and its inputs so far again (nn.MultiheadAttention over all of them, the query the new row only)."""

    def __init__(self, model: PlmSponsored, r_s: torch.Tensor, source_keep: torch.Tensor):
        super().__init__(model, r_s, source_keep)
        self.r_s, self.source_padding = r_s, source_keep == 0
        empty = r_s.new_zeros(len(r_s), 0, r_s.shape[-1])
        self.r_t, self.inputs = empty, [empty] * len(model.coordinator.layers)

    def extend(self, pieces: torch.Tensor) -> torch.Tensor:
        h, r = self.target_step(pieces)
        self.r_t = torch.cat([self.r_t, h], dim=1)
        padding = torch.cat([self.source_padding, self.source_padding.new_zeros(len(h), 2 * self.length)], 1)
        for j, layer in enumerate(self.model.coordinator.layers):
            self.inputs[j] = torch.cat([self.inputs[j], r], dim=1)
            r = layer(self.inputs[j], self.r_s, self.r_t, None, padding, last=1)
        return self.model.target_bert.cls(r)[:, -1].float()


@torch.inference_mode()
def reprojecting_greedy(model: PlmSponsored, source: torch.Tensor, keep: torch.Tensor, special: dict[str, int],
                        max_len: int) -> list[list[int]]:
    """greedy_search's loop over the `Reprojecting` peer."""
    prefixes = Reprojecting(model, model.encode(source, keep)[0], keep)
    out = torch.full((len(source), 1), special["cls"], dtype=torch.long)
    for step in range(max_len + 1):
        chosen = restrict(prefixes.extend(out[:, -1]), special, step == max_len).argmax(-1)
        out = torch.cat([out, chosen[:, None]], dim=1)
        if (out == special["sep"]).any(1).all():
            break
    return [row[1:row.index(special["sep"])] if special["sep"] in row else row[1:] for row in out.tolist()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--source-len", type=int, default=40)
    parser.add_argument("--max-len", type=int, default=60)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, alternating; the fastest counts")
    args = parser.parse_args()
    size = BertArch()
    model = PlmSponsored(bert(size, args.vocab, 1), bert(size, args.vocab, 2), None, Sponsored(distill=False)).eval()
    special = {"pad": 0, "cls": 2, "sep": 3, "mask": 4}
    torch.manual_seed(0)
    source = torch.randint(5, args.vocab, (args.sentences, args.source_len))
    keep = torch.ones_like(source)
    peers = {"one piece a step (Prefixes)": greedy_search, "coordinator re-projects": reprojecting_greedy,
             "whole prefix each step": whole_prefix_greedy}
    best, outputs = dict.fromkeys(peers, float("inf")), {}
    for _ in range(args.repeat):
        for name, search in peers.items():
            start = time.perf_counter()
            outputs[name] = search(model, source, keep, special, args.max_len)
            best[name] = min(best[name], time.perf_counter() - start)
    cpu = describe_cpu()
    print(f"CPU: {cpu['cpu']}, torch capability {cpu['capability']}, native bf16 "
          f"{'yes' if cpu['bf16_native'] else 'no'}, {cpu['threads']} threads; fp32; {args.sentences} sentences, "
          f"up to {args.max_len} pieces each")
    for name, seconds in best.items():
        print(f"{name:>28}: {args.sentences / seconds:7.2f} sentences/s ({seconds:.2f} s)")
    cached, reprojecting, whole = best.values()
    print(f"ratios: re-projecting / Prefixes {reprojecting / cached:.2f}x, whole prefix / Prefixes "
          f"{whole / cached:.2f}x; same pieces: {len(set(map(str, outputs.values()))) == 1}")


if __name__ == "__main__":
    main()
