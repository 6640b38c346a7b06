"""Speed of Liu et al.'s embedding generator at the papers' size: building Sm(w), generating 16k rows.

    python benchmarks/generator.py                                  # 16k SentencePiece vocabularies, d 512
    python benchmarks/generator.py --old-spm data/spm/upstream/en.model --new-spm data/spm/downstream/en.model

Real vocabularies (Sm(w) depends on the strings): by default two 16k unigram models trained here, the
pretrained one on the upstream (IT) English text and the new one on the downstream (Bible) English text of
the pipeline's corpora (run `dvc repro spm` first); or any two SentencePiece models. Gaussian pretrained rows
(the cost does not depend on their values) and a PATT generator with random relation vectors. Timed:
- the Sm(w) index over the pretrained vocabulary (every substring of every token);
- Sm(w) for every new token (subwords from the pretrained tokenizer, hyperwords from the index);
- the generator's weights and the rows of all new tokens (one batched pass).

The project's goals: Sm(w) for a 16k vocabulary under 30 s, generating the rows under 10 s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vocabridge.config import SpmModel  # noqa: E402
from vocabridge.corpora.user import read_text_lines  # noqa: E402
from vocabridge.nmt.vocab import Vocab  # noqa: E402
from vocabridge.tokenizers import train_spm  # noqa: E402
from vocabridge.transfer.generator import Generator  # noqa: E402
from vocabridge.transfer.morph import MorphIndex  # noqa: E402


def spm_model(path: str | None, texts: list[Path], size: int, work: Path, name: str) -> Path:
    if path:
        return Path(path)
    lines = [line for t in texts if t.is_file() for line in read_text_lines(t)]
    out = work / f"{name}.model"
    out.write_bytes(train_spm(lines, SpmModel(vocab_size=size, hard_vocab_limit=False), 1, 2, name))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-spm", help="the pretrained SentencePiece model (default: 16k on upstream English)")
    parser.add_argument("--new-spm", help="the new SentencePiece model (default: 16k on downstream English)")
    parser.add_argument("--size", type=int, default=16000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    corpora = Path("data/corpora")
    with tempfile.TemporaryDirectory() as tmp:
        old_path = spm_model(args.old_spm, [corpora / "upstream/train.en"], args.size, Path(tmp), "old")
        new_path = spm_model(args.new_spm, [corpora / "downstream/train.en", corpora / "downstream/mono.en"],
                             args.size, Path(tmp), "new")
        old, new = Vocab.from_spm(old_path), Vocab.from_spm(new_path)
    old_set = set(old.tokens)
    unseen = [t for t in new.tokens if t not in old_set and not t.startswith("<")]
    print(f"vocabularies: pretrained {len(old)}, new {len(new)}, new tokens not in the pretrained one {len(unseen)}")

    started = time.perf_counter()
    index = MorphIndex(old.tokens, spm.SentencePieceProcessor(model_proto=old.spm_bytes), args.members)
    t_index = time.perf_counter() - started
    started = time.perf_counter()
    ids, rel, mask = index.batch(unseen)
    t_sm = time.perf_counter() - started
    emb = torch.randn(len(old), args.dim)
    gen = Generator("patt", args.dim, "code")
    with torch.no_grad():
        gen.w.normal_()
        started = time.perf_counter()
        rows = gen(emb, torch.from_numpy(ids), torch.from_numpy(rel), torch.from_numpy(mask))
        t_rows = time.perf_counter() - started
    sizes = mask.sum(1)
    print(f"Sm(w): mean {sizes.mean():.2f} members, {int((sizes == 0).sum())} tokens without any "
          f"(they fall back to random rows)")
    print(f"index over the pretrained vocabulary: {t_index:6.2f} s")
    print(f"Sm(w) of {len(unseen)} new tokens:       {t_sm:6.2f} s")
    print(f"generator rows ({tuple(rows.shape)}):   {t_rows:6.2f} s")
    total = t_index + t_sm
    print(f"Sm(w) total {total:.2f} s (goal < 30 s: {'met' if total < 30 else 'missed'}); "
          f"rows {t_rows:.2f} s (goal < 10 s: {'met' if t_rows < 10 else 'missed'})")
    print(f"threads {torch.get_num_threads()}, numpy {np.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
