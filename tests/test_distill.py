"""Token distillation (vocabridge/transfer/distill.py): words matched across segmentations, the objective falls, only
the new rows move, and the same seed gives the same rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file

from tests.conftest import cli
from vocabridge.nmt.vocab import Vocab
from vocabridge.transfer.distill import piece_kinds, pooling, word_ids


def _adapt(root: Path, out: Path, method: str, *args: str):
    return cli("adapt", "--model", str(root / "opus-mt"), "--src-text", str(root / "bible.de"), "--tgt-text",
               str(root / "bible.en"), "--out", str(out), "--method", method, "--vocab-size", "60", *args)


@pytest.fixture(scope="module")
def adapted(it_model, tmp_path_factory) -> dict[str, Path]:
    """The tiny IT model adapted to the verses with random new rows, and the same rows distilled (seed 1, twice)."""
    out = tmp_path_factory.mktemp("distill")
    made = {"random": out / "random", "distill": out / "distill", "again": out / "again", "states": out / "states"}
    distill = ("--init-from", "random", "--distill-epochs", "8", "--distill-lr", "0.01")
    for name, folder in made.items():
        extra = () if name == "states" else ("--distill-output", "1")  # the default: hidden states only
        proc = _adapt(it_model, folder, "ft-tgtv-random") if name == "random" else \
            _adapt(it_model, folder, "distill", *distill, *extra)
        assert proc.returncode == 0, proc.stderr[-2000:]
    return made


def test_words_are_what_both_segmentations_share(it_model):
    vocab = Vocab.from_spm(it_model / "opus-mt" / "source.spm")
    kinds = piece_kinds(vocab)
    assert kinds[vocab.tokens.index("</s>")] == 0 and kinds[vocab.pad_id] == 0  # tokens of their own
    assert kinds[vocab.tokens.index("<unk>")] == 1  # an unknown piece continues its word
    ids = np.array([vocab.tokens.index(t) for t in ["▁Datei", "en", "▁ö", "ff", "<unk>", "</s>"]
                    if t in vocab.tokens] + [0])
    pieces = [vocab.tokens[i] for i in ids]
    words = word_ids(ids, kinds).tolist()
    assert words == sorted(words) and words[0] == 0  # in order, from 0
    for k in range(1, len(ids)):  # a new word exactly where a piece starts one, or a special stands
        starts = pieces[k].startswith("▁") or kinds[ids[k]] == 0 or kinds[ids[k - 1]] == 0
        assert (words[k] == words[k - 1] + 1) == starts, (pieces, words)
    # the pooling of a word: its last piece, or the mean of its pieces; the decoder's states sit one later
    groups = [np.array([0, 1]), np.array([2])]
    assert pooling(groups, 3, "last").tolist() == [[0, 1, 0], [0, 0, 1]]
    assert pooling(groups, 3, "mean").tolist() == [[0.5, 0.5, 0], [0, 0, 1]]
    assert pooling(groups, 3, "last", shift=1).tolist() == [[0, 0, 1]]  # the last label is never read
    # in a batch padded past its own length, a sequence's last label still has no state (not a padding one)
    assert pooling(groups, 5, "last", shift=1, limit=3).tolist() == [[0, 0, 1, 0, 0]]


def test_every_sentence_of_a_batch_has_its_words_under_both_segmentations(it_model, adapted):
    from vocabridge.nmt.data import Parallel
    from vocabridge.nmt.model import load_vocabs
    from vocabridge.transfer.distill import Pooler

    lines = (["Und Gott sprach", "Im Anfang schuf Gott Himmel und Erde, und es ward Licht"],
             ["And God said", "In the beginning God created the heaven and the earth, and there was light"])
    pooled = []
    for folder in (it_model / "opus-mt", adapted["distill"]):  # the old pieces, then the new
        src, tgt = load_vocabs(folder)
        data = Parallel.encode(*lines, src, tgt, max_len=999)
        pooler = Pooler(data, piece_kinds(src), piece_kinds(tgt), "last")
        enc, dec = pooler.matrices(np.array([0, 1]), max(map(len, data.src)), max(map(len, data.tgt)))
        pooled.append(((enc.sum(-1) > 0).sum(1).tolist(), (dec.sum(-1) > 0).sum(1).tolist()))
    assert pooled[0] == pooled[1]  # as many word states per sentence, whatever the padding
    assert pooled[0][1] == [len(lines[1][0].split()) + 1, len(lines[1][1].split()) + 1]  # the start state + words


def test_the_objective_falls_and_only_the_new_rows_move(adapted, it_model):
    diagnostics = json.loads((adapted["distill"] / "diagnostics.json").read_text())
    stats = diagnostics["distill"]
    assert diagnostics["init_from"] == "ft-tgtv-random" and stats["pairs"] == stats["pairs_given"] == 90
    def objective(loss: dict) -> float:
        return loss["encoder"] + loss["decoder"] + stats["output"] * loss["output"]

    assert stats["output"] == 1.0 and objective(stats["loss_after"]) < 0.9 * objective(stats["loss_before"]), stats
    assert stats["loss_after"]["output"] < stats["loss_before"]["output"]  # the words' probabilities, as the teacher's
    states = json.loads((adapted["states"] / "diagnostics.json").read_text())["distill"]
    assert states["output"] == 0 and "output" not in states["loss_after"]  # hidden states only
    for side in ("encoder", "decoder"):  # both terms fall
        assert states["loss_after"][side] < 0.9 * states["loss_before"][side], states
    start, distilled = load_file(adapted["random"] / "model.safetensors"), \
        load_file(adapted["distill"] / "model.safetensors")
    new_tokens = {}
    for side, vocab_file, old_file in (("encoder", "vocab.json", "vocab.json"),
                                       ("decoder", "target_vocab.json", "target_vocab.json")):
        new = json.loads((adapted["distill"] / vocab_file).read_text())
        old = json.loads((it_model / "opus-mt" / old_file).read_text())
        new_tokens[side] = {i for t, i in new.items() if t not in old and not t.startswith("<")}
    for key, before in start.items():  # every weight the initialiser made, but the new tokens' rows
        after = distilled[key]
        side = "encoder" if key.startswith("model.encoder.embed") else "decoder" if "decoder.embed" in key else None
        changed = set((before != after).any(-1).nonzero().flatten().tolist()) if before.dim() == 2 else \
            ({0} if not bool((before == after).all()) else set())
        if side is None:
            assert not changed, key
        else:
            assert changed and changed <= new_tokens[side], (key, changed - new_tokens[side])


def test_the_same_seed_gives_the_same_rows(adapted):
    first, again = (load_file(adapted[k] / "model.safetensors") for k in ("distill", "again"))
    assert all(bool((first[k] == again[k]).all()) for k in first)


def test_it_starts_from_another_initialiser_and_says_what_is_wrong(it_model, tmp_path):
    proc = _adapt(it_model, tmp_path / "fwet", "distill", "--init-from", "fwet", "--distill-epochs", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "fwet" / "diagnostics.json").read_text())["init_from"] == "fwet"
    proc = _adapt(it_model, tmp_path / "never", "distill", "--init-from", "in-domain")
    assert proc.returncode != 0 and "init_from: 'in-domain' is not an initialiser" in proc.stderr
    half = tmp_path / "half.en"
    half.write_text("\n".join((it_model / "bible.en").read_text().splitlines()[:10]) + "\n")
    proc = cli("adapt", "--model", str(it_model / "opus-mt"), "--src-text", str(it_model / "bible.de"),
               "--tgt-text", str(half), "--out", str(tmp_path / "never"), "--method", "distill")
    assert proc.returncode != 0 and "line by line (given 90 and 10 lines)" in proc.stderr
    proc = _adapt(it_model, tmp_path / "never", "fwet", "--align", "mean")
    assert proc.returncode != 0 and "only for token distillation rows" in proc.stderr
    assert not (tmp_path / "never").exists()


def test_the_pretrained_model_against_itself_has_nothing_to_learn(it_model):
    from vocabridge.nmt.model import load_model
    from vocabridge.transfer.distill import Settings, distill

    teacher, src, tgt = load_model(it_model / "opus-mt")
    student, _, _ = load_model(it_model / "opus-mt")
    long = " ".join(["Datei öffnen"] * 10)  # 100 pieces: more than the model's 64 positions, left out and counted
    stats = distill(teacher, src, tgt, student, src, tgt, ["Datei öffnen", "Datei", long],
                    ["Open file", "File", "Open file"], Settings(epochs=1, output=1.0))
    assert stats["pairs"] == 2 and stats["pairs_too_long"] == 1
    assert stats["trainable_rows"] == {"encoder": 0, "decoder": 0}
    assert stats["loss_before"] == stats["loss_after"] == {"encoder": 0.0, "decoder": 0.0, "output": 0.0}
