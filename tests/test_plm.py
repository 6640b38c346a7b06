"""Pretrained language models (vocabridge.plm) on hand-made data: the PLM tokenizer, masked-LM pretraining and its
resume, AB-Net's adapters, the conditional masked-LM batch, the [LENGTH] prediction and Mask-Predict decoding."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from vocabridge.config import AbnetAdapters, BertArch, MaskPredict, MlmTraining
from vocabridge.errors import InputError
from vocabridge.plm.abnet import (
    ABNet,
    ABNetEnc,
    autoregressive_decoder_config,
    beam_search,
    cmlm_loss,
    load_abnet,
    mask_predict,
    mask_targets,
    masks_per_iteration,
    save_abnet,
    seq2seq_loss,
)
from vocabridge.plm.bert import (
    MlmTrainer,
    build_bert,
    check_bert_dir,
    encode_sentences,
    load_bert,
    save_bert,
    train_plm_tokenizer,
)

GERMAN = ["Im Anfang schuf Gott Himmel und Erde.", "Und die Erde war wüst und leer.",
          "Und es war finster auf der Tiefe.", "Und Gott sprach: Es werde Licht!", "Und es ward Licht.",
          "Und Gott sah, dass das Licht gut war."] * 8
TINY = BertArch(hidden=32, layers=2, heads=2, ffn=64, max_positions=40, dropout=0.1)



@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_plm_tokenizer(GERMAN, 60, tmp_path_factory.mktemp("tok"))


def test_the_plm_tokenizer_frames_with_cls_sep_and_gives_the_text_back(tokenizer):
    ids = tokenizer("Und Gott sah die Erde.")["input_ids"]
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "Und Gott sah die Erde."


def test_the_plm_tokenizer_is_the_same_on_every_run(tokenizer, tmp_path):
    """The same text gives the same pieces, scores and ids (a retrained BERT pairs with the first one's cells)."""
    again = train_plm_tokenizer(GERMAN, 60, tmp_path)
    assert again.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()
    assert len(again) <= 60 and again.convert_ids_to_tokens(list(range(5))) == [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_a_directory_that_is_not_a_bert_is_a_one_line_error(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "marian"}))
    with pytest.raises(InputError, match="model_type is 'marian', expected 'bert'"):
        check_bert_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(InputError, match="pytorch_model.bin, a pickle"):
        check_bert_dir(tmp_path)


def mlm_run(tokenizer, ckpt, updates: int, lr: float = 1e-3, patience: int = 0) -> MlmTrainer:
    ids = encode_sentences(tokenizer, GERMAN, 40)
    cfg = MlmTraining(max_updates=updates, batch_sentences=8, lr=lr, warmup=2, eval_every=3,
                      checkpoint_every=3, held_out_sentences=6, patience=patience)
    trainer = MlmTrainer(build_bert(TINY, tokenizer, seed=1), tokenizer, ids, ids[:6], cfg, ckpt, {"run": 1}, "t")
    trainer.train()
    return trainer


