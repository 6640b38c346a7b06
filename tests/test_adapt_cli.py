"""`vocabridge adapt`: a user's Marian model and in-domain text in, an adapted model directory out."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, MarianTokenizer

from tests.conftest import DE_BIBLE, EN_BIBLE, cli, cli_process


def adapt(*args: str) -> subprocess.CompletedProcess:
    return cli("adapt", *args)


@pytest.fixture(scope="module")
def user_files(it_model):
    return it_model


def test_adapt_writes_a_model_that_transformers_loads(user_files):
    out = user_files / "adapted"
    proc = adapt("--model", str(user_files / "opus-mt"), "--src-text", str(user_files / "bible.de"),
                 "--tgt-text", str(user_files / "bible.en"), "--out", str(out), "--method", "va-llm", "--k", "3",
                 "--vocab-size", "60")
    assert proc.returncode == 0, proc.stderr[-2000:]
    diagnostics = json.loads((out / "diagnostics.json").read_text())
    assert diagnostics["method"] == "va-llm" and diagnostics["decoder"]["rows"]["projected"] > 0.5
    tok = MarianTokenizer.from_pretrained(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(out, use_safetensors=True)
    old_tok = MarianTokenizer.from_pretrained(user_files / "opus-mt")
    fresh = set(tok.get_vocab()) - set(old_tok.get_vocab())  # pieces of the new domain's text
    bible = " ".join(DE_BIBLE + EN_BIBLE)
    assert fresh and all(piece.lstrip("▁") in bible for piece in fresh if not piece.startswith("<"))
    batch = tok(["Und Gott sprach"], return_tensors="pt")
    fresh_ids = {tok.convert_tokens_to_ids(piece) for piece in fresh}
    assert fresh_ids & set(batch["input_ids"][0].tolist())  # the verse is segmented into the new pieces
    with torch.no_grad():
        generated = model.generate(**batch, max_new_tokens=4)
    # the model's rows are the tokenizer's ids: what it generates, the tokenizer can name
    assert model.get_output_embeddings().weight.shape[0] == len(tok) == model.config.vocab_size
    assert generated[0, 0] == model.config.decoder_start_token_id and int(generated.max()) < len(tok)


@pytest.mark.parametrize("method", ["fwet", "word2vec", "embedding-recon"])
def test_adapt_offers_the_text_based_initialisers_too(user_files, method):
    out = user_files / f"adapted-{method}"
    proc = adapt("--model", str(user_files / "opus-mt"), "--src-text", str(user_files / "bible.de"),
                 "--tgt-text", str(user_files / "bible.en"), "--out", str(out), "--method", method,
                 "--vocab-size", "60")
    assert proc.returncode == 0, proc.stderr[-2000:]
    diagnostics = json.loads((out / "diagnostics.json").read_text())
    assert diagnostics["method"] == method and diagnostics["sides"] == ["decoder", "encoder"]
    if method != "embedding-recon":  # the IT pieces share no character n-gram with the verses' new pieces
        assert diagnostics["decoder"]["rows"]["projected"] > 0  # rows made by the method, not all random
    AutoModelForSeq2SeqLM.from_pretrained(out, use_safetensors=True)


def test_adapt_offers_every_initialiser_that_needs_only_the_model_and_text():
    from vocabridge.cli import adapt_methods

    offered = adapt_methods()
    assert {"va-llm", "fwet", "avg-eg", "word2vec", "embedding-recon", "independent-encoder", "fvt", "att-eg",
            "patt-eg", "patt-eg-kd"} <= set(offered)
    assert not {"focus-ref", "in-domain", "ft-srcv", "out-domain"} & set(offered)  # need more, or make no rows
    assert all(m.summary for m in offered.values())  # each has its line in `adapt --help`
    proc = cli_process("adapt", "--help")  # the command as a process of its own: its imports, its help
    assert proc.returncode == 0 and "fwet:" in proc.stdout
    proc = adapt("--model", "m", "--tgt-text", "t", "--out", "never", "--method", "focus-ref")  # needs a corpus
    assert proc.returncode == 2 and "invalid choice: 'focus-ref'" in proc.stderr and not Path("never").exists()


def test_adapt_bad_input_is_one_line_and_writes_nothing(user_files):
    out = user_files / "never"
    not_marian = user_files / "not-a-model"
    not_marian.mkdir()
    (not_marian / "config.json").write_text("{}")
    cases = [
        (["--model", str(not_marian), "--tgt-text", str(user_files / "bible.en"), "--sides", "decoder"],
         "not a Marian model directory"),
        (["--model", str(user_files / "opus-mt"), "--tgt-text", str(user_files / "bible.en"), "--sides", "decoder",
          "--k", "500", "--vocab-size", "60"], "k=500 is larger than the"),
        (["--model", str(user_files / "opus-mt"), "--sides", "both", "--tgt-text", str(user_files / "bible.en")],
         "--sides both needs --src-text"),
    ]
    for args, message in cases:
        proc = adapt(*args, "--out", str(out))
        assert proc.returncode == 2, proc.stderr
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], proc.stderr  # progress bars may precede it
        assert not out.exists()


@pytest.mark.slow
def test_adapt_then_finetune_then_translate_a_users_model(user_files):
    """The practitioner's path without the pipeline: adapt, fine-tune on in-domain pairs (resumable), translate."""
    adapted, tuned = user_files / "path-adapted", user_files / "path-tuned"
    proc = adapt("--model", str(user_files / "opus-mt"), "--src-text", str(user_files / "bible.de"),
                 "--tgt-text", str(user_files / "bible.en"), "--out", str(adapted), "--method", "ft-tgtv-random",
                 "--vocab-size", "60")
    assert proc.returncode == 0, proc.stderr[-2000:]
    pairs = ["--src-train", str(user_files / "bible.de"), "--tgt-train", str(user_files / "bible.en"),
             "--src-dev", str(user_files / "bible.de"), "--tgt-dev", str(user_files / "bible.en")]
    options = ["--max-updates", "6", "--eval-every", "3", "--checkpoint-every", "3", "--batch-tokens", "300",
               "--dev-sentences", "5", "--threads", "1", "--bf16", "false", "--warmup", "2", "--lr", "0.003"]
    proc = cli("finetune", "--model", str(adapted), *pairs, "--out", str(tuned), *options)
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((tuned / "metrics.json").read_text())
    assert metrics["updates"] == 6 and (tuned / "curves" / "dev_bleu.csv").is_file()
    again = cli("finetune", "--model", str(adapted), *pairs, "--out", str(tuned), *options)
    assert again.returncode == 0 and "resuming from the checkpoint at update 6" in again.stderr
    tok = MarianTokenizer.from_pretrained(tuned)
    assert AutoModelForSeq2SeqLM.from_pretrained(tuned, use_safetensors=True) and len(tok) > 0
    hyp = user_files / "hyp.en"
    proc = cli_process("translate", "--model", str(tuned), "--input", str(user_files / "bible.de"), "--output",
                       str(hyp), "--beam", "2", "--threads", "1")  # the command as a process of its own
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"{hyp}: ") and proc.stdout.endswith(" sentences/s\n")
    assert len(hyp.read_text(encoding="utf-8").split("\n")[:-1]) == len(DE_BIBLE)
    greedy = {}
    for decoder in ("ctranslate2", "transformers"):  # the same greedy outputs by either decoder
        greedy[decoder] = user_files / f"greedy-{decoder}.en"
        proc = cli("translate", "--model", str(tuned), "--input", str(user_files / "bible.de"), "--output",
                   str(greedy[decoder]), "--beam", "1", "--threads", "1", "--decoder", decoder, "--device", "cpu")
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert greedy["ctranslate2"].read_text(encoding="utf-8") == greedy["transformers"].read_text(encoding="utf-8")
    short = user_files / "short.en"
    short.write_text("\n".join(EN_BIBLE[:5]) + "\n", encoding="utf-8")
    proc = cli_process("finetune", "--model", str(adapted), *pairs[:2], "--tgt-train", str(short), *pairs[4:],
                       "--out", str(user_files / "never"), *options)  # as a process: one line, nothing else
    assert proc.returncode != 0 and "short.en has 5" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (user_files / "never").exists()


