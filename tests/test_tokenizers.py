import pytest

from vocabridge.config import SpmModel
from vocabridge.errors import InputError
from vocabridge.tokenizers import load_spm, mismatch, train_spm

SMALL = SpmModel(vocab_size=60, hard_vocab_limit=False)
LATIN = [f"the cat sat on mat number {i} and the dog ran" for i in range(200)]
GREEK = [f"ο γάτος κάθεται στο χαλί αριθμός {i} και ο σκύλος τρέχει" for i in range(200)]


def model(tmp_path, lines, name):
    path = tmp_path / f"{name}.model"
    path.write_bytes(train_spm(lines, SMALL, seed=1, threads=1, name=name))
    return load_spm(path)


def test_training_is_deterministic():
    assert train_spm(LATIN, SMALL, 1, 1, "a") == train_spm(LATIN, SMALL, 1, 1, "a")


def test_same_vocabulary_has_no_mismatch(tmp_path):
    sp = model(tmp_path, LATIN, "latin")
    report = mismatch(sp, sp, LATIN[:20])
    assert report["unseen_types"] == 0 and report["unseen_token_rate"] == 0.0
    words = sum(len(line.split()) for line in LATIN[:20])
    assert report["fertility"]["old"] == report["fertility"]["new"] == round(sum(map(len, sp.encode(LATIN[:20])))
                                                                             / words, 4)
    assert report["test_words"] == sum(len(line.split()) for line in LATIN[:20])


def test_disjoint_scripts_share_nothing_but_digits(tmp_path):
    old, new = model(tmp_path, LATIN, "latin"), model(tmp_path, GREEK, "greek")
    report = mismatch(old, new, GREEK[:20])
    greek_only = [p for p in (new.id_to_piece(i) for i in range(new.get_piece_size()))
                  if any("\u0370" <= ch <= "\u03ff" for ch in p)]
    assert report["unseen_types"] >= len(greek_only) > 0
    assert report["old_unk_rate"] > 0.3  # Greek letters are unknown to the Latin model (runs merge into one)


def test_in_domain_vocabulary_segments_its_domain_into_fewer_pieces(tmp_path):
    domain = [f"photosynthesis chlorophyll mitochondria ribosome {i} enzyme" for i in range(200)]
    old, new = model(tmp_path, LATIN, "latin"), model(tmp_path, domain, "bio")
    report = mismatch(old, new, domain[:20])
    assert report["fertility"]["new"] < report["fertility"]["old"]
    vocabulary = [{p.id_to_piece(i) for i in range(p.get_piece_size()) if not (p.is_control(i) or p.is_unknown(i))}
                  for p in (old, new)]  # ordinary pieces: <unk>, <s>, </s> are no rows to invent
    assert report["unseen_type_share"] == round(len(vocabulary[1] - vocabulary[0]) / len(vocabulary[1]), 4) > 0


def test_empty_text_is_an_error():
    with pytest.raises(InputError, match="no text"):
        train_spm([], SMALL, 1, 1, "spm.downstream.de")


def test_a_plm_vocabulary_in_the_same_spelling_has_no_mismatch(tmp_path):
    """A unigram PLM tokenizer trained on the same text as the SentencePiece model: its pieces compare as they are,
    and its unknown-piece count is that of the text's unknown characters."""
    from vocabridge.plm.bert import train_plm_tokenizer
    from vocabridge.tokenizers import plm_vocabulary

    sp = model(tmp_path, LATIN, "latin")
    plm = plm_vocabulary(train_plm_tokenizer(LATIN, 80, tmp_path / "plm"))
    assert not any(p.startswith("[") for p in plm.pieces)  # [CLS], [MASK] ... are not pieces
    report = mismatch(plm, sp, LATIN[:20])
    assert report["unseen_token_rate"] < 0.05 and report["old_unk_rate"] == 0.0
    assert report["fertility"]["old"] <= report["fertility"]["new"] * 1.5
    assert mismatch(plm, sp, ["the cat ☃"])["old_unk_rate"] > 0


def test_wordpiece_pieces_are_spelled_as_sentencepiece_pieces(tmp_path):
    """WordPiece `cat` starts a word (SentencePiece's `▁cat`); `##s` continues one (`s`)."""
    from transformers import BertTokenizerFast

    from vocabridge.tokenizers import plm_vocabulary

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat",
                                                    "##s", "sat"]) + "\n", encoding="utf-8")
    wordpiece = plm_vocabulary(BertTokenizerFast(str(tmp_path / "vocab.txt"), do_lower_case=False))
    assert wordpiece.pieces == {"▁the", "▁cat", "s", "▁sat"} and wordpiece.size == 9
    assert wordpiece.segment(["the cats sat", "dog"]) == [["▁the", "▁cat", "s", "▁sat"], ["[UNK]"]]
    assert wordpiece.unknown(["the cats sat", "dog"]) == 1
