"""No stale results: a user's own corpus files are dependencies of prepare@DOMAIN (they live in corpora/DOMAIN/).

Runs DVC for real in a copy of the project, on hand-made files: nothing is downloaded.
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from tests.conftest import copy_project, run

TRAIN = [("Der Patient erhielt eine Infusion.", "The patient received an infusion."),
         ("Die Dosis wurde halbiert.", "The dose was halved."),
         ("Das Fieber sank am zweiten Tag.", "The fever fell on the second day."),
         ("Die Wunde heilte ohne Komplikationen.", "The wound healed without complications."),
         ("Der Blutdruck war leicht erhöht.", "The blood pressure was slightly raised."),
         ("Die Ärztin verschrieb ein Antibiotikum.", "The doctor prescribed an antibiotic.")]
DEV = [("Der Puls war normal.", "The pulse was normal.")]
TEST = [("Die Schmerzen ließen nach.", "The pain subsided.")]
NEW = ("Die Behandlung wurde nach einer Woche beendet.", "The treatment was stopped after one week.")


def write_pairs(folder, name, pairs):
    for index, lang in enumerate(("de", "en")):
        (folder / f"{name}.{lang}").write_text("".join(pair[index] + "\n" for pair in pairs), encoding="utf-8")
    return {"src": f"corpora/downstream/{name}.de", "tgt": f"corpora/downstream/{name}.en"}


def project_with_files(tmp_path):
    """A copy of the project (default profile) whose downstream domain is the `files` recipe on hand-made files."""
    project = copy_project(tmp_path / "project", profile=None)
    assert (project / "corpora" / "downstream").is_dir()  # what a clone holds: corpora/{upstream,downstream}/
    folder = project / "corpora" / "downstream"
    params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
    params["prepare"]["downstream"].update(recipe="files", files={
        "train": [write_pairs(folder, "med.train", TRAIN)], "dev": [write_pairs(folder, "med.dev", DEV)],
        "test": [write_pairs(folder, "med.test", TEST)], "mono": {}})
    (project / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    return project


@pytest.mark.slow
def test_appending_to_a_user_file_reruns_prepare(tmp_path):
    project = project_with_files(tmp_path)
    proc = run(["dvc", "repro", "prepare@downstream"], project)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    corpus = project / "data" / "corpora" / "downstream"
    assert (corpus / "train.de").read_text(encoding="utf-8").splitlines() == [de for de, _ in TRAIN]
    proc = run(["dvc", "status", "prepare@downstream"], project)
    assert proc.returncode == 0 and "up to date" in proc.stdout, proc.stdout + proc.stderr

    for lang, text in zip(("de", "en"), NEW, strict=True):
        with open(project / "corpora" / "downstream" / f"med.train.{lang}", "a", encoding="utf-8") as f:
            f.write(text + "\n")
    proc = run(["dvc", "status", "prepare@downstream"], project)
    assert proc.returncode == 0, proc.stderr
    assert "prepare@downstream" in proc.stdout and "modified:" in proc.stdout, proc.stdout
    assert "corpora/downstream" in proc.stdout.replace("data/corpora/downstream", ""), proc.stdout

    proc = run(["dvc", "repro", "prepare@downstream"], project)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Running stage 'prepare@downstream'" in proc.stdout, proc.stdout
    for lang, text in zip(("de", "en"), NEW, strict=True):
        assert text in (corpus / f"train.{lang}").read_text(encoding="utf-8").splitlines()
    proc = run(["dvc", "status", "prepare@downstream"], project)
    assert "up to date" in proc.stdout, proc.stdout


def test_a_user_file_outside_the_domain_folder_is_refused(tmp_path):
    project = project_with_files(tmp_path)
    shutil.move(project / "corpora" / "downstream" / "med.dev.en", project / "med.dev.en")
    params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
    params["prepare"]["downstream"]["files"]["dev"][0]["tgt"] = "med.dev.en"
    (project / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    proc = run(["python", "-m", "stages.prepare", "downstream"], project)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() == ("error: prepare.downstream.files.dev[0].tgt: med.dev.en lies outside "
                                   "corpora/downstream/, the folder prepare@downstream depends on (dvc.yaml); "
                                   "move it there so that changing it reruns prepare@downstream")
    assert not (project / "data" / "corpora").exists()