@pytest.mark.parametrize("extend", [0, 20])
def test_adapt_an_opus_mt_model_with_one_joint_vocabulary_replacing_or_extending(opus_mt_joint, extend):
    """fwet on Helsinki-NLP's layout (one vocab.json, one shared embedding matrix); `--extend N` keeps every token
    and row of the model and appends pieces of the vocabulary trained on the user's text."""
    model_dir, out = opus_mt_joint / "opus-mt", opus_mt_joint / f"fwet-extend-{extend}"
    proc = adapt("--model", str(model_dir), "--src-text", str(opus_mt_joint / "bible.de"),
                 "--tgt-text", str(opus_mt_joint / "bible.en"), "--out", str(out), "--method", "fwet",
                 "--vocab-size", "60", "--extend", str(extend))
    assert proc.returncode == 0, proc.stderr[-2000:]
    diagnostics = json.loads((out / "diagnostics.json").read_text())
    old_tok, tok = MarianTokenizer.from_pretrained(model_dir), MarianTokenizer.from_pretrained(out)
    old_model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, use_safetensors=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(out, use_safetensors=True)
    if not extend:
        assert diagnostics["src_extension"] is None and diagnostics["decoder"]["rows"]["projected"] > 0
        return
    for role, side in (("src", "encoder"), ("tgt", "decoder")):
        info = diagnostics[f"{role}_extension"]
        assert 0 < info["appended"] <= extend and info["fertility"]["after"] < info["fertility"]["before"]
        rows, old_rows = getattr(model.model, side).embed_tokens.weight, old_model.model.shared.weight
        vocab = json.loads((out / ("vocab.json" if role == "src" else "target_vocab.json")).read_text())
        for token, old_id in old_tok.get_vocab().items():  # every token of the model kept, with its row
            if token != "<pad>":
                assert torch.equal(rows[vocab[token]], old_rows[old_id]), token
    word = diagnostics["src_extension"]["first"][0][1:]  # the appended piece that saves most: a Bible word
    new_ids = tok([word], return_tensors="pt")["input_ids"][0].tolist()
    assert len(new_ids) == 2 < len(old_tok([word])["input_ids"][0])  # one piece and </s>
    assert model.get_output_embeddings().weight.shape[0] == len(tok) == model.config.vocab_size
    with torch.no_grad():
        generated = model.generate(input_ids=torch.tensor([new_ids]), max_new_tokens=4)
    assert generated[0, 0] == model.config.decoder_start_token_id and int(generated.max()) < len(tok)