def test_masked_lm_pretraining_resumes_exactly_and_records_a_curve(tokenizer, tmp_path):
    straight = mlm_run(tokenizer, tmp_path / "a", 6)
    mlm_run(tokenizer, tmp_path / "b", 3)
    resumed = mlm_run(tokenizer, tmp_path / "b", 6)  # picks up the checkpoint at update 3
    for (name, a), (_, b) in zip(straight.model.state_dict().items(), resumed.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert [row["step"] for row in resumed.state.curve] == [0, 3, 6]
    assert resumed.state.curve == straight.state.curve  # losses and accuracies too
    assert resumed.evaluate() == tuple(resumed.state.curve[-1][k] for k in ("held_out_loss", "held_out_accuracy"))


def test_masked_lm_pretraining_learns(tokenizer, tmp_path):
    trainer = mlm_run(tokenizer, tmp_path, 60, lr=1e-2)
    first, last = trainer.state.curve[0], trainer.state.curve[-1]
    assert last["held_out_loss"] < first["held_out_loss"] - 1.0


def test_masked_lm_pretraining_stops_when_the_held_out_accuracy_stops_rising(tokenizer, tmp_path, monkeypatch):
    flat = mlm_run(tokenizer, tmp_path / "flat", 12, lr=0.0, patience=2)  # nothing learns: every evaluation ties,
    assert flat.state.step == 12 and flat.state.stopped == "max_updates reached"  # and a tie is a gain (gained)
    real = MlmTrainer.evaluate
    monkeypatch.setattr(MlmTrainer, "evaluate", lambda self: (real(self)[0], 0.5 - 0.01 * self.state.step))
    falling = mlm_run(tokenizer, tmp_path / "falling", 30, patience=2)
    assert falling.state.step == 6 and falling.state.stopped.startswith("early stop: no held-out accuracy gain")
    monkeypatch.undo()
    rising = mlm_run(tokenizer, tmp_path / "rising", 60, lr=1e-2, patience=100)
    accuracies = [row["held_out_accuracy"] for row in rising.state.curve]
    best = max(accuracies)
    assert rising.state.best_step == max(r["step"] for r in rising.state.curve if r["held_out_accuracy"] == best)
    rising.load_best()
    assert rising.evaluate()[1] == best  # the most accurate update is the BERT, not the last


def tiny_abnet(tokenizer, freeze: bool = True, seed: int = 1) -> ABNet:
    size = AbnetAdapters(encoder_inner=16, decoder_ffn=32, dropout=0.0, max_target_len=20)
    return ABNet(build_bert(TINY, tokenizer, seed), build_bert(TINY, tokenizer, seed + 1), size, freeze)


def pairs_batch(tokenizer, sources: list[str], targets: list[str], seed: int = 0):
    src = tokenizer(sources, padding=True, return_tensors="pt")
    tgt = tokenizer(targets)["input_ids"]
    batch = mask_targets(tgt, tokenizer.mask_token_id, tokenizer.pad_token_id, torch.Generator().manual_seed(seed))
    return src["input_ids"], src["attention_mask"], batch


def test_only_the_adapters_train_and_the_berts_stay_as_they_were(tokenizer):
    model = tiny_abnet(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and not any(name.startswith(("source_bert.", "target_bert.")) for name in trainable)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    source, keep, batch = pairs_batch(tokenizer, GERMAN[:4], GERMAN[1:5])
    loss, _ = cmlm_loss(model, source, keep, batch)
    loss.backward()
    optimizer.step()
    after = model.state_dict()
    for name, value in before.items():
        if name.startswith(("source_bert.", "target_bert.")):
            assert torch.equal(value, after[name]), name
    assert not torch.equal(before["encoder_adapters.0.w1.weight"], after["encoder_adapters.0.w1.weight"])
    assert not torch.equal(before["decoder_adapters.1.ffn.0.weight"], after["decoder_adapters.1.ffn.0.weight"])
    assert set(model.adapter_state()) == {k for k in after if not k.startswith(("source_bert.", "target_bert."))}


def test_the_mask_predict_baseline_trains_everything(tokenizer):
    model = tiny_abnet(tokenizer, freeze=False)
    assert all(p.requires_grad for p in model.parameters())


def test_the_conditional_masked_lm_batch_masks_one_to_all_pieces_never_the_frame():
    targets = [[2, 10, 11, 12, 13, 3], [2, 20, 3], [2, 30, 31, 3]]
    for seed in range(20):
        batch = mask_targets(targets, mask_id=4, pad_id=0, generator=torch.Generator().manual_seed(seed))
        for row, target in enumerate(targets):
            masked = batch["target"][row] == 4
            assert 1 <= int(masked.sum()) <= len(target) - 2
            assert not masked[0] and not masked[len(target) - 1]
            assert torch.equal(batch["labels"][row][masked], torch.tensor(target)[masked[: len(target)]])
            assert (batch["labels"][row][~masked] == -100).all()
        assert batch["lengths"].tolist() == [4, 1, 2]
        assert batch["target_keep"].sum(1).tolist() == [6, 3, 4]


def test_the_length_token_learns_the_target_length_from_the_source(tokenizer):
    """Each source is one word repeated; the target length is set by which word it is."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the measured margin below is one thread's: other counts sum in other orders
    try:
        _learn_lengths(tokenizer)
    finally:
        torch.set_num_threads(threads)


def _learn_lengths(tokenizer) -> None:
    torch.manual_seed(0)
    words = ["Gott", "Erde", "Licht", "Tiefe"]
    sources = [" ".join([w] * (1 + i % 3)) for i in range(24) for w in words][:24]
    targets = [" ".join(["und"] * (1 + words.index(s.split()[0]))) for s in sources]
    model = tiny_abnet(tokenizer)
    source, keep, batch = pairs_batch(tokenizer, sources, targets)

    def accuracy() -> float:
        model.eval()
        with torch.no_grad():
            right = (model.encode(source, keep)[2].argmax(-1) == batch["lengths"]).float().mean().item()
        model.train()
        return right

    untrained = accuracy()  # the control: one length for every source, about chance (0.25, four lengths)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    for step in range(200):
        source_b, keep_b, batch_b = pairs_batch(tokenizer, sources, targets, seed=step)
        loss, _ = cmlm_loss(model, source_b, keep_b, batch_b)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # at one thread every length is right after 100 updates (three seeds, measured); 200 leave a wide margin
    assert untrained <= 0.5 and accuracy() >= 0.95


class ToyModel:
    """A stand-in for AB-Net whose right output is known: lengths 4 (a little likelier) and 3 are proposed; for
    length 3 the answer is 7 8 9. Piece 2 is 8 (sure) only when piece 1 is visible as 7, else 5 (unsure); at
    length 4 the last piece is a guess, so length 3 has the better mean log-probability."""

    special = {"cls": 0, "sep": 1, "mask": 2, "pad": 3}
    vocab = 12

    def __init__(self):
        self.calls = 0
        self.projected: list[int] = []  # states the output layer saw, a call each

    def encode(self, source, keep):
        lengths = torch.full((len(source), 8), -10.0)
        lengths[:, 4], lengths[:, 3] = -0.5, -1.0
        return torch.zeros(len(source), 1, 1), torch.zeros(len(source), 1, dtype=torch.bool), lengths

    def decode(self, tokens, keep, encoded, padding):
        """Each position's state: its index and the piece at position 1, all its logits depend on."""
        self.calls += 1
        return torch.stack([torch.arange(tokens.shape[1]).expand_as(tokens), tokens[:, 1:2].expand_as(tokens)], -1)

    def logits(self, states):
        self.projected.append(states.shape[:-1].numel())
        out = torch.full((*states.shape[:-1], self.vocab), -20.0)
        flat = out.view(-1, self.vocab)
        for row, (i, first) in zip(flat, states.reshape(-1, 2).tolist(), strict=True):
            if i == 1:
                row[7], row[6] = math.log(0.95), math.log(0.05)
            elif i == 2:
                if first == 7:
                    row[8] = math.log(0.99)
                else:
                    row[5], row[8] = math.log(0.4), math.log(0.3)
            elif i == 3:
                row[9], row[10] = math.log(0.9), math.log(0.1)
            elif i > 3:
                row[11], row[10] = math.log(0.2), math.log(0.1)
        return out


def test_mask_predict_remasks_the_least_confident_pieces_and_picks_the_best_length():
    model = ToyModel()
    out, steps = mask_predict(model, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3), ToyModel.special,
                              length_candidates=2, iterations=10)
    assert out == [[7, 8, 9], [7, 8, 9]]
    # iteration 0 gives 7 5 9; 1 re-masks 5 and 9 and gets 8; 2 re-masks 9 and 7, nothing changes: stop
    assert steps == [3, 3]
    # the output layer sees the masked pieces only: all 2 x (4 + 3) at first (not the 2 x 2 x 6 positions with
    # [CLS], [SEP] and padding), then 2 x (3 + 2) re-masked
    assert model.projected[:2] == [14, 10]


def test_mask_predict_stops_at_the_iteration_bound():
    out, steps = mask_predict(ToyModel(), torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3), ToyModel.special,
                              length_candidates=2, iterations=1)
    assert out == [[7, 5, 9]] and steps == [1]


