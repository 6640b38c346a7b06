import pytest

from vocabridge.fileio import atomic_dir, write_json


def test_atomic_dir_replaces_only_on_success(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("one")
    assert (target / "a.txt").read_text() == "one"
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            (tmp / "a.txt").write_text("half")
            raise RuntimeError("killed")
    assert (target / "a.txt").read_text() == "one"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary left behind
    with atomic_dir(target) as tmp:
        (tmp / "b.txt").write_text("two")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]


def test_write_json_is_deterministic(tmp_path):
    write_json(tmp_path / "a.json", {"b": 1, "a": {"d": 2, "c": "ü"}})
    write_json(tmp_path / "b.json", {"a": {"c": "ü", "d": 2}, "b": 1})
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
