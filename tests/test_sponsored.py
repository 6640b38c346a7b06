"""The PLM-sponsored model of Duan & Zhao (2023) on hand-made data: the coordinator's mask against Eq. 3, no target
position sees a later one, the half-layer distillation trains the student and never the teacher."""

from __future__ import annotations

import pytest
import torch

from vocabridge.config import BertArch
from vocabridge.plm.bert import build_bert, train_plm_tokenizer
from vocabridge.plm.sponsored import Coordinator, PlmSponsored, coordinator_mask, sponsored_loss

TEXT = ["Im Anfang schuf Gott Himmel und Erde.", "Und die Erde war wüst und leer.",
        "Und Gott sprach: Es werde Licht!", "Und es ward Licht."] * 6
TINY = BertArch(hidden=32, layers=4, heads=2, ffn=64, max_positions=40, dropout=0.0)


@pytest.fixture(autouse=True)
def two_threads():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(saved)


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
    return PlmSponsored(build_bert(TINY, tokenizer, 1), build_bert(TINY, tokenizer, 2), teacher, 2, 64, 0.0,
                        half_layer)


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
