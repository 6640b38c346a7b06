"""Decoding the PLM-sponsored model one piece a step (`Prefixes`: the target BERT's key/value cache and each
coordinator layer's keys and values so far) against its peers, side by side.

Greedy (default): `Prefixes` against the coordinator projecting its whole [r^S; r^T; r_{j-1}] again at every step
(`re-projecting`; the target BERT still cached), and rerunning the decoder over the whole prefix every step (`whole
prefix`). The model has the default profile's
sizes (plm.arch: two 4x256 BERTs, the default coordinator, an 8,000-piece vocabulary) with random weights, trained
on nothing, so that every hypothesis runs to `--max-len` pieces: the per-step cost is what is compared.

    python benchmarks/sponsored_decoding.py [--sentences 32] [--max-len 60] [--repeat 2]

Beam search (`--beam 5 --model DIR --source FILE`: a fine-tuned PLM-sponsored model directory and sentences to
translate, e.g. data/models/finetuned/plm-nmt/s1 and data/corpora/downstream/test.de of a workspace), in batches of
`--batch` sentences as the evaluate stage decodes: `beam_search` (a sentence whose search ended leaves the batch;
the target BERT's and the coordinator's keys and values in buffers, reordered without allocating, the
coordinator's by their target part only) against the same search concatenating each step's keys and values onto
the whole of them (the target BERT's in transformers' DynamicCache), gathering the whole into new tensors at every
reordering and keeping ended sentences in the batch to its end (`whole batch`).

Prints sentences/s of each, the ratios, whether all chose the same pieces, and the CPU (torch's capability, native
bf16).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM

from vocabridge.config import BertArch, Sponsored
from vocabridge.corpora.user import read_text_lines
from vocabridge.nmt.precision import describe_cpu
from vocabridge.plm.abnet import load_abnet
from vocabridge.plm.bert import additive_mask
from vocabridge.plm.sponsored import PlmSponsored, Prefixes, beam_search, greedy_search, restrict, survivors
from vocabridge.plm.train import pad_sources, special_ids


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


class Concatenating(Prefixes):
    """The beam peer's storage: each coordinator layer's keys and values, and the target BERT's (transformers'
    DynamicCache), concatenated onto the whole of them at every step, and the whole gathered into new tensors at
    every reordering."""

    def __init__(self, model: PlmSponsored, r_s: torch.Tensor, source_keep: torch.Tensor):
        from transformers.cache_utils import DynamicCache

        super().__init__(model, r_s, source_keep, steps=0)
        self.cache = DynamicCache()
        self.kv = [buffer[:, :, : self.start] for buffer in self.buffers]
        self.mask = additive_mask(source_keep, r_s.dtype)

    def extend(self, pieces: torch.Tensor) -> torch.Tensor:
        h, r = self.target_step(pieces)
        self.mask = F.pad(self.mask, (0, 2))
        for j, layer in enumerate(self.model.coordinator.layers):
            pair = zip(self.kv[2 * j : 2 * j + 2], layer.keys_values(torch.cat([h, r], dim=1)), strict=True)
            self.kv[2 * j : 2 * j + 2] = [torch.cat([old, new], 2) for old, new in pair]
            r = layer.step(r, *self.kv[2 * j : 2 * j + 2], self.mask)
        return self.model.target_bert.cls(r)[:, -1].float()

    def select(self, rows: torch.Tensor, same_sources: bool = False) -> None:
        self.cache.reorder_cache(rows)
        self.kv, self.mask = [kv[rows] for kv in self.kv], self.mask[rows]


@torch.inference_mode()
def whole_batch_beam_search(model: PlmSponsored, source: torch.Tensor, source_keep: torch.Tensor,
                            special: dict[str, int], beam: int, max_len: int) -> list[list[int]]:
    """The beam peer: `beam_search`'s hypotheses and scores (length penalty 1) over `Concatenating`, every
    sentence's beam in the batch until the last ends."""
    sentences = len(source)
    prefixes = Concatenating(model, model.encode(source, source_keep)[0].repeat_interleave(beam, 0),
                             source_keep.repeat_interleave(beam, 0))
    seqs = torch.full((sentences * beam, 1), special["cls"], dtype=torch.long)
    scores = torch.full((sentences, beam), -torch.inf)
    scores[:, 0] = 0.0
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(sentences)]
    done = [False] * sentences
    for step in range(max_len + 1):
        logits = restrict(prefixes.extend(seqs[:, -1]), special, step == max_len)
        vocab = logits.shape[1]
        top, index = (scores.reshape(-1, 1) + logits.log_softmax(-1)).reshape(sentences, -1).topk(2 * beam, dim=1)
        rows, tokens, kept = [], [], torch.full((sentences, beam), -torch.inf)
        for b in range(sentences):
            chosen, pieces, alive = ([], [], []) if done[b] else survivors(
                top[b].tolist(), index[b].tolist(), vocab, beam, b * beam, seqs, special, 1.0, finished[b])
            kept[b, : len(alive)] = torch.tensor(alive)
            best_alive = (alive[0] if alive else -torch.inf) / (step + 1)
            done[b] = done[b] or (len(finished[b]) == beam and best_alive <= finished[b][-1][0])
            rows += chosen + [b * beam] * (beam - len(chosen))  # every sentence keeps its beam in the batch
            tokens += pieces + [special["pad"]] * (beam - len(chosen))
        if all(done):
            break
        seqs = torch.cat([seqs[rows], torch.tensor(tokens)[:, None]], dim=1)
        prefixes.select(torch.tensor(rows))
        scores = kept
    return [f[0][1] if f else [] for f in finished]


