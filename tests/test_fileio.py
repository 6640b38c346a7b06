import os

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


def kill_on_rename(monkeypatch, into: str, nth: int) -> None:
    """Die (KeyboardInterrupt, as at a kill) at the `nth` rename of a directory into a path named `into`: in an
    `atomic_dir` that replaces an existing `into`, after the old one was moved aside and before the new one is in."""
    import os

    calls, real = [], os.replace

    def replace(src, dst):
        if os.path.basename(dst) == into:
            calls.append(dst)
            if len(calls) == nth:
                monkeypatch.setattr(os, "replace", real)
                raise KeyboardInterrupt(f"killed before {dst} was moved in")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def test_a_kill_between_the_renames_leaves_the_old_copy_for_recover_dir(tmp_path, monkeypatch):
    from vocabridge.fileio import recover_dir

    target = tmp_path / "last"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("old")
    kill_on_rename(monkeypatch, "last", 1)
    with pytest.raises(KeyboardInterrupt), atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("new")
    assert not target.exists() and [p.name for p in tmp_path.iterdir()] == [f".last.old-{os.getpid()}"]
    assert recover_dir(target) and (target / "a.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last"]
    assert recover_dir(target) and not recover_dir(tmp_path / "never")  # nothing to put back: nothing done
