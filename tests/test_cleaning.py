from vocabridge.config import Cleaning
from vocabridge.corpora.cleaning import PairFilter, clean_segment, has_placeholder, strip_accelerator, strip_context


def test_accelerators_are_removed_once_and_only_before_a_letter():
    assert strip_accelerator("_File") == "File"
    assert strip_accelerator("Ö_ffnen") == "Öffnen"
    assert strip_accelerator("&Save as") == "Save as"
    assert strip_accelerator("~Bearbeiten") == "Bearbeiten"
    assert strip_accelerator("Tom &amp; Jerry") == "Tom &amp; Jerry"  # an entity, not a marker
    assert strip_accelerator("file_name_here") == "file_name_here"  # two underscores: an identifier
    assert strip_accelerator("a & b") == "a & b"


def test_clean_segment_normalises_markup_entities_and_whitespace():
    assert clean_segment("<b>Bold</b>\n  text&nbsp;here") == "Bold text here"
    assert clean_segment("Cafe\u0301") == "Café"  # NFC
    assert clean_segment("a < b and c > d") == "a < b and c > d"  # not markup
    assert clean_segment("_Open file", accelerators=True) == "Open file"


def test_context_prefix_is_stripped():
    assert strip_context("Menu|File") == "File"
    assert strip_context("@title:window|Settings") == "Settings"
    assert strip_context("a | b") == "a | b"


def test_placeholders():
    for text in ("%s files", "%d", "%(count)s", "%1 of %2", "{0} items", "${name}", "%-5.2f", "%1$s"):
        assert has_placeholder(text), text
    for text in ("100% sure", "a {b c}", "plain text"):
        assert not has_placeholder(text), text


def test_pair_filter_counts_each_reason():
    cfg = Cleaning(placeholders="drop", min_words=1, max_words=5, max_ratio=2.0, max_chars=100)
    filt = PairFilter(cfg)
    pairs = [
        ("Datei öffnen", "Open file"),  # kept
        ("Datei öffnen", "Open file"),  # duplicate
        ("", "Empty"),  # empty
        ("%s Dateien", "%s files"),  # placeholder
        ("eins zwei drei vier fünf sechs", "one two three four five six"),  # too_long
        ("Ja", "Yes, absolutely, certainly"),  # ratio
        ("Open the file", "Open the file"),  # untranslated
        ("Name", "Name"),  # kept: one identical word is a real translation
    ]
    kept = list(filt(pairs))
    assert kept == [("Datei öffnen", "Open file"), ("Name", "Name")]
    assert dict(filt.dropped) == {"duplicate": 1, "empty": 1, "placeholder": 1, "too_long": 1, "ratio": 1,
                                  "untranslated": 1}
    keep_cfg = Cleaning(placeholders="keep")
    assert list(PairFilter(keep_cfg)([("%s Dateien", "%s files")])) == [("%s Dateien", "%s files")]