def beam_main(args: argparse.Namespace) -> None:
    """Beam search over a fine-tuned model's translations of `--source`, in batches of similar length."""
    model, source_tokenizer, target_tokenizer = load_abnet(Path(args.model))
    model.eval()
    special = special_ids(target_tokenizer)
    longest = model.source_bert.config.max_position_embeddings - 1
    ids = source_tokenizer(read_text_lines(Path(args.source))[: args.sentences], add_special_tokens=True,
                           truncation=True, max_length=longest)["input_ids"]
    order = np.argsort([len(x) for x in ids], kind="stable")
    batches = [pad_sources([ids[i] for i in order[start : start + args.batch]], source_tokenizer.pad_token_id)
               for start in range(0, len(order), args.batch)]
    peers = {"beam_search": lambda s, k: beam_search(model, s, k, special, args.beam, 1.0, args.max_len),
             "whole batch": lambda s, k: whole_batch_beam_search(model, s, k, special, args.beam, args.max_len)}
    report(args, peers, batches, f"beam {args.beam}, {len(ids)} sentences of {args.source} in batches of "
                                 f"{args.batch}, at most {args.max_len} pieces; {args.model}")


def report(args: argparse.Namespace, peers: dict, batches: list, what: str) -> None:
    """Each peer over every batch, alternating, `--repeat` times; the fastest run counts."""
    sentences = sum(len(source) for source, _ in batches)
    best, outputs = dict.fromkeys(peers, float("inf")), {}
    for _ in range(args.repeat):
        for name, search in peers.items():
            start = time.perf_counter()
            outputs[name] = [pieces for source, keep in batches for pieces in search(source, keep)]
            best[name] = min(best[name], time.perf_counter() - start)
    cpu = describe_cpu()
    print(f"CPU: {cpu['cpu']}, torch capability {cpu['capability']}, native bf16 "
          f"{'yes' if cpu['bf16_native'] else 'no'}, {cpu['threads']} threads; fp32; {what}")
    for name, seconds in best.items():
        print(f"{name:>14}: {sentences / seconds:7.2f} sentences/s ({seconds:.2f} s)")
    first, *others = best
    print("ratios: " + ", ".join(f"{name} / {first} {best[name] / best[first]:.2f}x" for name in others)
          + f"; same pieces: {len(set(map(str, outputs.values()))) == 1}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--source-len", type=int, default=40)
    parser.add_argument("--max-len", type=int, default=60)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each, alternating; the fastest counts")
    parser.add_argument("--beam", type=int, default=1, help="above 1: beam search, with --model and --source")
    parser.add_argument("--model", help="a fine-tuned PLM-sponsored model directory (beam search)")
    parser.add_argument("--source", help="sentences to translate, one a line (beam search)")
    parser.add_argument("--batch", type=int, default=32, help="sentences a batch (beam search)")
    args = parser.parse_args()
    torch.set_num_threads(int(__import__("os").environ.get("VOCABRIDGE_THREADS", torch.get_num_threads())))
    if args.beam > 1:
        if not (args.model and args.source):
            parser.error("--beam above 1 needs --model and --source")
        beam_main(args)
        return
    size = BertArch()
    model = PlmSponsored(bert(size, args.vocab, 1), bert(size, args.vocab, 2), None, Sponsored(distill=False)).eval()
    special = {"pad": 0, "cls": 2, "sep": 3, "mask": 4}
    torch.manual_seed(0)
    source = torch.randint(5, args.vocab, (args.sentences, args.source_len))
    keep = torch.ones_like(source)
    peers = {"Prefixes": greedy_search, "re-projecting": reprojecting_greedy, "whole prefix": whole_prefix_greedy}
    report(args, {name: (lambda s, k, search=search: search(model, s, k, special, args.max_len))
                  for name, search in peers.items()}, [(source, keep)],
           f"greedy, {args.sentences} random sentences, up to {args.max_len} pieces each")


if __name__ == "__main__":
    main()
