"""`vocabridge translate` on an NLLB-200 / M2M100 directory: CTranslate2 (converted from the directory) against
transformers' generate, same model, same lines, same beam, side by side in one process.

    python benchmarks/shared_decode_speed.py --input data/corpora/downstream/test.de --sentences 200
    python benchmarks/shared_decode_speed.py --model DIR --src-lang deu_Latn --tgt-lang eng_Latn --input FILE

Without --model it builds an M2M100 model of the given size with random weights and an M2M100 tokenizer trained
on the input's lines (nothing is downloaded; a random model writes every line to the length limit, so both
decoders do the same, longest, work). Prints the CPU, sentences/s of each, the ratio and how many outputs are
identical (greedy: all; beam search: nearly all, see vocabridge/ct2.py). Each runs `--repeat` times, alternating;
the fastest counts.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build_m2m100(lines: list[str], out: Path, d_model: int, layers: int, vocab_size: int) -> Path:
    """A random M2M100 directory with an M2M100 tokenizer over a SentencePiece model trained on `lines`."""
    import sentencepiece as spm
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    out.mkdir(parents=True, exist_ok=True)
    blob = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=blob, model_type="bpe",
                                   vocab_size=vocab_size, hard_vocab_limit=False, minloglevel=2)
    (out / "sentencepiece.bpe.model").write_bytes(blob.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=blob.getvalue())
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3} | {sp.id_to_piece(i): i + 1
                                                            for i in range(3, sp.get_piece_size())}
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tok = M2M100Tokenizer(vocab_file=str(out / "vocab.json"), spm_file=str(out / "sentencepiece.bpe.model"))
    rows = max([len(tok), *[i + 1 for i in tok.lang_token_to_id.values()]])
    config = M2M100Config(vocab_size=rows, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
                          encoder_attention_heads=max(1, d_model // 64), decoder_attention_heads=max(1, d_model // 64),
                          encoder_ffn_dim=4 * d_model, decoder_ffn_dim=4 * d_model, max_position_embeddings=256,
                          scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                          decoder_start_token_id=2)
    torch.manual_seed(0)
    M2M100ForConditionalGeneration(config).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def main() -> None:
    from vocabridge.nmt.precision import describe_cpu
    from vocabridge.nmt.shared import translate_lines, translate_lines_ct2

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="an NLLB-200 or M2M100 directory (default: build one)")
    parser.add_argument("--input", type=Path, default=Path("data/corpora/downstream/test.de"))
    parser.add_argument("--src-lang", default="de")
    parser.add_argument("--tgt-lang", default="en")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=256, help="the built model's width (default %(default)s)")
    parser.add_argument("--layers", type=int, default=3, help="its encoder and decoder layers (default %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=4000)
    args = parser.parse_args()

    lines = [ln for ln in args.input.read_text(encoding="utf-8").splitlines() if ln.strip()]
    sample = lines[: args.sentences]
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="vocabridge-bench-") as tmp:
        model = args.model or build_m2m100(lines, Path(tmp) / "m2m100", args.d_model, args.layers, args.vocab_size)
        best: dict[str, tuple[float, list[str]]] = {}
        for _ in range(args.repeat):
            for name in ("transformers", "ctranslate2"):
                if name == "ctranslate2":
                    hyps, speed = translate_lines_ct2(model, sample, args.src_lang, args.tgt_lang, beam=args.beam,
                                                       threads=args.threads)
                else:
                    hyps, speed = translate_lines(model, sample, args.src_lang, args.tgt_lang, torch.device("cpu"),
                                                  beam=args.beam)
                if name not in best or speed["sentences_per_second"] > best[name][0]:
                    best[name] = (speed["sentences_per_second"], hyps)
    (hf, hf_hyps), (ct, ct_hyps) = best["transformers"], best["ctranslate2"]
    same = sum(a == b for a, b in zip(hf_hyps, ct_hyps, strict=True))
    built = f"built: M2M100 d_model {args.d_model}, {args.layers}+{args.layers} layers, random weights"
    print(f"CPU: {describe_cpu()}; {args.threads} threads; {len(sample)} lines of {args.input}, beam {args.beam}; "
          f"model {args.model or built}")
    print(f"transformers {hf:.2f} sent/s, ctranslate2 {ct:.2f} sent/s: ctranslate2 / transformers = {ct / hf:.2f}x; "
          f"identical outputs {same}/{len(sample)}")


if __name__ == "__main__":
    main()
