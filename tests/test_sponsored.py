"""The PLM-sponsored model of Duan & Zhao (2023) on hand-made data: the coordinator's mask against Eq. 3, no target
position sees a later one, the half-layer distillation trains the student and never the teacher, Eq. 9's terms
and their ablations."""

from __future__ import annotations

import pytest
import torch

from vocabridge.config import BertArch, Sponsored
from vocabridge.plm.bert import build_bert, train_plm_tokenizer
from vocabridge.plm.sponsored import (
    Coordinator,
    PlmSponsored,
    auxiliary_labels,
    coordinator_mask,
    sponsored_loss,
    translation_loss,
)

TEXT = ["Im Anfang schuf Gott Himmel und Erde.", "Und die Erde war wüst und leer.",
        "Und Gott sprach: Es werde Licht!", "Und es ward Licht."] * 6
TINY = BertArch(hidden=32, layers=4, heads=2, ffn=64, max_positions=40, dropout=0.0)



@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_plm_tokenizer(TEXT, 60, tmp_path_factory.mktemp("tok"))


def test_the_mask_is_eq_3_source_open_later_target_positions_blocked():
    # n = 3 target positions, m = 2 source positions; 1 = blocked (the paper's convention)
    expected = torch.tensor([[0, 0, 0, 1, 1, 0, 1, 1],
                             [0, 0, 0, 0, 1, 0, 0, 1],
                             [0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(coordinator_mask(2, 3), expected)
    big = coordinator_mask(5, 4)
    assert big.shape == (4, 5 + 8) and not big[:, :5].any()
    for i in range(4):
        for j in range(4):
            assert big[i, 5 + j] == big[i, 9 + j] == (j > i)


def test_a_coordinator_position_never_sees_a_later_target_position():
    torch.manual_seed(0)
    coordinator = Coordinator(16, 2, 2, 32, 0.0, 20).eval()
    source, target = torch.randn(1, 5, 16), torch.randn(1, 4, 16)
    changed = target.clone()
    changed[0, 3] += 1.0
    no_pad_s, no_pad_t = torch.zeros(1, 5, dtype=torch.bool), torch.zeros(1, 4, dtype=torch.bool)
    a = coordinator(source, no_pad_s, target, no_pad_t)
    b = coordinator(source, no_pad_s, changed, no_pad_t)
    assert torch.allclose(a[0, :3], b[0, :3], atol=1e-6) and not torch.allclose(a[0, 3], b[0, 3])
    other = source.clone()
    other[0, 4] += 1.0  # every target position sees the whole source
    assert not torch.allclose(a[0, 0], coordinator(other, no_pad_s, target, no_pad_t)[0, 0])


def sponsored(tokenizer, kd: bool = True, half_layer: bool = True, **terms) -> PlmSponsored:
    teacher = build_bert(TINY, tokenizer, 1) if kd else None
    settings = Sponsored(coordinator_layers=2, coordinator_ffn=64, dropout=0.0, distill=kd, half_layer=half_layer,
                         **terms)
    return PlmSponsored(build_bert(TINY, tokenizer, 1), build_bert(TINY, tokenizer, 2), teacher, settings)


def pairs(tokenizer, sources: list[str], targets: list[str]) -> dict[str, torch.Tensor]:
    src = tokenizer(sources, padding=True, return_tensors="pt")
    tgt = tokenizer(targets, padding=True, return_tensors="pt")
    return {"source": src["input_ids"], "source_keep": src["attention_mask"], "target": tgt["input_ids"],
            "target_keep": tgt["attention_mask"]}


def test_the_whole_model_predicts_left_to_right(tokenizer):
    """Changing a later target piece leaves the logits of every earlier position as they were (the decoder BERT
    runs causally and the coordinator is masked)."""
    model = sponsored(tokenizer).eval()
    src = tokenizer(TEXT[:1], return_tensors="pt")
    tgt = tokenizer(TEXT[1:2], return_tensors="pt")
    ids = tgt["input_ids"].clone()
    ids[0, 4] = (ids[0, 4] + 1) % len(tokenizer)
    a, _, _ = model(src["input_ids"], src["attention_mask"], tgt["input_ids"], tgt["attention_mask"])
    b, _, _ = model(src["input_ids"], src["attention_mask"], ids, tgt["attention_mask"])
    assert torch.allclose(a[0, :4], b[0, :4], atol=1e-5) and not torch.allclose(a[0, 4], b[0, 4])


def test_distillation_trains_the_student_never_the_teacher(tokenizer):
    model = sponsored(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    loss, parts = sponsored_loss(model, pairs(tokenizer, TEXT[:4], TEXT[1:5]))
    assert set(parts) == {"nmt_loss", "kd_loss"} and parts["kd_loss"] > 0
    assert loss.item() == pytest.approx(0.9 * parts["nmt_loss"] + 0.1 * parts["kd_loss"], rel=1e-5)
    loss.backward()
    optimizer.step()
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert not any(k.startswith("teacher.") for k in changed)
    for part in ("source_bert.", "target_bert.", "coordinator.", "fusion."):
        assert any(k.startswith(part) for k in changed), part


def test_without_a_teacher_the_loss_is_the_translation_loss(tokenizer):
    model = sponsored(tokenizer, kd=False, half_layer=False)
    loss, parts = sponsored_loss(model, pairs(tokenizer, TEXT[:2], TEXT[1:3]))
    assert set(parts) == {"nmt_loss"} and loss.item() == pytest.approx(parts["nmt_loss"])
    assert model.fusion is None


def with_terms(tokenizer, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`batch` with L_MLM's masked source (its third piece masked) and labels, and L_T's labels on half the words."""
    masked = batch["source"].clone()
    masked[:, 2] = tokenizer.mask_token_id
    mlm_labels = torch.full_like(masked, -100)
    mlm_labels[:, 2] = batch["source"][:, 2]
    lm_labels = auxiliary_labels(batch["target"], batch["target_keep"], 0.5, torch.Generator().manual_seed(0))
    return batch | {"mlm_source": masked, "mlm_labels": mlm_labels, "lm_labels": lm_labels}


def test_eq_9_adds_the_masked_lm_and_the_target_lm_terms_in_full(tokenizer):
    model = sponsored(tokenizer).eval()
    batch = pairs(tokenizer, TEXT[:4], TEXT[1:5])
    terms = with_terms(tokenizer, batch)
    masked, lm_labels = terms["mlm_source"], terms["lm_labels"]
    loss, parts = sponsored_loss(model, terms)
    assert set(parts) == {"nmt_loss", "kd_loss", "mlm_loss", "lm_loss"}
    expected = 0.9 * parts["nmt_loss"] + 0.1 * parts["kd_loss"] + parts["mlm_loss"] + parts["lm_loss"]
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    # L_MLM is the source BERT's own masked-LM loss at the masked pieces
    logits = model.source_bert(input_ids=masked, attention_mask=batch["source_keep"]).logits
    by_hand = torch.nn.functional.cross_entropy(logits[:, 2], batch["source"][:, 2])
    assert parts["mlm_loss"] == pytest.approx(by_hand.item(), rel=1e-4)
    # L_T predicts from the target words alone: another source leaves it as it was
    other = batch | {"source": batch["source"].flip(0), "source_keep": batch["source_keep"].flip(0),
                     "lm_labels": lm_labels}
    assert sponsored_loss(model, other)[1]["lm_loss"] == pytest.approx(parts["lm_loss"], rel=1e-5)


@pytest.mark.parametrize("kd", [True, False])
def test_released_weighting_weighs_the_terms_per_target_piece_as_the_authors_code(tokenizer, kd):
    """`weighting: released`: the masked-LM terms at alpha (1 without a teacher) over the target pieces, L_kd summed
    over hidden units and source pieces over the target pieces; the same parts as Eq. 9's weighting."""
    batch = pairs(tokenizer, TEXT[:4], TEXT[1:5])
    terms = with_terms(tokenizer, batch)
    eq9 = sponsored(tokenizer, kd=kd, half_layer=kd).eval()
    released = sponsored(tokenizer, kd=kd, half_layer=kd, weighting="released").eval()
    released.load_state_dict(eq9.state_dict())
    _, parts = sponsored_loss(eq9, terms)
    loss, same = sponsored_loss(released, terms)
    assert same == pytest.approx(parts, rel=1e-5)
    target_pieces = int(batch["target_keep"][:, 1:].sum())
    source_pieces = int(batch["source_keep"].sum())
    auxiliary = (parts["mlm_loss"] + parts["lm_loss"]) / target_pieces
    if kd:
        expected = (0.9 * parts["nmt_loss"] + 0.1 * parts["kd_loss"] * TINY.hidden * source_pieces / target_pieces
                    + 0.9 * auxiliary)
    else:
        expected = parts["nmt_loss"] + auxiliary
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_the_target_lm_counts_the_given_fraction_of_real_words(tokenizer):
    batch = pairs(tokenizer, TEXT[:24], TEXT[:24])
    labels = auxiliary_labels(batch["target"], batch["target_keep"], 0.1, torch.Generator().manual_seed(3))
    real = batch["target_keep"][:, 1:].bool()
    chosen = labels != -100
    assert not (chosen & ~real).any()
    assert torch.equal(labels[chosen], batch["target"][:, 1:][chosen])
    assert 0.05 < chosen.sum().item() / real.sum().item() < 0.15
    assert torch.equal(labels, auxiliary_labels(batch["target"], batch["target_keep"], 0.1,
                                                torch.Generator().manual_seed(3)))


def test_full_layer_distillation_pulls_the_encoder_output_without_a_gate(tokenizer):
    """The paper's "+L_fkd -L_kd": the encoder's last state is distilled; the half-layer model distils the state
    after the first half of the layers."""
    from vocabridge.plm.sponsored import bert_layers

    batch = pairs(tokenizer, TEXT[:2], TEXT[1:3])
    full = sponsored(tokenizer, half_layer=False).eval()
    states = bert_layers(full.source_bert, batch["source"], batch["source_keep"])
    r_s, distilled = full.encode(batch["source"], batch["source_keep"])
    assert full.fusion is None and torch.equal(r_s, states[-1]) and torch.equal(distilled, states[-1])
    half = sponsored(tokenizer).eval()
    r_s, distilled = half.encode(batch["source"], batch["source_keep"])
    states = bert_layers(half.source_bert, batch["source"], batch["source_keep"])
    assert torch.equal(distilled, states[2]) and not torch.allclose(r_s, states[-1])


def test_the_translation_loss_counts_real_pieces_only(tokenizer):
    batch = pairs(tokenizer, TEXT[:2], TEXT[1:3])
    logits = torch.randn(2, batch["target"].shape[1] - 1, len(tokenizer))
    keep = batch["target_keep"][:, 1:].bool()
    by_hand = torch.nn.functional.cross_entropy(logits[keep], batch["target"][:, 1:][keep])
    assert translation_loss(logits, batch["target"], batch["target_keep"]).item() == pytest.approx(by_hand.item())


def copy_run(tmp_path, updates: int):
    from vocabridge.config import Lang, Training

    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    for split in ("train", "dev"):
        for code in ("de", "en"):
            (corpus / f"{split}.{code}").write_text("\n".join(TEXT[:4]) + "\n", encoding="utf-8")
    cfg = Training(max_updates=updates, batch_tokens=400, lr=3e-3, warmup=10, eval_every=updates // 2,
                   dev_sentences=4, checkpoint_every=updates // 2, log_every=20, patience=0, max_len=40, seed=1)
    return corpus, cfg, Lang()


def test_the_sponsored_model_learns_to_copy_and_decodes_it_greedily(tokenizer, tmp_path):
    """The copy task through the pipeline's trainer (translation and distillation, dev selection, checkpoints):
    greedy decoding gives the source back. (L_MLM and L_T on these random BERTs slow the copy down: the resume
    test below runs them.)"""
    from vocabridge.config import MaskPredict
    from vocabridge.plm.train import fit_abnet, translate_abnet

    corpus, cfg, lang = copy_run(tmp_path, 120)
    model = sponsored(tokenizer, mlm=0.0, target_lm=0.0)
    state, summary = fit_abnet(model, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "ckpt", {"run": 1},
                               "sponsored", MaskPredict())
    assert summary["trainable_parameters"] < summary["parameters"]  # the teacher stays frozen
    assert state.dev_log[-1]["dev_loss"] < 0.5 * state.dev_log[0]["dev_loss"]
    hyps, _ = translate_abnet(model, tokenizer, tokenizer, TEXT[:4], MaskPredict())
    assert sum(h == s for h, s in zip(hyps, TEXT[:4], strict=True)) >= 3, hyps
    beamed, _ = translate_abnet(model, tokenizer, tokenizer, TEXT[:4], MaskPredict(), beam=4)
    assert sum(h == s for h, s in zip(beamed, TEXT[:4], strict=True)) >= 3, beamed


def test_sponsored_training_resumes_exactly_after_a_crash(tokenizer, tmp_path):
    """With every term of Eq. 9 on: L_MLM's masks and L_T's words are drawn again the same after the crash."""
    from vocabridge.config import MaskPredict
    from vocabridge.plm.train import SponsoredTrainer, encode_pairs, fit_abnet

    class Crash(Exception):
        pass

    class CrashingTrainer(SponsoredTrainer):
        def _step(self, batch):
            if self.state.step == 15:  # after the checkpoint at update 10
                raise Crash()
            return super()._step(batch)

    corpus, cfg, lang = copy_run(tmp_path, 20)
    straight = sponsored(tokenizer)
    fit_abnet(straight, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "a", {"run": 1}, "a", MaskPredict())
    data = encode_pairs(tokenizer, tokenizer, TEXT[:4], TEXT[:4], cfg.max_len)
    with pytest.raises(Crash):
        CrashingTrainer(sponsored(tokenizer), tokenizer, tokenizer, data, (TEXT[:4], TEXT[:4]), cfg, tmp_path / "b",
                        {"run": 1}, "b", MaskPredict(), 1.0).train()
    resumed = sponsored(tokenizer)
    fit_abnet(resumed, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "b", {"run": 1}, "b", MaskPredict())
    assert all(torch.equal(v, resumed.state_dict()[k]) for k, v in straight.state_dict().items())


def test_a_sponsored_directory_loads_back_with_its_teacher(tokenizer, tmp_path):
    from vocabridge.plm.abnet import load_abnet, save_abnet

    model = sponsored(tokenizer)
    for p in model.parameters():
        torch.nn.init.normal_(p)
    save_abnet(model, tmp_path / "plm-nmt", tokenizer, tokenizer)
    loaded, _, _ = load_abnet(tmp_path / "plm-nmt")
    assert isinstance(loaded, PlmSponsored) and loaded.settings == model.settings
    for name, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name
    assert not any(p.requires_grad for p in loaded.teacher.parameters())


def test_the_trainer_draws_eq_9_terms_per_update_and_only_those_switched_on(tokenizer, tmp_path):
    import numpy as np

    from vocabridge.config import MaskPredict
    from vocabridge.plm.train import SponsoredTrainer, encode_pairs

    _, cfg, _ = copy_run(tmp_path, 20)
    data = encode_pairs(tokenizer, tokenizer, TEXT[:4], TEXT[:4], cfg.max_len)

    def trainer(**terms) -> SponsoredTrainer:
        return SponsoredTrainer(sponsored(tokenizer, **terms), tokenizer, tokenizer, data, (TEXT[:4], TEXT[:4]), cfg,
                                tmp_path / str(terms), {"run": 1}, "t", MaskPredict(), 1.0)

    full = trainer()
    a, b = full._collate(np.arange(4)), full._collate(np.arange(4))
    assert {"mlm_source", "mlm_labels", "lm_labels"} <= set(a) and all(torch.equal(a[k], b[k]) for k in a)
    masked = a["mlm_labels"] != -100
    assert masked.any() and torch.equal(a["mlm_labels"][masked], a["source"][masked])
    assert a["mlm_source"].shape == a["source"].shape and not a["source_keep"][masked].eq(0).any()
    full.state.step += 1
    assert not torch.equal(full._collate(np.arange(4))["mlm_labels"], a["mlm_labels"])
    assert not {"mlm_source", "mlm_labels", "lm_labels"} & set(trainer(mlm=0.0, target_lm=0.0)._collate(np.arange(4)))


def test_beam_search_with_a_beam_as_wide_as_the_vocabulary_finds_the_best_hypothesis(tokenizer):
    """On a random model (deterministic): beam 1 is greedy search; with max_len 1 and a beam as wide as the
    vocabulary the search is exhaustive, so it must return the best of every hypothesis ([] and each single piece)
    under transformers' length-normalised score; nothing passes `max_len`."""
    from vocabridge.plm.sponsored import beam_search, greedy_search

    torch.manual_seed(0)
    model = sponsored(tokenizer, kd=False).eval()
    batch = pairs(tokenizer, TEXT[:3], TEXT[:3])
    special = {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id, "pad": tokenizer.pad_token_id,
               "mask": tokenizer.mask_token_id}
    source, keep = batch["source"], batch["source_keep"]
    greedy = greedy_search(model, source, keep, special, 6)
    assert beam_search(model, source, keep, special, 1, max_len=6) == greedy
    assert all(len(p) <= 6 for p in greedy + beam_search(model, source, keep, special, 3, max_len=6))

    def score(i: int, pieces: list[int], max_len: int = 1) -> float:
        """A hypothesis cut at max_len ends there: [SEP] is forced and costs nothing (as in transformers)."""
        ids = torch.tensor([[special["cls"], *pieces, special["sep"]]])
        logits, _, _ = model(source[i : i + 1], keep[i : i + 1], ids[:, :-1], torch.ones_like(ids[:, :-1]))
        logits[..., [special["cls"], special["pad"], special["mask"]]] = -torch.inf
        logp = logits.log_softmax(-1)[0].gather(1, ids[0, 1:, None])[:, 0]
        return (logp[:max_len].sum() if len(pieces) == max_len else logp.sum()).item() / (len(pieces) + 1)

    ordinary = [t for t in range(len(tokenizer)) if t not in special.values()]
    found = beam_search(model, source, keep, special, len(tokenizer), max_len=1)
    for i in range(len(source)):
        best = max([[], *([t] for t in ordinary)], key=lambda pieces: score(i, pieces))
        assert found[i] == best and score(i, found[i]) == pytest.approx(score(i, best))


@pytest.mark.parametrize("steps", [64, 2])
def test_decoding_one_piece_a_step_gives_the_logits_of_the_whole_prefix(tokenizer, steps):
    """Prefixes (the target BERT's key/value cache and the coordinator's keys and values so far, in buffers with
    room for `steps` pieces that grow when full) give, step by step, the logits the model computes over the whole
    prefix at once; selecting rows (beam search: any rows, or a reordering among rows of one source) keeps each
    row's own."""
    from vocabridge.plm.sponsored import Prefixes

    torch.manual_seed(0)
    model = sponsored(tokenizer, kd=False).eval()
    src = tokenizer(TEXT[:2], padding=True, return_tensors="pt")  # padded sources: the padding stays masked
    target = tokenizer(TEXT[2:3] * 2, return_tensors="pt")["input_ids"]
    target[1, 3:] = target[1, 3:].flip(0)  # two different prefixes
    assert target.shape[1] > 2 * steps or steps == 64  # the small buffers grow twice at least

    def expected(parent: int, pieces: list[int]) -> torch.Tensor:
        ids = torch.cat([target[parent], torch.tensor(pieces)])[None]
        logits, _, _ = model(src["input_ids"][parent : parent + 1], src["attention_mask"][parent : parent + 1], ids,
                             torch.ones_like(ids))
        return logits[0, -1]

    with torch.inference_mode():
        whole, _, _ = model(src["input_ids"], src["attention_mask"], target, torch.ones_like(target))
        prefixes = Prefixes(model, model.encode(src["input_ids"], src["attention_mask"])[0], src["attention_mask"],
                            steps)
        steps_logits = torch.stack([prefixes.extend(target[:, i]) for i in range(target.shape[1])], dim=1)
        assert torch.allclose(steps_logits, whole, atol=1e-4)
        prefixes.select(torch.tensor([1, 1, 0]))
        after = prefixes.extend(torch.tensor([5, 7, 5]))
        for row, parent, piece in ((0, 1, 5), (1, 1, 7), (2, 0, 5)):
            assert torch.allclose(after[row], expected(parent, [piece]), atol=1e-4)
        prefixes.select(torch.tensor([1, 0, 2]), same_sources=True)  # rows 0 and 1 share source 1
        again = prefixes.extend(torch.tensor([9, 9, 9]))
        for row, parent, pieces in ((0, 1, [7, 9]), (1, 1, [5, 9]), (2, 0, [5, 9])):
            assert torch.allclose(again[row], expected(parent, pieces), atol=1e-4)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_sentence_whose_search_ended_leaves_the_batch_and_the_others_translate_as_alone(tokenizer, beam,
                                                                                          monkeypatch):
    """Sentences leave the batch as their searches end (greedy and beam search): each still gets what it gets
    decoded alone. A random model's [SEP] rarely wins, so its output layer is sharpened and [SEP]'s bias raised
    until a search ends before the others (the prefixes are seen to shrink)."""
    from vocabridge.plm.sponsored import Prefixes, beam_search

    torch.manual_seed(0)
    model = sponsored(tokenizer, kd=False).eval()
    batch = tokenizer(TEXT[:4], padding=True, return_tensors="pt")
    special = {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id, "pad": tokenizer.pad_token_id,
               "mask": tokenizer.mask_token_id}
    shrank = []
    select = Prefixes.select

    def seen(self, rows, same_sources=False):
        shrank.append(len(rows) < len(self.blocked))
        select(self, rows, same_sources)

    monkeypatch.setattr(Prefixes, "select", seen)
    head = model.target_bert.cls.predictions
    with torch.no_grad():
        head.transform.LayerNorm.weight *= 40
    for tenths in range(40, 70):
        with torch.no_grad():
            head.bias[special["sep"]] = tenths / 10
        shrank.clear()
        together = beam_search(model, batch["input_ids"], batch["attention_mask"], special, beam, max_len=8)
        if any(shrank):
            break
    else:
        pytest.fail("no [SEP] bias ends a search before the others")
    for i, pieces in enumerate(together):
        width = int(batch["attention_mask"][i].sum())
        alone = beam_search(model, batch["input_ids"][i : i + 1, :width], batch["attention_mask"][i : i + 1, :width],
                            special, beam, max_len=8)
        assert alone == [pieces]


@pytest.mark.parametrize("plms", ["encoder", "decoder"])
def test_a_bert_on_one_side_only_keeps_that_sides_weights_and_draws_the_other(tokenizer, tmp_path, plms):
    from vocabridge.config import AbnetAdapters
    from vocabridge.plm.abnet import new_abnet
    from vocabridge.plm.bert import save_bert

    for side, seed in (("de", 1), ("en", 2)):
        save_bert(build_bert(TINY, tokenizer, seed), tokenizer, tmp_path / side)
    settings = Sponsored(coordinator_layers=2, coordinator_ffn=64, dropout=0.0)
    adapters = AbnetAdapters(encoder_inner=16, decoder_ffn=32, max_target_len=30)
    model, _, _ = new_abnet(tmp_path / "de", tmp_path / "en", adapters, plms, 7, "coordinator", settings)
    saved = {side: build_bert(TINY, tokenizer, seed).state_dict() for side, seed in (("de", 1), ("en", 2))}

    def same(bert, side) -> bool:
        return all(torch.equal(v, saved[side][k]) for k, v in bert.state_dict().items())

    assert same(model.source_bert, "de") == (plms == "encoder")
    assert same(model.target_bert, "en") == (plms == "decoder")
    assert (model.teacher is not None) == (plms == "encoder")  # the teacher is the source PLM: none without it
    assert all(p.requires_grad for p in model.source_bert.parameters())  # the sponsored model trains both sides
