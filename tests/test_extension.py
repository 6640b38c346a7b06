"""Vocabulary extension on hand-made text: which pieces are appended, and what stays as it was."""

from dataclasses import replace

import pytest
import sentencepiece as spm

from vocabridge.config import SpmModel
from vocabridge.errors import InputError
from vocabridge.nmt.vocab import PAD, Vocab
from vocabridge.tokenizers import train_spm
from vocabridge.transfer.extension import candidates, extend_spm, extend_vocab

UP = [f"the program number {i} runs on the server and writes the file" for i in range(200)]
DOWN = [f"then jerusalem sang to the prophets and the kings of israel {i}" for i in range(200)]
CFG = SpmModel(vocab_size=60, hard_vocab_limit=False)


@pytest.fixture(scope="module")
def vocabs():
    old = Vocab.from_spm(train_spm(UP, CFG, 1, 1, "up"))
    new = Vocab.from_spm(train_spm(DOWN, replace(CFG, vocab_size=90), 1, 1, "down"))
    return old, new


def test_candidates_are_new_word_initial_pieces_ranked_by_pieces_saved(vocabs):
    old, new = vocabs
    found = candidates(old.sp, new.sp, DOWN)
    assert found, "the adapted vocabulary has word-initial pieces the pretrained one lacks"
    for cand in found:
        assert cand.piece.startswith("\u2581") and cand.piece not in old.tokens
        assert cand.old_pieces == len(old.sp.encode(cand.piece[1:])) > 1
        assert cand.count == sum(line.count(cand.piece) for line in new.sp.encode(DOWN, out_type=str))
    assert [c.saved for c in found] == sorted((c.saved for c in found), reverse=True)


def test_extension_keeps_every_pretrained_token_and_segmentation_it_does_not_touch(vocabs):
    old, new = vocabs
    best = candidates(old.sp, new.sp, DOWN)
    ext, info = extend_vocab(old, new.sp, DOWN, 2)
    kept = [t for t in old.tokens if t != PAD]
    assert ext.tokens[: len(kept)] == kept and ext.tokens[-1] == PAD
    assert ext.tokens[len(kept):-1] == [c.piece for c in best[:2]] and info["appended"] == 2
    for cand in best[:2]:  # an appended word is one piece now
        assert ext.sp.encode(cand.piece[1:], out_type=str) == [cand.piece]
    appended = tuple(c.piece for c in best[:2])
    for line in UP + DOWN:  # words that do not begin with an appended piece keep their segmentation
        for word in line.split():
            if not ("\u2581" + word).startswith(appended):
                assert ext.sp.encode(word, out_type=str) == old.sp.encode(word, out_type=str), word
    assert info["fertility"]["after"] < info["fertility"]["before"]
    assert info["pieces_saved"] == sum(map(len, old.sp.encode(DOWN))) - sum(map(len, ext.sp.encode(DOWN)))
    assert ext.encode(["the kings"])[0][-1] == 0  # Marian ids with </s>, through the extended tokenizer


def test_asking_for_more_than_there_are_appends_them_all(vocabs):
    old, new = vocabs
    ext, info = extend_vocab(old, new.sp, DOWN, 10_000)
    assert info["appended"] == len(candidates(old.sp, new.sp, DOWN)) < 10_000


def test_extension_errors_are_clear(vocabs):
    old, new = vocabs
    with pytest.raises(InputError, match="text"):
        extend_vocab(old, new.sp, [], 5)
    bpe = spm.SentencePieceProcessor(model_proto=_bpe())
    with pytest.raises(InputError, match="unigram"):
        extend_spm(bpe.serialized_model_proto(), candidates(old.sp, new.sp, DOWN)[:1])


def _bpe() -> bytes:
    import io

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(UP), model_writer=out, model_type="bpe", vocab_size=40,
                                   hard_vocab_limit=False, minloglevel=2)
    return out.getvalue()
