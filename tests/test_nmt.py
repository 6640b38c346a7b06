"""The NMT core on tiny hand-made data: vocabularies, batching, training, checkpoints, translation."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, MarianTokenizer

from vocabridge.config import Arch, SpmModel, Training
from vocabridge.errors import InputError
from vocabridge.nmt.data import Parallel, make_batches, padding_share
from vocabridge.nmt.model import build_model, load_model, save_model
from vocabridge.nmt.train import Trainer, TrainingError
from vocabridge.nmt.translate import translate
from vocabridge.nmt.vocab import pair_vocabs
from vocabridge.tokenizers import train_spm

DE = [f"das haus nummer {i} ist {'groß' if i % 2 else 'klein'} und alt" for i in range(300)]
EN = [f"the house number {i} is {'big' if i % 2 else 'small'} and old" for i in range(300)]
ARCH = Arch(d_model=32, encoder_layers=1, decoder_layers=1, heads=2, ffn_dim=64, max_positions=64)
TRAIN = Training(max_updates=12, batch_tokens=400, lr=3e-3, warmup=4, eval_every=6, dev_sentences=10,
                 checkpoint_every=4, log_every=2, patience=0, bf16=False)


@pytest.fixture(scope="module")
def vocabs():
    cfg = SpmModel(vocab_size=120, hard_vocab_limit=False)
    src, tgt = pair_vocabs(train_spm(DE, cfg, 1, 1, "de"), train_spm(EN, replace(cfg, vocab_size=100), 1, 1, "en"))
    return src, tgt


@pytest.fixture(scope="module")
def data(vocabs):
    return Parallel.encode(DE, EN, *vocabs, max_len=64)


def test_vocab_layout_and_encoding_match_marian_tokenizer(tmp_path, vocabs):
    src, tgt = vocabs
    assert len(src) == len(tgt)  # filled to one length so that both sides share pad_token_id
    assert src.tokens[:2] == ["</s>", "<unk>"] and src.tokens[-1] == tgt.tokens[-1] == "<pad>"
    assert tgt.filler_ids and tgt.tokens[tgt.filler_ids[0]].startswith("<unused_")
    model = build_model(ARCH, src, tgt, seed=1)
    save_model(model, src, tgt, tmp_path / "m")
    tok = MarianTokenizer.from_pretrained(tmp_path / "m")
    assert tok(DE[:20])["input_ids"] == [list(x) for x in src.encode(DE[:20])]
    assert tok(text_target=EN[:20])["input_ids"] == [list(x) for x in tgt.encode(EN[:20])]
    assert tgt.decode(tgt.encode(EN[:1])[0]) == EN[0]
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "m")
    assert reloaded.get_output_embeddings().weight.data_ptr() == reloaded.model.decoder.embed_tokens.weight.data_ptr()
    assert reloaded.model.encoder.embed_tokens.weight.shape[0] == len(src)


def test_model_directories_load_from_safetensors_only(tmp_path, vocabs):
    model = build_model(ARCH, *vocabs, seed=1)
    save_model(model, *vocabs, tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").rename(tmp_path / "m" / "pytorch_model.bin")
    with pytest.raises(InputError, match="only pytorch_model.bin"):
        load_model(tmp_path / "m")
    with pytest.raises(InputError, match="no such model directory"):
        load_model(tmp_path / "nothing")


def test_no_pickle_loading_anywhere_in_the_code():
    root = Path(__file__).resolve().parents[1]
    for path in [*root.glob("vocabridge/**/*.py"), *root.glob("stages/*.py")]:
        text = path.read_text()
        for call in ("torch.load(", "import pickle", "pickle.load", "use_safetensors=False", "weights_only=False"):
            assert call not in text, (path, call)


def test_token_batches_respect_the_budget_and_pad_little(data):
    batches = make_batches(data, 400, seed=1, epoch=0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(data)))
    for idx in batches:
        longest = max(max(len(data.src[i]), len(data.tgt[i])) for i in idx)
        assert longest * len(idx) <= 400 or len(idx) == 1
    rng = np.random.default_rng(0)
    random_batches = np.array_split(rng.permutation(len(data)), len(batches))
    assert padding_share(data, batches) < padding_share(data, random_batches)
    again = make_batches(data, 400, seed=1, epoch=0)
    assert all((a == b).all() for a, b in zip(batches, again, strict=True))
    other = make_batches(data, 400, seed=1, epoch=1)
    assert [a.tolist() for a in batches] != [b.tolist() for b in other]


def trained(tmp_path, vocabs, data, cfg=TRAIN, name="run"):
    model = build_model(ARCH, *vocabs, seed=1)
    trainer = Trainer(model, *vocabs, data, (DE[:10], EN[:10]), cfg, tmp_path / name, {"cfg": name}, name)
    return model, trainer, trainer.train()


def test_training_learns_and_is_deterministic(tmp_path, vocabs, data):
    _, _, a = trained(tmp_path, vocabs, data, name="a")
    _, _, b = trained(tmp_path, vocabs, data, name="b")
    def curve(state):
        return [(r["step"], r["loss"], r["lr"]) for r in state.loss_log]

    assert curve(a) == curve(b) and a.dev_log == b.dev_log
    assert a.loss_log[-1]["loss"] < a.loss_log[0]["loss"]
    assert [r["step"] for r in a.dev_log] == [0, 6, 12]
    assert a.dev_bleu_seconds > 0 and a.dev_loss_seconds > 0 and a.checkpoint_seconds > 0  # where the time went


class Crash(Exception):
    pass


class CrashingTrainer(Trainer):
    """Dies in the middle of update 10, after the checkpoint at update 8 (checkpoint_every=4)."""

    def _step(self, batch):
        if self.state.step == 9:
            raise Crash()
        return super()._step(batch)


def test_resume_continues_exactly_where_the_checkpoint_left_off(tmp_path, vocabs, data):
    full_model, _, full = trained(tmp_path, vocabs, data, name="full")
    crashing = CrashingTrainer(build_model(ARCH, *vocabs, seed=1), *vocabs, data, (DE[:10], EN[:10]), TRAIN,
                               tmp_path / "crash", {"cfg": "x"}, "crash")
    with pytest.raises(Crash):
        crashing.train()
    assert json.loads((tmp_path / "crash" / "last" / "state.json").read_text())["state"]["step"] == 8
    model = build_model(ARCH, *vocabs, seed=99)  # a different init: everything must come from the checkpoint
    trainer = Trainer(model, *vocabs, data, (DE[:10], EN[:10]), TRAIN, tmp_path / "crash", {"cfg": "x"}, "again")
    resumed = trainer.train()
    assert resumed.step == 12
    assert [r["loss"] for r in resumed.loss_log] == [r["loss"] for r in full.loss_log]
    assert resumed.dev_log == full.dev_log
    for (name, p), q in zip(full_model.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    other = Trainer(build_model(ARCH, *vocabs, seed=1), *vocabs, data, (DE[:10], EN[:10]), TRAIN,
                    tmp_path / "crash", {"cfg": "changed"}, "changed")
    assert not other._resume()  # another configuration never resumes a foreign checkpoint


def test_a_raised_budget_continues_the_run_that_reached_the_old_one(tmp_path, vocabs, data):
    """A run to 6 updates, its budget then raised to 12 (the fingerprint holds the budget, as the stages' do),
    ends where a run to 12 from the start ends; a lower budget, or an old one off the evaluation cadence, starts
    afresh instead."""
    from dataclasses import replace

    def run(cfg, name, seed=1):
        model = build_model(ARCH, *vocabs, seed=seed)
        trainer = Trainer(model, *vocabs, data, (DE[:10], EN[:10]), cfg, tmp_path / name,
                          {"cfg": {"run": "x", "max_updates": cfg.max_updates}}, name)
        return model, trainer.train()

    full_model, full = run(TRAIN, "full")
    _, short = run(replace(TRAIN, max_updates=6), "raised")
    assert short.step == 6 and short.stopped == "max_updates reached"
    model, raised = run(TRAIN, "raised", seed=99)  # a different init: everything comes from the checkpoint
    assert raised.step == 12 and raised.dev_log == full.dev_log and raised.stopped == full.stopped
    assert [r["loss"] for r in raised.loss_log] == [r["loss"] for r in full.loss_log]
    for (name, p), q in zip(full_model.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    _, lowered = run(replace(TRAIN, max_updates=4), "raised")  # past this budget: a run of its own
    assert lowered.step == 4 and [r["step"] for r in lowered.dev_log] == [0, 4]
    _, off = run(replace(TRAIN, max_updates=8), "off")  # ended at 8 with an evaluation a longer run has not
    assert [r["step"] for r in off.dev_log] == [0, 6, 8]
    _, again = run(TRAIN, "off")
    assert again.dev_log == full.dev_log and [r["loss"] for r in again.loss_log] == [r["loss"] for r in full.loss_log]


def test_a_kill_while_a_checkpoint_replaces_the_last_resumes_from_the_one_before(tmp_path, vocabs, data,
                                                                                  monkeypatch):
    """atomic_dir moves `last` aside before moving the new one in; killed between the two renames (at the
    checkpoint of update 8), the run resumes from the set-aside checkpoint of update 4, not from update 0."""
    from tests.test_fileio import kill_on_rename

    full_model, _, full = trained(tmp_path, vocabs, data, name="full")
    kill_on_rename(monkeypatch, "last", 3)  # `last` is written at updates 0, 4 and 8
    with pytest.raises(KeyboardInterrupt):
        trained(tmp_path, vocabs, data, name="killed")
    ckpt = tmp_path / "killed"
    assert not (ckpt / "last").exists() and any(p.name.startswith(".last.old-") for p in ckpt.iterdir())
    model = build_model(ARCH, *vocabs, seed=99)  # a different init: everything must come from the checkpoint
    trainer = Trainer(model, *vocabs, data, (DE[:10], EN[:10]), TRAIN, ckpt, {"cfg": "killed"}, "again")
    assert trainer._resume() and trainer.state.step == 4
    resumed = Trainer(model, *vocabs, data, (DE[:10], EN[:10]), TRAIN, ckpt, {"cfg": "killed"}, "again").train()
    assert resumed.step == 12 and [r["loss"] for r in resumed.loss_log] == [r["loss"] for r in full.loss_log]
    for (name, p), q in zip(full_model.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    assert not [p for p in ckpt.iterdir() if p.name.startswith(".")]  # nothing set aside is left behind


def same_ids(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_sampled_segmentations_are_the_same_text_reproducible_per_seed(vocabs):
    src, _ = vocabs
    plain, a, b, c = (src.encode(DE[:50]), src.encode(DE[:50], 0.3, 7), src.encode(DE[:50], 0.3, 7),
                      src.encode(DE[:50], 0.3, 8))
    assert same_ids(a, b) and not same_ids(a, c) and not same_ids(a, plain)
    assert [src.decode(ids) for ids in a] == DE[:50]  # other pieces, the same text
    assert same_ids(src.encode(DE[:50], 0.0, 7), plain)


def test_training_on_sampled_segmentations_resumes_exactly(tmp_path, vocabs):
    """BPE-Drop's subword regularisation: every epoch its own segmentation, drawn from the epoch, so that a run
    resumed from a checkpoint in a later epoch trains on the same pieces as the run that never stopped."""
    def resample(epoch: int) -> Parallel:
        return Parallel.encode(DE, EN, *vocabs, max_len=64, alpha=0.3, seed=epoch * 2)

    epochs = []

    def logged(epoch: int) -> Parallel:
        epochs.append(epoch)
        return resample(epoch)

    dev, cfg = (DE[:10], EN[:10]), replace(TRAIN, batch_tokens=1500)  # a few batches an epoch
    full_model = build_model(ARCH, *vocabs, seed=1)
    full = Trainer(full_model, *vocabs, resample(0), dev, cfg, tmp_path / "full", {"cfg": "s"}, "full",
                   logged).train()
    assert full.epoch >= 1 and epochs[0] == 1  # epoch 1 drew its own segmentation (epoch 0's came in); the
    #                                            crash below is in epoch 1, after the checkpoint that ended epoch 0
    crashing = CrashingTrainer(build_model(ARCH, *vocabs, seed=1), *vocabs, resample(0), dev, cfg, tmp_path / "c",
                               {"cfg": "s"}, "crash", resample)
    with pytest.raises(Crash):
        crashing.train()
    model = build_model(ARCH, *vocabs, seed=99)
    resumed = Trainer(model, *vocabs, resample(0), dev, cfg, tmp_path / "c", {"cfg": "s"}, "again", resample).train()
    assert [r["loss"] for r in resumed.loss_log] == [r["loss"] for r in full.loss_log]
    for (name, p), q in zip(full_model.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def test_non_finite_loss_stops_with_a_clear_error_and_keeps_the_last_checkpoint(tmp_path, vocabs, data):
    cfg = replace(TRAIN, max_updates=30, lr=1e12, warmup=1, clip_norm=1e30, checkpoint_every=1, eval_every=100)
    with pytest.raises(TrainingError, match=r"loss is (nan|inf).*last good checkpoint is .*last \(update \d+\)"):
        trained(tmp_path, vocabs, data, cfg=cfg, name="nan")
    state = json.loads((tmp_path / "nan" / "last" / "state.json").read_text())
    from safetensors.torch import load_file

    weights = load_file(str(tmp_path / "nan" / "last" / "model.safetensors"))
    assert all(torch.isfinite(w).all() for w in weights.values()), state["state"]["step"]


def test_translate_keeps_input_order_and_reports_speed(tmp_path, vocabs, data):
    model, trainer, _ = trained(tmp_path, vocabs, data, cfg=replace(TRAIN, max_updates=30), name="t")
    trainer.load_best()
    lines = [DE[3], DE[0] + " " + DE[1], DE[2]]
    fixed = {"beam": 2, "progress": False, "max_len_a": 0, "max_len_b": 40}  # the same length limit for all
    hyps, speed = translate(model, *vocabs, lines, **fixed)
    assert len(hyps) == 3 and speed["sentences_per_second"] > 0
    single = [translate(model, *vocabs, [line], **fixed)[0][0] for line in lines]
    assert hyps == single


def test_user_model_directories_are_checked(tmp_path, vocabs):
    model = build_model(ARCH, *vocabs, seed=1)
    save_model(model, *vocabs, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | {"model_type": "bert"}))
    with pytest.raises(InputError, match=r"config.json: model_type is 'bert', expected 'marian'"):
        load_model(tmp_path / "m")
    (tmp_path / "m" / "source.spm").unlink()
    with pytest.raises(InputError, match=r"not a Marian model directory \(missing \['source.spm'\]\)"):
        load_model(tmp_path / "m")


def test_checkpoint_of_another_layout_or_configuration_is_removed_not_resumed(tmp_path):
    from vocabridge.checkpoint import load_checkpoint, save_checkpoint

    module = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(module.parameters(), lr=0.1)
    module(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    save_checkpoint(tmp_path / "ckpt", module, optimizer, {"fingerprint": {"a": 1}, "step": 1})
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.1)
    record = load_checkpoint(tmp_path / "ckpt", {"a": 1}, fresh, fresh_opt, "cpu")
    assert record["step"] == 1 and torch.equal(fresh.weight, module.weight)
    assert torch.equal(fresh_opt.state[fresh.weight]["exp_avg"], optimizer.state[module.weight]["exp_avg"])
    assert load_checkpoint(tmp_path / "ckpt", {"a": 2}, fresh, fresh_opt, "cpu") is None
    assert not (tmp_path / "ckpt").exists()  # another configuration: removed, training starts afresh
    save_checkpoint(tmp_path / "ckpt", module, optimizer, {"fingerprint": {"a": 1}})
    state = tmp_path / "ckpt/last/state.json"
    state.write_text(state.read_text().replace('"format": 2', '"format": 1'))
    assert load_checkpoint(tmp_path / "ckpt", {"a": 1}, fresh, fresh_opt, "cpu") is None  # an older layout


def test_a_dev_bleu_tie_is_a_gain_the_later_update_and_patience_afresh(tmp_path, vocabs, data, monkeypatch):
    """An untrained and a trained model both scoring 0.0 must export the trained one; and a tie, the one rule for
    selection and patience alike (training.gained), does not count against patience: the run goes on."""
    import vocabridge.nmt.train as train

    monkeypatch.setattr(train, "dev_bleu", lambda *args, **kwargs: 0.0)
    model = build_model(ARCH, *vocabs, seed=1)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = replace(TRAIN, patience=2)
    trainer = Trainer(model, *vocabs, data, (DE[:10], EN[:10]), cfg, tmp_path / "ckpt", {"t": 1}, "tie")
    state = trainer.train()
    assert [row["step"] for row in state.dev_log] == [0, 6, 12] and state.best_step == 12
    assert state.stopped == "max_updates reached"  # patience 2 never ran out: every tie was a gain
    assert state.ending() == {"stopped_by": "cap", "best_at_end": True}  # what the cell's record says
    trainer.load_best()
    assert any(not torch.equal(start[k], v) for k, v in model.state_dict().items())


def test_patience_on_both_goes_on_while_the_dev_loss_falls_and_takes_over_a_run_stopped_by_bleu_alone(
        tmp_path, vocabs, data, monkeypatch):
    """A falling dev BLEU stops a run at its first evaluation without a gain under BLEU's patience; with
    `patience_on: both` a dev loss below every earlier one is a gain too. The checkpoint of the run that BLEU
    stopped goes on under `both` exactly as a run under `both` from the start (the stop is replayed from the dev
    log); a checkpoint past the stop that BLEU's patience would have made starts afresh."""
    import vocabridge.nmt.train as train

    monkeypatch.setattr(train.Trainer, "_dev_bleu", lambda self: 10.0 - self.state.step)  # falls with training

    def run(cfg, name, seed=1):
        model = build_model(ARCH, *vocabs, seed=seed)
        fingerprint = {"cfg": {"run": "x", "patience": cfg.patience, "patience_on": cfg.patience_on}}
        return model, Trainer(model, *vocabs, data, (DE[:10], EN[:10]), cfg, tmp_path / name, fingerprint,
                              name).train()

    bleu, both = replace(TRAIN, patience=1), replace(TRAIN, patience=1, patience_on="both")
    _, stopped = run(bleu, "taken-over")
    assert stopped.step == 6 and stopped.stopped == "early stop: no dev BLEU gain in 1 evaluations"
    full_model, full = run(both, "both")
    losses = [row["dev_loss"] for row in full.dev_log]
    assert full.step == 12 and full.stopped == "max_updates reached" and losses == sorted(losses, reverse=True)
    model, taken = run(both, "taken-over", seed=99)  # everything from the checkpoint at update 6
    assert taken.step == 12 and taken.dev_log == full.dev_log and taken.stopped == full.stopped
    assert [r["loss"] for r in taken.loss_log] == [r["loss"] for r in full.loss_log]
    for (name, p), q in zip(full_model.state_dict().items(), model.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    _, afresh = run(bleu, "both")  # BLEU alone would have stopped at 6, before this checkpoint's 12
    assert afresh.step == 6 and [r["step"] for r in afresh.dev_log] == [0, 6]


def test_selecting_by_dev_loss_exports_the_lowest_loss_update_whatever_bleu_says(tmp_path, vocabs, data, monkeypatch):
    """Where BLEU is noise (here it falls after update 0), `select_by: loss` picks the update with least dev loss."""
    import vocabridge.nmt.train as train

    bleus = iter([5.0, 1.0, 0.0, 0.0])
    monkeypatch.setattr(train, "dev_bleu", lambda *args, **kwargs: next(bleus))
    model = build_model(ARCH, *vocabs, seed=1)
    cfg = replace(TRAIN, select_by="loss", patience=0)
    trainer = Trainer(model, *vocabs, data, (DE[:10], EN[:10]), cfg, tmp_path / "ckpt", {"t": 1}, "loss")
    state = trainer.train()
    losses = {row["step"]: row["dev_loss"] for row in state.dev_log}
    assert state.best_step == min(losses, key=lambda step: (losses[step], -step)) > 0
    assert state.best_loss == losses[state.best_step] and state.best_bleu < 5.0
    trainer.load_best()
    assert train.dev_loss(model, *vocabs, DE[:10], EN[:10]) == pytest.approx(state.best_loss, abs=1e-4)


def test_dev_loss_does_not_depend_on_how_the_sentences_are_batched(vocabs):
    """Padding is masked: one sentence per batch and all in one batch give the same mean per-token loss."""
    import vocabridge.nmt.train as train

    model = build_model(ARCH, *vocabs, seed=1)
    alone = train.dev_loss(model, *vocabs, DE[:10], EN[:10], batch_size=1)
    assert alone == pytest.approx(train.dev_loss(model, *vocabs, DE[:10], EN[:10], batch_size=32), abs=1e-3)
    assert 0 < alone < 2 * math.log(len(vocabs[1]))  # an untrained model: about log |V| nats per token


def test_training_loss_is_the_models_own_label_smoothed_cross_entropy(vocabs, data):
    """The loss on real target positions only (and the bias only when set) equals the cross-entropy of the
    model's full logits with padding ignored, also with a non-zero final_logits_bias."""
    import torch.nn.functional as F

    from vocabridge.nmt.data import collate
    from vocabridge.nmt.train import training_loss

    src, tgt = vocabs
    model = build_model(ARCH, src, tgt, seed=1).eval()
    batch = collate(data, list(range(0, 40, 3)), src.pad_id, tgt.pad_id, tgt.pad_id)
    assert (batch["labels"] == -100).any()  # the batch has padding to skip
    for bias in (0.0, 0.5):
        model.final_logits_bias.normal_(0, bias)
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        expected = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100,
                                   label_smoothing=0.1)
        assert training_loss(model, batch, 0.1, bf16=False).item() == pytest.approx(expected.item(), abs=1e-5)


def test_cpu_training_uses_eager_attention_with_the_same_outputs(vocabs, data):
    from vocabridge.nmt.data import collate
    from vocabridge.nmt.model import use_fast_attention

    src, tgt = vocabs
    model = build_model(ARCH, src, tgt, seed=1).eval()
    batch = {k: v for k, v in collate(data, [0, 5, 9], src.pad_id, tgt.pad_id, tgt.pad_id).items() if k != "labels"}
    model.set_attn_implementation("sdpa")
    sdpa = model(**batch).logits
    assert use_fast_attention(model, "cpu").config._attn_implementation == "eager"
    assert torch.allclose(model(**batch).logits, sdpa, atol=1e-5)


TRAIN_ONCE = """
import hashlib, sys
from dataclasses import replace
import torch
from tests.test_nmt import DE, EN, TRAIN
from vocabridge.nmt.data import Parallel
from vocabridge.nmt.model import load_model
from vocabridge.nmt.train import Trainer
torch.seed()  # whatever the process's generator starts from must not matter
torch.set_num_threads(1)
model, src, tgt = load_model(sys.argv[1])
trainer = Trainer(model, src, tgt, Parallel.encode(DE, EN, src, tgt, 64), (DE[:10], EN[:10]),
                  replace(TRAIN, max_updates=8, eval_every=4), sys.argv[2], {"t": 1}, "twice")
trainer.train()
print(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest())
"""


@pytest.mark.slow
def test_the_same_training_in_two_processes_gives_identical_weights(tmp_path, vocabs, capsys, monkeypatch):
    """Same initial model, seed and threads: bit-identical weights (dropout is seeded from the config's seed), in a
    fresh process and in this one, whose generator is wherever the tests before it left it."""
    import subprocess
    import sys

    model = build_model(replace(ARCH, dropout=0.3), *vocabs, seed=1)
    save_model(model, *vocabs, tmp_path / "init")
    root = Path(__file__).resolve().parents[1]
    fresh = subprocess.run([sys.executable, "-c", TRAIN_ONCE, str(tmp_path / "init"), str(tmp_path / "ck0")],
                           cwd=root, capture_output=True, text=True, timeout=600)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    monkeypatch.setattr(sys, "argv", ["-c", str(tmp_path / "init"), str(tmp_path / "ck1")])
    exec(compile(TRAIN_ONCE, "TRAIN_ONCE", "exec"), {})
    here = capsys.readouterr().out
    assert fresh.stdout.split()[-1] == here.split()[-1]
