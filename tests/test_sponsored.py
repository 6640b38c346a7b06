"""The PLM-sponsored model of Duan & Zhao (2023) on hand-made data: the coordinator's mask against Eq. 3, no target
position sees a later one, the half-layer distillation trains the student and never the teacher."""

from __future__ import annotations

import pytest
import torch

from vocabridge.config import BertArch, Sponsored
from vocabridge.plm.bert import build_bert, train_plm_tokenizer
from vocabridge.plm.sponsored import Coordinator, PlmSponsored, coordinator_mask, sponsored_loss

TEXT = ["Im Anfang schuf Gott Himmel und Erde.", "Und die Erde war wüst und leer.",
        "Und Gott sprach: Es werde Licht!", "Und es ward Licht."] * 6
TINY = BertArch(hidden=32, layers=4, heads=2, ffn=64, max_positions=40, dropout=0.0)


pytestmark = pytest.mark.usefixtures("two_threads")


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


def sponsored(tokenizer, kd: bool = True, half_layer: bool = True) -> PlmSponsored:
    teacher = build_bert(TINY, tokenizer, 1) if kd else None
    settings = Sponsored(coordinator_layers=2, coordinator_ffn=64, dropout=0.0, distill=kd, half_layer=half_layer)
    return PlmSponsored(build_bert(TINY, tokenizer, 1), build_bert(TINY, tokenizer, 2), teacher, settings)


def test_the_whole_model_predicts_left_to_right(tokenizer):
    """Changing a later target piece leaves the logits of every earlier position as they were (the decoder BERT
    runs causally and the coordinator is masked)."""
    model = sponsored(tokenizer).eval()
    src = tokenizer(TEXT[:1], return_tensors="pt")
    tgt = tokenizer(TEXT[1:2], return_tensors="pt")
    ids = tgt["input_ids"].clone()
    ids[0, 4] = (ids[0, 4] + 1) % len(tokenizer)
    a, _ = model(src["input_ids"], src["attention_mask"], tgt["input_ids"], tgt["attention_mask"])
    b, _ = model(src["input_ids"], src["attention_mask"], ids, tgt["attention_mask"])
    assert torch.allclose(a[0, :4], b[0, :4], atol=1e-5) and not torch.allclose(a[0, 4], b[0, 4])


def test_distillation_trains_the_student_never_the_teacher(tokenizer):
    model = sponsored(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    src = tokenizer(TEXT[:4], padding=True, return_tensors="pt")
    tgt = tokenizer(TEXT[1:5], padding=True, return_tensors="pt")
    loss, parts = sponsored_loss(model, src["input_ids"], src["attention_mask"], tgt["input_ids"],
                                 tgt["attention_mask"])
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
    src = tokenizer(TEXT[:2], padding=True, return_tensors="pt")
    tgt = tokenizer(TEXT[1:3], padding=True, return_tensors="pt")
    loss, parts = sponsored_loss(model, src["input_ids"], src["attention_mask"], tgt["input_ids"],
                                 tgt["attention_mask"])
    assert set(parts) == {"nmt_loss"} and loss.item() == pytest.approx(parts["nmt_loss"])
    assert model.fusion is None


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
    """The copy task through the pipeline's trainer (Eq. 5's loss, dev selection, checkpoints): greedy decoding
    gives the source back."""
    from vocabridge.config import MaskPredict
    from vocabridge.plm.train import fit_abnet, translate_abnet

    corpus, cfg, lang = copy_run(tmp_path, 120)
    model = sponsored(tokenizer)
    state, summary = fit_abnet(model, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "ckpt", {"run": 1},
                               "sponsored", MaskPredict())
    assert summary["trainable_parameters"] < summary["parameters"]  # the teacher stays frozen
    assert state.dev_log[-1]["dev_loss"] < 0.5 * state.dev_log[0]["dev_loss"]
    hyps, _ = translate_abnet(model, tokenizer, tokenizer, TEXT[:4], MaskPredict())
    assert sum(h == s for h, s in zip(hyps, TEXT[:4], strict=True)) >= 3, hyps


def test_sponsored_training_resumes_exactly_after_a_crash(tokenizer, tmp_path):
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
