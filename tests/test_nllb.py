"""NLLB-200 and M2M100 model directories through `adapt`, `finetune` and `translate`: tiny models and tokenizers
built here from a SentencePiece model trained on a few hundred lines (nothing is downloaded)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tests.conftest import DE_BIBLE, DE_IT, EN_BIBLE, EN_IT, cli

# family: (source code, target code, a code the model does not know)
LANGS = {"nllb": ("deu_Latn", "eng_Latn", "deu_Latx"), "m2m100": ("de", "en", "xx")}
HEAD = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}


def _spm_file(path: Path) -> Path:
    """A BPE SentencePiece model as NLLB's and M2M100's (`<unk>`, `<s>`, `</s>` = 0, 1, 2), on the IT lines."""
    blob = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(DE_IT + EN_IT), model_writer=blob, model_type="bpe",
                                   vocab_size=60, hard_vocab_limit=False, minloglevel=2)
    path.write_bytes(blob.getvalue())
    return path


def _tokenizer(family: str, out: Path):
    """The family's own tokenizer class over the SentencePiece model, in fairseq's layout."""
    from transformers import M2M100Tokenizer, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    sp = spm.SentencePieceProcessor(model_file=str(_spm_file(out / "sentencepiece.bpe.model")))
    vocab = HEAD | {sp.id_to_piece(i): i + 1 for i in range(3, sp.get_piece_size())}
    if family == "m2m100":
        (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        return M2M100Tokenizer(vocab_file=str(out / "vocab.json"), spm_file=str(out / "sentencepiece.bpe.model"))
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    extracted = SentencePieceExtractor(str(out / "sentencepiece.bpe.model")).extract(BPE)
    vocab |= {code: len(vocab) + i for i, code in enumerate([*FAIRSEQ_LANGUAGE_CODES, "<mask>"])}
    return NllbTokenizer(vocab=vocab, merges=extracted["merges"], additional_special_tokens=FAIRSEQ_LANGUAGE_CODES,
                         _spm_precompiled_charsmap=extracted["_spm_precompiled_charsmap"])


@pytest.fixture(scope="module", params=["nllb", "m2m100"])
def pretrained(request, tmp_path_factory) -> tuple[str, Path]:
    """A tiny model of the family (a few spare rows past the tokenizer's ids, as the real ones have) and Bible
    text it was not made for."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    family = request.param
    root = tmp_path_factory.mktemp(family)
    model_dir = root / "model"
    model_dir.mkdir()
    tok = _tokenizer(family, model_dir)
    codes = getattr(tok, "lang_token_to_id", {})
    rows = max([len(tok), *[i + 1 for i in codes.values()]]) + 2
    config = M2M100Config(vocab_size=rows, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, dropout=0.0,
                          attention_dropout=0.0, max_position_embeddings=64, scale_embedding=True, pad_token_id=1,
                          bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    torch.manual_seed(0)
    M2M100ForConditionalGeneration(config).save_pretrained(model_dir, safe_serialization=True)
    tok.save_pretrained(model_dir)
    (root / "bible.de").write_text("\n".join(DE_BIBLE) + "\n", encoding="utf-8")
    (root / "bible.en").write_text("\n".join(EN_BIBLE) + "\n", encoding="utf-8")
    return family, root


def _adapt(root: Path, out: Path, *args: str):
    return cli("adapt", "--model", str(root / "model"), "--src-text", str(root / "bible.de"), "--tgt-text",
               str(root / "bible.en"), "--out", str(out), "--vocab-size", "60", *args)


def _rows(model_dir: Path) -> dict[str, torch.Tensor]:
    """Each token's embedding row, by the tokenizer's id."""
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, use_safetensors=True, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    vocab = dict(tok.get_vocab()) | dict(getattr(tok, "lang_token_to_id", {}))
    weight = model.get_input_embeddings().weight.detach()
    return {t: weight[i] for t, i in vocab.items() if i < weight.shape[0]}


def test_adapt_then_finetune_then_translate(pretrained):
    family, root = pretrained
    src_lang, tgt_lang, _ = LANGS[family]
    adapted, tuned = root / "adapted", root / "tuned"
    proc = _adapt(root, adapted, "--method", "fvt")
    assert proc.returncode == 0, proc.stderr[-2000:]
    diagnostics = json.loads((adapted / "diagnostics.json").read_text())
    assert diagnostics["architecture"] == family and diagnostics["shared"]["rows"]["projected"] > 0
    model = AutoModelForSeq2SeqLM.from_pretrained(adapted, use_safetensors=True, local_files_only=True)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()  # still tied
    old, new = _rows(root / "model"), _rows(adapted)
    kept = [t for t in old if t.startswith(("<s>", "<pad>", "</s>", "<unk>", "<mask>", "__")) or "_" in t[1:]]
    assert len(kept) > 100 and all(torch.equal(old[t], new[t]) for t in kept)  # codes and specials: their rows
    fresh = set(new) - set(old)
    assert fresh and all(p.lstrip("▁") in " ".join(DE_BIBLE + EN_BIBLE) for p in fresh)
    pairs = ["--src-train", str(root / "bible.de"), "--tgt-train", str(root / "bible.en"),
             "--src-dev", str(root / "bible.de"), "--tgt-dev", str(root / "bible.en")]
    options = ["--max-updates", "6", "--eval-every", "3", "--checkpoint-every", "3", "--batch-tokens", "300",
               "--dev-sentences", "5", "--threads", "1", "--bf16", "false", "--warmup", "2", "--lr", "0.003"]
    proc = cli("finetune", "--model", str(adapted), *pairs, "--out", str(tuned), *options, "--src-lang", src_lang,
               "--tgt-lang", tgt_lang)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tuned / "metrics.json").read_text())["updates"] == 6
    hyp = root / "hyp.en"
    proc = cli("translate", "--model", str(tuned), "--input", str(root / "bible.de"), "--output", str(hyp),
               "--beam", "1", "--threads", "1", "--device", "cpu", "--src-lang", src_lang, "--tgt-lang", tgt_lang)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = hyp.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(ours) == len(DE_BIBLE)
    # what a user of transformers gets from the directory alone: the same ids in, the same translation out
    tok = AutoTokenizer.from_pretrained(tuned, local_files_only=True, src_lang=src_lang, tgt_lang=tgt_lang)
    model = AutoModelForSeq2SeqLM.from_pretrained(tuned, use_safetensors=True, local_files_only=True)
    from vocabridge.nmt.shared import load_vocab
    from vocabridge.nmt.vocab import fit_positions

    vocab = load_vocab(tuned).for_lang(src_lang, tuned)
    assert [list(x) for x in vocab.encode(DE_BIBLE[:3])] == tok(DE_BIBLE[:3])["input_ids"]
    long = vocab.encode([" ".join(DE_BIBLE)])[0]  # past the model's 64 positions: cut as the tokenizer cuts it
    assert len(long) > 64
    assert list(fit_positions(long, 64)) == tok([" ".join(DE_BIBLE)], truncation=True, max_length=64)["input_ids"][0]
    budget = int(max(map(len, vocab.encode(DE_BIBLE))) * 1.5) + 10  # translate's length limit
    with torch.no_grad():
        out = model.generate(**tok(DE_BIBLE[:3], return_tensors="pt", padding=True), num_beams=1, do_sample=False,
                             max_new_tokens=budget)
    assert (out[:, 1] == model.generation_config.forced_bos_token_id).all()  # the target's code first
    theirs = [tok.decode(row[2:], skip_special_tokens=True) for row in out]  # after </s> and the code
    assert theirs == ours[:3]


