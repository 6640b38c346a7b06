"""CTranslate2 decoding of a Marian model directory (the `bench` extra): conversion and batched beam search.

CTranslate2's Marian converter writes one shared vocabulary (the source side's); a model with separate
source and target vocabularies gets both written back here, without `<pad>`, as CTranslate2 expects.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from vocabridge.nmt.vocab import Vocab


def convert(model_dir: Path, out: Path, src: Vocab, tgt: Vocab) -> Path:
    import ctranslate2

    ctranslate2.converters.TransformersConverter(str(model_dir)).convert(str(out), force=True)
    (out / "shared_vocabulary.json").unlink(missing_ok=True)
    (out / "source_vocabulary.json").write_text(json.dumps(src.tokens[:-1], ensure_ascii=False), encoding="utf-8")
    (out / "target_vocabulary.json").write_text(json.dumps(tgt.tokens[:-1], ensure_ascii=False), encoding="utf-8")
    return out


def translate_ct2(model_dir: Path, src: Vocab, tgt: Vocab, lines: list[str], *, beam: int = 5,
                  length_penalty: float = 1.0, batch_tokens: int = 6000, threads: int = 2, max_len_a: float = 1.5,
                  max_len_b: int = 10, device: str = "cpu") -> tuple[list[str], dict]:
    """Same contract as nmt.translate.translate: hypotheses in input order and speed figures."""
    import ctranslate2

    with tempfile.TemporaryDirectory(prefix="vocabridge-ct2-") as tmp:
        translator = ctranslate2.Translator(str(convert(Path(model_dir), Path(tmp), src, tgt)), device=device,
                                            intra_threads=threads)
        tokens = [src.sp.encode(line, out_type=str) + ["</s>"] for line in lines]
        longest = max((len(t) for t in tokens), default=1)
        started = time.perf_counter()
        results = translator.translate_batch(tokens, beam_size=beam, length_penalty=length_penalty,
                                             max_batch_size=batch_tokens, batch_type="tokens",
                                             max_decoding_length=int(longest * max_len_a) + max_len_b)
        seconds = time.perf_counter() - started
    pieces = [r.hypotheses[0] for r in results]
    hyps = [tgt.sp.decode_pieces([p for p in hyp if p not in ("</s>", "<unk>")]) for hyp in pieces]
    return hyps, {"seconds": round(seconds, 3), "sentences_per_second": round(len(lines) / max(seconds, 1e-9), 2),
                  "mean_output_tokens": round(float(np.mean([len(p) + 1 for p in pieces])) if pieces else 0.0, 2)}