def test_train_a_generator_for_an_opus_mt_model_then_adapt_with_it(opus_mt_joint, tmp_path):
    """`train-generator` against the user's model on text it knows, then `adapt --method patt-eg-kd --generator`;
    a generator of the wrong kind, a missing one and misaligned text are one-line errors that write nothing."""
    from tests.conftest import DE_IT, EN_IT

    (tmp_path / "it.de").write_text("\n".join(DE_IT) + "\n", encoding="utf-8")
    (tmp_path / "it.en").write_text("\n".join(EN_IT) + "\n", encoding="utf-8")
    model = opus_mt_joint / "opus-mt"
    gen = tmp_path / "patt-kd.safetensors"
    common = ("--model", str(model), "--src-text", str(tmp_path / "it.de"), "--tgt-text", str(tmp_path / "it.en"))
    proc = cli("train-generator", *common, "--out", str(gen), "--steps", "4", "--batch-tokens", "200",
               "--checkpoint-every", "2", "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(gen.with_suffix(".json").read_text())
    assert summary["steps"] == 4 and summary["kind"] == "patt" and summary["kd_lambda"] == 0.5
    assert "adapt --method patt-eg-kd" in proc.stdout
    texts = ("--src-text", str(opus_mt_joint / "bible.de"), "--tgt-text", str(opus_mt_joint / "bible.en"))
    out = tmp_path / "adapted"
    proc = adapt("--model", str(model), *texts, "--out", str(out), "--method", "patt-eg-kd", "--generator", str(gen),
                 "--vocab-size", "60", "--sides", "decoder")
    assert proc.returncode == 0, proc.stderr[-2000:]
    diagnostics = json.loads((out / "diagnostics.json").read_text())
    assert diagnostics["sides"] == ["decoder"] and diagnostics["decoder"]["rows"]["projected"] > 0
    AutoModelForSeq2SeqLM.from_pretrained(out, use_safetensors=True)
    wrong_kind = "of kind 'patt'; this method needs kind 'att'"
    for method, extra, message in (("att-eg", ("--generator", str(gen)), wrong_kind),
                                   ("patt-eg", (), "needs --generator FILE")):
        proc = adapt("--model", str(model), *texts, "--out", str(tmp_path / method), "--method", method, *extra,
                     "--vocab-size", "60")
        assert proc.returncode != 0 and message in proc.stderr and not (tmp_path / method).exists()
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    (tmp_path / "short.en").write_text("Open file\n", encoding="utf-8")
    proc = cli_process("train-generator", "--model", str(model), "--src-text", str(tmp_path / "it.de"),
                       "--tgt-text", str(tmp_path / "short.en"), "--out", str(tmp_path / "never.safetensors"))
    assert proc.returncode != 0 and "must be aligned" in proc.stderr and not (tmp_path / "never.safetensors").exists()


def test_finetune_can_keep_the_pretrained_rows_and_mix_original_pairs(user_files):
    """`finetune --freeze-old-rows --new-rows-first N --mix-src/--mix-tgt`: the rows that `adapt` names as the
    pretrained model's stay as they were, the original-domain pairs join the training set."""
    from safetensors.torch import load_file

    adapted, tuned = user_files / "keep-adapted", user_files / "keep-tuned"
    proc = adapt("--model", str(user_files / "opus-mt"), "--src-text", str(user_files / "bible.de"),
                 "--tgt-text", str(user_files / "bible.en"), "--out", str(adapted), "--method", "fwet",
                 "--vocab-size", "60")
    assert proc.returncode == 0, proc.stderr[-2000:]
    old = json.loads((adapted / "old_rows.json").read_text())
    assert old["source"] and old["target"]  # the specials and the pieces both vocabularies have
    it = user_files / "it"
    it.mkdir(exist_ok=True)
    (it / "de").write_text("Datei öffnen\nDatei speichern unter\n" * 10, encoding="utf-8")
    (it / "en").write_text("Open file\nSave file as\n" * 10, encoding="utf-8")
    pairs = ["--src-train", str(user_files / "bible.de"), "--tgt-train", str(user_files / "bible.en"),
             "--src-dev", str(user_files / "bible.de"), "--tgt-dev", str(user_files / "bible.en")]
    options = ["--max-updates", "4", "--eval-every", "2", "--checkpoint-every", "2", "--batch-tokens", "300",
               "--dev-sentences", "5", "--threads", "1", "--bf16", "false", "--warmup", "2", "--lr", "0.003",
               "--select-by", "loss"]  # a trained update is selected, not the start
    proc = cli("finetune", "--model", str(adapted), *pairs, "--out", str(tuned), *options, "--freeze-old-rows",
               "--new-rows-first", "2", "--mix-src", str(it / "de"), "--mix-tgt", str(it / "en"), "--mix-share", "0.1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    metrics = json.loads((tuned / "metrics.json").read_text())
    assert metrics["keep"]["frozen"] and metrics["keep"]["new_rows_first"] == 2
    assert metrics["train_pairs"] > len(DE_BIBLE) and metrics["best_update"] > 0  # the IT pairs joined the verses
    before, after = load_file(str(adapted / "model.safetensors")), load_file(str(tuned / "model.safetensors"))
    enc = "model.encoder.embed_tokens.weight"
    assert torch.equal(before[enc][old["source"]], after[enc][old["source"]])
    assert not torch.equal(before[enc], after[enc])
    proc = cli("finetune", "--model", str(user_files / "opus-mt"), *pairs, "--out", str(user_files / "never"),
               *options, "--freeze-old-rows")  # a model adapt did not write: no old_rows.json
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "old_rows.json: missing" in errors[0], proc.stderr
    proc = cli("finetune", "--model", str(adapted), *pairs, "--out", str(user_files / "never"), *options,
               "--mix-src", str(it / "de"))
    assert proc.returncode == 2 and "give both --mix-src and --mix-tgt" in proc.stderr
    assert not (user_files / "never").exists()