@pytest.mark.parametrize("args", [["--method", "va-llm", "--k", "3"], ["--method", "fwet", "--extend", "5"]])
def test_adapt_with_vectors_and_extending(pretrained, args):
    family, root = pretrained
    out = root / f"adapted{'-'.join(args)}"
    proc = _adapt(root, out, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    diagnostics = json.loads((out / "diagnostics.json").read_text())
    old, new = _rows(root / "model"), _rows(out)
    if "--extend" in args:  # every pretrained token keeps its row; the appended pieces shorten the verses
        assert diagnostics["extension"]["pieces_saved"] > 0
        assert set(old) <= set(new) and all(torch.equal(old[t], new[t]) for t in old)
        from vocabridge.nmt.shared import load_vocab  # the tokenizer merges the appended pieces as we do

        tok = AutoTokenizer.from_pretrained(out, local_files_only=True, src_lang=LANGS[family][0])
        ours = [list(x) for x in load_vocab(out).for_lang(LANGS[family][0], out).encode(DE_BIBLE[:3])]
        appended = set(tok.convert_tokens_to_ids(sorted(set(new) - set(old))))
        assert ours == tok(DE_BIBLE[:3])["input_ids"] and appended & {i for ids in ours for i in ids}
    else:
        assert diagnostics["shared"]["rows"]["projected"] > 0


def test_distill_fits_the_new_rows_of_the_shared_matrix(pretrained):
    """Token distillation on the one tied matrix: the objective falls, specials, codes and shared pieces keep their
    rows, the output layer stays tied, and it needs the language codes the sentences start with."""
    family, root = pretrained
    src_lang, tgt_lang, _ = LANGS[family]
    start, distilled = root / "fvt-start", root / "fvt-distilled"
    assert _adapt(root, start, "--method", "fvt").returncode == 0
    proc = _adapt(root, distilled, "--method", "distill", "--init-from", "fvt", "--distill-epochs", "6",
                  "--distill-lr", "0.01", "--src-lang", src_lang, "--tgt-lang", tgt_lang)
    assert proc.returncode == 0, proc.stderr[-2000:]
    stats = json.loads((distilled / "diagnostics.json").read_text())["distill"]
    assert stats["pairs"] == 90 and set(stats["trainable_rows"]) == {"shared"}
    assert stats["loss_after"]["decoder"] < 0.9 * stats["loss_before"]["decoder"], stats
    assert stats["loss_after"]["encoder"] < stats["loss_before"]["encoder"], stats
    old, before, after = _rows(root / "model"), _rows(start), _rows(distilled)
    moved = {t for t in after if not torch.equal(before[t], after[t])}
    assert moved and not moved & set(old)  # new pieces only; every token the model had keeps its row
    model = AutoModelForSeq2SeqLM.from_pretrained(distilled, use_safetensors=True, local_files_only=True)
    assert model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    proc = _adapt(root, root / "never", "--method", "distill")
    assert proc.returncode != 0 and "needs --src-lang and --tgt-lang" in proc.stderr
    assert not (root / "never").exists()


def test_bad_input_is_one_line_and_writes_nothing(pretrained):
    family, root = pretrained
    src_lang, tgt_lang, unknown = LANGS[family]
    out = root / "never"
    broken = root / "broken"
    shutil.copytree(root / "model", broken)
    (broken / "sentencepiece.bpe.model").unlink()
    translate = ["translate", "--model", str(root / "model"), "--input", str(root / "bible.de"), "--output",
                 str(out)]
    cases = [
        ([*translate, "--src-lang", unknown, "--tgt-lang", tgt_lang], f"unknown language code '{unknown}'"),
        ([*translate, "--src-lang", src_lang], "give --src-lang and --tgt-lang"),
        (["adapt", "--model", str(root / "model"), "--tgt-text", str(root / "bible.en"), "--out", str(out),
          "--sides", "decoder"], "--sides does not apply"),
        (["adapt", "--model", str(broken), "--tgt-text", str(root / "bible.en"), "--out", str(out)],
         "missing ['sentencepiece.bpe.model']"),
    ]
    for args, message in cases:
        proc = cli(*args)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 2 and len(errors) == 1 and message in errors[0], proc.stderr
        assert not out.exists()
    assert str(root / "model") in cli(*translate, "--src-lang", unknown, "--tgt-lang", tgt_lang).stderr


def test_audit_reads_the_shared_vocabulary(pretrained):
    family, root = pretrained
    proc = cli("audit", "--model", str(root / "model"), "--src-text", str(root / "bible.de"), "--sizes", "40", "60",
               "--out", str(root / "audit"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((root / "audit" / "audit.json").read_text())["sides"][0]["side"] == "src"



@pytest.mark.parametrize("beam", [1, 4])
def test_ctranslate2_decodes_as_transformers_does(pretrained, beam):
    """`translate --decoder ctranslate2` (converted from the directory) against transformers' search on the same
    directory: the random tiny model writes every line to the length limit, so the limits agree too; greedy
    outputs are identical, beam outputs nearly (the two searches stop differently: vocabridge.ct2)."""
    from vocabridge.nmt.shared import translate_lines, translate_lines_ct2

    family, root = pretrained
    src_lang, tgt_lang, _ = LANGS[family]
    lines = DE_BIBLE[:3] + DE_IT[:3] + [" ".join(DE_BIBLE)]  # the last one past the 64 positions
    ours, speed = translate_lines_ct2(root / "model", lines, src_lang, tgt_lang, beam=beam, threads=1)
    theirs, _ = translate_lines(root / "model", lines, src_lang, tgt_lang, torch.device("cpu"), beam=beam)
    assert speed["sentences_per_second"] > 0 and len(ours) == len(lines)
    assert sum(a == b for a, b in zip(ours, theirs, strict=True)) >= (len(lines) if beam == 1 else len(lines) - 2)
    assert speed["mean_output_tokens"] > 15 and any(theirs)  # not empty outputs compared
    bad = cli("translate", "--model", str(root / "model"), "--input", str(root / "bible.de"), "--src-lang", src_lang,
              "--tgt-lang", LANGS[family][2], "--decoder", "ctranslate2")
    assert bad.returncode != 0 and "unknown language code" in bad.stderr