def test_the_linear_decay_of_masked_pieces():
    assert masks_per_iteration(10, 10) == [10, 9, 8, 7, 6, 5, 4, 3, 2, 1]
    assert masks_per_iteration(3, 10) == [3, 2, 2, 2, 1, 1, 1, 0, 0, 0]


def test_an_abnet_directory_loads_back_with_the_same_weights(tokenizer, tmp_path):
    model = tiny_abnet(tokenizer)
    for p in model.parameters():
        if p.requires_grad:
            torch.nn.init.normal_(p)
    save_abnet(model, tmp_path / "abnet", tokenizer, tokenizer)
    loaded, source_tokenizer, _ = load_abnet(tmp_path / "abnet")
    for name, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name
    assert len(source_tokenizer) == len(tokenizer)
    bert, _ = load_bert(tmp_path / "abnet" / "source")
    save_bert(bert, tokenizer, tmp_path / "bert")
    check_bert_dir(tmp_path / "bert")


def copy_corpus(folder, lines: list[str]):
    folder.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", lines), ("dev", lines[:6])):
        for code in ("de", "en"):
            (folder / f"{split}.{code}").write_text("\n".join(part) + "\n", encoding="utf-8")
    return folder


def abnet_training(updates: int, **changes):
    from vocabridge.config import Lang, Training

    cfg = Training(max_updates=updates, batch_tokens=400, lr=3e-3, warmup=10, eval_every=max(updates // 2, 1),
                   dev_sentences=6, checkpoint_every=2, log_every=2, patience=0, max_len=40, seed=1)
    return replace(cfg, **changes), Lang()


def test_abnet_training_resumes_exactly_after_a_crash(tokenizer, tmp_path):
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.plm.train import AbnetTrainer, encode_pairs, fit_abnet

    class Crash(Exception):
        pass

    class CrashingTrainer(AbnetTrainer):
        def _step(self, batch):
            if self.state.step == 3:  # in the middle of update 4, after the checkpoint at update 2
                raise Crash()
            return super()._step(batch)

    corpus = copy_corpus(tmp_path / "corpus", GERMAN[:6])
    cfg, lang = abnet_training(4, eval_every=2)
    straight = tiny_abnet(tokenizer)
    fit_abnet(straight, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "a", {"run": 1}, "a", MaskPredict(2, 2))
    lines = read_text_lines(corpus / "train.de")
    data = encode_pairs(tokenizer, tokenizer, lines, lines, cfg.max_len)
    with pytest.raises(Crash):
        CrashingTrainer(tiny_abnet(tokenizer), tokenizer, tokenizer, data, (lines, lines), cfg, tmp_path / "b",
                        {"run": 1}, "b", MaskPredict(2, 2), 1.0).train()
    resumed = tiny_abnet(tokenizer, seed=7)  # another init: everything must come from the checkpoint
    fit_abnet(resumed, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "b", {"run": 1}, "b", MaskPredict(2, 2))
    for name, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name


def test_the_mask_predict_baseline_learns_to_copy_and_decodes_it(tokenizer, tmp_path):
    """The copy task, everything trained: length prediction, the conditional masked LM and Mask-Predict decoding
    together give the source back."""
    from vocabridge.plm.train import fit_abnet, translate_abnet

    corpus = copy_corpus(tmp_path / "corpus", GERMAN[:6])
    cfg, lang = abnet_training(200, lr=5e-3, eval_every=100, checkpoint_every=100, log_every=50)
    size = AbnetAdapters(encoder_inner=64, decoder_ffn=64, dropout=0.0, max_target_len=36)
    model = ABNet(build_bert(TINY, tokenizer, 1), build_bert(TINY, tokenizer, 2), size, freeze_bert=False)
    state, summary = fit_abnet(model, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "ckpt", {"run": 1}, "copy",
                               MaskPredict(1, 10))
    assert summary["trainable_parameters"] == summary["parameters"]
    hyps, speed = translate_abnet(model, tokenizer, tokenizer, GERMAN[:6], MaskPredict(1, 10))
    assert sum(h == s for h, s in zip(hyps, GERMAN[:6], strict=True)) >= 4, hyps
    assert speed["sentences_per_second"] > 0 and 1 <= speed["mean_iterations"] <= 10
    assert state.dev_log[-1]["dev_bleu"] > 30


def test_abnet_trains_its_adapters_through_frozen_berts(tokenizer, tmp_path):
    from vocabridge.plm.train import fit_abnet

    corpus = copy_corpus(tmp_path / "corpus", GERMAN[:6])
    cfg, lang = abnet_training(150, lr=5e-3, eval_every=75, checkpoint_every=75, log_every=50)
    size = AbnetAdapters(encoder_inner=64, decoder_ffn=64, dropout=0.0, max_target_len=36)
    model = ABNet(build_bert(TINY, tokenizer, 1), build_bert(TINY, tokenizer, 2), size)
    state, summary = fit_abnet(model, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "ckpt", {"run": 1}, "abnet",
                               MaskPredict(1, 2))
    assert summary["trainable_parameters"] < summary["parameters"] / 2
    # the untrained adapters are the control: 0.53 to 0.62 of their dev loss after 150 updates (BERT seeds 1, 3, 5)
    assert state.dev_log[-1]["dev_loss"] < 0.8 * state.dev_log[0]["dev_loss"]


def test_a_mask_predict_directory_keeps_its_trained_berts(tokenizer, tmp_path):
    model = tiny_abnet(tokenizer, freeze=False)
    for p in model.parameters():
        torch.nn.init.normal_(p)
    save_abnet(model, tmp_path / "mp", tokenizer, tokenizer)
    loaded, _, _ = load_abnet(tmp_path / "mp")
    assert not loaded.freeze_bert
    for name, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name


def tiny_abnet_enc(tokenizer, freeze: bool = True, seed: int = 1, inner: int = 16) -> ABNetEnc:
    from transformers import BertLMHeadModel

    size = AbnetAdapters(encoder_inner=inner, decoder_ffn=32, dropout=0.0, max_target_len=36)
    source = build_bert(TINY, tokenizer, seed)
    torch.manual_seed(seed + 1)
    decoder = BertLMHeadModel(autoregressive_decoder_config(build_bert(TINY, tokenizer, seed + 1).config))
    decoder.set_attn_implementation("eager")
    return ABNetEnc(source, decoder, size, freeze)


def test_abnet_enc_trains_adapters_and_decoder_never_the_source_bert(tokenizer):
    model = tiny_abnet_enc(tokenizer)
    assert model.decoder.config.is_decoder and model.decoder.config.add_cross_attention
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    src = tokenizer(GERMAN[:4], padding=True, return_tensors="pt")
    tgt = tokenizer(GERMAN[1:5], padding=True, return_tensors="pt")
    seq2seq_loss(model, src["input_ids"], src["attention_mask"], tgt["input_ids"], tgt["attention_mask"]).backward()
    optimizer.step()
    after = model.state_dict()
    changed = {k for k, v in before.items() if not torch.equal(v, after[k])}
    assert changed and not any(k.startswith("source_bert.") for k in changed)
    assert any(k.startswith("decoder.") for k in changed) and any(k.startswith("encoder_adapters.") for k in changed)


def test_the_autoregressive_decoder_never_sees_a_later_piece(tokenizer):
    """Causal decoder: changing the last target piece leaves the loss terms of the earlier positions as they were."""
    model = tiny_abnet_enc(tokenizer).eval()
    src = tokenizer(GERMAN[:1], return_tensors="pt")
    tgt = tokenizer(GERMAN[1:2], return_tensors="pt")["input_ids"]
    changed = tgt.clone()
    changed[0, -2] = (changed[0, -2] + 1) % len(tokenizer)
    encoded = model.encode(src["input_ids"], src["attention_mask"])
    keep = src["attention_mask"]
    states = [model.decoder.bert(input_ids=t, encoder_hidden_states=encoded, encoder_attention_mask=keep)
              .last_hidden_state for t in (tgt, changed)]
    assert torch.allclose(states[0][0, :-2], states[1][0, :-2], atol=1e-6)
    assert not torch.allclose(states[0][0, -2], states[1][0, -2])


def test_abnet_enc_learns_to_copy_and_beam_search_decodes_it(tokenizer, tmp_path):
    """AB-Net-Enc on the copy task, the source BERT trained too (a from-scratch encoder): greedy and beam search give
    the source back; the directory loads back with the same weights and the same translations."""
    from vocabridge.plm.train import fit_abnet, translate_abnet

    corpus = copy_corpus(tmp_path / "corpus", GERMAN[:6])
    cfg, lang = abnet_training(150, lr=5e-3, eval_every=75, checkpoint_every=75, log_every=50)
    model = tiny_abnet_enc(tokenizer, freeze=False, inner=64)
    state, summary = fit_abnet(model, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "ckpt", {"run": 1}, "enc",
                               MaskPredict(1, 1))
    assert summary["trainable_parameters"] == summary["parameters"]
    assert state.dev_log[-1]["dev_loss"] < 0.5 * state.dev_log[0]["dev_loss"]
    for beam in (1, 4):
        hyps, speed = translate_abnet(model, tokenizer, tokenizer, GERMAN[:6], MaskPredict(), beam=beam)
        assert sum(h == s for h, s in zip(hyps, GERMAN[:6], strict=True)) >= 4, (beam, hyps)
    save_abnet(model, tmp_path / "enc", tokenizer, tokenizer)
    loaded, _, _ = load_abnet(tmp_path / "enc")
    assert isinstance(loaded, ABNetEnc) and not (tmp_path / "enc" / "target" / "model.safetensors").exists()
    for name, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name
    assert translate_abnet(loaded, tokenizer, tokenizer, GERMAN[:6], MaskPredict(), beam=4)[0] == hyps
    src = tokenizer(GERMAN[:2], padding=True, return_tensors="pt")
    special = {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id, "pad": tokenizer.pad_token_id}
    assert all(tokenizer.sep_token_id not in p for p in beam_search(loaded.eval(), src["input_ids"],
                                                                     src["attention_mask"], special, 2))


def test_beam_search_stops_at_the_decoder_positions_whatever_max_len(tokenizer):
    """An untrained decoder rarely emits [SEP]: a long `max_len` is cut to the positions the decoder has."""
    model = tiny_abnet_enc(tokenizer).eval()
    src = tokenizer(GERMAN[:2], padding=True, return_tensors="pt")
    special = {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id, "pad": tokenizer.pad_token_id}
    pieces = beam_search(model, src["input_ids"], src["attention_mask"], special, 2, max_len=500)
    assert all(len(p) <= TINY.max_positions - 2 for p in pieces)


def test_the_masked_lm_loss_scores_the_masked_pieces_as_bert_does(tokenizer, tmp_path):
    """The trainer runs BERT's output layer on the masked pieces only: in fp32 its loss is transformers' own."""
    ids = encode_sentences(tokenizer, GERMAN[:8], 40)
    cfg = MlmTraining(batch_sentences=8, bf16=False)
    trainer = MlmTrainer(build_bert(TINY, tokenizer, seed=1).eval(), tokenizer, ids, ids[:6], cfg, tmp_path, {}, "t")
    batch = trainer._batch(ids, generator_seed=3)
    assert (batch["labels"] != -100).any()
    assert torch.allclose(trainer.loss(batch).value, trainer.model(**batch).loss, rtol=1e-5, atol=1e-6)


def linear_output_dtypes(model: torch.nn.Module) -> set[torch.dtype]:
    """Records the dtype of every Linear layer's output while the returned set lives (the hooks stay on)."""
    seen: set[torch.dtype] = set()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
    return seen


@pytest.mark.parametrize("bf16", [False, True])
def test_the_plm_trainers_compute_in_the_precision_bf16_resolves_to(tokenizer, tmp_path, bf16):
    """Masked-LM pretraining and AB-Net's family train under bf16 autocast where asked and the CPU has it (1.6-1.9x
    faster an update on AVX-512 bf16 cores, benchmarks/plm_precision.py), in fp32 otherwise, and say which."""
    from vocabridge.nmt.precision import cpu_bf16_supported
    from vocabridge.plm.train import fit_abnet

    expected = torch.bfloat16 if bf16 and cpu_bf16_supported() else torch.float32
    ids = encode_sentences(tokenizer, GERMAN, 40)
    cfg = MlmTraining(max_updates=2, batch_sentences=8, warmup=1, eval_every=2, checkpoint_every=2,
                      held_out_sentences=6, bf16=bf16)
    bert = build_bert(TINY, tokenizer, seed=1)
    trainer = MlmTrainer(bert, tokenizer, ids, ids[:6], cfg, tmp_path / "mlm", {"run": 1}, "t")
    seen = linear_output_dtypes(bert)
    trainer.train()
    assert expected in seen and trainer.precision.bf16 == (expected == torch.bfloat16)

    model = tiny_abnet(tokenizer)
    corpus = copy_corpus(tmp_path / "corpus", GERMAN[:6])
    train, lang = abnet_training(2, bf16=bf16)
    seen = linear_output_dtypes(model.encoder_adapters)
    _, summary = fit_abnet(model, tokenizer, tokenizer, corpus, lang, train, tmp_path / "abnet", {"run": 1}, "a",
                           MaskPredict(2, 2))
    assert expected in seen and summary["precision"] == ("bf16" if expected == torch.bfloat16 else "fp32")


def test_a_model_without_bert_reads_only_the_berts_vocabulary_and_sizes(tokenizer, tmp_path):
    """`plms: false` (Mask-Predict without BERT): the same model from an untrained BERT directory as from a trained
    one, so its rows run without the plm stage's pretraining (the BERTs' tokenizers suffice)."""
    from vocabridge.plm.abnet import new_abnet

    size = AbnetAdapters(encoder_inner=16, decoder_ffn=32, dropout=0.0, max_target_len=36)
    untrained, trained = build_bert(TINY, tokenizer, seed=1), build_bert(TINY, tokenizer, seed=1)
    for p in trained.parameters():
        torch.nn.init.normal_(p)
    for name, bert in (("untrained", untrained), ("trained", trained)):
        save_bert(bert, tokenizer, tmp_path / name)
    models = {name: new_abnet(tmp_path / name, tmp_path / name, size, False, seed=3)[0].state_dict()
              for name in ("untrained", "trained")}
    assert models["untrained"].keys() == models["trained"].keys()
    assert all(torch.equal(value, models["trained"][key]) for key, value in models["untrained"].items())
    with_berts = new_abnet(tmp_path / "trained", tmp_path / "trained", size, True, seed=3)[0].state_dict()
    assert not all(torch.equal(value, with_berts[key]) for key, value in models["trained"].items() if key in with_berts)
