import pytest

from tests.conftest import write_mo
from vocabridge.corpora.mo import read_mo
from vocabridge.errors import InputError


def test_reads_plain_plural_and_context_entries():
    data = write_mo([
        ("Open", "Öffnen"),
        ("menu\x04File", "Datei"),
        ("%d file\x00%d files", "%d Datei\x00%d Dateien"),
        ("Untranslated", ""),
    ])
    pairs = read_mo(data)
    assert sorted(pairs) == sorted([("Open", "Öffnen"), ("File", "Datei"), ("%d file", "%d Datei"),
                                    ("%d files", "%d Dateien")])


def test_decodes_with_the_header_charset():
    assert read_mo(write_mo([("Size", "Größe")], charset="ISO-8859-1")) == [("Size", "Größe")]


def test_rejects_garbage():
    with pytest.raises(InputError, match="not a gettext .mo file"):
        read_mo(b"\x00" * 40, "x.mo")
